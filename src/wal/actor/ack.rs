//! Acknowledgement: the fence probes that precede it, and indexing the
//! durable batches at the front of the pipeline in sequence order.
//!
//! A probe's failure, by mode: a transient one is retried after the retry
//! delay; in durable mode (outside a stop) a permanent one, or
//! `stop_attempts` transient ones in a row, fail the round (every batch not
//! yet indexed, as a failed create does); in enqueued mode, and during any
//! stop, the store is failing and the probe is repeated, a stop giving up
//! after `stop_attempts` (the backlog is then `Lost`). So a probe that keeps
//! failing never hangs `append`, `wait_durable` or `stop`.

use std::collections::BTreeMap;

use tokio::task::JoinError;
use tokio::time::Instant;

use crate::catalog::IndexedObject;
use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, ReleaseRecord};
use crate::storage::StorageError;
use crate::{EntryId, RegionId};

use super::super::fence;
use super::probe::ProbeDone;
use super::{Actor, Failing};

impl Actor {
    /// Starts a probe when something became durable or present since the
    /// latest probe started.
    pub(super) fn maybe_probe(&mut self) {
        let covers = self.pipeline.durable_prefix_end();
        let present = self.pipeline.present();
        let verified = self.pipeline.reach().verified();
        let limit = self.config.max_inflight_creates;
        if !self
            .probes
            .wanted(covers, present, verified, limit, Instant::now())
        {
            return;
        }
        let number = self.probes.started(covers, present);
        let storage = self.storage.clone();
        let prefix = self.prefix.clone();
        let epoch = self.epoch;
        self.probes.in_flight.push(tokio::spawn(async move {
            let result = fence::fenced_by(&storage, &prefix, epoch).await;
            ProbeDone {
                covers,
                present,
                started: number,
                result,
            }
        }));
    }

    /// A probe answered: acknowledge what it covers, or stop for good.
    pub(super) fn on_probe(&mut self, done: Result<ProbeDone, JoinError>) {
        let done = match done {
            Ok(done) => done,
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                self.poison(Error::Poisoned {
                    reason: format!("a fence probe task failed: {e}").into(),
                });
                return;
            }
        };
        if !self.probes.take_answer(done.started) {
            return; // a later probe already answered for more
        }
        match done.result {
            Ok(None) => {
                self.probes.succeeded();
                if self.backlog.failing.as_ref().is_some_and(|f| f.probe) {
                    tracing::info!("a fence probe succeeded: the store is no longer failing");
                    self.backlog.failing = None;
                }
                self.pipeline.verify(done.present);
                if let Some(covers) = done.covers {
                    self.index_verified(covers);
                }
                self.admit_stalled();
            }
            Ok(Some(newer)) => self.poison(Error::Fenced {
                ours: self.epoch,
                newer,
            }),
            Err(error) => {
                if self.probes.later_in_flight(done.started) {
                    return; // a later probe covers this one
                }
                self.on_probe_failed(error);
            }
        }
    }

    fn on_probe_failed(&mut self, error: StorageError) {
        self.probes.forget_started();
        let delay = self
            .probes
            .backoff
            .get_or_insert_with(|| self.retry.backoff())
            .fail();
        let failures = self.probes.backoff.as_ref().map_or(1, |b| b.failures());
        self.probes.retry_at = Some(Instant::now() + delay);
        tracing::warn!(%error, failures, ?delay, "the fence probe failed; acknowledgements wait");
        let give_up = !error.is_transient() || failures >= self.retry.stop_attempts;
        if self.config.ack_mode == AckMode::Durable && self.stopping.is_none() {
            if give_up {
                self.probes.backoff = None;
                self.fail_pipeline(Error::Storage { source: error });
            }
            return;
        }
        if self.stopping.is_some() && give_up {
            self.lose_backlog(format!("stop gave up probing the fence: {error}"));
            return;
        }
        // Enqueued: failing (new appends are refused) until a probe succeeds.
        let reason: std::sync::Arc<str> = format!("the fence probe failed: {error}").into();
        match self.backlog.failing.as_mut() {
            Some(failing) => failing.reason = reason,
            None => {
                self.backlog.failing = Some(Failing {
                    reason,
                    backoff: self.retry.backoff(),
                    retry_at: Instant::now(),
                    probe: true,
                })
            }
        }
    }

    /// Indexes the durable batches at the front of the pipeline, in order, up
    /// to `covers` (a probe started after they were durable found no newer
    /// process).
    fn index_verified(&mut self, covers: u64) {
        let mut indexed = false;
        while let Some(mut sealed) = self.pipeline.pop_indexable(covers) {
            let object = IndexedObject::from_tail(
                &sealed.tail,
                sealed.bytes.len() as u64,
                release_records(&sealed.releases),
            );
            if let Err(e) = self.catalog.insert(object) {
                let error = Error::Poisoned {
                    reason: format!("the catalog refused a created object: {e}").into(),
                };
                sealed.fail_waiters(&error);
                self.lose(
                    sealed.entries,
                    sealed.payload_bytes,
                    sealed.releases.len() as u64,
                    &error.to_string(),
                );
                self.poison(error);
                return;
            }
            indexed = true;
            debug_assert!(self.catalog.check_invariants().is_ok());
            self.ledger.durable(sealed.entries);
            self.metrics
                .seal_to_durable
                .record(sealed.sealed_at.elapsed().as_secs_f64());
            self.metrics.object_bytes.record(sealed.bytes.len() as f64);
            self.metrics.object_entries.record(sealed.entries as f64);
            self.metrics
                .release_records
                .increment(sealed.releases.len() as u64);
            self.regions.mark_durable(&sealed.last_ids);
            if self.config.ack_mode == AckMode::Durable {
                self.shared.acknowledge(&sealed.last_ids);
            }
            for waiter in sealed.waiters.drain(..) {
                waiter.succeed(&self.metrics);
            }
            if sealed.sequence == format::MAX_SEQUENCE {
                self.poison(Error::Poisoned {
                    reason: "the last sequence of this prefix is used: no sequence is left".into(),
                });
                return;
            }
        }
        if indexed {
            self.metrics.indexed_objects.set(self.catalog.len() as f64);
            self.metrics.indexed_bytes.set(self.catalog.bytes() as f64);
            self.maybe_collect();
        }
    }
}

fn release_records(releases: &BTreeMap<RegionId, EntryId>) -> Vec<ReleaseRecord> {
    releases
        .iter()
        .map(|(region, through)| ReleaseRecord {
            region: *region,
            released_through: *through,
        })
        .collect()
}
