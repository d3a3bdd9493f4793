//! Garbage collection by the persisted reclaim boundary.
//!
//! Every object carries the boundary computed when it was sealed: the
//! lowest sequence that may still hold a live entry. Once an object carrying
//! a boundary is durable and indexed, every object below that boundary
//! (indexed, orphaned, failed or never created) is garbage. A pass lists the
//! prefix, takes at most [`PASS_LIMIT`] keys below the boundary and deletes
//! them, at most [`DELETES_IN_FLIGHT`] at a time, in a background task; the
//! append path never waits for it. A failed delete is counted, logged and
//! retried by a later pass. Nothing is collected after stop or poison. A
//! stop waits for a pass in flight at most one `request_timeout` (30 s by
//! default), then abandons it ([`Actor::abandon_collection`]): on a store
//! that stops answering, a pass of 256 deletes would otherwise hold the
//! stop for 64 timeouts. An abandoned delete is harmless: it is of a key
//! below a reclaim boundary that an indexed object carries, which no
//! process creates at again and no reader needs (recovery and reads
//! already meet objects that a live writer's collection deletes under
//! them); whether it lands or not, the next writer's first pass lists
//! every key below the boundary and deletes what is left.
//!
//! Reader holds (rfcs/0011): a pass that found objects to delete lists
//! `holds/` before it deletes any, and deletes nothing at or above the
//! position of a live hold. A pass that a hold
//! held back is repeated no sooner than a quarter of the holding ttl,
//! clamped to [flush interval, [`HELD_RECHECK`]]: holders move their holds
//! about that often, so the listings a hold costs stay bounded, and a
//! released or expired hold stops holding collection within a minute.
//!
//! An idle store still collects: when the boundary it would write now is
//! ahead of the durable one and indexed objects lie below it, a tick writes
//! one empty object that carries it (at most once per flush interval).
//!
//! Settle markers are never deleted (rule K5 of rfcs/0006): each keeps a
//! writer that a newer process's walk stopped from ever holding its key, and
//! that writer may still be running. Nor are fillers (rule 8): an older
//! writer may still create at a filler's key, and a delete would let it
//! land and acknowledge there, off this writer's chain. Nor, while this
//! process runs, are the voids that settled its failed batches: the
//! batch's own create may still be on the wire and would land at a freed
//! key, showing a follower entries that were answered `NotDurable` (found
//! by the model test's late landings; recovery never replays there, below
//! the boundary, and after a restart such a landing is only garbage).

use std::collections::BTreeSet;

use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryFutureExt};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage, StorageError};
use crate::wal::holds::{HoldInfo, HoldsView};

use super::super::policy::SealReason;
use super::Actor;

/// The longest a pass that a hold held back waits before the next.
pub(crate) const HELD_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);
/// Keys a pass looks at.
pub(crate) const PASS_LIMIT: usize = 256;
/// Deletes in flight at once.
pub(crate) const DELETES_IN_FLIGHT: usize = 4;
/// Deleted sequences remembered for reads that meet them.
const REMEMBERED: usize = 1 << 16;

/// What a pass did.
#[derive(Debug)]
pub(crate) struct Pass {
    boundary: u64,
    deleted: Vec<u64>,
    failed: Vec<(u64, StorageError)>,
    more: bool,
    list_error: Option<StorageError>,
    /// The holds as this pass saw them (`None` when it could not list
    /// them).
    holds: Option<(HoldsView, Vec<HoldInfo>)>,
    /// Objects kept only for live holds.
    held: u64,
    /// When a live hold held the pass back: how long to wait before the
    /// next one.
    held_back: Option<std::time::Duration>,
}

/// The collection room: passes in flight and what they deleted.
pub(super) struct Collector {
    /// The pass in flight (at most one).
    pub(super) passes: FuturesUnordered<JoinHandle<Pass>>,
    /// Every object below this was deleted.
    collected_boundary: u64,
    /// The boundary of the latest pass started: objects below it are being
    /// (or were) deleted.
    collecting_below: u64,
    /// Sequences collection deleted (the latest ones), for reads.
    deleted: BTreeSet<u64>,
    /// When collection runs again (a retry, or the idle tick).
    pub(super) tick_at: Option<Instant>,
    /// When a stop stops waiting for the pass in flight.
    pub(super) abandon_at: Option<Instant>,
    /// Settle markers and fillers: never deleted.
    keep: std::sync::Arc<BTreeSet<u64>>,
    /// When this writer first saw each hold generation.
    holds_view: HoldsView,
    /// The holds as the latest pass saw them.
    pub(super) holds: Vec<HoldInfo>,
    /// No pass starts before this: a hold held the last one back.
    held_until: Option<Instant>,
}

impl Collector {
    /// A collector whose catalog starts at `first` (below it everything was
    /// collected before this instance started).
    pub(super) fn new(first: u64, keep: BTreeSet<u64>) -> Self {
        Collector {
            passes: FuturesUnordered::new(),
            collected_boundary: 0,
            collecting_below: first,
            deleted: BTreeSet::new(),
            tick_at: None,
            abandon_at: None,
            keep: std::sync::Arc::new(keep),
            holds_view: HoldsView::default(),
            holds: Vec::new(),
            held_until: None,
        }
    }

