//! Attacks on reader holds (rfcs/0011): histories that try to make a held
//! follower meet a hole although its refreshes succeed, make a hold call
//! hang, make a hold stop pinning early or pin after its release, or make
//! the follower's hold move above an object whose entries it has not
//! handed out. The ones that found a defect are `#[ignore]`d with the
//! defect named; the others stay as regression tests.
//!
//! Deterministic: paused time on the memory backend behind the fault
//! wrapper (and a gate on hold creates where a create must stay in flight
//! at a chosen moment); a deadline on every wait (`within`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::Op;
use objwal::storage::StorageErrorKind;
use objwal::{
    Config, Created, EntryId, Hold, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix, Wal,
    WalReader,
};

use crate::common::*;
use crate::holds::{collected_below, drain, objects};

const PREFIX: &str = "t";
const TTL: Duration = Duration::from_secs(60);

fn config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        follow_interval: Duration::from_millis(10),
        follow_max_interval: Duration::from_millis(100),
        ..Config::default()
    }
}

/// Appends `n` entries of `region`, one object each, and declares each
/// obsolete at once: the writer's collection deletes the objects behind.
async fn churn(wal: &Wal, region: u64, n: usize) -> Vec<EntryId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = wal
            .append(vec![(region, b(&format!("e{i}")))])
            .await
            .unwrap()[0];
        wal.obsolete(region, id).await.unwrap();
        ids.push(id);
    }
    wal.flush().await.unwrap();
    ids
}

