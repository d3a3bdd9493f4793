//! raft-engine's side: one engine on a fresh directory, one thread per
//! writer, each appending its rows to its own region with `sync = true`
//! (TiKV's `sync_write`), so a write returns once it is fsynced. Concurrent
//! writers are group-committed by raft-engine itself (one leader writes and
//! syncs the batches of every waiting writer).
//!
//! Entries are protobuf `BytesValue`s holding the row; the first 8 bytes of
//! a row carry its raft index (what `MessageExt::index` reads), so a row is
//! exactly the workload's size, as objwal's payload is.

use std::path::Path;
use std::time::{Duration, Instant};

use protobuf::well_known_types::BytesValue;
use raft_engine::{Config, Engine, LogBatch, MessageExt};

use crate::stats::Run;
use crate::{rows_of, Workload};

/// raft-engine's view of a row: its index lives in its first 8 bytes.
#[derive(Clone)]
struct Row;

impl MessageExt for Row {
    type Entry = BytesValue;

    fn index(e: &BytesValue) -> u64 {
        e.value
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes)
    }
}

/// Runs the workload against raft-engine in `dir` (created; removed after).
pub fn run(workload: &Workload, dir: &Path, seconds: f64, seed: u64) -> Result<Run, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let config = Config {
        dir: dir.display().to_string(),
        ..Config::default()
    };
    let engine = Engine::open(config).map_err(|e| format!("raft-engine open: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let results: Vec<Result<(u64, Vec<Duration>), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workload.writers)
            .map(|w| {
                let engine = &engine;
                s.spawn(move || writer(engine, workload, w, deadline, seed))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
            .collect()
    });
    let elapsed = started.elapsed();
    drop(engine);
    let _ = std::fs::remove_dir_all(dir);
    let mut rows = 0;
    let mut latencies = Vec::new();
    for r in results {
        let (n, l) = r?;
        rows += n;
        latencies.extend(l);
    }
    Ok(Run::new(rows, elapsed, latencies))
}

/// One writer: region `w + 1`, appends until the deadline; its rows and
/// latencies.
fn writer(
    engine: &Engine,
    workload: &Workload,
    w: u32,
    deadline: Instant,
    seed: u64,
) -> Result<(u64, Vec<Duration>), String> {
    let region = u64::from(w) + 1;
    let mut entries: Vec<BytesValue> = rows_of(workload, seed ^ region)
        .into_iter()
        .map(|row| {
            let mut e = BytesValue::new();
            e.value = row;
            e
        })
        .collect();
    let mut next_index = 1u64;
    let mut rows = 0u64;
    let mut latencies = Vec::new();
    let mut batch = LogBatch::with_capacity(entries.len());
    while Instant::now() < deadline {
        let sent = Instant::now();
        for e in entries.iter_mut() {
            if let Some(head) = e.value.get_mut(..8) {
                head.copy_from_slice(&next_index.to_le_bytes());
            }
            next_index += 1;
        }
        batch
            .add_entries::<Row>(region, &entries)
            .map_err(|e| format!("raft-engine add_entries: {e}"))?;
        engine
            .write(&mut batch, true)
            .map_err(|e| format!("raft-engine write: {e}"))?;
        latencies.push(sent.elapsed());
        rows += entries.len() as u64;
    }
    Ok((rows, latencies))
}
