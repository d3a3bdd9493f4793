//! The protocol as steps over the abstract state: each restates one piece of
//! `Wal::open_in` (claim, listing and chain selection, the walk, the start
//! object, the closing read) or of the actor (seal, create, fail, fail and
//! land later, acknowledge, crash), calling the real `protocol` functions
//! and the real chain selection. Rules can be turned off one at a time.

use std::collections::BTreeMap;
use std::fmt;

use crate::catalog::chain::{self, ObjectSummary};
use crate::format::{self, Header, Link};
use crate::wal::protocol::rules::{self, Taken};

use super::state::{bit, Batch, Flight, Ghost, Kind, Obj, Phase, Proc, State, KEYS};

/// The rules of rfcs/0006, each of which a mutation turns off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rules {
    /// K4: the opener walks the listed tip's run and settles its next key.
    pub(super) walk: bool,
    /// K4: a listed object that continues the chain after an adopted one is
    /// adopted too (the first version stopped at any listed object).
    pub(super) adopt_listed: bool,
    /// K1: a failed key is settled by a void, never abandoned.
    pub(super) resolve: bool,
    /// K2: acknowledgement in run order.
    pub(super) in_order: bool,
    /// K3: creates within the window of unacknowledged keys.
    pub(super) window: bool,
    /// K5: settle markers are never collected.
    pub(super) keep_markers: bool,
    /// Fillers: the writer and the walk step over an older epoch's empty
    /// object alike (off: the writer deletes it and creates again, and the
    /// walk stops at it, as rule 8 of the first version did).
    pub(super) fillers: bool,
}

impl Rules {
    pub(super) const ALL: Rules = Rules {
        walk: true,
        adopt_listed: true,
        resolve: true,
        in_order: true,
        window: true,
        keep_markers: true,
        fillers: true,
    };
}

/// The bounds that make the state space finite.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    pub(super) procs: usize,
    /// The window (`rules::WINDOW` in the code).
    pub(super) window: u8,
    pub(super) max_inflight: usize,
    /// Per process: batches it seals, failed creates, failed creates that
    /// land later, jumps.
    pub(super) seals: u8,
    pub(super) fails: u8,
    pub(super) ghosts: u8,
    pub(super) jumps: u8,
    /// Per process: start objects whose create fails the open but lands
    /// later (a dead object that may fall into a newer process's run).
    pub(super) late_starts: u8,
    /// Durable mode voids a failed batch; enqueued mode repeats it.
    pub(super) durable: bool,
}

/// One step of one process (or of storage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Action {
    Claim(u8),
    List(u8),
    Walk(u8),
    Start(u8),
    /// The start object's create fails the open; the request lands later.
    StartLate(u8),
    Close(u8),
    Seal {
        p: u8,
        jump: bool,
    },
    Send {
        p: u8,
        i: u8,
    },
    Land {
        p: u8,
        i: u8,
    },
    Fail {
        p: u8,
        i: u8,
        late: bool,
    },
    Ack(u8),
    Crash(u8),
    GhostLands(u8),
    /// Collection deletes a settle marker (only with K5 off).
    Collect {
        p: u8,
        key: u8,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// What a step found wrong (a property of rfcs/0006, section Model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Violation {
    /// (a)/(b): an acknowledged object is missing from the chain of a
    /// newer process that opened.
    Lost { key: u8, writer: u8, newer: u8 },
    /// (c): an older process's object landed in a newer one's start object
    /// or data.
    Interference { key: u8, older: u8, newer: u8 },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Lost { key, writer, newer } => write!(
                f,
                "(b) p{writer}'s acknowledged object at {key} is not on p{newer}'s chain"
            ),
            Violation::Interference { key, older, newer } => write!(
                f,
                "(c) p{older}'s object landed at {key}, in p{newer}'s run"
            ),
        }
    }
}

/// The model: rules and bounds.
#[derive(Clone, Copy, Debug)]
pub(super) struct Model {
    pub(super) rules: Rules,
    pub(super) bounds: Bounds,
}

