//! The crash gate's verdict: every life's acknowledgement log against what
//! each reopen replays, over the whole history of one prefix. Pure: log
//! lines and replayed entries in, reports out (no I/O, no clock).
//!
//! A child life writes one line per fact ([`crate::crash_gate::child`]
//! writes them), in this order in its log: an intent *before* the call that
//! may make it true, an outcome *after* the library answered.
//!
//! | line | meaning |
//! |---|---|
//! | `O` | the child's `Wal::open` returned |
//! | `P w c r` | writer `w` is about to append its entry `c` to region `r` |
//! | `A w c id` | durable mode: that entry is acknowledged with `id` |
//! | `E w c id` | enqueued mode: that entry is admitted with `id` |
//! | `N w c kind` | its append failed with an error of `kind` (below) |
//! | `Q w c` | its append was refused: the region is released |
//! | `D r id` | `wait_durable(r, id)` returned `Ok` |
//! | `V r id` | `obsolete(r, id)` is about to be called |
//! | `W r id` | `obsolete(r, id)` returned `Ok` |
//! | `S r` / `R r` | `release_region(r)` is called / returned `Ok` |
//! | `B k` / `C k` | `flush()` number `k` is called / returned `Ok` |
//! | `K r kind` | a `release_region(r)` call failed (`failing`: refused, its record kept) |
//! | `F kind n` | a fault of `kind` is armed for `n` requests (`--faults`) |
//! | `G kind` | the child's `Wal::open` failed (under faults) and is repeated |
//! | `Y r n` / `Z r kind` | a read of region `r` in the life ended after `n` entries / failed |
//! | `X r id why` | that read returned an entry that is not the appended one |
//! | `M name=value ...` | the life's store counters (`objwal_` left out) so far |
//!
//! **A failed append**: the `kind` of its error says what the library
//! promised, and the check holds it to exactly that, no more:
//! - `not-durable` (`Error::NotDurable`, durable mode): its batch's key was
//!   settled by the batch's void, or by an earlier epoch's object, so
//!   "nothing of it is logged" (rfcs/0003 section 6, rfcs/0006 "Durable
//!   mode's failures"). It must never replay.
//! - `failing` (`Error::Failing`): refused at admission while the store is
//!   failing, in both modes (a batch never sent, rfcs/0006; a refused
//!   append, rfcs/0004). It must never replay.
//! - `storage` (durable mode, the store failing: the batch was sent and
//!   its key is unsettled), `lost`, and any other kind: the outcome is
//!   unknown. The batch may still land, and then a later open may replay
//!   it (rfcs/0006), so it may replay or not, at most once, and once a
//!   reopen found it gone it must stay gone (like an append cut by the
//!   kill).
//!
//! Every entry is named across the history by its [`Key`] (life, writer,
//! counter), and its bytes derive from the key and its region
//! ([`payload_of`]), so the parent checks a replayed entry byte for byte
//! without the child logging its bytes.
//!
//! Rules, each a counted violation (the gate fails on any):
//! - **lost**: an entry acknowledged durable (`A`; `E` whose object is at
//!   or below a sequence a `D` or `C` confirmed; any entry a reopen already
//!   replayed) that does not replay, unless it is at or below its region's
//!   watermark (obsolete: collection may have deleted it) or its region was
//!   released. The watermark is the largest `obsolete` *called* (`V`), not
//!   the largest that returned: a flush mark rides in the next object and
//!   may be durable before the call's answer reaches the child (a CI run
//!   counted 61 entries of one region as lost, which this explains). In enqueued mode an admitted entry beyond every barrier may
//!   be missing, but only as whole objects (no sequence both lost and
//!   replayed) and only as a suffix (no lost sequence below a replayed one).
//!   A confirmed release that a reopen reports as not released is lost too.
//! - **duplicated**: an id, or an entry's payload, replayed twice.
//! - **resurrected**: an entry that was never appended (no `P` line), that
//!   was refused (`Q`, `N .. failing`), whose append returned `NotDurable`
//!   (`N .. not-durable`), that an earlier reopen found missing (allowed
//!   then: it must stay gone), or of a released region.
//! - **misordered**: ids of a region not strictly increasing in a replay;
//!   one writer's entries of a region not in its append order; an id handed
//!   out at or below an id an earlier life had for the region (L2).
//! - **corrupt**: bytes that differ from the appended ones, an entry in
//!   another region or under another id than it was acknowledged with, an
//!   entry a life's own read got that differs (`X`), and a log line the
//!   child cannot have written.
//! - **replay differs**: a bulk replay (`Wal::replay`, `WalReader::replay`,
//!   from 0 or from a start per region) whose entries of a region differ
//!   from the per-region read's from the same point ([`replay`]), or that
//!   failed.
//!
//! Entries an earlier reopen found missing are forgotten (an entry the
//! history no longer knows that replays counts as resurrected), so memory
//! follows the entries that still replay, not the length of the history.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use objwal::format::sequence_of;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::payload::{self, Identity};

