//! The failure matrix of enqueued acknowledgement: rows of their own.
//!
//! Paused time: the backlog's age and the retry delays advance only when
//! every task waits, so no row depends on the machine's speed.

use std::time::Duration;

use futures::FutureExt;

use crate::format;
use crate::metrics as m;
use crate::storage::fault::Op;
use crate::storage::{ObjectStorage, StorageErrorKind};
use crate::Error;

use super::*;

pub(crate) const REQUIRED: &[&str] = &[
    "append returns while creates are held; wait_durable waits for the object",
    "byte bound stalls appends until a create completes",
    "age bound stalls appends until a create completes",
    "stop releases a stalled append with the stopped error",
    "transient failure repeats the same bytes; appends refused only while failing",
    "stop uploads the backlog",
    "stop after a permanent failure reports the loss",
    "stop after an exhausted retry budget reports the loss",
    "obsolete above the durable id is clamped",
    "crash with a non-durable tail hides no lost entry",
];

fn rows() -> Vec<Row> {
    vec![
        (REQUIRED[0], || returns_on_admission().boxed()),
        (REQUIRED[1], || byte_bound_stalls().boxed()),
        (REQUIRED[2], || age_bound_stalls().boxed()),
        (REQUIRED[3], || stop_releases_stalled().boxed()),
        (REQUIRED[4], || transient_failure_repeats().boxed()),
        (REQUIRED[5], || stop_uploads_backlog().boxed()),
        (REQUIRED[6], || stop_after_permanent_failure().boxed()),
        (REQUIRED[7], || stop_after_exhausted_budget().boxed()),
        (REQUIRED[8], || obsolete_is_clamped().boxed()),
        (REQUIRED[9], || crash_with_non_durable_tail().boxed()),
    ]
}

#[tokio::test(start_paused = true)]
async fn failure_matrix_enqueued() {
    run_matrix(rows(), REQUIRED).await;
}

async fn returns_on_admission() {
    let t = Bench::new("e-admission", enqueued());
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    let ids = wal.append(vec![(1, b("a"))]).await.unwrap();
    assert_eq!(wal.latest_entry_id(1), ids[0], "acknowledged on admission");
    let w = wal.clone();
    let barrier = tokio::spawn(async move { w.wait_durable(1, ids[0]).await });
    within(t.faulty.wait_held(1)).await;
    tokio::task::yield_now().await;
    assert!(
        !barrier.is_finished(),
        "not durable while the create is held"
    );
    assert!(t.faulty.inner().read(&t.key(2), 0..1).await.is_err());
    t.faulty.release_all();
    barrier.await.unwrap().unwrap();
    assert!(
        t.faulty.inner().read(&t.key(2), 0..1).await.is_ok(),
        "the object exists"
    );
    t.faulty.hold_creates(false);
    wal.stop().await.unwrap();
}

async fn byte_bound_stalls() {
    let t = Bench::new(
        "e-bytes",
        Config {
            max_batch_bytes: 1024,
            max_unpersisted_bytes: 2048,
            ..enqueued()
        },
    );
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    let big = Bytes::from(vec![1u8; 1500]);
    wal.append(vec![(1, big.clone())]).await.unwrap();
    wal.append(vec![(1, big.clone())]).await.unwrap();
    within(t.faulty.wait_held(2)).await;
    let w = wal.clone();
    let stalled = tokio::spawn(async move { w.append(vec![(1, b("small"))]).await });
    tokio::task::yield_now().await;
    for _ in 0..100 {
        if t.counter(m::STALLED_APPENDS_TOTAL) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(t.counter(m::STALLED_APPENDS_TOTAL), 1);
    assert!(
        !stalled.is_finished(),
        "3000 unpersisted bytes reach the 2048 bound"
    );
    assert!(t.faulty.release(&t.key(2)));
    stalled.await.unwrap().unwrap();
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    wal.stop().await.unwrap();
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await.len(), 3, "nothing dropped");
}

async fn age_bound_stalls() {
    let t = Bench::new(
        "e-age",
        Config {
            max_unpersisted_age: Duration::from_millis(50),
            ..enqueued()
        },
    );
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    wal.append(vec![(1, b("old"))]).await.unwrap();
    within(t.faulty.wait_held(1)).await;
    tokio::time::advance(Duration::from_millis(60)).await;
    let w = wal.clone();
    let stalled = tokio::spawn(async move { w.append(vec![(1, b("new"))]).await });
    for _ in 0..100 {
        if t.counter(m::STALLED_APPENDS_TOTAL) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        t.counter(m::STALLED_APPENDS_TOTAL),
        1,
        "the oldest admission is 60ms old"
    );
    assert!(!stalled.is_finished());
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    stalled.await.unwrap().unwrap();
    wal.stop().await.unwrap();
    assert_eq!(read(&t.open().await, 1).await, ["old", "new"]);
}

