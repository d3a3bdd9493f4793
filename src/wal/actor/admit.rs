//! Requests that admit or look: append (with the backlog bounds of enqueued
//! mode), obsolete, wait_durable, release and the read path's segment pages.

use bytes::Bytes;
use tokio::time::Instant;

use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, MAX_POSITION};
use crate::{EntryId, RegionId};

use super::super::batch::{positions_needed, OpenBatch};
use super::super::policy::SealReason;
use super::super::reader::SegmentPage;
use super::{check_region, Actor, Open, Reply, Stalled, Waiter, MAX_APPEND_BYTES};

impl Actor {
    pub(super) fn on_append(
        &mut self,
        entries: Vec<(RegionId, Bytes)>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    ) {
        if let Some(e) = self.refusal() {
            let _ = reply.send(Err(e));
            return;
        }
        if entries.is_empty() {
            let _ = reply.send(Ok(Vec::new()));
            return;
        }
        if let Err(e) = self.check_append(&entries) {
            let _ = reply.send(Err(e));
            return;
        }
        if self.config.ack_mode == AckMode::Enqueued {
            if let Some(failing) = &self.failing {
                self.metrics.rejected_appends.increment(1);
                let _ = reply.send(Err(Error::Failing {
                    reason: failing.reason.clone(),
                }));
                return;
            }
            if !self.stalled.is_empty() || self.backlog_is_full() {
                self.metrics.stalled_appends.increment(1);
                self.stalled.push_back(Stalled {
                    entries,
                    arrived,
                    reply,
                });
                self.make_progress();
                return;
            }
        }
        self.admit(entries, arrived, reply);
    }

    fn check_append(&self, entries: &[(RegionId, Bytes)]) -> Result<(), Error> {
        let mut total: u64 = 0;
        for (region, data) in entries {
            check_region(*region)?;
            if self.released.contains_key(region) {
                return Err(Error::RegionReleased { region: *region });
            }
            total = total.saturating_add(data.len() as u64);
        }
        if total > MAX_APPEND_BYTES {
            return Err(Error::invalid(format!(
                "an append of {total} bytes exceeds the limit of {MAX_APPEND_BYTES} bytes"
            )));
        }
        if let Some((region, n)) = positions_needed(entries)
            .into_iter()
            .find(|(_, n)| *n > MAX_POSITION)
        {
            return Err(Error::invalid(format!(
                "an append of {n} entries to region {region} exceeds the {MAX_POSITION} positions of one object"
            )));
        }
        Ok(())
    }

