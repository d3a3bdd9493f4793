//! Bulk replay (issue 15, item 1): many regions from one pass over the
//! objects, each object read once, the same entries as per-region reads,
//! memory bounded with a stalled consumer, no region waiting on another's
//! read, and corruption, holes and collection as in `read`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use objwal::storage::fault::Op;
use objwal::{
    Config, CorruptionPolicy, Entry, EntryId, Error, ObjectStorage, RegionId, Wal, WalReader,
};

use crate::common::*;

/// `objects` objects, each holding one entry of `payload` bytes of every
/// region of `regions` (one durable append each).
async fn history(
    wal: &Wal,
    regions: &[RegionId],
    objects: usize,
    payload: usize,
) -> Vec<Vec<EntryId>> {
    let mut ids = Vec::new();
    for n in 0..objects {
        let entries = regions
            .iter()
            .map(|&r| {
                (
                    r,
                    bytes::Bytes::from(format!("{r}:{n}:{}", "x".repeat(payload))),
                )
            })
            .collect();
        ids.push(wal.append(entries).await.unwrap());
    }
    ids
}

/// The entries of each region, in the order the stream gave them.
fn by_region(entries: Vec<Entry>) -> BTreeMap<RegionId, Vec<Entry>> {
    let mut out: BTreeMap<RegionId, Vec<Entry>> = BTreeMap::new();
    for e in entries {
        out.entry(e.region).or_default().push(e);
    }
    out
}

/// Per region, what `read(region, from)` yields (regions without entries
/// left out).
async fn reads(wal: &Wal, wanted: &[(RegionId, EntryId)]) -> BTreeMap<RegionId, Vec<Entry>> {
    let mut out = BTreeMap::new();
    for &(region, from) in wanted {
        let entries = read_all(wal, region, from).await;
        if !entries.is_empty() {
            out.insert(region, entries);
        }
    }
    out
}

fn object_keys(reads: &BTreeMap<String, (u64, u64)>) -> Vec<(String, u64)> {
    reads
        .iter()
        .filter(|(k, _)| k.contains("/objects/"))
        .map(|(k, (n, _))| (k.clone(), *n))
        .collect()
}

#[tokio::test]
async fn replay_yields_what_per_region_reads_yield() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    let ids = history(&wal, &[1, 2, 3, 4], 6, 10).await;
    wal.obsolete(2, ids[2][1]).await.unwrap();
    wal.release_region(3).await.unwrap();
    let wanted = [(1, ids[1][0]), (2, 0), (3, 0), (4, 0), (9, 0)];
    let replayed = collect_entries(wal.replay(wanted)).await.unwrap();
    let grouped = by_region(replayed);
    assert_eq!(grouped, reads(&wal, &wanted).await);
    assert_eq!(grouped[&1].len(), 5, "region 1 from its second entry");
    assert_eq!(grouped[&2].len(), 3, "region 2 above its watermark");
    assert!(
        !grouped.contains_key(&3),
        "a released region replays as empty"
    );
    wal.stop().await.unwrap();

    // A reader of the prefix replays the same: the stop made region 2's
    // flush mark durable.
    let reader = WalReader::open(storage, "t", test_config()).await.unwrap();
    let replayed = by_region(collect_entries(reader.replay(wanted)).await.unwrap());
    assert_eq!(replayed[&2], grouped[&2]);
    assert_eq!(replayed[&1], grouped[&1]);
    assert!(!replayed.contains_key(&3));
}

