//! Many tasks append to many regions while reads stream and the store
//! stops; every acknowledged entry replays exactly once after a reopen.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use objwal::storage::FileStorage;
use objwal::{Config, Storage, Wal};
use tokio::sync::Mutex;

use crate::common::within;

const TASKS: usize = 8;
const REGIONS: u64 = 16;

/// Per region, the acknowledged (id, payload) pairs.
type Acked = BTreeMap<u64, BTreeSet<(u64, String)>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_replay_exactly_once_after_a_concurrent_stop() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::new(FileStorage::open(dir.path()).unwrap());
    let config = Config {
        flush_interval: Duration::from_millis(2),
        max_batch_bytes: 16 * 1024,
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), "c", config.clone())
        .await
        .unwrap();
    let acked: Arc<Mutex<Acked>> = Arc::default();

    let mut writers = Vec::new();
    for task in 0..TASKS {
        let wal = wal.clone();
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for n in 0.. {
                let region = (task as u64 * 7 + n) % REGIONS;
                let payload = format!("{region}:{task}:{n}");
                match wal.append(vec![(region, payload.clone().into())]).await {
                    Ok(ids) => {
                        acked
                            .lock()
                            .await
                            .entry(region)
                            .or_default()
                            .insert((ids[0], payload));
                    }
                    Err(e) => {
                        assert!(e.is_stopped(), "only stop ends a writer: {e}");
                        return n;
                    }
                }
            }
            unreachable!()
        }));
    }
    let mut readers = Vec::new();
    for region in 0..4 {
        let wal = wal.clone();
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            loop {
                let mut stream = Box::pin(wal.read(region, 0));
                let mut last = 0;
                while let Some(entry) = stream.next().await {
                    match entry {
                        Ok(entry) => {
                            assert!(entry.id > last, "ids increase within a read");
                            last = entry.id;
                            let text = String::from_utf8(entry.data.to_vec()).unwrap();
                            assert!(text.starts_with(&format!("{region}:")), "{text}");
                        }
                        Err(e) => {
                            assert!(e.is_stopped(), "{e}");
                            return reads;
                        }
                    }
                }
                reads += 1;
                tokio::task::yield_now().await;
            }
        }));
    }
    // Stop once some hundreds of appends were acknowledged.
    within(async {
        loop {
            let total: usize = acked.lock().await.values().map(BTreeSet::len).sum();
            if total >= 400 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    wal.stop().await.unwrap();
    for writer in writers {
        within(writer).await.unwrap();
    }
    for reader in readers {
        assert!(
            within(reader).await.unwrap() > 0,
            "reads streamed while writing"
        );
    }

    let wal = Wal::open(storage, "c", config).await.unwrap();
    let acked = acked.lock().await;
    for region in 0..REGIONS {
        let mut stream = Box::pin(wal.read(region, 0));
        let mut replayed = BTreeSet::new();
        while let Some(entry) = stream.next().await {
            let entry = entry.unwrap();
            let text = String::from_utf8(entry.data.to_vec()).unwrap();
            assert!(replayed.insert((entry.id, text)), "an entry replayed twice");
        }
        let expected = acked.get(&region).cloned().unwrap_or_default();
        assert_eq!(
            replayed, expected,
            "region {region}: replay equals what was acknowledged"
        );
    }
    wal.stop().await.unwrap();
}
