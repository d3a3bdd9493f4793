//! [`WalReader`]: a read-only handle on a prefix. Its open recovers the
//! catalog as a writer's does (the open path) but writes nothing: no start
//! object, no fencing of a live writer. Its reads, replays and followers
//! run on that frozen catalog.
//!
//! A prefix that holds no log is refused with [`Error::NoLog`] (naming the
//! prefixes that do, as `Wal::open` with `create_if_missing = false`): a
//! mistyped prefix is not an empty log. [`WalReader::open_or_empty`] opens
//! it as an empty log instead, for a follower started before its writer.
//! The check costs nothing on a prefix with objects: recovery's listing
//! already says it holds a log; only an empty listing looks further.

use std::sync::Arc;

use futures::Stream;

use crate::catalog::{Catalog, IndexedObject, RegionInfo};
use crate::config::Config;
use crate::error::Error;
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::Storage;
use crate::wal::open::damage::Damage;
use crate::wal::open::{open_mode, recovery, released};
use crate::wal::read::source::{Holes, ReadContext, ReaderSource};
use crate::wal::read::{follow, reader, traced};
use crate::wal::{Entry, Hole};
use crate::{EntryId, RegionId};

/// A read-only view of a prefix: recovers the catalog without writing
/// anything (no start object, no fencing of a live writer).
#[derive(Clone)]
pub struct WalReader {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) read: ReadContext,
    orphans: Arc<Vec<u64>>,
    pub(crate) damage: Arc<Damage>,
    /// How its followers poll.
    pub(crate) follow: follow::Settings,
    /// Below this the prefix's writer collected (learned by its reads).
    collected_below: Arc<std::sync::atomic::AtomicU64>,
    /// Segments its reads skipped because the writer collected their
    /// objects after the open (issue 30 item 10).
    collected: Arc<Holes>,
}

impl std::fmt::Debug for WalReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalReader")
            .field("prefix", &self.read.prefix.as_str())
            .field("objects", &self.catalog.len())
            .finish_non_exhaustive()
    }
}

impl WalReader {
    /// Recovers the catalog of `prefix` as it is now, writing nothing.
    ///
    /// `config` is validated whole, as for [`Wal::open`](crate::Wal::open); the settings that
    /// concern reading take effect, for the open and for every later read
    /// of this reader (and of an [`import_region`](crate::Wal::import_region) that
    /// uses it as its source):
    ///
    /// | setting | effect on a reader |
    /// | --- | --- |
    /// | `request_timeout` | every storage request that does not answer in time fails with a retryable error; a follower whose requests keep failing that long ends with one |
    /// | `recovery_concurrency` | tails read at once by this open |
    /// | `on_damaged_object` | whether a damaged object fails this open or is left out as holes |
    /// | `on_corrupted_segment` | whether a read skips a corrupted segment (a hole) or fails |
    /// | `replay_concurrency`, `replay_buffer_bytes` | reads in flight and bytes held by `read` and `replay` |
    /// | `follow_interval`, `follow_max_interval` | how often a [`follow`](Self::follow)er polls |
    ///
    /// | `retry_initial_delay`, `retry_max_delay`, `retry_jitter`, `stop_attempts` | a read of an object's tail that fails transiently during the open is repeated with these delays, up to `stop_attempts` tries |
    ///
    /// The other settings govern writing (batching, acknowledgement,
    /// creates, collection, flush requests) and do not apply to a reader,
    /// which writes nothing and, past its open's tail reads, retries
    /// nothing: a failed request is returned to the caller, who may repeat
    /// the call.
    ///
    /// Its open lists the release markers (`released/`, a page per 1,000 on
    /// S3) after the objects: the reader knows every release ever made
    /// (rfcs/0005, "A release is forever").
    ///
    /// A prefix that holds no log (no object, no fence of an opener) fails
    /// with [`Error::NoLog`], naming the prefixes of the store that hold
    /// one, as [`Wal::open`](crate::Wal::open) does with
    /// `create_if_missing = false`: a mistyped prefix is not an empty log.
    /// To follow a log that has not started yet, use
    /// [`open_or_empty`](Self::open_or_empty).
    pub async fn open(storage: Storage, prefix: &str, config: Config) -> Result<WalReader, Error> {
        Self::open_in(storage, prefix, config, true).await
    }

