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

use std::collections::{BTreeMap, HashMap};

use crate::format::{self, Link, MarkRecord, ReleaseRecord, SegmentIndex};
use crate::{EntryId, RegionId};

pub mod chain;
mod pinning;
mod regions;
mod replay;

pub use pinning::Pinning;
pub use regions::RegionInfo;
pub use replay::ObjectSegments;
#[cfg(test)]
mod invariant_tests;
#[cfg(test)]
mod query_tests;

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
        IndexedObject {
            sequence: header.sequence,
            epoch: header.epoch,
            link: header.link,
            reclaim_boundary: header.reclaim_boundary,
            size,
            segments: tail.region_segments().copied().collect(),
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
    objects: BTreeMap<u64, IndexedObject>,
    /// Per region: its segments by sequence.
    regions: HashMap<RegionId, BTreeMap<u64, SegmentIndex>>,
    /// Per region: the highest released-through id of the indexed release records.
    released: HashMap<RegionId, EntryId>,
    /// Per region: the highest flush mark of the indexed mark records.
    marked: HashMap<RegionId, EntryId>,
    bytes: u64,
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

    /// Adds an object above every indexed one, after checking C1 to C3.
    pub fn insert(&mut self, object: IndexedObject) -> Result<(), CatalogError> {
        self.check_insert(&object)?;
        for segment in &object.segments {
            self.regions
                .entry(segment.region)
                .or_default()
                .insert(object.sequence, *segment);
        }
        self.learn_records(&object);
        self.bytes += object.size;
        self.objects.insert(object.sequence, object);
        Ok(())
    }

    /// Takes in the release and mark records of an indexed object.
    fn learn_records(&mut self, object: &IndexedObject) {
        for record in &object.releases {
            let through = self.released.entry(record.region).or_insert(0);
            *through = (*through).max(record.released_through);
        }
        for record in object.marks.iter().filter(|m| !m.is_jump()) {
            let mark = self.marked.entry(record.region).or_insert(0);
            *mark = (*mark).max(record.watermark);
        }
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
        if let Some((&last, _)) = self.objects.last_key_value() {
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
            let last_id = self.last_id(segment.region);
            if segment.first_id <= last_id {
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

    /// Removes every object below `sequence` (collected objects) and
    /// returns how many were removed. Release and mark records of the
    /// remaining objects are kept; those of removed objects go with them
    /// (their regions have no segment left at or below them: every segment
    /// of a released region lies at or below its release, and every entry
    /// at or below a mark lies in an object at or below the mark's carrier).
    pub fn remove_below(&mut self, sequence: u64) -> usize {
        let kept = self.objects.split_off(&sequence);
        let removed = std::mem::replace(&mut self.objects, kept);
        if removed.is_empty() {
            return 0;
        }
        for object in removed.values() {
            self.bytes -= object.size;
            for segment in &object.segments {
                if let Some(segments) = self.regions.get_mut(&segment.region) {
                    segments.remove(&object.sequence);
                    if segments.is_empty() {
                        self.regions.remove(&segment.region);
                    }
                }
            }
        }
        self.released.clear();
        self.marked.clear();
        let kept: Vec<IndexedObject> = self.objects.values().cloned().collect();
        for object in &kept {
            self.learn_records(object);
        }
        removed.len()
    }

    /// Checks every invariant over the whole catalog. Used after every
    /// change in debug builds and after every step in tests.
    pub fn check_invariants(&self) -> Result<(), CatalogError> {
        let mut rebuilt = Catalog::new();
        for object in self.objects.values() {
            rebuilt.insert(object.clone())?;
        }
        let consistent = rebuilt.regions == self.regions
            && rebuilt.released == self.released
            && rebuilt.marked == self.marked
            && rebuilt.bytes == self.bytes;
        if consistent {
            Ok(())
        } else {
            Err(CatalogError {
                sequence: self.objects.keys().next_back().copied().unwrap_or(0),
                reason: "the region index disagrees with the objects".into(),
            })
        }
    }

    /// The largest indexed entry id of `region` (0 when none).
    pub fn last_id(&self, region: RegionId) -> EntryId {
        self.regions
            .get(&region)
            .and_then(|segments| segments.last_key_value())
            .map_or(0, |(_, s)| s.last_id)
    }

    /// Up to `limit` segments of `region` holding ids at or above `from`,
    /// in id order.
    pub fn segments_from(&self, region: RegionId, from: EntryId, limit: usize) -> Vec<SegmentRef> {
        let Some(segments) = self.regions.get(&region) else {
            return Vec::new();
        };
        // Ids grow with sequences, so the first segment that can hold `from`
        // is in the object of `from`'s sequence or later.
        segments
            .range(format::sequence_of(from)..)
            .filter(|(_, s)| s.last_id >= from)
            .take(limit)
            .map(|(&sequence, &index)| SegmentRef { sequence, index })
            .collect()
    }

    /// The lowest sequence of an indexed object holding a live segment: one
    /// with an entry above its region's watermark (the highest of
    /// `watermark(region)`, the region's indexed flush mark and its
    /// released-through id). The marks and release segments are never live.
    pub fn first_live_sequence(&self, watermark: impl Fn(RegionId) -> EntryId) -> Option<u64> {
        self.regions
            .iter()
            .filter_map(|(region, segments)| {
                let obsolete = watermark(*region)
                    .max(self.released.get(region).copied().unwrap_or(0))
                    .max(self.marked.get(region).copied().unwrap_or(0));
                // Ids grow with sequences: the first live segment of a region
                // is the first whose last id is above the watermark.
                segments
                    .range(format::sequence_of(obsolete)..)
                    .find(|(_, s)| s.last_id > obsolete)
                    .map(|(sequence, _)| *sequence)
            })
            .min()
    }

    /// The indexed objects, by sequence.
    pub fn objects(&self) -> impl DoubleEndedIterator<Item = &IndexedObject> {
        self.objects.values()
    }

    /// The object of `sequence`, when indexed.
    pub fn object(&self, sequence: u64) -> Option<&IndexedObject> {
        self.objects.get(&sequence)
    }

    /// The newest indexed object.
    pub fn tip(&self) -> Option<&IndexedObject> {
        self.objects.values().next_back()
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
        let mut regions: Vec<_> = self.regions.keys().copied().collect();
        regions.sort_unstable();
        regions
    }

    /// Per released region, the highest released-through id of the indexed
    /// release records.
    pub fn released(&self) -> &HashMap<RegionId, EntryId> {
        &self.released
    }

    /// Per region, the highest flush mark of the indexed mark records.
    pub fn marked(&self) -> &HashMap<RegionId, EntryId> {
        &self.marked
    }

    /// What reads hide of `region` by the indexed records alone: the
    /// higher of its flush mark and its released-through id.
    pub fn hidden_through(&self, region: RegionId) -> EntryId {
        let get = |m: &HashMap<RegionId, EntryId>| m.get(&region).copied().unwrap_or(0);
        get(&self.marked).max(get(&self.released))
    }
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
        assert_eq!(c.released().get(&1), Some(&10));
    }
}
