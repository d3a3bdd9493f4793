//! Issue 29 (the fourth hardening round of the protocol): each history the
//! review found, replayed deterministically (paused time, the fault
//! wrapper's holds, a deadline on every wait) and named after what broke.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{AckMode, HedgeCreates};
use crate::format::{self, Header, Link, Object};
use crate::storage::fault::{FaultyStorage, Op};
use crate::storage::{MemoryStorage, StorageErrorKind};

use super::*;

fn durable() -> Config {
    Config {
        ack_mode: AckMode::Durable,
        request_timeout: Some(Duration::from_secs(30)),
        ..config()
    }
}

/// The start object of an opener of `epoch` whose open failed (its closing
/// read found a newer fence), landed at `sequence`: empty, linked to the
/// tip that opener chose, never built on.
fn dead_start_object(sequence: u64, epoch: u64, link: (u64, u64)) -> Bytes {
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

/// The epoch of the object at `key`.
async fn epoch_at(storage: &Storage, key: &str) -> u64 {
    let header = storage
        .read(key, 0..format::HEADER_LEN as u64)
        .await
        .unwrap();
    format::decode_header(&header).unwrap().epoch
}

fn key(prefix: &str, sequence: u64) -> String {
    format!("{prefix}/objects/{sequence:020}.wal")
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

/// Item 1: the writer's next key held a dead object; its create (request
/// A) and the hedge of it (request B) both read it back as dead; A deleted
/// it and landed the batch, then B, acting on its stale read, deleted the
/// key (now A's batch) and created again; A's answer came first, so the
/// append returned `Ok` for an object no longer there. Now nothing deletes
/// a dead object: both requests find it, the key is settled by it, and the
/// append learns `NotDurable`, the truth; the next append lands after it.
/// (Collection may delete it later, once a durable boundary lies above it:
/// no request may create there then but garbage.)
#[tokio::test(start_paused = true)]
async fn a_hedged_create_never_deletes_its_own_landed_object() {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "r4-hedge";
    Wal::open(inner.clone(), prefix, config())
        .await
        .unwrap()
        .stop()
        .await
        .unwrap(); // epoch 1: its start object at 1
    let faults = FaultyStorage::new(inner.clone());
    let config = Config {
        hedge_creates: HedgeCreates::Budget(1.0),
        ..durable()
    };
    let wal = Wal::open(faults.storage(), prefix, config).await.unwrap(); // epoch 2
    let next = highest(&inner, prefix).await + 1;
    inner
        .create(&key(prefix, next), dead_start_object(next, 1, (1, 1)))
        .await
        .unwrap();
    faults.reset_counts();
    faults.hold_creates(true);
    let appending = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(vec![(1, b("taken"))]).await }
    });
    // The create, then its hedge (sent at half the request timeout).
    within(faults.wait_held(2)).await;
    assert_eq!(faults.held(), [key(prefix, next), key(prefix, next)]);
    faults.hold_creates(false);
    assert_eq!(faults.release_all(), 2);
    let err = within(appending).await.unwrap().unwrap_err();
    assert!(matches!(err, Error::NotDurable { .. }), "{err}");
    assert_eq!(
        epoch_at(&inner, &key(prefix, next)).await,
        1,
        "no request deleted it"
    );
    let ids = within(wal.append(vec![(1, b("after"))])).await.unwrap();
    assert_eq!(
        format::sequence_of(ids[0]),
        next + 1,
        "the run goes on past it"
    );
    drop(wal); // a crash
    assert_eq!(replays(&inner, prefix, 1).await, ids);
}

