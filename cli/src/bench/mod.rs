//! `objwal bench --store URL`: the write path under load.
//!
//! Each of `--rounds` rounds opens a WAL under a fresh prefix on a
//! request-counting wrapper of the store ([`crate::bench::counting`]), runs
//! `--writers` tasks appending `--payload`-byte entries for `--seconds`, and
//! records every append's latency, the objects created and every request.
//! In enqueued mode a writer also waits for durability behind its appends
//! (at most `max_unpersisted_bytes` across writers in flight, as an engine
//! bounds its memtable) and a round ends only once all it appended is
//! durable, so throughput counts durable bytes. Afterwards everything the
//! round created (objects, fences) is deleted.
//!
//! The bench never creates the store itself (a `file://` directory must
//! exist) and leaves it as it found it: on a `file://` store it also removes
//! the directories it created, and only those (never one that held
//! something before it ran).
//!
//! `--put-latency` and `--get-latency` delay every create and every read
//! (the wrapper of [`crate::bench::counting`]) to model a remote store; the store
//! then counts as one that charges per request, so the default budget of
//! early seals is a remote store's. The budget in effect is printed.
//!
//! The baseline, measured in the same run, is the floor cost of one durable
//! object: serial raw `create`s, on the store through the same delays, of
//! objects of the bench's median object size (an acknowledgement costs its
//! create and no request after it, rfcs/0006). Figures are medians over
//! rounds, beside the
//! baseline's own figures and, except on `memory://` (where a create costs
//! next to nothing, so a ratio would only measure the bench's own
//! overhead), the ratio to them ([`crate::bench::report`]). When the
//! budget of early seals (or the timer), not the store, set the latency, a
//! `note:` line says so and names the knob
//! ([`crate::bench::report::policy_note`]).

pub(crate) mod counting;
pub(crate) mod report;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use objwal::{AckMode, Config, ObjectStorage, Storage, Wal};
use tokio::time::Instant;

use crate::metrics_http;
use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};
use counting::{Counting, Latency, Tail};
use report::{Baseline, Round};

/// Arguments of `objwal bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The store URL (file:///path, memory://, s3://bucket/root?...).
    #[arg(long)]
    store: String,
    /// Seconds of load per round.
    #[arg(long, default_value = "5", value_parser = store::seconds)]
    seconds: f64,
    /// Rounds; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Concurrent writer tasks (one append in flight each).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    writers: u16,
    /// Bytes per entry.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    payload: u32,
    /// Regions the writers spread over (see --region-spread).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    regions: u64,
    /// How appends pick their region: `writer` (writer i appends to region
    /// i mod R, so regions never outnumber writers), `uniform` (every
    /// append picks one of the R regions at random) or `zipf` (at random,
    /// skewed: region k with weight 1/(k+1), so a few regions are hot and
    /// most are rarely written).
    #[arg(long, value_enum, default_value = "writer")]
    region_spread: Spread,
    /// When appends return.
    #[arg(long, value_enum, default_value = "durable")]
    ack_mode: AckModeArg,
    /// The store's flush interval (e.g. "100ms"; default: the library's).
    #[arg(long)]
    flush_interval: Option<String>,
    /// The store's batch size (e.g. "8MiB"; default: the library's).
    #[arg(long)]
    max_batch_bytes: Option<String>,
    /// Conditional creates in flight (default: the library's).
    #[arg(long)]
    max_inflight_creates: Option<u64>,
    /// The budget of early seals: auto, unlimited, off, or a number per
    /// second (default: the library's, auto).
    #[arg(long)]
    early_seals: Option<String>,
    /// The budget of hedged creates: auto, off, or a fraction of creates
    /// (default: the library's, auto).
    #[arg(long)]
    hedge_creates: Option<String>,
    /// Delay every create by this much (e.g. "30ms"), as a remote store's
    /// round trip would.
    #[arg(long, value_parser = latency_arg)]
    put_latency: Option<Duration>,
    /// Delay every read (read-backs, recovery) by this much.
    #[arg(long, value_parser = latency_arg)]
    get_latency: Option<Duration>,
    /// A heavy tail, to measure hedged creates: `N:F`, every N-th create
    /// waits F times the put latency (e.g. "100:10": 1% of creates 10x
    /// slower), or `lognormal:SIGMA`, each create waits the put latency
    /// times exp(SIGMA x N(0, 1)) (the put latency is then the median;
    /// "lognormal:1" puts the 99th percentile at 10.2 times it).
    #[arg(long, value_name = "N:F|lognormal:SIGMA", value_parser = tail_arg)]
    put_tail: Option<Tail>,
    /// Serve the metrics as Prometheus text at http://HOST:PORT/metrics
    /// while the bench runs (port 0: a free port; printed first).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
}

