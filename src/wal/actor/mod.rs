//! The actor: the one task that owns the store's mutable state.
//!
//! It owns the open batch, the catalog, the watermarks, the release records
//! and the upload pipeline. Callers send a [`Command`] over a flume channel
//! and await a oneshot reply. The loop reacts to a command, a finished
//! create, the flush timer of the open batch, the timer of kept release
//! records, and the retry timer of a failing store.
//!
//! The pipeline holds sealed batches in sequence order. Up to
//! `max_inflight_creates` of them are being created at once (started in
//! sequence order); they are indexed and acknowledged strictly in sequence
//! order. Each object links to the batch sealed before it, or, when the
//! pipeline is empty, to the last indexed object.
//!
//! Outcomes of a create, by ack mode:
//!
//! | event                                 | durable mode                              | enqueued mode                                |
//! |---------------------------------------|-------------------------------------------|----------------------------------------------|
//! | durable                               | indexed in order, callers acked           | indexed in order; the failing state ends     |
//! | failed (transient or permanent)       | every batch not yet indexed fails; serving| kept, repeated with the same bytes after a growing delay; *failing* |
//! | earlier-epoch object at the sequence  | every batch not yet indexed fails; serving| poisoned (acknowledged ids cannot move)      |
//! | same-or-later epoch object (conflict) | poisoned                                  | poisoned                                     |
//! | encode or catalog error               | poisoned                                  | poisoned                                     |
//! | last sequence indexed                 | acked, then poisoned                      | acked, then poisoned                         |
//!
//! Failed sequences are never handed out again; late completions of failed
//! batches are ignored (their objects are orphans). Release records of a
//! failed batch are kept and sealed into the next object.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::error::Error;
use crate::format::{Tail, RELEASE_REGION};
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::Storage;
use crate::{EntryId, RegionId};

use super::batch::OpenBatch;
use super::create::CreateOutcome;
use super::policy::{SealPolicy, SealReason};
use super::reader::SegmentPage;
use super::{Launch, Shared};

mod admit;
mod collect;
mod index;
mod pipeline;
mod stop;

/// The largest payload one append may carry.
pub(crate) const MAX_APPEND_BYTES: u64 = 1 << 30;

/// Failed creates a stop repeats before it gives the backlog up.
const STOP_ATTEMPTS: u32 = 5;

/// The first delay before a failed create is repeated; it doubles per
/// failure up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(10);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

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
    WaitDurable {
        region: RegionId,
        id: EntryId,
        reply: Reply<()>,
    },
    Release {
        region: RegionId,
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
}

