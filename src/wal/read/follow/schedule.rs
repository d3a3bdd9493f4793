//! When a follower asks again: pure (times in, waits out).
//!
//! After an object landed the follower polls the next key at once; while
//! polls miss, it waits `follow_interval` at first, then a quarter of the
//! time the log has been quiet, never more than `follow_max_interval`. So a
//! busy writer is followed within about one interval, and the first object
//! after a quiet spell of `q` is seen within about `q / 4` (at most the
//! cap, two caps once the looks below begin): the lag it adds is
//! proportional to the quiet it ends.
//!
//! A poll cannot see an object the writer's collection deleted before the
//! poll came: a writer that resumes with an object of records only (a
//! flush mark, an idle tick's boundary) and collects it as soon as its
//! next object lands leaves the next key empty for good while it appends
//! on above it. Collection deletes by one boundary, in key order, so it
//! deleted the place before (or with) the key after it. So once the log has
//! been quiet for [`LOOK_GAP`] caps, every other request is a *look at the
//! place* instead of a poll (a one-byte read of the place's key): while the
//! place is there nothing above it was collected; once it is gone the log
//! moved on past a collected key, and a listing finds where
//! ([`Request::Place`]). A look replaces a poll, so the idle cost stays one
//! request per wait; a writer that appends at least every one and a half
//! caps never meets one (the poll after its landing comes before the quiet
//! reaches [`LOOK_GAP`] caps).
//!
//! Nor can a poll see a writer's restart whose start object does not
//! follow the follower's place (a branch nobody continues). So the request
//! due once the log has been quiet for [`FIRST_CHECK`] caps is a listing
//! instead (an *idle check*), then after twice that quiet, and so on, the
//! gap between checks growing up to [`MAX_CHECK_GAP`]. A check replaces a
//! poll (and counts as a look), so an idle follower still makes one request
//! per wait.
//!
//! Some states no poll of the next key can end: the next key holds a newer
//! process's settle marker and its start object has not landed (an open in
//! progress, or one that died between the two), or the prefix holds no
//! chain yet. Only a listing finds where the log goes on then, and
//! [`Listings`] spaces them: the first at once, then each after four times
//! the time spent so far in that state (0.1 s, 0.4 s, 1.6 s, ... with the
//! default interval; the gap at most [`MAX_CHECK_GAP`]), so an open in
//! progress is found within about four times its duration, and a state that
//! lasts costs 9 listings in its first hour and one an hour after, as the
//! idle checks do. Between listings the follower still makes one request
//! per wait (the engine's look at the next opener's fence), which restarts
//! the spacing when a newer process shows up.

use std::time::Duration;

use tokio::time::Instant;

/// The quiet time, in waits of `follow_max_interval`, after which the
/// first idle check lists.
pub(crate) const FIRST_CHECK: u32 = 10;

/// The longest quiet time between two idle checks.
pub(crate) const MAX_CHECK_GAP: Duration = Duration::from_secs(3600);

/// The divisor of the quiet time that gives the wait.
const QUIET_DIVISOR: u32 = 4;

/// The quiet time, in waits of `follow_max_interval`, from which every
/// other request is a look at the place instead of a poll.
pub(crate) const LOOK_GAP: u32 = 2;

/// What the request due now asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// Poll the next key.
    Poll,
    /// Look whether the place is still there (see the module docs).
    Place,
    /// List the prefix: an idle check.
    List,
}

