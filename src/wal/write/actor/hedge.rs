//! Hedged creates: a create that has not answered after the 95th
//! percentile of recent creates (on a tight distribution, the 99th; see
//! [`Hedger::percentile`]), or half `request_timeout`, is sent again with
//! the same bytes to the same key, and the first definitive answer wins.
//!
//! Safe by the protocol's own rules (rfcs/0006, "Hedged creates"): a hedge
//! is one more request of the same byte string at the same key, exactly as a
//! retry whose response was lost, or a timed-out request that lands late. A
//! key holds one object for good; whichever request lands, the other reads
//! back our own bytes; if another process's object holds the key, both
//! learn it.
//!
//! Invariant: hedges stay within the budget, a fraction of the creates
//! started, saved up to [`BURST`] hedges.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Recent create latencies kept to learn the percentile.
const SAMPLES: usize = 256;
/// Samples needed before the percentile is trusted.
const MIN_SAMPLES: usize = 32;
/// Hedges that may be saved up.
const BURST: u64 = 16;
/// Budget units per hedge (the budget counts thousandths).
const UNIT: u64 = 1000;

/// The budget of hedges, shared with the create tasks (which take from it
/// only when their first request is late).
#[derive(Debug)]
pub(super) struct Budget {
    milli: AtomicU64,
}

impl Budget {
    /// Takes one hedge if the budget has one.
    pub(super) fn try_take(&self) -> bool {
        self.milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                m.checked_sub(UNIT)
            })
            .is_ok()
    }
}

/// What the actor knows to decide hedges.
#[derive(Debug)]
pub(super) struct Hedger {
    /// The budget per create started, in thousandths (`None`: no hedging).
    per_create: Option<u64>,
    budget: Arc<Budget>,
    recent: VecDeque<Duration>,
    timeout: Option<Duration>,
}

impl Hedger {
    /// Hedging with `fraction` of the creates (`None`: off), never later
    /// than `timeout` when one is set.
    pub(super) fn new(fraction: Option<f64>, timeout: Option<Duration>) -> Self {
        Hedger {
            per_create: fraction.map(|f| (f * UNIT as f64).round().clamp(0.0, UNIT as f64) as u64),
            budget: Arc::new(Budget {
                milli: AtomicU64::new(0),
            }),
            recent: VecDeque::with_capacity(SAMPLES),
            timeout,
        }
    }

    /// A create starts: the budget grows by its share; returns when to
    /// hedge it and the budget to take from, if hedging is on and the
    /// percentile is known.
    pub(super) fn starting(&mut self) -> Option<(Duration, Arc<Budget>)> {
        let per_create = self.per_create?;
        let cap = BURST * UNIT;
        let _ = self
            .budget
            .milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some((m + per_create).min(cap))
            });
        // Half the request timeout at most: a hedge sent when the first
        // request times out would be a retry, not a hedge.
        let half_timeout = self.timeout.map(|t| t / 2);
        let after = match (self.percentile(), half_timeout) {
            (Some(p), Some(t)) => p.min(t),
            (Some(p), None) => p,
            (None, t) => t?,
        };
        Some((after, self.budget.clone()))
    }

    /// A create that was not hedged landed after `took`.
    pub(super) fn landed(&mut self, took: Duration) {
        if self.per_create.is_none() {
            return;
        }
        if self.recent.len() == SAMPLES {
            self.recent.pop_front();
        }
        self.recent.push_back(took);
    }

    /// When a create counts as slow, once there are enough samples: the
    /// 95th percentile of the recent creates; on a tight distribution,
    /// whose 99th percentile is within 1.2 times the median, that 99th
    /// percentile instead, and never below 1.05 times the median.
    ///
    /// A hedge sent at `t` lands at `t` plus one create, so a slow create's
    /// appends wait `t + median` where the others wait `median`: on a tight
    /// distribution the old floor of 1.2 x median put them at 2.2x the
    /// others (issue 32). Past the 99th percentile of a tight distribution
    /// a create is an outlier, and hedging there costs about 1% of creates
    /// beside the tail itself; the floor of 1.05 x median keeps a
    /// distribution of identical samples from hedging on the least jitter.
    /// A wide distribution (a 99th percentile past 1.2 x median) hedges at
    /// the 95th, as before: its budget is what bounds it.
    fn percentile(&self) -> Option<Duration> {
        if self.recent.len() < MIN_SAMPLES {
            return None;
        }
        let mut sorted: Vec<Duration> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        let at = |per_cent: usize| sorted.get(sorted.len() * per_cent / 100).copied();
        let (median, p95, p99) = (at(50)?, at(95)?, at(99)?);
        Some(
            p95.max(p99.min(median.mul_f64(1.2)))
                .max(median.mul_f64(1.05)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hedges_wait_for_the_percentile_and_stay_within_the_budget() {
        let mut h = Hedger::new(Some(0.05), None);
        assert!(h.starting().is_none(), "no percentile yet, no timeout");
        for ms in 1..=100 {
            h.landed(Duration::from_millis(ms));
        }
        let (after, budget) = h.starting().unwrap();
        assert_eq!(after, Duration::from_millis(96));
        let mut identical = Hedger::new(Some(0.05), None);
        for _ in 0..100 {
            identical.landed(Duration::from_millis(30));
        }
        assert_eq!(
            identical.starting().map(|t| t.0),
            Some(Duration::from_micros(31_500)),
            "1.05 times the median"
        );
        // A tight distribution: its 99th percentile (34 ms), not 1.2 x
        // the median (36 ms).
        let mut tight = Hedger::new(Some(0.05), None);
        for ms in std::iter::repeat_n(30, 95).chain([33, 33, 33, 33, 34]) {
            tight.landed(Duration::from_millis(ms));
        }
        assert_eq!(
            tight.starting().map(|t| t.0),
            Some(Duration::from_millis(34)),
            "the 99th percentile of a tight distribution"
        );
        // One outlier in the samples: the 99th percentile is past 1.2 x the
        // median, which then bounds the trigger.
        let mut outlier = Hedger::new(Some(0.05), None);
        for ms in std::iter::repeat_n(30, 95).chain([33, 33, 33, 33, 300]) {
            outlier.landed(Duration::from_millis(ms));
        }
        assert_eq!(
            outlier.starting().map(|t| t.0),
            Some(Duration::from_millis(36)),
            "1.2 times the median"
        );
        // 100 creates started earn 5 hedges.
        for _ in 0..99 {
            h.starting();
        }
        let taken = (0..20).filter(|_| budget.try_take()).count();
        assert_eq!(taken, 5);
        let off = Hedger::new(None, Some(Duration::from_secs(1))).starting();
        assert!(off.is_none());
        let mut timeout = Hedger::new(Some(0.05), Some(Duration::from_secs(1)));
        assert_eq!(
            timeout.starting().map(|t| t.0),
            Some(Duration::from_millis(500)),
            "half the request timeout"
        );
    }
}