    /// Admits a checked append into the open batch and acknowledges it (now in
    /// enqueued mode, once indexed in durable mode).
    fn admit(
        &mut self,
        entries: Vec<(RegionId, Bytes)>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    ) {
        let needed = positions_needed(&entries);
        if self
            .open
            .as_ref()
            .is_some_and(|o| !o.batch.has_positions_for(&needed))
        {
            self.seal(SealReason::Positions);
        }
        let regions: Vec<RegionId> = entries.iter().map(|(region, _)| *region).collect();
        let mode = self.config.ack_mode;
        let open = match self.open_batch(arrived) {
            Ok(open) => open,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let ids = open.batch.admit(entries);
        let full_bytes = open.batch.encoded_bytes();
        let acked: Vec<_> = regions.into_iter().zip(ids.iter().copied()).collect();
        match mode {
            AckMode::Durable => open.waiters.push(Waiter::Append {
                ids,
                arrived,
                reply,
            }),
            AckMode::Enqueued => {
                self.shared.acknowledge(&acked);
                self.metrics
                    .append_ack
                    .record(arrived.elapsed().as_secs_f64());
                let _ = reply.send(Ok(ids));
            }
        }
        for (region, id) in acked {
            let slot = self.assigned.entry(region).or_insert(0);
            *slot = (*slot).max(id);
        }
        if self.policy.is_full(full_bytes) {
            self.seal(SealReason::Full);
        }
        self.publish_unpersisted();
    }

    /// The open batch, opened at the next sequence if there is none.
    pub(super) fn open_batch(&mut self, now: Instant) -> Result<&mut Open, Error> {
        if self.open.is_none() {
            if self.exhausted || self.next_sequence > format::MAX_SEQUENCE {
                return Err(Error::Poisoned {
                    reason: "no sequence is left in this prefix".into(),
                });
            }
            self.open = Some(Open {
                batch: OpenBatch::new(self.next_sequence, now),
                waiters: Vec::new(),
            });
            self.next_sequence += 1;
        }
        self.open
            .as_mut()
            .ok_or_else(|| Error::invalid("no open batch"))
    }

    /// Whether the enqueued backlog has reached a bound.
    fn backlog_is_full(&self) -> bool {
        if self.unpersisted_bytes() >= self.config.max_unpersisted_bytes {
            return true;
        }
        let oldest = self
            .pipeline
            .front()
            .map(|s| s.opened_at)
            .or_else(|| self.open.as_ref().map(|o| o.batch.opened_at));
        oldest.is_some_and(|t| t.elapsed() >= self.config.max_unpersisted_age)
    }

    /// Makes sure something is being uploaded while appends wait: seals the
    /// open batch when no create is in flight.
    pub(super) fn make_progress(&mut self) {
        if !self.has_running() && self.failing.is_none() {
            self.seal(SealReason::Requested);
        }
    }

    /// Admits held-back appends, in arrival order, while the bounds allow.
    pub(super) fn admit_stalled(&mut self) {
        while self.failing.is_none() && self.refusal().is_none() && !self.backlog_is_full() {
            let Some(stalled) = self.stalled.pop_front() else {
                return;
            };
            self.metrics
                .stall
                .record(stalled.arrived.elapsed().as_secs_f64());
            self.admit(stalled.entries, stalled.arrived, stalled.reply);
        }
        if !self.stalled.is_empty() {
            self.make_progress();
        }
    }

    /// Fails every held-back append with `error`.
    pub(super) fn fail_stalled(&mut self, error: &Error) {
        for stalled in self.stalled.drain(..) {
            let _ = stalled.reply.send(Err(error.clone()));
        }
    }

    pub(super) fn on_obsolete(&mut self, region: RegionId, id: EntryId) -> Result<(), Error> {
        if let Some(e) = self.refusal() {
            return Err(e);
        }
        check_region(region)?;
        if format::sequence_of(id) >= format::MAX_SEQUENCE {
            return Err(Error::invalid(format!(
                "entry id {id} is beyond the last usable sequence"
            )));
        }
        // New ids must never fall at or below a watermark handed in from a
        // previous life of the store.
        self.next_sequence = self.next_sequence.max(format::sequence_of(id) + 1);
        // Enqueued mode: never hide an entry that is not durable yet, so a
        // crash cannot lose an entry the engine believes flushed.
        let id = match self.config.ack_mode {
            AckMode::Durable => id,
            AckMode::Enqueued => {
                let durable = self.durable_id(region);
                if id > durable {
                    tracing::debug!(region, id, durable, "watermark clamped to the durable id");
                }
                id.min(durable)
            }
        };
        let watermark = self.watermarks.entry(region).or_insert(0);
        *watermark = (*watermark).max(id);
        self.arm_collect();
        Ok(())
    }

    /// The largest id of `region` that is durable and indexed. Pending
    /// batches have higher sequences than every indexed object, so every
    /// acknowledged id at or below it is durable.
    fn durable_id(&self, region: RegionId) -> EntryId {
        self.durable_ids.get(&region).copied().unwrap_or(0)
    }

    pub(super) fn on_wait_durable(&mut self, region: RegionId, id: EntryId, reply: Reply<()>) {
        if let Some(e) = &self.poisoned {
            let _ = reply.send(Err(e.clone()));
            return;
        }
        if let Err(e) = check_region(region) {
            let _ = reply.send(Err(e));
            return;
        }
        let sequence = format::sequence_of(id);
        if id == 0 || id <= self.durable_id(region) {
            let _ = reply.send(Ok(()));
            return;
        }
        if let Some(sealed) = self.pipeline.iter_mut().find(|s| s.sequence == sequence) {
            sealed.waiters.push(Waiter::Durable { reply });
            return;
        }
        if let Some(open) = self.open.as_mut().filter(|o| o.batch.sequence == sequence) {
            open.waiters.push(Waiter::Durable { reply });
            return;
        }
        let error = if id <= self.assigned.get(&region).copied().unwrap_or(0) {
            match self.lost.reason.as_deref() {
                Some(reason) => Error::Lost {
                    entries: self.lost.entries,
                    bytes: self.lost.bytes,
                    releases: self.lost.releases,
                    reason: reason.into(),
                },
                None => Error::NotDurable {
                    reason: format!(
                        "entry {id} of region {region} is not durable: its batch failed"
                    )
                    .into(),
                },
            }
        } else if self.released.contains_key(&region) {
            // Released regions: everything through the release is settled.
            let _ = reply.send(Ok(()));
            return;
        } else {
            Error::invalid(format!("entry {id} of region {region} was never assigned"))
        };
        let _ = reply.send(Err(error));
    }

    pub(super) fn on_segments(
        &self,
        region: RegionId,
        from: EntryId,
        limit: usize,
    ) -> Result<SegmentPage, Error> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        check_region(region)?;
        let watermark = self
            .watermarks
            .get(&region)
            .copied()
            .unwrap_or(0)
            .max(self.released.get(&region).copied().unwrap_or(0));
        let from = from.max(watermark.saturating_add(1));
        Ok(SegmentPage {
            segments: self.catalog.segments_from(region, from, limit),
            watermark,
        })
    }

