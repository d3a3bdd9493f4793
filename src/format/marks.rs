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
//! it never opens.

use bytes::Bytes;

use super::codec::{put_u64, Reader};
use super::error::FormatError;
use super::footer::SegmentIndex;
use super::segment::decode_segment;
use super::{ENTRY_OVERHEAD, MARKS_REGION, MARK_RECORD_LEN};

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

/// Checks `records` for encoding and returns the length of their data;
/// `at` is the object offset of the marks segment, for errors.
pub(crate) fn checked_data_len(records: &[MarkRecord], at: u64) -> Result<u64, FormatError> {
    let mut prev: Option<u64> = None;
    for (i, record) in records.iter().enumerate() {
        let field_at = at
            .saturating_add(ENTRY_OVERHEAD as u64)
            .saturating_add((i as u64).saturating_mul(MARK_RECORD_LEN as u64));
        check_region(record.region, prev, field_at)?;
        prev = Some(record.region);
    }
    let len = (records.len() as u64).saturating_mul(MARK_RECORD_LEN as u64);
    if len > u64::from(u32::MAX) {
        return Err(FormatError::invalid(
            "marks",
            at,
            format!("{} mark records do not fit one entry", records.len()),
        ));
    }
    Ok(len)
}

fn check_region(region: u64, prev: Option<u64>, at: u64) -> Result<(), FormatError> {
    if region == MARKS_REGION {
        return Err(FormatError::invalid(
            "marks.region",
            at,
            "the marks region has no mark",
        ));
    }
    if prev.is_some_and(|prev| region <= prev) {
        return Err(FormatError::invalid(
            "marks.region",
            at,
            format!(
                "region {region} does not follow region {}",
                prev.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}

/// The data of the marks entry for `records` (already checked).
pub(crate) fn encode_records(records: &[MarkRecord], out: &mut Vec<u8>) {
    for record in records {
        put_u64(out, record.region);
        put_u64(out, record.watermark);
    }
}

/// Decodes the marks segment. `bytes` is exactly its bytes, `index` its
/// footer entry (region `MARKS_REGION`). Checks everything
/// [`decode_segment`] checks, then the records.
pub fn decode_marks(
    bytes: &Bytes,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<MarkRecord>, FormatError> {
    if !index.is_marks() {
        return Err(FormatError::invalid(
            "footer.region",
            index.offset,
            format!("region {} is not the marks region", index.region),
        ));
    }
    let entries = decode_segment(bytes, index, sequence)?;
    let data_at = index.offset.saturating_add(ENTRY_OVERHEAD as u64);
    let data = match entries.as_slice() {
        [(_, data)] => data,
        _ => {
            return Err(FormatError::invalid(
                "marks",
                index.offset,
                "the marks segment holds one entry",
            ))
        }
    };
    if data.is_empty() || !data.len().is_multiple_of(MARK_RECORD_LEN) {
        return Err(FormatError::invalid(
            "marks",
            data_at,
            format!(
                "mark data of {} bytes is not a non-zero number of records",
                data.len()
            ),
        ));
    }
    let r = Reader::new(data, data_at);
    let count = data.len() / MARK_RECORD_LEN;
    let mut records: Vec<MarkRecord> = Vec::with_capacity(count);
    for i in 0..count {
        let at = i * MARK_RECORD_LEN;
        let region = r.u64(at, "marks.region")?;
        check_region(region, records.last().map(|p| p.region), r.offset(at))?;
        records.push(MarkRecord {
            region,
            watermark: r.u64(at + 8, "marks.watermark")?,
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::codec::crc32;
    use crate::format::entry_id;

    const SEQ: u64 = 11;

    fn encoded(records: &[MarkRecord]) -> (Bytes, SegmentIndex) {
        let data_len = checked_data_len(records, 64).unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(&entry_id(SEQ, 1).to_le_bytes());
        out.extend_from_slice(&(data_len as u32).to_le_bytes());
        encode_records(records, &mut out);
        let index = SegmentIndex {
            region: MARKS_REGION,
            first_id: entry_id(SEQ, 1),
            last_id: entry_id(SEQ, 1),
            offset: 64,
            len: out.len() as u64,
            count: 1,
            crc: crc32(&out),
        };
        (Bytes::from(out), index)
    }

    fn rec(region: u64, watermark: u64) -> MarkRecord {
        MarkRecord { region, watermark }
    }

    #[test]
    fn round_trips_with_the_jump_last() {
        let records = [rec(0, 5), rec(3, entry_id(SEQ - 1, 9)), rec(JUMP, u64::MAX)];
        let (bytes, index) = encoded(&records);
        assert_eq!(bytes.len(), 12 + 48);
        let decoded = decode_marks(&bytes, &index, SEQ).unwrap();
        assert_eq!(decoded, records);
        assert!(decoded[2].is_jump() && !decoded[0].is_jump());
    }

    #[test]
    fn encoder_rejects_unsorted_records_and_the_marks_region() {
        assert!(checked_data_len(&[rec(2, 0), rec(2, 0)], 64).is_err());
        assert!(checked_data_len(&[rec(3, 0), rec(2, 0)], 64).is_err());
        let err = checked_data_len(&[rec(1, 0), rec(MARKS_REGION, 0)], 64).unwrap_err();
        assert_eq!(err.field, "marks.region");
        assert_eq!(err.offset, 64 + 12 + 16);
    }

    #[test]
    fn decoder_rejects_unsorted_records_even_with_good_crcs() {
        let (good, index) = encoded(&[rec(1, 0), rec(2, 0)]);
        let mut bytes = good.to_vec();
        bytes[12 + 16] = 1; // the second region becomes 1
        let index = SegmentIndex {
            crc: crc32(&bytes),
            ..index
        };
        let err = decode_marks(&Bytes::from(bytes), &index, SEQ).unwrap_err();
        assert_eq!(err.field, "marks.region");
        assert_eq!(err.offset, 64 + 12 + 16);
    }

    #[test]
    fn decoder_rejects_another_segment_and_a_partial_record() {
        let (bytes, index) = encoded(&[rec(1, 0)]);
        let err = decode_marks(&bytes, &SegmentIndex { region: 5, ..index }, SEQ).unwrap_err();
        assert_eq!(err.field, "footer.region");
        let mut short = bytes.to_vec();
        short.truncate(12 + 8);
        short[8..12].copy_from_slice(&8u32.to_le_bytes());
        let index = SegmentIndex {
            len: short.len() as u64,
            crc: crc32(&short),
            ..index
        };
        assert!(decode_marks(&Bytes::from(short), &index, SEQ).is_err());
    }
}
