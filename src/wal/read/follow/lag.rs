//! How far behind the log a follower is (issue 31 item 4), from what it
//! last learned: the chain keys it saw landed (by a poll, its own or one
//! started ahead, or by a listing) above the last object whose entries it
//! yielded.
//!
//! [`Lag::objects`] counts those keys; [`Lag::age`] is how long ago the
//! oldest of them was first seen (the stores give no landing time with a
//! read: a follower that keeps pace sees an object within a poll interval
//! of its landing, so this is the time it has waited on the follower).
//! Both are lower bounds between the follower's looks: objects that landed
//! since are unknown until a poll or a listing finds them; after
//! [`Follower::catch_up`](super::Follower::catch_up) ends (it lists) the
//! lag is exact, and zero if nothing landed since. A listing replaces what
//! polls saw above the follower's place by the chain it selected, so a key
//! a poll started ahead found off the chain (an orphan in a range a
//! restart jumped over) is forgotten at the next listing.
//!
//! The gauges `objwal_follow_lag_objects` and `objwal_follow_lag_seconds`
//! (label `prefix`) are set whenever the book changes, at each step of the
//! follower and at each [`Follower::lag`](super::Follower::lag).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How far behind the log a follower is, from what it last learned (see
/// [`Follower::lag`](super::Follower::lag)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// Objects of the chain the follower saw landed and has not yielded the
    /// entries of.
    pub objects: u64,
    /// How long ago the oldest of those was first seen (zero when there is
    /// none).
    pub age: Duration,
}

/// What the follower saw landed and has yielded, shared by its engine, the
/// polls it started and the [`Follower`](super::Follower).
#[derive(Debug)]
pub(crate) struct LagBook {
    seen: Mutex<Seen>,
    objects: metrics::Gauge,
    seconds: metrics::Gauge,
}

#[derive(Debug, Default)]
struct Seen {
    /// The last key whose object's entries were yielded (or stepped over).
    through: u64,
    /// Keys seen landed above `through`, with when each was first seen.
    landed: BTreeMap<u64, Instant>,
}

impl LagBook {
    pub(crate) fn new(objects: metrics::Gauge, seconds: metrics::Gauge) -> LagBook {
        LagBook {
            seen: Mutex::new(Seen::default()),
            objects,
            seconds,
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object at `key` landed.
    pub(crate) fn saw(&self, key: u64) {
        {
            let mut seen = self.seen();
            if key > seen.through {
                seen.landed.entry(key).or_insert_with(Instant::now);
            }
        }
        self.publish();
    }

    /// A listing found the chain's objects above the place at `keys`: they
    /// replace what polls saw there.
    pub(crate) fn listed(&self, keys: impl IntoIterator<Item = u64>) {
        {
            let mut seen = self.seen();
            let now = Instant::now();
            let through = seen.through;
            let old = std::mem::take(&mut seen.landed);
            for key in keys.into_iter().filter(|&k| k > through) {
                let first = old.get(&key).copied().unwrap_or(now);
                seen.landed.insert(key, first);
            }
        }
        self.publish();
    }

    /// The entries of the objects through `key` were yielded.
    pub(crate) fn yielded_through(&self, key: u64) {
        {
            let mut seen = self.seen();
            seen.through = seen.through.max(key);
            let above = seen.through.saturating_add(1);
            seen.landed = seen.landed.split_off(&above);
        }
        self.publish();
    }

    /// The last key whose object's entries were handed out.
    pub(crate) fn through(&self) -> u64 {
        self.seen().through
    }

    /// The lag now.
    pub(crate) fn lag(&self) -> Lag {
        let seen = self.seen();
        let oldest = seen.landed.values().min().copied();
        Lag {
            objects: seen.landed.len() as u64,
            age: oldest.map_or(Duration::ZERO, |at| at.elapsed()),
        }
    }

    /// Sets the gauges to the lag now.
    pub(crate) fn publish(&self) {
        let lag = self.lag();
        self.objects.set(lag.objects as f64);
        self.seconds.set(lag.age.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book() -> LagBook {
        LagBook::new(metrics::Gauge::noop(), metrics::Gauge::noop())
    }

    #[tokio::test(start_paused = true)]
    async fn the_lag_counts_keys_seen_above_what_was_yielded_and_ages_the_oldest() {
        let book = book();
        book.yielded_through(10);
        book.saw(9);
        assert_eq!(book.lag(), Lag::default(), "below what was yielded");
        book.saw(11);
        tokio::time::advance(Duration::from_secs(2)).await;
        book.saw(12);
        assert_eq!(
            book.lag(),
            Lag {
                objects: 2,
                age: Duration::from_secs(2)
            }
        );
        book.yielded_through(11);
        assert_eq!(book.lag().objects, 1);
        assert_eq!(book.lag().age, Duration::ZERO, "12 was seen just now");
        // A listing's chain replaces what polls saw, keeping first sights.
        book.saw(40);
        tokio::time::advance(Duration::from_secs(1)).await;
        book.listed([12, 13]);
        assert_eq!(
            book.lag(),
            Lag {
                objects: 2,
                age: Duration::from_secs(1)
            }
        );
        book.yielded_through(13);
        assert_eq!(book.lag(), Lag::default());
    }
}
