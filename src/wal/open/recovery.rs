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
use tracing::Instrument;

use crate::catalog::chain::Selection;
use crate::catalog::{Catalog, IndexedObject};
use crate::config::{Config, DamagePolicy};
use crate::error::Error;
use crate::format::{self, Header, Link, Object};
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::open::damage::{parse_quarantine_key, quarantine_prefix, Damage};
use crate::wal::open::missing::missing_objects;
use crate::wal::open::quarantine::{self, examine, learn, Examined};
use crate::wal::open::tail::{check_plausible, look, Looked, RecoveredObject, TailWindow};
use crate::wal::protocol::create::{create_object, CreateOutcome};
use crate::wal::protocol::retry::RetryPolicy;
use crate::wal::protocol::rules::{self, Taken};
use crate::EntryId;

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
    /// Keys collection never deletes: the settle markers listed (each keeps
    /// the writer a walk stopped from ever holding its key: rule K5), and
    /// the fillers listed or stepped over (an older writer may still create
    /// at a filler's key: rule 8).
    pub(crate) markers: BTreeSet<u64>,
    /// Where the tip's run stands after the listed objects that continue
    /// it (and the fillers in it): where a walk goes on.
    pub(crate) end: Option<RunEnd>,
    /// The damaged objects listed, with the header a copy of theirs still
    /// gives (a walk that meets one must know whether it blocks the run).
    pub(crate) damaged_headers: BTreeMap<u64, Option<Header>>,
    /// The key of the damaged object the run ends with, when its jump is
    /// unknown: where its writer goes on cannot be told, so no walk can
    /// start from it (issue 29 item 5c).
    pub(crate) end_unknown: Option<String>,
    /// The sequences of the objects `objwal repair` moved under
    /// `quarantine/` (and not back under `objects/`): the open blocks the
    /// next key of those at or above its walk's block
    /// ([`block_past_moved_aside`]).
    pub(crate) moved_aside: BTreeSet<u64>,
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
/// to fence, or the writer a tool reads): it lay below a boundary that
/// writer's objects carry, so the chain counts as collected below the
/// highest key that vanished, and recovery goes on with what it read
/// (issue 30 item 8: a reader must start however fast its writer
/// collects). Only when nothing usable is left (every listed object from
/// there up vanished) does it list again, up to [`LISTINGS`] times, and then
/// fail with a transient error that names the prefix.
pub(crate) async fn recover_with(
    storage: &Storage,
    prefix: &Prefix,
    config: &Config,
) -> Result<Recovered, Error> {
    // A span built by hand, not `#[tracing::instrument]`: the attribute
    // would bring tracing's proc macro (and a second syn) into every build.
    let span = tracing::info_span!("recover", prefix = %prefix);
    recover_listing(storage, prefix, config)
        .instrument(span)
        .await
}

/// [`recover_with`]'s body, inside its span.
async fn recover_listing(
    storage: &Storage,
    prefix: &Prefix,
    config: &Config,
) -> Result<Recovered, Error> {
    let mut last = String::new();
    for listing in 1..=LISTINGS {
        match recover_once(storage, prefix, config).await? {
            Pass::Done(recovered) => return Ok(*recovered),
            Pass::Vanished { listed, newest } => {
                tracing::info!(
                    listed,
                    listing,
                    newest,
                    "objects vanished while recovery read them (a writer collects): listing again"
                );
                last = newest;
            }
        }
    }
    Err(Error::Storage {
        source: crate::storage::StorageError::transient(format!(
            "every object listed under {prefix} vanished while recovery read it, \
             {LISTINGS} listings in a row (the last listing named {last}, which its read \
             then found missing, and nothing usable below it was left): another process \
             deletes this prefix's objects; repeat the open once it is quiet"
        ))
        .with_key(last),
    })
}

/// Listings recovery makes before it gives up on a prefix whose objects
/// keep vanishing under it.
pub(crate) const LISTINGS: usize = 5;

