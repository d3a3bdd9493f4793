//! The protocol's rules as switches, the bounds of one exploration, the
//! actions, and the successor function that applies them.
//!
//! [`Rules::FIXED`] is the protocol as it is now (`fence.rs`, `open_in`,
//! `write_start_object`, the actor's pipeline, seal, ack and probe rooms,
//! `create_data_object`); [`Rules::AS_IT_WAS`] is the protocol of commit
//! ac5627e. A mutation turns off one rule of the fixed protocol.

use std::fmt;

use super::state::{Epoch, Ghost, Obj, Orphan, Phase, Proc, Seq, State, PROCS};

/// How a process decides that a sealed batch may start its create.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Creates {
    /// Rule W5 (`reach.rs`): within `verified + gap` (or at most the epoch),
    /// in sequence order within the slots; a marker when the next batch lies
    /// beyond reach; a probe in the start object's loop past reach.
    Reach,
    /// W5 switched off: within the slots, wherever the batch lies.
    Unchecked,
    /// As it was: only the first `max_inflight_creates` batches of the
    /// pipeline (durable but unacknowledged ones included).
    FirstOfPipeline,
}

/// How probes start and what they verify.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Probes {
    /// Up to `max_inflight_creates` in flight, each for new durable batches
    /// or a new present sequence; a missed fence verifies `present` (W5).
    Rounds,
    /// As it was: one at a time, for the durable batches at the front.
    OneAtATime,
}

/// Where a process's data starts after its start object.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum DataStart {
    /// `first_data_sequence_with_gap`: beyond `listed + gap` (and the start
    /// object).
    BeyondListing,
    /// As it was: `gap` after the start object for epochs above 1.
    GapAfterStart,
    /// No gap at all: right after the start object.
    AfterStart,
}

/// The switches of a protocol variant.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Rules {
    /// A fence create answered "exists" over nothing is repeated on the
    /// same key (as it was: the claim moved on to the next epoch).
    pub(super) dense_claims: bool,
    /// The probe between the listing and the start object.
    pub(super) probe_before_start: bool,
    /// The probe between the start object and the first data create.
    pub(super) probe_after_start: bool,
    pub(super) creates: Creates,
    pub(super) probes: Probes,
    pub(super) data: DataStart,
    /// Rule W6: a data create deletes an older process's empty object.
    pub(super) w6: bool,
    /// W6 never gives up: an older empty object met again after
    /// `MARKER_DELETES` deletes is a transient failure of the create (it is
    /// repeated later), not a stale sequence (as it was at first: enqueued
    /// mode poisoned, losing what it had admitted).
    pub(super) w6_repeats: bool,
    /// A probe's answer covers what was durable and present when it started
    /// (`probe.rs`'s invariant); switched off, what is when it answers.
    pub(super) probe_covers_its_start: bool,
}

impl Rules {
    /// The protocol as it is now.
    pub(super) const FIXED: Rules = Rules {
        dense_claims: true,
        probe_before_start: true,
        probe_after_start: true,
        creates: Creates::Reach,
        probes: Probes::Rounds,
        data: DataStart::BeyondListing,
        w6: true,
        w6_repeats: true,
        probe_covers_its_start: true,
    };

    /// The protocol of commit ac5627e.
    pub(super) const AS_IT_WAS: Rules = Rules {
        dense_claims: false,
        probe_before_start: false,
        probe_after_start: false,
        creates: Creates::FirstOfPipeline,
        probes: Probes::OneAtATime,
        data: DataStart::GapAfterStart,
        w6: false,
        w6_repeats: false,
        probe_covers_its_start: true,
    };
}

/// What a failed create does (the ack mode).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    /// It fails the round: every batch not yet indexed, their sequences
    /// consumed.
    Durable,
    /// It is repeated at the same sequence (acknowledged ids name it).
    Enqueued,
}

