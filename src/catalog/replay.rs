//! What a bulk replay reads: the wanted segments of many regions, grouped by
//! the object that holds them.
//!
//! Pure: the catalog and the owner's hidden-through ids in, a page of
//! objects out. A replay asks page after page, each starting above the last
//! object of the one before, so objects indexed while it runs are seen.
//!
//! Invariants of a page: objects in strictly increasing sequence, all at or
//! above `after`, at most `limit` of them; each holds only segments of
//! wanted regions that still hold an id at or above the region's start
//! (its `from`, above its hidden-through id, within or after the object of
//! `after`), in offset order; no object lies between `after` and the last
//! object of the page that holds such a segment and is missing from it.

use std::collections::BTreeMap;

use super::Catalog;
use crate::format::{self, SegmentIndex};
use crate::{EntryId, RegionId};

/// The wanted segments of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSegments {
    /// The object's sequence.
    pub sequence: u64,
    /// Its segments of wanted regions, in offset order.
    pub segments: Vec<SegmentIndex>,
}

impl Catalog {
    /// The first `limit` objects at or above sequence `after` that hold a
    /// segment of a wanted region `(region, from)` with an id at or above
    /// `from` and above `hidden(region)`, with those segments.
    pub fn replay_page(
        &self,
        wanted: &[(RegionId, EntryId)],
        hidden: impl Fn(RegionId) -> EntryId,
        after: u64,
        limit: usize,
    ) -> Vec<ObjectSegments> {
        let floor = format::entry_id(after, 0);
        let mut objects: BTreeMap<u64, Vec<SegmentIndex>> = BTreeMap::new();
        for &(region, from) in wanted {
            let start = from.max(hidden(region).saturating_add(1)).max(floor);
            for segment in self.segments_from(region, start, limit) {
                // Beyond the `limit`-th object found so far nothing can make
                // the page: skip what cannot be in it.
                if objects.len() >= limit
                    && objects
                        .keys()
                        .next_back()
                        .is_some_and(|&last| segment.sequence > last)
                {
                    break;
                }
                objects
                    .entry(segment.sequence)
                    .or_default()
                    .push(segment.index);
                if objects.len() > limit {
                    objects.pop_last();
                }
            }
        }
        objects
            .into_iter()
            .map(|(sequence, mut segments)| {
                segments.sort_by_key(|s| s.offset);
                ObjectSegments { sequence, segments }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::object;
    use super::*;
    use crate::format::entry_id;
    use proptest::prelude::*;

    fn catalog(objects: &[(u64, &[RegionId])]) -> Catalog {
        let mut c = Catalog::new();
        for (sequence, regions) in objects {
            c.insert(object(*sequence, regions)).unwrap();
        }
        c
    }

    fn shape(page: &[ObjectSegments]) -> Vec<(u64, Vec<RegionId>)> {
        page.iter()
            .map(|o| (o.sequence, o.segments.iter().map(|s| s.region).collect()))
            .collect()
    }

    #[test]
    fn groups_the_wanted_segments_by_object() {
        let c = catalog(&[(1, &[1, 2, 3]), (2, &[2]), (3, &[1, 3]), (4, &[3])]);
        let page = c.replay_page(&[(1, 0), (3, 0)], |_| 0, 0, 10);
        assert_eq!(
            shape(&page),
            vec![(1, vec![1, 3]), (3, vec![1, 3]), (4, vec![3])]
        );
        // Footer order is offset order; the test objects give every segment
        // one offset, so only the grouping is checked here.
        assert!(page.iter().all(|o| !o.segments.is_empty()));
    }

    #[test]
    fn starts_at_each_region_s_from_its_hidden_id_and_after() {
        let c = catalog(&[(1, &[1, 2]), (2, &[1, 2]), (3, &[1, 2])]);
        // Region 1 from the second entry of object 2: object 2 still holds it.
        let page = c.replay_page(&[(1, entry_id(2, 2)), (2, 0)], |_| 0, 0, 10);
        assert_eq!(
            shape(&page),
            vec![(1, vec![2]), (2, vec![1, 2]), (3, vec![1, 2])]
        );
        // Region 2 hidden through object 2's last entry (each holds two).
        let hidden = |r| if r == 2 { entry_id(2, 2) } else { 0 };
        let page = c.replay_page(&[(1, 0), (2, 0)], hidden, 0, 10);
        assert_eq!(
            shape(&page),
            vec![(1, vec![1]), (2, vec![1]), (3, vec![1, 2])]
        );
        let page = c.replay_page(&[(1, 0), (2, 0)], |_| 0, 3, 10);
        assert_eq!(shape(&page), vec![(3, vec![1, 2])]);
        assert!(c.replay_page(&[(1, 0)], |_| 0, 4, 10).is_empty());
        assert!(c.replay_page(&[(9, 0)], |_| 0, 0, 10).is_empty());
    }

    #[test]
    fn a_page_holds_the_first_objects_only() {
        let c = catalog(&[(1, &[1]), (2, &[2]), (3, &[1]), (4, &[2]), (5, &[1, 2])]);
        let page = c.replay_page(&[(1, 0), (2, 0)], |_| 0, 0, 2);
        assert_eq!(shape(&page), vec![(1, vec![1]), (2, vec![2])]);
        let page = c.replay_page(&[(1, 0), (2, 0)], |_| 0, 3, 2);
        assert_eq!(shape(&page), vec![(3, vec![1]), (4, vec![2])]);
        assert!(c.replay_page(&[(1, 0)], |_| 0, 0, 0).is_empty());
    }

    proptest! {
        /// Paging through a catalog yields exactly each wanted region's
        /// segments from its start, each once, in sequence order.
        #[test]
        fn pages_cover_every_wanted_segment_once(
            layout in proptest::collection::vec(proptest::collection::btree_set(0u64..6, 0..5), 1..30),
            wanted in proptest::collection::btree_map(0u64..6, 0u64..40, 0..6),
            limit in 1usize..6,
        ) {
            let mut c = Catalog::new();
            for (i, regions) in layout.iter().enumerate() {
                let regions: Vec<_> = regions.iter().copied().collect();
                c.insert(object(i as u64 + 1, &regions)).unwrap();
            }
            let wanted: Vec<(RegionId, EntryId)> = wanted
                .into_iter()
                .map(|(r, from)| (r, entry_id(from / 2, from % 3)))
                .collect();
            let mut got: Vec<(RegionId, u64)> = Vec::new();
            let mut after = 0;
            loop {
                let page = c.replay_page(&wanted, |_| 0, after, limit);
                prop_assert!(page.len() <= limit);
                let Some(last) = page.last() else { break };
                for o in &page {
                    prop_assert!(o.sequence >= after);
                    got.extend(o.segments.iter().map(|s| (s.region, o.sequence)));
                }
                after = last.sequence + 1;
            }
            let mut want: Vec<(RegionId, u64)> = Vec::new();
            for &(region, from) in &wanted {
                want.extend(
                    c.segments_from(region, from, usize::MAX)
                        .into_iter()
                        .map(|s| (region, s.sequence)),
                );
            }
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }
    }
}
