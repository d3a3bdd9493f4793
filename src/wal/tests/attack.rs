//! Review 29: adversarial histories against rfcs/0006 (fillers, hedged
//! creates, a second opener racing a live writer, collection under an
//! older writer, lost create responses, damage under quarantine). Each
//! asserts the guarantee, not the route: every entry acknowledged (a
//! durable append that returned `Ok`, an enqueued entry a returned
//! `wait_durable` or `flush` covers) replays after a crash and reopen, or a
//! hole names it; and every wait ends (under `within`).

use std::time::Duration;

use crate::config::{AckMode, HedgeCreates};
use crate::format::{self, Header, Link, Object};
use crate::storage::fault::{FaultyStorage, HoldPoint, Op};
use crate::storage::{MemoryStorage, StorageErrorKind};

use super::*;

fn durable() -> Config {
    Config {
        ack_mode: AckMode::Durable,
        request_timeout: Some(Duration::from_secs(30)),
        ..config()
    }
}

fn key(prefix: &str, sequence: u64) -> String {
    format!("{prefix}/objects/{sequence:020}.wal")
}

/// An older epoch's empty object that is not a settle marker (a failed
/// opener's start object).
fn filler(sequence: u64, epoch: u64, link: (u64, u64)) -> Bytes {
    format::encode(&Object {
        header: Header {
            sequence,
            epoch,
            link: Some(Link {
                sequence: link.0,
                epoch: link.1,
            }),
            reclaim_boundary: link.0,
        },
        segments: Vec::new(),
        marks: Vec::new(),
        releases: Vec::new(),
    })
    .unwrap()
}

