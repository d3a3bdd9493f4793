//! Reader holds (issue 31 item 2, rfcs/0011): a named, durable, expiring
//! claim of a reader on the objects from its position on. The writer's
//! collection deletes nothing a live hold needs; an expired or released
//! hold pins nothing; `Wal::holds` and the gauges show them; their
//! requests are bounded.
//!
//! Deterministic: paused time on the memory backend; a deadline on every
//! wait (`within`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use objwal::{
    Config, Created, Entry, EntryId, Error, Follower, Hold, ObjectMeta, ObjectStorage, Storage,
    StorageError, Suffix, Wal, WalReader,
};

use crate::common::*;

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

/// Appends `n` entries of region 1, one object each, and declares each
/// obsolete at once: the writer's collection deletes the objects behind.
async fn churn(wal: &Wal, n: usize) -> Vec<EntryId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = wal.append(vec![(1, b(&format!("e{i}")))]).await.unwrap()[0];
        wal.obsolete(1, id).await.unwrap();
        ids.push(id);
    }
    wal.flush().await.unwrap();
    ids
}

/// The object keys under the prefix now.
pub(super) async fn objects(storage: &Storage) -> Vec<u64> {
    storage
        .list(&format!("{PREFIX}/objects/"))
        .await
        .unwrap()
        .iter()
        .filter_map(|m| {
            let name = m.key.rsplit('/').next()?;
            name.strip_suffix(".wal")?.parse().ok()
        })
        .collect()
}

/// Waits (virtual time) until the writer's collection has left no object
/// below `sequence` but the ones `kept` names.
pub(super) async fn collected_below(storage: &Storage, sequence: u64) {
    within(async {
        loop {
            if objects(storage).await.iter().all(|&s| s >= sequence) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

pub(super) async fn drain(follower: &mut Follower) -> Vec<Entry> {
    let mut got = Vec::new();
    let mut caught_up = follower.catch_up();
    while let Some(item) = within(caught_up.next()).await {
        got.push(item.unwrap());
    }
    got
}

/// A follower whose consumer looks away while the writer writes and
/// collects: without a hold it meets holes (the check that the history
/// collects what the follower has not read); with a hold kept by the
/// follower, it yields every entry and meets none.
#[tokio::test(start_paused = true)]
async fn a_held_follower_behind_collection_meets_no_hole() {
    for held in [false, true] {
        let storage = faulty_memory().storage();
        let wal = open(&storage, config()).await;
        let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
        let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
            .await
            .unwrap();
        let mut follower = reader.follow([(1, 0)]);
        if held {
            let hold = within(reader.hold("standby", TTL)).await.unwrap();
            follower.keep_hold(hold);
        }
        assert_eq!(within(follower.next()).await.unwrap().unwrap().id, first);
        // The consumer looks away for two refresh intervals.
        let ids = churn(&wal, 40).await;
        tokio::time::sleep(TTL / 2).await;
        let got = drain(&mut follower).await;
        let holes = follower.holes(1);
        if held {
            assert_eq!(
                got.iter().map(|e| e.id).collect::<Vec<_>>(),
                ids,
                "every entry"
            );
            assert!(holes.is_empty(), "{holes:?}");
        } else {
            assert!(!holes.is_empty(), "collection deleted nothing unread");
        }
        wal.stop().await.unwrap();
    }
}

/// The follower moves its hold up as it hands out entries, and the
/// writer's collection then deletes below the new position: a hold pins
/// only what its follower has not taken in. `Wal::holds` and the gauges
/// report it.
#[tokio::test(start_paused = true)]
async fn a_followers_hold_moves_up_and_collection_follows_it() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
        .await
        .unwrap();
    let hold = within(reader.hold("standby", TTL)).await.unwrap();
    let placed = hold.position();
    let mut follower = reader.follow([(1, 0)]);
    follower.keep_hold(hold);
    let ids = churn(&wal, 20).await;
    // The writer sees the hold and keeps what lies above it (a held-back
    // pass rechecks every quarter ttl).
    tokio::time::sleep(TTL / 2).await;
    let holds = within(wal.holds()).await.unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    // Moved at once to what the follower needs: not above where it was
    // placed (its backfill from id 0 has not ended).
    assert_eq!(holds[0].name, "standby");
    assert!(holds[0].position <= placed, "{holds:?}");
    assert!(!holds[0].expired);
    assert!(holds[0].held_objects > 0, "{holds:?}");
    assert!(objects(&storage).await.len() >= 20);
    // The follower takes everything in; its next refresh moves the hold.
    let got = drain(&mut follower).await;
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    let needed = follower.hold_position();
    assert!(needed > objwal::format::sequence_of(ids[19]), "{needed}");
    tokio::time::sleep(TTL / 2).await;
    let holds = within(wal.holds()).await.unwrap();
    assert_eq!(holds[0].position, needed, "{holds:?}");
    collected_below(&storage, objwal::format::sequence_of(ids[19])).await;
    // Taken back and released: the writer's next pass sees no hold.
    let hold = within(follower.take_hold()).await.unwrap();
    within(hold.release()).await.unwrap();
    churn(&wal, 2).await;
    tokio::time::sleep(TTL / 2).await;
    assert!(within(wal.holds()).await.unwrap().is_empty());
    wal.stop().await.unwrap();
}

/// A hold nobody refreshes stops pinning one ttl after the writer first
/// saw it: a dead standby cannot pin the primary's storage forever.
#[tokio::test(start_paused = true)]
async fn an_unrefreshed_hold_expires_and_collection_goes_on() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let ttl = Duration::from_secs(5);
    let hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "dead-standby",
        ttl,
        0,
    ))
    .await
    .unwrap();
    let ids = churn(&wal, 10).await;
    tokio::time::sleep(ttl / 2).await;
    let first = objects(&storage).await;
    assert!(first.len() >= 10, "held: {first:?}");
    let holds = within(wal.holds()).await.unwrap();
    assert!(!holds[0].expired, "{holds:?}");
    // One ttl on: expired, and collection deletes what it held.
    tokio::time::sleep(ttl * 2).await;
    churn(&wal, 1).await;
    collected_below(&storage, objwal::format::sequence_of(ids[9])).await;
    let holds = within(wal.holds()).await.unwrap();
    assert!(holds[0].expired, "{holds:?}");
    drop(hold);
    wal.stop().await.unwrap();
}

