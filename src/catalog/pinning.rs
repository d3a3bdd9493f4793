//! Which regions hold the reclaim boundary, and how much each holds: the
//! answer to `Wal::pinning()` and the test behind flush requests.
//!
//! Pure: a catalog and the owner's hidden-through ids (watermarks and
//! releases) in, values out. A region is live while one of its indexed
//! segments holds an id above its hidden-through id; its *first live object*
//! is the oldest object holding such a segment. Collection cannot delete
//! anything at or above the lowest first live object (the reclaim boundary),
//! so a region *holds* every indexed object from its first live object on.
//!
//! Invariants of [`Catalog::pinning`]: one row per live region whose first
//! live object lies below the newest indexed object (the newest is never
//! collected, so holding only it holds nothing), ordered by first live
//! object, then region; `objects` and `bytes` count exactly the indexed
//! objects in `[first_sequence, next)` where `next` is the lowest first live
//! object of another region above it (the newest object when there is none),
//! so the rows' objects never overlap and their sum is what flushing every
//! listed region frees; `through` is the region's largest id below `next`.

use std::collections::BTreeMap;

use super::live::first_live_in;
use super::Catalog;
use crate::{EntryId, RegionId};

/// One region that holds objects from collection (see [`Catalog::pinning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pinning {
    /// The region.
    pub region: RegionId,
    /// Its first live object: the oldest holding one of its entries above
    /// its watermark. Collection cannot pass it.
    pub first_sequence: u64,
    /// Indexed objects from `first_sequence` up to the next pinning region's
    /// first live object (or the newest object): what collection may delete
    /// once this region, and every row before it, has flushed.
    pub objects: u64,
    /// The bytes of those objects.
    pub bytes: u64,
    /// Its largest entry id in those objects: `obsolete(region, through)`
    /// moves its first live object past them.
    pub through: EntryId,
    /// Every indexed object from `first_sequence` through the newest: how
    /// far behind the log this region is. `max_pinned_objects` bounds it.
    pub held_objects: u64,
}

impl Catalog {
    /// Every live region whose first live object lies below the newest
    /// indexed object, ordered by that object (the first row holds the
    /// reclaim boundary). `hidden(region)` is the owner's hidden-through id
    /// (its watermark, or its release); the catalog's own watermarks and
    /// records count too. A report: it visits every region.
    pub fn pinning(&self, hidden: impl Fn(RegionId) -> EntryId) -> Vec<Pinning> {
        let Some(newest) = self.tip().map(|t| t.sequence) else {
            return Vec::new();
        };
        let mut firsts: Vec<(u64, RegionId)> = self
            .regions
            .iter()
            .filter_map(|(&region, state)| {
                let obsolete = hidden(region).max(self.obsolete_through(region));
                let first = first_live_in(state.seqs.as_slice(), obsolete, |sequence| {
                    self.segment(sequence, region)
                });
                (first < newest).then_some((first, region))
            })
            .collect();
        firsts.sort_unstable();
        // Objects by rank with the running sum of their sizes, to count any
        // range with two binary searches.
        let mut sums = Vec::with_capacity(self.len() + 1);
        sums.push(0u64);
        for object in self.objects() {
            let last = sums.last().copied().unwrap_or(0);
            sums.push(last + object.size);
        }
        let len = self.len();
        let mut rows = Vec::with_capacity(firsts.len());
        for (i, &(first, region)) in firsts.iter().enumerate() {
            let next = firsts
                .get(i..)
                .and_then(|rest| rest.iter().find(|(f, _)| *f > first))
                .map_or(newest, |(f, _)| *f);
            let (from, to) = (self.rank(first), self.rank(next));
            rows.push(Pinning {
                region,
                first_sequence: first,
                objects: (to - from) as u64,
                bytes: sums.get(to).copied().unwrap_or(0) - sums.get(from).copied().unwrap_or(0),
                through: self.last_id_below(region, next),
                held_objects: (len - from) as u64,
            });
        }
        rows
    }

    /// The full computation of the regions beyond a bound, kept as the
    /// oracle of the actor's incremental flush requests: the live regions
    /// that hold more than `bound` indexed objects from collection (their
    /// first live object has `bound` or more indexed objects above it),
    /// each with the id through which a flush leaves at most `bound` held
    /// (its largest id below the newest `bound` objects) and the objects it
    /// holds.
    #[cfg(test)]
    pub fn pinned_beyond(
        &self,
        hidden: impl Fn(RegionId) -> EntryId,
        bound: u64,
    ) -> BTreeMap<RegionId, (EntryId, u64)> {
        let mut over = BTreeMap::new();
        let len = self.len() as u64;
        let Some(below) = len.checked_sub(bound).filter(|n| *n > 0) else {
            return over;
        };
        let below = usize::try_from(below).unwrap_or(usize::MAX);
        for (rank, object) in self.objects().take(below).enumerate() {
            for segment in &object.segments {
                let obsolete = hidden(segment.region).max(self.obsolete_through(segment.region));
                if segment.last_id > obsolete {
                    // The first live object met is the region's first.
                    let held = len - rank as u64;
                    let (through, _) = over.entry(segment.region).or_insert((0, held));
                    *through = segment.last_id.max(*through);
                }
            }
        }
        over
    }

