//! The actor: the one task that owns the store's mutable state.
//!
//! It owns the open batch, the catalog, the watermarks and the upload
//! pipeline. Callers send a [`Command`] over a flume channel and await a
//! oneshot reply. The loop reacts to three things: a command, a finished
//! create, and the flush timer of the open batch.
//!
//! The pipeline holds sealed batches in sequence order. Up to
//! `max_inflight_creates` of them are being created at once (started in
//! sequence order); they are indexed and acknowledged strictly in sequence
//! order, so an acknowledged entry never depends on an object that is not
//! durable. Each object links to the batch sealed before it (or, when the
//! pipeline is empty, to the last indexed object).
//!
//! Outcomes (durable mode):
//!
//! | event                                   | pipeline                             | store     |
//! |-----------------------------------------|--------------------------------------|-----------|
//! | create durable                          | indexed in order, callers acked      | serving   |
//! | create failed (transient or permanent)  | every batch not yet indexed fails    | serving   |
//! | earlier-epoch object at the sequence    | every batch not yet indexed fails    | serving   |
//! | same-or-later epoch object (conflict)   | everything fails                     | poisoned  |
//! | catalog refuses an object, encode fails | everything fails                     | poisoned  |
//! | last sequence indexed                   | acked                                | poisoned  |
//!
//! Failed sequences are never handed out again; later completions of failed
//! batches are ignored (their objects are orphans).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinError, JoinHandle};
use tokio::time::Instant;
use tracing::Instrument;

use crate::catalog::{Catalog, IndexedObject};
use crate::config::{AckMode, Config};
use crate::error::Error;
use crate::format::{self, Header, Link, Tail, TailDecode, MAX_POSITION, RELEASE_REGION};
use crate::metrics as m;
use crate::storage::keys::Prefix;
use crate::storage::Storage;
use crate::{EntryId, RegionId};

use super::batch::{positions_needed, OpenBatch};
use super::create::{create_object, CreateOutcome};
use super::policy::{SealPolicy, SealReason};
use super::reader::SegmentPage;
use super::Shared;

/// The largest payload one append may carry.
pub(crate) const MAX_APPEND_BYTES: u64 = 1 << 30;

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
    Segments {
        region: RegionId,
        from: EntryId,
        limit: usize,
        reply: Reply<SegmentPage>,
    },
    Stop {
        reply: Reply<()>,
    },
}

/// Someone waiting for a batch to become durable.
enum Waiter {
    Append {
        ids: Vec<EntryId>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    },
    Durable {
        reply: Reply<()>,
    },
}

impl Waiter {
    fn succeed(self) {
        match self {
            Waiter::Append {
                ids,
                arrived,
                reply,
            } => {
                metrics::histogram!(m::APPEND_ACK_SECONDS).record(arrived.elapsed().as_secs_f64());
                let _ = reply.send(Ok(ids));
            }
            Waiter::Durable { reply } => {
                let _ = reply.send(Ok(()));
            }
        }
    }

