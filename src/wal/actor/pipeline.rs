//! The upload pipeline: sealing, conditional creates, and what a failed
//! create does in each ack mode (indexing is in `index.rs`).

use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, Header, Link, TailDecode};
use crate::storage::StorageError;
use crate::{EntryId, RegionId};

use super::super::create::{create_object, CreateOutcome};
use super::super::policy::SealReason;
use super::{retry_delay, Actor, Failing, FlightState, Sealed, Waiter};

impl Actor {
    /// Seals the open batch (if it holds anything) into the pipeline.
    pub(super) fn seal(&mut self, reason: SealReason) {
        // Kept release records ride with any batch sealed while the store
        // is not failing.
        if self.failing.is_none() && !self.kept_releases.is_empty() {
            if let Some(open) = self.open.as_mut() {
                open.batch
                    .add_releases(std::mem::take(&mut self.kept_releases));
                self.kept_deadline = None;
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
        let reclaim_boundary = self.reclaim_boundary(sequence);
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
        let encoded = format::encode(&object).and_then(|bytes| {
            match format::decode_tail(&bytes, bytes.len() as u64)? {
                TailDecode::Complete(tail) => Ok((bytes, tail)),
                TailDecode::NeedFooter { .. } => Err(format::FormatError::invalid(
                    "tail",
                    0,
                    "the tail of a whole object must decode from the object",
                )),
            }
        });
        let (bytes, tail) = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                let reason = format!("encoding object {sequence} failed: {e}");
                for waiter in open.waiters {
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
        tracing::debug!(
            bytes = bytes.len(),
            entries,
            releases = releases.len(),
            "sealed"
        );
        self.pipeline.push_back(Sealed {
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

    /// The boundary an object sealed now at `sequence` carries: the lowest
    /// sequence that may still hold a live entry, indexed or in the pipeline,
    /// never below a boundary already carried.
    pub(super) fn reclaim_boundary(&self, sequence: u64) -> u64 {
        let watermarks = &self.watermarks;
        let live = self
            .catalog
            .first_live_sequence(|region| watermarks.get(&region).copied().unwrap_or(0));
        let pending = self.pipeline.front().map(|s| s.sequence);
        [live, pending, Some(sequence)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(sequence)
            .max(self.boundary)
    }

    /// Starts creates for waiting batches while slots are free, in sequence
    /// order (not before the retry time of a failing store).
    pub(super) fn start_creates(&mut self) {
        if self.poisoned.is_some() {
            return;
        }
        if self
            .failing
            .as_ref()
            .is_some_and(|f| Instant::now() < f.retry_at)
        {
            return;
        }
        // Only the first `max_inflight_creates` batches of the pipeline may
        // be created: a process never creates more than that many objects
        // beyond its last acknowledged one, which is what the gap a newer
        // process leaves after its start object relies on (fence::FENCE_GAP).
        for sealed in self
            .pipeline
            .iter_mut()
            .take(self.config.max_inflight_creates)
        {
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
        }
    }

    pub(super) fn on_join(&mut self, done: Result<(u64, CreateOutcome), JoinError>) {
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
            tracing::debug!(
                sequence,
                ?outcome,
                "late completion of a failed batch: an orphan"
            );
            return;
        };
        let key = self.prefix.object_key(sequence);
        let mode = self.config.ack_mode;
        match outcome {
            CreateOutcome::Durable => {
                if let Some(sealed) = self.pipeline.get_mut(position) {
                    sealed.state = FlightState::Durable;
                    sealed.abort = None;
                }
                self.metrics.created_objects.increment(1);
                if self.failing.take().is_some() {
                    tracing::info!(key, "a create succeeded: the store is no longer failing");
                    if !self.kept_releases.is_empty() && self.kept_deadline.is_none() {
                        self.kept_deadline = Some(Instant::now() + self.config.flush_interval);
                    }
                }
                self.index_ready();
            }
            CreateOutcome::Failed(error) => {
                self.metrics.create_failures.increment(1);
                match mode {
                    AckMode::Durable => {
                        tracing::warn!(key, %error, "create failed; failing every batch not yet indexed");
                        self.fail_pipeline(Error::Storage { source: error });
                    }
                    AckMode::Enqueued => self.repeat_later(position, &key, error),
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
                    AckMode::Enqueued => self.poison(format!(
                        "{reason}: acknowledged entries of that batch cannot be made durable"
                    )),
                }
            }
            CreateOutcome::Conflict { epoch } => {
                self.metrics.create_conflicts.increment(1);
                let reason = match epoch {
                    Some(newer) if newer > self.epoch => format!(
                        "fenced: {key} is held by a newer process (epoch {newer}; ours is {}), \
                         which opened this prefix",
                        self.epoch
                    ),
                    Some(same) => format!(
                        "{key} is held by another writer of the same epoch {same}: \
                         another process writes this prefix"
                    ),
                    None => format!(
                        "{key} is held by an object that is not objwal's: \
                         another writer uses this prefix"
                    ),
                };
                self.poison(reason);
            }
        }
        self.after_pipeline_change();
    }

    /// Enqueued mode: a failed create is kept and repeated with the same
    /// bytes after a growing delay; the store is failing until a create
    /// succeeds. Once a stop has begun the repeats are bounded.
    fn repeat_later(&mut self, position: usize, key: &str, error: StorageError) {
        if let Some(sealed) = self.pipeline.get_mut(position) {
            sealed.state = FlightState::Waiting;
            sealed.abort = None;
        }
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.attempts_left = stopping.attempts_left.saturating_sub(1);
            if !error.is_transient() || stopping.attempts_left == 0 {
                self.lose_backlog(format!("stop gave up creating {key}: {error}"));
                return;
            }
        }
        let failures = self.failing.as_ref().map_or(0, |f| f.failures) + 1;
        let delay = retry_delay(failures);
        tracing::warn!(key, %error, failures, ?delay, "create failed; the store is failing and repeats it");
        let reason: std::sync::Arc<str> = format!("creating {key} failed: {error}").into();
        if self.failing.is_none() {
            // Releases still pending fail now; their records stay in their
            // batches and become durable once a create succeeds.
            let failing = crate::error::Error::Failing {
                reason: format!("{reason}; the release record stays in the backlog").into(),
            };
            for sealed in self.pipeline.iter_mut() {
                let (releases, others): (Vec<_>, Vec<_>) = sealed
                    .waiters
                    .drain(..)
                    .partition(|w| matches!(w, Waiter::Release { .. }));
                sealed.waiters = others;
                for waiter in releases {
                    waiter.fail(failing.clone());
                }
            }
        }
        self.failing = Some(Failing {
            reason,
            failures,
            retry_at: Instant::now() + delay,
        });
    }

    /// Durable mode: fails every batch not yet indexed; their sequences stay
    /// consumed and their release records are kept for the next object.
    fn fail_pipeline(&mut self, error: Error) {
        let failed: Vec<Sealed> = self.pipeline.drain(..).collect();
        for mut sealed in failed {
            sealed.fail_waiters(&error);
            self.keep_releases(sealed.releases);
        }
        self.publish_unpersisted();
    }

    /// Keeps release records (coalesced, one per region) for the next object,
    /// sealed on the next tick if nothing takes them sooner. After a stop has
    /// sealed its last object, a kept record is a lost one.
    pub(super) fn keep_releases(&mut self, records: impl IntoIterator<Item = (RegionId, EntryId)>) {
        let final_sealed = self.stopping.as_ref().is_some_and(|s| s.final_sealed);
        for (region, through) in records {
            if final_sealed || self.poisoned.is_some() {
                if self.stopping.is_some() {
                    self.lost.releases += 1;
                    self.lost.reason.get_or_insert_with(|| {
                        format!("the release record of region {region} could not be made durable")
                    });
                }
                continue;
            }
            let slot = self.kept_releases.entry(region).or_insert(through);
            *slot = (*slot).max(through);
        }
        if !self.kept_releases.is_empty() && self.kept_deadline.is_none() {
            self.kept_deadline = Some(Instant::now() + self.config.flush_interval);
        }
    }

    /// The tick of kept release records: seal them, unless the store is
    /// failing (then wait for the first tick after a create succeeds).
    pub(super) fn on_kept_tick(&mut self) {
        self.kept_deadline = None;
        if self.kept_releases.is_empty() || self.refusal().is_some() {
            return;
        }
        if self.failing.is_some() {
            self.kept_deadline = Some(Instant::now() + self.config.flush_interval);
            return;
        }
        if let Err(e) = self.open_batch(Instant::now()) {
            tracing::error!(error = %e, "cannot seal kept release records");
            return;
        }
        self.seal(SealReason::Requested);
    }

    /// Enqueued mode: drops the whole backlog, counting what acknowledged
    /// data it held, and fails everyone waiting on it.
    pub(super) fn lose_backlog(&mut self, reason: String) {
        tracing::error!(prefix = %self.prefix, reason, "dropping the backlog");
        let mut lost_entries = 0;
        let mut lost_bytes = 0;
        let mut lost_releases = self.kept_releases.len() as u64;
        self.kept_releases.clear();
        self.kept_deadline = None;
        let mut waiters = Vec::new();
        if let Some(open) = self.open.take() {
            lost_entries += open.batch.entries;
            lost_bytes += open.batch.payload_bytes;
            lost_releases += open.batch.releases.len() as u64;
            waiters.extend(open.waiters);
        }
        for sealed in self.pipeline.drain(..) {
            lost_entries += sealed.entries;
            lost_bytes += sealed.payload_bytes;
            lost_releases += sealed.releases.len() as u64;
            waiters.extend(sealed.waiters);
        }
        if self.config.ack_mode == AckMode::Enqueued {
            self.lost.entries += lost_entries;
            self.lost.bytes += lost_bytes;
        }
        if self.stopping.is_some() {
            self.lost.releases += lost_releases;
        }
        self.lost.reason.get_or_insert(reason);
        let error = self.lost_error();
        for waiter in waiters {
            waiter.fail(error.clone());
        }
        self.publish_unpersisted();
    }

    /// Latches the terminal error and fails everything pending.
    pub(super) fn poison(&mut self, reason: String) {
        if self.poisoned.is_some() {
            return;
        }
        tracing::error!(prefix = %self.prefix, reason, "poisoned");
        self.metrics.poisoned.increment(1);
        let error = Error::Poisoned {
            reason: reason.clone().into(),
        };
        self.poisoned = Some(error.clone());
        self.fail_stalled(&error);
        let has_backlog = self.open.as_ref().is_some_and(|o| !o.batch.is_empty())
            || !self.pipeline.is_empty()
            || !self.kept_releases.is_empty();
        if has_backlog {
            // Entries acknowledged in enqueued mode and release records after
            // a stop began are counted as lost; every waiter gets the poison.
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
            self.lose_backlog(format!("the store was poisoned: {reason}"));
        }
    }

    /// The error of a loss, for waiters and for stop.
    pub(super) fn lost_error(&self) -> Error {
        Error::Lost {
            entries: self.lost.entries,
            bytes: self.lost.bytes,
            releases: self.lost.releases,
            reason: self
                .lost
                .reason
                .clone()
                .unwrap_or_else(|| "unknown".to_owned())
                .into(),
        }
    }
}
