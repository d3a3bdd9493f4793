//! The `objwal` command line tool: `demo`, `inspect`, `verify`, `dump`,
//! `tail`, `bench` and `repair` over any storage URL (`file://`, `memory://`,
//! `s3://`, `gs://`, `azblob://`).
//!
//! Exit codes: 0 success; 1 a failure the tool found (a replay mismatch,
//! damaged objects, a storage or store error); 2 bad input (a clap error, a
//! bad URL, a bad configuration value, an unknown region), always with a
//! one-line message on stderr. Nothing panics on bad input: every fallible
//! path returns a [`CliError`] that `main` maps to its exit code.
#![allow(
    clippy::print_stderr,
    reason = "a command line tool reports its errors on stderr"
)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Prints a line on stdout. A closed pipe (`objwal inspect URL | head`)
/// ends the output, not the command: no panic, no error.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod bench;
mod bench_follow;
mod bench_replay;
mod crash_gate;
mod demo;
mod inspect;
mod metrics_http;
mod payload;
mod soak;
mod store;
mod tail;

/// objwal: a write-ahead log on object storage.
#[derive(Debug, Parser)]
#[command(name = "objwal", version, about)]
struct Cli {
    /// The WAL prefix inside the store.
    #[arg(long, global = true, default_value = "objwal")]
    prefix: String,
    /// Tracing logs on stderr (-v info, -vv debug, -vvv trace); RUST_LOG wins.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// A TOML configuration file (keys as in objwal.toml); a command's own
    /// options override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A storage-engine workload that is SIGKILLed, reopened and checked.
    Demo(demo::DemoArgs),
    /// The writer process of `demo` (internal).
    #[command(hide = true)]
    DemoChild(demo::child::ChildArgs),
    /// The objects of a prefix and a per-region summary (read-only).
    Inspect(inspect::InspectArgs),
    /// Decodes every object fully; exit 1 on damage (read-only).
    Verify(inspect::verify::VerifyArgs),
    /// The entries of one region (read-only).
    // The usage clap derives leaves out that the log's prefix is an
    // option with a default (global, so it goes before or after `dump`).
    #[command(
        override_usage = "objwal dump <URL> --region <REGION> [--from <ID>] [--raw] [--prefix <PREFIX>]"
    )]
    Dump(inspect::dump::DumpArgs),
    /// The entries of one region as they land, until Ctrl-C (read-only).
    Tail(tail::TailArgs),
    /// The write path under load: throughput, latency, objects, requests.
    Bench(bench::BenchArgs),
    /// Moves damaged objects aside under <prefix>/quarantine/ (with --yes;
    /// stop every process writing the log first).
    Repair(inspect::repair::RepairArgs),
    /// Restart at scale: bulk replay vs per-region reads, open, pinning.
    BenchReplay(bench_replay::BenchReplayArgs),
    /// Following: lag, idle requests, catch-up, handoff pause, promotion.
    BenchFollow(bench_follow::BenchFollowArgs),
    /// Kills a workload again and again on one prefix; checks every reopen.
    CrashGate(crash_gate::CrashGateArgs),
    /// Mixed load with injected faults; checks memory, fds and tasks.
    Soak(soak::SoakArgs),
}

/// Why a command did not succeed, and so which exit code it gets.
#[derive(Debug)]
pub enum CliError {
    /// Bad input: a URL, a configuration value, an argument (exit 2).
    Usage(String),
    /// The command ran and found a failure (exit 1).
    Failed(String),
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Failed(_) => 1,
        }
    }

    fn message(&self) -> &str {
        match self {
            CliError::Usage(m) | CliError::Failed(m) => m,
        }
    }
}

impl From<objwal::Error> for CliError {
    /// Refused arguments and configurations are bad input; everything else
    /// is a failure.
    fn from(e: objwal::Error) -> Self {
        match e {
            objwal::Error::InvalidArgument { .. }
            | objwal::Error::InvalidConfig { .. }
            | objwal::Error::Config { .. } => CliError::Usage(e.to_string()),
            other => CliError::Failed(other.to_string()),
        }
    }
}

impl From<objwal::StorageError> for CliError {
    fn from(e: objwal::StorageError) -> Self {
        CliError::Failed(e.to_string())
    }
}

/// The result of a command.
pub type CliResult = Result<(), CliError>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version print and exit 0; usage errors exit 2.
        Err(e) => e.exit(),
    };
    init_tracing(cli.verbose);
    if let Some(path) = &cli.config {
        if let Err(e) = store::load_base(path) {
            eprintln!("objwal: {}", e.message());
            return ExitCode::from(e.exit_code());
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("objwal: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let prefix = cli.prefix;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Demo(args) => demo::run(&prefix, cli.verbose, args).await,
            Command::DemoChild(args) => demo::child::run(&prefix, args).await,
            Command::Inspect(args) => inspect::run(&prefix, args).await,
            Command::Verify(args) => inspect::verify::run(&prefix, args).await,
            Command::Dump(args) => inspect::dump::run(&prefix, args).await,
            Command::Tail(args) => tail::run(&prefix, args).await,
            Command::Bench(args) => bench::run(&prefix, args).await,
            Command::Repair(args) => inspect::repair::run(&prefix, args).await,
            Command::BenchReplay(args) => bench_replay::run(&prefix, args).await,
            Command::BenchFollow(args) => bench_follow::run(&prefix, args).await,
            Command::CrashGate(args) => crash_gate::run(&prefix, cli.verbose, args).await,
            Command::Soak(args) => soak::run(&prefix, args).await,
        }
    });
    // Background tasks (a stopped store's deletes, a killed child's reaper)
    // must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("objwal: {}", e.message());
            ExitCode::from(e.exit_code())
        }
    }
}

/// Logs to stderr: `RUST_LOG` when set, else warnings, raised by `-v`.
fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.is_empty() => EnvFilter::try_new(spec),
        _ => EnvFilter::try_new(default),
    }
    .unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
