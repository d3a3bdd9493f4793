//! Regression tests of library bugs the scenario found.

use std::time::Duration;

use bytes::Bytes;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::{AckMode, Config, Storage, Wal};

use super::{FLUSH_INTERVAL, PREFIX};

/// Library bug found by the scenario: with create latency in enqueued mode
/// too (`Engine::new` drawing the latency for both modes), the enqueued
/// scenario hangs at `OBJWAL_ENGINE_SEED=2` (step 159) and 5. While the
/// store is failing and a batch waits for a create slot, the actor's retry
/// timer is already due and `start_creates` has no free slot, so the loop
/// wakes again at once: it spins until the running create ends (a busy CPU in
/// real time; under paused time no timer ever fires and the store hangs).
#[test]
fn a_failing_store_with_a_full_pipeline_waits() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
            faulty.set_latency(Op::Create, Duration::from_millis(5));
            let config = Config {
                flush_interval: FLUSH_INTERVAL,
                ack_mode: AckMode::Enqueued,
                max_batch_bytes: 1024,
                max_inflight_creates: 1,
                ..Config::default()
            };
            let wal = Wal::open(faulty.storage(), PREFIX, config).await.unwrap();
            faulty.fail_next(Op::Create, "objects/", 1, StorageErrorKind::Transient);
            let mut last = 0;
            for n in 0..3 {
                // Each append fills a batch: three batches, one slot.
                let data = Bytes::from(vec![b'x'; 900 + n]);
                last = wal.append(vec![(1, data)]).await.unwrap()[0];
            }
            wal.wait_durable(1, last).await.unwrap();
            wal.stop().await.unwrap();
        });
        let _ = done.send(());
    });
    assert!(
        finished.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the backlog never became durable: the actor spins on its due retry timer"
    );
}

/// Library bug found by the scenario: a collection pass whose deletes fail
/// arms the retry tick, then `on_pass` calls `maybe_collect`, which starts
/// the next pass at once (the collected boundary did not move). Failed
/// deletes (and failed lists) are retried in a tight loop, not "later": a
/// delete that keeps failing (say, a bucket policy that denies deletes)
/// makes the store list the prefix and delete without pause, forever.
#[tokio::test(start_paused = true)]
async fn failed_deletes_are_retried_later() {
    let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
    let config = Config {
        flush_interval: FLUSH_INTERVAL,
        ..Config::default()
    };
    let wal = Wal::open(faulty.storage(), PREFIX, config).await.unwrap();
    let ids = wal.append(vec![(1, Bytes::from("a"))]).await.unwrap();
    faulty.fail_next(Op::Delete, "objects/", 5000, StorageErrorKind::Transient);
    faulty.reset_counts();
    wal.obsolete(1, ids[0]).await.unwrap();
    tokio::time::sleep(FLUSH_INTERVAL * 10).await;
    let counts = faulty.counts();
    wal.stop().await.unwrap();
    // One pass per flush interval at most: about ten passes of two deletes.
    assert!(
        counts.delete.requests <= 50 && counts.list.requests <= 25,
        "deletes retried without pause in 100 ms: {counts:?}"
    );
}
