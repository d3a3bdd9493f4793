//! Sealing and creating: the policy's decision, a batch becoming an object,
//! conditional creates, and what a failed create does in each ack mode
//! (repeat the batch, or settle its key with its void: rule K1 of
//! rfcs/0006). Acknowledgement (indexing in run order) is in `ack.rs`.

use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, Header, Link, Object, TailDecode};
use crate::storage::StorageError;
use crate::{EntryId, RegionId};

use super::super::batch::void_object;
use super::super::create::{create_data_object, CreateOutcome};
use super::super::policy::{Decision, OpenState, SealReason};
use super::super::protocol::Taken;
use super::pipeline::{CreateDone, FlightState, Sealed, Void};
use super::{Actor, Failing};

impl Actor {
    /// Asks the policy about the open batch and seals when it says so, or
    /// gathers the commands queued in `rx` first (group commit); whether it
    /// did either (then it is asked again).
    pub(super) fn apply_policy(&mut self, rx: &flume::Receiver<super::Command>) -> bool {
        self.seal_at = None;
        let Some(open) = self.open.as_ref().filter(|o| !o.batch.is_empty()) else {
            return false;
        };
        let state = OpenState {
            encoded_bytes: open.batch.encoded_bytes(),
            opened_at: open.batch.opened_at,
            gathered: open.gathered,
        };
        let can_start = self.backlog.failing.is_none()
            && self.pipeline.could_start(self.config.max_inflight_creates);
        match self
            .policy
            .decide(Instant::now(), Some(state), can_start, rx.len())
        {
            Decision::Seal(reason) => {
                self.seal(reason);
                true
            }
            Decision::Gather(n) => {
                self.gather(rx, n);
                true
            }
            Decision::WaitUntil(at) => {
                self.seal_at = Some(at);
                false
            }
            Decision::Idle => false,
        }
    }

    /// Group commit: handles up to `n` commands already queued before the
    /// open batch is sealed early, so that appends that arrived while the
    /// actor was busy share its object (rfcs/0008, "Group commit"). Only
    /// what is queued now: nothing here waits.
    fn gather(&mut self, rx: &flume::Receiver<super::Command>, n: usize) {
        if let Some(open) = self.open.as_mut() {
            open.gathered = true;
        }
        for _ in 0..n {
            match rx.try_recv() {
                Ok(command) => self.handle(command),
                Err(_) => return,
            }
        }
    }

    /// Seals the open batch (if it holds anything) into the pipeline, with
    /// the flush marks handed in since the last seal.
    pub(super) fn seal(&mut self, reason: SealReason) {
        // Kept release records ride with any batch sealed while the store
        // is not failing.
        if self.backlog.failing.is_none() && !self.kept.records.is_empty() {
            if let Some(open) = self.open.as_mut() {
                open.batch
                    .add_releases(std::mem::take(&mut self.kept.records));
                self.kept.deadline = None;
            }
        }
        if !self.marks.is_empty() {
            if let Some(open) = self.open.as_mut() {
                open.batch.add_marks(std::mem::take(&mut self.marks));
            }
        }
        let collect = reason == SealReason::Collect;
        let Some(open) = self.open.take_if(|o| collect || !o.batch.is_empty()) else {
            return;
        };
        let batch = open.batch;
        let sequence = batch.sequence;
        let span = tracing::debug_span!("seal", sequence, reason = reason.as_str());
        let _guard = span.enter();
        // The run's previous object: the last sealed batch, else the tip.
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
        let reclaim_boundary = self.reclaim_boundary(sequence, &batch.releases);
        let entries = batch.entries;
        let payload_bytes = batch.payload_bytes;
        let opened_at = batch.opened_at;
        let last_ids = batch.last_ids();
        let releases = batch.releases.clone();
        let marks = batch.mark_records();
        let jump = batch.jump.is_some();
        let object = batch.into_object(Header {
            sequence,
            epoch: self.epoch,
            link,
            reclaim_boundary,
        });
        #[cfg(test)]
        let object = test_hooks::maybe_break(self.prefix.as_str(), object);
        #[cfg(test)]
        test_hooks::maybe_panic(self.prefix.as_str(), sequence);
        let (bytes, tail) = match encode(&object) {
            Ok(encoded) => encoded,
            Err(e) => {
                let reason = format!("encoding object {sequence} failed: {e}");
                let error = Error::Poisoned {
                    reason: reason.clone().into(),
                };
                for waiter in open.waiters {
                    waiter.fail(error.clone());
                }
                self.lose(entries, payload_bytes, releases.len() as u64, &reason);
                self.poison(error);
                return;
            }
        };
        self.boundary = reclaim_boundary;
        if sequence == format::MAX_SEQUENCE {
            self.exhausted = true;
        }
        tracing::debug!(
            bytes = bytes.len(),
            entries,
            marks = marks.len(),
            releases = releases.len(),
            "sealed"
        );
        self.pipeline.push(Sealed {
            sequence,
            bytes,
            tail,
            void: None,
            landed_void: false,
            answered: false,
            waiters: open.waiters,
            opened_at,
            sealed_at: Instant::now(),
            entries,
            payload_bytes,
            last_ids,
            marks,
            releases,
            jump,
            state: FlightState::Waiting,
        });
        self.start_creates();
    }

