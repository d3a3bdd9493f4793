//! The backfill: regions added to a follower (and its first ones) read
//! what its catalog holds of them above their start, through bulk replay
//! (RFC 0009) over a snapshot of the catalog, before they join the tail.
//! An object found missing was collected under the backfill: a hole of the
//! regions its segments held, never a failure.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};

use crate::catalog::Catalog;
use crate::error::Error;
use crate::wal::read::replay;
use crate::wal::read::source::ReplayPage;
use crate::wal::read::source::{SegmentPage, SegmentSource};
use crate::wal::Entry;
use crate::{EntryId, RegionId};

use super::{Cause, Engine};

/// A backfill in progress: bulk replay over a snapshot of the catalog.
pub(super) struct Backfill {
    stream: Pin<Box<dyn Stream<Item = Result<Entry, Error>> + Send>>,
    pub(super) regions: Vec<RegionId>,
    /// Each region's position when the backfill began.
    starts: Arc<[(RegionId, EntryId)]>,
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

impl Engine {
    pub(super) fn start_backfill(&mut self) {
        let regions: Vec<RegionId> = std::mem::take(&mut self.queued)
            .into_iter()
            .filter(|r| self.regions.contains_key(r))
            .collect();
        if regions.is_empty() {
            self.out
                .push_back(super::Item::BackfillsEnded(self.latest_generation));
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
        let stream = replay::stream(source, self.ctx.clone(), wanted.clone(), &self.damage);
        self.backfill = Some(Backfill {
            stream: Box::pin(stream),
            regions,
            starts: wanted,
            snapshot,
            collected,
        });
    }

    pub(super) async fn backfill_step(&mut self) {
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
                if self.queued.is_empty() {
                    self.out
                        .push_back(super::Item::BackfillsEnded(self.latest_generation));
                }
            }
        }
    }

    /// After a backfill: the holes of objects collected under it, what the
    /// catalog hides of each region, and the releases.
    pub(super) fn end_backfill(&mut self, done: Backfill) {
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
            self.releases_may_be_missed();
            for segment in &object.segments {
                // Above where the region stood when the backfill began
                // (it has queued what lies above the hole since).
                let start = done.starts.iter().find(|(r, _)| *r == segment.region);
                if let Some(&(region, from)) = start {
                    let ids = (segment.first_id, segment.last_id);
                    self.hole_above(
                        Cause::Collected,
                        region,
                        sequence,
                        ids,
                        from.saturating_sub(1),
                    );
                }
            }
        }
        for region in done.regions {
            self.learn_hidden(region);
        }
    }
}
