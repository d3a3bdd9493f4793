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

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};

use crate::catalog::chain::Selection;
use crate::catalog::{Catalog, IndexedObject};
use crate::config::{Config, DamagePolicy};
use crate::error::Error;
use crate::format::{self, Header, Link, Object};
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::open::damage::{parse_quarantine_key, quarantine_prefix, Damage};
use crate::wal::open::quarantine::{self, examine, learn, Examined};
use crate::wal::open::tail::{check_plausible, read_tail, RecoveredObject, TailWindow};
use crate::wal::protocol::create::{create_object, CreateOutcome};
use crate::wal::protocol::retry::RetryPolicy;
use crate::wal::protocol::rules::{self, Taken};

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
    /// The sequences listed under `objects/` (intact or damaged).
    pub(crate) present: BTreeSet<u64>,
    /// The intact objects listed off the tip's chain (orphans), for the
    /// walk: one whose predecessor landed after the listing continues the
    /// chain once the walk adopts that predecessor.
    pub(crate) orphans: BTreeMap<u64, RecoveredObject>,
    /// The settle markers listed: each keeps the writer a walk stopped from
    /// ever holding its key, so collection never deletes one (rule K5).
    pub(crate) markers: BTreeSet<u64>,
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
///
/// An object that vanishes between the listing and the read of its tail was
/// collected by a writer still running (an older process the open is about
/// to fence, or the writer a tool reads): the snapshot is not consistent, so
/// recovery lists again, up to [`LISTINGS`] times, and then fails with a
/// transient error.
#[tracing::instrument(name = "recover", skip_all, fields(prefix = %prefix))]
pub(crate) async fn recover_with(
    storage: &Storage,
    prefix: &Prefix,
    config: &Config,
) -> Result<Recovered, Error> {
    for listing in 1..=LISTINGS {
        match recover_once(storage, prefix, config).await? {
            Pass::Done(recovered) => return Ok(*recovered),
            Pass::Vanished(objects) => {
                tracing::info!(
                    objects,
                    listing,
                    "objects vanished while recovery read them (a writer collects): listing again"
                );
            }
        }
    }
    Err(Error::Storage {
        source: crate::storage::StorageError::transient(format!(
            "objects kept vanishing while recovery read them ({LISTINGS} listings): another \
             process collects this prefix; repeat the open"
        )),
    })
}

/// Listings recovery makes before it gives up on a prefix whose objects
/// keep vanishing under it.
const LISTINGS: usize = 5;

/// What one listing gave.
enum Pass {
    Done(Box<Recovered>),
    /// Objects vanished after the listing: list again.
    Vanished(usize),
}

