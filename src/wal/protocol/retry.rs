//! Retries: the one place that decides how long to wait before a failed
//! request is repeated and when a stop gives up.
//!
//! The delays come from `backon`'s exponential schedule: `retry_initial_delay`,
//! doubling per failure up to `retry_max_delay`, with optional jitter seeded
//! per store instance (so a test can replay a schedule). The actor keeps one
//! [`Backoff`] per streak of failures (creates, voids) and
//! drops it when a request succeeds. Whether a failure may pass comes from
//! the adapters' error kinds ([`crate::StorageError::is_transient`]), never
//! from message text.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

use crate::config::Config;

/// The retry settings of one store instance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    builder: ExponentialBuilder,
    max_delay: Duration,
    /// Attempts a stop gives a failed create before giving up.
    pub(crate) stop_attempts: u32,
}

impl RetryPolicy {
    /// The policy `config` describes; `seed` seeds the jitter.
    pub(crate) fn new(config: &Config, seed: u64) -> Self {
        let mut builder = ExponentialBuilder::new()
            .with_min_delay(config.retry_initial_delay)
            .with_max_delay(config.retry_max_delay)
            .with_factor(2.0)
            .without_max_times();
        if config.retry_jitter {
            builder = builder.with_jitter().with_jitter_seed(seed);
        }
        RetryPolicy {
            builder,
            max_delay: config.retry_max_delay,
            stop_attempts: config.stop_attempts,
        }
    }

    /// A new streak of failures.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff {
            delays: self.builder.build(),
            max_delay: self.max_delay,
            failures: 0,
        }
    }
}

/// One streak of failures of one kind of request.
#[derive(Debug)]
pub(crate) struct Backoff {
    delays: ExponentialBackoff,
    max_delay: Duration,
    failures: u32,
}

impl Backoff {
    /// Counts a failure and returns the delay before the next attempt.
    pub(crate) fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.delays.next().unwrap_or(self.max_delay)
    }

    /// Failures in this streak.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(jitter: bool) -> Config {
        Config {
            retry_initial_delay: Duration::from_millis(10),
            retry_max_delay: Duration::from_millis(100),
            retry_jitter: jitter,
            ..Config::default()
        }
    }

    #[test]
    fn delays_double_up_to_the_maximum() {
        let mut b = RetryPolicy::new(&config(false), 1).backoff();
        // backon computes in f32: compare to the microsecond.
        let delays: Vec<u128> = (0..6).map(|_| (b.fail().as_micros() + 5) / 1000).collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 100, 100]);
        assert_eq!(b.failures(), 6);
    }

    #[test]
    fn jitter_is_seeded_and_stays_within_one_delay() {
        let p = RetryPolicy::new(&config(true), 7);
        let run = |p: &RetryPolicy| {
            let mut b = p.backoff();
            (0..8).map(|_| b.fail()).collect::<Vec<_>>()
        };
        let (a, b) = (run(&p), run(&p));
        assert_eq!(a, b, "one seed, one schedule");
        let plain = run(&RetryPolicy::new(&config(false), 7));
        for (jittered, base) in a.iter().zip(&plain) {
            let slack = Duration::from_micros(10);
            assert!(
                *jittered + slack >= *base && *jittered <= *base * 2 + slack,
                "{jittered:?} vs {base:?}"
            );
        }
        assert_ne!(a, plain);
    }
}
