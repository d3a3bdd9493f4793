//! `objwal bench-follow`: following a log, measured (issue 22, item 7).
//!
//! Scenarios, each a subcommand, on a store with injected latency
//! (30 ms per read and per create by default: a remote object store):
//! - `lag` ([`lag`]): a writer appends at a steady rate while a follower
//!   (default settings) follows; per entry, the time from its object's
//!   create landing to the follower yielding it, as percentiles, for a busy
//!   and a light writer.
//! - `idle` ([`idle`]): a follower of a log nobody writes: its requests
//!   per minute once its waits reached the cap, and so per hour.
//! - `catch-up` ([`catch_up`]): a follower whose consumer looked away
//!   while eight busy writers ran drains its backlog: its object rate
//!   against the writers' (issue 31 item 1).
//! - `handoff` ([`handoff`]): a region of 100k unflushed entries moves to
//!   another log, with `import_region` (a reader opened at the switch) and
//!   by following (`Wal::take_over`, caught up before the switch): the
//!   pause from the moment the old node stops writing the region to the
//!   import's return, and the requests made in it.
//! - `promote` ([`promote`]): a standby that kept pace with eight busy
//!   writers becomes the writer of their dead primary's prefix (open, read
//!   above its positions, append): its pause against a bare open of the
//!   same prefix and a cold standby's (issue 31 item 5).
//!
//! Each scenario runs its variants interleaved, `--runs` times, and reports
//! medians and the ratio of the variants within each run (then the median
//! ratio). Nothing here is a pass/fail test; the targets are
//! printed beside the figures.

use std::time::Duration;

use objwal::storage::fault::{FaultyStorage, Op};
use objwal::Storage;

use crate::CliResult;

mod catch_up;
mod handoff;
mod idle;
mod lag;
mod promote;

/// Arguments of `objwal bench-follow`.
#[derive(Debug, clap::Args)]
pub struct BenchFollowArgs {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, clap::Subcommand)]
enum Scenario {
    /// Lag from a create landing to the follower yielding its entries.
    Lag(lag::LagArgs),
    /// Requests of a follower of a log nobody writes.
    Idle(idle::IdleArgs),
    /// The pause of a region's handoff, with and without following.
    Handoff(handoff::HandoffArgs),
    /// A follower that fell behind busy writers, catching up.
    CatchUp(catch_up::CatchUpArgs),
    /// A standby promoted, against a bare open of the same prefix.
    Promote(promote::PromoteArgs),
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: BenchFollowArgs) -> CliResult {
    crate::store::prefix(prefix)?;
    match args.scenario {
        Scenario::Lag(args) => lag::run(prefix, args).await,
        Scenario::Idle(args) => idle::run(prefix, args).await,
        Scenario::Handoff(args) => handoff::run(prefix, args).await,
        Scenario::CatchUp(args) => catch_up::run(prefix, args).await,
        Scenario::Promote(args) => promote::run(prefix, args).await,
    }
}

/// The `q`-quantile (0..=1) of `values` (0 when empty), nearest rank.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The median of `values` (0 when empty).
fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
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
        "{prefix}/bench-follow-{scenario}-{}-{stamp}",
        std::process::id()
    )
}

/// A store whose every create, read and listing waits `latency` (a
/// remote object store), counting the requests that pass.
fn slow(storage: &Storage, latency: Duration) -> FaultyStorage {
    let faulty = FaultyStorage::new(storage.clone());
    for op in [Op::Create, Op::Read, Op::List] {
        faulty.set_latency(op, latency);
    }
    faulty
}

/// Milliseconds, for printing.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 51.0);
        assert_eq!(quantile(&v, 0.99), 100.0);
        assert_eq!(quantile(&v, 1.0), 101.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), 0.0);
    }
}