/// Runs the bench.
pub async fn run(prefix: &str, args: BenchArgs) -> CliResult {
    store::prefix(prefix)?;
    let config = config(&args)?;
    if let Some(addr) = &args.metrics_addr {
        let bound = metrics_http::serve(addr).await?;
        out!("metrics: http://{bound}/metrics");
    }
    let storage = store::open(&args.store, true)?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let run_prefix = format!("{prefix}/bench-{}-{stamp}", std::process::id());
    store::prefix(&run_prefix)?;
    let dirs = NewDirs::before(&args.store, &run_prefix);
    let latency = Latency {
        put: args.put_latency.unwrap_or_default(),
        get: args.get_latency.unwrap_or_default(),
        tail: args.put_tail.unwrap_or_default(),
    };
    let result = bench(&storage, latency, &run_prefix, &config, &args).await;
    if let Some(dirs) = dirs {
        dirs.remove();
    }
    result
}

/// The rounds and the baseline under `run_prefix`, each cleaned up after.
async fn bench(
    storage: &Storage,
    latency: Latency,
    run_prefix: &str,
    config: &Config,
    args: &BenchArgs,
) -> CliResult {
    let (wrapped, _) = Counting::new(storage.clone(), latency);
    let remote = wrapped.charges_per_request();
    report::print_setup(&args.store, run_prefix, config, &args.describe());
    report::print_store(latency, remote, config);

    let progress = progress_bar(args.rounds, args.seconds);
    let mut rounds = Vec::new();
    for n in 1..=args.rounds {
        let round_prefix = format!("{run_prefix}/r{n}");
        progress.set_message(format!("round {n}/{}", args.rounds));
        let round = round(storage, latency, &round_prefix, config, args, &progress).await;
        let cleaned = clean(storage, &round_prefix).await;
        let round = round?;
        cleaned?;
        progress.suspend(|| report::print_round(n, &round));
        rounds.push(round);
    }
    progress.set_message("baseline");
    let object_bytes = report::median_object_bytes(&rounds);
    let baseline = baseline(storage, latency, run_prefix, object_bytes, args.seconds).await;
    let cleaned = clean(storage, run_prefix).await;
    progress.finish_and_clear();
    let baseline = baseline?;
    cleaned?;
    let ratios = !args.store.starts_with("memory:");
    report::print_summary(&rounds, &baseline, ratios, config, remote);
    Ok(())
}

impl BenchArgs {
    fn describe(&self) -> String {
        format!(
            "writers {}, payload {} B, regions {} ({}), {} rounds of {} s",
            self.writers,
            self.payload,
            self.regions,
            self.region_spread.describe(),
            self.rounds,
            self.seconds
        )
    }
}

/// How appends pick their region (`--region-spread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Spread {
    /// Writer i appends to region i mod R.
    Writer,
    /// Each append picks one of the R regions, uniformly at random.
    Uniform,
    /// Each append picks region k with weight 1/(k+1) (Zipf, exponent 1).
    Zipf,
}

impl Spread {
    fn describe(self) -> &'static str {
        match self {
            Spread::Writer => "writer i on region i mod R",
            Spread::Uniform => "each append on a uniformly random region",
            Spread::Zipf => "each append on a random region, Zipf 1/(k+1)",
        }
    }
}

/// One writer's choice of regions: fixed, or drawn from a seeded generator.
struct Regions {
    spread: Spread,
    fixed: u64,
    count: u64,
    /// Zipf: the cumulative weights of regions 0..R.
    cumulative: Arc<[f64]>,
    rng: rand::rngs::SmallRng,
}

