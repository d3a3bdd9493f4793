//! The log store: the public handles and the three paths behind them.
//!
//! A [`Wal`] is a cheap handle to one actor task that owns all mutable
//! state. [`WalReader`] recovers the same catalog without writing, for
//! tools and for replaying another node's log. The folders show the paths:
//!
//! - `write/`: an append, from admission through the actor, the open batch
//!   and the sealing policy to its acknowledgement; collection, releases
//!   and flush marks;
//! - `open/`: recovery, quarantine and what they leave out of replay;
//! - `read/`: reads, bulk replay and the follower, on one segment source;
//! - `handoff/`: a region moved from another node's log, by copy or by
//!   following;
//! - `protocol/`: the floor under write and open: the fencing rules, one
//!   create, the epoch claim, retries.
//!
//! A path calls the floors below it (write and open call protocol; read
//! calls open; handoff calls read and the handle), never one above.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::Stream;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use crate::catalog::{Catalog, RegionInfo};
use crate::config::Config;
use crate::error::Error;
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::Storage;
use crate::{EntryId, RegionId};

#[doc(hidden)]
pub mod bench_support;
pub(crate) mod handoff;
pub(crate) mod holds;
pub(crate) mod open;
pub(crate) mod protocol;
pub(crate) mod read;
mod runtime;
pub(crate) mod write;

/// What recovery left out of replay (used by the CLI's `health` and
/// `repair`, and by tests).
#[doc(hidden)]
pub use open::damage;

pub use handoff::takeover::{Takeover, TakeoverProgress};
pub use handoff::Imported;
pub use holds::{Hold, HoldInfo};
use open::damage::Damage;
use open::{open_mode, recovery};
use protocol::{fence, retry, rules};
pub use read::follow::{CatchUp, Follower, Lag};
use read::source::ReplayPage;
use read::source::{Holes, ReadContext, SegmentPage, SegmentSource};
pub use read::wal_reader::WalReader;
use read::{reader, traced};
use write::actor;
pub use write::actor::pinning::FlushRequest;
use write::actor::{Actor, Command, Start};

/// One entry of a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The region it belongs to.
    pub region: RegionId,
    /// Its id.
    pub id: EntryId,
    /// Its payload.
    pub data: Bytes,
}

/// Entries a region misses: a corrupted segment a read skipped under
/// `CorruptionPolicy::Skip`, or what a damaged object that recovery left
/// out of replay held (see [`crate::DamagePolicy`] and [`damage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    /// The region whose entries are missing.
    pub region: RegionId,
    /// The key of the object holding the segment.
    pub key: String,
    /// That object's sequence.
    pub sequence: u64,
    /// The first id of the skipped range.
    pub first_id: EntryId,
    /// The last id of the skipped range.
    pub last_id: EntryId,
}

/// State the actor publishes for the synchronous calls of the handle.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Per region, the largest acknowledged id.
    latest: Mutex<crate::catalog::region_map::RegionMap<EntryId>>,
    holes: Arc<Holes>,
    /// What recovery left out of replay (its holes join the reads' holes).
    damage: Arc<Damage>,
    stop_result: OnceLock<Result<(), Error>>,
    /// Entries admitted and not yet durable, failed or counted lost.
    unsettled: std::sync::atomic::AtomicU64,
    /// Set when the actor died of a bug (a panic): why.
    died: OnceLock<Arc<str>>,
    /// Set when the runtime shut down under the actor.
    runtime_gone: runtime::RuntimeGone,
}

impl Shared {
    pub(crate) fn acknowledge(&self, ids: &[(RegionId, EntryId)]) {
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        for (region, id) in ids {
            let slot = latest.entry(*region).or_insert(0);
            *slot = (*slot).max(*id);
        }
    }

    fn latest(&self, region: RegionId) -> EntryId {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest.get(&region).copied().unwrap_or(0)
    }

    pub(crate) fn set_stop_result(&self, result: Result<(), Error>) {
        let _ = self.stop_result.set(result);
    }

    pub(crate) fn set_unsettled(&self, entries: u64) {
        self.unsettled
            .store(entries, std::sync::atomic::Ordering::Relaxed);
    }