/// What one listing gave.
enum Pass {
    Done(Box<Recovered>),
    /// Objects vanished after the listing: list again. `newest`: the key
    /// of the newest one (listed, then not found by its read).
    Vanished {
        listed: usize,
        newest: String,
    },
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
    // Newest first: a writer collecting as fast as it writes deletes the
    // oldest of what was listed first, while the newest (which tell where
    // the chain stands) are still there (issue 30 item 8).
    keyed.sort_unstable_by_key(|(sequence, _)| std::cmp::Reverse(*sequence));
    let window = TailWindow::default();
    let window = &window;
    // A tail read that fails transiently is repeated (issue 30, item 7).
    let retry = &RetryPolicy::new(config, 0);
    let read: Vec<(u64, Option<Examined>)> = futures::stream::iter(keyed)
        .map(|(sequence, meta)| async move {
            let examined =
                examine(storage, &meta.key, meta.size, sequence, window, Some(retry)).await?;
            if examined.is_none() {
                tracing::debug!(key = %meta.key, "an object vanished after the listing: collected");
            }
            Ok::<_, Error>((sequence, examined))
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    // Listed, then gone: collected by a writer still running (issue 30
    // item 8). A writer deletes only below the boundary an object of its
    // carries, and a boundary never lies above a live entry of its chain:
    // everything below the highest key that vanished is garbage, so the
    // chain counts as collected below it. Only a listing of which nothing
    // usable is left is repeated.
    let collected_below = read
        .iter()
        .filter(|(_, e)| e.is_none())
        .map(|(s, _)| s.saturating_add(1))
        .max()
        .unwrap_or(0);
    let mut intact = BTreeMap::new();
    let mut damaged = BTreeMap::new();
    for (sequence, examined) in read.into_iter().filter_map(|(s, e)| e.map(|e| (s, e))) {
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
    let mut moved_aside = BTreeSet::new();
    for (sequence, d) in quarantined(storage, prefix, &intact, &damaged).await? {
        moved_aside.insert(sequence);
        damaged.insert(sequence, d);
    }
    // Damaged and quarantined objects are there (in some form): not missing.
    let known: BTreeSet<u64> = present.iter().chain(damaged.keys()).copied().collect();
    let missing = missing_objects(&intact, &damaged, &known, collected_below, policy, |s| {
        prefix.object_key(s)
    })?;
    for (sequence, d) in missing {
        damaged.entry(sequence).or_insert(d);
    }
    for d in damaged.values().filter(|d| d.records.is_none()) {
        // Under `Quarantine` the open goes on without them (README, "A
        // damaged log"): what its marks made obsolete, or its releases
        // dropped, may replay.
        tracing::warn!(key = %d.key,
            "the flush marks and release records of a damaged object cannot be read: any it \
             held are lost, and the entries they covered may replay");
    }
    let damaged_headers = damaged
        .iter()
        .filter(|(_, d)| !d.quarantined)
        .map(|(s, d)| (*s, d.header))
        .collect();
    if collected_below > 0
        && intact
            .keys()
            .next_back()
            .is_none_or(|s| *s < collected_below)
    {
        // Everything usable vanished: nothing to stand on.
        return Ok(Pass::Vanished {
            listed: present.len(),
            newest: prefix.object_key(collected_below - 1),
        });
    }
    let (mut catalog, selection, mut damage) =
        quarantine::assemble(&intact, &damaged, collected_below, |s| prefix.object_key(s))?;
    // Kept for good: settle markers, and every empty object off the chain
    // (a filler, or the start object of an open that failed: an older
    // writer may still create at its key; rfcs/0006 rule 8).
    let markers = intact
        .iter()
        .filter(|(sequence, o)| {
            rules::is_settle_marker(o.tail.header())
                || (o.is_empty() && selection.orphans.binary_search(sequence).is_ok())
        })
        .map(|(sequence, _)| *sequence)
        .collect();
    let mut orphans = selection
        .orphans
        .iter()
        .filter_map(|sequence| intact.remove_entry(sequence))
        .collect();
    let end = adopt_listed_run(&mut catalog, &mut orphans)?;
    // An object the operator moved under `quarantine/` ends the run by
    // their decision: the refusal that names such an object asks them to
    // stop its writer first, and the walk goes on from its key (the
    // attack on issue 32, second round: every open after the move failed).
    let end_unknown = end
        .and_then(|e| damaged.get(&e.sequence))
        .filter(|d| d.records.is_none() && !d.quarantined)
        .map(|d| d.key.clone());
    // What the run adopted is replayed after all.
    damage
        .unreplayed
        .retain(|u| catalog.object(u.sequence).is_none());
    warn(&damage);
    Ok(Pass::Done(Box::new(Recovered {
        catalog,
        selection,
        damage,
        present,
        orphans,
        markers,
        end,
        damaged_headers,
        end_unknown,
        moved_aside,
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
        let (header, segments, records) = match learn(storage, &meta.key, meta.size, sequence).await
        {
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
                records,
                absent: false,
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

/// Where a run stands: its last key, holding the run's object or a filler
/// that settled it (rfcs/0006, "Fillers"), and that key's jump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunEnd {
    pub(crate) sequence: u64,
    /// The run's epoch (a filler stands for the run's object).
    pub(crate) epoch: u64,
    pub(crate) jump: Option<EntryId>,
}

impl RunEnd {
    pub(crate) fn of(object: &IndexedObject) -> RunEnd {
        RunEnd {
            sequence: object.sequence,
            epoch: object.epoch,
            jump: object.jump(),
        }
    }

    /// The run's next key.
    pub(crate) fn next_key(&self) -> u64 {
        rules::next_key(self.sequence, self.jump)
    }

    /// What an object found at [`RunEnd::next_key`] is to this run.
    fn at_key(&self, object: &RecoveredObject) -> rules::AtKey {
        rules::at_key(
            object.tail.header(),
            object.is_empty(),
            (self.sequence, self.epoch),
        )
    }

    /// The run, one key further: the object at it, or a filler there.
    fn step(&self, key: u64, object: Option<&IndexedObject>) -> RunEnd {
        match object {
            Some(o) => RunEnd::of(o),
            None => RunEnd {
                sequence: key,
                epoch: self.epoch,
                jump: None,
            },
        }
    }
}

/// Follows the run of the catalog's tip through the listed objects that
/// continue it and the fillers in it, adopting the former (an object can be
/// listed before its predecessor landed, and a filler breaks the links
/// chain selection follows): what a reader sees of the run without writing
/// anything. Stops at the first key that holds nothing listed or an object
/// that blocks the run, and returns where the run stands.
fn adopt_listed_run(
    catalog: &mut Catalog,
    orphans: &mut BTreeMap<u64, RecoveredObject>,
) -> Result<Option<RunEnd>, Error> {
    let Some(mut end) = catalog.tip().map(RunEnd::of) else {
        return Ok(None);
    };
    loop {
        let key = end.next_key();
        let Some(found) = orphans.get(&key) else {
            return Ok(Some(end));
        };
        match end.at_key(found) {
            rules::AtKey::Continues => {
                let found = orphans
                    .remove(&key)
                    .ok_or_else(|| Error::recovery("vanished"))?;
                let indexed = found.indexed();
                catalog
                    .insert(indexed.clone())
                    .map_err(|e| Error::recovery(e.to_string()))?;
                tracing::info!(
                    key,
                    "adopting a listed object whose predecessor the listing broke"
                );
                end = end.step(key, Some(&indexed));
            }
            rules::AtKey::Filler => end = end.step(key, None),
            rules::AtKey::Blocks => return Ok(Some(end)),
        }
    }
}

/// How far a walk got: the key that blocks the older writer, and the
/// highest key this walk settled (the start object goes above both).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walked {
    /// The first key of the run the older writer can never hold.
    pub(crate) blocked: u64,
    /// The highest key holding one of this walk's settle markers.
    pub(crate) settled_max: u64,
}

/// Walks the run of the tip of `catalog` (rule K4 of rfcs/0006) from where
/// recovery's listing left it: from the run's next key, a key holding an
/// object that continues the run is adopted (indexed: it may hold entries
/// the older writer acknowledged, or will, once its response arrives) and
/// the walk goes on from it; a filler is stepped over as the writer steps
/// over it; an empty key gets this process's settle marker. The walk stops
/// at the first key that holds anything else (the marker, or any other
/// object) and returns it: the older writer can never hold that key, so it
/// acknowledges nothing at or after it and creates nothing at or beyond it
/// plus `rules::WINDOW`.
///
/// Keys are tried in rounds of 1, 2, 4, ... up to [`rules::WALK_ROUND_MAX`] at
/// once (markers created together, then every key found taken read once,
/// together: one suffix read each, no listing), and a round's keys are
/// adopted together, so a round costs two round trips however many objects
/// it adopts: a walk catches a writer that lands an object per round trip
/// with every key of its window in flight (issue 29 item 3).
pub(crate) async fn walk(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    catalog: &mut Catalog,
    recovered: &mut Recovered,
    config: &Config,
) -> Result<Walked, Error> {
    let walked = walk_to_block(storage, prefix, epoch, catalog, recovered, config).await?;
    // The key that stops the older writer holds a settle marker (this
    // process's, or a concurrent opener's it met): never collected.
    recovered.markers.insert(walked.blocked);
    Ok(walked)
}

/// Whether the run the walk followed went on past the key that blocked it
/// (rfcs/0006, Lemma 2, "A key the older writer collected"): an older
/// writer deletes its objects below the boundary its newest indexed object
/// carries, so a key of its run it already passed and collected is empty
/// again, and a settle marker landing there blocks nothing. It passed
/// `blocked` only if an object of an older epoch above `blocked` carries a
/// boundary above it, and that object landed before the key was deleted,
/// so before the marker: a listing after the walk shows it (the writer
/// never deletes its newest indexed object). By the look a listed key may
/// be empty again: only the older writer deletes above the block, so that
/// says the same. A look that reads a key damaged cannot tell: damage
/// recovery did not judge counts as passing (the open walks again and its
/// recovery judges it); damage recovery judged (`judged`: what its header
/// still says, if anything) fails the open naming it, unless that header
/// shows it carries no boundary past the block. One listing, and one look
/// at each key above `blocked`.
pub(crate) async fn run_went_past(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    blocked: u64,
    judged: &BTreeMap<u64, Option<Header>>,
    concurrency: usize,
) -> Result<bool, Error> {
    let window = TailWindow::default();
    let window = &window;
    let above: Vec<(u64, String)> = storage
        .list(&prefix.objects_prefix())
        .await?
        .into_iter()
        .filter_map(|meta| {
            let sequence = prefix.parse_object_key(&meta.key)?;
            (sequence > blocked).then_some((sequence, meta.key))
        })
        .collect();
    let passing: Vec<Option<(String, Option<u64>)>> = futures::stream::iter(above)
        .map(|(sequence, key)| async move {
            match look(storage, &key, sequence, window.len(), window).await? {
                Looked::Intact(object) => {
                    let header = object.tail.header();
                    Ok::<_, Error>(
                        passes(header, epoch, blocked)
                            .then_some((key, Some(header.reclaim_boundary))),
                    )
                }
                // Listed above the block and gone by the look: only the
                // older writer deletes there (its collection, below a
                // boundary past this key, or rule 8's delete of a dead
                // object), so its run went on. A dead object's delete costs
                // one recovery more than needed (the attack on issue 32
                // found a collection between the listing and the look read
                // as "did not pass", and the older writer never fenced).
                Looked::Missing => Ok(Some((key, None))),
                // Whether it carries a boundary past the block is unknown.
                // Judged damaged by recovery, it stays so on every walk:
                // the older writer may have gone on past the block through
                // it, to keys no walk can tell (its jump is unknown), so the
                // open fails naming it, as at the run's next key. Leaving
                // it out let that writer acknowledge off the chain (the
                // attack on issue 32, second round: under `Quarantine`, a
                // damaged marks-only object above a collected key). Damage
                // that landed since recovery listed counts as passing: the
                // open walks again and its recovery judges it.
                Looked::Damaged(_) => match judged.get(&sequence) {
                    Some(Some(header)) if !passes(header, epoch, blocked) => Ok(None),
                    Some(_) => Err(unknown_past(&key, blocked)),
                    None => Ok(Some((key, None))),
                },
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let Some((key, boundary)) = passing.into_iter().flatten().next() else {
        return Ok(false);
    };
    if boundary.is_none() {
        tracing::warn!(%key, blocked,
            "an object above the key the walk stopped at is gone or reads damaged: walking again");
    }
    tracing::info!(
        %key,
        blocked,
        ?boundary,
        "the older writer's run went past the key the walk stopped at (it collected that key): \
         recovering again"
    );
    Ok(true)
}

/// Blocks the next key of every object the operator moved aside at or
/// above `blocked`, the key the walk stopped at (rfcs/0006, "An object
/// moved aside above the block"). Such an object is on no run this open
/// walked, and what it was may be unknown (its header and the trailer's
/// copy both damaged): a newer process's start object, say, whose writer
/// still runs and goes on at its next key, where nothing of this open's
/// stands (the fourth attack on issue 32: an operator who stopped the
/// process the refusal named, then moved the object aside, and the other
/// process acknowledged past it). A settle marker there fences that
/// writer as the walk's marker fences the walked one; a writer that
/// already went on past its moved-aside object left an object there,
/// listed, whose chain recovery follows.
///
/// Returns the highest key settled (0: none), or `None` when a key
/// turned out taken since the listing by an object that is not a settle
/// marker: its writer went on, and the open recovers again.
pub(crate) async fn block_past_moved_aside(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    blocked: u64,
    recovered: &mut Recovered,
    config: &Config,
) -> Result<Option<u64>, Error> {
    let keys: Vec<u64> = recovered
        .moved_aside
        .range(blocked..)
        .filter_map(|q| q.checked_add(1))
        .filter(|k| {
            *k <= format::MAX_SEQUENCE
                && !recovered.present.contains(k)
                && !recovered.moved_aside.contains(k)
        })
        .collect();
    if keys.is_empty() {
        return Ok(Some(0));
    }
    let retry = RetryPolicy::new(config, epoch);
    let window = TailWindow::default();
    let (retry, window) = (&retry, &window);
    let settled: Vec<(u64, Result<AtWalkKey, Error>)> = futures::stream::iter(keys)
        .map(|key| async move {
            (
                key,
                settle(storage, prefix, epoch, key, retry, window).await,
            )
        })
        .buffer_unordered(config.recovery_concurrency.max(1))
        .collect()
        .await;
    let mut settled_max = 0;
    let mut again = false;
    for (key, outcome) in settled {
        match outcome? {
            AtWalkKey::Settled => {
                tracing::info!(
                    key = %prefix.object_key(key),
                    "blocked the key after an object moved aside"
                );
                recovered.markers.insert(key);
                settled_max = settled_max.max(key);
            }
            AtWalkKey::Found(object) if rules::is_settle_marker(object.tail.header()) => {
                recovered.markers.insert(key);
            }
            AtWalkKey::Found(_) | AtWalkKey::Untried => {
                tracing::info!(
                    key = %prefix.object_key(key),
                    "an object landed after an object moved aside since the listing: \
                     recovering again"
                );
                again = true;
            }
        }
    }
    Ok((!again).then_some(settled_max))
}

/// Refuses a chain whose tip links over damage that may be a newer
/// process's object (rfcs/0006, Lemma 2, "Damage the tip links over"): a
/// damaged object between the tip and the tip's predecessor whose header
/// is unknown, or names an epoch above the tip's. Its writer, if it still
/// runs, goes on past keys this open would take for an older run's (a
/// dead start object at its next key is then its to delete, rule 8).
pub(crate) fn check_no_newer_damage_under_the_tip(
    catalog: &Catalog,
    recovered: &Recovered,
    prefix: &Prefix,
) -> Result<(), Error> {
    let Some(tip) = catalog.tip() else {
        return Ok(());
    };
    let below = tip.link.map_or(0, |link| link.sequence);
    let newer = recovered
        .damaged_headers
        .range(below.saturating_add(1)..tip.sequence)
        .find(|(_, header)| header.is_none_or(|h| h.epoch > tip.epoch));
    match newer {
        None => Ok(()),
        Some((sequence, _)) => Err(Error::recovery(format!(
            "{} is damaged and lies under the log's tip {}, which links over it: it may be a \
             newer process's object, whose run this open cannot follow; {MOVE_ASIDE}",
            prefix.object_key(*sequence),
            prefix.object_key(tip.sequence)
        ))),
    }
}

/// What every refusal of damage at the run's end asks the operator to do.
const MOVE_ASIDE: &str =
    "stop every process writing the log, then move the object aside with `objwal repair`";

/// Whether an object of an older epoch carries a boundary past `blocked`:
/// its writer's run went on past that key and collected it.
fn passes(header: &Header, epoch: u64, blocked: u64) -> bool {
    header.epoch < epoch && header.reclaim_boundary > blocked
}

/// The open's refusal when a damaged object recovery judged lies above the
/// key its walk stopped at.
fn unknown_past(key: &str, blocked: u64) -> Error {
    Error::recovery(format!(
        "{key} is damaged and lies above key {blocked}, where this open stopped the older \
         writer's run: whether that writer went on past it cannot be told from it, so no start \
         object is safe while that writer may still run; {MOVE_ASIDE}"
    ))
}

/// What a walk found at one key.
enum AtWalkKey {
    /// This walk's settle marker landed there.
    Settled,
    /// An intact object.
    Found(RecoveredObject),
    /// Nothing listed there, and the round did not try it.
    Untried,
}

async fn walk_to_block(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    catalog: &mut Catalog,
    recovered: &mut Recovered,
    config: &Config,
) -> Result<Walked, Error> {
    let Some(mut end) = recovered.end else {
        // Objects were listed, yet none is on a chain: nothing to walk
        // from (recovery fails first when objects have no complete chain).
        return Err(Error::recovery(
            "objects are listed but none forms a chain to continue",
        ));
    };
    if let Some(key) = &recovered.end_unknown {
        return Err(unknown_run(key));
    }
    let retry = RetryPolicy::new(config, epoch);
    let window = TailWindow::default();
    let mut settled_max = 0;
    let mut round = 0u32;
    loop {
        let first = end.next_key();
        if first > format::MAX_SEQUENCE {
            return Err(Error::recovery(
                "no sequence is left: the prefix is exhausted",
            ));
        }
        let len = rules::walk_round_len(round);
        let last = first.saturating_add(len - 1).min(format::MAX_SEQUENCE);
        // Listed keys are known; the others get a marker, all at once.
        let keys: Vec<u64> = (first..=last)
            .filter(|k| !recovered.present.contains(k))
            .collect();
        let (retry, window) = (&retry, &window);
        let settled: BTreeMap<u64, Result<AtWalkKey, Error>> = futures::stream::iter(keys)
            .map(|key| async move {
                (
                    key,
                    settle(storage, prefix, epoch, key, retry, window).await,
                )
            })
            .buffer_unordered(rules::WALK_ROUND_MAX as usize)
            .collect()
            .await;
        for (key, outcome) in &settled {
            if matches!(outcome, Ok(AtWalkKey::Settled)) {
                settled_max = settled_max.max(*key);
            }
        }
        let mut settled = settled;
        // The round's keys in run order.
        loop {
            let key = end.next_key();
            if key > last {
                break; // beyond this round: walk on in the next
            }
            let found = match settled.remove(&key) {
                Some(outcome) => outcome?,
                None => match recovered.orphans.remove(&key) {
                    Some(object) => AtWalkKey::Found(object),
                    None if recovered.present.contains(&key) => {
                        return damaged_at_walk(recovered, prefix, key, end);
                    }
                    None => AtWalkKey::Untried,
                },
            };
            let object = match found {
                AtWalkKey::Settled => {
                    return Ok(Walked {
                        blocked: key,
                        settled_max,
                    })
                }
                AtWalkKey::Untried => break,
                AtWalkKey::Found(object) => object,
            };
            let header = *object.tail.header();
            match end.at_key(&object) {
                rules::AtKey::Continues => {
                    let object_key = prefix.object_key(key);
                    check_plausible(&object_key, &header)?;
                    tracing::info!(
                        key = %object_key,
                        "adopting an older writer's object that landed after the listing"
                    );
                    let indexed = object.indexed();
                    catalog
                        .insert(indexed.clone())
                        .map_err(|e| Error::recovery(e.to_string()))?;
                    end = end.step(key, Some(&indexed));
                }
                rules::AtKey::Filler => {
                    tracing::info!(
                        key,
                        "stepping over an older epoch's empty object (a filler)"
                    );
                    // The older writer may still create at its key: kept.
                    recovered.markers.insert(key);
                    end = end.step(key, None);
                }
                rules::AtKey::Blocks => {
                    if header.epoch > epoch && !rules::is_settle_marker(&header) {
                        // A newer process already writes here.
                        return Err(Error::fenced(epoch, header.epoch));
                    }
                    return Ok(Walked {
                        blocked: key,
                        settled_max,
                    });
                }
            }
        }
        recovered.end = Some(end);
        round = round.saturating_add(1);
    }
}

/// The walk met a listed object that is damaged at the run's next `key`
/// (rfcs/0006, issue 29 item 5c): where the run goes after it cannot be
/// told from it (its jump is unknown), and stopping there would leave the
/// older writer free to acknowledge the objects it creates after it. The
/// open fails, naming it, unless what it still says of itself shows that it
/// blocks the run.
fn damaged_at_walk(
    recovered: &Recovered,
    prefix: &Prefix,
    key: u64,
    end: RunEnd,
) -> Result<Walked, Error> {
    let header = recovered.damaged_headers.get(&key).copied().flatten();
    let blocks = header.is_some_and(|h| {
        !rules::continues(&h, (end.sequence, end.epoch))
            && (rules::is_settle_marker(&h) || h.epoch > end.epoch)
    });
    if blocks {
        return Ok(Walked {
            blocked: key,
            settled_max: 0,
        });
    }
    Err(unknown_run(&prefix.object_key(key)))
}

/// The open's refusal when the run it must walk reaches a damaged object
/// whose jump is unknown.
fn unknown_run(key: &str) -> Error {
    Error::recovery(format!(
        "{key} is damaged and lies where the log's run goes on: where its writer's next objects \
         go cannot be told from it, so no start object is safe while that writer may still \
         run; {MOVE_ASIDE}"
    ))
}

/// Lands this process's settle marker at `key`, repeating a failed create
/// after the retry delay (at most `stop_attempts` tries): the key must end
/// up holding something. A key found taken is looked at once (a suffix
/// read: its size and tail, no listing).
async fn settle(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
    key: u64,
    retry: &RetryPolicy,
    window: &TailWindow,
) -> Result<AtWalkKey, Error> {
    let marker = rules::settle_marker(key, epoch);
    let bytes = format::encode(&marker).map_err(|e| Error::corrupted("settle marker", e))?;
    let object_key = prefix.object_key(key);
    let mut backoff = retry.backoff();
    loop {
        let failure = match storage.create(&object_key, bytes.clone()).await {
            Ok(crate::storage::Created::New) => return Ok(AtWalkKey::Settled),
            Ok(crate::storage::Created::AlreadyExists) => None,
            Err(e) => Some(e),
        };
        // Taken, or not known: one look says by what.
        let looked = look(storage, &object_key, key, window.len(), window).await;
        let again = match looked {
            Ok(Looked::Intact(object)) if *object.tail.header() == marker.header => {
                return Ok(AtWalkKey::Settled); // ours: a lost response
            }
            Ok(Looked::Intact(object)) => return Ok(AtWalkKey::Found(object)),
            Ok(Looked::Damaged(d)) => return Err(d.error),
            // "Exists" over nothing (a racing or crashed request), or a
            // failed create that left nothing: create again.
            Ok(Looked::Missing) => failure.unwrap_or_else(|| {
                crate::storage::StorageError::transient(
                    "the create answered that the key exists, but nothing is there",
                )
                .with_key(&object_key)
            }),
            Err(Error::Storage { source }) => source,
            Err(e) => return Err(e),
        };
        if !again.is_transient() || backoff.failures() + 1 >= retry.stop_attempts {
            return Err(Error::Storage { source: again });
        }
        let delay = backoff.fail();
        tracing::debug!(key = %object_key, error = %again, ?delay, "a settle marker failed; repeating it");
        tokio::time::sleep(delay).await;
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
