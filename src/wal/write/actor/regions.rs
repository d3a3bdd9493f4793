//! The per-region tables of the actor: ids handed out, releases and
//! durable ids. The engine's watermarks live in the catalog
//! ([`Catalog::set_watermark`]), which keeps each region's first live object
//! in step with them.
//!
//! Invariants:
//! - a watermark is only ever the engine's (`obsolete`); a release never
//!   raises it, so the reclaim boundary can tell an engine's flush from a
//!   release whose record is not durable yet (issue 10, item 8);
//! - what a read hides is the higher of the watermark and the release;
//! - every table only grows: no id, release or durable id moves down;
//! - `unindexed` holds exactly the releases of this life whose record is
//!   not yet in an indexed object (at their released-through id or above).
//!
//! Memory: one map entry of two ids per region that was ever written
//! (issue 23, "Memory per region"); releases are a map of their own, as few
//! regions are ever released.

use std::collections::BTreeMap;

use crate::catalog::region_map::RegionMap;
use crate::catalog::Catalog;
use crate::{EntryId, RegionId};

/// The ids of one region.
#[derive(Debug, Default, Clone, Copy)]
struct Ids {
    /// The largest id ever handed out (this life, and the recovered catalog).
    assigned: EntryId,
    /// The largest id durable and indexed (it survives collection).
    durable: EntryId,
}

/// Per-region state of one store instance.
#[derive(Debug, Default)]
pub(super) struct Regions {
    ids: RegionMap<Ids>,
    /// Released in this life or by an indexed record: through which id.
    released: RegionMap<EntryId>,
    /// Released in this life, and no indexed object carries the record yet.
    unindexed: BTreeMap<RegionId, EntryId>,
}

impl Regions {
    /// The tables of a recovered catalog: its ids are handed out and
    /// durable, its release records released.
    pub(super) fn recovered(catalog: &Catalog) -> Self {
        let mut regions = Regions {
            released: catalog.released().collect(),
            ..Regions::default()
        };
        for region in catalog.regions() {
            let last = catalog.last_id(region);
            regions.ids.insert(
                region,
                Ids {
                    assigned: last,
                    durable: last,
                },
            );
        }
        regions
    }

    /// Records an id handed out at admission.
    pub(super) fn assign(&mut self, region: RegionId, id: EntryId) {
        let ids = self.ids.entry(region).or_default();
        ids.assigned = ids.assigned.max(id);
    }

    /// The largest id handed out for `region` (0 when none).
    pub(super) fn assigned(&self, region: RegionId) -> EntryId {
        self.ids.get(&region).map_or(0, |i| i.assigned)
    }

    /// Whether `region` was released.
    pub(super) fn is_released(&self, region: RegionId) -> bool {
        self.released.contains_key(&region)
    }

    /// Through which id `region` was released (0 when not).
    pub(super) fn released_through(&self, region: RegionId) -> EntryId {
        self.released.get(&region).copied().unwrap_or(0)
    }

    /// Releases `region` through the largest id ever handed out for it (or
    /// `floor`, if higher) and returns that id.
    pub(super) fn release(&mut self, region: RegionId, floor: EntryId) -> EntryId {
        let through = self
            .assigned(region)
            .max(self.released_through(region))
            .max(floor);
        self.released.insert(region, through);
        self.unindexed.insert(region, through);
        through
    }

    /// An indexed object carries the release record of `region` through
    /// `through`.
    pub(super) fn release_indexed(&mut self, region: RegionId, through: EntryId) {
        if self.unindexed.get(&region).is_some_and(|&t| t <= through) {
            self.unindexed.remove(&region);
        }
    }

    /// The releases of this life whose record is not yet indexed: what the
    /// catalog does not know yet of what reads hide.
    pub(super) fn unindexed_releases(&self) -> &BTreeMap<RegionId, EntryId> {
        &self.unindexed
    }

    /// The releases, by region (for reports).
    pub(super) fn released(&self) -> impl Iterator<Item = (RegionId, EntryId)> + '_ {
        self.released.iter().map(|(r, t)| (*r, *t))
    }

    /// Records the largest ids of a batch that became durable and indexed.
    pub(super) fn mark_durable(&mut self, last_ids: &[(RegionId, EntryId)]) {
        for (region, id) in last_ids {
            let ids = self.ids.entry(*region).or_default();
            ids.durable = ids.durable.max(*id);
        }
    }

    /// The largest durable and indexed id of `region`.
    pub(super) fn durable(&self, region: RegionId) -> EntryId {
        self.ids.get(&region).map_or(0, |i| i.durable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::object;
    use crate::format::ReleaseRecord;

    #[test]
    fn a_release_is_unindexed_until_its_record_is() {
        let mut r = Regions::default();
        r.assign(1, 10);
        assert_eq!(r.release(1, 0), 10);
        assert!(r.is_released(1));
        assert_eq!(r.released_through(1), 10);
        // A later release covers a higher floor (the catalog's last id).
        assert_eq!(r.release(1, 12), 12);
        r.release_indexed(1, 10);
        assert_eq!(r.unindexed_releases().get(&1), Some(&12));
        r.release_indexed(1, 12);
        assert!(r.unindexed_releases().is_empty());
    }

    #[test]
    fn tables_never_move_down() {
        let mut r = Regions::default();
        r.mark_durable(&[(1, 7), (2, 5)]);
        r.mark_durable(&[(1, 6)]);
        assert_eq!((r.durable(1), r.durable(2), r.durable(3)), (7, 5, 0));
        r.assign(2, 8);
        r.assign(2, 1);
        assert_eq!(r.assigned(2), 8);
    }

    #[test]
    fn a_recovered_catalog_seeds_ids_and_releases() {
        let mut c = Catalog::new();
        c.insert(object(1, &[1, 2])).unwrap();
        let mut o = object(2, &[1]);
        o.releases = vec![ReleaseRecord {
            region: 2,
            released_through: crate::format::entry_id(1, 2),
        }];
        c.insert(o).unwrap();
        let r = Regions::recovered(&c);
        assert_eq!(r.assigned(1), crate::format::entry_id(2, 2));
        assert_eq!(r.durable(1), crate::format::entry_id(2, 2));
        assert!(r.is_released(2) && !r.is_released(1));
        assert!(r.unindexed_releases().is_empty());
    }
}
