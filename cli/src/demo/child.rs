//! The demo's writer process (hidden subcommand `demo-child`), which the
//! parent SIGKILLs at a random moment.
//!
//! It opens the WAL, runs `--writers` tasks appending self-describing
//! payloads ([`crate::payload`]) to `--regions` regions, and a flusher task
//! that now and then marks a region obsolete up to an id already logged
//! durable. Every fact the parent will check is logged, one line each,
//! right after it became true (buffered writer flushed per line; the child
//! is killed, not the machine, so no fsync):
//!
//! - `A region id len digest`: acknowledged, and so durable (durable mode);
//! - `E region id len digest`: acknowledged on admission (enqueued mode);
//! - `D region id`: `wait_durable(region, id)` returned (enqueued mode):
//!   every entry of the region up to `id` is durable;
//! - `W region id`: `obsolete(region, id)` returned;
//! - `R region 0`: `release_region(region)` returned: the region is dropped
//!   (the last region, a quarter into the run, as an engine drops a table).
//!
//! The log is only appended after the library answered, so a line can lag
//! the fact (the kill may fall in between) but never lead it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::metrics_http;
use crate::payload::{self, Identity};
use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};

/// Arguments of the writer process; the parent sets every one.
#[derive(Debug, clap::Args)]
pub struct ChildArgs {
    /// The store URL.
    #[arg(long)]
    store: String,
    /// The acknowledgement log to write.
    #[arg(long)]
    log: PathBuf,
    /// The acknowledgement mode.
    #[arg(long, value_enum)]
    ack_mode: AckModeArg,
    /// Regions to append to.
    #[arg(long)]
    regions: u32,
    /// Concurrent writer tasks.
    #[arg(long)]
    writers: u16,
    /// The random seed.
    #[arg(long)]
    seed: u64,
    /// The store's flush interval.
    #[arg(long)]
    flush_interval: String,
    /// Seconds after which the child gives up waiting to be killed.
    #[arg(long, value_parser = store::seconds)]
    deadline: f64,
    /// Seconds after which the last region is dropped.
    #[arg(long, value_parser = store::seconds)]
    drop_after: f64,
    /// The run tag written into every payload (see [`crate::payload`]).
    #[arg(long, default_value_t = 0)]
    run: u32,
    /// Serve this process's metrics there; the bound address is printed on
    /// stdout as `metrics ADDR` once the store is open.
    #[arg(long)]
    metrics_addr: Option<String>,
}

/// Entries an enqueued writer may have admitted but not yet seen durable.
const MAX_NOT_DURABLE: usize = 64;

/// The acknowledgement log: one line per fact, flushed per line.
#[derive(Clone)]
struct AckLog(Arc<Mutex<BufWriter<File>>>);

impl AckLog {
    fn line(&self, line: std::fmt::Arguments<'_>) -> Result<(), CliError> {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        w.write_fmt(line)
            .and_then(|()| w.write_all(b"\n"))
            .and_then(|()| w.flush())
            .map_err(|e| CliError::Failed(format!("cannot write the acknowledgement log: {e}")))
    }
}

/// Per region, the largest id logged durable: what the flusher may obsolete.
type Flushable = Arc<Mutex<HashMap<u32, u64>>>;

/// The region being dropped (`u32::MAX` while none is): writers stop
/// choosing it before its release starts.
type Dropped = Arc<AtomicU32>;

/// Runs until killed (or until `--deadline`, which is a failure).
pub async fn run(prefix: &str, args: ChildArgs) -> CliResult {
    let storage = store::open(&args.store, false)?;
    let mut overrides = serde_json::Map::new();
    overrides.insert("ack_mode".into(), args.ack_mode.as_str().into());
    overrides.insert("flush_interval".into(), args.flush_interval.clone().into());
    let config = store::config(overrides)?;
    let file = File::create(&args.log)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", args.log.display())))?;
    let log = AckLog(Arc::new(Mutex::new(BufWriter::new(file))));
    // Before the open: the store's metrics describe themselves on first use.
    let metrics = match &args.metrics_addr {
        Some(addr) => Some(metrics_http::serve(addr).await?),
        None => None,
    };
    let wal = objwal::Wal::open(storage, prefix, config).await?;
    if let Some(bound) = metrics {
        out!("metrics {bound}");
    }
    let flushable: Flushable = Arc::default();
    let dropped: Dropped = Arc::new(AtomicU32::new(u32::MAX));
    let enqueued = args.ack_mode == AckModeArg::Enqueued;

    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..args.writers {
        let rng =
            StdRng::seed_from_u64(args.seed ^ (u64::from(writer) + 1).wrapping_mul(0x9e37_79b9));
        let w = Writer {
            wal: wal.clone(),
            log: log.clone(),
            flushable: flushable.clone(),
            dropped: dropped.clone(),
            writer,
            run: args.run,
            regions: args.regions.max(1),
            rng,
        };
        tasks.spawn(async move {
            if enqueued {
                w.run_enqueued().await
            } else {
                w.run_durable().await
            }
        });
    }
    let rng = StdRng::seed_from_u64(args.seed ^ 0xf1a5_4e5d);
    tasks.spawn(flusher(
        wal.clone(),
        log.clone(),
        flushable.clone(),
        dropped.clone(),
        rng,
    ));
    if args.regions >= 2 {
        let region = args.regions - 1;
        let after = Duration::from_secs_f64(args.drop_after);
        tasks.spawn(dropper(wal.clone(), log.clone(), dropped, region, after));
    }

    let deadline = tokio::time::sleep(Duration::from_secs_f64(args.deadline));
    tokio::select! {
        () = deadline => Err(CliError::Failed("demo-child: not killed before its deadline".into())),
        Some(done) = tasks.join_next() => match done {
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => Err(CliError::Failed("demo-child: a task ended early".into())),
            Err(e) => Err(CliError::Failed(format!("demo-child: a task failed: {e}"))),
        },
    }
}