/// Someone waiting for a batch to become durable and indexed.
pub(crate) enum Waiter {
    /// A durable-mode append.
    Append {
        ids: Vec<EntryId>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    },
    /// A `wait_durable` barrier.
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlightState {
    /// Sealed, waiting for a free create slot (or for the retry delay).
    Waiting,
    /// Its create is running.
    Running,
    /// Durable, waiting for earlier batches to be indexed.
    Durable,
}

/// A sealed batch in the pipeline.
struct Sealed {
    sequence: u64,
    bytes: Bytes,
    tail: Tail,
    waiters: Vec<Waiter>,
    opened_at: Instant,
    sealed_at: Instant,
    entries: u64,
    payload_bytes: u64,
    last_ids: Vec<(RegionId, EntryId)>,
    releases: BTreeMap<RegionId, EntryId>,
    state: FlightState,
    abort: Option<AbortHandle>,
}

impl Sealed {
    fn fail_waiters(&mut self, error: &Error) {
        for waiter in self.waiters.drain(..) {
            waiter.fail(error.clone());
        }
    }
}

/// An append held back by the backlog bounds (enqueued mode).
struct Stalled {
    entries: Vec<(RegionId, Bytes)>,
    arrived: Instant,
    reply: Reply<Vec<EntryId>>,
}

/// The failing state of enqueued mode.
#[derive(Debug, Clone)]
struct Failing {
    reason: Arc<str>,
    failures: u32,
    retry_at: Instant,
}

/// Acknowledged data dropped before it became durable.
#[derive(Debug, Clone, Default)]
struct Loss {
    entries: u64,
    bytes: u64,
    releases: u64,
    reason: Option<String>,
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
    policy: SealPolicy,
    epoch: u64,
    metrics: StoreMetrics,
    shared: Arc<Shared>,
    catalog: Catalog,
    /// Per region, the id through which entries are obsolete.
    watermarks: HashMap<RegionId, EntryId>,
    /// Per region, the largest id ever handed out.
    assigned: HashMap<RegionId, EntryId>,
    /// Regions released in this life or by an indexed record, and through which id.
    released: HashMap<RegionId, EntryId>,
    /// The sequence of the next batch to open.
    next_sequence: u64,
    open: Option<Open>,
    /// Release records waiting for the next object (of failed or refused releases).
    kept_releases: BTreeMap<RegionId, EntryId>,
    /// When the kept release records are sealed if no batch takes them sooner.
    kept_deadline: Option<Instant>,
    pipeline: VecDeque<Sealed>,
    creates: FuturesUnordered<JoinHandle<(u64, CreateOutcome)>>,
    /// The largest boundary carried by an object sealed so far.
    boundary: u64,
    stalled: VecDeque<Stalled>,
    failing: Option<Failing>,
    poisoned: Option<Error>,
    /// Set once the last sequence was sealed: no batch can be opened.
    exhausted: bool,
    stopping: Option<Stopping>,
    lost: Loss,
    /// The collection pass in flight (at most one).
    passes: FuturesUnordered<JoinHandle<collect::Pass>>,
    /// Every object below this was deleted.
    collected_boundary: u64,
    /// The boundary of the latest pass started: objects below it are being
    /// (or were) deleted.
    collecting_below: u64,
    /// Per region, the largest id that is durable and indexed (it survives
    /// the collection of the region's objects).
    durable_ids: HashMap<RegionId, EntryId>,
    /// Sequences collection deleted (the latest ones), for reads.
    deleted: BTreeSet<u64>,
    /// When collection runs again (a retry, or the idle tick).
    collect_at: Option<Instant>,
    /// The fence probe in flight, by the last sequence it covers.
    probing: Option<u64>,
    probes: FuturesUnordered<JoinHandle<(u64, ProbeResult)>>,
    /// Failed probes in a row, and when the next one starts.
    probe_failures: u32,
    probe_retry_at: Option<Instant>,
}

/// What a fence probe found: a newer epoch, or none.
pub(crate) type ProbeResult = Result<Option<u64>, crate::storage::StorageError>;

impl Actor {
    pub(crate) fn new(start: Start) -> Self {
        let Start {
            launch,
            shared,
            metrics,
        } = start;
        let boundary = launch.catalog.tip().map_or(0, |t| t.reclaim_boundary);
        let released = launch.catalog.released().clone();
        let assigned: HashMap<RegionId, EntryId> = launch
            .catalog
            .regions()
            .into_iter()
            .map(|r| (r, launch.catalog.last_id(r)))
            .collect();
        Actor {
            policy: SealPolicy {
                max_batch_bytes: launch.config.max_batch_bytes,
                flush_interval: launch.config.flush_interval,
            },
            storage: launch.storage,
            prefix: launch.prefix,
            config: launch.config,
            epoch: launch.epoch,
            metrics,
            shared,
            catalog: launch.catalog,
            watermarks: launch.watermarks,
            durable_ids: assigned.clone(),
            assigned,
            released,
            next_sequence: launch.next_sequence,
            open: None,
            kept_releases: BTreeMap::new(),
            kept_deadline: None,
            pipeline: VecDeque::new(),
            creates: FuturesUnordered::new(),
            boundary,
            stalled: VecDeque::new(),
            failing: None,
            poisoned: None,
            exhausted: false,
            stopping: None,
            lost: Loss::default(),
            passes: FuturesUnordered::new(),
            collected_boundary: 0,
            collecting_below: 0,
            deleted: BTreeSet::new(),
            collect_at: None,
            probing: None,
            probes: FuturesUnordered::new(),
            probe_failures: 0,
            probe_retry_at: None,
        }
    }

