//! `objwal verify URL`: decodes every object of the prefix whole with
//! [`objwal::format::decode`] (every CRC, every frame), prints one line per
//! damaged object (its key and the decoder's error) and a summary; exits 1
//! on any damage. Never writes.

use futures::StreamExt;
use objwal::format;
use objwal::storage::keys::Prefix;
use objwal::{ObjectMeta, ObjectStorage, Storage};

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
    Ok { entries: u64, segments: usize },
    Damaged(String),
}

/// Runs `verify`.
pub async fn run(prefix: &str, args: VerifyArgs) -> CliResult {
    let prefix = store::prefix(prefix)?;
    let storage = store::open(&args.url, true)?;
    let listed = storage.list(&prefix.objects_prefix()).await?;
    let total = listed.len();
    let bytes: u64 = listed.iter().map(|o| o.size).sum();
    let mut outcomes = futures::stream::iter(listed)
        .map(|meta| check(&storage, &prefix, meta))
        .buffered(CONCURRENCY);
    let (mut damaged, mut entries, mut segments) = (0usize, 0u64, 0usize);
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
        }
    }
    out!(
        "verified {total} objects ({bytes} bytes) under {prefix}: {} intact ({segments} segments, {entries} entries), {damaged} damaged",
        total - damaged
    );
    if damaged > 0 {
        return Err(CliError::Failed(format!(
            "{damaged} of {total} objects are damaged"
        )));
    }
    Ok(())
}

async fn check(storage: &Storage, prefix: &Prefix, meta: ObjectMeta) -> (String, Outcome) {
    let Some(sequence) = prefix.parse_object_key(&meta.key) else {
        return (
            meta.key,
            Outcome::Damaged("not an object key of this prefix".into()),
        );
    };
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
