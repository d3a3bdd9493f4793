//! Region release: its behaviour and the failure matrix of its paths.
//!
//! Paused time: ticks and retry delays advance only when every task waits.

use std::time::Duration;

use futures::FutureExt;

use crate::config::AckMode;
use crate::format::{self, Header, Link, Object};
use crate::metrics as m;
use crate::storage::fault::Op;
use crate::storage::{ObjectStorage, StorageErrorKind};
use crate::{Error, WalReader};

use super::*;

pub(crate) const REQUIRED: &[&str] = &[
    "a release is durable and indexed; the region reads empty and refuses appends",
    "a release whose batch failed is made durable by the batch's void",
    "a release while failing is refused, kept coalesced, and sealed after a success",
    "a release pending when the store starts failing fails and stays in the backlog",
    "a failed release then a stop: the stop makes its void durable",
    "a stop of a failing store whose final creates succeed seals the rejected release",
    "a final create that fails: stop returns the error",
    "a stopped or poisoned store keeps no failed release",
    "a release answers once its marker is durable; a failed marker is retryable and made later",
    "a stop waits for a marker in flight; one it cannot make, the next open makes",
];

fn rows() -> Vec<Row> {
    vec![
        (REQUIRED[0], || release_is_durable().boxed()),
        (REQUIRED[1], || failed_release_sealed_on_tick().boxed()),
        (REQUIRED[2], || release_while_failing().boxed()),
        (REQUIRED[3], || {
            release_pending_when_failing_starts().boxed()
        }),
        (REQUIRED[4], || failed_release_then_stop().boxed()),
        (REQUIRED[5], || {
            failing_stop_seals_rejected_release().boxed()
        }),
        (REQUIRED[6], || final_create_fails().boxed()),
        (REQUIRED[7], || stopped_or_poisoned_keeps_nothing().boxed()),
        (REQUIRED[8], || marker_before_the_answer().boxed()),
        (REQUIRED[9], || marker_at_stop().boxed()),
    ]
}

#[tokio::test(start_paused = true)]
async fn failure_matrix_release() {
    run_matrix(rows(), REQUIRED).await;
}

/// Whether `region` is released after a reopen (appends to it are refused).
async fn released_after_reopen(t: &Bench, region: u64) -> bool {
    let wal = t.open().await;
    let refused = matches!(
        wal.append(vec![(region, b("x"))]).await,
        Err(Error::RegionReleased { .. })
    );
    wal.stop().await.unwrap();
    refused
}

async fn release_is_durable() {
    for mode in [AckMode::Durable, AckMode::Enqueued] {
        let t = Bench::new(
            &format!("rel-durable-{mode:?}"),
            Config {
                ack_mode: mode,
                ..enqueued()
            },
        );
        let wal = t.open().await;
        let ids = wal.append(vec![(1, b("a")), (2, b("b"))]).await.unwrap();
        wal.wait_durable(1, ids[0]).await.unwrap();
        t.faulty.hold_creates(true);
        let w = wal.clone();
        let release = tokio::spawn(async move { w.release_region(1).await });
        within(t.faulty.wait_held(1)).await;
        assert!(
            !release.is_finished(),
            "{mode:?}: returns only once durable"
        );
        t.faulty.hold_creates(false);
        t.faulty.release_all();
        release.await.unwrap().unwrap();
        assert_eq!(t.counter(m::RELEASE_RECORDS_TOTAL), 1);
        assert!(read(&wal, 1).await.is_empty(), "reads as empty");
        assert_eq!(read(&wal, 2).await, ["b"]);
        let err = wal.append(vec![(1, b("c"))]).await.unwrap_err();
        assert!(matches!(err, Error::RegionReleased { region: 1 }), "{err}");
        wal.stop().await.unwrap();
        assert!(released_after_reopen(&t, 1).await, "{mode:?}");
        let reader = WalReader::open(t.storage.clone(), &t.prefix, config())
            .await
            .unwrap();
        assert!(
            !reader.regions().iter().any(|r| r.region == u64::MAX),
            "the release segment is no region"
        );
    }
}

async fn failed_release_sealed_on_tick() {
    // The batch fails, its void (carrying the record) lands: the release
    // returns once the record is durable.
    let t = Bench::new("rel-failed-void", config());
    let wal = t.open().await;
    wal.append(vec![(1, b("a"))]).await.unwrap();
    t.faulty
        .fail_next(Op::Create, "objects/", 1, StorageErrorKind::Transient);
    wal.release_region(1).await.unwrap();
    assert_eq!(t.counter(m::RELEASE_RECORDS_TOTAL), 1);
    wal.stop().await.unwrap();
    assert!(released_after_reopen(&t, 1).await);
    // The void fails too: the release fails, its record stays in the void,
    // which lands after the retry delay.
    let t = Bench::new("rel-failed-tick", config());
    let wal = t.open().await;
    wal.append(vec![(1, b("a"))]).await.unwrap();
    t.faulty
        .fail_next(Op::Create, "objects/", 2, StorageErrorKind::Transient);
    let err = wal.release_region(1).await.unwrap_err();
    assert!(
        matches!(err, Error::Failing { .. }) && err.is_retryable(),
        "{err}"
    );
    assert_eq!(t.counter(m::RELEASE_RECORDS_TOTAL), 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        t.counter(m::RELEASE_RECORDS_TOTAL),
        1,
        "the void landed after the retry delay"
    );
    wal.stop().await.unwrap();
    assert!(released_after_reopen(&t, 1).await);
}

