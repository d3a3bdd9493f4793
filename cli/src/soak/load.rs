//! The soak's load for one round: writers, a reader, a flusher, a
//! releaser, `flush` barriers and a fault injector, all on one store,
//! until the round's stop signal.
//!
//! Every call is under [`CALL_DEADLINE`]: a call that hangs ends the soak
//! with an error naming it. A retryable error (the injected faults make
//! them) is counted and the load goes on, as an engine retries; an append
//! refused because its region was just released is counted too. Anything
//! else (poisoned, corrupted, invalid) ends the soak: the faults injected
//! are transient, so nothing else is documented for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::StorageErrorKind;
use objwal::{Error, Wal};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use tokio::sync::watch;

use crate::{CliError, CliResult};

/// The longest any one call may take.
pub const CALL_DEADLINE: Duration = Duration::from_secs(60);
/// The largest entry the writers append.
pub const MAX_ENTRY: usize = 64 * 1024;
/// Entries per append, at most.
pub const MAX_ENTRIES: usize = 4;

/// What a round did.
#[derive(Debug, Default)]
pub struct Counts {
    pub appended: AtomicU64,
    pub bytes: AtomicU64,
    pub read: AtomicU64,
    pub obsoleted: AtomicU64,
    pub released: AtomicU64,
    pub flushes: AtomicU64,
    pub faults: AtomicU64,
    pub retryable: AtomicU64,
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// State the load's tasks share.
struct Load {
    wal: Wal,
    counts: Arc<Counts>,
    enqueued: bool,
    /// The regions appended to (a released one is replaced by a fresh id).
    regions: Mutex<(Vec<u64>, u64)>,
    /// Per region, the largest id known durable.
    durable: Mutex<HashMap<u64, u64>>,
    stop: watch::Receiver<bool>,
}

async fn call<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T, CliError> {
    tokio::time::timeout(CALL_DEADLINE, fut).await.map_err(|_| {
        CliError::Failed(format!(
            "soak: {what} did not answer within {CALL_DEADLINE:?}"
        ))
    })
}

impl Load {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Counts a tolerated error, or ends the soak with an untolerated one.
    fn tolerate(&self, what: &str, e: Error) -> CliResult {
        if e.is_retryable() || matches!(e, Error::RegionReleased { .. }) {
            bump(&self.counts.retryable, 1);
            Ok(())
        } else {
            Err(CliError::Failed(format!("soak: {what}: {e}")))
        }
    }

    fn pick(&self, rng: &mut StdRng) -> u64 {
        let regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        regions.0[rng.random_range(0..regions.0.len())]
    }

    fn durable(&self, region: u64, id: u64) {
        let mut map = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        let slot = map.entry(region).or_insert(0);
        *slot = (*slot).max(id);
    }

