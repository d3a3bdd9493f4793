//! `objwal demo`: a storage-engine workload that crashes and is checked.
//!
//! The parent re-executes its own binary as the hidden `demo-child`
//! ([`crate::demo::child`]), which appends, flushes and logs every
//! acknowledgement. At a random moment (seeded: 40% to 100% of `--seconds`)
//! the parent SIGKILLs it, reopens the WAL in-process, replays every region
//! from 0 and checks the replay against the log ([`crate::demo::check`]).
//! It obsoletes nothing itself, stops the reopened store cleanly, prints a
//! summary and exits 1 on any mismatch. Then it moves a region between two
//! nodes' logs in the same store and checks it ([`crate::demo::handoff`]).
//!
//! The default store is a fresh directory under the system temp directory
//! (`objwal-demo-PID-MILLIS`: the store and the acknowledgement log, some
//! tens of MiB). A successful run removes it and says how much it freed;
//! with `--keep` it stays, and the demo prints the `objwal inspect` line
//! to look inside. A failed run always keeps it and names it, as evidence. On a store whose
//! prefix already holds a log (an earlier demo's, say) the demo checks only
//! its own run: every sequence of this run lies above the largest sequence
//! listed before the writer started, so entries at or below it are earlier
//! content, counted and not checked; and every payload carries this run's
//! tag ([`crate::payload`]), so no earlier payload can pass for one of ours.
//!
//! `--metrics-addr` makes the writer process serve its metrics (it is the
//! one that writes); the parent prints the bound address as its `metrics:`
//! line as soon as the writer has opened the store.

pub(crate) mod check;
pub(crate) mod child;
pub(crate) mod handoff;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use objwal::{ObjectStorage, Storage, Wal};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::demo::check::{AckLog, Checker, Report};
use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};

/// Arguments of `objwal demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// The store URL (default: a fresh directory under the temp directory).
    #[arg(long)]
    store: Option<String>,
    /// How long the writer runs at most before it is killed.
    #[arg(long, default_value = "3", value_parser = store::seconds)]
    seconds: f64,
    /// When the writer's appends return.
    #[arg(long, value_enum, default_value = "durable")]
    ack_mode: AckModeArg,
    /// Regions appended to.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    regions: u32,
    /// Concurrent writer tasks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    writers: u16,
    /// The random seed (default: from the clock); printed for replays.
    #[arg(long)]
    seed: Option<u64>,
    /// The writer's flush interval (a duration like "10ms").
    #[arg(long, default_value = "10ms")]
    flush_interval: String,
    /// The writer process serves its metrics as Prometheus text at
    /// http://HOST:PORT/metrics until it is killed (port 0: a free port; the
    /// bound address is the `metrics:` line).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Keep the demo's own directory (without --store) after a successful
    /// run, to look inside with `objwal inspect`; a failed run always
    /// keeps it.
    #[arg(long)]
    keep: bool,
}

/// Where the demo keeps its store and its acknowledgement log.
struct Place {
    url: String,
    log: PathBuf,
    /// Remove the log after a success (it lives beside a user's store).
    remove_log: bool,
    /// The demo's own directory (no `--store`): removed after a success
    /// unless `--keep`.
    own_dir: Option<PathBuf>,
}

fn place(store_url: Option<&str>) -> Result<Place, CliError> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = format!("objwal-demo-{}-{stamp}", std::process::id());
    let tmp = std::env::temp_dir();
    match store_url {
        Some(url) => {
            if url.starts_with("memory:") {
                return Err(CliError::Usage(format!(
                    "storage URL {url:?}: the demo's writer is another process, so it needs a store that outlives it (file://, s3://)"
                )));
            }
            Ok(Place {
                url: url.to_owned(),
                log: tmp.join(format!("{name}.acks.log")),
                remove_log: true,
                own_dir: None,
            })
        }
        None => {
            let base = tmp.join(name);
            std::fs::create_dir_all(&base)
                .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", base.display())))?;
            let url = ::url::Url::from_directory_path(base.join("store"))
                .map_err(|()| CliError::Failed(format!("{} is not absolute", base.display())))?
                .to_string();
            Ok(Place {
                url: url.trim_end_matches('/').to_owned(),
                log: base.join("acks.log"),
                remove_log: false,
                own_dir: Some(base),
            })
        }
    }
}