struct Writer {
    wal: objwal::Wal,
    log: AckLog,
    flushable: Flushable,
    dropped: Dropped,
    writer: u16,
    run: u32,
    regions: u32,
    rng: StdRng,
}

impl Writer {
    /// One to four entries of random regions and sizes.
    fn next_append(&mut self, counter: &mut u32) -> Vec<(u64, Bytes)> {
        let n = self.rng.random_range(1..=4);
        let dropped = self.dropped.load(Ordering::SeqCst);
        (0..n)
            .map(|_| {
                let mut region = self.rng.random_range(0..self.regions);
                if region == dropped {
                    region = (region + 1) % self.regions;
                }
                *counter = counter.wrapping_add(1);
                let id = Identity {
                    region,
                    writer: self.writer,
                    counter: *counter,
                    run: self.run,
                };
                let len = payload::random_len(&mut self.rng);
                (u64::from(region), payload::make(id, len, &mut self.rng))
            })
            .collect()
    }

    fn mark_flushable(&self, region: u64, id: u64) {
        let mut map = self.flushable.lock().unwrap_or_else(|e| e.into_inner());
        let slot = map.entry(region as u32).or_insert(0);
        *slot = (*slot).max(id);
    }

    async fn run_durable(mut self) -> CliResult {
        let mut counter = 0;
        loop {
            let entries = self.next_append(&mut counter);
            let Some(ids) = refused_if_dropped(self.wal.append(entries.clone()).await)? else {
                continue;
            };
            for ((region, data), id) in entries.iter().zip(&ids) {
                let digest = payload::digest(data);
                self.log
                    .line(format_args!("A {region} {id} {} {digest:016x}", data.len()))?;
                self.mark_flushable(*region, *id);
            }
        }
    }

    /// Appends return on admission; each entry's `wait_durable` runs behind,
    /// at most [`MAX_NOT_DURABLE`] per writer, and is logged as it returns.
    async fn run_enqueued(mut self) -> CliResult {
        let mut counter = 0;
        let mut pending = FuturesOrdered::new();
        loop {
            let entries = self.next_append(&mut counter);
            let Some(ids) = refused_if_dropped(self.wal.append(entries.clone()).await)? else {
                continue;
            };
            for ((region, data), id) in entries.iter().zip(&ids) {
                let digest = payload::digest(data);
                self.log
                    .line(format_args!("E {region} {id} {} {digest:016x}", data.len()))?;
                let wal = self.wal.clone();
                let (region, id) = (*region, *id);
                pending.push_back(async move {
                    wal.wait_durable(region, id).await.map(|()| (region, id))
                });
            }
            while pending.len() >= MAX_NOT_DURABLE {
                if let Some(done) = pending.next().await {
                    self.durable(done)?;
                }
            }
            while let Some(Some(done)) = pending.next().now_or_never() {
                self.durable(done)?;
            }
        }
    }

    fn durable(&self, done: Result<(u64, u64), objwal::Error>) -> CliResult {
        let (region, id) = done?;
        self.log.line(format_args!("D {region} {id}"))?;
        self.mark_flushable(region, id);
        Ok(())
    }
}

/// An append that raced the drop of its region is refused whole: not an
/// error of the demo, nothing to log.
fn refused_if_dropped(
    result: Result<Vec<u64>, objwal::Error>,
) -> Result<Option<Vec<u64>>, CliError> {
    match result {
        Ok(ids) => Ok(Some(ids)),
        Err(objwal::Error::RegionReleased { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Drops `region` after `after`, as an engine drops a table, and logs it.
async fn dropper(
    wal: objwal::Wal,
    log: AckLog,
    dropped: Dropped,
    region: u32,
    after: Duration,
) -> CliResult {
    tokio::time::sleep(after).await;
    dropped.store(region, Ordering::SeqCst);
    wal.release_region(u64::from(region)).await?;
    log.line(format_args!("R {region} 0"))?;
    // Stay alive: the parent's kill ends the child.
    futures::future::pending::<()>().await;
    Ok(())
}

/// Every 20 to 200 ms, marks one region obsolete up to its largest id
/// logged durable, then logs the watermark.
async fn flusher(
    wal: objwal::Wal,
    log: AckLog,
    flushable: Flushable,
    dropped: Dropped,
    mut rng: StdRng,
) -> CliResult {
    let mut watermarks: HashMap<u32, u64> = HashMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..=200))).await;
        let candidates: Vec<(u32, u64)> = {
            let map = flushable.lock().unwrap_or_else(|e| e.into_inner());
            map.iter().map(|(r, id)| (*r, *id)).collect()
        };
        if candidates.is_empty() {
            continue;
        }
        let Some(&(region, id)) = candidates.get(rng.random_range(0..candidates.len())) else {
            continue;
        };
        if watermarks.get(&region).is_some_and(|w| *w >= id)
            || region == dropped.load(Ordering::SeqCst)
        {
            continue;
        }
        wal.obsolete(u64::from(region), id).await?;
        watermarks.insert(region, id);
        log.line(format_args!("W {region} {id}"))?;
    }
}
