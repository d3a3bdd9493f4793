//! Attacks on issue 30 items 1 to 3: a move by following
//! (`Wal::take_over` then `finish`, rfcs/0009 decision 6) and "a release
//! is forever" (rfcs/0005 decision 12).
//!
//! Each test is a history that tries to make `finish` answer `Ok` while an
//! entry the other node acknowledged is neither imported nor in a hole, a
//! released region come back (appends accepted, not reported released, a
//! follower that does not end it, a takeover that moves it), or a call
//! hang on a stalled store with `request_timeout` set. A history that broke
//! the promise is kept `#[ignore = "defect: ..."]` with the mechanism in
//! its doc comment; the others stay as regression tests.
//!
//! Deterministic: paused time on the memory backend, the fault wrapper
//! (a follower gets its own wrapper, its "eyes", so that its reads can
//! fail or be corrupted alone), and a deadline on every wait (`within`).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::keys::Prefix;
use objwal::storage::StorageErrorKind;
use objwal::{Config, DamagePolicy, Error, ObjectStorage, RegionId, Storage, Wal, WalReader};

use crate::common::*;

/// The region moved or released.
const R: RegionId = 7;
/// A region that goes on.
const A: RegionId = 1;

/// Short intervals, so that paused-time tests take few steps.
fn config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        follow_interval: Duration::from_millis(10),
        follow_max_interval: Duration::from_millis(100),
        ..Config::default()
    }
}

/// The sequences of the objects under `<prefix>/objects/`.
async fn listed(storage: &Storage, prefix: &str) -> BTreeSet<u64> {
    listed_objects(storage, prefix).await
}

/// The objects of `prefix` carrying a release record, as a reader sees
/// them now.
async fn carriers(storage: &Storage, prefix: &str) -> BTreeSet<u64> {
    let reader = WalReader::open(storage.clone(), prefix, config())
        .await
        .unwrap();
    reader
        .objects()
        .iter()
        .filter(|o| !o.releases.is_empty())
        .map(|o| o.sequence)
        .collect()
}

/// The key of object `sequence` of `prefix`.
fn object_key(prefix: &str, sequence: u64) -> String {
    Prefix::new(prefix).unwrap().object_key(sequence)
}

/// The object offset of the last byte of the release segment of the
/// object at `key` (its records, which carry a CRC of their own).
async fn release_segment_byte(storage: &Storage, key: &str) -> u64 {
    records_byte(storage, key, true).await
}

/// The object offset of the last byte of the release segment (`release`)
/// or of the marks segment of the object at `key`.
async fn records_byte(storage: &Storage, key: &str, release: bool) -> u64 {
    let size = storage
        .list(key)
        .await
        .unwrap()
        .iter()
        .find(|m| m.key == key)
        .unwrap()
        .size;
    let bytes = storage.read(key, 0..size).await.unwrap();
    let objwal::format::TailDecode::Complete(tail) =
        objwal::format::decode_tail(&bytes, size).unwrap()
    else {
        panic!("a small object's tail decodes whole");
    };
    let index = if release {
        tail.release_segment().expect("a release segment")
    } else {
        tail.marks_segment().expect("a marks segment")
    };
    index.offset + index.len - 1
}

/// A follower's view of `storage` (reads that fail or are corrupted alone)
/// and a reader on it, opened now, that quarantines damaged objects.
async fn eyes(storage: &Storage, prefix: &str) -> (FaultyStorage, WalReader) {
    let eyes = FaultyStorage::new(storage.clone());
    let reader_config = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        // The eyes fail every read for a while on purpose.
        request_timeout: None,
        ..config()
    };
    let reader = within(WalReader::open(eyes.storage(), prefix, reader_config))
        .await
        .unwrap();
    (eyes, reader)
}