impl Model {
    pub(super) fn initial(&self) -> State {
        let proc = Proc {
            epoch: 0,
            phase: Phase::Idle,
            listed: 0,
            chain: 0,
            start: None,
            prev: (0, 0),
            next: 0,
            pipeline: Vec::new(),
            seals: self.bounds.seals,
            fails: self.bounds.fails,
            ghosts: self.bounds.ghosts,
            jumps: self.bounds.jumps,
            late_starts: self.bounds.late_starts,
        };
        State {
            keys: [None; KEYS + 1],
            fences: 0,
            procs: vec![proc; self.bounds.procs],
            ghosts: Vec::new(),
            acked: Vec::new(),
        }
    }

    /// The steps the explorer takes from `s`: when some process has a
    /// local step enabled (a seal, sending a create, an acknowledgement:
    /// each touches only that process and commutes with every other step),
    /// only that process's local steps (a persistent set); else every step.
    pub(super) fn actions(&self, s: &State) -> Vec<Action> {
        let all = self.all_actions(s);
        for p in 0..s.procs.len() as u8 {
            let local: Vec<Action> = all
                .iter()
                .copied()
                .filter(|a| {
                    matches!(a,
                        Action::Seal { p: q, .. } | Action::Send { p: q, .. } | Action::Ack(q) if *q == p)
                })
                .collect();
            if !local.is_empty() {
                return local;
            }
        }
        all
    }

    /// Every step enabled in `s`.
    fn all_actions(&self, s: &State) -> Vec<Action> {
        let mut out = Vec::new();
        for (i, p) in s.procs.iter().enumerate() {
            let pi = i as u8;
            match p.phase {
                // Processes open in order: p1 claims only after p0 did.
                Phase::Idle if i == 0 || s.procs[i - 1].phase != Phase::Idle => {
                    out.push(Action::Claim(pi))
                }
                Phase::Claimed => out.push(Action::List(pi)),
                Phase::Walking { .. } => out.push(Action::Walk(pi)),
                Phase::Starting { .. } => {
                    out.push(Action::Start(pi));
                    if p.late_starts > 0 {
                        out.push(Action::StartLate(pi));
                    }
                }
                Phase::Closing { .. } => out.push(Action::Close(pi)),
                Phase::Running => self.running_actions(s, pi, p, &mut out),
                _ => {}
            }
        }
        for g in 0..s.ghosts.len() {
            out.push(Action::GhostLands(g as u8));
        }
        out
    }

    fn running_actions(&self, s: &State, pi: u8, p: &Proc, out: &mut Vec<Action>) {
        if p.seals > 0 && usize::from(p.next) <= KEYS {
            out.push(Action::Seal { p: pi, jump: false });
            if p.jumps > 0 {
                out.push(Action::Seal { p: pi, jump: true });
            }
        }
        let running = p
            .pipeline
            .iter()
            .filter(|b| b.flight == Flight::Running)
            .count();
        let mut jump_before = false;
        for (i, b) in p.pipeline.iter().enumerate() {
            let within =
                !self.rules.window || (i < usize::from(self.bounds.window) && !jump_before);
            match b.flight {
                Flight::Waiting if within && running < self.bounds.max_inflight => {
                    out.push(Action::Send { p: pi, i: i as u8 })
                }
                Flight::Running => {
                    out.push(Action::Land { p: pi, i: i as u8 });
                    if p.fails > 0 {
                        out.push(Action::Fail {
                            p: pi,
                            i: i as u8,
                            late: false,
                        });
                    }
                    if p.ghosts > 0 {
                        out.push(Action::Fail {
                            p: pi,
                            i: i as u8,
                            late: true,
                        });
                    }
                }
                _ => {}
            }
            jump_before |= b.jump.is_some();
        }
        let settled = |b: &Batch| matches!(b.flight, Flight::Landed(_) | Flight::Filled);
        let ackable = if self.rules.in_order {
            p.pipeline.first().is_some_and(settled)
        } else {
            p.pipeline.iter().any(settled)
        };
        if ackable {
            out.push(Action::Ack(pi));
        }
        out.push(Action::Crash(pi));
        if !self.rules.keep_markers {
            let start = p.start.unwrap_or(0);
            for key in 1..start {
                if s.keys[usize::from(key)].is_some_and(|o| o.kind == Kind::Marker) {
                    out.push(Action::Collect { p: pi, key });
                }
            }
        }
    }

