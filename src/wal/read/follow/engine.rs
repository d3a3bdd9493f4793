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
//! - a **backfill** (`backfill`): regions added (and the first ones) read
//!   what the catalog holds for them above their start, through bulk
//!   replay;
//! - a **poll** of the next key after the place (`rules::next_key`): an
//!   object that continues the chain is taken in (`objects`: its tail
//!   known from the poll, its wanted segments read, the poll of the key
//!   after it started at once); nothing there is a wait (`schedule`); anything else (a
//!   settle marker, another process's object) means a newer process
//!   walked the run: a listing follows, and until a listing finds where
//!   the log goes on (the newer process's start object) the follower is
//!   *blocked*: listings spaced by [`Listings`], and between them one read
//!   a wait of the fence the next opener claims (as while the prefix holds
//!   no chain yet);
//! - a **look at the place** (every other request once the log has been
//!   quiet for two caps: `schedule`): a read of the place's first byte. A
//!   place that is gone was collected, and with it any key above it that
//!   the writer's collection emptied before a poll came: the next key is
//!   polled at once, and a listing follows if it holds nothing;
//! - a **listing** (`listing`): the tails of the listed objects
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
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;

use crate::catalog::chain::ObjectSummary;
use crate::catalog::{Catalog, IndexedObject};
use crate::config::DamagePolicy;
use crate::error::Error;
use crate::format::{self, Link};
use crate::metrics::FollowMetrics;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::open::damage::Damage;
use crate::wal::open::tail::{RecoveredObject, TailWindow};
use crate::wal::protocol::rules;
use crate::wal::read::source::{Holes, ReadContext};
use crate::wal::{Entry, Hole};
use crate::{EntryId, RegionId};

use super::lag::LagBook;
use super::poll::{poll, Polled};
use super::schedule::{Listings, Request, Schedule};

mod ahead;
mod backfill;
mod listing;
mod objects;
mod released;

use ahead::ReadAhead;
use backfill::Backfill;

/// Chain objects whose summaries the follower keeps: a listing's chain
/// selection starts from the oldest, so a newer process's start object
/// linking to any of them is found (a failed opener's start object the
/// follower took in, then left for the live writer's, lies within a few).
pub(crate) const PATH_LEN: usize = 64;

/// Tails of objects off the chain (settle markers, orphans) remembered, so
/// that listings do not read them again.
const OTHERS_KEPT: usize = 1024;

/// Fences one look for a newer opener reads at most (each one found, a
/// process that claimed an epoch, moves the look to the next).
const FENCE_LOOKS: usize = 16;

/// What a look at a fence asks for: more than a fence holds, so that a
/// backend without suffix reads answers it in one read.
const FENCE_LOOK_LEN: u64 = 4096;

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
    /// The entries of the objects through this key are all handed out
    /// (the lag's measure).
    Through(u64),
    /// Every backfill ended, the last after the `add` of this generation
    /// (the hold's floor lifts, `hold.rs`).
    BackfillsEnded(u64),
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

/// A state no poll of the next key can end: the next key holds an object
/// that does not continue the chain (a newer process's settle marker whose
/// start object has not landed: an open in progress, or one that died
/// between the two), or the prefix holds no chain yet (or no key is left).
/// Listings find where the log goes on, spaced by [`Listings`]; between
/// them each wait looks at the fence the next opener claims (epochs are
/// dense, and every opener creates its epoch's fence before it writes
/// anything: rfcs/0006), one read that misses while nobody opens.
#[derive(Debug)]
struct Blocked {
    listings: Listings,
    /// The epoch whose fence the next opener claims.
    watch: u64,
}

/// A place that a look at it found gone: the writer's collection deleted
/// it, so the log moved on (see `Engine::look_at_place`).
#[derive(Debug, Clone, Copy)]
struct Gone {
    /// The place's sequence.
    place: u64,
    /// Whether a poll of the next key has missed since, and the follower
    /// listed: it lists once per place.
    listed: bool,
}

