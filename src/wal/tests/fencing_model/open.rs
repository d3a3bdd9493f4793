//! The open sequence of the model: claim (`fence::claim_epoch`), listing
//! (`recovery::recover_with`, chain selection by the real
//! `catalog::chain::select`), the probes of `Wal::open_in`, and the start
//! object with adoption (`recovery::write_start_object`).
//!
//! Each request is one atomic step; the steps of one open are in the order
//! the code makes them, and other processes' steps interleave between any
//! two of them.

use crate::wal::reach::first_data_sequence_with_gap;

use super::check::select;
use super::protocol::{push, Action, Creates, DataStart, Model, Step};
use super::state::{Epoch, Obj, Phase, Seq, State, Tip, EPOCHS};

impl Model {
    pub(super) fn open_steps(&self, s: &State, p: usize, out: &mut Vec<Step>) {
        let id = p as u8;
        let proc = &s.procs[p];
        match proc.phase {
            Phase::Idle => {
                // Idle processes are interchangeable: only the first opens.
                let first_idle = s.procs[..self.bounds.procs]
                    .iter()
                    .position(|q| q.phase == Phase::Idle);
                if first_idle == Some(p) {
                    push(out, Action::ListFences(id), list_fences(s, p, 0), None);
                }
            }
            Phase::ListFences { floor } => {
                push(out, Action::ListFences(id), list_fences(s, p, floor), None);
            }
            Phase::Claim { trying } => self.create_fence(s, p, trying, out),
            Phase::List => push(out, Action::ListObjects(id), self.list(s, p), None),
            Phase::ProbeBeforeStart => {
                let mut next = *s;
                if !self.fenced(&mut next, p) {
                    let proc = &mut next.procs[p];
                    proc.phase = Phase::Start {
                        seq: first_start(proc.listed, proc.epoch),
                    };
                }
                push(out, Action::OpenProbe(id), next, None);
            }
            Phase::Start { seq } => {
                if self.rules.creates == Creates::Reach && !self.reach(s, p).allows(u64::from(seq))
                {
                    // Late objects filled the sequences up to here: a probe
                    // that misses the newer fence verifies the one below.
                    let mut next = *s;
                    if !self.fenced(&mut next, p) {
                        let proc = &mut next.procs[p];
                        proc.verified = proc.verified.max(seq - 1);
                    }
                    push(out, Action::OpenProbe(id), next, None);
                } else {
                    push(
                        out,
                        Action::CreateStart(id),
                        self.create_start(s, p, seq),
                        None,
                    );
                }
            }
            Phase::ProbeAfterStart => {
                let mut next = *s;
                if !self.fenced(&mut next, p) {
                    self.launch(&mut next, p);
                }
                push(out, Action::OpenProbe(id), next, None);
            }
            Phase::Running | Phase::Dead => {}
        }
    }

    /// The fence create: won, lost to another opener, or (while the budget
    /// lasts) answered "exists" over nothing.
    fn create_fence(&self, s: &State, p: usize, trying: Epoch, out: &mut Vec<Step>) {
        let id = p as u8;
        let mut next = *s;
        if s.store.fence(trying) {
            next.procs[p].phase = claim(trying + 1);
            push(
                out,
                Action::CreateFence {
                    p: id,
                    phantom: false,
                },
                next,
                None,
            );
            return;
        }
        next.store.fences |= 1 << trying;
        next.procs[p].epoch = trying;
        next.procs[p].phase = Phase::List;
        push(
            out,
            Action::CreateFence {
                p: id,
                phantom: false,
            },
            next,
            None,
        );
        if s.phantoms > 0 {
            let mut next = *s;
            next.phantoms -= 1;
            let again = if self.rules.dense_claims {
                trying
            } else {
                trying + 1
            };
            next.procs[p].phase = claim(again);
            push(
                out,
                Action::CreateFence {
                    p: id,
                    phantom: true,
                },
                next,
                None,
            );
        }
    }