/// Item 2: process Z writes; a dead object D (an older epoch's start object)
/// sits at Z's next key; W opens and its walk met D right after Z's tip: D
/// does not continue Z's chain, so the walk stopped there, while Z deleted
/// D, landed its batch at D's key and acknowledged it: W's chain never held
/// it. Now the walk steps over D as Z does (a filler) and settles the key
/// after it, whether Z's create at D's key is answered before W's open or
/// after it: Z learns `NotDurable` at D's key and is fenced at the next;
/// everything Z acknowledged replays.
#[tokio::test(start_paused = true)]
async fn the_walk_never_stops_at_a_key_the_older_writer_can_still_take() {
    for z_create_in_flight in [false, true] {
        let label = format!("Z's create at D in flight during W's open: {z_create_in_flight}");
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "r4-walk";
        Wal::open(inner.clone(), prefix, config())
            .await
            .unwrap()
            .stop()
            .await
            .unwrap(); // epoch 1
        let z_faults = FaultyStorage::new(inner.clone());
        let z = Wal::open(z_faults.storage(), prefix, durable())
            .await
            .unwrap(); // epoch 2
        let acked = z.append(vec![(1, b("a"))]).await.unwrap();
        let d = format::sequence_of(acked[0]) + 1;
        inner
            .create(&key(prefix, d), dead_start_object(d, 1, (1, 1)))
            .await
            .unwrap();
        let mut in_flight = None;
        if z_create_in_flight {
            z_faults.hold_creates(true);
            let z = z.clone();
            in_flight = Some(tokio::spawn(
                async move { z.append(vec![(1, b("b"))]).await },
            ));
            within(z_faults.wait_held(1)).await;
        }
        let w = Wal::open(inner.clone(), prefix, durable()).await.unwrap(); // epoch 3
        let b_answer = match in_flight {
            Some(task) => {
                z_faults.hold_creates(false);
                z_faults.release_all();
                within(task).await.unwrap()
            }
            None => within(z.append(vec![(1, b("b"))])).await,
        };
        let err = b_answer.unwrap_err();
        assert!(matches!(err, Error::NotDurable { .. }), "{label}: {err}");
        let err = within(z.append(vec![(1, b("c"))])).await.unwrap_err();
        assert!(err.is_fenced(), "{label}: {err}");
        assert_eq!(
            epoch_at(&inner, &key(prefix, d)).await,
            1,
            "{label}: D stays"
        );
        let mut stream = Box::pin(w.read(1, 0));
        let mut seen = Vec::new();
        while let Some(entry) = stream.next().await {
            seen.push(entry.unwrap().id);
        }
        assert_eq!(seen, acked, "{label}: W's chain holds what Z acknowledged");
        w.stop().await.unwrap();
        assert_eq!(replays(&inner, prefix, 1).await, acked, "{label}");
    }
}

/// Item 4: a batch without entries (here only a flush mark, or only a
/// release record) is byte for byte its own void. Its create landed but the
/// response was lost and the read-back failed too, so its void was sent;
/// the void met "exists", read the key back and found "its void" first:
/// `flush` (or `release_region`) answered `NotDurable` although the record
/// was durable. Such a batch is settled by its own bytes: the answer is
/// `Ok`, and the record holds after a restart.
#[tokio::test(start_paused = true)]
async fn a_flush_or_release_whose_create_response_and_read_back_were_lost_answers_ok() {
    for release in [false, true] {
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "r4-entryless";
        let faults = FaultyStorage::new(inner.clone());
        let wal = Wal::open(faults.storage(), prefix, durable())
            .await
            .unwrap();
        let ids = wal.append(vec![(1, b("flushed"))]).await.unwrap();
        let next = format::sequence_of(ids[0]) + 1;
        faults.lose_next_create_responses(&key(prefix, next), 1);
        faults.fail_next(Op::Read, &key(prefix, next), 1, StorageErrorKind::Transient);
        let answer = if release {
            within(wal.release_region(1)).await
        } else {
            wal.obsolete(1, ids[0]).await.unwrap();
            within(wal.flush()).await
        };
        assert!(answer.is_ok(), "release {release}: {answer:?}");
        assert_eq!(highest(&inner, prefix).await, next, "one object");
        wal.stop().await.unwrap();
        let reader = crate::WalReader::open(inner.clone(), prefix, config())
            .await
            .unwrap();
        assert!(replays(&inner, prefix, 1).await.is_empty(), "hidden");
        if release {
            assert!(reader.regions().iter().any(|r| r.region == 1 && r.released));
        }
    }
}

/// One request's round trip in the busy-writer histories.
const RTT: Duration = Duration::from_millis(10);

/// A store where every request takes [`RTT`].
fn slow_store(inner: &Storage) -> FaultyStorage {
    let faults = FaultyStorage::new(inner.clone());
    for op in [Op::Create, Op::Read, Op::List, Op::Delete] {
        faults.set_latency(op, RTT);
    }
    faults
}

