//! The log store's ordinary behaviour: append, read, obsolete, reopen, stop.

use bytes::Bytes;
use objwal::format::{self, MAX_POSITION};
use objwal::{Config, Error, ObjectStorage, WalReader};

use crate::common::*;

#[tokio::test]
async fn appended_entries_replay_in_order_after_a_reopen() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    let ids = wal
        .append(vec![(1, b("a1")), (2, b("b1")), (1, b("a2"))])
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(format::sequence_of(ids[0]), format::sequence_of(ids[1]));
    assert!(ids[2] > ids[0], "ids of a region increase");
    let more = wal.append(vec![(1, b("a3"))]).await.unwrap();
    assert!(more[0] > ids[2]);
    assert_eq!(payloads(&read_all(&wal, 1, 0).await), ["a1", "a2", "a3"]);
    assert_eq!(payloads(&read_all(&wal, 2, 0).await), ["b1"]);
    assert_eq!(payloads(&read_all(&wal, 1, ids[2]).await), ["a2", "a3"]);
    assert!(read_all(&wal, 3, 0).await.is_empty());
    assert_eq!(wal.latest_entry_id(1), more[0]);
    assert_eq!(wal.latest_entry_id(3), 0);
    wal.stop().await.unwrap();

    let wal = open(&storage, test_config()).await;
    assert_eq!(payloads(&read_all(&wal, 1, 0).await), ["a1", "a2", "a3"]);
    assert_eq!(payloads(&read_all(&wal, 2, 0).await), ["b1"]);
    assert_eq!(wal.latest_entry_id(1), more[0]);
    let next = wal.append(vec![(1, b("a4"))]).await.unwrap();
    assert!(next[0] > more[0], "ids keep increasing across lives");
    wal.stop().await.unwrap();

    let reader = WalReader::open(storage.clone(), "t", Config::default())
        .await
        .unwrap();
    let regions: Vec<_> = reader.regions().iter().map(|r| r.region).collect();
    assert_eq!(regions, vec![1, 2]);
    let mut stream = Box::pin(reader.read(1, 0));
    let mut seen = Vec::new();
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        seen.push(e.unwrap().data);
    }
    assert_eq!(seen.len(), 4);
}

#[tokio::test]
async fn obsolete_hides_entries_and_raises_the_next_sequence() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    let ids = wal.append(vec![(1, b("x")), (1, b("y"))]).await.unwrap();
    wal.obsolete(1, ids[0]).await.unwrap();
    assert_eq!(payloads(&read_all(&wal, 1, 0).await), ["y"]);
    // A watermark never moves down.
    wal.obsolete(1, 0).await.unwrap();
    assert_eq!(payloads(&read_all(&wal, 1, 0).await), ["y"]);
    // A watermark from a previous life far ahead raises the next sequence.
    let far = format::entry_id(1000, 5);
    wal.obsolete(7, far).await.unwrap();
    let next = wal.append(vec![(7, b("z"))]).await.unwrap();
    assert!(next[0] > far, "{} must be above {far}", next[0]);
    assert_eq!(format::sequence_of(next[0]), 1001);
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn bad_arguments_get_clear_errors() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    let err = wal.append(vec![(u64::MAX, b("x"))]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("reserved"), "{err}");
    assert!(matches!(
        wal.obsolete(u64::MAX, 1).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        wal.obsolete(1, u64::MAX).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(wal.append(vec![]).await.unwrap(), Vec::<u64>::new());
    let too_many: Vec<_> = (0..=MAX_POSITION).map(|_| (3, Bytes::new())).collect();
    let err = wal.append(too_many).await.unwrap_err();
    assert!(err.to_string().contains("positions"), "{err}");
    for prefix in ["", "/abs", "a//b", "a/../b"] {
        let err = objwal::Wal::open(storage.clone(), prefix, test_config())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{prefix}: {err}"
        );
    }
    let bad = Config {
        max_inflight_creates: 0,
        ..Config::default()
    };
    let err = objwal::Wal::open(storage.clone(), "t2", bad)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "max_inflight_creates",
                ..
            }
        ),
        "{err}"
    );
    wal.stop().await.unwrap();
}