/// The bounds of one exploration.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Bounds {
    pub(super) procs: usize,
    pub(super) gap: u64,
    pub(super) max_inflight: usize,
    pub(super) mode: Mode,
    /// Batches each process seals (by opening order: the first opener is
    /// process 0).
    pub(super) seals: [u8; PROCS],
    /// Watermarks each process is handed that move its next sequence
    /// beyond reach (`on_obsolete`), `gap + 1` ahead each.
    pub(super) jumps: [u8; PROCS],
    /// Failed requests (creates, markers, probes) of each process.
    pub(super) failures: [u8; PROCS],
    /// Fence creates answered "exists" over nothing in the whole run.
    pub(super) phantoms: u8,
    /// Whether a failed create may still land later.
    pub(super) ghosts: bool,
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} processes, gap {}, max_inflight {}, {:?}, seals {:?}, jumps {:?}, failures {:?}, {} phantoms{}",
            self.procs,
            self.gap,
            self.max_inflight,
            self.mode,
            &self.seals[..self.procs],
            &self.jumps[..self.procs],
            &self.failures[..self.procs],
            self.phantoms,
            if self.ghosts { ", ghosts" } else { "" }
        )
    }
}

/// One step of one process or of the environment.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Action {
    ListFences(u8),
    CreateFence {
        p: u8,
        phantom: bool,
    },
    ListObjects(u8),
    /// A probe of the open: before the start object, in its loop, after it.
    OpenProbe(u8),
    CreateStart(u8),
    Seal(u8),
    /// A watermark moves the next sequence `gap + 1` ahead.
    Jump(u8),
    Land(u8, Seq),
    /// W6: a data create met an older empty object and deleted it.
    DeleteMarker(u8, Seq),
    Fail {
        p: u8,
        seq: Seq,
        ghost: bool,
    },
    LandMarker(u8),
    FailMarker {
        p: u8,
        ghost: bool,
    },
    FinishProbe(u8, u8),
    FailProbe(u8, u8),
    /// The create of a batch nobody waits for any more lands (or deletes an
    /// older marker first).
    LandOrphan(u8, Seq),
    /// A failed request is executed by the server after all.
    LandGhost(u8, Seq),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::ListFences(p) => write!(f, "P{p} lists the fences"),
            Action::CreateFence { p, phantom: false } => write!(f, "P{p} creates its fence"),
            Action::CreateFence { p, phantom: true } => {
                write!(f, "P{p}'s fence create answers 'exists' over nothing")
            }
            Action::ListObjects(p) => write!(f, "P{p} lists the objects"),
            Action::OpenProbe(p) => write!(f, "P{p} probes the fence (open)"),
            Action::CreateStart(p) => write!(f, "P{p} creates its start object"),
            Action::Seal(p) => write!(f, "P{p} seals a batch"),
            Action::Jump(p) => write!(f, "P{p} is handed a watermark ahead of its next sequence"),
            Action::Land(p, s) => write!(f, "P{p}'s create of batch {s} lands"),
            Action::DeleteMarker(p, s) => {
                write!(f, "P{p}'s create of batch {s} deletes an older marker (W6)")
            }
            Action::Fail { p, seq, ghost } => write!(
                f,
                "P{p}'s create of batch {seq} fails{}",
                if ghost { " (and may land later)" } else { "" }
            ),
            Action::LandMarker(p) => write!(f, "P{p}'s marker lands"),
            Action::FailMarker { p, ghost } => write!(
                f,
                "P{p}'s marker fails{}",
                if ghost { " (and may land later)" } else { "" }
            ),
            Action::FinishProbe(p, i) => write!(f, "P{p}'s probe #{i} answers"),
            Action::FailProbe(p, i) => write!(f, "P{p}'s probe #{i} fails"),
            Action::LandOrphan(p, s) => write!(f, "P{p}'s orphaned create of {s} lands"),
            Action::LandGhost(p, s) => write!(f, "P{p}'s failed create of {s} lands late"),
        }
    }
}

/// A property the explorer checks (rfcs/0006, section Model).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(super) enum Property {
    /// (a) every acknowledged object is present and on every later replay.
    Acked,
    /// (b) no acknowledgement decided after a newer process listed.
    AckAfterListing,
    /// (c) no older object at a newer process's data sequence (W5), and an
    /// older empty one never fails or poisons it (W6).
    DataSequences,
    /// (d) no claimed epoch without every lower fence.
    Dense,
    /// Something the protocol should make impossible for other reasons.
    Unexpected,
}