/// Item 3: the walk adopted each key it found taken with a listing and a
/// tail read, one at a time (two round trips an object), while the older
/// writer landed an object per round trip with up to 64 keys in flight: the
/// newer process's open never returned and the older writer was never
/// fenced. A round's keys are now adopted together (one suffix read each),
/// and rounds grow to four windows: the open returns within a bounded
/// number of round trips whatever the older writer does, and everything it
/// acknowledged is on the newer chain.
#[tokio::test(start_paused = true)]
async fn an_open_finishes_while_the_older_writer_runs_flat_out() {
    for ack_mode in [AckMode::Enqueued, AckMode::Durable] {
        for max_inflight in [64, Config::default().max_inflight_creates] {
            for callers in [1, 8] {
                let took = open_against_a_busy_writer(ack_mode, max_inflight, callers).await;
                tracing::info!(
                    "{ack_mode:?}, {max_inflight} in flight, {callers} callers: {took} round trips"
                );
                assert!(
                    took <= 150,
                    "{ack_mode:?}, {max_inflight} in flight, {callers} callers: the open took \
                     {took} round trips"
                );
            }
        }
    }
}

/// Opens a prefix whose older writer appends flat out; the open's duration
/// in round trips.
async fn open_against_a_busy_writer(ack_mode: AckMode, max_inflight: usize, callers: usize) -> u64 {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "r4-busy";
    let older = Config {
        ack_mode,
        max_inflight_creates: max_inflight,
        early_seals: crate::EarlySeals::Unlimited,
        // A backlog of 128 appends: the loop below never runs away from
        // the store (paused time advances only when every task waits).
        max_batch_bytes: 32 * 1024,
        max_unpersisted_bytes: 32 * 1024,
        ..config()
    };
    let p = Wal::open(slow_store(&inner).storage(), prefix, older)
        .await
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let (p, stop) = (p.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            // What the older writer acknowledged: durable appends that
            // returned, or enqueued ones a returned `wait_durable` covers
            // (asked every 64 appends, so the writer runs flat out).
            let (mut acked, mut admitted) = (Vec::new(), Vec::new());
            let region = caller as u64 + 1;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let Ok(ids) = p.append(vec![(region, Bytes::from(vec![7u8; 256]))]).await else {
                    break;
                };
                admitted.extend(ids);
                if ack_mode == AckMode::Durable {
                    acked.append(&mut admitted);
                } else if admitted.len() >= 64 {
                    let last = admitted.last().copied().unwrap_or(0);
                    if p.wait_durable(region, last).await.is_err() {
                        break;
                    }
                    acked.append(&mut admitted);
                }
            }
            (region, acked)
        }));
    }
    // Let the older writer run for a while before the newer one opens.
    tokio::time::sleep(RTT * 2).await;
    let started = tokio::time::Instant::now();
    let newer = within(Wal::open(
        slow_store(&inner).storage(),
        prefix,
        Config {
            ack_mode,
            ..config()
        },
    ))
    .await
    .unwrap();
    let took = started.elapsed().as_millis() as u64 / RTT.as_millis() as u64;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut acknowledged = BTreeMap::new();
    for task in tasks {
        let (region, acked) = within(task).await.unwrap();
        acknowledged.insert(region, acked);
    }
    let err = within(p.append(vec![(1, b("after"))])).await.unwrap_err();
    assert!(err.is_fenced() || err.is_poisoned(), "{err}");
    for (region, acked) in acknowledged {
        assert!(!acked.is_empty(), "the older writer made progress");
        let mut stream = Box::pin(newer.read(region, 0));
        let mut seen = Vec::new();
        while let Some(entry) = stream.next().await {
            seen.push(entry.unwrap().id);
        }
        assert!(
            acked.iter().all(|id| seen.binary_search(id).is_ok()),
            "region {region}: everything the older writer acknowledged is on the newer chain"
        );
    }
    newer.stop().await.unwrap();
    took
}

