//! The reference model: what must be true of the log, in terms of the
//! entries appended so far and what each call answered. Pure: outcomes in,
//! `Err(violation)` out.
//!
//! Each entry has a fate:
//!
//! | fate | what the answers so far say | reads in this life | replay after a restart |
//! |---|---|---|---|
//! | `Pending` | its call has not answered yet | may show it | - |
//! | `Maybe` | durable mode: its append failed with `Storage`, `Lost` or `Poisoned` (its fate open) | never | may (a create that landed), at most once |
//! | `Refused` | never admitted (or admitted by a fenced store), or answered `NotDurable` (nothing of its batch is logged) | never | never |
//! | `Admitted` | enqueued mode: admitted, not known durable | may, in id order | may be lost, whole objects and only a suffix |
//! | `Promised` | acknowledged durable, covered by a barrier, or replayed | must, unless hidden or skipped | must, unless obsolete and collected, or released |
//!
//! A read shows nothing of a released region (also one whose release
//! failed in this life: the release holds in memory), nothing at or below
//! the watermark in durable mode, and no hole unless a corrupted read was
//! injected in this life. Once an entry missing from a replay is gone, it
//! stays gone ("nothing already collectable comes back").

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use objwal::format::sequence_of;
use objwal::{Entry, Hole, RegionId};

/// An entry's name: the order it was drawn in.
pub type Key = u32;

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Pending,
    Maybe,
    Refused,
    Admitted,
    Promised,
}

#[derive(Debug, Clone)]
struct Known {
    region: RegionId,
    data: Bytes,
    id: Option<u64>,
    fate: Fate,
    life: u32,
}

/// The bytes of entry `key`: its key, its region, then filler.
fn payload(key: Key, region: RegionId, len: usize) -> Bytes {
    let mut data = Vec::with_capacity(len.max(5));
    data.extend_from_slice(&key.to_le_bytes());
    data.push(region as u8);
    data.extend((0..len.saturating_sub(5)).map(|i| (key as usize ^ i) as u8));
    Bytes::from(data)
}

fn key_of(data: &[u8]) -> Option<Key> {
    Some(Key::from_le_bytes(data.get(..4)?.try_into().ok()?))
}

/// What must be true, and what may be.
#[derive(Debug)]
pub struct Model {
    pub enqueued: bool,
    entries: BTreeMap<Key, Known>,
    gone: HashSet<Key>,
    next: Key,
    pub life: u32,
    /// Watermarks requested in this life (hidden in durable mode).
    watermark: HashMap<RegionId, u64>,
    /// The largest watermark ever requested (collectable below).
    watermark_ever: HashMap<RegionId, u64>,
    /// Releases that returned `Ok` (or a stop made durable).
    released: BTreeSet<RegionId>,
    /// Releases that failed in this life: in force in memory.
    releasing: BTreeSet<RegionId>,
    /// Releases that failed in an earlier life: maybe durable.
    maybe_released: BTreeSet<RegionId>,
    /// Two corrupted reads were injected in one step of this life: holes
    /// are allowed (one bad read in transit is never damage).
    pub corruption: bool,
    /// Watermarks handed to `obsolete` in this life that may not be durable
    /// yet (in enqueued mode at most the largest promised id then: the
    /// store clamps a mark to its durable id, E4).
    pending_marks: HashMap<RegionId, u64>,
    /// Watermarks known durable (a `flush`, a clean `stop` or a durable
    /// append after them returned `Ok`): no entry at or below one replays
    /// after a restart, and reads in later lives hide them.
    durable_marks: HashMap<RegionId, u64>,
    /// Per region, the largest watermark the ids handed out must lie above
    /// (an `obsolete` above every id moves the run): those handed in with
    /// `Ok` in this life, and those known durable. Not a mark of a call
    /// that failed, nor one a crash forgot (the engine hands its marks in
    /// again after an open).
    id_floor: HashMap<RegionId, u64>,
    /// Keys of another log's entries that an import which failed may have
    /// copied here: tolerated at any id until the import is repeated
    /// (`None`), then only at or below the repeat's floor.
    import_copies: HashMap<Key, (RegionId, Option<u64>)>,
    /// Objects this life's open left out as damaged (holes may name them).
    quarantined: BTreeSet<u64>,
    /// Objects the operator moved under `quarantine/` (`Op::Repair`): their
    /// holes are named at every open from then on.
    pub(super) moved_aside: BTreeSet<u64>,
    /// Regions a release was ever asked for: a follower may end them (a
    /// release that failed may have landed).
    ever_released: BTreeSet<RegionId>,
    /// Entries of this life a follower yielded before the writer knew them
    /// durable (an object landed, its create's answer not yet in): durable,
    /// but the writer's own reads show them only once it indexed them.
    followed_only: BTreeSet<Key>,
}