    fn fail(self, error: Error) {
        match self {
            Waiter::Append { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Waiter::Durable { reply } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlightState {
    /// Sealed, waiting for a free create slot.
    Waiting,
    /// Its create is running.
    Running,
    /// Durable, waiting for earlier batches to be indexed.
    Durable,
}

/// A sealed batch in the pipeline.
struct Sealed {
    sequence: u64,
    link: Option<Link>,
    bytes: Bytes,
    tail: Tail,
    waiters: Vec<Waiter>,
    sealed_at: Instant,
    entries: u64,
    last_ids: Vec<(RegionId, EntryId)>,
    state: FlightState,
    abort: Option<AbortHandle>,
}

impl Sealed {
    fn fail(&mut self, error: &Error) {
        for waiter in self.waiters.drain(..) {
            waiter.fail(error.clone());
        }
    }
}

/// What the actor starts from.
pub(crate) struct Start {
    pub(crate) storage: Storage,
    pub(crate) prefix: Prefix,
    pub(crate) config: Config,
    pub(crate) epoch: u64,
    pub(crate) catalog: Catalog,
    pub(crate) watermarks: HashMap<RegionId, EntryId>,
    pub(crate) next_sequence: u64,
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Actor {
    storage: Storage,
    prefix: Prefix,
    config: Config,
    policy: SealPolicy,
    epoch: u64,
    catalog: Catalog,
    watermarks: HashMap<RegionId, EntryId>,
    /// The sequence of the next batch to open.
    next_sequence: u64,
    open: Option<OpenBatch>,
    open_waiters: Vec<Waiter>,
    pipeline: VecDeque<Sealed>,
    creates: FuturesUnordered<JoinHandle<(u64, CreateOutcome)>>,
    /// The largest boundary carried by an object sealed so far.
    boundary: u64,
    poisoned: Option<Error>,
    /// Set once the last sequence was sealed: no batch can be opened.
    exhausted: bool,
    stopping: bool,
    stop_replies: Vec<Reply<()>>,
    shared: Arc<Shared>,
}

impl Actor {
    pub(crate) fn new(start: Start) -> Self {
        let boundary = start.catalog.tip().map_or(0, |t| t.reclaim_boundary);
        Actor {
            policy: SealPolicy {
                max_batch_bytes: start.config.max_batch_bytes,
                flush_interval: start.config.flush_interval,
            },
            storage: start.storage,
            prefix: start.prefix,
            config: start.config,
            epoch: start.epoch,
            catalog: start.catalog,
            watermarks: start.watermarks,
            next_sequence: start.next_sequence,
            open: None,
            open_waiters: Vec::new(),
            pipeline: VecDeque::new(),
            creates: FuturesUnordered::new(),
            boundary,
            poisoned: None,
            exhausted: false,
            stopping: false,
            stop_replies: Vec::new(),
            shared: start.shared,
        }
    }

    /// Runs until stopped, or until every handle is gone (a crash, as far as
    /// the log is concerned: nothing more is created).
    pub(crate) async fn run(mut self, rx: flume::Receiver<Command>) {
        loop {
            if self.stopping && !self.has_running() {
                self.finish_stop();
                return;
            }
            let deadline = self
                .open
                .as_ref()
                .filter(|b| !b.is_empty())
                .map(|b| self.policy.deadline(b.opened_at));
            tokio::select! {
                biased;
                Some(done) = self.creates.next(), if !self.creates.is_empty() => self.on_join(done),
                command = rx.recv_async() => match command {
                    Ok(command) => self.handle(command),
                    Err(_) => {
                        self.crash();
                        return;
                    }
                },
                () = sleep_until(deadline), if deadline.is_some() => self.seal(SealReason::Timer),
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
            Command::Segments {
                region,
                from,
                limit,
                reply,
            } => {
                let _ = reply.send(self.on_segments(region, from, limit));
            }
            Command::Stop { reply } => self.on_stop(reply),
        }
    }

    /// The error every request gets in the current state, if any.
    fn refusal(&self) -> Option<Error> {
        if let Some(e) = &self.poisoned {
            return Some(e.clone());
        }
        if self.stopping {
            return Some(Error::stopped());
        }
        None
    }

    fn on_append(&mut self, entries: Vec<(RegionId, Bytes)>, arrived: Instant, reply: Reply<Vec<EntryId>>) {
        if let Some(e) = self.refusal() {
            let _ = reply.send(Err(e));
            return;
        }
        if entries.is_empty() {
            let _ = reply.send(Ok(Vec::new()));
            return;
        }
        if let Err(e) = check_append(&entries) {
            let _ = reply.send(Err(e));
            return;
        }
        let needed = positions_needed(&entries);
        if let Some((region, n)) = needed.iter().find(|(_, n)| **n > MAX_POSITION) {
            let _ = reply.send(Err(Error::invalid(format!(
                "an append of {n} entries to region {region} exceeds the {MAX_POSITION} positions of one object"
            ))));
            return;
        }
        if self.open.as_ref().is_some_and(|b| !b.has_positions_for(&needed)) {
            self.seal(SealReason::Positions);
        }
        let batch = match self.open_batch(arrived) {
            Ok(batch) => batch,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let regions: Vec<RegionId> = entries.iter().map(|(region, _)| *region).collect();
        let ids = batch.admit(entries);
        let encoded_bytes = batch.encoded_bytes();
        let full = self.policy.is_full(encoded_bytes);
        match self.config.ack_mode {
            AckMode::Durable => self.open_waiters.push(Waiter::Append {
                ids,
                arrived,
                reply,
            }),
            AckMode::Enqueued => {
                let acked: Vec<_> = regions.into_iter().zip(ids.iter().copied()).collect();
                self.shared.acknowledge(&acked);
                let _ = reply.send(Ok(ids));
            }
        }
        if full {
            self.seal(SealReason::Full);
        }
    }

    /// The open batch, opened at the next sequence if there is none.
    fn open_batch(&mut self, now: Instant) -> Result<&mut OpenBatch, Error> {
        if self.open.is_none() {
            if self.exhausted || self.next_sequence > format::MAX_SEQUENCE {
                return Err(Error::Poisoned {
                    reason: "no sequence is left in this prefix".into(),
                });
            }
            self.open = Some(OpenBatch::new(self.next_sequence, now));
            self.next_sequence += 1;
        }
        self.open.as_mut().ok_or_else(|| Error::invalid("no open batch"))
    }

    fn on_obsolete(&mut self, region: RegionId, id: EntryId) -> Result<(), Error> {
        if let Some(e) = self.refusal() {
            return Err(e);
        }
        check_region(region)?;
        if format::sequence_of(id) >= format::MAX_SEQUENCE {
            return Err(Error::invalid(format!(
                "entry id {id} is beyond the last usable sequence"
            )));
        }
        let watermark = self.watermarks.entry(region).or_insert(0);
        *watermark = (*watermark).max(id);
        // New ids must never fall at or below a watermark handed in from a
        // previous life of the store.
        self.next_sequence = self.next_sequence.max(format::sequence_of(id) + 1);
        Ok(())
    }

    fn on_wait_durable(&mut self, region: RegionId, id: EntryId, reply: Reply<()>) {
        if let Some(e) = &self.poisoned {
            let _ = reply.send(Err(e.clone()));
            return;
        }
        if let Err(e) = check_region(region) {
            let _ = reply.send(Err(e));
            return;
        }
        let sequence = format::sequence_of(id);
        if id == 0 || id <= self.catalog.last_id(region) {
            let _ = reply.send(Ok(()));
            return;
        }
        if let Some(sealed) = self.pipeline.iter_mut().find(|s| s.sequence == sequence) {
            sealed.waiters.push(Waiter::Durable { reply });
            return;
        }
        if self.open.as_ref().is_some_and(|b| b.sequence == sequence) && !self.stopping {
            self.open_waiters.push(Waiter::Durable { reply });
            return;
        }
        let error = if sequence < self.next_sequence {
            Error::NotDurable {
                reason: format!("entry {id} of region {region} is not durable: its batch failed or it was never assigned").into(),
            }
        } else {
            Error::invalid(format!("entry {id} of region {region} was never assigned"))
        };
        let _ = reply.send(Err(error));
    }

    fn on_segments(&self, region: RegionId, from: EntryId, limit: usize) -> Result<SegmentPage, Error> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        check_region(region)?;
        let watermark = self.watermarks.get(&region).copied().unwrap_or(0);
        let from = from.max(watermark.saturating_add(1));
        Ok(SegmentPage {
            segments: self.catalog.segments_from(region, from, limit),
            watermark,
        })
    }

    fn on_stop(&mut self, reply: Reply<()>) {
        self.stop_replies.push(reply);
        if self.stopping {
            return;
        }
        self.stopping = true;
        tracing::info!(prefix = %self.prefix, "stopping");
        // Durable mode: the open batch and the creates not yet started are
        // dropped; creates in flight run to completion.
        let stopped = Error::Stopped {
            detail: Some("the batch was dropped by stop before its create started".into()),
        };
        self.open = None;
        for waiter in self.open_waiters.drain(..) {
            waiter.fail(stopped.clone());
        }
        self.pipeline.retain_mut(|sealed| {
            if sealed.state == FlightState::Waiting {
                sealed.fail(&stopped);
                false
            } else {
                true
            }
        });
    }

    fn finish_stop(&mut self) {
        let result = Ok(());
        self.shared.set_stop_result(result.clone());
        for reply in self.stop_replies.drain(..) {
            let _ = reply.send(result.clone());
        }
        tracing::info!(prefix = %self.prefix, "stopped");
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
        tracing::debug!(prefix = %self.prefix, "every handle dropped; the actor ends");
    }

    fn has_running(&self) -> bool {
        self.pipeline.iter().any(|s| s.state == FlightState::Running)
    }

    /// Seals the open batch (if it has entries) into the pipeline.
    fn seal(&mut self, reason: SealReason) {
        let Some(batch) = self.open.take_if(|b| !b.is_empty()) else {
            return;
        };
        let waiters = std::mem::take(&mut self.open_waiters);
        let sequence = batch.sequence;
        let span = tracing::debug_span!("seal", sequence, reason = reason.as_str());
        let _guard = span.enter();
        let link = match self.pipeline.back() {
            Some(previous) => Some(Link {
                sequence: previous.sequence,
                epoch: self.epoch,
            }),
            None => self.catalog.tip().map(|t| Link {
                sequence: t.sequence,
                epoch: t.epoch,
            }),
        };
        let reclaim_boundary = self.reclaim_boundary(sequence);
        let entries = batch.entries;
        let last_ids: Vec<_> = batch.last_ids().collect();
        let object = batch.into_object(Header {
            sequence,
            epoch: self.epoch,
            link,
            reclaim_boundary,
        });
        let encoded = format::encode(&object).and_then(|bytes| {
            match format::decode_tail(&bytes, bytes.len() as u64)? {
                TailDecode::Complete(tail) => Ok((bytes, tail)),
                TailDecode::NeedFooter { .. } => Err(format::FormatError::invalid(
                    "tail",
                    0,
                    "a whole object's tail must decode from the object",
                )),
            }
        });
        let (bytes, tail) = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                let reason = format!("encoding object {sequence} failed: {e}");
                for waiter in waiters {
                    waiter.fail(Error::Poisoned {
                        reason: reason.clone().into(),
                    });
                }
                self.poison(reason);
                return;
            }
        };
        self.boundary = reclaim_boundary;
        if sequence == format::MAX_SEQUENCE {
            self.exhausted = true;
        }
        tracing::debug!(bytes = bytes.len(), entries, "sealed");
        self.pipeline.push_back(Sealed {
            sequence,
            link,
            bytes,
            tail,
            waiters,
            sealed_at: Instant::now(),
            entries,
            last_ids,
            state: FlightState::Waiting,
            abort: None,
        });
        self.start_creates();
    }

    /// The boundary an object sealed now at `sequence` carries: the lowest
    /// sequence that may still hold a live entry, indexed or in the pipeline,
    /// never below a boundary already carried.
    fn reclaim_boundary(&self, sequence: u64) -> u64 {
        let watermarks = &self.watermarks;
        let live = self.catalog.first_live_sequence(|region| {
            watermarks.get(&region).copied().unwrap_or(0)
        });
        let pending = self.pipeline.front().map(|s| s.sequence);
        [live, pending, Some(sequence)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(sequence)
            .max(self.boundary)
    }

    /// Starts creates for waiting batches while slots are free, in sequence order.
    fn start_creates(&mut self) {
        let mut running = self
            .pipeline
            .iter()
            .filter(|s| s.state == FlightState::Running)
            .count();
        for sealed in self.pipeline.iter_mut() {
            if running >= self.config.max_inflight_creates {
                break;
            }
            if sealed.state != FlightState::Waiting {
                continue;
            }
            let storage = self.storage.clone();
            let key = self.prefix.object_key(sealed.sequence);
            let bytes = sealed.bytes.clone();
            let epoch = self.epoch;
            let sequence = sealed.sequence;
            let span = tracing::debug_span!("create", key = %key, bytes = bytes.len());
            let handle = tokio::spawn(
                async move { (sequence, create_object(&storage, &key, bytes, epoch).await) }
                    .instrument(span),
            );
            sealed.abort = Some(handle.abort_handle());
            sealed.state = FlightState::Running;
            self.creates.push(handle);
            running += 1;
        }
    }

    fn on_join(&mut self, done: Result<(u64, CreateOutcome), JoinError>) {
        match done {
            Ok((sequence, outcome)) => self.on_created(sequence, outcome),
            Err(e) if e.is_cancelled() => {}
            Err(e) => self.poison(format!("a create task failed: {e}")),
        }
    }

    fn on_created(&mut self, sequence: u64, outcome: CreateOutcome) {
        let Some(position) = self
            .pipeline
            .iter()
            .position(|s| s.sequence == sequence && s.state == FlightState::Running)
        else {
            tracing::debug!(sequence, ?outcome, "late completion of a failed batch: an orphan");
            return;
        };
        let key = self.prefix.object_key(sequence);
        match outcome {
            CreateOutcome::Durable => {
                if let Some(sealed) = self.pipeline.get_mut(position) {
                    sealed.state = FlightState::Durable;
                    sealed.abort = None;
                }
                metrics::counter!(m::CREATED_OBJECTS_TOTAL).increment(1);
                self.index_ready();
            }
            CreateOutcome::Failed(error) => {
                metrics::counter!(m::CREATE_FAILURES_TOTAL).increment(1);
                tracing::warn!(key, %error, "create failed; failing every batch not yet indexed");
                self.fail_pipeline(Error::Storage { source: error });
            }
            CreateOutcome::Stale { epoch } => {
                metrics::counter!(m::CREATE_CONFLICTS_TOTAL).increment(1);
                tracing::warn!(key, epoch, "an earlier epoch's object holds the sequence");
                self.fail_pipeline(Error::NotDurable {
                    reason: format!("{key} is held by an object of the earlier epoch {epoch}").into(),
                });
            }
            CreateOutcome::Conflict { epoch } => {
                metrics::counter!(m::CREATE_CONFLICTS_TOTAL).increment(1);
                let by = epoch.map_or_else(|| "an unknown writer".to_owned(), |e| format!("epoch {e}"));
                self.poison(format!(
                    "{key} is held by another writer ({by}; ours is {}): another process writes this prefix",
                    self.epoch
                ));
            }
        }
        if self.poisoned.is_none() {
            self.start_creates();
        }
    }

    /// Indexes durable batches at the front of the pipeline, in order.
    fn index_ready(&mut self) {
        while self
            .pipeline
            .front()
            .is_some_and(|s| s.state == FlightState::Durable)
        {
            let Some(mut sealed) = self.pipeline.pop_front() else {
                return;
            };
            let object = IndexedObject {
                sequence: sealed.sequence,
                epoch: self.epoch,
                link: sealed.link,
                reclaim_boundary: sealed.tail.header().reclaim_boundary,
                size: sealed.bytes.len() as u64,
                segments: sealed.tail.segments.clone(),
                releases: Vec::new(),
            };
            if let Err(e) = self.catalog.insert(object) {
                let reason = format!("the catalog refused a created object: {e}");
                sealed.fail(&Error::Poisoned {
                    reason: reason.clone().into(),
                });
                self.poison(reason);
                return;
            }
            debug_assert!(self.catalog.check_invariants().is_ok());
            metrics::histogram!(m::SEAL_TO_DURABLE_SECONDS)
                .record(sealed.sealed_at.elapsed().as_secs_f64());
            metrics::histogram!(m::OBJECT_BYTES).record(sealed.bytes.len() as f64);
            metrics::histogram!(m::OBJECT_ENTRIES).record(sealed.entries as f64);
            metrics::gauge!(m::INDEXED_OBJECTS).set(self.catalog.len() as f64);
            metrics::gauge!(m::INDEXED_BYTES).set(self.catalog.bytes() as f64);
            if self.config.ack_mode == AckMode::Durable {
                self.shared.acknowledge(&sealed.last_ids);
            }
            for waiter in sealed.waiters.drain(..) {
                waiter.succeed();
            }
            if sealed.sequence == format::MAX_SEQUENCE {
                self.poison("the last sequence of this prefix is used: no sequence is left".into());
                return;
            }
        }
    }

    /// Fails every batch not yet indexed; their sequences stay consumed.
    fn fail_pipeline(&mut self, error: Error) {
        for mut sealed in self.pipeline.drain(..) {
            sealed.fail(&error);
        }
    }

    /// Latches the terminal error and fails everything pending.
    fn poison(&mut self, reason: String) {
        if self.poisoned.is_some() {
            return;
        }
        tracing::error!(prefix = %self.prefix, reason, "poisoned");
        metrics::counter!(m::POISONED_TOTAL).increment(1);
        let error = Error::Poisoned {
            reason: reason.into(),
        };
        self.poisoned = Some(error.clone());
        self.open = None;
        for waiter in self.open_waiters.drain(..) {
            waiter.fail(error.clone());
        }
        for mut sealed in self.pipeline.drain(..) {
            sealed.fail(&error);
        }
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

fn check_append(entries: &[(RegionId, Bytes)]) -> Result<(), Error> {
    let mut total: u64 = 0;
    for (region, data) in entries {
        check_region(*region)?;
        let len = data.len() as u64;
        total = total.saturating_add(len);
    }
    if total > MAX_APPEND_BYTES {
        return Err(Error::invalid(format!(
            "an append of {total} bytes exceeds the limit of {MAX_APPEND_BYTES} bytes"
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
