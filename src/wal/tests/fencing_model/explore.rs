//! The explorer: breadth-first over every interleaving of the model's
//! steps, each state visited once (by a 64-bit fingerprint of its derived
//! `Hash`), so the first violation found has a shortest trace.
//!
//! Exhaustive within the bounds: every step consumes a budget or moves a
//! process forward, so the state graph is finite and acyclic, and the
//! exploration ends when no new state is left.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::state::{Flight, Kind, Phase, State};
use super::steps::{Action, Model, Violation};

/// FNV-1a over the derived `Hash` of a state.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Keys that already are fingerprints.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {}
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn fingerprint(s: &State) -> u64 {
    let mut h = Fnv::default();
    s.hash(&mut h);
    h.finish()
}

/// A violation and the shortest trace to it: each action with the state it
/// led to.
pub(super) struct Found {
    pub(super) violation: Violation,
    pub(super) trace: Vec<(Action, State)>,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, (action, state)) in self.trace.iter().enumerate() {
            writeln!(f, "{:>3}. {action}\n       {state}", n + 1)?;
        }
        writeln!(f, "  => {}", self.violation)
    }
}

/// Evidence that the exploration reached the situations the properties
/// are about.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Coverage {
    pub(super) acks: usize,
    pub(super) adopted: usize,
    pub(super) markers: usize,
    pub(super) fenced: usize,
    pub(super) failed_opens: usize,
    pub(super) voids: usize,
    pub(super) late_landings: usize,
    pub(super) fillers: usize,
    pub(super) jumps: usize,
}

impl Coverage {
    fn record(&mut self, before: &State, action: Action, after: &State) {
        if after.acked.len() > before.acked.len() {
            self.acks += 1;
        }
        for (b, a) in before.procs.iter().zip(&after.procs) {
            if a.phase == Phase::Dead && b.phase != Phase::Dead {
                if b.phase == Phase::Running {
                    if !matches!(action, Action::Crash(_)) {
                        self.fenced += 1;
                    }
                } else {
                    self.failed_opens += 1;
                }
            }
            if a.chain.count_ones() > b.chain.count_ones()
                && matches!(b.phase, Phase::Walking { .. })
            {
                self.adopted += 1;
            }
        }
        let markers = |s: &State| {
            s.keys
                .iter()
                .flatten()
                .filter(|o| o.kind == Kind::Marker)
                .count()
        };
        if markers(after) > markers(before) {
            self.markers += 1;
        }
        match action {
            Action::GhostLands(_) if after.keys != before.keys => self.late_landings += 1,
            Action::Seal { jump: true, .. } => self.jumps += 1,
            Action::Land { p, i } => {
                let b = before.procs[usize::from(p)].pipeline[usize::from(i)];
                if after.procs[usize::from(p)]
                    .pipeline
                    .get(usize::from(i))
                    .map(|b| b.flight)
                    == Some(Flight::Landed(Kind::Void))
                {
                    self.voids += 1;
                }
                let _ = b;
                if after.procs[usize::from(p)]
                    .pipeline
                    .get(usize::from(i))
                    .map(|b| b.flight)
                    == Some(Flight::Filled)
                {
                    self.fillers += 1;
                }
            }
            _ => {}
        }
    }
}

/// What an exploration reached.
pub(super) struct Report {
    pub(super) states: usize,
    pub(super) transitions: usize,
    pub(super) coverage: Coverage,
    pub(super) found: Option<Found>,
    /// Whether it stopped at `max_states` (not exhaustive).
    pub(super) truncated: bool,
}

/// Explores every interleaving of `model` from its initial state, up to
/// `max_states`; stops at the first violation (a shortest trace to it).
pub(super) fn explore(model: &Model, max_states: usize) -> Report {
    let initial = model.initial();
    let root = fingerprint(&initial);
    let mut seen: HashMap<u64, (u64, Option<Action>), BuildHasherDefault<Identity>> =
        HashMap::default();
    seen.insert(root, (root, None));
    let mut queue = VecDeque::from([initial]);
    let mut report = Report {
        states: 1,
        transitions: 0,
        coverage: Coverage::default(),
        found: None,
        truncated: false,
    };
    while let Some(state) = queue.pop_front() {
        let here = fingerprint(&state);
        for action in model.actions(&state) {
            let mut next = state.clone();
            let violation = model.step(&mut next, action);
            report.transitions += 1;
            report.coverage.record(&state, action, &next);
            let key = fingerprint(&next);
            if let Some(violation) = violation {
                let mut trace = trace_to(&seen, model, here);
                trace.push((action, next));
                report.found = Some(Found { violation, trace });
                return report;
            }
            if seen.contains_key(&key) {
                continue;
            }
            seen.insert(key, (here, Some(action)));
            report.states += 1;
            if report.states >= max_states {
                report.truncated = true;
                return report;
            }
            queue.push_back(next);
        }
    }
    report
}

/// The actions from the initial state to the state of fingerprint `to`,
/// replayed to recover each state.
fn trace_to(
    seen: &HashMap<u64, (u64, Option<Action>), BuildHasherDefault<Identity>>,
    model: &Model,
    to: u64,
) -> Vec<(Action, State)> {
    let mut actions = Vec::new();
    let mut at = to;
    while let Some((parent, Some(action))) = seen.get(&at) {
        actions.push(*action);
        at = *parent;
    }
    actions.reverse();
    let mut state = model.initial();
    actions
        .into_iter()
        .map(|a| {
            let _ = model.step(&mut state, a);
            (a, state.clone())
        })
        .collect()
}
