//! The abstract state of the fencing model: storage (objects by sequence,
//! fences), the processes, and the requests still in flight.
//!
//! Invariants kept by every transition (so that equal situations are equal
//! values and the explorer visits each once): slots hold their items first
//! and `Default` after them; multisets (ghosts, orphans) are sorted; a dead
//! process keeps only what can still matter (its epoch, its listings, its
//! creates in flight).

use std::fmt;

/// A sequence of the model (small: the explorer stays below [`SEQS`]).
pub(super) type Seq = u8;
/// An epoch of the model (fences are bits of a `u16`).
pub(super) type Epoch = u8;

/// Sequences the model can hold (1.. below this).
pub(super) const SEQS: usize = 32;
/// Epochs the model can claim (1.. below this).
pub(super) const EPOCHS: u8 = 16;
/// Deletes of an older marker one data create makes before it reports the
/// sequence stale: `MARKER_DELETES` of `src/wal/create.rs` (private there).
pub(super) const MARKER_DELETES: u8 = 3;

/// A fixed-capacity list of `Copy` items: items first, defaults after, so
/// two lists with the same items are the same value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) struct Slots<T: Copy + Default, const N: usize> {
    items: [T; N],
    len: u8,
}

impl<T: Copy + Default, const N: usize> Default for Slots<T, N> {
    fn default() -> Self {
        Slots {
            items: [T::default(); N],
            len: 0,
        }
    }
}

impl<T: Copy + Default + Ord, const N: usize> Slots<T, N> {
    /// Inserts keeping the items sorted (for multisets).
    pub(super) fn insert_sorted(&mut self, item: T) {
        self.push(item);
        self.items[..self.len as usize].sort_unstable();
    }
}

impl<T: Copy + Default, const N: usize> Slots<T, N> {
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push(&mut self, item: T) {
        assert!(
            (self.len as usize) < N,
            "a model bound is too small: {N} slots are full"
        );
        self.items[self.len as usize] = item;
        self.len += 1;
    }

    pub(super) fn remove(&mut self, index: usize) -> T {
        let item = self.items[index];
        let len = self.len as usize;
        self.items.copy_within(index + 1..len, index);
        self.items[len - 1] = T::default();
        self.len -= 1;
        item
    }

    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }

    pub(super) fn as_slice(&self) -> &[T] {
        &self.items[..self.len as usize]
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.items[..self.len as usize]
    }

    pub(super) fn first(&self) -> Option<&T> {
        self.as_slice().first()
    }

    pub(super) fn last(&self) -> Option<&T> {
        self.as_slice().last()
    }
}

/// What the protocol and chain selection read of an object: its header and
/// whether it holds anything. Two creates of the same bytes are equal.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub(super) struct Obj {
    pub(super) epoch: Epoch,
    /// No segment and no release record (a start object, a marker).
    pub(super) empty: bool,
    pub(super) link: Option<(Seq, Epoch)>,
    pub(super) boundary: Seq,
}

/// Objects by sequence and the fences present.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) struct Store {
    pub(super) objects: [Option<Obj>; SEQS],
    /// Bit `e` set: `fences/<e>.fence` exists.
    pub(super) fences: u16,
}

impl Store {
    pub(super) fn get(&self, seq: Seq) -> Option<Obj> {
        self.objects[seq as usize]
    }

    pub(super) fn put(&mut self, seq: Seq, obj: Obj) {
        assert!(
            (seq as usize) < SEQS,
            "the model ran out of sequences: raise SEQS"
        );
        self.objects[seq as usize] = Some(obj);
    }

    pub(super) fn delete(&mut self, seq: Seq) {
        self.objects[seq as usize] = None;
    }

    pub(super) fn fence(&self, epoch: Epoch) -> bool {
        epoch < EPOCHS && self.fences & (1 << epoch) != 0
    }

