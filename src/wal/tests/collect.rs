//! Garbage collection: what it deletes, what it never deletes, and how it
//! meets reads, failures and restarts.

use std::time::Duration;

use crate::format;
use crate::metrics as m;
use crate::storage::fault::Op;
use crate::storage::{ObjectStorage, StorageErrorKind};
use crate::Error;

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

#[tokio::test(start_paused = true)]
async fn a_read_skips_an_object_collected_under_it_but_fails_on_any_other_missing_object() {
    let t = Bench::new("c-read-deleted", config());
    let wal = t.open().await;
    let a = wal.append(vec![(1, b("a"))]).await.unwrap();
    let later = wal.append(vec![(1, b("later"))]).await.unwrap();
    // The read learns the segments, then waits 50 ms before each fetch;
    // meanwhile the entries of a are flushed and a's object collected.
    t.faulty.set_latency(Op::Read, Duration::from_millis(50));
    let w = wal.clone();
    let reading = tokio::spawn(async move { try_read(&w, 1, 0).await });
    tokio::task::yield_now().await;
    wal.obsolete(1, a[0]).await.unwrap();
    wal.append(vec![(2, b("carrier"))]).await.unwrap();
    let entries = reading.await.unwrap().unwrap();
    assert!(t.counter(m::DELETED_OBJECTS_TOTAL) >= 1);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].id, later[0]);
    t.faulty.set_latency(Op::Read, Duration::ZERO);
    // A missing object that collection did not delete fails the read.
    let key = t.key(format::sequence_of(later[0]));
    t.faulty.inner().delete(&key).await.unwrap();
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
