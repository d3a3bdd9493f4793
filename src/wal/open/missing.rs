//! Missing objects: a key that nothing under `objects/` holds while listed
//! objects link to it (issue 29 item 7; rfcs/0003, "A missing object").
//!
//! An object of a run can be missing for two reasons that look alike in a
//! listing: its create never landed (its writer crashed with it in flight,
//! and later creates of the run landed; none of them was acknowledged,
//! rule K2 of rfcs/0006), or it landed, was acknowledged, and is gone (a
//! store that answered "created" but kept nothing, a lifecycle rule, a
//! delete by hand). The second loses acknowledged entries, and chain
//! selection would then fall back below it, and collection would later
//! delete the intact objects above it. What tells them apart is in the
//! objects that link through the gap:
//!
//! - one of them says its writer had acknowledged through the gap (its jump
//!   record below its own sequence, which every batch carries);
//! - one of them lies at or beyond the gap plus `WINDOW` (a writer creates
//!   only within `WINDOW` keys of its first unacknowledged one, K3);
//! - one of them is of a newer epoch (a newer process's walk adopted the
//!   gap's object, so it had landed).
//!
//! Such a gap is a missing object: under `on_damaged_object = "fail"` (the
//! default) the open fails, naming it; under `"quarantine"` it becomes a
//! damaged object of unknown content on the chain (a hole of every region,
//! [`super::damage`]), and the objects above it are replayed. A gap with no
//! such evidence is what a crash leaves: the run ends before it.
//!
//! Pure: tails in, missing objects out.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::chain::{self, ObjectSummary};
use crate::config::DamagePolicy;
use crate::error::Error;
use crate::format::{self, Link};
use crate::wal::protocol::rules;

use super::quarantine::Damaged;
use super::tail::RecoveredObject;

/// The missing objects among `intact` (the listed objects whose tails
/// decoded; `present` every listed sequence; `vanished_below` one above
/// the highest listed object that vanished before its tail was read, 0
/// when none: a writer collected there), as damaged objects of unknown
/// content for quarantine's chain assembly; an error naming the first one
/// under [`DamagePolicy::Fail`].
pub(crate) fn missing_objects(
    intact: &BTreeMap<u64, RecoveredObject>,
    present: &BTreeSet<u64>,
    vanished_below: u64,
    policy: DamagePolicy,
    object_key: impl Fn(u64) -> String,
) -> Result<BTreeMap<u64, Damaged>, Error> {
    let mut out = BTreeMap::new();
    // Below a boundary some object carries, its writer may have collected
    // (rfcs/0005): a boundary never lies above an object that holds a live
    // entry of its writer's chain, and only objects above a key carry a
    // boundary above it (a boundary is at most its object's sequence).
    // An object that vanished under recovery was collected: so was all
    // below it (its writer deleted below a boundary above it).
    let collected_below = intact
        .values()
        .map(|o| o.tail.header().reclaim_boundary)
        .chain([vanished_below])
        .max()
        .unwrap_or(0);
    // A missing object of a run can hide the next one below it: the run's
    // links between them went with it. Each one found stands in for itself
    // (linking as its writer's object would, over fillers below it), and the
    // walk goes again from it, until no new one is found.
    let mut summaries: BTreeMap<u64, ObjectSummary> =
        intact.iter().map(|(s, o)| (*s, o.summary())).collect();
    let mut considered = BTreeSet::new();
    loop {
        let mut found = Vec::new();
        for ((sequence, epoch), gap) in gaps(intact, &summaries, present) {
            if out.contains_key(&sequence) {
                continue;
            }
            let link = Link { sequence, epoch };
            if sequence < collected_below {
                continue;
            }
            // A gap without evidence may gain it in a later round (an
            // object above reaching it through one found since); warned
            // about once.
            let Some(evidence) = acknowledged(intact, link, &gap) else {
                if considered.insert((sequence, epoch)) {
                    tracing::warn!(key = %object_key(link.sequence), above = gap.through.len(),
                        "nothing is at a key that listed objects link to, and nothing shows it \
                         was acknowledged (a crash with its create in flight looks the same)");
                }
                continue;
            };
            let key = object_key(link.sequence);
            let reason = format!(
                "{key} is missing while {} intact objects above it (up to sequence {}) chain \
                 through it, and {evidence}: it was acknowledged and is gone (a store that \
                 answered created but kept nothing, a lifecycle rule, a delete by hand)",
                gap.through
                    .iter()
                    .filter(|s| intact.contains_key(s))
                    .count(),
                gap.through.last().copied().unwrap_or(link.sequence),
            );
            if policy == DamagePolicy::Fail {
                tracing::error!(%key, %reason, "a missing object stops the open");
                return Err(Error::recovery(format!(
                    "object {reason}. Restore it, or open with on_damaged_object = \"quarantine\" \
                     to replay the objects above it with a hole at its sequence in every region"
                )));
            }
            tracing::warn!(%key, %reason, "a missing object: a hole of every region");
            // Its writer's run went on where its successor lies; nothing else
            // of what it carried is known.
            let jump = (gap.next > link.sequence + 1).then(|| format::MarkRecord {
                region: format::JUMP,
                watermark: format::entry_id(gap.next - 1, format::MAX_POSITION),
            });
            out.insert(
                link.sequence,
                Damaged {
                    key,
                    size: 0,
                    error: Error::recovery(reason),
                    quarantined: false,
                    header: None,
                    segments: None,
                    records: Some((jump.into_iter().collect(), Vec::new())),
                    absent: true,
                },
            );
            found.push(sequence);
        }
        if found.is_empty() {
            break;
        }
        // From the top down: the lower ones are reached through the upper.
        for &sequence in found.iter().rev() {
            if let Some(b) = super::quarantine::bridge(&summaries, sequence, |_| true) {
                summaries.insert(sequence, b);
            }
        }
    }
    Ok(out)
}

