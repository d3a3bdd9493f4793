//! `objwal bench-follow catch-up`: a follower that fell behind busy
//! writers, catching up (issue 31 item 1).
//!
//! Per run, `--writers` tasks append one entry of region 1 each, in a
//! loop, to one log on a fresh prefix whose creates wait `--latency`
//! (early seals unlimited, as on a self-hosted endpoint); a
//! follower (default settings) reads through the fault wrapper with
//! `--latency` on every read and listing. It keeps pace for `--warm`, then
//! its consumer looks away for `--pause` while the writers go on, then
//! takes entries again. Reported: the writers' object rate over the pause,
//! the follower's object rate while it drains the backlog it had when its
//! consumer came back (objects yielded until it reached the writers' tip
//! as it was then, over the time that took), their ratio (the issue's
//! target: at least 4), and the time until it reached the writers' tip of
//! the moment.
//!
//! With `--collect` the writers declare each entry obsolete right after it
//! is acknowledged (collection as aggressive as it gets): a follower that
//! looked away meets holes where collection deleted what it had not read.
//! `--hold` places a reader hold (rfcs/0011) before the follower's reader
//! opens and has the follower keep it: the holes it met are reported.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::{Config, EarlySeals, Follower, Wal, WalReader};
use tokio::time::Instant;

