//! Whole objects: the encoder, its size, and the full decoder.
//!
//! The encoder checks every rule first while it computes the exact size,
//! then writes into one allocation of that size, copying each payload once
//! and hashing it in the same pass, piece by piece right after each copy
//! while the bytes are in cache (`encode_frames`); the object CRC is
//! combined from the header, segment and footer CRCs instead of a second
//! pass over the payloads (a segment below [`COMBINE_ABOVE`] bytes is
//! hashed again instead: cheaper than a combine).
//! Encoding is deterministic: an [`Object`] has exactly one encoding, and a
//! decoded object re-encodes to the bytes it came from.
//!
//! The full decoder checks every CRC, that the header and the trailer agree,
//! and everything the header, tail and segment decoders check.

use bytes::Bytes;

use super::codec::{check_crc, crc32, to_usize};
use super::error::FormatError;
use super::footer::{encode_entry, SegmentIndex};
use super::header::{check_header, decode_header, encode_header, Header, HEADER_FIELDS};
use super::marks::{decode_marks, MarkRecord};
use super::records::{checked_data_len, encode_frame};
use super::release::{decode_releases, ReleaseRecord};
use super::segment::{checked_len, decode_segment, encode_frames, Segment};
use super::tail::{decode_tail, TailDecode};
use super::trailer::encode_trailer;
use super::{
    is_reserved_region, ENTRY_OVERHEAD, FOOTER_ENTRY_LEN, HEADER_LEN, MARKS_REGION,
    MARK_RECORD_LEN, RELEASE_RECORD_LEN, RELEASE_REGION, TRAILER_LEN,
};

/// One object: its header, the segments of its ordinary regions (sorted by
/// region), its mark records and its release records (each empty for no
/// such segment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// The header.
    pub header: Header,
    /// One segment per region, regions strictly increasing, none reserved.
    pub segments: Vec<Segment>,
    /// Mark records, regions strictly increasing; stored in the marks segment.
    pub marks: Vec<MarkRecord>,
    /// Release records, regions strictly increasing; stored in the release segment.
    pub releases: Vec<ReleaseRecord>,
}

/// Bytes and segments a records segment of `records` records adds.
fn records_len(records: usize, record_len: usize) -> (u64, u64) {
    if records == 0 {
        (0, 0)
    } else {
        let data = (records as u64).saturating_mul(record_len as u64);
        ((ENTRY_OVERHEAD as u64).saturating_add(data), 1)
    }
}

/// The size [`encode`] would produce for `object`, without encoding (and
/// without checking it; saturates on absurd inputs).
pub fn encoded_len(object: &Object) -> u64 {
    let segment_bytes = object.segments.iter().fold(0u64, |acc, s| {
        s.entries.iter().fold(acc, |acc, (_, data)| {
            acc.saturating_add(ENTRY_OVERHEAD as u64)
                .saturating_add(data.len() as u64)
        })
    });
    let (mark_bytes, mark_segments) = records_len(object.marks.len(), MARK_RECORD_LEN);
    let (release_bytes, release_segments) = records_len(object.releases.len(), RELEASE_RECORD_LEN);
    let segment_count = (object.segments.len() as u64)
        .saturating_add(mark_segments)
        .saturating_add(release_segments);
    ((HEADER_LEN + TRAILER_LEN) as u64)
        .saturating_add(segment_bytes)
        .saturating_add(mark_bytes)
        .saturating_add(release_bytes)
        .saturating_add(segment_count.saturating_mul(FOOTER_ENTRY_LEN as u64))
}

