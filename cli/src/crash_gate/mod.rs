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
//! checks them ([`check`]), replays every region in bulk (`Wal::replay`
//! from 0 and from a start per region drawn from the seed), stops the
//! store, opens a `WalReader` and replays the same two ways, each replay
//! compared with the reads ([`check::replay`]), all with the smallest
//! `replay_buffer_bytes` so that replay pages fill. The reopen runs with
//! no faults; with `--faults KIND` the lives arm them ([`faults`]). The first
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

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use objwal::{Config, Entry, ObjectStorage, Storage, Wal, WalReader};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};
use check::replay::{seen, Seen};
use check::{CycleReport, History};
use child::LifeArgs;
use faults::{Faults, Kind};

mod check;
mod child;
mod faults;
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
    /// The storage faults each life arms, one kind at a time: every 50 to
    /// 300 ms, for the next 1 to 3 requests (`all`: each life the next
    /// kind). The reopens run without faults.
    #[arg(long, value_enum, default_value = "none")]
    faults: Faults,
    /// Each kill is a power loss (a `file://` store only): what the
    /// directory backend had not made durable when the life was killed
    /// (names whose directory was not fsynced after their link, bytes not
    /// fsynced before it) is dropped before the reopen. A SIGKILL alone
    /// keeps the page cache, so only this form tests the fsyncs.
    #[arg(long)]
    pub power_loss: bool,
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
    if args.power_loss && store::file_path(&url).is_none() {
        return Err(CliError::Usage(format!(
            "crash-gate --power-loss: {url:?} is not a file:// store (a power loss is simulated for the directory backend)"
        )));
    }
    refuse_used_prefix(&storage, prefix, "crash-gate").await?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    out!(
        "objwal crash-gate: {} cycles, {} acks, {} regions, {} writers, lives up to {} s, flush interval {}, faults {}{}, seed {seed}",
        args.cycles,
        args.ack_mode.as_str(),
        args.regions,
        args.writers,
        args.life,
        args.flush_interval,
        args.faults.as_str(),
        if args.power_loss { ", power loss at each kill" } else { "" }
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
        power_losses: PowerLosses::default(),
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
        faults: args.faults.of_life(life, args.power_loss),
        power_loss: args.power_loss,
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
    power_losses: PowerLosses,
}