/// The keys under `holds/` now.
async fn hold_keys(storage: &Storage) -> Vec<String> {
    storage
        .list(&format!("{PREFIX}/holds/"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect()
}

/// A store whose creates under `holds/` wait while the gate is shut: a
/// hold refresh stays in flight for as long as a test needs.
#[derive(Debug, Clone)]
struct Gated {
    inner: Storage,
    shut: tokio::sync::watch::Sender<bool>,
    waiting: Arc<AtomicUsize>,
}

impl Gated {
    fn new(inner: Storage) -> Gated {
        Gated {
            inner,
            shut: tokio::sync::watch::channel(false).0,
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Waits until `n` hold creates wait at the shut gate.
    async fn wait_waiting(&self, n: usize) {
        within(async {
            while self.waiting.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
    }
}

#[async_trait]
impl ObjectStorage for Gated {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        if key.contains("/holds/") {
            let mut open = self.shut.subscribe();
            if *open.borrow() {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let _ = open.wait_for(|shut| !*shut).await;
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.inner.create(key, data).await
    }
    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.inner.read_suffix(key, len).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

/// History: a held follower (hold placed at 0, then the reader opened,
/// then `follow` + `keep_hold`) hands out everything through the tip X;
/// its first refresh computes "needed = X+1" and its create is in flight;
/// then `add(2, 0)` lowers the floor to 0 while the landed hold is still
/// at 0; the writer makes X and below obsolete; the refresh lands at X+1
/// and the writer's next pass deletes below it; the backfill of region 2
/// then finds its objects gone: holes, with every refresh succeeding.
///
/// Mechanism (`src/wal/read/follow/hold.rs`, `Keeper::start`): the task
/// reads `needed(&floor, &lag)` before `hold.advance(position).await` and
/// never looks at the floor again once the create lands; `Follower::add`
/// lowers the floor "at once", but a create already in flight moves the
/// hold above the added region's backfill, and nothing moves it back down
/// before the next refresh a quarter ttl later, by when collection may
/// have deleted what the backfill reads. Without the race (the add comes
/// before the refresh reads the floor) the same history meets no hole.
#[tokio::test(start_paused = true)]

async fn an_add_during_an_in_flight_refresh_keeps_its_backfill_held() {
    for raced in [false, true] {
        let gated = Gated::new(faulty_memory().storage());
        let storage = Storage::new(gated.clone());
        let wal = open(&storage, config()).await;
        let hold = within(Hold::place(
            storage.clone(),
            PREFIX,
            &config(),
            "standby",
            TTL,
            0,
        ))
        .await
        .unwrap();
        let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
            .await
            .unwrap();
        let mut follower = reader.follow([(1, 0)]);
        follower.keep_hold(hold);
        // Ten objects, each with an entry of region 1 and one of region 2.
        let mut last = (0, 0);
        for i in 0..10 {
            let ids = wal
                .append(vec![(1, b(&format!("a{i}"))), (2, b(&format!("b{i}")))])
                .await
                .unwrap();
            wal.flush().await.unwrap();
            last = (ids[0], ids[1]);
        }
        let got = drain(&mut follower).await;
        assert_eq!(got.len(), 10);
        if raced {
            // The first refresh reads the floor (lifted) and the lag,
            // then waits at the gate with "X+1".
            gated.shut.send_replace(true);
            tokio::time::sleep(TTL / 4 + Duration::from_millis(5)).await;
            gated.wait_waiting(1).await;
        } else {
            tokio::time::sleep(TTL / 8).await;
        }
        let landed = hold_keys(&storage).await;
        assert!(
            landed.len() == 1 && landed[0].contains("-00000000000000000000-"),
            "the hold in the store is still at 0 when the region is added: {landed:?}"
        );
        follower.add(2, 0);
        // Everything so far becomes obsolete; the writer moves on.
        wal.obsolete(1, last.0).await.unwrap();
        wal.obsolete(2, last.1).await.unwrap();
        churn(&wal, 3, 5).await;
        gated.shut.send_replace(false);
        // The consumer looks away for a while (the writer collects what
        // no live hold keeps).
        tokio::time::sleep(TTL / 2).await;
        let got = drain(&mut follower).await;
        let holes = follower.holes(2);
        assert!(
            holes.is_empty(),
            "raced {raced}: the added region met holes {holes:?} (got {} entries)",
            got.len()
        );
        assert_eq!(
            got.iter().filter(|e| e.region == 2).count(),
            10,
            "raced {raced}"
        );
        drop(follower);
        wal.stop().await.unwrap();
    }
}

/// History: a hold with the largest ttl holds a pass back; it is
/// released; the writer goes on writing and making its objects obsolete.
/// Collection never deleted them again (until the writer restarted): a
/// released hold pinned for good. Fixed: a ttl is at most 30 days
/// (`Duration::MAX` is refused) and a held-back pass rechecks within a
/// minute whatever the ttl.
///
/// The defect as found:
/// Mechanism (`src/wal/write/actor/collect.rs`, `collect` and
/// `Actor::on_pass`): a held pass sets `held_back = ttl/4` of the holding
/// hold and `held_until = now + held_back`; `maybe_collect` starts no pass
/// before `held_until`, whatever the holds are by then, and nothing
/// clears it earlier (not a release: the writer learns of one only at its
/// next pass). With ttl `Duration::MAX` (`u64::MAX` ms in the key),
/// `held_until` is about 146 million years away. In general a released
/// hold keeps pinning up to ttl/4 after `release` (rfcs/0011 states the
/// ttl/4 spacing, but `Hold::release` says "from the writer's next
/// collection pass on, it pins nothing" and nothing bounds the ttl).
#[tokio::test(start_paused = true)]

async fn a_released_hold_with_the_largest_ttl_lets_collection_go_on() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let refused = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "forever",
        Duration::MAX,
        0,
    ))
    .await;
    assert!(
        matches!(refused, Err(objwal::Error::InvalidArgument { .. })),
        "{refused:?}"
    );
    let hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "forever",
        Duration::from_secs(30 * 24 * 3600),
        0,
    ))
    .await
    .unwrap();
    churn(&wal, 1, 10).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(objects(&storage).await.len() >= 10, "the hold held");
    within(hold.release()).await.unwrap();
    // A held-back pass rechecks within a minute, whatever the ttl.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let ids = churn(&wal, 1, 10).await;
    collected_below(&storage, objwal::format::sequence_of(ids[9])).await;
    wal.stop().await.unwrap();
}

/// History: a hold's refresh fails (once with its create lost after it
/// landed, once with nothing landed), then refreshes succeed. Every
/// generation but the newest must be gone after the next successful
/// refresh. Fixed: a failed move keeps the standing generation as the
/// hold and a counter of tried generations; what it tried is removed once
/// a move lands above it.
///
/// The defect as found:
/// Mechanism (`src/wal/holds.rs`, `Hold::advance`): on a failed create it
/// bumps `self.key.generation` and pushes only the attempted key to
/// `stale`; `before` (the generation that did land and still stands) is
/// never pushed. The next successful advance pushes the new `before`, a
/// key that never existed, so the real previous generation stays in the
/// store until `release` or a new `place` under the name: one key leaked
/// per failed refresh, each listed by every collection pass (and by
/// `objwal inspect`). Pinning is not affected (the highest generation is
/// the hold).
#[tokio::test(start_paused = true)]

async fn a_failed_refresh_leaves_no_generation_behind() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let mut hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "standby",
        TTL,
        0,
    ))
    .await
    .unwrap();
    faulty.fail_next(Op::Create, "/holds/", 1, StorageErrorKind::Transient);
    assert!(within(hold.advance(3)).await.is_err());
    faulty.lose_next_create_responses("/holds/", 1);
    assert!(within(hold.advance(4)).await.is_err());
    within(hold.advance(5)).await.unwrap();
    within(hold.refresh()).await.unwrap();
    let keys = hold_keys(&storage).await;
    assert_eq!(keys.len(), 1, "generations left behind: {keys:?}");
    within(hold.release()).await.unwrap();
    assert!(hold_keys(&storage).await.is_empty());
}

