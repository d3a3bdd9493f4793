//! The 64-byte header at offset 0, and the header fields the trailer repeats.
//!
//! ```text
//! off size field
//!   0    8 magic "OBJWALHD"
//!   8    2 format version (1)
//!  10    2 flags (bit 0: has link; other bits 0)
//!  12    4 reserved (0)
//!  16    8 sequence
//!  24    8 epoch
//!  32    8 link sequence (0 without link)
//!  40    8 link epoch (0 without link)
//!  48    8 reclaim boundary
//!  56    4 reserved (0)
//!  60    4 CRC32 of bytes 0..60
//! ```
//!
//! Invariants of a [`Header`] (checked on encode and on every decode, for the
//! header and for the copy of its fields in the trailer):
//! `sequence <= MAX_SEQUENCE`; `link.sequence < sequence`;
//! `reclaim_boundary <= sequence`; without a link the link fields are 0.

use super::codec::{crc32, put_u16, put_u32, put_u64, Reader};
use super::error::{FormatError, FormatErrorKind};
use super::{HEADER_LEN, MAX_SEQUENCE, VERSION};

/// The magic at the start of every object.
pub const HEADER_MAGIC: [u8; 8] = *b"OBJWALHD";
/// Flag bit: the object links to a predecessor.
pub const FLAG_HAS_LINK: u16 = 1;

/// The predecessor of an object in its chain: its sequence and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    /// The predecessor's sequence (below this object's sequence).
    pub sequence: u64,
    /// The predecessor's epoch.
    pub epoch: u64,
}

/// What an object says about itself: stored in the header and again in the
/// trailer, so recovery never needs the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The object's number; its key and the high bits of its entry ids.
    pub sequence: u64,
    /// The number of the store instance that wrote the object.
    pub epoch: u64,
    /// The predecessor in the chain, or `None` for a chain's first object.
    pub link: Option<Link>,
    /// Objects with a lower sequence may have been collected.
    pub reclaim_boundary: u64,
}

impl Header {
    /// The flags word this header encodes to.
    pub fn flags(&self) -> u16 {
        if self.link.is_some() {
            FLAG_HAS_LINK
        } else {
            0
        }
    }
}

