//! The properties checked in every reached state, and the replay a reader
//! would make now (the real chain selection over the model's storage).
//!
//! (b) and the W6 half of (c) are facts about one step, so the successor
//! function reports them; (a), (d) and the W5 half of (c) are facts about a
//! state, checked here.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::catalog::chain::{self, NoCompleteChain, ObjectSummary, Selection};
use crate::format::Link;

use super::fingerprint::store_fingerprint;
use super::protocol::Violation;
use super::state::{Seq, State, Store, SEQS};

/// Chain selection (`catalog::chain::select`) over the objects present.
pub(super) fn select(store: &Store) -> Result<Selection, NoCompleteChain> {
    let objects: BTreeMap<u64, ObjectSummary> = store
        .iter()
        .map(|(seq, o)| {
            let summary = ObjectSummary {
                sequence: u64::from(seq),
                epoch: u64::from(o.epoch),
                link: o.link.map(|(sequence, epoch)| Link {
                    sequence: u64::from(sequence),
                    epoch: u64::from(epoch),
                }),
                reclaim_boundary: u64::from(o.boundary),
            };
            (u64::from(seq), summary)
        })
        .collect();
    chain::select(&objects)
}

/// The sequences a replay now would index (`None`: no complete chain),
/// remembered per storage state.
#[derive(Default)]
pub(super) struct Replays {
    by_store: HashMap<u64, Option<u64>, BuildHasherDefault<Identity>>,
}

/// Keys that already are fingerprints hash to themselves.
#[derive(Default)]
pub(super) struct Identity(u64);

impl Hasher for Identity {
    fn write(&mut self, _: &[u8]) {
        unreachable!("only fingerprints are hashed")
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Replays {
    fn chain(&mut self, store: &Store) -> Option<u64> {
        *self
            .by_store
            .entry(store_fingerprint(store))
            .or_insert_with(|| {
                select(store)
                    .ok()
                    .map(|sel| sel.chain.iter().fold(0u64, |m, s| m | 1 << s))
            })
    }
}

/// The first property `s` violates, if any.
pub(super) fn check(s: &State, replays: &mut Replays) -> Option<Violation> {
    acked(s, replays)
        .or_else(|| data_sequences(s))
        .or_else(|| dense(s))
}

/// (a) every acknowledged object is present and on the chain a replay now
/// indexes (so also in every later opener's listing and catalog).
fn acked(s: &State, replays: &mut Replays) -> Option<Violation> {
    let mut any = false;
    for seq in 0..SEQS {
        let epoch = s.acked[seq];
        if epoch == 0 {
            continue;
        }
        any = true;
        if s.store.objects[seq].is_none_or(|o| o.epoch != epoch) {
            return Some(Violation::Lost {
                seq: seq as Seq,
                epoch,
                present: false,
            });
        }
    }
    if !any {
        return None;
    }
    let chain = replays.chain(&s.store).unwrap_or(0);
    (0..SEQS)
        .find(|seq| s.acked[*seq] != 0 && chain & (1 << seq) == 0)
        .map(|seq| Violation::Lost {
            seq: seq as Seq,
            epoch: s.acked[seq],
            present: true,
        })
}

/// (c), rule W5: no object with entries of an older epoch lies at a data
/// sequence of a process that started serving (alive or not since: the
/// rule is about its listing, and a property that a process's own later
/// steps cannot repair is what the explorer's reduction needs).
fn data_sequences(s: &State) -> Option<Violation> {
    for p in &s.procs {
        if p.first_data == 0 {
            continue;
        }
        for seq in (p.first_data as usize)..SEQS {
            if let Some(o) = s.store.objects[seq] {
                if o.epoch < p.epoch && !o.empty {
                    return Some(Violation::OlderAtData {
                        seq: seq as Seq,
                        older: o.epoch,
                        newer: p.epoch,
                    });
                }
            }
        }
    }
    None
}

/// (d) every claimed epoch has every lower fence.
fn dense(s: &State) -> Option<Violation> {
    for p in &s.procs {
        if p.epoch == 0 {
            continue;
        }
        let below: u16 = ((1u32 << p.epoch) - 2) as u16;
        if s.store.fences & below != below {
            let missing = (1..p.epoch).find(|e| !s.store.fence(*e)).unwrap_or(0);
            return Some(Violation::NotDense {
                epoch: p.epoch,
                missing,
            });
        }
    }
    None
}
