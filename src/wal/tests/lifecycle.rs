//! Issue 12, items 5 and 6: a stop that drains in both modes, `flush`, and
//! the retry settings that decide how often a failing create is repeated.

use std::time::Duration;

use crate::config::AckMode;
use crate::storage::fault::Op;
use crate::storage::StorageErrorKind;
use crate::EarlySeals;

use super::*;

/// A deploy's restart used to fail the callers of the open batch and of
/// creates not yet started with `Stopped`: now stop uploads and
/// acknowledges them.
#[tokio::test(start_paused = true)]
async fn a_durable_stop_acknowledges_the_open_batch_and_creates_not_yet_started() {
    let t = Bench::new(
        "l-stop-drains",
        Config {
            max_inflight_creates: 1,
            ..config()
        },
    );
    let wal = t.open().await;
    t.faulty.hold_creates(true);
    let mut appends = Vec::new();
    for n in 0..3 {
        let w = wal.clone();
        appends.push(tokio::spawn(async move {
            w.append(vec![(1, b(&format!("e{n}")))]).await
        }));
        if n == 0 {
            within(t.faulty.wait_held(1)).await; // the one slot is busy
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await; // the rest wait: sealed or open
    assert_eq!(t.faulty.held().len(), 1);
    let w = wal.clone();
    let stop = tokio::spawn(async move { w.stop().await });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(!stop.is_finished(), "stop waits for what was admitted");
    t.faulty.hold_creates(false);
    t.faulty.release_all();
    let mut acked = Vec::new();
    for append in appends {
        acked.extend(within(append).await.unwrap().unwrap());
    }
    within(stop).await.unwrap().unwrap();
    assert_eq!(replays(&t.storage, &t.prefix, 1).await, acked);
}

/// A durable stop repeats a failed create within `stop_attempts` and still
/// acknowledges; the same failures outside a stop fail the batch at once.
#[tokio::test(start_paused = true)]
async fn a_durable_stop_repeats_a_failed_create_within_its_budget() {
    let t = Bench::new("l-stop-repeats", slow(config()));
    let wal = t.open().await;
    let w = wal.clone();
    let append = tokio::spawn(async move { w.append(vec![(1, b("a"))]).await });
    tokio::time::sleep(Duration::from_millis(1)).await; // admitted, not sealed
    t.faulty
        .fail_next(Op::Create, "/objects/", 2, StorageErrorKind::Transient);
    within(wal.stop()).await.unwrap();
    let ids = within(append).await.unwrap().unwrap();
    assert_eq!(replays(&t.storage, &t.prefix, 1).await, ids);
    assert_eq!(t.faulty.counts().create.failures, 2);
}

/// `flush` under concurrent appends: once it returns, everything admitted
/// before it is durable, while appends keep arriving around it.
#[tokio::test(start_paused = true)]
async fn flush_under_concurrent_appends_makes_everything_admitted_before_it_durable() {
    let t = Bench::new(
        "l-flush",
        Config {
            early_seals: EarlySeals::Off,
            flush_interval: Duration::from_secs(3600),
            max_unpersisted_age: Duration::from_secs(7200),
            max_batch_bytes: 4096,
            ack_mode: AckMode::Enqueued,
            ..config()
        },
    );
    let wal = t.open().await;
    let stop_writers = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let wal = wal.clone();
        let stop = stop_writers.clone();
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let id = wal
                    .append(vec![(w, Bytes::from(vec![b'x'; 300]))])
                    .await
                    .unwrap()[0];
                ids.push(id);
                n += 1;
                if n % 3 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            ids
        }));
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    // What the writers were acknowledged so far, then the flush.
    let before: Vec<(RegionId, EntryId)> = (0..4u64)
        .map(|r| (r, wal.latest_entry_id(r)))
        .filter(|(_, id)| *id != 0)
        .collect();
    assert!(!before.is_empty(), "the writers appended before the flush");
    within(wal.flush()).await.unwrap();
    for (region, id) in &before {
        // Durable now: the barrier answers at once, without waiting.
        let barrier = wal.wait_durable(*region, *id);
        let answered = tokio::time::timeout(Duration::from_millis(1), barrier).await;
        assert!(
            matches!(answered, Ok(Ok(()))),
            "entry {id} of region {region}, admitted before the flush, is not durable"
        );
    }
    stop_writers.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut all = Vec::new();
    for (region, writer) in writers.into_iter().enumerate() {
        all.push((region as RegionId, within(writer).await.unwrap()));
    }
    within(wal.stop()).await.unwrap();
    for (region, ids) in all {
        assert_eq!(
            replays(&t.storage, &t.prefix, region).await,
            ids,
            "region {region}"
        );
    }
}

/// `stop_attempts` decides how many times a stop repeats a failing create:
/// exactly that many creates, then the backlog is given up as `Lost`.
#[tokio::test(start_paused = true)]
async fn the_stop_attempts_setting_changes_how_many_times_a_failing_create_is_repeated() {
    for attempts in [1u32, 2, 6] {
        let t = Bench::new(
            "l-stop-attempts",
            Config {
                stop_attempts: attempts,
                retry_initial_delay: Duration::from_millis(5),
                ..slow(enqueued())
            },
        );
        let wal = t.open().await;
        wal.append(vec![(1, b("a"))]).await.unwrap();
        t.faulty.reset_counts();
        t.faulty.fail_next(
            Op::Create,
            "/objects/",
            usize::MAX,
            StorageErrorKind::Transient,
        );
        let err = within(wal.stop()).await.unwrap_err();
        assert!(matches!(err, Error::Lost { entries: 1, .. }), "{err}");
        assert_eq!(
            t.faulty.counts().create.requests,
            u64::from(attempts),
            "stop_attempts = {attempts}"
        );
    }
}

/// The retry delays come from the settings: with a longer first delay the
/// failing store repeats its create later.
#[tokio::test(start_paused = true)]
async fn the_retry_delay_setting_spaces_the_repeats_of_a_failing_create() {
    for (delay, expected) in [
        (Duration::from_millis(10), 5),
        (Duration::from_millis(40), 2),
    ] {
        let t = Bench::new(
            "l-retry-delay",
            Config {
                retry_initial_delay: delay,
                retry_max_delay: delay,
                ..slow(enqueued())
            },
        );
        let wal = t.open().await;
        t.faulty.reset_counts(); // the fence and the start object
        t.faulty.fail_next(
            Op::Create,
            "/objects/",
            usize::MAX,
            StorageErrorKind::Transient,
        );
        wal.append(vec![(1, b("a"))]).await.unwrap();
        let w = wal.clone();
        let flush = tokio::spawn(async move { w.flush().await });
        tokio::time::sleep(Duration::from_millis(45)).await;
        // The first attempt at once, then one every `delay`.
        assert_eq!(
            t.faulty.counts().create.requests,
            expected,
            "retry_initial_delay = {delay:?}"
        );
        t.faulty.clear_faults();
        within(flush).await.unwrap().unwrap();
        wal.stop().await.unwrap();
    }
}
