//! The explorer: breadth-first over every interleaving of the model's
//! steps, each state visited once (by its 64-bit fingerprint), so the first
//! violation found of each property has a shortest trace (shortest in the
//! reduced graph when the reduction is on).
//!
//! Exhaustive within the bounds: the bounds make the state space finite
//! (batches, failures, jumps, phantoms and sequences are all bounded) and
//! acyclic (every step consumes a budget or moves a process forward), and
//! the exploration ends when no new state is left, not at a depth.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasherDefault;
use std::time::{Duration, Instant};

use super::check::{check, Identity, Replays};
use super::fingerprint::fingerprint;
use super::protocol::{Action, Model, Property, Step, Violation};
use super::state::{Phase, State};

type Seen = HashMap<u64, (u64, Option<Action>), BuildHasherDefault<Identity>>;

/// A violation and the shortest trace to it: each action with the state
/// it led to.
pub(super) struct Found {
    pub(super) violation: Violation,
    pub(super) trace: Vec<(Action, State)>,
}

impl fmt::Display for Found {
    /// The trace, one numbered step and the state after it a line pair,
    /// then the violation.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, (action, state)) in self.trace.iter().enumerate() {
            writeln!(f, "{:>3}. {action}\n       {state}", n + 1)?;
        }
        writeln!(f, "  => {}", self.violation)
    }
}

/// What happened in the explored states: evidence that the exploration
/// reached the situations the properties are about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Coverage {
    /// Steps that acknowledged objects.
    pub(super) acks: usize,
    /// Serving processes that stopped (fenced, or poisoned).
    pub(super) stopped: usize,
    /// Opens that failed (a probe of the open found a newer fence, or a
    /// newer object held the start sequence).
    pub(super) failed_opens: usize,
    /// Late objects adopted at a start sequence.
    pub(super) adopted: usize,
    /// Markers landed.
    pub(super) markers: usize,
    /// Older markers deleted by a data create (W6).
    pub(super) w6_deletes: usize,
    /// Orphaned creates and failed requests landed late.
    pub(super) late_landings: usize,
    /// Fence creates answered "exists" over nothing.
    pub(super) phantoms: usize,
}

impl Coverage {
    fn record(&mut self, before: &State, step: &Step) {
        let after = &step.next;
        if after.acked != before.acked {
            self.acks += 1;
        }
        for (b, a) in before.procs.iter().zip(&after.procs) {
            if a.phase == Phase::Dead && b.phase != Phase::Dead {
                if b.phase == Phase::Running {
                    self.stopped += 1;
                } else {
                    self.failed_opens += 1;
                }
            }
        }
        match step.action {
            Action::CreateStart(p) => {
                let (b, a) = (&before.procs[p as usize], &after.procs[p as usize]);
                if a.tip != b.tip && a.tip.is_some_and(|t| t.epoch < a.epoch) {
                    self.adopted += 1;
                }
            }
            Action::LandMarker(_) => self.markers += 1,
            Action::DeleteMarker(..) => self.w6_deletes += 1,
            Action::LandOrphan(..) | Action::LandGhost(..) => self.late_landings += 1,
            Action::CreateFence { phantom: true, .. } => self.phantoms += 1,
            _ => {}
        }
    }

    pub(super) fn add(&mut self, other: &Coverage) {
        self.acks += other.acks;
        self.stopped += other.stopped;
        self.failed_opens += other.failed_opens;
        self.adopted += other.adopted;
        self.markers += other.markers;
        self.w6_deletes += other.w6_deletes;
        self.late_landings += other.late_landings;
        self.phantoms += other.phantoms;
    }
}

/// What an exploration reached.
pub(super) struct Report {
    pub(super) states: usize,
    pub(super) transitions: usize,
    pub(super) depth: usize,
    pub(super) elapsed: Duration,
    /// Whether the exploration stopped at `max_states` (not exhaustive).
    pub(super) truncated: bool,
    pub(super) coverage: Coverage,
    /// The first violation found of each property.
    pub(super) found: BTreeMap<Property, Found>,
}

