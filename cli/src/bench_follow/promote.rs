//! `objwal bench-follow promote`: a standby promoted, against a bare open
//! of the same prefix (issue 31 item 5).
//!
//! Per run, on a fresh prefix, a primary `Wal` (durable acks) takes
//! `--writers` tasks appending one entry each, in a loop, cycling over
//! `--regions` regions, for `--seconds` (early seals unlimited, as
//! `catch-up`); every `--flush-every` each region
//! is marked obsolete up to the id it had one tick before (an engine's
//! flush, so collection runs). Its creates wait `--latency`. A standby
//! follows every region (`WalReader::follow`, default settings, reading
//! through a store with `--latency` on every read and listing) and keeps
//! pace. Then the decision: the primary dies (its creates and deletes
//! never answer from then on, its handles are dropped without a stop), and
//! the standby keeps its follower's positions. The prefix as the primary
//! left it is copied three times, and on each copy, in an order that
//! rotates from run to run, through a store with `--latency` on every
//! create, read and listing, from the decision to the first append
//! acknowledged:
//! - promote: `Wal::open` (default configuration, durable acks), then
//!   `read(region, position + 1)` of every followed region to its end (the
//!   regions concurrently), then one append;
//! - bare: `Wal::open`, then one append (no reads);
//! - cold: `Wal::open`, then `read(region, 0)` of every region (a standby
//!   that kept nothing: a replay of every unflushed entry), then one
//!   append.
//!
//! Reported per run and as medians: the three pauses, in ms and in round
//! trips (pause / latency), the ratios promote / bare and cold / bare
//! within each run (then their medians), the entries each read and the
//! requests each made. Each promoted standby and cold standby is checked
//! to hold every entry the primary acknowledged (read, below its position,
//! or obsolete), so nothing acknowledged is lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::{Counts, FaultyStorage, Op};
use objwal::{
    AckMode, Config, EarlySeals, EntryId, ObjectStorage, RegionId, Storage, Wal, WalReader,
};
use tokio::time::Instant;

