//! A standby that keeps up (issue 31): a follower that fell behind reads
//! ahead and catches up at several objects per round trip, across a
//! writer's restart; `Follower::catch_up` takes in everything that landed
//! before the question; `Follower::lag` and the lag gauges say how far
//! behind it is; a standby promoted by opening the prefix reads above its
//! positions exactly what it had not yielded, and loses nothing.
//!
//! Deterministic: paused time on the memory backend, 30 ms of latency on
//! every read and listing of the follower (a remote store), so elapsed
//! virtual time counts round trips; a deadline on every wait (`within`).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::{Config, Entry, EntryId, Follower, Lag, Storage, Wal, WalReader};
use tokio::time::Instant;

use crate::common::*;

const PREFIX: &str = "t";
const LATENCY: Duration = Duration::from_millis(30);

fn config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        follow_interval: Duration::from_millis(10),
        follow_max_interval: Duration::from_millis(100),
        ..Config::default()
    }
}

/// A follower of region 1 from `from`, reading through its own fault
/// wrapper with [`LATENCY`] on every read and listing.
async fn slow_follower(storage: &Storage, from: EntryId) -> (Follower, FaultyStorage) {
    let counted = FaultyStorage::new(storage.clone());
    let reader = within(WalReader::open(counted.storage(), PREFIX, config()))
        .await
        .unwrap();
    counted.set_latency(Op::Read, LATENCY);
    counted.set_latency(Op::List, LATENCY);
    counted.reset_counts();
    (reader.follow([(1, from)]), counted)
}

/// Appends `n` entries of region 1 one after the other: one object each.
async fn append_objects(wal: &Wal, n: usize) -> Vec<EntryId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(wal.append(vec![(1, b(&format!("e{i}")))]).await.unwrap()[0]);
    }
    ids
}

/// The next `n` entries, failing on an error item or an end.
async fn next_entries(follower: &mut Follower, n: usize) -> Vec<Entry> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        match within(follower.next()).await {
            Some(item) => got.push(item.unwrap()),
            None => panic!("the follower ended after {} entries", got.len()),
        }
    }
    got
}

fn ids(entries: &[Entry]) -> Vec<EntryId> {
    entries.iter().map(|e| e.id).collect()
}

/// Issue 31 item 1: once behind, a follower read about one object per
/// round trip, so it never caught up with busy writers. It reads ahead
/// now: 200 objects behind, it takes them in in at most a quarter as
/// many round trips, one poll per object (plus the few its read-ahead
/// starts past the end), in order.
#[tokio::test(start_paused = true)]
async fn a_follower_200_objects_behind_catches_up_in_a_quarter_of_the_round_trips() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
    let (mut follower, counted) = slow_follower(&storage, 0).await;
    assert_eq!(ids(&next_entries(&mut follower, 1).await), vec![first]);
    // The consumer looks away while the writer lands 200 objects.
    let behind = append_objects(&wal, 200).await;
    counted.reset_counts();
    let start = Instant::now();
    let got = next_entries(&mut follower, behind.len()).await;
    let round_trips = start.elapsed().as_secs_f64() / LATENCY.as_secs_f64();
    assert_eq!(ids(&got), behind, "every entry, in order, once");
    assert!(
        round_trips <= behind.len() as f64 / 4.0,
        "{round_trips:.1} round trips for {} objects",
        behind.len()
    );
    let counts = counted.counts();
    assert_eq!(counts.list.requests, 0, "a poll per object, no listing");
    assert!(
        counts.read.requests <= behind.len() as u64 + 16,
        "{} reads for {} objects",
        counts.read.requests,
        behind.len()
    );
    wal.stop().await.unwrap();
}

/// Reading ahead keeps the chain's rules: a follower behind a writer's
/// restart (a settle marker at its next key, the new run's start object
/// far above, polls started ahead of keys the chain jumps over) yields
/// every entry of both runs, in order, once.
#[tokio::test(start_paused = true)]
async fn a_follower_behind_across_a_restart_yields_every_entry_once() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
    let (mut follower, _counted) = slow_follower(&storage, 0).await;
    assert_eq!(ids(&next_entries(&mut follower, 1).await), vec![first]);
    let mut written = append_objects(&wal, 60).await;
    wal.stop().await.unwrap();
    let wal = open(&storage, config()).await;
    written.extend(append_objects(&wal, 60).await);
    let got = next_entries(&mut follower, written.len()).await;
    assert_eq!(ids(&got), written);
    let unique: BTreeSet<EntryId> = ids(&got).into_iter().collect();
    assert_eq!(unique.len(), written.len());
    wal.stop().await.unwrap();
}

