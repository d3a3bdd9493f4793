//! `objwal soak` (feature `testing`): mixed load with injected transient
//! faults for a given time, sampling what the process holds.
//!
//! The run is a series of rounds (`--round` seconds each; the ack mode
//! alternates, durable first). Each round opens the store through the
//! fault wrapper, runs the load of [`load`] against it, stops the load,
//! clears the faults, calls `stop` (which must return `Ok`) and drops
//! every handle and the storage. Every 100 ms a sampler reads the
//! resident memory (`VmRSS` of /proc/self/status), the open file
//! descriptors (/proc/self/fd) and tokio's alive tasks
//! (`RuntimeMetrics::num_alive_tasks`, stable).
//!
//! Checked, each a failure (exit 1):
//! - resident memory never exceeds the baseline by more than the bound
//!   the configuration promises: `max_unpersisted_bytes` (the enqueued
//!   backlog) + `max_inflight_creates` x `max_batch_bytes` (objects held
//!   until durable) + the open batch + what the writers' appends and the
//!   reader's page hold at once + [`SLACK_MIB`] (allocator, runtime, HTTP
//!   client and TLS state, measured below it);
//! - memory does not creep: the peak of the last round stays within
//!   [`CREEP_MIB`] of the peak of the second round (the first warms up);
//! - the log does not grow round after round: the objects left after the
//!   last round's stop stay within [`OBJECTS_SLACK`] of twice the second
//!   round's (each round hands in that it needs nothing of the earlier
//!   ones, as an engine hands in its watermarks after a restart);
//! - after each round's `stop` and drop, the open file descriptors come
//!   back to what the process held before the round and tokio's alive
//!   tasks to what they were before the first store opened, within
//!   [`SETTLE_DEADLINE`]: nothing leaks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use objwal::storage::fault::FaultyStorage;
use objwal::{Config, ObjectStorage, Wal};
use tokio::sync::watch;

use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};

mod load;

/// Resident memory allowed above the bound the configuration promises:
/// what the process holds besides the log's data (tokio's worker and
/// blocking threads with their stacks and malloc arenas, the HTTP client's
/// connection pool and TLS state, the encoder's scratch). Measured on this
/// machine at 4 to 7 MiB above the baseline with the data bound nowhere
/// near full (RELIABILITY.md); 32 MiB leaves room for a busier allocator
/// while a leak of the backlog's size still fails.
const SLACK_MIB: u64 = 32;
/// Growth allowed between the second round's peak and the last one's.
const CREEP_MIB: u64 = 32;
/// Objects allowed after the last round beyond twice the second round's.
const OBJECTS_SLACK: usize = 512;
/// How long fds and tasks may take to come back after a stop.
const SETTLE_DEADLINE: Duration = Duration::from_secs(20);
const MIB: u64 = 1 << 20;

/// The soak's store configuration: bounds small enough to be met.
const MAX_BATCH_BYTES: u64 = MIB;
const MAX_UNPERSISTED_BYTES: u64 = 8 * MIB;
const MAX_INFLIGHT_CREATES: usize = 4;

/// Arguments of `objwal soak`.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// The store URL (default: a fresh directory under the temp
    /// directory); the prefix in it must be empty.
    #[arg(long)]
    store: Option<String>,
    /// How long the load runs, in seconds.
    #[arg(long, default_value = "60", value_parser = store::seconds)]
    seconds: f64,
    /// Seconds per round (a store opened, loaded, stopped and dropped).
    #[arg(long, default_value = "10", value_parser = store::seconds)]
    round: f64,
    /// Regions appended to.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    regions: u64,
    /// Concurrent writer tasks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    writers: u16,
    /// The random seed (default: from the clock); printed.
    #[arg(long)]
    seed: Option<u64>,
}

/// What the process holds at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    rss: u64,
    fds: u64,
    tasks: u64,
}

fn sample() -> Result<Sample, CliError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| CliError::Failed(format!("soak: cannot read /proc/self/status: {e}")))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| CliError::Failed("soak: no VmRSS in /proc/self/status".into()))?;
    let fds = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| CliError::Failed(format!("soak: cannot list /proc/self/fd: {e}")))?
        .count() as u64;
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks() as u64;
    Ok(Sample {
        rss: rss * 1024,
        fds,
        tasks,
    })
}

