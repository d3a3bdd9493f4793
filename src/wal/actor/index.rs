//! Acknowledgement: the fence probe that precedes it, and indexing the
//! durable batches at the front of the pipeline in sequence order.

use std::collections::BTreeMap;

use tokio::task::JoinError;
use tokio::time::Instant;

use crate::catalog::IndexedObject;
use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, ReleaseRecord};
use crate::{EntryId, RegionId};

use super::super::fence;
use super::{retry_delay, Actor, FlightState, ProbeResult};

impl Actor {
    /// Starts the fence probe that must precede the acknowledgement of the
    /// durable batches at the front of the pipeline (one probe at a time; it
    /// covers every batch durable when it starts).
    pub(super) fn index_ready(&mut self) {
        if self.probing.is_some() || self.poisoned.is_some() {
            return;
        }
        let covers = self
            .pipeline
            .iter()
            .take_while(|s| s.state == FlightState::Durable)
            .last()
            .map(|s| s.sequence);
        let Some(covers) = covers else {
            return;
        };
        self.probing = Some(covers);
        let storage = self.storage.clone();
        let prefix = self.prefix.clone();
        let epoch = self.epoch;
        self.probes.push(tokio::spawn(async move {
            (covers, fence::fenced_by(&storage, &prefix, epoch).await)
        }));
    }

    /// The fence probe answered: acknowledge what it covers, or stop for good.
    pub(super) fn on_probe(&mut self, done: Result<(u64, ProbeResult), JoinError>) {
        self.probing = None;
        match done {
            Ok((covers, Ok(None))) => {
                self.probe_failures = 0;
                self.index_verified(covers);
                self.admit_stalled();
                self.index_ready();
            }
            Ok((_, Ok(Some(newer)))) => self.poison(format!(
                "fenced: a newer process (epoch {newer}) opened this prefix; this process (epoch {}) \
                 acknowledges nothing more",
                self.epoch
            )),
            Ok((_, Err(error))) => {
                self.probe_failures += 1;
                let delay = retry_delay(self.probe_failures);
                tracing::warn!(%error, ?delay, "the fence probe failed; acknowledgements wait for a retry");
                self.probe_retry_at = Some(Instant::now() + delay);
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => self.poison(format!("a fence probe task failed: {e}")),
        }
        self.after_pipeline_change();
    }

    /// Retries a failed fence probe.
    pub(super) fn on_probe_retry(&mut self) {
        self.probe_retry_at = None;
        self.index_ready();
    }

    /// Indexes the durable batches at the front of the pipeline, in order, up
    /// to `covers` (a fence probe started after they were durable found no
    /// newer process).
    fn index_verified(&mut self, covers: u64) {
        while self
            .pipeline
            .front()
            .is_some_and(|s| s.state == FlightState::Durable && s.sequence <= covers)
        {
            let Some(mut sealed) = self.pipeline.pop_front() else {
                return;
            };
            let object = IndexedObject::from_tail(
                &sealed.tail,
                sealed.bytes.len() as u64,
                release_records(&sealed.releases),
            );
            if let Err(e) = self.catalog.insert(object) {
                let reason = format!("the catalog refused a created object: {e}");
                sealed.fail_waiters(&Error::Poisoned {
                    reason: reason.clone().into(),
                });
                self.poison(reason);
                return;
            }
            debug_assert!(self.catalog.check_invariants().is_ok());
            self.metrics
                .seal_to_durable
                .record(sealed.sealed_at.elapsed().as_secs_f64());
            self.metrics.object_bytes.record(sealed.bytes.len() as f64);
            self.metrics.object_entries.record(sealed.entries as f64);
            self.metrics.indexed_objects.set(self.catalog.len() as f64);
            self.metrics.indexed_bytes.set(self.catalog.bytes() as f64);
            self.metrics
                .release_records
                .increment(sealed.releases.len() as u64);
            for (region, id) in &sealed.last_ids {
                let slot = self.durable_ids.entry(*region).or_insert(0);
                *slot = (*slot).max(*id);
            }
            if self.config.ack_mode == AckMode::Durable {
                self.shared.acknowledge(&sealed.last_ids);
            }
            for waiter in sealed.waiters.drain(..) {
                waiter.succeed(&self.metrics);
            }
            if sealed.sequence == format::MAX_SEQUENCE {
                self.poison("the last sequence of this prefix is used: no sequence is left".into());
                return;
            }
        }
        self.publish_unpersisted();
        self.maybe_collect();
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
