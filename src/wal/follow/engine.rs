//! The follower's engine: one task-free state machine, driven by the
//! [`Follower`](super::Follower) stream, that takes in the objects of a
//! prefix's chain as they land and turns the followed regions' segments
//! into items.
//!
//! Where it is: `catalog`, the chain objects it took in (trimmed below the
//! writer's reclaim boundary, as the writer trims its own), whose newest is
//! the follower's *place*; and `path`, the summaries of the last
//! [`PATH_LEN`] chain objects, which a listing's chain selection starts
//! from. A step does one of:
//! - a **backfill**: regions added (and the first ones) read what the
//!   catalog holds for them above their start, through bulk replay;
//! - a **poll** of the next key after the place (`protocol::next_key`): an
//!   object that continues the chain is taken in (its tail known from the
//!   poll, its wanted segments read, the poll of the key after it started
//!   at once); nothing there is a wait (`schedule`); anything else (a
//!   settle marker, another process's object) means a newer process
//!   walked the run: a listing follows;
//! - a **listing** ([`Engine::resolve`]): the tails of the listed objects
//!   it does not know, chain selection over them and the path (the path's
//!   oldest object standing as a root), and the tip's chain taken in from
//!   where it leaves the path. A chain that reaches the path only through a
//!   gap below its reclaim boundary means collected objects: a hole.
//!
//! Invariants: items of one region come in id order, each id at most once
//! (an entry is queued only above the region's position, which it then
//! becomes); a control message takes effect between steps, never while a
//! segment read of a step is in flight; an object enters the catalog only
//! if it continues the place, or lies on the chain a listing selected.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::catalog::chain::{self, ObjectSummary};
use crate::catalog::{Catalog, IndexedObject, SegmentRef};
use crate::config::DamagePolicy;
use crate::error::Error;
use crate::format::{self, Link};
use crate::metrics::FollowMetrics;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::damage::Damage;
use crate::wal::protocol;
use crate::wal::quarantine::{examine, Damaged, Examined};
use crate::wal::reader::{fetch_segment, ReadContext, SegmentPage, SegmentSource, Task};
use crate::wal::recovery::{RecoveredObject, TailWindow};
use crate::wal::replay::{self, ReplayPage};
use crate::wal::{Entry, Hole};
use crate::{EntryId, RegionId};

use super::poll::{poll, Landed, Polled};
use super::schedule::Schedule;

/// Chain objects whose summaries the follower keeps: a listing's chain
/// selection starts from the oldest, so a newer process's start object
/// linking to any of them is found (a failed opener's start object the
/// follower took in, then left for the live writer's, lies within a few).
pub(crate) const PATH_LEN: usize = 64;

/// Tails of objects off the chain (settle markers, orphans) remembered, so
/// that listings do not read them again.
const OTHERS_KEPT: usize = 1024;

/// What the engine hands the [`Follower`](super::Follower).
#[derive(Debug)]
pub(crate) enum Item {
    /// An entry of a followed region (of the region's `generation`).
    Entry { generation: u64, entry: Entry },
    /// The region's entries through `through` are obsolete or released on
    /// the writer's side: hidden, never yielded.
    Hidden {
        generation: u64,
        region: RegionId,
        through: EntryId,
    },
    /// The region's ids through `through` will not be yielded: a hole.
    Skipped {
        generation: u64,
        region: RegionId,
        through: EntryId,
    },
    /// The region was released: its last item.
    Released { generation: u64, region: RegionId },
    /// Every object that had landed when catch-up `token` was asked for
    /// is taken in.
    CaughtUp(u64),
    /// The follower cannot go on: its last item.
    Failed(Error),
}

/// What the [`Follower`](super::Follower) tells the engine.
#[derive(Debug)]
pub(crate) enum Control {
    /// Follow `region` from above `from` (again, if it is followed).
    Add {
        region: RegionId,
        from: EntryId,
        generation: u64,
    },
    /// Stop following `region`.
    Remove { region: RegionId },
    /// Poll at once, without waiting, until a poll misses; then answer
    /// `CaughtUp(token)`.
    CatchUp(u64),
}

