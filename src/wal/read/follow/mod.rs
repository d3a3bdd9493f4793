//! Following a log: a reader that yields the new entries of chosen regions
//! of another process's prefix as their objects land (rfcs/0010).
//!
//! Objects are named by sequence and a writer's run is dense, so the key
//! after the follower's place is known (`protocol::next_key`): the follower
//! asks for it with a suffix read, which misses (one cheap GET) until the
//! object lands, and lists only when it must: when that key holds an
//! object that does not continue the chain (a newer process's settle
//! marker: a restart or a fencing), when the prefix holds no chain yet, and
//! now and then while the log is quiet ([`schedule`]). What it yields is
//! what recovery would replay: objects that landed and continue the chain
//! (every later opener adopts them, rfcs/0006 R4), so only durable entries,
//! possibly before the writer acknowledged them.
//!
//! Invariants of a [`Follower`]: each followed region's entries come in id
//! order, each at most once, above the region's start; a region's last item
//! after a release is `Err(Error::RegionReleased)`, and the others go on;
//! any other error is the stream's last item; entries a follower cannot
//! yield (a segment that stays corrupted under `CorruptionPolicy::Skip`, an
//! object collected before it was read) are holes ([`Follower::holes`]),
//! never a stop and never a wait.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;

use crate::error::Error;
use crate::metrics::FollowMetrics;
use crate::storage::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};
use crate::{EntryId, RegionId};

use crate::wal::open::damage::Damage;
use crate::wal::read::source::{Holes, ReadContext};
use crate::wal::{Entry, Hold, Hole, WalReader};

mod engine;
mod hold;
mod lag;
mod poll;
pub(crate) mod schedule;

pub(crate) use engine::Settings;
use engine::{Control, Engine, Item, Start};
pub use lag::Lag;
use lag::LagBook;

/// What the follower stream hands out inside the crate: its items, and
/// the answers to catch-up questions.
#[derive(Debug)]
pub(crate) enum Event {
    /// An item of the public stream.
    Item(Result<Entry, Error>),
    /// The answer to [`Follower::catch_up`] of this token.
    CaughtUp(u64),
}

/// The holes a follower records, by cause: entries it could not read
/// (a segment still corrupted after a second read, a damaged object, and
/// the damaged objects its reader's open left out) and entries of objects
/// the writer's collection deleted before the follower read them (their
/// entries were obsolete for the writer's engine: its flush marks, or a
/// release, covered them, rfcs/0005). A move by following may not go
/// around the first kind; the second holds nothing the other node still
/// needed (rfcs/0009, decision 6).
#[derive(Debug, Clone)]
pub(crate) struct HoleBook {
    damage: Arc<Damage>,
    unread: Arc<Holes>,
    collected: Arc<Holes>,
}

impl HoleBook {
    /// Every hole of `region`.
    fn all(&self, region: RegionId) -> Vec<Hole> {
        let mut holes = self.unreadable(region);
        holes.extend(self.collected.of(region));
        holes
    }

    /// The holes of `region` whose entries could not be read.
    pub(crate) fn unreadable(&self, region: RegionId) -> Vec<Hole> {
        let mut holes = self.damage.holes(region);
        holes.extend(self.unread.of(region));
        holes
    }
}

