//! `objwal repair URL [--yes]`: moves damaged objects aside so that the
//! prefix opens again, and says exactly what is missing.
//!
//! It recovers the prefix as [`crate::inspect::health`] does, then prints what it
//! would do: each damaged object under `objects/`, why, what it held, and
//! where it goes (`<prefix>/quarantine/<its file name>`); and each object
//! above the tip that will not replay, which no move can fix (restoring the
//! missing object it names can): only when a second look `--recheck-after`
//! later finds the same gap, so that an object a live writer is still
//! uploading is not taken for a missing one. Without `--yes` that is all (exit 1 while
//! damage remains). With `--yes` it first removes what crashed writers left
//! under the prefix that is not an object (a local directory's temporary
//! files of dead processes, as a writer's open does), then each damaged
//! object is moved: read whole,
//! created under `quarantine/` (if-not-exists; an existing copy must hold
//! the same bytes), the copy read back and compared, and only then the
//! original deleted. Nothing is ever deleted without its copy in place.
//! Afterwards the prefix is opened read-only with the default configuration
//! to prove it opens, and the holes the quarantined objects leave are
//! printed. Recovery treats objects under `quarantine/` as left out by the
//! operator's decision, under every configuration.
//!
//! Exit codes: 0 the prefix is healthy (now); 1 damage remains (a dry run,
//! an unreplayed object, a failed move); 2 bad input.

use bytes::Bytes;
use objwal::storage::keys::Prefix;
use objwal::wal::damage::quarantine_key;
use objwal::{Created, ObjectStorage, Storage, WalReader};

use crate::inspect::health::Health;
use crate::inspect::looks::Recheck;
use crate::{store, CliError, CliResult};

/// Arguments of `objwal repair`.
#[derive(Debug, clap::Args)]
pub struct RepairArgs {
    /// The store URL (file:///path, s3://bucket/root?..., ...).
    url: String,
    /// Move the damaged objects aside (without it: only say what would be
    /// done). Stop every process writing the log first: a move says the
    /// object's writer no longer runs.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    recheck: Recheck,
}

/// Runs `repair`.
pub async fn run(prefix: &str, args: RepairArgs) -> CliResult {
    let prefix = store::prefix(prefix)?;
    let storage = store::open(&args.url, true)?;
    store::objects(&storage, &prefix, &args.url).await?;
    if args.yes {
        // A writer's housekeeping, as `Wal::open` does it: what crashed
        // writers left that is not an object (a dry run touches nothing).
        storage
            .remove_leftovers(&format!("{}/", prefix.as_str()))
            .await?;
    }
    let health = Health::of(&storage, &prefix, &args.recheck).await;
    if let Some(e) = &health.recovery_error {
        return Err(CliError::Failed(format!(
            "recovery fails even with damaged objects left out, so moving them cannot help: {e}"
        )));
    }
    for d in health.damaged().iter().filter(|d| d.absent) {
        out!(
            "cannot repair {}: nothing is there ({}); restore it if a copy exists, or open \
             with on_damaged_object = \"quarantine\" to replay around it",
            d.key,
            d.reason
        );
    }
    let moves: Vec<(String, String)> = health
        .damaged()
        .iter()
        .filter(|d| !d.absent)
        .map(|d| {
            let to = quarantine_key(&prefix, d.sequence);
            out!(
                "quarantine {} -> {to}: {}; held: {}",
                d.key,
                d.reason,
                d.held()
            );
            (d.key.clone(), to)
        })
        .collect();
    for u in health.unreplayed() {
        out!(
            "cannot repair {}: above the tip, its chain breaks at missing sequence {} (restore that object if a copy exists); holds: {}",
            u.key,
            u.broken_at,
            u.held()
        );
    }
    let absent = health.damaged().iter().filter(|d| d.absent).count();
    if moves.is_empty() {
        out!("nothing to move aside; {}", health.line());
        return match health.is_ok() {
            true => Ok(()),
            false => Err(CliError::Failed(health.line())),
        };
    }
    if !args.yes {
        out!(
            "dry run: nothing changed; run again with --yes to move {} object(s) under {}/quarantine/",
            moves.len(),
            prefix.as_str()
        );
        return Err(CliError::Failed(format!(
            "{} damaged object(s) left in place (dry run)",
            moves.len()
        )));
    }
    for (from, to) in &moves {
        move_aside(&storage, from, to).await?;
        out!("moved {from} -> {to}");
    }
    if absent > 0 {
        return Err(CliError::Failed(format!(
            "{absent} missing object(s) cannot be moved aside: restore them, or open with \
             on_damaged_object = \"quarantine\""
        )));
    }
    opens_now(&storage, &prefix).await?;
    if !health.unreplayed().is_empty() {
        return Err(CliError::Failed(format!(
            "{} object(s) above the tip still will not replay",
            health.unreplayed().len()
        )));
    }
    Ok(())
}