/// Settings of a follower, from its reader's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) interval: Duration,
    pub(crate) max_interval: Duration,
    pub(crate) damage_policy: DamagePolicy,
    pub(crate) listing_concurrency: usize,
    /// How long transient failures may last, without a step that
    /// succeeds, before the follower ends with the last one (`None`:
    /// never): one `request_timeout`.
    pub(crate) give_up: Option<Duration>,
}

/// The engine.
pub(crate) struct Engine {
    storage: Storage,
    prefix: Prefix,
    ctx: ReadContext,
    settings: Settings,
    damage: Arc<Damage>,
    /// The holes of objects collected before the follower read them (the
    /// others go to `ctx.holes`).
    collected: Arc<Holes>,
    metrics: FollowMetrics,
    lag: Arc<LagBook>,
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
    /// The polls of the keys after the place, started before they are
    /// needed: one when the place was taken in, more while the follower
    /// is behind (`ahead.rs`).
    ahead: ReadAhead,
    /// No poll of the next key can tell where the log goes on: list (on
    /// [`Listings`]' schedule) until a listing moves the place.
    blocked: Option<Blocked>,
    /// The place a look found gone (`look_at_place`): it is not looked at
    /// again, and the next poll that misses lists once.
    gone: Option<Gone>,
    /// The last key after the place that a filler settled (rfcs/0006,
    /// rule 8): the run goes on after it, as the writer's does.
    filler: Option<u64>,
    catch_up: Option<u64>,
    out: VecDeque<Item>,
    ended: bool,
    /// When the current streak of failed steps began (its first failure).
    failing_since: Option<Instant>,
    /// Whether the step running now failed.
    step_failed: bool,
    /// A hole may have swallowed a release record: list the release
    /// markers at the next step (`released.rs`).
    relist_released: bool,
    /// A damaged object on the chain whose release records could not be
    /// read: the markers are listed again once an object's boundary passes
    /// it (`take_in_damaged`).
    unknown_releases_at: Option<u64>,
    /// The generation of the latest `add` taken in.
    latest_generation: u64,
}

/// What a new engine starts from.
pub(crate) struct Start {
    pub(crate) storage: Storage,
    pub(crate) prefix: Prefix,
    pub(crate) ctx: ReadContext,
    pub(crate) settings: Settings,
    pub(crate) damage: Arc<Damage>,
    pub(crate) collected: Arc<Holes>,
    pub(crate) metrics: FollowMetrics,
    pub(crate) lag: Arc<LagBook>,
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
        if let Some(tip) = start.catalog.tip() {
            start.lag.yielded_through(tip.sequence);
        }
        let ahead = ReadAhead::new(
            start.ctx.concurrency,
            start.ctx.buffer_bytes,
            super::poll::POLL_WINDOW,
        );
        Engine {
            storage: start.storage,
            prefix: start.prefix,
            ctx: start.ctx,
            settings: start.settings,
            damage: start.damage,
            collected: start.collected,
            metrics: start.metrics,
            lag: start.lag,
            window: Arc::new(TailWindow::default()),
            catalog: start.catalog,
            path,
            others: BTreeMap::new(),
            regions,
            control: start.control,
            schedule,
            backfill: None,
            queued,
            ahead,
            blocked: None,
            gone: None,
            filler: None,
            catch_up: None,
            out: VecDeque::new(),
            ended: false,
            failing_since: None,
            step_failed: false,
            relist_released: false,
            unknown_releases_at: None,
            latest_generation: 0,
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
        self.step_failed = false;
        let reached = self.reached();
        if self.backfill.is_none() && !self.queued.is_empty() {
            self.start_backfill();
        }
        if self.relist_released && self.backfill.is_none() {
            self.learn_released().await;
        } else if self.backfill.is_some() {
            self.backfill_step().await;
        } else {
            self.tail_step().await;
        }
        if !self.step_failed {
            self.failing_since = None;
        }
        // After the step's entries: they are handed out when it is.
        let now_reached = self.reached();
        if now_reached != reached {
            if let Some(key) = now_reached {
                self.out.push_back(Item::Through(key));
            }
        }
        self.lag.publish();
    }