    /// The boundary an object sealed now at `sequence` (carrying the release
    /// records `own`) carries: the lowest sequence that may still hold a live
    /// entry, indexed or in the pipeline, never below a boundary already
    /// carried. A release counts only once its record is in this object or
    /// in one below it on the run (indexed, or sealed before it: a batch
    /// below lands as itself or as its void, and both carry its records; a
    /// release refused while failing does not free anything, issue 10 item
    /// 8). A flush mark counts once handed in: it rides with this object or
    /// one below it.
    pub(super) fn reclaim_boundary(
        &self,
        sequence: u64,
        own: &std::collections::BTreeMap<RegionId, EntryId>,
    ) -> u64 {
        let mut sealed = self.pipeline.releases_through(sequence);
        for (region, through) in own {
            let slot = sealed.entry(*region).or_insert(0);
            *slot = (*slot).max(*through);
        }
        // The catalog's live index knows the engine's watermarks and the
        // indexed records; the records sealed since only raise a few
        // regions' (rfcs/0005, "The reclaim boundary at scale").
        let live = self.catalog.first_live(&sealed);
        let pending = self.pipeline.front().map(|s| s.sequence);
        [live, pending, Some(sequence)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(sequence)
            .max(self.boundary)
    }

    /// Starts creates for waiting batches while slots are free and the
    /// window allows, in sequence order (not before the retry time of a
    /// failing store).
    pub(super) fn start_creates(&mut self) {
        if self.poisoned.is_some() {
            return;
        }
        if self
            .backlog
            .failing
            .as_ref()
            .is_some_and(|f| Instant::now() < f.retry_at)
        {
            return;
        }
        while let Some(sealed) = self
            .pipeline
            .next_startable(self.config.max_inflight_creates)
        {
            let sequence = sealed.sequence;
            let ours = sealed.ours();
            let hedge = self.hedger.starting();
            let task = self.create_task(sequence, ours, hedge);
            self.pipeline.start(sequence, task);
        }
    }

    fn create_task(
        &self,
        sequence: u64,
        ours: Vec<bytes::Bytes>,
        hedge: Option<(std::time::Duration, std::sync::Arc<super::hedge::Budget>)>,
    ) -> impl std::future::Future<Output = CreateDone> + Send + 'static {
        let storage = self.storage.clone();
        let key = self.prefix.object_key(sequence);
        let epoch = self.epoch;
        let hedged = self.metrics.hedged_creates.clone();
        let span = tracing::debug_span!("create", key = %key, bytes = ours.first().map_or(0, |b| b.len()), void = ours.len() > 1);
        async move {
            let started = Instant::now();
            let first = create_data_object(&storage, &key, &ours, epoch);
            tokio::pin!(first);
            let Some((after, budget)) = hedge else {
                let outcome = first.await;
                let took = matches!(outcome, CreateOutcome::Landed(_)).then(|| started.elapsed());
                return CreateDone { sequence, outcome, took };
            };
            tokio::select! {
                outcome = &mut first => {
                    let took = matches!(outcome, CreateOutcome::Landed(_)).then(|| started.elapsed());
                    return CreateDone { sequence, outcome, took };
                }
                () = tokio::time::sleep(after) => {}
            }
            if !budget.try_take() {
                let outcome = first.await;
                let took = matches!(outcome, CreateOutcome::Landed(_)).then(|| started.elapsed());
                return CreateDone { sequence, outcome, took };
            }
            // The same bytes to the same key (rfcs/0006, "Hedged creates"):
            // the first definitive answer wins; a failure waits for the
            // other request.
            hedged.increment(1);
            tracing::debug!(?after, "hedging a slow create");
            let second = create_data_object(&storage, &key, &ours, epoch);
            tokio::pin!(second);
            let outcome = tokio::select! {
                outcome = &mut first => match outcome {
                    CreateOutcome::Failed(_) => second.await,
                    other => other,
                },
                outcome = &mut second => match outcome {
                    CreateOutcome::Failed(_) => first.await,
                    other => other,
                },
            };
            CreateDone { sequence, outcome, took: None }
        }
        .instrument(span)
    }

