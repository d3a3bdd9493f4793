//! Histories of chain selection across fillers (rfcs/0006 rule 8, "What the
//! fillers version got wrong"). Each test is named after the history it
//! checks and asserts what the RFC says must happen.
//!
//! Numbering used throughout: writer A (epoch 1) holds 1 and 2; failed
//! openers of epochs 2, 3, 4 leave fillers (empty start objects linking to
//! A's tip 2); writer B (epoch 5) starts at 10.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::chain::tests::{filler, map, obj};
use crate::catalog::chain::{above_tip, predecessor, select, ObjectSummary, Selection};
use crate::config::DamagePolicy;
use crate::error::Error;
use crate::format::{self, Header, Link, MarkRecord, Object, TailDecode};
use crate::wal::open::damage::Damage;
use crate::wal::open::missing::missing_objects;
use crate::wal::open::quarantine::{assemble, Damaged};
use crate::wal::open::tail::RecoveredObject;

const B: u64 = 5;

/// A filler as a failed opener leaves it: empty, linked to the tip it chose.
fn start_filler(sequence: u64, epoch: u64) -> ObjectSummary {
    ObjectSummary {
        empty: true,
        ..obj(sequence, epoch, Some((2, 1)), 1)
    }
}

fn with_next(mut o: ObjectSummary, next_key: u64) -> ObjectSummary {
    o.next_key = next_key;
    o
}

fn tip_of(objects: &BTreeMap<u64, ObjectSummary>) -> Option<u64> {
    select(objects).ok().and_then(|s| s.tip).map(|t| t.sequence)
}

// ---- objects as recovery reads them (for missing.rs / quarantine.rs) ----

