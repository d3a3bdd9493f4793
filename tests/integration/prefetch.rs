//! Prefetch in `read` (issue 15, item 2): a single region's read keeps up
//! to `replay_concurrency` segment reads in flight, yields in id order, and
//! holds at most `replay_buffer_bytes` when its consumer stalls.

use std::time::Duration;

use futures::StreamExt;
use objwal::storage::fault::Op;
use objwal::{Config, Wal};
use tokio::time::Instant;

use crate::common::*;

/// `n` objects, each holding one entry of about `payload` bytes of region 1
/// and of region 2.
async fn objects(wal: &Wal, n: usize, payload: usize) {
    for i in 0..n {
        let data = format!("{i}:{}", "z".repeat(payload));
        wal.append(vec![(1, b(&data)), (2, b("other"))])
            .await
            .unwrap();
    }
}

/// Under paused time a read's duration is counted in round trips of the
/// injected latency: with 8 in flight, 32 segments take about 4, not 32.
#[tokio::test(start_paused = true)]
async fn a_read_keeps_segment_reads_in_flight() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    for (concurrency, at_most) in [(1, 40), (8, 8)] {
        let config = Config {
            replay_concurrency: concurrency,
            ..test_config()
        };
        let wal = open(&storage, config).await;
        if concurrency == 1 {
            objects(&wal, 32, 10).await;
        }
        faulty.set_latency(Op::Read, Duration::from_millis(10));
        let started = Instant::now();
        let entries = within(collect_entries(wal.read(1, 0))).await.unwrap();
        let trips = started.elapsed().as_millis() / 10;
        faulty.set_latency(Op::Read, Duration::ZERO);
        assert_eq!(entries.len(), 32);
        assert!(entries.windows(2).all(|w| w[0].id < w[1].id));
        assert!(
            trips <= at_most && trips >= 32 / concurrency as u128,
            "{concurrency} in flight: {trips} round trips"
        );
        wal.stop().await.unwrap();
    }
}

/// The consumer takes one entry and stops: the reads ahead stop once the
/// buffer is full; taking the rest yields every entry in order.
#[tokio::test(start_paused = true)]
async fn a_stalled_read_holds_at_most_the_buffer() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let buffer = 64 << 10;
    let config = Config {
        replay_concurrency: 16,
        replay_buffer_bytes: buffer,
        ..test_config()
    };
    let wal = open(&storage, config).await;
    objects(&wal, 40, 10_000).await;
    faulty.set_latency(Op::Read, Duration::from_millis(5));
    faulty.reset_counts();
    let mut read = Box::pin(wal.read(1, 0));
    within(read.next()).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let fetched = faulty.counts().read.bytes;
    let segment = 10_100;
    assert!(
        fetched <= buffer + segment,
        "fetched {fetched}, buffer {buffer}"
    );
    assert!(
        fetched >= buffer / 2,
        "reads go ahead of the consumer: {fetched}"
    );
    let rest = within(collect_entries(read)).await.unwrap();
    assert_eq!(rest.len(), 39);
    assert!(rest.windows(2).all(|w| w[0].id < w[1].id));
    wal.stop().await.unwrap();
}

/// A read sees objects indexed while it runs: it ends only on an empty page
/// asked for once everything before it was yielded.
#[tokio::test]
async fn a_read_sees_objects_indexed_while_it_runs() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    objects(&wal, 3, 1).await;
    let mut read = Box::pin(wal.read(1, 0));
    for _ in 0..3 {
        within(read.next()).await.unwrap().unwrap();
    }
    wal.append(vec![(1, b("late"))]).await.unwrap();
    let rest = within(collect_entries(read)).await.unwrap();
    assert_eq!(payloads(&rest), ["late"]);
    wal.stop().await.unwrap();
}
