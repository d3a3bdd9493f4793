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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::{AckMode, Config, Entry, EntryId, Error, ObjectStorage, RegionId, Storage, Wal};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

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

/// The engine's own metadata: it survives restarts.
#[derive(Debug, Default)]
struct Manifest {
    /// Live regions and the id each is flushed through (0: never flushed).
    flushed: BTreeMap<RegionId, EntryId>,
    /// Dropped regions, and whether their release returned `Ok`.
    dropped: BTreeMap<RegionId, bool>,
    next_region: RegionId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Promise {
    /// Must replay until flushed.
    Promised,
    /// May replay (once), need not.
    Maybe,
}

/// An entry the engine wrote and has not flushed; keyed by its payload,
/// which is unique.
#[derive(Debug, Clone)]
struct Written {
    region: RegionId,
    /// Unknown when the append failed.
    id: Option<EntryId>,
    promise: Promise,
}

struct Engine {
    seed: u64,
    mode: AckMode,
    step: usize,
    rng: StdRng,
    faulty: FaultyStorage,
    config: Config,
    wal: Option<Wal>,
    /// The store must be reopened (it is poisoned).
    needs_restart: bool,
    manifest: Manifest,
    memtables: BTreeMap<RegionId, BTreeMap<EntryId, Bytes>>,
    written: HashMap<Bytes, Written>,
    payloads: u64,
    stats: Stats,
}

impl Engine {
    fn new(seed: u64, mode: AckMode) -> Engine {
        let mut manifest = Manifest {
            next_region: FIRST_REGIONS + 1,
            ..Manifest::default()
        };
        for region in 1..=FIRST_REGIONS {
            manifest.flushed.insert(region, 0);
        }
        let mut rng = StdRng::seed_from_u64(seed);
        // Small batches put several objects in flight at once, and bound
        // the enqueued backlog so appends stall.
        let max_batch_bytes = *[1024, 4096, 8 << 20].choose(&mut rng).expect("sizes");
        let config = Config {
            flush_interval: FLUSH_INTERVAL,
            ack_mode: mode,
            max_batch_bytes,
            max_unpersisted_bytes: max_batch_bytes * rng.random_range(2..=64),
            max_inflight_creates: rng.random_range(1..=4),
            ..Config::default()
        };
        // Create latency leaves creates in flight when the engine crashes.
        let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
        // Not in enqueued mode yet: a failing store whose pipeline is full
        // spins its actor (see `a_failing_store_with_a_full_pipeline_waits`).
        let latency = match mode {
            AckMode::Durable => rng.random_range(0..=FLUSH_INTERVAL.as_millis() as u64 / 2),
            _ => 0,
        };
        faulty.set_latency(Op::Create, Duration::from_millis(latency));
        Engine {
            seed,
            mode,
            step: 0,
            rng,
            faulty,
            config,
            wal: None,
            needs_restart: false,
            manifest,
            memtables: BTreeMap::new(),
            written: HashMap::new(),
            payloads: 0,
            stats: Stats::default(),
        }
    }

    /// Where a failure happened.
    fn at(&self) -> String {
        format!("seed {} {:?} step {}", self.seed, self.mode, self.step)
    }

    fn wal(&self) -> Wal {
        self.wal.clone().expect("the store is open")
    }

    fn live(&self) -> Vec<RegionId> {
        self.manifest.flushed.keys().copied().collect()
    }

    async fn run(mut self) -> Stats {
        self.open_and_replay().await;
        for step in 0..STEPS {
            self.step = step;
            if self.needs_restart {
                self.restart(false).await;
            }
            match self.rng.random_range(0..100) {
                0..40 => self.append(1).await,
                40..48 => self.burst().await,
                48..60 => self.flush_some().await,
                60..64 => self.drop_region().await,
                64..67 => self.create_region(),
                67..76 => self.inject_fault(),
                76..84 => self.tick().await,
                84..91 => self.scan().await,
                91..93 => self.restart(true).await,
                93..95 => self.crash_mid_append().await,
                _ => self.restart(false).await,
            }
        }
        self.step = STEPS;
        self.final_phase().await;
        self.stats
    }

