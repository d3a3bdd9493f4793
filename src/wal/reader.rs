//! The read path: a region's entries as a stream, fetched segment by segment.
//!
//! A read asks its source (the actor of a `Wal`, or the frozen catalog of a
//! `WalReader`) for a page of the region's segments at or above its cursor,
//! fetches each with one ranged read, decodes it, and yields the entries above
//! the region's watermark. Between pages it asks again, so a stream stays valid
//! while the store keeps writing and sees objects indexed after it started.
//!
//! A segment that fails its CRC or disagrees with its footer entry is fetched
//! once more (the first fetch may have been damaged in transit); if it is
//! still bad the corruption policy decides: `Skip` records a [`Hole`] and goes
//! on, `Fail` fails the read. A failed fetch is not corruption: the read fails
//! with the storage error (retryable when transient).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::Stream;
use tokio::time::Instant;

use crate::catalog::SegmentRef;
use crate::config::CorruptionPolicy;
use crate::error::Error;
use crate::format;
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::{EntryId, RegionId};

use super::{Entry, Hole};

/// Segments fetched per page.
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

    /// Whether collection deleted the object of `sequence` (so a read that
    /// finds it missing skips it instead of failing).
    fn deleted(&self, sequence: u64) -> BoxFuture<'static, Result<bool, Error>>;
}

/// The holes reads have found, shared by every handle of one store.
#[derive(Debug, Default)]
pub(crate) struct Holes(Mutex<HashMap<RegionId, Vec<Hole>>>);

impl Holes {
    fn record(&self, hole: Hole) -> bool {
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
}

struct ReadState {
    source: Arc<dyn SegmentSource>,
    ctx: ReadContext,
    region: RegionId,
    next: EntryId,
    buffer: VecDeque<Entry>,
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
        buffer: VecDeque::new(),
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
    /// Fetches the next page of segments into the buffer; marks the read done
    /// when there are no more.
    async fn fill(&mut self) -> Result<(), Error> {
        let page = self.source.page(self.region, self.next, PAGE).await?;
        if page.segments.is_empty() {
            self.done = true;
            return Ok(());
        }
        for segment in page.segments {
            let from = self.next.max(page.watermark.saturating_add(1));
            if let Some(entries) = self.fetch(&segment).await? {
                self.buffer
                    .extend(
                        entries
                            .into_iter()
                            .filter(|(id, _)| *id >= from)
                            .map(|(id, data)| Entry {
                                region: self.region,
                                id,
                                data,
                            }),
                    );
            }
            self.next = self.next.max(segment.index.last_id.saturating_add(1));
        }
        Ok(())
    }

    /// One segment's entries, or `None` when it is skipped as corrupted.
    #[tracing::instrument(name = "read", skip_all, fields(region = self.region, sequence = segment.sequence))]
    async fn fetch(
        &self,
        segment: &SegmentRef,
    ) -> Result<Option<Vec<(EntryId, bytes::Bytes)>>, Error> {
        let key = self.ctx.prefix.object_key(segment.sequence);
        let index = &segment.index;
        let mut last_error = None;
        for attempt in 0..2 {
            let started = Instant::now();
            let bytes = match self
                .ctx
                .storage
                .read(&key, index.offset..index.offset + index.len)
                .await
            {
                Ok(bytes) => bytes,
                Err(e) if e.is_not_found() && self.source.deleted(segment.sequence).await? => {
                    tracing::debug!(key, "skipping an object collected under the read");
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            };
            self.ctx
                .metrics
                .read
                .record(started.elapsed().as_secs_f64());
            match format::decode_segment(&bytes, index, segment.sequence) {
                Ok(entries) => return Ok(Some(entries)),
                Err(e) => {
                    tracing::warn!(key, region = self.region, attempt, error = %e, "segment failed to decode");
                    last_error = Some(e);
                }
            }
        }
        let Some(error) = last_error else {
            return Ok(None);
        };
        match self.ctx.policy {
            CorruptionPolicy::Fail => Err(Error::corrupted(key, error)),
            CorruptionPolicy::Skip => {
                let hole = Hole {
                    region: self.region,
                    key: key.clone(),
                    sequence: segment.sequence,
                    first_id: index.first_id,
                    last_id: index.last_id,
                };
                if self.ctx.holes.record(hole) {
                    self.ctx.metrics.skipped_segments.increment(1);
                    tracing::error!(key, region = self.region, first_id = index.first_id,
                        last_id = index.last_id, error = %error, "skipping a corrupted segment");
                }
                Ok(None)
            }
        }
    }
}