/// History: a held follower's refresh fails with its create landed (the
/// response lost) while the writer collects; the hold in the store moved
/// up as asked (to what the follower needs), the follower meets no hole,
/// and `take_hold` + `release` leave no key.
#[tokio::test(start_paused = true)]
async fn a_refresh_whose_create_landed_keeps_a_held_follower_whole() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, config()).await;
    let hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "standby",
        TTL,
        0,
    ))
    .await
    .unwrap();
    let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    follower.keep_hold(hold);
    let mut ids = churn(&wal, 1, 10).await;
    faulty.lose_next_create_responses("/holds/", 1);
    tokio::time::sleep(TTL / 4 + Duration::from_millis(1)).await;
    // The failed refresh's generation (2) landed and is the hold now.
    let keys = hold_keys(&storage).await;
    assert!(
        keys.iter().any(|k| k.contains("/00000000000000000002-")),
        "{keys:?}"
    );
    ids.extend(churn(&wal, 1, 10).await);
    tokio::time::sleep(TTL).await;
    let got = drain(&mut follower).await;
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    assert!(follower.holes(1).is_empty(), "{:?}", follower.holes(1));
    let hold = within(follower.take_hold()).await.unwrap();
    within(hold.release()).await.unwrap();
    assert!(hold_keys(&storage).await.is_empty());
    wal.stop().await.unwrap();
}