    /// The last key of the run the follower took in: the place, or a
    /// filler after it.
    fn reached(&self) -> Option<u64> {
        self.filler.or(self.place().map(|p| p.sequence))
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
                self.latest_generation = self.latest_generation.max(generation);
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
                self.ahead.clear();
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
        // Biased: a message that is due at the same time as the timer is
        // handled now, the same way every run.
        tokio::select! {
            biased;
            message = self.control.recv_async() => match message {
                Ok(message) => self.on_control(message),
                Err(_) => self.ended = true,
            },
            () = tokio::time::sleep(delay) => {}
        }
    }

    /// Nothing new was found: answer a catch-up, else wait.
    async fn idle(&mut self) {
        if let Some(token) = self.catch_up.take() {
            self.out.push_back(Item::CaughtUp(token));
            return;
        }
        let now = Instant::now();
        let mut delay = self.schedule.delay(now);
        if let Some(blocked) = &self.blocked {
            delay = delay.min(blocked.listings.until_due(now));
        }
        self.wait(delay).await;
    }

    /// A request failed: a transient failure is waited out and the step
    /// repeated, until failures have lasted `give_up` with no step
    /// succeeding (a store that stopped answering: the caller is told);
    /// anything else ends the follower.
    async fn failed(&mut self, error: Error) {
        self.step_failed = true;
        let now = Instant::now();
        let since = *self.failing_since.get_or_insert(now);
        if let Some(limit) = self.settings.give_up.filter(|l| now - since >= *l) {
            tracing::error!(prefix = %self.prefix, %error, ?limit,
                "a follower's requests kept failing for request_timeout; it stops");
            let reason = format!(
                "{error}; the follower's requests kept failing for {:?} (request_timeout), so it \
                 stopped: follow again from its positions()",
                now - since
            );
            return self.fail(Error::Storage {
                source: crate::storage::StorageError::transient(reason),
            });
        }
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

    // ---- the tail --------------------------------------------------------

    async fn tail_step(&mut self) {
        let now = Instant::now();
        if self.blocked.is_some() {
            return self.blocked_step(now).await;
        }
        let Some(place) = self.place() else {
            // No chain yet: only a listing can find one.
            self.block(now);
            return self.listing_step(now).await;
        };
        // The run's last key: the place, or a filler after it.
        let (last, jump) = match self.filler {
            Some(key) => (key, None),
            None => (place.sequence, place.jump()),
        };
        let next = rules::next_key(last, jump);
        let at = (last, place.epoch);
        let place_sequence = place.sequence;
        if next > format::MAX_SEQUENCE {
            self.block(now);
            return self.listing_step(now).await;
        }
        if self.catch_up.is_none() {
            match self.schedule.request(now) {
                Request::List => return self.listing_step(now).await,
                Request::Place if self.gone.is_none_or(|g| g.place != place_sequence) => {
                    return self.look_at_place(place_sequence).await;
                }
                Request::Place | Request::Poll => {}
            }
        }
        let (polled, early) = match self.ahead.take(next) {
            Some(task) => (task.await.and_then(|polled| polled), true),
            None => (
                poll(&self.storage, &self.prefix, next, &self.window).await,
                false,
            ),
        };
        match polled {
            Ok(Polled::Landed(landed)) => {
                self.lag.saw(next);
                let header = landed.object.tail.header();
                let found = rules::at_key(header, landed.object.is_empty(), at);
                if found == rules::AtKey::Continues {
                    if early {
                        self.ahead.behind();
                    }
                    self.schedule.landed(now);
                    self.take_in_landed(*landed).await;
                } else if found == rules::AtKey::Filler {
                    // Stepped over as the writer steps over it.
                    tracing::debug!(prefix = %self.prefix, key = next, "stepping over a filler");
                    self.filler = Some(next);
                    self.schedule.landed(now);
                    self.read_ahead(next.saturating_add(1));
                } else {
                    // A newer process walked the run (its settle marker),
                    // or another process's object: list.
                    tracing::info!(prefix = %self.prefix, key = next,
                        "the next key holds an object that does not continue the chain: listing");
                    self.others.insert(next, landed.object);
                    self.block(now);
                    self.listing_step(now).await;
                }
            }
            // A key that holds nothing is the end of the log for a
            // catch-up only if nothing above it is listed: the writer's
            // collection may have emptied it (issue 30 item 1).
            Ok(Polled::Missing) if self.catch_up.is_some() => {
                self.ahead.caught_up();
                self.confirm_end(now).await;
            }
            Ok(Polled::Missing) => {
                self.ahead.caught_up();
                let unlisted = self
                    .gone
                    .as_ref()
                    .is_some_and(|gone| gone.place == place_sequence && !gone.listed);
                if unlisted {
                    // The place and the key after it are gone: the log
                    // went on past keys collection emptied. Listed once
                    // the listing answers: a failed one is repeated (the
                    // model test, seed 6580169118244873080, found a
                    // follower that never listed again and stalled).
                    tracing::info!(prefix = %self.prefix, key = next,
                        "the place and the next key were collected: listing");
                    if self.confirm_end(now).await {
                        if let Some(gone) = &mut self.gone {
                            gone.listed = true;
                        }
                    }
                } else {
                    self.idle().await;
                }
            }
            Ok(Polled::Damaged(damaged)) => {
                let continues = damaged.header.is_some_and(|h| rules::continues(&h, at));
                if self.settings.damage_policy == DamagePolicy::Fail {
                    self.fail(damaged.error.clone());
                } else if continues {
                    self.schedule.landed(now);
                    self.take_in_damaged(next, *damaged);
                } else {
                    // Where it stands is unknown: a listing may tell.
                    tracing::warn!(prefix = %self.prefix, key = %damaged.key, error = %damaged.error,
                        "the next key holds a damaged object: listing");
                    self.block(now);
                    self.listing_step(now).await;
                }
            }
            Err(error) => self.failed(error).await,
        }
    }

    async fn listing_step(&mut self, now: Instant) {
        match self.resolve().await {
            Ok(true) => {
                self.blocked = None;
                self.schedule.landed(now);
            }
            Ok(false) => {
                let newest = self.newest_epoch();
                if let Some(blocked) = &mut self.blocked {
                    blocked.watch = blocked.watch.max(newest + 1);
                }
                self.idle().await;
            }
            Err(error) => {
                if let Some(blocked) = &mut self.blocked {
                    blocked.listings.failed(now);
                }
                self.failed(error).await;
            }
        }
    }

    /// Looks whether the place (the object of `sequence`) is still there:
    /// one read of its first byte. Collection deletes every key below one
    /// boundary, and the place lies below the next key: if the writer's
    /// collection emptied the next key before a poll came, it deleted the
    /// place too (or is deleting it). A place that is gone means the log
    /// moved on: the next key is polled at once, and if it holds nothing
    /// either, a listing finds where the log goes on (the chain beyond
    /// the gap, a hole of what was collected). The poll comes first
    /// because the writer deletes the place as soon as its next object
    /// carries a boundary above it, which a poll finds for one GET. One
    /// that is there says nothing was collected above it.
    async fn look_at_place(&mut self, sequence: u64) {
        let key = self.prefix.object_key(sequence);
        match self.storage.read(&key, 0..1).await {
            Ok(_) => self.idle().await,
            Err(e) if e.is_not_found() => {
                tracing::debug!(prefix = %self.prefix, sequence,
                    "the follower's place was collected: polling the next key at once");
                self.gone = Some(Gone {
                    place: sequence,
                    listed: false,
                });
            }
            Err(e) => self.failed(e.into()).await,
        }
    }

    /// A poll of the next key missed where only a listing can tell
    /// whether the log ends there: a catch-up's, or one after a look found
    /// the place collected. A key the writer created and its collection
    /// deleted looks like one where nothing landed yet, so a catch-up ends
    /// only once a listing finds nothing beyond the place. If the chain goes on (past collected keys: holes of what
    /// they held, all obsolete for the writer), it is taken in and the
    /// catch-up polls on.
    /// Whether the listing answered.
    async fn confirm_end(&mut self, now: Instant) -> bool {
        match self.resolve().await {
            Ok(true) => self.schedule.landed(now),
            Ok(false) => self.idle().await,
            Err(error) => {
                self.failed(error).await;
                return false;
            }
        }
        true
    }

    /// Enters a state no poll can end, at `now`, with a listing made at
    /// once by the caller.
    fn block(&mut self, now: Instant) {
        if self.blocked.is_none() {
            self.blocked = Some(Blocked {
                listings: Listings::new(self.settings.interval, now),
                watch: self.newest_epoch() + 1,
            });
        }
    }

    /// A step while no poll can tell where the log goes on: a listing when
    /// one is due (or a catch-up asks), else a look for a newer opener.
    async fn blocked_step(&mut self, now: Instant) {
        let due = self.catch_up.is_some()
            || self
                .blocked
                .as_mut()
                .is_some_and(|blocked| blocked.listings.due(now));
        if due {
            return self.listing_step(now).await;
        }
        match self.look_for_opener(now).await {
            Ok(()) => self.idle().await,
            Err(error) => self.failed(error).await,
        }
    }

    /// Reads the fence the next opener claims: one read that misses while
    /// nobody opens the prefix. A fence there (a process began opening it)
    /// starts the listings over, and the look moves to the next epoch.
    async fn look_for_opener(&mut self, now: Instant) -> Result<(), Error> {
        let Some(blocked) = self.blocked.as_mut() else {
            return Ok(());
        };
        let mut found = false;
        for _ in 0..FENCE_LOOKS {
            let key = self.prefix.fence_key(blocked.watch);
            match self.storage.read_suffix(&key, FENCE_LOOK_LEN).await {
                Err(e) if e.is_not_found() => break,
                Err(e) if e.is_transient() => return Err(e.into()),
                // There (whatever it holds: only its presence counts).
                Ok(_) | Err(_) => {
                    found = true;
                    blocked.watch += 1;
                }
            }
        }
        if found {
            tracing::info!(prefix = %self.prefix, epoch = blocked.watch - 1,
                "a newer process is opening the prefix: listing again soon");
            blocked.listings.restart(now);
        }
        Ok(())
    }

    /// The newest epoch of any object the follower knows.
    fn newest_epoch(&self) -> u64 {
        let on_path = self.path.values().map(|s| s.epoch);
        let others = self.others.values().map(|o| o.tail.header().epoch);
        on_path.chain(others).max().unwrap_or(0)
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
        let released = self.catalog.is_released(region);
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
    /// `sequence`), above its position: of what the writer's collection
    /// deleted before the follower read it (`Cause::Collected`), or of
    /// what could not be read.
    fn hole(
        &mut self,
        cause: Cause,
        region: RegionId,
        sequence: u64,
        first: EntryId,
        last: EntryId,
    ) {
        let Some(position) = self.regions.get(&region).map(|w| w.position) else {
            return;
        };
        self.hole_above(cause, region, sequence, (first, last), position);
    }

    /// Records a hole of `region` (ids `first..=last` of the object of
    /// `sequence`), above `above`: the region's position when the read
    /// that skipped them began (a backfill ends after it queued what lies
    /// above them).
    fn hole_above(
        &mut self,
        cause: Cause,
        region: RegionId,
        sequence: u64,
        (first, last): (EntryId, EntryId),
        above: EntryId,
    ) {
        if !self.regions.contains_key(&region) {
            return;
        }
        let first = first.max(above.saturating_add(1));
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
        let book = match cause {
            Cause::Collected => &self.collected,
            Cause::Unreadable => &self.ctx.holes,
        };
        if book.record(hole) {
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
}

/// Why a followed region misses entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// The writer's collection deleted them before the follower read
    /// them: they were obsolete for its engine.
    Collected,
    /// They could not be read (a corrupted segment, a damaged object).
    Unreadable,
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
        next_key: crate::wal::protocol::rules::next_key(object.sequence, object.jump()),
        empty: object.is_empty(),
    }
}
