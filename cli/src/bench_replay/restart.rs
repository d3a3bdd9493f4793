//! `objwal bench-replay restart`: a restart that replays every region.
//!
//! Builds `--regions` x `--objects` (every object holds one entry of every
//! region, as a busy node's log does), then per run, with `--latency`
//! injected on every read (the fault wrapper), and in alternating order:
//! - bulk: one `replay` of every region from 0;
//! - per-region reads as today: `read` with one segment read in flight
//!   (`replay_concurrency = 1`), for `--sample` regions, one after the
//!   other; the time for all regions is the sample's mean times the number
//!   of regions (a full run would take hours at 30 ms a read);
//! - per-region reads with prefetch (`replay_concurrency`, default 16), the
//!   same way.
//!
//! Requests and bytes come from the fault wrapper's counters. Readers
//! (`WalReader`) are used so that three configurations read one prefix at
//! once; they use the same read and replay code as a `Wal` (only the page
//! source differs: the frozen catalog instead of the actor).

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::{Config, RegionId, Storage, Wal, WalReader};

use super::{duration, median, run_prefix, secs};
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-replay restart`.
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// The store URL the log is built on (latency is injected above it).
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Regions of the node.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    regions: u64,
    /// Objects of the log (each holds one entry of every region).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    objects: u32,
    /// Bytes per entry.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    payload: u32,
    /// Latency injected on every read.
    #[arg(long, default_value = "30ms", value_parser = duration)]
    latency: Duration,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Regions read one by one per run (their mean is scaled to all).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    sample: u64,
    /// Reads in flight of the bulk replay and of prefetching reads.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    concurrency: u32,
}

/// What one way of replaying took.
#[derive(Debug, Clone, Copy, Default)]
struct Took {
    time: Duration,
    reads: u64,
    bytes: u64,
    entries: u64,
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Run {
    bulk: Took,
    /// Per region, the sample's mean scaled to every region.
    today: Took,
    prefetch: Took,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: RestartArgs) -> CliResult {
    if args.sample > args.regions {
        return Err(CliError::Usage(format!(
            "--sample {} is more than --regions {}",
            args.sample, args.regions
        )));
    }
    let storage = crate::store::open(&args.store, true)?;
    let prefix = run_prefix(prefix, "restart");
    let result = measure(&storage, &prefix, &args).await;
    crate::store::clean(&storage, &prefix).await;
    result
}

async fn measure(storage: &Storage, prefix: &str, args: &RestartArgs) -> CliResult {
    out!(
        "bench-replay restart: {} regions x {} objects, {} B entries, {:?} per read, {} reads in flight, {} run(s)",
        args.regions, args.objects, args.payload, args.latency, args.concurrency, args.runs
    );
    out!("store:     {} (prefix {prefix})", args.store);
    let started = Instant::now();
    build(storage, prefix, args).await?;
    out!("built:     in {:.1} s", secs(started.elapsed()));
    let faulty = FaultyStorage::new(storage.clone());
    let reader = |concurrency: u32| {
        let config = Config {
            replay_concurrency: concurrency as usize,
            recovery_concurrency: 64,
            ..Config::default()
        };
        WalReader::open(faulty.storage(), prefix, config)
    };
    let bulk_reader = reader(args.concurrency).await?;
    let today_reader = reader(1).await?;
    let replayed_bytes: u64 = bulk_reader.regions().iter().map(|r| r.bytes).sum();
    let regions: Vec<RegionId> = (0..args.regions).collect();
    let step = (args.regions / args.sample).max(1);
    let sample: Vec<RegionId> = (0..args.sample).map(|i| i * step).collect();
    let mut runs = Vec::new();
    for n in 0..args.runs {
        faulty.set_latency(Op::Read, args.latency);
        let bulk_first = n % 2 == 0;
        let mut bulk = Took::default();
        if bulk_first {
            bulk = replay_all(&faulty, &bulk_reader, &regions).await?;
        }
        let today = per_region(&faulty, &today_reader, &sample, args.regions).await?;
        let prefetch = per_region(&faulty, &bulk_reader, &sample, args.regions).await?;
        if !bulk_first {
            bulk = replay_all(&faulty, &bulk_reader, &regions).await?;
        }
        faulty.set_latency(Op::Read, Duration::ZERO);
        let run = Run {
            bulk,
            today,
            prefetch,
        };
        print_run(n + 1, &run, args);
        runs.push(run);
    }
    print_summary(&runs, args, replayed_bytes);
    Ok(())
}

/// The log: every object holds one entry of every region.
async fn build(storage: &Storage, prefix: &str, args: &RestartArgs) -> CliResult {
    let config = Config {
        max_batch_bytes: (args.regions * (u64::from(args.payload) + 64)).clamp(1 << 20, 1 << 30),
        max_unpersisted_bytes: 2 << 30,
        // One object per append, on any store.
        early_seals: objwal::EarlySeals::Unlimited,
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), prefix, config).await?;
    let payload = Bytes::from(vec![0x5a; args.payload as usize]);
    for _ in 0..args.objects {
        let entries = (0..args.regions).map(|r| (r, payload.clone())).collect();
        wal.append(entries).await?;
    }
    wal.stop().await?;
    Ok(())
}

async fn replay_all(
    faulty: &FaultyStorage,
    reader: &WalReader,
    regions: &[RegionId],
) -> Result<Took, CliError> {
    faulty.reset_counts();
    let started = Instant::now();
    let mut entries = Box::pin(reader.replay(regions.iter().map(|&r| (r, 0))));
    let mut count = 0;
    while let Some(entry) = entries.next().await {
        entry?;
        count += 1;
    }
    let counts = faulty.counts();
    Ok(Took {
        time: started.elapsed(),
        reads: counts.read.requests,
        bytes: counts.read.bytes,
        entries: count,
    })
}

/// Reads the `sample` regions one after the other and scales the mean to
/// `regions`.
async fn per_region(
    faulty: &FaultyStorage,
    reader: &WalReader,
    sample: &[RegionId],
    regions: u64,
) -> Result<Took, CliError> {
    faulty.reset_counts();
    let started = Instant::now();
    let mut count = 0;
    for &region in sample {
        let mut entries = Box::pin(reader.read(region, 0));
        while let Some(entry) = entries.next().await {
            entry?;
            count += 1;
        }
    }
    let counts = faulty.counts();
    let scale = |v: u64| v * regions / sample.len() as u64;
    Ok(Took {
        time: started
            .elapsed()
            .mul_f64(regions as f64 / sample.len() as f64),
        reads: scale(counts.read.requests),
        bytes: scale(counts.read.bytes),
        entries: scale(count),
    })
}

fn print_run(n: u32, run: &Run, args: &RestartArgs) {
    out!(
        "run {n}:     bulk {:.2} s ({} reads, {:.1} MiB) | per-region today {:.0} s, prefetch {:.1} s (for all {} regions, from {} sampled) | bulk {:.0}x faster than today, {:.1}x than prefetch",
        secs(run.bulk.time),
        run.bulk.reads,
        run.bulk.bytes as f64 / f64::from(1u32 << 20),
        secs(run.today.time),
        secs(run.prefetch.time),
        args.regions,
        args.sample,
        secs(run.today.time) / secs(run.bulk.time),
        secs(run.prefetch.time) / secs(run.bulk.time),
    );
}

fn print_summary(runs: &[Run], args: &RestartArgs, replayed_bytes: u64) {
    let m = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let objects = f64::from(args.objects);
    out!(
        "medians over {} run(s), ratios within each run:",
        runs.len()
    );
    out!(
        "  bulk replay:                 {:.2} s, {:.3} reads per object, {:.3}x the replayed entries' bytes (framing included), {} entries",
        m(&|r| secs(r.bulk.time)),
        m(&|r| r.bulk.reads as f64 / objects),
        m(&|r| r.bulk.bytes as f64 / replayed_bytes as f64),
        runs.first().map_or(0, |r| r.bulk.entries)
    );
    out!(
        "  per-region read, today:      {:.1} s for all regions, {:.1} reads per object",
        m(&|r| secs(r.today.time)),
        m(&|r| r.today.reads as f64 / objects),
    );
    out!(
        "  per-region read, prefetch:   {:.1} s for all regions, {:.1} reads per object",
        m(&|r| secs(r.prefetch.time)),
        m(&|r| r.prefetch.reads as f64 / objects),
    );
    out!(
        "  bulk vs per-region today:    {:.0}x faster (target >= 50x); vs prefetch {:.1}x",
        m(&|r| secs(r.today.time) / secs(r.bulk.time)),
        m(&|r| secs(r.prefetch.time) / secs(r.bulk.time)),
    );
    out!(
        "  one region, prefetch vs today: {:.1}x faster (target >= 10x)",
        m(&|r| secs(r.today.time) / secs(r.prefetch.time)),
    );
}