/// Where the header fields sit inside a structure (header or trailer) and
/// what errors call them.
pub(crate) struct FieldLayout {
    pub(crate) version: (usize, &'static str),
    pub(crate) flags: (usize, &'static str),
    pub(crate) sequence: (usize, &'static str),
    pub(crate) epoch: (usize, &'static str),
    pub(crate) link_sequence: (usize, &'static str),
    pub(crate) link_epoch: (usize, &'static str),
    pub(crate) reclaim_boundary: (usize, &'static str),
}

/// The header fields in the header.
pub(crate) const HEADER_FIELDS: FieldLayout = FieldLayout {
    version: (8, "header.version"),
    flags: (10, "header.flags"),
    sequence: (16, "header.sequence"),
    epoch: (24, "header.epoch"),
    link_sequence: (32, "header.link_sequence"),
    link_epoch: (40, "header.link_epoch"),
    reclaim_boundary: (48, "header.reclaim_boundary"),
};

/// Reads and checks the header fields laid out as `layout` describes:
/// version, flags, and the semantic rules of [`check_header`].
pub(crate) fn read_fields(r: &Reader<'_>, layout: &FieldLayout) -> Result<Header, FormatError> {
    let version = r.u16(layout.version.0, layout.version.1)?;
    if version != VERSION {
        return Err(FormatError::new(
            FormatErrorKind::UnsupportedVersion(version),
            layout.version.1,
            r.offset(layout.version.0),
        ));
    }
    let flags = r.u16(layout.flags.0, layout.flags.1)?;
    if flags & !FLAG_HAS_LINK != 0 {
        return Err(FormatError::invalid(
            layout.flags.1,
            r.offset(layout.flags.0),
            format!("unknown flag bits {flags:#06x}"),
        ));
    }
    let sequence = r.u64(layout.sequence.0, layout.sequence.1)?;
    let epoch = r.u64(layout.epoch.0, layout.epoch.1)?;
    let link_sequence = r.u64(layout.link_sequence.0, layout.link_sequence.1)?;
    let link_epoch = r.u64(layout.link_epoch.0, layout.link_epoch.1)?;
    let reclaim_boundary = r.u64(layout.reclaim_boundary.0, layout.reclaim_boundary.1)?;
    let link = if flags & FLAG_HAS_LINK != 0 {
        Some(Link {
            sequence: link_sequence,
            epoch: link_epoch,
        })
    } else {
        if link_sequence != 0 || link_epoch != 0 {
            return Err(FormatError::invalid(
                layout.link_sequence.1,
                r.offset(layout.link_sequence.0),
                "link fields must be 0 when the has-link flag is clear",
            ));
        }
        None
    };
    let header = Header {
        sequence,
        epoch,
        link,
        reclaim_boundary,
    };
    check_header(&header, layout, r.offset(0))?;
    Ok(header)
}

/// The semantic rules every header obeys; `base` is the object offset of the
/// structure laid out as `layout`.
pub(crate) fn check_header(
    header: &Header,
    layout: &FieldLayout,
    base: u64,
) -> Result<(), FormatError> {
    let at = |(off, _): (usize, &'static str)| base.saturating_add(off as u64);
    if header.sequence > MAX_SEQUENCE {
        return Err(FormatError::invalid(
            layout.sequence.1,
            at(layout.sequence),
            format!(
                "sequence {} exceeds the maximum {MAX_SEQUENCE}",
                header.sequence
            ),
        ));
    }
    if let Some(link) = header.link {
        if link.sequence >= header.sequence {
            return Err(FormatError::invalid(
                layout.link_sequence.1,
                at(layout.link_sequence),
                format!(
                    "link sequence {} is not below the object's sequence {}",
                    link.sequence, header.sequence
                ),
            ));
        }
    }
    if header.reclaim_boundary > header.sequence {
        return Err(FormatError::invalid(
            layout.reclaim_boundary.1,
            at(layout.reclaim_boundary),
            format!(
                "reclaim boundary {} is above the object's sequence {}",
                header.reclaim_boundary, header.sequence
            ),
        ));
    }
    Ok(())
}

/// Appends the 64 header bytes of `header` (already checked) to `out`.
pub(crate) fn encode_header(header: &Header, out: &mut Vec<u8>) {
    let start = out.len();
    let link = header.link.unwrap_or(Link {
        sequence: 0,
        epoch: 0,
    });
    out.extend_from_slice(&HEADER_MAGIC);
    put_u16(out, VERSION);
    put_u16(out, header.flags());
    put_u32(out, 0);
    put_u64(out, header.sequence);
    put_u64(out, header.epoch);
    put_u64(out, link.sequence);
    put_u64(out, link.epoch);
    put_u64(out, header.reclaim_boundary);
    put_u32(out, 0);
    let crc = crc32(out.get(start..).unwrap_or_default());
    put_u32(out, crc);
    debug_assert_eq!(out.len() - start, HEADER_LEN);
}

/// Decodes the header from the first [`HEADER_LEN`] bytes of `bytes` (more
/// may follow and are ignored). Checks magic, CRC, version, flags, reserved
/// fields and the header rules. Offsets in errors are object offsets.
pub fn decode_header(bytes: &[u8]) -> Result<Header, FormatError> {
    let r = Reader::new(bytes, 0);
    let _ = r.bytes(0, HEADER_LEN, "header")?;
    if r.array::<8>(0, "header.magic")? != HEADER_MAGIC {
        return Err(FormatError::new(
            FormatErrorKind::BadMagic,
            "header.magic",
            0,
        ));
    }
    r.check_crc(0..60, 60, "header.crc")?;
    for (at, field) in [(12, "header.reserved"), (56, "header.reserved2")] {
        let v = r.u32(at, field)?;
        if v != 0 {
            return Err(FormatError::invalid(
                field,
                at as u64,
                format!("reserved field holds {v:#x}, not 0"),
            ));
        }
    }
    read_fields(&r, &HEADER_FIELDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            sequence: 7,
            epoch: 3,
            link: Some(Link {
                sequence: 5,
                epoch: 2,
            }),
            reclaim_boundary: 4,
        }
    }

    fn encoded(h: &Header) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(h, &mut out);
        out
    }

    /// Rewrites the CRC so a test reaches the check after it.
    fn reseal(bytes: &mut [u8]) {
        let crc = crc32(&bytes[..60]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trips_with_and_without_link() {
        for h in [
            sample(),
            Header {
                link: None,
                ..sample()
            },
        ] {
            let bytes = encoded(&h);
            assert_eq!(bytes.len(), HEADER_LEN);
            assert_eq!(&bytes[..8], b"OBJWALHD");
            assert_eq!(decode_header(&bytes).unwrap(), h);
        }
    }

    #[test]
    fn byte_layout_matches_the_table() {
        let bytes = encoded(&sample());
        assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
        assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), 1);
        assert_eq!(bytes[16], 7);
        assert_eq!(bytes[24], 3);
        assert_eq!(bytes[32], 5);
        assert_eq!(bytes[40], 2);
        assert_eq!(bytes[48], 4);
    }

    #[test]
    fn rejects_bad_magic_crc_version_and_short_input() {
        let good = encoded(&sample());
        assert!(matches!(
            decode_header(&good[..63]).unwrap_err().kind,
            FormatErrorKind::Truncated { .. }
        ));
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(
            decode_header(&b).unwrap_err().kind,
            FormatErrorKind::BadMagic
        );
        let mut b = good.clone();
        b[20] ^= 1;
        assert!(decode_header(&b).unwrap_err().is_crc_mismatch());
        let mut b = good.clone();
        b[8] = 2;
        reseal(&mut b);
        assert_eq!(
            decode_header(&b).unwrap_err().kind,
            FormatErrorKind::UnsupportedVersion(2)
        );
    }

    #[test]
    fn rejects_reserved_bits_and_stray_link_fields() {
        let good = encoded(&sample());
        for (at, field) in [
            (10, "header.flags"),
            (12, "header.reserved"),
            (56, "header.reserved2"),
        ] {
            let mut b = good.clone();
            b[at] |= 2;
            reseal(&mut b);
            assert_eq!(decode_header(&b).unwrap_err().field, field);
        }
        let mut b = encoded(&Header {
            link: None,
            ..sample()
        });
        b[40] = 1;
        reseal(&mut b);
        assert_eq!(decode_header(&b).unwrap_err().field, "header.link_sequence");
    }

    #[test]
    fn enforces_sequence_link_and_boundary_rules() {
        let base = sample();
        let cases = [
            (
                Header {
                    sequence: MAX_SEQUENCE + 1,
                    ..base
                },
                "header.sequence",
            ),
            (
                Header {
                    link: Some(Link {
                        sequence: 7,
                        epoch: 0,
                    }),
                    ..base
                },
                "header.link_sequence",
            ),
            (
                Header {
                    reclaim_boundary: 8,
                    ..base
                },
                "header.reclaim_boundary",
            ),
        ];
        for (h, field) in cases {
            assert_eq!(
                check_header(&h, &HEADER_FIELDS, 0).unwrap_err().field,
                field
            );
            let err = decode_header(&encoded(&h)).unwrap_err();
            assert_eq!(err.field, field);
        }
        let max = Header {
            sequence: MAX_SEQUENCE,
            link: None,
            reclaim_boundary: MAX_SEQUENCE,
            epoch: u64::MAX,
        };
        assert_eq!(decode_header(&encoded(&max)).unwrap(), max);
    }
}
