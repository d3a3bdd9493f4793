//! The reference model at a restart: the replay of every region after a
//! reopen, a crash or a second opener, checked against every fate, then
//! settled (what replayed is promised from now on; what did not, where
//! that was allowed, is gone for good) for the next life.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use objwal::format::sequence_of;
use objwal::{Entry, Hole, RegionId, RegionInfo};

use super::{Fate, Key, Model};

impl Model {
    /// The store was opened again (a reopen, a crash, a second opener):
    /// `replay` is every region read from 0, `infos` its `regions()`,
    /// `holes` what the reads reported, `lost` the objects whose entries
    /// may be missing (deleted by hand, or named unreplayed). Checks them
    /// and settles every fate.
    pub fn restarted(
        &mut self,
        replay: &BTreeMap<RegionId, Vec<Entry>>,
        infos: &[RegionInfo],
        holes: &[Hole],
        lost: &BTreeSet<u64>,
    ) -> Result<(), String> {
        // Holes at a reopen come from objects judged damaged: two reads
        // that failed alike (a corrupted-read fault of two reads, under
        // `on_damaged_object = "quarantine"`). One bad read in transit is
        // never damage (issue 18 item 4).
        // A moved-aside object is named at every open.
        if let Some(h) = holes
            .iter()
            .find(|h| !self.corruption && !self.moved_aside.contains(&h.sequence))
        {
            return Err(format!(
                "a reopen reports hole {h:?} with fewer than two corrupted reads injected"
            ));
        }
        let in_hole = |region: RegionId, id: u64| {
            holes
                .iter()
                .any(|h| h.region == region && h.first_id <= id && id <= h.last_id)
        };
        let mut shown: HashMap<Key, u64> = HashMap::new();
        let mut shown_sequences = BTreeSet::new();
        let maybe: BTreeSet<RegionId> = self
            .maybe_released
            .union(&self.releasing)
            .copied()
            .collect();
        // A release is forever (rfcs/0005): every release that returned
        // `Ok` is reported at every open, also once collection deleted the
        // object carrying its record (issue 30 item 3: it was forgotten).
        let for_good = self.released.clone();
        let mut reported = BTreeSet::new();
        for info in infos {
            if info.released {
                reported.insert(info.region);
                self.released.insert(info.region);
            } else if self.released.contains(&info.region) {
                return Err(format!(
                    "region {}: released, yet the reopen reports it not released",
                    info.region
                ));
            }
        }
        for (region, entries) in replay {
            let mut last = 0;
            for entry in entries {
                if entry.id <= last {
                    return Err(format!(
                        "replay of region {region}: id {} after {last}",
                        entry.id
                    ));
                }
                last = entry.id;
                let durable_mark = self.durable_marks.get(region).copied().unwrap_or(0);
                if entry.id <= durable_mark {
                    return Err(format!(
                        "region {region}: id {} replayed, at or below the durable flush mark {durable_mark}",
                        entry.id
                    ));
                }
                let Some(key) = self.check_entry(*region, entry)? else {
                    continue;
                };
                if shown.insert(key, entry.id).is_some() {
                    return Err(format!("replay: entry {key} replayed twice"));
                }
                shown_sequences.insert(sequence_of(entry.id));
            }
            if self.released.contains(region) && !entries.is_empty() {
                return Err(format!(
                    "released region {region} replayed {} entries",
                    entries.len()
                ));
            }
            // A region that replays nothing because a hole took its
            // entries says nothing about its release.
            let holed = holes.iter().any(|h| h.region == *region);
            if maybe.contains(region) && entries.is_empty() && !holed {
                // The release may have landed (and its record been collected).
                self.released.insert(*region);
            }
        }
        let mut lost_sequences = BTreeSet::new();
        let mut gone = Vec::new();
        for (key, e) in &mut self.entries {
            if let Some(id) = shown.get(key) {
                e.id = Some(*id);
                e.fate = Fate::Promised;
                continue;
            }
            let obsolete = e
                .id
                .is_some_and(|id| id <= self.watermark_ever.get(&e.region).copied().unwrap_or(0));
            let excused = match e.id {
                Some(id) => lost.contains(&sequence_of(id)) || in_hole(e.region, id),
                // An append that failed has no id to place its entry: a
                // hole of its region, or any lost object, may hold it.
                None => {
                    e.fate != Fate::Promised
                        && (!lost.is_empty() || holes.iter().any(|h| h.region == e.region))
                }
            };
            if excused && !self.released.contains(&e.region) {
                // Left out of this replay by a named hole or a lost object:
                // the object may still be intact at rest (quarantined after
                // reads that failed alike, or restored), so the entry may
                // replay again later, at most once; an obsolete one too,
                // when the mark that hid it was not durable (a hole says
                // "unknown", never "gone").
                e.fate = Fate::Maybe;
                continue;
            }
            gone.push(*key);
            if self.released.contains(&e.region) || obsolete {
                continue;
            }
            match (e.fate, e.id) {
                (Fate::Promised, id) => {
                    return Err(format!(
                        "region {}: promised entry {key} (id {id:?}) did not replay",
                        e.region
                    ));
                }
                (Fate::Admitted, Some(id)) => {
                    lost_sequences.insert(sequence_of(id));
                }
                _ => {}
            }
        }
        if let Some(s) = lost_sequences.intersection(&shown_sequences).next() {
            return Err(format!(
                "object {s} replayed in part: some of its admitted entries were lost"
            ));
        }
        if let (Some(lost), Some(replayed)) = (lost_sequences.first(), shown_sequences.last()) {
            if lost < replayed {
                return Err(format!(
                    "object {lost} was lost but the later object {replayed} replayed"
                ));
            }
        }
        for key in gone {
            self.entries.remove(&key);
            self.gone.insert(key);
        }
        self.maybe_released = maybe.difference(&self.released).copied().collect();
        if let Some(region) = for_good.difference(&reported).next() {
            return Err(format!(
                "region {region}: its release returned Ok, yet the reopen does not report it \
                 (a release is forever)"
            ));
        }
        self.released = reported;
        self.releasing.clear();
        // Marks not known durable may or may not have become so; the
        // durable ones hide their entries in the new life.
        self.pending_marks.clear();
        self.watermark = self.durable_marks.clone();
        self.id_floor = self.durable_marks.clone();
        self.corruption = false;
        self.quarantined = holes.iter().map(|h| h.sequence).collect();
        self.followed_only.clear();
        self.life += 1;
        Ok(())
    }
}