/// Copies `from` to `to` (if-not-exists), checks the copy, then deletes
/// `from`. Any doubt keeps `from`: the copy is made only of bytes two reads
/// agree on (one read gone wrong in transit must not become the only copy
/// left), and must read back the same.
async fn move_aside(storage: &Storage, from: &str, to: &str) -> CliResult {
    let bytes = whole(storage, from).await?;
    if whole(storage, from).await? != bytes {
        return Err(CliError::Failed(format!(
            "two reads of {from} disagree; it is left in place (run repair again)"
        )));
    }
    if storage.create(to, bytes.clone()).await? == Created::AlreadyExists {
        tracing::info!(to, "a copy exists already (an earlier repair stopped here)");
    }
    let copy = whole(storage, to).await?;
    if copy != bytes {
        return Err(CliError::Failed(format!(
            "{to} holds other bytes than {from}; {from} is left in place"
        )));
    }
    storage.delete(from).await?;
    Ok(())
}

/// The whole object at `key`.
async fn whole(storage: &Storage, key: &str) -> Result<Bytes, CliError> {
    let size = storage
        .list(key)
        .await?
        .into_iter()
        .find(|m| m.key == key)
        .map(|m| m.size)
        .ok_or_else(|| CliError::Failed(format!("{key} is gone")))?;
    Ok(storage.read(key, 0..size).await?)
}

/// Opens the prefix as a default `Wal::open` would and prints its holes.
async fn opens_now(storage: &Storage, prefix: &Prefix) -> CliResult {
    let reader = WalReader::open(storage.clone(), prefix.as_str(), crate::store::base())
        .await
        .map_err(|e| CliError::Failed(format!("the prefix still does not open: {e}")))?;
    out!(
        "the prefix opens with the default configuration: {} objects on the chain",
        reader.objects().len()
    );
    for d in reader.damaged() {
        out!("holes: {} ({})", d.held(), d.key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::tests::one_object_store;
    use objwal::storage::fault::FaultyStorage;
    use objwal::storage::MemoryStorage;

    fn now() -> Recheck {
        Recheck {
            recheck_after: std::time::Duration::ZERO,
            hold_before_recheck: false,
        }
    }

    /// Issue 18, item 4: a healthy object was moved aside because one
    /// tail read of it was corrupted in transit (recovery, which repair
    /// asks, called it damaged).
    #[tokio::test]
    async fn one_bad_read_leaves_nothing_for_repair_to_move() {
        let (faulty, storage, prefix, meta) = one_object_store().await;
        let in_footer = meta.size - objwal::format::TRAILER_LEN as u64 - 3;
        faulty.corrupt_next_reads_at(&meta.key, 1, in_footer);
        let health = Health::of(&storage, &prefix, &now()).await;
        assert!(health.damaged().is_empty(), "{}", health.line());
        assert!(health.is_ok(), "{}", health.line());
        // The same check a damaged object meets: two reads failing alike.
        faulty.corrupt_next_reads_at(&meta.key, 2, in_footer);
        let health = Health::of(&storage, &prefix, &now()).await;
        assert_eq!(health.damaged().len(), 1, "{}", health.line());
    }

    /// A damaged object is copied aside only from bytes two reads agree
    /// on: a read gone wrong in transit never becomes the only copy.
    #[tokio::test]
    async fn a_read_corrupted_in_transit_never_becomes_the_quarantined_copy() {
        let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
        let storage = faulty.storage();
        storage
            .create(
                "t/objects/x",
                bytes::Bytes::from_static(b"the bytes at rest"),
            )
            .await
            .unwrap();
        faulty.corrupt_next_reads("t/objects/x", 1);
        let moved = move_aside(&storage, "t/objects/x", "t/quarantine/x").await;
        assert!(moved.is_err(), "moved from a read that disagrees");
        assert!(storage.list("t/quarantine/").await.unwrap().is_empty());
        move_aside(&storage, "t/objects/x", "t/quarantine/x")
            .await
            .unwrap();
        let copy = storage.read("t/quarantine/x", 0..17).await.unwrap();
        assert_eq!(&copy[..], b"the bytes at rest");
        assert!(storage.list("t/objects/").await.unwrap().is_empty());
    }
}
