//! Garbage collection: what it deletes, what it never deletes, and how it
//! meets reads, failures and restarts.

use std::time::Duration;

use crate::format;
use crate::metrics as m;
use crate::storage::fault::Op;
use crate::storage::{ObjectStorage, StorageErrorKind};
use crate::Error;
use crate::Storage;

use super::*;

/// The seed's scenario: A and B write, B is released, the process
/// restarts, only A re-establishes its watermark and flushes; the objects
/// holding only flushed and released entries are deleted, and a reopen
/// replays exactly A's unflushed entries.
#[tokio::test]
async fn a_released_region_never_pins_collection_after_a_restart() {
    let t = Bench::new("c-seed", config());
    let wal = t.open().await;
    let first = wal.append(vec![(1, b("a1")), (2, b("b1"))]).await.unwrap();
    wal.append(vec![(1, b("a2")), (2, b("b2"))]).await.unwrap();
    wal.release_region(2).await.unwrap();
    wal.stop().await.unwrap();
    let before = t.sequences().await;
    assert!(before.contains(&2) && before.contains(&3), "{before:?}");

    let wal = t.open().await;
    // The engine re-establishes A's flushed id; B's comes from its release.
    wal.obsolete(1, first[0]).await.unwrap();
    wal.append(vec![(1, b("a3"))]).await.unwrap();
    wal.stop().await.unwrap();
    let after = t.sequences().await;
    assert!(
        !after.contains(&2),
        "only flushed and released entries: collected ({after:?})"
    );
    assert!(after.contains(&3), "a2 is unflushed: kept ({after:?})");
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await, ["a2", "a3"]);
    assert!(read(&wal, 2).await.is_empty());
    wal.stop().await.unwrap();
}

/// Without the release record the same restart pins everything: the test
/// above can fail.
#[tokio::test]
async fn an_unreleased_region_pins_collection() {
    let t = Bench::new("c-pinned", config());
    let wal = t.open().await;
    let first = wal.append(vec![(1, b("a1")), (2, b("b1"))]).await.unwrap();
    wal.stop().await.unwrap();
    let wal = t.open().await;
    wal.obsolete(1, first[0]).await.unwrap();
    wal.append(vec![(1, b("a3"))]).await.unwrap();
    wal.stop().await.unwrap();
    assert!(
        t.sequences().await.contains(&2),
        "b1 is live and pins its object"
    );
}