    /// Releases `region` through the largest id ever handed out for it: the
    /// record is sealed into an object at once, and the reply waits until
    /// that object is durable and indexed (in both ack modes).
    pub(super) fn on_release(&mut self, region: RegionId, reply: Reply<()>) {
        if let Some(e) = self.refusal() {
            let e = match e {
                Error::Poisoned { reason } => Error::Poisoned {
                    reason: format!("{reason} (the release of region {region} was not kept)")
                        .into(),
                },
                _ => Error::Stopped {
                    detail: Some(
                        format!(
                            "a stopped store keeps no release; region {region} was not released"
                        )
                        .into(),
                    ),
                },
            };
            let _ = reply.send(Err(e));
            return;
        }
        if let Err(e) = check_region(region) {
            let _ = reply.send(Err(e));
            return;
        }
        let through = self
            .assigned
            .get(&region)
            .copied()
            .unwrap_or(0)
            .max(self.released.get(&region).copied().unwrap_or(0))
            .max(self.catalog.last_id(region));
        self.released.insert(region, through);
        let watermark = self.watermarks.entry(region).or_insert(0);
        *watermark = (*watermark).max(through);
        if let Some(failing) = self.failing.clone() {
            // Kept coalesced (one record per region), sealed on the first
            // tick after a create succeeds.
            self.metrics.rejected_appends.increment(1);
            self.keep_releases([(region, through)]);
            let _ = reply.send(Err(Error::Failing {
                reason: format!(
                    "{}; the release of region {region} is kept and sealed once a create succeeds",
                    failing.reason
                )
                .into(),
            }));
            return;
        }
        let kept = std::mem::take(&mut self.kept_releases);
        self.kept_deadline = None;
        match self.open_batch(Instant::now()) {
            Ok(open) => {
                open.batch.add_releases(kept);
                open.batch.add_releases([(region, through)]);
                open.waiters.push(Waiter::Release { reply });
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        }
        self.seal(SealReason::Requested);
    }
}