/// An intact object; `through`: the jump record every batch carries (the
/// last key acknowledged when it was sealed, or a real jump when at or
/// above its own sequence). Without one (and no segments) it is empty.
pub(crate) fn recovered(
    sequence: u64,
    epoch: u64,
    link: Option<(u64, u64)>,
    through: Option<u64>,
    boundary: u64,
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
            link: link.map(|(sequence, epoch)| Link { sequence, epoch }),
            reclaim_boundary: boundary,
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

pub(crate) fn listing(
    objects: Vec<RecoveredObject>,
) -> (BTreeMap<u64, RecoveredObject>, BTreeSet<u64>) {
    let intact: BTreeMap<u64, RecoveredObject> = objects
        .into_iter()
        .map(|o| (o.tail.header().sequence, o))
        .collect();
    let present = intact.keys().copied().collect();
    (intact, present)
}

pub(crate) fn key(s: u64) -> String {
    format!("p/objects/{s:020}.wal")
}

/// Writer A (epoch 1): 1, and 2 sealed through 1.
pub(crate) fn writer_a() -> Vec<RecoveredObject> {
    vec![
        recovered(1, 1, Some((0, 1)), None, 1),
        recovered(2, 1, Some((1, 1)), Some(1), 1),
    ]
}

/// A damaged object whose header is unknown (a junk or truncated file).
pub(crate) fn headerless(sequence: u64) -> Damaged {
    Damaged {
        key: key(sequence),
        size: 64,
        error: Error::recovery("its tail does not decode"),
        quarantined: false,
        header: None,
        segments: None,
        records: None,
        absent: false,
    }
}

/// A damaged object `objwal repair` moved under quarantine/: its header
/// (linking to `link`) and its records (the jump record `through`, as in
/// [`recovered`]) still decode, its segments do not.
pub(crate) fn quarantined(
    sequence: u64,
    epoch: u64,
    link: (u64, u64),
    through: Option<u64>,
) -> Damaged {
    let marks = through
        .map(|a| MarkRecord {
            region: format::JUMP,
            watermark: format::entry_id(a, format::MAX_POSITION),
        })
        .into_iter()
        .collect();
    Damaged {
        key: key(sequence),
        size: 400,
        error: Error::recovery("moved aside by objwal repair"),
        quarantined: true,
        header: Some(Header {
            sequence,
            epoch,
            link: Some(Link {
                sequence: link.0,
                epoch: link.1,
            }),
            reclaim_boundary: 1,
        }),
        segments: Some(Vec::new()),
        records: through.map(|_| (marks, Vec::new())),
        absent: false,
    }
}

/// What recovery does after reading tails (recovery.rs: `known`, then
/// `missing_objects`, then `assemble`): the selection and what it leaves
/// out of replay.
pub(crate) fn recover_damage(
    objects: Vec<RecoveredObject>,
    damaged: Vec<(u64, Damaged)>,
    policy: DamagePolicy,
) -> Result<(Selection, Damage), Error> {
    let intact: BTreeMap<u64, RecoveredObject> = objects
        .into_iter()
        .map(|o| (o.tail.header().sequence, o))
        .collect();
    let mut damaged: BTreeMap<u64, Damaged> = damaged.into_iter().collect();
    let known: BTreeSet<u64> = intact.keys().chain(damaged.keys()).copied().collect();
    let missing = missing_objects(&intact, &damaged, &known, 0, policy, key)?;
    for (sequence, d) in missing {
        damaged.entry(sequence).or_insert(d);
    }
    let (_, selection, damage) = assemble(&intact, &damaged, 0, key)?;
    Ok((selection, damage))
}

/// The missing-object search over a listing with nothing damaged.
pub(crate) fn search(
    intact: &BTreeMap<u64, RecoveredObject>,
    present: &BTreeSet<u64>,
    policy: DamagePolicy,
) -> Result<BTreeMap<u64, Damaged>, Error> {
    missing_objects(intact, &BTreeMap::new(), present, 0, policy, key)
}

/// The sequences recovery named missing (absent from the store).
pub(crate) fn absent(damage: &Damage) -> Vec<u64> {
    damage
        .damaged
        .iter()
        .filter(|d| d.absent)
        .map(|d| d.sequence)
        .collect()
}

/// Writer A's two objects and the failed openers' fillers at `fillers`
/// (epochs 2, 3, 4 in turn), as recovery reads them.
fn a_and_fillers(fillers: &[u64]) -> Vec<RecoveredObject> {
    let mut out = vec![
        recovered(1, 1, Some((0, 1)), None, 1),
        recovered(2, 1, Some((1, 1)), Some(1), 1),
    ];
    for (i, &f) in fillers.iter().enumerate() {
        out.push(recovered(f, 2 + (i as u64 % 3), Some((2, 1)), None, 1));
    }
    out
}

// =====================================================================
// (a) a chain accepted across a hole
// =====================================================================

/// B: 10, F11, 12, F13, 14, F15, 16 (each links to the filler below it).
/// 16 carries boundary 14 (12 obsolete, 14 live). A collection pass deletes
/// 10 and 12 concurrently; 12's delete lands, 10's does not (the pass is
/// abandoned at a stop). Then 14 is lost (a store that kept nothing).
/// Rule 8: 16's link to the filler at 15 leads down to the run's object
/// whose next key is 15, that is 14: missing, at or above the boundary, so
/// 16 is broken there and must not be a tip.
#[test]
fn three_fillers_lower_object_collected_upper_object_lost_is_not_bridged() {
    let objects = map(&[
        obj(1, 1, None, 1),
        obj(2, 1, Some((1, 1)), 1),
        obj(10, B, Some((2, 1)), 1),
        start_filler(11, 2),
        start_filler(13, 3),
        start_filler(15, 4),
        obj(16, B, Some((15, B)), 14),
    ]);
    assert_ne!(
        tip_of(&objects),
        Some(16),
        "16 accepted across the missing 14 (its boundary excuses only keys below 14)"
    );
    assert_eq!(predecessor(&objects, &objects[&16]), Some(Err(14)));
}

/// The same history as recovery reads it: 16 was sealed once its writer
/// had acknowledged its run through the filler at 15, so 14 was
/// acknowledged and is gone. rfcs/0003: under "fail" the open fails naming
/// it.
#[test]
fn three_fillers_lower_object_collected_upper_object_lost_is_named_missing() {
    let mut objects = a_and_fillers(&[11, 13, 15]);
    objects.push(recovered(10, B, Some((2, 1)), None, 1));
    objects.push(recovered(16, B, Some((15, B)), Some(15), 14));
    let (intact, present) = listing(objects);
    let named = search(&intact, &present, DamagePolicy::Fail);
    match named {
        Err(e) => assert!(e.to_string().contains(&key(14)), "{e}"),
        Ok(found) => panic!(
            "14 is acknowledged (16 sealed through 15) and gone, yet nothing is named missing \
             ({:?})",
            found.keys().collect::<Vec<_>>()
        ),
    }
}

/// Sanity: the fixed history of the RFC (one object between two fillers).
#[test]
fn one_object_between_two_fillers_lost_is_broken_at_its_own_key() {
    let objects = map(&[
        obj(1, 1, None, 1),
        obj(2, 1, Some((1, 1)), 1),
        obj(10, B, Some((2, 1)), 1),
        start_filler(11, 2),
        start_filler(13, 3),
        obj(14, B, Some((13, B)), 12),
    ]);
    assert_eq!(predecessor(&objects, &objects[&14]), Some(Err(12)));
    assert_ne!(tip_of(&objects), Some(14));
}

// =====================================================================
// (b) a hole not named, or named at the wrong key
// =====================================================================

/// B: 10, F11, [12], F13, [14], F15, 16; both 12 and 14 are lost. Under
/// "quarantine" (rfcs/0003) every missing object becomes a damaged link of
/// the chain and the objects above it replay: 16 must be on the chain.
/// (Without fillers, 1, 2, [3], 4, [5], 6 names both 3 and 5.)
#[test]
fn two_lost_objects_between_three_fillers_are_both_named_and_the_run_replays() {
    let mut objects = a_and_fillers(&[11, 13, 15]);
    objects.push(recovered(10, B, Some((2, 1)), None, 1));
    objects.push(recovered(16, B, Some((15, B)), Some(15), 1));
    let (intact, present) = listing(objects);
    let damaged = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
    let (_, selection, damage) = assemble(&intact, &damaged, 0, key).unwrap();
    assert!(
        selection.chain.contains(&16),
        "16 is left out of replay: named missing {:?}, chain {:?}, unreplayed {:?}",
        damaged.keys().collect::<Vec<_>>(),
        selection.chain,
        damage
            .unreplayed
            .iter()
            .map(|u| (u.sequence, u.broken_at))
            .collect::<Vec<_>>()
    );
    assert_eq!(damaged.keys().copied().collect::<Vec<_>>(), vec![12, 14]);
}

/// Control for the previous test: the same two holes without fillers.
#[test]
fn two_lost_objects_without_fillers_are_both_named_and_the_run_replays() {
    let (intact, present) = listing(vec![
        recovered(1, 1, Some((0, 1)), None, 1),
        recovered(2, 1, Some((1, 1)), Some(1), 1),
        recovered(10, B, Some((2, 1)), None, 1),
        recovered(12, B, Some((11, B)), Some(11), 1),
        recovered(14, B, Some((13, B)), Some(13), 1),
    ]);
    let damaged = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
    assert_eq!(damaged.keys().copied().collect::<Vec<_>>(), vec![11, 13]);
    let (_, selection, _) = assemble(&intact, &damaged, 0, key).unwrap();
    assert!(selection.chain.contains(&14), "{:?}", selection.chain);
}

/// B: 10 (collected), 11 with a jump to 20 (its next key; 11 is the first
/// live object, the boundary), a filler at 20, 21 linking to it (sealed
/// through 20). 11 is lost. The open must fail: something at or above the
/// boundary and below the filler is gone. Which key it was, the listing
/// cannot say (the jump went with 11: without it 12..=19 would be the
/// run's keys, and 19 the one nearest the link), so the error names 19, the
/// key nearest the link (rfcs/0006, "What the fillers version got
/// wrong").
#[test]
fn the_lowest_live_object_with_a_jump_onto_a_filler_lost_fails_the_open() {
    let mut objects = a_and_fillers(&[20]);
    objects.push(recovered(21, B, Some((20, B)), Some(20), 11));
    let (intact, present) = listing(objects);
    let err =
        search(&intact, &present, DamagePolicy::Fail).expect_err("11 is acknowledged and gone");
    assert!(err.to_string().contains(&key(19)), "{err}");
}

/// 1, 2, [3], [4], 5 (linking to 4, sealed through 4): both 3 and 4 were
/// acknowledged and are gone. Quarantine names both (4 from 5's link, 3
/// from 4's as bridged) and replays 5.
#[test]
fn two_adjacent_lost_objects_are_both_named_and_the_run_replays() {
    let (intact, present) = listing(vec![
        recovered(1, 1, Some((0, 1)), None, 1),
        recovered(2, 1, Some((1, 1)), Some(1), 1),
        recovered(5, 1, Some((4, 1)), Some(4), 1),
    ]);
    let damaged = search(&intact, &present, DamagePolicy::Quarantine).unwrap();
    assert_eq!(damaged.keys().copied().collect::<Vec<_>>(), vec![3, 4]);
    let (_, selection, _) = assemble(&intact, &damaged, 0, key).unwrap();
    assert_eq!(selection.chain, vec![1, 2, 3, 4, 5]);
}

/// B: 10, F11, F12, 13 (→12), 14, F15, [16], F17, 18 (→17). 16 is lost:
/// named at 16, the key between the fillers, whatever boundary.
#[test]
fn a_lost_object_between_two_filler_runs_is_named_at_its_own_key() {
    let objects = map(&[
        obj(10, B, None, 1),
        start_filler(11, 2),
        start_filler(12, 3),
        obj(13, B, Some((12, B)), 1),
        obj(14, B, Some((13, B)), 1),
        start_filler(15, 4),
        start_filler(17, 2),
        obj(18, B, Some((17, B)), 16),
    ]);
    assert_eq!(predecessor(&objects, &objects[&18]), Some(Err(16)));
    assert_eq!(predecessor(&objects, &objects[&13]), Some(Ok(10)));
    assert_eq!(tip_of(&objects), Some(14));
}

/// A link to a filler that is itself missing (deleted by hand): broken at
/// the filler's key (nothing tells a filler from the run's object there).
#[test]
fn a_link_to_a_missing_filler_is_broken_at_that_key() {
    let objects = map(&[
        obj(10, B, None, 1),
        start_filler(11, 2),
        obj(13, B, Some((12, B)), 1),
    ]);
    assert_eq!(predecessor(&objects, &objects[&13]), Some(Err(12)));
    assert_eq!(tip_of(&objects), Some(10));
}

/// A filler deleted by hand below another filler: the run's next key 11
/// holds nothing; broken there (conservative: no object is accepted).
#[test]
fn a_missing_filler_below_a_filler_breaks_at_the_missing_key() {
    let objects = map(&[
        obj(10, B, None, 1),
        start_filler(12, 3),
        obj(13, B, Some((12, B)), 1),
    ]);
    assert_eq!(predecessor(&objects, &objects[&13]), Some(Err(11)));
}

// =====================================================================
// jumps, fillers on top / below the boundary, epochs (expected to pass)
// =====================================================================

#[test]
fn several_runs_of_fillers_with_every_object_present_form_one_chain() {
    let objects = map(&[
        obj(1, 1, None, 1),
        obj(2, 1, Some((1, 1)), 1),
        obj(10, B, Some((2, 1)), 1),
        start_filler(11, 2),
        obj(12, B, Some((11, B)), 1),
        start_filler(13, 3),
        start_filler(14, 4),
        obj(15, B, Some((14, B)), 1),
        start_filler(16, 2),
        start_filler(17, 3),
        start_filler(18, 4),
        obj(19, B, Some((18, B)), 1),
    ]);
    let s = select(&objects).unwrap();
    assert_eq!(s.tip.unwrap().sequence, 19);
    assert_eq!(s.chain, vec![1, 2, 10, 12, 15, 19]);
    assert_eq!(s.orphans, vec![11, 13, 14, 16, 17, 18]);
}

#[test]
fn a_jump_landing_inside_a_filler_run_continues_the_chain() {
    // 11 jumps to 14; fillers at 13 (inside the jump) and 14, 15 (on the
    // run); 16 links to 15.
    let objects = map(&[
        obj(10, B, None, 1),
        with_next(obj(11, B, Some((10, B)), 1), 14),
        start_filler(13, 2),
        start_filler(14, 3),
        start_filler(15, 4),
        obj(16, B, Some((15, B)), 1),
    ]);
    assert_eq!(predecessor(&objects, &objects[&16]), Some(Ok(11)));
    assert_eq!(select(&objects).unwrap().chain, vec![10, 11, 16]);
}

#[test]
fn a_jump_onto_a_lost_object_between_fillers_is_broken_at_the_jump_target() {
    // 11 jumps to 13, which is lost; fillers at 12 (inside the jump), 14.
    let objects = map(&[
        obj(10, B, None, 1),
        with_next(obj(11, B, Some((10, B)), 1), 13),
        start_filler(12, 2),
        start_filler(14, 3),
        obj(15, B, Some((14, B)), 13),
    ]);
    assert_eq!(predecessor(&objects, &objects[&15]), Some(Err(13)));
    assert_eq!(tip_of(&objects), Some(11));
}

#[test]
fn a_jump_past_the_filler_a_link_names_breaks_there() {
    // 11's next key is 17, yet 16 links to the filler at 15.
    let objects = map(&[
        obj(10, B, None, 1),
        with_next(obj(11, B, Some((10, B)), 1), 17),
        start_filler(15, 2),
        obj(16, B, Some((15, B)), 1),
    ]);
    assert_eq!(predecessor(&objects, &objects[&16]), Some(Err(15)));
    assert_eq!(tip_of(&objects), Some(11));
}

#[test]
fn fillers_below_the_reclaim_boundary_keep_the_chain_complete() {
    // 10 and 12 collected (boundary 13); fillers at 11, 12 kept.
    let objects = map(&[
        start_filler(11, 2),
        start_filler(12, 3),
        obj(13, B, Some((12, B)), 13),
        obj(14, B, Some((13, B)), 13),
    ]);
    let s = select(&objects).unwrap();
    assert_eq!(s.tip.unwrap().sequence, 14);
    assert_eq!(s.chain, vec![13, 14]);
}

#[test]
fn fillers_at_the_very_top_never_hide_the_newer_run() {
    let objects = map(&[
        obj(1, 1, None, 1),
        obj(2, 1, Some((1, 1)), 1),
        obj(10, B, Some((2, 1)), 1),
        obj(11, B, Some((10, B)), 1),
        start_filler(12, 2),
        start_filler(13, 4),
    ]);
    let s = select(&objects).unwrap();
    assert_eq!(s.tip.unwrap().sequence, 11);
    assert_eq!(s.chain, vec![1, 2, 10, 11]);
    // A newer failed opener's start object on top (epoch 6, links to 11):
    // the tip, and B's run stays on its chain.
    let mut objects = objects;
    objects.insert(
        80,
        ObjectSummary {
            empty: true,
            ..obj(80, 6, Some((11, B)), 1)
        },
    );
    let s = select(&objects).unwrap();
    assert_eq!(s.tip.unwrap().sequence, 80);
    assert_eq!(s.chain, vec![1, 2, 10, 11, 80]);
}

#[test]
fn a_broken_newer_run_above_a_complete_filler_is_named_above_the_tip() {
    // B's 10 is lost (no boundary excuses it); the filler of epoch 4 at 11
    // is complete (links to A's 2) and becomes the tip; B's 12 is above it.
    let objects = map(&[
        obj(1, 1, None, 1),
        obj(2, 1, Some((1, 1)), 1),
        start_filler(11, 4),
        obj(12, B, Some((11, B)), 1),
    ]);
    let s = select(&objects).unwrap();
    assert_eq!(s.tip.unwrap().sequence, 11);
    assert_eq!(above_tip(&s), vec![12]);
}

#[test]
fn a_link_to_an_empty_object_of_the_link_epoch_is_followed_directly() {
    // 11 is B's own empty object (a void): on the chain, not a filler.
    let objects = map(&[
        obj(10, B, None, 1),
        ObjectSummary {
            empty: true,
            ..obj(11, B, Some((10, B)), 1)
        },
        obj(12, B, Some((11, B)), 1),
    ]);
    assert_eq!(predecessor(&objects, &objects[&12]), Some(Ok(11)));
    assert_eq!(select(&objects).unwrap().chain, vec![10, 11, 12]);
}

#[test]
fn a_link_to_a_newer_epochs_empty_object_or_a_settle_marker_breaks() {
    let marker = ObjectSummary {
        empty: false,
        ..obj(11, 4, Some((10, 0)), 0)
    };
    for at_11 in [
        ObjectSummary {
            empty: true,
            ..obj(11, 6, None, 1)
        },
        marker,
    ] {
        let objects = map(&[obj(10, B, None, 1), at_11, obj(12, B, Some((11, B)), 1)]);
        assert_eq!(predecessor(&objects, &objects[&12]), Some(Err(11)));
        assert_ne!(tip_of(&objects), Some(12));
    }
}

#[test]
fn a_link_to_sequence_zero_is_complete_only_by_a_boundary() {
    let first = obj(1, 1, Some((0, 1)), 1);
    assert_eq!(tip_of(&map(&[first])), Some(1));
    let unexcused = obj(1, 1, Some((0, 1)), 0);
    assert!(select(&map(&[unexcused])).is_err());
    // A filler at 0 (never a real key): no panic, nothing below.
    let objects = map(&[filler(0, 1), obj(1, 2, Some((0, 2)), 1)]);
    assert_eq!(predecessor(&objects, &objects[&1]), Some(Err(0)));
}

#[test]
fn sequences_at_u64_max_neither_panic_nor_overflow() {
    let m = u64::MAX;
    let top = |s: u64, e: u64, link: Option<(u64, u64)>| ObjectSummary {
        next_key: s.saturating_add(1),
        ..ObjectSummary {
            sequence: s,
            epoch: e,
            link: link.map(|(sequence, epoch)| Link { sequence, epoch }),
            reclaim_boundary: 1,
            next_key: 0,
            empty: false,
        }
    };
    let objects = map(&[
        top(m - 2, B, None),
        ObjectSummary {
            empty: true,
            ..top(m - 1, 2, None)
        },
        top(m, B, Some((m - 1, B))),
    ]);
    let s = select(&objects).unwrap();
    assert_eq!(s.chain, vec![m - 2, m]);
    // A jump to the very end, a link at or above itself.
    let objects = map(&[
        with_next(obj(5, B, None, 1), m),
        ObjectSummary {
            empty: true,
            ..top(m - 1, 2, None)
        },
        top(m, B, Some((m - 1, B))),
    ]);
    assert_eq!(predecessor(&objects, &objects[&m]), Some(Err(m - 1)));
    let selfish = top(m, B, Some((m, B)));
    assert_eq!(predecessor(&map(&[selfish]), &selfish), Some(Err(m)));
}

#[test]
fn a_hundred_thousand_fillers_between_two_objects_are_stepped_over() {
    let n = 100_000u64;
    let mut objects: Vec<ObjectSummary> = vec![obj(1, 1, None, 1), obj(2, 1, Some((1, 1)), 1)];
    objects.push(obj(10, B, Some((2, 1)), 1));
    for k in 11..11 + n {
        objects.push(start_filler(k, 2 + k % 3));
    }
    objects.push(obj(11 + n, B, Some((10 + n, B)), 1));
    let objects = map(&objects);
    let s = select(&objects).unwrap();
    assert_eq!(s.chain, vec![1, 2, 10, 11 + n]);
}

// =====================================================================
// (c) many linkers over one filler run
// =====================================================================

/// `n` fillers at 1..=n, then `n` objects of distinct epochs (n+1+i has
/// epoch i+2), each linking to the top filler as its own run's
/// predecessor: every link is followed down through all `n` fillers and
/// finds nothing of its run. Selection costs objects times the length of
/// the filler run each link goes into (a decision of rfcs/0006, "Chain
/// selection's cost": a filler run is as long as the opens that raced one
/// writer, a few keys); this checks the answer, not the time.
fn linkers_over_a_filler_run(n: u64) -> BTreeMap<u64, ObjectSummary> {
    let mut objects = Vec::new();
    for k in 1..=n {
        objects.push(filler(k, 1));
    }
    for i in 0..n {
        let epoch = i + 2;
        objects.push(obj(n + 1 + i, epoch, Some((n, epoch)), 1));
    }
    map(&objects)
}

#[test]
fn many_linkers_over_one_long_filler_run_are_all_broken_below_it() {
    let n = 2_000;
    let objects = linkers_over_a_filler_run(n);
    for i in 0..n {
        let linker = &objects[&(n + 1 + i)];
        // Nothing of the linker's run below the fillers: broken right below
        // them, at key 0.
        assert_eq!(predecessor(&objects, linker), Some(Err(0)));
    }
    // Each linker is complete by its boundary (0 < 1): the newest epoch's
    // is the tip, and its chain is itself.
    let s = select(&objects).unwrap();
    assert_eq!(s.tip.map(|t| t.sequence), Some(2 * n));
    assert_eq!(s.chain, vec![2 * n]);
}
