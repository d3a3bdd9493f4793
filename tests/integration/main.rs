//! Integration tests: one binary, one module per behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod format_fixtures;
mod format_robustness;
mod format_roundtrip;