    fn payload(&mut self, region: RegionId) -> Bytes {
        self.payloads += 1;
        let max = if self.rng.random_bool(0.1) { 700 } else { 64 };
        let pad = "x".repeat(self.rng.random_range(0..max));
        Bytes::from(format!("s{}-r{region}-n{}-{pad}", self.seed, self.payloads))
    }

    /// One append of 1..=`max` entries to random live regions.
    async fn append(&mut self, max: usize) {
        let batch = self.make_batch(max);
        let result = self.wal().append(batch.clone()).await;
        self.appended(batch, result);
    }

    /// Several appends at once, so batches hold many appends.
    async fn burst(&mut self) {
        let n = self.rng.random_range(2..=6);
        let batches: Vec<_> = (0..n).map(|_| self.make_batch(3)).collect();
        let wal = self.wal();
        let results = join_all(batches.iter().map(|b| wal.append(b.clone()))).await;
        for (batch, result) in batches.into_iter().zip(results) {
            self.appended(batch, result);
        }
    }

    /// Appends in flight when the process dies: their tasks are cut off
    /// after a random time and every handle is dropped.
    async fn crash_mid_append(&mut self) {
        let n = self.rng.random_range(1..=6);
        let batches: Vec<_> = (0..n).map(|_| self.make_batch(3)).collect();
        let tasks: Vec<_> = batches
            .iter()
            .map(|batch| {
                let (wal, batch) = (self.wal(), batch.clone());
                tokio::spawn(async move { wal.append(batch).await })
            })
            .collect();
        let ms = self.rng.random_range(0..=FLUSH_INTERVAL.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        for task in &tasks {
            task.abort();
        }
        for (batch, task) in batches.into_iter().zip(tasks) {
            match task.await {
                Ok(result) => self.appended(batch, result),
                // Cut off: admitted or not, durable or not.
                Err(e) => {
                    assert!(
                        e.is_cancelled(),
                        "{}: an append task failed: {e}",
                        self.at()
                    );
                    for (region, data) in batch {
                        let promise = Promise::Maybe;
                        let entry = Written {
                            region,
                            id: None,
                            promise,
                        };
                        self.written.insert(data, entry);
                    }
                }
            }
        }
        self.restart(true).await;
    }

    fn make_batch(&mut self, max: usize) -> Vec<(RegionId, Bytes)> {
        let live = self.live();
        let n = self.rng.random_range(1..=max);
        (0..n)
            .map(|_| {
                let region = *live.choose(&mut self.rng).expect("a live region");
                (region, self.payload(region))
            })
            .collect()
    }

    fn appended(&mut self, batch: Vec<(RegionId, Bytes)>, result: Result<Vec<EntryId>, Error>) {
        match result {
            Ok(ids) => {
                self.stats.appends_ok += 1;
                let promise = match self.mode {
                    AckMode::Durable => Promise::Promised,
                    _ => Promise::Maybe,
                };
                for ((region, data), id) in batch.into_iter().zip(ids) {
                    let entry = Written {
                        region,
                        id: Some(id),
                        promise,
                    };
                    self.written.insert(data.clone(), entry);
                    self.memtables.entry(region).or_default().insert(id, data);
                }
            }
            Err(e) => {
                self.stats.appends_failed += 1;
                self.note_error(&e);
                match self.mode {
                    // A failed create may have landed: the entries may replay.
                    AckMode::Durable => {
                        assert!(
                            matches!(e, Error::Storage { .. } | Error::NotDurable { .. })
                                || e.is_poisoned(),
                            "{}: an append to a live region failed with {e}",
                            self.at()
                        );
                        for (region, data) in batch {
                            let promise = Promise::Maybe;
                            let entry = Written {
                                region,
                                id: None,
                                promise,
                            };
                            self.written.insert(data, entry);
                        }
                    }
                    // Refused, never admitted: must never replay.
                    _ => assert!(
                        matches!(e, Error::Failing { .. }) || e.is_poisoned(),
                        "{}: an enqueued append failed with {e}",
                        self.at()
                    ),
                }
            }
        }
    }

    fn note_error(&mut self, e: &Error) {
        if e.is_poisoned() {
            self.needs_restart = true;
        }
    }

    /// Flushes one random region with a non-empty memtable.
    async fn flush_some(&mut self) {
        let candidates: Vec<RegionId> = self
            .memtables
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(r, _)| *r)
            .collect();
        if let Some(region) = candidates.choose(&mut self.rng).copied() {
            self.flush(region).await;
        }
    }