impl Model {
    pub fn new(enqueued: bool) -> Model {
        Model {
            enqueued,
            entries: BTreeMap::new(),
            gone: HashSet::new(),
            next: 0,
            life: 1,
            watermark: HashMap::new(),
            watermark_ever: HashMap::new(),
            released: BTreeSet::new(),
            releasing: BTreeSet::new(),
            maybe_released: BTreeSet::new(),
            corruption: false,
            pending_marks: HashMap::new(),
            durable_marks: HashMap::new(),
            id_floor: HashMap::new(),
            import_copies: HashMap::new(),
            quarantined: BTreeSet::new(),
            moved_aside: BTreeSet::new(),
            ever_released: BTreeSet::new(),
            followed_only: BTreeSet::new(),
        }
    }

    /// A key for an entry of another log (never an entry of this one
    /// unless imported), and its payload.
    pub fn foreign(&mut self, region: RegionId, len: usize) -> (Key, Bytes) {
        let key = self.next;
        self.next += 1;
        (key, payload(key, region, len))
    }

    /// The regions with a promised entry in object `sequence` that is not
    /// obsolete nor released: a reopen must replay it or name its hole.
    pub fn live_regions_in(&self, sequence: u64) -> BTreeSet<RegionId> {
        self.entries
            .values()
            .filter(|e| e.fate == Fate::Promised && !self.released_now(e.region))
            .filter(|e| {
                e.id.is_some_and(|id| {
                    sequence_of(id) == sequence && id > self.watermark_ever(e.region)
                })
            })
            .map(|e| e.region)
            .collect()
    }

    /// A call that may have handed `obsolete(region, id)` in failed (an
    /// import raises its floor first): entries through `id` may be hidden
    /// and collected from now on, but nothing is known durable.
    pub fn maybe_obsoleted(&mut self, region: RegionId, id: u64) {
        let slot = self.watermark_ever.entry(region).or_insert(0);
        *slot = (*slot).max(id);
    }

    /// The ids of `region`'s promised entries above `above`, unless the
    /// region is released (at all).
    pub fn promised_above(&self, region: RegionId, above: u64) -> Vec<u64> {
        if self.released_at_all(region) {
            return Vec::new();
        }
        self.entries
            .values()
            .filter(|e| e.region == region && e.fate == Fate::Promised)
            .filter_map(|e| e.id)
            .filter(|id| *id > above)
            .collect()
    }

    /// What the model knows of `region`'s release, for messages.
    pub fn release_state(&self, region: RegionId) -> String {
        format!(
            "released {}, releasing {}, maybe released {}",
            self.released.contains(&region),
            self.releasing.contains(&region),
            self.maybe_released.contains(&region),
        )
    }

    /// Whether a release of `region` was ever asked for.
    pub fn released_at_all(&self, region: RegionId) -> bool {
        self.ever_released.contains(&region)
    }

    /// A follower yielded `entry` of `region`: it must be an entry of this
    /// log (a gone one too: the follower may have read it before it was
    /// collected), never a refused one; `Some(key)` unless a tolerated
    /// import copy.
    pub fn follower_saw(&self, region: RegionId, entry: &Entry) -> Result<Option<Key>, String> {
        let key = key_of(&entry.data).ok_or("a short payload")?;
        if self.import_copy(key, region, entry.id)
            && self
                .entries
                .get(&key)
                .is_none_or(|e| e.id != Some(entry.id))
        {
            return Ok(None);
        }
        if self.gone.contains(&key) {
            return Ok(Some(key));
        }
        let e = self.entries.get(&key).ok_or_else(|| {
            format!(
                "the follower yielded id {} of region {region}: entry {key}, never appended",
                entry.id
            )
        })?;
        if e.region != region || e.data != entry.data {
            return Err(format!(
                "the follower yielded id {}: bytes differ from entry {key}",
                entry.id
            ));
        }
        if e.fate == Fate::Refused {
            return Err(format!(
                "the follower yielded entry {key}, which was refused"
            ));
        }
        if e.id.is_some_and(|id| id != entry.id) {
            return Err(format!(
                "entry {key} has id {:?} but the follower yielded it as {}",
                e.id, entry.id
            ));
        }
        Ok(Some(key))
    }