/// The objects whose chains break at one missing link.
#[derive(Debug, Default)]
struct Gap {
    /// The lowest object linking to it directly: its successor.
    next: u64,
    /// Every object whose chain goes down to it, ascending.
    through: Vec<u64>,
}

/// The links of listed objects to keys nothing listed holds, each with the
/// objects whose chains go down to it (settle markers, which link to epoch
/// 0, name no predecessor).
fn gaps(
    intact: &BTreeMap<u64, RecoveredObject>,
    summaries: &BTreeMap<u64, ObjectSummary>,
    present: &BTreeSet<u64>,
) -> BTreeMap<(u64, u64), Gap> {
    // Per object, ascending (links point down): the missing link its chain
    // goes down to, if any.
    let mut reaches: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut out: BTreeMap<(u64, u64), Gap> = BTreeMap::new();
    for (&sequence, summary) in summaries {
        // A missing object found already stands in with its bridged link.
        let settle = intact
            .get(&sequence)
            .is_some_and(|o| rules::is_settle_marker(o.tail.header()));
        let Some(link) = summary.link.filter(|_| !settle) else {
            continue;
        };
        if link.sequence >= sequence {
            continue;
        }
        // Where its run goes on below it, over fillers as chain selection
        // steps over them.
        let missing = match chain::predecessor(summaries, summary) {
            None => None,
            Some(Ok(pred)) => reaches.get(&pred).copied(),
            // A key below the object's own boundary names a collected
            // predecessor (rfcs/0005): nothing is missing there.
            Some(Err(key)) if !present.contains(&key) => {
                (key >= summary.reclaim_boundary).then_some((key, link.epoch))
            }
            // Something else is there (damaged, or another writer's).
            Some(Err(_)) => None,
        };
        if let Some(missing) = missing {
            reaches.insert(sequence, missing);
            let gap = out.entry(missing).or_default();
            if gap.through.is_empty() {
                gap.next = sequence;
            }
            gap.through.push(sequence);
        }
    }
    out
}

