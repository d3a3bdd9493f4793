//! Histories the model test found once its steps reached the whole public
//! surface (issue 19): each fixed, each pinned here by name.

use std::time::Duration;

use crate::storage::fault::{HoldPoint, Op};
use crate::storage::{MemoryStorage, StorageErrorKind};

use super::*;

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("the call hangs")
}

/// An import with nothing to import (no entry, no floor) answered `Ok` on
/// a stopped store: the call never reached the actor.
#[tokio::test(start_paused = true)]
async fn an_import_on_a_stopped_store_says_stopped() {
    let inner = Storage::new(MemoryStorage::new());
    let a = Wal::open(inner.clone(), "node-a", config()).await.unwrap();
    a.stop().await.unwrap();
    let reader = crate::WalReader::open(inner.clone(), "node-a", config())
        .await
        .unwrap();
    let b = Wal::open(inner, "node-b", config()).await.unwrap();
    b.stop().await.unwrap();
    let err = within(b.import_region(&reader, 5, 0)).await.unwrap_err();
    assert!(err.is_stopped(), "{err}");
}

/// A flush while a durable store was failing (its batch's void could not
/// be created) waited as long as the outage lasted; once the store has
/// failed for `max_unpersisted_age` it answers the retryable `Failing`,
/// and so does a `wait_durable` in enqueued mode.
#[tokio::test(start_paused = true)]
async fn a_barrier_through_a_long_outage_answers_failing_after_max_unpersisted_age() {
    let age = Duration::from_secs(8);
    let t = Bench::new(
        "mf-flush-failing",
        Config {
            max_unpersisted_age: age,
            ..config()
        },
    );
    let wal = t.open().await;
    t.faulty.fail_next(
        Op::Create,
        "/objects/",
        usize::MAX,
        StorageErrorKind::Transient,
    );
    let started = tokio::time::Instant::now();
    let err = within(wal.append(vec![(1, b("a"))])).await.unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    let err = within(wal.flush()).await.unwrap_err();
    assert!(
        matches!(err, Error::Failing { .. }) && err.is_retryable(),
        "{err}"
    );
    assert!(started.elapsed() >= age, "it waited within the bound");
    // Later barriers are refused at once while the store fails.
    let again = tokio::time::Instant::now();
    assert!(within(wal.flush()).await.is_err());
    assert_eq!(again.elapsed(), Duration::ZERO);
    t.faulty.clear_faults();
    // Once a create succeeds the barrier works again.
    let mut flushed = wal.flush().await;
    for _ in 0..20 {
        if flushed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        flushed = wal.flush().await;
    }
    flushed.unwrap();
    wal.stop().await.unwrap();

    // Enqueued: a `wait_durable` through the outage.
    let t = Bench::new(
        "mf-wait-failing",
        Config {
            ack_mode: crate::AckMode::Enqueued,
            max_unpersisted_age: age,
            ..config()
        },
    );
    let wal = t.open().await;
    t.faulty.fail_next(
        Op::Create,
        "/objects/",
        usize::MAX,
        StorageErrorKind::Transient,
    );
    let ids = wal.append(vec![(1, b("a"))]).await.unwrap();
    let err = within(wal.wait_durable(1, ids[0])).await.unwrap_err();
    assert!(matches!(err, Error::Failing { .. }), "{err}");
    t.faulty.clear_faults();
    let mut waited = wal.wait_durable(1, ids[0]).await;
    for _ in 0..20 {
        if waited.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        waited = wal.wait_durable(1, ids[0]).await;
    }
    waited.unwrap();
    wal.stop().await.unwrap();
}

