//! `objwal inspect URL`: the objects of a prefix and a per-region summary.
//!
//! Reads only what recovery reads: one tail window per object (the footer
//! separately when it starts before the window) and, for objects with
//! release records, the release segment. The library's recovery
//! ([`crate::inspect::health`]) tells which objects are on the tip's chain, which are
//! orphans, which are damaged and which lie above the tip and will not
//! replay (at a second look `--recheck-after` later: on a live prefix the
//! gap below them is usually an object still uploading); the health line
//! says so, naming them. Never writes.
//!
//! Exits 1 when the health line is not OK: a damaged object under
//! `objects/`, an object above the tip whose entries will not replay, or a
//! recovery that fails. Segments are not read: `objwal verify` checks them.

pub(crate) mod dump;
pub(crate) mod health;
pub(crate) mod looks;
pub(crate) mod repair;
pub(crate) mod verify;

use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;
use objwal::format::{self, SegmentIndex, Tail, TailDecode};
use objwal::id::Dotted;
use objwal::storage::keys::Prefix;
use objwal::{ObjectMeta, ObjectStorage, Storage};
use serde::Serialize;

use crate::inspect::health::Health;
use crate::inspect::looks::{settle, Failure, Recheck, Verdict};
use crate::{store, CliError, CliResult};

/// Arguments of `objwal inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The store URL (file:///path, s3://bucket/root?..., ...).
    url: String,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    recheck: Recheck,
}

/// The bytes read from the end of each object at once.
const WINDOW: u64 = 64 * 1024;
/// Objects whose tails are read at once.
const CONCURRENCY: usize = 8;

#[derive(Debug, Serialize)]
struct Inspection {
    prefix: String,
    objects: Vec<ObjectInfo>,
    object_count: usize,
    bytes: u64,
    chain: usize,
    orphans: usize,
    damaged: usize,
    tip: Option<u64>,
    reclaim_boundary: Option<u64>,
    regions: Vec<RegionInfo>,
    /// Why the chain could not be recovered, when it could not.
    recovery_error: Option<String>,
    /// The health line: `health: OK`, or what is wrong.
    health: String,
    /// Whether the health line is OK (else the command exits 1).
    healthy: bool,
    /// Objects above the tip whose entries will not replay.
    unreplayed: Vec<UnreplayedInfo>,
    /// Objects `objwal repair` moved under `quarantine/`.
    quarantined: Vec<QuarantinedInfo>,
    /// Readers' holds (rfcs/0011): per name, its newest generation. Whether
    /// one expired only its writer can tell (it judges by its own clock).
    holds: Vec<HoldView>,
}

#[derive(Debug, Serialize)]
struct HoldView {
    name: String,
    generation: u64,
    /// The lowest object sequence it holds from collection.
    position: u64,
    ttl_ms: u64,
    /// Objects under `objects/` at or above its position.
    objects_at_or_above: usize,
}

#[derive(Debug, Serialize)]
struct UnreplayedInfo {
    key: String,
    sequence: u64,
    entries: u64,
    broken_at: u64,
    holds: String,
}

#[derive(Debug, Serialize)]
struct QuarantinedInfo {
    key: String,
    sequence: u64,
    held: String,
}