/// Encodes `object` deterministically. Errs when the input breaks a format
/// rule (unsorted regions, bad ids, an empty segment, a reserved region among
/// `segments`, an entry longer than `u32::MAX`, a sequence too large, ...);
/// the error names the field and the offset it would have had.
pub fn encode(object: &Object) -> Result<Bytes, FormatError> {
    let header = &object.header;
    check_header(header, &HEADER_FIELDS, 0)?;
    let sequence = header.sequence;

    // Pass 1: check everything and compute the exact size. The marks
    // segment takes its place in region order among the ordinary segments
    // (`marks_at` of them come before it); the release segment is last.
    let marks_at = object.segments.partition_point(|s| s.region < MARKS_REGION);
    let mut offset = HEADER_LEN as u64;
    let mut prev_region: Option<u64> = None;
    let mut mark_data_len = None;
    for (i, segment) in object.segments.iter().enumerate() {
        if i == marks_at && !object.marks.is_empty() {
            let data_len = checked_data_len(&object.marks, offset)?;
            offset = offset.saturating_add(ENTRY_OVERHEAD as u64 + data_len);
            mark_data_len = Some(data_len);
        }
        if is_reserved_region(segment.region) || prev_region.is_some_and(|p| segment.region <= p) {
            return Err(FormatError::invalid(
                "segment.region",
                offset,
                format!(
                    "region {} is reserved or does not follow the previous region",
                    segment.region
                ),
            ));
        }
        prev_region = Some(segment.region);
        offset = offset.saturating_add(checked_len(&segment.entries, sequence, offset)?);
    }
    if marks_at == object.segments.len() && !object.marks.is_empty() {
        let data_len = checked_data_len(&object.marks, offset)?;
        offset = offset.saturating_add(ENTRY_OVERHEAD as u64 + data_len);
        mark_data_len = Some(data_len);
    }
    let release_data_len = if object.releases.is_empty() {
        None
    } else {
        let data_len = checked_data_len(&object.releases, offset)?;
        offset = offset.saturating_add(ENTRY_OVERHEAD as u64 + data_len);
        Some(data_len)
    };
    let footer_offset = offset;
    let segment_count = object.segments.len()
        + usize::from(mark_data_len.is_some())
        + usize::from(release_data_len.is_some());
    let segment_count_u32 = u32::try_from(segment_count).map_err(|_| {
        FormatError::invalid("trailer.segment_count", footer_offset, "too many segments")
    })?;
    let total = footer_offset
        .saturating_add((FOOTER_ENTRY_LEN as u64).saturating_mul(segment_count as u64))
        .saturating_add(TRAILER_LEN as u64);
    let total = to_usize(total, "object", 0)?;

    // Pass 2: write into one allocation of exactly that size.
    let mut out: Vec<u8> = Vec::with_capacity(total);
    let mut object_crc = crc32fast::Hasher::new();
    encode_header(header, &mut out);
    object_crc.update(&out);
    let mut index: Vec<SegmentIndex> = Vec::with_capacity(segment_count);
    // `hasher` holds the CRC state of exactly the segment's bytes.
    let mut seal = |hasher: crc32fast::Hasher,
                    out: &Vec<u8>,
                    region: u64,
                    (first_id, last_id): (u64, u64),
                    start: usize,
                    count: u32| {
        let crc = hasher.clone().finalize();
        // Combining costs a few hundred nanoseconds whatever the length;
        // hashing a small segment again (just written, in cache) costs less.
        match out.get(start..) {
            Some(bytes) if bytes.len() < COMBINE_ABOVE => object_crc.update(bytes),
            _ => object_crc.combine(&hasher),
        }
        index.push(SegmentIndex {
            region,
            first_id,
            last_id,
            offset: start as u64,
            len: (out.len() - start) as u64,
            count,
            crc,
        });
    };
    for (i, segment) in object.segments.iter().enumerate() {
        if i == marks_at {
            if let Some(data_len) = mark_data_len {
                let (hasher, start, id) = encode_frame(&mut out, sequence, &object.marks, data_len);
                seal(hasher, &out, MARKS_REGION, (id, id), start, 1);
            }
        }
        let start = out.len();
        let hasher = encode_frames(&segment.entries, &mut out);
        let first = segment.entries.first().map_or(0, |e| e.0);
        let last = segment.entries.last().map_or(0, |e| e.0);
        // Positions are below 2^20, so a checked segment's count fits a u32.
        let count = segment.entries.len() as u32;
        seal(hasher, &out, segment.region, (first, last), start, count);
    }
    if marks_at == object.segments.len() {
        if let Some(data_len) = mark_data_len {
            let (hasher, start, id) = encode_frame(&mut out, sequence, &object.marks, data_len);
            seal(hasher, &out, MARKS_REGION, (id, id), start, 1);
        }
    }
    if let Some(data_len) = release_data_len {
        let (hasher, start, id) = encode_frame(&mut out, sequence, &object.releases, data_len);
        seal(hasher, &out, RELEASE_REGION, (id, id), start, 1);
    }
    let footer_start = out.len();
    for entry in &index {
        encode_entry(entry, &mut out);
    }
    let footer = out.get(footer_start..).unwrap_or_default();
    let footer_crc = crc32(footer);
    object_crc.update(footer);
    let object_crc = object_crc.finalize();
    encode_trailer(
        header,
        footer_offset,
        segment_count_u32,
        footer_crc,
        object_crc,
        &mut out,
    );
    debug_assert_eq!(out.len(), total);
    debug_assert_eq!(out.capacity(), total);
    Ok(Bytes::from(out))
}

