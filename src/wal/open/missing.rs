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
/// decoded; `damaged` the damaged ones, listed or quarantined; `present`
/// every sequence that holds something; `vanished_below` one above the
/// highest listed object that vanished before its tail was read, 0 when
/// none: a writer collected there), as damaged objects of unknown content
/// for quarantine's chain assembly; an error naming the first one under
/// [`DamagePolicy::Fail`].
pub(crate) fn missing_objects(
    intact: &BTreeMap<u64, RecoveredObject>,
    damaged: &BTreeMap<u64, Damaged>,
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
    // A damaged object's header, when a copy still gives it, has its own
    // CRC: its boundary counts too (an object moved aside under
    // `quarantine/` may be the one that carried it).
    let collected_below = intact
        .values()
        .map(|o| o.tail.header().reclaim_boundary)
        .chain(
            damaged
                .values()
                .filter_map(|d| d.header.map(|h| h.reclaim_boundary)),
        )
        .chain([vanished_below])
        .max()
        .unwrap_or(0);
    // The search walks links as chain assembly will: through damaged
    // objects (a header known, or bridged from their linkers), and
    // through every key that holds nothing, acknowledged or not. Each such
    // key stands in for its writer's object (linking as that object would)
    // and the walk goes on below it, until nothing new is reached: one
    // missing object cannot hide another, nor can a damaged object or a
    // crash gap above it hide one (the evidence of the objects above
    // carries down through them).
    let mut summaries: BTreeMap<u64, ObjectSummary> =
        intact.iter().map(|(s, o)| (*s, o.summary())).collect();
    for (&sequence, d) in damaged {
        if let Some(h) = &d.header {
            summaries.insert(sequence, super::quarantine::summary(h, d));
        }
    }
    let headerless: BTreeSet<u64> = damaged
        .iter()
        .filter(|(_, d)| d.header.is_none())
        .map(|(s, _)| *s)
        .collect();
    // Gap keys warned about (nothing shows they were acknowledged).
    let mut warned = BTreeSet::new();
    // Stand-ins inserted, with their next keys: bridged again each round
    // (a start object's links to the tip its opener chose, which may lie
    // above a stand-in found later).
    let mut bridged: BTreeMap<u64, u64> = BTreeMap::new();
    let mut relinks = 0;
    loop {
        let mut stand_ins: Vec<(u64, u64)> = bridged.iter().map(|(s, n)| (*s, *n)).collect();
        for ((sequence, epoch), gap) in gaps(&summaries, present) {
            if sequence < collected_below || out.contains_key(&sequence) {
                continue;
            }
            let link = Link { sequence, epoch };
            // Where its run went on: at the break's end, or before
            // anything listed above it.
            let above = |set: Option<&u64>| set.copied().unwrap_or(u64::MAX);
            let next_key = gap
                .resume
                .min(above(present.range(sequence + 1..).next()))
                .min(above(
                    summaries.range(sequence + 1..).next().map(|(s, _)| s),
                ));
            if !summaries.contains_key(&sequence) && !bridged.contains_key(&sequence) {
                stand_ins.push((sequence, next_key));
            }
            // A gap without evidence may gain it in a later round (an
            // object above reaching it through a stand-in found since).
            let Some(evidence) = acknowledged(intact, damaged, link, &gap) else {
                if !warned.insert(sequence) {
                    continue;
                }
                tracing::warn!(key = %object_key(link.sequence), above = gap.through.len(),
                    "nothing is at a key that listed objects link to, and nothing shows it \
                     was acknowledged (a crash with its create in flight looks the same)");
                continue;
            };
            let key = object_key(link.sequence);
            let held = if next_key > sequence + 1 {
                format!(
                    " (with the keys up to {} that hold nothing: one object with a jump, or \
                     several, stood there)",
                    next_key - 1
                )
            } else {
                String::new()
            };
            let reason = format!(
                "{key} is missing{held} while {} intact objects above it (up to sequence {}) \
                 chain through it, and {evidence}: it was acknowledged and is gone (a store \
                 that answered created but kept nothing, a lifecycle rule, a delete by hand)",
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
            // Its writer's run went on at `next_key`; nothing else of what
            // it carried is known.
            let jump = (next_key > sequence + 1).then(|| format::MarkRecord {
                region: format::JUMP,
                watermark: format::entry_id(next_key - 1, format::MAX_POSITION),
            });
            out.insert(
                sequence,
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
        }
        // Damaged objects whose header is unknown, once something links to
        // them.
        for &sequence in &headerless {
            if !summaries.contains_key(&sequence) && !bridged.contains_key(&sequence) {
                stand_ins.push((sequence, sequence.saturating_add(1)));
            }
        }
        // From the top down: the lower ones are reached through the upper.
        stand_ins.sort_unstable();
        stand_ins.dedup();
        let (mut reached, mut relinked) = (false, false);
        for &(sequence, next_key) in stand_ins.iter().rev() {
            let Some(b) = super::quarantine::bridge(
                &summaries,
                sequence,
                next_key,
                |k| !present.contains(&k),
                &headerless,
                |k| intact.get(&k).and_then(|o| o.acknowledged_through()),
            ) else {
                continue;
            };
            // A link to a key below which nothing is listed leads nowhere
            // (walking down from it key by key would never end).
            // Settle markers do not count: nobody's run lies in them.
            let settle = |k: &u64| summaries.get(k).is_some_and(|o| o.is_settle_marker());
            let leads = b.link.is_none_or(|l| {
                present.range(..=l.sequence).any(|k| !settle(k))
                    || summaries.range(..=l.sequence).any(|(k, _)| !settle(k))
            });
            if leads && summaries.insert(sequence, b) != Some(b) {
                reached |= bridged.insert(sequence, next_key).is_none();
                relinked = true;
            }
        }
        // A round that only relinks stand-ins settles at least the lowest
        // changed one: as many as there are stand-ins end it.
        relinks = if reached { 0 } else { relinks + 1 };
        if !relinked || relinks > bridged.len() {
            break;
        }
    }
    Ok(out)
}

/// The objects whose chains break at one missing link.
#[derive(Debug, Default)]
struct Gap {
    /// Where the run goes on above it: the lowest object linking to it
    /// directly, or the first of the fillers its successor links into.
    resume: u64,
    /// Every object whose chain goes down to it, ascending.
    through: Vec<u64>,
}

/// The links of listed objects (and of the stand-ins of the search) to
/// keys nothing holds, each with the objects whose chains go down to it
/// (settle markers, which link to epoch 0, name no predecessor). A break
/// over several keys (a run's object below, then keys holding nothing, then
/// the fillers its successor links into) names its lowest key, the one the
/// run certainly used, unless a boundary lies above it: then the lowest
/// key at or above the boundary that holds nothing.
fn gaps(
    summaries: &BTreeMap<u64, ObjectSummary>,
    present: &BTreeSet<u64>,
) -> BTreeMap<(u64, u64), Gap> {
    let held = |k: u64| present.contains(&k) || summaries.contains_key(&k);
    // Per object, ascending (links point down): the missing link its chain
    // goes down to, if any.
    let mut reaches: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut out: BTreeMap<(u64, u64), Gap> = BTreeMap::new();
    for (&sequence, summary) in summaries {
        // A damaged settle marker whose header still reads too (model
        // seed 8652930830632197567: its link to epoch 0 named the key
        // below it missing, a hole of every region, and the open then
        // refused that key as damage under the tip's link).
        let Some(link) = summary.link.filter(|_| !summary.is_settle_marker()) else {
            continue;
        };
        if link.sequence >= sequence {
            continue;
        }
        // Where its run goes on below it, over fillers as chain selection
        // steps over them.
        let mut resume = sequence;
        let missing = match chain::predecessor(summaries, summary) {
            None => None,
            Some(Ok(pred)) => reaches.get(&pred).copied(),
            Some(Err(_)) => chain::broken(summaries, summary).and_then(|b| {
                resume = b.resume;
                let boundary = summary.reclaim_boundary;
                // A key below the object's own boundary names a collected
                // predecessor (rfcs/0005): nothing is missing there.
                // Something else at the break's first key (damaged, or
                // another writer's): not missing either.
                let key = if b.high < boundary {
                    None
                } else if b.low >= boundary {
                    (!held(b.low)).then_some(b.low)
                } else {
                    (boundary..=b.high).find(|&k| !held(k))
                };
                key.map(|k| (k, link.epoch))
            }),
        };
        if let Some(missing) = missing {
            reaches.insert(sequence, missing);
            let gap = out.entry(missing).or_default();
            if gap.through.is_empty() {
                gap.resume = resume;
            }
            gap.through.push(sequence);
        }
    }
    out
}

/// Why the object of the missing `link` must have been acknowledged, when
/// something in the objects above it shows it.
fn acknowledged(
    intact: &BTreeMap<u64, RecoveredObject>,
    damaged: &BTreeMap<u64, Damaged>,
    link: Link,
    gap: &Gap,
) -> Option<String> {
    let key = link.sequence;
    gap.through.iter().find_map(|&sequence| {
        // An intact object, or a damaged one whose header is known (its
        // records, when they decode, count as an intact object's).
        let (header, through) = match (intact.get(&sequence), damaged.get(&sequence)) {
            (Some(o), _) => (*o.tail.header(), o.acknowledged_through()),
            (None, Some(d)) => (
                d.header?,
                d.records
                    .as_ref()
                    .and_then(|(marks, _)| super::tail::acknowledged_through(marks, sequence)),
            ),
            (None, None) => return None,
        };
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
    use crate::catalog::chain_histories::{key, listing, recovered, search};
    use crate::format::{Header, Object, TailDecode};

    fn object(
        sequence: u64,
        epoch: u64,
        link: (u64, u64),
        through: Option<u64>,
    ) -> RecoveredObject {
        recovered(sequence, epoch, Some(link), through, 1)
    }

    fn run(objects: &[RecoveredObject]) -> (BTreeMap<u64, RecoveredObject>, BTreeSet<u64>) {
        listing(objects.to_vec())
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
        let err = search(&intact, &present, DamagePolicy::Fail).unwrap_err();
        assert!(err.to_string().contains(&key(3)), "{err}");
        let found = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
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
        let err = search(&intact, &present, DamagePolicy::Fail).unwrap_err();
        assert!(err.to_string().contains(&key(5)), "{err}");
        let found = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
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
        let found = search(&intact, &present, DamagePolicy::Fail).unwrap();
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
        let found = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
        assert!(found.contains_key(&3));
        // The writer's own object a window past it.
        let (intact, present) = run(&[
            object(1, 1, (0, 1), None),
            object(2, 1, (1, 1), None),
            object(4, 1, (3, 1), None),
            object(67, 1, (4, 1), None),
        ]);
        let found = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
        assert!(found.contains_key(&3));
    }

    #[test]
    fn a_link_below_the_boundary_names_a_collected_object() {
        let mut o = object(4, 1, (3, 1), Some(3));
        let (intact, present) = run(&[o.clone()]);
        // Boundary 1: 3 is above it, so missing.
        assert!(missing_objects(
            &intact,
            &BTreeMap::new(),
            &present,
            0,
            DamagePolicy::Quarantine,
            key
        )
        .unwrap()
        .contains_key(&3));
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
        assert!(missing_objects(
            &intact,
            &BTreeMap::new(),
            &present,
            0,
            DamagePolicy::Fail,
            key
        )
        .unwrap()
        .is_empty());
    }
}
