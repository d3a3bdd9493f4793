//! `objwal crash-gate`: the process-level crash gate. A life after a life
//! of one storage-engine workload, each SIGKILLed at a random moment, on
//! one prefix, so that the history accumulates (fences, collections,
//! releases, watermarks handed in again); every reopen is checked against
//! every life's acknowledgements.
//!
//! Each cycle: the parent re-executes its own binary as one life
//! ([`child`]), hands it the history's watermarks and
//! releases on its standard input, reads its facts from its standard
//! output (a pipe), and SIGKILLs it at a moment drawn from the seed: in
//! nine cycles of ten 5% to 100% of `--life` after the life's open
//! returned, in the tenth anywhere in `--life` after its start (so some
//! kills fall into its recovery and its claim of the prefix).
//! Then it reopens the prefix with `Wal::open` (timed: the recovery time),
//! reads the store's regions and every region any life named from id 0,
//! checks them ([`check`]) and stops the store. The first
//! cycle with a violation ends the gate with exit 1, its seed and the
//! violations printed.
//!
//! The seed fixes every choice (kill moments, each life's workload); the
//! kill still lands wherever the child got to in real time, so a seed
//! reproduces a history's shape, not its exact bytes.
//!
//! The prefix must be empty: the gate writes, obsoletes and releases. The
//! default store is a fresh directory under the temp directory, removed
//! after a success and kept (its path printed) after a failure.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use objwal::{ObjectStorage, Storage, Wal};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};
use check::{CycleReport, History};
use child::LifeArgs;

mod check;
mod child;
mod life;

use life::Kill;

/// Regions the reopen reads at once.
const READS_IN_FLIGHT: usize = 8;

/// How long the parent waits for a killed life's pipes to close.
const PIPE_DEADLINE: Duration = Duration::from_secs(30);

/// Arguments of `objwal crash-gate`.
#[derive(Debug, clap::Args)]
pub struct CrashGateArgs {
    /// The store URL (default: a fresh directory under the temp directory);
    /// the prefix in it must be empty.
    #[arg(long)]
    store: Option<String>,
    /// Lives to run, kill, reopen and check.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    cycles: u32,
    /// When the lives' appends return.
    #[arg(long, value_enum, default_value = "durable")]
    ack_mode: AckModeArg,
    /// Regions kept active in each life (a released one is replaced).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    regions: u32,
    /// Concurrent writer tasks in each life.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    writers: u16,
    /// The random seed (default: from the clock); printed for replays.
    #[arg(long)]
    seed: Option<u64>,
    /// The longest a life runs before its kill, in seconds.
    #[arg(long, default_value = "1", value_parser = store::seconds)]
    life: f64,
    /// The lives' flush interval (a duration like "10ms").
    #[arg(long, default_value = "10ms")]
    flush_interval: String,
    /// Internal: run as life number N (the parent sets it).
    #[arg(long, hide = true)]
    child_life: Option<u32>,
    /// Internal: the seed of a life.
    #[arg(long, hide = true, default_value_t = 0)]
    child_seed: u64,
}

/// Runs the gate, or one life of it.
pub async fn run(prefix: &str, verbose: u8, args: CrashGateArgs) -> CliResult {
    store::prefix(prefix)?;
    if let Some(life) = args.child_life {
        let store = args
            .store
            .clone()
            .ok_or_else(|| CliError::Usage("crash-gate: a life needs --store".into()))?;
        return child::run(prefix, life_args(&args, store, life, args.child_seed)).await;
    }
    let flush = serde_json::Map::from_iter([(
        "flush_interval".to_owned(),
        serde_json::Value::from(args.flush_interval.clone()),
    )]);
    store::config(flush)?;
    let (url, scratch) = place(
        args.store.as_deref(),
        "crash-gate",
        "the gate's lives are other processes, so it needs a store that outlives them",
    )?;
    let storage = store::open(&url, false)?;
    refuse_used_prefix(&storage, prefix, "crash-gate").await?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    out!(
        "objwal crash-gate: {} cycles, {} acks, {} regions, {} writers, lives up to {} s, flush interval {}, seed {seed}",
        args.cycles,
        args.ack_mode.as_str(),
        args.regions,
        args.writers,
        args.life,
        args.flush_interval
    );
    out!("store:        {url} (prefix {prefix})");
    let mut gate = Gate {
        prefix,
        verbose,
        args: &args,
        url: &url,
        storage,
        rng: StdRng::seed_from_u64(seed),
        history: History::default(),
        totals: CycleReport::default(),
        recoveries: Vec::new(),
        kills_in_open: 0,
    };
    let result = gate.cycles().await;
    gate.summary();
    match result {
        Ok(()) => {
            if let Some(dir) = scratch {
                let _ = std::fs::remove_dir_all(dir);
            }
            Ok(())
        }
        Err(e) => {
            if let Some(dir) = scratch {
                out!("kept:         {}", dir.display());
            }
            Err(CliError::Failed(format!("{} (seed {seed})", e.message())))
        }
    }
}