    /// Flushes `region`'s memtable: true when it did.
    async fn flush(&mut self, region: RegionId) -> bool {
        let Some(last) = self
            .memtables
            .get(&region)
            .and_then(|m| m.keys().next_back().copied())
        else {
            return true;
        };
        let wal = self.wal();
        if self.mode == AckMode::Enqueued {
            if let Err(e) = wal.wait_durable(region, last).await {
                tracing::warn!(region, last, error = %e, "flush: the memtable is not durable");
                self.note_error(&e);
                return false;
            }
            self.promise_memtable(region);
        }
        self.manifest.flushed.insert(region, last);
        for data in self.memtables.remove(&region).unwrap_or_default().values() {
            self.written.remove(data);
        }
        self.stats.flushes += 1;
        if let Err(e) = wal.obsolete(region, last).await {
            tracing::warn!(region, last, error = %e, "flush: obsolete failed");
            self.note_error(&e);
        }
        true
    }

    fn promise_memtable(&mut self, region: RegionId) {
        for data in self
            .memtables
            .get(&region)
            .into_iter()
            .flat_map(|m| m.values())
        {
            if let Some(w) = self.written.get_mut(data) {
                w.promise = Promise::Promised;
            }
        }
    }

    async fn drop_region(&mut self) {
        let live = self.live();
        if live.len() <= 1 {
            return;
        }
        let region = *live.choose(&mut self.rng).expect("a live region");
        self.manifest.flushed.remove(&region);
        self.manifest.dropped.insert(region, false);
        self.memtables.remove(&region);
        self.written.retain(|_, w| w.region != region);
        self.stats.drops += 1;
        self.release(region).await;
    }

    /// Releases a dropped region; a failure is logged and ignored (the
    /// next open repeats it).
    async fn release(&mut self, region: RegionId) {
        match self.wal().release_region(region).await {
            Ok(()) => {
                self.manifest.dropped.insert(region, true);
            }
            Err(e) => {
                tracing::warn!(region, error = %e, "release failed; repeated on the next open");
                self.stats.failed_releases += 1;
                self.note_error(&e);
            }
        }
    }

    fn create_region(&mut self) {
        if self.manifest.flushed.len() < MAX_LIVE {
            let region = self.manifest.next_region;
            self.manifest.next_region += 1;
            self.manifest.flushed.insert(region, 0);
        }
    }

    fn inject_fault(&mut self) {
        self.stats.faults += 1;
        let f = &self.faulty;
        match self.rng.random_range(0..10) {
            0..=2 => {
                let n = self.rng.random_range(1..=3);
                f.fail_next(Op::Create, "objects/", n, StorageErrorKind::Transient);
            }
            3 => f.fail_next(Op::Create, "objects/", 6, StorageErrorKind::Transient),
            4 | 5 => f.lose_next_create_responses("objects/", self.rng.random_range(1..=2)),
            6 => {
                // Landed, and the read-back fails too: declared failed.
                f.lose_next_create_responses("objects/", 1);
                f.fail_next(Op::Read, "objects/", 1, StorageErrorKind::Transient);
            }
            7 | 8 => {
                let n = self.rng.random_range(1..=4);
                f.fail_next(Op::Delete, "objects/", n, StorageErrorKind::Transient);
            }
            _ => f.fail_next(Op::List, "objects/", 1, StorageErrorKind::Transient),
        }
    }