/// Runs the demo.
pub async fn run(prefix: &str, verbose: u8, args: DemoArgs) -> CliResult {
    store::prefix(prefix)?;
    let flush = serde_json::Map::from_iter([(
        "flush_interval".to_owned(),
        serde_json::Value::from(args.flush_interval.clone()),
    )]);
    store::config(flush)?;
    let place = place(args.store.as_deref())?;
    let result = run_at(prefix, verbose, &args, &place).await;
    match (&place.own_dir, result) {
        (Some(dir), Ok(())) if !args.keep => {
            let bytes = dir_bytes(dir);
            match std::fs::remove_dir_all(dir) {
                Ok(()) => out!(
                    "cleaned up:   removed {} ({:.1} MiB; --keep keeps it to look inside)",
                    dir.display(),
                    bytes as f64 / f64::from(1 << 20)
                ),
                Err(e) => out!("cleaned up:   could not remove {}: {e}", dir.display()),
            }
            Ok(())
        }
        (Some(dir), Err(e)) => Err(kept_for(e, dir)),
        (_, result) => result,
    }
}

/// A failure, with where the demo's files were kept.
fn kept_for(e: CliError, dir: &Path) -> CliError {
    let kept = format!(
        " (the demo's store and acknowledgement log are kept in {})",
        dir.display()
    );
    match e {
        CliError::Failed(m) => CliError::Failed(format!("{m}{kept}")),
        CliError::Usage(m) => CliError::Usage(format!("{m}{kept}")),
    }
}

/// The bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// The demo on `place`.
async fn run_at(prefix: &str, verbose: u8, args: &DemoArgs, place: &Place) -> CliResult {
    let storage = store::open(&place.url, false)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let kill_after = Duration::from_secs_f64(args.seconds * rng.random_range(0.4..=1.0));
    let enqueued = args.ack_mode == AckModeArg::Enqueued;
    out!(
        "objwal demo: {} regions, {} writers, {} acks, flush interval {}, seed {seed}",
        args.regions,
        args.writers,
        args.ack_mode.as_str(),
        args.flush_interval
    );
    out!("store:        {} (prefix {prefix})", place.url);
    let (earlier_objects, earlier) = earlier_content(&storage, prefix).await?;
    if earlier_objects > 0 {
        out!(
            "earlier:      the prefix already holds {earlier_objects} objects (through sequence {earlier}); only this run is checked"
        );
    }
    let run = run_tag();

    let child = Child {
        seed,
        run,
        kill_after,
    };
    let killed = run_child(prefix, verbose, args, place, &child).await?;
    out!(
        "writer:       pid {} SIGKILLed after {:.2} s (of {} s)",
        killed.pid,
        killed.after.as_secs_f64(),
        args.seconds
    );
    let text = std::fs::read_to_string(&place.log)
        .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", place.log.display())))?;
    let log = AckLog::parse(&text).map_err(CliError::Failed)?;
    let (objects, bytes) = usage(&storage, prefix).await?;

    let started = Instant::now();
    let handoff_storage = storage.clone();
    let wal = Wal::open(storage, prefix, crate::store::base()).await?;
    let open_time = started.elapsed();
    let mut checker = Checker::new(&log, enqueued, earlier, run);
    let replay = replay(&wal, args.regions, &mut checker).await;
    let stopped = wal.stop().await;
    replay?;
    let report = checker.finish();
    print_summary(&log, &report, objects, bytes, open_time, enqueued);
    let handoff = crate::demo::handoff::run(&handoff_storage, prefix, run).await;
    if let Err(e) = stopped {
        return Err(CliError::Failed(format!(
            "the reopened store did not stop cleanly: {e}"
        )));
    }
    handoff?;
    if !report.mismatches.is_empty() {
        for m in report.mismatches.iter().take(20) {
            out!("  mismatch: {m}");
        }
        return Err(CliError::Failed(format!(
            "demo: {} mismatches (acknowledgement log kept at {}, seed {seed})",
            report.mismatches.len(),
            place.log.display()
        )));
    }
    if place.remove_log {
        let _ = std::fs::remove_file(&place.log);
    } else if let (true, Some(path)) = (args.keep, store::file_path(&place.url)) {
        out!("look inside:  objwal inspect {}", display_url(&path));
    }
    Ok(())
}

