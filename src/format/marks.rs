//! Mark records: the data of the single entry of the marks segment.
//!
//! The marks segment is the segment of the reserved region
//! [`MARKS_REGION`](super::MARKS_REGION) (`u64::MAX - 255`), so it sorts
//! after the regions engines use and near the release segment. It holds
//! exactly one entry, id `(sequence << 20) | 1`, whose data is `n >= 1`
//! records:
//!
//! ```text
//! record: region: u64 | watermark: u64      (MARK_RECORD_LEN = 16 bytes)
//! ```
//!
//! A record of an ordinary region is a flush mark: the engine declared the
//! region's entries through `watermark` obsolete (`Wal::obsolete`). The
//! record of region [`JUMP`] (`u64::MAX`, which sorts last) is the writer's
//! jump: the next object of its run lies at `sequence_of(watermark) + 1`
//! rather than at this object's sequence plus one (rfcs/0006, "Runs").
//!
//! Invariants: regions strictly increase and none is `MARKS_REGION`. To a
//! reader that knows nothing of marks it is an ordinary segment of a region
//! it never opens. The codec is the one the release segment shares
//! (`records.rs`).

use bytes::Bytes;

use super::error::FormatError;
use super::footer::SegmentIndex;
use super::records::{decode_records, Record};
use super::MARKS_REGION;

/// The region of the jump record among the mark records.
pub const JUMP: u64 = u64::MAX;

/// A flush mark of one region (or, for region [`JUMP`], the writer's jump).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkRecord {
    /// The region, or [`JUMP`].
    pub region: u64,
    /// The entry id through which the region's entries are obsolete (for
    /// [`JUMP`]: the id the writer's later ids lie above).
    pub watermark: u64,
}

impl MarkRecord {
    /// Whether this is the jump record.
    pub fn is_jump(&self) -> bool {
        self.region == JUMP
    }
}

impl Record for MarkRecord {
    const SEGMENT_REGION: u64 = MARKS_REGION;
    const SEGMENT: &'static str = "marks";
    const RECORDS: &'static str = "mark records";
    const REGION_FIELD: &'static str = "marks.region";
    const VALUE_FIELD: &'static str = "marks.watermark";
    const OWN_REGION: &'static str = "the marks region has no mark";

    fn new(region: u64, watermark: u64) -> Self {
        MarkRecord { region, watermark }
    }

    fn region(&self) -> u64 {
        self.region
    }

    fn value(&self) -> u64 {
        self.watermark
    }
}

/// Decodes the marks segment. `bytes` is exactly its bytes, `index` its
/// footer entry (region `MARKS_REGION`). Checks everything
/// [`decode_segment`](super::decode_segment) checks, then the records.
pub fn decode_marks(
    bytes: &Bytes,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<MarkRecord>, FormatError> {
    decode_records(bytes, index, sequence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::entry_id;
    use crate::format::records::tests::encoded;

    #[test]
    fn round_trips_with_the_jump_last() {
        let sequence = 11;
        let records = [
            MarkRecord::new(0, 5),
            MarkRecord::new(3, entry_id(sequence - 1, 9)),
            MarkRecord::new(JUMP, u64::MAX),
        ];
        let (bytes, index) = encoded(&records);
        let decoded = decode_marks(&bytes, &index, sequence).unwrap();
        assert_eq!(decoded, records);
        assert!(decoded[2].is_jump() && !decoded[0].is_jump());
    }
}
