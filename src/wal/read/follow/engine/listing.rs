//! Listings: when the next key holds an object that does not continue the
//! chain, when the prefix holds no chain yet, and at the idle checks. The
//! tails of the listed objects the follower does not know are read (once),
//! chain selection runs over them and the follower's path (its oldest
//! object standing as a root), and the best tip's chain is taken in from
//! where it leaves the path: after the place (a restart), after an earlier
//! path object (a branch nobody continues: back to it), or after a gap
//! below the tip's reclaim boundary (collected objects: a hole).

use std::collections::BTreeMap;

use futures::StreamExt;

use crate::catalog::chain::{self, ObjectSummary};
use crate::catalog::{Catalog, IndexedObject};
use crate::config::DamagePolicy;
use crate::error::Error;
use crate::format;
use crate::storage::ObjectStorage;
use crate::wal::open::quarantine::{examine, Damaged, Examined};
use crate::wal::protocol::rules;
use crate::RegionId;

use super::{Cause, Engine, OTHERS_KEPT};

impl Engine {
    /// Lists the prefix and takes in the chain of the best tip from where
    /// it leaves the path. Whether the place moved.
    pub(super) async fn resolve(&mut self) -> Result<bool, Error> {
        let listed = self.storage.list(&self.prefix.objects_prefix()).await?;
        let present: BTreeMap<u64, u64> = listed
            .iter()
            .filter_map(|m| Some((self.prefix.parse_object_key(&m.key)?, m.size)))
            .collect();
        let lowest = self.path.keys().next().copied();
        let above = |s: u64| lowest.is_none_or(|l| s > l);
        let unknown: Vec<(u64, u64)> = present
            .iter()
            .filter(|(s, _)| {
                above(**s) && !self.path.contains_key(s) && !self.others.contains_key(s)
            })
            .map(|(s, size)| (*s, *size))
            .collect();
        let (storage, prefix, window) = (&self.storage, &self.prefix, self.window.as_ref());
        let examined: Vec<(u64, Result<Option<Examined>, Error>)> = futures::stream::iter(unknown)
            .map(|(sequence, size)| async move {
                let key = prefix.object_key(sequence);
                (
                    sequence,
                    examine(storage, &key, size, sequence, window, None).await,
                )
            })
            .buffer_unordered(self.settings.listing_concurrency.max(1))
            .collect()
            .await;
        let mut damaged: BTreeMap<u64, Damaged> = BTreeMap::new();
        for (sequence, result) in examined {
            match result? {
                Some(Examined::Intact(object)) => {
                    self.others.insert(sequence, object);
                }
                Some(Examined::Damaged(d)) => {
                    damaged.insert(sequence, d);
                }
                None => {}
            }
        }
        // Chain selection over the path (its oldest object as a root) and
        // every other object listed above it.
        let mut summaries: BTreeMap<u64, ObjectSummary> = self.path.clone();
        if let Some(root) = summaries.values_mut().next() {
            root.link = None;
        }
        for (sequence, object) in &self.others {
            if above(*sequence) && present.contains_key(sequence) {
                summaries.insert(*sequence, object.summary());
            }
        }
        for (sequence, d) in &damaged {
            if let Some(h) = d.header {
                summaries.insert(
                    *sequence,
                    ObjectSummary {
                        sequence: *sequence,
                        epoch: h.epoch,
                        link: h.link,
                        reclaim_boundary: h.reclaim_boundary,
                        next_key: sequence.saturating_add(1),
                        // Damaged: an older epoch's object at a newer
                        // link's key can only be a filler (rfcs/0006).
                        empty: !crate::wal::protocol::rules::is_settle_marker(&h),
                    },
                );
            }
        }
        self.trim_others();
        let selection = match chain::select(&summaries) {
            Ok(selection) => selection,
            Err(e) => {
                tracing::debug!(prefix = %self.prefix, error = %e, "no chain to follow yet");
                return Ok(false);
            }
        };
        let Some(tip) = selection.tip else {
            return Ok(false);
        };
        let place = self.place().map(|p| (p.sequence, p.epoch));
        let above_place = |s: &&u64| place.is_none_or(|(p, _)| **s > p);
        self.lag
            .listed(selection.chain.iter().filter(above_place).copied());
        if place == Some((tip.sequence, tip.epoch)) {
            self.warn_unreachable(&present, &summaries);
            return Ok(false);
        }
        let on_chain: Vec<u64> = selection
            .below_boundary
            .iter()
            .chain(&selection.chain)
            .copied()
            .collect();
        let fork = on_chain
            .iter()
            .rev()
            .find(|s| {
                self.path
                    .get(s)
                    .is_some_and(|p| summaries.get(s).is_some_and(|q| q.epoch == p.epoch))
            })
            .copied();
        let after = match (fork, place) {
            (Some(fork), Some((at, _))) if fork == at => at,
            (Some(fork), Some(_)) => {
                self.rewind(fork);
                fork
            }
            (None, Some((at, _))) => {
                let first = on_chain.iter().copied().find(|s| *s > at);
                if let Some(first) = first {
                    self.gap(at, first);
                }
                at
            }
            (_, None) => 0,
        };
        let new: Vec<u64> = on_chain
            .into_iter()
            .filter(|s| *s > after || place.is_none())
            .collect();
        if new.is_empty() {
            return Ok(false);
        }
        tracing::info!(prefix = %self.prefix, from = after, to = tip.sequence, epoch = tip.epoch,
            "a listing found where the chain goes on");
        for sequence in new {
            if self.ended {
                break;
            }
            if let Some(object) = self.others.remove(&sequence) {
                self.take_in(object.indexed(), None).await;
            } else if let Some(d) = damaged.remove(&sequence) {
                if self.settings.damage_policy == DamagePolicy::Fail {
                    self.fail(d.error.clone());
                    break;
                }
                self.take_in_damaged(sequence, d);
            }
        }
        Ok(true)
    }