/// The steps the explorer takes from `s`. With `reduce`, when some process
/// has only local steps enabled, only that process's steps: a persistent
/// set (they commute with every other process's steps, nothing another
/// process does disables them, and the graph is acyclic); rfcs/0006,
/// section Model, says why no violation is lost.
fn successors(model: &Model, reduce: bool, s: &State, out: &mut Vec<Step>, own: &mut Vec<Step>) {
    if !reduce {
        model.successors(s, out);
        return;
    }
    for p in 0..model.bounds.procs {
        own.clear();
        model.process_steps(s, p, own);
        if !own.is_empty() && own.iter().all(|step| step.local) {
            out.clear();
            out.append(own);
            return;
        }
        out.append(own);
    }
}

/// Explores `model` until no new state is left, until more than
/// `max_states` were seen, or until a violation of every property in
/// `stop_at` was found.
pub(super) fn explore(
    model: &Model,
    reduce: bool,
    stop_at: &[Property],
    max_states: usize,
) -> Report {
    let started = Instant::now();
    let init = model.initial();
    let mut seen = Seen::default();
    seen.insert(fingerprint(&init), (0, None));
    let mut replays = Replays::default();
    let mut report = Report {
        states: 1,
        transitions: 0,
        depth: 0,
        elapsed: Duration::ZERO,
        truncated: false,
        coverage: Coverage::default(),
        found: BTreeMap::new(),
    };
    let mut frontier = vec![(init, fingerprint(&init))];
    let mut steps: Vec<Step> = Vec::new();
    let mut own: Vec<Step> = Vec::new();
    'levels: while !frontier.is_empty() {
        let mut next_level = Vec::new();
        for (state, from) in &frontier {
            steps.clear();
            successors(model, reduce, state, &mut steps, &mut own);
            for step in steps.drain(..) {
                report.transitions += 1;
                let to = fingerprint(&step.next);
                if let Some(v) = step.violation {
                    report.found.entry(v.property()).or_insert_with(|| {
                        let mut actions = path(&seen, *from);
                        actions.push((step.action, to));
                        Found {
                            violation: v,
                            trace: replay(model, &actions),
                        }
                    });
                }
                if seen.contains_key(&to) {
                    continue;
                }
                seen.insert(to, (*from, Some(step.action)));
                report.coverage.record(state, &step);
                // A local step other than an answer changes nothing a state
                // property reads (storage, acknowledgements, epochs).
                let unchanged = step.local && !matches!(step.action, Action::FinishProbe(..));
                if !unchanged {
                    if let Some(v) = check(&step.next, &mut replays) {
                        report.found.entry(v.property()).or_insert_with(|| Found {
                            violation: v,
                            trace: replay(model, &path(&seen, to)),
                        });
                    }
                }
                if seen.len() > max_states {
                    report.truncated = true;
                    break 'levels;
                }
                next_level.push((step.next, to));
            }
            if !stop_at.is_empty() && stop_at.iter().all(|p| report.found.contains_key(p)) {
                break 'levels;
            }
        }
        if !next_level.is_empty() {
            report.depth += 1;
        }
        frontier = next_level;
    }
    report.states = seen.len();
    report.elapsed = started.elapsed();
    report
}

/// The actions from the initial state to the state of fingerprint `to`,
/// each with the fingerprint of the state it led to.
fn path(seen: &Seen, mut to: u64) -> Vec<(Action, u64)> {
    let mut actions = Vec::new();
    while let Some((from, Some(action))) = seen.get(&to) {
        actions.push((*action, to));
        to = *from;
    }
    actions.reverse();
    actions
}

/// Replays `actions` from the initial state, keeping each state reached.
fn replay(model: &Model, actions: &[(Action, u64)]) -> Vec<(Action, State)> {
    let mut state = model.initial();
    let mut trace = Vec::with_capacity(actions.len());
    let mut steps = Vec::new();
    for (action, to) in actions {
        steps.clear();
        model.successors(&state, &mut steps);
        let step = steps
            .drain(..)
            .find(|s| s.action == *action && fingerprint(&s.next) == *to)
            .unwrap_or_else(|| panic!("the trace's step '{action}' is not possible any more"));
        state = step.next;
        trace.push((*action, state));
    }
    trace
}
