//! The open batch: admitted entries waiting to be sealed into one object.
//!
//! Ids are assigned at admission: the batch has its sequence from its first
//! admission, and each region's entries get positions 1, 2, ... in arrival
//! order, so `id = (sequence << 20) | position`. An append is admitted whole
//! into one batch, so its ids share a sequence and become durable together.

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio::time::Instant;

use crate::format::{
    self, Header, Object, ReleaseRecord, Segment, ENTRY_OVERHEAD, FOOTER_ENTRY_LEN, MAX_POSITION,
};
use crate::{EntryId, RegionId};

/// Entries of one batch, by region.
#[derive(Debug)]
pub(crate) struct OpenBatch {
    pub(crate) sequence: u64,
    pub(crate) opened_at: Instant,
    regions: BTreeMap<RegionId, Vec<(EntryId, Bytes)>>,
    /// Payload bytes admitted.
    pub(crate) payload_bytes: u64,
    /// Entries admitted.
    pub(crate) entries: u64,
    /// Release records to seal with the entries: region -> released-through id.
    pub(crate) releases: BTreeMap<RegionId, EntryId>,
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
            regions: BTreeMap::new(),
            payload_bytes: 0,
            entries: 0,
            releases: BTreeMap::new(),
        }
    }

    /// Whether there is nothing to seal (no entry, no release record).
    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0 && self.releases.is_empty()
    }

    /// Adds release records, keeping the highest id per region.
    pub(crate) fn add_releases(&mut self, records: impl IntoIterator<Item = (RegionId, EntryId)>) {
        for (region, through) in records {
            let slot = self.releases.entry(region).or_insert(through);
            *slot = (*slot).max(through);
        }
    }

    /// Whether every region of an append still has positions left here.
    pub(crate) fn has_positions_for(&self, needed: &BTreeMap<RegionId, u64>) -> bool {
        needed.iter().all(|(region, n)| {
            let used = self.regions.get(region).map_or(0, |v| v.len() as u64);
            used + n <= MAX_POSITION
        })
    }

    /// Admits an append whole and returns its ids in input order. The caller
    /// checked positions first.
    pub(crate) fn admit(&mut self, entries: Vec<(RegionId, Bytes)>) -> Vec<EntryId> {
        let mut ids = Vec::with_capacity(entries.len());
        for (region, data) in entries {
            let segment = self.regions.entry(region).or_default();
            let id = format::entry_id(self.sequence, segment.len() as u64 + 1);
            self.payload_bytes += data.len() as u64;
            self.entries += 1;
            segment.push((id, data));
            ids.push(id);
        }
        ids
    }

    /// The bytes the batch's segments and footer will take.
    pub(crate) fn encoded_bytes(&self) -> u64 {
        self.payload_bytes
            + self.entries * ENTRY_OVERHEAD as u64
            + self.regions.len() as u64 * FOOTER_ENTRY_LEN as u64
    }

    /// The largest id per region in this batch.
    pub(crate) fn last_ids(&self) -> impl Iterator<Item = (RegionId, EntryId)> + '_ {
        self.regions
            .iter()
            .filter_map(|(region, entries)| entries.last().map(|(id, _)| (*region, *id)))
    }

    /// The object this batch becomes under `header`.
    pub(crate) fn into_object(self, header: Header) -> Object {
        Object {
            header,
            segments: self
                .regions
                .into_iter()
                .map(|(region, entries)| Segment { region, entries })
                .collect(),
            releases: self
                .releases
                .iter()
                .map(|(region, through)| ReleaseRecord {
                    region: *region,
                    released_through: *through,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_sequence_and_positions_per_region() {
        let mut b = OpenBatch::new(7, Instant::now());
        let ids = b.admit(vec![
            (1, Bytes::from_static(b"a")),
            (2, Bytes::from_static(b"b")),
        ]);
        assert_eq!(ids, vec![format::entry_id(7, 1), format::entry_id(7, 1)]);
        let ids = b.admit(vec![(1, Bytes::from_static(b"cc"))]);
        assert_eq!(ids, vec![format::entry_id(7, 2)]);
        assert_eq!(b.payload_bytes, 4);
        assert_eq!(b.entries, 3);
        assert_eq!(b.encoded_bytes(), 4 + 3 * 12 + 2 * 48);
        let last: Vec<_> = b.last_ids().collect();
        assert_eq!(
            last,
            vec![(1, format::entry_id(7, 2)), (2, format::entry_id(7, 1))]
        );
    }

    #[test]
    fn positions_run_out_per_region() {
        let b = OpenBatch::new(1, Instant::now());
        let mut needed = BTreeMap::new();
        needed.insert(5, MAX_POSITION);
        assert!(b.has_positions_for(&needed));
        needed.insert(5, MAX_POSITION + 1);
        assert!(!b.has_positions_for(&needed));
    }
}
