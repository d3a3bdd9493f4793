//! Unit tests of the fault-injecting wrapper.

use super::*;
use crate::storage::MemoryStorage;

fn faulty() -> FaultyStorage {
    FaultyStorage::new(Storage::new(MemoryStorage::new()))
}

#[tokio::test]
async fn fail_next_applies_to_matching_keys_only_and_runs_out() {
    let f = faulty();
    f.fail_next(Op::Create, "bad", 2, StorageErrorKind::Permanent);
    let s = f.storage();
    assert_eq!(
        s.create("good", Bytes::from_static(b"a")).await.unwrap(),
        Created::New
    );
    for _ in 0..2 {
        let e = s.create("bad", Bytes::from_static(b"b")).await.unwrap_err();
        assert_eq!(e.kind(), StorageErrorKind::Permanent);
    }
    assert_eq!(
        s.create("bad", Bytes::from_static(b"b")).await.unwrap(),
        Created::New
    );
    let c = f.counts().create;
    assert_eq!((c.requests, c.failures, c.bytes), (4, 2, 2));
    // Injected failures never reach the inner store.
    assert_eq!(f.inner().list("").await.unwrap().len(), 2);
}

#[tokio::test]
async fn lost_response_lands_the_object() {
    let f = faulty();
    f.lose_next_create_responses("", 1);
    let e = f.create("k", Bytes::from_static(b"x")).await.unwrap_err();
    assert!(e.is_transient());
    assert_eq!(
        f.create("k", Bytes::from_static(b"y")).await.unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(&f.read("k", 0..1).await.unwrap()[..], b"x");
}

#[tokio::test]
async fn held_creates_release_in_a_chosen_order() {
    let f = faulty();
    f.hold_creates(true);
    let mut tasks = Vec::new();
    for k in ["a", "b", "c"] {
        let s = f.storage();
        tasks.push(tokio::spawn(async move {
            s.create(k, Bytes::from_static(b"v")).await
        }));
        // Arrival order is fixed by waiting for each before the next.
        f.wait_held(tasks.len()).await;
    }
    assert_eq!(f.held(), vec!["a", "b", "c"]);
    assert!(f.inner().list("").await.unwrap().is_empty());
    assert!(f.release_with_error("b", StorageErrorKind::Transient));
    assert!(!f.release("b"));
    assert!(f.release("c"));
    let c = tasks.pop().unwrap().await.unwrap();
    assert_eq!(c.unwrap(), Created::New);
    let b = tasks.pop().unwrap().await.unwrap();
    assert!(b.unwrap_err().is_transient());
    assert_eq!(f.held(), vec!["a"]);
    assert_eq!(f.release_all(), 1);
    assert_eq!(tasks.pop().unwrap().await.unwrap().unwrap(), Created::New);
    let keys: Vec<_> = f
        .inner()
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(keys, vec!["a", "c"]);
}

#[tokio::test]
async fn hold_after_landing_then_fail_keeps_the_object() {
    let f = faulty();
    f.hold_creates_at(Some(HoldPoint::AfterLanded));
    let s = f.storage();
    let t = tokio::spawn(async move { s.create("k", Bytes::from_static(b"v")).await });
    f.wait_held(1).await;
    assert_eq!(f.inner().list("").await.unwrap().len(), 1);
    f.release_with_error("k", StorageErrorKind::Transient);
    assert!(t.await.unwrap().unwrap_err().is_transient());
}

#[tokio::test]
async fn a_cancelled_held_create_leaves_the_list() {
    let f = faulty();
    f.hold_creates(true);
    let s = f.storage();
    let t = tokio::spawn(async move { s.create("k", Bytes::from_static(b"v")).await });
    f.wait_held(1).await;
    t.abort();
    let _ = t.await;
    assert!(f.held().is_empty());
}

#[tokio::test]
async fn corrupt_reads_flip_one_byte_then_stop() {
    let f = faulty();
    f.create("k", Bytes::from_static(&[0u8; 8])).await.unwrap();
    f.corrupt_next_reads("k", 1);
    assert_eq!(
        &f.read("k", 0..8).await.unwrap()[..],
        &[0, 0, 0, 0, 0xFF, 0, 0, 0]
    );
    assert_eq!(&f.read("k", 0..8).await.unwrap()[..], &[0u8; 8]);
    f.corrupt_next_reads_at("k", 1, 6);
    // A read not covering offset 6 is untouched and does not use the rule.
    assert_eq!(&f.read("k", 0..4).await.unwrap()[..], &[0u8; 4]);
    assert_eq!(&f.read("k", 4..8).await.unwrap()[..], &[0, 0, 0xFF, 0]);
    assert_eq!(f.counts().read.bytes, 24);
}

#[tokio::test(start_paused = true)]
async fn latency_uses_tokio_time() {
    let f = faulty();
    f.set_latency(Op::List, Duration::from_secs(5));
    let start = tokio::time::Instant::now();
    f.list("").await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(5));
    f.clear_faults();
    let start = tokio::time::Instant::now();
    f.list("").await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_request_never_answers_until_dropped_and_the_rule_runs_out() {
    let f = faulty();
    let s = f.storage();
    s.create("k", Bytes::from_static(b"x")).await.unwrap();
    f.stall_next(Op::Read, "k", 1);
    let stalled = tokio::time::timeout(Duration::from_secs(3600), s.read("k", 0..1)).await;
    assert!(stalled.is_err(), "a stalled read answered");
    // Only reads of matching keys, and only as many as asked.
    assert_eq!(&s.read("k", 0..1).await.unwrap()[..], b"x");
    f.stall_next(Op::List, "other/", 1);
    assert_eq!(s.list("").await.unwrap().len(), 1);
    let stalled = tokio::time::timeout(Duration::from_secs(1), s.list("other/")).await;
    assert!(stalled.is_err());
    assert_eq!(f.counts().read.requests, 2);
}