    /// A follower yielded `keys`: durable, on the chain. An admitted entry
    /// is promised from now on.
    pub fn followed(&mut self, keys: &[Key]) {
        for key in keys {
            if let Some(e) = self.entries.get_mut(key) {
                if e.fate == Fate::Admitted {
                    e.fate = Fate::Promised;
                    self.followed_only.insert(*key);
                }
            }
        }
    }

    /// The largest watermark ever handed in for `region`.
    pub fn watermark_ever(&self, region: RegionId) -> u64 {
        self.watermark_ever.get(&region).copied().unwrap_or(0)
    }

    /// The flush marks handed in so far are durable.
    fn marks_durable(&mut self) {
        for (region, id) in std::mem::take(&mut self.pending_marks) {
            let slot = self.durable_marks.entry(region).or_insert(0);
            *slot = (*slot).max(id);
        }
    }

    /// `import_region(region)` returned: its floor hides what the region
    /// held here (an `obsolete`); `imported` (key, id, bytes) are promised;
    /// with entries, the floor's mark is durable (the import flushed).
    pub fn imported(&mut self, region: RegionId, floor: u64, imported: &[(Key, u64, Bytes)]) {
        if floor > 0 {
            self.obsoleted(region, floor);
        }
        for (key, id, data) in imported {
            self.entries.insert(
                *key,
                Known {
                    region,
                    data: data.clone(),
                    id: Some(*id),
                    fate: Fate::Promised,
                    life: self.life,
                },
            );
        }
        if !imported.is_empty() {
            self.marks_durable();
        }
        for copy in self.import_copies.values_mut() {
            if copy.0 == region && copy.1.is_none() {
                copy.1 = Some(floor);
            }
        }
    }

    /// An import of `region` failed: any of `keys` may have been copied.
    pub fn import_failed(&mut self, region: RegionId, keys: impl IntoIterator<Item = Key>) {
        for key in keys {
            self.import_copies.insert(key, (region, None));
        }
    }

    /// Whether an entry of `key` at `id` in `region` is a tolerated copy of
    /// a failed import.
    fn import_copy(&self, key: Key, region: RegionId, id: u64) -> bool {
        self.import_copies
            .get(&key)
            .is_some_and(|(r, floor)| *r == region && floor.is_none_or(|f| id <= f))
    }

    /// A new entry for `region`, pending until its append answers.
    pub fn add(&mut self, region: RegionId, len: usize) -> (Key, Bytes) {
        let key = self.next;
        self.next += 1;
        let data = payload(key, region, len);
        self.entries.insert(
            key,
            Known {
                region,
                data: data.clone(),
                id: None,
                fate: Fate::Pending,
                life: self.life,
            },
        );
        (key, data)
    }