/// A violation, with what it is about.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Violation {
    Lost {
        seq: Seq,
        epoch: Epoch,
        present: bool,
    },
    AckAfterListing {
        seq: Seq,
        epoch: Epoch,
    },
    OlderAtData {
        seq: Seq,
        older: Epoch,
        newer: Epoch,
    },
    EmptyFailed {
        seq: Seq,
        older: Epoch,
        newer: Epoch,
    },
    NotDense {
        epoch: Epoch,
        missing: Epoch,
    },
    SelfConflict {
        seq: Seq,
        epoch: Epoch,
    },
}

impl Violation {
    pub(super) fn property(&self) -> Property {
        match self {
            Violation::Lost { .. } => Property::Acked,
            Violation::AckAfterListing { .. } => Property::AckAfterListing,
            Violation::OlderAtData { .. } | Violation::EmptyFailed { .. } => {
                Property::DataSequences
            }
            Violation::NotDense { .. } => Property::Dense,
            Violation::SelfConflict { .. } => Property::Unexpected,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Violation::Lost { seq, epoch, present: false } => write!(
                f,
                "(a) object {seq}, acknowledged by epoch {epoch}, is gone"
            ),
            Violation::Lost { seq, epoch, .. } => write!(
                f,
                "(a) object {seq}, acknowledged by epoch {epoch}, is not on the chain a replay now indexes"
            ),
            Violation::AckAfterListing { seq, epoch } => write!(
                f,
                "(b) epoch {epoch} acknowledges object {seq} on a probe that read after a newer process listed"
            ),
            Violation::OlderAtData { seq, older, newer } => write!(
                f,
                "(c) an object of epoch {older} with entries lies at {seq}, a data sequence of epoch {newer} (W5)"
            ),
            Violation::EmptyFailed { seq, older, newer } => write!(
                f,
                "(c) an empty object of epoch {older} at {seq} fails the create of epoch {newer} (W6)"
            ),
            Violation::NotDense { epoch, missing } => write!(
                f,
                "(d) epoch {epoch} is claimed while fence {missing} is missing"
            ),
            Violation::SelfConflict { seq, epoch } => write!(
                f,
                "epoch {epoch} meets another object of its own at {seq}"
            ),
        }
    }
}

/// One successor: the action, the state it leads to, and a violation the
/// action itself showed (the explorer checks the state's properties too).
pub(super) struct Step {
    pub(super) action: Action,
    pub(super) next: State,
    pub(super) violation: Option<Violation>,
    /// The step read and wrote only its process's own state (and the
    /// acknowledged set, which no step reads): it commutes with every step
    /// of every other process (the explorer's reduction).
    pub(super) local: bool,
}

/// A protocol variant under bounds.
#[derive(Clone, Copy, Debug)]
pub(super) struct Model {
    pub(super) rules: Rules,
    pub(super) bounds: Bounds,
}

impl Model {
    pub(super) fn initial(&self) -> State {
        State::initial(self.bounds.failures, self.bounds.phantoms)
    }

    /// Every step possible in `s`.
    pub(super) fn successors(&self, s: &State, out: &mut Vec<Step>) {
        for p in 0..self.bounds.procs {
            self.process_steps(s, p, out);
        }
    }