impl Regions {
    fn new(spread: Spread, writer: u64, count: u64, cumulative: Arc<[f64]>) -> Self {
        use rand::SeedableRng;
        Regions {
            spread,
            fixed: writer % count,
            count,
            cumulative,
            rng: rand::rngs::SmallRng::seed_from_u64(0x5eed ^ writer),
        }
    }

    /// The region of the next append.
    fn next(&mut self) -> u64 {
        use rand::Rng;
        match self.spread {
            Spread::Writer => self.fixed,
            Spread::Uniform => self.rng.random_range(0..self.count),
            Spread::Zipf => {
                let total = self.cumulative.last().copied().unwrap_or(0.0);
                let x = self.rng.random_range(0.0..total.max(f64::MIN_POSITIVE));
                let k = self.cumulative.partition_point(|&c| c <= x);
                (k as u64).min(self.count - 1)
            }
        }
    }
}

/// The cumulative Zipf weights of `count` regions (empty unless `zipf`).
fn zipf_table(spread: Spread, count: u64) -> Arc<[f64]> {
    if spread != Spread::Zipf {
        return Arc::from(Vec::new());
    }
    let mut sum = 0.0;
    (0..count)
        .map(|k| {
            sum += 1.0 / (k as f64 + 1.0);
            sum
        })
        .collect()
}

fn config(args: &BenchArgs) -> Result<Config, CliError> {
    let mut overrides = serde_json::Map::new();
    overrides.insert("ack_mode".into(), args.ack_mode.as_str().into());
    if let Some(v) = &args.flush_interval {
        overrides.insert("flush_interval".into(), v.clone().into());
    }
    if let Some(v) = &args.max_batch_bytes {
        overrides.insert("max_batch_bytes".into(), v.clone().into());
    }
    if let Some(v) = args.max_inflight_creates {
        overrides.insert("max_inflight_creates".into(), v.into());
    }
    if let Some(v) = &args.early_seals {
        overrides.insert("early_seals".into(), v.clone().into());
    }
    if let Some(v) = &args.hedge_creates {
        overrides.insert("hedge_creates".into(), v.clone().into());
    }
    store::config(overrides)
}

/// A tail flag: every N-th create F times slower, or a lognormal.
fn tail_arg(s: &str) -> Result<Tail, String> {
    let bad = || {
        format!(
            "{s:?} is neither N:F (every N-th create F times slower, e.g. 100:10) \
             nor lognormal:SIGMA (e.g. lognormal:1)"
        )
    };
    let (n, f) = s.split_once(':').ok_or_else(bad)?;
    if n.trim() == "lognormal" {
        let sigma: f64 = f.trim().parse().map_err(|_| bad())?;
        if !(sigma > 0.0 && sigma <= 4.0) {
            return Err(format!("{s:?}: SIGMA must be above 0 and at most 4"));
        }
        return Ok(Tail::LogNormal { sigma });
    }
    let every: u64 = n.trim().parse().map_err(|_| bad())?;
    let factor: u32 = f.trim().parse().map_err(|_| bad())?;
    if every == 0 || factor == 0 {
        return Err(bad());
    }
    Ok(Tail::Every { every, factor })
}

/// A delay flag: a duration such as "30ms" or "1.5s", at most a minute.
fn latency_arg(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| format!("{s:?}: {e}"))?;
    if d > Duration::from_secs(60) {
        return Err(format!("{s} is more than a minute"));
    }
    Ok(d)
}

