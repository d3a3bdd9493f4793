//! Issue 11, items 1 and 5, through the actor: early seals where a create
//! can start, the budget on a store that charges per request, and objects
//! that respect `max_batch_bytes`. (The policy's own properties are tested
//! in `policy.rs`.)

use std::time::Duration;

use tokio::time::Instant;

use crate::storage::fault::Op;
use crate::EarlySeals;

use super::*;

/// A lone durable append on a local store waits about one create, not the
/// flush timer (virtual time: the memory store's creates take none).
#[tokio::test(start_paused = true)]
async fn a_lone_durable_append_does_not_wait_for_the_timer() {
    let t = Bench::new(
        "s-lone",
        Config {
            flush_interval: Duration::from_millis(100),
            ..Config::default()
        },
    );
    let wal = t.open().await;
    for n in 0..10 {
        let started = Instant::now();
        wal.append(vec![(1, b(&format!("e{n}")))]).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(1),
            "append {n} waited {:?}",
            started.elapsed()
        );
    }
    // The old policy: every append waits for the timer.
    let t = Bench::new(
        "s-lone-off",
        Config {
            flush_interval: Duration::from_millis(100),
            early_seals: EarlySeals::Off,
            ..Config::default()
        },
    );
    let wal = t.open().await;
    let started = Instant::now();
    wal.append(vec![(1, b("e"))]).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    wal.stop().await.unwrap();
}

/// On a store that charges per request the default budget is about one
/// early seal per flush interval: many small appends of one writer after
/// another create at most about two objects per interval (early + timer),
/// however fast the store answers.
#[tokio::test(start_paused = true)]
async fn a_store_that_charges_per_request_keeps_early_seals_within_the_budget() {
    let t = Bench::new(
        "s-budget",
        Config {
            flush_interval: Duration::from_millis(100),
            ..Config::default()
        },
    );
    // A create latency makes the wrapper count as a remote store.
    t.faulty.set_latency(Op::Create, Duration::from_millis(5));
    assert!(t.storage.charges_per_request());
    let wal = t.open().await;
    t.faulty.reset_counts();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let wal = wal.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..50 {
                wal.append(vec![(w, b(&format!("e{n}")))]).await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(task).await.unwrap();
    }
    let intervals = started.elapsed().as_secs_f64() / 0.1;
    let objects = t.faulty.counts().create.requests as f64;
    // Budget (rate 1/interval, burst max_inflight_creates) plus timer seals.
    let allowed = 2.0 * intervals + 2.0 * 4.0 + 1.0;
    assert!(
        objects <= allowed,
        "{objects} objects in {intervals:.1} flush intervals (allowed {allowed:.1})"
    );
    assert!(objects >= 2.0, "appends were sealed at all");
    wal.stop().await.unwrap();
}

/// A batch used to be sealed after the append that crossed
/// `max_batch_bytes` (1 MiB batches came out at 1.78 MiB on average); now it
/// is sealed before, and only an append larger than the limit alone makes a
/// larger object.
#[tokio::test(start_paused = true)]
async fn objects_respect_their_size_limit() {
    let limit = 8 * 1024;
    let t = Bench::new(
        "s-limit",
        Config {
            max_batch_bytes: limit,
            early_seals: EarlySeals::Off,
            ack_mode: crate::AckMode::Enqueued,
            max_unpersisted_age: Duration::from_secs(3600),
            ..Config::default()
        },
    );
    let wal = t.open().await;
    for n in 0..100u64 {
        let size = 500 + (n * 797) % 3000;
        wal.append(vec![(n % 3, Bytes::from(vec![b'x'; size as usize]))])
            .await
            .unwrap();
    }
    let big = wal
        .append(vec![(9, Bytes::from(vec![b'y'; 3 * limit as usize]))])
        .await
        .unwrap();
    wal.flush().await.unwrap();
    let listed = t
        .faulty
        .inner()
        .list(&format!("{}/objects/", t.prefix))
        .await
        .unwrap();
    // Header, footer entries and trailer come on top of the batch's bytes.
    let slack = 64 + 80 + 4 * 48;
    let big_key = t.key(crate::format::sequence_of(big[0]));
    for meta in &listed {
        if meta.key != big_key {
            assert!(
                meta.size <= limit + slack,
                "{} is {} bytes, over the limit of {limit}",
                meta.key,
                meta.size
            );
        }
    }
    assert!(listed.iter().any(|m| m.key == big_key && m.size > limit));
    wal.stop().await.unwrap();
}
