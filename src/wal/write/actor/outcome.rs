//! A create's outcome: a landed object goes on to acknowledgement
//! (`ack.rs`); a failed one is repeated (enqueued mode) or its key settled
//! with the batch's void (durable mode: rule K1 of rfcs/0006), and a run
//! of failures makes the store failing. What a stop or a poisoning gives up
//! is counted lost, and kept release records wait here for a later object.

use tokio::task::JoinError;
use tokio::time::Instant;

use crate::config::AckMode;
use crate::error::Error;
use crate::storage::StorageError;
use crate::{EntryId, RegionId};

use super::super::batch::void_object;
use super::super::policy::SealReason;
use super::pipeline::{CreateDone, FlightState, Void};
use super::seal::encode;
use super::{Actor, Failing};
use crate::wal::protocol::create::CreateOutcome;
use crate::wal::protocol::rules::Taken;

impl Actor {
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
                self.key_settled(&key);
                if landed_void {
                    // The batch's own create may still be on the wire (a
                    // request that timed out is not called back) and would
                    // land wherever the key is free: collection never frees
                    // it while this process runs, so the batch never shows
                    // (to a follower) at a key its void settled.
                    self.collector.keep(sequence);
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
                Some(Taken::Filler) => self.on_filler(sequence),
                _ => self.on_foreign(sequence),
            },
        }
    }

    /// A filler (an older epoch's empty object: the start object of an
    /// opener whose open failed) holds the key of the batch of `sequence`
    /// (rfcs/0006, "Fillers"): neither the batch nor its void can ever land
    /// there, and no request deletes it. The key is settled by it; the run
    /// goes on at the next key, whose object links to this key as sealed.
    ///
    /// Durable mode: the batch's appends and barriers are answered
    /// `NotDurable` (nothing they carried is logged); its flush marks ride
    /// with the next object, and its release records too, their callers
    /// waiting for that object. Enqueued mode (ids handed out at this key
    /// can never be logged) and a batch carrying a jump (the batches after
    /// it were sealed above the jump) poison the store.
    fn on_filler(&mut self, sequence: u64) {
        self.metrics.create_conflicts.increment(1);
        let key = self.prefix.object_key(sequence);
        let durable = self.config.ack_mode == AckMode::Durable;
        let Some(sealed) = self.pipeline.get_mut(sequence) else {
            return;
        };
        if !durable || sealed.jump {
            let what = if durable {
                "it carries the jump the batches after it were sealed above"
            } else {
                "the ids handed out for its entries can be logged nowhere else"
            };
            self.poison(Error::Poisoned {
                reason: format!(
                    "{key} holds an older process's empty object (the start object of an open \
                     that failed while this one ran), so this batch can never land there: {what}; \
                     open the prefix again"
                )
                .into(),
            });
            return;
        }
        tracing::warn!(
            key,
            "an older process's empty object settled the key: its batch is not logged"
        );
        sealed.filler = true;
        self.collector.keep(sequence);
        let marks: Vec<_> = sealed
            .marks
            .iter()
            .filter(|m| !m.is_jump())
            .copied()
            .collect();
        let releases = sealed.releases.clone();
        let not_durable = Error::NotDurable {
            reason: format!(
                "{key} holds an older process's empty object (an open that failed while this \
                 one ran): nothing this append carried is logged"
            )
            .into(),
        };
        // Appends and barriers fail; release callers stay with the batch.
        self.fail_callers(sequence, &not_durable, None);
        // What waits now: release callers (if the batch was not answered
        // before), and barriers that came after it was answered (a failing
        // store answers a batch early), which wait for its key to be
        // settled and nothing more: it is.
        let (release_waiters, barriers): (Vec<_>, Vec<_>) = self
            .pipeline
            .get_mut(sequence)
            .map(|s| std::mem::take(&mut s.waiters))
            .unwrap_or_default()
            .into_iter()
            .partition(|w| matches!(w, super::Waiter::Release { .. }));
        for barrier in barriers {
            barrier.succeed(&self.metrics);
        }
        self.key_settled(&key);
        self.pipeline.set_state(sequence, FlightState::Landed);
        for mark in marks {
            let slot = self.marks.entry(mark.region).or_insert(mark.watermark);
            *slot = (*slot).max(mark.watermark);
        }
        self.rehome_releases(releases, release_waiters);
        self.index_landed();
    }

    /// A key of ours is settled (our object landed, or a filler holds it):
    /// a store that was failing is not any more.
    fn key_settled(&mut self, key: &str) {
        if self.backlog.failing.take().is_some() {
            tracing::info!(key, "a key was settled: the store is no longer failing");
            if !self.kept.records.is_empty() && self.kept.deadline.is_none() {
                self.kept.deadline = Some(Instant::now() + self.config.flush_interval);
            }
        }
    }

    /// Release records whose batch cannot land, with their callers: sealed
    /// into a new object at once (the callers answered when it is durable),
    /// or, while the store is failing, kept for the first object after a
    /// create succeeds (the callers told so).
    fn rehome_releases(
        &mut self,
        releases: std::collections::BTreeMap<RegionId, EntryId>,
        waiters: Vec<super::Waiter>,
    ) {
        if releases.is_empty() && waiters.is_empty() {
            return;
        }
        if let Some(failing) = &self.backlog.failing {
            let error = Error::Failing {
                reason: format!(
                    "{}; the release record is kept and sealed once a create succeeds",
                    failing.reason
                )
                .into(),
            };
            self.keep_releases(releases);
            for waiter in waiters {
                waiter.fail(error.clone());
            }
            return;
        }
        self.keep_releases(releases);
        let kept = std::mem::take(&mut self.kept.records);
        self.kept.deadline = None;
        match self.open_batch(Instant::now()) {
            Ok(open) => {
                open.batch.add_releases(kept);
                open.waiters.extend(waiters);
                self.seal(SealReason::Requested);
            }
            Err(e) => {
                self.keep_releases(kept);
                for waiter in waiters {
                    waiter.fail(e.clone());
                }
            }
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
            // Sealed with the failing state in place: its creates, and the
            // void's, wait for the retry time (issue 29 item 5b).
            self.seal(SealReason::Requested);
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
            marks += sealed.marks.iter().filter(|m| !m.is_jump()).count() as u64;
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
