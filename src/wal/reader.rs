//! The read path: a region's entries as a stream, fetched segment by segment
//! with reads kept in flight ahead of the consumer.
//!
//! A read asks its source (the actor of a `Wal`, or the frozen catalog of a
//! `WalReader`) for a page of the region's segments at or above its cursor,
//! fetches each with one ranged read, decodes it, and yields the entries above
//! the region's watermark. Between pages it asks again, so a stream stays valid
//! while the store keeps writing and sees objects indexed after it started.
//! Up to `replay_concurrency` segment reads are in flight at once, started
//! and yielded in id order; the bytes in flight plus the fetched segment
//! being yielded stay within `replay_buffer_bytes` (one larger segment is
//! fetched alone), so a consumer that stops taking entries stops the reads.
//!
//! A segment that fails its CRC or disagrees with its footer entry is fetched
//! once more (the first fetch may have been damaged in transit); if it is
//! still bad the corruption policy decides: `Skip` records a [`Hole`] and goes
//! on, `Fail` fails the read. A failed fetch is not corruption: the read fails
//! with the storage error (retryable when transient). [`fetch_segment`] is
//! that rule, shared with bulk replay ([`super::replay`]).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::catalog::SegmentRef;
use crate::config::CorruptionPolicy;
use crate::error::Error;
use crate::format;
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage, StorageError};
use crate::{EntryId, RegionId};

use super::replay::ReplayPage;
use super::{Entry, Hole};

/// Segments asked for per page, at least (and twice the reads in flight).
const PAGE: usize = 8;

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
type Fetched = Result<Option<Vec<(EntryId, Bytes)>>, Error>;

/// A segment queued or being fetched: where it is, and the first id to
/// yield of it.
struct Wanted {
    segment: SegmentRef,
    from: EntryId,
}

struct ReadState {
    source: Arc<dyn SegmentSource>,
    ctx: ReadContext,
    region: RegionId,
    /// The cursor of the pages: ids below it are queued or done.
    next: EntryId,
    /// Segments of the pages not yet being fetched.
    queued: VecDeque<Wanted>,
    /// Fetches in flight, in id order, with their lengths.
    in_flight: FuturesOrdered<Task<(Fetched, u64)>>,
    /// Bytes in flight plus the bytes of the segment being yielded.
    held: u64,
    /// The entries of the segment being yielded, and its length.
    buffer: VecDeque<Entry>,
    buffered: u64,
    /// The latest page was empty while segments were still coming: ask
    /// again once they are all yielded.
    caught_up: bool,
    /// A page asked for with nothing queued, in flight or buffered came
    /// back empty: the read is complete.
    paged_out: bool,
    done: bool,
}

/// The entries of `region` with id >= `from`, in id order.
pub(crate) fn read(
    source: Arc<dyn SegmentSource>,
    ctx: ReadContext,
    region: RegionId,
    from: EntryId,
) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
    let state = ReadState {
        source,
        ctx,
        region,
        next: from,
        queued: VecDeque::new(),
        in_flight: FuturesOrdered::new(),
        held: 0,
        buffer: VecDeque::new(),
        buffered: 0,
        caught_up: false,
        paged_out: false,
        done: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(entry) = state.buffer.pop_front() {
                return Some((Ok(entry), state));
            }
            if state.done {
                return None;
            }
            if let Err(e) = state.fill().await {
                state.done = true;
                return Some((Err(e), state));
            }
        }
    })
}

impl ReadState {
    /// Releases the yielded segment, keeps pages and fetches ahead, and
    /// waits for the next segment in order; marks the read done when there
    /// is none left.
    async fn fill(&mut self) -> Result<(), Error> {
        self.held -= std::mem::take(&mut self.buffered);
        let concurrency = self.ctx.concurrency.max(1);
        let idle = self.queued.is_empty() && self.in_flight.is_empty();
        if self.queued.len() < concurrency && !self.paged_out && (idle || !self.caught_up) {
            self.next_page((2 * concurrency).max(PAGE), idle).await?;
        }
        self.start_fetches(concurrency);
        let Some(done) = self.in_flight.next().await else {
            self.done = self.queued.is_empty() && self.paged_out;
            return Ok(());
        };
        let (fetched, len) = done?;
        match fetched? {
            // A skipped segment holds nothing.
            None => self.held -= len,
            Some(entries) => {
                self.buffered = len;
                self.buffer
                    .extend(entries.into_iter().map(|(id, data)| Entry {
                        region: self.region,
                        id,
                        data,
                    }));
            }
        }
        Ok(())
    }

    /// Queues the next page of segments; an empty one asked for while
    /// `idle` (nothing queued, in flight or buffered) ends the read.
    async fn next_page(&mut self, limit: usize, idle: bool) -> Result<(), Error> {
        let page = self.source.page(self.region, self.next, limit).await?;
        self.caught_up = page.segments.is_empty();
        self.paged_out = self.caught_up && idle;
        for segment in page.segments {
            let from = self.next.max(page.watermark.saturating_add(1));
            match segment.index.last_id.checked_add(1) {
                Some(after) => self.next = self.next.max(after),
                // Nothing follows id u64::MAX: no page after this one (a
                // saturated cursor asked for the same segment forever).
                None => self.paged_out = true,
            }
            self.queued.push_back(Wanted { segment, from });
        }
        Ok(())
    }

    /// Starts queued fetches in order while the limits allow.
    fn start_fetches(&mut self, concurrency: usize) {
        let len = |w: &Wanted| w.segment.index.len;
        while let Some((wanted, len)) = next_to_start(
            &mut self.queued,
            len,
            self.in_flight.len(),
            concurrency,
            &mut self.held,
            self.ctx.buffer_bytes,
        ) {
            let (ctx, source, region) = (self.ctx.clone(), self.source.clone(), self.region);
            self.in_flight.push_back(Task::spawn(async move {
                let fetched = fetch_segment(&ctx, source.as_ref(), region, &wanted.segment, None)
                    .await
                    .map(|entries| {
                        entries
                            .map(|e| e.into_iter().filter(|(id, _)| *id >= wanted.from).collect())
                    });
                (fetched, len)
            }));
        }
    }
}

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
