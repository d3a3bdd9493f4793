//! `objwal bench-replay open`: what an open reads of large objects.
//!
//! Builds two logs of `--objects` objects with `--regions` segments each:
//! one of objects of about `--object-bytes`, one of small objects (8-byte
//! entries). Per run, in alternating order, a `WalReader` opens each (the
//! recovery a restart does, without writing), through the fault wrapper's
//! counters: reads, bytes read against the bytes of the footers (footer
//! and trailer of every object), and the time of each, as a ratio within
//! the run. The bytes a fixed 64 KiB window reads (what recovery read
//! before issue 15) are computed from the objects' sizes, for comparison.
//!
//! The default store is a fresh local directory (removed afterwards); the
//! page cache is warm (dropping it needs root and slows every process on
//! the machine), so "cold" here means a fresh process state, not a cold
//! disk.

use std::time::{Duration, Instant};

use bytes::Bytes;
use objwal::format::{FOOTER_ENTRY_LEN, TRAILER_LEN};
use objwal::storage::fault::FaultyStorage;
use objwal::{Config, Storage, Wal, WalReader};

use super::{median, on_scratch_store, secs};
use crate::{CliError, CliResult};

/// The window recovery read at the end of every object before issue 15.
const OLD_WINDOW: u64 = 64 << 10;

/// Arguments of `objwal bench-replay open`.
#[derive(Debug, clap::Args)]
pub struct OpenArgs {
    /// The store URL (default: a fresh directory under the temp directory).
    #[arg(long)]
    store: Option<String>,
    /// Objects of each log.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    objects: u32,
    /// Size of the large objects, in bytes.
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1024..=(1 << 30)))]
    object_bytes: u64,
    /// Segments (regions) per object.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    regions: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

/// One open's figures.
#[derive(Debug, Clone, Copy)]
struct Opened {
    time: Duration,
    reads: u64,
    bytes: u64,
}

/// What a log holds, for the ratios.
struct Log {
    prefix: String,
    footers: u64,
    old_window_bytes: u64,
    objects: u64,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: OpenArgs) -> CliResult {
    on_scratch_store(
        args.store.as_deref(),
        prefix,
        "open",
        async |storage, url, prefix| measure(storage, url, prefix, &args).await,
    )
    .await
}

async fn measure(storage: &Storage, url: &str, prefix: &str, args: &OpenArgs) -> CliResult {
    out!(
        "bench-replay open: {} objects of {} KiB vs {} small objects, {} segments each, {} run(s)",
        args.objects,
        args.object_bytes >> 10,
        args.objects,
        args.regions,
        args.runs
    );
    out!("store:     {url} (prefix {prefix})");
    let per_entry = (args.object_bytes / args.regions).saturating_sub(12).max(1);
    let large = build(storage, &format!("{prefix}/large"), args, per_entry).await?;
    let small = build(storage, &format!("{prefix}/small"), args, 8).await?;
    let faulty = FaultyStorage::new(storage.clone());
    let mut runs = Vec::new();
    for n in 0..args.runs {
        let order = if n % 2 == 0 {
            [&large, &small]
        } else {
            [&small, &large]
        };
        let mut got = Vec::new();
        for log in order {
            got.push((log.prefix.clone(), open(&faulty, &log.prefix).await?));
        }
        let pick = |p: &str| got.iter().find(|(q, _)| q == p).map(|(_, o)| *o);
        let (Some(l), Some(s)) = (pick(&large.prefix), pick(&small.prefix)) else {
            return Err(CliError::Failed("an open went missing".into()));
        };
        out!(
            "run {}:     large {:.1} ms ({} reads, {:.2} MiB) | small {:.1} ms ({} reads, {:.2} MiB) | large/small time {:.2}",
            n + 1,
            secs(l.time) * 1e3,
            l.reads,
            l.bytes as f64 / f64::from(1u32 << 20),
            secs(s.time) * 1e3,
            s.reads,
            s.bytes as f64 / f64::from(1u32 << 20),
            secs(l.time) / secs(s.time)
        );
        runs.push((l, s));
    }
    let m = |f: &dyn Fn(&(Opened, Opened)) -> f64| median(runs.iter().map(f).collect());
    out!(
        "medians over {} run(s), ratios within each run:",
        runs.len()
    );
    out!(
        "  large objects: {:.1} ms, {:.3} reads per object, {:.2} MiB read for {:.2} MiB of footers: {:.2}x (target <= 2x; a 64 KiB window read {:.1} MiB, {:.1}x)",
        m(&|r| secs(r.0.time) * 1e3),
        m(&|r| r.0.reads as f64 / large.objects as f64),
        m(&|r| r.0.bytes as f64 / f64::from(1u32 << 20)),
        large.footers as f64 / f64::from(1u32 << 20),
        m(&|r| r.0.bytes as f64 / large.footers as f64),
        large.old_window_bytes as f64 / f64::from(1u32 << 20),
        large.old_window_bytes as f64 / large.footers as f64,
    );
    out!(
        "  small objects: {:.1} ms, {:.3} reads per object",
        m(&|r| secs(r.1.time) * 1e3),
        m(&|r| r.1.reads as f64 / small.objects as f64),
    );
    out!(
        "  large vs small open time: {:.2}x (target <= 1.3x)",
        m(&|r| secs(r.0.time) / secs(r.1.time)),
    );
    Ok(())
}

/// A log of `args.objects` objects, `args.regions` entries of `payload`
/// bytes each.
async fn build(
    storage: &Storage,
    prefix: &str,
    args: &OpenArgs,
    payload: u64,
) -> Result<Log, CliError> {
    let started = Instant::now();
    let config = Config {
        max_batch_bytes: (args.regions * (payload + 64)).clamp(1 << 20, 1 << 30),
        max_unpersisted_bytes: 2 << 30,
        early_seals: objwal::EarlySeals::Unlimited,
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), prefix, config).await?;
    let data = Bytes::from(vec![0xa5; usize::try_from(payload).unwrap_or(usize::MAX)]);
    for _ in 0..args.objects {
        wal.append((0..args.regions).map(|r| (r, data.clone())).collect())
            .await?;
    }
    wal.stop().await?;
    let reader = WalReader::open(storage.clone(), prefix, Config::default()).await?;
    let objects = reader.objects();
    let footer = |segments: usize, releases: bool| {
        ((segments + usize::from(releases)) * FOOTER_ENTRY_LEN + TRAILER_LEN) as u64
    };
    let log = Log {
        prefix: prefix.to_owned(),
        footers: objects
            .iter()
            .map(|o| footer(o.segments.len(), !o.releases.is_empty()))
            .sum(),
        old_window_bytes: objects.iter().map(|o| o.size.min(OLD_WINDOW)).sum(),
        objects: objects.len() as u64,
    };
    out!(
        "built:     {prefix}: {} objects, {:.1} MiB, in {:.1} s",
        log.objects,
        objects.iter().map(|o| o.size).sum::<u64>() as f64 / f64::from(1u32 << 20),
        secs(started.elapsed())
    );
    Ok(log)
}

async fn open(faulty: &FaultyStorage, prefix: &str) -> Result<Opened, CliError> {
    faulty.reset_counts();
    let started = Instant::now();
    WalReader::open(faulty.storage(), prefix, Config::default()).await?;
    let time = started.elapsed();
    let counts = faulty.counts();
    Ok(Opened {
        time,
        reads: counts.read.requests,
        bytes: counts.read.bytes,
    })
}