async fn recover_once(storage: &Storage, prefix: &Prefix, config: &Config) -> Result<Pass, Error> {
    let (concurrency, policy) = (config.recovery_concurrency, config.on_damaged_object);
    let listed = storage.list(&prefix.objects_prefix()).await?;
    let mut keyed = Vec::with_capacity(listed.len());
    for meta in listed {
        match prefix.parse_object_key(&meta.key) {
            Some(sequence) => keyed.push((sequence, meta)),
            None => tracing::warn!(key = %meta.key, "ignoring a key that is not an object key"),
        }
    }
    let present: BTreeSet<u64> = keyed.iter().map(|(sequence, _)| *sequence).collect();
    let window = TailWindow::default();
    let window = &window;
    // A tail read that fails transiently is repeated (issue 30, item 7).
    let retry = &RetryPolicy::new(config, 0);
    let read: Vec<Option<(u64, Examined)>> = futures::stream::iter(keyed)
        .map(|(sequence, meta)| async move {
            match examine(storage, &meta.key, meta.size, sequence, window, Some(retry)).await? {
                Some(examined) => Ok::<_, Error>(Some((sequence, examined))),
                // Listed, then gone: collected by a writer still running.
                None => {
                    tracing::debug!(key = %meta.key, "an object vanished after the listing: collected");
                    Ok(None)
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let vanished = read.iter().filter(|r| r.is_none()).count();
    if vanished > 0 {
        return Ok(Pass::Vanished(vanished));
    }
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
    let markers = intact
        .iter()
        .filter(|(_, o)| rules::is_settle_marker(o.tail.header()))
        .map(|(sequence, _)| *sequence)
        .collect();
    let orphans = selection
        .orphans
        .iter()
        .filter_map(|sequence| intact.remove_entry(sequence))
        .collect();
    Ok(Pass::Done(Box::new(Recovered {
        catalog,
        selection,
        damage,
        present,
        orphans,
        markers,
    })))
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

/// Walks the run of the tip of `catalog` (rule K4 of rfcs/0006): from the
/// key after the tip, a key holding an object that continues the chain is
/// adopted (indexed: it may hold entries the older writer acknowledged, or
/// will, once its response arrives), and the walk goes on from it; an
/// empty key gets this process's settle marker. The walk stops at the first
/// key that holds an object not continuing the chain (the marker, or any
/// other) and returns it: the older writer can never hold that key, so it
/// acknowledges nothing at or after it and creates nothing at or beyond it
/// plus `rules::WINDOW`. Keys are tried in rounds of 1, 2, 4, ... up to
/// the window, so a walk keeps up with a busy older writer.
pub(crate) async fn walk(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    catalog: &mut Catalog,
    recovered: &mut Recovered,
    config: &Config,
) -> Result<u64, Error> {
    let blocked = walk_to_block(storage, prefix, epoch, catalog, recovered, config).await?;
    // The key that stops the older writer holds a settle marker (this
    // process's, or a concurrent opener's it met): never collected.
    recovered.markers.insert(blocked);
    Ok(blocked)
}

async fn walk_to_block(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    catalog: &mut Catalog,
    recovered: &Recovered,
    config: &Config,
) -> Result<u64, Error> {
    let present = &recovered.present;
    let retry = RetryPolicy::new(config, epoch);
    let mut round = 0u32;
    loop {
        let Some(tip) = catalog.tip() else {
            // Objects were listed, yet none is on a chain: nothing to walk
            // from (recovery fails first when objects have no complete chain).
            return Err(Error::recovery(
                "objects are listed but none forms a chain to continue",
            ));
        };
        let first = rules::next_key(tip.sequence, tip.jump());
        if first > format::MAX_SEQUENCE {
            return Err(Error::recovery(
                "no sequence is left: the prefix is exhausted",
            ));
        }
        if present.contains(&first) {
            // Listed: adopted if it continues the chain (its predecessor
            // landed after the listing and the walk adopted it), else the
            // walk stops here.
            match adopt_listed(catalog, recovered, first)? {
                true => continue,
                false => return Ok(first),
            }
        }
        let len = rules::walk_round_len(round);
        let last = first.saturating_add(len - 1).min(format::MAX_SEQUENCE);
        let keys: Vec<u64> = (first..=last).filter(|k| !present.contains(k)).collect();
        let retry = &retry;
        let settled: BTreeMap<u64, CreateOutcome> = futures::stream::iter(keys)
            .map(|key| async move { (key, settle(storage, prefix, epoch, key, retry).await) })
            .buffer_unordered(config.recovery_concurrency.max(1))
            .collect()
            .await;
        let mut key = first;
        loop {
            let outcome = match settled.get(&key) {
                None if present.contains(&key) => match adopt_listed(catalog, recovered, key)? {
                    true => {
                        key = catalog
                            .tip()
                            .map_or(key + 1, |t| rules::next_key(t.sequence, t.jump()));
                        continue;
                    }
                    false => return Ok(key),
                },
                None => break, // beyond this round: walk on in the next
                Some(outcome) => outcome,
            };
            match outcome {
                CreateOutcome::Landed(_) => return Ok(key),
                CreateOutcome::Failed(e) => return Err(Error::Storage { source: e.clone() }),
                CreateOutcome::Taken {
                    epoch: found,
                    settle_marker,
                    ..
                } => {
                    if found.is_some_and(|f| f > epoch) && !settle_marker {
                        // A newer process already writes here.
                        return Err(Error::fenced(epoch, found.unwrap_or(epoch + 1)));
                    }
                    let object_key = prefix.object_key(key);
                    let found = read_late_object(storage, &object_key).await?;
                    let tip = catalog.tip().map(|t| (t.sequence, t.epoch));
                    if !tip.is_some_and(|t| rules::continues(found.tail.header(), t)) {
                        return Ok(key);
                    }
                    check_plausible(&object_key, found.tail.header())?;
                    tracing::info!(
                        key = %object_key,
                        "adopting an older writer's object that landed after the listing"
                    );
                    let indexed = found.indexed();
                    key = rules::next_key(key, indexed.jump());
                    catalog
                        .insert(indexed)
                        .map_err(|e| Error::recovery(e.to_string()))?;
                }
            }
        }
        round = round.saturating_add(1);
    }
}

/// Adopts the listed intact object at `key` if it continues the chain of
/// `catalog`; whether it did.
fn adopt_listed(catalog: &mut Catalog, recovered: &Recovered, key: u64) -> Result<bool, Error> {
    let Some(found) = recovered.orphans.get(&key) else {
        return Ok(false); // damaged, or on no chain we can tell
    };
    let tip = catalog.tip().map(|t| (t.sequence, t.epoch));
    if !tip.is_some_and(|t| rules::continues(found.tail.header(), t)) {
        return Ok(false);
    }
    tracing::info!(
        key,
        "adopting a listed object whose predecessor landed after the listing"
    );
    catalog
        .insert(found.indexed())
        .map_err(|e| Error::recovery(e.to_string()))?;
    Ok(true)
}

/// Lands this process's settle marker at `key`, repeating a failed create
/// after the retry delay (at most `stop_attempts` tries): the key must end
/// up holding something.
async fn settle(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    key: u64,
    retry: &RetryPolicy,
) -> CreateOutcome {
    let marker = match format::encode(&rules::settle_marker(key, epoch)) {
        Ok(bytes) => bytes,
        Err(e) => {
            return CreateOutcome::Failed(crate::storage::StorageError::permanent(format!(
                "encoding a settle marker failed: {e}"
            )))
        }
    };
    let object_key = prefix.object_key(key);
    let mut backoff = retry.backoff();
    loop {
        let outcome = create_object(storage, &object_key, std::slice::from_ref(&marker)).await;
        match &outcome {
            CreateOutcome::Failed(e)
                if e.is_transient() && backoff.failures() + 1 < retry.stop_attempts =>
            {
                let delay = backoff.fail();
                tracing::debug!(key = %object_key, error = %e, ?delay, "a settle marker failed; repeating it");
                tokio::time::sleep(delay).await;
            }
            _ => return outcome,
        }
    }
}

/// Claims the prefix for `epoch`: creates the start object (no segments,
/// linked to the tip of `catalog`) at the first free sequence from `first`,
/// inserts it into `catalog` and returns its sequence. An older epoch's
/// object at a wanted sequence (a dead opener's start object, a late
/// object of an older writer off the chain) is passed over; a newer
/// process's object means this process is fenced.
pub(crate) async fn write_start_object(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    first: u64,
    catalog: &mut Catalog,
) -> Result<u64, Error> {
    let mut sequence = first;
    loop {
        if sequence > format::MAX_SEQUENCE {
            return Err(Error::recovery(
                "no sequence is left for a start object: the prefix is exhausted",
            ));
        }
        let link = catalog.tip().map(|t| Link {
            sequence: t.sequence,
            epoch: t.epoch,
        });
        let floor = catalog.tip().map_or(0, |t| t.reclaim_boundary);
        // Release records and durable flush marks count at open; the engine
        // hands its newer watermarks in after the open.
        let live = catalog.first_live(&std::collections::BTreeMap::new());
        let header = Header {
            sequence,
            epoch,
            link,
            reclaim_boundary: live.unwrap_or(sequence).max(floor).min(sequence),
        };
        let object = Object {
            header,
            segments: Vec::new(),
            marks: Vec::new(),
            releases: Vec::new(),
        };
        let bytes = format::encode(&object).map_err(|e| Error::corrupted("start object", e))?;
        let key = prefix.object_key(sequence);
        let outcome = create_object(storage, &key, std::slice::from_ref(&bytes)).await;
        match outcome {
            CreateOutcome::Landed(_) => {
                catalog
                    .insert(IndexedObject {
                        sequence,
                        epoch,
                        link,
                        reclaim_boundary: header.reclaim_boundary,
                        size: bytes.len() as u64,
                        segments: Vec::new(),
                        marks: Vec::new(),
                        releases: Vec::new(),
                    })
                    .map_err(|e| Error::recovery(e.to_string()))?;
                return Ok(sequence);
            }
            CreateOutcome::Failed(e) => return Err(Error::Storage { source: e }),
            CreateOutcome::Taken { .. } => match outcome.taken(epoch) {
                Some(Taken::Fenced { newer }) => return Err(Error::fenced(epoch, newer)),
                _ => match &outcome {
                    CreateOutcome::Taken {
                        epoch: Some(found), ..
                    } if *found < epoch => {
                        tracing::info!(
                            key,
                            found,
                            "an older epoch's object holds the start sequence; moving on"
                        );
                        sequence += 1;
                    }
                    _ => {
                        return Err(Error::recovery(format!(
                            "another writer holds {key}, not of an older epoch than ours \
                             ({epoch}): another process opened this prefix"
                        )))
                    }
                },
            },
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