use super::{duration, median, ms, run_prefix};
use crate::store::clean;
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-follow catch-up`.
#[derive(Debug, clap::Args)]
pub struct CatchUpArgs {
    /// The store URL the log is written to (latency is injected above it).
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Latency of every create (the writers') and every read and listing
    /// (the follower's).
    #[arg(long, default_value = "30ms", value_parser = duration)]
    latency: Duration,
    /// Tasks appending in a loop.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    writers: u64,
    /// How long the follower keeps pace first.
    #[arg(long, default_value = "2s", value_parser = duration)]
    warm: Duration,
    /// How long its consumer looks away.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pause: Duration,
    /// The follower's `replay_concurrency` (its read-ahead's bound).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    replay_concurrency: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// The writers declare each entry obsolete once acknowledged.
    #[arg(long)]
    collect: bool,
    /// The follower keeps a reader hold placed before its reader opened.
    #[arg(long)]
    hold: bool,
}

/// One run's figures.
#[derive(Debug, Clone, Default)]
struct Measured {
    /// Objects the writers landed per second during the pause.
    writer_rate: f64,
    /// Objects behind when the consumer came back.
    backlog: u64,
    /// Objects the follower took in per second while draining the backlog.
    follower_rate: f64,
    /// From the consumer's return to reaching the writers' tip of the moment.
    caught_up: Duration,
    /// The follower's requests per object while draining.
    requests_per_object: f64,
    /// Holes the follower met (segments it could not yield).
    holes: usize,
}

fn failed(what: &'static str) -> impl Fn(objwal::Error) -> CliError {
    move |e| CliError::Failed(format!("{what}: {e}"))
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: CatchUpArgs) -> CliResult {
    let storage = crate::store::open(&args.store, true)?;
    let base = run_prefix(prefix, "catch-up");
    out!(
        "bench-follow catch-up: {:?} per create, read and listing; {} writers{}; the follower (replay_concurrency {}{}) keeps pace {:?}, looks away {:?}, then drains; {} run(s)",
        args.latency,
        args.writers,
        if args.collect { ", each entry obsolete once acknowledged" } else { "" },
        args.replay_concurrency,
        if args.hold { ", keeping a reader hold" } else { "" },
        args.warm,
        args.pause,
        args.runs
    );
    let mut runs = Vec::new();
    for n in 0..args.runs {
        let prefix = format!("{base}/{n}");
        let measured = measure(&storage, &prefix, &args).await;
        clean(&storage, &prefix).await;
        let m = measured?;
        out!(
            "run {n}: writers {:.1} objects/s; backlog {} objects drained at {:.1} objects/s ({:.2}x), {:.2} requests per object; at the writers' tip {:.0} ms after the return; {} holes",
            m.writer_rate,
            m.backlog,
            m.follower_rate,
            m.follower_rate / m.writer_rate.max(f64::MIN_POSITIVE),
            m.requests_per_object,
            ms(m.caught_up),
            m.holes
        );
        runs.push(m);
    }
    let pick = |f: &dyn Fn(&Measured) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    out!(
        "median: writers {:.1} objects/s, follower draining {:.1} objects/s: {:.2}x (target >= 4x); {:.2} requests per object; at the tip {:.0} ms after the return",
        pick(&|m| m.writer_rate),
        pick(&|m| m.follower_rate),
        pick(&|m| m.follower_rate / m.writer_rate.max(f64::MIN_POSITIVE)),
        pick(&|m| m.requests_per_object),
        pick(&|m| ms(m.caught_up))
    );
    out!(
        "holes met: {} in all runs",
        runs.iter().map(|m| m.holes).sum::<usize>()
    );
    Ok(())
}

/// Takes entries until the follower yields one of an object at or above
/// `sequence` (or `until` passes): the newest sequence yielded and the
/// distinct objects seen.
async fn drain_to(
    follower: &mut Follower,
    sequence: u64,
    until: Instant,
    newest: &mut u64,
) -> Result<u64, CliError> {
    let mut objects = 0;
    while *newest < sequence {
        let item = match tokio::time::timeout_at(until, follower.next()).await {
            Ok(Some(item)) => item,
            Ok(None) => return Err(CliError::Failed("the follower ended".into())),
            Err(_) => break,
        };
        let entry = item.map_err(failed("following"))?;
        let s = objwal::format::sequence_of(entry.id);
        if s > *newest {
            objects += 1;
            *newest = s;
        }
    }
    Ok(objects)
}

async fn measure(
    storage: &objwal::Storage,
    prefix: &str,
    args: &CatchUpArgs,
) -> Result<Measured, CliError> {
    let writer_store = FaultyStorage::new(storage.clone());
    writer_store.set_latency(Op::Create, args.latency);
    // Early seals unlimited, as on a self-hosted endpoint (the issue's
    // trial): the writers land about one object per create round trip.
    let config = Config {
        early_seals: EarlySeals::Unlimited,
        ..crate::store::base()
    };
    let wal = Wal::open(writer_store.storage(), prefix, config)
        .await
        .map_err(failed("opening the writer"))?;
    let start = wal
        .append(vec![(1, Bytes::from_static(b"start"))])
        .await
        .map_err(failed("appending"))?[0];
    let faulty = FaultyStorage::new(storage.clone());
    for op in [Op::Read, Op::List] {
        faulty.set_latency(op, args.latency);
    }
    let follower_config = Config {
        replay_concurrency: usize::try_from(args.replay_concurrency).unwrap_or(16),
        ..Config::default()
    };
    // Placed before the reader opens: nothing that open finds can go
    // before the follower reads it (rfcs/0011).
    let hold = if args.hold {
        let ttl = Duration::from_secs(60);
        Some(
            objwal::Hold::place(storage.clone(), prefix, &follower_config, "bench", ttl, 0)
                .await
                .map_err(failed("placing the hold"))?,
        )
    } else {
        None
    };
    let reader = WalReader::open(faulty.storage(), prefix, follower_config)
        .await
        .map_err(failed("opening the reader"))?;
    let mut follower = reader.follow([(1, start)]);
    if let Some(hold) = hold {
        follower.keep_hold(hold);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tip = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..args.writers {
        let (wal, stop, tip) = (wal.clone(), stop.clone(), tip.clone());
        let collect = args.collect;
        writers.push(tokio::spawn(async move {
            let payload = Bytes::from(vec![b'x'; 100]);
            while !stop.load(Ordering::Relaxed) {
                let ids = wal.append(vec![(1, payload.clone())]).await?;
                tip.fetch_max(objwal::format::sequence_of(ids[0]), Ordering::Relaxed);
                if collect {
                    wal.obsolete(1, ids[0]).await?;
                }
            }
            Ok::<(), objwal::Error>(())
        }));
    }
    // Keep pace.
    let mut newest = 0;
    let warm_end = Instant::now() + args.warm;
    drain_to(&mut follower, u64::MAX, warm_end, &mut newest).await?;
    // Look away.
    let landed_before = writer_store.counts().create.requests;
    tokio::time::sleep(args.pause).await;
    let landed = writer_store.counts().create.requests - landed_before;
    let writer_rate = landed as f64 / args.pause.as_secs_f64();
    // Drain the backlog of the moment, then reach the tip of the moment.
    let target = tip.load(Ordering::Relaxed);
    let backlog = target.saturating_sub(newest);
    faulty.reset_counts();
    let back = Instant::now();
    let deadline = back + Duration::from_secs(120);
    let drained = drain_to(&mut follower, target, deadline, &mut newest).await?;
    let drain_time = back.elapsed();
    let counts = faulty.counts();
    let mut caught_up = drain_time;
    loop {
        let now_tip = tip.load(Ordering::Relaxed);
        if newest >= now_tip || Instant::now() >= deadline {
            break;
        }
        drain_to(&mut follower, now_tip, deadline, &mut newest).await?;
        caught_up = back.elapsed();
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await
            .map_err(|e| CliError::Failed(format!("a writer task: {e}")))?
            .map_err(failed("appending"))?;
    }
    wal.stop().await.map_err(failed("stopping the writer"))?;
    let holes = follower.holes(1).len();
    if let Some(hold) = follower.take_hold().await {
        hold.release().await.map_err(failed("releasing the hold"))?;
    }
    if newest < target {
        return Err(CliError::Failed(format!(
            "the follower did not drain its backlog of {backlog} objects within 120 s"
        )));
    }
    Ok(Measured {
        writer_rate,
        backlog,
        follower_rate: drained as f64 / drain_time.as_secs_f64().max(1e-9),
        caught_up,
        requests_per_object: (counts.read.requests + counts.list.requests) as f64
            / drained.max(1) as f64,
        holes,
    })
}
