//! The sealing policy: when the open batch becomes an object.
//!
//! Pure (state in, decision out), because this is where latency is traded
//! against request cost. The open batch is sealed
//! - *full*: before an append that would take it past `max_batch_bytes`
//!   ([`SealPolicy::seal_before`]; an append larger than the limit goes
//!   whole into a batch of its own), or once it reaches the limit;
//! - *early*: as soon as a create could start (a free create slot, within
//!   reach, nothing waiting), if the early-seal budget has a token: a lone
//!   durable writer then waits about one create instead of the timer, and a
//!   busy one keeps filling objects while every slot is busy;
//! - *timer*: `flush_interval` after its first admission;
//! - on request (a release, a stop, `flush`, a backlog bound) and when a
//!   region would pass the position range.
//!
//! Group commit: an early seal first *gathers* the commands already queued
//! for the actor when it would seal (at most [`MAX_GATHER`], once per
//! batch, and only while the batch is below [`GATHER_BELOW_BYTES`]):
//! appends that arrived while the actor was busy join the batch instead of
//! each becoming an object of its own. It never waits for
//! anything that has not arrived, so it adds to a seal at most the
//! admission of what was already queued, which those appends would have
//! waited for anyway (rfcs/0008, "Group commit").
//!
//! The budget is a token bucket of early seals per second. Timer seals take a
//! token too (into debt, at most one burst deep), so over any window objects
//! that are not full stay within the budget (or one per flush interval, if
//! that is more) plus two bursts; full batches and requested seals never wait
//! for tokens. See rfcs/0008-sealing.md.

use std::time::Duration;

use tokio::time::Instant;

/// Why a batch was sealed (a label of the seal span and of logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealReason {
    /// It reached `max_batch_bytes`, or the next append would pass it.
    Full,
    /// Its flush interval elapsed.
    Timer,
    /// A create could start and the budget had a token.
    Early,
    /// A region would have passed 2^20 - 1 positions.
    Positions,
    /// A caller needs it durable now (release, stop, flush, backlog bound).
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
            SealReason::Early => "early",
            SealReason::Positions => "positions",
            SealReason::Requested => "requested",
            SealReason::Collect => "collect",
        }
    }
}

/// What counts as a whole token (float sums of refills fall short of 1.0).
const WHOLE: f64 = 1.0 - 1e-9;

/// A token bucket: `rate` tokens per second up to `burst`; `None` is unlimited.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    rate: Option<f64>,
    burst: f64,
    tokens: f64,
    updated: Instant,
}

impl Budget {
    /// An unlimited budget.
    pub(crate) fn unlimited(now: Instant) -> Self {
        Budget {
            rate: None,
            burst: 0.0,
            tokens: 0.0,
            updated: now,
        }
    }

