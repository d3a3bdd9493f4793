//! Release records: the data of the single entry of the release segment.
//!
//! The release segment is the segment of the reserved region
//! [`RELEASE_REGION`](super::RELEASE_REGION) (`u64::MAX`), so it always sorts
//! last. It holds exactly one entry, id `(sequence << 20) | 1`, whose data is
//! `n >= 1` records:
//!
//! ```text
//! record: region: u64 | released_through: u64      (RELEASE_RECORD_LEN = 16 bytes)
//! ```
//!
//! Invariants: regions strictly increase and none is `RELEASE_REGION`. To a
//! reader that knows nothing of releases it is an ordinary segment of a region
//! it never opens.

use bytes::Bytes;

use super::codec::{put_u64, Reader};
use super::error::FormatError;
use super::footer::SegmentIndex;
use super::segment::decode_segment;
use super::{ENTRY_OVERHEAD, RELEASE_RECORD_LEN, RELEASE_REGION};

/// A region dropped for good: its entries through `released_through` (in
/// practice all it ever had) are obsolete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseRecord {
    /// The released region.
    pub region: u64,
    /// The largest entry id of the region that the release covers.
    pub released_through: u64,
}

/// Checks `records` for encoding and returns the length of their data;
/// `at` is the object offset of the release segment, for errors.
pub(crate) fn checked_data_len(records: &[ReleaseRecord], at: u64) -> Result<u64, FormatError> {
    let mut prev: Option<u64> = None;
    for (i, record) in records.iter().enumerate() {
        let field_at = at
            .saturating_add(ENTRY_OVERHEAD as u64)
            .saturating_add((i as u64).saturating_mul(RELEASE_RECORD_LEN as u64));
        check_region(record.region, prev, field_at)?;
        prev = Some(record.region);
    }
    let len = (records.len() as u64).saturating_mul(RELEASE_RECORD_LEN as u64);
    if len > u64::from(u32::MAX) {
        return Err(FormatError::invalid(
            "release",
            at,
            format!("{} release records do not fit one entry", records.len()),
        ));
    }
    Ok(len)
}

fn check_region(region: u64, prev: Option<u64>, at: u64) -> Result<(), FormatError> {
    if region == RELEASE_REGION {
        return Err(FormatError::invalid(
            "release.region",
            at,
            "the reserved region cannot be released",
        ));
    }
    if prev.is_some_and(|prev| region <= prev) {
        return Err(FormatError::invalid(
            "release.region",
            at,
            format!(
                "region {region} does not follow region {}",
                prev.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}

/// The data of the release entry for `records` (already checked).
pub(crate) fn encode_records(records: &[ReleaseRecord], out: &mut Vec<u8>) {
    for record in records {
        put_u64(out, record.region);
        put_u64(out, record.released_through);
    }
}

/// Decodes the release segment. `bytes` is exactly its bytes, `index` its
/// footer entry (region `RELEASE_REGION`). Checks everything
/// [`decode_segment`] checks, then the records.
pub fn decode_releases(
    bytes: &Bytes,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<ReleaseRecord>, FormatError> {
    if !index.is_release() {
        return Err(FormatError::invalid(
            "footer.region",
            index.offset,
            format!("region {} is not the release region", index.region),
        ));
    }
    let entries = decode_segment(bytes, index, sequence)?;
    // `decode_segment` enforced the index, which for the release region means
    // exactly one entry whose data is a non-zero multiple of the record size.
    let data_at = index.offset.saturating_add(ENTRY_OVERHEAD as u64);
    let data = match entries.as_slice() {
        [(_, data)] => data,
        _ => {
            return Err(FormatError::invalid(
                "release",
                index.offset,
                "the release segment holds one entry",
            ))
        }
    };
    let r = Reader::new(data, data_at);
    let count = data.len() / RELEASE_RECORD_LEN;
    let mut records: Vec<ReleaseRecord> = Vec::with_capacity(count);
    for i in 0..count {
        let at = i * RELEASE_RECORD_LEN;
        let region = r.u64(at, "release.region")?;
        check_region(region, records.last().map(|p| p.region), r.offset(at))?;
        records.push(ReleaseRecord {
            region,
            released_through: r.u64(at + 8, "release.released_through")?,
        });
    }
    if count == 0 || !data.len().is_multiple_of(RELEASE_RECORD_LEN) {
        return Err(FormatError::invalid(
            "release",
            data_at,
            format!(
                "release data of {} bytes is not a non-zero number of records",
                data.len()
            ),
        ));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::codec::crc32;
    use crate::format::entry_id;

    const SEQ: u64 = 11;

    fn encoded(records: &[ReleaseRecord]) -> (Bytes, SegmentIndex) {
        let data_len = checked_data_len(records, 64).unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(&entry_id(SEQ, 1).to_le_bytes());
        out.extend_from_slice(&(data_len as u32).to_le_bytes());
        encode_records(records, &mut out);
        let index = SegmentIndex {
            region: RELEASE_REGION,
            first_id: entry_id(SEQ, 1),
            last_id: entry_id(SEQ, 1),
            offset: 64,
            len: out.len() as u64,
            count: 1,
            crc: crc32(&out),
        };
        (Bytes::from(out), index)
    }

    fn rec(region: u64, released_through: u64) -> ReleaseRecord {
        ReleaseRecord {
            region,
            released_through,
        }
    }

    #[test]
    fn round_trips() {
        let records = [
            rec(0, 0),
            rec(3, entry_id(SEQ - 1, 9)),
            rec(u64::MAX - 1, u64::MAX),
        ];
        let (bytes, index) = encoded(&records);
        assert_eq!(bytes.len(), 12 + 48);
        assert_eq!(decode_releases(&bytes, &index, SEQ).unwrap(), records);
    }

    #[test]
    fn encoder_rejects_unsorted_and_reserved_regions() {
        assert!(checked_data_len(&[rec(2, 0), rec(2, 0)], 64).is_err());
        assert!(checked_data_len(&[rec(3, 0), rec(2, 0)], 64).is_err());
        let err = checked_data_len(&[rec(1, 0), rec(RELEASE_REGION, 0)], 64).unwrap_err();
        assert_eq!(err.field, "release.region");
        assert_eq!(err.offset, 64 + 12 + 16);
    }

    #[test]
    fn decoder_rejects_unsorted_records_even_with_good_crcs() {
        let mut bytes = encoded(&[rec(1, 0), rec(2, 0)]).0.to_vec();
        bytes[12 + 16] = 1; // second region becomes 1
        let index = SegmentIndex {
            crc: crc32(&bytes),
            ..encoded(&[rec(1, 0), rec(2, 0)]).1
        };
        let err = decode_releases(&Bytes::from(bytes), &index, SEQ).unwrap_err();
        assert_eq!(err.field, "release.region");
        assert_eq!(err.offset, 64 + 12 + 16);
    }

    #[test]
    fn decoder_rejects_an_ordinary_segment() {
        let (bytes, index) = encoded(&[rec(1, 0)]);
        let err = decode_releases(&bytes, &SegmentIndex { region: 5, ..index }, SEQ).unwrap_err();
        assert_eq!(err.field, "footer.region");
    }
}
