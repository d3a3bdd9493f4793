//! The live index against the full computation it replaces: random
//! histories of inserts (with release records and flush marks, monotone or
//! not), watermarks, collections and raised regions, checking after every
//! step that [`Catalog::first_live`] and [`Catalog::pinned_objects`] answer
//! what a scan of every region answers ([`Catalog::first_live_sequence`])
//! and that [`Catalog::check_invariants`] holds.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::segment;
use super::*;
use crate::format::{entry_id, MarkRecord, ReleaseRecord};

/// One step of a history.
#[derive(Debug, Clone)]
enum Step {
    /// An object `gap` sequences above the last, with segments of
    /// `(region, entries)`, release records and flush marks `(region,
    /// sequences back, position)`.
    Insert {
        gap: u64,
        segments: Vec<(RegionId, u32)>,
        releases: Vec<(RegionId, u64, u64)>,
        marks: Vec<(RegionId, u64, u64)>,
    },
    /// The owner raises `region`'s watermark to `(sequences back, position)`
    /// from the newest object.
    Watermark(RegionId, u64, u64),
    /// Collection below the `n`-th indexed object (clamped).
    Collect(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let region = 0u64..10;
    let record = (0u64..10, 0u64..4, 0u64..4);
    prop_oneof![
        4 => (
            1u64..3,
            proptest::collection::btree_map(region.clone(), 1u32..4, 0..5),
            proptest::collection::vec(record.clone(), 0..2),
            proptest::collection::vec(record, 0..3),
        )
            .prop_map(|(gap, segments, releases, marks)| Step::Insert {
                gap,
                segments: segments.into_iter().collect(),
                releases,
                marks,
            }),
        3 => (region, 0u64..5, 0u64..4).prop_map(|(r, back, pos)| Step::Watermark(r, back, pos)),
        1 => (0usize..6).prop_map(Step::Collect),
    ]
}

/// An id `back` sequences below `newest`, at `position`.
fn id_back(newest: u64, back: u64, position: u64) -> EntryId {
    entry_id(newest.saturating_sub(back), position)
}

/// The answers of the index and of the scan, with `raised` regions.
fn check(c: &Catalog, raised: &BTreeMap<RegionId, EntryId>) -> Result<(), TestCaseError> {
    let watermark = |r: RegionId| c.watermark(r).max(raised.get(&r).copied().unwrap_or(0));
    let full = c.first_live_sequence(watermark);
    prop_assert_eq!(c.first_live(raised), full, "raised {:?}", raised);
    let held = full.map_or(0, |first| {
        c.objects().filter(|o| o.sequence >= first).count() as u64
    });
    prop_assert_eq!(c.pinned_objects(raised), held);
    for region in 0..10 {
        let alone = c.first_live_sequence(|r| {
            if r == region {
                c.watermark(r)
            } else {
                u64::MAX
            }
        });
        prop_assert_eq!(c.first_live_of(region), alone, "region {}", region);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_live_index_equals_a_full_scan(
        steps in proptest::collection::vec(step(), 1..60),
        raises in proptest::collection::vec(proptest::collection::btree_map(0u64..10, (0u64..4, 0u64..4), 0..3), 60),
    ) {
        let mut c = Catalog::new();
        let mut next = 1u64;
        for (n, step) in steps.into_iter().enumerate() {
            let newest = next.saturating_sub(1);
            match step {
                Step::Insert { gap, segments, releases, marks } => {
                    let sequence = next + gap - 1;
                    let mut o = IndexedObject {
                        sequence,
                        epoch: 1,
                        link: None,
                        reclaim_boundary: 0,
                        size: 10 + sequence,
                        segments: segments.iter().map(|&(r, k)| segment(r, sequence, k)).collect(),
                        marks: marks
                            .iter()
                            .map(|&(region, back, pos)| MarkRecord { region, watermark: id_back(sequence, back, pos) })
                            .collect(),
                        releases: releases
                            .iter()
                            .map(|&(region, back, pos)| ReleaseRecord { region, released_through: id_back(sequence, back, pos) })
                            .collect(),
                    };
                    o.releases.sort_by_key(|r| r.region);
                    o.releases.dedup_by_key(|r| r.region);
                    c.insert(o).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    next = sequence + 1;
                }
                Step::Watermark(region, back, pos) => c.set_watermark(region, id_back(newest, back, pos)),
                Step::Collect(k) => {
                    let below = c.objects().nth(k).map_or(next, |o| o.sequence);
                    c.remove_below(below);
                }
            }
            c.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let raised: BTreeMap<RegionId, EntryId> = raises
                .get(n)
                .into_iter()
                .flatten()
                .map(|(&r, &(back, pos))| (r, id_back(newest, back, pos)))
                .collect();
            check(&c, &raised)?;
            check(&c, &BTreeMap::new())?;
        }
    }
}

#[test]
fn a_mark_that_is_not_the_highest_left_is_found_again_after_collection() {
    // Marks of region 1: 9.1 in object 2, then a lower 3.1 in object 4
    // (never written by objwal, but the catalog stays exact).
    let mut c = Catalog::new();
    c.insert(super::tests::object(1, &[1])).unwrap();
    let mut o = super::tests::object(2, &[]);
    o.marks = vec![MarkRecord {
        region: 1,
        watermark: entry_id(1, 2),
    }];
    c.insert(o).unwrap();
    let mut o = super::tests::object(4, &[1]);
    o.marks = vec![MarkRecord {
        region: 1,
        watermark: entry_id(1, 1),
    }];
    c.insert(o).unwrap();
    assert_eq!(c.obsolete_through(1), entry_id(1, 2));
    c.remove_below(3);
    c.check_invariants().unwrap();
    assert_eq!(c.obsolete_through(1), entry_id(1, 1));
    assert_eq!(c.first_live(&BTreeMap::new()), Some(4));
}