/// What the simulated power losses dropped over a run.
#[derive(Debug, Default)]
struct PowerLosses {
    kills: u64,
    names_lost: u64,
    bytes_lost: u64,
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
            if self.args.power_loss {
                self.lose_power(cycle)?;
            }
            let report = self.reopen_and_check(cycle, child_seed, &log).await?;
            if !report.opened {
                self.kills_in_open += 1;
            }
            let faults = self
                .args
                .faults
                .of_life(cycle, self.args.power_loss)
                .map_or(String::new(), |kind| {
                    let armed = report.paths.faults_armed.values().sum::<u64>();
                    format!(", {armed} x {}", kind.name())
                });
            out!(
                "cycle {cycle:>5}/{}: killed {:.2} s after its start{}{faults}, {} acknowledged ({} promised durable), {} watermarks, {} releases, {} flushes; reopened in {:.1} ms, replayed {}",
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
            self.totals.add(&report);
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

    /// Leaves the store as a power loss at the kill of life `life` may
    /// (`objwal::storage::power_loss`), from the journal the life kept.
    fn lose_power(&mut self, life: u32) -> CliResult {
        let root = store::file_path(self.url).ok_or_else(|| {
            CliError::Usage("crash-gate --power-loss needs a file:// store".into())
        })?;
        let journal = journal_path(self.url, life)?;
        if !journal.exists() {
            // Killed before it opened its store.
            return Ok(());
        }
        let lost = objwal::storage::power_loss::apply(&root, &journal).map_err(|e| {
            CliError::Failed(format!(
                "power loss of life {life}: {}: {e}",
                journal.display()
            ))
        })?;
        let _ = std::fs::remove_file(&journal);
        self.power_losses.kills += 1;
        self.power_losses.names_lost += lost.names_lost.len() as u64;
        self.power_losses.bytes_lost += lost.bytes_lost.len() as u64;
        tracing::info!(
            life,
            names = lost.names_lost.len(),
            bytes = lost.bytes_lost.len(),
            "power loss"
        );
        Ok(())
    }

    /// Reopens the prefix, checks the replay against the history, compares
    /// bulk replays with it, stops.
    async fn reopen_and_check(
        &mut self,
        life: u32,
        seed: u64,
        log: &str,
    ) -> Result<CycleReport, CliError> {
        let mut check = self.history.absorb(life, log);
        // The smallest buffer a replay may have: its pages fill.
        let config = Config {
            replay_buffer_bytes: objwal::config::MIN_REPLAY_BUFFER_BYTES,
            ..crate::store::base()
        };
        let started = Instant::now();
        let wal = Wal::open(self.storage.clone(), self.prefix, config.clone()).await?;
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
        // The seed of this cycle's starts: the life's, so that the gate's
        // own sequence of draws stays what it was.
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_0f7e_91a4);
        let starts = check.replay_starts(&mut rng);
        let from_zero: BTreeMap<u64, u64> = check.regions().map(|r| (r, 0)).collect();
        if replay.is_ok() {
            let all = collect(wal.replay(from_zero.clone())).await;
            check.replay("Wal::replay from 0", &from_zero, all);
            let some = collect(wal.replay(starts.clone())).await;
            check.replay("Wal::replay from drawn ids", &starts, some);
        }
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
        match WalReader::open(self.storage.clone(), self.prefix, config).await {
            Ok(reader) => {
                let all = collect(reader.replay(from_zero.clone())).await;
                check.replay("WalReader::replay from 0", &from_zero, all);
                let some = collect(reader.replay(starts.clone())).await;
                check.replay("WalReader::replay from drawn ids", &starts, some);
            }
            Err(e) => {
                let e = Err(format!("WalReader::open: {e}"));
                check.replay("WalReader::replay", &from_zero, e);
            }
        }
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
        out!("replay differs: {}", t.replay_differs.count);
        if self.args.power_loss {
            let p = &self.power_losses;
            out!(
                "power loss:   {} kills, {} names and {} objects' bytes dropped as not yet durable",
                p.kills,
                p.names_lost,
                p.bytes_lost
            );
        }
        self.paths();
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

impl Gate<'_> {
    /// The per-path counts of the whole run: every path is named, so that
    /// one no cycle reached shows as 0.
    fn paths(&self) {
        let p = &self.totals.paths;
        let named = |map: &BTreeMap<String, u64>, names: &[&str]| -> String {
            let mut parts: Vec<String> = names
                .iter()
                .map(|n| format!("{n} {}", map.get(*n).copied().unwrap_or(0)))
                .collect();
            for (name, count) in map {
                if !names.contains(&name.as_str()) {
                    parts.push(format!("{name} {count}"));
                }
            }
            parts.join(", ")
        };
        let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        out!(
            "faults armed: {} ({})",
            p.faults_armed.values().sum::<u64>(),
            named(&p.faults_armed, &kinds)
        );
        let errors = ["not-durable", "storage", "failing", "lost"];
        out!(
            "appends failed: {} entries ({}); {} refused, their region released",
            p.failed_appends.values().sum::<u64>(),
            named(&p.failed_appends, &errors),
            p.refused_released
        );
        out!(
            "not durable:  {} entries whose append returned NotDurable (none replayed, or resurrected counts it)",
            p.failed_appends.get("not-durable").copied().unwrap_or(0)
        );
        out!(
            "releases kept: {} (release calls refused with Failing, their records kept); failed release calls: {}",
            p.failed_releases.get("failing").copied().unwrap_or(0),
            named(&p.failed_releases, &["failing", "not-durable", "storage"])
        );
        out!(
            "lives:        {} kills in a life's own open, {} opens failed under faults and repeated, {} second openers within a life; {} reads in lives ({} entries checked), {} failed",
            self.kills_in_open,
            p.failed_opens,
            p.second_openers,
            p.life_reads,
            p.life_read_entries,
            p.life_reads_failed
        );
        out!(
            "replays compared: {} region sequences ({} entries) of Wal::replay and WalReader::replay, from 0 and from drawn ids",
            p.replays_compared,
            p.replay_entries
        );
        out!(
            "store counters: {} (the lives' objwal_* counters, as each last reported them)",
            named(&p.store, STORE_COUNTERS)
        );
    }
}

/// The store's counters the summary names even when no life moved them.
const STORE_COUNTERS: &[&str] = &[
    "created_objects_total",
    "create_conflicts_total",
    "create_failures_total",
    "hedged_creates_total",
    "rejected_appends_total",
    "stalled_appends_total",
    "release_records_total",
    "deleted_objects_total",
    "failed_deletes_total",
    "skipped_segments_total",
    "poisoned_total",
    // Not the store's: the directory backend's "already exists" answers
    // to object creates, counted by a `--power-loss` life (`child.rs`).
    "crash_gate_exists_total",
];

/// Every entry of a bulk replay, as the comparison sees it, or the error
/// that ended it.
async fn collect(
    replay: impl Stream<Item = Result<Entry, objwal::Error>>,
) -> Result<Vec<(u64, Seen)>, String> {
    let mut replay = std::pin::pin!(replay);
    let mut entries = Vec::new();
    while let Some(entry) = replay.next().await {
        let entry = entry.map_err(|e| e.to_string())?;
        entries.push((entry.region, seen(entry.id, &entry.data)));
    }
    Ok(entries)
}

/// The nearest-rank percentile `p` of sorted values.
fn percentile(sorted: &[Duration], p: usize) -> Option<&Duration> {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1)
}

/// Where life `life` journals what a power loss keeps: beside the store's
/// directory, never in it (a journal is not an object).
pub(crate) fn journal_path(url: &str, life: u32) -> Result<std::path::PathBuf, CliError> {
    let root = store::file_path(url)
        .ok_or_else(|| CliError::Usage("crash-gate --power-loss needs a file:// store".into()))?;
    let name = root
        .file_name()
        .map_or_else(|| "store".into(), |n| n.to_string_lossy().into_owned());
    Ok(root.with_file_name(format!("{name}.power-loss-{life}.journal")))
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
