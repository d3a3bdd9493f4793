//! The actor: the one task that owns the store's mutable state.
//!
//! Callers send a [`Command`] over a flume channel and await a oneshot
//! reply. The state lives in rooms, each an owned struct with small, tested
//! transitions; the actor orchestrates them:
//!
//! | room | what it owns |
//! |---|---|
//! | [`regions::Regions`] | ids handed out, watermarks, releases, durable ids |
//! | the open batch ([`Open`]) and the [`SealPolicy`] | admitted entries; when they are sealed |
//! | [`pipeline::Pipeline`] | the sealed batches of the run, creates in flight, the window |
//! | [`Backlog`] | held-back appends (enqueued mode) and the failing state |
//! | [`Kept`] | release records waiting for the next object |
//! | [`markers::Markers`] | indexed release records waiting for their permanent marker |
//! | `marks` | flush marks waiting for the next object |
//! | [`collect::Collector`] | collection passes and what they deleted |
//! | [`pinning::Pins`] | flush requests asked, and their subscribers |
//! | [`ledger::Ledger`] | where every admitted entry went |
//!
//! After every event the loop calls [`Actor::progress`]: start the creates
//! that may start, then ask the policy whether to seal.
//!
//! An object is acknowledged once it and every object of the run before it
//! landed as this writer's own (rfcs/0006, K2): no request follows a create.
//! Outcomes of a create, by ack mode:
//!
//! | event                                 | durable mode                              | enqueued mode (and any stop)                 |
//! |---------------------------------------|-------------------------------------------|----------------------------------------------|
//! | landed (the batch, or its void)       | indexed in order, callers acked           | indexed in order; failing ends               |
//! | a batch's create failed               | its callers fail; its void is created (K1) | repeated with the same bytes after a growing delay; *failing* |
//! | a void's create failed                | *failing*: repeated after a delay; new appends refused, waiting batches voided | -                |
//! | a newer process's object at the key   | fenced                                    | fenced                                       |
//! | a foreign object at the key           | poisoned                                  | poisoned                                     |
//! | encode or catalog error               | poisoned (the loss counted)               | poisoned (the loss counted)                  |
//! | last sequence indexed                 | acked, then poisoned                      | acked, then poisoned                         |
//!
//! Keys are never abandoned: a failed batch's key holds its void (or the
//! batch, if a late request of it wins); a key a stop gives up on is
//! settled by the next process that opens the prefix. Release records and
//! flush marks of a failed batch ride in its void, and the release records
//! are also kept for the next object.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::error::Error;
use crate::format;
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::{EntryId, RegionId};

use super::batch::OpenBatch;
use super::policy::{Budget, SealPolicy};
use crate::wal::protocol::retry::{Backoff, RetryPolicy};
use crate::wal::read::source::SegmentPage;
use crate::wal::{Launch, Shared};

mod ack;
mod admit;
mod collect;
mod hedge;
mod ledger;
mod markers;
mod outcome;
pub(crate) mod pinning;
mod pipeline;
mod regions;
mod replay;
mod seal;
#[cfg(test)]
pub(crate) use seal::test_hooks;
mod stop;

/// The largest payload one append may carry.
pub(crate) const MAX_APPEND_BYTES: u64 = 1 << 30;

/// Failed sequences remembered, to answer `wait_durable` about them.
const FAILED_REMEMBERED: usize = 1 << 12;

