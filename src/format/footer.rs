//! The footer: one 48-byte index entry per segment, between the last segment
//! and the trailer.
//!
//! ```text
//! off size field
//!   0    8 region
//!   8    8 first entry id
//!  16    8 last entry id
//!  24    8 segment offset (from the object's start)
//!  32    8 segment length in bytes
//!  40    4 entry count (>= 1)
//!  44    4 CRC32 of the segment's bytes
//! ```
//!
//! Invariants checked on decode, before any segment is read: regions strictly
//! increase; the segments tile `[HEADER_LEN, footer_offset)` exactly, in
//! footer order; each entry's ids belong to the object's sequence, start at
//! position 1 or above, and leave room for `count` strictly increasing ids;
//! the length holds at least `count` frames; the release segment (region
//! `u64::MAX`) and the marks segment (region `u64::MAX - 255`) each have exactly
//! one entry, id `(sequence << 20) | 1`, whose data is a whole, non-zero
//! number of 16-byte records.

use super::codec::{put_u32, put_u64, Reader};
use super::error::FormatError;
use super::{
    entry_id, position_of, sequence_of, ENTRY_OVERHEAD, FOOTER_ENTRY_LEN, HEADER_LEN, MARKS_REGION,
    MARK_RECORD_LEN, RELEASE_RECORD_LEN, RELEASE_REGION,
};

/// Where one segment sits and what it holds: one footer entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentIndex {
    /// The segment's region (`RELEASE_REGION` for the release segment).
    pub region: u64,
    /// The id of its first entry.
    pub first_id: u64,
    /// The id of its last entry.
    pub last_id: u64,
    /// Its offset from the object's start.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its number of entries (at least 1).
    pub count: u32,
    /// The CRC32 of its bytes.
    pub crc: u32,
}

impl SegmentIndex {
    /// The segment's byte range in the object.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset.saturating_add(self.len)
    }

    /// Whether this is the release segment.
    pub fn is_release(&self) -> bool {
        self.region == RELEASE_REGION
    }

    /// Whether this is the marks segment.
    pub fn is_marks(&self) -> bool {
        self.region == MARKS_REGION
    }

    /// Whether this is the segment of a reserved region (marks or releases),
    /// not of a region of the log.
    pub fn is_reserved(&self) -> bool {
        self.is_release() || self.is_marks()
    }
}

/// Appends the 48-byte footer entry of `index`.
pub(crate) fn encode_entry(index: &SegmentIndex, out: &mut Vec<u8>) {
    put_u64(out, index.region);
    put_u64(out, index.first_id);
    put_u64(out, index.last_id);
    put_u64(out, index.offset);
    put_u64(out, index.len);
    put_u32(out, index.count);
    put_u32(out, index.crc);
}

/// Checks the rules one index obeys on its own (everything but tiling);
/// `at` is the object offset of its footer entry, for errors.
pub(crate) fn check_index(index: &SegmentIndex, sequence: u64, at: u64) -> Result<(), FormatError> {
    let bad = |field: &'static str, field_off: u64, msg: String| {
        Err(FormatError::invalid(
            field,
            at.saturating_add(field_off),
            msg,
        ))
    };
    for (id, field, field_off) in [
        (index.first_id, "footer.first_id", 8),
        (index.last_id, "footer.last_id", 16),
    ] {
        if sequence_of(id) != sequence || position_of(id) == 0 {
            return bad(
                field,
                field_off,
                format!("entry id {id:#x} is not a position >= 1 of sequence {sequence}"),
            );
        }
    }
    if index.count == 0 {
        return bad(
            "footer.count",
            40,
            "a segment holds at least one entry".into(),
        );
    }
    let span = index
        .last_id
        .checked_sub(index.first_id)
        .and_then(|d| d.checked_add(1));
    if span.is_none_or(|span| span < u64::from(index.count)) {
        return bad(
            "footer.last_id",
            16,
            format!(
                "{} strictly increasing ids cannot run from {:#x} to {:#x}",
                index.count, index.first_id, index.last_id
            ),
        );
    }
    if index.count == 1 && index.first_id != index.last_id {
        return bad(
            "footer.last_id",
            16,
            "a single entry has first id == last id".into(),
        );
    }
    let min_len = (ENTRY_OVERHEAD as u64).saturating_mul(u64::from(index.count));
    if index.len < min_len {
        return bad(
            "footer.len",
            32,
            format!("{} bytes cannot hold {} entries", index.len, index.count),
        );
    }
    if index.is_reserved() {
        let (what, record_len) = if index.is_release() {
            ("release", RELEASE_RECORD_LEN)
        } else {
            ("marks", MARK_RECORD_LEN)
        };
        let id = entry_id(sequence, 1);
        if index.count != 1 || index.first_id != id {
            return bad(
                "footer.first_id",
                8,
                format!("the {what} segment holds exactly one entry, id {id:#x}"),
            );
        }
        let data = index.len - ENTRY_OVERHEAD as u64;
        if data == 0 || !data.is_multiple_of(record_len as u64) {
            return bad(
                "footer.len",
                32,
                format!("{what} data of {data} bytes is not a non-zero number of records"),
            );
        }
    }
    Ok(())
}

