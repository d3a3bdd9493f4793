//! The demo's verdict: the child's acknowledgement log against what a
//! reopened WAL replays. Pure: lines and entries in, a report out.
//!
//! Rules checked (a broken one is a mismatch, exit 1):
//! - every replayed entry is a well-formed payload of the region it was
//!   read from, and matches its logged length and digest when it was logged;
//! - ids strictly increase per region; no id and no payload replays twice;
//! - durable mode: every logged acknowledgement above the region's logged
//!   watermark replays;
//! - a region whose release was logged replays nothing;
//! - enqueued mode: every entry logged durable (a `D` line of its region at
//!   or above its id) above the watermark replays; an acknowledged entry that
//!   was not yet durable may be lost, but only whole objects (no sequence
//!   both lost from and replayed), and only after everything replayed (the
//!   loss is a suffix of the history).
//!
//! Replayed entries that were never logged were acknowledged (or in flight)
//! when the kill fell before their line: allowed, and counted.
//!
//! Earlier content (entries of objects at or below the largest sequence the
//! prefix held before this run) is counted and only its id order checked:
//! it may be another run's, or not a demo's at all. Every entry of this run
//! must carry this run's payload tag.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::payload::{self, Identity};

/// A logged acknowledgement.
#[derive(Debug, Clone, Copy)]
struct Acked {
    len: usize,
    digest: u64,
}

/// The acknowledgement log, parsed.
#[derive(Debug, Default)]
pub struct AckLog {
    acked: HashMap<(u64, u64), Acked>,
    /// Per region, the largest `D` id: every entry up to it is durable.
    durable: HashMap<u64, u64>,
    /// Per region, the largest logged watermark.
    watermarks: HashMap<u64, u64>,
    /// Regions whose release returned.
    released: HashSet<u64>,
}

impl AckLog {
    /// Parses the log. A last line without its newline was cut by the kill
    /// and is ignored; any other malformed line is an error.
    pub fn parse(text: &str) -> Result<AckLog, String> {
        let complete = match text.rfind('\n') {
            Some(end) => text.get(..end).unwrap_or_default(),
            None => "",
        };
        let mut log = AckLog::default();
        for (n, line) in complete.lines().enumerate() {
            log.line(line)
                .ok_or_else(|| format!("acknowledgement log line {}: {line:?}", n + 1))?;
        }
        Ok(log)
    }

    fn line(&mut self, line: &str) -> Option<()> {
        let mut f = line.split(' ');
        let kind = f.next()?;
        let region: u64 = f.next()?.parse().ok()?;
        let id: u64 = f.next()?.parse().ok()?;
        match kind {
            "A" | "E" => {
                let len = f.next()?.parse().ok()?;
                let digest = u64::from_str_radix(f.next()?, 16).ok()?;
                self.acked.insert((region, id), Acked { len, digest });
            }
            "D" => raise(&mut self.durable, region, id),
            "W" => raise(&mut self.watermarks, region, id),
            "R" => {
                self.released.insert(region);
            }
            _ => return None,
        }
        f.next().is_none().then_some(())
    }

    /// Entries logged as acknowledged.
    pub fn acknowledged(&self) -> usize {
        self.acked.len()
    }

    /// Entries logged as durable (enqueued mode: covered by a `D` line).
    pub fn durable(&self) -> usize {
        self.acked
            .keys()
            .filter(|(r, id)| self.is_durable(*r, *id))
            .count()
    }

    /// Watermarks logged (regions flushed at least once).
    pub fn flushed_regions(&self) -> usize {
        self.watermarks.len()
    }

    /// Regions whose release returned before the kill.
    pub fn released_regions(&self) -> Vec<u64> {
        let mut regions: Vec<_> = self.released.iter().copied().collect();
        regions.sort_unstable();
        regions
    }

    fn is_durable(&self, region: u64, id: u64) -> bool {
        self.durable.get(&region).is_some_and(|d| *d >= id)
    }

    fn watermark(&self, region: u64) -> u64 {
        self.watermarks.get(&region).copied().unwrap_or(0)
    }
}