async fn release_while_failing() {
    let t = Bench::new("rel-while-failing", enqueued());
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    wal.append(vec![(1, b("a"))]).await.unwrap();
    within(t.faulty.wait_held(1)).await;
    t.faulty
        .release_with_error(&t.key(2), StorageErrorKind::Transient);
    within(t.faulty.wait_held(1)).await; // the repeat: the store is failing
    for _ in 0..20 {
        let err = wal.release_region(2).await.unwrap_err();
        assert!(
            matches!(err, Error::Failing { .. }) && err.is_retryable(),
            "{err}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(t.counter(m::REJECTED_APPENDS_TOTAL), 20);
    assert_eq!(
        t.faulty.held(),
        vec![t.key(2)],
        "repeated releases did not grow the backlog"
    );
    assert_eq!(t.sequences().await, vec![1], "nothing else was created");
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        t.counter(m::RELEASE_RECORDS_TOTAL),
        1,
        "one coalesced record, after a success"
    );
    assert_eq!(t.counter(m::POISONED_TOTAL), 0);
    wal.stop().await.unwrap();
    assert!(
        released_after_reopen(&t, 2).await,
        "the record is read back"
    );
    assert_eq!(read(&t.open().await, 1).await, ["a"]);
}

async fn release_pending_when_failing_starts() {
    let t = Bench::new("rel-pending", enqueued());
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    wal.append(vec![(1, b("a"))]).await.unwrap();
    within(t.faulty.wait_held(1)).await;
    let w = wal.clone();
    let release = tokio::spawn(async move { w.release_region(1).await });
    within(t.faulty.wait_held(2)).await;
    t.faulty
        .release_with_error(&t.key(2), StorageErrorKind::Transient);
    let err = release.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Failing { .. }), "{err}");
    assert_eq!(t.counter(m::POISONED_TOTAL), 0);
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    wal.wait_durable(1, format::entry_id(2, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        t.counter(m::RELEASE_RECORDS_TOTAL),
        1,
        "the record stayed in the backlog"
    );
    wal.stop().await.unwrap();
    assert!(released_after_reopen(&t, 1).await);
}

async fn failed_release_then_stop() {
    let t = Bench::new("rel-then-stop", slow(config()));
    let wal = t.open().await;
    t.faulty
        .fail_next(Op::Create, "objects/", 2, StorageErrorKind::Transient);
    assert!(wal.release_region(1).await.unwrap_err().is_retryable());
    assert_eq!(t.counter(m::RELEASE_RECORDS_TOTAL), 0);
    // The stop repeats the void, which carries the record.
    wal.stop().await.unwrap();
    assert_eq!(t.counter(m::RELEASE_RECORDS_TOTAL), 1);
    assert!(released_after_reopen(&t, 1).await);
}

async fn failing_stop_seals_rejected_release() {
    let t = Bench::new("rel-failing-stop", enqueued());
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    wal.append(vec![(1, b("a"))]).await.unwrap();
    within(t.faulty.wait_held(1)).await;
    t.faulty
        .release_with_error(&t.key(2), StorageErrorKind::Transient);
    within(t.faulty.wait_held(1)).await;
    assert!(matches!(
        wal.release_region(3).await,
        Err(Error::Failing { .. })
    ));
    let w = wal.clone();
    let stop = tokio::spawn(async move { w.stop().await });
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    stop.await.unwrap().unwrap();
    assert_eq!(t.counter(m::RELEASE_RECORDS_TOTAL), 1);
    assert!(released_after_reopen(&t, 3).await);
    assert_eq!(read(&t.open().await, 1).await, ["a"]);
}

async fn final_create_fails() {
    let t = Bench::new("rel-final-fails", slow(config()));
    let wal = t.open().await;
    // The release's create and its void's fail, then every attempt stop
    // gives the void.
    let attempts = t.config.stop_attempts as usize;
    t.faulty.fail_next(
        Op::Create,
        "objects/",
        2 + attempts,
        StorageErrorKind::Transient,
    );
    assert!(wal.release_region(1).await.is_err());
    let err = wal.stop().await.unwrap_err();
    assert!(matches!(err, Error::Lost { releases: 1, .. }), "{err}");
    assert!(err.to_string().contains("1 release records"), "{err}");
    assert!(
        !released_after_reopen(&t, 1).await,
        "the record was lost, and stop said so"
    );
}

