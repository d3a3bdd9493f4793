//! Region handoff (issue 15, item 5; rfcs/0009): node B takes region R
//! over from node A's log in the same bucket. B replays R's unflushed
//! entries from A's prefix with a `WalReader` (A is never fenced), appends
//! them with ids above every id A handed out for R, and A releases R. A
//! failed or repeated import leaves no duplicate; both logs on one store,
//! in memory and on the loopback S3 server.

use objwal::{Config, Entry, EntryId, Error, Imported, RegionId, Storage, Wal, WalReader};

use crate::common::*;

const R: RegionId = 7;

fn small_batches() -> Config {
    Config {
        max_batch_bytes: 1024,
        max_unpersisted_bytes: 1 << 20,
        ..test_config()
    }
}

/// Node A's history: R and another region written over `n` objects; the
/// engine flushed R through its fourth entry. Returns R's ids.
async fn node_a(storage: &Storage, n: usize) -> Vec<EntryId> {
    let a = Wal::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let got = a
            .append(vec![
                (R, b(&format!("r{i}:{}", "q".repeat(300)))),
                (1, b("other")),
            ])
            .await
            .unwrap();
        ids.push(got[0]);
    }
    a.obsolete(R, ids[3]).await.unwrap();
    a.stop().await.unwrap();
    ids
}

fn payloads_of(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            String::from_utf8_lossy(&e.data)
                .split(':')
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// What B replays of R after a restart, as an engine does: obsolete
/// through the floor it recorded, then read from the next id.
async fn replay_on(wal: &Wal, moved: &Imported) -> Vec<Entry> {
    wal.obsolete(R, moved.floor).await.unwrap();
    read_all(wal, R, moved.floor + 1).await
}

async fn moves_a_region(storage: Storage) {
    let a_ids = node_a(&storage, 12).await;
    // Node B has a history of its own (its ids are of its own sequences).
    let node_b = Wal::open(storage.clone(), "b", small_batches())
        .await
        .unwrap();
    node_b.append(vec![(1, b("b's own"))]).await.unwrap();
    let reader = WalReader::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    let moved = node_b
        .import_region(&reader, R, a_ids[3] + 1)
        .await
        .unwrap();
    assert_eq!(moved.entries, 8);
    assert!(moved.floor >= *a_ids.last().unwrap());
    assert!(moved.first_id > moved.floor && moved.last_id >= moved.first_id);
    // A releases R; B writes R from now on.
    let a = Wal::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    a.release_region(R).await.unwrap();
    a.stop().await.unwrap();
    let next = node_b.append(vec![(R, b("r12:new on b"))]).await.unwrap();
    assert!(next[0] > moved.last_id);
    node_b.stop().await.unwrap();

    let node_b = Wal::open(storage.clone(), "b", small_batches())
        .await
        .unwrap();
    let replayed = replay_on(&node_b, &moved).await;
    let want: Vec<String> = (4..13).map(|i| format!("r{i}")).collect();
    assert_eq!(payloads_of(&replayed), want);
    assert!(replayed.iter().all(|e| e.id > moved.floor));
    assert!(replayed.windows(2).all(|w| w[0].id < w[1].id));
    assert_eq!(payloads(&read_all(&node_b, 1, 0).await), ["b's own"]);
    node_b.stop().await.unwrap();
    // A's log reads R as empty, and R no longer pins its collection.
    let reader = WalReader::open(storage, "a", test_config()).await.unwrap();
    assert!(collect_entries(reader.read(R, 0)).await.unwrap().is_empty());
    assert_eq!(reader.read(1, 0).count_entries().await, 12);
}

trait CountEntries {
    async fn count_entries(self) -> usize;
}

impl<S: futures::Stream<Item = Result<Entry, Error>>> CountEntries for S {
    async fn count_entries(self) -> usize {
        collect_entries(self).await.unwrap().len()
    }
}

#[tokio::test]
async fn a_region_moves_between_two_logs_on_one_store() {
    moves_a_region(faulty_memory().storage()).await;
}

#[cfg(any(feature = "opendal", feature = "object_store"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_moves_between_two_logs_on_the_s3_server() {
    let endpoint = s3_endpoint();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let url = format!("s3://{S3_BUCKET}/handoff/{}-{nanos}", std::process::id());
    let options = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_access_key_id", "objwal-test"),
        ("aws_secret_access_key", "objwal-test"),
        ("aws_region", "us-east-1"),
    ];
    moves_a_region(Storage::from_url_opts(&url, options).unwrap()).await;
}