    pub(super) fn on_create_done(&mut self, done: Result<CreateDone, JoinError>) {
        match done {
            Ok(CreateDone {
                sequence,
                outcome,
                took,
            }) => {
                if let Some(took) = took {
                    self.hedger.landed(took);
                }
                self.on_created(sequence, outcome)
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => self.poison(Error::Poisoned {
                reason: format!("a create task failed: {e}").into(),
            }),
        }
    }

    fn on_created(&mut self, sequence: u64, outcome: CreateOutcome) {
        let Some(sealed) = self.pipeline.finished(sequence) else {
            tracing::debug!(
                sequence,
                ?outcome,
                "late completion of a given-up batch: its key is settled at the next open"
            );
            return;
        };
        let voided = sealed.void.is_some();
        let key = self.prefix.object_key(sequence);
        match outcome {
            CreateOutcome::Landed(which) => {
                sealed.landed(which);
                let landed_void = sealed.landed_void;
                self.pipeline.set_state(sequence, FlightState::Landed);
                self.metrics.created_objects.increment(1);
                if self.backlog.failing.take().is_some() {
                    tracing::info!(key, "a create succeeded: the store is no longer failing");
                    if !self.kept.records.is_empty() && self.kept.deadline.is_none() {
                        self.kept.deadline = Some(Instant::now() + self.config.flush_interval);
                    }
                }
                if landed_void {
                    let definite = Error::NotDurable {
                        reason: format!(
                            "creating {key} failed and its void settled the key: nothing this \
                             append carried is logged"
                        )
                        .into(),
                    };
                    self.fail_callers(sequence, &definite, None);
                }
                self.index_landed();
            }
            CreateOutcome::Failed(error) => {
                self.metrics.create_failures.increment(1);
                let durable = self.config.ack_mode == AckMode::Durable && self.stopping.is_none();
                if durable && !voided {
                    tracing::warn!(key, %error, "create failed; its void settles the key");
                    self.settle_with_void(sequence);
                } else if durable {
                    self.durable_failing(sequence, &key, error);
                } else {
                    self.repeat_later(sequence, &key, error);
                }
            }
            CreateOutcome::Taken { .. } => match outcome.taken(self.epoch) {
                Some(Taken::Fenced { newer }) => {
                    self.metrics.create_conflicts.increment(1);
                    self.poison(Error::fenced(self.epoch, newer));
                }
                _ => self.on_foreign(sequence),
            },
        }
    }

    /// Another writer's object holds a key of our run.
    fn on_foreign(&mut self, sequence: u64) {
        self.metrics.create_conflicts.increment(1);
        let key = self.prefix.object_key(sequence);
        self.poison(Error::Poisoned {
            reason: format!(
                "{key} is held by an object this process did not write and no newer process \
                 walked to: another writer uses this prefix"
            )
            .into(),
        });
    }

    /// Durable mode: the batch of `sequence` will not be created by this
    /// life's requests alone. Its key is settled by its void from now on
    /// (rule K1): the batch without its entries, carrying its release
    /// records and flush marks. Whichever of the two lands decides; its
    /// callers wait for that unless answered already.
    pub(super) fn settle_with_void(&mut self, sequence: u64) {
        let Some(sealed) = self.pipeline.get_mut(sequence) else {
            return;
        };
        let header = *sealed.tail.header();
        let object = void_object(header, &sealed.marks, &sealed.releases);
        match encode(&object) {
            Ok((bytes, tail)) => self.pipeline.void(sequence, Void { bytes, tail }),
            Err(e) => self.poison(Error::Poisoned {
                reason: format!("encoding the void of {sequence} failed: {e}").into(),
            }),
        }
    }

    /// Answers the appends and barriers of the batch of `sequence` with
    /// `error` (once), counting its entries failed. Releases waiting on it
    /// fail with `releases` when given, else keep waiting: its void carries
    /// their records.
    pub(super) fn fail_callers(&mut self, sequence: u64, error: &Error, releases: Option<&Error>) {
        // Answered once: a barrier that came later (a flush) waits for the
        // key to be settled, nothing more.
        let Some(sealed) = self.pipeline.get_mut(sequence).filter(|s| !s.answered) else {
            return;
        };
        let (release_waiters, others): (Vec<_>, Vec<_>) = sealed
            .waiters
            .drain(..)
            .partition(|w| matches!(w, super::Waiter::Release { .. }));
        for waiter in others {
            waiter.fail(error.clone());
        }
        match releases {
            Some(failure) => {
                for waiter in release_waiters {
                    waiter.fail(failure.clone());
                }
            }
            None => sealed.waiters = release_waiters,
        }
        let entries = self.pipeline.answered(sequence);
        self.ledger.failed(entries);
        self.remember_failed(sequence);
    }

    /// Durable mode: a void's create failed. The store is failing: the void
    /// is repeated after a growing delay; new appends and releases are
    /// refused. The failed batch's callers learn now that its fate is open
    /// (it may still land), and everyone waiting on a batch that was never
    /// sent (the open batch, batches waiting for a create) fails now, their
    /// keys settled by voids, rather than waiting out the outage.
    fn durable_failing(&mut self, sequence: u64, key: &str, error: StorageError) {
        self.pipeline.set_state(sequence, FlightState::Waiting);
        let first = self.enter_failing(key, &error);
        let failing = Error::Failing {
            reason: format!("creating {key} failed: {error}; release records stay in the backlog")
                .into(),
        };
        self.fail_callers(sequence, &Error::Storage { source: error }, Some(&failing));
        if !first {
            return;
        }
        if self.open.as_ref().is_some_and(|o| !o.batch.is_empty()) {
            let held = self.backlog.failing.take();
            self.seal(SealReason::Requested);
            self.backlog.failing = held;
        }
        let never_sent: Vec<u64> = self
            .pipeline
            .iter()
            .filter(|b| b.state == FlightState::Waiting && b.void.is_none())
            .map(|b| b.sequence)
            .collect();
        for sequence in never_sent {
            self.settle_with_void(sequence);
            self.fail_callers(sequence, &failing, Some(&failing));
        }
    }

    /// Enters (or stays in) the failing state after a failed create of
    /// `key`; whether it was entered now.
    fn enter_failing(&mut self, key: &str, error: &StorageError) -> bool {
        let reason: std::sync::Arc<str> = format!("creating {key} failed: {error}").into();
        let first = self.backlog.failing.is_none();
        let mut failing = self.backlog.failing.take().unwrap_or_else(|| Failing {
            reason: reason.clone(),
            backoff: self.retry.backoff(),
            retry_at: Instant::now(),
            since: Instant::now(),
        });
        let delay = failing.backoff.fail();
        failing.reason = reason;
        failing.retry_at = Instant::now() + delay;
        tracing::warn!(key, %error, failures = failing.backoff.failures(), ?delay, "create failed; the store is failing and repeats it");
        self.backlog.failing = Some(failing);
        first
    }

    /// Enqueued mode, and any mode during a stop: a failed create is kept
    /// and repeated with the same bytes after a growing delay; the store is
    /// failing until a create succeeds. Once a stop has begun the repeats are
    /// bounded.
    fn repeat_later(&mut self, sequence: u64, key: &str, error: StorageError) {
        self.pipeline.set_state(sequence, FlightState::Waiting);
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.attempts_left = stopping.attempts_left.saturating_sub(1);
            if !error.is_transient() || stopping.attempts_left == 0 {
                self.lose_backlog(format!("stop gave up creating {key}: {error}"));
                return;
            }
        }
        let first = self.enter_failing(key, &error);
        if first {
            // Releases still pending fail now; their records stay in their
            // batches and become durable once a create succeeds.
            let failing = Error::Failing {
                reason: format!(
                    "creating {key} failed: {error}; the release record stays in the backlog"
                )
                .into(),
            };
            for sealed in self.pipeline.iter_mut() {
                let (releases, others): (Vec<_>, Vec<_>) = sealed
                    .waiters
                    .drain(..)
                    .partition(|w| matches!(w, super::Waiter::Release { .. }));
                sealed.waiters = others;
                for waiter in releases {
                    waiter.fail(failing.clone());
                }
            }
        }
    }

