//! The 80-byte trailer at the very end of an object.
//!
//! ```text
//! off size field
//!   0    8 sequence            (same as header)
//!   8    8 epoch               (same as header)
//!  16    8 link sequence       (same as header)
//!  24    8 link epoch          (same as header)
//!  32    8 reclaim boundary    (same as header)
//!  40    8 footer offset
//!  48    4 segment count
//!  52    4 CRC32 of the footer bytes
//!  56    4 CRC32 of the object before the trailer (0 .. object_len - 80)
//!  60    2 format version (1)
//!  62    2 flags               (same as header)
//!  64    4 reserved (0)
//!  68    4 CRC32 of trailer bytes 0..68
//!  72    8 magic "OBJWALTR"
//! ```
//!
//! The trailer repeats every header field so that recovery, which reads one
//! window at the end of an object, never needs the header. Invariants checked
//! on decode: the header rules; `footer_offset >= HEADER_LEN`;
//! `footer_offset + FOOTER_ENTRY_LEN * segment_count == object_len - TRAILER_LEN`
//! (in checked arithmetic, before anything is allocated).

use super::codec::{crc32, put_u16, put_u32, put_u64, Reader};
use super::error::{FormatError, FormatErrorKind};
use super::header::{read_fields, FieldLayout, Header, Link};
use super::{FOOTER_ENTRY_LEN, HEADER_LEN, TRAILER_LEN, VERSION};

/// The magic at the end of every object.
pub const TRAILER_MAGIC: [u8; 8] = *b"OBJWALTR";

/// The smallest object: a header, no segments, an empty footer, a trailer.
pub const MIN_OBJECT_LEN: u64 = (HEADER_LEN + TRAILER_LEN) as u64;

/// The decoded trailer, with the length of the object it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailer {
    /// The header fields, as the trailer repeats them.
    pub header: Header,
    /// Where the footer starts (from the object's start).
    pub footer_offset: u64,
    /// How many 48-byte footer entries (segments) the object has.
    pub segment_count: u32,
    /// The CRC32 of the footer bytes.
    pub footer_crc: u32,
    /// The CRC32 of every byte before the trailer.
    pub object_crc: u32,
    /// The length of the whole object (not stored; given to the decoder).
    pub object_len: u64,
}

impl Trailer {
    /// The byte range of the footer in the object.
    pub fn footer_range(&self) -> std::ops::Range<u64> {
        self.footer_offset..self.object_len.saturating_sub(TRAILER_LEN as u64)
    }

    /// The object offset of the trailer.
    pub fn trailer_offset(&self) -> u64 {
        self.object_len.saturating_sub(TRAILER_LEN as u64)
    }
}

/// The header fields in the trailer.
pub(crate) const TRAILER_FIELDS: FieldLayout = FieldLayout {
    sequence: (0, "trailer.sequence"),
    epoch: (8, "trailer.epoch"),
    link_sequence: (16, "trailer.link_sequence"),
    link_epoch: (24, "trailer.link_epoch"),
    reclaim_boundary: (32, "trailer.reclaim_boundary"),
    version: (60, "trailer.version"),
    flags: (62, "trailer.flags"),
};

/// Decodes the trailer from `bytes`, exactly the last [`TRAILER_LEN`] bytes of
/// an object of `object_len` bytes, and checks where it puts the footer.
pub(crate) fn decode_trailer(bytes: &[u8], object_len: u64) -> Result<Trailer, FormatError> {
    let base = object_len.saturating_sub(TRAILER_LEN as u64);
    let r = Reader::new(bytes, base);
    if object_len < MIN_OBJECT_LEN {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                needed: MIN_OBJECT_LEN,
                available: object_len,
            },
            "object",
            0,
        ));
    }
    let _ = r.bytes(0, TRAILER_LEN, "trailer")?;
    if r.array::<8>(72, "trailer.magic")? != TRAILER_MAGIC {
        return Err(FormatError::new(
            FormatErrorKind::BadMagic,
            "trailer.magic",
            r.offset(72),
        ));
    }
    r.check_crc(0..68, 68, "trailer.crc")?;
    let reserved = r.u32(64, "trailer.reserved")?;
    if reserved != 0 {
        return Err(FormatError::invalid(
            "trailer.reserved",
            r.offset(64),
            format!("reserved field holds {reserved:#x}, not 0"),
        ));
    }
    let header = read_fields(&r, &TRAILER_FIELDS)?;
    let footer_offset = r.u64(40, "trailer.footer_offset")?;
    let segment_count = r.u32(48, "trailer.segment_count")?;
    let footer_crc = r.u32(52, "trailer.footer_crc")?;
    let object_crc = r.u32(56, "trailer.object_crc")?;
    if footer_offset < HEADER_LEN as u64 {
        return Err(FormatError::invalid(
            "trailer.footer_offset",
            r.offset(40),
            format!("footer offset {footer_offset} lies inside the header"),
        ));
    }
    let footer_end = (FOOTER_ENTRY_LEN as u64)
        .checked_mul(u64::from(segment_count))
        .and_then(|footer_len| footer_offset.checked_add(footer_len));
    if footer_end != Some(base) {
        return Err(FormatError::invalid(
            "trailer.footer_offset",
            r.offset(40),
            format!(
                "a footer of {segment_count} entries at offset {footer_offset} does not end where the trailer starts ({base})"
            ),
        ));
    }
    Ok(Trailer {
        header,
        footer_offset,
        segment_count,
        footer_crc,
        object_crc,
        object_len,
    })
}

