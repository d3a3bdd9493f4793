//! The command line run as a process: every command (`commands/`), the
//! crash gate, the soak, and a demo child fenced by a writer in this
//! process. The helpers are the library suite's (`tests/integration/common.rs`),
//! so both suites start the same S3-protocol test server.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod commands;
// Only some of the library suite's helpers serve here.
#[allow(dead_code)]
#[path = "../../../tests/integration/common.rs"]
mod common;
mod crash_gate;
mod soak;
mod two_processes;