    /// Takes `action` in `s`; the violation it causes, if any.
    pub(super) fn step(&self, s: &mut State, action: Action) -> Option<Violation> {
        match action {
            Action::Claim(p) => {
                s.fences += 1;
                let proc = &mut s.procs[usize::from(p)];
                proc.epoch = s.fences;
                proc.phase = Phase::Claimed;
                None
            }
            Action::List(p) => {
                self.list(s, p);
                None
            }
            Action::Walk(p) => {
                self.walk(s, p);
                None
            }
            Action::Start(p) => {
                self.start(s, p);
                None
            }
            Action::StartLate(p) => {
                let proc = &mut s.procs[usize::from(p)];
                let Phase::Starting { key, link } = proc.phase else {
                    return None;
                };
                proc.late_starts -= 1;
                proc.phase = Phase::Dead;
                if usize::from(key) <= KEYS {
                    let obj = Obj {
                        writer: p,
                        epoch: proc.epoch,
                        kind: Kind::Start,
                        link,
                        jump: None,
                    };
                    s.ghosts.push(Ghost { key, obj });
                }
                None
            }
            Action::Close(p) => self.close(s, p),
            Action::Seal { p, jump } => {
                let proc = &mut s.procs[usize::from(p)];
                let key = proc.next;
                let target = jump.then_some(key.saturating_add(2));
                proc.pipeline.push(Batch {
                    key,
                    link: proc.prev,
                    jump: target,
                    voided: false,
                    flight: Flight::Waiting,
                });
                proc.prev = (key, proc.epoch);
                // The real next key, from the jump record the batch carries.
                let id = target.map(|t| format::entry_id(u64::from(t) - 1, 1));
                proc.next = rules::next_key(u64::from(key), id) as u8;
                proc.seals -= 1;
                if jump {
                    proc.jumps -= 1;
                }
                None
            }
            Action::Send { p, i } => {
                s.procs[usize::from(p)].pipeline[usize::from(i)].flight = Flight::Running;
                None
            }
            Action::Land { p, i } => self.land(s, p, i),
            Action::Fail { p, i, late } => {
                let proc = &mut s.procs[usize::from(p)];
                let b = proc.pipeline[usize::from(i)];
                if late {
                    proc.ghosts -= 1;
                    let obj = self.obj_of(p, proc.epoch, &b);
                    s.ghosts.push(Ghost { key: b.key, obj });
                } else {
                    proc.fails -= 1;
                }
                let proc = &mut s.procs[usize::from(p)];
                if !self.rules.resolve && self.bounds.durable {
                    // The key is abandoned: the batch leaves the run.
                    proc.pipeline.remove(usize::from(i));
                } else {
                    let b = &mut proc.pipeline[usize::from(i)];
                    b.flight = Flight::Waiting;
                    b.voided |= self.bounds.durable;
                }
                None
            }
            Action::Ack(p) => self.ack(s, p),
            Action::Crash(p) => {
                let proc = &mut s.procs[usize::from(p)];
                proc.phase = Phase::Dead;
                let epoch = proc.epoch;
                let in_flight: Vec<Batch> = proc
                    .pipeline
                    .iter()
                    .filter(|b| b.flight == Flight::Running)
                    .copied()
                    .collect();
                for b in in_flight {
                    let obj = self.obj_of(p, epoch, &b);
                    s.ghosts.push(Ghost { key: b.key, obj });
                }
                None
            }
            Action::GhostLands(g) => {
                let ghost = s.ghosts.remove(usize::from(g));
                let slot = &mut s.keys[usize::from(ghost.key)];
                if slot.is_none() {
                    *slot = Some(ghost.obj);
                    return self.interference(s, ghost.key, ghost.obj);
                }
                None
            }
            Action::Collect { key, .. } => {
                s.keys[usize::from(key)] = None;
                None
            }
        }
    }

