//! A storage-engine scenario over the public API only: a tiny engine with
//! regions and memtables drives the log through appends, flushes, drops and
//! restarts (clean and crash) with injected storage faults, for many seeds
//! and both ack modes.
//!
//! The engine: a memtable per live region holds the entries appended since
//! its last flush; a flush records the region's flushed id in the engine's
//! manifest, then calls `obsolete` (in enqueued mode after `wait_durable`);
//! a drop records the region as dropped and calls `release_region`, logging
//! and ignoring a failure (the table is gone either way; the release is
//! repeated on the next open until it succeeds); a restart stops the store
//! (or drops the handle: a crash), opens it again, re-establishes every
//! flushed id and replays every live region from its flushed id + 1. The
//! manifest survives restarts, as an engine's metadata would.
//!
//! After every restart and at the end:
//! - no dropped region replays anything;
//! - every promised entry of a live region above its flushed id replays
//!   exactly once, in id order, with identical bytes, and nothing else
//!   replays but entries whose append failed (they may be durable, at most
//!   once) or, in enqueued mode, admitted entries not yet promised;
//! - after a last phase without faults where every region is flushed, the
//!   store holds only what live data needs, nothing below the tip's boundary.
//!
//! Promised: in durable mode, an append that returned `Ok`; in enqueued
//! mode, an entry covered by a successful `wait_durable` or by a stop that
//! returned `Ok`, or one that an earlier replay returned.
//!
//! `OBJWAL_ENGINE_SEED=<n>` runs one seed; a failure names its seed.
//! `OBJWAL_ENGINE_SEEDS=<n>` runs seeds 0..n (20 by default).
#![allow(
    clippy::print_stderr,
    reason = "the failing seed and the run's counts, captured by libtest"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use objwal::AckMode;

use engine::Engine;

mod checks;
mod engine;
mod regressions;

const SEEDS: u64 = 20;
const STEPS: usize = 300;
const PREFIX: &str = "engine";
const FLUSH_INTERVAL: Duration = Duration::from_millis(10);
/// Regions the engine starts with, and the most it keeps live at once.
const FIRST_REGIONS: u64 = 4;
const MAX_LIVE: usize = 8;
/// Objects the store may keep once every live region is flushed: the tip,
/// at most one object still holding unflushed data, and the start object.
const MAX_FINAL_OBJECTS: usize = 3;

#[tokio::test(start_paused = true)]
async fn engine_scenario_durable() {
    run_seeds(AckMode::Durable).await;
}

#[tokio::test(start_paused = true)]
async fn engine_scenario_enqueued() {
    run_seeds(AckMode::Enqueued).await;
}

async fn run_seeds(mode: AckMode) {
    let seeds: Vec<u64> = match std::env::var("OBJWAL_ENGINE_SEED") {
        Ok(seed) => vec![seed.parse().expect("OBJWAL_ENGINE_SEED is a number")],
        Err(_) => {
            let n = std::env::var("OBJWAL_ENGINE_SEEDS").map_or(SEEDS, |n| {
                n.parse().expect("OBJWAL_ENGINE_SEEDS is a number")
            });
            (0..n).collect()
        }
    };
    let mut total = Stats::default();
    for seed in seeds {
        let _guard = SeedGuard { seed, mode };
        let stats = Engine::new(seed, mode).run().await;
        total.add(&stats);
    }
    eprintln!("engine scenario, {mode:?}: {total:?}");
    assert!(total.restarts > 0 && total.flushes > 0 && total.drops > 0);
    assert!(total.faults > 0 && total.replayed > 0, "{total:?}");
}

/// Names the failing seed when a seed's run panics.
struct SeedGuard {
    seed: u64,
    mode: AckMode,
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        eprintln!(
            "engine scenario failed: seed {} in {:?} mode; rerun it with OBJWAL_ENGINE_SEED={}",
            self.seed, self.mode, self.seed
        );
    }
}

/// What happened, to show that the run did what it claims.
#[derive(Debug, Default, Clone)]
struct Stats {
    appends_ok: u64,
    appends_failed: u64,
    flushes: u64,
    drops: u64,
    failed_releases: u64,
    restarts: u64,
    crashes: u64,
    failed_opens: u64,
    lossy_stops: u64,
    faults: u64,
    replayed: u64,
    maybe_replayed: u64,
    final_objects: BTreeMap<usize, u64>,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.appends_ok += o.appends_ok;
        self.appends_failed += o.appends_failed;
        self.flushes += o.flushes;
        self.drops += o.drops;
        self.failed_releases += o.failed_releases;
        self.restarts += o.restarts;
        self.crashes += o.crashes;
        self.failed_opens += o.failed_opens;
        self.lossy_stops += o.lossy_stops;
        self.faults += o.faults;
        self.replayed += o.replayed;
        self.maybe_replayed += o.maybe_replayed;
        for (n, count) in &o.final_objects {
            *self.final_objects.entry(*n).or_default() += count;
        }
    }
}