/// A writer that restarts does not forget a hold: its first pass sees it
/// again, and keeps what it holds for one more ttl at most.
#[tokio::test(start_paused = true)]
async fn a_writer_that_restarts_keeps_a_live_hold() {
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
    churn(&wal, 10).await;
    wal.stop().await.unwrap();
    let wal = open(&storage, config()).await;
    churn(&wal, 10).await;
    tokio::time::sleep(TTL / 4).await;
    assert!(objects(&storage).await.len() >= 20);
    assert_eq!(hold.position(), 0);
    wal.stop().await.unwrap();
}

/// A holder that restarts under the same name takes its hold over: one
/// generation above the old, which it removes; a bad name or ttl is a
/// clear error that writes nothing.
#[tokio::test(start_paused = true)]
async fn a_hold_placed_again_takes_over_and_bad_input_is_refused() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let old = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "s-1",
        TTL,
        3,
    ))
    .await
    .unwrap();
    let mut new = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "s-1",
        TTL,
        5,
    ))
    .await
    .unwrap();
    within(new.advance(7)).await.unwrap();
    let keys: Vec<String> = storage
        .list(&format!("{PREFIX}/holds/"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].ends_with("/00000000000000000003-00000000000000000007-00000000000000060000"),
        "{keys:?}"
    );
    drop(old);
    for (name, ttl) in [
        ("", TTL),
        ("../x", TTL),
        ("a b", TTL),
        ("ok", Duration::ZERO),
    ] {
        let refused = within(Hold::place(
            storage.clone(),
            PREFIX,
            &config(),
            name,
            ttl,
            0,
        ))
        .await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument { .. })),
            "{name:?} {ttl:?}: {refused:?}"
        );
    }
    let long = "p".repeat(960);
    let refused = within(Hold::place(
        storage.clone(),
        &long,
        &config(),
        "standby",
        TTL,
        0,
    ))
    .await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "{refused:?}"
    );
    assert_eq!(
        storage
            .list(&format!("{PREFIX}/holds/"))
            .await
            .unwrap()
            .len(),
        1
    );
    wal.stop().await.unwrap();
}

