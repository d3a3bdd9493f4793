//! The tiny engine: its manifest, memtables and model of what it wrote,
//! and the steps that drive the log (append, flush, drop, faults, scans).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::{AckMode, Config, Entry, EntryId, Error, RegionId, Storage, Wal};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use super::{Stats, FIRST_REGIONS, FLUSH_INTERVAL, MAX_LIVE, STEPS};

/// The engine's own metadata: it survives restarts.
#[derive(Debug, Default)]
pub(super) struct Manifest {
    /// Live regions and the id each is flushed through (0: never flushed).
    pub(super) flushed: BTreeMap<RegionId, EntryId>,
    /// Dropped regions, and whether their release returned `Ok`.
    pub(super) dropped: BTreeMap<RegionId, bool>,
    pub(super) next_region: RegionId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Promise {
    /// Must replay until flushed.
    Promised,
    /// May replay (once), need not.
    Maybe,
}

/// An entry the engine wrote and has not flushed; keyed by its payload,
/// which is unique.
#[derive(Debug, Clone)]
pub(super) struct Written {
    pub(super) region: RegionId,
    /// Unknown when the append failed.
    pub(super) id: Option<EntryId>,
    pub(super) promise: Promise,
}

pub(super) struct Engine {
    pub(super) seed: u64,
    pub(super) mode: AckMode,
    pub(super) step: usize,
    pub(super) rng: StdRng,
    pub(super) faulty: FaultyStorage,
    pub(super) config: Config,
    pub(super) wal: Option<Wal>,
    /// The store must be reopened (it is poisoned).
    pub(super) needs_restart: bool,
    pub(super) manifest: Manifest,
    pub(super) memtables: BTreeMap<RegionId, BTreeMap<EntryId, Bytes>>,
    pub(super) written: HashMap<Bytes, Written>,
    pub(super) payloads: u64,
    pub(super) stats: Stats,
}

impl Engine {
    pub(super) fn new(seed: u64, mode: AckMode) -> Engine {
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
        let latency = rng.random_range(0..=FLUSH_INTERVAL.as_millis() as u64 / 2);
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
    pub(super) fn at(&self) -> String {
        format!("seed {} {:?} step {}", self.seed, self.mode, self.step)
    }

    pub(super) fn wal(&self) -> Wal {
        self.wal.clone().expect("the store is open")
    }

    pub(super) fn live(&self) -> Vec<RegionId> {
        self.manifest.flushed.keys().copied().collect()
    }

    pub(super) async fn run(mut self) -> Stats {
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

    pub(super) fn payload(&mut self, region: RegionId) -> Bytes {
        self.payloads += 1;
        let max = if self.rng.random_bool(0.1) { 700 } else { 64 };
        let pad = "x".repeat(self.rng.random_range(0..max));
        Bytes::from(format!("s{}-r{region}-n{}-{pad}", self.seed, self.payloads))
    }

    /// One append of 1..=`max` entries to random live regions.
    pub(super) async fn append(&mut self, max: usize) {
        let batch = self.make_batch(max);
        let result = self.wal().append(batch.clone()).await;
        self.appended(batch, result);
    }

    /// Several appends at once, so batches hold many appends.
    pub(super) async fn burst(&mut self) {
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
    pub(super) async fn crash_mid_append(&mut self) {
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

    pub(super) fn make_batch(&mut self, max: usize) -> Vec<(RegionId, Bytes)> {
        let live = self.live();
        let n = self.rng.random_range(1..=max);
        (0..n)
            .map(|_| {
                let region = *live.choose(&mut self.rng).expect("a live region");
                (region, self.payload(region))
            })
            .collect()
    }

    pub(super) fn appended(
        &mut self,
        batch: Vec<(RegionId, Bytes)>,
        result: Result<Vec<EntryId>, Error>,
    ) {
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
                    // Refused while failing (a void did not land yet), in
                    // either mode: never admitted, must never replay.
                    _ if matches!(e, Error::Failing { .. }) => {}
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

    pub(super) fn note_error(&mut self, e: &Error) {
        if e.is_poisoned() {
            self.needs_restart = true;
        }
    }

    /// Flushes one random region with a non-empty memtable.
    pub(super) async fn flush_some(&mut self) {
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
    pub(super) async fn flush(&mut self, region: RegionId) -> bool {
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

    pub(super) fn promise_memtable(&mut self, region: RegionId) {
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

    pub(super) async fn drop_region(&mut self) {
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
    pub(super) async fn release(&mut self, region: RegionId) {
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

    pub(super) fn create_region(&mut self) {
        if self.manifest.flushed.len() < MAX_LIVE {
            let region = self.manifest.next_region;
            self.manifest.next_region += 1;
            self.manifest.flushed.insert(region, 0);
        }
    }

    pub(super) fn inject_fault(&mut self) {
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
    pub(super) async fn tick(&mut self) {
        let ms = self
            .rng
            .random_range(1..=3 * FLUSH_INTERVAL.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// A read of a live region while running: what is read is in its
    /// memtable, and every promised memtable entry is read.
    pub(super) async fn scan(&mut self) {
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
    pub(super) async fn read(&mut self, region: RegionId, from: EntryId) -> Option<Vec<Entry>> {
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
}

pub(super) fn check_increasing(read: &[Entry], from: EntryId, at: &str) {
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

pub(super) fn ids(entries: &[Entry]) -> Vec<EntryId> {
    entries.iter().map(|e| e.id).collect()
}

pub(super) fn sequence_of_key(key: &str) -> u64 {
    let name = key.rsplit('/').next().unwrap_or_default();
    name.strip_suffix(".wal")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an object key: {key}"))
}

pub(super) async fn read_all(
    wal: &Wal,
    region: RegionId,
    from: EntryId,
) -> Result<Vec<Entry>, Error> {
    let mut stream = Box::pin(wal.read(region, from));
    let mut entries = Vec::new();
    while let Some(entry) = stream.next().await {
        entries.push(entry?);
    }
    Ok(entries)
}
