//! Little-endian reading and writing helpers shared by every structure.
//!
//! Readers never panic: every read goes through `slice::get` and returns a
//! [`FormatError`] of kind `Truncated` naming the field and its object offset
//! when the bytes end early. Writers append to a `Vec<u8>` whose capacity the
//! encoder reserved up front, so they never reallocate.

use super::error::{FormatError, FormatErrorKind};

/// A read-only view of `bytes`, whose first byte sits at object offset `base`.
///
/// Every accessor takes an offset relative to `bytes` and reports errors at
/// `base + offset`, so callers that hold only a window of an object still
/// produce errors with object offsets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    base: u64,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, which start at object offset `base`.
    pub(crate) fn new(bytes: &'a [u8], base: u64) -> Self {
        Reader { bytes, base }
    }

    /// The object offset of `at`, a position inside `bytes`.
    pub(crate) fn offset(&self, at: usize) -> u64 {
        self.base.saturating_add(at as u64)
    }

    /// The number of bytes in view.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// `len` bytes at `at`, or `Truncated` naming `field`.
    pub(crate) fn bytes(
        &self,
        at: usize,
        len: usize,
        field: &'static str,
    ) -> Result<&'a [u8], FormatError> {
        at.checked_add(len)
            .and_then(|end| self.bytes.get(at..end))
            .ok_or_else(|| {
                FormatError::new(
                    FormatErrorKind::Truncated {
                        needed: (at as u64).saturating_add(len as u64),
                        available: self.bytes.len() as u64,
                    },
                    field,
                    self.offset(at),
                )
            })
    }

    /// `N` bytes at `at` as an array.
    pub(crate) fn array<const N: usize>(
        &self,
        at: usize,
        field: &'static str,
    ) -> Result<[u8; N], FormatError> {
        let slice = self.bytes(at, N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    /// A little-endian `u16` at `at`.
    pub(crate) fn u16(&self, at: usize, field: &'static str) -> Result<u16, FormatError> {
        self.array(at, field).map(u16::from_le_bytes)
    }

    /// A little-endian `u32` at `at`.
    pub(crate) fn u32(&self, at: usize, field: &'static str) -> Result<u32, FormatError> {
        self.array(at, field).map(u32::from_le_bytes)
    }

    /// A little-endian `u64` at `at`.
    pub(crate) fn u64(&self, at: usize, field: &'static str) -> Result<u64, FormatError> {
        self.array(at, field).map(u64::from_le_bytes)
    }

    /// Checks that the CRC32 of `covered` (a range inside `bytes`) equals
    /// the `u32` stored at `crc_at`.
    pub(crate) fn check_crc(
        &self,
        covered: std::ops::Range<usize>,
        crc_at: usize,
        field: &'static str,
    ) -> Result<(), FormatError> {
        let stored = self.u32(crc_at, field)?;
        let data = self.bytes(
            covered.start,
            covered.end.saturating_sub(covered.start),
            field,
        )?;
        check_crc(stored, crc32(data), field, self.offset(crc_at))
    }
}

/// The CRC32 (IEEE) of `bytes`.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// `Ok` when `stored == computed`, else a `CrcMismatch` in `field` at `offset`.
pub(crate) fn check_crc(
    stored: u32,
    computed: u32,
    field: &'static str,
    offset: u64,
) -> Result<(), FormatError> {
    if stored == computed {
        Ok(())
    } else {
        Err(FormatError::new(
            FormatErrorKind::CrcMismatch { stored, computed },
            field,
            offset,
        ))
    }
}

/// Appends `v` little-endian.
pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A `usize` from a `u64` that was already checked against a buffer length,
/// or an `Invalid` error when it cannot be (only on 32-bit targets).
pub(crate) fn to_usize(v: u64, field: &'static str, offset: u64) -> Result<usize, FormatError> {
    usize::try_from(v)
        .map_err(|_| FormatError::invalid(field, offset, format!("{v} does not fit in memory")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_object_offsets() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        let r = Reader::new(&bytes, 100);
        assert_eq!(r.u16(0, "f").unwrap(), 0x0201);
        assert_eq!(r.u32(1, "f").unwrap(), 0x0504_0302);
        assert_eq!(r.u64(1, "f").unwrap(), 0x0908_0706_0504_0302);
        let err = r.u64(2, "some.field").unwrap_err();
        assert_eq!(err.offset, 102);
        assert_eq!(err.field, "some.field");
        assert_eq!(
            err.kind,
            FormatErrorKind::Truncated {
                needed: 10,
                available: 9
            }
        );
    }

    #[test]
    fn reads_past_usize_max_are_truncated_not_panics() {
        let r = Reader::new(&[0u8; 4], u64::MAX - 1);
        assert!(r.bytes(usize::MAX, 2, "f").is_err());
        assert!(r.u32(usize::MAX - 1, "f").is_err());
        assert_eq!(r.offset(10), u64::MAX);
    }

    #[test]
    fn writers_append_little_endian() {
        let mut out = Vec::new();
        put_u16(&mut out, 0x0102);
        put_u32(&mut out, 0x0304_0506);
        put_u64(&mut out, 0x0708_090a_0b0c_0d0e);
        assert_eq!(
            out,
            [2, 1, 6, 5, 4, 3, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 9, 8, 7]
        );
    }

    #[test]
    fn crc_check_reports_stored_and_computed() {
        let mut bytes = b"hello".to_vec();
        put_u32(&mut bytes, crc32(b"hello"));
        let r = Reader::new(&bytes, 0);
        assert!(r.check_crc(0..5, 5, "crc").is_ok());
        bytes[0] ^= 1;
        let r = Reader::new(&bytes, 0);
        let err = r.check_crc(0..5, 5, "crc").unwrap_err();
        assert!(err.is_crc_mismatch());
        assert_eq!(err.offset, 5);
    }
}
