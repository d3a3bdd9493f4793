//! Integration tests: one binary, one module per behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod storage_conformance;
mod storage_crash;