/// A follower's poll schedule.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    base: Duration,
    cap: Duration,
    /// When the last object landed (or following began).
    quiet_since: Instant,
    /// The quiet time at which the next idle check lists.
    next_check: Duration,
    /// Whether the last request was a look at the place (or an idle
    /// check): the next is a poll.
    looked: bool,
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
            looked: false,
        }
    }

    /// An object landed (or a listing found the log moved on): poll at
    /// once, and start counting quiet time again.
    pub(crate) fn landed(&mut self, now: Instant) {
        self.quiet_since = now;
        self.next_check = self.cap * FIRST_CHECK;
        self.looked = false;
    }

    /// How long the log has been quiet at `now`.
    pub(crate) fn quiet(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.quiet_since)
    }

    /// The wait after a poll that missed at `now`.
    pub(crate) fn delay(&self, now: Instant) -> Duration {
        (self.quiet(now) / QUIET_DIVISOR).clamp(self.base, self.cap)
    }

    /// What the request due at `now` asks: an idle check when one is
    /// due (the next after twice the quiet time, the gap at most
    /// [`MAX_CHECK_GAP`]), else, once the log has been quiet for
    /// [`LOOK_GAP`] caps, a look at the place if the last request was a
    /// poll, else a poll. A check sees what a look would: a poll follows it.
    pub(crate) fn request(&mut self, now: Instant) -> Request {
        let quiet = self.quiet(now);
        let looked = std::mem::replace(&mut self.looked, false);
        if quiet >= self.next_check {
            self.next_check = quiet + quiet.min(MAX_CHECK_GAP).max(self.cap);
            self.looked = true;
            return Request::List;
        }
        if quiet >= self.cap * LOOK_GAP && !looked {
            self.looked = true;
            return Request::Place;
        }
        Request::Poll
    }
}

/// How much longer each wait between the listings of a state that no
/// poll can end is than the time already spent in it.
const LISTING_GROWTH: u32 = 3;

/// The listings of a state that no poll can end (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Listings {
    base: Duration,
    /// When the state began (or a newer process last showed up).
    since: Instant,
    /// The time in the state at which the next listing is due.
    next: Duration,
}

impl Listings {
    /// The state begins at `now` with a listing made at once: the next is
    /// due after `base`.
    pub(crate) fn new(base: Duration, now: Instant) -> Self {
        Listings {
            base,
            since: now,
            next: base,
        }
    }

    /// A newer process showed up at `now`: its open lands soon, list again
    /// from `base` on.
    pub(crate) fn restart(&mut self, now: Instant) {
        *self = Listings::new(self.base, now);
    }

