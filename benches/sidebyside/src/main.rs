//! objwal and raft-engine side by side: the same workload on the same kind
//! of directory, the two systems alternating round by round, medians and
//! ratios at the end.
//!
//! A workload is N writers, each appending R rows of B incompressible bytes
//! per append to its own region and waiting for the append before the next
//! one. raft-engine writes with `sync = true` (returns once fsynced);
//! objwal runs on the local directory backend, durable (an append returns
//! once its object is durable and indexed) with the default configuration
//! unless `--objwal` overrides it, or enqueued in the `enqueued8` workload
//! (rows count once durable). Each round runs raft-engine, objwal and the
//! floors (serial creates of objwal's median object on the same backend;
//! and bare loops, one thread per writer, of the workload's appends: to an
//! open file with fdatasync, and as new files with fsync and a directory
//! fsync, which say what the disk gives each way of writing);
//! odd rounds start with raft-engine, even rounds with objwal, so a drift
//! of the machine's load does not favour one side. Every ratio is taken
//! within one round; the summary shows the median over rounds.
//!
//! Invariants: every run starts on a fresh, empty directory under `--dir`
//! and removes it afterwards; the rows are random (incompressible: raft-
//! engine compresses batches above 8 KiB with LZ4) and the same bytes for
//! both systems in a round.

use std::path::PathBuf;

use clap::Parser;
use rand::{RngCore, SeedableRng};

mod raft;
mod stats;
mod wal;

use stats::{median, median_ratio, Run};

/// One workload of the comparison.
#[derive(Debug, Clone)]
pub struct Workload {
    name: &'static str,
    writers: u32,
    rows: usize,
    bytes: usize,
    /// objwal in enqueued mode (raft-engine is always synced).
    enqueued: bool,
}

/// The workloads of issue 11's table.
const WORKLOADS: [Workload; 4] = [
    Workload {
        name: "w8",
        writers: 8,
        rows: 1000,
        bytes: 900,
        enqueued: false,
    },
    Workload {
        name: "w1",
        writers: 1,
        rows: 1000,
        bytes: 900,
        enqueued: false,
    },
    Workload {
        name: "w1-small",
        writers: 1,
        rows: 1,
        bytes: 900,
        enqueued: false,
    },
    Workload {
        name: "enqueued8",
        writers: 8,
        rows: 1000,
        bytes: 900,
        enqueued: true,
    },
];

/// objwal and raft-engine side by side (see BENCHMARKS.md).
#[derive(Debug, Parser)]
struct Args {
    /// Workloads to run, in order: w8, w1, w1-small, enqueued8 (default: all).
    #[arg(long, value_delimiter = ',')]
    workload: Vec<String>,
    /// Rounds per workload (each runs both systems and the floor).
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Seconds of load per system per round.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Where the runs' directories go (default: the temporary directory).
    /// Both systems use the same parent, so the same file system.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// objwal configuration overrides, as TOML (e.g. 'early_seals = "off"').
    #[arg(long, default_value = "")]
    objwal: String,
    /// Seed of the rows.
    #[arg(long, default_value_t = 11)]
    seed: u64,
}

/// `workload.rows` random rows of `workload.bytes` bytes.
pub fn rows_of(workload: &Workload, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..workload.rows)
        .map(|_| {
            let mut row = vec![0u8; workload.bytes];
            rng.fill_bytes(&mut row);
            row
        })
        .collect()
}

/// One round's three measurements.
struct Round {
    raft: Run,
    objwal: Run,
    floor_ms: f64,
    /// Rows/s of the bare loops: append + fdatasync, create + fsync.
    bare_append: f64,
    bare_create: f64,
    /// Rows/s of objwal's backend's creates, one task per writer.
    backend: f64,
    /// The same, each write done only once every write before it is.
    in_order: f64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            println!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let config = objwal::Config::from_toml_str(&args.objwal).map_err(|e| e.to_string())?;
    let workloads: Vec<&Workload> = if args.workload.is_empty() {
        WORKLOADS.iter().collect()
    } else {
        args.workload
            .iter()
            .map(|name| {
                WORKLOADS
                    .iter()
                    .find(|w| w.name == name)
                    .ok_or_else(|| format!("unknown workload {name:?}"))
            })
            .collect::<Result<_, _>>()?
    };
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let base = parent.join(format!("objwal-sidebyside-{}", std::process::id()));
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    println!(
        "sidebyside: {} runs of {} s per system, interleaved; dir {}; load average {}",
        args.runs,
        args.seconds,
        base.display(),
        loadavg()
    );
    println!(
        "objwal config: flush_interval {:?}, max_batch_bytes {}, early_seals {:?}, max_inflight_creates {}",
        config.flush_interval, config.max_batch_bytes, config.early_seals, config.max_inflight_creates
    );
    for workload in workloads {
        println!(
            "\n== {}: {} writers x {} rows x {} B per append, one region per writer; objwal {}",
            workload.name,
            workload.writers,
            workload.rows,
            workload.bytes,
            if workload.enqueued {
                "enqueued"
            } else {
                "durable"
            }
        );
        let mut rounds = Vec::new();
        for n in 1..=args.runs {
            let seed = args.seed ^ (u64::from(n) << 32);
            let dir = |what: &str| base.join(format!("{}-{n}-{what}", workload.name));
            let raft_run = || raft::run(workload, &dir("raft"), args.seconds, seed);
            let objwal_run = || {
                runtime.block_on(wal::run(
                    workload,
                    &config,
                    &dir("objwal"),
                    args.seconds,
                    seed,
                ))
            };
            let (raft, objwal) = if n % 2 == 1 {
                let r = raft_run()?;
                (r, objwal_run()?)
            } else {
                let o = objwal_run()?;
                (raft_run()?, o)
            };
            let object = objwal.object_bytes.unwrap_or(1);
            let floor_ms =
                runtime.block_on(wal::floor(&dir("floor"), object, args.seconds, seed))?;
            let bare_append = wal::bare_loop(&dir("append"), workload, args.seconds, seed, true)?;
            let bare_create = wal::bare_loop(&dir("create"), workload, args.seconds, seed, false)?;
            let backend = runtime.block_on(wal::backend_loop(
                &dir("backend"),
                workload,
                args.seconds,
                seed,
                false,
            ))?;
            let in_order = runtime.block_on(wal::backend_loop(
                &dir("in-order"),
                workload,
                args.seconds,
                seed,
                true,
            ))?;
            print_round(n, &raft, &objwal, floor_ms);
            println!(
                "  bare loops, {} threads: append + fdatasync {bare_append:.0} rows/s, create + fsync + directory fsync {bare_create:.0} rows/s, objwal's backend's creates {backend:.0} rows/s, done in issue order {in_order:.0} rows/s; load {}",
                workload.writers,
                loadavg()
            );
            rounds.push(Round {
                raft,
                objwal,
                floor_ms,
                bare_append,
                bare_create,
                backend,
                in_order,
            });
        }
        print_summary(&rounds);
    }
    let _ = std::fs::remove_dir_all(&base);
    println!("\nload average at the end {}", loadavg());
    Ok(())
}

