//! Recovery: rebuild the catalog from the objects' tails, then claim the
//! prefix with a start object.
//!
//! Recovery lists the prefix and reads ONE window at the end of each object
//! (a second read only when the footer starts before the window, or when a
//! release segment does, or when the tail fails: damage is believed only
//! when two reads fail alike, R3), never a header and never an ordinary
//! segment.
//! The window is sized from what the tails need ([`TailWindow`]): it starts
//! at 4 KiB and learns from the objects already read, so an open of many
//! large objects reads about their footers, not 64 KiB of each.
//! Chain selection ([`crate::catalog::chain`]) picks the history; the tip's
//! chain is indexed; everything else is an orphan whose sequence and epoch
//! still count. Structural damage of any object fails recovery, naming the
//! key (nothing about such an object can be trusted), unless the
//! configuration quarantines it or `objwal repair` moved it aside
//! ([`super::quarantine`], [`super::damage`]). Intact objects above the tip
//! that will not be replayed are named in a warning each.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use crate::catalog::chain::{ObjectSummary, Selection};
use crate::catalog::{Catalog, IndexedObject};
use crate::config::{Config, DamagePolicy};
use crate::error::Error;
use crate::format::{self, Header, Link, Object, ReleaseRecord, Tail, TailDecode};
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::create::{create_object, CreateOutcome};
use crate::wal::damage::{parse_quarantine_key, quarantine_prefix, Damage};
use crate::wal::fence;
use crate::wal::quarantine::{self, examine, learn, Examined};
use crate::wal::reach::Reach;

/// Bytes read at the end of a damaged object to learn what it still says
/// of itself ([`crate::wal::quarantine::learn`]; rare, so generous).
pub(crate) const TAIL_WINDOW: u64 = 64 * 1024;

/// The smallest tail window: a trailer and a footer of 83 segments. A tail
/// this small never needs a second read, whatever was learned.
pub(crate) const FIRST_TAIL_WINDOW: u64 = 4 * 1024;

/// The window recovery reads at the end of each object, learned from the
/// objects already read: the largest tail needed so far (footer, trailer
/// and the release segment before them) plus a quarter, and never less than
/// [`FIRST_TAIL_WINDOW`]. Objects of one prefix have similar footers (one
/// entry per region of the batch), so after the first few objects one read
/// per object is the rule, and a tail larger than all before costs one
/// more read (and raises the window). Shared by the reads in flight.
#[derive(Debug, Default)]
pub(crate) struct TailWindow {
    /// The largest tail needed so far (0: nothing read yet).
    needed: std::sync::atomic::AtomicU64,
}

impl TailWindow {
    /// The bytes to read at the end of the next object.
    pub(crate) fn len(&self) -> u64 {
        let needed = self.needed.load(std::sync::atomic::Ordering::Relaxed);
        needed.saturating_add(needed / 4).max(FIRST_TAIL_WINDOW)
    }

    /// Learns that an object's tail took its last `needed` bytes.
    pub(crate) fn learn(&self, needed: u64) {
        self.needed
            .fetch_max(needed, std::sync::atomic::Ordering::Relaxed);
    }
}

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
        IndexedObject::from_tail(&self.tail, self.size, self.releases.clone())
    }
}

/// The recovered history of a prefix.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// The tip's chain, indexed.
    pub(crate) catalog: Catalog,
    /// The chain selection.
    pub(crate) selection: Selection,
    /// What recovery left out of replay: damaged objects (quarantined) and
    /// intact objects above the tip off its chain.
    pub(crate) damage: Damage,
}

/// Lists `prefix` and rebuilds its catalog, failing on a damaged object.
/// Writes nothing.
#[cfg(test)]
pub(crate) async fn recover(
    storage: &Storage,
    prefix: &Prefix,
    concurrency: usize,
) -> Result<Recovered, Error> {
    let config = Config {
        recovery_concurrency: concurrency,
        on_damaged_object: DamagePolicy::Fail,
        ..Config::default()
    };
    recover_with(storage, prefix, &config).await
}