async fn highest(storage: &Storage, prefix: &str) -> u64 {
    storage
        .list(&format!("{prefix}/objects/"))
        .await
        .unwrap()
        .iter()
        .filter_map(|m| m.key.rsplit('/').next()?.strip_suffix(".wal")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Every id in `acked` replays from a fresh reader (default policy), or the
/// open fails naming something (never a silent loss).
async fn assert_replays(
    inner: &Storage,
    prefix: &str,
    region: RegionId,
    acked: &[EntryId],
    label: &str,
) {
    let replayed = replays(inner, prefix, region).await;
    for id in acked {
        assert!(
            replayed.contains(id),
            "{label}: acknowledged {id:#x} (sequence {}) does not replay; replayed {:?}",
            format::sequence_of(*id),
            replayed
                .iter()
                .map(|i| format::sequence_of(*i))
                .collect::<Vec<_>>()
        );
    }
}

/// A hedged pair whose first request landed (response held after
/// landing) while a second opener listed and walked: the walk adopts the
/// object, the writer reads its own bytes back and answers `Ok`; both
/// requests held before landing: the walk's marker takes the key and the
/// append is fenced. Either way what returned `Ok` replays.
#[tokio::test(start_paused = true)]
async fn attack_hedged_pair_racing_a_walk() {
    for point in [HoldPoint::AfterLanded, HoldPoint::BeforeInner] {
        let label = format!("{point:?}");
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "atk-hedge-walk";
        let faults = FaultyStorage::new(inner.clone());
        let z = Wal::open(
            faults.storage(),
            prefix,
            Config {
                hedge_creates: HedgeCreates::Budget(1.0),
                ..durable()
            },
        )
        .await
        .unwrap();
        let mut acked = z.append(vec![(1, b("a"))]).await.unwrap();
        let next = format::sequence_of(acked[0]) + 1;
        faults.hold_creates_at(Some(point));
        let appending = tokio::spawn({
            let z = z.clone();
            async move { z.append(vec![(1, b("b"))]).await }
        });
        within(faults.wait_held(2)).await;
        assert_eq!(
            faults.held(),
            [key(prefix, next), key(prefix, next)],
            "{label}"
        );
        let w = within(Wal::open(inner.clone(), prefix, durable()))
            .await
            .unwrap();
        faults.hold_creates_at(None);
        // Both responses lost (transient errors), after landing or before.
        assert!(faults.release_with_error(&key(prefix, next), StorageErrorKind::Transient));
        assert!(faults.release_with_error(&key(prefix, next), StorageErrorKind::Transient));
        let answer = within(appending).await.unwrap();
        match (&answer, point) {
            (Ok(ids), HoldPoint::AfterLanded) => acked.extend(ids.iter().copied()),
            (Err(e), HoldPoint::BeforeInner) => assert!(e.is_fenced(), "{label}: {e}"),
            other => panic!("{label}: unexpected {other:?}"),
        }
        let later = within(z.append(vec![(1, b("c"))])).await;
        assert!(
            later.is_err(),
            "{label}: the older writer is fenced: {later:?}"
        );
        let seen: Vec<_> = try_read(&w, 1, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        for id in &acked {
            assert!(seen.contains(id), "{label}: W's chain lacks {id:#x}");
        }
        w.stop().await.unwrap();
        drop(z);
        assert_replays(&inner, prefix, 1, &acked, &label).await;
    }
}

/// Enqueued mode: a filler sits at the writer's next key, and a second
/// opener walks the run while the writer's create there is held. The
/// writer must never report durable (`wait_durable`/`flush` `Ok`) an
/// entry of the batch the filler took, and everything it did report
/// durable replays.
#[tokio::test(start_paused = true)]
async fn attack_enqueued_filler_under_a_walk() {
    for walk_first in [false, true] {
        let label = format!("walk first: {walk_first}");
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "atk-enq-filler";
        Wal::open(inner.clone(), prefix, config())
            .await
            .unwrap()
            .stop()
            .await
            .unwrap(); // epoch 1 at 1
        let faults = FaultyStorage::new(inner.clone());
        let z = Wal::open(faults.storage(), prefix, slow(enqueued()))
            .await
            .unwrap(); // epoch 2
        let first = z.append(vec![(1, b("a"))]).await.unwrap();
        within(z.flush()).await.unwrap();
        let mut acked = first.clone();
        let f = format::sequence_of(first[0]) + 1;
        inner
            .create(&key(prefix, f), filler(f, 1, (1, 1)))
            .await
            .unwrap();
        faults.hold_creates(true);
        let second = z.append(vec![(1, b("b"))]).await.unwrap();
        let flushing = tokio::spawn({
            let z = z.clone();
            async move { z.flush().await }
        });
        within(faults.wait_held(1)).await;
        let w = if walk_first {
            Some(
                within(Wal::open(inner.clone(), prefix, durable()))
                    .await
                    .unwrap(),
            )
        } else {
            None
        };
        faults.hold_creates(false);
        faults.release_all();
        let flushed = within(flushing).await.unwrap();
        assert!(
            flushed.is_err(),
            "{label}: flush over a filler: {flushed:?}"
        );
        let waited = within(z.wait_durable(1, second[0])).await;
        assert!(
            waited.is_err(),
            "{label}: wait_durable over a filler: {waited:?}"
        );
        // Later appends are refused or never reported durable.
        if let Ok(ids) = within(z.append(vec![(1, b("c"))])).await {
            if within(z.wait_durable(1, ids[0])).await.is_ok() {
                acked.extend(ids);
            }
        }
        let w = match w {
            Some(w) => w,
            None => within(Wal::open(inner.clone(), prefix, durable()))
                .await
                .unwrap(),
        };
        let seen: Vec<_> = try_read(&w, 1, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        for id in &acked {
            assert!(seen.contains(id), "{label}: W lacks {id:#x}");
        }
        w.stop().await.unwrap();
        drop(z);
        assert_replays(&inner, prefix, 1, &acked, &label).await;
    }
}

/// Quarantine: a second opener's reads of the live writer's newest
/// acknowledged object are corrupted in transit, the same way each time,
/// so it looks damaged. Whatever the open decides, the writer's
/// acknowledged entries replay from the new chain or the new process names
/// them as holes, the writer's later appends are fenced or replay, and a
/// default reader after everyone crashed replays everything acknowledged.
#[tokio::test(start_paused = true)]
async fn attack_quarantine_transit_corruption_of_the_live_tip() {
    for reads in [2, 4, 8, 32] {
        let label = format!("{reads} corrupted reads");
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "atk-quarantine";
        let z = Wal::open(inner.clone(), prefix, durable()).await.unwrap();
        let mut acked = z.append(vec![(1, b("a"))]).await.unwrap();
        acked.extend(z.append(vec![(1, b("b"))]).await.unwrap());
        let tip = key(prefix, format::sequence_of(acked[1]));
        let faults = FaultyStorage::new(inner.clone());
        faults.corrupt_next_reads(&tip, reads);
        let opened = within(Wal::open(
            faults.storage(),
            prefix,
            Config {
                on_damaged_object: crate::DamagePolicy::Quarantine,
                ..durable()
            },
        ))
        .await;
        faults.clear_faults();
        match opened {
            Err(e) => {
                tracing::debug!(label, error = %e, "attack: the open failed");
                if let Ok(ids) = within(z.append(vec![(1, b("c"))])).await {
                    acked.extend(ids);
                }
            }
            Ok(w) => {
                let holes = w.holes(1);
                tracing::debug!(label, ?holes, "attack: opened");
                let seen: Vec<_> = try_read(&w, 1, 0)
                    .await
                    .unwrap()
                    .iter()
                    .map(|e| e.id)
                    .collect();
                for id in &acked {
                    let holed = holes.iter().any(|h| h.first_id <= *id && *id <= h.last_id);
                    assert!(
                        seen.contains(id) || holed,
                        "{label}: W neither replays nor holes {id:#x}"
                    );
                }
                let later = within(z.append(vec![(1, b("c"))])).await;
                if let Ok(ids) = later {
                    acked.extend(ids);
                }
                // W writes and collects a little.
                let mine = w.append(vec![(2, b("w"))]).await.unwrap();
                w.obsolete(2, mine[0]).await.unwrap();
                w.flush().await.unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
                w.stop().await.unwrap();
            }
        }
        drop(z);
        assert_replays(&inner, prefix, 1, &acked, &label).await;
    }
}

/// Collection under a second opener: the older writer obsoletes what it
/// wrote as it goes (its boundary rises and it deletes below it) while a
/// newer process lists, reads tails with latency and walks; the older
/// writer keeps appending until it is refused. Every `Ok` replays.
#[tokio::test(start_paused = true)]
async fn attack_collection_races_a_slow_opener() {
    for latency_ms in [1u64, 5, 20] {
        let label = format!("open latency {latency_ms} ms");
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "atk-collect";
        let z = Wal::open(inner.clone(), prefix, durable()).await.unwrap();
        let mut acked_keep = Vec::new();
        acked_keep.extend(z.append(vec![(1, b("keep"))]).await.unwrap());
        for n in 0..20 {
            let ids = z.append(vec![(2, b(&format!("x{n}")))]).await.unwrap();
            z.obsolete(2, ids[0]).await.unwrap();
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let (z, stop) = (z.clone(), stop.clone());
            async move {
                let mut acked = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    n += 1;
                    match z.append(vec![(1, b(&format!("k{n}"))), (2, b("y"))]).await {
                        Ok(ids) => {
                            acked.push(ids[0]);
                            let _ = z.obsolete(2, ids[1]).await;
                        }
                        Err(_) => break,
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                acked
            }
        });
        tokio::time::sleep(Duration::from_millis(15)).await;
        let slow = FaultyStorage::new(inner.clone());
        for op in [Op::Read, Op::List, Op::Create] {
            slow.set_latency(op, Duration::from_millis(latency_ms));
        }
        let w = within(Wal::open(slow.storage(), prefix, durable())).await;
        let w = w.unwrap_or_else(|e| panic!("{label}: open failed: {e}"));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let acked = within(task).await.unwrap();
        let mut all = acked_keep.clone();
        all.extend(acked);
        let seen: Vec<_> = try_read(&w, 1, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        for id in &all {
            assert!(seen.contains(id), "{label}: W lacks {id:#x}");
        }
        w.stop().await.unwrap();
        drop(z);
        assert_replays(&inner, prefix, 1, &all, &label).await;
        assert!(highest(&inner, prefix).await > 0);
    }
}

/// A second opener whose closing read fails it (a third opener claimed
/// meanwhile) leaves its start object as a filler inside the third's run
/// and its settle markers in the older writer's run; the older writer
/// runs on throughout. Everything anyone acknowledged replays.
#[tokio::test(start_paused = true)]
async fn attack_failed_opener_leaves_a_filler_in_the_newest_run() {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "atk-failed-open";
    let z = Wal::open(inner.clone(), prefix, durable()).await.unwrap(); // epoch 1
    let mut acked = z.append(vec![(1, b("z1"))]).await.unwrap();
    // Y (epoch 2): its start object create is held before landing.
    let y_faults = FaultyStorage::new(inner.clone());
    y_faults.hold_creates(true);
    let mut y_open = tokio::spawn({
        let s = y_faults.storage();
        async move { Wal::open(s, prefix, durable()).await }
    });
    // Let Y's walk markers land, one by one, until only the start object
    // is held (the first create past the walk's key).
    let mut start_key = None;
    within(async {
        loop {
            y_faults.wait_held(1).await;
            let k = y_faults.held().remove(0);
            let Some(seq) = k
                .rsplit('/')
                .next()
                .and_then(|n| n.strip_suffix(".wal"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                assert!(y_faults.release(&k)); // a fence
                continue;
            };
            let top = highest(&inner, prefix).await;
            if seq > top + 32 {
                start_key = Some(k);
                break;
            }
            assert!(y_faults.release(&k));
        }
    })
    .await;
    let start_key = start_key.unwrap();
    // Z is fenced at Y's marker now; its append fails.
    let zb = within(z.append(vec![(1, b("z2"))])).await;
    if let Ok(ids) = &zb {
        acked.extend(ids.iter().copied());
    }
    // X (epoch 3) opens fully.
    let x = within(Wal::open(inner.clone(), prefix, durable()))
        .await
        .unwrap();
    // Y's start lands now, then its closing read fails it.
    y_faults.hold_creates(false);
    assert!(y_faults.release(&start_key));
    let y = within(&mut y_open).await.unwrap();
    assert!(
        y.is_err(),
        "Y must fail its open: {:?}",
        y.as_ref().map(|_| ())
    );
    // X writes through its run (possibly over Y's start object, a filler).
    let mut x_acked = Vec::new();
    for n in 0..100 {
        match within(x.append(vec![(1, b(&format!("x{n}")))])).await {
            Ok(ids) => x_acked.extend(ids),
            Err(e) => assert!(matches!(e, Error::NotDurable { .. }), "{e}"),
        }
    }
    acked.extend(x_acked);
    x.stop().await.unwrap();
    drop(z);
    assert_replays(&inner, prefix, 1, &acked, "failed opener").await;
    // And once more after another open (chain selection past the filler).
    let again = Wal::open(inner.clone(), prefix, durable()).await.unwrap();
    let seen: Vec<_> = try_read(&again, 1, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    for id in &acked {
        assert!(seen.contains(id), "after reopen: lacks {id:#x}");
    }
    again.stop().await.unwrap();
}