use super::{duration, median, ms, run_prefix, slow};
use crate::store::clean;
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-follow promote`.
#[derive(Debug, clap::Args)]
pub struct PromoteArgs {
    /// The store URL the log is written to (latency is injected above it).
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Latency of every create, read and listing.
    #[arg(long, default_value = "30ms", value_parser = duration)]
    latency: Duration,
    /// Tasks of the primary appending in a loop.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    writers: u64,
    /// Regions the writers cycle over (all followed by the standby).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    regions: u64,
    /// How long the primary runs before the decision.
    #[arg(long, default_value = "3s", value_parser = duration)]
    seconds: Duration,
    /// Every this long each region is marked obsolete up to the id it had
    /// one tick before.
    #[arg(long, default_value = "500ms", value_parser = duration)]
    flush_every: Duration,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
}

fn failed(what: &'static str) -> impl Fn(objwal::Error) -> CliError {
    move |e| CliError::Failed(format!("{what}: {e}"))
}

/// The three ways to become the writer of the dead primary's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// The standby: open, read above its positions, append.
    Promote,
    /// Open, append.
    Bare,
    /// A standby that kept nothing: open, read every region from 0, append.
    Cold,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Promote, Variant::Bare, Variant::Cold];

    fn name(self) -> &'static str {
        match self {
            Variant::Promote => "promote",
            Variant::Bare => "bare",
            Variant::Cold => "cold",
        }
    }
}

/// The prefix as the primary left it, and what the standby knew.
#[derive(Debug)]
struct Decision {
    /// The follower's positions at the decision.
    positions: Vec<(RegionId, EntryId)>,
    /// Per region, the largest id the primary acknowledged.
    acknowledged: BTreeMap<RegionId, EntryId>,
    /// Objects under the prefix.
    objects: usize,
    /// Entries the follower yielded.
    followed: u64,
    /// Objects the follower knew had landed and had not yielded.
    behind: u64,
}

/// One variant's pause.
#[derive(Debug, Clone, Copy)]
struct Pause {
    /// From the decision to the first append acknowledged.
    time: Duration,
    /// Of which the open.
    open: Duration,
    /// Of which the reads.
    reads: Duration,
    /// Entries read.
    entries: u64,
    /// Requests made during the pause.
    counts: Counts,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: PromoteArgs) -> CliResult {
    let storage = crate::store::open(&args.store, true)?;
    let base = run_prefix(prefix, "promote");
    out!(
        "bench-follow promote: {:?} per create, read and listing; {} writers over {} regions for {:?}, each region flushed every {:?} to where it stood a tick before; a follower of every region keeps pace; {} run(s)",
        args.latency, args.writers, args.regions, args.seconds, args.flush_every, args.runs
    );
    let mut pauses: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut promote_ratios = Vec::new();
    let mut cold_ratios = Vec::new();
    for n in 0..args.runs {
        let prefix = format!("{base}/{n}");
        let measured = measure_run(&storage, &prefix, n, &args).await;
        clean(&storage, &prefix).await;
        let run = measured?;
        let time = |v: Variant| run.get(&v.name()).map_or(0.0, |p| p.time.as_secs_f64());
        let bare = time(Variant::Bare).max(1e-9);
        promote_ratios.push(time(Variant::Promote) / bare);
        cold_ratios.push(time(Variant::Cold) / bare);
        out!(
            "run {n}: promote / bare {:.2}, cold / bare {:.2}",
            time(Variant::Promote) / bare,
            time(Variant::Cold) / bare
        );
        for (name, pause) in run {
            pauses.entry(name).or_default().push(ms(pause.time));
        }
    }
    let trips = |ms: f64| ms / super::ms(args.latency).max(1e-9);
    let of = |v: Variant| median(pauses.get(v.name()).map_or(&[][..], Vec::as_slice));
    out!(
        "median pause: promote {:.0} ms ({:.1} round trips), bare open {:.0} ms ({:.1}), cold standby {:.0} ms ({:.1}); promote / bare {:.2}x, cold / bare {:.2}x (medians of the runs' ratios)",
        of(Variant::Promote),
        trips(of(Variant::Promote)),
        of(Variant::Bare),
        trips(of(Variant::Bare)),
        of(Variant::Cold),
        trips(of(Variant::Cold)),
        median(&promote_ratios),
        median(&cold_ratios)
    );
    Ok(())
}

/// One run: the primary and its standby, the decision, then the three
/// variants on copies of the prefix.
async fn measure_run(
    storage: &Storage,
    base: &str,
    n: u32,
    args: &PromoteArgs,
) -> Result<BTreeMap<&'static str, Pause>, CliError> {
    let primary = format!("{base}/primary");
    let decision = run_primary(storage, &primary, args).await?;
    out!(
        "run {n}: at the decision {} objects under the prefix; the follower had yielded {} entries and knew of {} objects it had not",
        decision.objects,
        decision.followed,
        decision.behind
    );
    for v in Variant::ALL {
        copy_prefix(storage, &primary, &format!("{base}/{}", v.name())).await?;
    }
    let mut run = BTreeMap::new();
    let order = Variant::ALL.len();
    for i in 0..order {
        let v = Variant::ALL[(i + n as usize) % order];
        let prefix = format!("{base}/{}", v.name());
        let pause = become_writer(storage, &prefix, v, &decision, args).await?;
        out!(
            "run {n} {:<7}: pause {:>6.0} ms = {:>5.1} round trips (open {:.0} ms, reads {:.0} ms); {} entries read; {} reads, {} listings, {} creates",
            v.name(),
            ms(pause.time),
            pause.time.as_secs_f64() / args.latency.as_secs_f64().max(1e-9),
            ms(pause.open),
            ms(pause.reads),
            pause.entries,
            pause.counts.read.requests,
            pause.counts.list.requests,
            pause.counts.create.requests
        );
        run.insert(v.name(), pause);
    }
    Ok(run)
}

/// The configuration of every writer here: the base, durable acks.
fn config() -> Config {
    Config {
        ack_mode: AckMode::Durable,
        ..crate::store::base()
    }
}

/// Runs the primary and its standby for `--seconds`, then kills the
/// primary: from the decision on, nothing it starts lands.
async fn run_primary(
    storage: &Storage,
    prefix: &str,
    args: &PromoteArgs,
) -> Result<Decision, CliError> {
    let primary_store = FaultyStorage::new(storage.clone());
    primary_store.set_latency(Op::Create, args.latency);
    // Early seals unlimited, as on a self-hosted endpoint (as `catch-up`):
    // the writers land about one object per create round trip.
    let primary_config = Config {
        early_seals: EarlySeals::Unlimited,
        ..config()
    };
    let wal = Wal::open(primary_store.storage(), prefix, primary_config)
        .await
        .map_err(failed("opening the primary"))?;
    let regions: Vec<RegionId> = (1..=args.regions).collect();
    wal.append(
        regions
            .iter()
            .map(|&r| (r, Bytes::from_static(b"start")))
            .collect(),
    )
    .await
    .map_err(failed("appending"))?;
    let follower_store = slow(storage, args.latency);
    let reader = WalReader::open(follower_store.storage(), prefix, Config::default())
        .await
        .map_err(failed("opening the standby's reader"))?;
    let mut follower = reader.follow(regions.iter().map(|&r| (r, 0)));

    let acknowledged: Arc<Vec<AtomicU64>> =
        Arc::new((0..=args.regions).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for w in 0..args.writers {
        let (wal, acknowledged, count) = (wal.clone(), acknowledged.clone(), args.regions);
        tasks.push(tokio::spawn(async move {
            let payload = Bytes::from(vec![b'x'; 100]);
            for k in 0u64.. {
                let region = 1 + (w + k) % count;
                let ids = wal.append(vec![(region, payload.clone())]).await?;
                if let (Some(slot), Some(&id)) = (acknowledged.get(region as usize), ids.first()) {
                    slot.fetch_max(id, Ordering::Relaxed);
                }
            }
            Ok::<(), objwal::Error>(())
        }));
    }
    {
        let (wal, regions, every) = (wal.clone(), regions.clone(), args.flush_every);
        tasks.push(tokio::spawn(async move {
            let mut before: Vec<EntryId> = vec![0; regions.len()];
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                for (&region, through) in regions.iter().zip(before.iter_mut()) {
                    if *through > 0 {
                        wal.obsolete(region, *through).await?;
                    }
                    *through = wal.latest_entry_id(region);
                }
            }
        }));
    }

    // The standby keeps pace.
    let mut followed = 0;
    let end = Instant::now() + args.seconds;
    loop {
        match tokio::time::timeout_at(end, follower.next()).await {
            Err(_) => break,
            Ok(Some(item)) => {
                item.map_err(failed("following"))?;
                followed += 1;
            }
            Ok(None) => return Err(CliError::Failed("the follower ended".into())),
        }
    }

    // The decision: the primary dies; nothing it starts from now on lands.
    primary_store.stall_next(Op::Create, "", usize::MAX);
    primary_store.stall_next(Op::Delete, "", usize::MAX);
    let positions = follower.positions();
    let behind = follower.lag().objects;
    drop(follower);
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        match task.await {
            Ok(result) => result.map_err(failed("the primary"))?,
            Err(e) if e.is_cancelled() => {}
            Err(e) => return Err(CliError::Failed(format!("a primary task: {e}"))),
        }
    }
    drop(wal);
    let acknowledged = regions
        .iter()
        .map(|&r| {
            let id = acknowledged
                .get(r as usize)
                .map_or(0, |a| a.load(Ordering::Relaxed));
            (r, id)
        })
        .collect();
    let objects = storage
        .list(&format!("{prefix}/objects/"))
        .await
        .map_err(|e| CliError::Failed(format!("listing the primary's prefix: {e}")))?
        .len();
    Ok(Decision {
        positions,
        acknowledged,
        objects,
        followed,
        behind,
    })
}

/// Copies every object under `from` to the same key under `to`.
async fn copy_prefix(storage: &Storage, from: &str, to: &str) -> Result<(), CliError> {
    let fail = |e: objwal::StorageError| CliError::Failed(format!("copying {from}: {e}"));
    let listed = storage.list(&format!("{from}/")).await.map_err(fail)?;
    for meta in listed {
        let Some(rest) = meta.key.strip_prefix(from) else {
            continue;
        };
        let data = storage.read(&meta.key, 0..meta.size).await.map_err(fail)?;
        storage
            .create(&format!("{to}{rest}"), data)
            .await
            .map_err(fail)?;
    }
    Ok(())
}

/// From the decision to the first append acknowledged, as `variant`; then
/// checks that nothing the primary acknowledged is missing.
async fn become_writer(
    storage: &Storage,
    prefix: &str,
    variant: Variant,
    decision: &Decision,
    args: &PromoteArgs,
) -> Result<Pause, CliError> {
    let store = slow(storage, args.latency);
    let started = Instant::now();
    let wal = Wal::open(store.storage(), prefix, config())
        .await
        .map_err(failed("opening the prefix"))?;
    let open = started.elapsed();
    let from: Vec<(RegionId, EntryId)> = match variant {
        Variant::Promote => decision
            .positions
            .iter()
            .map(|&(r, position)| (r, position + 1))
            .collect(),
        Variant::Bare => Vec::new(),
        Variant::Cold => decision.acknowledged.keys().map(|&r| (r, 0)).collect(),
    };
    let read = futures::future::join_all(from.iter().map(|&(region, from)| {
        let mut entries = Box::pin(wal.read(region, from));
        async move {
            let (mut n, mut last) = (0u64, 0);
            while let Some(entry) = entries.next().await {
                last = entry?.id;
                n += 1;
            }
            Ok::<_, objwal::Error>((region, n, last))
        }
    }))
    .await;
    let reads = started.elapsed() - open;
    wal.append(vec![(1, Bytes::from_static(b"the new writer"))])
        .await
        .map_err(failed("the first append"))?;
    let time = started.elapsed();
    let counts = store.counts();

    // Nothing acknowledged lost: per region, the newest acknowledged id is
    // obsolete, below the standby's position, or was read.
    let mut reached: BTreeMap<RegionId, EntryId> = BTreeMap::new();
    let mut entries = 0;
    for result in read {
        let (region, n, last) = result.map_err(failed("reading"))?;
        entries += n;
        reached.insert(region, last);
    }
    if variant == Variant::Promote {
        for &(region, position) in &decision.positions {
            let at = reached.entry(region).or_insert(0);
            *at = (*at).max(position);
        }
    }
    if variant != Variant::Bare {
        for info in wal.regions().await.map_err(failed("regions"))? {
            let at = reached.entry(info.region).or_insert(0);
            *at = (*at).max(info.watermark);
        }
        for (&region, &id) in &decision.acknowledged {
            let at = reached.get(&region).copied().unwrap_or(0);
            if at < id {
                return Err(CliError::Failed(format!(
                    "{}: region {region} was acknowledged through {id} and holds only through {at}",
                    variant.name()
                )));
            }
        }
    }
    wal.stop()
        .await
        .map_err(failed("stopping the new writer"))?;
    Ok(Pause {
        time,
        open,
        reads,
        entries,
        counts,
    })
}