/// The new entries of chosen regions of a prefix, as their objects land:
/// a `Stream` of `Result<Entry, Error>`, from [`WalReader::follow`].
///
/// Each region's entries come in id order, each once, starting above the
/// id it was added with. Regions are interleaved object by object. The
/// stream never ends on its own while the log lives: it waits for the
/// writer (one read per poll interval while idle, see
/// `Config::follow_interval` and `follow_max_interval`), and goes on across
/// the writer's restarts and fencing.
///
/// Items:
/// - `Ok(entry)`: the next entry of a followed region.
/// - `Err(Error::RegionReleased { region })`: the region was released by
///   the writer; it is the region's last item (it is no longer followed,
///   [`positions`](Self::positions) drops it), and the other regions go on.
///   Every release ever made ends its region: one the reader's open knew
///   (the region ends at once), one whose record the follower takes in,
///   and one whose record collection deleted before the follower read it
///   (the follower meets a hole there and then lists the release markers,
///   once per hole).
/// - any other `Err`: the follower cannot go on (a storage failure that
///   does not pass, a corrupted segment under `CorruptionPolicy::Fail`, a
///   damaged object under `DamagePolicy::Fail`); it is the last item.
///   Transient failures are not items: the follower waits and asks again,
///   until its requests have kept failing for one `request_timeout` (30 s
///   by default) with none succeeding, a store that stopped answering: it
///   then ends with that retryable error (never, with `request_timeout =
///   "off"`). To resume, follow again from [`positions`](Self::positions).
///
/// Entries that cannot be yielded are holes ([`holes`](Self::holes)),
/// logged and counted, and the stream goes on: a segment still corrupted
/// after a second read (under `CorruptionPolicy::Skip`), an object the
/// writer's collection deleted before the follower read it (its entries
/// were obsolete for the writer's engine, and are gone), a damaged object
/// (under `DamagePolicy::Quarantine`). Entries the writer's durable flush
/// marks or releases cover when their object is read are hidden, as
/// `read` hides them.
///
/// Poll it inside a tokio runtime: its reads are spawned tasks, aborted
/// when it is dropped.
pub struct Follower {
    events: Pin<Box<dyn Stream<Item = Item> + Send>>,
    control: flume::Sender<Control>,
    /// Followed regions and the generation of their latest `add`.
    regions: BTreeMap<RegionId, u64>,
    positions: BTreeMap<RegionId, EntryId>,
    /// Per region, the highest id hidden (obsolete or released) or skipped
    /// (a hole): ids through it were not and will not be yielded.
    passed: BTreeMap<RegionId, EntryId>,
    /// Per region, the highest id hidden by the writer's flush marks or
    /// release.
    hidden: BTreeMap<RegionId, EntryId>,
    next_generation: u64,
    next_token: u64,
    holes: HoleBook,
    lag: Arc<LagBook>,
    done: bool,
    /// No backfill reads below this object (the hold's floor).
    floor: Arc<hold::Floor>,
    /// The task keeping a hold, if one was given.
    keeper: Option<hold::Keeper>,
    metrics: FollowMetrics,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("positions", &self.positions)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl WalReader {
    /// Follows `regions` of this reader's prefix: for each `(region,
    /// from)`, the entries of `region` with ids above `from`, first those
    /// this reader's catalog holds, then those of every object that lands
    /// after it, as they land (see [`Follower`]). A region named twice
    /// starts above the lower id.
    ///
    /// It reads with this reader's settings (`request_timeout`,
    /// `on_corrupted_segment`, `on_damaged_object`, `replay_concurrency`,
    /// `replay_buffer_bytes`) and polls by `follow_interval` and
    /// `follow_max_interval`. It writes nothing, so it never fences the
    /// writer. Its requests are counted by the `objwal_follow_*` metrics.
    pub fn follow(&self, regions: impl IntoIterator<Item = (RegionId, EntryId)>) -> Follower {
        let mut starts: BTreeMap<RegionId, EntryId> = BTreeMap::new();
        for (region, from) in regions {
            let start = starts.entry(region).or_insert(from);
            *start = (*start).min(from);
        }
        let prefix = self.read.prefix.clone();
        let metrics = FollowMetrics::new(prefix.as_str());
        let storage = Storage::new(Counted {
            inner: self.read.storage.clone(),
            metrics: metrics.clone(),
        });
        let holes = HoleBook {
            damage: self.damage.clone(),
            unread: Arc::new(Holes::default()),
            collected: Arc::new(Holes::default()),
        };
        let ctx = ReadContext {
            storage: storage.clone(),
            holes: holes.unread.clone(),
            ..self.read.clone()
        };
        let lag = Arc::new(LagBook::new(
            metrics.lag_objects.clone(),
            metrics.lag_seconds.clone(),
        ));
        let (control, receiver) = flume::unbounded();
        let generations: BTreeMap<RegionId, u64> = starts.keys().map(|&r| (r, 0)).collect();
        let floor = Arc::new(hold::Floor::new(
            starts
                .values()
                .map(|&from| crate::format::sequence_of(from))
                .min()
                .unwrap_or(u64::MAX),
        ));
        let engine = Engine::new(Start {
            storage,
            prefix,
            ctx,
            settings: self.follow.clone(),
            damage: self.damage.clone(),
            collected: holes.collected.clone(),
            metrics: metrics.clone(),
            lag: lag.clone(),
            catalog: self.catalog.as_ref().clone(),
            regions: starts.iter().map(|(&r, &from)| (r, from, 0)).collect(),
            control: receiver,
        });
        Follower {
            events: Box::pin(engine.run()),
            control,
            regions: generations,
            positions: starts,
            passed: BTreeMap::new(),
            hidden: BTreeMap::new(),
            next_generation: 1,
            next_token: 1,
            holes,
            lag,
            done: false,
            floor,
            keeper: None,
            metrics,
        }
    }
}

impl Follower {
    /// Follows `region` too, from above `from`: first what the follower
    /// has seen of it (the objects still in the log), then as it lands. A
    /// region followed already starts again from above `from` (its
    /// entries come again if `from` is below its position). Takes effect
    /// at the follower's next step: it does not wait for a poll interval.
    pub fn add(&mut self, region: RegionId, from: EntryId) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.floor.lower(crate::format::sequence_of(from));
        self.regions.insert(region, generation);
        self.positions.insert(region, from);
        self.passed.remove(&region);
        self.hidden.remove(&region);
        let _ = self.control.send(Control::Add {
            region,
            from,
            generation,
        });
    }