/// A followed region.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    /// The last id queued (or the start).
    position: EntryId,
    /// The highest id known hidden (obsolete or released) or skipped.
    hidden: EntryId,
    generation: u64,
}

/// Settings of a follower, from its reader's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) interval: Duration,
    pub(crate) max_interval: Duration,
    pub(crate) damage_policy: DamagePolicy,
    pub(crate) listing_concurrency: usize,
}

/// A backfill in progress: bulk replay over a snapshot of the catalog.
struct Backfill {
    stream: Pin<Box<dyn Stream<Item = Result<Entry, Error>> + Send>>,
    regions: Vec<RegionId>,
    snapshot: Arc<Catalog>,
    collected: Arc<Mutex<BTreeSet<u64>>>,
}

/// The catalog as it was when a backfill started; an object found missing
/// was collected under the backfill (recorded, and skipped: a hole).
struct Snapshot {
    catalog: Arc<Catalog>,
    collected: Arc<Mutex<BTreeSet<u64>>>,
}

impl SegmentSource for Snapshot {
    fn page(
        &self,
        region: RegionId,
        from: EntryId,
        limit: usize,
    ) -> BoxFuture<'static, Result<SegmentPage, Error>> {
        SegmentSource::page(self.catalog.as_ref(), region, from, limit)
    }

    fn replay_page(
        &self,
        wanted: Arc<[(RegionId, EntryId)]>,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'static, Result<ReplayPage, Error>> {
        SegmentSource::replay_page(self.catalog.as_ref(), wanted, after, limit)
    }

    fn deleted(&self, sequence: u64) -> BoxFuture<'static, Result<bool, Error>> {
        self.collected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(sequence);
        Box::pin(async { Ok(true) })
    }
}

/// The source of a tail step's segment reads: a missing object is an
/// error, which the step turns into a hole (it knows the region).
struct Direct;

impl SegmentSource for Direct {
    fn page(
        &self,
        _: RegionId,
        _: EntryId,
        _: usize,
    ) -> BoxFuture<'static, Result<SegmentPage, Error>> {
        Box::pin(async { Ok(SegmentPage::default()) })
    }

    fn replay_page(
        &self,
        _: Arc<[(RegionId, EntryId)]>,
        _: u64,
        _: usize,
    ) -> BoxFuture<'static, Result<ReplayPage, Error>> {
        Box::pin(async { Ok(ReplayPage::default()) })
    }

    fn deleted(&self, _: u64) -> BoxFuture<'static, Result<bool, Error>> {
        Box::pin(async { Ok(false) })
    }
}

/// One wanted segment of an object being taken in.
struct Fetch {
    region: RegionId,
    segment: SegmentRef,
    /// Its bytes when the poll's window held them.
    bytes: Option<bytes::Bytes>,
}

type Fetched = (
    RegionId,
    SegmentRef,
    Result<Option<Vec<(EntryId, bytes::Bytes)>>, Error>,
);

/// The engine.
pub(crate) struct Engine {
    storage: Storage,
    prefix: Prefix,
    ctx: ReadContext,
    settings: Settings,
    damage: Arc<Damage>,
    metrics: FollowMetrics,
    window: Arc<TailWindow>,
    catalog: Catalog,
    path: BTreeMap<u64, ObjectSummary>,
    others: BTreeMap<u64, RecoveredObject>,
    regions: BTreeMap<RegionId, Wanted>,
    control: flume::Receiver<Control>,
    schedule: Schedule,
    backfill: Option<Backfill>,
    /// Regions to backfill once the running backfill ends.
    queued: BTreeSet<RegionId>,
    /// The poll of the key after the place, started when the place was
    /// taken in.
    ahead: Option<(u64, Task<Result<Polled, Error>>)>,
    /// The next key holds an object that does not continue the chain:
    /// list until a listing moves the place.
    blocked: bool,
    catch_up: Option<u64>,
    out: VecDeque<Item>,
    ended: bool,
}

