//! The in-memory backend (`memory://`): a sorted map under a mutex.
//!
//! Responsibility: a fast, exact implementation of the [`ObjectStorage`]
//! contract for tests and examples. Nothing survives the process.
//!
//! Invariants: a create never replaces a key (check and insert happen under
//! one lock); listings come out of a `BTreeMap`, so they are already in key
//! order; a read whose range ends past the object is an error.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::{check_range, Created, ObjectMeta, ObjectStorage, StorageError, Suffix};

/// An in-process object store. Clones share the same objects.
#[derive(Debug, Clone, Default)]
pub struct MemoryStorage {
    objects: Arc<Mutex<BTreeMap<String, Bytes>>>,
}

impl MemoryStorage {
    /// A new, empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Bytes>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (every critical section is a single map operation), so a poisoned
        // lock is still a consistent map.
        self.objects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl ObjectStorage for MemoryStorage {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        if key.is_empty() {
            return Err(StorageError::permanent("empty key"));
        }
        let mut objects = self.lock();
        if objects.contains_key(key) {
            return Ok(Created::AlreadyExists);
        }
        objects.insert(key.to_owned(), data);
        Ok(Created::New)
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let data = self
            .lock()
            .get(key)
            .cloned()
            .ok_or_else(|| StorageError::not_found(key))?;
        let r = check_range(key, &range, data.len() as u64)?;
        Ok(data.slice(r))
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        let data = self
            .lock()
            .get(key)
            .cloned()
            .ok_or_else(|| StorageError::not_found(key))?;
        let size = data.len() as u64;
        let start = usize::try_from(size.saturating_sub(len)).unwrap_or(0);
        Ok(Suffix {
            data: data.slice(start..),
            size,
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let objects = self.lock();
        Ok(objects
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| ObjectMeta {
                key: k.clone(),
                size: v.len() as u64,
            })
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.lock().remove(key);
        Ok(())
    }

    fn charges_per_request(&self) -> bool {
        false
    }
}
