//! What the log holds per region: the answer to `Wal::regions()` and
//! `WalReader::regions()`.
//!
//! Pure: a catalog and the owner's watermarks and releases in, one
//! [`RegionInfo`] per region out. "Held" means indexed: entries admitted but
//! not yet in an indexed object (enqueued mode, or a batch still being
//! created) are not counted, and neither are objects that were collected.
//!
//! Invariants of the result: one row per region that has an indexed segment
//! or a release (indexed, or recorded by the owner), in ascending region
//! order; `first_id <= last_id` when the region has entries, both 0 when it
//! has none; `bytes`, `entries` and `objects` are sums over exactly the
//! indexed segments of the region.

use std::collections::BTreeMap;

use super::Catalog;
use crate::{EntryId, RegionId};

/// What the log holds of one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegionInfo {
    /// The region.
    pub region: RegionId,
    /// The first indexed entry id (0 when no segment of the region is
    /// indexed). Entries at or below `watermark` are held but hidden.
    pub first_id: EntryId,
    /// The last indexed entry id (0 when none is indexed).
    pub last_id: EntryId,
    /// Entries in the indexed segments, obsolete ones included.
    pub entries: u64,
    /// Bytes of the region's segments in indexed objects (framing included):
    /// what deleting the region's objects would free, as far as it is this
    /// region's share.
    pub bytes: u64,
    /// Indexed objects holding a segment of the region.
    pub objects: u64,
    /// Entries at or below this id are obsolete (flushed by the engine, or
    /// released): reads hide them and they do not pin collection. A
    /// `WalReader` knows only released-through ids (watermarks are not
    /// persisted).
    pub watermark: EntryId,
    /// Whether the region was released (`release_region`).
    pub released: bool,
}

impl Catalog {
    /// One [`RegionInfo`] per region with an indexed segment or a release,
    /// in region order. The owner's watermarks are the catalog's
    /// ([`Catalog::set_watermark`]); `released` are the owner's
    /// released-through ids (the catalog's own indexed release records
    /// count too).
    pub fn region_infos(
        &self,
        released: impl IntoIterator<Item = (RegionId, EntryId)>,
    ) -> Vec<RegionInfo> {
        let mut rows: BTreeMap<RegionId, RegionInfo> = BTreeMap::new();
        for (&region, state) in &self.regions {
            let segments: Vec<_> = state
                .seqs
                .as_slice()
                .iter()
                .filter_map(|&sequence| self.segment(sequence, region))
                .collect();
            let (Some(first), Some(last)) = (segments.first(), segments.last()) else {
                continue;
            };
            let mut row = empty(region);
            row.first_id = first.first_id;
            row.last_id = last.last_id;
            for segment in &segments {
                row.entries += u64::from(segment.count);
                row.bytes += segment.len;
                row.objects += 1;
            }
            rows.insert(region, row);
        }
        let indexed: Vec<_> = self.released().collect();
        for (region, through) in indexed.into_iter().chain(released) {
            let row = rows.entry(region).or_insert_with(|| empty(region));
            row.released = true;
            row.watermark = row.watermark.max(through);
        }
        for (region, state) in &self.regions {
            if let Some(row) = rows.get_mut(region) {
                row.watermark = row.watermark.max(state.watermark);
            }
        }
        rows.into_values().collect()
    }
}

fn empty(region: RegionId) -> RegionInfo {
    RegionInfo {
        region,
        first_id: 0,
        last_id: 0,
        entries: 0,
        bytes: 0,
        objects: 0,
        watermark: 0,
        released: false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::object;
    use super::*;
    use crate::format::{entry_id, ReleaseRecord};

    #[test]
    fn sums_the_indexed_segments_of_each_region() {
        let mut c = Catalog::new();
        c.insert(object(1, &[1, 2])).unwrap();
        c.insert(object(2, &[2])).unwrap();
        c.insert(object(5, &[1, 2])).unwrap();
        let rows = c.region_infos([]);
        let mut one = empty(1);
        // `object` gives every segment 2 entries of 13 bytes each.
        one.first_id = entry_id(1, 1);
        one.last_id = entry_id(5, 2);
        one.entries = 4;
        one.bytes = 52;
        one.objects = 2;
        let mut two = one;
        two.region = 2;
        two.entries = 6;
        two.bytes = 78;
        two.objects = 3;
        assert_eq!(rows, vec![one, two]);
    }

    #[test]
    fn collected_objects_no_longer_count() {
        let mut c = Catalog::new();
        c.insert(object(1, &[1, 2])).unwrap();
        c.insert(object(2, &[2])).unwrap();
        c.remove_below(2);
        let rows = c.region_infos([]);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].region, 2);
        assert_eq!((rows[0].first_id, rows[0].objects), (entry_id(2, 1), 1));
    }

    #[test]
    fn watermarks_and_releases_mark_rows_and_releases_add_rows() {
        let mut c = Catalog::new();
        let mut o = object(1, &[1, 2]);
        o.releases = vec![ReleaseRecord {
            region: 9,
            released_through: entry_id(0, 3),
        }];
        c.insert(o).unwrap();
        c.set_watermark(1, entry_id(1, 1));
        c.set_watermark(7, entry_id(1, 2));
        let rows = c.region_infos([(2, entry_id(1, 2))]);
        let by_region: Vec<_> = rows
            .iter()
            .map(|r| (r.region, r.watermark, r.released))
            .collect();
        // Region 7 has a watermark but holds nothing: no row. Region 9 was
        // released by an indexed record and holds nothing: a row.
        assert_eq!(
            by_region,
            vec![
                (1, entry_id(1, 1), false),
                (2, entry_id(1, 2), true),
                (9, entry_id(0, 3), true),
            ]
        );
        assert_eq!(rows[2].bytes + rows[2].entries + rows[2].last_id, 0);
    }

    #[test]
    fn an_empty_catalog_has_no_regions() {
        assert!(Catalog::new().region_infos([]).is_empty());
    }
}
