//! Open reads what it needs (issue 15, item 4): recovery's tail window is
//! sized from what the footers need, learned from the objects already read,
//! so an open of many large objects reads about their footers (not 64 KiB
//! of each), one read per object in the common case. And a reader's reads
//! give up on a store that stops answering (issue 18, item 5).

use objwal::format::{self, TailDecode};
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::{Config, ObjectStorage, Storage, WalReader};

use crate::common::*;

/// `objects` objects of `regions` regions each, `payload` bytes per entry.
async fn objects(storage: &Storage, objects: usize, regions: u64, payload: usize) {
    let wal = open(storage, test_config()).await;
    for n in 0..objects {
        let entries = (0..regions)
            .map(|r| (r, b(&format!("{n}:{}", "p".repeat(payload)))))
            .collect();
        wal.append(entries).await.unwrap();
    }
    wal.stop().await.unwrap();
}

/// Per object listed, the bytes of its tail (footer and trailer).
async fn tails(faulty: &FaultyStorage) -> Vec<u64> {
    let mut out = Vec::new();
    for meta in faulty.inner().list("t/objects/").await.unwrap() {
        let bytes = faulty.inner().read(&meta.key, 0..meta.size).await.unwrap();
        let Ok(TailDecode::Complete(tail)) = format::decode_tail(&bytes, meta.size) else {
            panic!("{} does not decode", meta.key);
        };
        out.push(meta.size - tail.trailer.footer_offset);
    }
    out
}

/// Opens a reader with `concurrency` tail reads in flight; returns the
/// reads and bytes it took.
async fn open_counted(faulty: &FaultyStorage, concurrency: usize) -> (u64, u64) {
    faulty.reset_counts();
    let config = Config {
        recovery_concurrency: concurrency,
        ..test_config()
    };
    WalReader::open(faulty.storage(), "t", config)
        .await
        .unwrap();
    let counts = faulty.counts();
    (counts.read.requests, counts.read.bytes)
}

#[tokio::test]
async fn an_open_of_large_objects_reads_about_their_footers() {
    let faulty = faulty_memory();
    // 30 objects of 150 regions x 1 KiB: footers of 7,280 bytes, larger
    // than the first window, in objects of about 160 KiB.
    objects(&faulty.storage(), 30, 150, 1024).await;
    let tails = tails(&faulty).await;
    let listed = tails.len() as u64;
    let footers: u64 = tails.iter().sum();
    // One object at a time: only the first large one needs a second read.
    let (reads, bytes) = open_counted(&faulty, 1).await;
    assert_eq!(reads, listed + 1, "{listed} objects");
    assert!(
        bytes <= 2 * footers,
        "read {bytes} for footers of {footers}"
    );
    // Eight at a time: those read before anything was learned may each
    // need one more.
    let (reads, bytes) = open_counted(&faulty, 8).await;
    assert!(reads <= listed + 8, "{reads} reads for {listed} objects");
    assert!(
        bytes <= 2 * footers,
        "read {bytes} for footers of {footers}"
    );
    // Today's 64 KiB window would have read far more.
    assert!(bytes * 4 < listed * (64 << 10));
}

#[tokio::test]
async fn small_tails_take_one_read_each() {
    let faulty = faulty_memory();
    objects(&faulty.storage(), 20, 10, 20_000).await;
    let listed = tails(&faulty).await.len() as u64;
    for concurrency in [1, 8] {
        let (reads, bytes) = open_counted(&faulty, concurrency).await;
        assert_eq!(reads, listed);
        assert!(bytes <= listed * 4096, "{bytes}");
    }
}

#[tokio::test]
async fn a_tail_larger_than_any_before_costs_one_more_read_and_raises_the_window() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    objects(&storage, 10, 150, 10).await;
    // Then objects with four times the regions: 28 KiB footers.
    let wal = open(&storage, test_config()).await;
    for n in 0..5 {
        wal.append((0..600).map(|r| (r, b(&format!("{n}")))).collect())
            .await
            .unwrap();
    }
    wal.stop().await.unwrap();
    let listed = tails(&faulty).await.len() as u64;
    let (reads, _) = open_counted(&faulty, 1).await;
    // Newest first (issue 30 item 8): the first 600-region object costs one
    // more read and raises the window; the older, smaller tails fit in it.
    assert_eq!(reads, listed + 1);
}

/// A reader's configuration with a request timeout of one second.
fn timing_out() -> Config {
    Config {
        request_timeout: Some(std::time::Duration::from_secs(1)),
        ..test_config()
    }
}

/// Issue 18, item 5: `WalReader::open` ignored `request_timeout`, so a
/// read-only open, or a read, against a store that stopped answering waited
/// forever. A stalled request now fails with a retryable error after the
/// timeout (paused time: the deadline of `within` is virtual).
#[tokio::test(start_paused = true)]
async fn a_reader_against_a_store_that_stops_answering_fails_after_request_timeout() {
    let faulty = faulty_memory();
    objects(&faulty.storage(), 3, 2, 10).await;
    // The listing never answers.
    faulty.stall_next(Op::List, "t/objects/", 1);
    let err = within(WalReader::open(faulty.storage(), "t", timing_out()))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("request_timeout"), "{err}");
    // A tail read never answers: timed out, it is repeated (issue 30,
    // item 7) and the open succeeds...
    faulty.stall_next(Op::Read, "t/objects/", 1);
    within(WalReader::open(faulty.storage(), "t", timing_out()))
        .await
        .unwrap();
    // ...unless every try of it stalls.
    let key = faulty.storage().list("t/objects/").await.unwrap()[0]
        .key
        .clone();
    faulty.stall_next(Op::Read, &key, timing_out().stop_attempts as usize);
    let err = within(WalReader::open(faulty.storage(), "t", timing_out()))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("request_timeout"), "{err}");
    // A segment read of an open reader never answers.
    let reader = within(WalReader::open(faulty.storage(), "t", timing_out()))
        .await
        .unwrap();
    faulty.stall_next(Op::Read, "t/objects/", 1);
    let got = within(collect_entries(reader.read(1, 0))).await;
    let err = got.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    // Once the store answers again, the same reader reads everything.
    let entries = within(collect_entries(reader.read(1, 0))).await.unwrap();
    assert_eq!(entries.len(), 3);
}