    /// The largest fence present (0 when none).
    pub(super) fn max_fence(&self) -> Epoch {
        (16 - self.fences.leading_zeros()).saturating_sub(1) as Epoch
    }

    /// The objects present, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Seq, Obj)> + '_ {
        self.objects
            .iter()
            .enumerate()
            .filter_map(|(s, o)| o.map(|o| (s as Seq, o)))
    }
}

/// Where a process is in its life (rfcs/0006 and `Wal::open_in`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub(super) enum Phase {
    /// Not opened yet.
    #[default]
    Idle,
    /// Lists the fences (again, with `floor`, after a listing met objects of
    /// its epoch or above) to choose the epoch to try.
    ListFences { floor: Epoch },
    /// Creates the fence of `trying`.
    Claim { trying: Epoch },
    /// Its fence is claimed: lists the objects.
    List,
    /// Listed: the probe before the start object.
    ProbeBeforeStart,
    /// Creates the start object at `seq` (probing first when beyond reach).
    Start { seq: Seq },
    /// The start object is written: the probe after it.
    ProbeAfterStart,
    /// Serving: seals, creates, probes, acknowledges.
    Running,
    /// Poisoned, fenced, or its open failed: it acts no more.
    Dead,
}

/// The state of a sealed batch's create.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub(super) enum Flight {
    /// Waiting for a slot or for reach.
    #[default]
    Waiting,
    /// Its create runs; W6 may still delete `deletes` older markers.
    Running { deletes: u8 },
    /// Landed, waiting for a probe and for the batches before it.
    Durable,
}

/// A sealed batch in a pipeline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub(super) struct Batch {
    pub(super) seq: Seq,
    pub(super) obj: Obj,
    pub(super) flight: Flight,
}

/// A create still running although nobody waits for it: a batch of a failed
/// pipeline, or any create of a poisoned process. It may still land (and,
/// for a data create, delete older markers first, W6).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub(super) struct Orphan {
    pub(super) seq: Seq,
    pub(super) obj: Obj,
    pub(super) deletes: u8,
}

/// A failed request that may still land.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub(super) struct Ghost {
    pub(super) seq: Seq,
    pub(super) obj: Obj,
}

/// A probe in flight: what it covers, what it read, and whether its answer
/// still counts (a later probe's answer came first).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub(super) struct Probe {
    pub(super) covers: Option<Seq>,
    pub(super) present: Seq,
    /// The fence of `epoch + 1` existed when the probe read it.
    pub(super) fenced: bool,
    /// A newer process had listed when the probe read (property (b)).
    pub(super) newer_listed: bool,
    pub(super) stale: bool,
}

/// The catalog's tip as the process knows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub(super) struct Tip {
    pub(super) seq: Seq,
    pub(super) epoch: Epoch,
    pub(super) boundary: Seq,
}

/// Batches one pipeline can hold.
pub(super) const PIPELINE: usize = 4;
/// Probes in flight at once (at least `max_inflight_creates`).
pub(super) const PROBES: usize = 3;
/// Orphaned creates of one process.
pub(super) const ORPHANS: usize = 4;
/// Failed requests of one process that may still land.
pub(super) const GHOSTS: usize = 4;