/// Rule 8 for a follower: a filler at the next key after its place is
/// stepped over as the writer steps over it, so the entries the writer
/// acknowledges after it come through without a listing or a hole.
#[tokio::test(start_paused = true)]
async fn a_follower_steps_over_a_filler_as_the_writer_does() {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "r4-follow";
    Wal::open(inner.clone(), prefix, config())
        .await
        .unwrap()
        .stop()
        .await
        .unwrap(); // epoch 1
    let z = Wal::open(inner.clone(), prefix, durable()).await.unwrap(); // epoch 2
    let first = z.append(vec![(1, b("a"))]).await.unwrap();
    let reader = crate::WalReader::open(inner.clone(), prefix, config())
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    let got = within(follower.next()).await.unwrap().unwrap();
    assert_eq!(got.id, first[0]);
    let d = format::sequence_of(first[0]) + 1;
    inner
        .create(&key(prefix, d), dead_start_object(d, 1, (1, 1)))
        .await
        .unwrap();
    let err = z.append(vec![(1, b("taken"))]).await.unwrap_err();
    assert!(matches!(err, Error::NotDurable { .. }), "{err}");
    let after = z.append(vec![(1, b("after"))]).await.unwrap();
    let got = within(follower.next()).await.unwrap().unwrap();
    assert_eq!(got.id, after[0], "the entry after the filler");
    assert!(follower.holes(1).is_empty(), "no hole");
    z.stop().await.unwrap();
}

/// Records when each create of an object key was sent.
#[derive(Debug)]
struct CreateTimes {
    inner: Storage,
    sent: std::sync::Mutex<Vec<(String, tokio::time::Instant)>>,
}

#[async_trait::async_trait]
impl ObjectStorage for CreateTimes {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        if key.contains("/objects/") {
            let now = tokio::time::Instant::now();
            self.sent.lock().unwrap().push((key.to_owned(), now));
        }
        self.inner.create(key, data).await
    }
    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

/// Item 5b: while a durable store was failing, a void's create was sent
/// again at once, with no delay: entering the failing state seals the open
/// batch, and that seal started the waiting creates (the void's among them)
/// before the failing state was back in place. Every repeat of a failing
/// create now waits its backoff delay (the first, `retry_initial_delay`).
#[tokio::test(start_paused = true)]
async fn a_failing_durable_store_repeats_a_void_only_after_its_delay() {
    let faults = FaultyStorage::new(Storage::new(MemoryStorage::new()));
    let times = Arc::new(CreateTimes {
        inner: faults.storage(),
        sent: Default::default(),
    });
    let config = Config {
        retry_initial_delay: Duration::from_millis(100),
        // One create at a time: the second append waits in the open batch
        // while the first batch and its void fail.
        max_inflight_creates: 1,
        ..durable()
    };
    let wal = Wal::open(Storage::from_arc(times.clone()), "r4-void-delay", config)
        .await
        .unwrap();
    faults.set_latency(Op::Create, Duration::from_millis(10));
    faults.fail_next(
        Op::Create,
        "objects/",
        usize::MAX,
        StorageErrorKind::Transient,
    );
    let first = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(vec![(1, b("first"))]).await }
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    let second = tokio::spawn({
        let wal = wal.clone();
        async move { wal.append(vec![(1, b("second"))]).await }
    });
    let _ = within(first).await.unwrap();
    let _ = within(second).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = times.sent.lock().unwrap().clone();
    // Per key: the batch, then its void at once (rule K1), then every
    // repeat of the void after a delay.
    let mut attempts: BTreeMap<String, Vec<tokio::time::Instant>> = BTreeMap::new();
    for (key, at) in sent {
        attempts.entry(key).or_default().push(at);
    }
    assert!(attempts.values().any(|a| a.len() >= 3), "{attempts:?}");
    for (key, at) in &attempts {
        for pair in at.windows(2).skip(1) {
            let gap = pair[1].duration_since(pair[0]);
            assert!(
                gap >= Duration::from_millis(50),
                "{key}: a void sent again {gap:?} after its last attempt"
            );
        }
    }
    drop(wal);
}

/// Writes `bytes` over the object at `key` with byte `at` (from the end
/// when negative) flipped.
async fn damage(storage: &Storage, key: &str, at: i64) {
    let size = storage.read_suffix(key, 1).await.unwrap().size;
    let mut bytes = storage.read(key, 0..size).await.unwrap().to_vec();
    let i = if at < 0 {
        bytes.len() - at.unsigned_abs() as usize
    } else {
        at as usize
    };
    bytes[i] ^= 0xff;
    storage.delete(key).await.unwrap();
    storage.create(key, bytes.into()).await.unwrap();
}

