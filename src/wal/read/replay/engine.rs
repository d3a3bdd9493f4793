//! The bulk replay stream: pages, planned reads, reads in flight, and the
//! per-region queues entries are yielded from.
//!
//! Reads are spawned tasks (they go on while the consumer is busy, up to
//! the bound, and are aborted with the stream), planned page by page and
//! started strictly in plan order, at
//! most `replay_concurrency` at once, while the bytes held (reads in flight
//! plus finished reads whose entries are not all taken) stay within
//! `replay_buffer_bytes` (one read always runs when nothing is held). Each
//! region keeps the read numbers holding its next segments, in order (its
//! *slots*); a region is *ready* when its first slot's read has finished,
//! and only ready regions yield, one segment at a time in turn.
//!
//! Why it never stalls: reads start in plan order, so when a later read of
//! a region has finished, its first slot's read has started; so whenever
//! bytes are held, either some region is ready (and yielding frees bytes)
//! or a read is in flight (and finishing makes a region ready).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use tokio::time::Instant;

use crate::catalog::SegmentRef;
use crate::error::Error;
use crate::format::SegmentIndex;
use crate::storage::ObjectStorage;
use crate::{EntryId, RegionId};

use super::plan::{self, Limits, PlannedRead};
use super::ReplayPage;
use crate::wal::open::damage::{Damage, HoleGuard};
use crate::wal::read::source::{fetch_segment, next_to_start, ReadContext, SegmentSource, Task};
use crate::wal::Entry;

/// One wanted region's replay.
struct Region {
    from: EntryId,
    /// Its hidden-through id, as of the latest page.
    hidden: EntryId,
    /// The reads holding its next segments, in order.
    slots: VecDeque<u64>,
    guard: HoleGuard,
}

/// A planned read: its object and range, and per segment the wanted
/// region's index and the first id to yield.
struct Planned {
    number: u64,
    /// Bytes it fetches.
    len: u64,
    sequence: u64,
    range: std::ops::Range<u64>,
    segments: Vec<(SegmentIndex, usize, EntryId)>,
}

/// A finished read: per region (index), the entries it has not taken yet.
struct Finished {
    entries: Vec<(usize, VecDeque<Entry>)>,
    /// Regions that have not taken their entries yet.
    waiting: usize,
    bytes: u64,
}

type ReadDone = (u64, Result<Vec<(usize, VecDeque<Entry>)>, Error>);

/// The stream of a bulk replay.
pub(crate) struct Replay {
    source: Arc<dyn SegmentSource>,
    ctx: ReadContext,
    limits: Limits,
    wanted: Arc<[(RegionId, EntryId)]>,
    regions: Vec<Region>,
    /// The sequence the next page starts at.
    after: u64,
    /// The latest page was empty while entries were still coming: ask
    /// again once they are all taken.
    caught_up: bool,
    /// A page asked for with nothing planned, in flight or held came back
    /// empty: the replay is complete.
    paged_out: bool,
    /// Whether the page in flight was asked for with nothing pending.
    asked_idle: bool,
    page: Option<BoxFuture<'static, Result<ReplayPage, Error>>>,
    planned: VecDeque<Planned>,
    in_flight: FuturesUnordered<Task<ReadDone>>,
    /// Bytes of each read in flight.
    flying: HashMap<u64, u64>,
    finished: HashMap<u64, Finished>,
    ready: VecDeque<usize>,
    /// Bytes in flight plus the bytes of finished reads not all taken.
    held: u64,
    next_number: u64,
    ended: bool,
}

impl Replay {
    pub(crate) fn new(
        source: Arc<dyn SegmentSource>,
        ctx: ReadContext,
        wanted: Arc<[(RegionId, EntryId)]>,
        damage: &Damage,
    ) -> Self {
        let regions = wanted
            .iter()
            .map(|&(region, from)| Region {
                from,
                hidden: 0,
                slots: VecDeque::new(),
                guard: damage.hole_guard(ctx.policy, region, from),
            })
            .collect();
        Replay {
            limits: Limits::for_buffer(ctx.buffer_bytes),
            source,
            ctx,
            paged_out: wanted.is_empty(),
            wanted,
            regions,
            after: 0,
            caught_up: false,
            asked_idle: false,
            page: None,
            planned: VecDeque::new(),
            in_flight: FuturesUnordered::new(),
            flying: HashMap::new(),
            finished: HashMap::new(),
            ready: VecDeque::new(),
            held: 0,
            next_number: 0,
            ended: false,
        }
    }

