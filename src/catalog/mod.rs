//! The catalog: the index of the objects that form the store's history.
//!
//! Pure: values in, values out, no I/O. The actor owns the one mutable
//! catalog; recovery builds it from the tails of the objects on the tip's
//! chain ([`chain`]), and the reclaim planner reads it.
//!
//! Invariants, checked on every insertion (and in full by
//! [`Catalog::check_invariants`] in debug builds and tests):
//! - C1: objects are inserted in strictly increasing sequence; no sequence
//!   appears twice.
//! - C2: an object holds at most one segment per region, and the release
//!   segment only as its last segment.
//! - C3: every entry id of a segment belongs to its object's sequence, and a
//!   region's segments hold strictly increasing, non-overlapping id ranges.
//!
//! - C4: a release, once known, is never forgotten: the release records of
//!   the indexed objects, and the *permanent* releases (learnt from the
//!   release markers, or from the records of objects collection removed)
//!   together make the released regions (rfcs/0005, "A release is
//!   forever").
//!
//! Beside the objects it keeps, per region, where its segments are and its
//! first live object, maintained on every change (L1 to L3 in `live.rs`),
//! so that the reclaim boundary ([`Catalog::first_live`]), the objects held
//! from collection and a region's lookups cost what one region costs, not
//! what all regions cost (issue 23; rfcs/0005, "The reclaim boundary at
//! scale").

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::format::{self, Link, MarkRecord, ReleaseRecord, SegmentIndex};
use crate::{EntryId, RegionId};

pub mod chain;
mod live;
mod pinning;
pub mod region_map;
mod regions;
mod replay;

use live::{first_live_in, Forgot, Records, RegionState, NOT_LIVE};
use region_map::{RegionMap, RegionSet};

pub use pinning::Pinning;
pub use regions::RegionInfo;
pub use replay::ObjectSegments;
#[cfg(test)]
pub(crate) mod chain_histories;
#[cfg(test)]
mod invariant_tests;
#[cfg(test)]
mod live_tests;
#[cfg(test)]
mod missing_histories;
#[cfg(test)]
mod query_tests;
#[cfg(test)]
mod standin_histories;

/// One indexed object, as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedObject {
    /// The object's sequence.
    pub sequence: u64,
    /// The epoch of the store instance that wrote it.
    pub epoch: u64,
    /// Its predecessor.
    pub link: Option<Link>,
    /// The reclaim boundary it carries.
    pub reclaim_boundary: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The segments of ordinary regions, in region order.
    pub segments: Vec<SegmentIndex>,
    /// The mark records it carries (flush marks, and the writer's jump).
    pub marks: Vec<MarkRecord>,
    /// The release records it carries.
    pub releases: Vec<ReleaseRecord>,
}

impl IndexedObject {
    /// The catalog's view of an object of `size` bytes from its decoded
    /// tail: the marks and release segments are not regions; their records
    /// come apart.
    pub fn from_tail(
        tail: &format::Tail,
        size: u64,
        marks: Vec<MarkRecord>,
        releases: Vec<ReleaseRecord>,
    ) -> Self {
        let header = tail.header();
        // Exactly as many as there are: a catalog of many regions holds
        // these for every object it indexes.
        let mut segments = Vec::with_capacity(tail.region_segments().count());
        segments.extend(tail.region_segments().copied());
        IndexedObject {
            sequence: header.sequence,
            epoch: header.epoch,
            link: header.link,
            reclaim_boundary: header.reclaim_boundary,
            size,
            segments,
            marks,
            releases,
        }
    }

    /// The id its writer's later ids lie above, when it carries a jump.
    pub fn jump(&self) -> Option<u64> {
        self.marks.iter().find(|m| m.is_jump()).map(|m| m.watermark)
    }

    /// Whether it holds nothing: no segment, no mark, no release.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.marks.is_empty() && self.releases.is_empty()
    }
}

/// Why the catalog refused an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("catalog refuses object {sequence}: {reason}")]
pub struct CatalogError {
    /// The refused object's sequence.
    pub sequence: u64,
    /// Which invariant it breaks.
    pub reason: String,
}

