//! Integration tests: one binary, one module per behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "testing")]
mod storage_conformance;
mod storage_crash;
