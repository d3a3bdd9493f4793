//! A release is forever (issue 30 item 3, rfcs/0005 "A release is
//! forever"): once `release_region` returned `Ok`, the region reads as
//! empty, refuses appends, is reported released and ends every follower,
//! also after a restart, after collection deleted the object carrying the
//! release record, and for followers that start later or skip a hole.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use objwal::storage::fault::FaultyStorage;
use objwal::storage::keys::Prefix;
use objwal::{Error, ObjectStorage, RegionId, Storage, Wal, WalReader};

use crate::common::{b, faulty_memory, listed_objects, open, read_all, test_config, within};

/// The released region.
const R: RegionId = 7;
/// A region that goes on.
const A: RegionId = 1;

/// The sequences of the objects under `t/objects/`.
async fn listed(storage: &Storage) -> BTreeSet<u64> {
    listed_objects(storage, "t").await
}

/// The objects carrying a release record, as a reader sees them now.
async fn carriers(storage: &Storage) -> BTreeSet<u64> {
    let reader = WalReader::open(storage.clone(), "t", test_config())
        .await
        .unwrap();
    reader
        .objects()
        .iter()
        .filter(|o| !o.releases.is_empty())
        .map(|o| o.sequence)
        .collect()
}

/// Writes `R` and `A`, releases `R`, then flushes `A` and writes on until
/// collection has deleted every object that carried `R`'s release record.
/// Returns the running store.
async fn release_then_collect(faulty: &FaultyStorage) -> Wal {
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    let a = wal.append(vec![(A, b("a"))]).await.unwrap()[0];
    wal.append(vec![(R, b("r"))]).await.unwrap();
    within(wal.release_region(R)).await.unwrap();
    let carriers = carriers(&storage).await;
    assert!(!carriers.is_empty(), "the release record is in an object");
    wal.obsolete(A, a).await.unwrap();
    within(async {
        loop {
            let id = wal.append(vec![(A, b("more"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if listed(&storage).await.is_disjoint(&carriers) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    wal
}

/// Stops `wal`, opens the prefix again and writes on until the new life
/// collected as well.
async fn restart(faulty: &FaultyStorage, wal: Wal) -> Wal {
    wal.stop().await.unwrap();
    let wal = open(&faulty.storage(), test_config()).await;
    let deletes = faulty.counts().delete.requests;
    within(async {
        loop {
            let id = wal.append(vec![(A, b("again"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if faulty.counts().delete.requests > deletes {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    wal
}

#[tokio::test(start_paused = true)]
async fn appends_to_a_released_region_are_refused_after_its_record_was_collected_and_a_restart() {
    let faulty = faulty_memory();
    let wal = release_then_collect(&faulty).await;
    let err = wal.append(vec![(R, b("same life"))]).await.unwrap_err();
    assert!(matches!(err, Error::RegionReleased { region: R }), "{err}");
    let wal = restart(&faulty, wal).await;
    let err = wal.append(vec![(R, b("after restart"))]).await.unwrap_err();
    assert!(matches!(err, Error::RegionReleased { region: R }), "{err}");
    assert!(read_all(&wal, R, 0).await.is_empty());
    // And in the life after that (the release is not a record of this life).
    let wal = restart(&faulty, wal).await;
    let err = wal.append(vec![(R, b("later"))]).await.unwrap_err();
    assert!(matches!(err, Error::RegionReleased { region: R }), "{err}");
    wal.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn regions_reports_a_released_region_after_its_record_was_collected() {
    let faulty = faulty_memory();
    let wal = release_then_collect(&faulty).await;
    let wal = restart(&faulty, wal).await;
    let rows = wal.regions().await.unwrap();
    let row = rows.iter().find(|r| r.region == R);
    assert!(row.is_some_and(|r| r.released), "{rows:?}");
    let reader = WalReader::open(faulty.storage(), "t", test_config())
        .await
        .unwrap();
    let rows = reader.regions();
    let row = rows.iter().find(|r| r.region == R);
    assert!(row.is_some_and(|r| r.released), "{rows:?}");
    wal.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_follower_started_after_the_release_was_collected_ends_the_region_with_region_released() {
    let faulty = faulty_memory();
    let wal = release_then_collect(&faulty).await;
    let wal = restart(&faulty, wal).await;
    let reader = WalReader::open(faulty.storage(), "t", test_config())
        .await
        .unwrap();
    let mut follower = reader.follow([(R, 0)]);
    let item = within(follower.next()).await;
    assert!(
        matches!(item, Some(Err(Error::RegionReleased { region: R }))),
        "{item:?}"
    );
    assert!(follower.positions().is_empty());
    wal.stop().await.unwrap();
}

/// The keys under `t/released/`.
async fn markers(storage: &Storage) -> Vec<(u64, u64)> {
    let prefix = Prefix::new("t").unwrap();
    storage
        .list(&prefix.released_prefix())
        .await
        .unwrap()
        .iter()
        .filter_map(|m| prefix.parse_released_key(&m.key))
        .collect()
}

/// A follower that was already running misses the release: its reads fail
/// while the writer releases `R` and collection deletes the record's
/// object. What it finds after is a hole; the hole makes it list the
/// release markers, and `R` ends with `RegionReleased` while `A` goes on.
#[tokio::test(start_paused = true)]
async fn a_follower_whose_hole_swallowed_the_release_ends_the_region() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    let first = wal.append(vec![(R, b("r")), (A, b("a"))]).await.unwrap();
    // The follower's own view of the store, whose reads can fail alone.
    let eyes = FaultyStorage::new(faulty.inner().clone());
    let reader = WalReader::open(eyes.storage(), "t", test_config())
        .await
        .unwrap();
    assert!(!reader.is_released(R));
    let mut follower = reader.follow([(R, 0), (A, 0)]);
    for _ in 0..2 {
        let item = within(follower.next()).await;
        assert!(matches!(item, Some(Ok(_))), "{item:?}");
    }
    eyes.fail_next(
        objwal::storage::fault::Op::Read,
        "",
        usize::MAX,
        objwal::storage::StorageErrorKind::Transient,
    );
    within(wal.release_region(R)).await.unwrap();
    let carriers = carriers(&storage).await;
    wal.obsolete(A, first[1]).await.unwrap();
    within(async {
        loop {
            let id = wal.append(vec![(A, b("more"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if listed(&storage).await.is_disjoint(&carriers) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let after = wal.append(vec![(A, b("after"))]).await.unwrap()[0];
    eyes.clear_faults();
    let lists = eyes.counts().list.requests;
    let mut seen = Vec::new();
    let released = within(async {
        loop {
            match follower.next().await {
                Some(Ok(entry)) => {
                    assert_eq!(entry.region, A, "{entry:?}");
                    seen.push(entry.id);
                }
                Some(Err(Error::RegionReleased { region })) => return region,
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    assert_eq!(released, R);
    assert!(!follower.holes(A).is_empty(), "the gap is a hole");
    assert!(eyes.counts().list.requests > lists);
    // A goes on.
    if !seen.contains(&after) {
        let next = within(follower.next()).await;
        assert!(
            matches!(&next, Some(Ok(e)) if e.region == A && e.id == after),
            "{next:?}"
        );
    }
    assert_eq!(follower.positions(), vec![(A, after)]);
    // A region added back later ends at once: the follower never forgets.
    follower.add(R, 0);
    let item = within(follower.next()).await;
    assert!(
        matches!(item, Some(Err(Error::RegionReleased { region: R }))),
        "{item:?}"
    );
    wal.stop().await.unwrap();
}

/// A release whose marker cannot be made (the record is durable) answers
/// with a retryable error, and no boundary passes its record while the
/// marker is missing (M2). A crash then: the next open makes the marker
/// (M3), and the release holds after collection and another restart. The
/// same open makes the marker of a log written before markers existed.
#[tokio::test(start_paused = true)]
async fn a_release_record_without_its_marker_is_made_permanent_by_the_next_open() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    let a = wal.append(vec![(A, b("a"))]).await.unwrap()[0];
    wal.append(vec![(R, b("r"))]).await.unwrap();
    faulty.fail_next(
        objwal::storage::fault::Op::Create,
        "/released/",
        usize::MAX,
        objwal::storage::StorageErrorKind::Transient,
    );
    let err = within(wal.release_region(R)).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("is durable"), "{err}");
    let carriers = carriers(&storage).await;
    assert!(!carriers.is_empty());
    // Released in this life already; the record's object stays while
    // collection runs on.
    let refused = wal.append(vec![(R, b("x"))]).await.unwrap_err();
    assert!(matches!(refused, Error::RegionReleased { .. }), "{refused}");
    wal.obsolete(A, a).await.unwrap();
    let deletes = faulty.counts().delete.requests;
    within(async {
        loop {
            let id = wal.append(vec![(A, b("more"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if faulty.counts().delete.requests >= deletes + 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        carriers.is_subset(&listed(&storage).await),
        "no boundary passed a record without its marker"
    );
    assert!(markers(&storage).await.is_empty());
    drop(wal); // the crash
    faulty.clear_faults();
    let wal = open(&storage, test_config()).await;
    let marked = markers(&storage).await;
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert_eq!(marked[0].0, R);
    wal.stop().await.unwrap();

    // Collection takes the record's object now; the release stays.
    let wal = open(&storage, test_config()).await;
    within(async {
        loop {
            let id = wal.append(vec![(A, b("more"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if listed(&storage).await.is_disjoint(&carriers) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let wal = restart(&faulty, wal).await;
    let refused = wal.append(vec![(R, b("x"))]).await.unwrap_err();
    assert!(matches!(refused, Error::RegionReleased { .. }), "{refused}");

    // A log written before markers existed: its record, and no marker.
    let prefix = Prefix::new("t").unwrap();
    storage
        .delete(&prefix.released_key(marked[0].0, marked[0].1))
        .await
        .unwrap();
    wal.release_region(9).await.unwrap();
    wal.stop().await.unwrap();
    for (region, through) in markers(&storage).await {
        storage
            .delete(&prefix.released_key(region, through))
            .await
            .unwrap();
    }
    let wal = open(&storage, test_config()).await;
    let regions: Vec<u64> = markers(&storage).await.iter().map(|m| m.0).collect();
    assert_eq!(
        regions,
        [9],
        "the record still in the log is made permanent"
    );
    wal.stop().await.unwrap();
}

/// What a release costs over the log's life: one create of its marker; a
/// repeated release of a region whose marker exists creates no marker; an
/// open lists `released/` once and reads no marker. With 5,000 released
/// regions whose records were all collected, a writer's open and a
/// reader's open each list the markers once, create nothing under
/// `released/`, and know every release (rfcs/0005, "A release is
/// forever", cost).
#[tokio::test(start_paused = true)]
async fn an_open_with_5000_released_regions_lists_the_markers_once() {
    const N: u64 = 5_000;
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let wal = open(&storage, test_config()).await;
    within(wal.release_region(100)).await.unwrap();
    assert_eq!(markers(&storage).await, [(100, 0)], "one marker");
    // A repeated release makes no marker: one that tried would fail here.
    faulty.fail_next(
        objwal::storage::fault::Op::Create,
        "/released/",
        usize::MAX,
        objwal::storage::StorageErrorKind::Permanent,
    );
    within(wal.release_region(100)).await.unwrap();
    faulty.clear_faults();
    let calls: Vec<_> = (0..N)
        .map(|region| {
            let wal = wal.clone();
            tokio::spawn(async move { wal.release_region(1_000 + region).await })
        })
        .collect();
    for call in calls {
        within(call).await.unwrap().unwrap();
    }
    let a = wal.append(vec![(A, b("a"))]).await.unwrap()[0];
    wal.obsolete(A, a).await.unwrap();
    let carriers = carriers(&storage).await;
    within(async {
        loop {
            let id = wal.append(vec![(A, b("more"))]).await.unwrap()[0];
            wal.obsolete(A, id).await.unwrap();
            if listed(&storage).await.is_disjoint(&carriers) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    wal.stop().await.unwrap();
    assert_eq!(markers(&storage).await.len() as u64, N + 1);

    // Every request of the next opens, by kind and folder.
    let counted = ByFolder::wrap(storage.clone());
    let wal = open(&counted.storage(), test_config()).await;
    assert_eq!(counted.take("list released"), 1, "{:?}", counted.all());
    assert_eq!(counted.take("create released"), 0, "{:?}", counted.all());
    assert_eq!(counted.take("read released"), 0, "{:?}", counted.all());
    let rows = wal.regions().await.unwrap();
    assert_eq!(rows.iter().filter(|r| r.released).count() as u64, N + 1);
    let err = wal.append(vec![(4_999, b("x"))]).await.unwrap_err();
    assert!(matches!(err, Error::RegionReleased { .. }), "{err}");
    wal.stop().await.unwrap();
    assert_eq!(
        markers(&storage).await.len() as u64,
        N + 1,
        "no marker added"
    );
    counted.all();
    let reader = WalReader::open(counted.storage(), "t", test_config())
        .await
        .unwrap();
    assert_eq!(counted.take("list released"), 1, "{:?}", counted.all());
    assert_eq!(counted.take("read released"), 0, "{:?}", counted.all());
    assert_eq!(reader.regions().len() as u64, N + 1);
    assert!(reader.is_released(1_000 + N - 1));
}

/// Counts the requests that pass, by kind and the folder under the prefix
/// ("list released", "create objects", ...).
#[derive(Debug)]
struct ByFolder {
    inner: Storage,
    counts: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

impl ByFolder {
    fn wrap(inner: Storage) -> std::sync::Arc<Self> {
        std::sync::Arc::new(ByFolder {
            inner,
            counts: Default::default(),
        })
    }

    fn storage(self: &std::sync::Arc<Self>) -> Storage {
        Storage::from_arc(self.clone())
    }

    fn count(&self, op: &str, key: &str) {
        let folder = key.split('/').nth(1).unwrap_or_default();
        *self
            .counts
            .lock()
            .unwrap()
            .entry(format!("{op} {folder}"))
            .or_default() += 1;
    }

    /// The count of `what`, reset.
    fn take(&self, what: &str) -> u64 {
        self.counts.lock().unwrap().remove(what).unwrap_or(0)
    }

    /// Every count, reset.
    fn all(&self) -> std::collections::BTreeMap<String, u64> {
        std::mem::take(&mut *self.counts.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl ObjectStorage for ByFolder {
    async fn create(
        &self,
        key: &str,
        data: bytes::Bytes,
    ) -> Result<objwal::Created, objwal::StorageError> {
        self.count("create", key);
        self.inner.create(key, data).await
    }
    async fn read(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, objwal::StorageError> {
        self.count("read", key);
        self.inner.read(key, range).await
    }
    async fn read_suffix(
        &self,
        key: &str,
        len: u64,
    ) -> Result<objwal::Suffix, objwal::StorageError> {
        self.count("read", key);
        self.inner.read_suffix(key, len).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<objwal::ObjectMeta>, objwal::StorageError> {
        self.count("list", prefix);
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), objwal::StorageError> {
        self.count("delete", key);
        self.inner.delete(key).await
    }
    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }
    async fn remove_leftovers(&self, prefix: &str) -> Result<(), objwal::StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

/// A follower that took the release record in (no hole) and then trimmed
/// its object as the writer collected it still knows the release: a
/// region `add`ed afterwards ends at once (the catalog never forgets a
/// release, C4), without a listing of the markers.
#[tokio::test(start_paused = true)]
async fn a_region_added_to_a_follower_after_its_record_was_trimmed_ends_at_once() {
    let faulty = faulty_memory();
    let storage = faulty.storage();
    let config = objwal::Config {
        early_seals: objwal::EarlySeals::Off,
        flush_interval: Duration::from_secs(3600),
        max_unpersisted_age: Duration::from_secs(7200),
        ..test_config()
    };
    let wal = open(&storage, config).await;
    wal.append(vec![(R, b("r"))]).await.unwrap();
    wal.append(vec![(A, b("a"))]).await.unwrap();
    let counted = ByFolder::wrap(storage.clone());
    let reader = WalReader::open(counted.storage(), "t", test_config())
        .await
        .unwrap();
    let mut follower = reader.follow([(A, 0)]);
    let item = within(follower.next()).await;
    assert!(matches!(item, Some(Ok(_))), "{item:?}");
    // The release's record rides with an entry of A (early seals off and
    // an hour's timer: the append waits in the open batch the release
    // seals), so the follower takes its object in.
    let with = {
        let wal = wal.clone();
        tokio::spawn(async move { wal.append(vec![(A, b("with"))]).await })
    };
    tokio::task::yield_now().await;
    within(wal.release_region(R)).await.unwrap();
    let with = within(with).await.unwrap().unwrap()[0];
    let item = within(follower.next()).await;
    assert!(matches!(&item, Some(Ok(e)) if e.id == with), "{item:?}");
    let carriers = carriers(&storage).await;
    assert!(carriers.contains(&objwal::format::sequence_of(with)));
    wal.obsolete(A, with).await.unwrap();
    counted.all();
    // The follower takes every object in as it lands, the carrier too, and
    // trims what lies below the writer's boundary; each entry is obsoleted
    // only once the follower yielded it, so no object is collected before
    // the follower read it (no hole).
    within(async {
        loop {
            let more = {
                let wal = wal.clone();
                tokio::spawn(async move { wal.append(vec![(A, b("more"))]).await })
            };
            tokio::task::yield_now().await;
            wal.flush().await.unwrap();
            let id = more.await.unwrap().unwrap()[0];
            let item = follower.next().await;
            assert!(matches!(&item, Some(Ok(e)) if e.id == id), "{item:?}");
            wal.obsolete(A, id).await.unwrap();
            if listed(&storage).await.is_disjoint(&carriers) {
                break;
            }
        }
    })
    .await;
    assert!(follower.holes(A).is_empty(), "{:?}", follower.holes(A));
    follower.add(R, 0);
    let item = within(follower.next()).await;
    assert!(
        matches!(item, Some(Err(Error::RegionReleased { region: R }))),
        "{item:?}"
    );
    assert_eq!(counted.take("list released"), 0, "{:?}", counted.all());
    wal.stop().await.unwrap();
}