    /// Keeps `hold` (from [`WalReader::hold`]) for as long as this
    /// follower lives: every quarter of its ttl, a task moves it to the
    /// lowest object the follower still needs (the object after the last
    /// one whose entries it handed out; lower while a region's backfill
    /// from the catalog runs) and refreshes it. The writer's collection
    /// then deletes nothing the follower has not taken in, so a follower
    /// that falls behind collection meets no hole (rfcs/0011, for when a
    /// hold is in force). A refresh that fails is counted
    /// (`objwal_follow_hold_failures_total`), logged and tried again sooner.
    /// Dropping the follower stops the refreshes (the hold expires after
    /// its ttl); [`take_hold`](Self::take_hold) gives it back, to release.
    /// A hold given before replaces the one kept (which then expires).
    ///
    /// Call it inside a tokio runtime: the refreshes run in a spawned task.
    ///
    /// ```
    /// # async fn demo() -> Result<(), objwal::Error> {
    /// use std::time::Duration;
    /// use objwal::{Config, Storage, Wal, WalReader};
    /// let storage = Storage::from_url("memory://")?;
    /// let wal = Wal::open(storage.clone(), "node-7", Config::default()).await?;
    /// let reader = WalReader::open(storage, "node-7", Config::default()).await?;
    /// let hold = reader.hold("standby-1", Duration::from_secs(300)).await?;
    /// let mut follower = reader.follow([(1, 0)]);
    /// follower.keep_hold(hold);
    /// // ... follow; at the end, stop holding the primary's objects:
    /// if let Some(hold) = follower.take_hold().await {
    ///     hold.release().await?;
    /// }
    /// # wal.stop().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keep_hold(&mut self, hold: Hold) {
        self.keeper = Some(hold::Keeper::start(
            hold,
            self.floor.clone(),
            self.lag.clone(),
            self.metrics.clone(),
        ));
    }

    /// Stops refreshing the hold given to [`keep_hold`](Self::keep_hold)
    /// and gives it back, at the position it last moved it to (`None` if
    /// none was given). Release it, or keep it another way.
    pub async fn take_hold(&mut self) -> Option<Hold> {
        match self.keeper.take() {
            Some(keeper) => keeper.stop().await,
            None => None,
        }
    }

    /// The object sequence a hold kept by this follower moves to next:
    /// the lowest object it still needs.
    pub fn hold_position(&self) -> u64 {
        hold::needed(&self.floor, &self.lag)
    }

    /// Stops following `region`: none of its entries comes after this
    /// call (also none already fetched).
    pub fn remove(&mut self, region: RegionId) {
        self.regions.remove(&region);
        self.positions.remove(&region);
        self.passed.remove(&region);
        self.hidden.remove(&region);
        let _ = self.control.send(Control::Remove { region });
    }

    /// Where the follower is: per followed region, in region order, the
    /// last id yielded (its start until one is). Following again from
    /// these positions (`reader.follow(follower.positions())`) goes on
    /// where this follower stopped.
    pub fn positions(&self) -> Vec<(RegionId, EntryId)> {
        self.positions.iter().map(|(&r, &id)| (r, id)).collect()
    }

    /// What `region` misses: segments that stayed corrupted, objects
    /// collected before the follower read them, damaged objects (also
    /// those its reader's open left out of replay).
    pub fn holes(&self, region: RegionId) -> Vec<Hole> {
        self.holes.all(region)
    }

    /// The follower's holes, by cause, shared: they stay readable after
    /// the follower moved into a task.
    pub(crate) fn hole_book(&self) -> HoleBook {
        self.holes.clone()
    }

    /// Takes in, without waiting for a poll interval, every object that
    /// landed before this call: a stream of the entries up to there, which
    /// ends (`None`) once the follower has yielded them all and a listing
    /// found nothing beyond (a key the writer's collection emptied is not
    /// taken for the end of the log). The follower then stands where the
    /// log stood at the call; `lag()` is exact (zero if nothing landed
    /// since).
    ///
    /// Its items are the follower's own (the follower goes on after it,
    /// from where it ended): entries, a released region's
    /// `Err(Error::RegionReleased)`, or the follower's last error, after
    /// which it ends too. Dropping it before it ends is harmless: the
    /// entries not taken come from the follower.
    ///
    /// ```no_run
    /// # async fn standby(reader: objwal::WalReader) -> Result<(), objwal::Error> {
    /// use futures::StreamExt;
    /// let mut follower = reader.follow([(1, 0)]);
    /// let mut caught_up = follower.catch_up();
    /// while let Some(entry) = caught_up.next().await {
    ///     let entry = entry?; // apply it
    /// #   let _ = entry;
    /// }
    /// // Everything that landed before catch_up() was called is applied:
    /// // promote, or report ready.
    /// # Ok(())
    /// # }
    /// ```
    pub fn catch_up(&mut self) -> CatchUp<'_> {
        let token = self.ask_catch_up();
        CatchUp {
            follower: self,
            token,
            ended: false,
        }
    }

    /// How far behind the log the follower is, from what it last learned:
    /// the chain objects it saw landed (by a poll or a listing) whose
    /// entries it has not yielded, and how long ago it first saw the
    /// oldest of them. A lower bound between its looks (objects landed
    /// since are unknown until a poll finds them); exact right after
    /// [`catch_up`](Self::catch_up). Also the gauges
    /// `objwal_follow_lag_objects` and `objwal_follow_lag_seconds` (label
    /// `prefix`), updated as the follower steps and at each call.
    ///
    /// ```no_run
    /// # fn alert(follower: &objwal::Follower) {
    /// let lag = follower.lag();
    /// if lag.age > std::time::Duration::from_secs(5) {
    ///     eprintln!("standby {} objects and {:?} behind", lag.objects, lag.age);
    /// }
    /// # }
    /// ```
    pub fn lag(&self) -> Lag {
        self.lag.publish();
        self.lag.lag()
    }

    /// Asks the follower to take in, without waiting for a poll interval,
    /// every object that has landed by now; its answer is
    /// [`Event::CaughtUp`] with the returned token.
    pub(crate) fn ask_catch_up(&mut self) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let _ = self.control.send(Control::CatchUp(token));
        token
    }

    /// The highest id of `region` that was hidden (obsolete or released on
    /// the writer's side), skipped (a hole) or yielded: every id of the
    /// region the follower has passed.
    pub(crate) fn reached(&self, region: RegionId) -> EntryId {
        let position = self.positions.get(&region).copied().unwrap_or(0);
        position.max(self.passed.get(&region).copied().unwrap_or(0))
    }

    /// The highest id of `region` the writer's flush marks or release
    /// hide.
    pub(crate) fn hidden_through(&self, region: RegionId) -> EntryId {
        self.hidden.get(&region).copied().unwrap_or(0)
    }

    fn current(&self, region: RegionId, generation: u64) -> bool {
        self.regions.get(&region) == Some(&generation)
    }

    /// The next event: an item of the public stream, or a catch-up answer.
    pub(crate) fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let item = match self.events.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(item)) => item,
            };
            match item {
                Item::Entry { generation, entry } => {
                    if !self.current(entry.region, generation) {
                        continue;
                    }
                    let position = self.positions.entry(entry.region).or_insert(0);
                    if entry.id <= *position {
                        continue;
                    }
                    *position = entry.id;
                    return Poll::Ready(Some(Event::Item(Ok(entry))));
                }
                Item::Hidden {
                    generation,
                    region,
                    through,
                } => {
                    if self.current(region, generation) {
                        let hidden = self.hidden.entry(region).or_insert(0);
                        *hidden = (*hidden).max(through);
                        let passed = self.passed.entry(region).or_insert(0);
                        *passed = (*passed).max(through);
                    }
                }
                Item::Skipped {
                    generation,
                    region,
                    through,
                } => {
                    if self.current(region, generation) {
                        let passed = self.passed.entry(region).or_insert(0);
                        *passed = (*passed).max(through);
                    }
                }
                Item::Released { generation, region } => {
                    if self.current(region, generation) {
                        self.regions.remove(&region);
                        self.positions.remove(&region);
                        return Poll::Ready(Some(Event::Item(Err(Error::RegionReleased {
                            region,
                        }))));
                    }
                }
                Item::CaughtUp(token) => return Poll::Ready(Some(Event::CaughtUp(token))),
                Item::Through(sequence) => self.lag.yielded_through(sequence),
                Item::BackfillsEnded(generation) => {
                    if generation.saturating_add(1) == self.next_generation {
                        self.floor.lift();
                    }
                }
                Item::Failed(error) => {
                    self.done = true;
                    return Poll::Ready(Some(Event::Item(Err(error))));
                }
            }
        }
    }
}