/// Why the object of the missing `link` must have been acknowledged, when
/// something in the objects above it shows it.
fn acknowledged(intact: &BTreeMap<u64, RecoveredObject>, link: Link, gap: &Gap) -> Option<String> {
    let key = link.sequence;
    gap.through.iter().find_map(|&sequence| {
        let object = intact.get(&sequence)?;
        let header = object.tail.header();
        // A jump record below the object's own sequence: the last key its
        // writer had acknowledged when it sealed it.
        let through = object
            .marks
            .iter()
            .find(|m| m.is_jump())
            .map(|m| format::sequence_of(m.watermark))
            .filter(|a| *a < sequence);
        if let Some(through) = through.filter(|a| *a >= key && header.epoch == link.epoch) {
            Some(format!(
                "object {sequence} was sealed once its writer had acknowledged its run through \
                 {through}"
            ))
        } else if header.epoch == link.epoch && sequence >= key.saturating_add(rules::WINDOW) {
            Some(format!(
                "object {sequence} of its writer lies {} keys past it, beyond the window of {} \
                 keys a writer creates in",
                sequence - key,
                rules::WINDOW
            ))
        } else if header.epoch > link.epoch {
            Some(format!(
                "object {sequence} of a newer process (epoch {}) continues a chain through it: \
                 that process's walk found it",
                header.epoch
            ))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Header, MarkRecord, Object, TailDecode};

    fn object(
        sequence: u64,
        epoch: u64,
        link: (u64, u64),
        through: Option<u64>,
    ) -> RecoveredObject {
        let marks: Vec<MarkRecord> = through
            .map(|a| MarkRecord {
                region: format::JUMP,
                watermark: format::entry_id(a, format::MAX_POSITION),
            })
            .into_iter()
            .collect();
        let object = Object {
            header: Header {
                sequence,
                epoch,
                link: Some(Link {
                    sequence: link.0,
                    epoch: link.1,
                }),
                reclaim_boundary: 1,
            },
            segments: Vec::new(),
            marks: marks.clone(),
            releases: Vec::new(),
        };
        let bytes = format::encode(&object).unwrap();
        let TailDecode::Complete(tail) = format::decode_tail(&bytes, bytes.len() as u64).unwrap()
        else {
            panic!("a whole object has a complete tail")
        };
        RecoveredObject {
            size: bytes.len() as u64,
            tail,
            marks,
            releases: Vec::new(),
        }
    }

    fn run(objects: &[RecoveredObject]) -> (BTreeMap<u64, RecoveredObject>, BTreeSet<u64>) {
        let intact: BTreeMap<u64, RecoveredObject> = objects
            .iter()
            .map(|o| (o.tail.header().sequence, o.clone()))
            .collect();
        let present = intact.keys().copied().collect();
        (intact, present)
    }

    fn key(s: u64) -> String {
        format!("p/objects/{s:020}.wal")
    }

    #[test]
    fn a_gap_its_successor_says_was_acknowledged_is_a_missing_object() {
        // 2 <- [3 missing] <- 4 (sealed with 3 acknowledged) <- 5.
        let (intact, present) = run(&[
            object(1, 1, (0, 1), None),
            object(2, 1, (1, 1), Some(1)),
            object(4, 1, (3, 1), Some(3)),
            object(5, 1, (4, 1), Some(4)),
        ]);
        let err = missing_objects(&intact, &present, 0, DamagePolicy::Fail, key).unwrap_err();
        assert!(err.to_string().contains(&key(3)), "{err}");
        let found = missing_objects(&intact, &present, 0, DamagePolicy::Quarantine, key).unwrap();
        let d = found.get(&3).expect("3 is missing");
        assert_eq!(
            (d.header, &d.records),
            (None, &Some((Vec::new(), Vec::new())))
        );
    }

    #[test]
    fn a_missing_object_between_two_fillers_is_named_at_its_own_key() {
        // Epoch 2's run: 3, then (fillers of epoch 1 at 4 and 6, empty start
        // objects of failed opens) 5 linking to the filler at 4, gone, and
        // 7 linking to the filler at 6, sealed with 5 acknowledged.
        let (intact, present) = run(&[
            object(1, 1, (0, 1), None),
            object(2, 1, (1, 1), Some(1)),
            object(3, 2, (2, 1), None),
            object(4, 1, (2, 1), None),
            object(6, 1, (2, 1), None),
            object(7, 2, (6, 2), Some(5)),
        ]);
        let err = missing_objects(&intact, &present, 0, DamagePolicy::Fail, key).unwrap_err();
        assert!(err.to_string().contains(&key(5)), "{err}");
        let found = missing_objects(&intact, &present, 0, DamagePolicy::Quarantine, key).unwrap();
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn a_gap_nothing_says_was_acknowledged_is_what_a_crash_leaves() {
        // 3 was in flight when its writer crashed; 4 landed, sealed while
        // only 2 was acknowledged.
        let (intact, present) = run(&[
            object(1, 1, (0, 1), None),
            object(2, 1, (1, 1), Some(1)),
            object(4, 1, (3, 1), Some(2)),
        ]);
        let found = missing_objects(&intact, &present, 0, DamagePolicy::Fail, key).unwrap();
        assert!(found.is_empty());
    }

    #[test]
    fn a_newer_process_or_the_window_shows_the_gap_was_acknowledged() {
        // A newer process (epoch 2) linked its start object through the gap.
        let (intact, present) = run(&[
            object(1, 1, (0, 1), None),
            object(2, 1, (1, 1), None),
            object(4, 1, (3, 1), None),
            object(70, 2, (4, 1), None),
        ]);
        let found = missing_objects(&intact, &present, 0, DamagePolicy::Quarantine, key).unwrap();
        assert!(found.contains_key(&3));
        // The writer's own object a window past it.
        let (intact, present) = run(&[
            object(1, 1, (0, 1), None),
            object(2, 1, (1, 1), None),
            object(4, 1, (3, 1), None),
            object(67, 1, (4, 1), None),
        ]);
        let found = missing_objects(&intact, &present, 0, DamagePolicy::Quarantine, key).unwrap();
        assert!(found.contains_key(&3));
    }

    #[test]
    fn a_link_below_the_boundary_names_a_collected_object() {
        let mut o = object(4, 1, (3, 1), Some(3));
        let (intact, present) = run(&[o.clone()]);
        // Boundary 1: 3 is above it, so missing.
        assert!(
            missing_objects(&intact, &present, 0, DamagePolicy::Quarantine, key)
                .unwrap()
                .contains_key(&3)
        );
        let object = format::decode(
            &format::encode(&Object {
                header: Header {
                    reclaim_boundary: 4,
                    ..*o.tail.header()
                },
                segments: Vec::new(),
                marks: o.marks.clone(),
                releases: Vec::new(),
            })
            .unwrap(),
        )
        .unwrap();
        let bytes = format::encode(&object).unwrap();
        let TailDecode::Complete(tail) = format::decode_tail(&bytes, bytes.len() as u64).unwrap()
        else {
            panic!("a whole object has a complete tail")
        };
        o.tail = tail;
        let (intact, present) = run(&[o]);
        assert!(
            missing_objects(&intact, &present, 0, DamagePolicy::Fail, key)
                .unwrap()
                .is_empty()
        );
    }
}
