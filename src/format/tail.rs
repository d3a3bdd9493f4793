//! Decoding the tail window: what recovery reads of each object.
//!
//! Recovery reads one window at the end of an object. The trailer (its last
//! 80 bytes) carries every header field plus where the footer is; when the
//! window also covers the footer, one read yields a complete [`Tail`]: the
//! header fields and the index of every segment. When the footer starts
//! before the window, [`decode_tail`] says which range to read, and
//! [`decode_footer`] finishes. Neither ever touches the header or a segment.
//!
//! Invariants of a [`Tail`]: the trailer passed every check of the trailer
//! module; the footer matched its CRC and every check of the footer module
//! (segments tile `[HEADER_LEN, footer_offset)`, regions strictly increase).

use super::codec::check_crc;
use super::error::{FormatError, FormatErrorKind};
use super::footer::{decode_entries, SegmentIndex};
use super::header::Header;
use super::trailer::{decode_trailer, Trailer};
use super::{codec::crc32, FOOTER_ENTRY_LEN, TRAILER_LEN};

/// What recovery learns from an object's tail: the header fields and the
/// index of every segment (the release segment included, last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    /// The decoded trailer.
    pub trailer: Trailer,
    /// Every segment's footer entry, in footer (region) order.
    pub segments: Vec<SegmentIndex>,
}

impl Tail {
    /// The release segment's index, if the object has one.
    pub fn release_segment(&self) -> Option<&SegmentIndex> {
        self.segments.last().filter(|s| s.is_release())
    }

    /// The header fields, as the trailer carries them.
    pub fn header(&self) -> &Header {
        &self.trailer.header
    }

    /// The marks segment's index, if the object has one.
    pub fn marks_segment(&self) -> Option<&SegmentIndex> {
        self.segment_of(super::MARKS_REGION)
    }

    /// The ordinary segments (neither marks nor releases).
    pub fn region_segments(&self) -> impl Iterator<Item = &SegmentIndex> {
        self.segments.iter().filter(|s| !s.is_reserved())
    }

    /// The index of `region`'s segment, if the object holds one.
    pub fn segment_of(&self, region: u64) -> Option<&SegmentIndex> {
        self.segments
            .binary_search_by_key(&region, |s| s.region)
            .ok()
            .and_then(|i| self.segments.get(i))
    }
}

/// The result of decoding a tail window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailDecode {
    /// The window held the trailer and the whole footer.
    Complete(Tail),
    /// The footer starts before the window: read `footer` (object offsets)
    /// and pass it to [`decode_footer`] with `trailer`.
    NeedFooter {
        /// The decoded trailer.
        trailer: Trailer,
        /// The footer's byte range in the object.
        footer: std::ops::Range<u64>,
    },
}

/// Decodes a tail window: `window` is the last `window.len()` bytes of an
/// object of `object_len` bytes. Offsets in errors are object offsets.
pub fn decode_tail(window: &[u8], object_len: u64) -> Result<TailDecode, FormatError> {
    let window_len = window.len() as u64;
    let Some(window_start) = object_len.checked_sub(window_len) else {
        return Err(FormatError::invalid(
            "window",
            0,
            format!("a window of {window_len} bytes is longer than the object ({object_len})"),
        ));
    };
    let trailer_bytes = window
        .len()
        .checked_sub(TRAILER_LEN)
        .and_then(|at| window.get(at..));
    let Some(trailer_bytes) = trailer_bytes else {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                needed: TRAILER_LEN as u64,
                available: window_len,
            },
            "trailer",
            window_start,
        ));
    };
    let trailer = decode_trailer(trailer_bytes, object_len)?;
    let footer_range = trailer.footer_range();
    if footer_range.start < window_start {
        return Ok(TailDecode::NeedFooter {
            trailer,
            footer: footer_range,
        });
    }
    // footer_range lies inside the window: start >= window_start, end = the
    // trailer's offset; `get` keeps it panic-free regardless.
    let from = footer_range.start - window_start;
    let to = footer_range.end.saturating_sub(window_start);
    let footer = usize::try_from(from)
        .ok()
        .zip(usize::try_from(to).ok())
        .and_then(|(from, to)| window.get(from..to))
        .ok_or_else(|| {
            FormatError::invalid(
                "trailer.footer_offset",
                trailer.trailer_offset() + 40,
                "footer outside the window",
            )
        })?;
    decode_footer(trailer, footer).map(TailDecode::Complete)
}

/// Finishes a [`TailDecode::NeedFooter`]: `footer` is exactly the bytes of the
/// footer range. Checks the footer CRC and every footer rule.
pub fn decode_footer(trailer: Trailer, footer: &[u8]) -> Result<Tail, FormatError> {
    let expected = (FOOTER_ENTRY_LEN as u64).saturating_mul(u64::from(trailer.segment_count));
    let available = footer.len() as u64;
    if available != expected
        || trailer
            .footer_range()
            .end
            .checked_sub(trailer.footer_offset)
            != Some(expected)
    {
        let kind = if available < expected {
            FormatErrorKind::Truncated {
                needed: expected,
                available,
            }
        } else {
            FormatErrorKind::Invalid(format!(
                "{available} footer bytes given; the trailer says {} entries at {}..{}",
                trailer.segment_count,
                trailer.footer_offset,
                trailer.footer_range().end
            ))
        };
        return Err(FormatError::new(kind, "footer", trailer.footer_offset));
    }
    check_crc(
        trailer.footer_crc,
        crc32(footer),
        "trailer.footer_crc",
        trailer.trailer_offset() + 52,
    )?;
    let segments = decode_entries(footer, trailer.footer_offset, trailer.header.sequence)?;
    Ok(Tail { trailer, segments })
}
