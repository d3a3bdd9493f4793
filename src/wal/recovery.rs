//! Recovery: rebuild the catalog from the objects' tails, then claim the
//! prefix with a start object.
//!
//! Recovery lists the prefix and reads ONE window at the end of each object
//! (a second read only when the footer starts before the window, or when a
//! release segment does), never a header and never an ordinary segment.
//! Chain selection ([`crate::catalog::chain`]) picks the history; the tip's
//! chain is indexed; everything else is an orphan whose sequence and epoch
//! still count. Structural damage of any object fails recovery, naming the
//! key: nothing about such an object can be trusted.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use crate::catalog::chain::{self, ObjectSummary, Selection};
use crate::catalog::{Catalog, IndexedObject};
use crate::error::Error;
use crate::format::{self, Header, Link, Object, ReleaseRecord, Tail, TailDecode};
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::create::{create_object, CreateOutcome};

/// Bytes read at the end of each object: the trailer, a footer of about a
/// thousand segments, and usually the release segment before it.
pub(crate) const TAIL_WINDOW: u64 = 64 * 1024;

/// What recovery learned about one object.
#[derive(Debug, Clone)]
pub(crate) struct RecoveredObject {
    pub(crate) size: u64,
    pub(crate) tail: Tail,
    pub(crate) releases: Vec<ReleaseRecord>,
}

impl RecoveredObject {
    pub(crate) fn summary(&self) -> ObjectSummary {
        let h = self.tail.header();
        ObjectSummary {
            sequence: h.sequence,
            epoch: h.epoch,
            link: h.link,
            reclaim_boundary: h.reclaim_boundary,
        }
    }

    pub(crate) fn indexed(&self) -> IndexedObject {
        let h = self.tail.header();
        IndexedObject {
            sequence: h.sequence,
            epoch: h.epoch,
            link: h.link,
            reclaim_boundary: h.reclaim_boundary,
            size: self.size,
            segments: self
                .tail
                .segments
                .iter()
                .filter(|s| s.region != format::RELEASE_REGION)
                .copied()
                .collect(),
            releases: self.releases.clone(),
        }
    }
}

/// The recovered history of a prefix.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// The tip's chain, indexed.
    pub(crate) catalog: Catalog,
    /// The chain selection.
    pub(crate) selection: Selection,
}

/// Lists `prefix` and rebuilds its catalog. Writes nothing.
pub(crate) async fn recover(
    storage: &Storage,
    prefix: &Prefix,
    concurrency: usize,
) -> Result<Recovered, Error> {
    let listed = storage.list(&prefix.objects_prefix()).await?;
    let mut keyed = Vec::with_capacity(listed.len());
    for meta in listed {
        match prefix.parse_object_key(&meta.key) {
            Some(sequence) => keyed.push((sequence, meta)),
            None => tracing::warn!(key = %meta.key, "ignoring a key that is not an object key"),
        }
    }
    let objects: BTreeMap<u64, RecoveredObject> = futures::stream::iter(keyed)
        .map(|(sequence, meta)| async move {
            let object = read_tail(storage, &meta.key, meta.size).await?;
            let found = object.tail.header().sequence;
            if found != sequence {
                return Err(Error::recovery(format!(
                    "object {} holds sequence {found}, not the sequence of its key",
                    meta.key
                )));
            }
            Ok::<_, Error>((sequence, object))
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;

    let summaries: BTreeMap<u64, ObjectSummary> =
        objects.iter().map(|(s, o)| (*s, o.summary())).collect();
    let selection = chain::select(&summaries).map_err(|e| Error::recovery(e.to_string()))?;
    let mut catalog = Catalog::new();
    for sequence in &selection.chain {
        if let Some(object) = objects.get(sequence) {
            catalog
                .insert(object.indexed())
                .map_err(|e| Error::recovery(e.to_string()))?;
        }
    }
    Ok(Recovered { catalog, selection })
}

/// Reads the tail window of one object (and the footer or the release
/// segment when they start before it).
pub(crate) async fn read_tail(
    storage: &Storage,
    key: &str,
    size: u64,
) -> Result<RecoveredObject, Error> {
    let window_len = size.min(TAIL_WINDOW);
    let window_start = size - window_len;
    let window = storage.read(key, window_start..size).await?;
    let corrupted = |e| Error::corrupted(key, e);
    let tail = match format::decode_tail(&window, size).map_err(corrupted)? {
        TailDecode::Complete(tail) => tail,
        TailDecode::NeedFooter { trailer, footer } => {
            let bytes = storage.read(key, footer).await?;
            format::decode_footer(trailer, &bytes).map_err(corrupted)?
        }
    };
    let releases = match tail.release_segment() {
        None => Vec::new(),
        Some(index) => {
            let sequence = tail.header().sequence;
            let bytes = if index.offset >= window_start {
                let start = usize::try_from(index.offset - window_start).unwrap_or(usize::MAX);
                let end = start.saturating_add(usize::try_from(index.len).unwrap_or(usize::MAX));
                window.get(start..end).map(|_| window.slice(start..end))
            } else {
                None
            };
            let bytes: Bytes = match bytes {
                Some(b) => b,
                None => {
                    storage
                        .read(key, index.offset..index.offset + index.len)
                        .await?
                }
            };
            format::decode_releases(&bytes, index, sequence).map_err(corrupted)?
        }
    };
    Ok(RecoveredObject {
        size,
        tail,
        releases,
    })
}

/// Claims the prefix for `epoch`: creates the start object (no segments,
/// linked to the tip) at the first free sequence. An earlier-epoch object at
/// that sequence moves it on; a same-or-later epoch means another writer.
/// Returns the start object as indexed.
pub(crate) async fn write_start_object(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    first_sequence: u64,
    link: Option<Link>,
    reclaim_boundary: impl Fn(u64) -> u64,
) -> Result<IndexedObject, Error> {
    let mut sequence = first_sequence;
    loop {
        if sequence > format::MAX_SEQUENCE {
            return Err(Error::recovery(
                "no sequence is left for a start object: the prefix is exhausted",
            ));
        }
        let header = Header {
            sequence,
            epoch,
            link,
            reclaim_boundary: reclaim_boundary(sequence),
        };
        let object = Object {
            header,
            segments: Vec::new(),
            releases: Vec::new(),
        };
        let bytes = format::encode(&object).map_err(|e| Error::corrupted("start object", e))?;
        let key = prefix.object_key(sequence);
        match create_object(storage, &key, bytes.clone(), epoch).await {
            CreateOutcome::Durable => {
                return Ok(IndexedObject {
                    sequence,
                    epoch,
                    link,
                    reclaim_boundary: header.reclaim_boundary,
                    size: bytes.len() as u64,
                    segments: Vec::new(),
                    releases: Vec::new(),
                });
            }
            CreateOutcome::Stale { epoch: found } => {
                tracing::info!(
                    key,
                    found,
                    "an earlier epoch's object holds the start sequence; moving on"
                );
                sequence += 1;
            }
            CreateOutcome::Conflict { epoch: found } => {
                return Err(Error::recovery(format!(
                    "another writer holds {key} (epoch {}), not below ours ({epoch}): \
                     another process opened this prefix",
                    found.map_or_else(|| "unknown".to_owned(), |e| e.to_string())
                )));
            }
            CreateOutcome::Failed(e) => return Err(Error::Storage { source: e }),
        }
    }
}