/// One process of the model.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub(super) struct Proc {
    pub(super) phase: Phase,
    /// The claimed epoch (0 before the first claim).
    pub(super) epoch: Epoch,
    /// Bit `e`: this process listed the objects while holding epoch `e`.
    pub(super) listings: u16,
    /// The largest sequence of its listing.
    pub(super) listed: Seq,
    pub(super) tip: Option<Tip>,
    /// The lowest indexed object holding entries (what the boundary keeps).
    pub(super) low_live: Option<Seq>,
    /// The largest boundary carried by an object it sealed.
    pub(super) boundary: Seq,
    pub(super) start: Seq,
    pub(super) first_data: Seq,
    /// Rule W5: the sequence verified present by a probe that missed the
    /// newer fence.
    pub(super) verified: Seq,
    /// The highest sequence known present.
    pub(super) present: Seq,
    /// The sequence of the next batch.
    pub(super) next: Seq,
    /// Batches sealed so far (bounded by `Bounds::seals`).
    pub(super) sealed: u8,
    /// Watermark jumps so far (bounded by `Bounds::jumps`).
    pub(super) jumped: u8,
    pub(super) pipeline: Slots<Batch, PIPELINE>,
    pub(super) marker: Option<(Seq, Obj)>,
    pub(super) probes: Slots<Probe, PROBES>,
    pub(super) started_covers: Option<Seq>,
    pub(super) started_present: Seq,
    pub(super) orphans: Slots<Orphan, ORPHANS>,
    /// Its failed requests that may still land (a request timed out at the
    /// client and executed later by the server).
    pub(super) ghosts: Slots<Ghost, GHOSTS>,
    /// Failures (of creates, markers, probes) the environment may still
    /// inject into this process's requests.
    pub(super) failures: u8,
}

/// Processes the model can hold.
pub(super) const PROCS: usize = 3;

/// The whole state: storage, processes, what was acknowledged, and the
/// phantom answers left.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct State {
    pub(super) store: Store,
    pub(super) procs: [Proc; PROCS],
    /// Per sequence, the epoch of the acknowledged object there (0: none).
    pub(super) acked: [Epoch; SEQS],
    /// Fence creates the environment may still answer "exists" over nothing.
    pub(super) phantoms: u8,
}

impl State {
    pub(super) fn initial(failures: [u8; PROCS], phantoms: u8) -> Self {
        let mut procs = [Proc::default(); PROCS];
        for (proc, failures) in procs.iter_mut().zip(failures) {
            proc.failures = failures;
        }
        State {
            store: Store {
                objects: [None; SEQS],
                fences: 0,
            },
            procs,
            acked: [0; SEQS],
            phantoms,
        }
    }
}

/// One line: the objects (`seq:eEPOCH`, `*` when empty, `>link`), the fences,
/// each process's phase and the acknowledged sequences.
impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "objects [")?;
        for (i, (seq, o)) in self.store.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            let empty = if o.empty { "*" } else { "" };
            write!(f, "{sep}{seq}:e{}{empty}", o.epoch)?;
            if let Some((ls, _)) = o.link {
                write!(f, ">{ls}")?;
            }
        }
        write!(f, "] fences {{")?;
        let fences: Vec<String> = (1..EPOCHS)
            .filter(|e| self.store.fence(*e))
            .map(|e| e.to_string())
            .collect();
        write!(f, "{}}}", fences.join(","))?;
        for (i, p) in self.procs.iter().enumerate() {
            if p.phase == Phase::Idle {
                continue;
            }
            write!(f, " | P{i} e{} {:?}", p.epoch, p.phase)?;
            if p.phase == Phase::Running {
                write!(
                    f,
                    " next {} verified {} present {} pipeline [",
                    p.next, p.verified, p.present
                )?;
                for (j, b) in p.pipeline.as_slice().iter().enumerate() {
                    let state = match b.flight {
                        Flight::Waiting => "waiting",
                        Flight::Running { .. } => "running",
                        Flight::Durable => "durable",
                    };
                    let sep = if j == 0 { "" } else { " " };
                    write!(f, "{sep}{}:{state}", b.seq)?;
                }
                write!(f, "]")?;
                if let Some((m, _)) = p.marker {
                    write!(f, " marker {m}")?;
                }
                if !p.probes.is_empty() {
                    write!(f, " probes {}", p.probes.len())?;
                }
            }
        }
        let acked: Vec<String> = (0..SEQS)
            .filter(|s| self.acked[*s] != 0)
            .map(|s| s.to_string())
            .collect();
        write!(f, " | acked {{{}}}", acked.join(","))
    }
}