    fn concurrency(&self) -> usize {
        self.ctx.concurrency.max(1)
    }

    /// The next entry of a ready region, in turn: a region yields the rest
    /// of its current segment, then goes to the back.
    fn next_ready(&mut self) -> Option<Result<Entry, Error>> {
        while let Some(&index) = self.ready.front() {
            let number = self
                .regions
                .get(index)
                .and_then(|r| r.slots.front().copied());
            let finished = number.and_then(|n| self.finished.get_mut(&n).map(|f| (n, f)));
            let (Some(region), Some((number, finished))) = (self.regions.get_mut(index), finished)
            else {
                // Not ready after all (cannot happen): never spin on it.
                self.ready.pop_front();
                continue;
            };
            let queue = finished.entries.iter_mut().find(|(i, _)| *i == index);
            if let Some(entry) = queue.and_then(|(_, q)| q.pop_front()) {
                return Some(match region.guard.passes(entry.id) {
                    Some(error) => Err(error),
                    None => Ok(entry),
                });
            }
            // Its share of this read is taken: on to its next slot.
            region.slots.pop_front();
            let next = region.slots.front().copied();
            finished.waiting = finished.waiting.saturating_sub(1);
            if finished.waiting == 0 {
                self.held = self.held.saturating_sub(finished.bytes);
                self.finished.remove(&number);
            }
            self.ready.pop_front();
            if next.is_some_and(|n| self.finished.contains_key(&n)) {
                self.ready.push_back(index);
            }
        }
        None
    }

    /// Starts planned reads in order while the limits allow.
    fn start_reads(&mut self) {
        let concurrency = self.concurrency();
        while let Some((planned, len)) = next_to_start(
            &mut self.planned,
            |p| p.len,
            self.in_flight.len(),
            concurrency,
            &mut self.held,
            self.ctx.buffer_bytes,
        ) {
            self.flying.insert(planned.number, len);
            let task = read(
                self.ctx.clone(),
                self.source.clone(),
                self.wanted.clone(),
                planned,
            );
            self.in_flight.push(Task::spawn(task));
        }
    }

    /// Nothing planned, in flight, or fetched and not taken.
    fn idle(&self) -> bool {
        self.planned.is_empty()
            && self.in_flight.is_empty()
            && self.finished.is_empty()
            && self.ready.is_empty()
    }

    /// Asks for the next page when few reads are left to start (after an
    /// empty page, only once everything before it is taken, so the replay
    /// sees what was indexed meanwhile).
    fn request_page(&mut self) {
        if self.page.is_some() || self.paged_out || self.planned.len() >= self.concurrency() {
            return;
        }
        let idle = self.idle();
        if self.caught_up && !idle {
            return;
        }
        let limit = (2 * self.concurrency()).max(32);
        self.asked_idle = idle;
        self.page = Some(
            self.source
                .replay_page(self.wanted.clone(), self.after, limit),
        );
    }

    /// Plans a page's reads and gives each region its slots.
    fn on_page(&mut self, page: ReplayPage) {
        let Some(last) = page.objects.last().map(|o| o.sequence) else {
            self.caught_up = true;
            self.paged_out = self.asked_idle;
            return;
        };
        self.caught_up = false;
        self.after = last.saturating_add(1);
        for (region, hidden) in self.regions.iter_mut().zip(&page.hidden) {
            region.hidden = region.hidden.max(*hidden);
        }
        for read in plan::plan(&page.objects, self.limits) {
            let number = self.next_number;
            self.next_number += 1;
            let len = read.len();
            let PlannedRead {
                sequence,
                range,
                segments,
            } = read;
            let mut planned = Vec::with_capacity(segments.len());
            for segment in segments {
                // The source names only wanted regions; anything else is
                // dropped rather than trusted.
                let Ok(index) = self.wanted.binary_search_by_key(&segment.region, |w| w.0) else {
                    continue;
                };
                let Some(region) = self.regions.get_mut(index) else {
                    continue;
                };
                region.slots.push_back(number);
                planned.push((
                    segment,
                    index,
                    region.from.max(region.hidden.saturating_add(1)),
                ));
            }
            self.planned.push_back(Planned {
                number,
                len,
                sequence,
                range,
                segments: planned,
            });
        }
    }

