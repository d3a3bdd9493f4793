//! When a follower asks again: pure (times in, waits out).
//!
//! After an object landed the follower polls the next key at once; while
//! polls miss, it waits `follow_interval` at first, then a quarter of the
//! time the log has been quiet, never more than `follow_max_interval`. So a
//! busy writer is followed within about one interval, and the first object
//! after a quiet spell of `q` is seen within about `q / 4` (at most the
//! cap): the lag it adds is proportional to the quiet it ends.
//!
//! While quiet, a poll cannot see everything: a writer's restart whose
//! start object does not follow the follower's place, or objects collected
//! before the follower read them, leave the next key empty for good. So
//! the poll due once the log has been quiet for [`FIRST_CHECK`] caps is a
//! listing instead (an *idle check*), then after twice that quiet, and so
//! on, the gap between checks growing up to [`MAX_CHECK_GAP`]. A check
//! replaces a poll, so an idle follower still makes one request per wait.

use std::time::Duration;

use tokio::time::Instant;

/// The quiet time, in waits of `follow_max_interval`, after which the
/// first idle check lists.
pub(crate) const FIRST_CHECK: u32 = 10;

/// The longest quiet time between two idle checks.
pub(crate) const MAX_CHECK_GAP: Duration = Duration::from_secs(3600);

/// The divisor of the quiet time that gives the wait.
const QUIET_DIVISOR: u32 = 4;

/// A follower's poll schedule.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    base: Duration,
    cap: Duration,
    /// When the last object landed (or following began).
    quiet_since: Instant,
    /// The quiet time at which the next idle check lists.
    next_check: Duration,
}

impl Schedule {
    /// A schedule polling every `base` while busy, at most every `cap`.
    pub(crate) fn new(base: Duration, cap: Duration, now: Instant) -> Self {
        let cap = cap.max(base);
        Schedule {
            base,
            cap,
            quiet_since: now,
            next_check: cap * FIRST_CHECK,
        }
    }

    /// An object landed (or a listing found the log moved on): poll at
    /// once, and start counting quiet time again.
    pub(crate) fn landed(&mut self, now: Instant) {
        self.quiet_since = now;
        self.next_check = self.cap * FIRST_CHECK;
    }

    /// How long the log has been quiet at `now`.
    pub(crate) fn quiet(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.quiet_since)
    }

    /// The wait after a poll that missed at `now`.
    pub(crate) fn delay(&self, now: Instant) -> Duration {
        (self.quiet(now) / QUIET_DIVISOR).clamp(self.base, self.cap)
    }

    /// Whether the request due at `now` is an idle check (a listing); if
    /// so, the next one is due after twice the quiet time (the gap at most
    /// [`MAX_CHECK_GAP`]).
    pub(crate) fn check_due(&mut self, now: Instant) -> bool {
        let quiet = self.quiet(now);
        if quiet < self.next_check {
            return false;
        }
        self.next_check = quiet + quiet.min(MAX_CHECK_GAP).max(self.cap);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn waits_grow_with_the_quiet_up_to_the_cap() {
        let start = Instant::now();
        let mut s = Schedule::new(100 * MS, 1000 * MS, start);
        assert_eq!(s.delay(start), 100 * MS);
        assert_eq!(s.delay(start + 399 * MS), 100 * MS);
        assert_eq!(s.delay(start + 800 * MS), 200 * MS);
        assert_eq!(s.delay(start + 3 * 1000 * MS), 750 * MS);
        assert_eq!(s.delay(start + 60 * 1000 * MS), 1000 * MS);
        s.landed(start + 60 * 1000 * MS);
        assert_eq!(
            s.delay(start + 60 * 1000 * MS),
            100 * MS,
            "reset by a landing"
        );
    }

    /// An idle follower makes one request per wait: count them over an
    /// hour of quiet, and the listings among them.
    #[tokio::test(start_paused = true)]
    async fn an_idle_hour_costs_one_request_per_wait_and_few_listings() {
        let start = Instant::now();
        let mut s = Schedule::new(100 * MS, 1000 * MS, start);
        let (mut now, mut requests, mut lists) = (start, 0u64, 0u64);
        while now < start + Duration::from_secs(3600) {
            requests += 1;
            if s.check_due(now) {
                lists += 1;
            }
            now += s.delay(now);
        }
        // About 3,600 at the cap, plus the first seconds' shorter waits.
        assert!((3600..3640).contains(&requests), "{requests}");
        // Listings at 10 s, 20 s, 40 s, ... 2560 s of quiet.
        assert_eq!(lists, 9, "{lists}");
        let later = start + Duration::from_secs(10 * 3600);
        assert!(s.check_due(later));
        assert!(!s.check_due(later + Duration::from_secs(3599)));
        assert!(
            s.check_due(later + Duration::from_secs(3600)),
            "one an hour"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_check_while_objects_land() {
        let start = Instant::now();
        let mut s = Schedule::new(100 * MS, 1000 * MS, start);
        let mut now = start;
        for _ in 0..10_000 {
            now += 5 * 1000 * MS; // a writer that appends every 5 s
            assert!(!s.check_due(now));
            s.landed(now);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_cap_below_the_base_is_the_base() {
        let start = Instant::now();
        let s = Schedule::new(100 * MS, 10 * MS, start);
        assert_eq!(s.delay(start + Duration::from_secs(100)), 100 * MS);
    }
}