    /// The listing: the largest sequence and epoch present, the tip's chain.
    fn list(&self, s: &State, p: usize) -> State {
        let mut next = *s;
        let store = s.store;
        let max_seq = store.iter().map(|(seq, _)| seq).max().unwrap_or(0);
        let max_epoch = store.iter().map(|(_, o)| o.epoch).max().unwrap_or(0);
        let proc = &mut next.procs[p];
        proc.listings |= 1 << proc.epoch;
        if max_epoch >= proc.epoch {
            // Objects of this epoch or above: claim above them, list again.
            proc.phase = Phase::ListFences { floor: max_epoch };
            return next;
        }
        let Ok(selection) = select(&store) else {
            // No complete chain: the open fails.
            self.poison(&mut next, p);
            return next;
        };
        let proc = &mut next.procs[p];
        proc.tip = selection.tip.map(|t| Tip {
            seq: t.sequence as Seq,
            epoch: t.epoch as Epoch,
            boundary: t.reclaim_boundary as Seq,
        });
        proc.low_live = selection
            .chain
            .iter()
            .map(|seq| *seq as Seq)
            .find(|seq| store.get(*seq).is_some_and(|o| !o.empty));
        proc.listed = max_seq;
        proc.verified = max_seq;
        proc.phase = if self.rules.probe_before_start {
            Phase::ProbeBeforeStart
        } else {
            Phase::Start {
                seq: first_start(max_seq, proc.epoch),
            }
        };
        next
    }

    /// The start object's create at `seq`: it lands, or an earlier epoch's
    /// late object is there (adopted when it continues the tip, skipped
    /// otherwise, and the start object moves on), or a same-or-later epoch
    /// fails the open.
    fn create_start(&self, s: &State, p: usize, seq: Seq) -> State {
        let mut next = *s;
        let proc = next.procs[p];
        let link = proc.tip.map(|t| (t.seq, t.epoch));
        let floor = proc.tip.map_or(0, |t| t.boundary);
        let obj = Obj {
            epoch: proc.epoch,
            empty: true,
            link,
            boundary: proc.low_live.unwrap_or(seq).max(floor).min(seq),
        };
        match s.store.get(seq) {
            None => {
                next.store.put(seq, obj);
                let proc = &mut next.procs[p];
                proc.tip = Some(Tip {
                    seq,
                    epoch: proc.epoch,
                    boundary: obj.boundary,
                });
                proc.start = seq;
                if self.rules.probe_after_start {
                    proc.phase = Phase::ProbeAfterStart;
                } else {
                    self.launch(&mut next, p);
                }
            }
            Some(late) if late.epoch < proc.epoch => {
                assert!(late.epoch <= seq, "every object has epoch <= sequence (W4)");
                let proc = &mut next.procs[p];
                if late.link == link {
                    proc.tip = Some(Tip {
                        seq,
                        epoch: late.epoch,
                        boundary: late.boundary,
                    });
                    if !late.empty {
                        proc.low_live = Some(proc.low_live.map_or(seq, |l| l.min(seq)));
                    }
                }
                proc.phase = Phase::Start { seq: seq + 1 };
            }
            Some(_) => self.poison(&mut next, p),
        }
        next
    }

    /// A probe of the open: whether the fence above `p`'s epoch exists (then
    /// the open fails).
    fn fenced(&self, s: &mut State, p: usize) -> bool {
        let epoch = s.procs[p].epoch;
        let fenced = s.store.fence(epoch + 1);
        if fenced {
            self.poison(s, p);
        }
        fenced
    }

    /// The actor starts: reach from the start object, data from the first
    /// data sequence.
    fn launch(&self, s: &mut State, p: usize) {
        let gap = self.bounds.gap;
        let proc = &mut s.procs[p];
        let start = proc.start;
        let first = match self.rules.data {
            DataStart::BeyondListing => first_data_sequence_with_gap(
                u64::from(proc.epoch),
                u64::from(proc.listed),
                u64::from(start),
                gap,
            ),
            DataStart::GapAfterStart if proc.epoch > 1 => u64::from(start) + gap,
            DataStart::GapAfterStart | DataStart::AfterStart => u64::from(start) + 1,
        };
        proc.first_data = Seq::try_from(first).unwrap_or(Seq::MAX);
        proc.next = proc.first_data;
        proc.verified = start;
        proc.present = start;
        proc.boundary = proc.tip.map_or(0, |t| t.boundary);
        proc.phase = Phase::Running;
        self.progress(s, p);
    }
}

/// Lists the fences and chooses the epoch to try: one above the largest
/// fence and above `floor`.
fn list_fences(s: &State, p: usize, floor: Epoch) -> State {
    let mut next = *s;
    next.procs[p].phase = claim(s.store.max_fence().max(floor) + 1);
    next
}

fn claim(trying: Epoch) -> Phase {
    assert!(trying < EPOCHS, "the model ran out of epochs");
    Phase::Claim { trying }
}

/// Where the start object goes first: above the listing and at or above the
/// epoch (W4).
fn first_start(listed: Seq, epoch: Epoch) -> Seq {
    (listed + 1).max(epoch)
}
