//! Record segments: the codec shared by the two reserved regions whose
//! segment is a single entry of fixed-size `(region, id)` records, the marks
//! segment ([`MarkRecord`](super::MarkRecord), `marks.rs`) and the release
//! segment ([`ReleaseRecord`](super::ReleaseRecord), `release.rs`).
//!
//! ```text
//! segment: id: u64 | len: u32 | record*          (one frame, id = (sequence << 20) | 1)
//! record:  region: u64 | value: u64              (RECORD_LEN = 16 bytes)
//! ```
//!
//! Invariants (checked by [`checked_data_len`] before encoding and by
//! [`decode_records`]): at least one record; regions strictly increase;
//! none is the segment's own reserved region. Each kind of record names
//! its region, its fields and its messages through [`Record`], so errors
//! read exactly as before the two codecs were one.

use bytes::Bytes;

use super::codec::{put_u64, Reader};
use super::entry_id;
use super::error::FormatError;
use super::footer::SegmentIndex;
use super::segment::decode_segment;
use super::{ENTRY_OVERHEAD, MARK_RECORD_LEN, RELEASE_RECORD_LEN};

/// Bytes in one record of either kind (`MARK_RECORD_LEN` and
/// `RELEASE_RECORD_LEN` are this length).
pub(crate) const RECORD_LEN: usize = 16;
const _: () = assert!(MARK_RECORD_LEN == RECORD_LEN && RELEASE_RECORD_LEN == RECORD_LEN);

/// A kind of record of a record segment: a `(region, value)` pair and the
/// names its errors use.
pub(crate) trait Record: Sized {
    /// The reserved region whose segment holds these records.
    const SEGMENT_REGION: u64;
    /// The segment's name in errors and fields ("marks", "release").
    const SEGMENT: &'static str;
    /// What many records are called in errors ("mark records").
    const RECORDS: &'static str;
    /// The field of a record's region.
    const REGION_FIELD: &'static str;
    /// The field of a record's value.
    const VALUE_FIELD: &'static str;
    /// Why a record may not name [`Self::SEGMENT_REGION`].
    const OWN_REGION: &'static str;

    /// The record of `region` with `value`.
    fn new(region: u64, value: u64) -> Self;
    /// The record's region.
    fn region(&self) -> u64;
    /// The record's value (a watermark, a released-through id).
    fn value(&self) -> u64;
}

/// Checks `records` for encoding and returns the length of their data;
/// `at` is the object offset of the segment, for errors.
pub(crate) fn checked_data_len<R: Record>(records: &[R], at: u64) -> Result<u64, FormatError> {
    let mut prev: Option<u64> = None;
    for (i, record) in records.iter().enumerate() {
        let field_at = at
            .saturating_add(ENTRY_OVERHEAD as u64)
            .saturating_add((i as u64).saturating_mul(RECORD_LEN as u64));
        check_region::<R>(record.region(), prev, field_at)?;
        prev = Some(record.region());
    }
    let len = (records.len() as u64).saturating_mul(RECORD_LEN as u64);
    if len > u64::from(u32::MAX) {
        return Err(FormatError::invalid(
            R::SEGMENT,
            at,
            format!("{} {} do not fit one entry", records.len(), R::RECORDS),
        ));
    }
    Ok(len)
}

