//! Taking chain objects in: the catalog and the path, the followed
//! regions' segments (decoded from a poll's bytes when they hold them,
//! else read, all of one object at once, each read repeated while it fails
//! transiently), and a damaged object's placeholder and holes.

use crate::catalog::{IndexedObject, SegmentRef};
use crate::error::Error;
use crate::format;
use crate::wal::open::quarantine::Damaged;
use crate::wal::protocol::rules;
use crate::wal::read::source::ReplayPage;
use crate::wal::read::source::{fetch_segment, SegmentPage, SegmentSource, Task};
use crate::wal::Entry;
use crate::{EntryId, RegionId};

use std::sync::Arc;

use futures::future::BoxFuture;

use super::super::poll::{poll, Landed, Polled};
use super::{summary_of, Cause, Engine, PATH_LEN};

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

impl Engine {
    /// Takes in an object a poll found: starts the poll of the key after
    /// it, reads its wanted segments (from the poll's window when it holds
    /// them) and queues their entries.
    pub(super) async fn take_in_landed(&mut self, landed: Landed) {
        let indexed = landed.object.indexed();
        self.read_ahead(rules::next_key(indexed.sequence, indexed.jump()));
        self.take_in(indexed, Some(&landed)).await;
    }

    /// Starts the polls of `next` (the key after the place) and of the
    /// keys after it that the read-ahead's depth asks for.
    pub(super) fn read_ahead(&mut self, next: u64) {
        if next > format::MAX_SEQUENCE {
            return;
        }
        let (storage, prefix, window, lag) = (&self.storage, &self.prefix, &self.window, &self.lag);
        self.ahead.top_up(next, format::MAX_SEQUENCE, |key| {
            let (storage, prefix, window) = (storage.clone(), prefix.clone(), window.clone());
            let lag = lag.clone();
            Task::spawn(async move {
                let polled = poll(&storage, &prefix, key, &window).await;
                if let Ok(Polled::Landed(_)) = &polled {
                    // Seen now, taken in when the follower gets there.
                    lag.saw(key);
                }
                polled
            })
        });
    }

    /// Takes in a damaged object that continues the chain (under
    /// `DamagePolicy::Quarantine`): a placeholder without segments, and
    /// holes for the followed regions it may have held.
    pub(super) fn take_in_damaged(&mut self, sequence: u64, damaged: Damaged) {
        let Some(header) = damaged.header else {
            return;
        };
        tracing::warn!(prefix = %self.prefix, key = %damaged.key, error = %damaged.error,
            "a damaged object on the chain: its entries are holes");
        self.metrics.missed_objects.increment(1);
        // Its release records could not be read: the markers say which
        // releases were made (found by the attack on issue 30: a follower
        // past a damaged carrier never ended the released region). A
        // marker is created once its record's object is indexed, so it may
        // not be there yet: the markers are listed again once an object
        // carries a boundary above this one, which the writer writes only
        // once the markers of its records are durable (rule M2).
        self.releases_may_be_missed();
        let below = self
            .unknown_releases_at
            .map_or(sequence, |s| s.min(sequence));
        self.unknown_releases_at = Some(below);
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
                self.hole(Cause::Unreadable, region, sequence, first, last);
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
        self.filler = None;
        self.enter(placeholder);
    }

    /// Adds `object` to the catalog and the path. False (the follower
    /// failed) when the catalog refuses it.
    pub(super) fn enter(&mut self, object: IndexedObject) -> bool {
        let summary = summary_of(&object);
        let boundary = object.reclaim_boundary.min(object.sequence);
        if self
            .unknown_releases_at
            .is_some_and(|s| object.reclaim_boundary > s)
        {
            self.unknown_releases_at = None;
            self.releases_may_be_missed();
        }
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
    pub(super) async fn take_in(&mut self, object: IndexedObject, landed: Option<&Landed>) {
        self.filler = None;
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
                    self.hole(
                        Cause::Collected,
                        region,
                        sequence,
                        index.first_id,
                        index.last_id,
                    );
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