    /// Runs until stopped, or until every handle is gone (a crash, as far as
    /// the log is concerned: nothing more is created).
    pub(crate) async fn run(mut self, rx: flume::Receiver<Command>) {
        self.maybe_collect();
        loop {
            if self.stop_is_complete() {
                let result = self.finish_stop();
                drop(self);
                stop::answer_stopped(rx, result).await;
                return;
            }
            let flush_at = self
                .open
                .as_ref()
                .filter(|o| !o.batch.is_empty())
                .map(|o| self.policy.deadline(o.batch.opened_at));
            let kept_at = self.kept_deadline;
            let collect_at = self.collect_at;
            let probe_at = self.probe_retry_at;
            // Only while a create could start: with every slot busy, a
            // completion starts the next one (a due timer would spin).
            let retry_at = self
                .failing
                .as_ref()
                .filter(|_| self.has_startable())
                .map(|f| f.retry_at);
            tokio::select! {
                biased;
                Some(done) = self.creates.next(), if !self.creates.is_empty() => self.on_join(done),
                Some(done) = self.probes.next(), if !self.probes.is_empty() => self.on_probe(done),
                Some(done) = self.passes.next(), if !self.passes.is_empty() => self.on_pass(done),
                command = rx.recv_async() => match command {
                    Ok(command) => self.handle(command),
                    Err(_) => {
                        self.crash();
                        return;
                    }
                },
                () = sleep_until(flush_at), if flush_at.is_some() => self.seal(SealReason::Timer),
                () = sleep_until(kept_at), if kept_at.is_some() => self.on_kept_tick(),
                () = sleep_until(retry_at), if retry_at.is_some() => self.start_creates(),
                () = sleep_until(collect_at), if collect_at.is_some() => self.on_collect_tick(),
                () = sleep_until(probe_at), if probe_at.is_some() => self.on_probe_retry(),
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
            Command::WaitDurable { region, id, reply } => self.on_wait_durable(region, id, reply),
            Command::Release { region, reply } => self.on_release(region, reply),
            Command::Segments {
                region,
                from,
                limit,
                reply,
            } => {
                let _ = reply.send(self.on_segments(region, from, limit));
            }
            Command::Deleted { sequence, reply } => {
                let _ = reply.send(Ok(self.was_deleted(sequence)));
            }
            Command::Stop { reply } => self.on_stop(reply),
            Command::Regions { reply } => {
                let _ = reply.send(Ok(self
                    .catalog
                    .region_infos(&self.watermarks, &self.released)));
            }
        }
    }

    /// The error every request gets in the current state, if any.
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
        for sealed in &self.pipeline {
            if let Some(abort) = &sealed.abort {
                abort.abort();
            }
        }
        for pass in self.passes.iter() {
            pass.abort();
        }
        for probe in self.probes.iter() {
            probe.abort();
        }
        tracing::debug!(prefix = %self.prefix, "every handle dropped; the actor ends");
    }

    fn has_running(&self) -> bool {
        self.pipeline
            .iter()
            .any(|s| s.state == FlightState::Running)
    }

    /// Whether a batch waits for its create within the window of batches
    /// that may be created (the first `max_inflight_creates`).
    fn has_startable(&self) -> bool {
        self.pipeline
            .iter()
            .take(self.config.max_inflight_creates)
            .any(|s| s.state == FlightState::Waiting)
    }

    /// Payload bytes admitted but not yet durable.
    fn unpersisted_bytes(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| o.batch.payload_bytes)
            + self.pipeline.iter().map(|s| s.payload_bytes).sum::<u64>()
    }

    fn publish_unpersisted(&self) {
        self.metrics
            .unpersisted_bytes
            .set(self.unpersisted_bytes() as f64);
    }
}

fn check_region(region: RegionId) -> Result<(), Error> {
    if region == RELEASE_REGION {
        return Err(Error::invalid(format!(
            "region {region} (u64::MAX) is reserved for release records"
        )));
    }
    Ok(())
}

/// The delay before the next attempt after `failures` failed creates.
fn retry_delay(failures: u32) -> Duration {
    FIRST_RETRY_DELAY
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX_RETRY_DELAY)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => futures::future::pending().await,
    }
}
