//! `objwal bench-replay released`: what the releases ever made cost an
//! open (issue 30 item 3, rfcs/0005 "A release is forever").
//!
//! Builds two logs alike but for their releases: in each, `--released`
//! regions get one small entry; in the first they are then released, in
//! the second their entries are made obsolete instead, and in both a kept
//! region is written and flushed until collection deleted every object
//! below its entry (so every release record is gone and only the markers
//! under `released/` remember the releases). Per run, in alternating
//! order, a writer opens each (`Wal::open`, until its actor answers) and a
//! reader opens each (`WalReader::open`); the difference is what the
//! markers cost: one more listing, a page per 1,000 markers on S3.

use std::time::{Duration, Instant};

use bytes::Bytes;
use objwal::{Config, ObjectStorage, Storage, Wal, WalReader};

use super::{median, on_scratch_store, secs};
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-replay released`.
#[derive(Debug, clap::Args)]
pub struct ReleasedArgs {
    /// The store URL (default: a fresh directory under the temp directory).
    #[arg(long)]
    store: Option<String>,
    /// Regions released in the first log (obsolete in the second).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    released: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

/// The region every log keeps writing: its entries carry the boundary.
const KEPT: u64 = u64::MAX - 1024;

/// Runs the scenario.
pub async fn run(prefix: &str, args: ReleasedArgs) -> CliResult {
    on_scratch_store(
        args.store.as_deref(),
        prefix,
        "released",
        async |storage, url, prefix| measure(storage, url, prefix, &args).await,
    )
    .await
}

async fn measure(storage: &Storage, url: &str, prefix: &str, args: &ReleasedArgs) -> CliResult {
    out!(
        "bench-replay released: the open of a log with {} released regions (records collected) vs the same log without releases, {} run(s)",
        args.released,
        args.runs
    );
    out!("store:     {url} (prefix {prefix})");
    let with = format!("{prefix}/released");
    let without = format!("{prefix}/obsolete");
    build(storage, &with, args.released, true).await?;
    build(storage, &without, args.released, false).await?;
    let mut runs: Vec<[Duration; 4]> = Vec::new();
    for n in 0..args.runs {
        let order = if n % 2 == 0 {
            [&with, &without]
        } else {
            [&without, &with]
        };
        let mut times = std::collections::BTreeMap::new();
        for log in order {
            times.insert(
                log.as_str(),
                (
                    open_writer(storage, log).await?,
                    open_reader(storage, log).await?,
                ),
            );
        }
        let (w, r) = times[with.as_str()];
        let (w0, r0) = times[without.as_str()];
        out!(
            "run {}:     Wal::open {:.1} ms vs {:.1} ms | WalReader::open {:.1} ms vs {:.1} ms",
            n + 1,
            secs(w) * 1e3,
            secs(w0) * 1e3,
            secs(r) * 1e3,
            secs(r0) * 1e3,
        );
        runs.push([w, w0, r, r0]);
    }
    let m = |i: usize| median(runs.iter().map(|r| secs(r[i]) * 1e3).collect());
    out!("medians over {} run(s):", runs.len());
    out!(
        "  Wal::open:       {:.1} ms with {} released regions, {:.1} ms without ({:+.1} ms)",
        m(0),
        args.released,
        m(1),
        m(0) - m(1)
    );
    out!(
        "  WalReader::open: {:.1} ms with {} released regions, {:.1} ms without ({:+.1} ms)",
        m(2),
        args.released,
        m(3),
        m(2) - m(3)
    );
    Ok(())
}

/// A log whose `regions` regions each got one entry and were then released
/// (`release`) or made obsolete, collected until nothing below the kept
/// region's newest entry is left.
async fn build(
    storage: &Storage,
    prefix: &str,
    regions: u64,
    release: bool,
) -> Result<(), CliError> {
    let started = Instant::now();
    let config = Config {
        early_seals: objwal::EarlySeals::Unlimited,
        flush_interval: Duration::from_millis(20),
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), prefix, config).await?;
    let data = Bytes::from_static(b"0123456789abcdef");
    let ids = wal
        .append((0..regions).map(|r| (r, data.clone())).collect())
        .await?;
    if release {
        for chunk in (0..regions).collect::<Vec<_>>().chunks(256) {
            let calls: Vec<_> = chunk
                .iter()
                .map(|&r| {
                    let wal = wal.clone();
                    tokio::spawn(async move { wal.release_region(r).await })
                })
                .collect();
            for call in calls {
                call.await
                    .map_err(|e| CliError::Failed(format!("a release task: {e}")))??;
            }
        }
    } else {
        for (region, id) in (0..regions).zip(ids) {
            wal.obsolete(region, id).await?;
        }
    }
    // The kept region carries the boundary past every earlier object:
    // written and flushed until no object at or below the last one with
    // the regions' entries or records is left.
    let keys =
        objwal::storage::keys::Prefix::new(prefix).map_err(|e| CliError::Failed(e.to_string()))?;
    let sequences = async || -> Result<Vec<u64>, CliError> {
        Ok(storage
            .list(&keys.objects_prefix())
            .await
            .map_err(|source| objwal::Error::Storage { source })?
            .iter()
            .filter_map(|m| keys.parse_object_key(&m.key))
            .collect())
    };
    let written = sequences().await?.into_iter().max().unwrap_or(0);
    for _ in 0..500 {
        let id = wal.append(vec![(KEPT, data.clone())]).await?[0];
        wal.obsolete(KEPT, id).await?;
        wal.flush().await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A listing that fails (a test server under the collection's
        // deletes) is asked again.
        if sequences()
            .await
            .is_ok_and(|s| s.iter().all(|&s| s > written))
        {
            break;
        }
    }
    wal.stop().await?;
    out!(
        "built:     {prefix}: {regions} regions {}, in {:.1} s",
        if release { "released" } else { "obsolete" },
        secs(started.elapsed())
    );
    Ok(())
}

/// A writer's open, until its actor answers; then it is stopped.
async fn open_writer(storage: &Storage, prefix: &str) -> Result<Duration, CliError> {
    let started = Instant::now();
    let wal = Wal::open(storage.clone(), prefix, Config::default()).await?;
    wal.wait_durable(0, 0).await?;
    let time = started.elapsed();
    wal.stop().await?;
    Ok(time)
}

/// A reader's open.
async fn open_reader(storage: &Storage, prefix: &str) -> Result<Duration, CliError> {
    let started = Instant::now();
    let reader = WalReader::open(storage.clone(), prefix, Config::default()).await?;
    let time = started.elapsed();
    drop(reader);
    Ok(time)
}