/// A bar over every round's seconds, drawn on stderr only when it is a
/// terminal.
fn progress_bar(rounds: u32, seconds: f64) -> ProgressBar {
    let total = (f64::from(rounds) * seconds * 10.0).ceil() as u64;
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {msg:14} [{bar:40}] {elapsed_precise} {prefix}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// What one writer saw.
#[derive(Default)]
struct WriterStats {
    latencies: Vec<u64>,
    appends: u64,
}

async fn round(
    storage: &Storage,
    latency: Latency,
    prefix: &str,
    config: &Config,
    args: &BenchArgs,
    progress: &ProgressBar,
) -> Result<Round, CliError> {
    let (counting, counters) = Counting::new(storage.clone(), latency);
    let wal = Wal::open(Storage::new(counting), prefix, config.clone()).await?;
    let before = counters.snapshot();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let appended = Arc::new(AtomicU64::new(0));
    let payload = Bytes::from(vec![0xa5u8; args.payload as usize]);
    // Enqueued mode: the bytes each writer may have not yet durable.
    let budget = config.max_unpersisted_bytes / u64::from(args.writers);
    let in_flight = (budget / u64::from(args.payload)).max(2);
    let mut writers = tokio::task::JoinSet::new();
    let cumulative = zipf_table(args.region_spread, args.regions);
    for w in 0..u64::from(args.writers) {
        let writer = Writer {
            wal: wal.clone(),
            regions: Regions::new(args.region_spread, w, args.regions, cumulative.clone()),
            payload: payload.clone(),
            deadline,
            in_flight,
            enqueued: config.ack_mode == AckMode::Enqueued,
            appended: appended.clone(),
        };
        writers.spawn(writer.run());
    }
    let ticker = tick(progress.clone(), appended.clone(), started, deadline);
    let mut stats = Vec::new();
    let mut failure = None;
    while let Some(done) = writers.join_next().await {
        match done {
            Ok(Ok(s)) => stats.push(s),
            Ok(Err(e)) => failure = failure.or(Some(CliError::from(e))),
            Err(e) => failure = failure.or(Some(CliError::Failed(format!("a writer failed: {e}")))),
        }
    }
    let elapsed = started.elapsed();
    ticker.abort();
    let after = counters.snapshot();
    let stopped = wal.stop().await;
    if let Some(e) = failure {
        return Err(e);
    }
    stopped?;
    let mut latencies: Vec<u64> = stats
        .iter_mut()
        .flat_map(|s| s.latencies.drain(..))
        .collect();
    latencies.sort_unstable();
    let appends: u64 = stats.iter().map(|s| s.appends).sum();
    Ok(Round {
        seconds: elapsed.as_secs_f64(),
        appends,
        bytes: appends * u64::from(args.payload),
        latencies,
        requests: after.since(before),
        object_sizes: counters.sizes_between(before, after),
    })
}

/// Moves the progress bar every 100 ms until the deadline.
fn tick(
    bar: ProgressBar,
    appended: Arc<AtomicU64>,
    started: Instant,
    deadline: Instant,
) -> tokio::task::JoinHandle<()> {
    let base = bar.position();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        while Instant::now() < deadline {
            interval.tick().await;
            let elapsed = started.elapsed().as_secs_f64();
            bar.set_position(base + (elapsed * 10.0) as u64);
            let n = appended.load(Ordering::Relaxed);
            bar.set_prefix(format!("{:.0} appends/s", n as f64 / elapsed.max(1e-3)));
        }
    })
}

struct Writer {
    wal: Wal,
    regions: Regions,
    payload: Bytes,
    deadline: Instant,
    /// Enqueued mode: appends that may be not yet durable.
    in_flight: u64,
    enqueued: bool,
    appended: Arc<AtomicU64>,
}

impl Writer {
    async fn run(mut self) -> Result<WriterStats, objwal::Error> {
        let mut stats = WriterStats::default();
        let mut barriers = FuturesOrdered::new();
        let mut since_barrier = 0u64;
        let mut last = None;
        while Instant::now() < self.deadline {
            let region = self.regions.next();
            let sent = Instant::now();
            let ids = self
                .wal
                .append(vec![(region, self.payload.clone())])
                .await?;
            stats.latencies.push(sent.elapsed().as_nanos() as u64);
            stats.appends += 1;
            self.appended.fetch_add(1, Ordering::Relaxed);
            if !self.enqueued {
                continue;
            }
            last = ids.last().map(|&id| (region, id));
            // A durability barrier every half budget; at most two pending.
            // Objects become durable in order, so the writer's last id
            // covers all it appended before.
            since_barrier += 1;
            if since_barrier * 2 >= self.in_flight {
                since_barrier = 0;
                if let Some(&id) = ids.last() {
                    let wal = self.wal.clone();
                    barriers.push_back(async move { wal.wait_durable(region, id).await }.boxed());
                }
            }
            while barriers.len() > 2 {
                if let Some(done) = barriers.next().await {
                    done?;
                }
            }
            while let Some(Some(done)) = barriers.next().now_or_never() {
                done?;
            }
        }
        if let Some((region, id)) = last {
            let wal = self.wal.clone();
            barriers.push_back(async move { wal.wait_durable(region, id).await }.boxed());
        }
        while let Some(done) = barriers.next().await {
            done?;
        }
        Ok(stats)
    }
}

