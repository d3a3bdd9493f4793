//! What every read stands on: where a read learns which segments to fetch
//! ([`SegmentSource`]: a reader's frozen catalog, or the actor's), what it
//! needs besides ([`ReadContext`]), and the one rule by which a segment is
//! fetched and checked ([`fetch_segment`]), shared by per-region reads,
//! bulk replay and the follower.
//!
//! A segment that fails its CRC or disagrees with its footer entry is fetched
//! once more (the first fetch may have been damaged in transit); if it is
//! still bad the corruption policy decides: `Skip` records a [`Hole`] and goes
//! on, `Fail` fails the read. A failed fetch is not corruption: the read fails
//! with the storage error (retryable when transient).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::catalog::{Catalog, ObjectSegments, SegmentRef};
use crate::config::CorruptionPolicy;
use crate::error::Error;
use crate::format;
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage, StorageError};
use crate::wal::Hole;
use crate::{EntryId, RegionId};

/// A page of a bulk replay's objects, and the hidden-through id (watermark
/// or release) of each wanted region, in the order of the wanted list.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplayPage {
    pub(crate) objects: Vec<ObjectSegments>,
    pub(crate) hidden: Vec<EntryId>,
}

/// A page of a region's segments and the watermark to apply to them.
#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentPage {
    pub(crate) segments: Vec<SegmentRef>,
    pub(crate) watermark: EntryId,
}

/// Where a read learns which segments to fetch.
pub(crate) trait SegmentSource: Send + Sync + 'static {
    fn page(
        &self,
        region: RegionId,
        from: EntryId,
        limit: usize,
    ) -> BoxFuture<'static, Result<SegmentPage, Error>>;

    /// The first `limit` objects at or above sequence `after` holding
    /// segments a bulk replay of `wanted` (sorted by region, one entry
    /// each) still needs, and the hidden-through id of each wanted region.
    fn replay_page(
        &self,
        wanted: Arc<[(RegionId, EntryId)]>,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'static, Result<ReplayPage, Error>>;

    /// Whether collection deleted the object of `sequence` (so a read that
    /// finds it missing skips it instead of failing).
    fn deleted(&self, sequence: u64) -> BoxFuture<'static, Result<bool, Error>>;

    /// A read skipped `hole`, a segment of an object collection deleted
    /// under it. A source whose reads know the flush mark that let it go
    /// (the writer's own) has nothing to say; a reader's snapshot does not
    /// know it, and records the hole so that nothing is skipped in
    /// silence.
    fn skipped_collected(&self, _hole: Hole) {}
}

/// The holes reads have found, shared by every handle of one store.
#[derive(Debug, Default)]
pub(crate) struct Holes(Mutex<HashMap<RegionId, Vec<Hole>>>);

impl Holes {
    /// Records `hole`; false when it was recorded already.
    pub(crate) fn record(&self, hole: Hole) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let holes = map.entry(hole.region).or_default();
        if holes.contains(&hole) {
            return false;
        }
        holes.push(hole);
        true
    }

    pub(crate) fn of(&self, region: RegionId) -> Vec<Hole> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&region).cloned().unwrap_or_default()
    }
}

/// What a read needs besides its source.
#[derive(Clone)]
pub(crate) struct ReadContext {
    pub(crate) storage: Storage,
    pub(crate) prefix: Prefix,
    pub(crate) policy: CorruptionPolicy,
    pub(crate) holes: Arc<Holes>,
    pub(crate) metrics: StoreMetrics,
    /// Reads in flight at once (`replay_concurrency`).
    pub(crate) concurrency: usize,
    /// Bytes held at once (`replay_buffer_bytes`).
    pub(crate) buffer_bytes: u64,
}