pub(crate) type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// A request to the actor.
pub(crate) enum Command {
    Append {
        entries: Vec<(RegionId, Bytes)>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    },
    Obsolete {
        region: RegionId,
        id: EntryId,
        reply: Reply<()>,
    },
    /// An import's floor raised to every id handed out for the region
    /// here, then marked obsolete; answers the floor (`admit.rs`).
    RaiseFloor {
        region: RegionId,
        floor: EntryId,
        reply: Reply<EntryId>,
    },
    WaitDurable {
        region: RegionId,
        id: EntryId,
        reply: Reply<()>,
    },
    Release {
        region: RegionId,
        reply: Reply<()>,
    },
    /// Seal now; answer once everything admitted before is durable.
    Flush {
        reply: Reply<()>,
    },
    Segments {
        region: RegionId,
        from: EntryId,
        limit: usize,
        reply: Reply<SegmentPage>,
    },
    /// Whether collection deleted the object of `sequence`.
    Deleted {
        sequence: u64,
        reply: Reply<bool>,
    },
    Stop {
        reply: Reply<()>,
    },
    /// What the log holds per region.
    Regions {
        reply: Reply<Vec<crate::catalog::RegionInfo>>,
    },
    /// The regions holding objects from collection (`pinning.rs`).
    Pinning {
        reply: Reply<Vec<crate::catalog::Pinning>>,
    },
    /// The reader holds the latest collection pass saw (`collect.rs`).
    Holds {
        reply: Reply<Vec<crate::wal::HoldInfo>>,
    },
    /// A subscription to flush requests (`pinning.rs`).
    FlushRequests {
        reply: Reply<flume::Receiver<crate::wal::FlushRequest>>,
    },
    /// A page of a bulk replay's objects (`replay.rs`).
    ReplayPage {
        wanted: Arc<[(RegionId, EntryId)]>,
        after: u64,
        limit: usize,
        reply: Reply<crate::wal::read::source::ReplayPage>,
    },
}

/// Someone waiting for a batch to become durable and indexed.
pub(crate) enum Waiter {
    /// A durable-mode append.
    Append {
        ids: Vec<EntryId>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    },
    /// A `wait_durable` barrier or a `flush`.
    Durable { reply: Reply<()> },
    /// A region release.
    Release { reply: Reply<()> },
}

impl Waiter {
    fn succeed(self, metrics: &StoreMetrics) {
        match self {
            Waiter::Append {
                ids,
                arrived,
                reply,
            } => {
                metrics.append_ack.record(arrived.elapsed().as_secs_f64());
                let _ = reply.send(Ok(ids));
            }
            Waiter::Durable { reply } | Waiter::Release { reply } => {
                let _ = reply.send(Ok(()));
            }
        }
    }

