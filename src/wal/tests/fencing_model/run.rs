//! A serving process of the model: seal (`actor/seal.rs`), creates in
//! sequence order within the slots and within reach (`actor/pipeline.rs`),
//! outcomes by ack mode, markers, W6 deletes (`create.rs`), probes and
//! acknowledgement (`actor/probe.rs`, `actor/ack.rs`).
//!
//! Every event of a serving process (a seal, a create's or a probe's
//! answer) is followed by what `Actor::progress` does after every event:
//! start every create that may start, a marker if one is needed, a probe if
//! one is wanted. A request's delay is in its landing or answering step.
//!
//! The actor's rooms are private to it, so their decisions (`wanted`,
//! `next_startable`, `marker_needed`, `take_answer`) are restated here next
//! to the rule they mirror; rule W5 itself is the real `Reach`.

use crate::wal::reach::marker_sequence;

use super::protocol::{push, push_step, Action, Creates, Mode, Model, Probes, Step, Violation};
use super::state::{Batch, Flight, Obj, Phase, Probe, Seq, State, Tip, MARKER_DELETES};

impl Model {
    pub(super) fn run_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        let id = p as u8;
        let proc = &s.procs[p];
        if proc.sealed < self.bounds.seals[p] {
            let mut next = self.seal(s, p);
            let read = self.progress(&mut next, p);
            push_step(out, Action::Seal(id), next, None, !read);
        }
        if proc.jumped < self.bounds.jumps[p] {
            let mut next = *s;
            let proc = &mut next.procs[p];
            proc.jumped += 1;
            proc.next += self.bounds.gap as Seq + 1;
            let read = self.progress(&mut next, p);
            push_step(out, Action::Jump(id), next, None, !read);
        }
        for (i, b) in proc.pipeline.as_slice().iter().enumerate() {
            if let Flight::Running { deletes } = b.flight {
                self.land(s, p, i, deletes, out);
                if proc.failures > 0 {
                    for &ghost in self.ghost_choices() {
                        let mut next = *s;
                        next.procs[p].failures -= 1;
                        if ghost {
                            Self::add_ghost(&mut next, p, b.seq, b.obj);
                        }
                        self.failed(&mut next, p, i);
                        let read = self.progress(&mut next, p);
                        let action = Action::Fail {
                            p: id,
                            seq: b.seq,
                            ghost,
                        };
                        push_step(out, action, next, None, !read);
                    }
                }
            }
        }
        self.marker_steps(s, p, out);
        self.probe_steps(s, p, out);
    }

    /// What the actor does after every event (`Actor::progress`): starts the
    /// creates that may start, then a marker if one is needed, then a probe
    /// if one is wanted. Returns whether it read shared state (a probe's
    /// read of the fence).
    pub(super) fn progress(&self, s: &mut State, p: usize) -> bool {
        if s.procs[p].phase != Phase::Running {
            return false;
        }
        while let Some(i) = self.startable(s, p) {
            let deletes = if self.rules.w6 { MARKER_DELETES } else { 0 };
            s.procs[p].pipeline.as_mut_slice()[i].flight = Flight::Running { deletes };
        }
        self.maybe_marker(s, p);
        self.maybe_probe(s, p)
    }

    /// Seals the next batch: linked to the last batch in the pipeline or
    /// else to the catalog's tip, carrying the reclaim boundary.
    fn seal(&self, s: &State, p: usize) -> State {
        let mut next = *s;
        let proc = &mut next.procs[p];
        let seq = proc.next;
        let link = match proc.pipeline.last() {
            Some(b) => Some((b.seq, proc.epoch)),
            None => proc.tip.map(|t| (t.seq, t.epoch)),
        };
        let pending = proc.pipeline.first().map(|b| b.seq);
        let boundary = [proc.low_live, pending, Some(seq)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(seq)
            .max(proc.boundary);
        proc.boundary = boundary;
        let obj = Obj {
            epoch: proc.epoch,
            empty: false,
            link,
            boundary,
        };
        proc.pipeline.push(Batch {
            seq,
            obj,
            flight: Flight::Waiting,
        });
        proc.next += 1;
        proc.sealed += 1;
        next
    }

    /// The batch whose create may start now, if any.
    fn startable(&self, s: &State, p: usize) -> Option<usize> {
        let proc = &s.procs[p];
        let batches = proc.pipeline.as_slice();
        let limit = self.bounds.max_inflight;
        if self.rules.creates == Creates::FirstOfPipeline {
            // As it was: any waiting batch among the first `limit`.
            return batches
                .iter()
                .take(limit)
                .position(|b| b.flight == Flight::Waiting);
        }
        let running = batches
            .iter()
            .filter(|b| matches!(b.flight, Flight::Running { .. }))
            .count()
            + usize::from(proc.marker.is_some());
        if running >= limit {
            return None;
        }
        let i = batches.iter().position(|b| b.flight == Flight::Waiting)?;
        let within = self.rules.creates == Creates::Unchecked
            || self.reach(s, p).allows(u64::from(batches[i].seq));
        within.then_some(i)
    }

    /// The create of batch `i` executes: it lands, meets our own bytes, meets
    /// an older empty object (W6 deletes it while it may), an older object
    /// (stale), or another writer.
    fn land(&self, s: &State, p: usize, i: usize, deletes: u8, out: &mut Vec<Step>) {
        let id = p as u8;
        let mut next = *s;
        let proc = s.procs[p];
        let b = proc.pipeline.as_slice()[i];
        let mut violation = None;
        let action = match s.store.get(b.seq) {
            None => {
                next.store.put(b.seq, b.obj);
                durable(&mut next, p, i);
                Action::Land(id, b.seq)
            }
            Some(o) if o == b.obj => {
                durable(&mut next, p, i);
                Action::Land(id, b.seq)
            }
            Some(o) if o.epoch < proc.epoch && o.empty && deletes > 0 => {
                next.store.delete(b.seq);
                next.procs[p].pipeline.as_mut_slice()[i].flight = Flight::Running {
                    deletes: deletes - 1,
                };
                Action::DeleteMarker(id, b.seq)
            }
            Some(o)
                if o.epoch < proc.epoch && o.empty && self.rules.w6 && self.rules.w6_repeats =>
            {
                // `create_data_object` reports a transient failure.
                self.failed(&mut next, p, i);
                Action::Land(id, b.seq)
            }
            Some(o) if o.epoch < proc.epoch => {
                violation = Some(if o.empty {
                    Violation::EmptyFailed {
                        seq: b.seq,
                        older: o.epoch,
                        newer: proc.epoch,
                    }
                } else {
                    Violation::OlderAtData {
                        seq: b.seq,
                        older: o.epoch,
                        newer: proc.epoch,
                    }
                });
                // Stale: durable mode fails the round, enqueued poisons.
                next.procs[p].pipeline.as_mut_slice()[i].flight = Flight::Waiting;
                match self.bounds.mode {
                    Mode::Durable => self.fail_pipeline(&mut next, p),
                    Mode::Enqueued => self.poison(&mut next, p),
                }
                Action::Land(id, b.seq)
            }
            Some(o) => {
                if o.epoch == proc.epoch {
                    violation = Some(Violation::SelfConflict {
                        seq: b.seq,
                        epoch: o.epoch,
                    });
                }
                next.procs[p].pipeline.as_mut_slice()[i].flight = Flight::Waiting;
                self.poison(&mut next, p);
                Action::Land(id, b.seq)
            }
        };
        if matches!(action, Action::Land(..)) {
            self.progress(&mut next, p);
        }
        push(out, action, next, violation);
    }

    /// Batch `i`'s create failed: durable mode fails the round (its
    /// sequences stay consumed), enqueued mode repeats it later.
    fn failed(&self, s: &mut State, p: usize, i: usize) {
        s.procs[p].pipeline.as_mut_slice()[i].flight = Flight::Waiting;
        if self.bounds.mode == Mode::Durable {
            self.fail_pipeline(s, p);
        }
    }

    /// `Actor::maybe_marker` (rule W5): when the first waiting batch lies
    /// beyond reach and nothing running or probing can verify more, an empty
    /// object starts just below it.
    fn maybe_marker(&self, s: &mut State, p: usize) {
        if self.rules.creates != Creates::Reach || s.procs[p].marker.is_some() {
            return;
        }
        if let Some(seq) = self.marker_needed(s, p) {
            let proc = &mut s.procs[p];
            let obj = Obj {
                epoch: proc.epoch,
                empty: true,
                link: proc.tip.map(|t| (t.seq, t.epoch)),
                boundary: proc.boundary.min(seq),
            };
            proc.marker = Some((seq, obj));
        }
    }

    /// The marker in flight lands (any object there proves the sequence
    /// present; a newer one fences) or fails (durable mode fails the round).
    fn marker_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        let id = p as u8;
        let proc = &s.procs[p];
        let Some((seq, obj)) = proc.marker else {
            return;
        };
        let mut next = *s;
        next.procs[p].marker = None;
        match s.store.get(seq) {
            None => {
                next.store.put(seq, obj);
                next.procs[p].present = proc.present.max(seq);
            }
            Some(o) if o.epoch <= proc.epoch => {
                next.procs[p].present = proc.present.max(seq);
            }
            Some(_) => self.poison(&mut next, p),
        }
        self.progress(&mut next, p);
        push(out, Action::LandMarker(id), next, None);
        if proc.failures > 0 {
            for &ghost in self.ghost_choices() {
                let mut next = *s;
                next.procs[p].failures -= 1;
                next.procs[p].marker = None;
                if ghost {
                    Self::add_ghost(&mut next, p, seq, obj);
                }
                if self.bounds.mode == Mode::Durable {
                    self.fail_pipeline(&mut next, p);
                }
                let read = self.progress(&mut next, p);
                push_step(out, Action::FailMarker { p: id, ghost }, next, None, !read);
            }
        }
    }

    /// `Pipeline::marker_needed`: no marker or batch create running, no
    /// probe in flight, nothing present beyond what is verified, and the
    /// first waiting batch beyond reach.
    fn marker_needed(&self, s: &State, p: usize) -> Option<Seq> {
        let proc = &s.procs[p];
        let batches = proc.pipeline.as_slice();
        if batches
            .iter()
            .any(|b| matches!(b.flight, Flight::Running { .. }))
            || !proc.probes.is_empty()
            || proc.present > proc.verified
        {
            return None;
        }
        let first = batches.iter().find(|b| b.flight == Flight::Waiting)?;
        marker_sequence(&self.reach(s, p), u64::from(first.seq)).map(|m| m as Seq)
    }

    /// `Actor::maybe_probe`: a probe starts when a slot is free and
    /// something is new since the latest probe started. Its read of the
    /// fence is taken now (rfcs/0006, section Model). Returns whether one
    /// started.
    fn maybe_probe(&self, s: &mut State, p: usize) -> bool {
        let covers = durable_prefix_end(s, p);
        let proc = &s.procs[p];
        let wanted = match self.rules.probes {
            Probes::Rounds => {
                proc.probes.len() < self.bounds.max_inflight
                    && ((covers.is_some() && covers > proc.started_covers)
                        || (proc.present > proc.started_present && proc.present > proc.verified))
            }
            Probes::OneAtATime => proc.probes.is_empty() && covers.is_some(),
        };
        if !wanted {
            return false;
        }
        let newer_listed = s.procs.iter().any(|q| q.listings >> (proc.epoch + 1) != 0);
        let fenced = s.store.fence(proc.epoch + 1);
        let proc = &mut s.procs[p];
        proc.probes.push(Probe {
            covers,
            present: proc.present,
            fenced,
            newer_listed,
            stale: false,
        });
        proc.started_covers = proc.started_covers.max(covers);
        proc.started_present = proc.started_present.max(proc.present);
        true
    }

    /// The probes in flight answer or fail.
    fn probe_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        let id = p as u8;
        let proc = &s.procs[p];
        for (i, probe) in proc.probes.as_slice().iter().enumerate() {
            let mut next = *s;
            let violation = self.answer(&mut next, p, i, *probe);
            let read = self.progress(&mut next, p);
            push_step(
                out,
                Action::FinishProbe(id, i as u8),
                next,
                violation,
                !read,
            );
            if proc.failures > 0 && !probe.stale && self.rules.probes == Probes::Rounds {
                let mut next = *s;
                next.procs[p].failures -= 1;
                self.probe_failed(&mut next, p, i);
                let read = self.progress(&mut next, p);
                push_step(out, Action::FailProbe(id, i as u8), next, None, !read);
            }
        }
    }

    /// Probe `i` answers: a stale answer is dropped; a fence poisons; no
    /// fence verifies what was present at its start and acknowledges the
    /// durable batches it covers, in order.
    fn answer(&self, s: &mut State, p: usize, i: usize, probe: Probe) -> Option<Violation> {
        let proc = &mut s.procs[p];
        proc.probes.remove(i);
        if probe.stale {
            return None;
        }
        for earlier in &mut proc.probes.as_mut_slice()[..i] {
            earlier.stale = true; // `take_answer`: a later answer came first
        }
        if probe.fenced {
            self.poison(s, p);
            return None;
        }
        let (present, covers) = if self.rules.probe_covers_its_start {
            (probe.present, probe.covers)
        } else {
            (s.procs[p].present, durable_prefix_end(s, p))
        };
        let proc = &mut s.procs[p];
        if self.rules.probes == Probes::Rounds {
            proc.verified = proc.verified.max(present);
        }
        let covers = covers?;
        let mut violation = None;
        while let Some(front) = proc.pipeline.first().copied() {
            if front.flight != Flight::Durable || front.seq > covers {
                break;
            }
            proc.pipeline.remove(0);
            s.acked[front.seq as usize] = proc.epoch;
            proc.tip = Some(Tip {
                seq: front.seq,
                epoch: proc.epoch,
                boundary: front.obj.boundary,
            });
            proc.low_live = Some(proc.low_live.map_or(front.seq, |l| l.min(front.seq)));
            if probe.newer_listed {
                violation.get_or_insert(Violation::AckAfterListing {
                    seq: front.seq,
                    epoch: proc.epoch,
                });
            }
        }
        violation
    }

    /// Probe `i` failed for good: dropped when a later probe is in flight;
    /// otherwise the next probe starts afresh and, in durable mode, the
    /// round fails (`on_probe_failed` giving up).
    fn probe_failed(&self, s: &mut State, p: usize, i: usize) {
        let proc = &mut s.procs[p];
        proc.probes.remove(i);
        for earlier in &mut proc.probes.as_mut_slice()[..i] {
            earlier.stale = true;
        }
        if proc.probes.len() > i {
            return; // a later probe covers this one
        }
        proc.started_covers = None;
        proc.started_present = 0;
        if self.bounds.mode == Mode::Durable {
            self.fail_pipeline(s, p);
        }
    }
}

/// Batch `i` landed: durable, and its sequence is present.
fn durable(s: &mut State, p: usize, i: usize) {
    let proc = &mut s.procs[p];
    let batch = &mut proc.pipeline.as_mut_slice()[i];
    batch.flight = Flight::Durable;
    proc.present = proc.present.max(batch.seq);
}

/// The last sequence of the durable batches at the front of the pipeline.
fn durable_prefix_end(s: &State, p: usize) -> Option<Seq> {
    s.procs[p]
        .pipeline
        .as_slice()
        .iter()
        .take_while(|b| b.flight == Flight::Durable)
        .last()
        .map(|b| b.seq)
}