    /// Lets time pass (paused time: timers fire deterministically).
    async fn tick(&mut self) {
        let ms = self
            .rng
            .random_range(1..=3 * FLUSH_INTERVAL.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// A read of a live region while running: what is read is in its
    /// memtable, and every promised memtable entry is read.
    async fn scan(&mut self) {
        let dropped: Vec<RegionId> = self.manifest.dropped.keys().copied().collect();
        if let Some(region) = dropped.choose(&mut self.rng).copied() {
            self.check_dropped(region, "while running").await;
        }
        let live = self.live();
        let region = *live.choose(&mut self.rng).expect("a live region");
        let from = self.manifest.flushed[&region] + 1;
        let Some(read) = self.read(region, from).await else {
            return;
        };
        let empty = BTreeMap::new();
        let memtable = self.memtables.get(&region).unwrap_or(&empty);
        let at = self.at();
        check_increasing(&read, from, &at);
        for e in &read {
            assert_eq!(
                memtable.get(&e.id),
                Some(&e.data),
                "{at}: region {region} read {} that is not in its memtable",
                e.id
            );
        }
        let ids: HashSet<EntryId> = read.iter().map(|e| e.id).collect();
        for (id, data) in memtable {
            let promised = self.written.get(data).map(|w| w.promise) == Some(Promise::Promised);
            assert!(
                !promised || ids.contains(id),
                "{at}: region {region}: the promised entry {id} is not read"
            );
        }
    }

    /// Every entry a read yields, repeating the read on a retryable error
    /// (an injected read fault). `None` when the store must be reopened.
    async fn read(&mut self, region: RegionId, from: EntryId) -> Option<Vec<Entry>> {
        let wal = self.wal();
        for _ in 0..10 {
            match read_all(&wal, region, from).await {
                Ok(entries) => return Some(entries),
                Err(e) if e.is_retryable() => continue,
                Err(e) if e.is_poisoned() => {
                    self.needs_restart = true;
                    return None;
                }
                Err(e) => panic!("{}: reading region {region} failed: {e}", self.at()),
            }
        }
        panic!("{}: reading region {region} kept failing", self.at());
    }

    async fn restart(&mut self, crash: bool) {
        self.stats.restarts += 1;
        let wal = self.wal.take().expect("the store is open");
        if crash {
            self.stats.crashes += 1;
            drop(wal);
            // Let the actor see every handle gone before the next open.
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        } else {
            match wal.stop().await {
                Ok(()) if self.mode == AckMode::Enqueued => {
                    // The whole backlog was uploaded.
                    for w in self.written.values_mut().filter(|w| w.id.is_some()) {
                        w.promise = Promise::Promised;
                    }
                }
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "stop reported a loss");
                    self.stats.lossy_stops += 1;
                }
            }
        }
        self.needs_restart = false;
        self.open_and_replay().await;
    }

    /// Opens the store (repeating a failed open), re-establishes the
    /// engine's flushed ids, repeats unconfirmed releases and replays.
    async fn open_and_replay(&mut self) {
        let storage = self.faulty.storage();
        let mut attempts = 0;
        let wal = loop {
            match Wal::open(storage.clone(), PREFIX, self.config.clone()).await {
                Ok(wal) => break wal,
                Err(e) => {
                    attempts += 1;
                    self.stats.failed_opens += 1;
                    assert!(
                        attempts < 100 && e.is_retryable(),
                        "{}: open failed ({attempts} attempts, {:?}): {e}",
                        self.at(),
                        self.faulty.counts()
                    );
                }
            }
        };
        self.wal = Some(wal.clone());
        // A release that returned Ok holds across restarts.
        let confirmed: Vec<RegionId> = self.dropped(true);
        for region in confirmed {
            self.check_dropped(region, "a confirmed release").await;
        }
        for region in self.dropped(false) {
            self.release(region).await;
        }
        for (region, flushed) in self.manifest.flushed.clone() {
            if flushed > 0 {
                if let Err(e) = wal.obsolete(region, flushed).await {
                    self.note_error(&e);
                }
            }
        }
        // Every dropped region is released now, in this life or before
        // (a release reads as empty at once, even when its object failed).
        let dropped: Vec<RegionId> = self.manifest.dropped.keys().copied().collect();
        for region in dropped {
            self.check_dropped(region, "released again after open")
                .await;
        }
        for region in self.live() {
            self.replay(region).await;
        }
    }

    fn dropped(&self, confirmed: bool) -> Vec<RegionId> {
        let dropped = self.manifest.dropped.iter();
        dropped
            .filter(|(_, c)| **c == confirmed)
            .map(|(r, _)| *r)
            .collect()
    }

    async fn check_dropped(&mut self, region: RegionId, why: &str) {
        if let Some(read) = self.read(region, 0).await {
            assert!(
                read.is_empty(),
                "{}: the dropped region {region} ({why}) replays {} entries, the first {}",
                self.at(),
                read.len(),
                read[0].id
            );
        }
    }

