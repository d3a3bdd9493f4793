//! The pinning room: which regions hold the reclaim boundary, the gauge
//! `objwal_pinned_objects`, and flush requests to the engine.
//!
//! After every indexed object and every collection tick (the hook is the
//! first line of `maybe_collect`) the actor publishes how many indexed
//! objects live regions keep from collection and, when
//! `max_pinned_objects` is set, asks each region that keeps more than that
//! to flush ([`crate::catalog::Catalog::pinned_beyond`]). Nothing here
//! deletes anything or moves a watermark: the engine flushes and calls
//! `obsolete`, and collection proceeds by its own rules.
//!
//! Invariants: a region is asked once per crossing: when it passes the
//! bound, and again only after it came back within it, or after it
//! obsoleted through the id it was last asked for and is still beyond (the
//! log moved on meanwhile); a released region is never asked; every
//! subscriber receives every request sent after it subscribed, and on
//! subscribing, the requests still outstanding.

use std::collections::BTreeMap;

use crate::catalog::Pinning;
use crate::error::Error;
use crate::{EntryId, RegionId};

use super::super::pressure::FlushRequest;
use super::Actor;

/// Flush requests asked and not yet answered, and who listens.
#[derive(Debug, Default)]
pub(super) struct Pins {
    /// Regions asked to flush and still beyond the bound: the id asked for
    /// and the objects they held then.
    asked: BTreeMap<RegionId, (EntryId, u64)>,
    subscribers: Vec<flume::Sender<FlushRequest>>,
}

impl Pins {
    /// The requests to send now that `over` (region, flush-through id,
    /// objects held) are beyond the bound; `watermark` is each region's
    /// obsolete-through id. Regions no longer over are forgotten (a later
    /// crossing asks again).
    pub(super) fn update(
        &mut self,
        over: Vec<(RegionId, EntryId, u64)>,
        watermark: impl Fn(RegionId) -> EntryId,
    ) -> Vec<FlushRequest> {
        self.asked
            .retain(|region, _| over.iter().any(|(r, _, _)| r == region));
        let mut requests = Vec::new();
        for (region, through, held_objects) in over {
            let again = self
                .asked
                .get(&region)
                .is_none_or(|(asked, _)| watermark(region) >= *asked);
            if again {
                self.asked.insert(region, (through, held_objects));
                requests.push(FlushRequest {
                    region,
                    through,
                    held_objects,
                });
            }
        }
        requests
    }

    /// A new subscriber, told first of the requests still outstanding.
    pub(super) fn subscribe(&mut self) -> flume::Receiver<FlushRequest> {
        let (tx, rx) = flume::unbounded();
        for (&region, &(through, held_objects)) in &self.asked {
            let _ = tx.send(FlushRequest {
                region,
                through,
                held_objects,
            });
        }
        self.subscribers.push(tx);
        rx
    }

    /// Sends `requests` to every subscriber still listening.
    fn send(&mut self, requests: &[FlushRequest]) {
        self.subscribers
            .retain(|tx| requests.iter().all(|r| tx.send(*r).is_ok()));
    }
}

impl Actor {
    /// Publishes the pinned objects and sends the flush requests due.
    pub(super) fn check_pinning(&mut self) {
        let regions = &self.regions;
        let hidden = |region| regions.hidden_through(region);
        self.metrics
            .pinned_objects
            .set(self.catalog.pinned_objects(hidden) as f64);
        let bound = self.config.max_pinned_objects;
        if bound == 0 || self.refusal().is_some() {
            return;
        }
        let over: Vec<_> = self
            .catalog
            .pinned_beyond(hidden, bound)
            .into_iter()
            .filter(|(region, _)| !regions.is_released(*region))
            .map(|(region, (through, held))| (region, through, held))
            .collect();
        let requests = self.pins.update(over, hidden);
        for r in &requests {
            tracing::info!(
                region = r.region,
                through = r.through,
                held_objects = r.held_objects,
                bound,
                "asking the engine to flush a region that holds objects from collection"
            );
        }
        self.pins.send(&requests);
    }

    /// The regions holding objects from collection (`Wal::pinning`).
    pub(super) fn on_pinning(&self) -> Result<Vec<Pinning>, Error> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        let regions = &self.regions;
        Ok(self
            .catalog
            .pinning(|region| regions.hidden_through(region)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regions(requests: &[FlushRequest]) -> Vec<(RegionId, EntryId)> {
        requests.iter().map(|r| (r.region, r.through)).collect()
    }

    #[test]
    fn a_region_is_asked_once_per_crossing() {
        let mut pins = Pins::default();
        let none = |_| 0;
        assert_eq!(regions(&pins.update(vec![(1, 10, 300)], none)), [(1, 10)]);
        // Still beyond, nothing flushed: not asked again, however far.
        assert!(pins.update(vec![(1, 12, 301)], none).is_empty());
        assert!(pins.update(vec![(1, 40, 900)], |_| 9).is_empty());
        // Back within the bound, then beyond again: a new crossing.
        assert!(pins.update(vec![], none).is_empty());
        assert_eq!(regions(&pins.update(vec![(1, 50, 300)], none)), [(1, 50)]);
    }

    #[test]
    fn a_region_that_flushed_what_it_was_asked_and_is_still_beyond_is_asked_again() {
        let mut pins = Pins::default();
        pins.update(vec![(1, 10, 300), (2, 20, 300)], |_| 0);
        let flushed = |r| if r == 1 { 10 } else { 0 };
        assert_eq!(
            regions(&pins.update(vec![(1, 30, 290), (2, 20, 300)], flushed)),
            [(1, 30)]
        );
    }

    #[test]
    fn a_subscriber_learns_the_outstanding_requests_and_later_ones() {
        let mut pins = Pins::default();
        pins.update(vec![(1, 10, 300)], |_| 0);
        let rx = pins.subscribe();
        let dropped = pins.subscribe();
        drop(dropped);
        let sent = pins.update(vec![(1, 10, 300), (2, 7, 280)], |_| 0);
        pins.send(&sent);
        let got: Vec<_> = rx.drain().map(|r| (r.region, r.through)).collect();
        assert_eq!(got, [(1, 10), (2, 7)]);
        assert_eq!(pins.subscribers.len(), 1, "a gone subscriber is dropped");
    }
}