/// Where one segment of a region lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRef {
    /// The sequence of the object holding it.
    pub sequence: u64,
    /// Its place in that object.
    pub index: SegmentIndex,
}

/// The index of the store's history.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The indexed objects in sequence order: inserted at the back (C1),
    /// collected from the front, so an object's rank is its position.
    objects: VecDeque<IndexedObject>,
    /// Per region: the objects holding its segments, the owner's watermark
    /// and its first live object (`live.rs`).
    regions: RegionMap<RegionState>,
    /// `(first live object, region)` of every live region, in order: the
    /// first element is the lowest first live object of all.
    firsts: BTreeSet<(u64, RegionId)>,
    /// Per region: the highest released-through id of the indexed release records.
    released: Records,
    /// Per region: the highest released-through id of the releases known
    /// for good (markers, records of removed objects): C4.
    permanent: RegionMap<EntryId>,
    /// Per region: the highest flush mark of the indexed mark records.
    marked: Records,
    bytes: u64,
    /// Regions whose segments or obsolete id changed (so maybe their first
    /// live object) since the owner last took them, when the owner asked to
    /// track them ([`Catalog::track_changes`]).
    changed: Option<RegionSet>,
    /// Test hook: sequences this catalog refuses, to drive the refusal path
    /// of its owner (valid objects never break an invariant).
    #[cfg(test)]
    refuse: std::collections::BTreeSet<u64>,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, remember the regions whose segments or obsolete id
    /// change (and with them, maybe, the first live object), for
    /// [`Catalog::take_changed`] (the actor's flush requests).
    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(RegionSet::default);
    }

    /// The regions whose segments or obsolete id changed since the last
    /// call (nothing unless [`Catalog::track_changes`] was called).
    pub fn take_changed(&mut self) -> Vec<RegionId> {
        match self.changed.as_mut() {
            Some(changed) => changed.drain().collect(),
            None => Vec::new(),
        }
    }

    /// Adds an object above every indexed one, after checking C1 to C3.
    pub fn insert(&mut self, object: IndexedObject) -> Result<(), CatalogError> {
        self.check_insert(&object)?;
        let sequence = object.sequence;
        // A region that was live stays live from the same object; one that
        // was not may be live from this one. Records raise obsolete ids.
        // One lookup per segment: with many regions each is a cache miss.
        let mut touched: Vec<RegionId> = Vec::new();
        for segment in &object.segments {
            let state = self.regions.entry(segment.region).or_default();
            state.seqs.push(sequence);
            if state.first_live == NOT_LIVE {
                touched.push(segment.region);
            }
        }
        self.bytes += object.size;
        self.objects.push_back(object);
        let Some(object) = self.objects.back() else {
            return Ok(());
        };
        for record in &object.releases {
            if self
                .released
                .learn(record.region, record.released_through, sequence)
            {
                touched.push(record.region);
            }
        }
        for record in object.marks.iter().filter(|m| !m.is_jump()) {
            if self.marked.learn(record.region, record.watermark, sequence) {
                touched.push(record.region);
            }
        }
        for region in touched {
            self.relive(region);
        }
        Ok(())
    }

    fn check_insert(&self, object: &IndexedObject) -> Result<(), CatalogError> {
        let refuse = |reason: String| {
            Err(CatalogError {
                sequence: object.sequence,
                reason,
            })
        };
        #[cfg(test)]
        if self.refuse.contains(&object.sequence) {
            return refuse("refused by a test hook".into());
        }
        if let Some(last) = self.objects.back().map(|o| o.sequence) {
            if object.sequence <= last {
                return refuse(format!(
                    "sequence is not above the last indexed sequence {last} (C1)"
                ));
            }
        }
        let mut previous: Option<RegionId> = None;
        for segment in &object.segments {
            if format::is_reserved_region(segment.region) {
                return refuse(format!(
                    "the segment of the reserved region {} is listed as a region (C2)",
                    segment.region
                ));
            }
            if previous.is_some_and(|p| p >= segment.region) {
                return refuse(format!(
                    "region {} is not above the previous region (C2)",
                    segment.region
                ));
            }
            previous = Some(segment.region);
            if format::sequence_of(segment.first_id) != object.sequence
                || format::sequence_of(segment.last_id) != object.sequence
                || segment.first_id > segment.last_id
                || format::position_of(segment.first_id) == 0
            {
                return refuse(format!(
                    "segment of region {} holds ids {}..={} outside the object's sequence (C3)",
                    segment.region, segment.first_id, segment.last_id
                ));
            }
            // The region's segments so far lie in objects below this one
            // (C1), whose ids are all below this object's: checking the
            // region's last object is checking its last id, without
            // finding that object.
            let last = self
                .regions
                .get(&segment.region)
                .and_then(|r| r.seqs.as_slice().last().copied());
            if last.is_some_and(|l| l >= object.sequence) {
                let last_id = self.last_id(segment.region);
                return refuse(format!(
                    "segment of region {} starts at id {} at or below the region's last id {last_id} (C3)",
                    segment.region, segment.first_id
                ));
            }
        }
        Ok(())
    }

    /// Test hook: makes the catalog refuse the object of `sequence`.
    #[cfg(test)]
    pub(crate) fn refuse_for_test(&mut self, sequence: u64) {
        self.refuse.insert(sequence);
    }

    /// Recomputes the first live object of `region` (its segments or its
    /// obsolete id changed) and keeps the index in step (L2).
    fn relive(&mut self, region: RegionId) {
        let obsolete = self.obsolete_through(region);
        let Some(state) = self.regions.get(&region) else {
            return;
        };
        let objects = &self.objects;
        let first = first_live_in(state.seqs.as_slice(), obsolete, |sequence| {
            segment_in(objects, sequence, region)
        });
        let before = state.first_live;
        if let Some(changed) = self.changed.as_mut() {
            changed.insert(region);
        }
        if first == before {
            return;
        }
        if before != NOT_LIVE {
            self.firsts.remove(&(before, region));
        }
        if first != NOT_LIVE {
            self.firsts.insert((first, region));
        }
        if let Some(state) = self.regions.get_mut(&region) {
            state.first_live = first;
        }
    }

    /// Removes every object below `sequence` (collected objects) and
    /// returns how many were removed. Release and mark records of the
    /// remaining objects are kept; the marks of removed objects go with them
    /// (every entry at or below a mark lies in an object at or below the
    /// mark's carrier), their releases become permanent (C4: a release is
    /// forever; a writer removes a record's object only once its marker is
    /// durable, rfcs/0005). Costs what the removed objects hold, not what
    /// the catalog holds.
    pub fn remove_below(&mut self, sequence: u64) -> usize {
        let n = self.objects.partition_point(|o| o.sequence < sequence);
        if n == 0 {
            return 0;
        }
        let removed: Vec<IndexedObject> = self.objects.drain(..n).collect();
        let mut touched = RegionSet::default();
        let mut rescan: Vec<(RegionId, bool)> = Vec::new();
        for object in &removed {
            self.bytes -= object.size;
            for segment in &object.segments {
                if let Some(state) = self.regions.get_mut(&segment.region) {
                    state.seqs.remove_below(sequence);
                    touched.insert(segment.region);
                }
            }
            for record in &object.releases {
                let kept = self.permanent.entry(record.region).or_insert(0);
                *kept = (*kept).max(record.released_through);
                match self.released.forget(record.region, sequence) {
                    Forgot::Unchanged => {}
                    Forgot::Gone => {
                        touched.insert(record.region);
                    }
                    Forgot::Rescan => rescan.push((record.region, true)),
                }
            }
            for record in object.marks.iter().filter(|m| !m.is_jump()) {
                match self.marked.forget(record.region, sequence) {
                    Forgot::Unchanged => {}
                    Forgot::Gone => {
                        touched.insert(record.region);
                    }
                    Forgot::Rescan => rescan.push((record.region, false)),
                }
            }
        }
        rescan.sort_unstable();
        rescan.dedup();
        for (region, releases) in rescan {
            // Records that are not monotone (never written by objwal): find
            // the highest left, once per such region.
            let records = if releases {
                &mut self.released
            } else {
                &mut self.marked
            };
            records.by_region.remove(&region);
            for object in &self.objects {
                let found: Vec<EntryId> = if releases {
                    object
                        .releases
                        .iter()
                        .filter(|r| r.region == region)
                        .map(|r| r.released_through)
                        .collect()
                } else {
                    object
                        .marks
                        .iter()
                        .filter(|m| !m.is_jump() && m.region == region)
                        .map(|m| m.watermark)
                        .collect()
                };
                for value in found {
                    records.learn(region, value, object.sequence);
                }
            }
            touched.insert(region);
        }
        for region in touched {
            self.relive(region);
            self.drop_if_empty(region);
        }
        removed.len()
    }

    /// Forgets a region that holds no segment and has no watermark (L1).
    fn drop_if_empty(&mut self, region: RegionId) {
        let empty = self
            .regions
            .get(&region)
            .is_some_and(|s| s.seqs.is_empty() && s.watermark == 0);
        if empty {
            if let Some(state) = self.regions.remove(&region) {
                if state.first_live != NOT_LIVE {
                    self.firsts.remove(&(state.first_live, region));
                }
            }
        }
    }

    /// Raises the owner's watermark of `region` to `id` (never lowers it):
    /// its entries through `id` are obsolete.
    pub fn set_watermark(&mut self, region: RegionId, id: EntryId) {
        if id == 0 {
            return;
        }
        let state = self.regions.entry(region).or_default();
        if id <= state.watermark {
            return;
        }
        state.watermark = id;
        self.relive(region);
    }

    /// The owner's watermark of `region` (0 when none).
    pub fn watermark(&self, region: RegionId) -> EntryId {
        self.regions.get(&region).map_or(0, |s| s.watermark)
    }

    /// Through which id `region`'s entries are obsolete: the highest of the
    /// owner's watermark, its release and its indexed flush mark.
    pub fn obsolete_through(&self, region: RegionId) -> EntryId {
        self.watermark(region)
            .max(self.released_through(region))
            .max(self.marked.get(region))
    }

    /// Learns that `region` was released through `through` for good (its
    /// release marker, rfcs/0005): from now on it is released (C4), its
    /// entries through `through` are obsolete, and it refuses appends in a
    /// store built on this catalog.
    pub fn learn_release(&mut self, region: RegionId, through: EntryId) {
        let kept = self.permanent.entry(region).or_insert(through);
        let before = *kept;
        *kept = before.max(through);
        if let Some(changed) = self.changed.as_mut() {
            changed.insert(region);
        }
        if self.regions.contains_key(&region) {
            self.relive(region);
        }
    }

    /// Checks every invariant over the whole catalog. Used after every
    /// change in debug builds and after every step in tests.
    pub fn check_invariants(&self) -> Result<(), CatalogError> {
        let mut rebuilt = Catalog::new();
        for object in &self.objects {
            rebuilt.insert(object.clone())?;
        }
        for (&region, &through) in &self.permanent {
            rebuilt.learn_release(region, through);
        }
        for (&region, state) in &self.regions {
            rebuilt.set_watermark(region, state.watermark);
        }
        let consistent = rebuilt.regions == self.regions
            && rebuilt.firsts == self.firsts
            && rebuilt.released == self.released
            && rebuilt.marked == self.marked
            && rebuilt.bytes == self.bytes;
        let fail = |reason: &str| {
            Err(CatalogError {
                sequence: self.objects.back().map_or(0, |o| o.sequence),
                reason: reason.into(),
            })
        };
        if !consistent {
            return fail("the region index disagrees with the objects");
        }
        #[cfg(any(test, debug_assertions))]
        if self.first_live(&BTreeMap::new()) != self.first_live_sequence(|r| self.watermark(r)) {
            return fail("the live index disagrees with a full scan");
        }
        Ok(())
    }

    /// The largest indexed entry id of `region` (0 when none).
    pub fn last_id(&self, region: RegionId) -> EntryId {
        self.regions
            .get(&region)
            .and_then(|state| state.seqs.as_slice().last())
            .and_then(|&sequence| self.segment(sequence, region))
            .map_or(0, |s| s.last_id)
    }

    /// The segment of `region` in the object of `sequence`, if indexed.
    pub fn segment(&self, sequence: u64, region: RegionId) -> Option<SegmentIndex> {
        segment_in(&self.objects, sequence, region)
    }

    /// The sequences of the objects holding a segment of `region`, ascending.
    fn seqs(&self, region: RegionId) -> &[u64] {
        self.regions.get(&region).map_or(&[], |s| s.seqs.as_slice())
    }

    /// Up to `limit` segments of `region` holding ids at or above `from`,
    /// in id order.
    pub fn segments_from(&self, region: RegionId, from: EntryId, limit: usize) -> Vec<SegmentRef> {
        let seqs = self.seqs(region);
        // Ids grow with sequences, so the first segment that can hold `from`
        // is in the object of `from`'s sequence or later.
        let start = seqs.partition_point(|&s| s < format::sequence_of(from));
        seqs.get(start..)
            .unwrap_or_default()
            .iter()
            .filter_map(|&sequence| {
                self.segment(sequence, region)
                    .map(|index| SegmentRef { sequence, index })
            })
            .filter(|s| s.index.last_id >= from)
            .take(limit)
            .collect()
    }

    /// The lowest sequence of an indexed object holding a live segment,
    /// with the owner's watermarks raised for a few regions (`raised`:
    /// release records sealed but not yet indexed, say). A segment is live
    /// when it holds an entry above its region's obsolete id
    /// ([`Catalog::obsolete_through`], raised). Costs a lookup per raised
    /// region and a step of the index, whatever the number of regions.
    pub fn first_live(&self, raised: &BTreeMap<RegionId, EntryId>) -> Option<u64> {
        let mut best = NOT_LIVE;
        for (&region, &watermark) in raised {
            if let Some(state) = self.regions.get(&region) {
                let obsolete = self.obsolete_through(region).max(watermark);
                let first = first_live_in(state.seqs.as_slice(), obsolete, |sequence| {
                    self.segment(sequence, region)
                });
                best = best.min(first);
            }
        }
        // Raising only moves a first live object later: the first region of
        // the index that is not raised holds the lowest of the others.
        for &(first, region) in &self.firsts {
            if first >= best {
                break;
            }
            if !raised.contains_key(&region) {
                best = first;
                break;
            }
        }
        (best != NOT_LIVE).then_some(best)
    }

    /// The first live object of `region`, if it is live.
    pub fn first_live_of(&self, region: RegionId) -> Option<u64> {
        self.regions
            .get(&region)
            .map(|s| s.first_live)
            .filter(|&f| f != NOT_LIVE)
    }

    /// The full computation the live index replaces, kept as its oracle:
    /// the lowest sequence of an indexed object holding a live segment,
    /// one with an entry above its region's obsolete id (the highest of
    /// `watermark(region)`, the region's indexed flush mark and its
    /// released-through id), visiting every region's segments.
    #[cfg(any(test, debug_assertions))]
    pub fn first_live_sequence(&self, watermark: impl Fn(RegionId) -> EntryId) -> Option<u64> {
        self.regions
            .keys()
            .filter_map(|&region| {
                let obsolete = watermark(region)
                    .max(self.released_through(region))
                    .max(self.marked.get(region));
                self.seqs(region).iter().find_map(|&sequence| {
                    self.segment(sequence, region)
                        .filter(|s| s.last_id > obsolete)
                        .map(|_| sequence)
                })
            })
            .min()
    }

    /// The live regions with their first live object, from the lowest
    /// first live object on, in `[from, to)`.
    pub fn firsts_between(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, RegionId)> + '_ {
        self.firsts.range((from, 0)..(to, 0)).copied()
    }

    /// How many indexed objects lie below `sequence`.
    pub fn rank(&self, sequence: u64) -> usize {
        self.objects.partition_point(|o| o.sequence < sequence)
    }

    /// The indexed objects, by sequence.
    pub fn objects(&self) -> impl DoubleEndedIterator<Item = &IndexedObject> + ExactSizeIterator {
        self.objects.iter()
    }

    /// The object of `sequence`, when indexed.
    pub fn object(&self, sequence: u64) -> Option<&IndexedObject> {
        object_in(&self.objects, sequence)
    }

    /// The indexed object `n` objects from the newest (0: the newest).
    pub fn nth_newest(&self, n: usize) -> Option<&IndexedObject> {
        self.objects.iter().rev().nth(n)
    }

    /// The newest indexed object.
    pub fn tip(&self) -> Option<&IndexedObject> {
        self.objects.back()
    }

    /// Number of indexed objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Total bytes of the indexed objects.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The regions with indexed segments, in id order.
    pub fn regions(&self) -> Vec<RegionId> {
        let mut regions: Vec<_> = self
            .regions
            .iter()
            .filter(|(_, s)| !s.seqs.is_empty())
            .map(|(r, _)| *r)
            .collect();
        regions.sort_unstable();
        regions
    }

    /// The regions with indexed segments (or a watermark), in no order.
    pub fn region_count(&self) -> usize {
        self.regions.len()
    }

    /// Per released region, the highest released-through id of its indexed
    /// release records and its permanent release (C4), each region once.
    pub fn released(&self) -> impl Iterator<Item = (RegionId, EntryId)> + '_ {
        let recorded = self
            .released
            .by_region
            .iter()
            .filter(|(r, _)| !self.permanent.contains_key(*r))
            .map(|(r, x)| (*r, x.value));
        let permanent = self
            .permanent
            .iter()
            .map(|(r, &through)| (*r, through.max(self.released.get(*r))));
        recorded.chain(permanent)
    }

    /// The highest released-through id of `region` (0 when none): of its
    /// indexed release records and its permanent release.
    pub fn released_through(&self, region: RegionId) -> EntryId {
        let permanent = self.permanent.get(&region).copied().unwrap_or(0);
        self.released.get(region).max(permanent)
    }

    /// Whether `region` was released: an indexed release record or a
    /// permanent release names it.
    pub fn is_released(&self, region: RegionId) -> bool {
        self.released.by_region.contains_key(&region) || self.permanent.contains_key(&region)
    }

    /// Per region, the highest flush mark of the indexed mark records.
    pub fn marked(&self) -> impl Iterator<Item = (RegionId, EntryId)> + '_ {
        self.marked.by_region.iter().map(|(r, x)| (*r, x.value))
    }

    /// What reads hide of `region` by the log alone: the higher of its
    /// indexed flush mark and its released-through id.
    pub fn hidden_through(&self, region: RegionId) -> EntryId {
        self.marked.get(region).max(self.released_through(region))
    }
}