async fn stop_releases_stalled() {
    let t = Bench::new(
        "e-stop-stalled",
        Config {
            max_batch_bytes: 1024,
            max_unpersisted_bytes: 1024,
            ..enqueued()
        },
    );
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    wal.append(vec![(1, Bytes::from(vec![0u8; 2000]))])
        .await
        .unwrap();
    within(t.faulty.wait_held(1)).await;
    let w = wal.clone();
    let stalled = tokio::spawn(async move { w.append(vec![(1, b("late"))]).await });
    for _ in 0..100 {
        if t.counter(m::STALLED_APPENDS_TOTAL) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let w = wal.clone();
    let stop = tokio::spawn(async move { w.stop().await });
    let err = stalled.await.unwrap().unwrap_err();
    assert!(err.is_stopped(), "{err}");
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    stop.await.unwrap().unwrap();
    assert_eq!(
        read(&t.open().await, 1).await.len(),
        1,
        "the admitted backlog was uploaded"
    );
}

async fn transient_failure_repeats() {
    let t = Bench::new("e-transient", enqueued());
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    within(t.faulty.wait_held(1)).await;
    assert!(t
        .faulty
        .release_with_error(&t.key(2), StorageErrorKind::Transient));
    // The repeat is held too: the failure has been handled.
    within(t.faulty.wait_held(1)).await;
    let err = wal.append(vec![(1, b("refused"))]).await.unwrap_err();
    assert!(
        matches!(err, Error::Failing { .. }) && err.is_retryable(),
        "{err}"
    );
    assert!(err.to_string().contains("failing"), "{err}");
    assert_eq!(t.counter(m::REJECTED_APPENDS_TOTAL), 1);
    assert_eq!(t.counter(m::CREATE_FAILURES_TOTAL), 1);
    assert_eq!(
        t.faulty.held(),
        vec![t.key(2)],
        "the same sequence is repeated"
    );
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    wal.wait_durable(1, a[0]).await.unwrap();
    let c = wal.append(vec![(1, b("c"))]).await.unwrap();
    assert!(c[0] > a[0]);
    let size = t.faulty.inner().list(&t.key(2)).await.unwrap()[0].size;
    wal.stop().await.unwrap();
    let first_attempts = t.faulty.counts();
    assert!(
        first_attempts.create.bytes >= 2 * size,
        "both attempts sent the whole object"
    );
    let wal = t.open().await;
    assert_eq!(
        read(&wal, 1).await,
        ["a", "c"],
        "nothing lost or duplicated"
    );
    let object = format::decode(&t.faulty.inner().read(&t.key(2), 0..size).await.unwrap()).unwrap();
    assert_eq!(
        object.segments[0].entries[0].0, a[0],
        "the repeat kept the acknowledged id"
    );
}

async fn stop_uploads_backlog() {
    let t = Bench::new("e-stop-uploads", slow(enqueued()));
    let wal = t.open().await;
    wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.append(vec![(2, b("b"))]).await.unwrap();
    assert_eq!(t.sequences().await, vec![1], "nothing sealed yet");
    wal.stop().await.unwrap();
    let wal = t.open().await;
    assert_eq!(
        (read(&wal, 1).await, read(&wal, 2).await),
        (vec!["a".to_owned()], vec!["b".to_owned()])
    );
}

fn slow_flush(prefix: &str) -> Bench {
    Bench::new(prefix, slow(enqueued()))
}

async fn stop_after_permanent_failure() {
    let t = slow_flush("e-stop-permanent");
    let wal = t.open().await;
    wal.append(vec![(1, b("abc"))]).await.unwrap();
    t.faulty
        .fail_next(Op::Create, "objects/", 1, StorageErrorKind::Permanent);
    let err = wal.stop().await.unwrap_err();
    match &err {
        Error::Lost { entries, bytes, .. } => assert_eq!((*entries, *bytes), (1, 3), "{err}"),
        other => panic!("{other}"),
    }
    assert!(
        err.to_string().contains("1 acknowledged entries (3 bytes)"),
        "{err}"
    );
    // Idempotent: a second stop reports the same loss.
    assert!(matches!(wal.stop().await, Err(Error::Lost { .. })));
    assert!(read(&t.open().await, 1).await.is_empty());
}

async fn stop_after_exhausted_budget() {
    let t = slow_flush("e-stop-budget");
    let wal = t.open().await;
    wal.append(vec![(1, b("a")), (2, b("bb"))]).await.unwrap();
    t.faulty
        .fail_next(Op::Create, "objects/", 1000, StorageErrorKind::Transient);
    let err = wal.stop().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                entries: 2,
                bytes: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        t.faulty.counts().create.failures,
        5,
        "the stop's retry budget"
    );
    t.faulty.clear_faults();
    assert!(read(&t.open().await, 1).await.is_empty());
}

async fn obsolete_is_clamped() {
    let t = Bench::new("e-clamp", enqueued());
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    let ids = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.obsolete(1, ids[0]).await.unwrap();
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    wal.wait_durable(1, ids[0]).await.unwrap();
    assert_eq!(
        read(&wal, 1).await,
        ["a"],
        "the watermark was clamped below the entry"
    );
    wal.obsolete(1, ids[0]).await.unwrap();
    assert!(
        read(&wal, 1).await.is_empty(),
        "durable now: the watermark applies"
    );
    wal.stop().await.unwrap();
}

async fn crash_with_non_durable_tail() {
    let t = Bench::new("e-crash", enqueued());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.wait_durable(1, a[0]).await.unwrap();
    t.faulty.hold_creates(true);
    let tail = wal.append(vec![(1, b("tail"))]).await.unwrap();
    // The engine publishes a watermark over the tail; the store applies
    // only what is durable.
    wal.obsolete(1, tail[0]).await.unwrap();
    // Reads see only indexed entries: the durable one is hidden, the tail is
    // not durable yet.
    assert!(read(&wal, 1).await.is_empty());
    within(t.faulty.wait_held(1)).await;
    drop(wal); // crash: the held create never lands
    t.faulty.hold_creates(false);
    t.faulty.clear_faults();
    let wal = t.open().await;
    let entries = try_read(&wal, 1, 0).await.unwrap();
    assert_eq!(
        entries.len(),
        1,
        "the durable entry survives, the tail is lost"
    );
    assert_eq!(entries[0].id, a[0]);
    wal.stop().await.unwrap();
}
