//! `objwal verify URL`: everything that can be checked without writing.
//!
//! 1. Recovery, as `Wal::open` does it ([`crate::health`]): it names every
//!    structurally damaged object and every object above the tip whose
//!    entries will not replay (its chain is broken by a missing object).
//! 2. Every other object key is read whole and decoded with
//!    [`objwal::format::decode`] (every CRC, every frame): a segment that
//!    fails here is one that reads would skip as a hole.
//!
//! Keys under `objects/` that are not object keys are listed as foreign and
//! ignored, as recovery ignores them. Prints one line per finding and a
//! summary; exits 1 on any damage, any unreplayed object or a recovery
//! failure. Never writes.

use std::collections::HashSet;

use futures::StreamExt;
use objwal::format;
use objwal::storage::keys::Prefix;
use objwal::{ObjectMeta, ObjectStorage, Storage};

use crate::health::Health;
use crate::{store, CliError, CliResult};

/// Arguments of `objwal verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The store URL (file:///path, s3://bucket/root?..., ...).
    url: String,
}

/// Objects read and decoded at once.
const CONCURRENCY: usize = 4;

/// What decoding one object found.
enum Outcome {
    Ok {
        entries: u64,
        segments: usize,
    },
    Damaged(String),
    Foreign,
    /// Structurally damaged: recovery named it already.
    Named,
}

/// Runs `verify`.
pub async fn run(prefix: &str, args: VerifyArgs) -> CliResult {
    let prefix = store::prefix(prefix)?;
    let storage = store::open(&args.url, true)?;
    let listed = store::objects(&storage, &prefix).await?;
    let health = Health::of(&storage, &prefix).await;
    let named: HashSet<String> = health.damaged().iter().map(|d| d.key.clone()).collect();
    let total = listed.len();
    let bytes: u64 = listed.iter().map(|o| o.size).sum();
    let mut outcomes = futures::stream::iter(listed)
        .map(|meta| check(&storage, &prefix, meta, &named))
        .buffered(CONCURRENCY);
    let (mut damaged, mut foreign, mut entries, mut segments) = (0usize, 0usize, 0u64, 0usize);
    while let Some((key, outcome)) = outcomes.next().await {
        match outcome {
            Outcome::Ok {
                entries: e,
                segments: s,
            } => {
                entries += e;
                segments += s;
            }
            Outcome::Damaged(error) => {
                damaged += 1;
                out!("DAMAGED {key}: {error}");
            }
            Outcome::Named => damaged += 1,
            Outcome::Foreign => {
                foreign += 1;
                out!("FOREIGN {key}: not an object key of this prefix; recovery ignores it");
            }
        }
    }
    for line in health.object_lines() {
        out!("{line}");
    }
    out!(
        "verified {total} objects ({bytes} bytes) under {prefix}: {} intact ({segments} segments, {entries} entries), {damaged} damaged, {foreign} foreign",
        total - damaged - foreign
    );
    out!("{}", health.line());
    if damaged > 0 || !health.is_ok() {
        return Err(CliError::Failed(format!(
            "{damaged} of {total} objects are damaged; {}",
            health.line()
        )));
    }
    Ok(())
}

async fn check(
    storage: &Storage,
    prefix: &Prefix,
    meta: ObjectMeta,
    named: &HashSet<String>,
) -> (String, Outcome) {
    let Some(sequence) = prefix.parse_object_key(&meta.key) else {
        return (meta.key, Outcome::Foreign);
    };
    if named.contains(&meta.key) {
        return (meta.key, Outcome::Named);
    }
    let bytes = match storage.read(&meta.key, 0..meta.size).await {
        Ok(bytes) => bytes,
        Err(e) => return (meta.key, Outcome::Damaged(format!("cannot read it: {e}"))),
    };
    let outcome = match format::decode(&bytes) {
        Err(e) => Outcome::Damaged(e.to_string()),
        Ok(object) if object.header.sequence != sequence => Outcome::Damaged(format!(
            "it holds sequence {} under the key of sequence {sequence}",
            object.header.sequence
        )),
        Ok(object) => Outcome::Ok {
            entries: object.segments.iter().map(|s| s.entries.len() as u64).sum(),
            segments: object.segments.len(),
        },
    };
    (meta.key, outcome)
}