/// Decodes and checks the footer: `bytes` is exactly the footer, which starts
/// at object offset `footer_offset`, of an object of `sequence`.
pub(crate) fn decode_entries(
    bytes: &[u8],
    footer_offset: u64,
    sequence: u64,
) -> Result<Vec<SegmentIndex>, FormatError> {
    let r = Reader::new(bytes, footer_offset);
    // The count comes from the length of bytes actually present, so the
    // allocation is bounded by the input.
    let count = r.len() / FOOTER_ENTRY_LEN;
    let mut out: Vec<SegmentIndex> = Vec::with_capacity(count);
    let mut expected_offset = HEADER_LEN as u64;
    for i in 0..count {
        let at = i * FOOTER_ENTRY_LEN;
        let index = SegmentIndex {
            region: r.u64(at, "footer.region")?,
            first_id: r.u64(at + 8, "footer.first_id")?,
            last_id: r.u64(at + 16, "footer.last_id")?,
            offset: r.u64(at + 24, "footer.offset")?,
            len: r.u64(at + 32, "footer.len")?,
            count: r.u32(at + 40, "footer.count")?,
            crc: r.u32(at + 44, "footer.crc")?,
        };
        let entry_at = r.offset(at);
        if let Some(prev) = out.last() {
            if index.region <= prev.region {
                return Err(FormatError::invalid(
                    "footer.region",
                    entry_at,
                    format!(
                        "region {} does not follow region {}",
                        index.region, prev.region
                    ),
                ));
            }
        }
        if index.offset != expected_offset {
            return Err(FormatError::invalid(
                "footer.offset",
                entry_at + 24,
                format!(
                    "segment starts at {} but the previous one ends at {expected_offset}",
                    index.offset
                ),
            ));
        }
        check_index(&index, sequence, entry_at)?;
        expected_offset = match index.offset.checked_add(index.len) {
            Some(end) if end <= footer_offset => end,
            _ => {
                return Err(FormatError::invalid(
                    "footer.len",
                    entry_at + 32,
                    format!(
                        "segment of {} bytes at {} runs past the footer at {footer_offset}",
                        index.len, index.offset
                    ),
                ))
            }
        };
        out.push(index);
    }
    if expected_offset != footer_offset || !r.len().is_multiple_of(FOOTER_ENTRY_LEN) {
        return Err(FormatError::invalid(
            "footer",
            footer_offset,
            format!("segments end at {expected_offset}, not at the footer ({footer_offset})"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQ: u64 = 5;

    fn index(region: u64, offset: u64, len: u64, count: u32) -> SegmentIndex {
        SegmentIndex {
            region,
            first_id: entry_id(SEQ, 1),
            last_id: entry_id(SEQ, u64::from(count)),
            offset,
            len,
            count,
            crc: 0,
        }
    }

    fn footer(entries: &[SegmentIndex]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            encode_entry(e, &mut out);
        }
        out
    }

    #[test]
    fn round_trips_a_tiling_footer() {
        let entries = [
            index(1, 64, 30, 2),
            index(7, 94, 12, 1),
            index(RELEASE_REGION, 106, 28, 1),
        ];
        let bytes = footer(&entries);
        assert_eq!(bytes.len(), 3 * FOOTER_ENTRY_LEN);
        assert_eq!(decode_entries(&bytes, 134, SEQ).unwrap(), entries);
        assert_eq!(decode_entries(&[], 64, SEQ).unwrap(), vec![]);
    }

    #[test]
    fn rejects_gaps_overlaps_and_overruns() {
        let cases: [(&[SegmentIndex], u64, &str); 5] = [
            (&[index(1, 65, 12, 1)], 77, "footer.offset"),
            (
                &[index(1, 64, 12, 1), index(2, 70, 12, 1)],
                88,
                "footer.offset",
            ),
            (&[index(1, 64, 24, 1)], 80, "footer.len"),
            (&[index(1, 64, 12, 1)], 80, "footer"),
            (&[index(1, 64, u64::MAX, 1)], 80, "footer.len"),
        ];
        for (entries, footer_offset, field) in cases {
            assert_eq!(
                decode_entries(&footer(entries), footer_offset, SEQ)
                    .unwrap_err()
                    .field,
                field
            );
        }
    }

    #[test]
    fn offsets_in_errors_point_at_the_field_of_the_entry() {
        // The second entry (at footer offset + 48) starts a byte late...
        let entries = [index(1, 64, 12, 1), index(2, 77, 12, 1)];
        let err = decode_entries(&footer(&entries), 89, SEQ).unwrap_err();
        assert_eq!((err.field, err.offset), ("footer.offset", 89 + 48 + 24));
        // ... or runs past the footer.
        let entries = [index(1, 64, 12, 1), index(2, 76, 13, 1)];
        let err = decode_entries(&footer(&entries), 88, SEQ).unwrap_err();
        assert_eq!((err.field, err.offset), ("footer.len", 88 + 48 + 32));
    }

    #[test]
    fn rejects_unsorted_regions() {
        let entries = [index(2, 64, 12, 1), index(2, 76, 12, 1)];
        let err = decode_entries(&footer(&entries), 88, SEQ).unwrap_err();
        assert_eq!(err.field, "footer.region");
        assert_eq!(err.offset, 88 + 48);
    }

    #[test]
    fn checks_ids_counts_and_lengths() {
        let good = index(1, 64, 36, 3);
        assert!(check_index(&good, SEQ, 0).is_ok());
        let cases = [
            (
                SegmentIndex {
                    first_id: entry_id(SEQ + 1, 1),
                    ..good
                },
                "footer.first_id",
            ),
            (
                SegmentIndex {
                    first_id: entry_id(SEQ, 0),
                    ..good
                },
                "footer.first_id",
            ),
            (
                SegmentIndex {
                    last_id: entry_id(SEQ, 2),
                    ..good
                },
                "footer.last_id",
            ),
            (SegmentIndex { count: 0, ..good }, "footer.count"),
            (SegmentIndex { len: 35, ..good }, "footer.len"),
            (SegmentIndex { count: 1, ..good }, "footer.last_id"),
        ];
        for (bad, field) in cases {
            assert_eq!(
                check_index(&bad, SEQ, 0).unwrap_err().field,
                field,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn checks_the_release_segment_shape() {
        let good = index(RELEASE_REGION, 64, 12 + 32, 1);
        assert!(check_index(&good, SEQ, 0).is_ok());
        for (bad, field) in [
            (SegmentIndex { len: 12, ..good }, "footer.len"),
            (
                SegmentIndex {
                    len: 12 + 17,
                    ..good
                },
                "footer.len",
            ),
            (
                SegmentIndex {
                    first_id: entry_id(SEQ, 2),
                    last_id: entry_id(SEQ, 2),
                    ..good
                },
                "footer.first_id",
            ),
        ] {
            assert_eq!(check_index(&bad, SEQ, 0).unwrap_err().field, field);
        }
    }
}