    /// Opens `prefix` as [`open`](Self::open) does, except that a prefix
    /// that holds no log yet opens as an empty log instead of failing with
    /// [`Error::NoLog`]: its reads yield nothing, and its
    /// [`follow`](Self::follow)ers wait for the first writer to open the
    /// prefix, then follow it from its first entry. For a standby or a
    /// change-data consumer that may start before the writer.
    ///
    /// ```
    /// # async fn demo() -> Result<(), objwal::Error> {
    /// use objwal::{Config, Storage, WalReader};
    /// let storage = Storage::from_url("memory://")?;
    /// let reader = WalReader::open_or_empty(storage, "node-7", Config::default()).await?;
    /// let follower = reader.follow([(1, 0)]); // yields region 1 once node-7 writes it
    /// # drop(follower);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_or_empty(
        storage: Storage,
        prefix: &str,
        config: Config,
    ) -> Result<WalReader, Error> {
        Self::open_in(storage, prefix, config, false).await
    }

    async fn open_in(
        storage: Storage,
        prefix: &str,
        config: Config,
        require_log: bool,
    ) -> Result<WalReader, Error> {
        config.validate()?;
        let prefix = Prefix::new(prefix)?;
        let storage = storage.with_request_timeout(config.request_timeout);
        let mut recovered = recovery::recover_with(&storage, &prefix, &config).await?;
        // Every release ever made, also those whose records were collected
        // (rfcs/0005, "A release is forever").
        released::learn(&storage, &prefix, &mut recovered.catalog).await?;
        if require_log && recovered.present.is_empty() {
            // No object listed: a log only if an opener claimed it.
            open_mode::require_log(&storage, &prefix).await?;
        }
        let metrics = StoreMetrics::new(prefix.as_str());
        recovered.damage.set_gauges(&metrics);
        // What vanished under recovery was collected (issue 30 item 8).
        let collected_below = recovered.selection.tip.map_or(0, |t| t.reclaim_boundary);
        Ok(WalReader {
            collected_below: Arc::new(collected_below.into()),
            collected: Arc::new(Holes::default()),
            catalog: Arc::new(recovered.catalog),
            orphans: Arc::new(recovered.selection.orphans),
            damage: Arc::new(recovered.damage),
            follow: follow::Settings {
                interval: config.follow_interval,
                max_interval: config.follow_max_interval,
                damage_policy: config.on_damaged_object,
                listing_concurrency: config.recovery_concurrency,
                give_up: config.request_timeout,
            },
            read: ReadContext {
                metrics,
                storage,
                prefix,
                policy: config.on_corrupted_segment,
                holes: Arc::new(Holes::default()),
                concurrency: config.replay_concurrency,
                buffer_bytes: config.replay_buffer_bytes,
            },
        })
    }

    /// The entries of `region` with id >= `from`, in id order (released
    /// regions read as empty).
    pub fn read(
        &self,
        region: RegionId,
        from: EntryId,
    ) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
        let entries = reader::read(self.source(), self.read.clone(), region, from);
        let entries = self.damage.guard(self.read.policy, region, from, entries);
        traced::Traced::new(tracing::debug_span!("read", region, from), entries)
    }

    /// The source its reads and replays run on: its catalog, and what its
    /// writer collected under them.
    pub(crate) fn source(&self) -> Arc<ReaderSource> {
        Arc::new(ReaderSource {
            catalog: self.catalog.clone(),
            storage: self.read.storage.clone(),
            prefix: self.read.prefix.clone(),
            collected_below: self.collected_below.clone(),
            collected: self.collected.clone(),
        })
    }

    /// Places the reader hold `name` on this reader's prefix at the first
    /// object of its catalog (every object when it has none): while the
    /// hold is refreshed within `ttl`, the writer's collection deletes no
    /// object at or above its position. Give it to a follower
    /// ([`Follower::keep_hold`](crate::Follower::keep_hold)) to have it
    /// moved and refreshed as the follower reads; see [`Hold`](crate::Hold)
    /// for the name, the ttl and the costs, and rfcs/0011 for when a hold
    /// is in force (from the writer's next collection pass on: to leave no
    /// window at all, place it with [`Hold::place`](crate::Hold::place) at 0
    /// before opening the reader).
    pub async fn hold(&self, name: &str, ttl: std::time::Duration) -> Result<crate::Hold, Error> {
        let position = self.catalog.objects().next().map_or(0, |o| o.sequence);
        crate::Hold::place_at(
            self.read.storage.clone(),
            self.read.prefix.clone(),
            name,
            ttl,
            position,
        )
        .await
    }

    /// The largest indexed entry id of `region`; 0 when it has none.
    pub fn latest_entry_id(&self, region: RegionId) -> EntryId {
        self.catalog.last_id(region)
    }

    /// What the prefix holds per region (see [`RegionInfo`]), in region
    /// order: every region with an indexed segment or a release (an indexed
    /// release record, or a release marker: every release ever made, also
    /// one whose record collection deleted).
    /// A reader knows no engine watermarks, so `watermark` is the
    /// released-through id of released regions and 0 otherwise.
    pub fn regions(&self) -> Vec<RegionInfo> {
        self.catalog.region_infos([])
    }

    /// The indexed objects, by sequence.
    pub fn objects(&self) -> Vec<IndexedObject> {
        self.catalog.objects().cloned().collect()
    }

    /// The sequences of objects present but not on the tip's chain.
    pub fn orphans(&self) -> &[u64] {
        &self.orphans
    }

    /// What `region` misses: the entries of damaged objects recovery left
    /// out of replay, the corrupted segments the reads of this reader
    /// skipped, and the segments of objects the writer's collection
    /// deleted after this reader opened, which its reads could no longer
    /// read (the writer's engine had flushed them; this reader's catalog
    /// does not know its flush mark, so a read from below says what it
    /// skipped).
    pub fn holes(&self, region: RegionId) -> Vec<Hole> {
        let mut holes = self.unreadable_holes(region);
        holes.extend(self.collected.of(region));
        holes
    }

    /// The holes of `region` whose entries could not be read (damaged
    /// objects, corrupted segments): what a move may not go around.
    /// Collected segments are not among them: they were flushed.
    pub(crate) fn unreadable_holes(&self, region: RegionId) -> Vec<Hole> {
        let mut holes = self.damage.holes(region);
        holes.extend(self.read.holes.of(region));
        holes
    }
}