#[derive(Debug, Serialize)]
struct ObjectInfo {
    key: String,
    sequence: Option<u64>,
    size: u64,
    /// chain, orphan, collectable (below the tip's reclaim boundary),
    /// unknown (recovery failed), damaged, unreadable (its reads kept
    /// failing or never agreed), unreplayed (above the tip, off its chain,
    /// holding entries, at two looks), pending (the same, but only at the
    /// second look: behind an object still in flight), foreign (not an
    /// object key; ignored).
    state: &'static str,
    epoch: Option<u64>,
    link: Option<LinkInfo>,
    reclaim_boundary: Option<u64>,
    segments: Vec<SegmentInfo>,
    releases: Vec<ReleaseInfo>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct LinkInfo {
    sequence: u64,
    epoch: u64,
}

#[derive(Debug, Serialize)]
struct SegmentInfo {
    region: u64,
    first_id: u64,
    last_id: u64,
    entries: u32,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct ReleaseInfo {
    region: u64,
    released_through: u64,
}

#[derive(Debug, Default, Serialize)]
struct RegionInfo {
    region: u64,
    segments: usize,
    entries: u64,
    bytes: u64,
    first_id: u64,
    last_id: u64,
    released_through: Option<u64>,
}

/// Runs `inspect`.
pub async fn run(prefix: &str, args: InspectArgs) -> CliResult {
    let prefix = store::prefix(prefix)?;
    let storage = store::open(&args.url, true)?;
    let inspection = inspect(&storage, &prefix, &args.url, &args.recheck).await?;
    if args.json {
        let text = serde_json::to_string_pretty(&inspection)
            .map_err(|e| CliError::Failed(format!("cannot encode JSON: {e}")))?;
        out!("{text}");
    } else {
        print_text(&inspection);
    }
    if !inspection.healthy {
        return Err(CliError::Failed(inspection.health));
    }
    Ok(())
}

async fn inspect(
    storage: &Storage,
    prefix: &Prefix,
    url: &str,
    recheck: &Recheck,
) -> Result<Inspection, CliError> {
    let listed = store::objects(storage, prefix, url).await?;
    let mut objects: Vec<ObjectInfo> = futures::stream::iter(listed)
        .map(|meta| describe(storage, prefix, meta))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let health = Health::of(storage, prefix, recheck).await;
    let (chain, orphans) = match &health.reader {
        Some(reader) => (
            reader.objects().iter().map(|o| o.sequence).collect(),
            reader.orphans().to_vec(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let recovery_error = health.recovery_error.clone();
    // Recovery's verdict wins: it also knows implausible epochs.
    for d in health.damaged() {
        if let Some(o) = objects.iter_mut().find(|o| o.key == d.key) {
            o.state = "damaged";
            o.error = Some(d.reason.clone());
        }
    }
    let unreplayed: HashSet<u64> = health.unreplayed().iter().map(|u| u.sequence).collect();
    let pending: HashSet<u64> = health.pending().iter().map(|u| u.sequence).collect();
    let tip = chain.iter().max().copied();
    let tip_object = objects.iter().find(|o| o.sequence == tip && tip.is_some());
    let reclaim_boundary = tip_object.and_then(|o| o.reclaim_boundary);
    let chain_set: HashSet<u64> = chain.iter().copied().collect();
    let orphan_set: HashSet<u64> = orphans.iter().copied().collect();
    for object in &mut objects {
        if object.state != "ok" {
            continue;
        }
        // Recovery does not index the chain below the tip's boundary: those
        // objects are collectable, neither history nor orphans.
        object.state = match object.sequence {
            Some(s) if chain_set.contains(&s) => "chain",
            Some(s) if unreplayed.contains(&s) => "unreplayed",
            Some(s) if pending.contains(&s) => "pending",
            Some(s) if orphan_set.contains(&s) => "orphan",
            Some(s) if recovery_error.is_none() && reclaim_boundary.is_some_and(|b| s < b) => {
                "collectable"
            }
            _ => "unknown",
        };
    }
    // The history is the chain; when recovery failed, every decodable object.
    let history = objects.iter().filter(|o| match recovery_error {
        None => o.state == "chain",
        Some(_) => o.state == "unknown",
    });
    let regions = summarize(history);
    let holds = holds(storage, prefix, &objects).await?;
    Ok(Inspection {
        holds,
        prefix: prefix.as_str().to_owned(),
        object_count: objects.len(),
        bytes: objects.iter().map(|o| o.size).sum(),
        chain: chain.len(),
        orphans: orphans.len(),
        damaged: objects.iter().filter(|o| o.state == "damaged").count(),
        tip,
        reclaim_boundary,
        regions,
        recovery_error,
        objects,
        health: health.line(),
        healthy: health.is_ok(),
        unreplayed: health
            .unreplayed()
            .iter()
            .map(|u| UnreplayedInfo {
                key: u.key.clone(),
                sequence: u.sequence,
                entries: u.entries(),
                broken_at: u.broken_at,
                holds: u.held(),
            })
            .collect(),
        quarantined: health
            .quarantined()
            .iter()
            .map(|d| QuarantinedInfo {
                key: d.key.clone(),
                sequence: d.sequence,
                held: d.held(),
            })
            .collect(),
    })
}

/// The newest generation of every hold under the prefix: one listing.
async fn holds(
    storage: &Storage,
    prefix: &Prefix,
    objects: &[ObjectInfo],
) -> Result<Vec<HoldView>, CliError> {
    let mut newest: BTreeMap<String, objwal::storage::keys::HoldKey> = BTreeMap::new();
    for meta in storage.list(&prefix.holds_prefix()).await? {
        let Some(key) = prefix.parse_hold_key(&meta.key) else {
            continue;
        };
        if newest
            .get(&key.name)
            .is_none_or(|held| held.generation < key.generation)
        {
            newest.insert(key.name.clone(), key);
        }
    }
    Ok(newest
        .into_values()
        .map(|key| HoldView {
            objects_at_or_above: objects
                .iter()
                .filter(|o| o.sequence.is_some_and(|s| s >= key.position))
                .count(),
            name: key.name,
            generation: key.generation,
            position: key.position,
            ttl_ms: key.ttl_ms,
        })
        .collect())
}

/// One object from its tail (state "ok" until the chain is known). A tail
/// is damaged only when a second look fails the same way
/// ([`crate::inspect::looks`]); one whose reads keep failing is "unreadable".
async fn describe(storage: &Storage, prefix: &Prefix, meta: ObjectMeta) -> ObjectInfo {
    let sequence = prefix.parse_object_key(&meta.key);
    let mut info = ObjectInfo {
        key: meta.key.clone(),
        sequence,
        size: meta.size,
        state: "ok",
        epoch: None,
        link: None,
        reclaim_boundary: None,
        segments: Vec::new(),
        releases: Vec::new(),
        error: None,
    };
    let Some(sequence) = sequence else {
        info.state = "foreign";
        return info;
    };
    let (tail, releases) = match settle(|| look(storage, &meta, sequence)).await {
        Verdict::Sound(found) => found,
        Verdict::Damaged(e) => {
            info.state = "damaged";
            info.error = Some(e);
            return info;
        }
        Verdict::Unsettled(e) => {
            info.state = "unreadable";
            info.error = Some(e);
            return info;
        }
    };
    let header = tail.header();
    info.epoch = Some(header.epoch);
    info.link = header.link.map(|l| LinkInfo {
        sequence: l.sequence,
        epoch: l.epoch,
    });
    info.reclaim_boundary = Some(header.reclaim_boundary);
    info.segments = tail.region_segments().map(segment_info).collect();
    info.releases = releases;
    info
}

/// One look at an object: its tail, naming its key's sequence, and its
/// release records.
async fn look(
    storage: &Storage,
    meta: &ObjectMeta,
    sequence: u64,
) -> Result<(Tail, Vec<ReleaseInfo>), Failure> {
    let tail = read_tail(storage, meta).await?;
    let named = tail.header().sequence;
    if named != sequence {
        return Err(Failure::Decode(format!("its tail names sequence {named}")));
    }
    let releases = match tail.release_segment() {
        Some(index) => read_releases(storage, &meta.key, index, sequence).await?,
        None => Vec::new(),
    };
    Ok((tail, releases))
}

fn segment_info(s: &SegmentIndex) -> SegmentInfo {
    SegmentInfo {
        region: s.region,
        first_id: s.first_id,
        last_id: s.last_id,
        entries: s.count,
        bytes: s.len,
    }
}

/// The trailer and footer of an object: one ranged read of the last
/// [`WINDOW`] bytes, and one more for a footer that starts before it.
async fn read_tail(storage: &Storage, meta: &ObjectMeta) -> Result<Tail, Failure> {
    let window_len = meta.size.min(WINDOW);
    let window = storage
        .read(&meta.key, meta.size - window_len..meta.size)
        .await
        .map_err(|e| Failure::Request(format!("cannot read the tail: {e}")))?;
    let decoded =
        format::decode_tail(&window, meta.size).map_err(|e| Failure::Decode(e.to_string()))?;
    match decoded {
        TailDecode::Complete(tail) => Ok(tail),
        TailDecode::NeedFooter { trailer, footer } => {
            let bytes = storage
                .read(&meta.key, footer)
                .await
                .map_err(|e| Failure::Request(format!("cannot read the footer: {e}")))?;
            format::decode_footer(trailer, &bytes).map_err(|e| Failure::Decode(e.to_string()))
        }
    }
}

async fn read_releases(
    storage: &Storage,
    key: &str,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<ReleaseInfo>, Failure> {
    let bytes = storage
        .read(key, index.range())
        .await
        .map_err(|e| Failure::Request(format!("cannot read the release segment: {e}")))?;
    let records = format::decode_releases(&bytes, index, sequence)
        .map_err(|e| Failure::Decode(e.to_string()))?;
    Ok(records
        .into_iter()
        .map(|r| ReleaseInfo {
            region: r.region,
            released_through: r.released_through,
        })
        .collect())
}

fn summarize<'a>(objects: impl Iterator<Item = &'a ObjectInfo>) -> Vec<RegionInfo> {
    let mut regions: BTreeMap<u64, RegionInfo> = BTreeMap::new();
    for object in objects {
        for s in &object.segments {
            let r = regions.entry(s.region).or_insert_with(|| RegionInfo {
                region: s.region,
                first_id: s.first_id,
                ..RegionInfo::default()
            });
            r.segments += 1;
            r.entries += u64::from(s.entries);
            r.bytes += s.bytes;
            r.first_id = r.first_id.min(s.first_id);
            r.last_id = r.last_id.max(s.last_id);
        }
        for release in &object.releases {
            let r = regions.entry(release.region).or_insert_with(|| RegionInfo {
                region: release.region,
                ..RegionInfo::default()
            });
            r.released_through = r.released_through.max(Some(release.released_through));
        }
    }
    regions.into_values().collect()
}

fn print_text(i: &Inspection) {
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    out!(
        "prefix {}: {} objects ({} bytes): {} on the chain, {} orphans, {} collectable, {} damaged; tip {}; reclaim boundary {}",
        i.prefix,
        i.object_count,
        i.bytes,
        i.chain,
        i.orphans,
        i.objects.iter().filter(|o| o.state == "collectable").count(),
        i.damaged,
        opt(i.tip),
        opt(i.reclaim_boundary)
    );
    out!("{}", i.health);
    if let Some(e) = &i.recovery_error {
        out!("recovery failed: {e}");
    }
    for h in &i.holds {
        out!(
            "hold {:?}: from object {} ({} objects at or above), ttl {} ms, generation {}",
            h.name,
            h.position,
            h.objects_at_or_above,
            h.ttl_ms,
            h.generation
        );
    }
    out!(
        "{:>10} {:>6} {:>14} {:>8} {:>10} {:>11}  segments (region: entries, first..last id as sequence.position)",
        "sequence", "epoch", "link", "boundary", "bytes", "state"
    );
    for o in &i.objects {
        let link = o.link.as_ref().map_or_else(
            || "-".to_owned(),
            |l| format!("{}@e{}", l.sequence, l.epoch),
        );
        let mut segments: Vec<String> = o
            .segments
            .iter()
            .map(|s| {
                format!(
                    "r{}: {} {}..{}",
                    s.region,
                    s.entries,
                    Dotted(s.first_id),
                    Dotted(s.last_id)
                )
            })
            .collect();
        segments.extend(o.releases.iter().map(|r| {
            format!(
                "release r{} through {}",
                r.region,
                Dotted(r.released_through)
            )
        }));
        if let Some(e) = &o.error {
            segments.push(format!("ERROR {e}"));
        }
        let what = if segments.is_empty() {
            "(no segments)".to_owned()
        } else {
            segments.join(", ")
        };
        let sequence = o.sequence.map_or_else(|| o.key.clone(), |s| s.to_string());
        out!(
            "{sequence:>10} {:>6} {link:>14} {:>8} {:>10} {:>11}  {what}",
            opt(o.epoch),
            opt(o.reclaim_boundary),
            o.size,
            o.state
        );
    }
    // Ids as the object table prints them: sequence.position.
    let dotted = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| Dotted(v).to_string());
    out!(
        "{:>8} {:>8} {:>8} {:>10} {:>16} {:>16}  released through (ids as sequence.position)",
        "region",
        "segments",
        "entries",
        "bytes",
        "first id",
        "last id"
    );
    for r in &i.regions {
        let ids = |id: u64| {
            if r.segments == 0 {
                "-".to_owned()
            } else {
                Dotted(id).to_string()
            }
        };
        out!(
            "{:>8} {:>8} {:>8} {:>10} {:>16} {:>16}  {}",
            r.region,
            r.segments,
            r.entries,
            r.bytes,
            ids(r.first_id),
            ids(r.last_id),
            dotted(r.released_through)
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use objwal::storage::fault::FaultyStorage;
    use objwal::storage::MemoryStorage;
    use objwal::{Config, Wal};

    /// A log under prefix `t` of one object (one entry of region 1) over
    /// the fault wrapper: the wrapper, its storage, the prefix, the object.
    pub(crate) async fn one_object_store() -> (FaultyStorage, Storage, Prefix, ObjectMeta) {
        let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
        let storage = faulty.storage();
        let wal = Wal::open(storage.clone(), "t", Config::default())
            .await
            .unwrap();
        wal.append(vec![(1, "some entry".into())]).await.unwrap();
        wal.stop().await.unwrap();
        let prefix = Prefix::new("t").unwrap();
        let meta = storage.list("t/objects/").await.unwrap().pop().unwrap();
        (faulty, storage, prefix, meta)
    }

    /// Issue 18, item 4: one tail read corrupted in transit made `inspect`
    /// show a healthy object as damaged. Damaged only when a second look
    /// fails the same way.
    #[tokio::test]
    async fn one_tail_read_corrupted_in_transit_is_not_shown_damaged() {
        let (faulty, storage, prefix, meta) = one_object_store().await;
        let in_footer = meta.size - format::TRAILER_LEN as u64 - 3;

        faulty.corrupt_next_reads_at(&meta.key, 1, in_footer);
        let info = describe(&storage, &prefix, meta.clone()).await;
        assert_eq!((info.state, info.error), ("ok", None));
        assert_eq!(info.segments.len(), 1);
        faulty.corrupt_next_reads_at(&meta.key, 2, in_footer);
        let info = describe(&storage, &prefix, meta).await;
        assert_eq!(info.state, "damaged", "{:?}", info.error);
    }
}
