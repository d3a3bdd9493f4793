//! Fencing, deterministic: an older process with 0 to 4 creates in flight
//! while a newer one claims its epoch, lists, walks the older run, writes
//! its start object and appends; the held creates are released in every
//! assignment to four moments (before the newer opens, between its listing
//! and its walk, after its open, after its first append), in ascending and
//! descending order within a moment. Every `max_inflight_creates` from 1 to
//! 8; the older process of epoch 1, or of epoch 2, with a pre-history of 0
//! or 2 failed creates (keys settled by voids). After each run:
//! 1. the older process is poisoned and says it was fenced, and by which epoch;
//! 2. a third opener replays every entry either acknowledged, exactly once;
//! 3. the newer process was never poisoned;
//! 4. the walk adopted exactly the older objects that landed before it, in
//!    key order up to the first that had not.

use std::collections::BTreeSet;

use crate::storage::fault::FaultyStorage;
use crate::storage::MemoryStorage;
use crate::WalReader;

use super::*;

/// The moments a held create of the older process can be released at.
const MOMENTS: usize = 4;

/// One history of the older process.
#[derive(Debug, Clone, Copy)]
struct History {
    /// An earlier process ran first: the older one is of epoch 2.
    earlier: bool,
    max_inflight: usize,
    /// Failed creates after its first acknowledged append.
    failures: usize,
}

/// Every interleaving for one `max_inflight_creates` (one test each, so the
/// suite runs in parallel).
async fn every_interleaving_with(max_inflight: usize) {
    let mut runs = 0;
    for (earlier, failures) in [(false, 0), (true, 0), (true, 2)] {
        let history = History {
            earlier,
            max_inflight,
            failures,
        };
        for in_flight in 0..=max_inflight.min(4) {
            for assignment in 0..MOMENTS.pow(in_flight as u32) {
                for descending in [false, true] {
                    let moments: Vec<usize> = (0..in_flight)
                        .map(|i| assignment / MOMENTS.pow(i as u32) % MOMENTS)
                        .collect();
                    run(history, &moments, descending).await;
                    runs += 1;
                }
            }
        }
    }
    let per_history: usize = (0..=max_inflight.min(4))
        .map(|k| 2 * MOMENTS.pow(k as u32))
        .sum();
    assert_eq!(runs, 3 * per_history);
}

macro_rules! interleavings {
    ($($name:ident: $max_inflight:expr,)*) => {$(
        #[tokio::test(start_paused = true)]
        async fn $name() {
            every_interleaving_with($max_inflight).await;
        }
    )*};
}

interleavings! {
    every_interleaving_with_one_create_in_flight: 1,
    every_interleaving_with_two_creates_in_flight: 2,
    every_interleaving_with_three_creates_in_flight: 3,
    every_interleaving_with_four_creates_in_flight: 4,
    every_interleaving_with_five_creates_in_flight: 5,
    every_interleaving_with_six_creates_in_flight: 6,
    every_interleaving_with_seven_creates_in_flight: 7,
    every_interleaving_with_eight_creates_in_flight: 8,
}