    /// The object a batch's create sends.
    fn obj_of(&self, p: u8, epoch: u8, b: &Batch) -> Obj {
        Obj {
            writer: p,
            epoch,
            kind: if b.voided { Kind::Void } else { Kind::Data },
            link: Some(b.link),
            jump: b.jump,
        }
    }

    /// The listing and chain selection (the real `chain::select`).
    fn list(&self, s: &mut State, p: u8) {
        let summaries: BTreeMap<u64, ObjectSummary> = s
            .keys
            .iter()
            .enumerate()
            .filter_map(|(k, o)| o.map(|o| (k as u64, summary(k as u8, &o))))
            .collect();
        let listed = summaries.keys().fold(0u16, |acc, k| acc | bit(*k as u8));
        let listed_max = summaries.keys().next_back().copied().unwrap_or(0) as u8;
        let proc = &mut s.procs[usize::from(p)];
        proc.listed = listed;
        let selection = chain::select(&summaries).ok();
        let tip = selection.as_ref().and_then(|sel| sel.tip).map(|t| {
            let jump = s.keys[t.sequence as usize].and_then(|o| o.jump);
            (t.sequence as u8, t.epoch as u8, jump)
        });
        proc.chain = selection
            .map(|sel| sel.chain.iter().fold(0u16, |acc, k| acc | bit(*k as u8)))
            .unwrap_or(0);
        if listed == 0 || !self.rules.walk {
            // No walk: start above the listing (an empty listing needs none).
            let first = if listed == 0 {
                u64::from(proc.epoch)
            } else {
                rules::start_sequence_with(
                    u64::from(listed_max) + 1,
                    u64::from(listed_max),
                    u64::from(proc.epoch),
                    u64::from(self.bounds.window),
                )
            };
            proc.phase = starting(first, tip.map(|t| (t.0, t.1)));
        } else {
            proc.phase = Phase::Walking {
                tip,
                real: tip.map(|t| (t.0, t.1)),
                listed_max,
            };
        }
    }

    /// One key of the walk (`recovery::walk`, one key per round).
    fn walk(&self, s: &mut State, p: u8) {
        let proc = &s.procs[usize::from(p)];
        let (epoch, listed) = (proc.epoch, proc.listed);
        let Phase::Walking {
            tip,
            real,
            listed_max,
        } = proc.phase
        else {
            return;
        };
        let Some(t) = tip else {
            s.procs[usize::from(p)].phase = Phase::Dead; // nothing to walk from
            return;
        };
        let id = t.2.map(|j| format::entry_id(u64::from(j) - 1, 1));
        let key = rules::next_key(u64::from(t.0), id);
        if key > KEYS as u64 {
            s.procs[usize::from(p)].phase = Phase::Out;
            return;
        }
        let key = key as u8;
        let found = s.keys[usize::from(key)];
        let stop = |s: &mut State| {
            let proc = &mut s.procs[usize::from(p)];
            let first = rules::start_sequence_with(
                u64::from(key),
                u64::from(listed_max),
                u64::from(epoch),
                u64::from(self.bounds.window),
            );
            proc.phase = starting(first, real);
        };
        let listed_here = listed & bit(key) != 0;
        match found {
            Some(o) if listed_here && !self.rules.adopt_listed => {
                let _ = o;
                stop(s);
            }
            Some(o) => {
                let header = header(key, &o);
                match rules::at_key(&header, o.empty(), (u64::from(t.0), u64::from(t.1))) {
                    rules::AtKey::Continues => {
                        let proc = &mut s.procs[usize::from(p)];
                        proc.chain |= bit(key);
                        proc.phase = Phase::Walking {
                            tip: Some((key, o.epoch, o.jump)),
                            real: Some((key, o.epoch)),
                            listed_max,
                        };
                    }
                    // Stepped over as the run's writer steps over it.
                    rules::AtKey::Filler if self.rules.fillers => {
                        s.procs[usize::from(p)].phase = Phase::Walking {
                            tip: Some((key, t.1, None)),
                            real,
                            listed_max,
                        };
                    }
                    rules::AtKey::Blocks
                        if !listed_here && o.epoch > epoch && o.kind != Kind::Marker =>
                    {
                        s.procs[usize::from(p)].phase = Phase::Dead; // fenced
                    }
                    rules::AtKey::Blocks | rules::AtKey::Filler => stop(s),
                }
            }
            None => {
                s.keys[usize::from(key)] = Some(Obj {
                    writer: p,
                    epoch: epoch.min(key).max(1),
                    kind: Kind::Marker,
                    link: Some((key - 1, 0)),
                    jump: None,
                });
                stop(s);
            }
        }
    }