    /// Keeps release records (coalesced, one per region) for the next object,
    /// sealed on the next tick if nothing takes them sooner. After a stop has
    /// sealed its last object, a kept record is a lost one.
    pub(super) fn keep_releases(&mut self, records: impl IntoIterator<Item = (RegionId, EntryId)>) {
        let final_sealed = self.stopping.as_ref().is_some_and(|s| s.final_sealed);
        for (region, through) in records {
            if final_sealed || self.poisoned.is_some() {
                if self.stopping.is_some() {
                    self.ledger.lose_releases(1, || {
                        format!("the release record of region {region} could not be made durable")
                    });
                }
                continue;
            }
            let slot = self.kept.records.entry(region).or_insert(through);
            *slot = (*slot).max(through);
        }
        if !self.kept.records.is_empty() && self.kept.deadline.is_none() {
            self.kept.deadline = Some(Instant::now() + self.config.flush_interval);
        }
    }

    /// The tick of kept release records: seal them, unless the store is
    /// failing (then wait for the first tick after a create succeeds).
    pub(super) fn on_kept_tick(&mut self) {
        self.kept.deadline = None;
        if self.kept.records.is_empty() || self.refusal().is_some() {
            return;
        }
        if self.backlog.failing.is_some() {
            self.kept.deadline = Some(Instant::now() + self.config.flush_interval);
            return;
        }
        if let Err(e) = self.open_batch(Instant::now()) {
            tracing::error!(error = %e, "cannot seal kept release records");
            return;
        }
        self.seal(SealReason::Requested);
    }

