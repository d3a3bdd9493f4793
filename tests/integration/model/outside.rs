//! Following through an outside-style backend (issue 30 items 5 and 11):
//! a backend written outside the crate that implements only the four
//! required methods of `ObjectStorage` (create, read, list, delete; the
//! trait's defaults for the rest, `read_suffix` among them) over the
//! case's store, so every fault armed reaches it too.
//!
//! The follower it opens is the case's follower, held to the oracle of
//! every follower (`following`) at a catch-up. Then, with no fault armed,
//! once it read on to the writer's tip, it is left idle for a minute of
//! virtual time (nothing appended; the writer's timers run) and its
//! requests are counted in a fault wrapper of its own under the outside
//! backend: an idle follower makes about one request per wait and lists
//! at most [`IDLE_LISTS`] times in that minute, whatever state the prefix
//! is in (README, "Following"; rfcs/0010: the idle checks at 10, 20 and
//! 40 s of quiet, or the spaced listings of a prefix whose next opener
//! has not written its start object yet). The trait's default
//! `read_suffix` once listed a key on every poll: 60 listings in such a
//! minute. After its idle minute the follower is caught up once more and
//! stays the case's follower, held to the oracle at every later catch-up
//! (the writer resumes after a long quiet: see `Driver::follow_outside`).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::FaultyStorage;
use objwal::{Created, Error, ObjectMeta, ObjectStorage, Storage, StorageError};

use super::driver::Driver;
use super::following::Following;
use super::steps::From;

/// The most listings an idle follower makes in a minute of quiet
/// (rfcs/0010: 3 idle checks, or 6 spaced listings of a state no poll
/// can end, both counted from the start of the quiet).
pub const IDLE_LISTS: u64 = 6;

/// The most requests an idle follower makes in a minute of quiet: one
/// per wait, the waits growing from `follow_interval` (100 ms) to
/// `follow_max_interval` (1 s) as a quarter of the quiet time.
pub const IDLE_REQUESTS: u64 = 90;

/// How long the follower reads on before its quiet minute is counted.
const SETTLE: Duration = Duration::from_secs(5);

/// A backend outside the crate: the four required methods, passed on.
#[derive(Debug)]
struct FourMethods {
    inner: FaultyStorage,
}

#[async_trait::async_trait]
impl ObjectStorage for FourMethods {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

impl Driver {
    /// See the module documentation.
    pub(super) async fn follow_outside(
        &mut self,
        from: &[(u64, From)],
        faulty: bool,
    ) -> Result<(), String> {
        let mut points = BTreeMap::new();
        for (region, f) in from {
            points
                .entry(*region)
                .or_insert_with(|| self.from(*region, *f));
        }
        // Requests of this follower only, counted under the outside
        // backend (the case's faults apply beneath).
        let counted = FaultyStorage::new(self.storage());
        let outside = Storage::new(FourMethods {
            inner: counted.clone(),
        });
        self.follow_through(outside, points, false, faulty).await?;
        if self.following.is_none() {
            return Ok(());
        }
        self.stats.bump("followers through an outside backend", 1);
        self.catch_up(faulty).await?;
        if faulty || self.following.is_none() {
            return Ok(());
        }
        // It reads on to the writer's tip first (a catch-up ends once the
        // required entries came: a follower of a released region may still
        // be behind), then the quiet minute is counted.
        let mut failure = self.drive_follower(SETTLE).await;
        counted.reset_counts();
        let idle = Duration::from_secs(60);
        if failure.is_none() {
            failure = self.drive_follower(idle).await;
        }
        if let Some(e) = failure {
            let met_damage = self.following.as_ref().is_some_and(Following::met_damage);
            self.following = None;
            return if self.model.corruption || met_damage {
                Ok(())
            } else {
                Err(format!("an idle follower failed with no fault armed: {e}"))
            };
        }
        let counts = counted.counts();
        let requests = counts.read.requests
            + counts.list.requests
            + counts.create.requests
            + counts.delete.requests;
        if counts.list.requests > IDLE_LISTS || requests > IDLE_REQUESTS {
            return Err(format!(
                "an idle follower on a backend with only the four required methods made {requests} requests, {} of them listings, in {idle:?} of quiet (at most {IDLE_REQUESTS} and {IDLE_LISTS}): {counts:?}",
                counts.list.requests
            ));
        }
        self.stats.bump("idle minutes of a follower", 1);
        self.stats
            .bump("listings of idle followers", counts.list.requests);
        self.stats.bump("requests of idle followers", requests);
        // What it yielded meanwhile is checked with the rest, and it
        // stays the case's follower: after a quiet minute its next idle
        // check is 20 s or more away, so when the writer's collection
        // empties its next key before a poll comes, only its looks at the
        // place find the writer again within the next catch-up (it once
        // waited for that check: `follow::a_follower_quiet_for_hours_
        // follows_a_writer_whose_first_object_was_collected`).
        self.catch_up(false).await?;
        Ok(())
    }

    /// Polls the case's follower for `period` of virtual time, keeping
    /// what it yields; its error, if it failed.
    async fn drive_follower(&mut self, period: Duration) -> Option<Error> {
        let following = self.following.as_mut()?;
        let deadline = tokio::time::Instant::now() + period;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            match tokio::time::timeout(left, following.follower.next()).await {
                Err(_) | Ok(None) => return None,
                Ok(Some(Ok(entry))) => following.seen.entry(entry.region).or_default().push(entry),
                Ok(Some(Err(Error::RegionReleased { region }))) => {
                    following.ended.insert(region);
                }
                Ok(Some(Err(e))) => return Some(e),
            }
        }
    }
}
