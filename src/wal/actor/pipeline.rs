//! The upload pipeline: sealed batches in sequence order, the creates in
//! flight, and the reach that bounds where a create may go.
//!
//! Invariants:
//! - batches are held in strictly increasing sequence order and leave only
//!   from the front (indexed) or all together (failed);
//! - creates start in sequence order, at most `max_inflight_creates` at once,
//!   and never beyond reach (rule W5 of [`super::super::reach`]);
//! - `present` is the highest sequence at which an object is known to exist
//!   (a durable batch, a landed marker, a late object seen); a fence probe
//!   that starts with it and misses every newer fence verifies it.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::format::Tail;
use crate::{EntryId, RegionId};

use super::super::create::CreateOutcome;
use super::super::reach::{self, Reach};
use super::Waiter;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlightState {
    /// Sealed, waiting for a create slot, for reach, or for a retry delay.
    Waiting,
    /// Its create is running.
    Running,
    /// Durable, waiting for a probe and for earlier batches to be indexed.
    Durable,
}

/// A sealed batch in the pipeline.
pub(super) struct Sealed {
    pub(super) sequence: u64,
    pub(super) bytes: Bytes,
    pub(super) tail: Tail,
    pub(super) waiters: Vec<Waiter>,
    pub(super) opened_at: Instant,
    pub(super) sealed_at: Instant,
    pub(super) entries: u64,
    pub(super) payload_bytes: u64,
    pub(super) last_ids: Vec<(RegionId, EntryId)>,
    pub(super) releases: BTreeMap<RegionId, EntryId>,
    pub(super) state: FlightState,
    pub(super) abort: Option<AbortHandle>,
}

impl Sealed {
    pub(super) fn fail_waiters(&mut self, error: &crate::Error) {
        for waiter in self.waiters.drain(..) {
            waiter.fail(error.clone());
        }
    }

    /// The largest id of `region` in this batch.
    pub(super) fn last_id(&self, region: RegionId) -> Option<EntryId> {
        self.last_ids
            .iter()
            .find(|(r, _)| *r == region)
            .map(|(_, id)| *id)
    }
}

/// What a create was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CreateKind {
    /// A sealed batch.
    Batch,
    /// A marker: an empty object that proves a sequence present.
    Marker,
}

/// A finished create.
pub(super) type CreateDone = (u64, CreateKind, CreateOutcome);

/// The sealed batches and their creates.
pub(super) struct Pipeline {
    batches: VecDeque<Sealed>,
    running: usize,
    /// Batches waiting for their create, payload bytes, entries and release
    /// records of all batches: kept as counts so that what the actor asks
    /// after every event does not scale with a large enqueued backlog.
    waiting: usize,
    payload: u64,
    entries: u64,
    with_releases: usize,
    reach: Reach,
    present: u64,
    marker: Option<(u64, AbortHandle)>,
    pub(super) creates: FuturesUnordered<JoinHandle<CreateDone>>,
}

impl Pipeline {
    /// An empty pipeline of a process whose `reach` is known.
    pub(super) fn new(reach: Reach) -> Self {
        Pipeline {
            batches: VecDeque::new(),
            running: 0,
            waiting: 0,
            payload: 0,
            entries: 0,
            with_releases: 0,
            present: reach.verified(),
            reach,
            marker: None,
            creates: FuturesUnordered::new(),
        }
    }

    pub(super) fn push(&mut self, sealed: Sealed) {
        debug_assert!(self
            .batches
            .back()
            .is_none_or(|b| b.sequence < sealed.sequence));
        self.count(&sealed, 1);
        self.batches.push_back(sealed);
    }

    /// Adds (`sign` 1) or removes (-1) a batch from the counts.
    fn count(&mut self, b: &Sealed, sign: i8) {
        let add = sign > 0;
        let apply = |v: &mut u64, by: u64| {
            *v = if add { *v + by } else { v.saturating_sub(by) };
        };
        apply(&mut self.payload, b.payload_bytes);
        apply(&mut self.entries, b.entries);
        let flag = |v: &mut usize, on: bool| {
            if on {
                *v = if add { *v + 1 } else { v.saturating_sub(1) };
            }
        };
        flag(&mut self.waiting, b.state == FlightState::Waiting);
        flag(&mut self.with_releases, !b.releases.is_empty());
    }

