//! The pinning room: which regions hold the reclaim boundary, the gauge
//! `objwal_pinned_objects`, and flush requests to the engine.
//!
//! After every indexed object and every collection tick (the hook is the
//! first line of `maybe_collect`) the actor publishes how many indexed
//! objects live regions keep from collection and, when
//! `max_pinned_objects` is set, asks each region that keeps more than that
//! to flush ([`Pins::check`]). Both cost what changed since the last
//! check, not what the catalog holds (issue 23). Nothing here
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

use crate::catalog::{Catalog, Pinning};
use crate::error::Error;
use crate::{EntryId, RegionId};

use super::Actor;

/// A request to the engine: flush `region` through `through` and call
/// `obsolete(region, through)` (or beyond), so that collection can delete
/// the objects it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushRequest {
    /// The region to flush.
    pub region: RegionId,
    /// Obsolete through this id (at least) to bring the region back within
    /// `max_pinned_objects`: its largest id below the newest that many
    /// objects, when it was asked.
    pub through: EntryId,
    /// The indexed objects the region held from collection when it was
    /// asked (more than `max_pinned_objects`).
    pub held_objects: u64,
}

/// Flush requests asked and not yet answered, and who listens.
#[derive(Debug, Default)]
pub(super) struct Pins {
    /// Regions asked to flush and still beyond the bound: the id asked for
    /// and the objects they held then.
    asked: BTreeMap<RegionId, (EntryId, u64)>,
    subscribers: Vec<flume::Sender<FlushRequest>>,
    /// The threshold of the last check (see [`Pins::check`]); `None` while
    /// the catalog held no more than the bound.
    below: Option<u64>,
}