    /// Whether collection deleted (or is deleting) the object of
    /// `sequence`: a read found it missing, and it lies below a boundary a
    /// pass collects. Any other missing object is an error for the read.
    pub(super) fn was_deleted(&self, sequence: u64) -> bool {
        sequence < self.collecting_below || self.deleted.contains(&sequence)
    }

    /// Keeps the filler at `sequence` for good (the next pass on).
    pub(super) fn keep(&mut self, sequence: u64) {
        std::sync::Arc::make_mut(&mut self.keep).insert(sequence);
    }

    fn remember(&mut self, deleted: &[u64]) {
        self.deleted.extend(deleted.iter().copied());
        while self.deleted.len() > REMEMBERED {
            self.deleted.pop_first();
        }
    }
}

impl Actor {
    /// Starts a pass if the durable boundary passed what was collected.
    pub(super) fn maybe_collect(&mut self) {
        self.check_pinning();
        if self.refusal().is_some() || !self.collector.passes.is_empty() {
            return;
        }
        if let Some(until) = self.collector.held_until {
            if Instant::now() < until {
                return;
            }
            self.collector.held_until = None;
        }
        let Some(tip) = self.catalog.tip() else {
            return;
        };
        // The tip is never collected.
        let boundary = tip.reclaim_boundary.min(tip.sequence);
        if boundary <= self.collector.collected_boundary {
            return;
        }
        let removed = self.catalog.remove_below(boundary);
        if removed > 0 {
            self.metrics.indexed_objects.set(self.catalog.len() as f64);
            self.metrics.indexed_bytes.set(self.catalog.bytes() as f64);
        }
        tracing::debug!(boundary, removed, "collecting below the reclaim boundary");
        self.collector.collecting_below = self.collector.collecting_below.max(boundary);
        let storage = self.storage.clone();
        let prefix = self.prefix.clone();
        let keep = self.collector.keep.clone();
        let holds = self.collector.holds_view.clone();
        self.collector.passes.push(tokio::spawn(collect(
            storage, prefix, boundary, keep, holds,
        )));
    }

    pub(super) fn on_pass(&mut self, done: Result<Pass, JoinError>) {
        let pass = match done {
            Ok(pass) => pass,
            Err(e) => {
                tracing::warn!(error = %e, "a collection pass ended early");
                self.retry_collect_later();
                return;
            }
        };
        self.metrics
            .deleted_objects
            .increment(pass.deleted.len() as u64);
        self.collector.remember(&pass.deleted);
        if let Some((view, holds)) = pass.holds {
            self.metrics
                .holds
                .set(holds.iter().filter(|h| !h.expired).count() as f64);
            self.metrics.held_objects.set(pass.held as f64);
            self.collector.holds_view = view;
            self.collector.holds = holds;
        }
        if let Some(error) = &pass.list_error {
            tracing::warn!(%error, "listing for collection failed; retried later");
            self.retry_collect_later();
        } else if !pass.failed.is_empty() {
            self.metrics
                .failed_deletes
                .increment(pass.failed.len() as u64);
            for (sequence, error) in &pass.failed {
                tracing::warn!(sequence, %error, "delete failed; retried later");
            }
            self.retry_collect_later();
        } else {
            if !pass.more {
                self.collector.collected_boundary = pass.boundary;
            }
            if let Some(wait) = pass.held_back {
                let wait = wait.min(HELD_RECHECK).max(self.config.flush_interval);
                let until = Instant::now() + wait;
                self.collector.held_until = Some(until);
                self.collector.tick_at =
                    Some(self.collector.tick_at.map_or(until, |t| t.min(until)));
                return;
            }
            // More to delete, or a boundary that moved during the pass; a
            // failed pass waits for its retry tick instead.
            self.maybe_collect();
        }
    }

    /// A stop began: the pass in flight, if any, is waited for at most
    /// one request timeout.
    pub(super) fn bound_collection_at_stop(&mut self) {
        if !self.collector.passes.is_empty() {
            let grace = self
                .config
                .request_timeout
                .unwrap_or(crate::config::DEFAULT_REQUEST_TIMEOUT);
            self.collector.abandon_at = Some(Instant::now() + grace);
        }
    }

    /// The stop waited long enough for the pass in flight: abort it. What
    /// it did not delete is garbage the next writer's first pass deletes
    /// (see the module docs for why a delete left in flight is harmless).
    pub(super) fn abandon_collection(&mut self) {
        self.collector.abandon_at = None;
        if self.collector.passes.is_empty() {
            return;
        }
        tracing::warn!(
            prefix = %self.prefix,
            "stop abandons the collection pass in flight (its requests did not answer); \
             the next writer collects what it left"
        );
        for pass in self.collector.passes.iter() {
            pass.abort();
        }
        self.collector.passes = FuturesUnordered::new();
    }