/// What a new engine starts from.
pub(crate) struct Start {
    pub(crate) storage: Storage,
    pub(crate) prefix: Prefix,
    pub(crate) ctx: ReadContext,
    pub(crate) settings: Settings,
    pub(crate) damage: Arc<Damage>,
    pub(crate) metrics: FollowMetrics,
    pub(crate) catalog: Catalog,
    pub(crate) regions: Vec<(RegionId, EntryId, u64)>,
    pub(crate) control: flume::Receiver<Control>,
}

impl Engine {
    pub(crate) fn new(start: Start) -> Engine {
        let path = start
            .catalog
            .objects()
            .rev()
            .take(PATH_LEN)
            .map(summary_of)
            .map(|s| (s.sequence, s))
            .collect();
        let regions: BTreeMap<RegionId, Wanted> = start
            .regions
            .iter()
            .map(|&(region, from, generation)| {
                let wanted = Wanted {
                    position: from,
                    hidden: 0,
                    generation,
                };
                (region, wanted)
            })
            .collect();
        let queued = regions.keys().copied().collect();
        let schedule = Schedule::new(
            start.settings.interval,
            start.settings.max_interval,
            Instant::now(),
        );
        Engine {
            storage: start.storage,
            prefix: start.prefix,
            ctx: start.ctx,
            settings: start.settings,
            damage: start.damage,
            metrics: start.metrics,
            window: Arc::new(TailWindow::default()),
            catalog: start.catalog,
            path,
            others: BTreeMap::new(),
            regions,
            control: start.control,
            schedule,
            backfill: None,
            queued,
            ahead: None,
            blocked: false,
            catch_up: None,
            out: VecDeque::new(),
            ended: false,
        }
    }