    /// `rate` tokens per second, at most `burst` saved (full at start); a
    /// rate of zero never gives a token.
    pub(crate) fn per_second(rate: f64, burst: f64, now: Instant) -> Self {
        let burst = burst.max(1.0);
        Budget {
            rate: Some(rate.max(0.0)),
            burst,
            tokens: if rate > 0.0 { burst } else { 0.0 },
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(rate) = self.rate {
            let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
            self.tokens = (self.tokens + elapsed * rate).min(self.burst);
            if rate <= 0.0 {
                self.tokens = self.tokens.min(0.0);
            }
        }
        self.updated = self.updated.max(now);
    }

    /// Takes a token if one is there.
    fn try_take(&mut self, now: Instant) -> bool {
        if self.rate.is_none() {
            return true;
        }
        self.refill(now);
        if self.tokens >= WHOLE {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether a token is there (taking none).
    fn has_token(&self, now: Instant) -> bool {
        match self.rate {
            None => true,
            Some(_) => {
                let mut b = *self;
                b.refill(now);
                b.tokens >= WHOLE
            }
        }
    }

    /// Takes a token whether or not one is there (at most a burst of debt).
    fn charge(&mut self, now: Instant) {
        if self.rate.is_some() {
            self.refill(now);
            self.tokens = (self.tokens - 1.0).max(-self.burst);
        }
    }

    /// When the next token will be there (now if one is).
    fn next_token_at(&self, now: Instant) -> Instant {
        match self.rate {
            None => now,
            Some(rate) => {
                let mut b = *self;
                b.refill(now);
                if b.tokens >= WHOLE {
                    now
                } else if rate <= 0.0 {
                    now + Duration::from_secs(86_400 * 365)
                } else {
                    // A rate too small for a `Duration` (validation refuses
                    // one, but the policy never panics) waits a year.
                    let wait = Duration::try_from_secs_f64((1.0 - b.tokens) / rate)
                        .unwrap_or(Duration::MAX)
                        .min(Duration::from_secs(86_400 * 365));
                    now + wait.max(Duration::from_micros(1))
                }
            }
        }
    }
}

/// Commands an early seal gathers at most (group commit): a bound on how
/// long the actor admits before it seals and looks at finished creates.
pub(crate) const MAX_GATHER: usize = 1024;

/// A batch this large gathers nothing more (group commit pays only while a
/// create costs about the same whatever it carries): its create starts at
/// once, and what is queued goes into the next object, whose create starts
/// as soon as a slot is free, beside it rather than inside it. On a local
/// disk eight writers of 900 KB appends paired into 1.8 MB objects made
/// half as many parallel creates (rfcs/0008, "Group commit", issue 32).
pub(crate) const GATHER_BELOW_BYTES: u64 = 256 << 10;

/// What the policy needs to know about the open batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenState {
    /// The bytes its segments and footer will take.
    pub(crate) encoded_bytes: u64,
    /// When its first entry (or record) was admitted.
    pub(crate) opened_at: Instant,
    /// Whether it already gathered the commands queued behind it (once per
    /// batch).
    pub(crate) gathered: bool,
}

/// What the policy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Seal now.
    Seal(SealReason),
    /// Ask again at this instant (or when something changes before).
    WaitUntil(Instant),
    /// Group commit: handle up to this many commands already queued (they
    /// may join the batch), mark the batch gathered, then ask again.
    Gather(usize),
    /// Nothing to seal.
    Idle,
}

/// The size, time and budget limits of a batch.
#[derive(Debug, Clone)]
pub(crate) struct SealPolicy {
    max_batch_bytes: u64,
    flush_interval: Duration,
    budget: Budget,
}

impl SealPolicy {
    pub(crate) fn new(max_batch_bytes: u64, flush_interval: Duration, budget: Budget) -> Self {
        SealPolicy {
            max_batch_bytes,
            flush_interval,
            budget,
        }
    }

    /// Whether a batch of `encoded_bytes` must be sealed before admitting an
    /// append that adds `incoming` encoded bytes (a non-empty batch is never
    /// taken past the limit).
    pub(crate) fn seal_before(&self, encoded_bytes: u64, incoming: u64) -> bool {
        encoded_bytes > 0 && encoded_bytes.saturating_add(incoming) > self.max_batch_bytes
    }