fn raise(map: &mut HashMap<u64, u64>, region: u64, id: u64) {
    let slot = map.entry(region).or_insert(0);
    *slot = (*slot).max(id);
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Entries replayed.
    pub replayed: usize,
    /// Replayed entries the log did not name (acknowledged, not yet logged).
    pub unlogged: usize,
    /// Enqueued mode: acknowledged, not yet durable, not replayed.
    pub lost: usize,
    /// Enqueued mode: the objects (sequences) those were in.
    pub lost_objects: usize,
    /// Logged entries at or below a watermark that did not replay (allowed).
    pub obsolete_gone: usize,
    /// Replayed entries of objects written before this run (not checked).
    pub earlier: usize,
    /// Every broken rule, one line each.
    pub mismatches: Vec<String>,
}

/// Checks replayed entries against the log, one entry at a time.
pub struct Checker<'a> {
    log: &'a AckLog,
    enqueued: bool,
    /// The largest sequence present before this run.
    earlier: u64,
    /// This run's payload tag.
    run: u32,
    report: Report,
    seen_ids: HashSet<(u64, u64)>,
    seen_payloads: HashSet<Identity>,
    last_id: HashMap<u64, u64>,
    replayed_sequences: BTreeSet<u64>,
}

impl<'a> Checker<'a> {
    /// A checker of `log`; `enqueued` selects the enqueued-mode rules;
    /// entries of sequences up to `earlier` were there before this run,
    /// whose payloads carry the tag `run`.
    pub fn new(log: &'a AckLog, enqueued: bool, earlier: u64, run: u32) -> Self {
        Checker {
            log,
            enqueued,
            earlier,
            run,
            report: Report::default(),
            seen_ids: HashSet::new(),
            seen_payloads: HashSet::new(),
            last_id: HashMap::new(),
            replayed_sequences: BTreeSet::new(),
        }
    }

    /// One replayed entry of `region`, in read order.
    pub fn entry(&mut self, region: u64, id: u64, data: &[u8]) {
        self.report.replayed += 1;
        let mismatches = &mut self.report.mismatches;
        let last = self.last_id.entry(region).or_insert(0);
        if id <= *last {
            mismatches.push(format!("region {region}: id {id} replayed after id {last}"));
        }
        *last = (*last).max(id);
        if objwal::format::sequence_of(id) <= self.earlier {
            self.report.earlier += 1;
            return;
        }
        if self.log.released.contains(&region) {
            mismatches.push(format!(
                "region {region}: entry {id} replayed although the region was released"
            ));
        }
        if !self.seen_ids.insert((region, id)) {
            mismatches.push(format!("region {region}: id {id} replayed twice"));
        }
        self.replayed_sequences
            .insert(objwal::format::sequence_of(id));
        match payload::check(data) {
            Err(e) => mismatches.push(format!("region {region} id {id}: malformed payload: {e}")),
            Ok(identity) => {
                if identity.run != self.run {
                    mismatches.push(format!(
                        "region {region} id {id}: payload of run {:#010x}, not of this run {:#010x}",
                        identity.run, self.run
                    ));
                }
                if u64::from(identity.region) != region {
                    mismatches.push(format!(
                        "region {region} id {id}: payload of region {} replayed here",
                        identity.region
                    ));
                }
                if !self.seen_payloads.insert(identity) {
                    mismatches.push(format!(
                        "region {region} id {id}: payload (writer {}, counter {}) replayed twice",
                        identity.writer, identity.counter
                    ));
                }
            }
        }
        match self.log.acked.get(&(region, id)) {
            None => self.report.unlogged += 1,
            Some(acked) => {
                if acked.len != data.len() || acked.digest != payload::digest(data) {
                    mismatches.push(format!(
                        "region {region} id {id}: replayed {} bytes differ from the {} bytes acknowledged",
                        data.len(),
                        acked.len
                    ));
                }
            }
        }
    }