    /// Whether a listing is due at `now`; if so, the next is due after
    /// four times the time spent in the state (the gap at least `base`, at
    /// most [`MAX_CHECK_GAP`]).
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        let spent = now.saturating_duration_since(self.since);
        if spent < self.next {
            return false;
        }
        let gap = (spent * LISTING_GROWTH).clamp(self.base, MAX_CHECK_GAP);
        self.next = spent + gap;
        true
    }

    /// The listing made at `now` failed: one is due again at once (the
    /// caller waits out the retry delay first). A failed listing that
    /// counted as made left a follower blocked for the grown gap, through
    /// every catch-up after an outage (seed 3472869389360383893).
    pub(crate) fn failed(&mut self, now: Instant) {
        self.next = now.saturating_duration_since(self.since);
    }

    /// How long from `now` until the next listing is due.
    pub(crate) fn until_due(&self, now: Instant) -> Duration {
        self.next
            .saturating_sub(now.saturating_duration_since(self.since))
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
    /// hour of quiet, and the listings and looks at the place among them.
    #[tokio::test(start_paused = true)]
    async fn an_idle_hour_costs_one_request_per_wait_and_few_listings() {
        let start = Instant::now();
        let mut s = Schedule::new(100 * MS, 1000 * MS, start);
        let (mut now, mut requests, mut lists, mut looks) = (start, 0u64, 0u64, 0u64);
        while now < start + Duration::from_secs(3600) {
            requests += 1;
            match s.request(now) {
                Request::List => lists += 1,
                Request::Place => looks += 1,
                Request::Poll => {}
            }
            now += s.delay(now);
        }
        // About 3,600 at the cap, plus the first seconds' shorter waits.
        assert!((3600..3640).contains(&requests), "{requests}");
        // Listings at 10 s, 20 s, 40 s, ... 2560 s of quiet.
        assert_eq!(lists, 9, "{lists}");
        // Every other request at the cap, none before 2 s of quiet.
        assert!((1780..=1800).contains(&looks), "{looks}");
        let later = start + Duration::from_secs(10 * 3600);
        assert_eq!(s.request(later), Request::List);
        assert_ne!(s.request(later + Duration::from_secs(3599)), Request::List);
        assert_eq!(
            s.request(later + Duration::from_secs(3600)),
            Request::List,
            "one an hour"
        );
    }

    /// The defect of `follow::a_follower_quiet_for_hours_follows_a_writer_
    /// whose_first_object_was_collected`: after a long quiet, nothing but
    /// the hourly idle check saw past a collected next key. Now no two
    /// looks at the place, and no two polls, are more than two caps apart,
    /// however long the quiet (a listing sees what both see).
    #[tokio::test(start_paused = true)]
    async fn after_a_long_quiet_polls_and_looks_take_turns() {
        let start = Instant::now();
        let cap = 1000 * MS;
        let mut s = Schedule::new(100 * MS, cap, start);
        let mut now = start;
        let (mut last_poll, mut last_look) = (start, None::<Instant>);
        while now < start + Duration::from_secs(5 * 3600) {
            let request = s.request(now);
            if request != Request::Place {
                let gap = now - last_poll;
                assert!(gap <= 2 * cap, "polls {gap:?} apart");
                last_poll = now;
            }
            if request != Request::Poll {
                match last_look {
                    Some(last) => assert!(now - last <= 2 * cap, "looks {:?} apart", now - last),
                    None => assert!(now - start >= 2 * cap, "a look at {:?}", now - start),
                }
                last_look = Some(now);
            }
            now += s.delay(now);
        }
        assert!(last_look.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn no_check_while_objects_land() {
        let start = Instant::now();
        let mut s = Schedule::new(100 * MS, 1000 * MS, start);
        let mut now = start;
        for _ in 0..10_000 {
            now += 5 * 1000 * MS; // a writer that appends every 5 s
            assert_ne!(s.request(now), Request::List);
            s.landed(now);
        }
    }

    /// A writer that appends at least every one and a half caps is only
    /// polled (the poll that finds each object included): the lag of its
    /// objects is what it was before the looks.
    #[tokio::test(start_paused = true)]
    async fn no_look_while_a_writer_appends_every_one_and_a_half_caps() {
        let start = Instant::now();
        let mut s = Schedule::new(100 * MS, 1000 * MS, start);
        let mut now = start;
        for _ in 0..1000 {
            let landing = now + 1500 * MS;
            loop {
                assert_eq!(s.request(now), Request::Poll, "at {:?}", now - start);
                if now >= landing {
                    break;
                }
                now += s.delay(now);
            }
            s.landed(now);
        }
    }

    /// Issue 30, item 5: a newer process that died between its settle
    /// marker and its start object left its followers listing once a
    /// wait. The listings of such a state: 9 in its first hour (counting
    /// the one at once), then one an hour.
    #[tokio::test(start_paused = true)]
    async fn a_state_no_poll_ends_lists_nine_times_in_its_first_hour() {
        let start = Instant::now();
        let mut l = Listings::new(100 * MS, start);
        let mut due = vec![Duration::ZERO]; // the listing made at once
        let mut now = start;
        while now < start + Duration::from_secs(3 * 3600) {
            now += l.until_due(now).min(1000 * MS).max(MS);
            if l.due(now) {
                due.push(now - start);
            }
        }
        let first_hour: Vec<_> = due
            .iter()
            .filter(|d| **d < Duration::from_secs(3600))
            .collect();
        assert_eq!(first_hour.len(), 9, "{due:?}");
        assert_eq!(due[1], 100 * MS);
        assert_eq!(due[2], 400 * MS);
        assert_eq!(due[3], 1600 * MS);
        let later: Vec<_> = due.windows(2).map(|w| w[1] - w[0]).skip(9).collect();
        assert!(
            later.iter().all(|gap| *gap == Duration::from_secs(3600)),
            "{later:?}"
        );
        // A newer process showed up: soon again.
        l.restart(now);
        assert_eq!(l.until_due(now), 100 * MS);
        assert!(!l.due(now + 99 * MS));
        assert!(l.due(now + 100 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cap_below_the_base_is_the_base() {
        let start = Instant::now();
        let s = Schedule::new(100 * MS, 10 * MS, start);
        assert_eq!(s.delay(start + Duration::from_secs(100)), 100 * MS);
    }
}
