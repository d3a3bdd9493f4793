//! Collection pressure (issue 15, item 3): `pinning()` names the regions
//! that hold objects from collection, `max_pinned_objects` makes the store
//! ask the engine to flush them (once per crossing, never a released
//! region), and an engine that answers keeps the objects held near the
//! bound while nothing it did not declare obsolete is deleted.

use futures::{FutureExt, Stream, StreamExt};
use objwal::{Config, EntryId, FlushRequest, ObjectStorage, RegionId, Storage, Wal};

use crate::common::*;

fn bounded(bound: u64) -> Config {
    Config {
        max_pinned_objects: bound,
        ..test_config()
    }
}

/// Appends one entry to each hot region (one object) and obsoletes them
/// through it, as an engine flushing its hot regions at once would.
async fn hot_step(wal: &Wal, hot: &[RegionId], n: usize) -> Vec<EntryId> {
    let entries = hot.iter().map(|&r| (r, b(&format!("h{r}.{n}")))).collect();
    let ids = wal.append(entries).await.unwrap();
    for (&r, &id) in hot.iter().zip(&ids) {
        wal.obsolete(r, id).await.unwrap();
    }
    ids
}

/// The flush requests sent so far: `pinning()` is a barrier (the actor
/// checks after every indexed object, before it answers the next request).
async fn sent(
    wal: &Wal,
    requests: &mut (impl Stream<Item = FlushRequest> + Unpin),
) -> Vec<FlushRequest> {
    wal.pinning().await.unwrap();
    let mut out = Vec::new();
    while let Some(Some(r)) = requests.next().now_or_never() {
        out.push(r);
    }
    out
}

async fn objects_in(storage: &Storage) -> usize {
    storage.list("t/objects/").await.unwrap().len()
}

#[tokio::test]
async fn pinning_names_the_cold_region_and_what_it_holds() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, bounded(0)).await;
    let cold = wal.append(vec![(1, b("cold")), (2, b("h"))]).await.unwrap();
    for n in 0..20 {
        hot_step(&wal, &[2, 3], n).await;
    }
    let rows = wal.pinning().await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows[0];
    assert_eq!((row.region, row.through), (1, cold[0]));
    // From the cold entry's object up to the newest (which the hot regions
    // hold, and which is never collected).
    assert_eq!(row.first_sequence, objwal::format::sequence_of(cold[0]));
    assert_eq!(row.objects, 20);
    assert_eq!(row.held_objects, 21);
    assert!(row.bytes > 0);
    // The engine flushes it: collection deletes what it held.
    wal.obsolete(1, row.through).await.unwrap();
    wal.append(vec![(2, b("carry the boundary"))])
        .await
        .unwrap();
    within(async {
        while objects_in(&storage).await > 3 {
            wal.flush().await.unwrap();
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(wal.pinning().await.unwrap().iter().all(|r| r.region != 1));
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn flush_requests_come_once_per_crossing() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, bounded(8)).await;
    let mut requests = Box::pin(wal.flush_requests());
    wal.append(vec![(1, b("cold"))]).await.unwrap();
    let mut got = Vec::new();
    for n in 0..30 {
        hot_step(&wal, &[2, 3], n).await;
        got.extend(sent(&wal, &mut requests).await);
    }
    let regions: Vec<_> = got.iter().map(|r| r.region).collect();
    assert_eq!(regions, [1], "one request, for the cold region: {got:?}");
    assert!(got[0].held_objects > 8);
    // The engine flushes through the id asked for: collection proceeds and
    // the region is within the bound again; a later crossing asks again.
    wal.obsolete(1, got[0].through).await.unwrap();
    let again = wal.append(vec![(1, b("cold again"))]).await.unwrap();
    let mut later = Vec::new();
    for n in 30..60 {
        hot_step(&wal, &[2, 3], n).await;
        later.extend(sent(&wal, &mut requests).await);
    }
    let later: Vec<_> = later.iter().map(|r| (r.region, r.through)).collect();
    assert_eq!(later, [(1, again[0])]);
    wal.stop().await.unwrap();
    // The stream ends with the store.
    assert!(within(requests.next()).await.is_none());
}

#[tokio::test]
async fn a_released_region_is_never_asked_to_flush() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, bounded(4)).await;
    let mut requests = Box::pin(wal.flush_requests());
    wal.append(vec![(1, b("cold")), (4, b("cold too"))])
        .await
        .unwrap();
    wal.release_region(1).await.unwrap();
    let mut got = Vec::new();
    for n in 0..12 {
        hot_step(&wal, &[2], n).await;
        got.extend(sent(&wal, &mut requests).await);
    }
    let regions: Vec<_> = got.iter().map(|r| r.region).collect();
    assert_eq!(regions, [4], "{got:?}");
    // Released while asked: never asked again, and not listed.
    wal.release_region(4).await.unwrap();
    for n in 12..20 {
        hot_step(&wal, &[2], n).await;
        got.extend(sent(&wal, &mut requests).await);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(wal.pinning().await.unwrap().iter().all(|r| r.region == 2));
    wal.stop().await.unwrap();
}

/// An engine that answers every request: the objects in the prefix stay
/// within the bound plus what arrives before it acts; without the bound
/// they grow with the run. The cold region's entries stay readable until
/// it declared them obsolete.
#[tokio::test]
async fn an_engine_that_answers_keeps_the_objects_held_near_the_bound() {
    for (bound, answer) in [(16, true), (0, false)] {
        let storage = faulty_memory().storage();
        let wal = open(&storage, bounded(bound)).await;
        let mut requests = Box::pin(wal.flush_requests());
        let mut most = 0;
        for n in 0..80 {
            if n % 20 == 0 {
                wal.append(vec![(1, b(&format!("cold{n}")))]).await.unwrap();
            }
            hot_step(&wal, &[2, 3, 4], n).await;
            for r in sent(&wal, &mut requests).await {
                assert!(answer, "no request without a bound: {r:?}");
                // Flushed: what it held is still readable until obsolete.
                let held = read_all(&wal, r.region, 0).await;
                assert!(held.iter().any(|e| e.id <= r.through), "{held:?}");
                wal.obsolete(r.region, r.through).await.unwrap();
            }
            wal.flush().await.unwrap();
            most = most.max(objects_in(&storage).await);
        }
        if answer {
            // The bound, plus the object that carries the new boundary
            // while the pass that deletes below it runs (measured: 17).
            assert!(most <= 16 + 2, "held {most} with a bound of 16");
        } else {
            assert!(
                most >= 80,
                "without requests the cold region holds every object: {most}"
            );
        }
        wal.stop().await.unwrap();
    }
}
