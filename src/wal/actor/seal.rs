//! Sealing and creating: the policy's decision, a batch becoming an object,
//! conditional creates (batches and markers), and what a failed create does
//! in each ack mode. Acknowledgement (probes, indexing) is in `ack.rs`.

use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, Header, Link, Object, TailDecode};
use crate::storage::StorageError;
use crate::{EntryId, RegionId};

use super::super::create::{create_data_object, create_object, CreateOutcome};
use super::super::policy::{Decision, OpenState, SealReason};
use super::pipeline::{CreateDone, CreateKind, FlightState, Sealed};
use super::{Actor, Failing};

impl Actor {
    /// Asks the policy about the open batch and seals when it says so;
    /// whether it sealed.
    pub(super) fn apply_policy(&mut self) -> bool {
        self.seal_at = None;
        let Some(open) = self.open.as_ref().filter(|o| !o.batch.is_empty()) else {
            return false;
        };
        let state = OpenState {
            encoded_bytes: open.batch.encoded_bytes(),
            opened_at: open.batch.opened_at,
        };
        let can_start = self.backlog.failing.is_none()
            && self
                .pipeline
                .could_start(open.batch.sequence, self.config.max_inflight_creates);
        match self.policy.decide(Instant::now(), Some(state), can_start) {
            Decision::Seal(reason) => {
                self.seal(reason);
                true
            }
            Decision::WaitUntil(at) => {
                self.seal_at = Some(at);
                false
            }
            Decision::Idle => false,
        }
    }

