//! Acknowledgement: indexing the landed batches at the front of the
//! pipeline, in run order (rule K2 of rfcs/0006). An object is acknowledged
//! once it and every object of the run before it landed as this writer's
//! own; no request follows its create. A newer process that walks the run
//! meets every such object before the key it blocks, so it continues the
//! chain through them.

use crate::catalog::IndexedObject;
use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, ReleaseRecord};

use super::pipeline::Sealed;
use super::Actor;

impl Actor {
    /// Indexes the landed batches at the front of the pipeline, in order,
    /// and acknowledges their callers.
    pub(super) fn index_landed(&mut self) {
        let mut indexed = false;
        while let Some(mut sealed) = self.pipeline.pop_landed() {
            self.run_tip = Some(format::Link {
                sequence: sealed.sequence,
                epoch: self.epoch,
            });
            if sealed.filler {
                // Settled by a filler: nothing of ours to index; its callers
                // were answered, its records went on to a later object.
                tracing::debug!(sequence = sealed.sequence, "a filler settled the key");
                indexed = true;
                continue;
            }
            if let Err(e) = self.catalog.insert(indexed_object(&sealed)) {
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
            for (region, through) in &sealed.releases {
                self.regions.release_indexed(*region, *through);
            }
            self.metrics
                .seal_to_durable
                .record(sealed.sealed_at.elapsed().as_secs_f64());
            self.metrics
                .release_records
                .increment(sealed.releases.len() as u64);
            if sealed.landed_void {
                tracing::debug!(
                    sequence = sealed.sequence,
                    "a void settled the key of a failed batch"
                );
            } else if sealed.answered {
                // The batch won its key with a late request after its
                // callers were told its fate was open: this life shows none
                // of its entries (indexed without them); a later open may.
                tracing::debug!(
                    sequence = sealed.sequence,
                    "a batch answered as failed landed after all"
                );
            } else {
                self.ledger.durable(sealed.entries);
                self.metrics.object_bytes.record(sealed.bytes.len() as f64);
                self.metrics.object_entries.record(sealed.entries as f64);
                self.regions.mark_durable(&sealed.last_ids);
                if self.config.ack_mode == AckMode::Durable {
                    self.shared.acknowledge(&sealed.last_ids);
                }
            }
            // Releases are answered once their markers are durable
            // (`markers.rs`); everyone else now.
            let (releases, others): (Vec<_>, Vec<_>) = sealed
                .waiters
                .drain(..)
                .partition(|w| matches!(w, super::Waiter::Release { .. }));
            for waiter in others {
                waiter.succeed(&self.metrics);
            }
            self.await_markers(sealed.sequence, &sealed.releases, releases);
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
            self.admit_stalled();
        }
    }
}

/// The catalog's view of a landed batch (or of its void; or of a batch
/// whose callers were answered as failed, without its entries).
fn indexed_object(sealed: &Sealed) -> IndexedObject {
    let (tail, size) = match (&sealed.void, sealed.landed_void) {
        (Some(void), true) => (&void.tail, void.bytes.len()),
        _ => (&sealed.tail, sealed.bytes.len()),
    };
    let mut object = IndexedObject::from_tail(
        tail,
        size as u64,
        sealed.marks.clone(),
        sealed
            .releases
            .iter()
            .map(|(region, through)| ReleaseRecord {
                region: *region,
                released_through: *through,
            })
            .collect(),
    );
    if sealed.answered && !sealed.landed_void {
        object.segments.clear();
    }
    object
}