    /// The start object (`recovery::write_start_object`).
    fn start(&self, s: &mut State, p: u8) {
        let proc = &s.procs[usize::from(p)];
        let epoch = proc.epoch;
        let Phase::Starting { key, link } = proc.phase else {
            return;
        };
        if usize::from(key) > KEYS {
            s.procs[usize::from(p)].phase = Phase::Out;
            return;
        }
        match s.keys[usize::from(key)] {
            None => {
                s.keys[usize::from(key)] = Some(Obj {
                    writer: p,
                    epoch,
                    kind: Kind::Start,
                    link,
                    jump: None,
                });
                s.procs[usize::from(p)].phase = Phase::Closing { start: key };
            }
            Some(o) => {
                let taken = rules::classify_taken(
                    u64::from(epoch),
                    Some(u64::from(o.epoch)),
                    o.kind == Kind::Marker,
                    o.empty(),
                );
                s.procs[usize::from(p)].phase = match taken {
                    Taken::Fenced { .. } => Phase::Dead,
                    _ if o.epoch < epoch => Phase::Starting { key: key + 1, link },
                    _ => Phase::Dead,
                };
            }
        }
    }

    /// The closing fence read: a newer claim fails the open.
    fn close(&self, s: &mut State, p: u8) -> Option<Violation> {
        let fences = s.fences;
        let proc = &mut s.procs[usize::from(p)];
        let Phase::Closing { start } = proc.phase else {
            return None;
        };
        if fences > proc.epoch {
            proc.phase = Phase::Dead;
            return None;
        }
        proc.phase = Phase::Running;
        proc.start = Some(start);
        proc.chain |= bit(start);
        proc.prev = (start, proc.epoch);
        proc.next = start + 1;
        // (b) at the open: every object an older process acknowledged.
        let (epoch, chain) = (proc.epoch, proc.chain);
        for &(key, writer) in &s.acked {
            if s.procs[usize::from(writer)].epoch < epoch && chain & bit(key) == 0 {
                return Some(Violation::Lost {
                    key,
                    writer,
                    newer: p,
                });
            }
        }
        None
    }

    /// A create completes (`create::create_object` and the actor's
    /// outcome: `on_filler` for a filler).
    fn land(&self, s: &mut State, p: u8, i: u8) -> Option<Violation> {
        let proc = &s.procs[usize::from(p)];
        let epoch = proc.epoch;
        let b = proc.pipeline[usize::from(i)];
        let obj = self.obj_of(p, epoch, &b);
        let key = usize::from(b.key);
        let landed = match s.keys[key] {
            None => {
                s.keys[key] = Some(obj);
                Some(Flight::Landed(obj.kind))
            }
            // Ours: the batch or its void (a late request of either).
            Some(o) if o.writer == p && o.epoch == epoch => Some(Flight::Landed(o.kind)),
            Some(o) => {
                let taken = rules::classify_taken(
                    u64::from(epoch),
                    Some(u64::from(o.epoch)),
                    o.kind == Kind::Marker,
                    o.empty(),
                );
                match taken {
                    // Settled by it for good; durable mode goes on past it,
                    // enqueued mode (ids handed out) is poisoned, as is a
                    // batch carrying a jump.
                    // Rule 8 of the first version: delete it, create again.
                    Taken::Filler if !self.rules.fillers => {
                        s.keys[key] = Some(obj);
                        Some(Flight::Landed(obj.kind))
                    }
                    Taken::Filler if self.bounds.durable && b.jump.is_none() => {
                        Some(Flight::Filled)
                    }
                    Taken::Filler | Taken::Fenced { .. } | Taken::Foreign => None,
                }
            }
        };
        let proc = &mut s.procs[usize::from(p)];
        match landed {
            Some(flight) => {
                proc.pipeline[usize::from(i)].flight = flight;
                if s.keys[key] == Some(obj) {
                    return self.interference(s, b.key, obj);
                }
                None
            }
            None => {
                proc.phase = Phase::Dead;
                None
            }
        }
    }

