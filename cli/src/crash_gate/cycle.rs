//! The check of one reopen of the crash gate (see the parent module for
//! the rules): the replayed entries one at a time, then what did not
//! replay; it settles the history for the next life.

use std::collections::{BTreeSet, HashMap, HashSet};

use objwal::format::sequence_of;

use super::replay::{Reads, Seen};
use super::{payload_of, raise, CycleReport, Fate, History, Key, LifeLog};
use crate::payload;

/// The check of one reopen, after the life's log was taken in.
pub struct Cycle<'h> {
    history: &'h mut History,
    life: LifeLog,
    report: CycleReport,
    seen_ids: HashSet<(u64, u64)>,
    seen_keys: HashSet<Key>,
    last_id: HashMap<u64, u64>,
    last_counter: HashMap<(u64, u32, u16), u32>,
    replayed_sequences: BTreeSet<u64>,
    /// Regions the reopened store reports released.
    released_now: BTreeSet<u64>,
    /// Regions the reopened store reports with segments, not released.
    listed_unreleased: BTreeSet<u64>,
    /// The per-region reads, for the comparison with bulk replays.
    reads: Reads,
}

impl<'h> Cycle<'h> {
    /// The check of `history`'s next reopen after a life that logged `life`.
    pub(super) fn new(history: &'h mut History, life: LifeLog, report: CycleReport) -> Self {
        Cycle {
            history,
            life,
            report,
            seen_ids: HashSet::new(),
            seen_keys: HashSet::new(),
            last_id: HashMap::new(),
            last_counter: HashMap::new(),
            replayed_sequences: BTreeSet::new(),
            released_now: BTreeSet::new(),
            listed_unreleased: BTreeSet::new(),
            reads: Reads::default(),
        }
    }
}

