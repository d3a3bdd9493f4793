//! Segments: the entries of one region, framed back to back.
//!
//! ```text
//! frame: id: u64 | len: u32 | data: [u8; len]     (ENTRY_OVERHEAD = 12 bytes + data)
//! ```
//!
//! Invariants (checked by the encoder and by [`decode_segment`]): a segment
//! holds at least one entry; ids strictly increase; every id belongs to the
//! object's sequence (`id >> 20 == sequence`) with a position of at least 1;
//! frames fill the segment exactly; the first id, last id and count agree with
//! the segment's footer entry and the bytes with its CRC.

use bytes::Bytes;

use super::codec::{check_crc, crc32, to_usize, Reader};
use super::error::{FormatError, FormatErrorKind};
use super::footer::{check_index, SegmentIndex};
use super::{position_of, sequence_of, ENTRY_OVERHEAD};

/// The entries of one region in one object, in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The region (never `RELEASE_REGION` here).
    pub region: u64,
    /// `(entry id, payload)` pairs, ids strictly increasing.
    pub entries: Vec<(u64, Bytes)>,
}

/// Checks `entries` for encoding into a segment of `sequence` that starts at
/// object offset `offset`, and returns the segment's encoded length.
pub(crate) fn checked_len(
    entries: &[(u64, Bytes)],
    sequence: u64,
    offset: u64,
) -> Result<u64, FormatError> {
    if entries.is_empty() {
        return Err(FormatError::invalid(
            "segment",
            offset,
            "a segment holds at least one entry",
        ));
    }
    let mut len: u64 = 0;
    let mut prev: Option<u64> = None;
    for (id, data) in entries {
        let at = offset.saturating_add(len);
        check_id(*id, prev, sequence, at)?;
        if u32::try_from(data.len()).is_err() {
            return Err(FormatError::invalid(
                "entry.len",
                at.saturating_add(8),
                format!("entry of {} bytes is longer than u32::MAX", data.len()),
            ));
        }
        len = len.saturating_add(ENTRY_OVERHEAD as u64 + data.len() as u64);
        prev = Some(*id);
    }
    Ok(len)
}

/// Checks one entry id: of `sequence`, position >= 1, above `prev`.
fn check_id(id: u64, prev: Option<u64>, sequence: u64, at: u64) -> Result<(), FormatError> {
    if sequence_of(id) != sequence || position_of(id) == 0 {
        return Err(FormatError::invalid(
            "entry.id",
            at,
            format!("entry id {id:#x} is not a position >= 1 of sequence {sequence}"),
        ));
    }
    if let Some(prev) = prev {
        if id <= prev {
            return Err(FormatError::invalid(
                "entry.id",
                at,
                format!("entry id {id:#x} does not follow {prev:#x}"),
            ));
        }
    }
    Ok(())
}

/// The encoder hashes what it wrote in pieces of about this many bytes: large
/// enough for crc32fast's folding loop to run at full speed (a call per
/// 900-byte frame costs more than a second pass), small enough that a piece
/// is still in the L1 cache when it is hashed, right after it was copied.
const HASH_PIECE: usize = 16 << 10;

/// Appends the frames of `entries` (already checked) to `out` and returns
/// the CRC32 state of exactly those bytes. Each payload is copied once, and
/// every piece of about [`HASH_PIECE`] bytes is hashed right after it is
/// written, while it is in cache, instead of in a second pass over the
/// whole segment.
pub(crate) fn encode_frames(entries: &[(u64, Bytes)], out: &mut Vec<u8>) -> crc32fast::Hasher {
    let mut hasher = crc32fast::Hasher::new();
    let mut hashed = out.len();
    let mut hash_written = |out: &Vec<u8>, hashed: &mut usize| {
        hasher.update(out.get(*hashed..).unwrap_or_default());
        *hashed = out.len();
    };
    for (id, data) in entries {
        out.extend_from_slice(&id.to_le_bytes());
        // Checked by `checked_len`: every payload fits a u32.
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        for piece in data.chunks(HASH_PIECE) {
            out.extend_from_slice(piece);
            if out.len() - hashed >= HASH_PIECE {
                hash_written(out, &mut hashed);
            }
        }
    }
    hash_written(out, &mut hashed);
    hasher
}

