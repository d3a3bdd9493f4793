//! Integration tests: one binary, one module per behaviour.
//! Run with `--all-features` (the fault wrapper is behind `testing`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod attack30;
mod attack32;
mod attack33;
mod attack34;
mod attack35;
mod attack36;
mod attack37;
mod blocking;
mod common;
mod compatibility_logs;
mod embedding;
mod engine_scenario;
mod examples;
mod fencing;
mod follow;
mod format_fixtures;
mod format_robustness;
mod format_roundtrip;
mod handoff;
mod hanging_store;
mod holds;
mod holds_attack;
mod hostile_input;
mod ignored_creates;
mod model;
mod open_modes;
mod open_reads;
mod pinning;
mod prefetch;
mod quarantine;
mod release_forever;
mod replay;
mod runtime;
mod spans;
mod standby;
mod storage_conformance;
mod storage_crash;
mod storage_errors;
mod wal_basic;
mod wal_concurrency;