    /// Replays `region` from its flushed id + 1 and checks it against what
    /// was written; the replay becomes the memtable.
    async fn replay(&mut self, region: RegionId) {
        let flushed = self.manifest.flushed[&region];
        let Some(read) = self.read(region, flushed + 1).await else {
            return;
        };
        let at = self.at();
        check_increasing(&read, flushed + 1, &at);
        let mut seen = HashSet::new();
        for e in &read {
            let w = self.written.get(&e.data).unwrap_or_else(|| {
                panic!(
                    "{at}: region {region} replays entry {} ({:?}), which was never acknowledged",
                    e.id,
                    String::from_utf8_lossy(&e.data)
                )
            });
            assert_eq!(
                w.region, region,
                "{at}: entry {} replays in another region",
                e.id
            );
            assert!(
                w.id.is_none_or(|id| id == e.id),
                "{at}: region {region} replays entry {:?} as {}",
                w.id,
                e.id
            );
            assert!(
                seen.insert(e.data.clone()),
                "{at}: region {region} replays {} twice",
                e.id
            );
            if w.promise == Promise::Maybe {
                self.stats.maybe_replayed += 1;
            }
        }
        for (data, w) in &self.written {
            if w.region == region && w.promise == Promise::Promised {
                assert!(
                    seen.contains(data),
                    "{at}: region {region}: the promised entry {:?} (flushed through {flushed}) is missing from the replay",
                    w.id
                );
            }
        }
        // The watermark hides what was flushed: a read from the start
        // returns the same.
        if let Some(from_start) = self.read(region, 0).await {
            assert_eq!(
                ids(&from_start),
                ids(&read),
                "{at}: region {region}: a read from 0 shows entries at or below the flushed id {flushed}"
            );
        }
        // What did not replay never will; what did is durable.
        self.written
            .retain(|data, w| w.region != region || seen.contains(data));
        for e in &read {
            if let Some(w) = self.written.get_mut(&e.data) {
                w.id = Some(e.id);
                w.promise = Promise::Promised;
            }
        }
        self.stats.replayed += read.len() as u64;
        let memtable = read.into_iter().map(|e| (e.id, e.data)).collect();
        self.memtables.insert(region, memtable);
    }