// Paused time: the flush timer fires only once both appends wait, so the
// second append meets the first one's open batch.
#[tokio::test(start_paused = true)]
async fn a_region_running_out_of_positions_seals_the_batch_first() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    let first: Vec<_> = (0..MAX_POSITION - 1).map(|_| (3, Bytes::new())).collect();
    let (a, b2) = tokio::join!(wal.append(first), async {
        tokio::task::yield_now().await;
        wal.append(vec![(3, b("last")), (3, b("over"))]).await
    });
    let a = a.unwrap();
    let b2 = b2.unwrap();
    assert_eq!(format::position_of(*a.last().unwrap()), MAX_POSITION - 1);
    assert_eq!(
        format::position_of(b2[0]),
        1,
        "the second append opened a new batch"
    );
    assert!(format::sequence_of(b2[0]) > format::sequence_of(a[0]));
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn an_append_larger_than_a_batch_is_admitted_whole() {
    let storage = faulty_memory().storage();
    let config = Config {
        max_batch_bytes: 4096,
        max_unpersisted_bytes: 4096,
        ..test_config()
    };
    let wal = open(&storage, config).await;
    let big = Bytes::from(vec![7u8; 10_000]);
    let ids = wal
        .append(vec![(1, big.clone()), (1, b("tail"))])
        .await
        .unwrap();
    assert_eq!(format::sequence_of(ids[0]), format::sequence_of(ids[1]));
    let entries = read_all(&wal, 1, 0).await;
    assert_eq!(entries[0].data, big);
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn stop_is_idempotent_and_later_calls_are_refused() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    wal.append(vec![(1, b("x"))]).await.unwrap();
    let clone = wal.clone();
    wal.stop().await.unwrap();
    clone.stop().await.unwrap();
    assert!(clone
        .append(vec![(1, b("y"))])
        .await
        .unwrap_err()
        .is_stopped());
    assert!(clone.obsolete(1, 1).await.unwrap_err().is_stopped());
}

#[tokio::test]
async fn dropping_every_handle_ends_the_actor_like_a_crash() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    let ids = wal.append(vec![(1, b("kept"))]).await.unwrap();
    drop(wal);
    // The prefix opens again (a new epoch) and keeps what was acknowledged.
    let wal = open(&storage, test_config()).await;
    let entries = read_all(&wal, 1, 0).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].id, ids[0]);
    wal.stop().await.unwrap();
    let listed: Vec<String> = storage
        .list("t/objects/")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    // The first start object was collected once the batch carried a higher
    // boundary; the batch, the reopen's settle marker (its walk stopped at
    // 3) and its start object a window of 64 above it remain.
    assert_eq!(
        listed,
        [
            "t/objects/00000000000000000002.wal",
            "t/objects/00000000000000000003.wal",
            "t/objects/00000000000000000067.wal"
        ]
    );
}

/// Regression: a request queued behind `stop` was left in the channel when
/// the actor ended, and its caller (here a read) waited forever.
#[tokio::test]
async fn a_request_queued_behind_stop_is_answered() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    wal.append(vec![(1, b("x"))]).await.unwrap();
    // On this single-threaded runtime both requests are queued before the
    // actor runs again: the stop first, the read's page request behind it.
    let stopper = wal.clone();
    let stop = tokio::spawn(async move { stopper.stop().await });
    let reader = wal.clone();
    let read = tokio::spawn(async move { try_read_all(&reader, 1, 0).await });
    stop.await.unwrap().unwrap();
    let err = read.await.unwrap().unwrap_err();
    assert!(err.is_stopped(), "{err}");
    assert!(wal
        .append(vec![(1, b("y"))])
        .await
        .unwrap_err()
        .is_stopped());
    wal.stop().await.unwrap();
}