/// Releases `R` on `wal` while `eyes` cannot read, then makes the object
/// carrying the release record damaged as `eyes` sees it (its release
/// segment corrupted on every read, which the writer never makes again)
/// and lets `eyes` read again. Returns the carrier's key.
async fn release_behind_a_damaged_carrier(
    wal: &Wal,
    storage: &Storage,
    eyes: &FaultyStorage,
) -> String {
    eyes.fail_next(Op::Read, "", usize::MAX, StorageErrorKind::Transient);
    within(wal.release_region(R)).await.unwrap();
    let carriers = carriers(storage, "a").await;
    assert_eq!(carriers.len(), 1, "{carriers:?}");
    let carrier = object_key("a", *carriers.first().unwrap());
    let offset = release_segment_byte(storage, &carrier).await;
    eyes.clear_faults();
    eyes.corrupt_next_reads_at(&carrier, usize::MAX, offset);
    carrier
}

/// Found by the attack on issue 30 (rfcs/0005 decision 12, G8: a release
/// "ends every follower"); fixed: a damaged object on the chain lists the
/// markers, and again once a boundary passes it. History: a follower of R and A (quarantining damaged objects) runs; A's
/// writer releases R; the object carrying the release record is damaged
/// as the follower reads it (its release segment fails its CRC on every
/// read); the writer goes on writing A. The follower takes the damaged
/// object in as a placeholder and yields A's later entries, but never ends
/// R with `RegionReleased`. Mechanism as found: `take_in_damaged`
/// (`engine/objects.rs`) builds the placeholder with no marks and no
/// releases, ignoring `Damaged::records`, and (unlike a collected gap or a
/// backfill's collected object) does not call `releases_may_be_missed`, so
/// the release markers are never listed; the carrier's footer decodes and
/// holds no segment of R, so not even a hole of R is booked. The follower
/// then waits on R for ever as on a quiet region.
#[tokio::test(start_paused = true)]

