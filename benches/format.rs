//! The object format's hot paths against their floor, measured in the same
//! run: encoding a 900 KB batch (1000 entries of 900 B, one region, the
//! side-by-side workload's append) beside `memcpy + crc32fast` over the same
//! payload bytes into a buffer of the same size (the least any encoder that
//! copies once and checksums once must do); decoding the tail window
//! recovery reads; decoding one 900 KB segment (its CRC and frames).
//!
//! Criterion prints each one's throughput; the encoder's ratio to the floor
//! is the issue 11 target (>= 0.7x). BENCHMARKS.md records the figures.

#![allow(
    clippy::expect_used,
    missing_docs,
    reason = "a bench: a broken fixture should stop it loudly"
)]

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use objwal::format::{self, Header, Object, Segment, TailDecode};
use rand::{RngCore, SeedableRng};

const ROWS: usize = 1000;
const ROW: usize = 900;

fn payloads(rows: usize, size: usize) -> Vec<Bytes> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    (0..rows)
        .map(|_| {
            let mut row = vec![0u8; size];
            rng.fill_bytes(&mut row);
            Bytes::from(row)
        })
        .collect()
}

fn object(rows: &[Bytes], regions: u64) -> Object {
    let sequence = 9;
    let per_region = rows.len() as u64 / regions;
    let segments = (0..regions)
        .map(|r| Segment {
            region: r + 1,
            entries: (0..per_region)
                .map(|i| {
                    let row = rows[(r * per_region + i) as usize].clone();
                    (format::entry_id(sequence, i + 1), row)
                })
                .collect(),
        })
        .collect();
    Object {
        header: Header {
            sequence,
            epoch: 3,
            link: None,
            reclaim_boundary: 0,
        },
        segments,
        marks: Vec::new(),
        releases: Vec::new(),
    }
}

/// The floor: one allocation of the object's size, each payload copied in
/// once, one CRC over the copy.
fn memcpy_crc(rows: &[Bytes], total: usize) -> (Vec<u8>, u32) {
    let mut out = Vec::with_capacity(total);
    for row in rows {
        out.extend_from_slice(row);
    }
    let crc = crc32fast::hash(&out);
    (out, crc)
}

fn encode(c: &mut Criterion) {
    let rows = payloads(ROWS, ROW);
    let payload: u64 = rows.iter().map(|r| r.len() as u64).sum();
    let mut group = c.benchmark_group("encode 900 KB");
    group.throughput(Throughput::Bytes(payload));
    for regions in [1, 8] {
        let object = object(&rows, regions);
        group.bench_function(format!("objwal encode, {regions} region(s)"), |b| {
            b.iter(|| format::encode(std::hint::black_box(&object)))
        });
    }
    let total = format::encoded_len(&object(&rows, 1)) as usize;
    group.bench_function("floor: memcpy + crc32fast", |b| {
        b.iter(|| memcpy_crc(std::hint::black_box(&rows), total))
    });
    group.finish();
}

fn decode(c: &mut Criterion) {
    let rows = payloads(ROWS, ROW);
    let bytes = format::encode(&object(&rows, 8)).expect("a valid object encodes");
    let len = bytes.len() as u64;
    let window = bytes.slice(bytes.len() - 4096..);
    let mut group = c.benchmark_group("decode");
    group.bench_function("tail window (8 segments)", |b| {
        b.iter(|| format::decode_tail(std::hint::black_box(&window), len))
    });
    let one = format::encode(&object(&rows, 1)).expect("a valid object encodes");
    let tail = match format::decode_tail(&one, one.len() as u64) {
        Ok(TailDecode::Complete(tail)) => tail,
        other => panic!("the tail of a whole object decodes: {other:?}"),
    };
    let index = tail.segments[0];
    let segment = one.slice(index.offset as usize..(index.offset + index.len) as usize);
    group.throughput(Throughput::Bytes(index.len));
    group.bench_function("segment of 900 KB (1000 entries)", |b| {
        b.iter_batched(
            || segment.clone(),
            |s| format::decode_segment(&s, &index, 9),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, encode, decode);
criterion_main!(benches);