/// Appends the 80 trailer bytes to `out`. `header` was already checked.
pub(crate) fn encode_trailer(
    header: &Header,
    footer_offset: u64,
    segment_count: u32,
    footer_crc: u32,
    object_crc: u32,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let link = header.link.unwrap_or(Link {
        sequence: 0,
        epoch: 0,
    });
    put_u64(out, header.sequence);
    put_u64(out, header.epoch);
    put_u64(out, link.sequence);
    put_u64(out, link.epoch);
    put_u64(out, header.reclaim_boundary);
    put_u64(out, footer_offset);
    put_u32(out, segment_count);
    put_u32(out, footer_crc);
    put_u32(out, object_crc);
    put_u16(out, VERSION);
    put_u16(out, header.flags());
    put_u32(out, 0);
    let crc = crc32(out.get(start..).unwrap_or_default());
    put_u32(out, crc);
    out.extend_from_slice(&TRAILER_MAGIC);
    debug_assert_eq!(out.len() - start, TRAILER_LEN);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            sequence: 9,
            epoch: 4,
            link: Some(Link {
                sequence: 8,
                epoch: 4,
            }),
            reclaim_boundary: 2,
        }
    }

    /// A trailer for an object with `count` segments whose footer is at `footer_offset`.
    fn encoded(footer_offset: u64, count: u32) -> (Vec<u8>, u64) {
        let mut out = Vec::new();
        encode_trailer(
            &header(),
            footer_offset,
            count,
            0xAABB_CCDD,
            0x1122_3344,
            &mut out,
        );
        (
            out,
            footer_offset
                .wrapping_add(48 * u64::from(count))
                .wrapping_add(80),
        )
    }

    fn reseal(b: &mut [u8]) {
        let crc = crc32(&b[..68]);
        b[68..72].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trips_and_reports_footer_range() {
        let (bytes, len) = encoded(1000, 3);
        assert_eq!(bytes.len(), TRAILER_LEN);
        assert_eq!(&bytes[72..], b"OBJWALTR");
        let t = decode_trailer(&bytes, len).unwrap();
        assert_eq!(t.header, header());
        assert_eq!(t.footer_offset, 1000);
        assert_eq!(t.segment_count, 3);
        assert_eq!(t.footer_crc, 0xAABB_CCDD);
        assert_eq!(t.object_crc, 0x1122_3344);
        assert_eq!(t.footer_range(), 1000..1144);
        assert_eq!(t.trailer_offset(), 1144);
    }

    #[test]
    fn rejects_footer_that_does_not_end_at_the_trailer() {
        let (bytes, len) = encoded(1000, 3);
        let err = decode_trailer(&bytes, len + 1).unwrap_err();
        assert_eq!(err.field, "trailer.footer_offset");
        assert_eq!(err.offset, len + 1 - 80 + 40);
        let (bytes, len) = encoded(63, 1);
        assert_eq!(
            decode_trailer(&bytes, len).unwrap_err().field,
            "trailer.footer_offset"
        );
    }

    #[test]
    fn overflowing_segment_count_is_an_error_not_a_panic() {
        let (mut bytes, _) = encoded(u64::MAX - 10, 0);
        bytes[48..52].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut bytes);
        assert!(decode_trailer(&bytes, u64::MAX).is_err());
    }

    #[test]
    fn rejects_magic_crc_reserved_and_tiny_objects() {
        let (good, len) = encoded(64, 0);
        assert_eq!(len, MIN_OBJECT_LEN);
        assert!(decode_trailer(&good, len - 1).is_err());
        let mut b = good.clone();
        b[79] ^= 1;
        assert_eq!(
            decode_trailer(&b, len).unwrap_err().kind,
            FormatErrorKind::BadMagic
        );
        let mut b = good.clone();
        b[0] ^= 1;
        assert!(decode_trailer(&b, len).unwrap_err().is_crc_mismatch());
        let mut b = good.clone();
        b[64] = 1;
        reseal(&mut b);
        assert_eq!(
            decode_trailer(&b, len).unwrap_err().field,
            "trailer.reserved"
        );
        let mut b = good.clone();
        b[62] = 4;
        reseal(&mut b);
        assert_eq!(decode_trailer(&b, len).unwrap_err().field, "trailer.flags");
    }
}
