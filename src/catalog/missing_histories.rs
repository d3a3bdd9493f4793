//! Histories of missing objects among fillers, jumps, crash gaps, settle
//! markers and damaged objects, from an attack on missing-object recovery
//! (issue 32; rfcs/0003 "2. A missing object", rfcs/0006 rule 8 and "What
//! the fillers version got wrong"). Each test names a history and asserts
//! what the RFCs say must happen.
//!
//! Numbering: writer A (epoch 1) holds 1 and 2 (2 sealed through 1); failed
//! openers leave fillers (empty start objects linking to A's tip 2).

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::chain::Selection;
use crate::config::DamagePolicy;
use crate::error::Error;
use crate::wal::open::quarantine::Damaged;
use crate::wal::open::tail::RecoveredObject;

use super::chain_histories::{
    absent, headerless, key, quarantined, recover_damage, recovered, search, writer_a as a,
};

/// An older epoch's failed opener's start object (a filler), linked to 2.
fn filler_at(sequence: u64, epoch: u64) -> RecoveredObject {
    recovered(sequence, epoch, Some((2, 1)), None, 1)
}

/// A settle marker (empty, link epoch 0) of an opener's walk.
fn marker(sequence: u64, epoch: u64, after: u64) -> RecoveredObject {
    recovered(sequence, epoch, Some((after, 0)), None, 1)
}

/// A recovery: the absent (missing) sequences named, and the selection.
fn recover(
    objects: Vec<RecoveredObject>,
    damaged: Vec<(u64, Damaged)>,
    policy: DamagePolicy,
) -> Result<(Vec<u64>, Selection), Error> {
    let (selection, damage) = recover_damage(objects, damaged, policy)?;
    Ok((absent(&damage), selection))
}

/// Each missing object named, with the last sequence its holes cover.
fn last_sequences(objects: Vec<RecoveredObject>, damaged: Vec<(u64, Damaged)>) -> Vec<(u64, u64)> {
    let (_, damage) = recover_damage(objects, damaged, DamagePolicy::Quarantine)
        .expect("a quarantine open succeeds");
    damage
        .damaged
        .iter()
        .filter(|d| d.absent)
        .map(|d| (d.sequence, d.last_sequence))
        .collect()
}

fn quarantine(
    objects: Vec<RecoveredObject>,
    damaged: Vec<(u64, Damaged)>,
) -> (Vec<u64>, Selection) {
    recover(objects, damaged, DamagePolicy::Quarantine).expect("a quarantine open succeeds")
}

// =====================================================================
// A crash gap hides a lost object
// =====================================================================

/// A: 1, 2, [3], [4], 5 -> 4, 5 sealed through 3. 3 was acknowledged (5
/// says its writer had acknowledged through 3) and is gone; 4 was in flight
/// at a crash (nothing says it was acknowledged). rfcs/0003: an object of
/// the gap's writer that says it had acknowledged through the gap proves
/// the gap's object was acknowledged, and "the evidence of the objects
/// above carries down": under "fail" every open fails naming 3.
#[test]
fn a_crash_gap_above_a_lost_acknowledged_object_does_not_hide_it_from_a_default_open() {
    let mut objects = a();
    objects.push(recovered(5, 1, Some((4, 1)), Some(3), 1));
    match recover(objects, Vec::new(), DamagePolicy::Fail) {
        Err(e) => assert!(e.to_string().contains(&key(3)), "{e}"),
        Ok((absent, s)) => panic!(
            "3 is acknowledged (5 sealed through 3) and gone, yet the default open succeeds: \
             named {absent:?}, tip {:?}, chain {:?}",
            s.tip.map(|t| t.sequence),
            s.chain
        ),
    }
}

