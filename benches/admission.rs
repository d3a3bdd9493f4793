//! Admission, the actor's per-append work before a seal: the size and
//! positions check (`encoded_growth`, `has_positions_for`) and `admit`
//! (ids handed out, entries kept by region, no payload copied), for the
//! side-by-side appends (1000 rows of 900 B to one region; one row), and
//! sealing a full batch into the object the encoder takes.

#![allow(missing_docs, reason = "a bench")]

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use objwal::wal::bench_support::Batch;

fn append(rows: usize, region: u64) -> Vec<(u64, Bytes)> {
    let row = Bytes::from(vec![0x5au8; 900]);
    (0..rows).map(|_| (region, row.clone())).collect()
}

fn admission(c: &mut Criterion) {
    let mut group = c.benchmark_group("admission");
    for rows in [1usize, 1000] {
        let entries = append(rows, 7);
        group.throughput(Throughput::Elements(rows as u64));
        // A batch already holding 7 other regions' appends, as under load.
        let busy = || {
            let mut batch = Batch::new(3);
            for region in 1..=6 {
                batch.admit(append(rows, region));
            }
            batch
        };
        let batch = busy();
        group.bench_function(format!("check an append of {rows} row(s)"), |b| {
            b.iter(|| batch.check(std::hint::black_box(&entries)))
        });
        group.bench_function(format!("admit an append of {rows} row(s)"), |b| {
            b.iter_batched(
                || (busy(), entries.clone()),
                // The batch is returned so that its drop is not timed.
                |(mut batch, entries)| {
                    let ids = batch.admit(entries);
                    (batch, ids)
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.throughput(Throughput::Elements(8000));
    group.bench_function("seal a batch of 8 x 1000 rows", |b| {
        b.iter_batched(
            || {
                let mut batch = Batch::new(3);
                for region in 1..=8 {
                    batch.admit(append(1000, region));
                }
                batch
            },
            Batch::seal,
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, admission);
criterion_main!(benches);
