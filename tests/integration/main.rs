//! Integration tests: one binary, one module per behaviour.
//! Run with `--all-features` (the fault wrapper is behind `testing`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[cfg(feature = "cli")]
mod cli;
mod common;
#[cfg(feature = "testing")]
mod storage_conformance;
mod wal_basic;