/// Requests counted by operation and by the folder of their key.
#[derive(Debug, Default)]
struct ByFolder {
    inner: Option<Storage>,
    counts: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl ByFolder {
    fn count(&self, op: &'static str, key: &str) {
        let folder = key
            .strip_prefix(&format!("{PREFIX}/"))
            .and_then(|k| k.split('/').next())
            .unwrap_or("")
            .to_owned();
        *self.counts.lock().unwrap().entry((op, folder)).or_default() += 1;
    }

    fn of(&self, op: &'static str, folder: &str) -> u64 {
        self.counts
            .lock()
            .unwrap()
            .get(&(op, folder.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn inner(&self) -> &Storage {
        self.inner.as_ref().unwrap()
    }
}

#[derive(Debug, Clone)]
struct Counting(Arc<ByFolder>);

impl std::ops::Deref for Counting {
    type Target = ByFolder;
    fn deref(&self) -> &ByFolder {
        &self.0
    }
}

#[async_trait]
impl ObjectStorage for Counting {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.count("create", key);
        self.inner().create(key, data).await
    }
    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.count("read", key);
        self.inner().read(key, range).await
    }
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.count("read", key);
        self.inner().read_suffix(key, len).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.count("list", prefix);
        self.inner().list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.count("delete", key);
        self.inner().delete(key).await
    }
}

/// What a hold costs in an idle hour (ttl 5 min, refreshed every 75 s):
/// the follower's task makes one create and one delete per refresh (48
/// each); the writer's collection, held back by it, lists `holds/` at most
/// once per quarter ttl, and at least once a minute (60), whatever its own
/// flush interval.
#[tokio::test(start_paused = true)]
async fn a_hold_costs_a_bounded_number_of_requests_per_hour() {
    let counted = Arc::new(ByFolder {
        inner: Some(faulty_memory().storage()),
        ..ByFolder::default()
    });
    let storage = Storage::new(Counting(counted.clone()));
    let wal = open(&storage, config()).await;
    churn(&wal, 5).await;
    let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
        .await
        .unwrap();
    let ttl = Duration::from_secs(300);
    let hold = within(Hold::place(
        storage.clone(),
        PREFIX,
        &config(),
        "standby",
        ttl,
        0,
    ))
    .await
    .unwrap();
    let mut follower = reader.follow([(1, EntryId::MAX)]);
    follower.keep_hold(hold);
    churn(&wal, 5).await;
    let before = (
        counted.of("create", "holds"),
        counted.of("delete", "holds"),
        counted.of("list", "holds"),
    );
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let creates = counted.of("create", "holds") - before.0;
    let deletes = counted.of("delete", "holds") - before.1;
    let lists = counted.of("list", "holds") - before.2;
    assert!((47..=50).contains(&creates), "creates {creates}");
    assert!((47..=50).contains(&deletes), "deletes {deletes}");
    assert!(lists <= 61, "the writer listed holds {lists} times");
    assert!(lists >= 1, "the writer never looked at the holds");
    drop(follower);
    wal.stop().await.unwrap();
}

/// Without a hold, a follower that fell behind collection meets holes but
/// goes on past them to the entries above, within a few intervals.
#[tokio::test(start_paused = true)]
async fn a_follower_behind_collection_without_a_hold_goes_on_past_its_holes() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
    let reader = within(WalReader::open(storage.clone(), PREFIX, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    assert_eq!(within(follower.next()).await.unwrap().unwrap().id, first);
    let ids = churn(&wal, 40).await;
    collected_below(&storage, objwal::format::sequence_of(ids[30])).await;
    // The writer goes on; the follower must reach its newest entry within
    // a few follow_max_intervals, not an idle check away.
    let last = wal.append(vec![(1, b("last"))]).await.unwrap()[0];
    let reached = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(item) = follower.next().await {
            if item.unwrap().id == last {
                return;
            }
        }
    })
    .await;
    assert!(reached.is_ok(), "the follower stalled behind its holes");
    assert!(!follower.holes(1).is_empty());
    wal.stop().await.unwrap();
}

/// The same with eight busy writers and 30 ms on every request, as
/// `bench-follow catch-up --collect` runs it: the writers collect every
/// object but the newest within a round trip of its landing, so the
/// follower can read none of them (the bench's unheld follower never
/// drains: every object is a hole); once they pause it finds the next
/// entry. A hold is what lets such a follower read them.
#[tokio::test(start_paused = true)]
async fn a_follower_behind_eight_collecting_writers_goes_on_past_its_holes() {
    use objwal::storage::fault::{FaultyStorage, Op};
    let _t = std::env::var("HOLDS_TRACE").ok().map(|f| {
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(f))
                .with_test_writer()
                .finish(),
        )
    });
    let base = faulty_memory().storage();
    let writer_store = FaultyStorage::new(base.clone());
    writer_store.set_latency(Op::Create, Duration::from_millis(30));
    let wal = open(
        &writer_store.storage(),
        Config {
            early_seals: objwal::EarlySeals::Unlimited,
            ..config()
        },
    )
    .await;
    let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
    let follower_store = FaultyStorage::new(base.clone());
    follower_store.set_latency(Op::Read, Duration::from_millis(30));
    follower_store.set_latency(Op::List, Duration::from_millis(30));
    let reader = within(WalReader::open(
        follower_store.storage(),
        PREFIX,
        Config::default(),
    ))
    .await
    .unwrap();
    let mut follower = reader.follow([(1, first)]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let newest = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..8 {
        let (wal, stop, newest) = (wal.clone(), stop.clone(), newest.clone());
        writers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = wal.append(vec![(1, b("x"))]).await.unwrap()[0];
                newest.fetch_max(id, std::sync::atomic::Ordering::Relaxed);
                wal.obsolete(1, id).await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    // Every object but the newest was collected within a round trip of
    // landing: the follower can read none of them (holes). Once the
    // writers pause, it must find the entry appended next.
    let last = wal.append(vec![(1, b("last"))]).await.unwrap()[0];
    let reached = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(item) = follower.next().await {
            if item.unwrap().id == last {
                return;
            }
        }
    })
    .await;
    assert!(!follower.holes(1).is_empty());
    assert!(reached.is_ok(), "the follower stalled behind its holes");
    wal.stop().await.unwrap();
}
