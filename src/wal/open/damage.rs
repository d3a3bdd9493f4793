//! What recovery leaves out of replay, and how reads and tools learn of it.
//!
//! Two kinds of object are not replayed although they may hold entries:
//! - a [`DamagedObject`]: structurally damaged (its tail does not decode, its
//!   epoch is implausible, it holds another sequence than its key's), either
//!   in place (opened with `on_damaged_object = "quarantine"`) or moved aside
//!   under `<prefix>/quarantine/` by `objwal repair`;
//! - an [`UnreplayedObject`]: intact, above the tip, but off the tip's chain
//!   (a missing object breaks the chain below it), so recovery fell back to
//!   an older tip.
//!
//! Invariants: a damaged object whose entries are missing from replay
//! ([`DamagedObject::missing`]) is reported by `holes(region)` of every
//! handle, for the regions its footer names or, when its footer is
//! unreadable, for every region asked about; under
//! `CorruptionPolicy::Fail` a read that reaches such a hole fails instead
//! of going past it. Nothing here deletes or moves an object.

use std::collections::VecDeque;

use futures::{Stream, StreamExt};

use crate::config::CorruptionPolicy;
use crate::error::Error;
use crate::format::{self, FormatError, ReleaseRecord, SegmentIndex};
use crate::metrics::StoreMetrics;
use crate::storage::keys::Prefix;
use crate::{EntryId, RegionId};

use crate::wal::{Entry, Hole};

/// The folder under a prefix where `objwal repair` moves damaged objects.
const QUARANTINE_DIR: &str = "quarantine";

/// The listing prefix of the quarantined objects of `prefix` (ends with `/`).
pub fn quarantine_prefix(prefix: &Prefix) -> String {
    format!("{}/{QUARANTINE_DIR}/", prefix.as_str())
}

/// Where `objwal repair` moves the object of `sequence`: the object's key
/// with `objects/` replaced by `quarantine/`.
pub fn quarantine_key(prefix: &Prefix, sequence: u64) -> String {
    let key = prefix.object_key(sequence);
    let name = key.rsplit('/').next().unwrap_or_default();
    format!("{}{name}", quarantine_prefix(prefix))
}

/// The sequence of a quarantined object's key, when `key` is one.
pub(crate) fn parse_quarantine_key(prefix: &Prefix, key: &str) -> Option<u64> {
    let name = key.strip_prefix(&quarantine_prefix(prefix))?;
    prefix.parse_object_key(&format!("{}{name}", prefix.objects_prefix()))
}

/// A structurally damaged object that recovery left out of replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedObject {
    /// Where it is: its object key, or its key under `quarantine/`.
    pub key: String,
    /// Its sequence (from its key).
    pub sequence: u64,
    /// What is wrong with it.
    pub reason: String,
    /// Whether `objwal repair` already moved it under `quarantine/`.
    pub quarantined: bool,
    /// The region segments its footer names, when the footer decoded
    /// (`None`: unknown, so every region may have lost entries here).
    pub segments: Option<Vec<SegmentIndex>>,
    /// Whether its entries count as missing from replay: it is on the tip's
    /// chain at or above the reclaim boundary, or nothing says where it
    /// stands. `false` for an orphan (never replayed anyway) and for an
    /// object below the boundary (garbage).
    pub missing: bool,
    /// Whether nothing is at its key: a missing object (acknowledged, then
    /// gone), recorded so that its entries are holes (issue 29 item 7).
    pub absent: bool,
    /// The last sequence its entries may lie in: its own, or, for a missing
    /// object followed by keys that hold nothing up to where its run went
    /// on (one object with a jump, or several, stood there), the last of
    /// them.
    pub last_sequence: u64,
}

impl DamagedObject {
    /// The holes it leaves in `region`'s replay (none when not missing).
    fn holes(&self, region: RegionId) -> Option<Hole> {
        if !self.missing || region == format::RELEASE_REGION {
            return None;
        }
        let (first_id, last_id) = match &self.segments {
            Some(segments) => {
                let s = segments.iter().find(|s| s.region == region)?;
                (s.first_id, s.last_id)
            }
            None => (
                format::entry_id(self.sequence, 1),
                format::entry_id(self.last_sequence.max(self.sequence), format::MAX_POSITION),
            ),
        };
        Some(Hole {
            region,
            key: self.key.clone(),
            sequence: self.sequence,
            first_id,
            last_id,
        })
    }

    /// What it held, in one line: `r1 ids 5.1..5.3 (3 entries), ...`, or
    /// that its footer is unreadable.
    pub fn held(&self) -> String {
        match &self.segments {
            None => format!(
                "unknown (its footer is unreadable: any region may miss entries of sequence {})",
                self.sequence
            ),
            Some(segments) if segments.is_empty() => "no entries".to_owned(),
            Some(segments) => describe_segments(segments),
        }
    }
}