/// B fails half-way (some appends durable, then its store refuses) and
/// dies; after its restart the engine imports again: B replays each of R's
/// entries once, in order. An import repeated after one that succeeded
/// (B died before the engine recorded the move) hides the first copies too.
#[tokio::test]
async fn an_import_repeated_after_a_failure_leaves_no_duplicate() {
    let storage = faulty_memory().storage();
    let a_ids = node_a(&storage, 12).await;
    let failing = Instrumented::wrap(storage.clone(), None);
    let b_storage = failing.storage();
    let node_b = Wal::open(b_storage.clone(), "b", small_batches())
        .await
        .unwrap();
    let reader = WalReader::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    // The import takes three appends (about 3 KiB in 1 KiB batches): two
    // creates go through, then none.
    failing.refuse_creates_after("b/objects/", 2);
    let err = node_b
        .import_region(&reader, R, a_ids[3] + 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Storage { .. } | Error::NotDurable { .. }),
        "{err}"
    );
    drop(node_b); // B dies.
    failing.allow_creates();
    let node_b = Wal::open(b_storage.clone(), "b", small_batches())
        .await
        .unwrap();
    let partial = read_all(&node_b, R, 0).await;
    assert!(
        !partial.is_empty() && partial.len() < 8,
        "a half-way import: {}",
        partial.len()
    );

    let first = node_b
        .import_region(&reader, R, a_ids[3] + 1)
        .await
        .unwrap();
    assert!(
        first.floor >= partial.last().unwrap().id,
        "the copies lie below the floor"
    );
    // B dies before the engine recorded the move; the engine imports again.
    node_b.stop().await.unwrap();
    let node_b = Wal::open(b_storage, "b", small_batches()).await.unwrap();
    let again = node_b
        .import_region(&reader, R, a_ids[3] + 1)
        .await
        .unwrap();
    assert!(again.floor >= first.last_id);
    let replayed = replay_on(&node_b, &again).await;
    let want: Vec<String> = (4..12).map(|i| format!("r{i}")).collect();
    assert_eq!(payloads_of(&replayed), want, "each entry once, in order");
    node_b.stop().await.unwrap();
}

/// A region the other log released has nothing to move: `import_region`
/// and `take_over` refuse it with `RegionReleased` (issue 30 item 3: they
/// answered `Ok` with nothing imported, which reads as an empty region).
/// A region the other log never held imports nothing and moves no id.
#[tokio::test]
async fn importing_a_released_region_is_refused_and_an_empty_one_imports_nothing() {
    let storage = faulty_memory().storage();
    let a_ids = node_a(&storage, 6).await;
    let a = Wal::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    a.release_region(R).await.unwrap();
    a.stop().await.unwrap();
    let reader = WalReader::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    assert!(reader.is_released(R));
    assert!(reader.released_through(R) >= *a_ids.last().unwrap());
    let node_b = Wal::open(storage.clone(), "b", test_config())
        .await
        .unwrap();
    let err = node_b.import_region(&reader, R, 0).await.unwrap_err();
    assert!(matches!(err, Error::RegionReleased { region: R }), "{err}");
    let err = node_b.take_over(&reader, R, 0).unwrap_err();
    assert!(matches!(err, Error::RegionReleased { region: R }), "{err}");
    assert!(node_b.regions().await.unwrap().is_empty(), "nothing moved");
    let empty = node_b.import_region(&reader, 99, 0).await.unwrap();
    assert_eq!(
        (empty.entries, empty.first_id, empty.last_id, empty.floor),
        (0, 0, 0, 0)
    );
    let err = node_b
        .import_region(&reader, u64::MAX, 0)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    node_b.stop().await.unwrap();
}

/// Issue 18, item 5: an import whose source (node A's store, through a
/// `WalReader`) stops answering waited forever, although the reader was
/// opened with `request_timeout`. It fails with a retryable error, and an
/// import repeated once the store answers moves the region.
#[tokio::test(start_paused = true)]
async fn an_import_from_a_source_that_stops_answering_fails_after_request_timeout() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let a_ids = node_a(&storage, 6).await;
    let config = Config {
        request_timeout: Some(std::time::Duration::from_secs(1)),
        ..test_config()
    };
    let reader = within(WalReader::open(storage.clone(), "a", config))
        .await
        .unwrap();
    let node_b = Wal::open(storage.clone(), "b", test_config())
        .await
        .unwrap();
    faulty.stall_next(objwal::storage::fault::Op::Read, "a/objects/", 1);
    let err = within(node_b.import_region(&reader, R, a_ids[3] + 1))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    let moved = within(node_b.import_region(&reader, R, a_ids[3] + 1))
        .await
        .unwrap();
    assert_eq!(moved.entries, 2);
    node_b.stop().await.unwrap();
}