/// Control: a crash in flight above a lost object. A: 1, 2, [3], 4 -> 3
/// sealed through 3, [5 in flight], 6 -> 5 sealed through 4. 3 is named
/// (fail names it; quarantine keeps it on the chain with 4); 5 is what a
/// crash leaves: not named, and 6 does not replay.
#[test]
fn a_crash_in_flight_above_a_lost_object_names_only_the_lost_one() {
    let build = || {
        let mut objects = a();
        objects.push(recovered(4, 1, Some((3, 1)), Some(3), 1));
        objects.push(recovered(6, 1, Some((5, 1)), Some(4), 1));
        objects
    };
    let err = recover(build(), Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(3)), "{err}");
    let (absent, s) = quarantine(build(), Vec::new());
    assert_eq!(absent, vec![3]);
    assert_eq!(s.chain, vec![1, 2, 3, 4]);
}

// =====================================================================
// A lost start object: the bridge links it over a filler or to a marker
// =====================================================================

/// A: 1, 2. Opener X (epoch 4) settled a marker at 3 (epoch capped at 3)
/// and its start object landed at 67 after B listed (a filler). B (epoch 5)
/// passed over 67 and started at 68 linking to A's tip 2; 69 -> 68 sealed
/// through 68. 68 is lost. rfcs/0006 rule 6: a start object links to the
/// last object the walk adopted, "never to a filler". rfcs/0003: 68 is
/// named, the only missing object, and under quarantine 69 replays.
#[test]
fn a_lost_start_object_above_a_filler_is_named_alone_and_the_run_replays() {
    let mut objects = a();
    objects.push(marker(3, 3, 2));
    objects.push(filler_at(67, 4));
    objects.push(recovered(69, 5, Some((68, 5)), Some(68), 1));
    let (absent, s) = quarantine(objects, Vec::new());
    assert!(
        s.chain.contains(&69),
        "69 (acknowledged) left out: named {absent:?}, tip {:?}, chain {:?}",
        s.tip.map(|t| t.sequence),
        s.chain
    );
    assert_eq!(
        absent,
        vec![68],
        "keys that never held an object named missing"
    );
}

/// A: 1, 2. B (epoch 3) walked from 2 and settled its marker at 3 (its own
/// epoch, 3 <= 3), then started at 67 linking to 2; 68 -> 67 sealed through
/// 67. 67 is lost. rfcs/0003: 67 is named, alone, and under quarantine 68
/// replays (nothing of B's run lies below 67: keys 4..=66 never held
/// anything).
#[test]
fn a_lost_start_object_above_its_own_walks_marker_is_named_alone_and_replays() {
    let mut objects = a();
    objects.push(marker(3, 3, 2));
    objects.push(recovered(68, 3, Some((67, 3)), Some(67), 1));
    let (absent, s) = quarantine(objects, Vec::new());
    assert!(
        absent.len() <= 1,
        "{} keys named missing for one lost object: {:?}..",
        absent.len(),
        &absent[..absent.len().min(5)]
    );
    assert_eq!(absent, vec![67]);
    assert!(s.chain.contains(&68), "chain {:?}", s.chain);
}

/// As above with B of epoch 5 (its marker's epoch capped at 3): the bridge
/// takes "the nearest of an older epoch", the marker, for the tip 67 linked
/// to. rfcs/0003: under quarantine 68 replays.
#[test]
fn a_lost_start_object_above_an_older_epochs_marker_replays() {
    let mut objects = a();
    objects.push(marker(3, 3, 2));
    objects.push(recovered(68, 5, Some((67, 5)), Some(67), 1));
    let (absent, s) = quarantine(objects, Vec::new());
    assert_eq!(absent, vec![67]);
    assert!(
        s.chain.contains(&68),
        "68 left out: tip {:?}, chain {:?}",
        s.tip.map(|t| t.sequence),
        s.chain
    );
}