/// A segment's entries, as a fetch yields them: `None` when it was skipped
/// (corrupted under `Skip`, or its object collected under the read).
pub(crate) type Fetched = Result<Option<Vec<(EntryId, Bytes)>>, Error>;
/// The next read of `queue` to start, with its length (added to `held`):
/// while fewer than `concurrency` reads are in flight and its bytes fit in
/// `budget` with those `held` already (one read at least when nothing is
/// held, so a read longer than the budget still runs, alone).
pub(crate) fn next_to_start<T>(
    queue: &mut VecDeque<T>,
    len: impl Fn(&T) -> u64,
    in_flight: usize,
    concurrency: usize,
    held: &mut u64,
    budget: u64,
) -> Option<(T, u64)> {
    let next = queue.front().map(&len)?;
    if in_flight >= concurrency || (*held > 0 && held.saturating_add(next) > budget) {
        return None;
    }
    *held += next;
    queue.pop_front().map(|item| (item, next))
}

/// A read spawned on the runtime, so that it goes on while the consumer is
/// busy with earlier entries; aborted when dropped (with its stream).
pub(crate) struct Task<T>(tokio::task::JoinHandle<T>);

impl<T: Send + 'static> Task<T> {
    pub(crate) fn spawn(read: impl Future<Output = T> + Send + 'static) -> Self {
        Task(tokio::spawn(read))
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|done| {
            done.map_err(|e| Error::Storage {
                source: StorageError::permanent(format!("a read task ended early: {e}")),
            })
        })
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One segment's entries, or `None` when it is skipped: corrupted (under
/// `CorruptionPolicy::Skip`, recorded as a hole) or in an object collection
/// deleted under the read. `fetched` is the segment's bytes when they came
/// with a larger read (bulk replay); the first attempt decodes them instead
/// of fetching. A segment that does not decode is fetched once more.
pub(crate) async fn fetch_segment(
    ctx: &ReadContext,
    source: &dyn SegmentSource,
    region: RegionId,
    segment: &SegmentRef,
    mut fetched: Option<Bytes>,
) -> Fetched {
    let key = ctx.prefix.object_key(segment.sequence);
    let index = &segment.index;
    let mut last_error = None;
    for attempt in 0..2 {
        let bytes = match fetched.take() {
            Some(bytes) => bytes,
            None => {
                let started = Instant::now();
                match ctx.storage.read(&key, index.range()).await {
                    Ok(bytes) => {
                        ctx.metrics.read.record(started.elapsed().as_secs_f64());
                        bytes
                    }
                    Err(e) if e.is_not_found() && source.deleted(segment.sequence).await? => {
                        tracing::debug!(key, "skipping an object collected under the read");
                        source.skipped_collected(Hole {
                            region,
                            key: key.clone(),
                            sequence: segment.sequence,
                            first_id: index.first_id,
                            last_id: index.last_id,
                        });
                        return Ok(None);
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        match format::decode_segment(&bytes, index, segment.sequence) {
            Ok(entries) => return Ok(Some(entries)),
            Err(e) => {
                tracing::warn!(key, region, attempt, error = %e, "segment failed to decode");
                last_error = Some(e);
            }
        }
    }
    let Some(error) = last_error else {
        return Ok(None);
    };
    match ctx.policy {
        CorruptionPolicy::Fail => Err(Error::corrupted(key, error)),
        CorruptionPolicy::Skip => {
            let hole = Hole {
                region,
                key: key.clone(),
                sequence: segment.sequence,
                first_id: index.first_id,
                last_id: index.last_id,
            };
            if ctx.holes.record(hole) {
                ctx.metrics.skipped_segments.increment(1);
                tracing::error!(key, region, first_id = index.first_id,
                    last_id = index.last_id, error = %error, "skipping a corrupted segment");
            }
            Ok(None)
        }
    }
}

/// A reader's catalog (a snapshot of another process's prefix) as a
/// source: an object found missing under a read was collected by the
/// prefix's writer when a boundary its newest objects carry lies above it
/// (issue 30 item 8); anything else missing is an error. What it learned of
/// the boundary is kept, so a reader that meets many collected objects asks
/// once per new boundary.
pub(crate) struct ReaderSource {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) storage: Storage,
    pub(crate) prefix: crate::storage::keys::Prefix,
    /// Below this, the writer collected (learned from its newest objects).
    pub(crate) collected_below: Arc<std::sync::atomic::AtomicU64>,
    /// The segments its reads skipped because their objects were
    /// collected.
    pub(crate) collected: Arc<Holes>,
}

/// The newest objects whose tails a reader reads to learn the boundary of
/// the prefix's writer (settle markers and a filler carry none).
const NEWEST_LOOKED_AT: usize = 4;

impl ReaderSource {
    /// The highest reclaim boundary the newest listed objects carry.
    async fn boundary_now(
        storage: Storage,
        prefix: crate::storage::keys::Prefix,
    ) -> Result<u64, Error> {
        use crate::storage::ObjectStorage;
        let mut listed: Vec<(u64, String)> = storage
            .list(&prefix.objects_prefix())
            .await?
            .into_iter()
            .filter_map(|m| prefix.parse_object_key(&m.key).map(|s| (s, m.key)))
            .collect();
        listed.sort_unstable();
        let window = crate::wal::open::tail::TailWindow::default();
        let mut boundary = 0;
        for (sequence, key) in listed.iter().rev().take(NEWEST_LOOKED_AT) {
            let looked = crate::wal::open::tail::look(&storage, key, *sequence, 4096, &window);
            if let crate::wal::open::tail::Looked::Intact(o) = looked.await? {
                boundary = boundary.max(o.tail.header().reclaim_boundary);
            }
        }
        Ok(boundary)
    }
}

impl SegmentSource for ReaderSource {
    fn skipped_collected(&self, hole: Hole) {
        let (region, key, first, last) =
            (hole.region, hole.key.clone(), hole.first_id, hole.last_id);
        if self.collected.record(hole) {
            tracing::warn!(
                region,
                key,
                first,
                last,
                "a reader skipped entries its writer collected after the reader opened: a hole"
            );
        }
    }

    fn deleted(&self, sequence: u64) -> BoxFuture<'static, Result<bool, Error>> {
        use std::sync::atomic::Ordering;
        let known = self.collected_below.clone();
        if sequence < known.load(Ordering::Relaxed) {
            return Box::pin(async { Ok(true) });
        }
        let (storage, prefix) = (self.storage.clone(), self.prefix.clone());
        Box::pin(async move {
            let boundary = Self::boundary_now(storage, prefix).await?;
            known.fetch_max(boundary, Ordering::Relaxed);
            Ok(sequence < boundary)
        })
    }

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
}

impl SegmentSource for Catalog {
    fn deleted(&self, _sequence: u64) -> BoxFuture<'static, Result<bool, Error>> {
        // A bare catalog knows of no collection: a missing object is an error.
        Box::pin(async { Ok(false) })
    }

    fn page(
        &self,
        region: RegionId,
        from: EntryId,
        limit: usize,
    ) -> BoxFuture<'static, Result<SegmentPage, Error>> {
        let watermark = self.hidden_through(region);
        let from = from.max(watermark.saturating_add(1));
        let page = if format::is_reserved_region(region) {
            SegmentPage::default()
        } else {
            SegmentPage {
                segments: self.segments_from(region, from, limit),
                watermark,
            }
        };
        Box::pin(async move { Ok(page) })
    }

    fn replay_page(
        &self,
        wanted: Arc<[(RegionId, EntryId)]>,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'static, Result<ReplayPage, Error>> {
        let hidden = |region| self.hidden_through(region);
        let page = ReplayPage {
            objects: self.replay_page(&wanted, hidden, after, limit),
            hidden: wanted.iter().map(|&(region, _)| hidden(region)).collect(),
        };
        Box::pin(async move { Ok(page) })
    }
}
