//! The upload pipeline: the sealed batches of this writer's run in key
//! order, and the creates in flight.
//!
//! Invariants:
//! - batches are held in strictly increasing sequence order, each at the
//!   key after the one before in the run (rfcs/0006, "Runs"), and leave only
//!   from the front once landed (indexed), or all together (the backlog is
//!   given up);
//! - creates start in sequence order, at most `max_inflight_creates` at
//!   once, only for the first [`WINDOW`] batches, and never behind a batch
//!   that carries a jump (rule K3 of [`crate::wal::protocol::rules`]);
//! - a batch whose create failed in durable mode becomes its *void* (the
//!   same header, marks and releases without the entries) and stays in place
//!   until the void or the batch lands: its key is never abandoned (K1).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::format::{MarkRecord, Tail};
use crate::{EntryId, RegionId};

use super::Waiter;
use crate::wal::protocol::create::CreateOutcome;
use crate::wal::protocol::rules::WINDOW;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlightState {
    /// Sealed, waiting for a create slot, for the window, or for a retry.
    Waiting,
    /// Its create is running.
    Running,
    /// Landed (the batch or its void), waiting for earlier batches.
    Landed,
}

/// The void of a batch whose create failed: what lands at its key instead.
pub(super) struct Void {
    pub(super) bytes: Bytes,
    pub(super) tail: Tail,
}

/// A sealed batch in the pipeline.
pub(super) struct Sealed {
    pub(super) sequence: u64,
    /// The batch's bytes and tail.
    pub(super) bytes: Bytes,
    pub(super) tail: Tail,
    /// Set once the batch's create failed in durable mode: the key is
    /// settled by whichever of the void and the batch lands.
    pub(super) void: Option<Void>,
    /// Whether the void (not the batch) landed.
    pub(super) landed_void: bool,
    /// Whether a filler (an older epoch's empty object) settled its key:
    /// neither the batch nor its void can land there (rfcs/0006, "Fillers").
    pub(super) filler: bool,
    /// Its appends and barriers were answered with a failure (durable
    /// mode): its entries are counted failed, and if the batch itself lands
    /// after all, this life indexes it without its entries.
    pub(super) answered: bool,
    pub(super) waiters: Vec<Waiter>,
    pub(super) opened_at: Instant,
    pub(super) sealed_at: Instant,
    /// Entries and payload bytes still to be made durable (0 once voided).
    pub(super) entries: u64,
    pub(super) payload_bytes: u64,
    pub(super) last_ids: Vec<(RegionId, EntryId)>,
    pub(super) marks: Vec<MarkRecord>,
    pub(super) releases: BTreeMap<RegionId, EntryId>,
    /// It carries a jump: the next batch of the run waits until it is indexed.
    pub(super) jump: bool,
    pub(super) state: FlightState,
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

    /// Whether its void differs from the batch: a batch without entries
    /// (only flush marks, release records, a jump) is byte for byte its own
    /// void, so its key is settled by its own bytes and its landing is
    /// always the batch's (issue 29 item 4).
    fn has_distinct_void(&self) -> bool {
        self.void.is_some() && !self.last_ids.is_empty()
    }

    /// The byte strings of ours that may be at its key, the one to send
    /// first.
    pub(super) fn ours(&self) -> Vec<Bytes> {
        match &self.void {
            Some(void) if self.has_distinct_void() => {
                vec![void.bytes.clone(), self.bytes.clone()]
            }
            _ => vec![self.bytes.clone()],
        }
    }

    /// Records which of [`Sealed::ours`] landed.
    pub(super) fn landed(&mut self, which: usize) {
        self.landed_void = self.has_distinct_void() && which == 0;
    }
}

/// A finished create of the batch of a sequence.
#[derive(Debug)]
pub(super) struct CreateDone {
    pub(super) sequence: u64,
    pub(super) outcome: CreateOutcome,
    /// How long it took, when it landed with one request (for the hedger).
    pub(super) took: Option<std::time::Duration>,
}

/// The sealed batches and their creates.
pub(super) struct Pipeline {
    batches: VecDeque<Sealed>,
    running: usize,
    /// Batches waiting for their create, payload bytes, entries and
    /// batches with a jump: kept as counts so that
    /// what the actor asks after every event does not scale with a large
    /// enqueued backlog.
    waiting: usize,
    payload: u64,
    entries: u64,
    jumps: usize,
    pub(super) creates: FuturesUnordered<JoinHandle<CreateDone>>,
}