/// An intact object above the tip that recovery did not replay: its chain
/// is broken below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreplayedObject {
    /// Its key.
    pub key: String,
    /// Its sequence.
    pub sequence: u64,
    /// The epoch that wrote it.
    pub epoch: u64,
    /// Its region segments.
    pub segments: Vec<SegmentIndex>,
    /// Its release records.
    pub releases: Vec<ReleaseRecord>,
    /// The sequence where its chain breaks: the first predecessor, following
    /// links down from it, that is not present (or not of the linked epoch).
    pub broken_at: u64,
}

impl UnreplayedObject {
    /// The entries it holds.
    pub fn entries(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.count)).sum()
    }

    /// What it holds, in one line.
    pub fn held(&self) -> String {
        let mut parts = Vec::new();
        if !self.segments.is_empty() {
            parts.push(describe_segments(&self.segments));
        }
        for r in &self.releases {
            parts.push(format!(
                "release of r{} through {}",
                r.region, r.released_through
            ));
        }
        parts.join(", ")
    }
}

/// `r1 ids 5.1..5.3 (3 entries), r2 ...`.
fn describe_segments(segments: &[SegmentIndex]) -> String {
    let id = |id: EntryId| format!("{}.{}", format::sequence_of(id), format::position_of(id));
    segments
        .iter()
        .map(|s| {
            format!(
                "r{} ids {}..{} ({} entries)",
                s.region,
                id(s.first_id),
                id(s.last_id),
                s.count
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Everything recovery left out of replay.
#[derive(Debug, Clone, Default)]
pub(crate) struct Damage {
    /// Damaged objects, by sequence.
    pub(crate) damaged: Vec<DamagedObject>,
    /// Intact objects above the tip off its chain, by sequence.
    pub(crate) unreplayed: Vec<UnreplayedObject>,
}

impl crate::wal::WalReader {
    /// The structurally damaged objects recovery left out of replay (in
    /// place, under `on_damaged_object = "quarantine"`, or moved under
    /// `quarantine/` by `objwal repair`), by sequence.
    pub fn damaged(&self) -> &[DamagedObject] {
        &self.damage.damaged
    }

    /// The intact objects above the tip, holding entries or release
    /// records, that recovery will not replay because their chain breaks
    /// at a missing object, by sequence.
    pub fn unreplayed(&self) -> &[UnreplayedObject] {
        &self.damage.unreplayed
    }
}

impl Damage {
    /// Publishes how many objects recovery left out of replay.
    pub(crate) fn set_gauges(&self, metrics: &StoreMetrics) {
        metrics.quarantined_objects.set(self.damaged.len() as f64);
        metrics.unreplayed_objects.set(self.unreplayed.len() as f64);
    }

    /// The holes damaged objects leave in `region`, by sequence.
    pub(crate) fn holes(&self, region: RegionId) -> Vec<Hole> {
        self.damaged
            .iter()
            .filter_map(|d| d.holes(region))
            .collect()
    }

    /// The highest id of `region` the damaged objects may hold (0: none):
    /// a release covers them too, or an object that reads intact again
    /// later would bring its entries back above the release.
    pub(crate) fn last_id_held(&self, region: RegionId) -> EntryId {
        self.holes(region)
            .iter()
            .map(|h| h.last_id)
            .max()
            .unwrap_or(0)
    }

    /// `entries` of `region` from `from`, failing (under
    /// `CorruptionPolicy::Fail`) where they reach a hole of a damaged
    /// object instead of going past it.
    pub(crate) fn guard(
        &self,
        policy: CorruptionPolicy,
        region: RegionId,
        from: EntryId,
        entries: impl Stream<Item = Result<Entry, Error>> + Send + 'static,
    ) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
        let state = Guarded {
            entries: Box::pin(entries),
            guard: self.hole_guard(policy, region, from),
            done: false,
        };
        futures::stream::unfold(state, |mut state| async move {
            if state.done {
                return None;
            }
            let next = state.entries.next().await;
            let reached = match &next {
                Some(Ok(entry)) => state.guard.passes(entry.id),
                Some(Err(_)) => None,
                None => state.guard.at_end(),
            };
            if let Some(error) = reached {
                state.done = true;
                return Some((Err(error), state));
            }
            next.map(|item| (item, state))
        })
    }

    /// The holes of damaged objects that a replay of `region` from `from`
    /// must not pass (none under `CorruptionPolicy::Skip`).
    pub(crate) fn hole_guard(
        &self,
        policy: CorruptionPolicy,
        region: RegionId,
        from: EntryId,
    ) -> HoleGuard {
        let mut holes: Vec<Hole> = match policy {
            CorruptionPolicy::Skip => Vec::new(),
            CorruptionPolicy::Fail => self
                .holes(region)
                .into_iter()
                .filter(|h| h.last_id >= from)
                .collect(),
        };
        holes.sort_by_key(|h| h.first_id);
        HoleGuard {
            holes: holes.into(),
        }
    }
}

/// The holes one region's replay must not pass, in id order.
#[derive(Debug, Default)]
pub(crate) struct HoleGuard {
    holes: VecDeque<Hole>,
}

impl HoleGuard {
    /// The error to yield instead of entry `id`, when it lies past a hole.
    pub(crate) fn passes(&mut self, id: EntryId) -> Option<Error> {
        if self.holes.front().is_some_and(|h| h.first_id < id) {
            return self.holes.pop_front().map(|h| hole_error(&h));
        }
        None
    }

    /// The error to yield at the end of the region's entries, when a hole
    /// lies after the last of them.
    pub(crate) fn at_end(&mut self) -> Option<Error> {
        self.holes.pop_front().map(|h| hole_error(&h))
    }
}

struct Guarded {
    entries: std::pin::Pin<Box<dyn Stream<Item = Result<Entry, Error>> + Send>>,
    guard: HoleGuard,
    done: bool,
}

fn hole_error(hole: &Hole) -> Error {
    Error::corrupted(
        hole.key.clone(),
        FormatError::invalid(
            "object",
            0,
            format!(
                "this damaged object was left out of replay at open; region {} misses \
                 ids {}..={} here (on_corrupted_segment = \"fail\")",
                hole.region, hole.first_id, hole.last_id
            ),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damaged(sequence: u64, segments: Option<Vec<SegmentIndex>>, missing: bool) -> DamagedObject {
        DamagedObject {
            key: format!("p/objects/{sequence}"),
            sequence,
            reason: "test".into(),
            quarantined: false,
            segments,
            missing,
            absent: false,
            last_sequence: sequence,
        }
    }

    fn segment(region: RegionId, sequence: u64) -> SegmentIndex {
        SegmentIndex {
            region,
            first_id: format::entry_id(sequence, 1),
            last_id: format::entry_id(sequence, 3),
            offset: 64,
            len: 30,
            count: 3,
            crc: 0,
        }
    }

    #[test]
    fn quarantine_keys_round_trip_and_refuse_other_keys() {
        let p = Prefix::new("node/7").unwrap();
        let key = quarantine_key(&p, 42);
        assert_eq!(key, "node/7/quarantine/00000000000000000042.wal");
        assert_eq!(parse_quarantine_key(&p, &key), Some(42));
        assert_eq!(parse_quarantine_key(&p, &p.object_key(42)), None);
        assert_eq!(parse_quarantine_key(&p, "node/7/quarantine/x.wal"), None);
    }

    #[test]
    fn holes_cover_the_footer_regions_or_every_region() {
        let damage = Damage {
            damaged: vec![
                damaged(3, Some(vec![segment(1, 3)]), true),
                damaged(5, None, true),
                damaged(6, None, false),
            ],
            unreplayed: Vec::new(),
        };
        let holes = damage.holes(1);
        assert_eq!(holes.len(), 2, "{holes:?}");
        assert_eq!(holes[0].first_id, format::entry_id(3, 1));
        assert_eq!(holes[1].last_id, format::entry_id(5, format::MAX_POSITION));
        // Region 2 is not in object 3's footer, but object 5 is unknown.
        assert_eq!(damage.holes(2).len(), 1);
        assert!(damage.holes(format::RELEASE_REGION).is_empty());
    }

    #[tokio::test]
    async fn a_failing_read_stops_at_the_first_hole_it_reaches() {
        let damage = Damage {
            damaged: vec![damaged(3, Some(vec![segment(1, 3)]), true)],
            unreplayed: Vec::new(),
        };
        let entry = |sequence| Entry {
            region: 1,
            id: format::entry_id(sequence, 1),
            data: bytes::Bytes::new(),
        };
        let entries = || futures::stream::iter(vec![Ok(entry(2)), Ok(entry(4))]);
        let got: Vec<_> = damage
            .guard(CorruptionPolicy::Fail, 1, 0, entries())
            .collect()
            .await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].is_ok());
        assert!(matches!(&got[1], Err(Error::Corrupted { .. })), "{got:?}");
        // Skip goes past; a read from beyond the hole never meets it.
        let got: Vec<_> = damage
            .guard(CorruptionPolicy::Skip, 1, 0, entries())
            .collect()
            .await;
        assert!(got.iter().all(Result::is_ok) && got.len() == 2);
        let from = format::entry_id(4, 1);
        let got: Vec<_> = damage
            .guard(CorruptionPolicy::Fail, 1, from, entries())
            .collect()
            .await;
        assert!(got.iter().all(Result::is_ok), "{got:?}");
        // A hole after the last entry still fails the read at its end.
        let got: Vec<_> = damage
            .guard(
                CorruptionPolicy::Fail,
                1,
                0,
                futures::stream::iter(vec![Ok(entry(2))]),
            )
            .collect()
            .await;
        assert!(got.last().is_some_and(Result::is_err), "{got:?}");
    }
}
