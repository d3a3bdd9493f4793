//! Tests of the catalog's queries at their edges: sizes of an empty and a
//! filled catalog, lookups of present and absent objects, and where the
//! first live object is when a watermark sits exactly on a segment's end.

use super::tests::object;
use super::*;

#[test]
fn sizes_and_lookups_of_an_empty_and_a_filled_catalog() {
    let mut c = Catalog::new();
    assert!(c.is_empty());
    assert_eq!(c.len(), 0);
    assert_eq!(c.object(1), None);
    assert_eq!(c.tip(), None);
    c.insert(object(1, &[1])).unwrap();
    c.insert(object(4, &[2])).unwrap();
    assert!(!c.is_empty());
    assert_eq!(c.len(), 2);
    assert_eq!(c.object(4).map(|o| o.segments[0].region), Some(2));
    assert_eq!(c.object(2), None);
    assert_eq!(c.tip().map(|o| o.sequence), Some(4));
    assert_eq!(c.objects().map(|o| o.sequence).collect::<Vec<_>>(), [1, 4]);
}

#[test]
fn a_segment_ending_at_its_regions_watermark_is_not_live() {
    let mut c = Catalog::new();
    c.insert(object(1, &[1])).unwrap();
    c.insert(object(2, &[1])).unwrap();
    // `object` gives each segment two entries: positions 1 and 2.
    let end_of_first = format::entry_id(1, 2);
    assert_eq!(c.first_live_sequence(|_| 0), Some(1));
    assert_eq!(c.first_live_sequence(|_| end_of_first - 1), Some(1));
    assert_eq!(c.first_live_sequence(|_| end_of_first), Some(2));
    assert_eq!(c.first_live_sequence(|_| format::entry_id(2, 2)), None);
}

#[test]
fn a_release_record_makes_its_regions_segments_dead() {
    let mut c = Catalog::new();
    c.insert(object(1, &[1, 2])).unwrap();
    let mut release = object(2, &[]);
    release.releases = vec![ReleaseRecord {
        region: 1,
        released_through: format::entry_id(1, 2),
    }];
    c.insert(release).unwrap();
    assert_eq!(c.first_live_sequence(|_| 0), Some(1), "region 2 is live");
    assert_eq!(
        c.first_live_sequence(|r| if r == 2 { format::entry_id(1, 2) } else { 0 }),
        None,
        "region 1 is released, region 2 flushed"
    );
}