/// The object of `sequence` among `objects` (in sequence order).
fn object_in(objects: &VecDeque<IndexedObject>, sequence: u64) -> Option<&IndexedObject> {
    let i = objects.partition_point(|o| o.sequence < sequence);
    objects.get(i).filter(|o| o.sequence == sequence)
}

/// The segment of `region` in the object of `sequence` (segments are in
/// region order, C2).
fn segment_in(
    objects: &VecDeque<IndexedObject>,
    sequence: u64,
    region: RegionId,
) -> Option<SegmentIndex> {
    let object = object_in(objects, sequence)?;
    let i = object
        .segments
        .binary_search_by_key(&region, |s| s.region)
        .ok()?;
    object.segments.get(i).copied()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn segment(region: RegionId, sequence: u64, count: u32) -> SegmentIndex {
        SegmentIndex {
            region,
            first_id: format::entry_id(sequence, 1),
            last_id: format::entry_id(sequence, u64::from(count)),
            offset: 64,
            len: 13 * u64::from(count),
            count,
            crc: 0,
        }
    }

    pub(crate) fn object(sequence: u64, regions: &[RegionId]) -> IndexedObject {
        IndexedObject {
            sequence,
            epoch: 1,
            link: None,
            reclaim_boundary: 0,
            size: 100,
            segments: regions.iter().map(|&r| segment(r, sequence, 2)).collect(),
            marks: Vec::new(),
            releases: Vec::new(),
        }
    }

    #[test]
    fn indexes_segments_by_region_and_finds_them_from_an_id() {
        let mut c = Catalog::new();
        c.insert(object(1, &[1, 2])).unwrap();
        c.insert(object(2, &[2])).unwrap();
        c.insert(object(5, &[1, 2])).unwrap();
        c.check_invariants().unwrap();
        assert_eq!(c.last_id(1), format::entry_id(5, 2));
        assert_eq!(c.last_id(3), 0);
        let seqs = |v: Vec<SegmentRef>| v.iter().map(|s| s.sequence).collect::<Vec<_>>();
        assert_eq!(seqs(c.segments_from(2, 0, 10)), vec![1, 2, 5]);
        assert_eq!(
            seqs(c.segments_from(2, format::entry_id(2, 2), 10)),
            vec![2, 5]
        );
        assert_eq!(
            seqs(c.segments_from(2, format::entry_id(2, 3), 10)),
            vec![5]
        );
        assert_eq!(seqs(c.segments_from(2, 0, 2)), vec![1, 2]);
        assert_eq!(c.regions(), vec![1, 2]);
        assert_eq!(c.bytes(), 300);
    }

    #[test]
    fn refuses_objects_that_break_an_invariant() {
        let mut c = Catalog::new();
        c.insert(object(3, &[1])).unwrap();
        // C1: not above the last sequence.
        assert!(c.insert(object(3, &[2])).unwrap_err().reason.contains("C1"));
        assert!(c.insert(object(2, &[2])).is_err());
        // C2: regions out of order.
        assert!(c
            .insert(object(4, &[2, 1]))
            .unwrap_err()
            .reason
            .contains("C2"));
        // C3: ids of another sequence.
        let mut bad = object(4, &[1]);
        bad.segments[0] = segment(1, 3, 1);
        assert!(c.insert(bad).unwrap_err().reason.contains("C3"));
        // The refusals changed nothing.
        c.check_invariants().unwrap();
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn removing_collected_objects_drops_their_segments() {
        let mut c = Catalog::new();
        c.insert(object(1, &[1, 2])).unwrap();
        c.insert(object(2, &[2])).unwrap();
        c.insert(object(3, &[1])).unwrap();
        assert_eq!(c.remove_below(3), 2);
        c.check_invariants().unwrap();
        assert_eq!(c.regions(), vec![1]);
        assert_eq!(c.bytes(), 100);
        assert_eq!(c.remove_below(3), 0);
    }

    #[test]
    fn release_records_keep_the_highest_id() {
        let mut c = Catalog::new();
        let mut o = object(1, &[1]);
        o.releases = vec![ReleaseRecord {
            region: 1,
            released_through: 10,
        }];
        c.insert(o).unwrap();
        let mut o = object(2, &[]);
        o.releases = vec![ReleaseRecord {
            region: 1,
            released_through: 5,
        }];
        c.insert(o).unwrap();
        assert_eq!(c.released_through(1), 10);
    }

    /// C4: a release outlives the object carrying its record, and one
    /// learnt from its marker counts like a record.
    #[test]
    fn a_release_is_never_forgotten() {
        let mut c = Catalog::new();
        c.insert(object(1, &[1, 2])).unwrap();
        let mut o = object(2, &[3]);
        o.releases = vec![ReleaseRecord {
            region: 1,
            released_through: format::entry_id(1, 2),
        }];
        c.insert(o).unwrap();
        c.insert(object(3, &[3])).unwrap();
        assert_eq!(c.remove_below(3), 2);
        c.check_invariants().unwrap();
        assert!(c.is_released(1));
        assert_eq!(c.released_through(1), format::entry_id(1, 2));
        assert_eq!(
            c.released().collect::<Vec<_>>(),
            [(1, format::entry_id(1, 2))]
        );
        // Region 2 was never released; its marker makes it so, and its
        // entries stop pinning.
        assert!(!c.is_released(2));
        let mut c = Catalog::new();
        c.insert(object(1, &[2])).unwrap();
        c.insert(object(2, &[5])).unwrap();
        assert_eq!(c.first_live(&BTreeMap::new()), Some(1));
        c.learn_release(2, format::entry_id(1, 2));
        c.check_invariants().unwrap();
        assert!(c.is_released(2));
        assert_eq!(c.hidden_through(2), format::entry_id(1, 2));
        assert_eq!(c.first_live(&BTreeMap::new()), Some(2));
        // A marker of a region the catalog holds nothing of.
        c.learn_release(9, 0);
        assert!(c.is_released(9));
        let mut rows: Vec<_> = c.released().collect();
        rows.sort_unstable();
        assert_eq!(rows, [(2, format::entry_id(1, 2)), (9, 0)]);
    }
}