/// Deletes every key under `prefix` (a finished round's objects and
/// fences, the baseline's leftovers).
async fn clean(storage: &Storage, prefix: &str) -> CliResult {
    for object in storage.list(&format!("{prefix}/")).await? {
        storage.delete(&object.key).await?;
    }
    Ok(())
}

/// The directories of a `file://` store that the bench's keys will create:
/// the ones missing before it ran, to remove (when empty) afterwards.
struct NewDirs {
    /// Missing before the run, shallowest first.
    missing: Vec<std::path::PathBuf>,
}

impl NewDirs {
    fn before(url: &str, run_prefix: &str) -> Option<NewDirs> {
        let root = store::file_path(url)?;
        let mut dir = root;
        let mut missing = Vec::new();
        for part in run_prefix.split('/') {
            dir = dir.join(part);
            if !dir.exists() {
                missing.push(dir.clone());
            }
        }
        Some(NewDirs { missing })
    }

    /// Removes what is empty under the first missing directory, then the
    /// missing directories themselves, deepest first. A directory that is
    /// not empty (someone else's keys) stays.
    fn remove(self) {
        if let Some(first) = self.missing.first() {
            remove_empty_dirs(first);
        }
        for dir in self.missing.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Removes `dir` and every directory under it that holds no file.
fn remove_empty_dirs(dir: &std::path::Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Serial raw creates of `object_bytes`-byte objects for about a second
/// (at most `seconds`; at least 5 and at most 1000 creates), kept until the
/// last is timed (a log's directory holds its objects; creates into a
/// directory emptied after each one measured a third of the cost on the
/// file backend) and then deleted, all through the bench's delays.
async fn baseline(
    storage: &Storage,
    latency: Latency,
    prefix: &str,
    object_bytes: u64,
    seconds: f64,
) -> Result<Baseline, CliError> {
    let (counting, _) = Counting::new(storage.clone(), latency);
    let storage = &Storage::new(counting);
    let data = Bytes::from(vec![
        0x5au8;
        usize::try_from(object_bytes).unwrap_or(0).max(1)
    ]);
    let budget = Duration::from_secs_f64(seconds.min(1.0));
    let started = Instant::now();
    let mut latencies = Vec::new();
    while latencies.len() < 5 || (started.elapsed() < budget && latencies.len() < 1000) {
        let key = format!("{prefix}/baseline/{:08}", latencies.len());
        let sent = Instant::now();
        storage.create(&key, data.clone()).await?;
        latencies.push(sent.elapsed().as_nanos() as u64);
    }
    for n in 0..latencies.len() {
        storage.delete(&format!("{prefix}/baseline/{n:08}")).await?;
    }
    latencies.sort_unstable();
    Ok(Baseline {
        object_bytes: data.len() as u64,
        latencies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_every_nth_create_or_a_lognormal() {
        assert_eq!(
            tail_arg("100:10"),
            Ok(Tail::Every {
                every: 100,
                factor: 10
            })
        );
        assert_eq!(tail_arg("lognormal:1"), Ok(Tail::LogNormal { sigma: 1.0 }));
        for bad in [
            "0:10",
            "100:0",
            "100",
            "lognormal:0",
            "lognormal:-1",
            "lognormal:x",
            "normal:1",
        ] {
            assert!(tail_arg(bad).is_err(), "{bad}");
        }
    }
}
