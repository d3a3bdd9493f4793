//! `objwal bench-follow handoff`: the pause of a region's handoff, with and
//! without following.
//!
//! Node A's log holds region R's `--entries` unflushed entries (of
//! `--payload` bytes) over `--objects` objects, each also holding one
//! entry of `--regions` other regions (a busy node's log). A stays open.
//! Every read and listing of A's prefix by node B, and every create of
//! either node, waits `--latency` (the fault wrapper). Per run, in
//! alternating order, on a fresh prefix for B:
//! - import: A appends a last `--tail` entries of R; the pause starts (A
//!   stops writing R) and holds A's `flush()`, B's `WalReader::open` of A's
//!   prefix and `import_region` of R;
//! - following: B's `take_over` of R started before and caught up (its
//!   warm-up is reported, not part of the pause); A appends the same tail;
//!   the pause starts and holds A's `flush()` and `Takeover::finish`.
//!
//! Reported: both pauses (medians), their ratio within each run (median),
//! and the requests B made of A's prefix during each pause (its reads of
//! A's prefix go through a wrapper of their own, apart from B's own log).

use std::time::{Duration, Instant};

use bytes::Bytes;
use objwal::storage::fault::{Counts, FaultyStorage, Op};
use objwal::{Config, Imported, Storage, Wal, WalReader};

use super::{duration, median, ms, run_prefix, slow};
use crate::store::clean;
use crate::{CliError, CliResult};

/// The region that moves.
const R: u64 = 7;

