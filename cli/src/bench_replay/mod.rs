//! `objwal bench-replay`: restart at scale, measured (issue 15).
//!
//! Three scenarios, each a subcommand:
//! - `restart` ([`restart`]): N regions x M objects, read latency injected
//!   with the fault wrapper; per run, a bulk `replay` of every region
//!   against per-region `read`s, today's (one read in flight) and with
//!   prefetch, with the requests and bytes each fetched.
//! - `open` ([`open`]): the cold open of M objects of 1 MiB against M small
//!   objects: tail bytes read against the footers' bytes, and time.
//! - `pinning` ([`pinning`]): one cold region among hot ones, with and
//!   without flush requests: the objects the prefix holds.
//! - `regions` ([`regions`]): the open of a log of many idle regions
//!   against a log of few: open time and heap held per idle region
//!   (issue 23).
//! - `released` ([`released`]): the open of a log with many released
//!   regions whose records were collected against the same log without
//!   releases: what the release markers cost an open (issue 30).
//!
//! The machine may be shared and noisy, so every scenario runs its
//! variants interleaved, `--runs` times, and reports medians and the ratio
//! of the variants *within* each run (then the median ratio): a ratio never
//! mixes figures of different runs. Nothing here is a pass/fail test; the
//! issue's targets are printed beside the figures.

use std::time::Duration;

use objwal::Storage;

use crate::{CliError, CliResult};

mod open;
mod pinning;
mod regions;
mod released;
mod restart;

/// Arguments of `objwal bench-replay`.
#[derive(Debug, clap::Args)]
pub struct BenchReplayArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, clap::Subcommand)]
enum Scenario {
    /// A restart that replays every region: bulk replay vs per-region reads.
    Restart(restart::RestartArgs),
    /// The open of large objects vs small ones: tail bytes read and time.
    Open(open::OpenArgs),
    /// One cold region among hot ones: objects held with and without flush
    /// requests.
    Pinning(pinning::PinningArgs),
    /// A log of many idle regions against one of few: open time and heap
    /// held per idle region.
    Regions(regions::RegionsArgs),
    /// A log of many released regions (records collected) against the same
    /// log without releases: what the release markers cost an open.
    Released(released::ReleasedArgs),
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: BenchReplayArgs) -> CliResult {
    crate::store::prefix(prefix)?;
    match args.scenario {
        Scenario::Restart(args) => restart::run(prefix, args).await,
        Scenario::Open(args) => open::run(prefix, args).await,
        Scenario::Pinning(args) => pinning::run(prefix, args).await,
        Scenario::Regions(args) => regions::run(prefix, args).await,
        Scenario::Released(args) => released::run(prefix, args).await,
    }
}

/// The median of `values` (0 when empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A duration as the value parsers of the command line take it ("30ms").
fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// A unique prefix under `prefix` for this run of the bench.
fn run_prefix(prefix: &str, scenario: &str) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        "{prefix}/bench-replay-{scenario}-{}-{stamp}",
        std::process::id()
    )
}

/// Runs `measure` on the store at `store`, or on a scratch directory made
/// for the run (and removed after it) when none is given, under a prefix
/// of its own for `scenario`; what it wrote is deleted after.
async fn on_scratch_store(
    store: Option<&str>,
    prefix: &str,
    scenario: &str,
    measure: impl AsyncFnOnce(&Storage, &str, &str) -> CliResult,
) -> CliResult {
    let (url, temp) = match store {
        Some(url) => (url.to_owned(), None),
        None => {
            let dir = std::env::temp_dir().join(run_prefix("objwal", scenario).replace('/', "-"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
            (format!("file://{}", dir.display()), Some(dir))
        }
    };
    let storage = crate::store::open(&url, true)?;
    let prefix = run_prefix(prefix, scenario);
    let result = measure(&storage, &url, &prefix).await;
    match temp {
        Some(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        None => crate::store::clean(&storage, &prefix).await,
    }
    result
}

/// Seconds, for printing.
fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