/// A damaged (headerless) start object right above a filler: A: 1, 2, X's
/// filler 67 (epoch 4), B's start 68 (epoch 5, a junk tail), 69 -> 68.
/// Before this change quarantine bridged 68 to the nearest older object and
/// replayed 69; rfcs/0003 "3.": a damaged object stays a link of the chain
/// and the objects above it replay.
#[test]
fn a_damaged_start_object_above_a_filler_still_replays_the_run() {
    let mut objects = a();
    objects.push(filler_at(67, 4));
    objects.push(recovered(69, 5, Some((68, 5)), Some(68), 1));
    let (absent, s) = quarantine(objects, vec![(68, headerless(68))]);
    assert!(
        s.chain.contains(&69),
        "69 left out: named missing {absent:?}, tip {:?}, chain {:?}",
        s.tip.map(|t| t.sequence),
        s.chain
    );
}

// =====================================================================
// A lost object with a jump: the walk goes down key by key
// =====================================================================

/// B (epoch 5): 10 -> 2, [11 lost, its jump to 14: next key 15], X's filler
/// at 15, 16 -> 15 sealed through 15. 10 is present and its next key is 11:
/// the lost object stood at 11. rfcs/0003: every missing object is named,
/// and keys inside its jump never held an object; quarantine names 11 only
/// and replays 16.
#[test]
fn a_lost_object_with_a_jump_onto_a_filler_is_named_at_its_own_key_under_quarantine() {
    let mut objects = a();
    objects.push(recovered(10, 5, Some((2, 1)), None, 1));
    objects.push(filler_at(15, 4));
    objects.push(recovered(16, 5, Some((15, 5)), Some(15), 1));
    let (absent, s) = quarantine(objects, Vec::new());
    assert_eq!(absent, vec![11], "keys inside 11's jump named missing");
    assert!(s.chain.contains(&16), "chain {:?}", s.chain);
}

/// The same history under "fail": the open fails naming the lost object,
/// 11 (the key after 10), not a key inside its jump.
#[test]
fn a_lost_object_with_a_jump_onto_a_filler_is_named_at_its_own_key_by_a_default_open() {
    let mut objects = a();
    objects.push(recovered(10, 5, Some((2, 1)), None, 1));
    objects.push(filler_at(15, 4));
    objects.push(recovered(16, 5, Some((15, 5)), Some(15), 1));
    let err = recover(objects, Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(11)), "{err}");
}

/// A long jump (an import, rfcs/0009): 10, [11 lost, jump to 1010], filler
/// at 1011, 1012 -> 1011 sealed through 1011. The fixpoint must not walk
/// the jump key by key (one round and one phantom missing object per key:
/// a jump of 2^40 keys never finishes): one object is lost, one is named.
#[test]
fn a_long_jump_over_a_lost_object_names_one_object_not_every_key_of_the_jump() {
    let n = 1_000;
    let mut objects = a();
    objects.push(recovered(10, 5, Some((2, 1)), None, 1));
    objects.push(filler_at(11 + n, 4));
    objects.push(recovered(12 + n, 5, Some((11 + n, 5)), Some(11 + n), 1));
    let (absent, _) = quarantine(objects.clone(), Vec::new());
    assert_eq!(last_sequences(objects, Vec::new()), vec![(11, 10 + n)]);
    assert_eq!(
        absent.len(),
        1,
        "{} missing objects named for one lost object ({:?}..{:?})",
        absent.len(),
        absent.first(),
        absent.last()
    );
}

// =====================================================================
// A damaged object hides a lost one below it
// =====================================================================

/// A: 1, 2, [3 lost], 4 (damaged, moved under quarantine/ by `objwal repair`:
/// its header says it links to 3), 5 -> 4 sealed through 4. rfcs/0003: the
/// default open proceeds with a quarantined copy, and "a gap with such
/// evidence" (5 acknowledged through 4 >= 3) is a missing object: every
/// open fails naming 3.
#[test]
fn a_quarantined_object_does_not_hide_a_lost_object_below_it_from_a_default_open() {
    let mut objects = a();
    objects.push(recovered(5, 1, Some((4, 1)), Some(4), 1));
    let moved = Damaged {
        records: None,
        ..quarantined(4, 1, (3, 1), None)
    };
    match recover(objects, vec![(4, moved)], DamagePolicy::Fail) {
        Err(e) => assert!(e.to_string().contains(&key(3)), "{e}"),
        Ok((absent, s)) => panic!(
            "3 is acknowledged and gone, yet the default open succeeds: named {absent:?}, \
             tip {:?}, chain {:?}",
            s.tip.map(|t| t.sequence),
            s.chain
        ),
    }
}