    /// The items, as a stream that ends after `Failed`.
    pub(crate) fn run(self) -> impl Stream<Item = Item> + Send + 'static {
        futures::stream::unfold(self, |mut engine| async move {
            loop {
                if let Some(item) = engine.out.pop_front() {
                    return Some((item, engine));
                }
                if engine.ended {
                    return None;
                }
                engine.step().await;
            }
        })
    }

    /// One unit of work: a backfill item, a poll, or a listing.
    async fn step(&mut self) {
        self.drain_control();
        if self.ended {
            return;
        }
        if self.backfill.is_none() && !self.queued.is_empty() {
            self.start_backfill();
        }
        if self.backfill.is_some() {
            self.backfill_step().await;
            return;
        }
        self.tail_step().await;
    }

    fn drain_control(&mut self) {
        loop {
            match self.control.try_recv() {
                Ok(message) => self.on_control(message),
                Err(flume::TryRecvError::Empty) => return,
                // The follower is gone: so is the stream.
                Err(flume::TryRecvError::Disconnected) => {
                    self.ended = true;
                    return;
                }
            }
        }
    }

    fn on_control(&mut self, message: Control) {
        match message {
            Control::Add {
                region,
                from,
                generation,
            } => {
                let wanted = Wanted {
                    position: from,
                    hidden: 0,
                    generation,
                };
                self.regions.insert(region, wanted);
                // A running backfill may have passed `from` for this
                // region: start over from every region's position.
                if let Some(running) = self.backfill.take() {
                    self.queued.extend(running.regions);
                }
                self.queued.insert(region);
            }
            Control::Remove { region } => {
                self.regions.remove(&region);
                self.queued.remove(&region);
            }
            Control::CatchUp(token) => {
                // A poll started before the question may have missed an
                // object that landed since.
                self.ahead = None;
                self.catch_up = Some(token);
            }
        }
    }

    /// The place: the newest chain object taken in.
    fn place(&self) -> Option<&IndexedObject> {
        self.catalog.tip()
    }

    /// Waits `delay`, or less when a control message arrives.
    async fn wait(&mut self, delay: Duration) {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            message = self.control.recv_async() => match message {
                Ok(message) => self.on_control(message),
                Err(_) => self.ended = true,
            },
        }
    }

    /// Nothing new was found: answer a catch-up, else wait.
    async fn idle(&mut self) {
        if let Some(token) = self.catch_up.take() {
            self.out.push_back(Item::CaughtUp(token));
            return;
        }
        let delay = self.schedule.delay(Instant::now());
        self.wait(delay).await;
    }

    /// A request failed: a transient failure is waited out and the step
    /// repeated; anything else ends the follower.
    async fn failed(&mut self, error: Error) {
        if error.is_retryable() {
            tracing::warn!(prefix = %self.prefix, %error, "a follower's request failed; repeating it");
            let delay = self.schedule.delay(Instant::now());
            self.wait(delay).await;
        } else {
            self.fail(error);
        }
    }

    fn fail(&mut self, error: Error) {
        tracing::error!(prefix = %self.prefix, %error, "the follower stops");
        self.out.push_back(Item::Failed(error));
        self.ended = true;
    }

    // ---- backfill ------------------------------------------------------

    fn start_backfill(&mut self) {
        let regions: Vec<RegionId> = std::mem::take(&mut self.queued)
            .into_iter()
            .filter(|r| self.regions.contains_key(r))
            .collect();
        if regions.is_empty() {
            return;
        }
        let wanted: Arc<[(RegionId, EntryId)]> = regions
            .iter()
            .filter_map(|r| {
                let w = self.regions.get(r)?;
                Some((*r, w.position.saturating_add(1)))
            })
            .collect();
        let snapshot = Arc::new(self.catalog.clone());
        let collected = Arc::new(Mutex::new(BTreeSet::new()));
        let source = Arc::new(Snapshot {
            catalog: snapshot.clone(),
            collected: collected.clone(),
        });
        let stream = replay::stream(source, self.ctx.clone(), wanted, &self.damage);
        self.backfill = Some(Backfill {
            stream: Box::pin(stream),
            regions,
            snapshot,
            collected,
        });
    }

    async fn backfill_step(&mut self) {
        let Some(backfill) = self.backfill.as_mut() else {
            return;
        };
        match backfill.stream.next().await {
            Some(Ok(entry)) => self.queue_entry(entry),
            Some(Err(error)) => {
                if let Some(running) = self.backfill.take() {
                    self.queued.extend(running.regions);
                }
                self.failed(error).await;
            }
            None => {
                if let Some(done) = self.backfill.take() {
                    self.end_backfill(done);
                }
            }
        }
    }

    /// After a backfill: the holes of objects collected under it, what the
    /// catalog hides of each region, and the releases.
    fn end_backfill(&mut self, done: Backfill) {
        let collected: Vec<u64> = done
            .collected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        for sequence in collected {
            let Some(object) = done.snapshot.object(sequence) else {
                continue;
            };
            self.metrics.missed_objects.increment(1);
            for segment in &object.segments {
                if done.regions.contains(&segment.region) {
                    self.hole(segment.region, sequence, segment.first_id, segment.last_id);
                }
            }
        }
        for region in done.regions {
            self.learn_hidden(region);
        }
    }

    // ---- the tail --------------------------------------------------------

    async fn tail_step(&mut self) {
        let now = Instant::now();
        let Some(place) = self.place() else {
            // No chain yet: only a listing can find one.
            return self.listing_step(now).await;
        };
        let next = protocol::next_key(place.sequence, place.jump());
        let at = (place.sequence, place.epoch);
        let check = self.catch_up.is_none() && self.schedule.check_due(now);
        if self.blocked || check || next > format::MAX_SEQUENCE {
            return self.listing_step(now).await;
        }
        let polled = match self.ahead.take() {
            Some((key, task)) if key == next => task.await.and_then(|polled| polled),
            _ => poll(&self.storage, &self.prefix, next, &self.window).await,
        };
        match polled {
            Ok(Polled::Landed(landed)) => {
                if protocol::continues(landed.object.tail.header(), at) {
                    self.schedule.landed(now);
                    self.take_in_landed(*landed).await;
                } else {
                    // A newer process walked the run (its settle marker),
                    // or another process's object: list.
                    tracing::info!(prefix = %self.prefix, key = next,
                        "the next key holds an object that does not continue the chain: listing");
                    self.others.insert(next, landed.object);
                    self.blocked = true;
                    self.listing_step(now).await;
                }
            }
            Ok(Polled::Missing) => self.idle().await,
            Ok(Polled::Damaged(damaged)) => {
                let continues = damaged.header.is_some_and(|h| protocol::continues(&h, at));
                if self.settings.damage_policy == DamagePolicy::Fail {
                    self.fail(damaged.error.clone());
                } else if continues {
                    self.schedule.landed(now);
                    self.take_in_damaged(next, *damaged);
                } else {
                    // Where it stands is unknown: a listing may tell.
                    tracing::warn!(prefix = %self.prefix, key = %damaged.key, error = %damaged.error,
                        "the next key holds a damaged object: listing");
                    self.blocked = true;
                    self.listing_step(now).await;
                }
            }
            Err(error) => self.failed(error).await,
        }
    }

    async fn listing_step(&mut self, now: Instant) {
        match self.resolve().await {
            Ok(true) => {
                self.blocked = false;
                self.schedule.landed(now);
            }
            Ok(false) => self.idle().await,
            Err(error) => self.failed(error).await,
        }
    }

    /// Takes in an object a poll found: starts the poll of the key after
    /// it, reads its wanted segments (from the poll's window when it holds
    /// them) and queues their entries.
    async fn take_in_landed(&mut self, landed: Landed) {
        let indexed = landed.object.indexed();
        let next = protocol::next_key(indexed.sequence, indexed.jump());
        if next <= format::MAX_SEQUENCE {
            let (storage, prefix, window) = (
                self.storage.clone(),
                self.prefix.clone(),
                self.window.clone(),
            );
            let task = Task::spawn(async move { poll(&storage, &prefix, next, &window).await });
            self.ahead = Some((next, task));
        }
        self.take_in(indexed, Some(&landed)).await;
    }

    /// Takes in a damaged object that continues the chain (under
    /// `DamagePolicy::Quarantine`): a placeholder without segments, and
    /// holes for the followed regions it may have held.
    fn take_in_damaged(&mut self, sequence: u64, damaged: Damaged) {
        let Some(header) = damaged.header else {
            return;
        };
        tracing::warn!(prefix = %self.prefix, key = %damaged.key, error = %damaged.error,
            "a damaged object on the chain: its entries are holes");
        self.metrics.missed_objects.increment(1);
        let regions: Vec<(RegionId, EntryId, EntryId)> = match &damaged.segments {
            Some(segments) => segments
                .iter()
                .map(|s| (s.region, s.first_id, s.last_id))
                .collect(),
            None => self
                .regions
                .keys()
                .map(|&r| {
                    let all = (
                        format::entry_id(sequence, 1),
                        format::entry_id(sequence, format::MAX_POSITION),
                    );
                    (r, all.0, all.1)
                })
                .collect(),
        };
        for (region, first, last) in regions {
            if self.regions.contains_key(&region) {
                self.hole(region, sequence, first, last);
            }
        }
        let placeholder = IndexedObject {
            sequence,
            epoch: header.epoch,
            link: header.link,
            reclaim_boundary: header.reclaim_boundary,
            size: damaged.size,
            segments: Vec::new(),
            marks: Vec::new(),
            releases: Vec::new(),
        };
        self.enter(placeholder);
    }

    /// Adds `object` to the catalog and the path. False (the follower
    /// failed) when the catalog refuses it.
    fn enter(&mut self, object: IndexedObject) -> bool {
        let summary = summary_of(&object);
        let boundary = object.reclaim_boundary.min(object.sequence);
        if let Err(e) = self.catalog.insert(object) {
            self.fail(Error::recovery(format!(
                "a followed object breaks the catalog: {e}"
            )));
            return false;
        }
        self.metrics.objects.increment(1);
        self.path.insert(summary.sequence, summary);
        while self.path.len() > PATH_LEN {
            self.path.pop_first();
        }
        // Objects below the writer's boundary are collectable: their
        // entries are hidden by the records of the objects kept.
        self.catalog.remove_below(boundary);
        true
    }

    /// Takes `object` (on the chain, after the place) in: catalog, path,
    /// the wanted segments' entries, the marks and releases of followed
    /// regions.
    async fn take_in(&mut self, object: IndexedObject, landed: Option<&Landed>) {
        let sequence = object.sequence;
        let segments = object.segments.clone();
        let releases = object.releases.clone();
        let marked: Vec<RegionId> = object
            .marks
            .iter()
            .filter(|m| !m.is_jump())
            .map(|m| m.region)
            .collect();
        if !self.enter(object) {
            return;
        }
        let mut fetches = Vec::new();
        for index in segments {
            let Some(wanted) = self.regions.get(&index.region) else {
                continue;
            };
            let hidden = self.catalog.hidden_through(index.region).max(wanted.hidden);
            if index.last_id <= wanted.position.max(hidden) {
                continue;
            }
            fetches.push(Fetch {
                region: index.region,
                bytes: landed.and_then(|l| l.slice(index.range())),
                segment: SegmentRef { sequence, index },
            });
        }
        let results = join(self.spawn_fetches(fetches)).await;
        for (region, segment, result) in results {
            match result {
                Ok(Some(entries)) => {
                    for (id, data) in entries {
                        self.queue_entry(Entry { region, id, data });
                    }
                }
                // Corrupted and skipped: `fetch_segment` recorded the hole.
                Ok(None) => self.skipped(region, segment.index.last_id),
                Err(Error::Storage { source }) if source.is_not_found() => {
                    tracing::warn!(prefix = %self.prefix, sequence, region,
                        "an object was collected before the follower read it: a hole");
                    self.metrics.missed_objects.increment(1);
                    let index = segment.index;
                    self.hole(region, sequence, index.first_id, index.last_id);
                }
                Err(error) => {
                    self.fail(error);
                    return;
                }
            }
        }
        for region in marked {
            self.learn_hidden(region);
        }
        for record in releases {
            if self.regions.contains_key(&record.region) {
                self.learn_hidden(record.region);
            }
        }
    }

    /// Starts the reads of the wanted segments of one object, all at once,
    /// each repeated while it fails transiently (a follower does not give
    /// up on a passing failure).
    fn spawn_fetches(&self, fetches: Vec<Fetch>) -> Vec<(RegionId, SegmentRef, Task<Fetched>)> {
        fetches
            .into_iter()
            .map(|fetch| {
                let (region, segment) = (fetch.region, fetch.segment);
                let ctx = self.ctx.clone();
                let (base, cap) = (self.settings.interval, self.settings.max_interval);
                let task = Task::spawn(async move {
                    let mut delay = base;
                    loop {
                        let result = fetch_segment(
                            &ctx,
                            &Direct,
                            fetch.region,
                            &fetch.segment,
                            fetch.bytes.clone(),
                        )
                        .await;
                        match result {
                            Err(e) if e.is_retryable() => {
                                tracing::warn!(error = %e, "a follower's segment read failed; repeating it");
                                tokio::time::sleep(delay).await;
                                delay = (delay * 2).min(cap);
                            }
                            result => return (fetch.region, fetch.segment, result),
                        }
                    }
                });
                (region, segment, task)
            })
            .collect()
    }

    /// Queues `entry` if its region is followed and it lies above the
    /// region's position.
    fn queue_entry(&mut self, entry: Entry) {
        let Some(wanted) = self.regions.get_mut(&entry.region) else {
            return;
        };
        if entry.id <= wanted.position {
            return;
        }
        wanted.position = entry.id;
        self.out.push_back(Item::Entry {
            generation: wanted.generation,
            entry,
        });
    }

    /// What the catalog hides of a followed region now: a raised mark is
    /// told, a release ends the region.
    fn learn_hidden(&mut self, region: RegionId) {
        let hidden = self.catalog.hidden_through(region);
        let released = self.catalog.released().contains_key(&region);
        let Some(wanted) = self.regions.get_mut(&region) else {
            return;
        };
        if hidden > wanted.hidden {
            wanted.hidden = hidden;
            self.out.push_back(Item::Hidden {
                generation: wanted.generation,
                region,
                through: hidden,
            });
        }
        if released {
            let generation = wanted.generation;
            self.regions.remove(&region);
            self.queued.remove(&region);
            tracing::info!(prefix = %self.prefix, region, "a followed region was released");
            self.out.push_back(Item::Released { generation, region });
        }
    }

    /// Records a hole of `region` (ids `first..=last` of the object of
    /// `sequence`), above its position.
    fn hole(&mut self, region: RegionId, sequence: u64, first: EntryId, last: EntryId) {
        let Some(wanted) = self.regions.get(&region) else {
            return;
        };
        let first = first.max(wanted.position.saturating_add(1));
        if first > last {
            return;
        }
        let hole = Hole {
            region,
            key: self.prefix.object_key(sequence),
            sequence,
            first_id: first,
            last_id: last,
        };
        if self.ctx.holes.record(hole) {
            tracing::warn!(prefix = %self.prefix, region, sequence, first, last,
                "a followed region misses entries (a hole)");
        }
        self.skipped(region, last);
    }

    /// The region's ids through `through` will not be yielded.
    fn skipped(&mut self, region: RegionId, through: EntryId) {
        let Some(wanted) = self.regions.get_mut(&region) else {
            return;
        };
        if through > wanted.hidden {
            wanted.hidden = through;
            self.out.push_back(Item::Skipped {
                generation: wanted.generation,
                region,
                through,
            });
        }
    }

    // ---- listings --------------------------------------------------------

    /// Lists the prefix and takes in the chain of the best tip from where
    /// it leaves the path. Whether the place moved.
    async fn resolve(&mut self) -> Result<bool, Error> {
        let listed = self.storage.list(&self.prefix.objects_prefix()).await?;
        let present: BTreeMap<u64, u64> = listed
            .iter()
            .filter_map(|m| Some((self.prefix.parse_object_key(&m.key)?, m.size)))
            .collect();
        let lowest = self.path.keys().next().copied();
        let above = |s: u64| lowest.is_none_or(|l| s > l);
        let unknown: Vec<(u64, u64)> = present
            .iter()
            .filter(|(s, _)| {
                above(**s) && !self.path.contains_key(s) && !self.others.contains_key(s)
            })
            .map(|(s, size)| (*s, *size))
            .collect();
        let (storage, prefix, window) = (&self.storage, &self.prefix, self.window.as_ref());
        let examined: Vec<(u64, Result<Option<Examined>, Error>)> = futures::stream::iter(unknown)
            .map(|(sequence, size)| async move {
                let key = prefix.object_key(sequence);
                (
                    sequence,
                    examine(storage, &key, size, sequence, window).await,
                )
            })
            .buffer_unordered(self.settings.listing_concurrency.max(1))
            .collect()
            .await;
        let mut damaged: BTreeMap<u64, Damaged> = BTreeMap::new();
        for (sequence, result) in examined {
            match result? {
                Some(Examined::Intact(object)) => {
                    self.others.insert(sequence, object);
                }
                Some(Examined::Damaged(d)) => {
                    damaged.insert(sequence, d);
                }
                None => {}
            }
        }
        // Chain selection over the path (its oldest object as a root) and
        // every other object listed above it.
        let mut summaries: BTreeMap<u64, ObjectSummary> = self.path.clone();
        if let Some(root) = summaries.values_mut().next() {
            root.link = None;
        }
        for (sequence, object) in &self.others {
            if above(*sequence) && present.contains_key(sequence) {
                summaries.insert(*sequence, object.summary());
            }
        }
        for (sequence, d) in &damaged {
            if let Some(h) = d.header {
                summaries.insert(
                    *sequence,
                    ObjectSummary {
                        sequence: *sequence,
                        epoch: h.epoch,
                        link: h.link,
                        reclaim_boundary: h.reclaim_boundary,
                    },
                );
            }
        }
        self.trim_others();
        let selection = match chain::select(&summaries) {
            Ok(selection) => selection,
            Err(e) => {
                tracing::debug!(prefix = %self.prefix, error = %e, "no chain to follow yet");
                return Ok(false);
            }
        };
        let Some(tip) = selection.tip else {
            return Ok(false);
        };
        let place = self.place().map(|p| (p.sequence, p.epoch));
        if place == Some((tip.sequence, tip.epoch)) {
            return Ok(false);
        }
        let on_chain: Vec<u64> = selection
            .below_boundary
            .iter()
            .chain(&selection.chain)
            .copied()
            .collect();
        let fork = on_chain
            .iter()
            .rev()
            .find(|s| {
                self.path
                    .get(s)
                    .is_some_and(|p| summaries.get(s).is_some_and(|q| q.epoch == p.epoch))
            })
            .copied();
        let after = match (fork, place) {
            (Some(fork), Some((at, _))) if fork == at => at,
            (Some(fork), Some(_)) => {
                self.rewind(fork);
                fork
            }
            (None, Some((at, _))) => {
                let first = on_chain.iter().copied().find(|s| *s > at);
                if let Some(first) = first {
                    self.gap(at, first);
                }
                at
            }
            (_, None) => 0,
        };
        let new: Vec<u64> = on_chain
            .into_iter()
            .filter(|s| *s > after || place.is_none())
            .collect();
        if new.is_empty() {
            return Ok(false);
        }
        tracing::info!(prefix = %self.prefix, from = after, to = tip.sequence, epoch = tip.epoch,
            "a listing found where the chain goes on");
        for sequence in new {
            if self.ended {
                break;
            }
            if let Some(object) = self.others.remove(&sequence) {
                self.take_in(object.indexed(), None).await;
            } else if let Some(d) = damaged.remove(&sequence) {
                if self.settings.damage_policy == DamagePolicy::Fail {
                    self.fail(d.error.clone());
                    break;
                }
                self.take_in_damaged(sequence, d);
            }
        }
        Ok(true)
    }

    /// Forgets what the place went past on a branch no newer process
    /// continued (a failed opener's start object): back to `fork`.
    fn rewind(&mut self, fork: u64) {
        tracing::warn!(prefix = %self.prefix, fork,
            "the chain the follower took in was left for another: going back to where they part");
        let mut kept = Catalog::new();
        for object in self.catalog.objects().filter(|o| o.sequence <= fork) {
            if kept.insert(object.clone()).is_err() {
                break;
            }
        }
        self.catalog = kept;
        self.path.retain(|s, _| *s <= fork);
        self.ahead = None;
    }

    /// The chain goes on at `first` without reaching the place `at`: the
    /// objects between were collected before the follower read them.
    fn gap(&mut self, at: u64, first: u64) {
        let missing = protocol::next_key(at, self.place().and_then(IndexedObject::jump));
        tracing::warn!(prefix = %self.prefix, from = missing, to = first,
            "objects were collected before the follower read them: holes");
        self.metrics.missed_objects.increment(1);
        let regions: Vec<RegionId> = self.regions.keys().copied().collect();
        let last = format::entry_id(first, 0).saturating_sub(1);
        for region in regions {
            self.hole(region, missing, format::entry_id(missing, 1), last);
        }
    }

    fn trim_others(&mut self) {
        if let Some(&lowest) = self.path.keys().next() {
            self.others.retain(|s, _| *s > lowest);
        }
        while self.others.len() > OTHERS_KEPT {
            self.others.pop_first();
        }
    }
}

/// The results of segment reads, in the order they were started.
async fn join(tasks: Vec<(RegionId, SegmentRef, Task<Fetched>)>) -> Vec<Fetched> {
    let mut results = Vec::with_capacity(tasks.len());
    for (region, segment, task) in tasks {
        match task.await {
            Ok(result) => results.push(result),
            Err(e) => results.push((region, segment, Err(e))),
        }
    }
    results
}

/// The summary chain selection needs of an indexed object.
fn summary_of(object: &IndexedObject) -> ObjectSummary {
    ObjectSummary {
        sequence: object.sequence,
        epoch: object.epoch,
        link: object.link.map(|l| Link {
            sequence: l.sequence,
            epoch: l.epoch,
        }),
        reclaim_boundary: object.reclaim_boundary,
    }
}
