//! `objwal bench-follow idle`: what a follower of a log nobody writes
//! costs.
//!
//! Per run, a writer on a fresh prefix appends one entry and then stays
//! idle; a follower with the default settings (`follow_interval` 100 ms,
//! `follow_max_interval` 1 s) reads through the fault wrapper (`--latency`
//! per read and listing). Once the log has been quiet for `--warmup` (the
//! waits have grown to the cap), the follower's requests are counted for
//! `--seconds`: reads (one GET each: polls of the next key, and every
//! other one a look at the place) and listings (the idle checks), per
//! minute and, scaled, per hour. The schedule's listings are not uniform
//! (after 10 s of quiet, 20 s, 40 s, ... then hourly): an hour holds 9 of
//! them, as the integration test counts under a virtual clock.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::{Config, Wal, WalReader};

use super::{duration, median, run_prefix};
use crate::store::clean;
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-follow idle`.
#[derive(Debug, clap::Args)]
pub struct IdleArgs {
    /// The store URL the log is written to (latency is injected above it).
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Latency of every read and listing of the follower.
    #[arg(long, default_value = "30ms", value_parser = duration)]
    latency: Duration,
    /// Quiet time before the counted window.
    #[arg(long, default_value = "5s", value_parser = duration)]
    warmup: Duration,
    /// Seconds counted per run.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    seconds: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: IdleArgs) -> CliResult {
    let storage = crate::store::open(&args.store, true)?;
    let base = run_prefix(prefix, "idle");
    out!(
        "bench-follow idle: a follower of a quiet log, {:?} per read and listing, counted for {} s after {:?} of quiet; {} run(s)",
        args.latency, args.seconds, args.warmup, args.runs
    );
    let mut per_hour = Vec::new();
    for n in 0..args.runs {
        let prefix = format!("{base}/{n}");
        let counted = measure(&storage, &prefix, &args).await;
        clean(&storage, &prefix).await;
        let (reads, lists) = counted?;
        let scale = 3600.0 / args.seconds as f64;
        let hour = (reads + lists) as f64 * scale;
        out!(
            "run {n}: {reads} reads (polls and looks at the place) and {lists} listings in {} s: {:.2} requests per second, {hour:.0} per hour",
            args.seconds,
            (reads + lists) as f64 / args.seconds as f64
        );
        per_hour.push(hour);
    }
    out!(
        "idle: {:.0} requests per hour (median; target: at most one per poll interval, 3,600 at the 1 s cap), of which listings: 9 in the first quiet hour, then 1 per hour",
        median(&per_hour)
    );
    Ok(())
}

async fn measure(
    storage: &objwal::Storage,
    prefix: &str,
    args: &IdleArgs,
) -> Result<(u64, u64), CliError> {
    let failed = |e: objwal::Error| CliError::Failed(e.to_string());
    let wal = Wal::open(storage.clone(), prefix, crate::store::base())
        .await
        .map_err(failed)?;
    wal.append(vec![(1, Bytes::from_static(b"only"))])
        .await
        .map_err(failed)?;
    let faulty = FaultyStorage::new(storage.clone());
    for op in [Op::Read, Op::List] {
        faulty.set_latency(op, args.latency);
    }
    let reader = WalReader::open(faulty.storage(), prefix, Config::default())
        .await
        .map_err(failed)?;
    let mut follower = reader.follow([(1, 0)]);
    match follower.next().await {
        Some(Ok(_)) => {}
        other => {
            return Err(CliError::Failed(format!(
                "the follower did not yield the entry: {other:?}"
            )))
        }
    }
    let consumer = tokio::spawn(async move { while follower.next().await.is_some() {} });
    tokio::time::sleep(args.warmup).await;
    faulty.reset_counts();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let counts = faulty.counts();
    consumer.abort();
    wal.stop().await.map_err(failed)?;
    Ok((counts.read.requests, counts.list.requests))
}