    /// The steps of process `p` (its requests in flight included).
    pub(super) fn process_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        self.ghost_steps(s, p, out);
        self.orphan_steps(s, p, out);
        match s.procs[p].phase {
            Phase::Running => self.run_steps(s, p, out),
            Phase::Dead => {}
            _ => self.open_steps(s, p, out),
        }
    }

    /// A failed request of `p` is executed by the server after all.
    fn ghost_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        let ghosts = s.procs[p].ghosts.as_slice();
        for (i, g) in ghosts.iter().enumerate() {
            if i > 0 && ghosts[i - 1] == *g {
                continue; // the same request twice: one step covers both
            }
            let mut next = *s;
            next.procs[p].ghosts.remove(i);
            if next.store.get(g.seq).is_none() {
                next.store.put(g.seq, g.obj);
            }
            push(out, Action::LandGhost(p as u8, g.seq), next, None);
        }
    }

    /// The orphaned creates of process `p` (alive or not) land: a data
    /// create first deletes an older empty object (W6) while it may.
    fn orphan_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        for (k, o) in s.procs[p].orphans.as_slice().iter().enumerate() {
            let mut next = *s;
            let proc = &mut next.procs[p];
            let mine = proc.epoch;
            let action = match next.store.get(o.seq) {
                Some(there) if there.epoch < mine && there.empty && o.deletes > 0 => {
                    next.store.delete(o.seq);
                    let orphan = proc.orphans.remove(k);
                    proc.orphans.insert_sorted(Orphan {
                        deletes: orphan.deletes - 1,
                        ..orphan
                    });
                    Action::DeleteMarker(p as u8, o.seq)
                }
                found => {
                    proc.orphans.remove(k);
                    if found.is_none() {
                        next.store.put(o.seq, o.obj);
                    }
                    if (found.is_none() || found == Some(o.obj)) && proc.phase == Phase::Running {
                        // Even a late completion proves the sequence present.
                        proc.present = proc.present.max(o.seq);
                        self.progress(&mut next, p);
                    }
                    Action::LandOrphan(p as u8, o.seq)
                }
            };
            push(out, action, next, None);
        }
    }

    /// Process `p` stops for good: its creates in flight become orphans.
    pub(super) fn poison(&self, s: &mut State, p: usize) {
        self.fail_pipeline(s, p);
        let proc = &mut s.procs[p];
        if let Some((seq, obj)) = proc.marker.take() {
            proc.orphans.insert_sorted(Orphan {
                seq,
                obj,
                deletes: 0,
            });
        }
        let kept = *proc;
        *proc = Proc {
            phase: Phase::Dead,
            epoch: kept.epoch,
            listings: kept.listings,
            first_data: kept.first_data,
            orphans: kept.orphans,
            ghosts: kept.ghosts,
            ..Proc::default()
        };
    }

    /// Every batch not yet indexed leaves the pipeline; creates still
    /// running go on as orphans.
    pub(super) fn fail_pipeline(&self, s: &mut State, p: usize) {
        let proc = &mut s.procs[p];
        for b in proc.pipeline.as_slice() {
            if let super::state::Flight::Running { deletes } = b.flight {
                let orphan = Orphan {
                    seq: b.seq,
                    obj: b.obj,
                    deletes,
                };
                proc.orphans.insert_sorted(orphan);
            }
        }
        proc.pipeline.clear();
    }

    /// The failure variants of a request: it never lands, or (with ghosts)
    /// it may still land later.
    pub(super) fn ghost_choices(&self) -> &'static [bool] {
        if self.bounds.ghosts {
            &[false, true]
        } else {
            &[false]
        }
    }

    /// The reach of process `p` (rule W5), from the real `Reach`.
    pub(super) fn reach(&self, s: &State, p: usize) -> crate::wal::reach::Reach {
        let proc = &s.procs[p];
        crate::wal::reach::Reach::with_gap(
            u64::from(proc.epoch),
            u64::from(proc.verified),
            self.bounds.gap,
        )
    }

    /// Records a failed request of `p` that may still land.
    pub(super) fn add_ghost(s: &mut State, p: usize, seq: Seq, obj: Obj) {
        s.procs[p].ghosts.insert_sorted(Ghost { seq, obj });
    }
}

/// Records a step that touched shared state.
pub(super) fn push(out: &mut Vec<Step>, action: Action, next: State, violation: Option<Violation>) {
    push_step(out, action, next, violation, false);
}

/// Records a step, saying whether it was local.
pub(super) fn push_step(
    out: &mut Vec<Step>,
    action: Action,
    next: State,
    violation: Option<Violation>,
    local: bool,
) {
    out.push(Step {
        action,
        next,
        violation,
        local,
    });
}