    fn retry_collect_later(&mut self) {
        if self.collector.tick_at.is_none() {
            self.collector.tick_at = Some(Instant::now() + self.config.flush_interval);
        }
    }

    /// Arms the collection tick (after a watermark moved).
    pub(super) fn arm_collect(&mut self) {
        self.retry_collect_later();
    }

    /// The collection tick: retry a failed pass, and let an idle store carry
    /// a boundary that would free indexed objects in one empty object.
    pub(super) fn on_collect_tick(&mut self) {
        self.collector.tick_at = None;
        if self.refusal().is_some() {
            return;
        }
        self.maybe_collect();
        let idle = self.open.as_ref().is_none_or(|o| o.batch.is_empty())
            && self.pipeline.is_empty()
            && self.backlog.failing.is_none();
        if !idle {
            return;
        }
        let durable = self.catalog.tip().map_or(0, |t| t.reclaim_boundary);
        let next = self.reclaim_boundary(self.next_sequence, &Default::default());
        // Writing a new tip only to free the old tip frees nothing.
        let tip = self.catalog.tip().map(|t| t.sequence);
        let frees = self
            .catalog
            .objects()
            .next()
            .is_some_and(|o| o.sequence < next && Some(o.sequence) != tip);
        if next > durable && frees {
            if let Err(e) = self.open_batch(Instant::now()) {
                tracing::warn!(error = %e, "cannot write an object to carry the reclaim boundary");
                return;
            }
            self.seal(SealReason::Collect);
        }
    }
}

/// One pass: list the objects; if any lies below `boundary` (never a
/// settle marker or filler in `keep`), list the holds, then delete up to
/// [`PASS_LIMIT`] of them below every live hold's position.
async fn collect(
    storage: Storage,
    prefix: Prefix,
    boundary: u64,
    keep: std::sync::Arc<BTreeSet<u64>>,
    mut view: HoldsView,
) -> Pass {
    let mut pass = Pass {
        boundary,
        deleted: Vec::new(),
        failed: Vec::new(),
        more: false,
        list_error: None,
        holds: None,
        held: 0,
        held_back: None,
    };
    let listed = match storage.list(&prefix.objects_prefix()).await {
        Ok(listed) => listed,
        Err(e) => {
            pass.list_error = Some(e);
            return pass;
        }
    };
    let below: Vec<(u64, String)> = listed
        .into_iter()
        .filter_map(|meta| {
            let sequence = prefix.parse_object_key(&meta.key)?;
            (sequence < boundary && !keep.contains(&sequence)).then_some((sequence, meta.key))
        })
        .collect();
    if below.is_empty() {
        // Nothing to delete: the holds need no listing.
        return pass;
    }
    // Listed before any delete: a hold that lands after this listing was
    // placed while the objects this pass may delete were already below the
    // durable boundary (rfcs/0011, "When a hold is in force").
    let holds = match storage.list(&prefix.holds_prefix()).await {
        Ok(listed) => listed,
        Err(e) => {
            pass.list_error = Some(e);
            return pass;
        }
    };
    let seen = view.update(
        holds
            .iter()
            .filter_map(|meta| prefix.parse_hold_key(&meta.key))
            .collect(),
        Instant::now(),
    );
    let live: Vec<&crate::storage::keys::HoldKey> = seen
        .iter()
        .filter_map(|(key, live)| live.then_some(key))
        .collect();
    let holding = live
        .iter()
        .filter(|k| k.position < boundary)
        .min_by_key(|k| k.position);
    let limit = holding.map_or(boundary, |k| k.position);
    pass.boundary = limit;
    pass.held_back = holding.map(|k| std::time::Duration::from_millis(k.ttl_ms / 4));
    let spared: Vec<u64> = below
        .iter()
        .map(|&(sequence, _)| sequence)
        .filter(|&s| s >= limit)
        .collect();
    pass.held = spared.len() as u64;
    let infos = seen
        .iter()
        .map(|(key, live)| HoldInfo {
            name: key.name.clone(),
            position: key.position,
            ttl: std::time::Duration::from_millis(key.ttl_ms),
            expired: !live,
            held_objects: if *live {
                spared.iter().filter(|&&s| s >= key.position).count() as u64
            } else {
                0
            },
        })
        .collect();
    pass.holds = Some((view, infos));
    let mut victims: Vec<(u64, String)> = below
        .into_iter()
        .filter(|&(sequence, _)| sequence < limit)
        .collect();
    pass.more = victims.len() > PASS_LIMIT;
    victims.truncate(PASS_LIMIT);
    let results: Vec<(u64, Result<(), StorageError>)> = futures::stream::iter(victims)
        .map(|(sequence, key)| {
            let storage = storage.clone();
            async move { storage.delete(&key).await }
                .map_ok_or_else(move |e| (sequence, Err(e)), move |()| (sequence, Ok(())))
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .collect()
        .await;
    for (sequence, result) in results {
        match result {
            Ok(()) => pass.deleted.push(sequence),
            Err(e) => pass.failed.push((sequence, e)),
        }
    }
    pass
}