impl Pins {
    /// The requests to send now. A region is beyond the bound when it is
    /// live, not `released`, and its first live object lies below the
    /// threshold `S`, the `bound`-th newest object (it then holds more than
    /// `bound` objects); it is asked through its largest id below `S`.
    ///
    /// Incremental: a region's verdict depends on its first live object,
    /// its obsolete id (a region asked is asked again once that reaches
    /// the id it was asked for), whether it is released, and `S`. `S`
    /// depends only on the newest objects and only moves up; the catalog
    /// tracks the regions whose segments or obsolete id changed; a release
    /// forgets the region at once ([`Pins::released`]). So only the tracked
    /// regions and those whose first live object `S` passed since the last
    /// check can get a different verdict, and a check costs what changed,
    /// not what the catalog holds. `update_full` is the computation it
    /// replaces; the property test below holds them equal.
    pub(super) fn check(
        &mut self,
        catalog: &mut Catalog,
        bound: u64,
        released: impl Fn(RegionId) -> bool,
    ) -> Vec<FlushRequest> {
        let changed = catalog.take_changed();
        let Some(threshold) = catalog.beyond_bound(bound) else {
            // Nothing holds more than the bound: every region is within.
            self.asked.clear();
            self.below = None;
            return Vec::new();
        };
        let from = self.below.unwrap_or(0).min(threshold);
        self.below = Some(threshold);
        let mut candidates: Vec<RegionId> = catalog
            .firsts_between(from, threshold)
            .map(|(_, region)| region)
            .chain(changed)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        let mut requests = Vec::new();
        for region in candidates {
            let first = catalog
                .first_live_of(region)
                .filter(|&f| f < threshold && !released(region));
            let Some(first) = first else {
                self.asked.remove(&region);
                continue;
            };
            let again = self
                .asked
                .get(&region)
                .is_none_or(|(asked, _)| catalog.obsolete_through(region) >= *asked);
            if again {
                let through = catalog.last_id_below(region, threshold);
                let held_objects = catalog.held_from(first);
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

    /// A released region is never asked: forget what it was asked.
    pub(super) fn released(&mut self, region: RegionId) {
        self.asked.remove(&region);
    }

    /// The computation [`Pins::check`] replaces: the requests to send now
    /// that `over` (region, flush-through id, objects held) are beyond the
    /// bound; `watermark` is each region's obsolete-through id. Regions no
    /// longer over are forgotten (a later crossing asks again).
    #[cfg(test)]
    pub(super) fn update_full(
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
        if requests.is_empty() {
            return;
        }
        self.subscribers
            .retain(|tx| requests.iter().all(|r| tx.send(*r).is_ok()));
    }
}

impl Actor {
    /// Publishes the pinned objects and sends the flush requests due.
    pub(super) fn check_pinning(&mut self) {
        self.metrics.pinned_objects.set(
            self.catalog
                .pinned_objects(self.regions.unindexed_releases()) as f64,
        );
        let bound = self.config.max_pinned_objects;
        if bound == 0 || self.refusal().is_some() {
            return;
        }
        let regions = &self.regions;
        let requests = self
            .pins
            .check(&mut self.catalog, bound, |r| regions.is_released(r));
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
        Ok(self.catalog.pinning(|region| self.hidden_through(region)))
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
        assert_eq!(
            regions(&pins.update_full(vec![(1, 10, 300)], none)),
            [(1, 10)]
        );
        // Still beyond, nothing flushed: not asked again, however far.
        assert!(pins.update_full(vec![(1, 12, 301)], none).is_empty());
        assert!(pins.update_full(vec![(1, 40, 900)], |_| 9).is_empty());
        // Back within the bound, then beyond again: a new crossing.
        assert!(pins.update_full(vec![], none).is_empty());
        assert_eq!(
            regions(&pins.update_full(vec![(1, 50, 300)], none)),
            [(1, 50)]
        );
    }

    #[test]
    fn a_region_that_flushed_what_it_was_asked_and_is_still_beyond_is_asked_again() {
        let mut pins = Pins::default();
        pins.update_full(vec![(1, 10, 300), (2, 20, 300)], |_| 0);
        let flushed = |r| if r == 1 { 10 } else { 0 };
        assert_eq!(
            regions(&pins.update_full(vec![(1, 30, 290), (2, 20, 300)], flushed)),
            [(1, 30)]
        );
    }

    #[test]
    fn a_subscriber_learns_the_outstanding_requests_and_later_ones() {
        let mut pins = Pins::default();
        pins.update_full(vec![(1, 10, 300)], |_| 0);
        let rx = pins.subscribe();
        let dropped = pins.subscribe();
        drop(dropped);
        let sent = pins.update_full(vec![(1, 10, 300), (2, 7, 280)], |_| 0);
        pins.send(&sent);
        let got: Vec<_> = rx.drain().map(|r| (r.region, r.through)).collect();
        assert_eq!(got, [(1, 10), (2, 7)]);
        assert_eq!(pins.subscribers.len(), 1, "a gone subscriber is dropped");
    }

    /// One step of a history the pinning room sees.
    #[derive(Debug, Clone)]
    enum Step {
        /// An object holding these regions (two entries each).
        Insert(Vec<RegionId>),
        /// The engine flushes `region` through its id `back` objects below
        /// the newest.
        Flush(RegionId, u64),
        /// The region is released (its release is in memory).
        Release(RegionId),
        /// Collection below the `n`-th indexed object.
        Collect(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            6 => proptest::collection::btree_set(0u64..8, 0..4)
                .prop_map(|r| Step::Insert(r.into_iter().collect())),
            3 => (0u64..8, 0u64..12).prop_map(|(r, back)| Step::Flush(r, back)),
            1 => (0u64..8).prop_map(Step::Release),
            1 => (0usize..4).prop_map(Step::Collect),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// The incremental check sends exactly the requests of the full
        /// computation it replaced (every region's first live object
        /// against the bound, after every step) and keeps the same
        /// outstanding requests.
        #[test]
        fn incremental_flush_requests_equal_the_full_computation(
            steps in proptest::collection::vec(step(), 1..80),
            bound in 1u64..8,
        ) {
            use crate::catalog::tests::object;
            use crate::format::entry_id;
            use std::collections::BTreeSet;

            let mut catalog = Catalog::new();
            catalog.track_changes();
            let (mut incremental, mut full) = (Pins::default(), Pins::default());
            let mut released: BTreeSet<RegionId> = BTreeSet::new();
            let mut next = 1u64;
            for step in steps {
                match step {
                    Step::Insert(regions) => {
                        let regions: Vec<_> =
                            regions.into_iter().filter(|r| !released.contains(r)).collect();
                        catalog.insert(object(next, &regions)).unwrap();
                        next += 1;
                    }
                    Step::Flush(region, back) => {
                        let through = entry_id(next.saturating_sub(1 + back), 2);
                        catalog.set_watermark(region, through);
                    }
                    Step::Release(region) => {
                        released.insert(region);
                        incremental.released(region);
                    }
                    Step::Collect(n) => {
                        let below = catalog.objects().nth(n).map_or(next, |o| o.sequence);
                        catalog.remove_below(below);
                    }
                }
                let over: Vec<_> = catalog
                    .pinned_beyond(|r| catalog.watermark(r), bound)
                    .into_iter()
                    .filter(|(r, _)| !released.contains(r))
                    .map(|(r, (through, held))| (r, through, held))
                    .collect();
                let expected = full.update_full(over, |r| catalog.obsolete_through(r));
                let mut got = incremental.check(&mut catalog, bound, |r| released.contains(&r));
                got.sort_by_key(|r| r.region);
                let view = |v: &[FlushRequest]| {
                    v.iter().map(|r| (r.region, r.through, r.held_objects)).collect::<Vec<_>>()
                };
                proptest::prop_assert_eq!(view(&got), view(&expected));
                proptest::prop_assert_eq!(&incremental.asked, &full.asked);
            }
        }
    }
}