fn display_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A tag for this run's payloads: from the clock and the pid, never from
/// the seed (a replay with the same seed is still another run).
fn run_tag() -> u32 {
    let h = clock_seed().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 32) as u32 ^ h as u32
}

/// The number of objects under the prefix and the largest sequence among
/// them (0 when none): what was there before this run.
async fn earlier_content(storage: &Storage, prefix: &str) -> Result<(usize, u64), CliError> {
    let parsed = store::prefix(prefix)?;
    let listed = storage.list(&parsed.objects_prefix()).await?;
    let max = listed
        .iter()
        .filter_map(|o| parsed.parse_object_key(&o.key))
        .max()
        .unwrap_or(0);
    Ok((listed.len(), max))
}

fn clock_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

struct Killed {
    pid: u32,
    after: Duration,
}

/// What one writer process is started with.
struct Child {
    seed: u64,
    run: u32,
    kill_after: Duration,
}

/// Starts the writer process and SIGKILLs it after `kill_after`. Its exit
/// before that is a failure.
async fn run_child(
    prefix: &str,
    verbose: u8,
    args: &DemoArgs,
    place: &Place,
    child_args: &Child,
) -> Result<Killed, CliError> {
    let (seed, kill_after) = (child_args.seed, child_args.kill_after);
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("cannot find the objwal binary: {e}")))?;
    let mut command = tokio::process::Command::new(exe);
    crate::store::forward_config(&mut command);
    if verbose > 0 {
        command.arg(format!("-{}", "v".repeat(usize::from(verbose))));
    }
    command
        .arg("--prefix")
        .arg(prefix)
        .arg("demo-child")
        .arg("--store")
        .arg(&place.url)
        .arg("--log")
        .arg(&place.log)
        .arg("--ack-mode")
        .arg(args.ack_mode.as_str())
        .arg("--regions")
        .arg(args.regions.to_string())
        .arg("--writers")
        .arg(args.writers.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--flush-interval")
        .arg(&args.flush_interval)
        .arg("--deadline")
        .arg((args.seconds + 60.0).to_string())
        .arg("--drop-after")
        .arg((args.seconds * 0.25).to_string())
        .arg("--run")
        .arg(child_args.run.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(addr) = &args.metrics_addr {
        command
            .arg("--metrics-addr")
            .arg(addr)
            .stdout(std::process::Stdio::piped());
    }
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|e| CliError::Failed(format!("cannot start the writer process: {e}")))?;
    let pid = child.id().unwrap_or(0);
    let deadline = tokio::time::Instant::from_std(started + kill_after);
    // Kept open until the kill: the writer may still write to it.
    let _metrics_line = match child.stdout.take() {
        None => None,
        Some(stdout) => Some(metrics_line(stdout, deadline).await?),
    };
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| CliError::Failed(format!("writer process: {e}")))?;
            Err(CliError::Failed(format!("the writer process ended by itself ({status}) before the kill")))
        }
        () = tokio::time::sleep_until(deadline) => {
            // SIGKILL: no destructor, no flush, no stop runs in the child.
            child.start_kill().map_err(|e| CliError::Failed(format!("cannot kill the writer: {e}")))?;
            let after = started.elapsed();
            child.wait().await.map_err(|e| CliError::Failed(format!("writer process: {e}")))?;
            Ok(Killed { pid, after })
        }
    }
}

