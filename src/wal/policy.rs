//! The sealing policy: when the open batch becomes an object.
//!
//! Pure (state in, decision out), because this is where latency is traded
//! against request cost. A batch is sealed when it is full (`max_batch_bytes`),
//! when its `flush_interval` has elapsed since its first admission, when a
//! region would pass the position range, or when a caller needs it sealed now
//! (a release, a stop, a backlog bound).

use std::time::Duration;

use tokio::time::Instant;

/// Why a batch was sealed (a label of the seal span and of logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealReason {
    /// It reached `max_batch_bytes`.
    Full,
    /// Its flush interval elapsed.
    Timer,
    /// A region would have passed 2^20 - 1 positions.
    Positions,
    /// A caller needs it durable now (release, stop, backlog bound).
    Requested,
    /// An idle store carries a reclaim boundary that frees objects (the
    /// only seal of an empty batch).
    Collect,
}

impl SealReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SealReason::Full => "full",
            SealReason::Timer => "timer",
            SealReason::Positions => "positions",
            SealReason::Requested => "requested",
            SealReason::Collect => "collect",
        }
    }
}

/// The size and time limits of a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SealPolicy {
    pub(crate) max_batch_bytes: u64,
    pub(crate) flush_interval: Duration,
}

impl SealPolicy {
    /// Whether a batch of `encoded_bytes` must be sealed at once.
    pub(crate) fn is_full(&self, encoded_bytes: u64) -> bool {
        encoded_bytes >= self.max_batch_bytes
    }

    /// When a batch opened at `opened_at` must be sealed by the timer.
    pub(crate) fn deadline(&self, opened_at: Instant) -> Instant {
        opened_at + self.flush_interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_at_the_byte_limit_and_due_after_the_interval() {
        let p = SealPolicy {
            max_batch_bytes: 1000,
            flush_interval: Duration::from_millis(100),
        };
        assert!(!p.is_full(999));
        assert!(p.is_full(1000));
        let t = Instant::now();
        assert_eq!(p.deadline(t), t + Duration::from_millis(100));
    }
}
