//! The open batch: admitted entries waiting to be sealed into one object.
//!
//! Ids are assigned at admission: the batch has its sequence from its first
//! admission, and each region's entries get positions 1, 2, ... in arrival
//! order, so `id = (sequence << 20) | position`. An append is admitted whole
//! into one batch, so its ids share a sequence and become durable together.
//!
//! Entries are kept in arrival order with a count per region (a region's
//! positions are its count, its last id follows from it); they are grouped
//! into segments by region only when the batch is sealed. An append to a
//! region new to the batch then costs a map entry, not a segment of its own
//! (issue 23: with thousands of regions most entries are their region's
//! only one in the batch).

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio::time::Instant;

use crate::catalog::region_map::RegionMap;
use crate::format::{
    self, Header, MarkRecord, Object, ReleaseRecord, Segment, ENTRY_OVERHEAD, FOOTER_ENTRY_LEN,
    JUMP, MAX_POSITION,
};
use crate::{EntryId, RegionId};

/// Entries of one batch.
#[derive(Debug)]
pub(crate) struct OpenBatch {
    pub(crate) sequence: u64,
    pub(crate) opened_at: Instant,
    /// The entries in arrival order.
    admitted: Vec<(RegionId, EntryId, Bytes)>,
    /// Per region: its entries here (its last position).
    regions: RegionMap<u64>,
    /// Payload bytes admitted.
    pub(crate) payload_bytes: u64,
    /// Entries admitted.
    pub(crate) entries: u64,
    /// Release records to seal with the entries: region -> released-through id.
    pub(crate) releases: BTreeMap<RegionId, EntryId>,
    /// Flush marks to seal with the entries: region -> watermark.
    pub(crate) marks: BTreeMap<RegionId, EntryId>,
    /// The writer's jump, when the next batch of the run lies above it.
    pub(crate) jump: Option<EntryId>,
    /// The last key of the run acknowledged when the batch was sealed:
    /// carried, when there is no jump, as a jump record below the object's
    /// own sequence (a jump that changes nothing, rfcs/0001), so that a
    /// missing object below it is known to have been acknowledged
    /// (rfcs/0003, "A missing object").
    pub(crate) acknowledged_through: Option<u64>,
}

/// How many positions an append needs per region.
pub(crate) fn positions_needed(entries: &[(RegionId, Bytes)]) -> BTreeMap<RegionId, u64> {
    let mut needed = BTreeMap::new();
    for (region, _) in entries {
        *needed.entry(*region).or_insert(0) += 1;
    }
    needed
}

impl OpenBatch {
    pub(crate) fn new(sequence: u64, opened_at: Instant) -> Self {
        OpenBatch {
            sequence,
            opened_at,
            admitted: Vec::new(),
            regions: RegionMap::default(),
            payload_bytes: 0,
            entries: 0,
            releases: BTreeMap::new(),
            marks: BTreeMap::new(),
            jump: None,
            acknowledged_through: None,
        }
    }