/// Issue 18, item 6: an import chunked its appends by payload bytes only,
/// so a region of more unflushed 8-byte entries than an object has
/// positions (2^20 - 1) made an append of 2^20 entries (8 MiB of payload),
/// refused with `InvalidArgument` on every retry: the region could never
/// move. Appends are chunked by positions and by framed size too.
#[tokio::test]
async fn a_region_of_more_tiny_entries_than_an_object_has_positions_moves() {
    const N: usize = 1_100_000;
    let storage = faulty_memory().storage();
    let payloads = bytes::Bytes::from(
        (0..N as u64)
            .flat_map(u64::to_le_bytes)
            .collect::<Vec<u8>>(),
    );
    let a = Wal::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    for start in (0..N).step_by(100_000) {
        let end = (start + 100_000).min(N);
        let entries = (start..end)
            .map(|i| (R, payloads.slice(i * 8..i * 8 + 8)))
            .collect();
        a.append(entries).await.unwrap();
    }
    a.stop().await.unwrap();
    let reader = WalReader::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    let node_b = Wal::open(storage.clone(), "b", test_config())
        .await
        .unwrap();
    let moved = within(node_b.import_region(&reader, R, 0)).await.unwrap();
    assert_eq!(moved.entries, N as u64);
    node_b.stop().await.unwrap();

    let node_b = Wal::open(storage, "b", test_config()).await.unwrap();
    let replayed = replay_on(&node_b, &moved).await;
    assert_eq!(replayed.len(), N);
    let in_order = replayed
        .iter()
        .enumerate()
        .all(|(i, e)| e.data == payloads.slice(i * 8..i * 8 + 8));
    assert!(in_order, "every entry once, in order");
    // Each append fit one object: its framed size within max_batch_bytes.
    let objects = node_b.regions().await.unwrap();
    let r = objects.iter().find(|r| r.region == R).unwrap();
    assert!(r.objects >= 3, "{r:?}");
    node_b.stop().await.unwrap();
}

/// Found by the model test's moves (issue 30 item 11): the other node's
/// engine flushed all of R and its collection deleted every object that
/// held R, so a reader of its prefix indexes no id of R. The import's
/// floor was the reader's latest id of R (0) and B handed out ids of R
/// below those A had handed out (an engine that keeps A's flushed id of R
/// took B's new entries for flushed ones). `from` (A's flushed id plus
/// one) bounds A's ids from below: the floor is at or above `from - 1`,
/// as a takeover's from the same point already was.
#[tokio::test(start_paused = true)]
async fn an_import_of_a_region_the_other_log_flushed_and_collected_keeps_ids_above_its_ids() {
    let storage = faulty_memory().storage();
    let a = Wal::open(storage.clone(), "a", test_config())
        .await
        .unwrap();
    let mut last = 0;
    for i in 0..3 {
        last = a.append(vec![(R, b(&format!("r{i}")))]).await.unwrap()[0];
    }
    a.obsolete(R, last).await.unwrap();
    // Later objects carry the mark; collection deletes R's objects.
    for i in 0..3 {
        let id = a.append(vec![(1, b(&format!("o{i}")))]).await.unwrap()[0];
        a.obsolete(1, id).await.unwrap();
    }
    a.flush().await.unwrap();
    let reader = within(async {
        loop {
            let reader = WalReader::open(storage.clone(), "a", test_config())
                .await
                .unwrap();
            if reader.latest_entry_id(R) == 0 {
                break reader;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    let node_b = Wal::open(storage.clone(), "b", test_config())
        .await
        .unwrap();
    let moved = node_b.import_region(&reader, R, last + 1).await.unwrap();
    assert_eq!(moved.entries, 0);
    assert!(moved.floor >= last, "{moved:?} below A's id {last}");
    let next = node_b.append(vec![(R, b("on b"))]).await.unwrap()[0];
    assert!(next > last, "B's id {next} of R is not above A's {last}");
    // A move by following from the same point keeps the same floor.
    let node_c = Wal::open(storage.clone(), "c", test_config())
        .await
        .unwrap();
    let takeover = node_c.take_over(&reader, R, last + 1).unwrap();
    let moved = within(takeover.finish()).await.unwrap();
    assert_eq!(moved.entries, 0);
    assert!(moved.floor >= last, "{moved:?} below A's id {last}");
    node_c.stop().await.unwrap();
    a.release_region(R).await.unwrap();
    a.stop().await.unwrap();
    node_b.stop().await.unwrap();
}
