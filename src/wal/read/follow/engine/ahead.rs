//! Read-ahead: the polls of the keys after the place, started before the
//! follower needs them, so that a follower behind the writer catches up at
//! several objects per round trip instead of one (issue 31 item 1).
//!
//! A writer's run is dense, so the keys after the place are known but for
//! a jump: the follower polls `next`, `next + 1`, ... at once and takes
//! the answers in key order, each by the usual rules (a poll of a key is
//! a look at that key, whoever asked for it; one of a key the chain jumps
//! over is dropped unused). How many: the *depth*, 1 while the follower
//! keeps pace (one poll of the next key, as before); while polls started
//! ahead keep finding their objects (the follower is behind), a quarter of
//! how many did in a row, up to `replay_concurrency` and to what
//! `replay_buffer_bytes` holds of poll windows; back to 1 at the first key
//! that holds nothing (then the usual wait). Growing by a quarter of the
//! streak still doubles the objects taken in per round trip every few
//! round trips (each round trip takes in `depth` objects), while a
//! catch-up's last look, `depth - 1` polls that miss, costs at most a
//! quarter of the objects it took in; a follower that trails by a few
//! objects between its waits pays no extra request.

//! Invariants: at most `max` polls are held; every poll held is of a key
//! at or above the next one the follower will ask for (lower ones are
//! dropped, and their tasks aborted, when the follower passes them).

use std::collections::BTreeMap;

use crate::error::Error;
use crate::wal::read::source::Task;

use super::super::poll::Polled;

/// A poll in flight or done, as the engine takes it.
pub(crate) type PollTask = Task<Result<Polled, Error>>;

/// The polls started ahead of the place, by key.
pub(crate) struct ReadAhead {
    polls: BTreeMap<u64, PollTask>,
    /// Polls started ahead that found their objects, in a row.
    streak: u32,
    depth: usize,
    max: usize,
}

impl ReadAhead {
    /// Read-ahead of at most `concurrency` polls, and of no more than
    /// `buffer_bytes` of windows of `window` bytes each (one at least).
    pub(crate) fn new(concurrency: usize, buffer_bytes: u64, window: u64) -> ReadAhead {
        let fit = usize::try_from(buffer_bytes / window.max(1)).unwrap_or(usize::MAX);
        ReadAhead {
            polls: BTreeMap::new(),
            streak: 0,
            depth: 1,
            max: concurrency.min(fit).max(1),
        }
    }

    /// The poll of `key` if one was started, dropping those below it.
    pub(crate) fn take(&mut self, key: u64) -> Option<PollTask> {
        self.polls = self.polls.split_off(&key);
        self.polls.remove(&key)
    }

    /// Starts the polls of `from ..` that the depth asks for and are not
    /// in flight yet (`start` starts the poll of one key).
    pub(crate) fn top_up(&mut self, from: u64, last: u64, start: impl Fn(u64) -> PollTask) {
        self.polls = self.polls.split_off(&from);
        let end = from
            .saturating_add(self.depth as u64)
            .min(last.saturating_add(1));
        for key in from..end {
            self.polls.entry(key).or_insert_with(|| start(key));
        }
    }

    /// A poll started ahead found its object: the follower is behind, so
    /// look further.
    pub(crate) fn behind(&mut self) {
        self.streak = self.streak.saturating_add(1);
        let quarter = usize::try_from(self.streak / 4).unwrap_or(usize::MAX);
        self.depth = quarter.clamp(1, self.max);
    }

    /// A key held nothing: drop the polls above it (they were started no
    /// later, so they most likely missed too) and poll one key at a time.
    pub(crate) fn caught_up(&mut self) {
        self.polls.clear();
        self.streak = 0;
        self.depth = 1;
    }

    /// Drops every poll (their answers may be older than a question, or
    /// of keys the follower no longer goes to); the depth stays.
    pub(crate) fn clear(&mut self) {
        self.polls.clear();
    }

    /// Polls held (in flight or answered).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.polls.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(_: u64) -> PollTask {
        Task::spawn(async { Ok(Polled::Missing) })
    }

    #[tokio::test]
    async fn the_depth_doubles_while_behind_up_to_the_bound_and_resets_at_a_miss() {
        let mut ahead = ReadAhead::new(16, 64 << 20, 64 << 10);
        ahead.top_up(10, u64::MAX, missing);
        assert_eq!(ahead.held(), 1, "a follower that keeps pace polls one key");
        for _ in 0..7 {
            ahead.behind();
        }
        ahead.top_up(10, u64::MAX, missing);
        assert_eq!(ahead.held(), 1, "seven objects found ahead: still one");
        ahead.behind();
        ahead.top_up(10, u64::MAX, missing);
        assert_eq!(ahead.held(), 2, "eight in a row: two");
        for _ in 0..100 {
            ahead.behind();
        }
        ahead.top_up(11, u64::MAX, missing);
        assert_eq!(ahead.held(), 16, "bounded by replay_concurrency");
        assert!(ahead.take(12).is_some(), "key 11 is dropped, 12 taken");
        assert_eq!(ahead.held(), 14);
        ahead.caught_up();
        ahead.top_up(13, u64::MAX, missing);
        assert_eq!(ahead.held(), 1);
    }

    #[tokio::test]
    async fn the_buffer_bounds_the_depth_and_the_last_key_ends_it() {
        let mut ahead = ReadAhead::new(16, 4 * (64 << 10), 64 << 10);
        for _ in 0..100 {
            ahead.behind();
        }
        ahead.top_up(0, u64::MAX, missing);
        assert_eq!(ahead.held(), 4, "four windows fit in the buffer");
        ahead.top_up(100, 101, missing);
        assert_eq!(ahead.held(), 2, "no key past the last");
    }
}