    /// The error every call gets once the actor died, if it did.
    fn died(&self) -> Option<Error> {
        self.died.get().map(|why| Error::Poisoned {
            reason: format!(
                "the store died: its background task panicked ({why}); nothing more is logged \
                 and what it had not made durable is lost"
            )
            .into(),
        })
    }

    /// What a stop of a store whose actor died returns.
    fn died_stop(&self) -> Option<Error> {
        let why = self.died.get()?;
        Some(Error::Lost {
            entries: self.unsettled.load(std::sync::atomic::Ordering::Relaxed),
            bytes: 0,
            releases: 0,
            marks: 0,
            reason: format!(
                "the store died (its background task panicked: {why}); these entries were \
                 admitted and may not be durable"
            )
            .into(),
        })
    }

    /// A request went unanswered: the store died, its runtime shut down,
    /// or it is stopped.
    fn unanswered(&self) -> Error {
        let stopped = self.stop_result.get().is_some();
        self.died().unwrap_or_else(|| {
            if self.runtime_gone.is_set() && !stopped {
                runtime::RuntimeGone::error()
            } else {
                Error::stopped()
            }
        })
    }
}

/// A recovered state to start an actor on.
pub(crate) struct Launch {
    pub(crate) storage: Storage,
    pub(crate) prefix: Prefix,
    pub(crate) config: Config,
    pub(crate) epoch: u64,
    pub(crate) catalog: Catalog,
    pub(crate) next_sequence: u64,
    /// The settle markers known: collection never deletes them.
    pub(crate) markers: std::collections::BTreeSet<u64>,
    /// What recovery left out of replay.
    pub(crate) damage: Arc<Damage>,
}

struct Handle {
    tx: flume::Sender<Command>,
    shared: Arc<Shared>,
    read: ReadContext,
    /// `max_batch_bytes`: how much one append of an import carries.
    batch_bytes: u64,
}

/// A write-ahead log on object storage. Cheap to clone; every clone talks
/// to the same background actor. Dropping the last clone ends the actor
/// without creating anything more (a crash, as far as the log is concerned);
/// call [`Wal::stop`] for an orderly stop.
#[derive(Clone)]
pub struct Wal {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("prefix", &self.handle.read.prefix.as_str())
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// Opens the log under `prefix`: recovers its history from the objects'
    /// tails, claims the prefix with a start object of a new epoch, and
    /// starts the actor. A prefix that holds no log gets a new one, or,
    /// with [`Config::create_if_missing`] `false`, the open fails with
    /// [`Error::NoLog`] naming the prefixes that hold one, before anything
    /// is written.
    ///
    /// It must be called inside a tokio runtime (outside one it fails at
    /// once, writing nothing; [`crate::blocking::Wal`] brings its own), and
    /// the store lives on that runtime: once the runtime shuts down, every
    /// call fails with an [`Error::Stopped`] that says so.
    ///
    /// Before it creates anything it asks the backend to remove what
    /// crashed writers left under the prefix
    /// ([`ObjectStorage::remove_leftovers`](crate::ObjectStorage::remove_leftovers):
    /// a local directory's temporary files of dead processes); a failure to
    /// do so is logged, not fatal. [`WalReader::open`] never does.
    ///
    /// Right after it claims its epoch it proves that the store honours
    /// create-if-absent (its fence, created again with other bytes, must
    /// answer "already exists"); a store that answers "created" fails the
    /// open with a permanent [`Error::Storage`] naming that behaviour,
    /// before anything is written under `objects/` (README, "Stores").
    ///
    /// Every storage request it makes has the deadline
    /// [`Config::request_timeout`] (30 s by default), the checks before the
    /// claim included: on a store that stops answering it fails with a
    /// retryable error instead of waiting forever.
    pub async fn open(storage: Storage, prefix: &str, config: Config) -> Result<Wal, Error> {
        runtime::require("Wal::open")?;
        config.validate()?;
        let prefix = Prefix::new(prefix)?;
        let span = tracing::info_span!("open", prefix = %prefix);
        // Every request of the open and of the store's life, the checks
        // before the claim included, has the deadline.
        let storage = storage.with_request_timeout(config.request_timeout);
        if !config.create_if_missing {
            open_mode::require_log(&storage, &prefix)
                .instrument(span.clone())
                .await?;
        }
        remove_leftovers(&storage, &prefix)
            .instrument(span.clone())
            .await;
        Self::open_in(storage, prefix, config)
            .instrument(span)
            .await
    }