/// Decodes one segment. `bytes` is exactly the segment's bytes (the range of
/// `index` in the object); checks its CRC, its frames, and its ids against
/// `index` and `sequence`. Zero-copy: the payloads are slices of `bytes`.
/// Offsets in errors are object offsets (from `index.offset`); an `index`
/// that breaks a footer rule is reported under its footer field name at the
/// segment's offset, since its footer entry's offset is not known here.
pub fn decode_segment(
    bytes: &Bytes,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<(u64, Bytes)>, FormatError> {
    check_index(index, sequence, index.offset)?;
    let available = bytes.len() as u64;
    if available != index.len {
        let kind = if available < index.len {
            FormatErrorKind::Truncated {
                needed: index.len,
                available,
            }
        } else {
            FormatErrorKind::Invalid(format!(
                "{available} bytes given for a segment of {}",
                index.len
            ))
        };
        return Err(FormatError::new(kind, "segment", index.offset));
    }
    check_crc(index.crc, crc32(bytes), "footer.crc", index.offset)?;
    let r = Reader::new(bytes, index.offset);
    // Bounded by the bytes present: every entry takes at least ENTRY_OVERHEAD.
    let capacity = (index.count as usize).min(bytes.len() / ENTRY_OVERHEAD);
    let mut entries: Vec<(u64, Bytes)> = Vec::with_capacity(capacity);
    let mut pos = 0usize;
    let mut prev = None;
    while pos < bytes.len() {
        let id = r.u64(pos, "entry.id")?;
        let len = r.u32(pos + 8, "entry.len")?;
        check_id(id, prev, sequence, r.offset(pos))?;
        if prev.is_none() && id != index.first_id {
            return Err(FormatError::invalid(
                "entry.id",
                r.offset(pos),
                format!(
                    "first entry id {id:#x} is not the footer's {:#x}",
                    index.first_id
                ),
            ));
        }
        if entries.len() >= index.count as usize {
            return Err(FormatError::invalid(
                "entry.id",
                r.offset(pos),
                format!("more entries than the footer's count {}", index.count),
            ));
        }
        let start = pos + ENTRY_OVERHEAD;
        let data_len = to_usize(u64::from(len), "entry.len", r.offset(pos + 8))?;
        let _ = r.bytes(start, data_len, "entry.data")?;
        let end = start + data_len;
        entries.push((id, bytes.slice(start..end)));
        prev = Some(id);
        pos = end;
    }
    if entries.len() != index.count as usize || prev != Some(index.last_id) {
        return Err(FormatError::invalid(
            "segment",
            index.offset,
            format!(
                "holds {} entries ending at id {:#x}; the footer says {} ending at {:#x}",
                entries.len(),
                prev.unwrap_or(0),
                index.count,
                index.last_id
            ),
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::entry_id;

    const SEQ: u64 = 3;

    fn entries() -> Vec<(u64, Bytes)> {
        vec![
            (entry_id(SEQ, 1), Bytes::from_static(b"one")),
            (entry_id(SEQ, 4), Bytes::new()),
            (entry_id(SEQ, 5), Bytes::from_static(b"fifth")),
        ]
    }

    fn encoded(entries: &[(u64, Bytes)]) -> (Bytes, SegmentIndex) {
        let len = checked_len(entries, SEQ, 64).unwrap();
        let mut out = Vec::new();
        let hasher = encode_frames(entries, &mut out);
        assert_eq!(out.len() as u64, len);
        assert_eq!(hasher.finalize(), crc32(&out), "hashed in the same pass");
        let index = SegmentIndex {
            region: 1,
            first_id: entries[0].0,
            last_id: entries[entries.len() - 1].0,
            offset: 64,
            len,
            count: entries.len() as u32,
            crc: crc32(&out),
        };
        (Bytes::from(out), index)
    }

    /// The same-pass hash agrees with one pass over the bytes for frames
    /// smaller than, equal to and larger than a hash piece, and for runs of
    /// small frames that cross piece boundaries.
    #[test]
    fn frames_of_every_size_hash_as_one_pass_would() {
        let sizes = [
            0,
            1,
            HASH_PIECE - 13,
            HASH_PIECE - 12,
            HASH_PIECE,
            HASH_PIECE + 1,
            3 * HASH_PIECE + 5,
        ];
        for size in sizes {
            let data = Bytes::from((0..size).map(|i| (i * 7 + size) as u8).collect::<Vec<_>>());
            let one: Vec<_> = (1..=3).map(|p| (entry_id(SEQ, p), data.clone())).collect();
            let (bytes, index) = encoded(&one);
            assert_eq!(decode_segment(&bytes, &index, SEQ).unwrap(), one, "{size}");
        }
        let many: Vec<_> = (1..=100)
            .map(|p| (entry_id(SEQ, p), Bytes::from(vec![p as u8; 900])))
            .collect();
        let mut out = vec![0xee; 5]; // frames need not start the buffer
        let hasher = encode_frames(&many, &mut out);
        assert_eq!(hasher.finalize(), crc32(&out[5..]));
    }

    #[test]
    fn round_trips_zero_copy() {
        let (bytes, index) = encoded(&entries());
        let decoded = decode_segment(&bytes, &index, SEQ).unwrap();
        assert_eq!(decoded, entries());
        let payload = decoded[0].1.as_ptr();
        assert!(bytes.as_ptr() <= payload && payload < bytes.as_ptr().wrapping_add(bytes.len()));
    }

    #[test]
    fn encoder_rejects_bad_ids_and_empty_segments() {
        assert_eq!(checked_len(&[], SEQ, 64).unwrap_err().field, "segment");
        let b = Bytes::new();
        for bad in [
            vec![(entry_id(SEQ, 2), b.clone()), (entry_id(SEQ, 2), b.clone())],
            vec![(entry_id(SEQ, 2), b.clone()), (entry_id(SEQ, 1), b.clone())],
            vec![(entry_id(SEQ, 0), b.clone())],
            vec![(entry_id(SEQ + 1, 1), b.clone())],
        ] {
            assert_eq!(checked_len(&bad, SEQ, 64).unwrap_err().field, "entry.id");
        }
    }

    #[test]
    fn rejects_disagreement_with_the_footer() {
        let (bytes, index) = encoded(&entries());
        let cases = [
            SegmentIndex { count: 2, ..index },
            SegmentIndex {
                count: 4,
                len: index.len,
                ..index
            },
            SegmentIndex {
                first_id: entry_id(SEQ, 2),
                ..index
            },
            SegmentIndex {
                last_id: entry_id(SEQ, 6),
                ..index
            },
        ];
        for bad in cases {
            assert!(decode_segment(&bytes, &bad, SEQ).is_err(), "{bad:?}");
        }
        assert!(decode_segment(&bytes, &index, SEQ + 1).is_err());
        assert!(decode_segment(&bytes.slice(1..), &index, SEQ).is_err());
    }

    #[test]
    fn bytes_of_the_wrong_length_are_truncated_or_invalid_at_the_segment() {
        let (bytes, index) = encoded(&entries());
        let short = bytes.slice(..bytes.len() - 1);
        let err = decode_segment(&short, &index, SEQ).unwrap_err();
        assert_eq!(
            err,
            FormatError::new(
                FormatErrorKind::Truncated {
                    needed: index.len,
                    available: index.len - 1,
                },
                "segment",
                64,
            )
        );
        let mut long = bytes.to_vec();
        long.push(0);
        let err = decode_segment(&Bytes::from(long), &index, SEQ).unwrap_err();
        assert!(matches!(err.kind, FormatErrorKind::Invalid(_)), "{err}");
        assert_eq!((err.field, err.offset), ("segment", 64));
    }

    #[test]
    fn rejects_damage_with_object_offsets() {
        let (bytes, index) = encoded(&entries());
        let mut damaged = bytes.to_vec();
        damaged[20] ^= 0x40;
        let err = decode_segment(&Bytes::from(damaged.clone()), &index, SEQ).unwrap_err();
        assert!(err.is_crc_mismatch());
        // A frame length that runs past the segment, with a CRC that matches.
        damaged = bytes.to_vec();
        damaged[8] = 200;
        let index2 = SegmentIndex {
            crc: crc32(&damaged),
            ..index
        };
        let err = decode_segment(&Bytes::from(damaged), &index2, SEQ).unwrap_err();
        assert_eq!(err.field, "entry.data");
        assert_eq!(err.offset, 64 + 12);
    }
}
