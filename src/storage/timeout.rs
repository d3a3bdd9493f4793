//! A per-request timeout (`Config::request_timeout`).
//!
//! Responsibility: turn a storage request that does not answer in time into a
//! transient [`StorageError`], so the one place that retries (the log store)
//! decides what happens next. The request's future is dropped; a create that
//! was already sent may still land, which the callers' read-back handles as
//! for any failed create.
//!
//! `Wal::open` and `WalReader::open` wrap the caller's store before their
//! first request, so every path (the open's checks, the actor, reads,
//! replays, followers, collection) has the deadline.

use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;

use super::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};

/// Wraps a store so that every request fails after `timeout`.
#[derive(Debug, Clone)]
pub(crate) struct Timed {
    inner: Storage,
    timeout: Duration,
}

impl Timed {
    pub(crate) fn new(inner: Storage, timeout: Duration) -> Self {
        Timed { inner, timeout }
    }

    async fn within<T>(
        &self,
        what: &str,
        key: &str,
        request: impl std::future::Future<Output = Result<T, StorageError>>,
    ) -> Result<T, StorageError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result,
            Err(_) => Err(StorageError::transient(format!(
                "{what} did not answer within {:?} (request_timeout)",
                self.timeout
            ))
            .with_key(key)),
        }
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Timed {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.within("create", key, self.inner.create(key, data))
            .await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.within("read", key, self.inner.read(key, range)).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.within("read", key, self.inner.read_suffix(key, len))
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.within("list", prefix, self.inner.list(prefix)).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.within("delete", key, self.inner.delete(key)).await
    }

    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.within("cleanup", prefix, self.inner.remove_leftovers(prefix))
            .await
    }
}

impl Storage {
    /// This store with every request failing (transiently) after `timeout`.
    pub(crate) fn with_request_timeout(self, timeout: Option<Duration>) -> Storage {
        match timeout {
            Some(timeout) => Storage::new(Timed::new(self, timeout)),
            None => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fault::{FaultyStorage, Op};
    use crate::storage::MemoryStorage;

    #[tokio::test(start_paused = true)]
    async fn a_request_that_does_not_answer_in_time_fails_transiently() {
        let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
        faulty.set_latency(Op::Read, Duration::from_secs(10));
        let timed = faulty
            .storage()
            .with_request_timeout(Some(Duration::from_secs(1)));
        timed.create("k", Bytes::from_static(b"x")).await.unwrap();
        let e = timed.read("k", 0..1).await.unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(e.to_string().contains("request_timeout"), "{e}");
        faulty.set_latency(Op::Read, Duration::ZERO);
        assert_eq!(&timed.read("k", 0..1).await.unwrap()[..], b"x");
        assert!(timed.charges_per_request() == faulty.storage().charges_per_request());
    }
}
