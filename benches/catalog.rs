//! The catalog's operations on the actor's loop: indexing an object
//! (`insert`, once per acknowledged object), finding a region's segments
//! (`segments_from`, once per page of a read), the reclaim boundary's
//! query (`first_live`, once per sealed object) and a watermark moving
//! (`set_watermark`, once per `obsolete`), at a few catalog
//! sizes, so it shows which of them grows with the catalog.

#![allow(
    clippy::expect_used,
    missing_docs,
    reason = "a bench: a broken fixture should stop it loudly"
)]

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use objwal::catalog::{Catalog, IndexedObject};
use objwal::format::{self, SegmentIndex};

/// An object of `sequence` holding one segment of each of `regions`.
fn object(sequence: u64, regions: impl Iterator<Item = u64>) -> IndexedObject {
    let segments = regions
        .map(|region| SegmentIndex {
            region,
            first_id: format::entry_id(sequence, 1),
            last_id: format::entry_id(sequence, 125),
            offset: 64,
            len: 125 * 912,
            count: 125,
            crc: 0,
        })
        .collect();
    IndexedObject {
        sequence,
        epoch: 1,
        link: None,
        reclaim_boundary: 0,
        size: 1 << 20,
        segments,
        marks: Vec::new(),
        releases: Vec::new(),
    }
}

/// `objects` objects of 8 regions each, out of `regions` regions in turn.
fn catalog(objects: u64, regions: u64) -> Catalog {
    let mut c = Catalog::new();
    for s in 1..=objects {
        let first = (s * 8) % regions;
        let mut own: Vec<u64> = (0..8).map(|i| (first + i) % regions + 1).collect();
        own.sort_unstable();
        own.dedup();
        c.insert(object(s, own.into_iter()))
            .expect("objects in sequence order insert");
    }
    c
}

fn operations(c: &mut Criterion) {
    let mut group = c.benchmark_group("catalog");
    for (objects, regions) in [(100u64, 8u64), (10_000, 8), (10_000, 10_000)] {
        let label = format!("{objects} objects, {regions} regions");
        let full = catalog(objects, regions);
        group.bench_function(
            BenchmarkId::new("insert one object of 8 segments", &label),
            |b| {
                b.iter_batched(
                    || (full.clone(), object(objects + 1, 1..=8)),
                    // The catalog is returned so that its drop is not timed.
                    |(mut c, o)| {
                        let inserted = c.insert(o);
                        (c, inserted)
                    },
                    BatchSize::LargeInput,
                )
            },
        );
        group.bench_function(BenchmarkId::new("segments_from, 16", &label), |b| {
            let from = format::entry_id(objects / 2, 1);
            b.iter(|| full.segments_from(std::hint::black_box(1), from, 16))
        });
        // Every region flushed through the middle of the log.
        let watermark = format::entry_id(objects / 2, 125);
        let mut flushed = full.clone();
        for region in 1..=regions {
            flushed.set_watermark(region, watermark);
        }
        group.bench_function(BenchmarkId::new("first_live", &label), |b| {
            let raised = std::collections::BTreeMap::new();
            b.iter(|| flushed.first_live(std::hint::black_box(&raised)))
        });
        group.bench_function(BenchmarkId::new("set_watermark", &label), |b| {
            // One region flushed one object further (the index moves it).
            let mut c = flushed.clone();
            let mut next = watermark;
            b.iter(|| {
                next += 1 << 20;
                c.set_watermark(std::hint::black_box(1), next);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, operations);
criterion_main!(benches);