#[tokio::test(start_paused = true)]
async fn collection_never_deletes_an_unflushed_entry_and_catches_up_when_idle() {
    let t = Bench::new("c-idle", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    let b2 = wal.append(vec![(2, b("b"))]).await.unwrap();
    let c = wal.append(vec![(1, b("c"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    // Nothing more is written: the idle tick writes one empty object that
    // carries the new boundary (region 2's entry still pins its object).
    tokio::time::sleep(Duration::from_millis(100)).await;
    wal.stop().await.unwrap();
    let seqs = t.sequences().await;
    let (sa, sb, sc) = (
        format::sequence_of(a[0]),
        format::sequence_of(b2[0]),
        format::sequence_of(c[0]),
    );
    assert!(!seqs.contains(&sa), "a is flushed: collected ({seqs:?})");
    assert!(
        seqs.contains(&sb) && seqs.contains(&sc),
        "unflushed: kept ({seqs:?})"
    );
    assert!(
        t.counter(m::DELETED_OBJECTS_TOTAL) >= 2,
        "the start object and a's object"
    );
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await, ["c"]);
    assert_eq!(read(&wal, 2).await, ["b"]);
    wal.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_idle_store_writes_nothing_when_nothing_would_be_freed() {
    let t = Bench::new("c-idle-nothing", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a")), (2, b("b"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap(); // region 2 still pins the object
    let creates = t.faulty.counts().create.requests;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        t.faulty.counts().create.requests,
        creates,
        "no empty object"
    );
    wal.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_delete_is_counted_and_retried() {
    let t = Bench::new("c-delete-retry", config());
    let wal = t.open().await;
    t.faulty
        .fail_next(Op::Delete, "objects/", 1, StorageErrorKind::Transient);
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    wal.append(vec![(2, b("b"))]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(t.counter(m::FAILED_DELETES_TOTAL), 1);
    wal.stop().await.unwrap();
    let seqs = t.sequences().await;
    assert!(
        !seqs.contains(&1) && !seqs.contains(&2),
        "retried later: {seqs:?}"
    );
}

#[tokio::test]
async fn a_read_skips_an_object_collected_under_it_but_fails_on_any_other_missing_object() {
    let inner = Storage::new(crate::storage::MemoryStorage::new());
    // Epoch 1 writes sequence 2 first: the read of that object is gated.
    let gate = std::sync::Arc::new(GateReads::new(
        inner.clone(),
        "c-read-deleted/objects/00000000000000000002.wal".into(),
    ));
    let t = Bench::on(Storage::from_arc(gate.clone()), "c-read-deleted", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    assert_eq!(format::sequence_of(a[0]), 2);
    let later = wal.append(vec![(1, b("later"))]).await.unwrap();
    // The read has its page of segments and waits at the fetch of a's object
    // while a is flushed and its object collected.
    let w = wal.clone();
    let reading = tokio::spawn(async move { try_read(&w, 1, 0).await });
    within(gate.arrived.notified()).await;
    wal.obsolete(1, a[0]).await.unwrap();
    wal.append(vec![(2, b("carrier"))]).await.unwrap();
    for _ in 0..10_000 {
        if inner.read(&t.key(2), 0..1).await.is_err() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        inner
            .read(&t.key(2), 0..1)
            .await
            .unwrap_err()
            .is_not_found(),
        "collected"
    );
    gate.gate.add_permits(1);
    let entries = reading.await.unwrap().unwrap();
    assert_eq!(entries.len(), 1, "the collected object is skipped");
    assert_eq!(entries[0].id, later[0]);
    // A missing object that collection did not delete fails the read.
    let key = t.key(format::sequence_of(later[0]));
    inner.delete(&key).await.unwrap();
    let err = try_read(&wal, 1, 0).await.unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    wal.stop().await.unwrap();
}

/// A frozen fixture with release records, decoded by the recovery path,
/// seeds the watermarks of the released regions.
#[tokio::test]
async fn a_fixture_with_release_records_seeds_the_watermarks() {
    let t = Bench::new("c-fixture", config());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("compatibility/v1");
    // The two fixtures form a chain 5 <- 6 above an object 4 they link to.
    let base = format::encode(&format::Object {
        header: format::Header {
            sequence: 4,
            epoch: 2,
            link: None,
            reclaim_boundary: 3,
        },
        segments: Vec::new(),
        marks: Vec::new(),
        releases: Vec::new(),
    })
    .unwrap();
    t.faulty.inner().create(&t.key(4), base).await.unwrap();
    for (name, sequence) in [("regions_and_releases", 5), ("releases_only", 6)] {
        let bytes = std::fs::read(dir.join(format!("{name}.wal"))).unwrap();
        t.faulty
            .inner()
            .create(&t.key(sequence), bytes.into())
            .await
            .unwrap();
    }
    let wal = t.open().await;
    for region in [3, 9] {
        let err = wal.append(vec![(region, b("x"))]).await.unwrap_err();
        assert!(
            matches!(err, Error::RegionReleased { .. }),
            "region {region}: {err}"
        );
    }
    assert_eq!(read(&wal, 1).await, ["one", "two"]);
    wal.stop().await.unwrap();
}

/// Regression: a failed pass armed its retry tick and then started the next
/// pass at once, so a delete that kept failing looped without pause.
#[tokio::test(start_paused = true)]
async fn a_failing_delete_is_retried_on_ticks_not_in_a_loop() {
    let t = Bench::new("c-delete-loop", config());
    let wal = t.open().await;
    t.faulty.fail_next(
        Op::Delete,
        "objects/",
        1_000_000,
        StorageErrorKind::Transient,
    );
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    wal.append(vec![(2, b("b"))]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A pass with something to delete lists the objects, then the holds
    // (rfcs/0011): two listings.
    let lists = t.faulty.counts().list.requests;
    assert!(lists <= 40, "{lists} listings in 100 ms of 10 ms ticks");
    assert!(t.counter(m::FAILED_DELETES_TOTAL) >= 2, "retried");
    t.faulty.clear_faults();
    wal.stop().await.unwrap();
}

/// Regression: `wait_durable` compared with the catalog, which forgets a
/// region once its objects are collected, and called a durable entry failed.
#[tokio::test]
async fn wait_durable_still_answers_after_the_entry_was_collected() {
    let t = Bench::new("c-wait-collected", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    wal.append(vec![(2, b("carrier"))]).await.unwrap();
    let key = t.key(format::sequence_of(a[0]));
    for _ in 0..10_000 {
        if t.faulty.inner().read(&key, 0..1).await.is_err() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        t.faulty.inner().read(&key, 0..1).await.is_err(),
        "collected"
    );
    wal.wait_durable(1, a[0]).await.unwrap();
    wal.stop().await.unwrap();
}

/// An idle store that collected everything settles: one tip, no more
/// writes. (The loop of empty objects that a retried collection could start
/// is pinned by `engine_scenario::regressions::failed_deletes_are_retried_later`.)
#[tokio::test(start_paused = true)]
async fn an_idle_store_stops_writing_once_everything_is_collected() {
    let t = Bench::new("c-idle-settles", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let creates = t.faulty.counts().create.requests;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        t.faulty.counts().create.requests,
        creates,
        "settled: no more empty objects"
    );
    wal.stop().await.unwrap();
    // The stop made the flush mark durable in one more object, which frees
    // the old tip; the next open collects it.
    assert_eq!(t.sequences().await, [2, 3]);
    let wal = t.open().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !t.sequences().await.contains(&2),
        "collected at the next open"
    );
    assert!(read(&wal, 1).await.is_empty(), "the durable mark hides a");
    wal.stop().await.unwrap();
}

/// A user who marked entries obsolete and then flushed found them replayed
/// after a crash: `flush` sealed nothing when no entry was waiting, so the
/// marks stayed in memory until the next append.
#[tokio::test]
async fn flush_makes_pending_flush_marks_durable() {
    let t = Bench::new("c-flush-marks", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a")), (2, b("b"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    let before = t.faulty.counts().create.requests;
    wal.flush().await.unwrap();
    assert_eq!(
        t.faulty.counts().create.requests,
        before + 1,
        "the marks rode in one object of their own"
    );
    drop(wal); // a crash: no stop
    let wal = t.open().await;
    assert!(read(&wal, 1).await.is_empty(), "the durable mark hides a");
    assert_eq!(read(&wal, 2).await.len(), 1, "b is not marked");
    wal.stop().await.unwrap();
}

/// The model test found a stop that answered `Ok` after it gave up on the
/// object carrying the flush marks: the obsolete entries replayed after the
/// restart although the clean stop promised everything durable.
#[tokio::test]
async fn a_stop_that_gives_up_on_flush_marks_reports_them_lost() {
    let t = Bench::new(
        "c-stop-marks",
        Config {
            stop_attempts: 1,
            ..config()
        },
    );
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    wal.obsolete(1, a[0]).await.unwrap();
    t.faulty
        .fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    let err = wal.stop().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                entries: 0,
                releases: 0,
                marks: 1,
                ..
            }
        ),
        "{err}"
    );
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await.len(), 1, "the mark is not durable");
    wal.stop().await.unwrap();
}
