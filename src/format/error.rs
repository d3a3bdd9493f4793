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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field_the_offset_and_what_is_wrong() {
        let cases = [
            (
                FormatErrorKind::Truncated {
                    needed: 80,
                    available: 12,
                },
                "trailer at offset 7: truncated, needs 80 bytes but 12 are available",
            ),
            (FormatErrorKind::BadMagic, "trailer at offset 7: bad magic"),
            (
                FormatErrorKind::UnsupportedVersion(9),
                "trailer at offset 7: unsupported format version 9",
            ),
            (
                FormatErrorKind::CrcMismatch {
                    stored: 0xdead_beef,
                    computed: 1,
                },
                "trailer at offset 7: CRC mismatch (stored 0xdeadbeef, computed 0x00000001)",
            ),
            (
                FormatErrorKind::Invalid("no good".into()),
                "trailer at offset 7: no good",
            ),
        ];
        for (kind, message) in cases {
            let err = FormatError::new(kind, "trailer", 7);
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn only_a_crc_mismatch_is_a_crc_mismatch() {
        let crc = FormatError::new(
            FormatErrorKind::CrcMismatch {
                stored: 1,
                computed: 2,
            },
            "f",
            0,
        );
        assert!(crc.is_crc_mismatch());
        for kind in [
            FormatErrorKind::BadMagic,
            FormatErrorKind::Truncated {
                needed: 1,
                available: 0,
            },
            FormatErrorKind::Invalid("x".into()),
        ] {
            assert!(!FormatError::new(kind, "f", 0).is_crc_mismatch());
        }
        let invalid = FormatError::invalid("f", 3, "why");
        assert_eq!(invalid.kind, FormatErrorKind::Invalid("why".into()));
        assert_eq!((invalid.field, invalid.offset), ("f", 3));
    }
}