fn check_region<R: Record>(region: u64, prev: Option<u64>, at: u64) -> Result<(), FormatError> {
    if region == R::SEGMENT_REGION {
        return Err(FormatError::invalid(R::REGION_FIELD, at, R::OWN_REGION));
    }
    if prev.is_some_and(|prev| region <= prev) {
        return Err(FormatError::invalid(
            R::REGION_FIELD,
            at,
            format!(
                "region {region} does not follow region {}",
                prev.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}

/// Appends the segment's one frame for `records` (checked: `data_len` is
/// what [`checked_data_len`] returned, at most `u32::MAX`) to `out`; returns
/// the CRC state of the segment's bytes, where it starts and its entry id.
pub(crate) fn encode_frame<R: Record>(
    out: &mut Vec<u8>,
    sequence: u64,
    records: &[R],
    data_len: u64,
) -> (crc32fast::Hasher, usize, u64) {
    let start = out.len();
    let id = entry_id(sequence, 1);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(data_len as u32).to_le_bytes());
    for record in records {
        put_u64(out, record.region());
        put_u64(out, record.value());
    }
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(out.get(start..).unwrap_or_default());
    (hasher, start, id)
}

/// Decodes a record segment. `bytes` is exactly its bytes, `index` its
/// footer entry (region `R::SEGMENT_REGION`). Checks everything
/// [`decode_segment`] checks, then the records.
pub(crate) fn decode_records<R: Record>(
    bytes: &Bytes,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<R>, FormatError> {
    if index.region != R::SEGMENT_REGION {
        return Err(FormatError::invalid(
            "footer.region",
            index.offset,
            format!("region {} is not the {} region", index.region, R::SEGMENT),
        ));
    }
    let entries = decode_segment(bytes, index, sequence)?;
    let data_at = index.offset.saturating_add(ENTRY_OVERHEAD as u64);
    let data = match entries.as_slice() {
        [(_, data)] => data,
        _ => {
            return Err(FormatError::invalid(
                R::SEGMENT,
                index.offset,
                format!("the {} segment holds one entry", R::SEGMENT),
            ))
        }
    };
    // `decode_segment`'s index check already refuses data that is empty or
    // not a whole number of records; checked again where the data is.
    if data.is_empty() || !data.len().is_multiple_of(RECORD_LEN) {
        return Err(FormatError::invalid(
            R::SEGMENT,
            data_at,
            format!(
                "{} data of {} bytes is not a non-zero number of records",
                R::SEGMENT,
                data.len()
            ),
        ));
    }
    let r = Reader::new(data, data_at);
    let count = data.len() / RECORD_LEN;
    let mut records: Vec<R> = Vec::with_capacity(count);
    for i in 0..count {
        let at = i * RECORD_LEN;
        let region = r.u64(at, R::REGION_FIELD)?;
        check_region::<R>(region, records.last().map(R::region), r.offset(at))?;
        records.push(R::new(region, r.u64(at + 8, R::VALUE_FIELD)?));
    }
    Ok(records)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::codec::crc32;
    use crate::format::{MarkRecord, ReleaseRecord, MARKS_REGION, RELEASE_REGION};

    const SEQ: u64 = 11;

    /// The segment of `records` at object offset 64, and its footer entry.
    pub(crate) fn encoded<R: Record>(records: &[R]) -> (Bytes, SegmentIndex) {
        let data_len = checked_data_len(records, 64).unwrap();
        let mut out = Vec::new();
        let (hasher, _, id) = encode_frame(&mut out, SEQ, records, data_len);
        let index = SegmentIndex {
            region: R::SEGMENT_REGION,
            first_id: id,
            last_id: id,
            offset: 64,
            len: out.len() as u64,
            count: 1,
            crc: hasher.finalize(),
        };
        assert_eq!(index.crc, crc32(&out));
        (Bytes::from(out), index)
    }

    fn round_trips<R: Record + PartialEq + std::fmt::Debug + Clone>() {
        let records = [
            R::new(0, 0),
            R::new(3, entry_id(SEQ - 1, 9)),
            R::new(R::SEGMENT_REGION - 1, u64::MAX),
        ];
        let (bytes, index) = encoded(&records);
        assert_eq!(bytes.len(), 12 + 48);
        assert_eq!(bytes[..8], entry_id(SEQ, 1).to_le_bytes());
        assert_eq!(bytes[8..12], 48u32.to_le_bytes());
        assert_eq!(bytes[12..20], 0u64.to_le_bytes());
        assert_eq!(bytes[28..36], 3u64.to_le_bytes());
        assert_eq!(bytes[52..60], u64::MAX.to_le_bytes());
        assert_eq!(decode_records::<R>(&bytes, &index, SEQ).unwrap(), records);
    }

    #[test]
    fn both_kinds_round_trip_byte_for_byte() {
        round_trips::<MarkRecord>();
        round_trips::<ReleaseRecord>();
    }

    fn encoder_rejects_unsorted_and_own_regions<R: Record>() {
        assert!(checked_data_len(&[R::new(2, 0), R::new(2, 0)], 64).is_err());
        assert!(checked_data_len(&[R::new(3, 0), R::new(2, 0)], 64).is_err());
        let err = checked_data_len(&[R::new(1, 0), R::new(R::SEGMENT_REGION, 0)], 64).unwrap_err();
        assert_eq!(err.field, R::REGION_FIELD);
        assert_eq!(err.offset, 64 + 12 + 16);
    }

    #[test]
    fn the_encoder_rejects_unsorted_records_and_the_segments_own_region() {
        encoder_rejects_unsorted_and_own_regions::<MarkRecord>();
        encoder_rejects_unsorted_and_own_regions::<ReleaseRecord>();
        let err = checked_data_len(&[MarkRecord::new(MARKS_REGION, 0)], 0).unwrap_err();
        assert!(err.to_string().contains("the marks region has no mark"));
        let err = checked_data_len(&[ReleaseRecord::new(RELEASE_REGION, 0)], 0).unwrap_err();
        assert!(err
            .to_string()
            .contains("the reserved region cannot be released"));
    }

    fn decoder_rejects_unsorted_records<R: Record + std::fmt::Debug>() {
        let (good, index) = encoded(&[R::new(1, 0), R::new(2, 0)]);
        let mut bytes = good.to_vec();
        bytes[12 + 16] = 1; // the second region becomes 1
        let index = SegmentIndex {
            crc: crc32(&bytes),
            ..index
        };
        let err = decode_records::<R>(&Bytes::from(bytes), &index, SEQ).unwrap_err();
        assert_eq!(err.field, R::REGION_FIELD);
        assert_eq!(err.offset, 64 + 12 + 16);
    }

    #[test]
    fn the_decoder_rejects_unsorted_records_even_with_good_crcs() {
        decoder_rejects_unsorted_records::<MarkRecord>();
        decoder_rejects_unsorted_records::<ReleaseRecord>();
    }

    fn decoder_rejects_other_segments_and_partial_records<R: Record + std::fmt::Debug>() {
        let (bytes, index) = encoded(&[R::new(1, 0)]);
        let err =
            decode_records::<R>(&bytes, &SegmentIndex { region: 5, ..index }, SEQ).unwrap_err();
        assert_eq!(err.field, "footer.region");
        let mut short = bytes.to_vec();
        short.truncate(12 + 8);
        short[8..12].copy_from_slice(&8u32.to_le_bytes());
        let index = SegmentIndex {
            len: short.len() as u64,
            crc: crc32(&short),
            ..index
        };
        assert!(decode_records::<R>(&Bytes::from(short), &index, SEQ).is_err());
    }

    #[test]
    fn the_decoder_rejects_another_segment_and_a_partial_record() {
        decoder_rejects_other_segments_and_partial_records::<MarkRecord>();
        decoder_rejects_other_segments_and_partial_records::<ReleaseRecord>();
    }
}
