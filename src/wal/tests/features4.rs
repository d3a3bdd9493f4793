//! Issue 30 (the fourth hardening round of the features): each history
//! replayed deterministically (paused time, the fault wrapper, a deadline on
//! every wait) and named after what broke.

use std::time::Duration;

use crate::storage::fault::{FaultyStorage, Op};
use crate::storage::MemoryStorage;

use super::*;

/// One request's round trip.
const RTT: Duration = Duration::from_millis(10);

/// Entries of region 1 its writer leaves unflushed: more than it appends
/// while a reader opens, so that what the reader's snapshot holds is still
/// there to read.
const LAG: usize = 160;

/// Item 8: `verify`, `WalReader::open` and a standby that starts failed on
/// the prefix of a writer collecting as fast as it writes: objects kept
/// vanishing between the listing and the reads of their tails, and after
/// five listings recovery gave up ("repeat the open"). What vanished was
/// collected (below a boundary its writer's objects carry): the reader now
/// goes on with what it read. Five readers open one after another against
/// writers that flush and collect flat out; each succeeds and holds every
/// entry of the region nobody flushes.
#[tokio::test(start_paused = true)]
async fn a_reader_opens_a_prefix_whose_writer_collects_flat_out() {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "f4-busy";
    let faults = FaultyStorage::new(inner.clone());
    for op in [Op::Create, Op::Read, Op::List, Op::Delete] {
        faults.set_latency(op, RTT);
    }
    let writer = Wal::open(
        faults.storage(),
        prefix,
        Config {
            max_inflight_creates: 8,
            early_seals: crate::EarlySeals::Unlimited,
            ..config()
        },
    )
    .await
    .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appended: Arc<Mutex<Vec<EntryId>>> = Arc::new(Mutex::new(Vec::new()));
    let mut busy = Vec::new();
    for caller in 0..8u64 {
        let (writer, stop, appended) = (writer.clone(), stop.clone(), appended.clone());
        busy.push(tokio::spawn(async move {
            // Caller 0 writes region 1 and flushes all but its last LAG
            // entries; the others flush each entry at once: every object is
            // garbage soon after it lands, and collection runs flat out.
            let region = if caller == 0 { 1 } else { 100 + caller };
            let mut mine = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let Ok(ids) = writer.append(vec![(region, b("entry"))]).await else {
                    break;
                };
                mine.extend(&ids);
                if caller == 0 {
                    appended.lock().unwrap().extend(&ids);
                }
                let flushed = if caller == 0 {
                    mine.len().checked_sub(LAG + 1).map(|i| mine[i])
                } else {
                    Some(ids[0])
                };
                if let Some(id) = flushed {
                    if writer.obsolete(region, id).await.is_err() {
                        break;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(RTT * 50).await;
    let reads = FaultyStorage::new(inner.clone());
    reads.set_latency(Op::Read, RTT);
    reads.set_latency(Op::List, RTT);
    let mut nonempty = 0;
    for attempt in 0..5 {
        // One tail read at a time: reading the listing takes long enough
        // for collection to delete some of it every time.
        let slow = Config {
            recovery_concurrency: 1,
            ..config()
        };
        let reader = within(crate::WalReader::open(reads.storage(), prefix, slow))
            .await
            .unwrap_or_else(|e| panic!("open {attempt}: {e}"));
        let mut stream = Box::pin(reader.read(1, 0));
        let mut seen = Vec::new();
        while let Some(entry) = stream.next().await {
            seen.push(entry.unwrap().id);
        }
        // What it holds of region 1 is a run of what was appended, with
        // nothing missing between, up to the last id its snapshot holds (a
        // snapshot may hold only flushed entries: then nothing shows).
        let appended = appended.lock().unwrap().clone();
        let last = reader.latest_entry_id(1);
        if let Some(first) = seen.first() {
            let at = appended.iter().position(|id| id == first).unwrap();
            let to = appended.iter().position(|id| *id == last).unwrap();
            assert_eq!(seen, appended[at..=to], "open {attempt}");
            nonempty += 1;
        }
        tokio::time::sleep(RTT * 20).await;
    }
    assert!(
        nonempty > 0,
        "some snapshot held unflushed entries to check"
    );
    stop.store(true, Ordering::SeqCst);
    for task in busy {
        within(task).await.unwrap();
    }
    writer.stop().await.unwrap();
}

/// A listing that understates the size of the objects under `shrunk`.
#[derive(Debug)]
struct ShortListing {
    inner: Storage,
    shrunk: String,
}

#[async_trait::async_trait]
impl ObjectStorage for ShortListing {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }
    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }
    async fn read_suffix(&self, key: &str, len: u64) -> Result<crate::Suffix, StorageError> {
        self.inner.read_suffix(key, len).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let mut listed = self.inner.list(prefix).await?;
        for meta in listed.iter_mut().filter(|m| m.key == self.shrunk) {
            meta.size -= 1;
        }
        Ok(listed)
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

/// Item 9: under `on_damaged_object = "quarantine"` a listing that
/// understated an object's size made both looks at its tail read the
/// listing's size; both failed alike, so the intact object was called
/// damaged (its entries holes, and collection would later delete it).
/// Before anything is called damaged its size now comes from the object
/// itself: the entry replays, and no hole is reported.
#[tokio::test(start_paused = true)]
async fn a_listing_that_understates_a_size_never_makes_an_intact_object_damaged() {
    let inner = Storage::new(MemoryStorage::new());
    let prefix = "short-listing";
    let wal = Wal::open(inner.clone(), prefix, config()).await.unwrap();
    let ids = wal.append(vec![(1, b("kept"))]).await.unwrap();
    wal.stop().await.unwrap();
    let shrunk = format!(
        "{prefix}/objects/{:020}.wal",
        crate::format::sequence_of(ids[0])
    );
    let lying = Storage::new(ShortListing {
        inner: inner.clone(),
        shrunk,
    });
    let quarantine = Config {
        on_damaged_object: crate::DamagePolicy::Quarantine,
        ..config()
    };
    let reader = tokio::time::timeout(
        Duration::from_secs(60),
        crate::WalReader::open(lying, prefix, quarantine),
    )
    .await
    .expect("the open hangs")
    .unwrap();
    assert!(reader.holes(1).is_empty(), "{:?}", reader.holes(1));
    let mut stream = Box::pin(reader.read(1, 0));
    let mut read = Vec::new();
    while let Some(item) = stream.next().await {
        read.push(item.unwrap().id);
    }
    assert_eq!(read, ids);
}