impl Pipeline {
    pub(super) fn new() -> Self {
        Pipeline {
            batches: VecDeque::new(),
            running: 0,
            waiting: 0,
            payload: 0,
            entries: 0,
            jumps: 0,
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
        flag(&mut self.jumps, b.jump);
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

    /// Settles the key of the batch of `sequence` with its void from now on
    /// (its creates send the void; either may land): it waits for a create
    /// again.
    pub(super) fn void(&mut self, sequence: u64, void: Void) {
        if let Some(b) = self.get_mut(sequence) {
            b.void = Some(void);
        }
        self.set_state(sequence, FlightState::Waiting);
    }

    /// The callers of the batch of `sequence` were answered with a failure:
    /// its entries leave the backlog; returns how many (0 when they had
    /// left already).
    pub(super) fn answered(&mut self, sequence: u64) -> u64 {
        let Some(b) = self.batches.iter_mut().find(|b| b.sequence == sequence) else {
            return 0;
        };
        if b.answered {
            return 0;
        }
        b.answered = true;
        let (entries, payload) = (b.entries, b.payload_bytes);
        b.entries = 0;
        b.payload_bytes = 0;
        self.entries = self.entries.saturating_sub(entries);
        self.payload = self.payload.saturating_sub(payload);
        entries
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

    pub(super) fn iter(&self) -> impl Iterator<Item = &Sealed> {
        self.batches.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Sealed> {
        self.batches.iter_mut()
    }

    pub(super) fn get_mut(&mut self, sequence: u64) -> Option<&mut Sealed> {
        self.batches.iter_mut().find(|b| b.sequence == sequence)
    }

    /// Creates running.
    pub(super) fn running(&self) -> usize {
        self.running
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

    /// Whether a new batch pushed now could start its create at once:
    /// nothing waits before it, a slot is free, and it is within the window
    /// (no jump before it, fewer than [`WINDOW`] batches ahead).
    pub(super) fn could_start(&self, max_inflight: usize) -> bool {
        !self.has_waiting()
            && self.running < max_inflight
            && self.jumps == 0
            && (self.batches.len() as u64) < WINDOW
    }

    /// The next batch whose create may start now, if any: the first waiting
    /// one, within the slots and the window (rule K3).
    pub(super) fn next_startable(&mut self, max_inflight: usize) -> Option<&mut Sealed> {
        if self.running >= max_inflight || self.waiting == 0 {
            return None;
        }
        let mut jump_before = false;
        for (i, b) in self.batches.iter_mut().enumerate() {
            if i as u64 >= WINDOW || jump_before {
                return None;
            }
            if b.state == FlightState::Waiting {
                return Some(b);
            }
            jump_before = b.jump;
        }
        None
    }

    /// Starts a create task for the waiting batch of `sequence`.
    pub(super) fn start(
        &mut self,
        sequence: u64,
        task: impl Future<Output = CreateDone> + Send + 'static,
    ) {
        let handle = tokio::spawn(task);
        self.set_state(sequence, FlightState::Running);
        self.running += 1;
        self.creates.push(handle);
    }

    /// A create finished: `None` when the batch is no longer running (the
    /// backlog was given up; a late completion is an orphan).
    pub(super) fn finished(&mut self, sequence: u64) -> Option<&mut Sealed> {
        let batch = self
            .batches
            .iter_mut()
            .find(|b| b.sequence == sequence && b.state == FlightState::Running)?;
        self.running = self.running.saturating_sub(1);
        Some(batch)
    }

    /// Takes the front batch if it landed.
    pub(super) fn pop_landed(&mut self) -> Option<Sealed> {
        if self
            .batches
            .front()
            .is_some_and(|b| b.state == FlightState::Landed)
        {
            let b = self.batches.pop_front()?;
            self.count(&b, -1);
            return Some(b);
        }
        None
    }

    /// Takes every batch out (the backlog is given up); creates still
    /// running finish as orphans, and their keys are settled by the next
    /// process that opens the prefix.
    pub(super) fn drain(&mut self) -> Vec<Sealed> {
        self.running = 0;
        self.waiting = 0;
        self.payload = 0;
        self.entries = 0;
        self.jumps = 0;
        self.batches.drain(..).collect()
    }

    /// Aborts every create in flight (the actor ends), also those of
    /// batches given up earlier: a crashed store creates nothing more (the
    /// model test found a given-up batch's create still running after
    /// every handle was dropped).
    pub(super) fn abort_all(&mut self) {
        for create in self.creates.iter() {
            create.abort();
        }
    }

    /// Payload bytes of the sealed batches not voided.
    pub(super) fn payload_bytes(&self) -> u64 {
        self.payload
    }

    /// Entries of the sealed batches not voided.
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{self, Header, Object, TailDecode};

    fn sealed(sequence: u64, jump: bool) -> Sealed {
        let object = Object {
            header: Header {
                sequence,
                epoch: 2,
                link: None,
                reclaim_boundary: 0,
            },
            segments: Vec::new(),
            marks: Vec::new(),
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
            void: None,
            landed_void: false,
            filler: false,
            answered: false,
            waiters: Vec::new(),
            opened_at: Instant::now(),
            sealed_at: Instant::now(),
            entries: 1,
            payload_bytes: 10,
            last_ids: vec![(1, format::entry_id(sequence, 1))],
            marks: Vec::new(),
            releases: BTreeMap::new(),
            jump,
            state: FlightState::Waiting,
        }
    }

    async fn done(sequence: u64) -> CreateDone {
        CreateDone {
            sequence,
            outcome: CreateOutcome::Landed(0),
            took: None,
        }
    }

    #[tokio::test]
    async fn creates_start_in_order_within_the_slots() {
        let mut p = Pipeline::new();
        for s in [101, 102, 103] {
            p.push(sealed(s, false));
        }
        assert!(!p.could_start(8), "batches wait");
        assert_eq!(p.next_startable(2).map(|b| b.sequence), Some(101));
        p.start(101, done(101));
        p.start(102, done(102));
        assert!(p.next_startable(2).is_none(), "both slots busy");
        assert_eq!(p.next_startable(3).map(|b| b.sequence), Some(103));
    }

    #[tokio::test]
    async fn nothing_starts_behind_a_jump_until_it_is_indexed() {
        let mut p = Pipeline::new();
        p.push(sealed(5, true));
        p.push(sealed(900, false));
        assert!(!p.could_start(8));
        p.start(5, done(5));
        assert!(p.next_startable(8).is_none(), "900 waits for the jump");
        p.finished(5);
        p.set_state(5, FlightState::Landed);
        assert!(p.next_startable(8).is_none(), "landed is not indexed");
        assert_eq!(p.pop_landed().map(|b| b.sequence), Some(5));
        assert_eq!(p.next_startable(8).map(|b| b.sequence), Some(900));
    }

    #[tokio::test]
    async fn nothing_starts_beyond_the_window() {
        let mut p = Pipeline::new();
        for s in 1..=WINDOW + 1 {
            p.push(sealed(s, false));
        }
        for s in 2..=WINDOW {
            p.start(s, done(s));
            p.finished(s);
            p.set_state(s, FlightState::Landed);
        }
        // 1 waits (a retry), 2..=64 landed: 65 is beyond the window.
        assert_eq!(p.next_startable(100).map(|b| b.sequence), Some(1));
        p.start(1, done(1));
        assert!(p.next_startable(100).is_none());
        p.finished(1);
        p.set_state(1, FlightState::Landed);
        assert_eq!(p.pop_landed().map(|b| b.sequence), Some(1));
        assert_eq!(p.next_startable(100).map(|b| b.sequence), Some(WINDOW + 1));
    }

    #[test]
    fn a_void_keeps_its_key_and_answered_entries_leave_the_backlog() {
        let mut p = Pipeline::new();
        p.push(sealed(1, false));
        let mut r = sealed(2, false);
        r.releases.insert(7, 99);
        p.push(r);
        assert_eq!((p.entries(), p.payload_bytes()), (2, 20));
        let v = sealed(2, false);
        p.void(
            2,
            Void {
                bytes: v.bytes,
                tail: v.tail,
            },
        );
        assert_eq!(p.entries(), 2, "its callers still wait");
        assert_eq!(p.answered(2), 1);
        assert_eq!(p.answered(2), 0, "answered once");
        assert_eq!((p.entries(), p.payload_bytes()), (1, 10));
        assert_eq!(p.get_mut(2).map(|b| b.ours().len()), Some(2));
        p.set_state(1, FlightState::Landed);
        assert_eq!(p.pop_landed().map(|b| b.sequence), Some(1));
        assert!(p.pop_landed().is_none(), "2 waits for its void");
        assert_eq!(p.drain().len(), 1);
        assert!(p.is_empty());
    }
}