/// A: 1, 2, [3 lost], 4 (damaged, headerless), [5 lost], 6 -> 5 sealed
/// through 5. rfcs/0003: one missing object cannot hide another; 3 and 5
/// are both acknowledged (6 sealed through 5) and gone: both are named
/// (the chain must not be accepted across 3 with nothing named).
#[test]
fn a_headerless_damaged_object_does_not_hide_a_lost_object_below_it() {
    let mut objects = a();
    objects.push(recovered(6, 1, Some((5, 1)), Some(5), 1));
    let (absent, s) = quarantine(objects, vec![(4, headerless(4))]);
    assert_eq!(absent, vec![3, 5], "chain {:?}", s.chain);
}

/// B (epoch 5): 10 -> 2, [11 lost], X's filler at 12, 13 (damaged,
/// headerless; linked to 12), 14 -> 13 sealed through 13. 11 was
/// acknowledged and is gone: rfcs/0003, it is named, and under quarantine
/// 14 replays.
#[test]
fn a_damaged_object_over_a_filler_with_a_lost_object_below_names_it_and_replays() {
    let mut objects = a();
    objects.push(recovered(10, 5, Some((2, 1)), None, 1));
    objects.push(filler_at(12, 4));
    objects.push(recovered(14, 5, Some((13, 5)), Some(13), 1));
    let (absent, s) = quarantine(objects, vec![(13, headerless(13))]);
    assert_eq!(absent, vec![11], "chain {:?}", s.chain);
    assert!(s.chain.contains(&14), "chain {:?}", s.chain);
}

// =====================================================================
// Histories expected to hold
// =====================================================================

/// B (epoch 5): 10 -> 2 with a jump to 11 (next key 12), filler 12, [13 ->
/// 12 lost], [14 -> 13 lost], filler 15, [16 -> 15 lost], 17 -> 16 sealed
/// through 16. Three lost objects among fillers and a jump: 13 and 14 lie
/// between 10's next key and the fillers 16 links into, and nothing left
/// says whether one object with a jump or two stood there (rfcs/0003, "A
/// break over several keys"): one missing object is named at 13, the key
/// the run certainly used, its holes covering 14 too; 16 is named; the run
/// replays through them.
#[test]
fn three_lost_objects_among_fillers_and_a_jump_are_all_named_and_replay() {
    let mut objects = a();
    objects.push(recovered(10, 5, Some((2, 1)), Some(11), 1));
    objects.push(filler_at(12, 2));
    objects.push(filler_at(15, 3));
    objects.push(recovered(17, 5, Some((16, 5)), Some(16), 1));
    let (absent, s) = quarantine(objects.clone(), Vec::new());
    assert_eq!(absent, vec![13, 16]);
    assert_eq!(s.chain, vec![1, 2, 10, 13, 16, 17]);
    let last = last_sequences(objects, Vec::new());
    assert_eq!(last, vec![(13, 14), (16, 16)], "the holes cover every key");
}

/// B: 10, filler 11, [12 in flight at a crash], filler 13, 14 -> 13 sealed
/// through 11. A crash leaves this: the default open succeeds, names
/// nothing, and its tip is 10.
#[test]
fn a_crash_between_fillers_opens_under_the_default_policy() {
    let mut objects = a();
    objects.push(recovered(10, 5, Some((2, 1)), None, 1));
    objects.push(filler_at(11, 2));
    objects.push(filler_at(13, 3));
    objects.push(recovered(14, 5, Some((13, 5)), Some(11), 1));
    let (absent, s) = recover(objects, Vec::new(), DamagePolicy::Fail).unwrap();
    assert!(absent.is_empty());
    assert_eq!(s.tip.map(|t| t.sequence), Some(10));
}