/// History: every hold call meets a store that stops answering, with a
/// `request_timeout` set: `place`, `advance`, `release`, the follower's
/// refresh task and `take_hold` while that refresh is stalled. Each
/// returns (an error for the calls) within a few timeouts; none hangs.
#[tokio::test(start_paused = true)]
async fn no_hold_call_hangs_on_a_stalled_store() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let cfg = Config {
        request_timeout: Some(Duration::from_secs(2)),
        ..config()
    };
    let wal = open(&storage, cfg.clone()).await;
    faulty.stall_next(Op::List, "/holds/s/", 1);
    let placed = within(Hold::place(storage.clone(), PREFIX, &cfg, "s", TTL, 0)).await;
    assert!(placed.is_err(), "{placed:?}");
    faulty.stall_next(Op::Create, "/holds/s/", 1);
    let placed = within(Hold::place(storage.clone(), PREFIX, &cfg, "s", TTL, 0)).await;
    assert!(placed.is_err(), "{placed:?}");
    let mut hold = within(Hold::place(storage.clone(), PREFIX, &cfg, "s", TTL, 0))
        .await
        .unwrap();
    faulty.stall_next(Op::Create, "/holds/s/", 1);
    assert!(within(hold.advance(1)).await.is_err());
    faulty.stall_next(Op::Delete, "/holds/s/", 1);
    // The create lands; the stalled delete of the old one only lingers.
    within(hold.advance(2)).await.unwrap();
    faulty.stall_next(Op::List, "/holds/s/", 1);
    let reader = within(WalReader::open(storage.clone(), PREFIX, cfg.clone()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    follower.keep_hold(hold);
    // The follower's refresh stalls; take_hold does not wait for it.
    faulty.stall_next(Op::Create, "/holds/s/", 10);
    tokio::time::sleep(TTL / 4 + Duration::from_millis(1)).await;
    let hold = within(follower.take_hold()).await.unwrap();
    // A release whose listing stalls fails; placed again under the name
    // (taking it over) and released, it goes.
    faulty.clear_faults();
    faulty.stall_next(Op::List, "/holds/s/", 1);
    assert!(within(hold.release()).await.is_err());
    let hold = within(Hold::place(storage.clone(), PREFIX, &cfg, "s", TTL, 0))
        .await
        .unwrap();
    within(hold.release()).await.unwrap();
    assert!(hold_keys(&storage).await.is_empty());
    assert!(within(wal.holds()).await.is_ok());
    wal.stop().await.unwrap();
}

/// History: a held follower (hold at 0, then open, then follow +
/// keep_hold) whose consumer looks away while the writer writes and
/// collects, stops, a new process opens the prefix (a restart), a second
/// opener fences it while it writes, and both write and collect. The
/// follower then yields every acknowledged entry and meets no hole.
#[tokio::test(start_paused = true)]
async fn a_held_follower_meets_no_hole_across_a_restart_and_a_fencing() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "standby",
        TTL,
        0,
    ))
    .await
    .unwrap();
    // Obsolete before the open: the reader does not index them.
    churn(&wal, 1, 5).await;
    let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    follower.keep_hold(hold);
    let mut ids = churn(&wal, 1, 10).await;
    tokio::time::sleep(TTL / 3).await;
    wal.stop().await.unwrap();
    let restarted = open(&storage, config()).await;
    ids.extend(churn(&restarted, 1, 10).await);
    tokio::time::sleep(TTL / 3).await;
    let fencing = open(&storage, config()).await;
    assert!(restarted
        .append(vec![(1, b("late"))])
        .await
        .unwrap_err()
        .is_fenced());
    ids.extend(churn(&fencing, 1, 10).await);
    tokio::time::sleep(TTL).await;
    let got = drain(&mut follower).await;
    assert!(follower.holes(1).is_empty(), "{:?}", follower.holes(1));
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let _ = restarted.stop().await;
    fencing.stop().await.unwrap();
}

/// History: the follower has fetched an object of five entries and the
/// consumer took one of them, then looks away for two ttl while the
/// writer makes everything obsolete and collects. The hold must not move
/// above that object (its other entries are queued, not handed out): the
/// consumer then gets the other four and the rest, with no hole.
#[tokio::test(start_paused = true)]
async fn entries_queued_but_not_taken_stay_held() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "standby",
        TTL,
        0,
    ))
    .await
    .unwrap();
    let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    follower.keep_hold(hold);
    let five: Vec<EntryId> = wal
        .append((0..5).map(|i| (1, b(&format!("f{i}")))).collect())
        .await
        .unwrap();
    wal.flush().await.unwrap();
    let object = objwal::format::sequence_of(five[0]);
    assert!(five
        .iter()
        .all(|&id| objwal::format::sequence_of(id) == object));
    let first = within(follower.next()).await.unwrap().unwrap();
    assert_eq!(first.id, five[0]);
    assert!(
        follower.hold_position() <= object,
        "{}",
        follower.hold_position()
    );
    wal.obsolete(1, five[4]).await.unwrap();
    let later = churn(&wal, 1, 10).await;
    tokio::time::sleep(TTL * 2).await;
    assert!(
        objects(&storage).await.contains(&object),
        "the object with queued entries was collected"
    );
    let got = drain(&mut follower).await;
    let want: Vec<EntryId> = five[1..].iter().chain(&later).copied().collect();
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), want);
    assert!(follower.holes(1).is_empty(), "{:?}", follower.holes(1));
    wal.stop().await.unwrap();
}

/// History: a hold at `u64::MAX` (above every object) pins nothing and
/// does not hold collection back: the writer collects as without it, and
/// `Wal::holds` reports it live with nothing held.
#[tokio::test(start_paused = true)]
async fn a_hold_at_the_largest_position_pins_nothing() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let _hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "top",
        TTL,
        u64::MAX,
    ))
    .await
    .unwrap();
    let ids = churn(&wal, 1, 10).await;
    collected_below(&storage, objwal::format::sequence_of(ids[9])).await;
    let holds = within(wal.holds()).await.unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0].position, u64::MAX);
    assert!(!holds[0].expired);
    assert_eq!(holds[0].held_objects, 0);
    wal.stop().await.unwrap();
}
