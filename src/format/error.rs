//! The one error type of the format decoders: what is wrong and where.

use std::fmt;

/// What a decoder found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// The input ends before the structure does.
    Truncated {
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// A magic number does not match.
    BadMagic,
    /// The format version is not one this decoder reads.
    UnsupportedVersion(u16),
    /// A stored CRC does not match the bytes it covers.
    CrcMismatch {
        /// The CRC stored in the object.
        stored: u32,
        /// The CRC of the bytes as read.
        computed: u32,
    },
    /// A field holds a value that is out of range or inconsistent.
    Invalid(String),
}

/// A decoding failure: the kind, the byte offset in the object (or in the
/// buffer handed to the decoder, as the decoder documents) and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// What is wrong.
    pub kind: FormatErrorKind,
    /// Where: the byte offset of the field.
    pub offset: u64,
    /// Which field (for example `"trailer.footer_offset"`).
    pub field: &'static str,
}

impl FormatError {
    /// An error of `kind` in `field` at `offset`.
    pub fn new(kind: FormatErrorKind, field: &'static str, offset: u64) -> Self {
        FormatError {
            kind,
            offset,
            field,
        }
    }

    /// An invalid value in `field` at `offset`, explained by `message`.
    pub fn invalid(field: &'static str, offset: u64, message: impl Into<String>) -> Self {
        Self::new(FormatErrorKind::Invalid(message.into()), field, offset)
    }

    /// Whether this error is a CRC mismatch (damaged bytes, as opposed to a
    /// structure that can never have been written by an encoder).
    pub fn is_crc_mismatch(&self) -> bool {
        matches!(self.kind, FormatErrorKind::CrcMismatch { .. })
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FormatErrorKind::Truncated { needed, available } => write!(
                f,
                "{} at offset {}: truncated, needs {needed} bytes but {available} are available",
                self.field, self.offset
            ),
            FormatErrorKind::BadMagic => {
                write!(f, "{} at offset {}: bad magic", self.field, self.offset)
            }
            FormatErrorKind::UnsupportedVersion(v) => write!(
                f,
                "{} at offset {}: unsupported format version {v}",
                self.field, self.offset
            ),
            FormatErrorKind::CrcMismatch { stored, computed } => write!(
                f,
                "{} at offset {}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})",
                self.field, self.offset
            ),
            FormatErrorKind::Invalid(message) => {
                write!(f, "{} at offset {}: {message}", self.field, self.offset)
            }
        }
    }
}

impl std::error::Error for FormatError {}
