//! What the engine checks: restarts, the replay of every region against
//! what it wrote, dropped regions, and the last phase that shrinks the store.

use std::collections::HashSet;

use objwal::{AckMode, ObjectStorage, RegionId, Wal};
use rand::seq::IndexedRandom;
use rand::Rng;

use super::engine::{check_increasing, ids, sequence_of_key, Engine, Promise};
use super::{FLUSH_INTERVAL, MAX_FINAL_OBJECTS, PREFIX};

impl Engine {
    pub(super) async fn restart(&mut self, crash: bool) {
        self.stats.restarts += 1;
        let wal = self.wal.take().expect("the store is open");
        if crash {
            self.stats.crashes += 1;
            drop(wal);
            // Let the actor see every handle gone before the next open.
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        } else {
            match wal.stop().await {
                Ok(()) if self.mode == AckMode::Enqueued => {
                    // The whole backlog was uploaded.
                    for w in self.written.values_mut().filter(|w| w.id.is_some()) {
                        w.promise = Promise::Promised;
                    }
                }
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "stop reported a loss");
                    self.stats.lossy_stops += 1;
                }
            }
        }
        self.needs_restart = false;
        self.open_and_replay().await;
    }

    /// Opens the store (repeating a failed open), re-establishes the
    /// engine's flushed ids, repeats unconfirmed releases and replays.
    pub(super) async fn open_and_replay(&mut self) {
        let storage = self.faulty.storage();
        let mut attempts = 0;
        let wal = loop {
            match Wal::open(storage.clone(), PREFIX, self.config.clone()).await {
                Ok(wal) => break wal,
                Err(e) => {
                    attempts += 1;
                    self.stats.failed_opens += 1;
                    assert!(
                        attempts < 100 && e.is_retryable(),
                        "{}: open failed ({attempts} attempts, {:?}): {e}",
                        self.at(),
                        self.faulty.counts()
                    );
                }
            }
        };
        self.wal = Some(wal.clone());
        // A release that returned Ok holds across restarts.
        let confirmed: Vec<RegionId> = self.dropped(true);
        for region in confirmed {
            self.check_dropped(region, "a confirmed release").await;
        }
        for region in self.dropped(false) {
            self.release(region).await;
        }
        for (region, flushed) in self.manifest.flushed.clone() {
            if flushed > 0 {
                if let Err(e) = wal.obsolete(region, flushed).await {
                    self.note_error(&e);
                }
            }
        }
        // Every dropped region is released now, in this life or before
        // (a release reads as empty at once, even when its object failed).
        let dropped: Vec<RegionId> = self.manifest.dropped.keys().copied().collect();
        for region in dropped {
            self.check_dropped(region, "released again after open")
                .await;
        }
        for region in self.live() {
            self.replay(region).await;
        }
    }

    pub(super) fn dropped(&self, confirmed: bool) -> Vec<RegionId> {
        let dropped = self.manifest.dropped.iter();
        dropped
            .filter(|(_, c)| **c == confirmed)
            .map(|(r, _)| *r)
            .collect()
    }

    pub(super) async fn check_dropped(&mut self, region: RegionId, why: &str) {
        if let Some(read) = self.read(region, 0).await {
            assert!(
                read.is_empty(),
                "{}: the dropped region {region} ({why}) replays {} entries, the first {}",
                self.at(),
                read.len(),
                read[0].id
            );
        }
    }

    /// Replays `region` from its flushed id + 1 and checks it against what
    /// was written; the replay becomes the memtable.
    pub(super) async fn replay(&mut self, region: RegionId) {
        let flushed = self.manifest.flushed[&region];
        let Some(read) = self.read(region, flushed + 1).await else {
            return;
        };
        let at = self.at();
        check_increasing(&read, flushed + 1, &at);
        let mut seen = HashSet::new();
        for e in &read {
            let w = self.written.get(&e.data).unwrap_or_else(|| {
                panic!(
                    "{at}: region {region} replays entry {} ({:?}), which was never acknowledged",
                    e.id,
                    String::from_utf8_lossy(&e.data)
                )
            });
            assert_eq!(
                w.region, region,
                "{at}: entry {} replays in another region",
                e.id
            );
            assert!(
                w.id.is_none_or(|id| id == e.id),
                "{at}: region {region} replays entry {:?} as {}",
                w.id,
                e.id
            );
            assert!(
                seen.insert(e.data.clone()),
                "{at}: region {region} replays {} twice",
                e.id
            );
            if w.promise == Promise::Maybe {
                self.stats.maybe_replayed += 1;
            }
        }
        for (data, w) in &self.written {
            if w.region == region && w.promise == Promise::Promised {
                assert!(
                    seen.contains(data),
                    "{at}: region {region}: the promised entry {:?} (flushed through {flushed}) is missing from the replay",
                    w.id
                );
            }
        }
        // The watermark hides what was flushed: a read from the start
        // returns the same.
        if let Some(from_start) = self.read(region, 0).await {
            assert_eq!(
                ids(&from_start),
                ids(&read),
                "{at}: region {region}: a read from 0 shows entries at or below the flushed id {flushed}"
            );
        }
        // What did not replay never will; what did is durable.
        self.written
            .retain(|data, w| w.region != region || seen.contains(data));
        for e in &read {
            if let Some(w) = self.written.get_mut(&e.data) {
                w.id = Some(e.id);
                w.promise = Promise::Promised;
            }
        }
        self.stats.replayed += read.len() as u64;
        let memtable = read.into_iter().map(|e| (e.id, e.data)).collect();
        self.memtables.insert(region, memtable);
    }

    /// No faults: flush every region, write one more object (an entry, or
    /// the idle tick's empty object), and check that the store shrank.
    pub(super) async fn final_phase(&mut self) {
        self.faulty.clear_faults();
        self.restart(false).await;
        for region in self.live() {
            assert!(
                self.flush(region).await,
                "{}: flush without faults",
                self.at()
            );
        }
        if self.rng.random_bool(0.5) {
            let region = *self.live().choose(&mut self.rng).expect("a live region");
            let data = self.payload(region);
            let wal = self.wal();
            let result = wal.append(vec![(region, data.clone())]).await;
            let id = result.as_ref().map(|ids| ids[0]).unwrap_or_default();
            self.appended(vec![(region, data)], result);
            wal.wait_durable(region, id).await.expect("durable");
            self.promise_memtable(region);
        }
        // The idle tick carries the boundary; collection runs behind it.
        tokio::time::sleep(FLUSH_INTERVAL * 10).await;
        let at = self.at();
        let listed = self
            .faulty
            .inner()
            .list(&format!("{PREFIX}/objects/"))
            .await
            .expect("list");
        // Settle markers (an empty object linked to epoch 0) stay for good:
        // each keeps a writer an open stopped from its key (rfcs/0006, R5);
        // so do empty objects off the chain (the start objects of opens
        // that failed: fillers, rule 8), which an older writer may still
        // meet at its key.
        let mut kept = Vec::new();
        let newest = listed.iter().map(|m| sequence_of_key(&m.key)).max();
        for meta in listed {
            if Some(sequence_of_key(&meta.key)) == newest {
                kept.push(meta);
                continue;
            }
            let object = self
                .faulty
                .inner()
                .read(&meta.key, 0..meta.size)
                .await
                .ok()
                .and_then(|b| objwal::format::decode(&b).ok());
            let stays = object.is_some_and(|o| {
                o.header.link.is_some_and(|l| l.epoch == 0)
                    || (o.segments.is_empty() && o.marks.is_empty() && o.releases.is_empty())
            });
            if !stays {
                kept.push(meta);
            }
        }
        let listed = kept;
        let sequences: Vec<u64> = listed.iter().map(|m| sequence_of_key(&m.key)).collect();
        let tip = listed.last().expect("a tip");
        let bytes = self
            .faulty
            .inner()
            .read(&tip.key, 0..tip.size)
            .await
            .expect("read the tip");
        let boundary = objwal::format::decode(&bytes)
            .expect("decode the tip")
            .header
            .reclaim_boundary;
        *self.stats.final_objects.entry(listed.len()).or_default() += 1;
        assert!(
            listed.len() <= MAX_FINAL_OBJECTS,
            "{at}: every region is flushed, yet {} objects (settle markers aside) remain: {sequences:?} (tip boundary {boundary})",
            listed.len()
        );
        assert!(
            sequences.iter().all(|s| *s >= boundary),
            "{at}: objects below the tip's boundary {boundary} remain: {sequences:?}"
        );
        // Recovery after collection: what is left replays.
        self.restart(false).await;
        let stopped = self.wal().stop().await;
        assert!(stopped.is_ok(), "{at}: the last stop: {stopped:?}");
    }
}