/// The peaks of a round.
#[derive(Debug, Default, Clone, Copy)]
struct Peaks {
    rss: u64,
    fds: u64,
    tasks: u64,
    /// Objects the log keeps after the round's stop.
    objects: usize,
}

/// The memory bound above the baseline, and how it is made up.
fn bound(writers: u16) -> (u64, String) {
    let backlog = MAX_UNPERSISTED_BYTES;
    let in_flight = MAX_INFLIGHT_CREATES as u64 * MAX_BATCH_BYTES;
    let open = MAX_BATCH_BYTES;
    let appends = u64::from(writers) * (load::MAX_ENTRIES * load::MAX_ENTRY) as u64;
    // A read page: up to 8 segments of one region, each within one batch.
    let reads = 8 * MAX_BATCH_BYTES;
    let total = backlog + in_flight + open + appends + reads + SLACK_MIB * MIB;
    let how = format!(
        "backlog {} + in flight {MAX_INFLIGHT_CREATES} x {} + open batch {} + appends {} + a read page {} + slack {SLACK_MIB} MiB",
        mib(backlog),
        mib(MAX_BATCH_BYTES),
        mib(open),
        mib(appends),
        mib(reads)
    );
    (total, how)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// Runs the soak.
pub async fn run(prefix: &str, args: SoakArgs) -> CliResult {
    store::prefix(prefix)?;
    let (url, scratch) = crate::crash_gate::place(
        args.store.as_deref(),
        "soak",
        "a store in the soak's own memory would be measured as the soak's memory",
    )?;
    {
        let storage = store::open(&url, false)?;
        crate::crash_gate::refuse_used_prefix(&storage, prefix, "soak").await?;
    }
    let seed = args.seed.unwrap_or_else(crate::crash_gate::clock_seed);
    let rounds = (args.seconds / args.round).ceil().max(1.0) as u32;
    let round = Duration::from_secs_f64(args.seconds / f64::from(rounds));
    out!(
        "objwal soak: {} s in {rounds} rounds of {:.1} s (durable and enqueued in turn), {} regions, {} writers, seed {seed}",
        args.seconds,
        round.as_secs_f64(),
        args.regions,
        args.writers
    );
    out!("store:        {url} (prefix {prefix})");
    let baseline = sample()?;
    let (limit, how) = bound(args.writers);
    out!(
        "baseline:     RSS {}, {} fds, {} tasks; bound RSS + {} ({how})",
        mib(baseline.rss),
        baseline.fds,
        baseline.tasks,
        mib(limit)
    );
    let mut peaks = Vec::new();
    let mut failure = None;
    for n in 0..rounds {
        let enqueued = n % 2 == 1;
        let before = sample()?;
        match one_round(prefix, &url, &args, seed ^ u64::from(n), enqueued, round).await {
            Ok((p, counts)) => {
                let after = settle(before.fds, baseline.tasks).await;
                out!(
                    "round {:>3}/{rounds} ({}): {} entries ({}), {} read, {} obsolete, {} released, {} flushes; {} faults, {} retryable errors; peak RSS {}, {} fds, {} tasks; after stop {} fds, {} tasks, {} objects",
                    n + 1,
                    if enqueued { "enqueued" } else { "durable" },
                    counts.appended.load(std::sync::atomic::Ordering::Relaxed),
                    mib(counts.bytes.load(std::sync::atomic::Ordering::Relaxed)),
                    counts.read.load(std::sync::atomic::Ordering::Relaxed),
                    counts.obsoleted.load(std::sync::atomic::Ordering::Relaxed),
                    counts.released.load(std::sync::atomic::Ordering::Relaxed),
                    counts.flushes.load(std::sync::atomic::Ordering::Relaxed),
                    counts.faults.load(std::sync::atomic::Ordering::Relaxed),
                    counts.retryable.load(std::sync::atomic::Ordering::Relaxed),
                    mib(p.rss),
                    p.fds,
                    p.tasks,
                    after.fds,
                    after.tasks,
                    p.objects
                );
                peaks.push(p);
                if after.fds > before.fds || after.tasks > baseline.tasks {
                    failure = Some(format!(
                        "round {}: after stop {} fds (before the round {}) and {} tasks (baseline {}) within {SETTLE_DEADLINE:?}: a leak",
                        n + 1, after.fds, before.fds, after.tasks, baseline.tasks
                    ));
                    break;
                }
            }
            Err(e) => {
                failure = Some(e.message().to_owned());
                break;
            }
        }
    }
    let peak = peaks.iter().map(|p| p.rss).max().unwrap_or(0);
    out!(
        "memory:       peak RSS {} = baseline + {} (bound + {})",
        mib(peak),
        mib(peak.saturating_sub(baseline.rss)),
        mib(limit)
    );
    if failure.is_none() && peak.saturating_sub(baseline.rss) > limit {
        failure = Some(format!(
            "resident memory rose {} above the baseline, beyond the bound {}",
            mib(peak - baseline.rss),
            mib(limit)
        ));
    }
    if let (Some(second), Some(last)) = (peaks.get(1), peaks.last()) {
        out!(
            "creep:        peak RSS of round 2 {}, of the last round {}",
            mib(second.rss),
            mib(last.rss)
        );
        if failure.is_none() && last.rss > second.rss + CREEP_MIB * MIB {
            failure = Some(format!(
                "resident memory crept from {} to {} over the run",
                mib(second.rss),
                mib(last.rss)
            ));
        }
        out!(
            "objects:      {} after round 2, {} after the last round",
            second.objects,
            last.objects
        );
        if failure.is_none() && last.objects > 2 * second.objects + OBJECTS_SLACK {
            failure = Some(format!(
                "the log grew from {} objects after round 2 to {} after the last round",
                second.objects, last.objects
            ));
        }
    }
    out!(
        "fds, tasks:   peak {} fds, {} tasks; back to the level before each round after every stop",
        peaks.iter().map(|p| p.fds).max().unwrap_or(0),
        peaks.iter().map(|p| p.tasks).max().unwrap_or(0)
    );
    match failure {
        None => {
            out!("verdict:      OK: memory within its bound, no creep, no fd or task left after stop");
            if let Some(dir) = scratch {
                let _ = std::fs::remove_dir_all(dir);
            }
            Ok(())
        }
        Some(why) => {
            out!("verdict:      FAILED: {why}");
            Err(CliError::Failed(format!("soak: {why} (seed {seed})")))
        }
    }
}

/// Flushes every region an earlier round left through its last id, as an
/// engine hands in its watermarks after a restart: a round needs nothing of
/// the earlier ones. Without it the regions a round released and replaced
/// held every later object from collection, the log grew round after round
/// and so did the index each open rebuilt (a 120 s soak read that growth as
/// memory creep: 22,775 objects left after 12 rounds).
async fn forget_earlier_rounds(wal: &Wal) -> CliResult {
    let regions = tokio::time::timeout(load::CALL_DEADLINE, wal.regions())
        .await
        .map_err(|_| CliError::Failed("soak: regions did not answer".into()))??;
    let flushable = |r: &&objwal::RegionInfo| {
        !r.released && r.entries > 0 && r.region != objwal::format::RELEASE_REGION
    };
    for info in regions.iter().filter(flushable) {
        tokio::time::timeout(load::CALL_DEADLINE, wal.obsolete(info.region, info.last_id))
            .await
            .map_err(|_| CliError::Failed("soak: obsolete did not answer".into()))??;
    }
    Ok(())
}

/// One round: open, load with faults, stop, drop; its peaks and counts.
async fn one_round(
    prefix: &str,
    url: &str,
    args: &SoakArgs,
    seed: u64,
    enqueued: bool,
    length: Duration,
) -> Result<(Peaks, Arc<load::Counts>), CliError> {
    let faulty = FaultyStorage::new(store::open(url, false)?);
    let mode = if enqueued {
        AckModeArg::Enqueued
    } else {
        AckModeArg::Durable
    };
    let mut overrides = serde_json::Map::new();
    overrides.insert("ack_mode".into(), mode.as_str().into());
    overrides.insert("flush_interval".into(), "10ms".into());
    overrides.insert("max_batch_bytes".into(), MAX_BATCH_BYTES.into());
    overrides.insert("max_unpersisted_bytes".into(), MAX_UNPERSISTED_BYTES.into());
    overrides.insert("max_inflight_creates".into(), MAX_INFLIGHT_CREATES.into());
    let config: Config = store::config(overrides)?;
    let wal = tokio::time::timeout(
        load::CALL_DEADLINE,
        Wal::open(faulty.storage(), prefix, config),
    )
    .await
    .map_err(|_| CliError::Failed("soak: open did not answer".into()))??;
    forget_earlier_rounds(&wal).await?;
    let counts = Arc::new(load::Counts::default());
    let (stop, stopped) = watch::channel(false);
    let setup = load::Setup {
        regions: args.regions,
        writers: args.writers,
        seed,
        enqueued,
    };
    let running = tokio::spawn(load::run(
        wal.clone(),
        faulty.clone(),
        setup,
        counts.clone(),
        stopped,
    ));
    let mut peaks = Peaks::default();
    let started = Instant::now();
    while started.elapsed() < length {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let s = sample()?;
        peaks.rss = peaks.rss.max(s.rss);
        peaks.fds = peaks.fds.max(s.fds);
        peaks.tasks = peaks.tasks.max(s.tasks);
        if running.is_finished() {
            break;
        }
    }
    let _ = stop.send(true);
    let loaded = tokio::time::timeout(load::CALL_DEADLINE * 2, running)
        .await
        .map_err(|_| CliError::Failed("soak: the load did not end after its stop signal".into()))?
        .map_err(|e| CliError::Failed(format!("soak: the load failed: {e}")))?;
    faulty.clear_faults();
    let stopped = tokio::time::timeout(load::CALL_DEADLINE, wal.stop())
        .await
        .map_err(|_| CliError::Failed("soak: stop did not answer".into()))?;
    loaded?;
    stopped.map_err(|e| CliError::Failed(format!("soak: stop after the load: {e}")))?;
    peaks.objects = faulty
        .storage()
        .list(&format!("{prefix}/objects/"))
        .await
        .map_err(|e| CliError::Failed(format!("soak: listing the objects after the round: {e}")))?
        .len();
    Ok((peaks, counts))
}

/// Waits (polling, up to [`SETTLE_DEADLINE`]) until the fds are back to
/// `fds` and the tasks to `tasks`; what it last saw.
async fn settle(fds: u64, tasks: u64) -> Sample {
    let started = Instant::now();
    loop {
        let s = sample().unwrap_or_default();
        if (s.fds <= fds && s.tasks <= tasks) || started.elapsed() > SETTLE_DEADLINE {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instrument itself: it must see what a leak would leave.
    #[tokio::test]
    async fn the_sampler_sees_an_open_file_a_live_task_and_touched_memory() {
        let before = sample().unwrap();
        // Many files: tests running beside this one in the process open and
        // close a few of their own (one file was lost in that noise once).
        let files: Vec<std::fs::File> = (0..64)
            .map(|_| std::fs::File::open("/proc/self/status").unwrap())
            .collect();
        let task = tokio::spawn(futures::future::pending::<()>());
        let memory = vec![7u8; 64 << 20];
        let during = sample().unwrap();
        assert!(during.fds >= before.fds + 32, "{before:?} {during:?}");
        assert_eq!(during.tasks, before.tasks + 1);
        assert!(
            during.rss >= before.rss + (60 << 20),
            "{before:?} {during:?}"
        );
        assert_eq!(memory.iter().map(|b| u64::from(*b)).sum::<u64>(), 7 << 26);
        drop(files);
        task.abort();
        let _ = task.await;
        assert_eq!(sample().unwrap().tasks, before.tasks);
    }

    #[test]
    fn the_bound_adds_up_its_parts() {
        let (total, how) = bound(4);
        assert_eq!(total, (8 + 4 + 1 + 1 + 8 + SLACK_MIB) * MIB);
        assert!(how.contains("slack 32 MiB"), "{how}");
    }
}