async fn run(history: History, moments: &[usize], descending: bool) {
    let label = format!("{history:?}, moments {moments:?}, descending {descending}");
    let inner = Storage::new(MemoryStorage::new());
    let old_faults = FaultyStorage::new(inner.clone());
    let new_faults = FaultyStorage::new(inner.clone());
    let prefix = "f";
    let key = |sequence: u64| format!("{prefix}/objects/{sequence:020}.wal");
    let old_config = Config {
        max_inflight_creates: history.max_inflight,
        ..config()
    };
    if history.earlier {
        let earlier = Wal::open(inner.clone(), prefix, config()).await.unwrap();
        earlier.append(vec![(1, b("earlier"))]).await.unwrap();
        earlier.stop().await.unwrap();
    }
    let old = Wal::open(old_faults.storage(), prefix, old_config)
        .await
        .unwrap();
    let old_epoch = if history.earlier { 2 } else { 1 };
    let first = old.append(vec![(1, b("old-0"))]).await.unwrap();
    let mut acked: Vec<(u64, u64)> = vec![(1, first[0])];
    if history.earlier {
        let reader = WalReader::open(inner.clone(), prefix, config())
            .await
            .unwrap();
        let earlier = reader.latest_entry_id(1);
        acked.push((
            1,
            crate::format::entry_id(crate::format::sequence_of(earlier), 1),
        ));
    }
    old_faults.fail_next(
        crate::storage::fault::Op::Create,
        "objects/",
        history.failures,
        crate::storage::StorageErrorKind::Transient,
    );
    for _ in 0..history.failures {
        let err = old.append(vec![(1, b("failed"))]).await.unwrap_err();
        assert!(err.is_retryable(), "{label}: {err}");
    }
    // Serving again once the void of the failed batch landed.
    within(old.flush()).await.unwrap();
    // The older process's creates in flight: one batch each, held.
    old_faults.hold_creates(true);
    let mut tasks = Vec::new();
    for n in 0..moments.len() {
        let w = old.clone();
        let payload = format!("old-{}", n + 1);
        tasks.push(tokio::spawn(async move {
            w.append(vec![(1, b(&payload))]).await
        }));
        within(old_faults.wait_held(n + 1)).await;
    }
    let held = old_faults.held();
    let release = |moment: usize| {
        let mut keys: Vec<String> = held
            .iter()
            .zip(moments)
            .filter(|(_, m)| **m == moment)
            .map(|(k, _)| k.clone())
            .collect();
        if descending {
            keys.reverse();
        }
        keys
    };
    let land = |keys: Vec<String>| {
        let faults = old_faults.clone();
        let inner = inner.clone();
        async move {
            for k in keys {
                assert!(faults.release(&k));
                // Landed, or refused because the newer process holds the key.
                for _ in 0..10_000 {
                    if inner.read(&k, 0..1).await.is_ok() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
        }
    };

    land(release(0)).await;
    // The newer process: its fence, then its listing, then its start object.
    new_faults.hold_creates(true);
    let storage = new_faults.storage();
    let mut opening = tokio::spawn(async move { Wal::open(storage, prefix, config()).await });
    within(new_faults.wait_held(1)).await;
    let fence = new_faults.held().remove(0);
    assert!(fence.contains("/fences/"), "{label}: {fence}");
    assert!(new_faults.release(&fence));
    within(new_faults.wait_held(1)).await; // the walk's marker: the listing is done
    land(release(1)).await;
    let new = finish_open(&new_faults, &mut opening).await;
    new_faults.hold_creates(false);
    land(release(2)).await;
    let new_ids = new.append(vec![(2, b("new"))]).await.unwrap();
    land(release(3)).await;
    old_faults.hold_creates(false);

    for task in tasks {
        match task.await.unwrap() {
            Ok(ids) => acked.push((1, ids[0])),
            Err(e) => assert!(e.is_poisoned() || e.is_retryable(), "{label}: {e}"),
        }
    }
    // Guarantee 1: the older process is fenced and says so.
    let err = match old.append(vec![(1, b("after"))]).await {
        Ok(ids) => {
            panic!("{label}: the older process acknowledged {ids:?} after the newer one opened")
        }
        Err(err) => err,
    };
    assert!(err.is_poisoned(), "{label}: {err}");
    assert!(
        matches!(err, Error::Fenced { ours, newer, .. } if ours == old_epoch && newer == old_epoch + 1),
        "{label}: {err}"
    );
    // Guarantee 3: the newer process serves.
    let more = new.append(vec![(2, b("new-2"))]).await.unwrap();
    acked.push((2, new_ids[0]));
    acked.push((2, more[0]));
    new.stop().await.unwrap();
    let _ = old.stop().await;

    // Guarantee 2: a third opener replays every acknowledged entry once.
    let reader = WalReader::open(inner.clone(), prefix, config())
        .await
        .unwrap();
    let mut replayed = BTreeSet::new();
    for region in [1, 2] {
        let mut stream = Box::pin(reader.read(region, 0));
        while let Some(entry) = futures::StreamExt::next(&mut stream).await {
            let entry = entry.unwrap();
            assert!(
                replayed.insert((region, entry.id)),
                "{label}: {} replayed twice",
                entry.id
            );
        }
    }
    for entry in &acked {
        assert!(
            replayed.contains(entry),
            "{label}: acknowledged {entry:?} lost; replayed {replayed:?}"
        );
    }
    // Adoption: the older objects that landed before the walk (moments 0
    // and 1), in key order up to the first that had not, continue the chain
    // and replay; the walk settled the next key, so no later one does.
    let adopted = moments.iter().take_while(|m| **m <= 1).count();
    for (i, held_key) in held.iter().enumerate() {
        let sequence: u64 = held_key
            .rsplit('/')
            .next()
            .and_then(|k| k.strip_suffix(".wal"))
            .and_then(|k| k.parse().ok())
            .unwrap();
        let id = crate::format::entry_id(sequence, 1);
        assert_eq!(
            replayed.contains(&(1, id)),
            i < adopted,
            "{label}: {held_key} (moment {}) adopted or not as the walk found it",
            moments[i]
        );
    }
    let _ = key;
}
