//! Requests that admit or look: append (with the backlog bounds of enqueued
//! mode), obsolete, wait_durable, release, flush and the read path's pages.

use bytes::Bytes;
use tokio::time::Instant;

use crate::config::AckMode;
use crate::error::Error;
use crate::format::{self, MAX_POSITION};
use crate::{EntryId, RegionId};

use super::super::batch::{positions_needed, OpenBatch};
use super::super::policy::SealReason;
use super::{check_region, Actor, Open, Reply, Stalled, Waiter, MAX_APPEND_BYTES};
use crate::wal::read::source::SegmentPage;

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
        if let Some(failing) = &self.backlog.failing {
            self.metrics.rejected_appends.increment(1);
            let _ = reply.send(Err(Error::Failing {
                reason: failing.reason.clone(),
            }));
            return;
        }
        if self.config.ack_mode == AckMode::Enqueued
            && (!self.backlog.stalled.is_empty() || self.backlog_is_full())
        {
            self.metrics.stalled_appends.increment(1);
            self.backlog.stalled.push_back(Stalled {
                entries,
                arrived,
                reply,
            });
            self.make_progress();
            return;
        }
        self.admit(entries, arrived, reply);
    }

    fn check_append(&self, entries: &[(RegionId, Bytes)]) -> Result<(), Error> {
        let mut total: u64 = 0;
        for (region, data) in entries {
            check_region(*region)?;
            if self.regions.is_released(*region) {
                return Err(Error::RegionReleased { region: *region });
            }
            total = total.saturating_add(data.len() as u64);
        }
        if total > MAX_APPEND_BYTES {
            return Err(Error::invalid(format!(
                "an append of {total} bytes exceeds the limit of {MAX_APPEND_BYTES} bytes"
            )));
        }
        if entries.len() as u64 > MAX_POSITION {
            if let Some((region, n)) = positions_needed(entries)
                .into_iter()
                .find(|(_, n)| *n > MAX_POSITION)
            {
                return Err(Error::invalid(format!(
                    "an append of {n} entries to region {region} exceeds the {MAX_POSITION} positions of one object"
                )));
            }
        }
        Ok(())
    }

    /// Admits a checked append into the open batch and acknowledges it (now in
    /// enqueued mode, once indexed in durable mode). The batch is sealed
    /// first when the append would take it past `max_batch_bytes` or past a
    /// region's positions.
    fn admit(
        &mut self,
        entries: Vec<(RegionId, Bytes)>,
        arrived: Instant,
        reply: Reply<Vec<EntryId>>,
    ) {
        if let Some(open) = &self.open {
            let growth = open.batch.encoded_growth(&entries);
            if self.policy.seal_before(open.batch.encoded_bytes(), growth) {
                self.seal(SealReason::Full);
            } else if !open.batch.has_positions_for(&entries) {
                self.seal(SealReason::Positions);
            }
        }
        let mode = self.config.ack_mode;
        let count = entries.len() as u64;
        let open = match self.open_batch(Instant::now()) {
            Ok(open) => open,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let (ids, acked) = open.batch.admit(entries);
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
        self.ledger.admit(count);
        for (region, id) in acked {
            self.regions.assign(region, id);
        }
    }

    /// The open batch, opened at the next sequence (at `now`) if there is none.
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
                gathered: false,
            });
            self.next_sequence += 1;
        }
        self.open
            .as_mut()
            .ok_or_else(|| Error::invalid("no open batch"))
    }

    /// Whether the enqueued backlog has reached a bound. Ages count from
    /// admission (a batch opens when its first entry is admitted), so a
    /// drain after a stall is not "too old" at once.
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
        if self.pipeline.running() == 0 && self.backlog.failing.is_none() {
            self.seal(SealReason::Requested);
        }
    }

    /// Admits held-back appends, in arrival order, while the bounds allow;
    /// they share batches as the size limit allows.
    pub(super) fn admit_stalled(&mut self) {
        while self.backlog.failing.is_none() && self.refusal().is_none() && !self.backlog_is_full()
        {
            let Some(stalled) = self.backlog.stalled.pop_front() else {
                return;
            };
            self.metrics
                .stall
                .record(stalled.arrived.elapsed().as_secs_f64());
            self.admit(stalled.entries, stalled.arrived, stalled.reply);
        }
        if !self.backlog.stalled.is_empty() {
            self.make_progress();
        }
    }

    /// Fails every held-back append with `error`.
    pub(super) fn fail_stalled(&mut self, error: &Error) {
        for stalled in self.backlog.stalled.drain(..) {
            let _ = stalled.reply.send(Err(error.clone()));
        }
    }

    pub(super) fn on_obsolete(&mut self, region: RegionId, id: EntryId) -> Result<(), Error> {
        self.mark_obsolete(region, id, true)
    }

    /// A flush mark of `region` through `id`; in enqueued mode clamped to
    /// the region's durable id when `clamp` says so.
    fn mark_obsolete(&mut self, region: RegionId, id: EntryId, clamp: bool) -> Result<(), Error> {
        if let Some(e) = self.refusal() {
            return Err(e);
        }
        check_region(region)?;
        if format::sequence_of(id) >= format::MAX_SEQUENCE {
            return Err(Error::invalid(format!(
                "entry id {id} is beyond the last usable sequence"
            )));
        }
        // Enqueued mode: never hide an entry that is not durable yet, so a
        // crash cannot lose an entry the engine believes flushed.
        let mark = match self.config.ack_mode {
            AckMode::Durable => id,
            AckMode::Enqueued if !clamp => id,
            AckMode::Enqueued if self.is_durable(region, id) => id,
            AckMode::Enqueued => {
                let durable = self.regions.durable(region);
                tracing::debug!(region, id, durable, "watermark clamped to the durable id");
                id.min(durable)
            }
        };
        if mark > self.catalog.watermark(region) {
            // Rides with the next object (rfcs/0005, "Flush marks").
            let slot = self.marks.entry(region).or_insert(mark);
            *slot = (*slot).max(mark);
        }
        self.catalog.set_watermark(region, mark);
        // New ids must never fall at or below a watermark handed in (from
        // a previous life of the store, or another log's, as an import
        // does): ids admitted from now on lie above it. The next id of the
        // region is in the open batch when there is one: a watermark in the
        // open batch's own sequence, above the region's positions there,
        // needs the jump too (the model test found an import whose first id
        // was its floor).
        let next_id = match self.open.as_ref() {
            Some(open) => open
                .batch
                .last_id(region)
                .map_or(format::entry_id(open.batch.sequence, 1), |last| last + 1),
            None => format::entry_id(self.next_sequence, 1),
        };
        if next_id <= id {
            self.jump(id)?;
        }
        self.arm_collect();
        Ok(())
    }

    /// An import's floor (`handoff.rs`): `floor` raised to every id this
    /// log handed out for `region`, then marked obsolete. The ids of a
    /// failed import count, also those of a batch answered as failed while
    /// its create was still on its way: it may land after all, and its
    /// copies must lie at or below the floor of the import that is repeated
    /// (the model test found such a copy read in the imported entry's
    /// place after a reopen). Answered here, not from the acknowledged ids
    /// a handle sees, so that no append comes between. Never clamped to the
    /// durable id in enqueued mode: nothing at or below the floor is the
    /// region's history here, so hiding it loses nothing the engine
    /// believes flushed (the model test, seed 1981710169334720340, found a
    /// clamped floor letting an entry the engine appended before the import
    /// replay after a reopen, below the floor the import answered).
    pub(super) fn on_raise_floor(
        &mut self,
        region: RegionId,
        floor: EntryId,
    ) -> Result<EntryId, Error> {
        let floor = floor.max(self.regions.assigned(region));
        if floor > 0 {
            self.mark_obsolete(region, floor, false)?;
        } else if let Some(e) = self.refusal() {
            return Err(e);
        }
        Ok(floor)
    }

    /// Moves the run above `id`: the open batch (or a new, empty one) carries
    /// the jump record and is sealed now, and the next batch opens at the
    /// sequence above `id`, so nothing admitted after this call gets an id at
    /// or below it (rfcs/0006, "Runs": a newer process's walk follows the
    /// jump; the batch after it starts only once the jump is indexed).
    fn jump(&mut self, id: EntryId) -> Result<(), Error> {
        let open = self.open_batch(Instant::now())?;
        open.batch.jump = Some(open.batch.jump.map_or(id, |j| j.max(id)));
        self.seal(SealReason::Requested);
        self.next_sequence = self.next_sequence.max(format::sequence_of(id) + 1);
        Ok(())
    }

    /// Whether entry `id` of `region` is durable (or was, and collection
    /// deleted it): every id at or below the region's durable id, and every
    /// id in an object below the first one indexed. Pending batches have
    /// higher sequences than every indexed object.
    fn is_durable(&self, region: RegionId, id: EntryId) -> bool {
        id <= self.regions.durable(region) || format::sequence_of(id) < self.settled_below()
    }

    /// Below this sequence every object was collected (or never held a live
    /// entry): the first indexed object (collection removes objects from the
    /// catalog before it deletes them, and recovery indexes from the boundary).
    fn settled_below(&self) -> u64 {
        self.catalog.objects().next().map_or(0, |o| o.sequence)
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
        if id == 0 {
            let _ = reply.send(Ok(()));
            return;
        }
        let sequence = format::sequence_of(id);
        let never = || {
            Error::invalid(format!(
                "entry {} of region {region} was never handed out",
                crate::id::Dotted(id)
            ))
        };
        // A barrier on an entry not yet durable, once the store has failed
        // for `max_unpersisted_age`: retryable at once, as `flush`.
        let failing = self.barrier_refusal();
        if let Some(open) = self.open.as_mut().filter(|o| o.batch.sequence == sequence) {
            if open.batch.last_id(region).is_some_and(|last| id <= last) {
                match failing {
                    Some(e) => {
                        let _ = reply.send(Err(e));
                    }
                    None => open.waiters.push(Waiter::Durable { reply }),
                }
            } else {
                let _ = reply.send(Err(never()));
            }
            return;
        }
        if let Some(sealed) = self.pipeline.get_mut(sequence) {
            if sealed.last_id(region).is_none_or(|last| id > last) {
                let _ = reply.send(Err(never()));
            } else if sealed.answered {
                let _ = reply.send(Err(Error::NotDurable {
                    reason: format!(
                        "entry {} of region {region} is not durable: its batch failed",
                        crate::id::Dotted(id)
                    )
                    .into(),
                }));
            } else if let Some(e) = failing {
                let _ = reply.send(Err(e));
            } else {
                sealed.waiters.push(Waiter::Durable { reply });
            }
            return;
        }
        if let Some(object) = self.catalog.object(sequence) {
            let held = object
                .segments
                .iter()
                .any(|s| s.region == region && s.first_id <= id && id <= s.last_id);
            let _ = reply.send(if held { Ok(()) } else { Err(never()) });
            return;
        }
        if sequence < self.settled_below() {
            // Collected (durable, then deleted), or obsolete: settled.
            let _ = reply.send(Ok(()));
            return;
        }
        let answer = if self.failed.contains(&sequence) {
            Err(match self.ledger.reason() {
                Some(_) if self.ledger.has_loss() => self.ledger.lost_error(),
                _ => Error::NotDurable {
                    reason: format!(
                        "entry {} of region {region} is not durable: its batch failed",
                        crate::id::Dotted(id)
                    )
                    .into(),
                },
            })
        } else if self.regions.is_released(region) && id <= self.regions.released_through(region) {
            Ok(())
        } else {
            Err(never())
        };
        let _ = reply.send(answer);
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
        let hidden = self.hidden_through(region);
        let from = from.max(hidden.saturating_add(1));
        Ok(SegmentPage {
            segments: self.catalog.segments_from(region, from, limit),
            watermark: hidden,
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
                Error::Stopped { .. } => Error::Stopped {
                    detail: Some(
                        format!(
                            "a stopped store keeps no release; region {region} was not released"
                        )
                        .into(),
                    ),
                },
                other => other,
            };
            let _ = reply.send(Err(e));
            return;
        }
        if let Err(e) = check_region(region) {
            let _ = reply.send(Err(e));
            return;
        }
        // Through every id ever handed out, those of damaged objects left
        // out of replay included.
        let handed_out = self
            .catalog
            .last_id(region)
            .max(self.shared.damage.last_id_held(region));
        let through = self.regions.release(region, handed_out);
        self.pins.released(region);
        if let Some(failing) = &self.backlog.failing {
            // Kept coalesced (one record per region), sealed on the first
            // tick after a create succeeds. The reclaim boundary does not
            // count it until its record is in an object.
            let reason = format!(
                "{}; the release of region {region} is kept and sealed once a create succeeds",
                failing.reason
            );
            self.metrics.rejected_appends.increment(1);
            self.keep_releases([(region, through)]);
            let _ = reply.send(Err(Error::Failing {
                reason: reason.into(),
            }));
            return;
        }
        let kept = std::mem::take(&mut self.kept.records);
        self.kept.deadline = None;
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

    /// Seals the open batch now and answers once everything admitted before
    /// this call is durable and indexed (the last batch's acknowledgement
    /// implies every earlier one's).
    pub(super) fn on_flush(&mut self, reply: Reply<()>) {
        if let Some(e) = self.refusal() {
            let _ = reply.send(Err(e));
            return;
        }
        // A store that has failed for `max_unpersisted_age` refuses
        // barriers at once (the model test's long outage found a flush that
        // waited as long as the store failed).
        if let Some(e) = self.barrier_refusal() {
            let _ = reply.send(Err(e));
            return;
        }
        // Flush marks handed in since the last seal are made durable too: an
        // engine that flushed, marked and flushed the log expects its marks
        // to survive a restart. With no entry waiting they ride in an object
        // of their own.
        if !self.marks.is_empty() {
            if let Err(e) = self.open_batch(Instant::now()) {
                let _ = reply.send(Err(e));
                return;
            }
        }
        let marks = !self.marks.is_empty();
        if let Some(open) = self.open.as_mut().filter(|o| marks || !o.batch.is_empty()) {
            open.waiters.push(Waiter::Durable { reply });
            self.seal(SealReason::Requested);
            return;
        }
        match self.pipeline.iter_mut().last() {
            Some(last) => last.waiters.push(Waiter::Durable { reply }),
            None => {
                let _ = reply.send(Ok(()));
            }
        }
    }
}