    /// Counts entries (and records) dropped: lost when they were
    /// acknowledged (enqueued) or taken on by a stop, failed otherwise.
    pub(super) fn lose(&mut self, entries: u64, bytes: u64, releases: u64, reason: &str) {
        if self.config.ack_mode == AckMode::Enqueued || self.stopping.is_some() {
            self.ledger.lose(entries, bytes, || reason.to_owned());
        } else {
            self.ledger.failed(entries);
        }
        if self.stopping.is_some() {
            self.ledger.lose_releases(releases, || reason.to_owned());
        }
    }

    /// Drops the whole backlog, counting what it held, and fails everyone
    /// waiting on it. Keys it leaves unsettled are settled by the next
    /// process that opens the prefix.
    pub(super) fn lose_backlog(&mut self, reason: String) {
        tracing::error!(prefix = %self.prefix, reason, "dropping the backlog");
        let kept = std::mem::take(&mut self.kept.records).len() as u64;
        self.kept.deadline = None;
        let mut waiters = Vec::new();
        let (mut entries, mut bytes, mut releases) = (0, 0, kept);
        let mut marks = std::mem::take(&mut self.marks).len() as u64;
        if let Some(open) = self.open.take() {
            entries += open.batch.entries;
            bytes += open.batch.payload_bytes;
            releases += open.batch.releases.len() as u64;
            marks += open.batch.marks.len() as u64;
            waiters.extend(open.waiters);
        }
        for sealed in self.pipeline.drain() {
            entries += sealed.entries;
            bytes += sealed.payload_bytes;
            releases += sealed.releases.len() as u64;
            marks += sealed.marks.len() as u64;
            self.remember_failed(sealed.sequence);
            waiters.extend(sealed.waiters);
        }
        self.lose(entries, bytes, releases, &reason);
        if self.stopping.is_some() {
            // A stop that gives up on the flush marks says so: its `Ok`
            // would promise they survive the restart.
            self.ledger.lose_marks(marks, || reason.clone());
        }
        let error = if let Some(fenced) = self.poisoned.as_ref().filter(|e| e.is_fenced()) {
            fenced.clone()
        } else if self.ledger.has_loss() {
            self.ledger.lost_error()
        } else {
            Error::NotDurable {
                reason: reason.into(),
            }
        };
        for waiter in waiters {
            waiter.fail(error.clone());
        }
    }