    /// Moves a batch to `state` (keeping the counts).
    pub(super) fn set_state(&mut self, sequence: u64, state: FlightState) {
        let Some(b) = self.batches.iter_mut().find(|b| b.sequence == sequence) else {
            return;
        };
        let was_waiting = b.state == FlightState::Waiting;
        b.state = state;
        match (was_waiting, state == FlightState::Waiting) {
            (true, false) => self.waiting = self.waiting.saturating_sub(1),
            (false, true) => self.waiting += 1,
            _ => {}
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    pub(super) fn front(&self) -> Option<&Sealed> {
        self.batches.front()
    }

    pub(super) fn back(&self) -> Option<&Sealed> {
        self.batches.back()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Sealed> {
        self.batches.iter_mut()
    }

    pub(super) fn get_mut(&mut self, sequence: u64) -> Option<&mut Sealed> {
        self.batches.iter_mut().find(|b| b.sequence == sequence)
    }

    /// Creates running (batches and the marker).
    pub(super) fn running(&self) -> usize {
        self.running + usize::from(self.marker.is_some())
    }

    pub(super) fn reach(&self) -> &Reach {
        &self.reach
    }

    /// The highest sequence known present.
    pub(super) fn present(&self) -> u64 {
        self.present
    }

    /// An object is known to exist at `sequence`.
    pub(super) fn saw_present(&mut self, sequence: u64) {
        self.present = self.present.max(sequence);
    }

    /// A probe that started with `present` missed every newer fence.
    pub(super) fn verify(&mut self, present: u64) {
        self.reach.verify(present);
    }

    /// Whether a batch waits for its create.
    pub(super) fn has_waiting(&self) -> bool {
        debug_assert_eq!(
            self.waiting,
            self.batches
                .iter()
                .filter(|b| b.state == FlightState::Waiting)
                .count()
        );
        self.waiting > 0
    }

    /// Whether a new batch at `sequence` could start its create at once:
    /// nothing waits before it, a slot is free, and it is within reach.
    pub(super) fn could_start(&self, sequence: u64, max_inflight: usize) -> bool {
        !self.has_waiting() && self.running() < max_inflight && self.reach.allows(sequence)
    }

    /// The next batch whose create may start now, if any (creates start in
    /// sequence order, within the slots and within reach).
    pub(super) fn next_startable(&mut self, max_inflight: usize) -> Option<&mut Sealed> {
        if self.running() >= max_inflight {
            return None;
        }
        let reach = self.reach;
        self.batches
            .iter_mut()
            .find(|b| b.state == FlightState::Waiting)
            .filter(|b| reach.allows(b.sequence))
    }

    /// Starts a create task: `sequence` must be a waiting batch (or, for a
    /// marker, the sequence [`Pipeline::marker_needed`] named).
    pub(super) fn start(
        &mut self,
        sequence: u64,
        kind: CreateKind,
        task: impl Future<Output = CreateDone> + Send + 'static,
    ) {
        let handle = tokio::spawn(task);
        let abort = handle.abort_handle();
        match kind {
            CreateKind::Batch => {
                self.set_state(sequence, FlightState::Running);
                if let Some(b) = self.get_mut(sequence) {
                    b.abort = Some(abort);
                }
                self.running += 1;
            }
            CreateKind::Marker => self.marker = Some((sequence, abort)),
        }
        self.creates.push(handle);
    }

    /// A batch create finished: `None` when the batch is no longer running
    /// (it failed with the pipeline; a late completion is an orphan).
    pub(super) fn finished(&mut self, sequence: u64) -> Option<&mut Sealed> {
        let batch = self
            .batches
            .iter_mut()
            .find(|b| b.sequence == sequence && b.state == FlightState::Running)?;
        self.running = self.running.saturating_sub(1);
        batch.abort = None;
        Some(batch)
    }

    /// The marker create finished.
    pub(super) fn marker_finished(&mut self, sequence: u64) -> bool {
        if self.marker.as_ref().is_some_and(|(s, _)| *s == sequence) {
            self.marker = None;
            return true;
        }
        false
    }

    /// Where a marker must land before the first waiting batch can start: its
    /// sequence is beyond reach, nothing running or durable-but-unprobed can
    /// raise the verified sequence, and no marker is in flight.
    pub(super) fn marker_needed(&self, probing: bool) -> Option<u64> {
        if self.marker.is_some() || self.running > 0 || probing {
            return None;
        }
        if self.present > self.reach.verified() {
            return None; // a probe will verify what is present
        }
        let first = self
            .batches
            .iter()
            .find(|b| b.state == FlightState::Waiting)?;
        reach::marker_sequence(&self.reach, first.sequence)
    }

    /// The last sequence of the durable batches at the front, if any.
    pub(super) fn durable_prefix_end(&self) -> Option<u64> {
        self.batches
            .iter()
            .take_while(|b| b.state == FlightState::Durable)
            .last()
            .map(|b| b.sequence)
    }

    /// Takes the front batch if it is durable and at or below `covers`.
    pub(super) fn pop_indexable(&mut self, covers: u64) -> Option<Sealed> {
        if self
            .batches
            .front()
            .is_some_and(|b| b.state == FlightState::Durable && b.sequence <= covers)
        {
            let b = self.batches.pop_front()?;
            self.count(&b, -1);
            return Some(b);
        }
        None
    }

    /// Takes every batch out (a failed pipeline, or a loss); their sequences
    /// stay used, and creates still running finish as orphans.
    pub(super) fn drain(&mut self) -> Vec<Sealed> {
        self.running = 0;
        self.waiting = 0;
        self.payload = 0;
        self.entries = 0;
        self.with_releases = 0;
        self.batches.drain(..).collect()
    }

    /// Aborts every create in flight (the actor ends).
    pub(super) fn abort_all(&mut self) {
        for b in &self.batches {
            if let Some(abort) = &b.abort {
                abort.abort();
            }
        }
        if let Some((_, abort)) = &self.marker {
            abort.abort();
        }
    }

    /// Payload bytes of the sealed batches.
    pub(super) fn payload_bytes(&self) -> u64 {
        self.payload
    }

    /// Entries of the sealed batches.
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }

    /// Release records sealed in batches at or below `sequence`, by region.
    pub(super) fn releases_through(&self, sequence: u64) -> BTreeMap<RegionId, EntryId> {
        let mut out = BTreeMap::new();
        if self.with_releases == 0 {
            return out;
        }
        for b in self.batches.iter().take_while(|b| b.sequence <= sequence) {
            for (region, through) in &b.releases {
                let slot = out.entry(*region).or_insert(0);
                *slot = (*slot).max(*through);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{self, Header, Object, TailDecode};

    fn sealed(sequence: u64) -> Sealed {
        let object = Object {
            header: Header {
                sequence,
                epoch: 2,
                link: None,
                reclaim_boundary: 0,
            },
            segments: Vec::new(),
            releases: Vec::new(),
        };
        let bytes = format::encode(&object).unwrap();
        let TailDecode::Complete(tail) = format::decode_tail(&bytes, bytes.len() as u64).unwrap()
        else {
            panic!("a whole object has a complete tail")
        };
        Sealed {
            sequence,
            bytes,
            tail,
            waiters: Vec::new(),
            opened_at: Instant::now(),
            sealed_at: Instant::now(),
            entries: 1,
            payload_bytes: 10,
            last_ids: vec![(1, format::entry_id(sequence, 1))],
            releases: BTreeMap::new(),
            state: FlightState::Waiting,
            abort: None,
        }
    }

    async fn done(sequence: u64) -> CreateDone {
        (sequence, CreateKind::Batch, CreateOutcome::Durable)
    }

    #[tokio::test]
    async fn creates_start_in_order_within_slots_and_reach() {
        let mut p = Pipeline::new(Reach::new(2, 100));
        for s in [101, 102, 103, 100 + reach::GAP + 1] {
            p.push(sealed(s));
        }
        assert!(!p.could_start(200, 2), "batches wait");
        let first = p.next_startable(2).map(|b| b.sequence);
        assert_eq!(first, Some(101));
        p.start(101, CreateKind::Batch, done(101));
        p.start(102, CreateKind::Batch, done(102));
        assert!(p.next_startable(2).is_none(), "both slots busy");
        assert_eq!(p.next_startable(3).map(|b| b.sequence), Some(103));
        p.start(103, CreateKind::Batch, done(103));
        assert!(
            p.next_startable(8).is_none(),
            "the last batch is beyond reach"
        );
        assert_eq!(
            p.marker_needed(false),
            None,
            "creates running may verify more"
        );
        p.finished(101);
        p.set_state(101, FlightState::Durable);
        assert_eq!(p.durable_prefix_end(), Some(101));
        p.saw_present(101);
        p.verify(101);
        assert_eq!(
            p.next_startable(8).map(|b| b.sequence),
            Some(100 + reach::GAP + 1)
        );
    }

    #[test]
    fn a_marker_is_needed_only_when_nothing_can_verify_more() {
        let mut p = Pipeline::new(Reach::new(2, 10));
        p.push(sealed(10 + 3 * reach::GAP));
        assert_eq!(p.marker_needed(true), None, "a probe is in flight");
        assert_eq!(p.marker_needed(false), Some(10 + 3 * reach::GAP - 1));
        p.saw_present(12);
        assert_eq!(p.marker_needed(false), None, "a probe would verify 12");
    }

    #[test]
    fn indexing_takes_durable_batches_from_the_front_only() {
        let mut p = Pipeline::new(Reach::new(1, 0));
        p.push(sealed(1));
        p.push(sealed(2));
        p.set_state(2, FlightState::Durable);
        assert_eq!(p.durable_prefix_end(), None);
        assert!(p.pop_indexable(2).is_none());
        p.set_state(1, FlightState::Durable);
        assert_eq!(p.durable_prefix_end(), Some(2));
        assert_eq!(p.pop_indexable(1).map(|b| b.sequence), Some(1));
        assert!(p.pop_indexable(1).is_none(), "2 is above what was covered");
        let mut r = sealed(3);
        r.releases.insert(7, 99);
        p.push(r);
        assert_eq!(p.releases_through(2).len(), 0);
        assert_eq!(p.releases_through(3).get(&7), Some(&99));
        assert_eq!((p.entries(), p.payload_bytes()), (2, 20));
        assert_eq!(p.drain().len(), 2);
        assert!(p.is_empty());
    }
}
