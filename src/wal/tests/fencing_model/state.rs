//! The abstract state of the fencing model: keys in storage, the fences,
//! the processes with their runs, and the requests that may still land.

use std::fmt;

/// Keys `1..=KEYS` exist in the model (index 0 unused).
pub(super) const KEYS: usize = 14;

/// What an object at a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// A start object (empty).
    Start,
    /// A batch with entries.
    Data,
    /// A batch's void (no entries).
    Void,
    /// A settle marker (empty, linked to epoch 0).
    Marker,
}

/// One object in storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Obj {
    /// The process that wrote it.
    pub(super) writer: u8,
    pub(super) epoch: u8,
    pub(super) kind: Kind,
    /// Its predecessor (key, epoch).
    pub(super) link: Option<(u8, u8)>,
    /// The key its run goes on at, when it carries a jump.
    pub(super) jump: Option<u8>,
}

impl Obj {
    /// Whether it holds nothing (start objects, markers; voids in the model).
    pub(super) fn empty(&self) -> bool {
        self.kind != Kind::Data
    }
}

/// Where a batch's create stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Flight {
    Waiting,
    Running,
    /// Landed as this kind (the batch, or its void).
    Landed(Kind),
    /// Its key is settled by a filler (an older epoch's empty object).
    Filled,
}

/// A sealed batch of a running process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Batch {
    pub(super) key: u8,
    pub(super) link: (u8, u8),
    pub(super) jump: Option<u8>,
    /// Its key is settled by its void from now on (K1).
    pub(super) voided: bool,
    pub(super) flight: Flight,
}

/// The open's progress, then the running process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    Idle,
    /// Epoch claimed; the listing is next.
    Claimed,
    /// Walking the run of `tip` (key, epoch, jump: the run's last key, an
    /// object or a filler); `real` is the last object the walk stands on
    /// (what the start object links to).
    Walking {
        tip: Option<(u8, u8, Option<u8>)>,
        real: Option<(u8, u8)>,
        listed_max: u8,
    },
    /// Creating the start object at `key`, linked to `link`.
    Starting {
        key: u8,
        link: Option<(u8, u8)>,
    },
    /// The start object landed at `start`; the closing fence read is next.
    Closing {
        start: u8,
    },
    Running,
    /// Stopped: fenced, poisoned, crashed, or its open failed.
    Dead,
    /// Ran out of the model's keys: explores nothing further.
    Out,
}

/// One process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Proc {
    pub(super) epoch: u8,
    pub(super) phase: Phase,
    /// Keys listed at its open (a bit per key).
    pub(super) listed: u16,
    /// Keys on its chain: what it indexed at open, adopted, and its own.
    pub(super) chain: u16,
    /// Its start key, once it ran.
    pub(super) start: Option<u8>,
    /// The key and epoch its next batch links to; the key it goes at.
    pub(super) prev: (u8, u8),
    pub(super) next: u8,
    pub(super) pipeline: Vec<Batch>,
    pub(super) seals: u8,
    pub(super) fails: u8,
    pub(super) ghosts: u8,
    pub(super) jumps: u8,
    /// Start objects it may still send that land after its open failed.
    pub(super) late_starts: u8,
}

impl Proc {
    pub(super) fn ran(&self) -> bool {
        self.start.is_some()
    }
}

/// A create that failed (or whose process crashed) but may land later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Ghost {
    pub(super) key: u8,
    pub(super) obj: Obj,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct State {
    pub(super) keys: [Option<Obj>; KEYS + 1],
    /// Fences claimed (dense: 1..=fences).
    pub(super) fences: u8,
    pub(super) procs: Vec<Proc>,
    pub(super) ghosts: Vec<Ghost>,
    /// Acknowledged data objects: (key, writer).
    pub(super) acked: Vec<(u8, u8)>,
}

pub(super) fn bit(key: u8) -> u16 {
    1u16.checked_shl(u32::from(key)).unwrap_or(0)
}

impl fmt::Display for State {
    /// One line: the keys, then each process.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, o) in self.keys.iter().enumerate().skip(1) {
            if let Some(o) = o {
                let kind = match o.kind {
                    Kind::Start => "S",
                    Kind::Data => "D",
                    Kind::Void => "V",
                    Kind::Marker => "M",
                };
                write!(f, "{k}:{kind}{}e{} ", o.writer, o.epoch)?;
            }
        }
        for (i, p) in self.procs.iter().enumerate() {
            write!(f, "| p{i} e{} {:?}", p.epoch, p.phase)?;
            if p.phase == Phase::Running {
                let flights: Vec<String> = p
                    .pipeline
                    .iter()
                    .map(|b| format!("{}{}{:?}", b.key, if b.voided { "v" } else { "" }, b.flight))
                    .collect();
                write!(f, " next {} [{}]", p.next, flights.join(" "))?;
            }
        }
        write!(f, " | acked {:?}", self.acked)
    }
}