    /// The k-th (modulo) known id of `region`, in id order.
    pub fn pick(&self, region: RegionId, k: usize) -> Option<u64> {
        let ids: Vec<u64> = self
            .entries
            .values()
            .filter(|e| e.region == region && matches!(e.fate, Fate::Admitted | Fate::Promised))
            .filter_map(|e| e.id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ids.get(k % ids.len().max(1)).copied()
    }

    /// The newest admitted or promised id of `region` the model knows.
    pub fn newest_of(&self, region: RegionId) -> Option<u64> {
        self.entries
            .values()
            .filter(|e| e.region == region && matches!(e.fate, Fate::Admitted | Fate::Promised))
            .filter_map(|e| e.id)
            .max()
    }

    /// The newest id handed out that the model knows, of any region.
    pub fn newest_id(&self) -> Option<u64> {
        self.entries.values().filter_map(|e| e.id).max()
    }

    /// The largest id of `region` the model knows below `id`.
    pub fn known_below(&self, region: RegionId, id: u64) -> Option<u64> {
        self.entries
            .values()
            .filter(|e| e.region == region)
            .filter_map(|e| e.id)
            .filter(|i| *i < id)
            .max()
    }

    /// The regions of `keys`.
    pub fn regions_of(&self, keys: &[Key]) -> Vec<RegionId> {
        keys.iter()
            .filter_map(|k| self.entries.get(k))
            .map(|e| e.region)
            .collect()
    }

    /// The operator moved the object of `sequence` aside for good.
    pub fn moved_aside(&mut self, sequence: u64) {
        self.moved_aside.insert(sequence);
    }

    /// Whether this life's open left damaged objects out (reads under
    /// `on_corrupted_segment = "fail"` stop at their holes).
    pub fn has_quarantined(&self) -> bool {
        !self.quarantined.is_empty()
    }

    /// Whether a release of `region` returned `Ok` (or a stop made it
    /// durable): it is released for good, whatever collection deletes.
    pub fn released_for_good(&self, region: RegionId) -> bool {
        self.released.contains(&region)
    }

    /// Whether `region` is released as far as this life is concerned.
    pub fn released_now(&self, region: RegionId) -> bool {
        self.released.contains(&region) || self.releasing.contains(&region)
    }

    /// Per region, the largest id known before a step, or watermark in
    /// force (`id_floor`): new ids lie above.
    pub fn floor(&self) -> HashMap<RegionId, u64> {
        let mut floor = self.id_floor.clone();
        for e in self.entries.values() {
            if let Some(id) = e.id {
                let slot = floor.entry(e.region).or_insert(0);
                *slot = (*slot).max(id);
            }
        }
        floor
    }

    /// The keys promised before a step, and those admitted (for `flush`).
    pub fn snapshot(&self) -> (BTreeSet<Key>, BTreeSet<Key>) {
        let with = |fate| -> BTreeSet<Key> {
            self.entries
                .iter()
                .filter(|(_, e)| e.fate == fate)
                .map(|(k, _)| *k)
                .collect()
        };
        (with(Fate::Promised), with(Fate::Admitted))
    }

    /// The append of `keys` answered `result`; `faulty`: a fault is armed.
    pub fn appended(
        &mut self,
        keys: &[Key],
        result: &Result<Vec<u64>, objwal::Error>,
        floor: &HashMap<RegionId, u64>,
    ) -> Result<(), String> {
        let regions: Vec<RegionId> = keys.iter().map(|k| self.entries[k].region).collect();
        let ids = match result {
            Ok(ids) => ids,
            Err(e) => {
                // `NotDurable` says nothing of the batch is logged (its
                // void or a filler settled its key): it never replays.
                // `Storage` and `Lost` leave its fate open.
                let maybe = !self.enqueued
                    && matches!(
                        e,
                        objwal::Error::Storage { .. }
                            | objwal::Error::Lost { .. }
                            | objwal::Error::Poisoned { .. }
                    );
                for key in keys {
                    self.set_fate(*key, if maybe { Fate::Maybe } else { Fate::Refused });
                }
                return Ok(());
            }
        };
        if ids.len() != keys.len() {
            return Err(format!(
                "append of {} entries returned {} ids",
                keys.len(),
                ids.len()
            ));
        }
        if let Some(r) = regions.iter().find(|r| self.released_now(**r)) {
            return Err(format!(
                "an append to released region {r} was accepted: {ids:?}"
            ));
        }
        let sequences: BTreeSet<u64> = ids.iter().map(|id| sequence_of(*id)).collect();
        if sequences.len() != 1 {
            return Err(format!("one append's ids span objects {sequences:?}"));
        }
        let mut last: HashMap<RegionId, u64> = HashMap::new();
        for ((key, region), id) in keys.iter().zip(&regions).zip(ids) {
            let above = last.get(region).copied().max(floor.get(region).copied());
            if above.is_some_and(|a| *id <= a) {
                return Err(format!(
                    "region {region} was handed id {id}, not above id {above:?} it had already (L2)"
                ));
            }
            last.insert(*region, *id);
            if let Some((other, _)) = self
                .entries
                .iter()
                .find(|(k, e)| *k != key && e.region == *region && e.id == Some(*id))
            {
                return Err(format!(
                    "id {id} of region {region} handed out twice (entries {other} and {key})"
                ));
            }
            let e = self.entries.get_mut(key).ok_or("unknown key")?;
            e.id = Some(*id);
            e.fate = if self.enqueued {
                Fate::Admitted
            } else {
                Fate::Promised
            };
        }
        // A durable append was sealed after every mark handed in before it
        // (marks ride with the next seal), and objects are acknowledged in
        // order.
        if !self.enqueued {
            self.marks_durable();
        }
        Ok(())
    }

    fn set_fate(&mut self, key: Key, fate: Fate) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.fate = fate;
        }
    }

    /// Every admitted entry of this life in an object at or below
    /// `sequence` is durable: objects are indexed in sequence order.
    fn durable_through(&mut self, sequence: u64) {
        for (key, e) in self.entries.iter_mut() {
            if e.id.is_some_and(|id| sequence_of(id) <= sequence) {
                if e.fate == Fate::Admitted {
                    e.fate = Fate::Promised;
                }
                self.followed_only.remove(key);
            }
        }
    }

    /// `wait_durable(_, id)` returned `Ok`.
    pub fn durable(&mut self, id: u64) {
        self.durable_through(sequence_of(id));
    }

    /// `flush()` returned `Ok`: what was admitted before it is durable,
    /// and so are the flush marks handed in before it.
    pub fn flushed(&mut self, admitted_before: &BTreeSet<Key>) {
        for key in admitted_before {
            self.set_fate(*key, Fate::Promised);
            self.followed_only.remove(key);
        }
        self.marks_durable();
    }

    /// `obsolete(region, id)` returned `Ok`.
    pub fn obsoleted(&mut self, region: RegionId, id: u64) {
        for map in [
            &mut self.watermark,
            &mut self.watermark_ever,
            &mut self.id_floor,
        ] {
            let slot = map.entry(region).or_insert(0);
            *slot = (*slot).max(id);
        }
        // In enqueued mode the store clamps a mark to its durable id: only
        // what the model knows promised is sure to be under the mark.
        let mark = if self.enqueued {
            self.entries
                .values()
                .filter(|e| e.region == region && e.fate == Fate::Promised)
                .filter_map(|e| e.id)
                .filter(|i| *i <= id)
                .max()
                .unwrap_or(0)
        } else {
            id
        };
        if mark > 0 {
            let slot = self.pending_marks.entry(region).or_insert(0);
            *slot = (*slot).max(mark);
        }
    }

    /// `release_region(region)` answered: `Ok`, or an error after which
    /// the record is kept (in force in memory, durable maybe).
    pub fn release_answered(&mut self, region: RegionId, ok: bool, kept: bool) {
        self.ever_released.insert(region);
        if ok {
            self.released.insert(region);
            self.releasing.remove(&region);
        } else if kept {
            self.releasing.insert(region);
        }
    }

    /// `stop()` returned `Ok`: everything admitted and every kept release
    /// record is durable.
    pub fn stopped_ok(&mut self) {
        self.durable_through(u64::MAX);
        self.marks_durable();
        let kept = std::mem::take(&mut self.releasing);
        self.released.extend(kept);
    }

    /// Appends that never answered (their store crashed first): they may
    /// or may not replay, like a failed one.
    pub fn unanswered(&mut self, keys: &[Key]) {
        for key in keys {
            if self
                .entries
                .get(key)
                .is_some_and(|e| e.fate == Fate::Pending)
            {
                self.set_fate(*key, Fate::Maybe);
            }
        }
    }

    /// Entries admitted by a store after it was fenced: never to replay.
    pub fn refuse(&mut self, keys: &[Key]) {
        for key in keys {
            self.set_fate(*key, Fate::Refused);
        }
    }

    /// Checks one entry that a read or a replay returned; `None` when it is
    /// fine, with its key.
    pub(super) fn check_entry(
        &self,
        region: RegionId,
        entry: &Entry,
    ) -> Result<Option<Key>, String> {
        let key = key_of(&entry.data)
            .ok_or_else(|| format!("region {region}: a short payload at id {}", entry.id))?;
        if self.import_copy(key, region, entry.id)
            && self
                .entries
                .get(&key)
                .is_none_or(|e| e.id != Some(entry.id))
        {
            return Ok(None);
        }
        if self.gone.contains(&key) {
            return Err(format!(
                "region {region}: entry {key} (id {}) came back after it was gone",
                entry.id
            ));
        }
        let e = self.entries.get(&key).ok_or_else(|| {
            format!(
                "region {region}: id {} holds entry {key}, never appended",
                entry.id
            )
        })?;
        if e.region != region || entry.region != region || e.data != entry.data {
            return Err(format!(
                "region {region} id {}: bytes differ from entry {key} of region {}",
                entry.id, e.region
            ));
        }
        if e.id.is_some_and(|id| id != entry.id) {
            return Err(format!(
                "entry {key} was given id {:?} but reads as id {}",
                e.id, entry.id
            ));
        }
        if e.fate == Fate::Refused {
            return Err(format!(
                "entry {key} (region {region}) was refused or answered NotDurable, yet it is read back"
            ));
        }
        Ok(Some(key))
    }

    /// What every read's answer must look like whatever it holds: no hole
    /// without a corrupted read or a quarantined object to explain it, and
    /// ids at or above `from`, strictly increasing. `who` prefixes the
    /// messages ("" for the store's reads, "a reader's ").
    fn stream_shape(
        &self,
        who: &str,
        region: RegionId,
        from: u64,
        entries: &[Entry],
        holes: &[Hole],
    ) -> Result<(), String> {
        // A segment collection deleted under a reader is a hole too
        // (issue 30 item 10(b)); its entries were obsolete, so at or below
        // a watermark ever handed in.
        let collected = |h: &Hole| h.last_id <= self.watermark_ever(region);
        if let Some(h) = holes.iter().find(|h| {
            !self.corruption
                && !self.quarantined.contains(&h.sequence)
                && !self.moved_aside.contains(&h.sequence)
                && !collected(h)
        }) {
            return Err(format!(
                "{who}region {region} reports hole {h:?} with no corrupted read"
            ));
        }
        let mut last = None;
        for entry in entries {
            if entry.id < from || last.is_some_and(|l| entry.id <= l) {
                return Err(format!(
                    "{who}region {region} from {from}: id {} after {last:?}",
                    entry.id
                ));
            }
            last = Some(entry.id);
        }
        Ok(())
    }

    /// A read of `region` from `from` in this life returned `entries`,
    /// with `holes` reported after it; `promised_before` as of the step.
    pub fn read(
        &mut self,
        region: RegionId,
        from: u64,
        entries: &[Entry],
        holes: &[Hole],
        promised_before: &BTreeSet<Key>,
    ) -> Result<(), String> {
        if self.released_now(region) && !entries.is_empty() {
            return Err(format!(
                "released region {region} read {} entries",
                entries.len()
            ));
        }
        self.stream_shape("", region, from, entries, holes)?;
        let watermark = self.watermark.get(&region).copied().unwrap_or(0);
        let mut shown = BTreeSet::new();
        for entry in entries {
            let Some(key) = self.check_entry(region, entry)? else {
                continue;
            };
            let e = &self.entries[&key];
            if e.fate == Fate::Maybe || e.life != self.life && e.fate != Fate::Promised {
                return Err(format!(
                    "region {region}: entry {key} ({:?}) is readable",
                    e.fate
                ));
            }
            if !self.enqueued && entry.id <= watermark {
                return Err(format!(
                    "region {region}: id {} at or below watermark {watermark} is readable",
                    entry.id
                ));
            }
            shown.insert(key);
            if let Some(e) = self.entries.get_mut(&key) {
                e.id = Some(entry.id);
            }
        }
        // What a read shows is indexed, and so is every earlier object.
        if let Some(top) = entries.last().map(|e| e.id) {
            self.durable_through(sequence_of(top));
        }
        let top = entries.last().map_or(0, |e| sequence_of(e.id));
        for (key, e) in &self.entries {
            let Some(id) = e.id else { continue };
            let required = e.region == region
                && id >= from
                && id > watermark.max(self.watermark_ever(region))
                && !self.released_now(region)
                && (promised_before.contains(key) && !self.followed_only.contains(key)
                    || matches!(e.fate, Fate::Promised) && sequence_of(id) <= top);
            let skipped = holes.iter().any(|h| h.first_id <= id && id <= h.last_id);
            if required && !shown.contains(key) && !skipped {
                return Err(format!(
                    "region {region} from {from}: promised entry {key} (id {id}) is missing from the read ({} shown)",
                    shown.len()
                ));
            }
        }
        Ok(())
    }

    /// A `WalReader` opened on the prefix read `region` from `from`:
    /// `entries`, with `holes`. It sees what is durable and indexed at its
    /// open: every promised entry that is not obsolete nor released, and
    /// nothing at or below a durable flush mark; it may also see entries
    /// whose append failed (a create that landed after all) and admitted
    /// ones already durable.
    pub fn observed(
        &self,
        region: RegionId,
        from: u64,
        entries: &[Entry],
        holes: &[Hole],
    ) -> Result<(), String> {
        if self.released.contains(&region) && !entries.is_empty() {
            return Err(format!(
                "a reader read {} entries of released region {region}",
                entries.len()
            ));
        }
        self.stream_shape("a reader's ", region, from, entries, holes)?;
        let durable_mark = self.durable_marks.get(&region).copied().unwrap_or(0);
        let mut shown = BTreeSet::new();
        for entry in entries {
            if entry.id <= durable_mark {
                return Err(format!(
                    "a reader shows id {} of region {region}, at or below the durable flush mark {durable_mark}",
                    entry.id
                ));
            }
            if let Some(key) = self.check_entry(region, entry)? {
                shown.insert(key);
            }
        }
        let watermark = self.watermark_ever.get(&region).copied().unwrap_or(0);
        let released = self.released_now(region) || self.maybe_released.contains(&region);
        for (key, e) in &self.entries {
            let Some(id) = e.id else { continue };
            let required = e.region == region
                && e.fate == Fate::Promised
                && id >= from
                && id > watermark
                && !released;
            let skipped = holes.iter().any(|h| h.first_id <= id && id <= h.last_id);
            if required && !shown.contains(key) && !skipped {
                return Err(format!(
                    "a reader's region {region} from {from}: promised entry {key} (id {id}) is missing ({} shown)",
                    shown.len()
                ));
            }
        }
        Ok(())
    }

    /// A reader read `region` from 0 after objects were damaged or
    /// deleted at rest: `lost` are objects left out of replay (deleted, or
    /// named unreplayed). History above a lost object is gone with it (its
    /// releases and flush marks too), so entries hidden by them may show:
    /// what must hold is that every entry is one this log held, in order,
    /// and every promised entry that is not obsolete nor released shows,
    /// unless a hole or a lost object names it.
    pub fn observed_after_loss(
        &self,
        region: RegionId,
        entries: &[Entry],
        holes: &[Hole],
        lost: &BTreeSet<u64>,
    ) -> Result<(), String> {
        let mut last = 0;
        let mut shown = BTreeSet::new();
        for entry in entries {
            if entry.id <= last {
                return Err(format!(
                    "after damage, a reader's region {region}: id {} after {last}",
                    entry.id
                ));
            }
            last = entry.id;
            let key = key_of(&entry.data).ok_or("a short payload")?;
            let known = self.entries.get(&key).map(|e| &e.data) == Some(&entry.data)
                || self.gone.contains(&key)
                || self.import_copies.contains_key(&key);
            if !known || entry.region != region {
                return Err(format!(
                    "after damage, a reader's region {region} shows id {} holding entry {key}, never appended here",
                    entry.id
                ));
            }
            shown.insert(key);
        }
        let watermark = self.watermark_ever(region);
        let released = self.released_now(region) || self.maybe_released.contains(&region);
        for (key, e) in &self.entries {
            let Some(id) = e.id else { continue };
            let required = e.region == region
                && e.fate == Fate::Promised
                && id > watermark
                && !released
                && !lost.contains(&sequence_of(id));
            let skipped = holes.iter().any(|h| h.first_id <= id && id <= h.last_id);
            if required && !shown.contains(key) && !skipped {
                return Err(format!(
                    "after damage, a reader's region {region}: promised entry {key} (id {id}) is missing, in no named hole or lost object"
                ));
            }
        }
        Ok(())
    }

    /// Regions whose release must be repeated after a restart.
    pub fn to_release_again(&self) -> Vec<RegionId> {
        self.maybe_released.iter().copied().collect()
    }

    /// `latest_entry_id(region)` must be at least this: the largest id
    /// acknowledged in this life (durable: promised; enqueued: admitted).
    pub fn latest_floor(&self, region: RegionId) -> u64 {
        if self.released_now(region) || self.maybe_released.contains(&region) {
            return 0;
        }
        self.entries
            .values()
            .filter(|e| e.region == region && e.life == self.life)
            .filter(|e| matches!(e.fate, Fate::Admitted | Fate::Promised))
            .filter_map(|e| e.id)
            .max()
            .unwrap_or(0)
    }
}

#[path = "reference_restart.rs"]
mod restart;

#[cfg(test)]
#[path = "reference_tests.rs"]
mod tests;