/// Names an appended entry across the history: (life, writer, counter).
pub type Key = (u32, u16, u32);

/// The bytes of entry `key` of `region`: a payload ([`crate::payload`])
/// whose length and filler come from a generator seeded by both, so
/// parent and child compute the same bytes.
pub fn payload_of(key: Key, region: u64) -> Bytes {
    let (life, writer, counter) = key;
    let seed = (u64::from(life) << 32 | u64::from(counter)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (u64::from(writer) << 48 | region).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    let mut rng = SmallRng::seed_from_u64(seed);
    let len = payload::random_len(&mut rng);
    let identity = Identity {
        region: region as u32,
        writer,
        counter,
        run: life,
    };
    payload::make(identity, len, &mut rng)
}

/// What the history knows about an entry that may still replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Its append was called, no outcome logged: it may replay or not.
    Attempted,
    /// Its append returned an error that leaves the outcome open (`Storage`
    /// in durable mode: the batch may still land, and a later open may
    /// replay it; `Lost`; any other): it may replay or not, at most once.
    Failed,
    /// Refused (region released, or the store failing): never admitted,
    /// it must never replay.
    Refused,
    /// Its append returned `NotDurable`: its batch's key was settled by
    /// the void, so it must never replay.
    Void,
    /// Acknowledged durable: it must replay.
    Durable,
    /// Admitted (enqueued mode): it must replay once a barrier covers it.
    Admitted,
    /// Replayed by a reopen: it must replay at every later reopen.
    Settled,
}

#[derive(Debug, Clone, Copy)]
struct Known {
    region: u64,
    id: Option<u64>,
    fate: Fate,
}

/// Violations of one kind: how many, and the first few described.
#[derive(Debug, Default, Clone)]
pub struct Violations {
    /// How many.
    pub count: u64,
    /// The first [`KEPT`] of them, one line each.
    pub first: Vec<String>,
}

/// Violation descriptions kept per kind.
const KEPT: usize = 10;

impl Violations {
    fn add(&mut self, what: String) {
        self.count += 1;
        if self.first.len() < KEPT {
            self.first.push(what);
        }
    }
}

/// What one cycle (a life's log and the reopen after it) found.
#[derive(Debug, Default, Clone)]
pub struct CycleReport {
    /// Entries the life logged as acknowledged (`A` or `E`).
    pub acknowledged: u64,
    /// Of those, entries promised durable by the end of the life.
    pub promised: u64,
    /// Watermarks, releases and flushes that returned in the life.
    pub watermarks: u64,
    /// Releases that returned.
    pub releases: u64,
    /// Flushes that returned.
    pub flushes: u64,
    /// Whether the child's open returned before the kill.
    pub opened: bool,
    /// Entries the reopen replayed.
    pub replayed: u64,
    /// Replayed entries whose acknowledgement the kill cut from the log.
    pub unlogged: u64,
    /// Enqueued mode: admitted entries beyond every barrier that did not
    /// replay (allowed), and the objects they were in.
    pub allowed_loss: u64,
    /// The objects those were in.
    pub allowed_loss_objects: u64,
    /// Obsolete or released entries that did not replay (allowed).
    pub collected: u64,
    /// Broken rules, by kind.
    pub lost: Violations,
    /// Ids or payloads replayed twice.
    pub duplicated: Violations,
    /// Entries that replayed but must not.
    pub resurrected: Violations,
    /// Order broken.
    pub misordered: Violations,
    /// Bytes, regions or ids that differ; impossible log lines.
    pub corrupt: Violations,
    /// Bulk replays that differ from the per-region reads.
    pub replay_differs: Violations,
    /// The paths the life and the reopen went through.
    pub paths: Paths,
}

