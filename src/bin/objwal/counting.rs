//! A storage wrapper that counts requests, for `objwal bench`'s requests
//! per GiB and objects per second. It forwards every call unchanged.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use objwal::{Created, ObjectMeta, ObjectStorage, Storage, StorageError};

/// Request counts, shared by the wrapper and the bench.
#[derive(Debug, Default)]
pub struct Counters {
    creates: AtomicU64,
    reads: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    /// The size of every object created, in order.
    create_sizes: Mutex<Vec<u64>>,
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Conditional creates.
    pub creates: u64,
    /// Every request of any kind.
    pub requests: u64,
    /// Sizes recorded so far (an index into the create sizes).
    sizes_at: usize,
}

impl Counters {
    /// The counts now.
    pub fn snapshot(&self) -> Snapshot {
        let creates = self.creates.load(Ordering::Relaxed);
        Snapshot {
            creates,
            requests: creates
                + self.reads.load(Ordering::Relaxed)
                + self.lists.load(Ordering::Relaxed)
                + self.deletes.load(Ordering::Relaxed),
            sizes_at: self.sizes().len(),
        }
    }

    /// The sizes of the objects created between two snapshots.
    pub fn sizes_between(&self, from: Snapshot, to: Snapshot) -> Vec<u64> {
        self.sizes()
            .get(from.sizes_at..to.sizes_at)
            .map(<[u64]>::to_vec)
            .unwrap_or_default()
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.create_sizes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Snapshot {
    /// The requests and creates since `earlier`.
    pub fn since(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            creates: self.creates.saturating_sub(earlier.creates),
            requests: self.requests.saturating_sub(earlier.requests),
            sizes_at: self.sizes_at,
        }
    }
}

/// Counts every request made through it.
#[derive(Debug, Clone)]
pub struct Counting {
    inner: Storage,
    counters: Arc<Counters>,
}

impl Counting {
    /// Wraps `inner`; returns the wrapper and its counters.
    pub fn new(inner: Storage) -> (Counting, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        (
            Counting {
                inner,
                counters: counters.clone(),
            },
            counters,
        )
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Counting {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.counters.creates.fetch_add(1, Ordering::Relaxed);
        self.counters.sizes().push(data.len() as u64);
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read(key, range).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.counters.deletes.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(key).await
    }
}