async fn a_follower_past_a_damaged_release_carrier_ends_the_region() {
    let storage = faulty_memory().storage();
    let wal = Wal::open(storage.clone(), "a", config()).await.unwrap();
    wal.append(vec![(R, b("r")), (A, b("a"))]).await.unwrap();
    let (eyes, reader) = eyes(&storage, "a").await;
    let mut follower = reader.follow([(R, 0), (A, 0)]);
    for _ in 0..2 {
        let item = within(follower.next()).await;
        assert!(matches!(item, Some(Ok(_))), "{item:?}");
    }
    let carrier = release_behind_a_damaged_carrier(&wal, &storage, &eyes).await;
    let after = wal.append(vec![(A, b("after"))]).await.unwrap()[0];
    let mut released = false;
    within(async {
        loop {
            match follower.next().await {
                Some(Ok(entry)) if entry.region == A && entry.id == after => break,
                Some(Ok(entry)) => panic!("{entry:?}"),
                Some(Err(Error::RegionReleased { region: R })) => released = true,
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    assert!(
        released,
        "R was released (its record in {carrier}, its marker durable) before A's entry {after} \
         landed, yet the follower yielded {after} and still follows R: {:?}",
        follower.positions()
    );
    wal.stop().await.unwrap();
}

/// Regression (rfcs/0009 decision 6, rfcs/0005 decision 12: "a release
/// met while following makes `Takeover::finish` return it"). History: B
/// takes R over from A by following; A writes R, then releases R, and the
/// object carrying the release record is damaged as B's follower reads it
/// (its release segment fails its CRC on every read); A writes on and
/// flushes. `finish` answers `RegionReleased` and moves nothing. It holds
/// here because the follower reaches the carrier through the catch-up's
/// listing, which books the damaged carrier (below A's reclaim boundary)
/// as a collected gap and so lists the markers; a follower that polls it
/// instead does not learn the release
/// (`a_follower_past_a_damaged_release_carrier_ends_the_region`).
#[tokio::test(start_paused = true)]
async fn a_takeover_past_a_damaged_release_carrier_does_not_move_the_region() {
    let storage = faulty_memory().storage();
    let a = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let (eyes, reader) = eyes(&storage, "a").await;
    let b_node = Wal::open(storage.clone(), "b", config()).await.unwrap();
    let takeover = b_node.take_over(&reader, R, 0).unwrap();
    let mut last = 0;
    for i in 0..3 {
        last = a.append(vec![(R, b(&format!("r{i}")))]).await.unwrap()[0];
    }
    within(async {
        while takeover.progress().position < last {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let carrier = release_behind_a_damaged_carrier(&a, &storage, &eyes).await;
    // The follower reaches the next key (so it decided on the carrier)
    // before the switch: its first read there fails once, which says so.
    let sequence: u64 = carrier["a/objects/".len()..carrier.len() - 4]
        .parse()
        .unwrap();
    let next = object_key("a", sequence + 1);
    eyes.fail_next(Op::Read, &next, 1, StorageErrorKind::Transient);
    let after = a.append(vec![(A, b("after"))]).await.unwrap()[0];
    assert_eq!(objwal::format::sequence_of(after), sequence + 1);
    within(async {
        while eyes.counts().read.failures == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    a.flush().await.unwrap();
    let finished = within(takeover.finish()).await;
    assert!(
        matches!(finished, Err(Error::RegionReleased { region: R })),
        "A released R while B followed it, yet the switch answered {finished:?}"
    );
    assert_eq!(b_node.latest_entry_id(R), 0, "nothing of R moved to B");
    a.stop().await.unwrap();
    b_node.stop().await.unwrap();
}

/// Regression: a switch across a jump whose object collection emptied.
/// B follows R on A and waits long after a miss; meanwhile A's engine
/// hands in a watermark far above A's ids for region 2 (as an import's
/// floor does), so A's next object carries a jump and R's entry z lands
/// at the key after the jump, far above; A collects the jump's object. The
/// catch-up's poll misses at the emptied key; the listing finds z past the
/// gap, and `finish` moves it with a floor at or above it.
#[tokio::test(start_paused = true)]
async fn a_switch_takes_in_an_entry_past_a_collected_jump() {
    let storage = faulty_memory().storage();
    let a = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let before = a.append(vec![(2, b("before"))]).await.unwrap()[0];
    let slow = Config {
        follow_interval: Duration::from_secs(25),
        follow_max_interval: Duration::from_secs(25),
        ..config()
    };
    let counted = FaultyStorage::new(storage.clone());
    let reader = WalReader::open(counted.storage(), "a", slow).await.unwrap();
    counted.reset_counts();
    let b_node = Wal::open(storage.clone(), "b", config()).await.unwrap();
    let takeover = b_node.take_over(&reader, R, 0).unwrap();
    within(async {
        while counted.counts().read.requests == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let far = objwal::format::entry_id(objwal::format::sequence_of(before) + 500, 1);
    a.obsolete(2, far).await.unwrap();
    let z = a.append(vec![(R, b("z"))]).await.unwrap()[0];
    assert!(
        objwal::format::sequence_of(z) > objwal::format::sequence_of(far),
        "the run jumped: {z}"
    );
    let jump_key = object_key("a", objwal::format::sequence_of(before) + 1);
    within(async {
        loop {
            let listed = storage.list("a/objects/").await.unwrap();
            if !listed.iter().any(|m| m.key == jump_key) {
                break;
            }
            a.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        counted.counts().read.requests,
        1,
        "the follower still waits"
    );
    a.flush().await.unwrap();
    let moved = within(takeover.finish()).await.unwrap();
    assert_eq!(moved.entries, 1, "{moved:?}");
    assert!(moved.floor >= z, "{moved:?}");
    a.release_region(R).await.unwrap();
    a.stop().await.unwrap();
    let got = read_all(&b_node, R, moved.floor + 1).await;
    assert_eq!(payloads(&got), ["z"]);
    b_node.stop().await.unwrap();
}

/// Regression: the switch on a store whose listings stopped answering
/// ends with an error within `request_timeout`'s reach instead of hanging
/// (the catch-up's listing, issue 30 item 1, is the new request).
#[tokio::test(start_paused = true)]
async fn a_switch_on_a_store_whose_listings_stall_fails_instead_of_hanging() {
    let storage = faulty_memory().storage();
    let a = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let eyes = FaultyStorage::new(storage.clone());
    let bounded = Config {
        request_timeout: Some(Duration::from_secs(1)),
        ..config()
    };
    let reader = WalReader::open(eyes.storage(), "a", bounded).await.unwrap();
    let b_node = Wal::open(storage.clone(), "b", config()).await.unwrap();
    let takeover = b_node.take_over(&reader, R, 0).unwrap();
    let last = a.append(vec![(R, b("r"))]).await.unwrap()[0];
    within(async {
        while takeover.progress().position < last {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    eyes.stall_next(Op::List, "", usize::MAX);
    a.flush().await.unwrap();
    let finished = within(takeover.finish()).await;
    assert!(
        matches!(&finished, Err(e) if e.is_retryable()),
        "{finished:?}"
    );
    assert_eq!(b_node.latest_entry_id(R), 0, "nothing was appended");
    a.stop().await.unwrap();
    b_node.stop().await.unwrap();
}

/// Regression: a release whose marker creates never answer returns a
/// retryable error within `request_timeout`'s reach (the record is
/// durable, the region refuses appends in this life); repeated once the
/// store answers it is `Ok`, and after a crash the region stays released.
#[tokio::test(start_paused = true)]
async fn a_release_whose_marker_stalls_fails_instead_of_hanging_and_holds() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let bounded = Config {
        request_timeout: Some(Duration::from_secs(1)),
        ..config()
    };
    let wal = Wal::open(storage.clone(), "a", bounded.clone())
        .await
        .unwrap();
    wal.append(vec![(R, b("r"))]).await.unwrap();
    faulty.stall_next(Op::Create, "/released/", usize::MAX);
    let err = within(wal.release_region(R)).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    let refused = wal.append(vec![(R, b("x"))]).await.unwrap_err();
    assert!(matches!(refused, Error::RegionReleased { .. }), "{refused}");
    faulty.clear_faults();
    within(wal.release_region(R)).await.unwrap();
    drop(wal); // a crash
    let wal = Wal::open(storage.clone(), "a", bounded).await.unwrap();
    let refused = wal.append(vec![(R, b("x"))]).await.unwrap_err();
    assert!(matches!(refused, Error::RegionReleased { .. }), "{refused}");
    let rows = wal.regions().await.unwrap();
    assert!(rows.iter().any(|r| r.region == R && r.released), "{rows:?}");
    wal.stop().await.unwrap();
}

/// Regression: a marker create whose response is lost (it landed) is
/// repeated, answered "exists", confirmed by a listing: the release is
/// `Ok`, and once collection deleted the record's object a restart still
/// refuses appends and a new follower ends the region.
#[tokio::test(start_paused = true)]
async fn a_release_whose_marker_response_was_lost_holds_after_collection() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let first = wal.append(vec![(A, b("a"))]).await.unwrap()[0];
    wal.append(vec![(R, b("r"))]).await.unwrap();
    faulty.lose_next_create_responses("/released/", 1);
    within(wal.release_region(R)).await.unwrap();
    let carriers = carriers(&storage, "a").await;
    wal.obsolete(A, first).await.unwrap();
    within(async {
        loop {
            let id = wal.append(vec![(A, b("more"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if listed(&storage, "a").await.is_disjoint(&carriers) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    drop(wal); // a crash
    let wal = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let refused = wal.append(vec![(R, b("x"))]).await.unwrap_err();
    assert!(matches!(refused, Error::RegionReleased { .. }), "{refused}");
    let reader = WalReader::open(storage.clone(), "a", config())
        .await
        .unwrap();
    let mut follower = reader.follow([(R, 0)]);
    let item = within(follower.next()).await;
    assert!(
        matches!(item, Some(Err(Error::RegionReleased { region: R }))),
        "{item:?}"
    );
    wal.stop().await.unwrap();
}

/// Regression: a takeover from a reader opened before R's release, started
/// after collection deleted the release's object (so the reader does not
/// refuse it), ends with `RegionReleased` at the switch: the backfill's
/// collected objects make the follower list the markers.
#[tokio::test(start_paused = true)]
async fn a_takeover_started_after_the_release_was_collected_is_refused_at_the_switch() {
    let storage = faulty_memory().storage();
    let a = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let first = a.append(vec![(A, b("a"))]).await.unwrap()[0];
    a.append(vec![(R, b("r"))]).await.unwrap();
    let reader = WalReader::open(storage.clone(), "a", config())
        .await
        .unwrap();
    within(a.release_region(R)).await.unwrap();
    let carriers = carriers(&storage, "a").await;
    a.obsolete(A, first).await.unwrap();
    within(async {
        loop {
            let id = a.append(vec![(A, b("more"))]).await.unwrap()[0];
            a.obsolete(A, id).await.unwrap();
            if listed(&storage, "a").await.is_disjoint(&carriers) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        !reader.is_released(R),
        "the reader opened before the release"
    );
    let b_node = Wal::open(storage.clone(), "b", config()).await.unwrap();
    let takeover = b_node.take_over(&reader, R, 0).unwrap();
    a.flush().await.unwrap();
    let finished = within(takeover.finish()).await;
    assert!(
        matches!(finished, Err(Error::RegionReleased { region: R })),
        "{finished:?}"
    );
    assert_eq!(b_node.latest_entry_id(R), 0);
    a.stop().await.unwrap();
    b_node.stop().await.unwrap();
}

/// Regression (item 2 with a damaged object): B follows R on A; the object
/// holding R's entry r1 (acknowledged, never flushed) is damaged as B's
/// follower reads it (its marks segment fails its CRC on every read), and
/// the follower's reads fail until A wrote r2 after it. The switch must
/// not answer `Ok` without r1: it moves it, or says `Incomplete`.
#[tokio::test(start_paused = true)]
async fn a_switch_past_a_damaged_object_holding_an_unflushed_entry_is_incomplete() {
    let storage = faulty_memory().storage();
    let a = Wal::open(storage.clone(), "a", config()).await.unwrap();
    let (eyes, reader) = eyes(&storage, "a").await;
    let b_node = Wal::open(storage.clone(), "b", config()).await.unwrap();
    let takeover = b_node.take_over(&reader, R, 0).unwrap();
    let r0 = a.append(vec![(R, b("r0"))]).await.unwrap()[0];
    within(async {
        while takeover.progress().position < r0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    eyes.fail_next(Op::Read, "", usize::MAX, StorageErrorKind::Transient);
    let r1 = a.append(vec![(R, b("r1"))]).await.unwrap()[0];
    let key = object_key("a", objwal::format::sequence_of(r1));
    let offset = records_byte(&storage, &key, false).await;
    let r2 = a.append(vec![(R, b("r2"))]).await.unwrap()[0];
    eyes.clear_faults();
    eyes.corrupt_next_reads_at(&key, usize::MAX, offset);
    a.flush().await.unwrap();
    match within(takeover.finish()).await {
        Ok(moved) => {
            let got = read_all(&b_node, R, moved.floor + 1).await;
            assert_eq!(
                payloads(&got),
                ["r1", "r2"],
                "the switch answered Ok ({moved:?}) without r1 ({r1}, up to {r2})"
            );
        }
        Err(Error::Incomplete { first_id, .. }) => assert!(first_id <= r1),
        Err(other) => panic!("{other:?}"),
    }
    a.stop().await.unwrap();
    b_node.stop().await.unwrap();
}