/// Issue 31 item 4: `catch_up` yields every entry that landed before it
/// was called, then ends, with the lag at zero; the follower goes on after
/// it.
#[tokio::test(start_paused = true)]
async fn catch_up_yields_what_landed_before_it_then_ends_and_the_follower_goes_on() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, config()).await;
    let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
    let (mut follower, counted) = slow_follower(&storage, 0).await;
    assert_eq!(ids(&next_entries(&mut follower, 1).await), vec![first]);
    let landed = append_objects(&wal, 30).await;
    let mut got = Vec::new();
    {
        let mut caught_up = follower.catch_up();
        while let Some(item) = within(caught_up.next()).await {
            got.push(item.unwrap());
        }
    }
    assert_eq!(ids(&got), landed, "everything that landed, then the end");
    assert!(
        counted.counts().list.requests >= 1,
        "the end is confirmed by a listing"
    );
    assert_eq!(follower.lag(), Lag::default());
    // Nothing landed since: a second catch-up ends at once, empty.
    let mut again = follower.catch_up();
    assert!(within(again.next()).await.is_none());
    // The follower goes on.
    let later = wal.append(vec![(1, b("later"))]).await.unwrap()[0];
    assert_eq!(ids(&next_entries(&mut follower, 1).await), vec![later]);
    wal.stop().await.unwrap();
}

/// The gauges of the follower of prefix `t`, as the recorder holds them.
fn lag_gauges(snapshotter: &Snapshotter) -> (f64, f64) {
    let mut objects = f64::NAN;
    let mut seconds = f64::NAN;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labelled = key
            .key()
            .labels()
            .any(|l| l.key() == "prefix" && l.value() == PREFIX);
        if let (true, DebugValue::Gauge(v)) = (labelled, value) {
            match key.key().name() {
                "objwal_follow_lag_objects" => objects = v.into_inner(),
                "objwal_follow_lag_seconds" => seconds = v.into_inner(),
                _ => {}
            }
        }
    }
    (objects, seconds)
}

/// Issue 31 item 4: a follower whose consumer looks away reports the
/// objects its polls found and it has not yielded, and their age, in
/// `lag()` and the gauges `objwal_follow_lag_objects` and
/// `objwal_follow_lag_seconds`; both fall to zero once it caught up.
#[test]
fn the_lag_and_its_gauges_count_objects_seen_not_yielded_and_their_age() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let storage = faulty_memory().storage();
            let wal = open(&storage, config()).await;
            wal.append(vec![(1, b("first"))]).await.unwrap();
            let (mut follower, _counted) = slow_follower(&storage, 0).await;
            next_entries(&mut follower, 1).await;
            assert_eq!(follower.lag(), Lag::default(), "nothing landed since");
            let landed = append_objects(&wal, 40).await;
            // The consumer takes a few entries, then looks away for 3 s.
            next_entries(&mut follower, 4).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let lag = follower.lag();
            assert!(
                (1..=36).contains(&lag.objects),
                "the polls started ahead found objects not yielded: {lag:?}"
            );
            assert!(lag.age >= Duration::from_secs(3), "{lag:?}");
            let (objects, seconds) = lag_gauges(&snapshotter);
            assert_eq!(objects, lag.objects as f64);
            assert!((seconds - lag.age.as_secs_f64()).abs() < 0.001, "{seconds}");
            let mut got = 4;
            let mut caught_up = follower.catch_up();
            while let Some(item) = within(caught_up.next()).await {
                item.unwrap();
                got += 1;
            }
            assert_eq!(got, landed.len());
            assert_eq!(follower.lag(), Lag::default());
            assert_eq!(lag_gauges(&snapshotter), (0.0, 0.0));
            wal.stop().await.unwrap();
        });
    });
}