/// Lists `prefix` and rebuilds its catalog. Writes nothing.
///
/// `config` gives the tail reads in flight (`recovery_concurrency`) and
/// what a damaged object does (`on_damaged_object`). A structurally
/// damaged object under `objects/` fails recovery under
/// [`DamagePolicy::Fail`]; under [`DamagePolicy::Quarantine`] it is left
/// out of replay ([`super::quarantine`]). Objects `objwal repair` moved
/// under `quarantine/` are left out under either policy: the operator
/// decided. Each damaged object, and each intact object above the tip that
/// will not be replayed, is logged as a warning naming what it holds.
#[tracing::instrument(name = "recover", skip_all, fields(prefix = %prefix))]
pub(crate) async fn recover_with(
    storage: &Storage,
    prefix: &Prefix,
    config: &Config,
) -> Result<Recovered, Error> {
    let (concurrency, policy) = (config.recovery_concurrency, config.on_damaged_object);
    let listed = storage.list(&prefix.objects_prefix()).await?;
    let mut keyed = Vec::with_capacity(listed.len());
    for meta in listed {
        match prefix.parse_object_key(&meta.key) {
            Some(sequence) => keyed.push((sequence, meta)),
            None => tracing::warn!(key = %meta.key, "ignoring a key that is not an object key"),
        }
    }
    let window = TailWindow::default();
    let window = &window;
    let read: Vec<Option<(u64, Examined)>> = futures::stream::iter(keyed)
        .map(|(sequence, meta)| async move {
            match examine(storage, &meta.key, meta.size, sequence, window).await? {
                Some(examined) => Ok::<_, Error>(Some((sequence, examined))),
                // Listed, then gone: collected by a writer (an older process
                // still collecting, or this one before a crash). Only
                // garbage is deleted; chain selection notices if a needed
                // object is missing.
                None => {
                    tracing::info!(key = %meta.key, "an object vanished after the listing: collected");
                    Ok(None)
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let mut intact = BTreeMap::new();
    let mut damaged = BTreeMap::new();
    for (sequence, examined) in read.into_iter().flatten() {
        match examined {
            Examined::Intact(object) => {
                intact.insert(sequence, object);
            }
            Examined::Damaged(d) => {
                damaged.insert(sequence, d);
            }
        }
    }
    if policy == DamagePolicy::Fail {
        if let Some((_, d)) = damaged.pop_first() {
            tracing::error!(key = %d.key, error = %d.error,
                "a damaged object stops the open: set on_damaged_object = \"quarantine\" to open \
                 without it, or move it aside with `objwal repair`");
            return Err(d.error);
        }
    }
    for (sequence, d) in quarantined(storage, prefix, &intact, &damaged).await? {
        damaged.insert(sequence, d);
    }
    let (catalog, selection, damage) =
        quarantine::assemble(&intact, &damaged, |s| prefix.object_key(s))?;
    warn(&damage);
    Ok(Recovered {
        catalog,
        selection,
        damage,
    })
}

/// The objects `objwal repair` moved under `quarantine/` whose sequence is
/// not (again) under `objects/`, as damaged objects.
async fn quarantined(
    storage: &Storage,
    prefix: &Prefix,
    intact: &BTreeMap<u64, RecoveredObject>,
    damaged: &BTreeMap<u64, quarantine::Damaged>,
) -> Result<Vec<(u64, quarantine::Damaged)>, Error> {
    let mut found = Vec::new();
    for meta in storage.list(&quarantine_prefix(prefix)).await? {
        let Some(sequence) = parse_quarantine_key(prefix, &meta.key) else {
            continue;
        };
        if intact.contains_key(&sequence) || damaged.contains_key(&sequence) {
            continue;
        }
        let (header, segments) = match learn(storage, &meta.key, meta.size, sequence).await {
            Err(Error::Storage { source }) if source.is_not_found() => continue,
            other => other?,
        };
        found.push((
            sequence,
            quarantine::Damaged {
                error: Error::recovery(format!(
                    "moved aside by objwal repair (from {})",
                    prefix.object_key(sequence)
                )),
                key: meta.key,
                size: meta.size,
                quarantined: true,
                header,
                segments,
            },
        ));
    }
    Ok(found)
}

/// Logs what recovery leaves out of replay, one warning per object.
fn warn(damage: &Damage) {
    for d in &damage.damaged {
        if d.missing {
            tracing::warn!(key = %d.key, reason = %d.reason, held = %d.held(),
                "a damaged object is left out of replay: its entries are holes");
        } else if d.quarantined {
            tracing::debug!(key = %d.key, "a quarantined object no longer matters to replay");
        } else {
            tracing::warn!(key = %d.key, reason = %d.reason,
                "a damaged object off the chain (an orphan, or garbage below the boundary)");
        }
    }
    for u in &damage.unreplayed {
        tracing::warn!(key = %u.key, held = %u.held(), broken_at = u.broken_at,
            "an object above the tip will not be replayed: its chain breaks at a missing object");
    }
}

/// Reads the tail window of one object (and the footer or the release
/// segment when they start before it), and teaches `window` what this
/// object's tail took.
pub(crate) async fn read_tail(
    storage: &Storage,
    key: &str,
    size: u64,
    window: &TailWindow,
) -> Result<RecoveredObject, Error> {
    read_tail_sized(storage, key, size, size.min(window.len()), window).await
}

/// [`read_tail`] with a window of `window_len` bytes (at most `size`), so
/// that a second look reads the ranges the first read.
pub(crate) async fn read_tail_sized(
    storage: &Storage,
    key: &str,
    size: u64,
    window_len: u64,
    window: &TailWindow,
) -> Result<RecoveredObject, Error> {
    let window_len = window_len.min(size);
    let window_start = size - window_len;
    let bytes = storage.read(key, window_start..size).await?;
    let corrupted = |e| Error::corrupted(key, e);
    let tail = match format::decode_tail(&bytes, size).map_err(corrupted)? {
        TailDecode::Complete(tail) => tail,
        TailDecode::NeedFooter { trailer, footer } => {
            let bytes = storage.read(key, footer).await?;
            format::decode_footer(trailer, &bytes).map_err(corrupted)?
        }
    };
    let release = tail.release_segment().copied();
    let tail_start = release.map_or(tail.trailer.footer_offset, |r| {
        r.offset.min(tail.trailer.footer_offset)
    });
    window.learn(size.saturating_sub(tail_start));
    let releases = match release {
        None => Vec::new(),
        Some(index) => {
            let sequence = tail.header().sequence;
            let within = if index.offset >= window_start {
                let start = usize::try_from(index.offset - window_start).unwrap_or(usize::MAX);
                let end = start.saturating_add(usize::try_from(index.len).unwrap_or(usize::MAX));
                bytes.get(start..end).map(|_| bytes.slice(start..end))
            } else {
                None
            };
            let segment: Bytes = match within {
                Some(b) => b,
                None => storage.read(key, index.range()).await?,
            };
            format::decode_releases(&segment, &index, sequence).map_err(corrupted)?
        }
    };
    Ok(RecoveredObject {
        size,
        tail,
        releases,
    })
}

/// Claims the prefix for `epoch`: creates the start object (no segments,
/// linked to the tip of `catalog`) at the first free sequence from `first`,
/// inserts it into `catalog` and returns its sequence.
///
/// An object of an earlier epoch found at the wanted sequence landed after
/// the listing (an older process's create that was in flight). When it
/// continues the tip's chain it is adopted (indexed as the new tip: it may
/// hold entries the older process acknowledged); otherwise it is an orphan.
/// Either way the start object moves to the next sequence (within `reach`,
/// rule W5: past it, a probe first verifies the late object just met). An
/// object of the same or a later epoch means another opener: recovery fails.
pub(crate) async fn write_start_object(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    first: u64,
    mut reach: Reach,
    catalog: &mut Catalog,
) -> Result<u64, Error> {
    let mut sequence = first;
    loop {
        if sequence > format::MAX_SEQUENCE {
            return Err(Error::recovery(
                "no sequence is left for a start object: the prefix is exhausted",
            ));
        }
        if !reach.allows(sequence) {
            // Late objects filled the sequences up to here; the one below is
            // present, and a probe that misses every newer fence verifies it.
            fence::check_not_fenced(storage, prefix, epoch).await?;
            reach.verify(sequence - 1);
        }
        let link = catalog.tip().map(|t| Link {
            sequence: t.sequence,
            epoch: t.epoch,
        });
        let floor = catalog.tip().map_or(0, |t| t.reclaim_boundary);
        // Only release records count at open: the engine hands its
        // watermarks in again after the open.
        let live = catalog.first_live_sequence(|_| 0);
        let header = Header {
            sequence,
            epoch,
            link,
            reclaim_boundary: live.unwrap_or(sequence).max(floor).min(sequence),
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
                catalog
                    .insert(IndexedObject {
                        sequence,
                        epoch,
                        link,
                        reclaim_boundary: header.reclaim_boundary,
                        size: bytes.len() as u64,
                        segments: Vec::new(),
                        releases: Vec::new(),
                    })
                    .map_err(|e| Error::recovery(e.to_string()))?;
                return Ok(sequence);
            }
            CreateOutcome::Stale { epoch: found } => {
                let late = read_late_object(storage, &key).await?;
                if late.tail.header().link == link && late.tail.header().epoch == found {
                    tracing::info!(
                        key,
                        found,
                        "adopting an older process's object that landed after the listing"
                    );
                    check_plausible(&key, late.tail.header())?;
                    catalog
                        .insert(late.indexed())
                        .map_err(|e| Error::recovery(e.to_string()))?;
                } else {
                    tracing::info!(
                        key,
                        found,
                        "an earlier epoch's orphan holds the start sequence; moving on"
                    );
                }
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

/// The tail of an object that appeared after the listing.
async fn read_late_object(storage: &Storage, key: &str) -> Result<RecoveredObject, Error> {
    let size = storage
        .list(key)
        .await?
        .into_iter()
        .find(|m| m.key == key)
        .map(|m| m.size)
        .ok_or_else(|| Error::Storage {
            source: crate::storage::StorageError::not_found(key),
        })?;
    read_tail(storage, key, size, &TailWindow::default()).await
}

/// Every process writes its start object at a sequence at or above its
/// epoch, so every object objwal writes has `epoch <= sequence`. An object
/// above that can only come from damage or a foreign writer, and must not
/// become the base of the next epoch.
pub(crate) fn check_plausible(key: &str, header: &Header) -> Result<(), Error> {
    if header.epoch > header.sequence {
        return Err(Error::recovery(format!(
            "object {key} has the implausible epoch {} above its sequence {}: \
             damage or a foreign writer; refusing to base a new epoch on it",
            header.epoch, header.sequence
        )));
    }
    Ok(())
}