    /// Checks what did not replay, and returns the report.
    pub fn finish(mut self) -> Report {
        let mut lost_sequences = BTreeSet::new();
        let mut missing: Vec<_> = self
            .log
            .acked
            .keys()
            .filter(|key| !self.seen_ids.contains(key))
            .copied()
            .collect();
        missing.sort_unstable();
        for (region, id) in missing {
            if id <= self.log.watermark(region) || self.log.released.contains(&region) {
                self.report.obsolete_gone += 1;
            } else if !self.enqueued || self.log.is_durable(region, id) {
                let what = if self.enqueued {
                    "durable"
                } else {
                    "acknowledged"
                };
                self.report
                    .mismatches
                    .push(format!("region {region}: {what} entry {id} did not replay"));
            } else {
                self.report.lost += 1;
                lost_sequences.insert(objwal::format::sequence_of(id));
            }
        }
        self.report.lost_objects = lost_sequences.len();
        for sequence in lost_sequences.intersection(&self.replayed_sequences) {
            self.report.mismatches.push(format!(
                "object {sequence} was lost in part: some of its entries replayed, some did not"
            ));
        }
        if let (Some(first_lost), Some(last_replayed)) =
            (lost_sequences.first(), self.replayed_sequences.last())
        {
            if first_lost < last_replayed {
                self.report.mismatches.push(format!(
                    "object {first_lost} was lost but the later object {last_replayed} replayed: the loss is not a suffix"
                ));
            }
        }
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_last_line_is_ignored_and_garbage_is_refused() {
        let log = AckLog::parse("A 1 5 16 00ff\nD 1 5\nW 1 3\nA 2 9 1").unwrap();
        assert_eq!(log.acknowledged(), 1);
        assert_eq!(log.durable(), 1);
        assert_eq!(log.flushed_regions(), 1);
        assert!(AckLog::parse("A 1 x 16 00ff\n").is_err());
        assert!(AckLog::parse("Z 1 1\n").is_err());
    }

    #[test]
    fn a_released_region_must_replay_nothing() {
        let log = AckLog::parse("A 3 1048577 16 0\nR 3 0\n").unwrap();
        assert_eq!(log.released_regions(), vec![3]);
        let mut checker = Checker::new(&log, false, 0, 1);
        checker.entry(3, 1048577, b"not even a payload");
        let report = checker.finish();
        assert!(
            report.mismatches.iter().any(|m| m.contains("released")),
            "{:?}",
            report.mismatches
        );
        // Not replaying it is what a release means.
        let report = Checker::new(&log, false, 0, 1).finish();
        assert!(report.mismatches.is_empty(), "{:?}", report.mismatches);
    }

    #[test]
    fn a_durable_entry_that_did_not_replay_is_a_mismatch() {
        let log = AckLog::parse("E 1 1048577 16 0\nD 1 1048577\nE 1 2097153 16 0\n").unwrap();
        let report = Checker::new(&log, true, 0, 1).finish();
        assert_eq!(report.lost, 1);
        assert_eq!(report.mismatches.len(), 1, "{:?}", report.mismatches);
    }

    #[test]
    fn earlier_content_is_counted_not_checked_and_other_runs_are_caught() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let id = |run| Identity {
            region: 1,
            writer: 0,
            counter: 1,
            run,
        };
        let log = AckLog::parse("").unwrap();
        // Sequence 2 was there before the run: the same identity twice is
        // no mismatch there; in this run's objects the other tag is caught.
        let mut checker = Checker::new(&log, false, 2, 7);
        let old = payload::make(id(6), 40, &mut rng);
        checker.entry(1, objwal::format::entry_id(1, 1), &old);
        checker.entry(1, objwal::format::entry_id(2, 1), &old);
        checker.entry(
            1,
            objwal::format::entry_id(3, 1),
            &payload::make(id(7), 40, &mut rng),
        );
        checker.entry(1, objwal::format::entry_id(4, 1), &old);
        let report = checker.finish();
        assert_eq!(report.earlier, 2);
        assert_eq!(report.mismatches.len(), 1, "{:?}", report.mismatches);
        assert!(
            report.mismatches[0].contains("not of this run"),
            "{:?}",
            report.mismatches
        );
    }
}