impl Cycle<'_> {
    /// The regions the replay must read: every region any life named.
    pub fn regions(&self) -> std::ops::RangeInclusive<u64> {
        self.history.regions()
    }

    /// What the reopened store reports about `region`: whether it is
    /// released. A region no life named is resurrected.
    pub fn region_info(&mut self, region: u64, released: bool) {
        if !self.history.regions().contains(&region) {
            self.report.resurrected.add(format!(
                "region {region}: the reopened store lists it, but no life appended to it"
            ));
        }
        if released {
            self.released_now.insert(region);
        } else {
            self.listed_unreleased.insert(region);
        }
    }

    fn is_released(&self, region: u64) -> bool {
        self.history.released.contains(&region) || self.released_now.contains(&region)
    }

    /// One replayed entry of `region`, in read order.
    pub fn entry(&mut self, region: u64, id: u64, data: &[u8]) {
        self.reads.add(region, id, data);
        let released = self.is_released(region);
        let report = &mut self.report;
        report.replayed += 1;
        let last = self.last_id.entry(region).or_insert(0);
        if id <= *last {
            report
                .misordered
                .add(format!("region {region}: id {id} replayed after id {last}"));
        }
        *last = (*last).max(id);
        if !self.seen_ids.insert((region, id)) {
            report
                .duplicated
                .add(format!("region {region}: id {id} replayed twice"));
        }
        self.replayed_sequences.insert(sequence_of(id));
        let identity = match payload::check(data) {
            Ok(identity) => identity,
            Err(e) => {
                report
                    .corrupt
                    .add(format!("region {region} id {id}: not a payload: {e}"));
                return;
            }
        };
        let key = (identity.run, identity.writer, identity.counter);
        if !self.seen_keys.insert(key) {
            report.duplicated.add(format!(
                "region {region} id {id}: entry {key:?} replayed a second time"
            ));
        }
        let Some(known) = self.history.known.get_mut(&key) else {
            report.resurrected.add(format!(
                "region {region} id {id}: entry {key:?} was never appended, or was gone at an earlier reopen"
            ));
            return;
        };
        if known.region != region || data != payload_of(key, region) {
            report.corrupt.add(format!(
                "region {region} id {id}: {} bytes differ from entry {key:?} appended to region {}",
                data.len(),
                known.region
            ));
            return;
        }
        if known.id.is_some_and(|acked| acked != id) {
            report.corrupt.add(format!(
                "region {region}: entry {key:?} acknowledged as id {:?} replayed as id {id}",
                known.id
            ));
        }
        if matches!(known.fate, Fate::Refused | Fate::Void) || released {
            let why = if released {
                "its region was released"
            } else if known.fate == Fate::Void {
                "its append returned NotDurable (its key settled by the void)"
            } else {
                "its append was refused"
            };
            report.resurrected.add(format!(
                "region {region} id {id}: entry {key:?} replayed although {why}"
            ));
        }
        if matches!(known.fate, Fate::Attempted | Fate::Failed) {
            report.unlogged += 1;
        }
        known.id = Some(id);
        let counter = self.last_counter.entry((region, key.0, key.1)).or_insert(0);
        if key.2 <= *counter {
            report.misordered.add(format!(
                "region {region}: writer {} of life {} replayed its entry {} after its entry {counter}",
                key.1, key.0, key.2
            ));
        }
        *counter = (*counter).max(key.2);
    }

    /// A start per region for a bulk replay "from a random id", drawn by
    /// `rng` from what the reads gave ([`Reads::draw_starts`]).
    pub fn replay_starts(&self, rng: &mut impl rand::Rng) -> std::collections::BTreeMap<u64, u64> {
        self.reads.draw_starts(self.regions(), rng)
    }

    /// Compares the bulk replay `label` of every region from `starts`
    /// (its entries in stream order, or the error that ended it) with the
    /// per-region reads; a difference is a `replay differs` violation.
    pub fn replay(
        &mut self,
        label: &str,
        starts: &std::collections::BTreeMap<u64, u64>,
        replayed: Result<Vec<(u64, Seen)>, String>,
    ) {
        self.report.paths.replays_compared += starts.len() as u64;
        match replayed {
            Ok(entries) => {
                self.report.paths.replay_entries += entries.len() as u64;
                for line in self.reads.compare(starts, &entries) {
                    self.report.replay_differs.add(format!("{label}: {line}"));
                }
            }
            Err(e) => self
                .report
                .replay_differs
                .add(format!("{label} failed: {e}")),
        }
    }

    /// Checks what did not replay, settles the history for the next life
    /// and returns the report.
    pub fn finish(mut self) -> CycleReport {
        let h = &mut *self.history;
        for region in &self.released_now {
            h.releasing.remove(region);
            h.released.insert(*region);
        }
        for region in &h.released {
            if self.listed_unreleased.contains(region) {
                self.report.lost.add(format!(
                    "region {region}: its release returned, yet the reopen reports it not released"
                ));
            }
        }
        for region in &self.life.releasing {
            if !h.released.contains(region) {
                h.releasing.insert(*region);
            }
        }
        let mut lost_sequences = BTreeSet::new();
        let mut gone = Vec::new();
        let mut promised = 0;
        for (key, known) in h.known.iter_mut() {
            let must = match known.fate {
                Fate::Durable | Fate::Settled => true,
                Fate::Admitted => known
                    .id
                    .is_some_and(|id| sequence_of(id) <= self.life.durable_sequence),
                Fate::Attempted | Fate::Failed | Fate::Refused | Fate::Void => false,
            };
            // Only this life's entries are still durable or admitted: every
            // older one was settled or forgotten by an earlier reopen.
            if must && matches!(known.fate, Fate::Durable | Fate::Admitted) {
                promised += 1;
            }
            let region = known.region;
            let seen = self.seen_keys.contains(key);
            if let Some(id) = known.id {
                raise(&mut h.earlier_ids, region, id);
                if seen {
                    raise(&mut h.durable_ids, region, id);
                }
            }
            if seen {
                known.fate = Fate::Settled;
                continue;
            }
            gone.push(*key);
            let released = h.released.contains(&region) || h.releasing.contains(&region);
            let obsolete = known
                .id
                .is_some_and(|id| id <= h.called_watermarks.get(&region).copied().unwrap_or(0));
            if released || obsolete {
                if !matches!(
                    known.fate,
                    Fate::Attempted | Fate::Failed | Fate::Refused | Fate::Void
                ) {
                    self.report.collected += 1;
                }
            } else if must {
                self.report.lost.add(format!(
                    "region {region}: entry {key:?} (id {}) was promised durable and did not replay",
                    known.id.map_or("?".into(), |id| id.to_string())
                ));
            } else if let (Fate::Admitted, Some(id)) = (known.fate, known.id) {
                self.report.allowed_loss += 1;
                lost_sequences.insert(sequence_of(id));
            }
        }
        self.report.promised = promised;
        for key in gone {
            h.known.remove(&key);
        }
        for (region, id) in &self.last_id {
            raise(&mut h.earlier_ids, *region, *id);
        }
        for (region, id) in &h.watermarks {
            raise(&mut h.earlier_ids, *region, *id);
        }
        self.report.allowed_loss_objects = lost_sequences.len() as u64;
        for sequence in lost_sequences.intersection(&self.replayed_sequences) {
            self.report.lost.add(format!(
                "object {sequence} was lost in part: some of its entries replayed, some did not"
            ));
        }
        if let (Some(first_lost), Some(last_replayed)) =
            (lost_sequences.first(), self.replayed_sequences.last())
        {
            if first_lost < last_replayed {
                self.report.lost.add(format!(
                    "object {first_lost} was lost but the later object {last_replayed} replayed: the loss is not a suffix"
                ));
            }
        }
        self.report
    }
}
