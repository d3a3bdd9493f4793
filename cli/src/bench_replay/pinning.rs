//! `objwal bench-replay pinning`: one cold region among hot ones.
//!
//! The engine appends one entry to every hot region per object and
//! flushes every hot region every `--flush-every` objects (obsolete
//! through its latest id); the cold region gets one entry every
//! `--cold-every` objects and is never flushed on its own. Two variants,
//! interleaved per run: without flush requests (`max_pinned_objects = 0`:
//! the cold region holds every object since its oldest entry), and with
//! `max_pinned_objects = --bound` and an engine task that answers every
//! flush request by flushing the region (obsolete through the id asked).
//! The objects the prefix holds are counted by listing it after every
//! object (the truth, whatever the catalog says).

use std::time::Instant;

use futures::StreamExt;
use objwal::{Config, EntryId, ObjectStorage, RegionId, Storage, Wal};

use super::{median, run_prefix, secs};
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-replay pinning`.
#[derive(Debug, clap::Args)]
pub struct PinningArgs {
    /// The store URL.
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Objects written per variant.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    objects: u32,
    /// Hot regions (region 0 is the cold one).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    hot: u64,
    /// The engine flushes its hot regions every this many objects.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    flush_every: u32,
    /// The cold region gets an entry every this many objects.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    cold_every: u32,
    /// `max_pinned_objects` of the variant with flush requests.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    bound: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

/// One variant's figures.
#[derive(Debug, Clone, Copy)]
struct Held {
    most: usize,
    last: usize,
    requests: u64,
}

const COLD: RegionId = 0;

/// Runs the scenario.
pub async fn run(prefix: &str, args: PinningArgs) -> CliResult {
    let storage = crate::store::open(&args.store, true)?;
    let prefix = run_prefix(prefix, "pinning");
    out!(
        "bench-replay pinning: 1 cold region (an entry every {} objects) and {} hot ones (flushed every {} objects), {} objects, bound {}, {} run(s)",
        args.cold_every, args.hot, args.flush_every, args.objects, args.bound, args.runs
    );
    out!("store:     {} (prefix {prefix})", args.store);
    let mut runs = Vec::new();
    for n in 0..args.runs {
        let order = if n % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut got = [None, None];
        for asked in order {
            let variant = format!(
                "{prefix}/r{n}-{}",
                if asked { "asked" } else { "not-asked" }
            );
            let held = variant_run(&storage, &variant, &args, asked).await;
            crate::store::clean(&storage, &variant).await;
            got[usize::from(asked)] = Some(held?);
        }
        let [Some(without), Some(with)] = got else {
            return Err(CliError::Failed("a variant went missing".into()));
        };
        out!(
            "run {}:     without requests: at most {} objects held ({} at the end) | with: at most {} ({} at the end), {} flush requests answered",
            n + 1, without.most, without.last, with.most, with.last, with.requests
        );
        runs.push((without, with));
    }
    let m = |f: &dyn Fn(&(Held, Held)) -> f64| median(runs.iter().map(f).collect());
    out!("medians over {} run(s):", runs.len());
    out!(
        "  without flush requests: at most {:.0} objects held (grows with the run: {} objects written)",
        m(&|r| r.0.most as f64),
        args.objects
    );
    out!(
        "  with a bound of {}:     at most {:.0} objects held (target < {} + {} = bound + one flush interval), {:.0} requests",
        args.bound,
        m(&|r| r.1.most as f64),
        args.bound,
        args.flush_every,
        m(&|r| r.1.requests as f64)
    );
    Ok(())
}

async fn variant_run(
    storage: &Storage,
    prefix: &str,
    args: &PinningArgs,
    asked: bool,
) -> Result<Held, CliError> {
    let started = Instant::now();
    let config = Config {
        max_pinned_objects: if asked { args.bound } else { 0 },
        early_seals: objwal::EarlySeals::Unlimited,
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), prefix, config).await?;
    // The engine's flush task: a flush request makes it flush the region.
    let engine = wal.clone();
    let answering = tokio::spawn(async move {
        let mut requests = Box::pin(engine.flush_requests());
        let mut answered = 0u64;
        while let Some(request) = requests.next().await {
            if engine
                .obsolete(request.region, request.through)
                .await
                .is_err()
            {
                break;
            }
            answered += 1;
        }
        answered
    });
    let listing = format!("{prefix}/objects/");
    let (mut most, mut last) = (0, 0);
    for n in 0..args.objects {
        let mut entries: Vec<(RegionId, bytes::Bytes)> =
            (1..=args.hot).map(|r| (r, "hot".into())).collect();
        if n % args.cold_every == 0 {
            entries.push((COLD, "cold".into()));
        }
        let ids: Vec<EntryId> = wal.append(entries).await?;
        if (n + 1) % args.flush_every == 0 {
            for (r, id) in (1..=args.hot).zip(&ids) {
                wal.obsolete(r, *id).await?;
            }
        }
        last = storage.list(&listing).await?.len();
        most = most.max(last);
    }
    wal.stop().await?;
    let requests = answering.await.unwrap_or(0);
    if !asked && requests > 0 {
        return Err(CliError::Failed(format!(
            "{requests} flush requests without a bound"
        )));
    }
    tracing::debug!(
        prefix,
        seconds = secs(started.elapsed()),
        "pinning variant done"
    );
    Ok(Held {
        most,
        last,
        requests,
    })
}
