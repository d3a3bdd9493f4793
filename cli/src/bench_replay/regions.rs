//! `objwal bench-replay regions`: what a log of many regions costs to open
//! and to hold (issue 23).
//!
//! Builds two logs of the same number of objects: one whose objects hold
//! `--regions` regions between them (`--regions-per-object` each, one small
//! entry per region: every region idle, as after a restart), and a small
//! one of `--small-regions` regions. Per run, in alternating order, a
//! writer opens each (`Wal::open`: recovery, the start object, the actor
//! with its region tables), and the bench records the time of the open and
//! the heap the open store holds once its actor answered a first request
//! (glibc's `mallinfo2`: bytes of allocated chunks, overheads included;
//! measured as what the heap shrinks by once the store is stopped and its
//! actor has ended). The bytes per idle region are the difference between
//! the two logs' heaps over the difference of their regions, so that what
//! a store holds whatever its regions (the runtime's, the objects' own
//! entries) cancels out; both are given per run and as medians.

use std::time::{Duration, Instant};

use bytes::Bytes;
use objwal::{Config, Storage, Wal};

use super::{median, on_scratch_store, secs};
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-replay regions`.
#[derive(Debug, clap::Args)]
pub struct RegionsArgs {
    /// The store URL (default: a fresh directory under the temp directory).
    #[arg(long)]
    store: Option<String>,
    /// Regions of the large log.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    regions: u64,
    /// Regions of each object (the large log has regions / this many objects).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    regions_per_object: u64,
    /// Regions of the small log (as many objects as the large one).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    small_regions: u64,
    /// Bytes of each region's entry.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    payload: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

/// One run: the large log's open, the small log's, and the bytes per idle
/// region between them.
type Run = (Opened, Opened, Option<f64>);

/// One open's figures.
#[derive(Debug, Clone, Copy)]
struct Opened {
    time: Duration,
    /// Heap bytes the open store holds (`None` where it cannot be read).
    heap: Option<i64>,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: RegionsArgs) -> CliResult {
    on_scratch_store(
        args.store.as_deref(),
        prefix,
        "regions",
        async |storage, url, prefix| measure(storage, url, prefix, &args).await,
    )
    .await
}

async fn measure(storage: &Storage, url: &str, prefix: &str, args: &RegionsArgs) -> CliResult {
    let objects = args.regions.div_ceil(args.regions_per_object);
    out!(
        "bench-replay regions: a log of {} regions in {objects} objects vs one of {} regions, {} run(s)",
        args.regions,
        args.small_regions,
        args.runs
    );
    out!("store:     {url} (prefix {prefix})");
    let large = format!("{prefix}/large");
    let small = format!("{prefix}/small");
    build(storage, &large, args.regions, objects, args.payload).await?;
    build(storage, &small, args.small_regions, objects, args.payload).await?;
    let mut runs = Vec::new();
    for n in 0..args.runs {
        let (l, s) = if n % 2 == 0 {
            let l = open(storage, &large).await?;
            (l, open(storage, &small).await?)
        } else {
            let s = open(storage, &small).await?;
            (open(storage, &large).await?, s)
        };
        let per_region = per_region(l, s, args);
        out!(
            "run {}:     {} regions: open {:.1} ms, heap {} | {} regions: open {:.1} ms, heap {} | per idle region {}",
            n + 1,
            args.regions,
            secs(l.time) * 1e3,
            bytes(l.heap),
            args.small_regions,
            secs(s.time) * 1e3,
            bytes(s.heap),
            per_region.map_or("unavailable".into(), |b| format!("{b:.0} B")),
        );
        runs.push((l, s, per_region));
    }
    let m = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f).collect());
    out!("medians over {} run(s):", runs.len());
    out!(
        "  open time: {:.1} ms with {} regions, {:.1} ms with {} ({:.2}x; {:.2} us per region)",
        m(&|r| secs(r.0.time) * 1e3),
        args.regions,
        m(&|r| secs(r.1.time) * 1e3),
        args.small_regions,
        m(&|r| secs(r.0.time) / secs(r.1.time)),
        m(&|r| (secs(r.0.time) - secs(r.1.time)) * 1e6)
            / (args.regions.saturating_sub(args.small_regions).max(1)) as f64,
    );
    if runs.iter().all(|r| r.2.is_some()) {
        out!(
            "  heap held: {:.1} MiB with {} regions, {:.1} MiB with {}: {:.0} bytes per idle region (target <= 256)",
            m(&|r| r.0.heap.unwrap_or(0) as f64) / f64::from(1u32 << 20),
            args.regions,
            m(&|r| r.1.heap.unwrap_or(0) as f64) / f64::from(1u32 << 20),
            args.small_regions,
            m(&|r| r.2.unwrap_or(0.0)),
        );
    } else {
        out!("  heap held: unavailable (needs glibc's mallinfo2)");
    }
    Ok(())
}

/// The bytes per region the large log's store holds beyond the small one's.
fn per_region(large: Opened, small: Opened, args: &RegionsArgs) -> Option<f64> {
    let extra = args
        .regions
        .checked_sub(args.small_regions)
        .filter(|n| *n > 0)?;
    Some((large.heap? - small.heap?) as f64 / extra as f64)
}

fn bytes(heap: Option<i64>) -> String {
    heap.map_or("unavailable".into(), |b| {
        format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20))
    })
}

/// A log of `objects` objects holding `regions` regions between them, one
/// entry of `payload` bytes per region (spread evenly; at least one entry
/// per object).
async fn build(
    storage: &Storage,
    prefix: &str,
    regions: u64,
    objects: u64,
    payload: u64,
) -> Result<(), CliError> {
    let started = Instant::now();
    let config = Config {
        max_batch_bytes: 1 << 30,
        max_unpersisted_bytes: 2 << 30,
        early_seals: objwal::EarlySeals::Unlimited,
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), prefix, config).await?;
    let data = Bytes::from(vec![0xa5; usize::try_from(payload).unwrap_or(usize::MAX)]);
    let per_object = regions.div_ceil(objects).max(1);
    for o in 0..objects {
        let first = (o * per_object) % regions;
        let own: Vec<_> = (0..per_object)
            .map(|i| ((first + i) % regions, data.clone()))
            .collect();
        wal.append(own).await?;
    }
    wal.stop().await?;
    out!(
        "built:     {prefix}: {regions} regions in {objects} objects, in {:.1} s",
        secs(started.elapsed())
    );
    Ok(())
}

/// Opens a writer on `prefix`, waits for its actor to answer, measures,
/// and stops it. The heap it held is what the heap shrinks by once the
/// stopped store's actor has ended and freed everything.
async fn open(storage: &Storage, prefix: &str) -> Result<Opened, CliError> {
    let started = Instant::now();
    let wal = Wal::open(storage.clone(), prefix, Config::default()).await?;
    // The actor has built its tables once it answers.
    wal.wait_durable(0, 0).await?;
    let time = started.elapsed();
    let open = heap_in_use();
    wal.stop().await?;
    drop(wal);
    let closed = settled_heap().await;
    Ok(Opened {
        time,
        heap: open.zip(closed).map(|(o, c)| o - c),
    })
}

/// The heap once it stopped shrinking: the actor of a stopped store ends
/// (and frees its tables) on its own task, after the last handle is gone.
/// Read every 20 ms until two readings agree, for at most 2 s.
async fn settled_heap() -> Option<i64> {
    let mut last = heap_in_use()?;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = heap_in_use()?;
        if now == last {
            return Some(now);
        }
        last = now;
    }
    Some(last)
}

/// Heap bytes in use: allocated chunks of every arena, and mapped blocks.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "glibc's heap statistics have no safe wrapper; mallinfo2 takes no argument and only reads them"
)]
fn heap_in_use() -> Option<i64> {
    // SAFETY: mallinfo2 takes nothing, returns a plain struct by value and
    // has no precondition (glibc >= 2.33).
    let info = unsafe { libc::mallinfo2() };
    i64::try_from(info.uordblks.saturating_add(info.hblkhd)).ok()
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<i64> {
    None
}