    /// The sequence below which a first live object holds more than
    /// `bound` indexed objects from collection: the `bound`-th newest
    /// object's (`None` while the catalog holds no more than `bound`). It
    /// depends only on the newest objects, so it only moves up.
    pub fn beyond_bound(&self, bound: u64) -> Option<u64> {
        let n = usize::try_from(bound.checked_sub(1)?).ok()?;
        if self.len() as u64 <= bound {
            return None;
        }
        self.nth_newest(n).map(|o| o.sequence)
    }

    /// Indexed objects from `first` through the newest.
    pub fn held_from(&self, first: u64) -> u64 {
        (self.len() - self.rank(first)) as u64
    }

    /// The largest id of `region` in the objects below `sequence` (0 when
    /// none).
    pub fn last_id_below(&self, region: RegionId, sequence: u64) -> EntryId {
        let seqs = self.seqs(region);
        let n = seqs.partition_point(|&s| s < sequence);
        n.checked_sub(1)
            .and_then(|i| seqs.get(i))
            .and_then(|&s| self.segment(s, region))
            .map_or(0, |s| s.last_id)
    }

    /// Indexed objects from the reclaim boundary (the lowest first live
    /// object, with the watermarks of `raised` raised) through the newest:
    /// what live regions keep from collection.
    pub fn pinned_objects(&self, raised: &BTreeMap<RegionId, EntryId>) -> u64 {
        self.first_live(raised)
            .map_or(0, |first| self.held_from(first))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::object;
    use super::*;
    use crate::format::{entry_id, ReleaseRecord};
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Objects 1..=n; `regions(s)` names the regions of object `s`; every
    /// test object is 100 bytes and holds two entries per segment.
    fn catalog(n: u64, regions: impl Fn(u64) -> Vec<RegionId>) -> Catalog {
        let mut c = Catalog::new();
        for s in 1..=n {
            c.insert(object(s, &regions(s))).unwrap();
        }
        c
    }

    /// `c` with the owner's watermarks set to `hidden` for its regions.
    fn watermarked(c: &Catalog, hidden: impl Fn(RegionId) -> EntryId) -> Catalog {
        let mut c = c.clone();
        for region in c.regions() {
            c.set_watermark(region, hidden(region));
        }
        c
    }

    /// `pinned_objects` with the watermarks of `hidden`.
    fn pinned(c: &Catalog, hidden: impl Fn(RegionId) -> EntryId) -> u64 {
        watermarked(c, hidden).pinned_objects(&BTreeMap::new())
    }

    #[test]
    fn one_cold_region_holds_everything_below_the_hot_ones() {
        // Region 1 wrote once, in object 1; regions 2 and 3 write every
        // object and flushed through object 8.
        let c = catalog(10, |s| if s == 1 { vec![1, 2, 3] } else { vec![2, 3] });
        let hidden = |r| if r == 1 { 0 } else { entry_id(8, 2) };
        let rows = c.pinning(hidden);
        // The hot regions hold object 9, their first live one.
        let view: Vec<_> = rows.iter().map(|r| (r.region, r.objects)).collect();
        assert_eq!(view, vec![(1, 8), (2, 1), (3, 1)], "{rows:?}");
        let row = rows[0];
        assert_eq!((row.region, row.first_sequence), (1, 1));
        // Objects 1..=8 are held by region 1 alone; 9 holds the hot regions.
        assert_eq!((row.objects, row.bytes), (8, 800));
        assert_eq!(row.through, entry_id(1, 2));
        assert_eq!(row.held_objects, 10);
        assert_eq!(pinned(&c, hidden), 10);
        // Flushing region 1 through `through` moves the boundary to 9.
        let flushed = |r| if r == 1 { row.through } else { entry_id(8, 2) };
        assert_eq!(c.first_live_sequence(flushed), Some(9));
        assert_eq!(c.pinning(flushed)[0].first_sequence, 9);
    }

    #[test]
    fn rows_follow_the_first_live_objects_and_never_overlap() {
        // Region 1 in objects 1 and 6, region 2 in 3 and 6, region 3 in 6.
        let c = catalog(6, |s| match s {
            1 => vec![1],
            3 => vec![2],
            6 => vec![1, 2, 3],
            _ => vec![],
        });
        let rows = c.pinning(|_| 0);
        let view: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.region,
                    r.first_sequence,
                    r.objects,
                    r.through,
                    r.held_objects,
                )
            })
            .collect();
        // Region 3 lives only in the newest object: it holds nothing.
        assert_eq!(
            view,
            vec![(1, 1, 2, entry_id(1, 2), 6), (2, 3, 3, entry_id(3, 2), 4)]
        );
        assert_eq!(rows.iter().map(|r| r.objects).sum::<u64>(), 5);
    }

    #[test]
    fn regions_sharing_a_first_object_each_report_it() {
        let c = catalog(4, |s| if s == 1 { vec![1, 2] } else { vec![3] });
        let rows = c.pinning(|_| 0);
        let view: Vec<_> = rows.iter().map(|r| (r.region, r.objects)).collect();
        // Region 3's first live object is 2: both 1 and 2 hold object 1.
        assert_eq!(view, vec![(1, 1), (2, 1), (3, 2)]);
    }

    #[test]
    fn released_and_flushed_regions_do_not_pin() {
        let mut c = catalog(3, |_| vec![1, 2]);
        let mut o = object(4, &[]);
        o.releases = vec![ReleaseRecord {
            region: 2,
            released_through: entry_id(3, 2),
        }];
        c.insert(o).unwrap();
        let hidden = |r| if r == 1 { entry_id(3, 2) } else { 0 };
        assert!(c.pinning(hidden).is_empty());
        assert!(c.pinned_beyond(hidden, 1).is_empty());
        assert_eq!(pinned(&c, hidden), 0);
        assert!(Catalog::new().pinning(|_| 0).is_empty());
    }

    #[test]
    fn beyond_a_bound_the_region_and_its_flush_id_are_named() {
        let c = catalog(10, |s| match s {
            1 | 4 => vec![1, 2],
            _ => vec![2],
        });
        let hidden = |r| if r == 2 { entry_id(9, 2) } else { 0 };
        // Region 1 holds objects 1..=10 (10 objects).
        assert_eq!(c.pinned_beyond(hidden, 10), BTreeMap::new());
        assert_eq!(
            c.pinned_beyond(hidden, 9),
            BTreeMap::from([(1, (entry_id(1, 2), 10))])
        );
        // Within 6 objects of the newest: its entries in object 4 go too.
        assert_eq!(
            c.pinned_beyond(hidden, 6),
            BTreeMap::from([(1, (entry_id(4, 2), 10))])
        );
        let flushed = |r| {
            if r == 2 {
                entry_id(9, 2)
            } else {
                entry_id(4, 2)
            }
        };
        assert!(c.pinned_beyond(flushed, 6).is_empty());
    }

    proptest! {
        /// `pinned_beyond` names exactly the rows of `pinning` that hold
        /// more than the bound, and obsolete through its id brings each
        /// within it; `pinned_objects` is the largest `held_objects`.
        #[test]
        fn the_bound_agrees_with_the_report(
            layout in proptest::collection::vec(proptest::collection::btree_set(0u64..5, 0..4), 1..25),
            marks in proptest::collection::vec(0u64..26, 5),
            bound in 1u64..12,
        ) {
            let mut c = Catalog::new();
            for (i, regions) in layout.iter().enumerate() {
                let regions: Vec<_> = regions.iter().copied().collect();
                c.insert(object(i as u64 + 1, &regions)).unwrap();
            }
            let watermarks: HashMap<RegionId, EntryId> = marks
                .iter()
                .enumerate()
                .map(|(r, &s)| (r as u64, entry_id(s, 2)))
                .collect();
            let hidden = |r: RegionId| watermarks.get(&r).copied().unwrap_or(0);
            let rows = c.pinning(hidden);
            let over = c.pinned_beyond(hidden, bound);
            let named: Vec<_> = over.iter().map(|(r, (_, held))| (*r, *held)).collect();
            let mut expected: Vec<_> = rows
                .iter()
                .filter(|r| r.held_objects > bound)
                .map(|r| (r.region, r.held_objects))
                .collect();
            expected.sort_unstable();
            prop_assert_eq!(named, expected);
            let max_held = rows.iter().map(|r| r.held_objects).max();
            let pinned = pinned(&c, hidden);
            // A region living only in the newest object holds 1 and has no row.
            prop_assert!(max_held.is_none_or(|m| m == pinned), "{:?} {}", max_held, pinned);
            for (&region, &(through, _)) in &over {
                let flushed = |r: RegionId| {
                    if r == region { through.max(hidden(r)) } else { hidden(r) }
                };
                prop_assert!(!c.pinned_beyond(flushed, bound).contains_key(&region));
            }
        }
    }
}