fn life_args(args: &CrashGateArgs, store: String, life: u32, seed: u64) -> LifeArgs {
    LifeArgs {
        store,
        life,
        ack_mode: args.ack_mode,
        regions: args.regions,
        writers: args.writers,
        seed,
        flush_interval: args.flush_interval.clone(),
        life_seconds: args.life,
    }
}

/// The store URL of `command` (`crash-gate`, `soak`), and the scratch
/// directory to remove after a success: a fresh one under the temp
/// directory unless `store_url` names a store. `memory://` is refused,
/// `why_not_memory` says why.
pub(crate) fn place(
    store_url: Option<&str>,
    command: &str,
    why_not_memory: &str,
) -> Result<(String, Option<std::path::PathBuf>), CliError> {
    if let Some(url) = store_url {
        if url.starts_with("memory:") {
            return Err(CliError::Usage(format!(
                "storage URL {url:?}: {why_not_memory} (file://, s3://)"
            )));
        }
        return Ok((url.to_owned(), None));
    }
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let dir = std::env::temp_dir().join(format!("objwal-{command}-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let url = ::url::Url::from_directory_path(&dir)
        .map_err(|()| CliError::Failed(format!("{} is not absolute", dir.display())))?;
    Ok((url.as_str().trim_end_matches('/').to_owned(), Some(dir)))
}

/// `command` writes, obsoletes and releases: it refuses a prefix in use.
pub(crate) async fn refuse_used_prefix(
    storage: &Storage,
    prefix: &str,
    command: &str,
) -> CliResult {
    let listed = storage.list(&format!("{prefix}/")).await?;
    match listed.first() {
        None => Ok(()),
        Some(first) => Err(CliError::Usage(format!(
            "{command}: prefix {prefix:?} is not empty ({} keys, e.g. {}); it needs a prefix of its own",
            listed.len(),
            first.key
        ))),
    }
}

/// A seed from the clock and the pid, for runs given none.
pub(crate) fn clock_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

/// The state of a gate run.
struct Gate<'a> {
    prefix: &'a str,
    verbose: u8,
    args: &'a CrashGateArgs,
    url: &'a str,
    storage: Storage,
    rng: StdRng,
    history: History,
    totals: CycleReport,
    recoveries: Vec<Duration>,
    kills_in_open: u32,
}

impl Gate<'_> {
    async fn cycles(&mut self) -> CliResult {
        for cycle in 1..=self.args.cycles {
            let child_seed: u64 = self.rng.random();
            let moment = self.rng.random_range(0.0..=1.0);
            let kill = if self.rng.random_ratio(1, 10) {
                Kill::FromStart(Duration::from_secs_f64(self.args.life * moment))
            } else {
                Kill::AfterOpen(Duration::from_secs_f64(self.args.life * moment.max(0.05)))
            };
            let (log, killed_at) = self.life(cycle, child_seed, kill).await?;
            let report = self.reopen_and_check(cycle, &log).await?;
            if !report.opened {
                self.kills_in_open += 1;
            }
            out!(
                "cycle {cycle:>5}/{}: killed {:.2} s after its start{}, {} acknowledged ({} promised durable), {} watermarks, {} releases, {} flushes; reopened in {:.1} ms, replayed {}",
                self.args.cycles,
                killed_at.as_secs_f64(),
                if report.opened { "" } else { " (in its open)" },
                report.acknowledged,
                report.promised,
                report.watermarks,
                report.releases,
                report.flushes,
                self.recoveries.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
                report.replayed
            );
            add(&mut self.totals, &report);
            if report.violations() > 0 {
                for line in report.describe() {
                    out!("  violation: {line}");
                }
                return Err(CliError::Failed(format!(
                    "crash-gate: cycle {cycle} broke {} rules",
                    report.violations()
                )));
            }
        }
        Ok(())
    }

    /// Reopens the prefix, checks the replay against the history, stops.
    async fn reopen_and_check(&mut self, life: u32, log: &str) -> Result<CycleReport, CliError> {
        let mut check = self.history.absorb(life, log);
        let started = Instant::now();
        let wal = Wal::open(self.storage.clone(), self.prefix, crate::store::base()).await?;
        self.recoveries.push(started.elapsed());
        let replay = async {
            for info in wal.regions().await? {
                check.region_info(info.region, info.released);
            }
            // Regions are read READS_IN_FLIGHT at a time (a remote store
            // answers each range read in a round trip), each in id order.
            let reads = check.regions().map(|region| {
                let entries = wal.read(region, 0);
                async move { (region, entries.collect::<Vec<_>>().await) }
            });
            let mut reads = futures::stream::iter(reads).buffer_unordered(READS_IN_FLIGHT);
            while let Some((region, entries)) = reads.next().await {
                for entry in entries {
                    let entry = entry?;
                    check.entry(region, entry.id, &entry.data);
                }
            }
            Ok::<(), objwal::Error>(())
        }
        .await;
        let replayed = started.elapsed();
        let stopped = wal.stop().await;
        tracing::info!(
            cycle = life,
            replay_ms = replayed.as_millis() as u64,
            stopped_ms = started.elapsed().as_millis() as u64,
            "reopen checked"
        );
        replay.map_err(|e| CliError::Failed(format!("cycle {life}: the replay failed: {e}")))?;
        stopped.map_err(|e| {
            CliError::Failed(format!(
                "cycle {life}: the reopened store did not stop cleanly: {e}"
            ))
        })?;
        Ok(check.finish())
    }

    fn summary(&self) {
        let t = &self.totals;
        let cycles = self.recoveries.len();
        out!(
            "cycles:       {cycles} ({} kills fell into a life's own open)",
            self.kills_in_open
        );
        out!(
            "acknowledged: {} entries ({} promised durable), {} watermarks, {} releases, {} flushes",
            t.acknowledged, t.promised, t.watermarks, t.releases, t.flushes
        );
        out!(
            "replayed:     {} entries over all reopens ({} acknowledged but not yet logged when killed); {} obsolete or released entries collected",
            t.replayed, t.unlogged, t.collected
        );
        if self.args.ack_mode == AckModeArg::Enqueued {
            out!(
                "not durable:  {} admitted entries beyond every barrier lost, in {} whole objects (allowed in enqueued mode)",
                t.allowed_loss, t.allowed_loss_objects
            );
        }
        out!("lost:         {}", t.lost.count);
        out!("duplicated:   {}", t.duplicated.count);
        out!("resurrected:  {}", t.resurrected.count);
        out!("misordered:   {}", t.misordered.count);
        out!("corrupt:      {}", t.corrupt.count);
        let mut sorted = self.recoveries.clone();
        sorted.sort_unstable();
        let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        out!(
            "recovery:     p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (Wal::open after each kill)",
            ms(percentile(&sorted, 50)),
            ms(percentile(&sorted, 99)),
            ms(sorted.last())
        );
        let verdict = if t.violations() == 0 && cycles == self.args.cycles as usize {
            "OK: every promised entry replayed exactly once, in order, byte for byte; nothing released, refused or never appended came back"
        } else {
            "FAILED"
        };
        out!("verdict:      {verdict}");
    }
}

/// The nearest-rank percentile `p` of sorted values.
fn percentile(sorted: &[Duration], p: usize) -> Option<&Duration> {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1)
}

fn add(totals: &mut CycleReport, r: &CycleReport) {
    totals.acknowledged += r.acknowledged;
    totals.promised += r.promised;
    totals.watermarks += r.watermarks;
    totals.releases += r.releases;
    totals.flushes += r.flushes;
    totals.replayed += r.replayed;
    totals.unlogged += r.unlogged;
    totals.allowed_loss += r.allowed_loss;
    totals.allowed_loss_objects += r.allowed_loss_objects;
    totals.collected += r.collected;
    totals.lost.count += r.lost.count;
    totals.duplicated.count += r.duplicated.count;
    totals.resurrected.count += r.resurrected.count;
    totals.misordered.count += r.misordered.count;
    totals.corrupt.count += r.corrupt.count;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 50), Some(&ms(50)));
        assert_eq!(percentile(&sorted, 99), Some(&ms(99)));
        assert_eq!(percentile(&sorted[..1], 99), Some(&ms(1)));
        assert_eq!(percentile(&[], 50), None);
    }
}