#[tokio::test]
async fn each_object_is_read_once_however_many_regions_replay() {
    let counting = Instrumented::wrap(faulty_memory().storage(), None);
    let storage = counting.storage();
    let wal = open(&storage, test_config()).await;
    let regions: Vec<RegionId> = (1..=20).collect();
    let ids = history(&wal, &regions, 30, 40).await;
    counting.reset();
    let wanted: Vec<_> = regions.iter().map(|&r| (r, 0)).collect();
    let replayed = collect_entries(wal.replay(wanted.clone())).await.unwrap();
    assert_eq!(replayed.len(), 20 * 30);
    let keys = object_keys(&counting.reads());
    assert_eq!(keys.len(), 30, "{keys:?}");
    assert!(
        keys.iter().all(|(_, n)| *n == 1),
        "one read per object: {keys:?}"
    );

    // Per-region reads fetch every object once per region.
    counting.reset();
    assert_eq!(reads(&wal, &wanted).await.len(), 20);
    let keys = object_keys(&counting.reads());
    assert!(keys.iter().all(|(_, n)| *n == 20), "{keys:?}");

    // Replayed from a watermark in the middle, objects below are not read.
    counting.reset();
    let from: Vec<_> = regions.iter().map(|&r| (r, ids[10][0])).collect();
    let replayed = collect_entries(wal.replay(from)).await.unwrap();
    assert_eq!(replayed.len(), 20 * 20, "every region from object 11");
    let keys = object_keys(&counting.reads());
    assert_eq!(keys.len(), 20, "{keys:?}");
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn entries_of_a_region_come_in_id_order_and_regions_interleave() {
    let storage = faulty_memory().storage();
    let config = Config {
        replay_concurrency: 4,
        ..test_config()
    };
    let wal = open(&storage, config).await;
    history(&wal, &[1, 2, 3], 12, 10).await;
    let replayed = collect_entries(wal.replay([(1, 0), (2, 0), (3, 0)]))
        .await
        .unwrap();
    for entries in by_region(replayed.clone()).values() {
        assert!(entries.windows(2).all(|w| w[0].id < w[1].id));
    }
    // Not region by region: the first object's three segments come first.
    let first: Vec<_> = replayed.iter().take(3).map(|e| e.region).collect();
    assert_eq!(first, [1, 2, 3]);
    wal.stop().await.unwrap();
}

/// The consumer takes one entry and stops: the reads go on (they are
/// spawned) only until `replay_buffer_bytes` are held; once it takes the
/// rest, every entry arrives.
#[tokio::test(start_paused = true)]
async fn a_stalled_consumer_holds_at_most_the_buffer() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let buffer = 64 << 10;
    let config = Config {
        replay_buffer_bytes: buffer,
        replay_concurrency: 16,
        ..test_config()
    };
    let wal = open(&storage, config).await;
    // 40 objects of about 20 KiB for each of two regions.
    history(&wal, &[1, 2], 40, 10_000).await;
    faulty.set_latency(Op::Read, Duration::from_millis(5));
    faulty.reset_counts();
    let mut replay = Box::pin(wal.replay([(1, 0), (2, 0)]));
    let first = within(replay.next()).await.unwrap().unwrap();
    // Time passes (paused: the runtime runs every read that can run).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let fetched = faulty.counts().read.bytes;
    // The consumer holds one read's bytes at most as "taken".
    let one_read = 2 * 10_100;
    assert!(
        fetched <= buffer + one_read,
        "fetched {fetched} with a buffer of {buffer}"
    );
    assert!(
        fetched >= buffer / 2,
        "reads go ahead of the consumer: {fetched}"
    );
    let rest = within(collect_entries(replay)).await.unwrap();
    assert_eq!(1 + rest.len(), 80, "{}", first.id);
    wal.stop().await.unwrap();
}

