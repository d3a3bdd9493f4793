//! The catalog's per-region state and the live index: which object each
//! region's oldest live segment lies in, kept up to date on every change so
//! that the reclaim boundary costs what one region costs.
//!
//! A segment is *live* when it holds an entry above its region's obsolete
//! id: the highest of the owner's watermark ([`super::Catalog::set_watermark`]),
//! the region's indexed release record and its indexed flush mark. Ids grow
//! with sequences (C3), so a region's live segments are a suffix of its
//! segments, and its *first live object* is the first segment of that
//! suffix. The index holds `(first live object, region)` for every live
//! region in order; its first element is the lowest first live object of
//! all, which is what the reclaim boundary needs ([`super::Catalog::first_live`]).
//!
//! Invariants (checked by [`super::Catalog::check_invariants`]):
//! - L1: a region's state lists exactly the sequences of the indexed objects
//!   holding a segment of it, ascending; a state exists while it lists one,
//!   or while the owner's watermark of the region is above 0;
//! - L2: a region's `first_live` is what [`first_live_in`] computes from its
//!   sequences and its obsolete id now, and the index holds
//!   `(first_live, region)` exactly for the regions that are live;
//! - L3: per region, the record maps hold the highest release (mark) of the
//!   indexed objects, the newest object carrying it, and how many indexed
//!   records of the region there are.
//!
//! Why it is exact, in short (rfcs/0005, "The reclaim boundary at scale"):
//! a region's first live object depends only on its segments and its
//! obsolete id, and both change only through the catalog's own operations
//! (insert, remove_below, set_watermark), each of which recomputes the
//! first live object of exactly the regions whose segments or obsolete id
//! it touched. The minimum over regions is then the index's first element.

use crate::format::{self, SegmentIndex};
use crate::{EntryId, RegionId};

use super::region_map::RegionMap;

/// `first_live` of a region that is not live.
pub(super) const NOT_LIVE: u64 = u64::MAX;

/// The sequences of the objects holding a region's segments, ascending. An
/// idle region usually has one: kept inline, without an allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seqs {
    One(u64),
    Many(Vec<u64>),
}

impl Default for Seqs {
    fn default() -> Self {
        Seqs::Many(Vec::new())
    }
}

impl Seqs {
    pub(super) fn as_slice(&self) -> &[u64] {
        match self {
            Seqs::One(s) => std::slice::from_ref(s),
            Seqs::Many(v) => v,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Appends a sequence above every listed one.
    pub(super) fn push(&mut self, sequence: u64) {
        debug_assert!(self.as_slice().last().is_none_or(|&l| l < sequence));
        match self {
            Seqs::Many(v) if v.is_empty() => *self = Seqs::One(sequence),
            Seqs::One(first) => *self = Seqs::Many(vec![*first, sequence]),
            Seqs::Many(v) => v.push(sequence),
        }
    }

    /// Removes the sequences below `sequence`; how many.
    pub(super) fn remove_below(&mut self, sequence: u64) -> usize {
        let n = self.as_slice().partition_point(|&s| s < sequence);
        if n == 0 {
            return 0;
        }
        match self {
            Seqs::One(_) => *self = Seqs::default(),
            Seqs::Many(v) => {
                v.drain(..n);
                if let [only] = v.as_slice() {
                    *self = Seqs::One(*only);
                } else if v.capacity() > 4 * v.len().max(1) {
                    v.shrink_to_fit();
                }
            }
        }
        n
    }
}

/// What the catalog keeps per region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RegionState {
    /// L1: the objects holding its segments.
    pub(super) seqs: Seqs,
    /// The owner's watermark: entries through it are obsolete.
    pub(super) watermark: EntryId,
    /// L2: its first live object, [`NOT_LIVE`] when none.
    pub(super) first_live: u64,
}

impl Default for RegionState {
    fn default() -> Self {
        RegionState {
            seqs: Seqs::default(),
            watermark: 0,
            first_live: NOT_LIVE,
        }
    }
}

/// The first live object of a region whose segments lie in `seqs`, with
/// entries through `obsolete` obsolete; `segment(sequence)` finds its
/// segment in an object. One binary search and at most one lookup: only
/// the segment in the object of `obsolete`'s own sequence can hold ids on
/// both sides of it; every later one holds only ids above it (C3).
pub(super) fn first_live_in(
    seqs: &[u64],
    obsolete: EntryId,
    segment: impl Fn(u64) -> Option<SegmentIndex>,
) -> u64 {
    let within = format::sequence_of(obsolete);
    let i = seqs.partition_point(|&s| s < within);
    let Some(&at) = seqs.get(i) else {
        return NOT_LIVE;
    };
    if at > within || segment(at).is_some_and(|s| s.last_id > obsolete) {
        return at;
    }
    seqs.get(i + 1).copied().unwrap_or(NOT_LIVE)
}

/// One region's records of one kind in the indexed objects (L3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Record {
    /// The highest id of the records.
    pub(super) value: EntryId,
    /// The newest object carrying `value`.
    pub(super) carrier: u64,
    /// How many records there are.
    pub(super) count: u32,
}

/// The release records (or the flush marks) of the indexed objects, per
/// region: the highest, maintained as objects come and go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Records {
    pub(super) by_region: RegionMap<Record>,
}

impl Records {
    /// Takes in a record of `sequence` (above every indexed one); whether
    /// the region's highest id rose.
    pub(super) fn learn(&mut self, region: RegionId, value: EntryId, sequence: u64) -> bool {
        match self.by_region.get_mut(&region) {
            None => {
                self.by_region.insert(
                    region,
                    Record {
                        value,
                        carrier: sequence,
                        count: 1,
                    },
                );
                value > 0
            }
            Some(r) => {
                r.count = r.count.saturating_add(1);
                if value >= r.value {
                    let rose = value > r.value;
                    r.value = value;
                    r.carrier = sequence;
                    rose
                } else {
                    false
                }
            }
        }
    }

    /// Forgets a record of a collected object; whether the region's highest
    /// id must be found again among the records left (its carrier is gone
    /// and records are left: only when records were not monotone).
    pub(super) fn forget(&mut self, region: RegionId, below: u64) -> Forgot {
        let Some(r) = self.by_region.get_mut(&region) else {
            return Forgot::Unchanged;
        };
        r.count = r.count.saturating_sub(1);
        if r.count == 0 {
            self.by_region.remove(&region);
            Forgot::Gone
        } else if r.carrier < below {
            Forgot::Rescan
        } else {
            Forgot::Unchanged
        }
    }

    pub(super) fn get(&self, region: RegionId) -> EntryId {
        self.by_region.get(&region).map_or(0, |r| r.value)
    }
}

/// What forgetting a record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Forgot {
    Unchanged,
    Gone,
    Rescan,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_stay_inline_for_one_and_shrink_back() {
        let mut s = Seqs::default();
        assert!(s.is_empty());
        s.push(3);
        assert_eq!(s, Seqs::One(3));
        s.push(5);
        s.push(9);
        assert_eq!(s.as_slice(), [3, 5, 9]);
        assert_eq!(s.remove_below(6), 2);
        assert_eq!(s, Seqs::One(9));
        assert_eq!(s.remove_below(9), 0);
        assert_eq!(s.remove_below(10), 1);
        assert!(s.is_empty());
    }

    #[test]
    fn a_region_state_is_small() {
        // What an idle region costs the catalog beyond its segment: the
        // map's bucket holds the id and this.
        assert!(std::mem::size_of::<RegionState>() <= 40);
    }
}