/// What a cycle exercised, per path: the gate's summary prints every one,
/// so that a path no cycle reached shows as 0.
#[derive(Debug, Default, Clone)]
pub struct Paths {
    /// Faults armed (`F`), by kind.
    pub faults_armed: BTreeMap<String, u64>,
    /// Entries whose append failed (`N`), by error kind.
    pub failed_appends: BTreeMap<String, u64>,
    /// Entries refused because their region was released (`Q`).
    pub refused_released: u64,
    /// Failed `release_region` calls (`K`), by error kind.
    pub failed_releases: BTreeMap<String, u64>,
    /// Opens of a life that failed under faults and were repeated (`G`).
    pub failed_opens: u64,
    /// Second openers of the prefix within a life (`H`, `--power-loss`).
    pub second_openers: u64,
    /// Reads in the lives that ended (`Y`), the entries they checked, and
    /// reads that failed (`Z`).
    pub life_reads: u64,
    /// Entries those reads returned and checked.
    pub life_read_entries: u64,
    /// Reads in the lives that failed.
    pub life_reads_failed: u64,
    /// The store's counters of the life, as it last reported them (`M`).
    pub store: BTreeMap<String, u64>,
    /// Region sequences of bulk replays compared with the reads.
    pub replays_compared: u64,
    /// Entries the reads gave that the replays were compared with.
    pub replay_entries: u64,
}

fn add_map(to: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *to.entry(k.clone()).or_insert(0) += v;
    }
}

impl Paths {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Paths) {
        add_map(&mut self.faults_armed, &other.faults_armed);
        add_map(&mut self.failed_appends, &other.failed_appends);
        self.refused_released += other.refused_released;
        add_map(&mut self.failed_releases, &other.failed_releases);
        self.failed_opens += other.failed_opens;
        self.second_openers += other.second_openers;
        self.life_reads += other.life_reads;
        self.life_read_entries += other.life_read_entries;
        self.life_reads_failed += other.life_reads_failed;
        add_map(&mut self.store, &other.store);
        self.replays_compared += other.replays_compared;
        self.replay_entries += other.replay_entries;
    }
}

impl CycleReport {
    /// Violations of every kind.
    pub fn violations(&self) -> u64 {
        self.lost.count
            + self.duplicated.count
            + self.resurrected.count
            + self.misordered.count
            + self.corrupt.count
            + self.replay_differs.count
    }

    /// Adds `r`'s counts to these totals (kept descriptions are not added).
    pub fn add(&mut self, r: &CycleReport) {
        self.acknowledged += r.acknowledged;
        self.promised += r.promised;
        self.watermarks += r.watermarks;
        self.releases += r.releases;
        self.flushes += r.flushes;
        self.replayed += r.replayed;
        self.unlogged += r.unlogged;
        self.allowed_loss += r.allowed_loss;
        self.allowed_loss_objects += r.allowed_loss_objects;
        self.collected += r.collected;
        self.lost.count += r.lost.count;
        self.duplicated.count += r.duplicated.count;
        self.resurrected.count += r.resurrected.count;
        self.misordered.count += r.misordered.count;
        self.corrupt.count += r.corrupt.count;
        self.replay_differs.count += r.replay_differs.count;
        self.paths.add(&r.paths);
    }

    /// Every kept violation line, kind first.
    pub fn describe(&self) -> Vec<String> {
        let kinds = [
            ("lost", &self.lost),
            ("duplicated", &self.duplicated),
            ("resurrected", &self.resurrected),
            ("misordered", &self.misordered),
            ("corrupt", &self.corrupt),
            ("replay differs", &self.replay_differs),
        ];
        kinds
            .iter()
            .flat_map(|(kind, v)| v.first.iter().map(move |m| format!("{kind}: {m}")))
            .collect()
    }
}

/// What one life's log promised, beyond its entries.
#[derive(Debug, Default)]
struct LifeLog {
    /// Every object at or below this sequence is durable (`A`, `D`, `C`).
    durable_sequence: u64,
    /// Releases called but not confirmed in this life.
    releasing: BTreeSet<u64>,
}

/// The history of one prefix across lives: what must, may and must not
/// replay at the next reopen.
#[derive(Debug, Default)]
pub struct History {
    known: HashMap<Key, Known>,
    /// Per region, the largest watermark that returned.
    watermarks: HashMap<u64, u64>,
    /// Per region, the largest watermark an `obsolete` was called with: the
    /// store may hide what is at or below it from the call on.
    called_watermarks: HashMap<u64, u64>,
    /// Per region, the largest id known durable (for the `W` rule).
    durable_ids: HashMap<u64, u64>,
    /// Per region, the largest id known before the current life.
    earlier_ids: HashMap<u64, u64>,
    /// Regions whose release is confirmed.
    released: BTreeSet<u64>,
    /// Regions whose release was called but is not confirmed yet.
    releasing: BTreeSet<u64>,
    /// The largest region any line named.
    max_region: Option<u64>,
}