    async fn open_in(storage: Storage, prefix: Prefix, config: Config) -> Result<Wal, Error> {
        let started = Instant::now();
        let retry = retry::RetryPolicy::new(&config, 0);
        // Claim the epoch before listing anything (rfcs/0006, "Open").
        let mut epoch = fence::claim_epoch(&storage, &prefix, 0, &retry).await?;
        // Recover and walk; again when the walk stopped at a key the
        // older writer had already passed and collected.
        let mut attempts = 0;
        let (recovered, mut catalog, first) = loop {
            let mut recovered =
                Self::recover_below(&storage, &prefix, &config, &retry, &mut epoch).await?;
            let listed = recovered.selection.max_sequence;
            let mut catalog = std::mem::take(&mut recovered.catalog);
            recovery::check_no_newer_damage_under_the_tip(&catalog, &recovered, &prefix)?;
            // Walk the tip's run to the first key an older writer can
            // never hold, then start above everything it can still create
            // (K4). An empty listing needs no walk: no older writer
            // completed its open (its start object would be listed), so
            // none writes data.
            let walked = if recovered.present.is_empty() {
                None
            } else {
                let walked = recovery::walk(
                    &storage,
                    &prefix,
                    epoch,
                    &mut catalog,
                    &mut recovered,
                    &config,
                )
                .await?;
                Some(walked)
            };
            attempts += 1;
            // The keys after objects moved aside above the block are
            // blocked too: their writers may still run (rfcs/0006).
            let blocked = walked.map_or(0, |w| w.blocked);
            let moved = recovery::block_past_moved_aside(
                &storage,
                &prefix,
                epoch,
                blocked,
                &mut recovered,
                &config,
            )
            .await?;
            let went_past = match (moved, walked) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(_), Some(_)) => {
                    recovery::run_went_past(
                        &storage,
                        &prefix,
                        epoch,
                        blocked,
                        &recovered.damaged_headers,
                        config.recovery_concurrency,
                    )
                    .await?
                }
            };
            if !went_past {
                let moved_max = moved.unwrap_or(0);
                let first = match walked {
                    // Nothing anywhere: no older writer completed its open.
                    // With objects moved aside (a placeholder tip, keys
                    // listed under quarantine/) the start goes above them,
                    // as after a walk (the fifth attack on issue 32: a
                    // start at the epoch's key linked to a higher tip).
                    None if moved_max == 0 && catalog.tip().is_none() => epoch,
                    // Above this walk's own markers too (a round may land
                    // some past the key that blocks), and above everything
                    // a writer blocked after a moved-aside object can still
                    // create.
                    _ => rules::start_sequence(blocked.max(moved_max), listed, epoch)
                        .max(walked.map_or(0, |w| w.settled_max) + 1),
                };
                break (recovered, catalog, first);
            }
            if attempts >= recovery::LISTINGS {
                return Err(Error::Storage {
                    source: crate::storage::StorageError::transient(format!(
                        "an older writer under {prefix} kept collecting past the keys {attempts} \
                         walks stopped at; repeat the open once it is quiet"
                    )),
                });
            }
        };
        // Every release the chain records is made permanent before the
        // start object's boundary may free its object (rfcs/0005, M3).
        open::released::make_permanent(&storage, &prefix, &mut catalog, &config).await?;
        let start =
            recovery::write_start_object(&storage, &prefix, epoch, first, &mut catalog).await?;
        // A newer process that claimed before the start object landed may
        // not have listed it: this open fails, so nothing of ours lies in its
        // data. Past this read, every newer process lists our start object.
        fence::check_not_fenced(&storage, &prefix, epoch).await?;
        let metrics = StoreMetrics::new(prefix.as_str());
        metrics.recovery.record(started.elapsed().as_secs_f64());
        tracing::info!(
            epoch,
            objects = catalog.len(),
            orphans = recovered.selection.orphans.len(),
            start,
            "recovered"
        );
        Ok(Wal::spawn(Launch {
            storage,
            prefix,
            config,
            epoch,
            catalog,
            next_sequence: rules::next_key(start, None),
            markers: recovered.markers,
            damage: Arc::new(recovered.damage),
        }))
    }

    /// Recovers with an epoch above every object listed: an object of our
    /// epoch or above is a newer process's (it claimed after us), or was
    /// written without fences (by a release before fences, or a foreign
    /// writer), and the open claims above it. After a walk that stopped at
    /// a collected key, this process's own settle marker is one such
    /// object: claiming again is safe and costs one fence.
    async fn recover_below(
        storage: &Storage,
        prefix: &Prefix,
        config: &Config,
        retry: &retry::RetryPolicy,
        epoch: &mut u64,
    ) -> Result<recovery::Recovered, Error> {
        loop {
            let recovered = recovery::recover_with(storage, prefix, config).await?;
            if recovered.selection.max_epoch < *epoch {
                return Ok(recovered);
            }
            fence::check_not_fenced(storage, prefix, *epoch).await?;
            *epoch =
                fence::claim_epoch(storage, prefix, recovered.selection.max_epoch, retry).await?;
        }
    }

    /// Starts the actor on a recovered state.
    pub(crate) fn spawn(launch: Launch) -> Wal {
        let metrics = StoreMetrics::new(launch.prefix.as_str());
        metrics.indexed_objects.set(launch.catalog.len() as f64);
        metrics.indexed_bytes.set(launch.catalog.bytes() as f64);
        launch.damage.set_gauges(&metrics);
        let shared = Arc::new(Shared {
            damage: launch.damage.clone(),
            ..Shared::default()
        });
        let acked: Vec<_> = launch
            .catalog
            .regions()
            .into_iter()
            .map(|r| (r, launch.catalog.last_id(r)))
            .collect();
        shared.acknowledge(&acked);
        let read = ReadContext {
            storage: launch.storage.clone(),
            prefix: launch.prefix.clone(),
            policy: launch.config.on_corrupted_segment,
            holes: shared.holes.clone(),
            metrics: metrics.clone(),
            concurrency: launch.config.replay_concurrency,
            buffer_bytes: launch.config.replay_buffer_bytes,
        };
        let batch_bytes = launch.config.max_batch_bytes;
        let (tx, rx) = flume::unbounded();
        let prefix = launch.prefix.clone();
        let actor = Actor::new(Start {
            launch,
            shared: shared.clone(),
            metrics,
        });
        let watch = shared.clone();
        let queue = rx.clone();
        let actor_task = async move {
            use futures::FutureExt;
            // A panic is a bug; it must never read as a clean stop.
            if let Err(panic) = std::panic::AssertUnwindSafe(actor.run(rx))
                .catch_unwind()
                .await
            {
                let why: Arc<str> = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned())
                    .into();
                tracing::error!(prefix = %prefix, %why, "the store's actor panicked");
                let _ = watch.died.set(why);
            }
        };
        tokio::spawn(runtime::Watched::new(actor_task, shared.clone(), queue));
        Wal {
            handle: Arc::new(Handle {
                tx,
                shared,
                read,
                batch_bytes,
            }),
        }
    }

    async fn call<T>(&self, command: impl FnOnce(actor::Reply<T>) -> Command) -> Result<T, Error> {
        ask(&self.handle.tx, &self.handle.shared, command).await
    }

    /// Appends entries (of any regions) and returns their ids in input
    /// order. In durable mode it returns once they are durable and indexed;
    /// in enqueued mode once they are admitted.
    pub async fn append(&self, entries: Vec<(RegionId, Bytes)>) -> Result<Vec<EntryId>, Error> {
        let arrived = Instant::now();
        let span = tracing::debug_span!("append", entries = entries.len());
        self.call(|reply| Command::Append {
            entries,
            arrived,
            reply,
        })
        .instrument(span)
        .await
    }

    /// The entries of `region` with id >= `from`, in id order, hiding those
    /// at or below the region's watermark. It shows what this store has
    /// indexed: an enqueued append's entries once their object's create
    /// has been answered (a follower elsewhere may see the object as soon
    /// as it lands, a moment sooner). Up to `replay_concurrency`
    /// segment reads run ahead of the consumer (spawned tasks: poll the
    /// stream inside a tokio runtime), holding at most `replay_buffer_bytes`.
    pub fn read(
        &self,
        region: RegionId,
        from: EntryId,
    ) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
        let source = Arc::new(ActorSource {
            tx: self.handle.tx.clone(),
            shared: self.handle.shared.clone(),
        });
        let entries = reader::read(source, self.handle.read.clone(), region, from);
        let policy = self.handle.read.policy;
        let entries = self
            .handle
            .shared
            .damage
            .guard(policy, region, from, entries);
        traced::Traced::new(tracing::debug_span!("read", region, from), entries)
    }

    /// Marks the entries of `region` up to `id` obsolete (flushed by the
    /// engine): they are hidden from reads at once and their objects become
    /// collectable. A watermark never moves down.
    ///
    /// The mark is durable with the next object this log writes (for any
    /// reason; `stop` writes one for marks still waiting), without a request
    /// of its own: after a restart reads hide through it and collection
    /// uses it without the engine repeating it. A crash before that object
    /// forgets the marks handed in since the last one: those entries read
    /// again (except where their objects were already collected) until the
    /// engine hands the mark in again, as it should on every open. In
    /// enqueued mode a mark is clamped to the region's durable id. An `id`
    /// above every id handed out (an import's floor) also moves this log's
    /// ids above it: nothing admitted after this call returns gets an id at
    /// or below `id` (rfcs/0005, "Flush marks").
    pub async fn obsolete(&self, region: RegionId, id: EntryId) -> Result<(), Error> {
        self.call(|reply| Command::Obsolete { region, id, reply })
            .await
    }

    /// Drops `region` durably: records that it is released through the
    /// largest id ever handed out for it, in an object sealed at once, then
    /// creates its permanent marker (`<prefix>/released/<region>-<through>`,
    /// an empty object collection never deletes), and returns once both
    /// are durable (in both ack modes). From then on, for the life of the
    /// log, the region reads as empty, appends to it are refused with
    /// [`Error::RegionReleased`], [`regions`](Self::regions) reports it
    /// released, every follower ends it with `Err(RegionReleased)`, and it
    /// never pins the collection of objects: also after restarts, after
    /// collection deleted the record's object, and for followers that start
    /// later. A region id is therefore never reused. A repeated release is
    /// harmless (it creates no second marker).
    ///
    /// A marker that cannot be made answers a retryable [`Error::Storage`]
    /// whose message says the record is durable: the release holds (the
    /// marker is tried again, and the next open makes it), and repeating
    /// the call is harmless. While the store is failing, the release
    /// answers [`Error::Failing`] at once and its record is kept for the
    /// next object (rfcs/0005).
    pub async fn release_region(&self, region: RegionId) -> Result<(), Error> {
        match self.call(|reply| Command::Release { region, reply }).await {
            Err(Error::Stopped { detail: None }) => Err(Error::Stopped {
                detail: Some(
                    format!("a stopped store keeps no release; region {region} was not released")
                        .into(),
                ),
            }),
            other => other,
        }
    }

    /// The largest acknowledged entry id of `region`; 0 when it has none.
    pub fn latest_entry_id(&self, region: RegionId) -> EntryId {
        self.handle.shared.latest(region)
    }

    /// Returns once every entry of `region` up to `id` is durable and
    /// indexed (at once for ids that already are, also when collection has
    /// deleted their object since). An id that was never handed out is an
    /// `InvalidArgument`. Once the store has been failing (a create failed
    /// and is being repeated) for `max_unpersisted_age`, an entry not yet
    /// durable answers the retryable [`Error::Failing`], also a barrier that
    /// was waiting: call again.
    pub async fn wait_durable(&self, region: RegionId, id: EntryId) -> Result<(), Error> {
        self.call(|reply| Command::WaitDurable { region, id, reply })
            .await
    }

    /// Seals the open batch now and returns once everything admitted before
    /// this call is durable and indexed (in both ack modes): the barrier
    /// before a planned shutdown or a checkpoint. The flush marks handed to
    /// [`Wal::obsolete`] before it are durable too (in an object of their
    /// own when no entry is waiting), so they survive a restart. Once the
    /// store has been failing (a create failed and is being repeated or
    /// settled) for `max_unpersisted_age` it returns the retryable
    /// [`Error::Failing`] instead of waiting out the outage.
    pub async fn flush(&self) -> Result<(), Error> {
        self.call(|reply| Command::Flush { reply }).await
    }

    /// What `region` misses: the corrupted segments reads skipped, and the
    /// entries of damaged objects recovery left out of replay (known from
    /// the open on; see [`crate::DamagePolicy`]).
    pub fn holes(&self, region: RegionId) -> Vec<Hole> {
        let shared = &self.handle.shared;
        let mut holes = shared.damage.holes(region);
        holes.extend(shared.holes.of(region));
        holes
    }

    /// What the log holds per region (see [`RegionInfo`]), in region order:
    /// every region with an indexed segment or a release (every release
    /// ever made, also one whose record collection deleted), with its first
    /// and last indexed id, entries and bytes held, watermark and whether
    /// it is released. Entries not yet in an indexed object are not
    /// counted.
    ///
    /// Answered by the actor, which owns the catalog: it fails with
    /// [`Error::Stopped`] once the store is stopped, and still answers
    /// when the store is poisoned.
    pub async fn regions(&self) -> Result<Vec<RegionInfo>, Error> {
        self.call(|reply| Command::Regions { reply }).await
    }

    /// Stops the store: seals and uploads everything admitted and
    /// acknowledges it, in both ack modes, within `stop_attempts` repeats of
    /// a failed create; what it gives up is reported as `Error::Lost`.
    /// Idempotent: later calls return the first result. (Dropping every
    /// handle instead is a crash: nothing more is created.)
    pub async fn stop(&self) -> Result<(), Error> {
        let shared = &self.handle.shared;
        if let Some(result) = shared.stop_result.get() {
            return result.clone();
        }
        match self.call(|reply| Command::Stop { reply }).await {
            Err(Error::Stopped { .. }) | Err(Error::Poisoned { .. })
                if shared.died.get().is_some() =>
            {
                shared.died_stop().map_or(Ok(()), Err)
            }
            Err(e @ Error::Stopped { .. }) => match shared.stop_result.get() {
                Some(result) => result.clone(),
                // Never stopped: its runtime shut down under it.
                None if shared.runtime_gone.is_set() => Err(e),
                None => Ok(()),
            },
            other => other,
        }
    }
}