/// A region whose next object is slow to read does not hold back the
/// entries of other regions already fetched.
#[tokio::test]
async fn a_region_waiting_for_its_read_does_not_hold_back_the_others() {
    let gate = Instrumented::wrap(
        faulty_memory().storage(),
        Some("t/objects/00000000000000000003.wal"),
    );
    let storage = gate.storage();
    let wal = open(&storage, test_config()).await;
    // Object 2 holds both regions, 3 only region 1, 4..=6 only region 2.
    wal.append(vec![(1, b("a0")), (2, b("b0"))]).await.unwrap();
    let slow = wal.append(vec![(1, b("a1"))]).await.unwrap();
    assert_eq!(objwal::format::sequence_of(slow[0]), 3);
    for n in 1..4 {
        wal.append(vec![(2, b(&format!("b{n}")))]).await.unwrap();
    }
    let mut replay = Box::pin(wal.replay([(1, 0), (2, 0)]));
    let mut got = Vec::new();
    for _ in 0..5 {
        let e = within(replay.next()).await.unwrap().unwrap();
        got.push(String::from_utf8_lossy(&e.data).into_owned());
    }
    // Region 1's a1 is still held; region 2 came through to its end.
    assert!(!got.contains(&"a1".to_owned()), "{got:?}");
    assert_eq!(
        got.iter().filter(|p| p.starts_with('b')).count(),
        4,
        "{got:?}"
    );
    within(gate.arrived.notified()).await;
    gate.open();
    let rest = within(collect_entries(replay)).await.unwrap();
    assert_eq!(payloads(&rest), ["a1"]);
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn corruption_is_refetched_then_skipped_or_failed_as_in_read() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    let ids = history(&wal, &[1, 2], 3, 10).await;
    let key = "t/objects/00000000000000000003.wal";
    // Damaged in transit once: the refetch of the segment gets it whole.
    faulty.corrupt_next_reads(key, 1);
    let replayed = collect_entries(wal.replay([(1, 0), (2, 0)])).await.unwrap();
    assert_eq!(replayed.len(), 6);
    assert!(wal.holes(1).is_empty() && wal.holes(2).is_empty());
    // Damaged for good (the merged read and the refetch): a hole under skip.
    faulty.corrupt_next_reads(key, 2);
    let replayed = collect_entries(wal.replay([(1, 0), (2, 0)])).await.unwrap();
    assert_eq!(replayed.len(), 5, "one segment skipped");
    let holes = [wal.holes(1), wal.holes(2)].concat();
    assert_eq!(holes.len(), 1, "{holes:?}");
    assert_eq!(holes[0].first_id, ids[1][holes[0].region as usize - 1]);
    wal.stop().await.unwrap();

    let failing = Config {
        on_corrupted_segment: CorruptionPolicy::Fail,
        ..test_config()
    };
    let wal = open(&storage, failing).await;
    faulty.corrupt_next_reads(key, 2);
    let err = collect_entries(wal.replay([(1, 0), (2, 0)]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn an_object_collected_under_the_replay_is_skipped() {
    let gate = Instrumented::wrap(
        faulty_memory().storage(),
        Some("t/objects/00000000000000000002.wal"),
    );
    let storage = gate.storage();
    let wal = open(&storage, test_config()).await;
    let first = wal.append(vec![(1, b("a0"))]).await.unwrap();
    wal.append(vec![(1, b("a1"))]).await.unwrap();
    let mut replay = Box::pin(wal.replay([(1, 0)]));
    let next = tokio::spawn(async move {
        let got = collect_entries(&mut replay).await;
        got.map(|e| payloads(&e))
    });
    within(gate.arrived.notified()).await;
    // The engine flushes a0 while its object is being read; collection
    // deletes the object under the replay.
    wal.obsolete(1, first[0]).await.unwrap();
    wal.append(vec![(1, b("a2"))]).await.unwrap();
    within(async {
        while gate.inner_has("t/objects/00000000000000000002.wal").await {
            wal.flush().await.unwrap();
            tokio::task::yield_now().await;
        }
    })
    .await;
    gate.open();
    let got = within(next).await.unwrap().unwrap();
    assert_eq!(got, ["a1", "a2"]);
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn the_release_region_is_refused() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    wal.append(vec![(1, b("a"))]).await.unwrap();
    let err = collect_entries(wal.replay([(1, 0), (u64::MAX, 0)]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(collect_entries(wal.replay([])).await.unwrap().is_empty());
    wal.stop().await.unwrap();
    assert!(collect_entries(wal.replay([(1, 0)]))
        .await
        .unwrap_err()
        .is_stopped());
}

/// One step of a random history.
#[derive(Debug, Clone)]
enum Step {
    /// Appends one entry to each region listed (one object, usually).
    Append(Vec<RegionId>),
    /// Obsoletes a region through its n-th id so far (modulo its count).
    Obsolete(RegionId, usize),
    Release(RegionId),
    /// Stops and reopens; the engine hands its watermarks in again.
    Reopen,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => proptest::collection::vec(0u64..6, 1..5).prop_map(Step::Append),
        2 => (0u64..6, any::<usize>()).prop_map(|(r, n)| Step::Obsolete(r, n)),
        1 => (0u64..6).prop_map(Step::Release),
        1 => Just(Step::Reopen),
    ]
}

/// Replays `wanted` in bulk and per region on `wal`, and checks they agree.
async fn agree(wal: &Wal, wanted: &[(RegionId, EntryId)]) {
    let bulk = collect_entries(wal.replay(wanted.to_vec())).await.unwrap();
    for entries in by_region(bulk.clone()).values() {
        assert!(entries.windows(2).all(|w| w[0].id < w[1].id));
    }
    assert_eq!(by_region(bulk), reads(wal, wanted).await, "{wanted:?}");
}

async fn run_history(steps: Vec<Step>, starts: Vec<u64>, concurrency: usize, buffer: u64) {
    let storage = faulty_memory().storage();
    let config = Config {
        replay_concurrency: concurrency,
        replay_buffer_bytes: buffer,
        ..test_config()
    };
    let mut wal = open(&storage, config.clone()).await;
    let mut ids: BTreeMap<RegionId, Vec<EntryId>> = BTreeMap::new();
    let mut marks: BTreeMap<RegionId, EntryId> = BTreeMap::new();
    let mut released = std::collections::BTreeSet::new();
    for (n, step) in steps.into_iter().enumerate() {
        match step {
            Step::Append(regions) => {
                let regions: Vec<_> = regions
                    .into_iter()
                    .filter(|r| !released.contains(r))
                    .collect();
                let entries = regions
                    .iter()
                    .map(|&r| {
                        (
                            r,
                            bytes::Bytes::from(format!("{r}.{n}:{}", "y".repeat(n * 37 % 300))),
                        )
                    })
                    .collect();
                for (r, id) in regions.iter().zip(wal.append(entries).await.unwrap()) {
                    ids.entry(*r).or_default().push(id);
                }
            }
            Step::Obsolete(region, nth) => {
                if let Some(list) = ids.get(&region) {
                    let id = list[nth % list.len()];
                    wal.obsolete(region, id).await.unwrap();
                    let mark = marks.entry(region).or_insert(0);
                    *mark = (*mark).max(id);
                }
            }
            Step::Release(region) => {
                wal.release_region(region).await.unwrap();
                released.insert(region);
            }
            Step::Reopen => {
                wal.stop().await.unwrap();
                wal = open(&storage, config.clone()).await;
                for (&region, &id) in &marks {
                    wal.obsolete(region, id).await.unwrap();
                }
            }
        }
    }
    // Each region from 0, or from one of its ids.
    let wanted: Vec<(RegionId, EntryId)> = (0..6u64)
        .map(|r| {
            let list = ids.get(&r).map(Vec::as_slice).unwrap_or_default();
            let pick = starts[r as usize] as usize;
            (
                r,
                if pick == 0 || list.is_empty() {
                    0
                } else {
                    list[pick % list.len()]
                },
            )
        })
        .collect();
    agree(&wal, &wanted).await;
    wal.stop().await.unwrap();
    // A reader knows no watermark: from every start, all that is indexed.
    let reader = WalReader::open(storage, "t", config).await.unwrap();
    let bulk = by_region(
        collect_entries(reader.replay(wanted.clone()))
            .await
            .unwrap(),
    );
    for &(region, from) in &wanted {
        let read = collect_entries(reader.read(region, from)).await.unwrap();
        assert_eq!(
            bulk.get(&region).cloned().unwrap_or_default(),
            read,
            "reader, region {region}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Over random histories of appends, watermarks, releases, restarts and
    /// the collection they cause, bulk replay yields per region exactly what
    /// `read` yields, whatever the reads in flight and the buffer.
    #[test]
    fn bulk_replay_equals_per_region_reads(
        steps in proptest::collection::vec(step(), 1..40),
        starts in proptest::collection::vec(0u64..8, 6),
        concurrency in 1usize..5,
        buffer in proptest::prop_oneof![proptest::strategy::Just(64u64 << 10), proptest::strategy::Just(64u64 << 20)],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(within(run_history(steps, starts, concurrency, buffer)));
    }
}

/// Issue 30 item 10(b): a reader resumed below what the writer's
/// collection deleted since the reader opened cannot read those entries
/// (its catalog does not know the flush mark that let them go): its
/// `read` and `replay` skip the collected object and say so with a hole,
/// never in silence; a follower started from its catalog does too.
/// Before, the reader's `read` and `replay` skipped it without a hole.
#[tokio::test(start_paused = true)]
async fn a_reader_resumed_below_what_collection_deleted_reports_a_hole() {
    let storage = faulty_memory().storage();
    let wal = open(&storage, test_config()).await;
    let gone = wal.append(vec![(1, b("a0"))]).await.unwrap()[0];
    wal.append(vec![(1, b("a1"))]).await.unwrap();
    let reader = WalReader::open(storage.clone(), "t", test_config())
        .await
        .unwrap();
    let key = format!("t/objects/{:020}.wal", objwal::format::sequence_of(gone));
    // The writer's engine flushes a0; collection deletes its object.
    wal.obsolete(1, gone).await.unwrap();
    within(async {
        loop {
            wal.append(vec![(2, b("carrier"))]).await.unwrap();
            let listed = storage.list("t/objects/").await.unwrap();
            if !listed.iter().any(|m| m.key == key) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let got = within(collect_entries(reader.read(1, 0))).await.unwrap();
    assert_eq!(payloads(&got), ["a1"]);
    let holes = reader.holes(1);
    assert_eq!(holes.len(), 1, "{holes:?}");
    assert_eq!(
        (holes[0].key.as_str(), holes[0].first_id, holes[0].last_id),
        (key.as_str(), gone, gone)
    );
    let got = within(collect_entries(reader.replay([(1, 0)])))
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["a1"]);
    let mut follower = reader.follow([(1, 0)]);
    wal.append(vec![(1, b("a2"))]).await.unwrap();
    // Its backfill (a1) ends, and the follower goes on with what lands.
    for want in ["a1", "a2"] {
        let got = within(follower.next()).await.unwrap().unwrap();
        assert_eq!(got.data, b(want));
    }
    let holes = follower.holes(1);
    assert!(
        holes
            .iter()
            .any(|h| h.key == key && h.first_id <= gone && h.last_id >= gone),
        "{holes:?}"
    );
    wal.stop().await.unwrap();
}