    /// Whether there is nothing to seal (no entry, no record, no jump).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
            && self.releases.is_empty()
            && self.marks.is_empty()
            && self.jump.is_none()
    }

    /// Adds flush marks, keeping the highest per region.
    pub(crate) fn add_marks(&mut self, marks: impl IntoIterator<Item = (RegionId, EntryId)>) {
        for (region, watermark) in marks {
            let slot = self.marks.entry(region).or_insert(watermark);
            *slot = (*slot).max(watermark);
        }
    }

    /// The mark records this batch carries: its flush marks, then its jump.
    pub(crate) fn mark_records(&self) -> Vec<MarkRecord> {
        let mut records: Vec<MarkRecord> = self
            .marks
            .iter()
            .map(|(region, watermark)| MarkRecord {
                region: *region,
                watermark: *watermark,
            })
            .collect();
        let below = self
            .acknowledged_through
            .filter(|a| *a < self.sequence)
            .map(|a| format::entry_id(a, MAX_POSITION));
        if let Some(watermark) = self.jump.or(below) {
            records.push(MarkRecord {
                region: JUMP,
                watermark,
            });
        }
        records
    }

    /// Adds release records, keeping the highest id per region.
    pub(crate) fn add_releases(&mut self, records: impl IntoIterator<Item = (RegionId, EntryId)>) {
        for (region, through) in records {
            let slot = self.releases.entry(region).or_insert(through);
            *slot = (*slot).max(through);
        }
    }

    /// Whether every region of an append still has positions left here.
    /// Without allocating while the batch is far from the limit.
    pub(crate) fn has_positions_for(&self, entries: &[(RegionId, Bytes)]) -> bool {
        if self.entries.saturating_add(entries.len() as u64) <= MAX_POSITION {
            return true;
        }
        positions_needed(entries).iter().all(|(region, n)| {
            let used = self.regions.get(region).copied().unwrap_or(0);
            used + n <= MAX_POSITION
        })
    }

    /// The encoded bytes an append would add (an upper bound: a region's
    /// footer entry is counted once per run of its entries).
    pub(crate) fn encoded_growth(&self, entries: &[(RegionId, Bytes)]) -> u64 {
        let mut bytes = 0u64;
        let mut previous = None;
        for (region, data) in entries {
            bytes += data.len() as u64 + ENTRY_OVERHEAD as u64;
            if previous != Some(*region) && !self.regions.contains_key(region) {
                bytes += FOOTER_ENTRY_LEN as u64;
            }
            previous = Some(*region);
        }
        bytes
    }

    /// Admits an append whole; returns its ids in input order and the
    /// largest id it got per region (in runs of the input). The caller
    /// checked positions first. Payloads are not copied here: the one copy
    /// is into the object at seal.
    pub(crate) fn admit(
        &mut self,
        entries: Vec<(RegionId, Bytes)>,
    ) -> (Vec<EntryId>, Vec<(RegionId, EntryId)>) {
        let mut ids = Vec::with_capacity(entries.len());
        let mut last: Vec<(RegionId, EntryId)> = Vec::new();
        self.admitted.reserve(entries.len());
        for (region, data) in entries {
            let count = self.regions.entry(region).or_insert(0);
            *count += 1;
            let id = format::entry_id(self.sequence, *count);
            self.payload_bytes += data.len() as u64;
            self.entries += 1;
            self.admitted.push((region, id, data));
            ids.push(id);
            match last.last_mut() {
                Some((r, l)) if *r == region => *l = id,
                _ => last.push((region, id)),
            }
        }
        (ids, last)
    }

    /// The largest id of `region` in this batch.
    pub(crate) fn last_id(&self, region: RegionId) -> Option<EntryId> {
        self.regions
            .get(&region)
            .map(|&count| format::entry_id(self.sequence, count))
    }

    /// The bytes the batch's segments and footer will take.
    pub(crate) fn encoded_bytes(&self) -> u64 {
        self.payload_bytes
            + self.entries * ENTRY_OVERHEAD as u64
            + self.regions.len() as u64 * FOOTER_ENTRY_LEN as u64
    }

    /// The largest id per region in this batch, in region order.
    pub(crate) fn last_ids(&self) -> Vec<(RegionId, EntryId)> {
        let mut last: Vec<_> = self
            .regions
            .iter()
            .map(|(&region, &count)| (region, format::entry_id(self.sequence, count)))
            .collect();
        last.sort_unstable();
        last
    }

    /// The object this batch becomes under `header`: its entries grouped
    /// into one segment per region, in region order, each in arrival
    /// (position) order.
    pub(crate) fn into_object(mut self, header: Header) -> Object {
        let marks = self.mark_records();
        // Stable: a region's entries keep their arrival order.
        self.admitted.sort_by_key(|(region, _, _)| *region);
        let mut segments: Vec<Segment> = Vec::with_capacity(self.regions.len());
        for (region, id, data) in self.admitted {
            match segments.last_mut() {
                Some(segment) if segment.region == region => segment.entries.push((id, data)),
                _ => {
                    let count = self.regions.get(&region).copied().unwrap_or(1);
                    let mut entries = Vec::with_capacity(usize::try_from(count).unwrap_or(1));
                    entries.push((id, data));
                    segments.push(Segment { region, entries });
                }
            }
        }
        Object {
            header,
            segments,
            marks,
            releases: release_records(&self.releases),
        }
    }
}

/// Release records from a region -> released-through map.
pub(crate) fn release_records(releases: &BTreeMap<RegionId, EntryId>) -> Vec<ReleaseRecord> {
    releases
        .iter()
        .map(|(region, through)| ReleaseRecord {
            region: *region,
            released_through: *through,
        })
        .collect()
}

/// The void of a batch: its header, marks and release records without its
/// entries (what settles its key when the batch's create failed).
pub(crate) fn void_object(
    header: Header,
    marks: &[MarkRecord],
    releases: &BTreeMap<RegionId, EntryId>,
) -> Object {
    Object {
        header,
        segments: Vec::new(),
        marks: marks.to_vec(),
        releases: release_records(releases),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_sequence_and_positions_per_region() {
        let mut b = OpenBatch::new(7, Instant::now());
        let (ids, last) = b.admit(vec![
            (1, Bytes::from_static(b"a")),
            (2, Bytes::from_static(b"b")),
        ]);
        assert_eq!(ids, vec![format::entry_id(7, 1), format::entry_id(7, 1)]);
        assert_eq!(
            last,
            vec![(1, format::entry_id(7, 1)), (2, format::entry_id(7, 1))]
        );
        let growth = b.encoded_growth(&[(1, Bytes::from_static(b"cc"))]);
        assert_eq!(growth, 2 + 12, "region 1 has its footer entry already");
        let (ids, _) = b.admit(vec![(1, Bytes::from_static(b"cc"))]);
        assert_eq!(ids, vec![format::entry_id(7, 2)]);
        assert_eq!(b.last_id(1), Some(format::entry_id(7, 2)));
        assert_eq!(b.last_id(3), None);
        assert_eq!(
            b.encoded_growth(&[(3, Bytes::from_static(b"x")), (3, Bytes::from_static(b"y"))]),
            2 + 24 + 48
        );
        assert_eq!(b.payload_bytes, 4);
        assert_eq!(b.entries, 3);
        assert_eq!(b.encoded_bytes(), 4 + 3 * 12 + 2 * 48);
        let last = b.last_ids();
        assert_eq!(
            last,
            vec![(1, format::entry_id(7, 2)), (2, format::entry_id(7, 1))]
        );
    }

    #[test]
    fn positions_run_out_per_region() {
        let mut b = OpenBatch::new(1, Instant::now());
        let row = |r: RegionId| (r, Bytes::new());
        let full: Vec<_> = (0..MAX_POSITION).map(|_| row(5)).collect();
        assert!(b.has_positions_for(&full));
        b.admit(full);
        assert!(!b.has_positions_for(&[row(5)]));
        assert!(
            b.has_positions_for(&[row(6)]),
            "another region still has room"
        );
        assert!(!b.is_empty());
        let needed = positions_needed(&[row(1), row(2), row(1)]);
        assert_eq!(needed.into_iter().collect::<Vec<_>>(), vec![(1, 2), (2, 1)]);
    }
}