    async fn sleep(&self, ms: u64) {
        let mut stop = self.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The shape of a round's load.
pub struct Setup {
    /// Regions appended to at once.
    pub regions: u64,
    /// Writer tasks.
    pub writers: u16,
    /// The seed of every choice.
    pub seed: u64,
    /// Whether the store acknowledges on admission.
    pub enqueued: bool,
}

/// Runs the load on `wal` (over `faulty`) until `stop` turns true; the
/// first untolerated error.
pub async fn run(
    wal: Wal,
    faulty: FaultyStorage,
    setup: Setup,
    counts: Arc<Counts>,
    stop: watch::Receiver<bool>,
) -> CliResult {
    let Setup {
        regions,
        writers,
        seed,
        enqueued,
    } = setup;
    let load = Arc::new(Load {
        wal,
        counts,
        enqueued,
        regions: Mutex::new(((0..regions).collect(), regions)),
        durable: Mutex::default(),
        stop,
    });
    let rng = |salt: u64| StdRng::seed_from_u64(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        tasks.spawn(write(load.clone(), rng(u64::from(w) + 1)));
    }
    tasks.spawn(read(load.clone(), rng(1 << 20)));
    tasks.spawn(flush(load.clone(), rng(2 << 20)));
    tasks.spawn(release(load.clone(), rng(3 << 20)));
    tasks.spawn(faults(load.clone(), faulty, rng(4 << 20)));
    let mut result = Ok(());
    while let Some(done) = tasks.join_next().await {
        let done = done.map_err(|e| CliError::Failed(format!("soak: a load task failed: {e}")));
        if let Err(e) = done.and_then(|r| r) {
            if result.is_ok() {
                result = Err(e);
            }
            tasks.abort_all();
        }
    }
    result
}

async fn write(load: Arc<Load>, mut rng: StdRng) -> CliResult {
    let mut appends = 0u64;
    while !load.stopped() {
        let n = rng.random_range(1..=MAX_ENTRIES);
        let entries: Vec<(u64, Bytes)> = (0..n)
            .map(|_| {
                let len = 2f64.powf(rng.random_range(4.0..16.0)) as usize;
                let mut data = vec![0u8; len.min(MAX_ENTRY)];
                rng.fill_bytes(&mut data);
                (load.pick(&mut rng), Bytes::from(data))
            })
            .collect();
        let bytes: usize = entries.iter().map(|(_, d)| d.len()).sum();
        let last_region = entries.last().map_or(0, |(r, _)| *r);
        match call("append", load.wal.append(entries)).await? {
            Ok(ids) => {
                bump(&load.counts.appended, ids.len() as u64);
                bump(&load.counts.bytes, bytes as u64);
                appends += 1;
                let last = ids.last().copied().unwrap_or(0);
                if !load.enqueued {
                    load.durable(last_region, last);
                } else if appends.is_multiple_of(8) {
                    match call("wait_durable", load.wal.wait_durable(last_region, last)).await? {
                        Ok(()) => load.durable(last_region, last),
                        Err(e) => load.tolerate("wait_durable", e)?,
                    }
                }
            }
            Err(e) => load.tolerate("append", e)?,
        }
    }
    Ok(())
}

/// Every 50 ms, one region read from its watermark to its end.
async fn read(load: Arc<Load>, mut rng: StdRng) -> CliResult {
    while !load.stopped() {
        load.sleep(50).await;
        let region = load.pick(&mut rng);
        let from = load
            .durable
            .lock()
            .map_or(0, |m| m.get(&region).copied().unwrap_or(0));
        let entries = load.wal.read(region, from.saturating_sub(1 << 20));
        let entries: Vec<_> = call("read", entries.collect()).await?;
        for entry in entries {
            match entry {
                Ok(_) => bump(&load.counts.read, 1),
                Err(e) => {
                    load.tolerate("read", e)?;
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Every 20 ms, half the regions obsolete up to their durable id; every
/// 300 ms a `flush`.
async fn flush(load: Arc<Load>, mut rng: StdRng) -> CliResult {
    let mut ticks = 0u64;
    while !load.stopped() {
        load.sleep(20).await;
        ticks += 1;
        let durable: Vec<(u64, u64)> = {
            let map = load.durable.lock().unwrap_or_else(|e| e.into_inner());
            map.iter().map(|(r, id)| (*r, *id)).collect()
        };
        for (region, id) in durable.into_iter().filter(|_| rng.random_bool(0.5)) {
            match call("obsolete", load.wal.obsolete(region, id)).await? {
                Ok(()) => bump(&load.counts.obsoleted, 1),
                Err(e) => load.tolerate("obsolete", e)?,
            }
        }
        if ticks.is_multiple_of(15) {
            match call("flush", load.wal.flush()).await? {
                Ok(()) => bump(&load.counts.flushes, 1),
                Err(e) => load.tolerate("flush", e)?,
            }
        }
    }
    Ok(())
}

/// Every 2 s, one region released (repeated until it returns `Ok`) and
/// replaced by a fresh one.
async fn release(load: Arc<Load>, mut rng: StdRng) -> CliResult {
    while !load.stopped() {
        load.sleep(2_000).await;
        let region = {
            let mut regions = load.regions.lock().unwrap_or_else(|e| e.into_inner());
            let (active, next) = &mut *regions;
            let i = rng.random_range(0..active.len());
            let region = active[i];
            active[i] = *next;
            *next += 1;
            region
        };
        while !load.stopped() {
            match call("release_region", load.wal.release_region(region)).await? {
                Ok(()) => {
                    bump(&load.counts.released, 1);
                    load.durable.lock().map(|mut m| m.remove(&region)).ok();
                    break;
                }
                Err(e) => load.tolerate("release_region", e)?,
            }
            load.sleep(20).await;
        }
    }
    Ok(())
}

/// Every 250 to 750 ms, the faults so far cleared and a new transient
/// one armed: failed creates, lost responses, phantom "exists", failed
/// and corrupted reads (also of read-backs), failed lists and
/// deletes, latency (5 ms, or 150 ms: a slow store).
async fn faults(load: Arc<Load>, faulty: FaultyStorage, mut rng: StdRng) -> CliResult {
    let transient = StorageErrorKind::Transient;
    while !load.stopped() {
        load.sleep(rng.random_range(250..=750)).await;
        faulty.clear_faults();
        if load.stopped() {
            break;
        }
        let n = rng.random_range(1..=3);
        match rng.random_range(0..10) {
            0 => faulty.fail_next(Op::Create, "/objects/", n, transient),
            1 => faulty.lose_next_create_responses("/objects/", n),
            2 => faulty.phantom_exists_next("/objects/", 1),
            3 => faulty.fail_next(Op::Read, "/objects/", n, transient),
            4 => faulty.fail_next(Op::Read, "/fences/", 1, transient),
            5 => faulty.corrupt_next_reads("/objects/", 1),
            6 => faulty.fail_next(Op::List, "", 1, transient),
            7 => faulty.fail_next(Op::Delete, "", n, transient),
            8 => faulty.set_latency(Op::Create, Duration::from_millis(5)),
            // A slow store: creates lag the appends, so an enqueued
            // backlog fills up to its bound and appends stall (E1).
            _ => faulty.set_latency(Op::Create, Duration::from_millis(150)),
        }
        bump(&load.counts.faults, 1);
    }
    faulty.clear_faults();
    Ok(())
}