    /// Seals the open batch (if it holds anything) into the pipeline.
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
        let collect = reason == SealReason::Collect;
        let Some(open) = self.open.take_if(|o| collect || !o.batch.is_empty()) else {
            return;
        };
        let batch = open.batch;
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
        let reclaim_boundary = self.reclaim_boundary(sequence, &batch.releases);
        let entries = batch.entries;
        let payload_bytes = batch.payload_bytes;
        let opened_at = batch.opened_at;
        let last_ids: Vec<_> = batch.last_ids().collect();
        let releases = batch.releases.clone();
        let object = batch.into_object(Header {
            sequence,
            epoch: self.epoch,
            link,
            reclaim_boundary,
        });
        #[cfg(test)]
        let object = test_hooks::maybe_break(self.prefix.as_str(), object);
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
            releases = releases.len(),
            "sealed"
        );
        self.pipeline.push(Sealed {
            sequence,
            bytes,
            tail,
            waiters: open.waiters,
            opened_at,
            sealed_at: Instant::now(),
            entries,
            payload_bytes,
            last_ids,
            releases,
            state: FlightState::Waiting,
            abort: None,
        });
        self.start_creates();
    }

    /// The boundary an object sealed now at `sequence` (carrying the release
    /// records `own`) carries: the lowest sequence that may still hold a live
    /// entry, indexed or in the pipeline, never below a boundary already
    /// carried. Releases count only once their records are in an object at
    /// or below this one: indexed, sealed before it, or its own (a release
    /// refused while failing does not free anything, issue 10 item 8).
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
        let regions = &self.regions;
        let live = self.catalog.first_live_sequence(|region| {
            regions
                .watermark(region)
                .max(sealed.get(&region).copied().unwrap_or(0))
        });
        let pending = self.pipeline.front().map(|s| s.sequence);
        [live, pending, Some(sequence)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(sequence)
            .max(self.boundary)
    }

    /// Starts creates for waiting batches while slots are free and reach
    /// allows, in sequence order (not before the retry time of a failing
    /// store).
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
            let bytes = sealed.bytes.clone();
            let task = self.create_task(sequence, CreateKind::Batch, bytes);
            self.pipeline.start(sequence, CreateKind::Batch, task);
        }
    }

    fn create_task(
        &self,
        sequence: u64,
        kind: CreateKind,
        bytes: bytes::Bytes,
    ) -> impl std::future::Future<Output = CreateDone> + Send + 'static {
        let storage = self.storage.clone();
        let key = self.prefix.object_key(sequence);
        let epoch = self.epoch;
        let span = tracing::debug_span!("create", key = %key, bytes = bytes.len(), marker = kind == CreateKind::Marker);
        async move {
            let outcome = match kind {
                CreateKind::Batch => create_data_object(&storage, &key, bytes, epoch).await,
                CreateKind::Marker => create_object(&storage, &key, bytes, epoch).await,
            };
            (sequence, kind, outcome)
        }
        .instrument(span)
    }

    /// Lands a marker when the next batch lies beyond reach and nothing
    /// else can verify more (rule W5): an empty object as high as reach
    /// allows, linked to the tip, never indexed (collection removes it).
    pub(super) fn maybe_marker(&mut self) {
        if self.marker_retry_at.is_some() {
            return;
        }
        let Some(sequence) = self.pipeline.marker_needed(!self.probes.is_empty()) else {
            return;
        };
        let object = Object {
            header: Header {
                sequence,
                epoch: self.epoch,
                link: self.catalog.tip().map(|t| Link {
                    sequence: t.sequence,
                    epoch: t.epoch,
                }),
                reclaim_boundary: self.boundary.min(sequence),
            },
            segments: Vec::new(),
            releases: Vec::new(),
        };
        match format::encode(&object) {
            Ok(bytes) => {
                tracing::debug!(sequence, "the next batch is beyond reach: landing a marker");
                let task = self.create_task(sequence, CreateKind::Marker, bytes);
                self.pipeline.start(sequence, CreateKind::Marker, task);
            }
            Err(e) => self.poison(Error::Poisoned {
                reason: format!("encoding marker {sequence} failed: {e}").into(),
            }),
        }
    }

    pub(super) fn on_create_done(&mut self, done: Result<CreateDone, JoinError>) {
        match done {
            Ok((sequence, CreateKind::Batch, outcome)) => self.on_created(sequence, outcome),
            Ok((sequence, CreateKind::Marker, outcome)) => self.on_marker(sequence, outcome),
            Err(e) if e.is_cancelled() => {}
            Err(e) => self.poison(Error::Poisoned {
                reason: format!("a create task failed: {e}").into(),
            }),
        }
    }

    fn on_marker(&mut self, sequence: u64, outcome: CreateOutcome) {
        if !self.pipeline.marker_finished(sequence) {
            return;
        }
        match outcome {
            // Any object there proves the sequence present: ours, our own
            // late batch, an older process's.
            CreateOutcome::Durable | CreateOutcome::Stale { .. } => self.marker_landed(sequence),
            CreateOutcome::Conflict { epoch: Some(e) } if e == self.epoch => {
                self.marker_landed(sequence)
            }
            CreateOutcome::Conflict { epoch } => self.on_conflict(sequence, epoch),
            CreateOutcome::Failed(error) => {
                self.metrics.create_failures.increment(1);
                let delay = self
                    .marker_backoff
                    .get_or_insert_with(|| self.retry.backoff())
                    .fail();
                tracing::warn!(sequence, %error, ?delay, "a marker create failed");
                self.marker_retry_at = Some(Instant::now() + delay);
                if self.config.ack_mode == AckMode::Durable && self.stopping.is_none() {
                    // Callers waiting behind the marker learn now.
                    self.fail_pipeline(Error::Storage { source: error });
                }
            }
        }
    }

    fn marker_landed(&mut self, sequence: u64) {
        self.marker_backoff = None;
        self.marker_retry_at = None;
        self.pipeline.saw_present(sequence);
    }

    fn on_created(&mut self, sequence: u64, outcome: CreateOutcome) {
        if matches!(outcome, CreateOutcome::Durable) {
            // Even a late completion of a failed batch proves it present.
            self.pipeline.saw_present(sequence);
        }
        if self.pipeline.finished(sequence).is_none() {
            tracing::debug!(
                sequence,
                ?outcome,
                "late completion of a failed batch: an orphan"
            );
            return;
        }
        let key = self.prefix.object_key(sequence);
        let mode = self.config.ack_mode;
        match outcome {
            CreateOutcome::Durable => {
                self.pipeline.set_state(sequence, FlightState::Durable);
                self.metrics.created_objects.increment(1);
                if self.backlog.failing.take().is_some() {
                    tracing::info!(key, "a create succeeded: the store is no longer failing");
                    if !self.kept.records.is_empty() && self.kept.deadline.is_none() {
                        self.kept.deadline = Some(Instant::now() + self.config.flush_interval);
                    }
                }
            }
            CreateOutcome::Failed(error) => {
                self.metrics.create_failures.increment(1);
                if mode == AckMode::Durable && self.stopping.is_none() {
                    tracing::warn!(key, %error, "create failed; failing every batch not yet indexed");
                    self.fail_pipeline(Error::Storage { source: error });
                } else {
                    self.repeat_later(sequence, &key, error);
                }
            }
            CreateOutcome::Stale { epoch } => {
                self.metrics.create_conflicts.increment(1);
                let reason = format!("{key} is held by an object of the earlier epoch {epoch}");
                match mode {
                    AckMode::Durable => {
                        tracing::warn!(key, epoch, "an earlier epoch's object holds the sequence");
                        self.fail_pipeline(Error::NotDurable {
                            reason: reason.into(),
                        });
                    }
                    // Acknowledged ids name this sequence: they cannot move.
                    AckMode::Enqueued => self.poison(Error::Poisoned {
                        reason: format!(
                            "{reason}: acknowledged entries of that batch cannot be made durable"
                        )
                        .into(),
                    }),
                }
            }
            CreateOutcome::Conflict { epoch } => self.on_conflict(sequence, epoch),
        }
    }

    /// Another writer holds a sequence of ours: fenced by a newer process,
    /// or poisoned by a same-epoch or foreign writer.
    fn on_conflict(&mut self, sequence: u64, epoch: Option<u64>) {
        self.metrics.create_conflicts.increment(1);
        let key = self.prefix.object_key(sequence);
        let error = match epoch {
            Some(newer) if newer > self.epoch => Error::Fenced {
                ours: self.epoch,
                newer,
            },
            Some(same) => Error::Poisoned {
                reason: format!(
                    "{key} is held by another writer of the same epoch {same}: \
                     another process writes this prefix"
                )
                .into(),
            },
            None => Error::Poisoned {
                reason: format!(
                    "{key} is held by an object that is not objwal's: \
                     another writer uses this prefix"
                )
                .into(),
            },
        };
        self.poison(error);
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
        let reason: std::sync::Arc<str> = format!("creating {key} failed: {error}").into();
        let first = self.backlog.failing.is_none();
        let mut failing = self.backlog.failing.take().unwrap_or_else(|| Failing {
            reason: reason.clone(),
            backoff: self.retry.backoff(),
            retry_at: Instant::now(),
            probe: false,
        });
        let delay = failing.backoff.fail();
        failing.reason = reason.clone();
        failing.probe = false;
        failing.retry_at = Instant::now() + delay;
        tracing::warn!(key, %error, failures = failing.backoff.failures(), ?delay, "create failed; the store is failing and repeats it");
        self.backlog.failing = Some(failing);
        if first {
            // Releases still pending fail now; their records stay in their
            // batches and become durable once a create succeeds.
            let failing = Error::Failing {
                reason: format!("{reason}; the release record stays in the backlog").into(),
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

    /// Durable mode: fails every batch not yet indexed; their sequences stay
    /// consumed and their release records are kept for the next object.
    pub(super) fn fail_pipeline(&mut self, error: Error) {
        for mut sealed in self.pipeline.drain() {
            sealed.fail_waiters(&error);
            self.ledger.failed(sealed.entries);
            self.remember_failed(sealed.sequence);
            self.keep_releases(sealed.releases);
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
    /// waiting on it.
    pub(super) fn lose_backlog(&mut self, reason: String) {
        tracing::error!(prefix = %self.prefix, reason, "dropping the backlog");
        let kept = std::mem::take(&mut self.kept.records).len() as u64;
        self.kept.deadline = None;
        let mut waiters = Vec::new();
        let (mut entries, mut bytes, mut releases) = (0, 0, kept);
        if let Some(open) = self.open.take() {
            entries += open.batch.entries;
            bytes += open.batch.payload_bytes;
            releases += open.batch.releases.len() as u64;
            waiters.extend(open.waiters);
        }
        for sealed in self.pipeline.drain() {
            entries += sealed.entries;
            bytes += sealed.payload_bytes;
            releases += sealed.releases.len() as u64;
            self.remember_failed(sealed.sequence);
            waiters.extend(sealed.waiters);
        }
        self.lose(entries, bytes, releases, &reason);
        let error = if self.ledger.has_loss() {
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