/// B: 10, [11], F12, [13], F14, [15], F16, 17 -> 16 sealed through 16.
/// Boundary 13: 11 collected, 13 and 15 lost, both named, chain [13, 15,
/// 17]. Boundary 14: 11 and 13 collected, 15 named, chain [15, 17].
#[test]
fn holes_on_both_sides_of_a_boundary_are_collected_or_named() {
    let build = |boundary: u64| {
        let mut objects = a();
        objects.push(recovered(10, 5, Some((2, 1)), None, 1));
        objects.push(filler_at(12, 2));
        objects.push(filler_at(14, 3));
        objects.push(filler_at(16, 4));
        objects.push(recovered(17, 5, Some((16, 5)), Some(16), boundary));
        objects
    };
    let (absent, s) = quarantine(build(13), Vec::new());
    assert_eq!(absent, vec![13, 15]);
    assert_eq!(s.chain, vec![13, 15, 17]);
    let (absent, s) = quarantine(build(14), Vec::new());
    assert_eq!(absent, vec![15]);
    assert_eq!(s.chain, vec![15, 17]);
    let err = recover(build(14), Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(15)), "{err}");
}

/// Across epochs: W (epoch 3): 10 -> 2, F11 (epoch 2), [12 -> 11 lost], F13
/// (epoch 2), [14 -> 13 lost]; B (epoch 4) walked W's run to 14, settled a
/// marker at 15 and started at 79 linking to 14. A newer process's chain
/// through both: both named, and B's start object replays.
#[test]
fn a_newer_start_object_over_two_lost_objects_between_fillers_names_both() {
    let mut objects = a();
    objects.push(recovered(10, 3, Some((2, 1)), None, 1));
    objects.push(filler_at(11, 2));
    objects.push(filler_at(13, 2));
    objects.push(marker(15, 4, 14));
    objects.push(recovered(79, 4, Some((14, 3)), None, 1));
    let (absent, s) = quarantine(objects, Vec::new());
    assert_eq!(absent, vec![12, 14]);
    assert_eq!(s.chain, vec![1, 2, 10, 12, 14, 79]);
}

/// A junk file at the last object key (u64::MAX), its header unknown, under
/// quarantine: recovery neither panics nor loses A's chain.
#[test]
fn a_headerless_damaged_object_at_the_last_key_does_not_panic() {
    let m = u64::MAX;
    let (_, s) = quarantine(a(), vec![(m, headerless(m))]);
    assert_eq!(s.chain, vec![1, 2]);
}

/// Nothing listed below a lost object: B's 1000 -> 999 sealed through 999,
/// and everything below 999 is gone. The search names 999 and stops there
/// (a stand-in linking to a key below which nothing is listed leads
/// nowhere; walking down key by key would take a round per key).
#[test]
fn a_lost_object_with_nothing_listed_below_it_is_named_once_not_walked_down() {
    let m = 1_000_000;
    let objects = vec![recovered(m, 5, Some((m - 1, 5)), Some(m - 1), 1)];
    let intact: BTreeMap<u64, RecoveredObject> = objects.iter().map(|o| (m, o.clone())).collect();
    let known: BTreeSet<u64> = intact.keys().copied().collect();
    let named = search(&intact, &known, DamagePolicy::Quarantine).unwrap();
    assert_eq!(named.keys().copied().collect::<Vec<_>>(), vec![m - 1]);
    // No chain is complete (nothing says the keys below were collected).
    let err = recover(objects.clone(), Vec::new(), DamagePolicy::Quarantine).unwrap_err();
    assert!(err.to_string().contains("no complete chain"), "{err}");
    let err = recover(objects, Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(m - 1)), "{err}");
}

