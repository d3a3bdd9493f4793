//! The per-region tables of the actor: ids handed out, watermarks, releases
//! and durable ids.
//!
//! Invariants:
//! - a watermark is only ever the engine's (`obsolete`); a release never
//!   raises it, so the reclaim boundary can tell an engine's flush from a
//!   release whose record is not durable yet (issue 10, item 8);
//! - what a read hides is the higher of the watermark and the release;
//! - every table only grows: no id, watermark, release or durable id moves down.

use std::collections::HashMap;

use crate::catalog::Catalog;
use crate::{EntryId, RegionId};

/// Per-region state of one store instance.
#[derive(Debug, Default)]
pub(super) struct Regions {
    /// The engine's watermarks: entries through them are obsolete.
    watermarks: HashMap<RegionId, EntryId>,
    /// The largest id ever handed out (this life, and the recovered catalog).
    assigned: HashMap<RegionId, EntryId>,
    /// Released in this life or by an indexed record: through which id.
    released: HashMap<RegionId, EntryId>,
    /// The largest id durable and indexed (it survives collection).
    durable: HashMap<RegionId, EntryId>,
}

fn raise(map: &mut HashMap<RegionId, EntryId>, region: RegionId, id: EntryId) {
    let slot = map.entry(region).or_insert(0);
    *slot = (*slot).max(id);
}

fn get(map: &HashMap<RegionId, EntryId>, region: RegionId) -> EntryId {
    map.get(&region).copied().unwrap_or(0)
}

impl Regions {
    /// The tables of a recovered catalog: its ids are handed out and
    /// durable, its release records released, its flush marks the
    /// watermarks (the engine handed them in before the restart).
    pub(super) fn recovered(catalog: &Catalog) -> Self {
        let mut regions = Regions {
            released: catalog.released().clone(),
            watermarks: catalog.marked().clone(),
            ..Regions::default()
        };
        for region in catalog.regions() {
            let last = catalog.last_id(region);
            raise(&mut regions.assigned, region, last);
            raise(&mut regions.durable, region, last);
        }
        regions
    }

    /// Records an id handed out at admission.
    pub(super) fn assign(&mut self, region: RegionId, id: EntryId) {
        raise(&mut self.assigned, region, id);
    }

    /// The largest id handed out for `region` (0 when none).
    pub(super) fn assigned(&self, region: RegionId) -> EntryId {
        get(&self.assigned, region)
    }

    /// Whether `region` was released.
    pub(super) fn is_released(&self, region: RegionId) -> bool {
        self.released.contains_key(&region)
    }

    /// Through which id `region` was released (0 when not).
    pub(super) fn released_through(&self, region: RegionId) -> EntryId {
        get(&self.released, region)
    }

    /// Releases `region` through the largest id ever handed out for it (or
    /// `floor`, if higher) and returns that id.
    pub(super) fn release(&mut self, region: RegionId, floor: EntryId) -> EntryId {
        let through = self
            .assigned(region)
            .max(self.released_through(region))
            .max(floor);
        raise(&mut self.released, region, through);
        through
    }

    /// Raises the engine's watermark of `region`.
    pub(super) fn obsolete(&mut self, region: RegionId, id: EntryId) {
        raise(&mut self.watermarks, region, id);
    }

    /// The engine's watermark of `region`.
    pub(super) fn watermark(&self, region: RegionId) -> EntryId {
        get(&self.watermarks, region)
    }

    /// Entries of `region` at or below this are hidden from reads.
    pub(super) fn hidden_through(&self, region: RegionId) -> EntryId {
        self.watermark(region).max(self.released_through(region))
    }

    /// The engine's watermarks and the releases, by region (for reports).
    pub(super) fn tables(&self) -> (&HashMap<RegionId, EntryId>, &HashMap<RegionId, EntryId>) {
        (&self.watermarks, &self.released)
    }

    /// Records the largest ids of a batch that became durable and indexed.
    pub(super) fn mark_durable(&mut self, last_ids: &[(RegionId, EntryId)]) {
        for (region, id) in last_ids {
            raise(&mut self.durable, *region, *id);
        }
    }

    /// The largest durable and indexed id of `region`.
    pub(super) fn durable(&self, region: RegionId) -> EntryId {
        get(&self.durable, region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::object;
    use crate::format::ReleaseRecord;

    #[test]
    fn a_release_hides_without_moving_the_watermark() {
        let mut r = Regions::default();
        r.assign(1, 10);
        r.obsolete(1, 4);
        assert_eq!(r.release(1, 0), 10);
        assert_eq!(
            r.watermark(1),
            4,
            "the boundary must not count an undurable release"
        );
        assert_eq!(r.hidden_through(1), 10);
        assert!(r.is_released(1));
        // A later release covers a higher floor (the catalog's last id).
        assert_eq!(r.release(1, 12), 12);
    }

    #[test]
    fn tables_never_move_down() {
        let mut r = Regions::default();
        r.obsolete(1, 9);
        r.obsolete(1, 3);
        assert_eq!(r.watermark(1), 9);
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
        assert_eq!(r.watermark(2), 0);
    }
}
