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

use std::collections::VecDeque;
use std::sync::Arc;

use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt};

use crate::catalog::SegmentRef;
use crate::error::Error;
use crate::{EntryId, RegionId};

use crate::wal::read::source::{
    fetch_segment, next_to_start, Fetched, ReadContext, SegmentSource, Task,
};
use crate::wal::Entry;

/// Segments asked for per page, at least (and twice the reads in flight).
const PAGE: usize = 8;

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