/// Arguments of `objwal bench-follow handoff`.
#[derive(Debug, clap::Args)]
pub struct HandoffArgs {
    /// The store URL both logs live on (latency is injected above it).
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Unflushed entries of the region that moves.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    entries: u64,
    /// Objects of A's log holding them.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    objects: u64,
    /// Bytes per entry.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    payload: u32,
    /// Other regions of A, one entry each per object.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    regions: u64,
    /// Entries of the region A appends just before the switch.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    tail: u64,
    /// Latency of every create, read and listing.
    #[arg(long, default_value = "30ms", value_parser = duration)]
    latency: Duration,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

fn failed(what: &'static str) -> impl Fn(objwal::Error) -> CliError {
    move |e| CliError::Failed(format!("{what}: {e}"))
}

/// One pause.
#[derive(Debug, Clone, Copy)]
struct Pause {
    time: Duration,
    /// Of which A's `flush()`.
    flush: Duration,
    reads: u64,
    lists: u64,
    entries: u64,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: HandoffArgs) -> CliResult {
    let storage = crate::store::open(&args.store, true)?;
    let base = run_prefix(prefix, "handoff");
    let result = measure(&storage, &base, &args).await;
    clean(&storage, &base).await;
    result
}

async fn measure(storage: &Storage, base: &str, args: &HandoffArgs) -> CliResult {
    out!(
        "bench-follow handoff: region of {} unflushed entries of {} B over {} objects (+{} other regions), {:?} per create, read and listing, a tail of {}; {} run(s)",
        args.entries, args.payload, args.objects, args.regions, args.latency, args.tail, args.runs
    );
    // A's store: no latency while its log is built.
    let a_store = FaultyStorage::new(storage.clone());
    let a_prefix = format!("{base}/a");
    let a = Wal::open(a_store.storage(), &a_prefix, crate::store::base())
        .await
        .map_err(failed("opening node A"))?;
    let built = Instant::now();
    let payload = Bytes::from(vec![b'r'; args.payload as usize]);
    let per_object = args.entries.div_ceil(args.objects);
    let mut left = args.entries;
    while left > 0 {
        let n = left.min(per_object);
        left -= n;
        let mut entries: Vec<(u64, Bytes)> = (0..n).map(|_| (R, payload.clone())).collect();
        entries.extend((0..args.regions).map(|r| (100 + r, Bytes::from_static(b"other"))));
        a.append(entries)
            .await
            .map_err(failed("building node A's log"))?;
    }
    out!(
        "built:     node A's log in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    a_store.set_latency(Op::Create, args.latency);
    let mut import = Vec::new();
    let mut follow = Vec::new();
    let mut ratios = Vec::new();
    for n in 0..args.runs {
        let import_first = n % 2 == 0;
        let mut pair = [None, None];
        for following in if import_first {
            [false, true]
        } else {
            [true, false]
        } {
            let b_prefix = format!(
                "{base}/b-{n}-{}",
                if following { "follow" } else { "import" }
            );
            let pause = if following {
                by_following(storage, &a, &a_prefix, &b_prefix, args).await?
            } else {
                by_import(storage, &a, &a_prefix, &b_prefix, args).await?
            };
            out!(
                "run {n} {:<9}: pause {:>8.1} ms (A's flush {:.1} ms), {} entries moved; B read A's prefix {} times and listed it {} times during the pause",
                if following { "following" } else { "import" },
                ms(pause.time),
                ms(pause.flush),
                pause.entries,
                pause.reads,
                pause.lists
            );
            pair[usize::from(following)] = Some(pause);
        }
        if let [Some(i), Some(f)] = pair {
            ratios.push(i.time.as_secs_f64() / f.time.as_secs_f64().max(1e-9));
            import.push(ms(i.time));
            follow.push(ms(f.time));
        }
    }
    out!(
        "handoff: pause {:.1} ms with import_region, {:.1} ms by following (medians): following is {:.1}x shorter (median of the runs' ratios; target >= 10x)",
        median(&import),
        median(&follow),
        median(&ratios)
    );
    a.stop().await.map_err(failed("stopping node A"))?;
    Ok(())
}

/// A appends the tail of R (it still writes R until the switch).
async fn tail(a: &Wal, args: &HandoffArgs) -> Result<(), CliError> {
    let payload = Bytes::from(vec![b't'; args.payload as usize]);
    let entries = (0..args.tail).map(|_| (R, payload.clone())).collect();
    a.append(entries).await.map_err(failed("node A appends"))?;
    Ok(())
}

fn pause(
    started: Instant,
    flush: Duration,
    before: Counts,
    after: Counts,
    moved: &Imported,
) -> Pause {
    Pause {
        time: started.elapsed(),
        flush,
        reads: after.read.requests - before.read.requests,
        lists: after.list.requests - before.list.requests,
        entries: moved.entries,
    }
}

async fn by_import(
    storage: &Storage,
    a: &Wal,
    a_prefix: &str,
    b_prefix: &str,
    args: &HandoffArgs,
) -> Result<Pause, CliError> {
    let (seen, b_store) = (slow(storage, args.latency), slow(storage, args.latency));
    let b = Wal::open(b_store.storage(), b_prefix, crate::store::base())
        .await
        .map_err(failed("opening node B"))?;
    tail(a, args).await?;
    let before = seen.counts();
    let started = Instant::now();
    a.flush().await.map_err(failed("node A flush"))?;
    let flush = started.elapsed();
    let reader = WalReader::open(seen.storage(), a_prefix, Config::default())
        .await
        .map_err(failed("reading node A's log"))?;
    let moved = b
        .import_region(&reader, R, 1)
        .await
        .map_err(failed("node B imports"))?;
    let measured = pause(started, flush, before, seen.counts(), &moved);
    b.stop().await.map_err(failed("stopping node B"))?;
    Ok(measured)
}

async fn by_following(
    storage: &Storage,
    a: &Wal,
    a_prefix: &str,
    b_prefix: &str,
    args: &HandoffArgs,
) -> Result<Pause, CliError> {
    let (seen, b_store) = (slow(storage, args.latency), slow(storage, args.latency));
    let b = Wal::open(b_store.storage(), b_prefix, crate::store::base())
        .await
        .map_err(failed("opening node B"))?;
    let warm = Instant::now();
    let reader = WalReader::open(seen.storage(), a_prefix, Config::default())
        .await
        .map_err(failed("reading node A's log"))?;
    let takeover = b
        .take_over(&reader, R, 1)
        .map_err(failed("node B takes over"))?;
    let last = a.latest_entry_id(R);
    while takeover.progress().position < last {
        if warm.elapsed() > Duration::from_secs(600) {
            return Err(CliError::Failed(format!(
                "node B's follower did not catch up within 10 minutes: {:?}",
                takeover.progress()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let progress = takeover.progress();
    out!(
        "           following: caught up in {:.1} s (open and backfill), holding {} entries, {:.1} MiB",
        warm.elapsed().as_secs_f64(),
        progress.entries,
        progress.bytes as f64 / (1 << 20) as f64
    );
    tail(a, args).await?;
    let before = seen.counts();
    let started = Instant::now();
    a.flush().await.map_err(failed("node A flush"))?;
    let flush = started.elapsed();
    let moved = takeover.finish().await.map_err(failed("node B finishes"))?;
    let measured = pause(started, flush, before, seen.counts(), &moved);
    b.stop().await.map_err(failed("stopping node B"))?;
    Ok(measured)
}