impl History {
    /// The watermarks to hand to the next life.
    pub fn watermarks(&self) -> Vec<(u64, u64)> {
        let mut w: Vec<_> = self.watermarks.iter().map(|(r, id)| (*r, *id)).collect();
        w.sort_unstable();
        w
    }

    /// Per region, the largest id known durable: what the next life may
    /// mark obsolete before it appends anything.
    pub fn durable(&self) -> Vec<(u64, u64)> {
        let mut d: Vec<_> = self.durable_ids.iter().map(|(r, id)| (*r, *id)).collect();
        d.sort_unstable();
        d
    }

    /// Regions released for good: the next life must not append to them.
    pub fn released(&self) -> &BTreeSet<u64> {
        &self.released
    }

    /// Regions whose release is not confirmed: the next life releases them
    /// again (as an engine retries a drop its manifest records).
    pub fn releasing(&self) -> &BTreeSet<u64> {
        &self.releasing
    }

    /// The regions a replay must read: every region any life named.
    pub fn regions(&self) -> std::ops::RangeInclusive<u64> {
        0..=self.max_region.unwrap_or(0)
    }

    fn region_seen(&mut self, region: u64) {
        self.max_region = Some(self.max_region.map_or(region, |m| m.max(region)));
    }

    /// Takes in the log of `life` (the text of its lines; a last line cut
    /// by the kill is ignored) and returns the checker of the reopen.
    pub fn absorb(&mut self, life: u32, text: &str) -> Cycle<'_> {
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        let mut report = CycleReport::default();
        let mut log = LifeLog::default();
        let mut barriers: HashMap<u64, u64> = HashMap::new();
        let mut admitted_sequence = 0;
        for (n, line) in complete.lines().enumerate() {
            let done = self.line(
                life,
                line,
                &mut log,
                &mut report,
                &mut barriers,
                &mut admitted_sequence,
            );
            if let Err(why) = done {
                report
                    .corrupt
                    .add(format!("life {life} log line {}: {line:?}: {why}", n + 1));
            }
        }
        Cycle::new(self, log, report)
    }

    fn line(
        &mut self,
        life: u32,
        line: &str,
        log: &mut LifeLog,
        report: &mut CycleReport,
        barriers: &mut HashMap<u64, u64>,
        admitted_sequence: &mut u64,
    ) -> Result<(), String> {
        if let Some(counters) = line.strip_prefix("M ") {
            report.paths.store = counters_of(counters)?;
            return Ok(());
        }
        let mut f = Fields(line.split(' '));
        let kind = f.0.next().unwrap_or_default();
        match kind {
            "O" => report.opened = true,
            "P" => {
                let key = f.key(life)?;
                let region = f.number()?;
                self.region_seen(region);
                let known = Known {
                    region,
                    id: None,
                    fate: Fate::Attempted,
                };
                if self.known.insert(key, known).is_some() {
                    return Err("the same entry was appended twice".into());
                }
            }
            "A" | "E" => {
                let key = f.key(life)?;
                let id = f.number()?;
                let known = self.known.get_mut(&key).ok_or("no intent logged before")?;
                if known.fate != Fate::Attempted || known.id.is_some() {
                    return Err("an outcome logged twice".into());
                }
                known.id = Some(id);
                let region = known.region;
                report.acknowledged += 1;
                *admitted_sequence = (*admitted_sequence).max(sequence_of(id));
                if kind == "A" {
                    known.fate = Fate::Durable;
                    log.durable_sequence = log.durable_sequence.max(sequence_of(id));
                    raise(&mut self.durable_ids, region, id);
                } else {
                    known.fate = Fate::Admitted;
                }
                let earlier = self.earlier_ids.get(&region).copied().unwrap_or(0);
                if id <= earlier {
                    report.misordered.add(format!(
                        "life {life}: region {region} was handed id {id}, not above id {earlier} of an earlier life"
                    ));
                }
            }
            "N" | "Q" => {
                let key = f.key(life)?;
                let known = self.known.get_mut(&key).ok_or("no intent logged before")?;
                if known.fate != Fate::Attempted || known.id.is_some() {
                    return Err("an outcome logged twice".into());
                }
                if kind == "Q" {
                    known.fate = Fate::Refused;
                    report.paths.refused_released += 1;
                } else {
                    let error = f.word("the error kind")?;
                    known.fate = match error {
                        "not-durable" => Fate::Void,
                        "failing" => Fate::Refused,
                        _ => Fate::Failed,
                    };
                    *report.paths.failed_appends.entry(error.into()).or_insert(0) += 1;
                }
            }
            "K" => {
                let region = f.number()?;
                self.region_seen(region);
                let error = f.word("the error kind")?;
                *report
                    .paths
                    .failed_releases
                    .entry(error.into())
                    .or_insert(0) += 1;
            }
            "F" => {
                let fault = f.word("the fault kind")?;
                if super::faults::Kind::parse(fault).is_none() {
                    return Err(format!("no fault kind {fault:?}"));
                }
                f.number()?;
                *report.paths.faults_armed.entry(fault.into()).or_insert(0) += 1;
            }
            "G" => {
                f.word("the error kind")?;
                report.paths.failed_opens += 1;
            }
            // A second opener of the prefix starts: the life's store is
            // fenced from its walk on (its calls after it answer fenced;
            // what it acknowledged before must replay, as always).
            "H" => report.paths.second_openers += 1,
            "Y" => {
                let (_region, entries) = (f.number()?, f.number()?);
                report.paths.life_reads += 1;
                report.paths.life_read_entries += entries;
            }
            "Z" => {
                f.number()?;
                f.word("the error kind")?;
                report.paths.life_reads_failed += 1;
            }
            "X" => {
                let (region, id) = (f.number()?, f.number()?);
                let why = f.word("the reason")?;
                report.corrupt.add(format!(
                    "life {life}: a read of region {region} returned id {id}, not the entry appended ({why})"
                ));
            }
            "D" => {
                let (region, id) = (f.number()?, f.number()?);
                log.durable_sequence = log.durable_sequence.max(sequence_of(id));
                raise(&mut self.durable_ids, region, id);
            }
            "V" => {
                let (region, id) = (f.number()?, f.number()?);
                raise(&mut self.called_watermarks, region, id);
            }
            "W" => {
                let (region, id) = (f.number()?, f.number()?);
                raise(&mut self.called_watermarks, region, id);
                let durable = self.durable_ids.get(&region).copied().unwrap_or(0);
                if id > durable {
                    return Err(format!("obsolete above the durable id {durable}"));
                }
                raise(&mut self.watermarks, region, id);
                report.watermarks += 1;
            }
            "S" => {
                let region = f.number()?;
                self.region_seen(region);
                log.releasing.insert(region);
            }
            "R" => {
                let region = f.number()?;
                log.releasing.remove(&region);
                self.releasing.remove(&region);
                self.released.insert(region);
                report.releases += 1;
            }
            "B" => {
                barriers.insert(f.number()?, *admitted_sequence);
            }
            "C" => {
                let covered = barriers.get(&f.number()?).ok_or("no flush call logged")?;
                log.durable_sequence = log.durable_sequence.max(*covered);
                report.flushes += 1;
            }
            _ => return Err("unknown kind".into()),
        }
        if f.0.next().is_some() {
            return Err("too many fields".into());
        }
        Ok(())
    }
}