struct ActorSource {
    tx: flume::Sender<Command>,
    shared: Arc<Shared>,
}

impl SegmentSource for ActorSource {
    fn deleted(&self, sequence: u64) -> BoxFuture<'static, Result<bool, Error>> {
        let (tx, shared) = (self.tx.clone(), self.shared.clone());
        Box::pin(
            async move { ask(&tx, &shared, |reply| Command::Deleted { sequence, reply }).await },
        )
    }

    fn page(
        &self,
        region: RegionId,
        from: EntryId,
        limit: usize,
    ) -> BoxFuture<'static, Result<SegmentPage, Error>> {
        let (tx, shared) = (self.tx.clone(), self.shared.clone());
        Box::pin(async move {
            ask(&tx, &shared, |reply| Command::Segments {
                region,
                from,
                limit,
                reply,
            })
            .await
        })
    }

    fn replay_page(
        &self,
        wanted: Arc<[(RegionId, EntryId)]>,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'static, Result<ReplayPage, Error>> {
        let (tx, shared) = (self.tx.clone(), self.shared.clone());
        Box::pin(async move {
            ask(&tx, &shared, |reply| Command::ReplayPage {
                wanted,
                after,
                limit,
                reply,
            })
            .await
        })
    }
}

/// What a writer does before its open creates anything: has the backend
/// remove what crashed writers left under `prefix` (not objects: a local
/// directory's temporary files). Housekeeping, so a failure is a warning.
async fn remove_leftovers(storage: &Storage, prefix: &Prefix) {
    use crate::storage::ObjectStorage as _;
    if let Err(error) = storage.remove_leftovers(&format!("{prefix}/")).await {
        tracing::warn!(%error, "could not remove what crashed writers left; going on");
    }
}

/// Sends a request to the actor and waits for its answer; a gone actor
/// means a stopped store, or one whose actor died.
async fn ask<T>(
    tx: &flume::Sender<Command>,
    shared: &Shared,
    command: impl FnOnce(actor::Reply<T>) -> Command,
) -> Result<T, Error> {
    let (reply, answer) = oneshot::channel();
    tx.send(command(reply)).map_err(|_| shared.unanswered())?;
    // Queued after its actor was dropped with the runtime: never answered.
    if shared.runtime_gone.is_set() {
        return Err(shared.unanswered());
    }
    answer.await.map_err(|_| shared.unanswered())?
}

#[cfg(test)]
mod tests;
