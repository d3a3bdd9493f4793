//! objwal's side: one `Wal` on the local directory backend (`file://`, the
//! embedded default: temporary file, fsync, link, directory fsync), one
//! task per writer appending its rows to its own region, and the floor: the
//! same backend's serial creates of objects of the size objwal made.
//!
//! The store is wrapped to record the size of every object created (to
//! report objects per second and to size the floor); the wrapper forwards
//! `charges_per_request`, so the store gets the local directory's budget of
//! early seals, as it would unwrapped.

use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use objwal::storage::FileStorage;
use objwal::{
    AckMode, Config, Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix, Wal,
};

use crate::stats::{percentile_ms, Run};
use crate::{rows_of, Workload};

/// Records the size of every object created through it.
#[derive(Debug, Clone)]
struct Sizes {
    inner: Storage,
    sizes: Arc<Mutex<Vec<u64>>>,
}

#[async_trait::async_trait]
impl ObjectStorage for Sizes {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        if key.ends_with(".wal") {
            if let Ok(mut sizes) = self.sizes.lock() {
                sizes.push(data.len() as u64);
            }
        }
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.inner.read_suffix(key, len).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

/// Runs the workload against objwal in `dir` (created; removed after).
pub async fn run(
    workload: &Workload,
    config: &Config,
    dir: &Path,
    seconds: f64,
    seed: u64,
) -> Result<Run, String> {
    let file = FileStorage::open(dir).map_err(|e| format!("objwal store: {e}"))?;
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let storage = Storage::new(Sizes {
        inner: Storage::new(file),
        sizes: sizes.clone(),
    });
    let mut config = config.clone();
    if workload.enqueued {
        config.ack_mode = AckMode::Enqueued;
    }
    let wal = Wal::open(storage, "sidebyside", config)
        .await
        .map_err(|e| format!("objwal open: {e}"))?;
    let opened_objects = sizes.lock().map_or(0, |s| s.len());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workload.writers {
        let region = u64::from(w) + 1;
        let rows: Vec<(u64, Bytes)> = rows_of(workload, seed ^ region)
            .into_iter()
            .map(|r| (region, Bytes::from(r)))
            .collect();
        tasks.spawn(writer(wal.clone(), rows, deadline, workload.enqueued));
    }
    let mut rows = 0u64;
    let mut latencies = Vec::new();
    let mut failure = None;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok((n, l))) => {
                rows += n;
                latencies.extend(l);
            }
            Ok(Err(e)) => failure = failure.or(Some(format!("objwal append: {e}"))),
            Err(e) => failure = failure.or(Some(format!("objwal writer: {e}"))),
        }
    }
    let elapsed = started.elapsed();
    let stopped = wal.stop().await;
    let _ = std::fs::remove_dir_all(dir);
    if let Some(f) = failure {
        return Err(f);
    }
    stopped.map_err(|e| format!("objwal stop: {e}"))?;
    let mut run = Run::new(rows, elapsed, latencies);
    let mut made: Vec<u64> = sizes
        .lock()
        .map(|s| {
            s.get(opened_objects..)
                .map(<[u64]>::to_vec)
                .unwrap_or_default()
        })
        .unwrap_or_default();
    made.sort_unstable();
    run.objects_per_s = Some(made.len() as f64 / elapsed.as_secs_f64().max(1e-9));
    run.object_bytes = made.get(made.len() / 2).copied();
    Ok(run)
}

/// One writer: appends its rows until the deadline; in enqueued mode it
/// then waits until its last row is durable. Its rows and latencies.
async fn writer(
    wal: Wal,
    rows: Vec<(u64, Bytes)>,
    deadline: Instant,
    enqueued: bool,
) -> Result<(u64, Vec<Duration>), objwal::Error> {
    let mut latencies = Vec::new();
    let mut appended = 0u64;
    let mut last = None;
    while Instant::now() < deadline {
        let sent = Instant::now();
        let ids = wal.append(rows.clone()).await?;
        latencies.push(sent.elapsed());
        appended += rows.len() as u64;
        last = ids.last().copied();
    }
    if let (true, Some(id), Some((region, _))) = (enqueued, last, rows.first()) {
        wal.wait_durable(*region, id).await?;
    }
    Ok((appended, latencies))
}

/// The floor: serial creates of `bytes`-byte objects on the same backend in
/// `dir` for about a second (at least 5, at most 1000), kept until the
/// directory is removed (as a log's directory keeps its objects: creates
/// into a directory emptied after each one cost a third as much on ext4).
/// Its p50 in milliseconds.
pub async fn floor(dir: &Path, bytes: u64, seconds: f64, seed: u64) -> Result<f64, String> {
    let storage = FileStorage::open(dir).map_err(|e| format!("floor store: {e}"))?;
    let workload = Workload {
        name: "floor",
        writers: 1,
        rows: 1,
        bytes: usize::try_from(bytes).unwrap_or(1).max(8),
        enqueued: false,
    };
    let data = Bytes::from(rows_of(&workload, seed).concat());
    let budget = Duration::from_secs_f64(seconds.min(1.0));
    let started = Instant::now();
    let mut latencies = Vec::new();
    while latencies.len() < 5 || (started.elapsed() < budget && latencies.len() < 1000) {
        let key = format!("floor/{:08}.wal", latencies.len());
        let sent = Instant::now();
        storage
            .create(&key, data.clone())
            .await
            .map_err(|e| format!("floor create: {e}"))?;
        latencies.push(sent.elapsed());
    }
    let _ = std::fs::remove_dir_all(dir);
    latencies.sort_unstable();
    Ok(percentile_ms(&latencies, 0.5))
}