    /// (c): `obj` just landed at `key`; a newer process that ran must not
    /// have it in its run.
    fn interference(&self, s: &State, key: u8, obj: Obj) -> Option<Violation> {
        if obj.kind == Kind::Start || obj.kind == Kind::Marker {
            return None; // dead objects (rule 8), never data
        }
        for (q, proc) in s.procs.iter().enumerate() {
            if proc.epoch > obj.epoch && proc.start.is_some_and(|st| key >= st) {
                return Some(Violation::Interference {
                    key,
                    older: obj.writer,
                    newer: q as u8,
                });
            }
        }
        None
    }

    /// Acknowledges (indexes) landed batches: the front ones in order (K2),
    /// or, with K2 off, the first landed one wherever it is.
    fn ack(&self, s: &mut State, p: u8) -> Option<Violation> {
        let proc = &mut s.procs[usize::from(p)];
        let mut done = Vec::new();
        if self.rules.in_order {
            while let Some(b) = proc.pipeline.first().copied() {
                let kind = match b.flight {
                    Flight::Landed(kind) => Some(kind),
                    Flight::Filled => None,
                    _ => break,
                };
                proc.pipeline.remove(0);
                done.push((b.key, kind));
            }
        } else if let Some(i) = proc
            .pipeline
            .iter()
            .position(|b| matches!(b.flight, Flight::Landed(_) | Flight::Filled))
        {
            let b = proc.pipeline.remove(i);
            let kind = match b.flight {
                Flight::Landed(kind) => Some(kind),
                _ => None,
            };
            done.push((b.key, kind));
        }
        for (key, kind) in &done {
            if kind.is_some() {
                proc.chain |= bit(*key);
            }
        }
        let epoch = proc.epoch;
        for (key, kind) in done {
            if kind != Some(Kind::Data) {
                continue;
            }
            s.acked.push((key, p));
            // (b) after the fact: every newer process that opened has it.
            for (q, other) in s.procs.iter().enumerate() {
                if other.epoch > epoch && other.ran() && other.chain & bit(key) == 0 {
                    return Some(Violation::Lost {
                        key,
                        writer: p,
                        newer: q as u8,
                    });
                }
            }
        }
        s.acked.sort_unstable();
        None
    }
}

fn starting(first: u64, link: Option<(u8, u8)>) -> Phase {
    Phase::Starting {
        key: first.min(KEYS as u64 + 1) as u8,
        link,
    }
}

/// The header an object's tail would show (what the real functions read).
fn header(key: u8, o: &Obj) -> Header {
    Header {
        sequence: u64::from(key),
        epoch: u64::from(o.epoch),
        link: o.link.map(|(sequence, epoch)| Link {
            sequence: u64::from(sequence),
            epoch: u64::from(epoch),
        }),
        reclaim_boundary: 0,
    }
}

fn summary(key: u8, o: &Obj) -> ObjectSummary {
    let h = header(key, o);
    ObjectSummary {
        sequence: h.sequence,
        epoch: h.epoch,
        link: h.link,
        reclaim_boundary: 0,
        next_key: o.jump.map_or(h.sequence + 1, u64::from),
        empty: o.empty() && o.kind != Kind::Marker,
    }
}