/// A stop that gave up on its backlog left the create of a later batch
/// running after it returned (the pipeline dropped the batch but not its
/// task): a stopped store went on creating.
#[tokio::test(start_paused = true)]
async fn a_stop_that_gives_up_aborts_the_creates_it_gave_up() {
    let t = Bench::new(
        "mf-stop-aborts",
        Config {
            stop_attempts: 1,
            ack_mode: crate::AckMode::Enqueued,
            ..config()
        },
    );
    let wal = t.open().await;
    t.faulty.hold_creates_at(Some(HoldPoint::BeforeInner));
    wal.append(vec![(1, b("a"))]).await.unwrap();
    within(t.faulty.wait_held(1)).await;
    wal.append(vec![(1, b("b"))]).await.unwrap();
    let stopping = tokio::spawn({
        let wal = wal.clone();
        async move { wal.stop().await }
    });
    // The stop has begun once the actor refuses an (empty) append.
    within(async {
        while wal.append(Vec::new()).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    within(t.faulty.wait_held(2)).await;
    let held = t.faulty.held();
    // The first create fails; the stop has one attempt and gives up.
    t.faulty
        .release_with_error(&held[0], StorageErrorKind::Permanent);
    let stopped = within(stopping).await.unwrap();
    assert!(matches!(stopped, Err(Error::Lost { .. })), "{stopped:?}");
    within(async {
        while !t.faulty.held().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
}

/// A watermark in the open batch's own sequence, above the region's
/// positions there, did not move the run: the region's next entry got that
/// very id. An import into a log whose open batch had the sequence of the
/// other log's last id returned a first id equal to its floor.
#[tokio::test(start_paused = true)]
async fn an_import_whose_floor_is_in_the_open_batch_gets_ids_above_it() {
    let inner = Storage::new(MemoryStorage::new());
    let a = Wal::open(inner.clone(), "node-a", config()).await.unwrap();
    let theirs = a.append(vec![(5, b("e1"))]).await.unwrap();
    a.stop().await.unwrap();
    let reader = crate::WalReader::open(inner.clone(), "node-a", config())
        .await
        .unwrap();
    let held_open = Config {
        ack_mode: crate::AckMode::Enqueued,
        early_seals: crate::EarlySeals::Off,
        flush_interval: Duration::from_secs(3600),
        max_unpersisted_age: Duration::from_secs(7200),
        ..config()
    };
    let node_b = Wal::open(inner, "node-b", held_open).await.unwrap();
    let waiting = node_b.append(vec![(9, b("waiting"))]).await.unwrap();
    assert_eq!(
        crate::format::sequence_of(waiting[0]),
        crate::format::sequence_of(theirs[0]),
        "the open batch has the sequence of the floor"
    );
    let imported = within(node_b.import_region(&reader, 5, 0)).await.unwrap();
    assert_eq!(imported.floor, theirs[0]);
    assert!(imported.first_id > imported.floor, "{imported:?}");
    node_b.stop().await.unwrap();
}

/// A segment of the other log corrupted in transit on both of the reader's
/// fetches became a hole, and the import answered `Ok` without its
/// entries; the other node then releases the region and they are gone.
/// An import now fails on a hole and a repeat with a new reader copies all.
#[tokio::test(start_paused = true)]
async fn an_import_that_meets_a_hole_fails_instead_of_copying_around_it() {
    let inner = Storage::new(MemoryStorage::new());
    let a = Wal::open(inner.clone(), "node-a", config()).await.unwrap();
    let theirs = a.append(vec![(5, b("e1")), (5, b("e2"))]).await.unwrap();
    a.stop().await.unwrap();
    let faulty = crate::storage::fault::FaultyStorage::new(inner.clone());
    let node_b = Wal::open(inner.clone(), "node-b", config()).await.unwrap();

    let reader = crate::WalReader::open(faulty.storage(), "node-a", config())
        .await
        .unwrap();
    faulty.corrupt_next_reads("node-a/objects/", 2);
    let err = within(node_b.import_region(&reader, 5, 0))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Incomplete { region: 5, first_id, .. } if first_id == theirs[0]),
        "{err}"
    );
    assert!(err.is_retryable());

    let reader = crate::WalReader::open(inner, "node-a", config())
        .await
        .unwrap();
    let imported = within(node_b.import_region(&reader, 5, 0)).await.unwrap();
    assert_eq!(imported.entries, 2);
    let got = try_read(&node_b, 5, imported.floor + 1).await.unwrap();
    assert_eq!(
        got.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
        vec![b("e1"), b("e2")]
    );
    node_b.stop().await.unwrap();
}