/// Issue 31 item 5: a standby that kept pace becomes the writer of a dead
/// primary's prefix by opening it (fencing) and reading only above its
/// follower's positions. Those reads return exactly the entries the
/// follower had not yielded (what its own `catch_up` would have yielded),
/// together with what it yielded they hold every entry the primary
/// acknowledged, and the new writer's first append is accepted above
/// them. The primary marks obsolete only what the standby took in (the
/// standby guide's rule), so collection runs and nothing it needs is
/// hidden.
#[tokio::test(start_paused = true)]
async fn a_promoted_standby_reads_above_its_positions_exactly_what_it_had_not_yielded() {
    const REGIONS: u64 = 4;
    let storage = faulty_memory().storage();
    let primary_store = FaultyStorage::new(storage.clone());
    primary_store.set_latency(Op::Create, LATENCY);
    let wal = open(&primary_store.storage(), config()).await;
    let mut acknowledged: Vec<EntryId> = Vec::new();
    for region in 1..=REGIONS {
        acknowledged.extend(wal.append(vec![(region, b("start"))]).await.unwrap());
    }
    let counted = FaultyStorage::new(storage.clone());
    counted.set_latency(Op::Read, LATENCY);
    counted.set_latency(Op::List, LATENCY);
    let reader = within(WalReader::open(counted.storage(), PREFIX, config()))
        .await
        .unwrap();
    let mut follower = reader.follow((1..=REGIONS).map(|r| (r, 0)));

    // Four writers, one region each, record what was acknowledged.
    let (acks, mut acked) = tokio::sync::mpsc::unbounded_channel();
    let writers: Vec<_> = (1..=REGIONS)
        .map(|region| {
            let (wal, acks) = (wal.clone(), acks.clone());
            tokio::spawn(async move {
                for n in 0u64.. {
                    let ids = wal
                        .append(vec![(region, b(&format!("r{region} e{n}")))])
                        .await
                        .unwrap();
                    let _ = acks.send(ids[0]);
                }
            })
        })
        .collect();

    // The standby keeps pace for 2 s, and the primary flushes what the
    // standby took in.
    let mut yielded: Vec<Entry> = Vec::new();
    let keep_pace = Instant::now() + Duration::from_secs(2);
    let mut flushed = Instant::now();
    while Instant::now() < keep_pace {
        if let Ok(item) = tokio::time::timeout_at(keep_pace, follower.next()).await {
            yielded.push(item.expect("the follower goes on").unwrap());
        }
        if flushed.elapsed() >= Duration::from_millis(200) {
            for (region, position) in follower.positions() {
                wal.obsolete(region, position).await.unwrap();
            }
            flushed = Instant::now();
        }
    }
    // Its consumer looks away for a moment, then the primary dies: from
    // here on nothing it starts lands, and its handles go without a stop.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        primary_store.counts().delete.requests > 0,
        "the primary's collection ran"
    );
    primary_store.stall_next(Op::Create, "", usize::MAX);
    primary_store.stall_next(Op::Delete, "", usize::MAX);
    for writer in &writers {
        writer.abort();
    }
    for writer in writers {
        assert!(within(writer).await.unwrap_err().is_cancelled());
    }
    drop(wal);
    drop(acks);
    while let Some(id) = acked.recv().await {
        acknowledged.push(id);
    }

    // What the follower had not yielded, by its own catch-up.
    let positions = follower.positions();
    let mut not_yielded: Vec<Entry> = Vec::new();
    {
        let mut caught_up = follower.catch_up();
        while let Some(item) = within(caught_up.next()).await {
            not_yielded.push(item.unwrap());
        }
    }
    drop(follower);
    assert!(
        not_yielded.len() >= 4,
        "the standby was behind at the decision: {} entries",
        not_yielded.len()
    );

    // Promotion: open (fencing), read above the positions, append.
    let promoted_store = FaultyStorage::new(storage.clone());
    for op in [Op::Create, Op::Read, Op::List] {
        promoted_store.set_latency(op, LATENCY);
    }
    let started = Instant::now();
    let promoted = within(Wal::open(promoted_store.storage(), PREFIX, config()))
        .await
        .unwrap();
    let mut above: Vec<Entry> = Vec::new();
    for &(region, position) in &positions {
        above.extend(within(read_all(&promoted, region, position + 1)).await);
    }
    let first = within(promoted.append(vec![(1, b("the new writer"))]))
        .await
        .unwrap()[0];
    let pause = started.elapsed();

    let by_region = |entries: &[Entry]| {
        let mut sorted = entries.to_vec();
        sorted.sort_by_key(|e| (e.region, e.id));
        sorted
    };
    assert_eq!(
        by_region(&above),
        by_region(&not_yielded),
        "the reads above the positions return exactly what the follower had not yielded"
    );
    let held: BTreeSet<EntryId> = yielded.iter().chain(&above).map(|e| e.id).collect();
    let lost: Vec<EntryId> = acknowledged
        .iter()
        .copied()
        .filter(|id| !held.contains(id))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged entries lost: {lost:?} of {}",
        acknowledged.len()
    );
    assert!(first > held.iter().copied().max().unwrap_or(0));
    assert!(
        pause < Duration::from_secs(2),
        "promoted in {pause:?} of virtual time"
    );
    within(promoted.stop()).await.unwrap();
}