    /// A read finished: its regions whose next slot it is become ready.
    fn on_read(&mut self, number: u64, entries: Vec<(usize, VecDeque<Entry>)>) {
        let bytes = self.flying.remove(&number).unwrap_or(0);
        for (index, _) in &entries {
            let first = self.regions.get(*index).and_then(|r| r.slots.front());
            if first == Some(&number) {
                self.ready.push_back(*index);
            }
        }
        if entries.is_empty() {
            self.held = self.held.saturating_sub(bytes);
            return;
        }
        self.finished.insert(
            number,
            Finished {
                waiting: entries.len(),
                entries,
                bytes,
            },
        );
    }

    /// Everything is read and taken: the holes no region passed yet.
    fn at_end(&mut self) -> Option<Error> {
        self.regions.iter_mut().find_map(|r| r.guard.at_end())
    }

    fn fail(&mut self, error: Error) -> Poll<Option<Result<Entry, Error>>> {
        self.ended = true;
        Poll::Ready(Some(Err(error)))
    }
}

impl Stream for Replay {
    type Item = Result<Entry, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            match this.next_ready() {
                Some(Ok(entry)) => return Poll::Ready(Some(Ok(entry))),
                Some(Err(error)) => return this.fail(error),
                None => {}
            }
            this.start_reads();
            this.request_page();
            if let Some(page) = this.page.as_mut() {
                if let Poll::Ready(result) = page.poll_unpin(cx) {
                    this.page = None;
                    match result {
                        Ok(page) => this.on_page(page),
                        Err(error) => return this.fail(error),
                    }
                    continue;
                }
            }
            match this.in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok((number, Ok(entries))))) => {
                    this.on_read(number, entries);
                    continue;
                }
                Poll::Ready(Some(Ok((_, Err(error))) | Err(error))) => return this.fail(error),
                Poll::Ready(None) | Poll::Pending => {}
            }
            if this.page.is_none() && this.paged_out && this.idle() {
                this.ended = true;
                return match this.at_end() {
                    Some(error) => Poll::Ready(Some(Err(error))),
                    None => Poll::Ready(None),
                };
            }
            return Poll::Pending;
        }
    }
}

/// One planned read: fetch its range, then each segment's entries from it
/// (refetched alone when they do not decode, as a read would).
async fn read(
    ctx: ReadContext,
    source: Arc<dyn SegmentSource>,
    wanted: Arc<[(RegionId, EntryId)]>,
    planned: Planned,
) -> ReadDone {
    let number = planned.number;
    (number, fetch(&ctx, source.as_ref(), &wanted, planned).await)
}

async fn fetch(
    ctx: &ReadContext,
    source: &dyn SegmentSource,
    wanted: &[(RegionId, EntryId)],
    planned: Planned,
) -> Result<Vec<(usize, VecDeque<Entry>)>, Error> {
    let key = ctx.prefix.object_key(planned.sequence);
    let started = Instant::now();
    let bytes = match ctx.storage.read(&key, planned.range.clone()).await {
        Ok(bytes) => {
            ctx.metrics.read.record(started.elapsed().as_secs_f64());
            Some(bytes)
        }
        Err(e) if e.is_not_found() && source.deleted(planned.sequence).await? => {
            tracing::debug!(key, "skipping an object collected under the replay");
            None
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::with_capacity(planned.segments.len());
    for (segment, index, first) in planned.segments {
        let mut entries = VecDeque::new();
        if let (None, Some(&(region, _))) = (&bytes, wanted.get(index)) {
            source.skipped_collected(crate::wal::Hole {
                region,
                key: key.clone(),
                sequence: planned.sequence,
                first_id: segment.first_id,
                last_id: segment.last_id,
            });
        }
        if let (Some(bytes), Some(&(region, _))) = (&bytes, wanted.get(index)) {
            let start = usize::try_from(segment.offset - planned.range.start).unwrap_or(usize::MAX);
            let end = start.saturating_add(usize::try_from(segment.len).unwrap_or(usize::MAX));
            let slice = bytes.get(start..end).map(|_| bytes.slice(start..end));
            let at = SegmentRef {
                sequence: planned.sequence,
                index: segment,
            };
            if let Some(decoded) = fetch_segment(ctx, source, region, &at, slice).await? {
                entries.extend(
                    decoded
                        .into_iter()
                        .filter(|(id, _)| *id >= first)
                        .map(|(id, data)| Entry { region, id, data }),
                );
            }
        }
        out.push((index, entries));
    }
    Ok(out)
}