impl Stream for Follower {
    type Item = Result<Entry, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match this.poll_event(cx) {
                Poll::Ready(Some(Event::Item(item))) => return Poll::Ready(Some(item)),
                Poll::Ready(Some(Event::CaughtUp(_))) => continue,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The entries of a [`Follower`] up to where the log stood when
/// [`Follower::catch_up`] was called: a `Stream` of `Result<Entry, Error>`
/// that ends once they are all yielded.
#[must_use = "a catch-up takes effect as it is polled"]
pub struct CatchUp<'a> {
    follower: &'a mut Follower,
    token: u64,
    ended: bool,
}

impl std::fmt::Debug for CatchUp<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUp")
            .field("follower", &self.follower)
            .field("ended", &self.ended)
            .finish()
    }
}

impl Stream for CatchUp<'_> {
    type Item = Result<Entry, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            match this.follower.poll_event(cx) {
                Poll::Ready(Some(Event::Item(item))) => return Poll::Ready(Some(item)),
                Poll::Ready(Some(Event::CaughtUp(token))) => {
                    this.ended = token == this.token;
                }
                Poll::Ready(None) => {
                    this.ended = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The follower's storage: counts its requests by kind (polls are suffix
/// reads, the only ones a follower makes).
struct Counted {
    inner: Storage,
    metrics: FollowMetrics,
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("inner", &self.inner)
            .finish()
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Counted {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.metrics.reads.increment(1);
        self.inner.read(key, range).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.metrics.polls.increment(1);
        self.inner.read_suffix(key, len).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.metrics.lists.increment(1);
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_followers_counting_wrapper_passes_every_provided_method_on() {
        crate::storage::forwarding_tests::check_forwards("follower's counter", true, |probe| {
            Storage::new(Counted {
                inner: probe,
                metrics: FollowMetrics::new("p"),
            })
        })
        .await;
    }
}
