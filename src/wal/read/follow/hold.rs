//! A follower's hold: moved to what the follower still needs and refreshed,
//! every quarter of its ttl, by a task the follower owns (rfcs/0011).
//!
//! What the follower still needs is the lower of two sequences:
//! - the key after the last object whose entries it handed out (the lag's
//!   `through`): the tail reads only above it;
//! - the *floor*: while a backfill may still read the catalog's objects
//!   for a region (its first regions, one added later), the object of its
//!   start id. `follow` and `add` lower it at once; it is lifted only when
//!   the engine says, through the stream, that every backfill ended with
//!   no `add` after it (so not before the backfill's entries were handed
//!   out).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::lag::LagBook;
use crate::metrics::FollowMetrics;
use crate::wal::Hold;

/// The floor: no backfill reads below it (`u64::MAX`: none runs).
#[derive(Debug)]
pub(crate) struct Floor(AtomicU64);

impl Floor {
    pub(crate) fn new(sequence: u64) -> Floor {
        Floor(AtomicU64::new(sequence))
    }

    /// A backfill from the object `sequence` on may run.
    pub(crate) fn lower(&self, sequence: u64) {
        self.0.fetch_min(sequence, Ordering::SeqCst);
    }

    /// Every backfill ended and its entries were handed out.
    pub(crate) fn lift(&self) {
        self.0.store(u64::MAX, Ordering::SeqCst);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The lowest object sequence the follower still needs.
pub(crate) fn needed(floor: &Floor, lag: &LagBook) -> u64 {
    floor.get().min(lag.through().saturating_add(1))
}

/// The task that keeps the hold; aborted when dropped.
pub(crate) struct Keeper {
    task: JoinHandle<()>,
    hold: Arc<tokio::sync::Mutex<Option<Hold>>>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Keeper {
    pub(crate) fn start(
        hold: Hold,
        floor: Arc<Floor>,
        lag: Arc<LagBook>,
        metrics: FollowMetrics,
    ) -> Keeper {
        let interval = (hold.ttl() / 4).max(Duration::from_millis(1));
        let hold = Arc::new(tokio::sync::Mutex::new(Some(hold)));
        let kept = hold.clone();
        let task = tokio::spawn(async move {
            // The first move at once: the hold was placed before the
            // reader's open, which may have taken a while.
            let mut wait = Duration::ZERO;
            loop {
                tokio::time::sleep(wait).await;
                let mut guard = kept.lock().await;
                let Some(hold) = guard.as_mut() else {
                    return;
                };
                let position = needed(&floor, &lag);
                match hold.advance(position).await {
                    Ok(()) => {
                        metrics.hold_refreshes.increment(1);
                        // An `add` that lowered the floor while the move
                        // was in flight: move back down at once (the
                        // window of rfcs/0011, "What a hold does not keep").
                        wait = if needed(&floor, &lag) < position {
                            Duration::ZERO
                        } else {
                            interval
                        };
                    }
                    Err(error) => {
                        metrics.hold_failures.increment(1);
                        tracing::warn!(
                            %error,
                            hold = hold.name(),
                            "cannot refresh the follower's hold; trying again sooner \
                             (unrefreshed for its ttl, it stops pinning)"
                        );
                        wait = (interval / 4).max(Duration::from_millis(1));
                    }
                }
            }
        });
        Keeper { task, hold }
    }

    /// Stops refreshing and gives the hold back, where it last moved it.
    pub(crate) async fn stop(self) -> Option<Hold> {
        self.task.abort();
        let hold = self.hold.clone();
        drop(self);
        let mut guard = hold.lock().await;
        guard.take()
    }
}
