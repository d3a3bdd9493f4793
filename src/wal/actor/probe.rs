//! The fence probes: the read that must follow an object's landing before
//! the object is acknowledged, and before its sequence counts as verified.
//!
//! A probe records, when it starts, the last durable batch at the front of
//! the pipeline (`covers`) and the highest sequence known present
//! (`present`). If it finds no newer fence, a newer process claimed after it
//! started, so it listed everything present then: the batches up to `covers`
//! may be acknowledged and `present` is verified (rfcs/0006). Several probes
//! may be in flight (one per round, up to the create slots), so the probe of
//! one round overlaps the creates of the next; a probe is started only when
//! something became durable or present since the last one started.
//!
//! Invariant: a probe's answer covers only what was durable or present when
//! it started.

use futures::stream::FuturesUnordered;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::storage::StorageError;

use super::super::retry::Backoff;

/// What a probe found: the newest epoch above ours, or none.
pub(super) type ProbeResult = Result<Option<u64>, StorageError>;

/// A finished probe with what it covered when it started.
#[derive(Debug)]
pub(super) struct ProbeDone {
    pub(super) covers: Option<u64>,
    pub(super) present: u64,
    pub(super) started: u64,
    pub(super) result: ProbeResult,
}

/// The probes in flight and the failures of the current streak.
#[derive(Default)]
pub(super) struct Probes {
    pub(super) in_flight: FuturesUnordered<JoinHandle<ProbeDone>>,
    /// `covers` and `present` of the latest probe started.
    started_covers: Option<u64>,
    started_present: u64,
    /// Probes started so far (orders their answers).
    started: u64,
    /// The latest probe whose answer was taken.
    answered: u64,
    /// The failures in a row, and when the next probe may start.
    pub(super) backoff: Option<Backoff>,
    pub(super) retry_at: Option<Instant>,
}

impl Probes {
    pub(super) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Whether a probe should start now for `covers` and `present`: either
    /// is new since the latest probe started, a slot is free, and no retry
    /// delay is pending.
    pub(super) fn wanted(
        &self,
        covers: Option<u64>,
        present: u64,
        verified: u64,
        limit: usize,
        now: Instant,
    ) -> bool {
        if self.in_flight.len() >= limit || self.retry_at.is_some_and(|t| now < t) {
            return false;
        }
        let new_covers = covers.is_some() && covers > self.started_covers;
        let new_present = present > self.started_present && present > verified;
        new_covers || new_present
    }

    /// Records the start of a probe; returns its number.
    pub(super) fn started(&mut self, covers: Option<u64>, present: u64) -> u64 {
        self.started_covers = self.started_covers.max(covers);
        self.started_present = self.started_present.max(present);
        self.started += 1;
        self.retry_at = None;
        self.started
    }

    /// Whether the answer of probe `number` is still news: a later probe's
    /// answer covers at least as much.
    pub(super) fn take_answer(&mut self, number: u64) -> bool {
        if number <= self.answered {
            return false;
        }
        self.answered = number;
        true
    }

    /// Whether a probe started after `number` is still in flight (its
    /// answer will cover more than `number`'s).
    pub(super) fn later_in_flight(&self, number: u64) -> bool {
        self.started > number && !self.in_flight.is_empty()
    }

    /// A probe succeeded: the streak of failures ends.
    pub(super) fn succeeded(&mut self) {
        self.backoff = None;
        self.retry_at = None;
    }

    /// Forgets what the failed probes started with, so the next attempt
    /// (after the retry delay) probes the same again.
    pub(super) fn forget_started(&mut self) {
        self.started_covers = None;
        self.started_present = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_starts_only_for_something_new() {
        let now = Instant::now();
        let mut p = Probes::default();
        assert!(
            !p.wanted(None, 5, 5, 4, now),
            "nothing beyond what is verified"
        );
        assert!(p.wanted(Some(6), 6, 5, 4, now));
        let n = p.started(Some(6), 6);
        assert!(!p.wanted(Some(6), 6, 5, 4, now), "already probing for it");
        assert!(p.wanted(Some(7), 7, 5, 4, now), "a later batch is news");
        assert!(p.wanted(None, 9, 5, 4, now), "a marker landed");
        assert!(p.take_answer(n));
        assert!(!p.take_answer(n), "an answer is taken once");
        p.retry_at = Some(now + std::time::Duration::from_millis(5));
        p.forget_started();
        assert!(
            !p.wanted(Some(6), 6, 5, 4, now),
            "waits for the retry delay"
        );
        assert!(p.wanted(Some(6), 6, 5, 4, now + std::time::Duration::from_millis(5)));
    }
}