    /// No faults: flush every region, write one more object (an entry, or
    /// the idle tick's empty object), and check that the store shrank.
    async fn final_phase(&mut self) {
        self.faulty.clear_faults();
        self.restart(false).await;
        for region in self.live() {
            assert!(
                self.flush(region).await,
                "{}: flush without faults",
                self.at()
            );
        }
        if self.rng.random_bool(0.5) {
            let region = *self.live().choose(&mut self.rng).expect("a live region");
            let data = self.payload(region);
            let wal = self.wal();
            let result = wal.append(vec![(region, data.clone())]).await;
            let id = result.as_ref().map(|ids| ids[0]).unwrap_or_default();
            self.appended(vec![(region, data)], result);
            wal.wait_durable(region, id).await.expect("durable");
            self.promise_memtable(region);
        }
        // The idle tick carries the boundary; collection runs behind it.
        tokio::time::sleep(FLUSH_INTERVAL * 10).await;
        let at = self.at();
        let listed = self
            .faulty
            .inner()
            .list(&format!("{PREFIX}/objects/"))
            .await
            .expect("list");
        let sequences: Vec<u64> = listed.iter().map(|m| sequence_of_key(&m.key)).collect();
        let tip = listed.last().expect("a tip");
        let bytes = self
            .faulty
            .inner()
            .read(&tip.key, 0..tip.size)
            .await
            .expect("read the tip");
        let boundary = objwal::format::decode(&bytes)
            .expect("decode the tip")
            .header
            .reclaim_boundary;
        *self.stats.final_objects.entry(listed.len()).or_default() += 1;
        assert!(
            listed.len() <= MAX_FINAL_OBJECTS,
            "{at}: every region is flushed, yet {} objects remain: {sequences:?} (tip boundary {boundary})",
            listed.len()
        );
        assert!(
            sequences.iter().all(|s| *s >= boundary),
            "{at}: objects below the tip's boundary {boundary} remain: {sequences:?}"
        );
        // Recovery after collection: what is left replays.
        self.restart(false).await;
        let stopped = self.wal().stop().await;
        assert!(stopped.is_ok(), "{at}: the last stop: {stopped:?}");
    }
}

fn check_increasing(read: &[Entry], from: EntryId, at: &str) {
    let mut last = from.saturating_sub(1);
    for e in read {
        assert!(
            e.id > last,
            "{at}: region {} replays {} after {last}",
            e.region,
            e.id
        );
        last = e.id;
    }
}

fn ids(entries: &[Entry]) -> Vec<EntryId> {
    entries.iter().map(|e| e.id).collect()
}

fn sequence_of_key(key: &str) -> u64 {
    let name = key.rsplit('/').next().unwrap_or_default();
    name.strip_suffix(".wal")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an object key: {key}"))
}

async fn read_all(wal: &Wal, region: RegionId, from: EntryId) -> Result<Vec<Entry>, Error> {
    let mut stream = Box::pin(wal.read(region, from));
    let mut entries = Vec::new();
    while let Some(entry) = stream.next().await {
        entries.push(entry?);
    }
    Ok(entries)
}

/// Library bug found by the scenario: with create latency in enqueued mode
/// too (`Engine::new` drawing the latency for both modes), the enqueued
/// scenario hangs at `OBJWAL_ENGINE_SEED=2` (step 159) and 5. While the
/// store is failing and a batch waits for a create slot, the actor's retry
/// timer is already due and `start_creates` has no free slot, so the loop
/// wakes again at once: it spins until the running create ends (a busy CPU in
/// real time; under paused time no timer ever fires and the store hangs).
#[test]
#[ignore = "library bug: the actor spins while a failing store's pipeline is full"]
fn a_failing_store_with_a_full_pipeline_waits() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
            faulty.set_latency(Op::Create, Duration::from_millis(5));
            let config = Config {
                flush_interval: FLUSH_INTERVAL,
                ack_mode: AckMode::Enqueued,
                max_batch_bytes: 1024,
                max_inflight_creates: 1,
                ..Config::default()
            };
            let wal = Wal::open(faulty.storage(), PREFIX, config).await.unwrap();
            faulty.fail_next(Op::Create, "objects/", 1, StorageErrorKind::Transient);
            let mut last = 0;
            for n in 0..3 {
                // Each append fills a batch: three batches, one slot.
                let data = Bytes::from(vec![b'x'; 900 + n]);
                last = wal.append(vec![(1, data)]).await.unwrap()[0];
            }
            wal.wait_durable(1, last).await.unwrap();
            wal.stop().await.unwrap();
        });
        let _ = done.send(());
    });
    assert!(
        finished.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the backlog never became durable: the actor spins on its due retry timer"
    );
}

/// Library bug found by the scenario: a collection pass whose deletes fail
/// arms the retry tick, then `on_pass` calls `maybe_collect`, which starts
/// the next pass at once (the collected boundary did not move). Failed
/// deletes (and failed lists) are retried in a tight loop, not "later": a
/// delete that keeps failing (say, a bucket policy that denies deletes)
/// makes the store list the prefix and delete without pause, forever.
#[tokio::test(start_paused = true)]
#[ignore = "library bug: failed deletes are retried at once, in a loop"]
async fn failed_deletes_are_retried_later() {
    let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
    let config = Config {
        flush_interval: FLUSH_INTERVAL,
        ..Config::default()
    };
    let wal = Wal::open(faulty.storage(), PREFIX, config).await.unwrap();
    let ids = wal.append(vec![(1, Bytes::from("a"))]).await.unwrap();
    faulty.fail_next(Op::Delete, "objects/", 5000, StorageErrorKind::Transient);
    faulty.reset_counts();
    wal.obsolete(1, ids[0]).await.unwrap();
    tokio::time::sleep(FLUSH_INTERVAL * 10).await;
    let counts = faulty.counts();
    wal.stop().await.unwrap();
    // One pass per flush interval at most: about ten passes of two deletes.
    assert!(
        counts.delete.requests <= 50 && counts.list.requests <= 25,
        "deletes retried without pause in 100 ms: {counts:?}"
    );
}