/// Reads the writer's `metrics ADDR` line and prints it as the demo's
/// `metrics:` line; returns the rest of the writer's stdout. A kill that
/// comes first leaves nothing to print.
async fn metrics_line(
    stdout: tokio::process::ChildStdout,
    deadline: tokio::time::Instant,
) -> Result<tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>, CliError> {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    tokio::select! {
        line = lines.next_line() => match line {
            Ok(Some(line)) => match line.strip_prefix("metrics ") {
                Some(addr) => out!("metrics:      http://{addr}/metrics (the writer's, until it is killed)"),
                None => return Err(CliError::Failed(format!("the writer process printed {line:?}, not its metrics address"))),
            },
            Ok(None) | Err(_) => return Err(CliError::Failed(
                "the writer process ended before it served its metrics (see its error above)".into(),
            )),
        },
        () = tokio::time::sleep_until(deadline) => {}
    }
    Ok(lines)
}

/// The number and bytes of the prefix's objects.
async fn usage(storage: &Storage, prefix: &str) -> Result<(usize, u64), CliError> {
    let prefix = store::prefix(prefix)?;
    let listed = storage.list(&prefix.objects_prefix()).await?;
    Ok((listed.len(), listed.iter().map(|o| o.size).sum()))
}

/// Replays every region from 0 into the checker, in one pass over the
/// objects (`Wal::replay`), as an engine restarting a node does.
async fn replay(wal: &Wal, regions: u32, checker: &mut Checker<'_>) -> CliResult {
    let mut entries = Box::pin(wal.replay((0..u64::from(regions)).map(|r| (r, 0))));
    while let Some(entry) = entries.next().await {
        let entry = entry.map_err(|e| CliError::Failed(format!("replay failed: {e}")))?;
        checker.entry(entry.region, entry.id, &entry.data);
    }
    Ok(())
}

fn print_summary(
    log: &AckLog,
    report: &Report,
    objects: usize,
    bytes: u64,
    open_time: Duration,
    enqueued: bool,
) {
    out!(
        "objects:      {objects} ({:.2} MiB) written by the writer",
        bytes as f64 / f64::from(1u32 << 20)
    );
    if enqueued {
        out!(
            "acknowledged: {} entries logged, {} of them logged durable; {} regions flushed",
            log.acknowledged(),
            log.durable(),
            log.flushed_regions()
        );
    } else {
        out!(
            "acknowledged: {} entries logged; {} regions flushed",
            log.acknowledged(),
            log.flushed_regions()
        );
    }
    match log.released_regions().as_slice() {
        [] => out!("dropped:      no region (the kill came before the release returned)"),
        regions => out!(
            "dropped:      region {} released; it replays nothing",
            regions
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    let collected = if report.obsolete_gone > 0 {
        format!("; {} obsolete entries collected", report.obsolete_gone)
    } else {
        String::new()
    };
    let earlier = if report.earlier > 0 {
        format!("; {} of earlier runs, not checked", report.earlier)
    } else {
        String::new()
    };
    out!(
        "replayed:     {} entries ({} acknowledged, not yet logged when killed{collected}{earlier})",
        report.replayed,
        report.unlogged
    );
    if enqueued {
        out!(
            "lost:         {} acknowledged, not yet durable entries in {} whole objects (allowed in enqueued mode)",
            report.lost, report.lost_objects
        );
    }
    out!("open time:    {:.1} ms", open_time.as_secs_f64() * 1000.0);
    if report.mismatches.is_empty() {
        let what = if enqueued { "durable" } else { "acknowledged" };
        out!("verdict:      OK: every {what} entry replayed byte for byte, in order, once");
    } else {
        out!(
            "verdict:      FAILED: {} mismatches",
            report.mismatches.len()
        );
    }
}