    /// Decides about the open batch (`None` when there is none or it is
    /// empty). `can_start` says whether a create of it could start now;
    /// `queued` how many commands wait for the actor now.
    pub(crate) fn decide(
        &mut self,
        now: Instant,
        open: Option<OpenState>,
        can_start: bool,
        queued: usize,
    ) -> Decision {
        let Some(open) = open else {
            return Decision::Idle;
        };
        if open.encoded_bytes >= self.max_batch_bytes {
            return Decision::Seal(SealReason::Full);
        }
        let deadline = open.opened_at + self.flush_interval;
        if now >= deadline {
            self.budget.charge(now);
            return Decision::Seal(SealReason::Timer);
        }
        if can_start {
            if queued > 0
                && !open.gathered
                && open.encoded_bytes < GATHER_BELOW_BYTES
                && self.budget.has_token(now)
            {
                return Decision::Gather(queued.min(MAX_GATHER));
            }
            if self.budget.try_take(now) {
                return Decision::Seal(SealReason::Early);
            }
            return Decision::WaitUntil(self.budget.next_token_at(now).min(deadline));
        }
        Decision::WaitUntil(deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    fn open(bytes: u64, at: Instant) -> Option<OpenState> {
        Some(OpenState {
            encoded_bytes: bytes,
            opened_at: at,
            gathered: false,
        })
    }

    #[test]
    fn full_batches_seal_at_once_and_never_cross_the_limit() {
        let t = Instant::now();
        let mut p = SealPolicy::new(1000, 100 * MS, Budget::per_second(0.001, 1.0, t));
        assert_eq!(
            p.decide(t, open(1000, t), false, 0),
            Decision::Seal(SealReason::Full)
        );
        assert!(p.seal_before(600, 500));
        assert!(!p.seal_before(500, 500));
        // An append larger than the limit goes alone into an empty batch.
        assert!(!p.seal_before(0, 5000));
    }

    #[test]
    fn a_free_slot_seals_early_on_an_unlimited_budget() {
        let t = Instant::now();
        let mut p = SealPolicy::new(1 << 20, 100 * MS, Budget::unlimited(t));
        assert_eq!(
            p.decide(t, open(10, t), true, 0),
            Decision::Seal(SealReason::Early)
        );
        assert_eq!(
            p.decide(t, open(10, t), false, 0),
            Decision::WaitUntil(t + 100 * MS)
        );
        assert_eq!(p.decide(t, None, true, 0), Decision::Idle);
        assert_eq!(
            p.decide(t + 100 * MS, open(10, t), false, 0),
            Decision::Seal(SealReason::Timer)
        );
    }

    #[test]
    fn without_a_token_an_early_seal_waits_for_the_token_or_the_timer() {
        let t = Instant::now();
        // One token per 100 ms, burst 1.
        let mut p = SealPolicy::new(1 << 20, 100 * MS, Budget::per_second(10.0, 1.0, t));
        assert_eq!(
            p.decide(t, open(10, t), true, 0),
            Decision::Seal(SealReason::Early)
        );
        let t1 = t + 30 * MS;
        assert_eq!(
            p.decide(t1, open(10, t1), true, 0),
            Decision::WaitUntil(t + 100 * MS)
        );
        let t2 = t + 100 * MS;
        assert_eq!(
            p.decide(t2, open(10, t1), true, 0),
            Decision::Seal(SealReason::Early)
        );
    }

    #[test]
    fn an_empty_budget_leaves_sealing_to_size_and_timer() {
        let t = Instant::now();
        let mut p = SealPolicy::new(1000, 100 * MS, Budget::per_second(0.0, 4.0, t));
        assert_eq!(
            p.decide(t, open(10, t), true, 0),
            Decision::WaitUntil(t + 100 * MS)
        );
        let later = t + 100 * MS;
        assert_eq!(
            p.decide(later, open(10, t), true, 0),
            Decision::Seal(SealReason::Timer)
        );
        assert_eq!(
            p.decide(later, open(10, later), true, 0),
            Decision::WaitUntil(later + 100 * MS)
        );
    }

    #[test]
    fn timer_seals_take_a_token_into_debt() {
        let t = Instant::now();
        let mut p = SealPolicy::new(1 << 20, 10 * MS, Budget::per_second(10.0, 1.0, t));
        assert_eq!(
            p.decide(t, open(10, t), true, 0),
            Decision::Seal(SealReason::Early)
        );
        // The timer fires with no token: it seals and leaves a debt.
        let t1 = t + 10 * MS;
        assert_eq!(
            p.decide(t1, open(10, t), false, 0),
            Decision::Seal(SealReason::Timer)
        );
        // The next early seal needs two refills (debt + 1): 200 ms after t.
        let t2 = t + 11 * MS;
        match p.decide(t2, open(10, t2), true, 0) {
            Decision::WaitUntil(at) => assert_eq!(at, t2 + 10 * MS, "the timer comes first"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_early_seal_first_gathers_what_is_queued_once() {
        let t = Instant::now();
        let mut p = SealPolicy::new(1000, 100 * MS, Budget::unlimited(t));
        let gathered = |bytes: u64| {
            Some(OpenState {
                encoded_bytes: bytes,
                opened_at: t,
                gathered: true,
            })
        };
        assert_eq!(p.decide(t, open(10, t), true, 5), Decision::Gather(5));
        assert_eq!(
            p.decide(t, open(10, t), true, 5 * MAX_GATHER),
            Decision::Gather(MAX_GATHER)
        );
        // Once per batch: then it seals, whatever arrived meanwhile.
        assert_eq!(
            p.decide(t, gathered(10), true, 7),
            Decision::Seal(SealReason::Early)
        );
        // Nothing queued: it seals at once, as before.
        assert_eq!(
            p.decide(t, open(10, t), true, 0),
            Decision::Seal(SealReason::Early)
        );
        // No free slot: nothing to gather for, the batch grows on its own.
        assert_eq!(
            p.decide(t, open(10, t), false, 5),
            Decision::WaitUntil(t + 100 * MS)
        );
        // Full and due batches never wait for what is queued.
        assert_eq!(
            p.decide(t, open(1000, t), true, 5),
            Decision::Seal(SealReason::Full)
        );
        assert_eq!(
            p.decide(t + 100 * MS, open(10, t), true, 5),
            Decision::Seal(SealReason::Timer)
        );
    }

    #[test]
    fn a_batch_large_enough_to_be_its_own_create_gathers_nothing() {
        // Eight writers of 900 KB appends on a local disk: gathering the
        // queued ones paired them into 1.8 MB objects and halved the creates
        // in parallel (issue 32 item 3).
        let t = Instant::now();
        let mut p = SealPolicy::new(8 << 20, 100 * MS, Budget::unlimited(t));
        assert_eq!(
            p.decide(t, open(GATHER_BELOW_BYTES - 1, t), true, 3),
            Decision::Gather(3)
        );
        assert_eq!(
            p.decide(t, open(GATHER_BELOW_BYTES, t), true, 3),
            Decision::Seal(SealReason::Early)
        );
        assert_eq!(
            p.decide(t, open(900 << 10, t), true, 7),
            Decision::Seal(SealReason::Early)
        );
    }

    #[test]
    fn gathering_needs_a_token_and_takes_none() {
        let t = Instant::now();
        // One token, refilled every 100 ms.
        let mut p = SealPolicy::new(1 << 20, 100 * MS, Budget::per_second(10.0, 1.0, t));
        assert_eq!(p.decide(t, open(10, t), true, 3), Decision::Gather(3));
        assert_eq!(p.decide(t, open(10, t), true, 3), Decision::Gather(3));
        let done = Some(OpenState {
            encoded_bytes: 10,
            opened_at: t,
            gathered: true,
        });
        assert_eq!(
            p.decide(t, done, true, 3),
            Decision::Seal(SealReason::Early),
            "the token is still there"
        );
        // Without a token there is nothing to seal early: no gathering.
        let t1 = t + 10 * MS;
        assert_eq!(
            p.decide(t1, open(10, t1), true, 3),
            Decision::WaitUntil(t + 100 * MS)
        );
    }

    proptest! {
        /// Over any run, seals that are not full (early and timer) never
        /// exceed the budget's rate (or the timer's, when that is higher:
        /// one seal per flush interval) over the run plus two bursts.
        #[test]
        fn early_and_timer_seals_stay_within_the_budget(
            steps in proptest::collection::vec((0u64..50, any::<bool>(), 0u64..3000), 1..300),
            rate in 1u32..50,
            burst in 1u32..5,
        ) {
            let t0 = Instant::now();
            let flush = 20 * MS;
            let mut p = SealPolicy::new(2048, flush, Budget::per_second(f64::from(rate), f64::from(burst), t0));
            let mut now = t0;
            let mut opened: Option<Instant> = None;
            let mut not_full = 0u64;
            for (advance, can_start, bytes) in steps {
                now += Duration::from_millis(advance);
                let at = *opened.get_or_insert(now);
                match p.decide(now, open(bytes, at), can_start, 0) {
                    Decision::Seal(SealReason::Full) => opened = None,
                    Decision::Seal(_) => { not_full += 1; opened = None; }
                    Decision::WaitUntil(when) => prop_assert!(when > now),
                    Decision::Idle => prop_assert!(false, "an open batch is never idle"),
                    Decision::Gather(_) => prop_assert!(false, "nothing is queued"),
                }
            }
            let secs = now.duration_since(t0).as_secs_f64();
            let rate = f64::from(rate).max(1.0 / flush.as_secs_f64());
            let allowed = rate * secs + 2.0 * f64::from(burst) + 1.0;
            prop_assert!((not_full as f64) <= allowed, "{not_full} seals > {allowed}");
        }

        /// Group commit changes one thing only: where the policy without it
        /// seals early, it may first gather at most what is queued (and at
        /// most `MAX_GATHER`), taking no token, and then, asked again at the
        /// same instant, seals early. Every other decision is the same, so
        /// no batch waits for the timer, a token or a slot because of it,
        /// and the budget is spent exactly as before.
        #[test]
        fn gathering_only_puts_what_is_queued_before_an_early_seal(
            steps in proptest::collection::vec((0u64..50, any::<bool>(), prop_oneof![3 => 0u64..3000, 1 => GATHER_BELOW_BYTES - 2..GATHER_BELOW_BYTES + 2], 0usize..3000), 1..300),
            rate in proptest::option::of(1u32..50),
        ) {
            let t0 = Instant::now();
            let budget = match rate {
                Some(rate) => Budget::per_second(f64::from(rate), 2.0, t0),
                None => Budget::unlimited(t0),
            };
            let mut without = SealPolicy::new(GATHER_BELOW_BYTES * 2, 20 * MS, budget);
            let mut with = SealPolicy::new(GATHER_BELOW_BYTES * 2, 20 * MS, budget);
            let mut now = t0;
            let mut opened: Option<Instant> = None;
            for (advance, can_start, bytes, queued) in steps {
                now += Duration::from_millis(advance);
                let at = *opened.get_or_insert(now);
                let state = |gathered| Some(OpenState { encoded_bytes: bytes, opened_at: at, gathered });
                let old = without.decide(now, state(false), can_start, 0);
                let new = with.decide(now, state(false), can_start, queued);
                match new {
                    Decision::Gather(n) => {
                        prop_assert_eq!(old, Decision::Seal(SealReason::Early));
                        prop_assert!(n >= 1 && n <= queued && n <= MAX_GATHER);
                        prop_assert!(bytes < GATHER_BELOW_BYTES);
                        prop_assert_eq!(
                            with.decide(now, state(true), can_start, queued),
                            Decision::Seal(SealReason::Early)
                        );
                    }
                    other => prop_assert_eq!(other, old),
                }
                if matches!(old, Decision::Seal(_)) {
                    opened = None;
                }
            }
        }

        /// With an unlimited budget and a free slot, a batch never waits.
        #[test]
        fn an_unlimited_budget_never_delays_a_startable_batch(bytes in 0u64..2048, age in 0u64..19) {
            let t0 = Instant::now();
            let mut p = SealPolicy::new(2048, 20 * MS, Budget::unlimited(t0));
            let now = t0 + Duration::from_millis(age);
            prop_assert!(matches!(p.decide(now, open(bytes, t0), true, 0), Decision::Seal(_)));
        }
    }

    /// Issue 18 item 7: a rate of 1e-30 seals per second passed validation
    /// and panicked the actor (`Duration::from_secs_f64` overflowed).
    #[test]
    fn a_tiny_rate_never_panics_the_policy() {
        let now = Instant::now();
        let mut b = Budget::per_second(1e-30, 1.0, now);
        assert!(b.try_take(now));
        let at = b.next_token_at(now);
        assert!(at > now && at <= now + Duration::from_secs(86_400 * 365));
    }
}