    fn fail(self, error: Error) {
        match self {
            Waiter::Append { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Waiter::Durable { reply } | Waiter::Release { reply } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// The open batch with the callers waiting on it.
pub(crate) struct Open {
    batch: OpenBatch,
    waiters: Vec<Waiter>,
    /// Whether an early seal gathered the commands queued behind it already
    /// (group commit, once per batch).
    gathered: bool,
}

/// An append held back by the backlog bounds (enqueued mode).
struct Stalled {
    entries: Vec<(RegionId, Bytes)>,
    arrived: Instant,
    reply: Reply<Vec<EntryId>>,
}

/// Creates fail and are repeated after a growing delay; new appends and
/// releases are refused until a create lands.
struct Failing {
    reason: Arc<str>,
    backoff: Backoff,
    retry_at: Instant,
    /// When the store started failing: barriers wait at most
    /// `max_unpersisted_age` from then ([`Actor::barrier_refusal`]).
    since: Instant,
}

/// Enqueued mode's held-back appends, and the failing state of creates.
#[derive(Default)]
struct Backlog {
    stalled: VecDeque<Stalled>,
    failing: Option<Failing>,
}

/// Release records waiting for the next object (of failed or refused
/// releases), coalesced per region, and when they are sealed on their own.
#[derive(Default)]
struct Kept {
    records: BTreeMap<RegionId, EntryId>,
    deadline: Option<Instant>,
}

/// An orderly stop in progress.
struct Stopping {
    replies: Vec<Reply<()>>,
    attempts_left: u32,
    /// Set once stop sealed its last object: a record kept after that is lost.
    final_sealed: bool,
}

/// What the actor starts from: the recovered state, and what it shares
/// with the handles.
pub(crate) struct Start {
    pub(crate) launch: Launch,
    pub(crate) shared: Arc<Shared>,
    pub(crate) metrics: StoreMetrics,
}

pub(crate) struct Actor {
    storage: Storage,
    prefix: Prefix,
    config: Config,
    epoch: u64,
    metrics: StoreMetrics,
    shared: Arc<Shared>,
    retry: RetryPolicy,
    catalog: Catalog,
    regions: regions::Regions,
    open: Option<Open>,
    policy: SealPolicy,
    /// When the policy asked to be asked again.
    seal_at: Option<Instant>,
    /// The sequence of the next batch to open.
    next_sequence: u64,
    /// The run's last acknowledged key (its object, or a filler that
    /// settled it: rfcs/0006, "Fillers"): what the next object links to
    /// when no batch is in the pipeline.
    run_tip: Option<crate::format::Link>,
    pipeline: pipeline::Pipeline,
    hedger: hedge::Hedger,
    backlog: Backlog,
    kept: Kept,
    /// Flush marks handed in since the last seal: they ride with the next
    /// object (a region whose mark did not change adds nothing).
    marks: BTreeMap<RegionId, EntryId>,
    collector: collect::Collector,
    markers: markers::Markers,
    pins: pinning::Pins,
    /// The largest boundary carried by an object sealed so far.
    boundary: u64,
    /// Sequences whose batches failed (the latest ones), for `wait_durable`.
    failed: BTreeSet<u64>,
    ledger: ledger::Ledger,
    stopping: Option<Stopping>,
    poisoned: Option<Error>,
    /// Set once the last sequence was sealed: no batch can be opened.
    exhausted: bool,
}

impl Actor {
    pub(crate) fn new(start: Start) -> Self {
        let Start {
            launch,
            shared,
            metrics,
        } = start;
        let now = Instant::now();
        let config = launch.config;
        let budget = match config
            .early_seals
            .rate(config.flush_interval, launch.storage.charges_per_request())
        {
            None => Budget::unlimited(now),
            Some(rate) => Budget::per_second(rate, config.max_inflight_creates as f64, now),
        };
        let hedge_budget = config
            .hedge_creates
            .budget(launch.storage.charges_per_request());
        let mut catalog = launch.catalog;
        // The engine handed the durable flush marks in before the restart:
        // they are its watermarks until it hands in newer ones.
        let marked: Vec<_> = catalog.marked().collect();
        for (region, mark) in marked {
            catalog.set_watermark(region, mark);
        }
        if config.max_pinned_objects > 0 {
            catalog.track_changes();
        }
        let boundary = catalog.tip().map_or(0, |t| t.reclaim_boundary);
        let run_tip = catalog.tip().map(|t| crate::format::Link {
            sequence: t.sequence,
            epoch: t.epoch,
        });
        let collected = catalog.objects().next().map_or(0, |o| o.sequence);
        debug_assert!(config.max_inflight_creates as u64 <= crate::wal::protocol::rules::WINDOW);
        Actor {
            policy: SealPolicy::new(config.max_batch_bytes, config.flush_interval, budget),
            retry: RetryPolicy::new(&config, launch.epoch ^ launch.next_sequence),
            storage: launch.storage,
            prefix: launch.prefix,
            epoch: launch.epoch,
            metrics,
            ledger: ledger::Ledger::new(shared.clone()),
            shared,
            regions: regions::Regions::recovered(&catalog),
            markers: markers::Markers::new(catalog.released()),
            catalog,
            open: None,
            seal_at: None,
            next_sequence: launch.next_sequence,
            run_tip,
            pipeline: pipeline::Pipeline::new(),
            hedger: hedge::Hedger::new(hedge_budget, config.request_timeout),
            backlog: Backlog::default(),
            kept: Kept::default(),
            marks: BTreeMap::new(),
            collector: collect::Collector::new(collected, launch.markers),
            pins: pinning::Pins::default(),
            boundary,
            failed: BTreeSet::new(),
            stopping: None,
            poisoned: None,
            exhausted: false,
            config,
        }
    }

    /// Runs until stopped, or until every handle is gone (a crash, as far as
    /// the log is concerned: nothing more is created).
    pub(crate) async fn run(mut self, rx: flume::Receiver<Command>) {
        self.maybe_collect();
        loop {
            self.progress(&rx);
            if self.stop_is_complete() {
                let result = self.finish_stop();
                // Creates of a backlog the stop gave up on: a stopped store
                // creates nothing more.
                self.pipeline.abort_all();
                drop(self);
                stop::answer_stopped(rx, result).await;
                return;
            }
            let seal_at = self.seal_at;
            let kept_at = self.kept.deadline;
            let collect_at = self.collector.tick_at;
            let abandon_at = self.collector.abandon_at;
            let markers_at = self.markers.retry_at;
            // Only until it passes: afterwards a create starts as soon as a
            // slot is free, on the event that frees it (a due timer would spin).
            let now = Instant::now();
            let retry_at = self
                .backlog
                .failing
                .as_ref()
                .map(|f| f.retry_at)
                .filter(|at| *at > now && self.pipeline.has_waiting());
            let barriers_at = self.barriers_deadline();
            tokio::select! {
                biased;
                Some(done) = self.pipeline.creates.next(), if !self.pipeline.creates.is_empty() => self.on_create_done(done),
                Some(done) = self.collector.passes.next(), if !self.collector.passes.is_empty() => self.on_pass(done),
                Some(done) = self.markers.running.next(), if !self.markers.running.is_empty() => self.on_marker_done(done),
                command = rx.recv_async() => match command {
                    Ok(command) => self.handle(command),
                    Err(_) => {
                        self.crash();
                        return;
                    }
                },
                () = sleep_until(seal_at), if seal_at.is_some() => self.seal_at = None,
                () = sleep_until(kept_at), if kept_at.is_some() => self.on_kept_tick(),
                () = sleep_until(retry_at), if retry_at.is_some() => {}
                () = sleep_until(barriers_at), if barriers_at.is_some() => self.refuse_barriers(),
                () = sleep_until(collect_at), if collect_at.is_some() => self.on_collect_tick(),
                () = sleep_until(abandon_at), if abandon_at.is_some() => self.abandon_collection(),
                () = sleep_until(markers_at), if markers_at.is_some() => self.start_markers(),
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Append {
                entries,
                arrived,
                reply,
            } => self.on_append(entries, arrived, reply),
            Command::Obsolete { region, id, reply } => {
                let _ = reply.send(self.on_obsolete(region, id));
            }
            Command::RaiseFloor {
                region,
                floor,
                reply,
            } => {
                let _ = reply.send(self.on_raise_floor(region, floor));
            }
            Command::WaitDurable { region, id, reply } => self.on_wait_durable(region, id, reply),
            Command::Release { region, reply } => self.on_release(region, reply),
            Command::Flush { reply } => self.on_flush(reply),
            Command::Segments {
                region,
                from,
                limit,
                reply,
            } => {
                let _ = reply.send(self.on_segments(region, from, limit));
            }
            Command::Deleted { sequence, reply } => {
                let _ = reply.send(Ok(self.collector.was_deleted(sequence)));
            }
            Command::Stop { reply } => self.on_stop(reply),
            Command::Regions { reply } => {
                let _ = reply.send(Ok(self.catalog.region_infos(self.regions.released())));
            }
            Command::Pinning { reply } => {
                let _ = reply.send(self.on_pinning());
            }
            Command::FlushRequests { reply } => {
                let _ = reply.send(Ok(self.pins.subscribe()));
            }
            Command::Holds { reply } => {
                let _ = reply.send(Ok(self.collector.holds.clone()));
            }
            Command::ReplayPage {
                wanted,
                after,
                limit,
                reply,
            } => {
                let _ = reply.send(self.on_replay_page(&wanted, after, limit));
            }
        }
    }

    /// After every event: start what may start, then let the policy seal
    /// (and start again for what it sealed).
    fn progress(&mut self, rx: &flume::Receiver<Command>) {
        loop {
            if self.poisoned.is_some() {
                return;
            }
            self.start_creates();
            if !self.apply_policy(rx) {
                break;
            }
        }
        self.publish_unpersisted();
    }

    /// The error every request gets in the current state, if any.
    /// While the store has failed for `max_unpersisted_age`, barriers
    /// (`flush`, `wait_durable` of an entry not yet durable) answer the
    /// retryable `Failing` instead of waiting out the outage: the backlog
    /// stays and is repeated, and the caller calls again. Within the bound
    /// they wait, so a brief failure costs a barrier only time.
    fn barrier_refusal(&self) -> Option<Error> {
        let failing = self.backlog.failing.as_ref()?;
        let age = self.config.max_unpersisted_age;
        (failing.since.elapsed() >= age).then(|| Error::Failing {
            reason: format!(
                "{}; the store has failed for {age:?} (max_unpersisted_age): the backlog stays \
                 and is repeated, call again",
                failing.reason
            )
            .into(),
        })
    }

    /// When the barriers waiting now are refused (see
    /// [`Self::barrier_refusal`]): only while the store fails and one waits.
    fn barriers_deadline(&self) -> Option<Instant> {
        let failing = self.backlog.failing.as_ref()?;
        let waiting = self
            .open
            .iter()
            .flat_map(|o| o.waiters.iter())
            .chain(self.pipeline.iter().flat_map(|b| b.waiters.iter()))
            .any(|w| matches!(w, Waiter::Durable { .. }))
            || !self.backlog.stalled.is_empty();
        waiting.then_some(failing.since + self.config.max_unpersisted_age)
    }

    /// Answers every waiting barrier and held-back append with
    /// [`Self::barrier_refusal`].
    fn refuse_barriers(&mut self) {
        let Some(error) = self.barrier_refusal() else {
            return;
        };
        let barrier = |w: &Waiter| matches!(w, Waiter::Durable { .. });
        let mut refused = Vec::new();
        if let Some(open) = self.open.as_mut() {
            let (barriers, others) = std::mem::take(&mut open.waiters)
                .into_iter()
                .partition(barrier);
            open.waiters = others;
            refused.extend::<Vec<Waiter>>(barriers);
        }
        for sealed in self.pipeline.iter_mut() {
            let (barriers, others) = std::mem::take(&mut sealed.waiters)
                .into_iter()
                .partition(barrier);
            sealed.waiters = others;
            refused.extend::<Vec<Waiter>>(barriers);
        }
        tracing::warn!(barriers = refused.len(), appends = self.backlog.stalled.len(), %error,
            "refusing barriers and held-back appends while the store fails");
        for waiter in refused {
            waiter.fail(error.clone());
        }
        // An append held back by the full backlog was never admitted: it
        // is refused as one arriving now would be, rather than waiting out
        // the outage (no id was handed out, nothing is lost).
        self.metrics
            .rejected_appends
            .increment(self.backlog.stalled.len() as u64);
        self.fail_stalled(&error);
    }

    fn refusal(&self) -> Option<Error> {
        if let Some(e) = &self.poisoned {
            return Some(e.clone());
        }
        if self.stopping.is_some() {
            return Some(Error::stopped());
        }
        None
    }

    /// Every handle is gone: stop creating at once. Creates in flight are
    /// abandoned; their objects, if they land, are orphans or are adopted by
    /// the next recovery exactly as after a crash.
    fn crash(&mut self) {
        self.pipeline.abort_all();
        for pass in self.collector.passes.iter() {
            pass.abort();
        }
        self.abort_markers();
        tracing::debug!(prefix = %self.prefix, "every handle dropped; the actor ends");
    }

    /// Entries of `region` at or below this are hidden from reads: the
    /// higher of the engine's watermark and the region's release.
    fn hidden_through(&self, region: RegionId) -> EntryId {
        self.catalog
            .watermark(region)
            .max(self.regions.released_through(region))
    }

    /// Payload bytes admitted but not yet durable.
    fn unpersisted_bytes(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| o.batch.payload_bytes) + self.pipeline.payload_bytes()
    }

    /// Entries admitted but not yet durable or given up.
    fn pending_entries(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| o.batch.entries) + self.pipeline.entries()
    }

    fn publish_unpersisted(&self) {
        self.metrics
            .unpersisted_bytes
            .set(self.unpersisted_bytes() as f64);
    }

    /// Remembers that the batch of `sequence` failed.
    fn remember_failed(&mut self, sequence: u64) {
        self.failed.insert(sequence);
        while self.failed.len() > FAILED_REMEMBERED {
            self.failed.pop_first();
        }
    }
}

fn check_region(region: RegionId) -> Result<(), Error> {
    if format::is_reserved_region(region) {
        return Err(Error::invalid(format!(
            "region {region} is reserved (u64::MAX - 255 for flush marks, u64::MAX for release records)"
        )));
    }
    Ok(())
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => futures::future::pending().await,
    }
}