/// Item 5c: under `on_damaged_object = "quarantine"`, a damaged object at
/// the end of the run an open must walk. The walk stopped there (or took
/// it for a placeholder without a jump), while the older writer, whose
/// object it is, may go on acknowledging after it where the walk never
/// settles anything. Where its tail is damaged its jump is unknown: the
/// open fails, naming it, instead of guessing. A damaged header alone is
/// nothing recovery relies on (the tail repeats its fields).
#[tokio::test(start_paused = true)]
async fn a_damaged_object_at_the_end_of_the_run_is_never_walked_past_blindly() {
    let quarantine = Config {
        on_damaged_object: crate::DamagePolicy::Quarantine,
        ..durable()
    };
    for trailer in [true, false] {
        let inner = Storage::new(MemoryStorage::new());
        let prefix = "r4-damaged-end";
        let z = Wal::open(inner.clone(), prefix, durable()).await.unwrap();
        let a = z.append(vec![(1, b("a"))]).await.unwrap();
        let b_ids = z.append(vec![(1, b("b"))]).await.unwrap();
        drop(z); // a crash: its run ends with b's object
        let end = key(prefix, format::sequence_of(b_ids[0]));
        // The trailer's last byte, or a byte of the header.
        damage(&inner, &end, if trailer { -1 } else { 20 }).await;
        let opened = Wal::open(inner.clone(), prefix, quarantine.clone()).await;
        if trailer {
            let err = opened.unwrap_err();
            assert!(
                err.to_string().contains("lies where the log's run goes on"),
                "{err}"
            );
            assert!(err.to_string().contains(&end), "{err}");
        } else {
            // Recovery and the walk read tails, which repeat the header's
            // fields: a damaged header changes nothing they rely on.
            let w = opened.unwrap();
            let ids: Vec<_> = try_read(&w, 1, 0)
                .await
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect();
            assert_eq!(ids, [a[0], b_ids[0]]);
            assert!(w.holes(1).is_empty());
            w.stop().await.unwrap();
        }
    }
}

/// Item 7: one object in the middle of the chain is gone (a store that
/// answered created but kept nothing, a lifecycle rule, a delete by hand).
/// The next open fell back to the older chain, replayed only what lies
/// below the gap with no error and no hole, settled a marker at the missing
/// key, and collection then deleted the intact, acknowledged objects above
/// it. Now the open fails by default, naming the object; under
/// `on_damaged_object = "quarantine"` the objects above are replayed, with a
/// hole at the missing one in every region, and stay on the chain through
/// later opens.
#[tokio::test(start_paused = true)]
async fn a_missing_object_is_never_silent_and_never_costs_the_objects_above_it() {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "r4-missing";
    let wal = Wal::open(inner.clone(), prefix, durable()).await.unwrap();
    let mut acked = Vec::new();
    for n in 0..10 {
        acked.extend(wal.append(vec![(1, b(&format!("e{n}")))]).await.unwrap());
    }
    wal.stop().await.unwrap();
    let gone = acked[4];
    let gone_key = key(prefix, format::sequence_of(gone));
    inner.delete(&gone_key).await.unwrap();
    // By default: refused, naming it, by a writer and a reader alike.
    let err = Wal::open(inner.clone(), prefix, durable())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Recovery { .. }) && err.to_string().contains(&gone_key),
        "{err}"
    );
    let err = crate::WalReader::open(inner.clone(), prefix, config())
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&gone_key), "{err}");
    // Quarantined: everything else replays, the hole is told.
    let quarantine = Config {
        on_damaged_object: crate::DamagePolicy::Quarantine,
        ..durable()
    };
    let expected: Vec<_> = acked.iter().copied().filter(|id| *id != gone).collect();
    let mut ids = expected.clone();
    for life in 0..2 {
        let w = Wal::open(inner.clone(), prefix, quarantine.clone())
            .await
            .unwrap();
        let read: Vec<_> = try_read(&w, 1, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(read, ids, "life {life}");
        let holes = w.holes(1);
        assert_eq!(holes.len(), 1, "life {life}: {holes:?}");
        assert!(holes[0].first_id <= gone && gone <= holes[0].last_id);
        ids.extend(w.append(vec![(1, b("later"))]).await.unwrap());
        // Collection runs: nothing above the gap is obsolete, so nothing
        // of the chain above it may go.
        w.flush().await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.stop().await.unwrap();
    }
    for id in &expected {
        let key = key(prefix, format::sequence_of(*id));
        assert!(inner.read(&key, 0..1).await.is_ok(), "{key} kept");
    }
}