    /// Forgets what the place went past on a branch no newer process
    /// continued (a failed opener's start object): back to `fork`.
    pub(super) fn rewind(&mut self, fork: u64) {
        tracing::warn!(prefix = %self.prefix, fork,
            "the chain the follower took in was left for another: going back to where they part");
        let mut kept = Catalog::new();
        for object in self.catalog.objects().filter(|o| o.sequence <= fork) {
            if kept.insert(object.clone()).is_err() {
                break;
            }
        }
        self.catalog = kept;
        self.path.retain(|s, _| *s <= fork);
        self.ahead.clear();
        self.filler = None;
    }

    /// The chain goes on at `first` without reaching the place `at`: the
    /// objects between were collected before the follower read them.
    pub(super) fn gap(&mut self, at: u64, first: u64) {
        let missing = rules::next_key(at, self.place().and_then(IndexedObject::jump));
        tracing::warn!(prefix = %self.prefix, from = missing, to = first,
            "objects were collected before the follower read them: holes");
        self.metrics.missed_objects.increment(1);
        self.releases_may_be_missed();
        let regions: Vec<RegionId> = self.regions.keys().copied().collect();
        let last = format::entry_id(first, 0).saturating_sub(1);
        for region in regions {
            self.hole(
                Cause::Collected,
                region,
                missing,
                format::entry_id(missing, 1),
                last,
            );
        }
    }

    pub(super) fn trim_others(&mut self) {
        if let Some(&lowest) = self.path.keys().next() {
            self.others.retain(|s, _| *s > lowest);
        }
        while self.others.len() > OTHERS_KEPT {
            self.others.pop_first();
        }
    }

    /// The chain has not moved past the place, yet objects that are not
    /// settle markers lie beyond its next key, which is missing (not a
    /// newer process's walk: that lands a marker there): an object of the
    /// chain is missing above the reclaim boundary. Recovery would not
    /// replay them either; the follower waits at its place, and says so.
    /// (Creates still in flight look the same for a moment; a listing of
    /// a quiet log is 10 waits after the last landing.)
    fn warn_unreachable(
        &self,
        present: &BTreeMap<u64, u64>,
        summaries: &BTreeMap<u64, ObjectSummary>,
    ) {
        let Some(place) = self.place() else {
            return;
        };
        let next = rules::next_key(place.sequence, place.jump());
        if self.blocked.is_some() || present.contains_key(&next) {
            return;
        }
        let beyond = summaries
            .range(next..)
            .filter(|(_, s)| s.link.is_some_and(|l| l.epoch != 0))
            .count();
        if beyond > 0 {
            tracing::warn!(prefix = %self.prefix, next, beyond,
                "objects lie beyond the follower's next key, which is missing: the chain is broken \
                 above its reclaim boundary; the follower waits there");
        }
    }
}