fn print_round(n: u32, raft: &Run, objwal: &Run, floor_ms: f64) {
    println!(
        "round {n} ({} first): raft-engine {:.0} rows/s p50 {:.3} ms p99 {:.3} ms | objwal {:.0} rows/s p50 {:.3} ms p99 {:.3} ms, {:.1} objects/s, median object {} B | floor create p50 {:.3} ms",
        if n % 2 == 1 { "raft-engine" } else { "objwal" },
        raft.rows_per_s,
        raft.p50_ms,
        raft.p99_ms,
        objwal.rows_per_s,
        objwal.p50_ms,
        objwal.p99_ms,
        objwal.objects_per_s.unwrap_or(0.0),
        objwal.object_bytes.unwrap_or(0),
        floor_ms
    );
}

fn print_summary(rounds: &[Round]) {
    let col = |f: fn(&Round) -> f64| rounds.iter().map(f).collect::<Vec<f64>>();
    let raft_rows = col(|r| r.raft.rows_per_s);
    let objwal_rows = col(|r| r.objwal.rows_per_s);
    let raft_p50 = col(|r| r.raft.p50_ms);
    let objwal_p50 = col(|r| r.objwal.p50_ms);
    let raft_p99 = col(|r| r.raft.p99_ms);
    let objwal_p99 = col(|r| r.objwal.p99_ms);
    let floor = col(|r| r.floor_ms);
    let bare_append = col(|r| r.bare_append);
    let bare_create = col(|r| r.bare_create);
    let backend = col(|r| r.backend);
    let in_order = col(|r| r.in_order);
    println!(
        "{:<24} {:>14} {:>14} {:>20}",
        format!("median of {}", rounds.len()),
        "raft-engine",
        "objwal",
        "objwal/raft-engine"
    );
    let line = |name: &str, a: &[f64], b: &[f64]| {
        println!(
            "{name:<24} {:>14.3} {:>14.3} {:>19.2}x",
            median(a.to_vec()),
            median(b.to_vec()),
            median_ratio(b, a)
        );
    };
    line("rows/s", &raft_rows, &objwal_rows);
    line("append p50 ms", &raft_p50, &objwal_p50);
    line("append p99 ms", &raft_p99, &objwal_p99);
    println!(
        "{:<24} {:>14} {:>14.3} {:>19.2}x  (objwal p50 / floor p50)",
        "floor create p50 ms",
        "-",
        median(floor.clone()),
        median_ratio(&objwal_p50, &floor)
    );
    // The disk's ceilings beside each system: a ratio near 1 says the
    // system runs at what the disk gives its way of writing.
    println!(
        "{:<24} {:>14.0} rows/s  (raft-engine / it {:.2}x, objwal / it {:.2}x)",
        "bare append+fdatasync",
        median(bare_append.clone()),
        median_ratio(&raft_rows, &bare_append),
        median_ratio(&objwal_rows, &bare_append)
    );
    println!(
        "{:<24} {:>14.0} rows/s  (raft-engine / it {:.2}x, objwal / it {:.2}x; it / raft-engine {:.2}x)",
        "bare create+fsync",
        median(bare_create.clone()),
        median_ratio(&raft_rows, &bare_create),
        median_ratio(&objwal_rows, &bare_create),
        median_ratio(&bare_create, &raft_rows)
    );
    println!(
        "{:<24} {:>14.0} rows/s  (objwal / it {:.2}x; it / bare create {:.2}x)",
        "objwal backend's creates",
        median(backend.clone()),
        median_ratio(&objwal_rows, &backend),
        median_ratio(&backend, &bare_create)
    );
    println!(
        "{:<24} {:>14.0} rows/s  (objwal / it {:.2}x; it / backend's creates {:.2}x; it / raft-engine {:.2}x)",
        "  ... done in issue order",
        median(in_order.clone()),
        median_ratio(&objwal_rows, &in_order),
        median_ratio(&in_order, &backend),
        median_ratio(&in_order, &raft_rows)
    );
    println!(
        "{:<24} {:>14} {:>14.1}",
        "objwal objects/s",
        "-",
        median(col(|r| r.objwal.objects_per_s.unwrap_or(0.0)))
    );
}

/// The first three fields of /proc/loadavg ("?" where there is none).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