/// A lost start object above an older process's dead object (model seed
/// 1778448037786178824): B (epoch 2) holds 10 -> 2 and 11 -> 10; a dead
/// start object of epoch 1 stands at B's next key 12 (a filler); C (epoch
/// 3) chose B's tip 11, started at 20 -> 11 and sealed 21 -> 20 through
/// 20. 20 is deleted. Its stand-in links where its opener did, to the tip
/// chain selection picks among the older epochs below it (11), not to the
/// nearest older object (12): that chain skipped B's 10 and 11, whose
/// acknowledged entries a quarantine open dropped unnamed.
#[test]
fn a_lost_start_object_links_to_its_openers_tip_not_to_a_dead_object_below_it() {
    let mut objects = a();
    objects.push(recovered(10, 2, Some((2, 1)), None, 1));
    objects.push(recovered(11, 2, Some((10, 2)), Some(10), 1));
    objects.push(filler_at(12, 1));
    objects.push(recovered(21, 3, Some((20, 3)), Some(20), 1));
    let (absent, s) = quarantine(objects.clone(), Vec::new());
    assert_eq!(absent, vec![20]);
    assert_eq!(s.chain, vec![1, 2, 10, 11, 20, 21]);
    let err = recover(objects, Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(20)), "{err}");
}

/// As above, with the run the opener chose partly collected since (model
/// seed 279227295717747): B (epoch 2) holds [10 collected], 11 -> 10 and
/// 12 -> 11, both carrying B's old boundary 1; a dead start object of
/// epoch 1 at B's next key 13; C (epoch 3) started at [20 -> 12, lost] and
/// sealed 21 -> 20 through 20 with boundary 11. B's break at 10 is excused
/// by the boundary C's chain carries, not by B's own: without that, no
/// older chain was complete, and the stand-in linked to the dead object.
#[test]
fn a_lost_start_object_links_to_its_openers_tip_when_that_run_was_collected_below() {
    let objects = vec![
        recovered(11, 2, Some((10, 2)), None, 1),
        recovered(12, 2, Some((11, 2)), None, 1),
        filler_at(13, 1),
        recovered(21, 3, Some((20, 3)), Some(20), 11),
    ];
    let (absent, s) = quarantine(objects.clone(), Vec::new());
    assert_eq!(absent, vec![20]);
    assert_eq!(s.chain, vec![11, 12, 20, 21]);
    let err = recover(objects, Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(20)), "{err}");
}

/// As above, where the linker's boundary is older than the collection and
/// a settle marker is complete (model seed 1778448037786178824, shrunk
/// again): B (epoch 2) settled A's next key 3 (a marker carrying boundary
/// 3), and holds [11 collected], 12 -> 11 and 13 -> 12 with boundary 11; C
/// (epoch 3) started at [20 -> 13, lost], sealed 21 -> 20 through 20 with
/// boundary 11, and 22 -> 21 with boundary 12 after collecting 11. The
/// highest boundary of C's run excuses B's break at 11, and a settle
/// marker is never a tip (rfcs/0006 K4): the stand-in links to 13.
#[test]
fn a_lost_start_object_links_to_its_openers_tip_not_to_a_settle_marker() {
    let objects = vec![
        recovered(3, 2, Some((2, 0)), None, 3),
        recovered(12, 2, Some((11, 2)), None, 11),
        recovered(13, 2, Some((12, 2)), None, 11),
        recovered(21, 3, Some((20, 3)), Some(20), 11),
        recovered(22, 3, Some((21, 3)), None, 12),
    ];
    let (absent, s) = quarantine(objects.clone(), Vec::new());
    assert_eq!(absent, vec![20]);
    assert_eq!(s.chain, vec![12, 13, 20, 21, 22]);
    let err = recover(objects, Vec::new(), DamagePolicy::Fail).unwrap_err();
    assert!(err.to_string().contains(&key(20)), "{err}");
}
