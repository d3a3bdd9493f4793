//! The object format, version 1: pure code, bytes in and plain values out.

mod error;

pub use error::{FormatError, FormatErrorKind};
