//! Tests that the catalog's invariant checks refuse what they promise to
//! refuse: each condition of `check_insert` on its own, and a catalog whose
//! derived indexes disagree with its objects (built by reaching into its
//! fields, which only a corrupting bug could do).

use super::tests::{object, segment};
use super::*;

/// A catalog of objects 1 and 2 holding regions 1 and 2.
fn two_objects() -> Catalog {
    let mut c = Catalog::new();
    c.insert(object(1, &[1, 2])).unwrap();
    c.insert(object(2, &[1])).unwrap();
    c.check_invariants().unwrap();
    c
}

#[test]
fn check_invariants_finds_a_region_index_that_disagrees_with_the_objects() {
    let mut c = two_objects();
    c.regions.get_mut(&1).unwrap().seqs = live::Seqs::One(1);
    assert!(c.check_invariants().is_err());

    let mut c = two_objects();
    c.regions.entry(9).or_default().seqs.push(2);
    assert!(c.check_invariants().is_err());
}

#[test]
fn check_invariants_finds_a_live_index_that_disagrees_with_the_segments() {
    // A first live object that is not the region's.
    let mut c = two_objects();
    c.regions.get_mut(&1).unwrap().first_live = 2;
    assert!(c.check_invariants().is_err());

    // The index missing a live region.
    let mut c = two_objects();
    c.firsts.remove(&(1, 2));
    let err = c.check_invariants().unwrap_err();
    assert!(err.reason.contains("disagrees"), "{err}");

    // A watermark set behind the index's back.
    let mut c = two_objects();
    c.regions.get_mut(&1).unwrap().watermark = format::entry_id(2, 2);
    assert!(c.check_invariants().is_err());
}

#[test]
fn check_invariants_finds_wrong_byte_counts_and_release_marks() {
    let mut c = two_objects();
    c.bytes += 1;
    let err = c.check_invariants().unwrap_err();
    assert_eq!(err.sequence, 2, "names the newest object");
    assert!(err.reason.contains("disagrees"), "{err}");

    let mut c = two_objects();
    c.released.learn(5, 1, 2);
    assert!(c.check_invariants().is_err());
}

#[test]
fn check_invariants_finds_an_object_that_breaks_an_insertion_rule() {
    let mut c = two_objects();
    let mut bad = object(3, &[1]);
    bad.segments[0] = segment(1, 2, 1); // ids of sequence 2 in object 3 (C3)
    c.objects.push_back(bad);
    let err = c.check_invariants().unwrap_err();
    assert_eq!(err.sequence, 3);
    assert!(err.reason.contains("C3"), "{err}");
}

/// Inserts into a fresh catalog holding object 1 (region 1) and returns the
/// refusal's reason.
fn refusal(bad: IndexedObject) -> String {
    let mut c = Catalog::new();
    c.insert(object(1, &[1])).unwrap();
    let before = c.len();
    let reason = c.insert(bad).unwrap_err().reason;
    assert_eq!(c.len(), before, "a refused object is not indexed");
    c.check_invariants().unwrap();
    reason
}

#[test]
fn check_insert_refuses_each_bad_id_on_its_own() {
    let good = segment(1, 5, 3);
    let cases = [
        // Only the first id is of another sequence.
        SegmentIndex {
            first_id: format::entry_id(4, 1),
            ..good
        },
        // Only the last id is of another sequence.
        SegmentIndex {
            last_id: format::entry_id(6, 1),
            ..good
        },
        // Both of the object's sequence, but first above last.
        SegmentIndex {
            first_id: format::entry_id(5, 3),
            last_id: format::entry_id(5, 2),
            ..good
        },
        // Position 0 is no entry.
        SegmentIndex {
            first_id: format::entry_id(5, 0),
            ..good
        },
    ];
    for bad in cases {
        let mut o = object(5, &[]);
        o.segments = vec![bad];
        let reason = refusal(o);
        assert!(reason.contains("C3"), "{bad:?}: {reason}");
    }
    // The good segment, and a single entry (first id == last id), go in.
    for segment in [good, segment(1, 5, 1)] {
        let mut o = object(5, &[]);
        o.segments = vec![segment];
        Catalog::new().insert(o).unwrap();
    }
}

#[test]
fn check_insert_refuses_a_region_twice_and_the_reserved_regions() {
    assert!(refusal(object(5, &[2, 2])).contains("C2"));
    assert!(refusal(object(5, &[3, 2])).contains("C2"));
    let reason = refusal(object(5, &[2, crate::format::RELEASE_REGION]));
    assert!(reason.contains("reserved region"), "{reason}");
    let reason = refusal(object(5, &[2, crate::format::MARKS_REGION]));
    assert!(reason.contains("reserved region"), "{reason}");
}