/// Segments of at least this many bytes have their CRC combined into the
/// object CRC; smaller ones are hashed again (a combine costs about what
/// hashing 4 KiB does; with thousands of regions most segments hold one
/// small entry).
const COMBINE_ABOVE: usize = 4096;

/// Decodes a whole object, checking every CRC and every rule; the header and
/// the trailer must agree. Payloads are copied once out of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Object, FormatError> {
    let object_len = bytes.len() as u64;
    let header = decode_header(bytes)?;
    let tail = match decode_tail(bytes, object_len)? {
        TailDecode::Complete(tail) => tail,
        TailDecode::NeedFooter { footer, .. } => {
            return Err(FormatError::invalid(
                "trailer.footer_offset",
                footer.start,
                "footer outside the object",
            ))
        }
    };
    let trailer = &tail.trailer;
    if trailer.header != header {
        return Err(FormatError::invalid(
            "trailer",
            trailer.trailer_offset(),
            format!(
                "trailer says {:?} but header says {header:?}",
                trailer.header
            ),
        ));
    }
    let before_trailer = to_usize(
        trailer.trailer_offset(),
        "trailer",
        trailer.trailer_offset(),
    )?;
    let covered = bytes.get(..before_trailer).unwrap_or_default();
    check_crc(
        trailer.object_crc,
        crc32(covered),
        "trailer.object_crc",
        trailer.trailer_offset() + 56,
    )?;

    // Every check above passed: copy the body once; segments are slices of it.
    let body_len = to_usize(
        trailer.footer_offset,
        "trailer.footer_offset",
        trailer.trailer_offset() + 40,
    )?;
    let body = Bytes::copy_from_slice(bytes.get(..body_len).unwrap_or_default());
    let mut segments = Vec::with_capacity(tail.segments.len());
    let mut releases = Vec::new();
    let mut marks = Vec::new();
    for index in &tail.segments {
        // The footer decoder proved every range lies inside [HEADER_LEN, footer_offset).
        let start = to_usize(index.offset, "footer.offset", index.offset)?;
        let end = to_usize(index.range().end, "footer.len", index.offset)?;
        let seg = if start <= end && end <= body.len() {
            body.slice(start..end)
        } else {
            return Err(FormatError::invalid(
                "footer.len",
                index.offset,
                "segment outside the object",
            ));
        };
        if index.is_release() {
            releases = decode_releases(&seg, index, header.sequence)?;
        } else if index.is_marks() {
            marks = decode_marks(&seg, index, header.sequence)?;
        } else {
            segments.push(Segment {
                region: index.region,
                entries: decode_segment(&seg, index, header.sequence)?,
            });
        }
    }
    Ok(Object {
        header,
        segments,
        marks,
        releases,
    })
}
