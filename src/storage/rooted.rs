//! A key prefix inside a bucket: the `root` of a storage URL.
//!
//! Responsibility: let the trait's keys stay relative to the root while the
//! inner store sees `root/key`.
//!
//! Invariants: the root is a validated prefix (non-empty, relative, no empty,
//! `.` or `..` parts) stored with one trailing `/`; keys and listings are
//! translated both ways, so a listing never shows a key outside the root.

use std::ops::Range;

use bytes::Bytes;

use super::keys::{Prefix, PrefixError};
use super::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};

/// Puts every key of an inner store under `root/`.
#[derive(Debug, Clone)]
pub struct Rooted {
    /// The root with its trailing `/`.
    root: String,
    inner: Storage,
}

impl Rooted {
    /// Keys of `inner` under `root` (given with or without a trailing `/`).
    pub fn new(root: &str, inner: Storage) -> Result<Rooted, PrefixError> {
        let root = Prefix::new(root.strip_suffix('/').unwrap_or(root))?;
        Ok(Rooted {
            root: format!("{root}/"),
            inner,
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.root)
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Rooted {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(&self.full(key), data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(&self.full(key), range).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.inner.read_suffix(&self.full(key), len).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let listed = self.inner.list(&self.full(prefix)).await?;
        Ok(listed
            .into_iter()
            .filter_map(|m| {
                let key = m.key.strip_prefix(&self.root)?.to_owned();
                Some(ObjectMeta { key, size: m.size })
            })
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(&self.full(key)).await
    }

    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(&self.full(prefix)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStorage;

    #[tokio::test]
    async fn keys_stay_relative_and_other_roots_are_invisible() {
        let mem = Storage::new(MemoryStorage::new());
        let a = Rooted::new("tenant/a/", mem.clone()).unwrap();
        let b = Rooted::new("tenant/ab", mem.clone()).unwrap();
        a.create("x/1", Bytes::from_static(b"one")).await.unwrap();
        b.create("x/1", Bytes::from_static(b"two")).await.unwrap();
        let listed = a.list("").await.unwrap();
        assert_eq!(
            listed,
            vec![ObjectMeta {
                key: "x/1".into(),
                size: 3
            }]
        );
        assert_eq!(&a.read("x/1", 0..3).await.unwrap()[..], b"one");
        assert!(mem.read("tenant/a/x/1", 0..3).await.is_ok());
        a.delete("x/1").await.unwrap();
        assert!(a.list("x/").await.unwrap().is_empty());
        assert_eq!(b.list("x/").await.unwrap().len(), 1);
        assert!(Rooted::new("a//b", mem.clone()).is_err());
        assert!(Rooted::new("", mem).is_err());
    }
}
