//! Shared helpers of the integration tests.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::FaultyStorage;
use objwal::storage::MemoryStorage;
use objwal::{Config, Entry, EntryId, Error, RegionId, Storage, Wal};

/// A fault wrapper around a fresh in-memory store.
pub fn faulty_memory() -> FaultyStorage {
    FaultyStorage::new(Storage::new(MemoryStorage::new()))
}

/// A config with a short flush interval, for tests.
pub fn test_config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        ..Config::default()
    }
}

/// Opens a store on `storage` under the prefix "t".
pub async fn open(storage: &Storage, config: Config) -> Wal {
    Wal::open(storage.clone(), "t", config).await.unwrap()
}

/// Every entry a read of `region` from `from` yields, failing on an error.
pub async fn read_all(wal: &Wal, region: RegionId, from: EntryId) -> Vec<Entry> {
    try_read_all(wal, region, from).await.unwrap()
}

/// Every entry a read yields, or its first error.
pub async fn try_read_all(wal: &Wal, region: RegionId, from: EntryId) -> Result<Vec<Entry>, Error> {
    let mut stream = Box::pin(wal.read(region, from));
    let mut entries = Vec::new();
    while let Some(entry) = stream.next().await {
        entries.push(entry?);
    }
    Ok(entries)
}

/// The payloads of entries, as strings.
pub fn payloads(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .collect()
}

/// A payload from a string.
pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// How long any wait in a test may take before the test fails: far above
/// what a healthy run needs on a loaded machine, far below a CI timeout.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// `fut`, or a panic naming the caller's line when it is not done within
/// [`DEADLINE`]: a wait on a condition that never comes fails loudly
/// instead of hanging. Under paused time the deadline is virtual.
#[track_caller]
pub fn within<F: std::future::Future>(fut: F) -> impl std::future::Future<Output = F::Output> {
    let at = std::panic::Location::caller();
    async move {
        match tokio::time::timeout(DEADLINE, fut).await {
            Ok(out) => out,
            Err(_) => panic!("the wait at {at} did not finish within {DEADLINE:?}"),
        }
    }
}