/// What the disk allows a workload without either system: one thread per
/// writer, each writing the workload's append (its rows, concatenated)
/// and waiting for it to be durable before the next, for `seconds`.
/// `append`: to one file per thread kept open, `fdatasync` after each
/// write (what a log that keeps its file open pays: raft-engine's way);
/// else a new file per write, created exclusively, written, fsynced,
/// closed, and its directory fsynced (what a file per object pays, without
/// objwal's temporary file and link). Returns rows per second.
pub fn bare_loop(
    dir: &Path,
    workload: &Workload,
    seconds: f64,
    seed: u64,
    append: bool,
) -> Result<f64, String> {
    use std::io::Write;
    let fail = |e: std::io::Error| format!("bare loop in {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let data = Arc::new(rows_of(workload, seed).concat());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..workload.writers)
        .map(|t| {
            let (dir, data) = (dir.to_path_buf(), Arc::clone(&data));
            std::thread::spawn(move || -> std::io::Result<u64> {
                let mut writes = 0u64;
                let mut log = match append {
                    true => Some(std::fs::File::create(dir.join(format!("log-{t}")))?),
                    false => None,
                };
                while Instant::now() < deadline {
                    match log.as_mut() {
                        Some(file) => {
                            file.write_all(&data)?;
                            file.sync_data()?;
                        }
                        None => {
                            let mut file = std::fs::File::options()
                                .write(true)
                                .create_new(true)
                                .open(dir.join(format!("{t}-{writes}")))?;
                            file.write_all(&data)?;
                            file.sync_all()?;
                            drop(file);
                            std::fs::File::open(&dir)?.sync_all()?;
                        }
                    }
                    writes += 1;
                }
                Ok(writes)
            })
        })
        .collect();
    let mut writes = 0u64;
    for thread in threads {
        writes += thread
            .join()
            .map_err(|_| "a bare loop's thread panicked".to_string())?
            .map_err(fail)?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(dir);
    Ok((writes * workload.rows as u64) as f64 / elapsed.max(1e-9))
}

/// The bare loop of [`bare_loop`] through objwal's own directory backend:
/// one task per writer creating a new object per write (its temporary
/// file, fsync, link and shared directory fsync), without the actor. What
/// lies between it and objwal's rows/s is the actor's; what lies between
/// it and the bare create loop is the backend's. Returns rows per second.
///
/// `in_order`: a write counts as done only once every write issued before
/// it (by any task) is done, as objwal acknowledges an object only once
/// every object of its run below it landed (rule K2 of rfcs/0006): the
/// cost of that rule alone, on this disk.
pub async fn backend_loop(
    dir: &Path,
    workload: &Workload,
    seconds: f64,
    seed: u64,
    in_order: bool,
) -> Result<f64, String> {
    let storage = FileStorage::open(dir).map_err(|e| format!("backend loop store: {e}"))?;
    let data = Bytes::from(rows_of(workload, seed).concat());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let order = Arc::new(Order::default());
    let (done_tx, done_rx) = tokio::sync::watch::channel(0u64);
    let done_tx = Arc::new(done_tx);
    let tasks: Vec<_> = (0..workload.writers)
        .map(|t| {
            let (storage, data) = (storage.clone(), data.clone());
            let (order, done_tx, mut done_rx) =
                (Arc::clone(&order), Arc::clone(&done_tx), done_rx.clone());
            tokio::spawn(async move {
                let mut writes = 0u64;
                while Instant::now() < deadline {
                    let ticket = order.issue();
                    storage
                        .create(&format!("loop/{t}-{writes:08}.wal"), data.clone())
                        .await
                        .map_err(|e| format!("backend loop create: {e}"))?;
                    let below = order.land(ticket);
                    done_tx.send_if_modified(|d| {
                        let moved = below > *d;
                        *d = (*d).max(below);
                        moved
                    });
                    if in_order {
                        done_rx
                            .wait_for(|d| *d > ticket)
                            .await
                            .map_err(|e| format!("backend loop order: {e}"))?;
                    }
                    writes += 1;
                }
                Ok::<u64, String>(writes)
            })
        })
        .collect();
    let mut writes = 0u64;
    for task in tasks {
        writes += task
            .await
            .map_err(|e| format!("backend loop task: {e}"))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(dir);
    Ok((writes * workload.rows as u64) as f64 / elapsed.max(1e-9))
}

/// Tickets in issue order, and how far every ticket below is done.
#[derive(Debug, Default)]
struct Order {
    state: Mutex<(u64, std::collections::BTreeSet<u64>, u64)>,
}

impl Order {
    /// The next ticket.
    fn issue(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 += 1;
        state.0
    }

    /// `ticket` is done: returns one past the highest ticket below which
    /// every ticket is done.
    fn land(&self, ticket: u64) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (_, landed, below) = &mut *state;
        landed.insert(ticket);
        if *below == 0 {
            *below = 1;
        }
        while landed.remove(below) {
            *below += 1;
        }
        *below
    }
}