async fn stopped_or_poisoned_keeps_nothing() {
    let t = Bench::new("rel-stopped", config());
    let wal = t.open().await;
    wal.stop().await.unwrap();
    let err = wal.release_region(1).await.unwrap_err();
    assert!(
        err.is_stopped() && err.to_string().contains("keeps no release"),
        "{err}"
    );

    let t = Bench::new("rel-poisoned", config());
    t.open().await.stop().await.unwrap();
    let wal = t.open().await; // epoch 2
    let data = t.first_data_sequence().await;
    let foreign = Object {
        header: Header {
            sequence: data,
            epoch: 2,
            link: Some(Link {
                sequence: 2,
                epoch: 9,
            }),
            reclaim_boundary: 1,
        },
        segments: Vec::new(),
        marks: Vec::new(),
        releases: vec![format::ReleaseRecord {
            region: 9,
            released_through: 1,
        }],
    };
    let bytes = format::encode(&foreign).unwrap();
    t.faulty.inner().create(&t.key(data), bytes).await.unwrap();
    let err = wal.release_region(1).await.unwrap_err();
    assert!(err.is_poisoned(), "{err}");
    let err = wal.release_region(1).await.unwrap_err();
    assert!(
        err.is_poisoned() && err.to_string().contains("not kept"),
        "{err}"
    );
    wal.stop().await.unwrap();
}

/// The release markers under the bench's prefix, as (region, through).
async fn markers(t: &Bench) -> Vec<(u64, u64)> {
    let prefix = crate::storage::keys::Prefix::new(&t.prefix).unwrap();
    t.faulty
        .inner()
        .list(&prefix.released_prefix())
        .await
        .unwrap()
        .iter()
        .filter_map(|m| prefix.parse_released_key(&m.key))
        .collect()
}

async fn marker_before_the_answer() {
    for mode in [AckMode::Durable, AckMode::Enqueued] {
        let t = Bench::new(
            &format!("rel-marker-{mode:?}"),
            Config {
                ack_mode: mode,
                ..enqueued()
            },
        );
        let wal = t.open().await;
        let ids = wal.append(vec![(1, b("a")), (2, b("b"))]).await.unwrap();
        wal.wait_durable(2, ids[1]).await.unwrap();
        // The record's object lands; the marker is held.
        let w = wal.clone();
        let release = tokio::spawn(async move { w.release_region(1).await });
        within(async {
            while t.counter(m::RELEASE_RECORDS_TOTAL) == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        t.faulty.hold_creates(true);
        let w = wal.clone();
        let again = tokio::spawn(async move { w.release_region(2).await });
        within(t.faulty.wait_held(1)).await; // the record of region 2
        t.faulty.release_all();
        within(t.faulty.wait_held(1)).await; // its marker
        assert!(
            t.faulty.held()[0].contains("/released/"),
            "{:?}",
            t.faulty.held()
        );
        assert!(!again.is_finished(), "{mode:?}: answered before its marker");
        t.faulty.hold_creates(false);
        t.faulty.release_all();
        within(release).await.unwrap().unwrap();
        within(again).await.unwrap().unwrap();
        assert_eq!(
            markers(&t).await,
            [(1, ids[0]), (2, ids[1])],
            "{mode:?}: one marker each, through the region's last id"
        );
        // A marker that keeps failing: the record is durable, the answer
        // retryable; the next tick makes the marker.
        let three = wal.append(vec![(3, b("c"))]).await.unwrap()[0];
        let attempts = t.config.stop_attempts as usize;
        t.faulty.fail_next(
            Op::Create,
            "/released/",
            attempts,
            StorageErrorKind::Transient,
        );
        let err = within(wal.release_region(3)).await.unwrap_err();
        assert!(
            err.is_retryable() && err.to_string().contains("is durable"),
            "{err}"
        );
        assert!(!markers(&t).await.iter().any(|(r, _)| *r == 3));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            markers(&t).await.contains(&(3, three)),
            "{mode:?}: made on a later tick"
        );
        wal.stop().await.unwrap();
        assert!(released_after_reopen(&t, 3).await, "{mode:?}");
    }
}

async fn marker_at_stop() {
    // A marker in flight when the stop comes: the stop waits for it.
    let t = Bench::new("rel-marker-stop", config());
    let wal = t.open().await;
    wal.append(vec![(1, b("a"))]).await.unwrap();
    t.faulty.set_latency(Op::Create, Duration::from_millis(500));
    let w = wal.clone();
    let release = tokio::spawn(async move { w.release_region(1).await });
    within(async {
        while t.counter(m::RELEASE_RECORDS_TOTAL) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    within(wal.stop()).await.unwrap();
    t.faulty.clear_faults();
    within(release).await.unwrap().unwrap();
    assert_eq!(markers(&t).await.len(), 1, "made before the stop returned");

    // A marker the stop cannot make: not a loss (its record is durable),
    // and the next open makes it before its start object.
    let t = Bench::new("rel-marker-stop-fails", config());
    let wal = t.open().await;
    wal.append(vec![(1, b("a"))]).await.unwrap();
    t.faulty.fail_next(
        Op::Create,
        "/released/",
        usize::MAX,
        StorageErrorKind::Transient,
    );
    assert!(wal.release_region(1).await.unwrap_err().is_retryable());
    within(wal.stop()).await.unwrap();
    assert!(markers(&t).await.is_empty());
    t.faulty.clear_faults();
    assert!(released_after_reopen(&t, 1).await);
    assert_eq!(markers(&t).await.len(), 1, "the open made it");
}