    /// Latches the terminal error and fails everything pending.
    pub(super) fn poison(&mut self, error: Error) {
        if self.poisoned.is_some() {
            return;
        }
        tracing::error!(prefix = %self.prefix, %error, "poisoned");
        self.metrics.poisoned.increment(1);
        self.poisoned = Some(error.clone());
        self.fail_stalled(&error);
        // Every waiter gets the poison; entries acknowledged in enqueued
        // mode (or taken on by a stop) are counted as lost.
        let mut waiters = Vec::new();
        if let Some(open) = self.open.as_mut() {
            waiters.append(&mut open.waiters);
        }
        for sealed in self.pipeline.iter_mut() {
            waiters.append(&mut sealed.waiters);
        }
        for waiter in waiters {
            waiter.fail(error.clone());
        }
        let has_backlog = self.open.as_ref().is_some_and(|o| !o.batch.is_empty())
            || !self.pipeline.is_empty()
            || !self.kept.records.is_empty();
        if has_backlog {
            self.lose_backlog(format!("the store was poisoned: {error}"));
        }
    }
}

/// Encodes an object and decodes its tail (what the catalog indexes).
fn encode(object: &Object) -> Result<(bytes::Bytes, format::Tail), format::FormatError> {
    let bytes = format::encode(object)?;
    match format::decode_tail(&bytes, bytes.len() as u64)? {
        TailDecode::Complete(tail) => Ok((bytes, tail)),
        TailDecode::NeedFooter { .. } => Err(format::FormatError::invalid(
            "tail",
            0,
            "the tail of a whole object must decode from the object",
        )),
    }
}

/// Test hooks: make the encoding of a chosen object fail, to drive the
/// paths valid objects never take.
#[cfg(test)]
pub(crate) mod test_hooks {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use crate::format::Object;

    static BREAK: Mutex<Option<HashSet<(String, u64)>>> = Mutex::new(None);

    /// The object of `sequence` under `prefix` fails to encode.
    pub(crate) fn fail_encode(prefix: &str, sequence: u64) {
        let mut set = BREAK.lock().unwrap_or_else(|e| e.into_inner());
        set.get_or_insert_with(HashSet::new)
            .insert((prefix.to_owned(), sequence));
    }

    static PANIC: Mutex<Option<HashSet<(String, u64)>>> = Mutex::new(None);

    /// Sealing the object of `sequence` under `prefix` panics the actor (a
    /// bug, as a test stages one).
    pub(crate) fn panic_at_seal(prefix: &str, sequence: u64) {
        let mut set = PANIC.lock().unwrap_or_else(|e| e.into_inner());
        set.get_or_insert_with(HashSet::new)
            .insert((prefix.to_owned(), sequence));
    }

    pub(super) fn maybe_panic(prefix: &str, sequence: u64) {
        let set = PANIC.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = set
            .as_ref()
            .is_some_and(|s| s.contains(&(prefix.to_owned(), sequence)));
        drop(set);
        assert!(!wanted, "a staged bug: sealing {sequence} panics");
    }

    /// `object`, broken (an entry of another sequence) when a test asked.
    pub(super) fn maybe_break(prefix: &str, mut object: Object) -> Object {
        let set = BREAK.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = set
            .as_ref()
            .is_some_and(|s| s.contains(&(prefix.to_owned(), object.header.sequence)));
        if wanted {
            if let Some(segment) = object.segments.first_mut() {
                if let Some(entry) = segment.entries.first_mut() {
                    entry.0 = crate::format::entry_id(object.header.sequence + 1, 1);
                }
            }
        }
        object
    }
}