/// The fields of a log line after its kind.
struct Fields<'a>(std::str::Split<'a, char>);

impl<'a> Fields<'a> {
    fn word(&mut self, what: &str) -> Result<&'a str, String> {
        self.0.next().ok_or_else(|| format!("{what} is missing"))
    }

    fn number(&mut self) -> Result<u64, String> {
        let field = self.word("a field")?;
        field
            .parse()
            .map_err(|_| format!("{field:?} is not a number"))
    }

    /// An entry's key: writer and counter, in `life`.
    fn key(&mut self, life: u32) -> Result<Key, String> {
        let writer = u16::try_from(self.number()?).map_err(|_| "writer out of range")?;
        let counter = u32::try_from(self.number()?).map_err(|_| "counter out of range")?;
        Ok((life, writer, counter))
    }
}

/// The fields of an `M` line: `name=value`, separated by spaces.
fn counters_of(text: &str) -> Result<BTreeMap<String, u64>, String> {
    text.split(' ')
        .map(|field| {
            let (name, value) = field
                .split_once('=')
                .ok_or_else(|| format!("{field:?} is not name=value"))?;
            let value = value
                .parse()
                .map_err(|_| format!("{value:?} is not a number"))?;
            Ok((name.to_owned(), value))
        })
        .collect()
}

fn raise(map: &mut HashMap<u64, u64>, region: u64, id: u64) {
    let slot = map.entry(region).or_insert(0);
    *slot = (*slot).max(id);
}

#[path = "cycle.rs"]
mod cycle;
pub use cycle::Cycle;
#[path = "replay.rs"]
pub mod replay;

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
