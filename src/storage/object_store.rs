//! Adapter for `object_store::ObjectStore` (feature `object_store`).
//!
//! Responsibility: the [`ObjectStorage`] contract on top of any
//! `object_store` backend: creates are `put_opts` with `PutMode::Create`,
//! reads are `get_range`, listings are filtered by the whole prefix.
//!
//! Invariants and limits:
//! - **object_store maps every HTTP 409 to `AlreadyExists`**, including S3's
//!   `ConditionalRequestConflict` (a racing conditional write is still in
//!   progress, nothing was decided). Such a create comes back as
//!   [`Created::AlreadyExists`]; the caller's read-back decides (it finds
//!   either another writer's bytes, or nothing: not-found, and retries).
//! - `LocalFileSystem` creates exclusively (hard link) but fsyncs nothing
//!   unless built `with_fsync(true)`; use [`FileStorage`](super::FileStorage)
//!   for a durable local directory.
//! - `get_range` cuts a range running past the end short and returns `Ok`:
//!   the returned length is checked, so such a read is an error here.
//!
//! Error mapping: `AlreadyExists`/`Precondition` on create are
//! [`Created::AlreadyExists`]; `NotFound` is not-found (and `Ok` for a
//! delete); a `Generic` error caused by a connection error, a timeout, a 5xx
//! or a 429 is transient; everything else is permanent.

use std::error::Error as StdError;
use std::ops::Range;
use std::sync::Arc;

use ::object_store::path::Path;
use ::object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use bytes::Bytes;
use futures::TryStreamExt;

use super::{check_range, sort_listing, Created, ObjectMeta, ObjectStorage, Storage};
use super::{StorageError, StorageErrorKind};

/// An [`ObjectStorage`] backed by an `object_store::ObjectStore`.
#[derive(Debug, Clone)]
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
}

impl ObjectStoreStorage {
    /// Wraps a store.
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        ObjectStoreStorage { store }
    }
}

impl Storage {
    /// A storage handle over an `object_store` store (feature
    /// `object_store`).
    ///
    /// Creates use `PutMode::Create`. Beware: object_store reports every
    /// HTTP 409 (including S3's `ConditionalRequestConflict`) as "already
    /// exists", so such a create returns [`Created::AlreadyExists`] and the
    /// caller's read-back decides. See [`ObjectStoreStorage`].
    pub fn from_object_store(store: Arc<dyn ObjectStore>) -> Storage {
        Storage::new(ObjectStoreStorage::new(store))
    }
}

fn path(key: &str) -> Result<Path, StorageError> {
    Path::parse(key).map_err(|e| StorageError::permanent(format!("invalid key: {e}")).with_key(key))
}

/// Whether an error (through its source chain) is a connection failure, a
/// timeout, a 5xx or a 429: object_store keeps the status only in messages
/// of types it does not export, so the messages are read.
fn looks_transient(e: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<::object_store::client::HttpError>() {
            use ::object_store::client::HttpErrorKind as K;
            if matches!(
                http.kind(),
                K::Connect | K::Request | K::Timeout | K::Interrupted
            ) {
                return true;
            }
        }
        let text = e.to_string().to_ascii_lowercase();
        let status_5xx = ["status code: 5", "status code: 429"]
            .iter()
            .any(|s| text.contains(s));
        if status_5xx || text.contains("timed out") || text.contains("timeout") {
            return true;
        }
        if text.contains("connection refused") || text.contains("connection reset") {
            return true;
        }
        current = e.source();
    }
    false
}

/// Maps an object_store error about `key`.
pub(crate) fn map_error(e: ::object_store::Error, key: &str) -> StorageError {
    use ::object_store::Error as E;
    let kind = match &e {
        E::NotFound { .. } => return StorageError::not_found(key).with_source(e),
        E::Generic { .. } if looks_transient(&e) => StorageErrorKind::Transient,
        // A 409 seen outside a create (object_store's "already exists").
        E::AlreadyExists { .. } => StorageErrorKind::Transient,
        E::JoinError { .. } => StorageErrorKind::Transient,
        _ => StorageErrorKind::Permanent,
    };
    StorageError::new(kind, e.to_string())
        .with_key(key)
        .with_source(e)
}

/// For a create or a list, "not found" means the bucket is missing.
fn not_found_is_permanent(e: ::object_store::Error, key: &str) -> StorageError {
    match e {
        ::object_store::Error::NotFound { .. } => {
            StorageError::permanent(format!("the bucket (or root) is missing: {e}"))
                .with_key(key)
                .with_source(e)
        }
        e => map_error(e, key),
    }
}

#[async_trait::async_trait]
impl ObjectStorage for ObjectStoreStorage {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        let location = path(key)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&location, PutPayload::from(data), opts)
            .await
        {
            Ok(_) => Ok(Created::New),
            Err(::object_store::Error::AlreadyExists { .. })
            | Err(::object_store::Error::Precondition { .. }) => Ok(Created::AlreadyExists),
            Err(e) => Err(not_found_is_permanent(e, key)),
        }
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let location = path(key)?;
        if range.start >= range.end {
            let meta = self
                .store
                .head(&location)
                .await
                .map_err(|e| map_error(e, key))?;
            check_range(key, &range, meta.size)?;
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        let data = self
            .store
            .get_range(&location, range.clone())
            .await
            .map_err(|e| map_error(e, key))?;
        if data.len() as u64 != want {
            return Err(StorageError::permanent(format!(
                "range {}..{} is outside the object: got {} bytes",
                range.start,
                range.end,
                data.len()
            ))
            .with_key(key));
        }
        Ok(data)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        // object_store lists by whole path segments: list the segment the
        // prefix surely lies in, filter by the whole prefix.
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let dir_path = if dir.is_empty() {
            None
        } else {
            Some(path(dir)?)
        };
        let listed: Vec<_> = self
            .store
            .list(dir_path.as_ref())
            .try_collect()
            .await
            .map_err(|e| not_found_is_permanent(e, prefix))?;
        let objects = listed
            .into_iter()
            .filter(|m| m.location.as_ref().starts_with(prefix))
            .map(|m| ObjectMeta {
                key: m.location.to_string(),
                size: m.size,
            })
            .collect();
        Ok(sort_listing(objects))
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let location = path(key)?;
        match self.store.delete(&location).await {
            Ok(()) | Err(::object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_error(e, key)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Msg(&'static str);

    fn generic(msg: &'static str) -> ::object_store::Error {
        ::object_store::Error::Generic {
            store: "S3",
            source: Box::new(Msg(msg)),
        }
    }

    #[test]
    fn errors_map_to_kinds() {
        let k = |e| map_error(e, "k").kind();
        assert!(map_error(
            ::object_store::Error::NotFound {
                path: "k".into(),
                source: Box::new(Msg("404"))
            },
            "k"
        )
        .is_not_found());
        let five = "Server returned non-2xx status code: 503 Service Unavailable: SlowDown";
        assert_eq!(k(generic(five)), StorageErrorKind::Transient);
        assert_eq!(
            k(generic("error sending request: operation timed out")),
            StorageErrorKind::Transient
        );
        assert_eq!(
            k(generic("tcp connect error: Connection refused")),
            StorageErrorKind::Transient
        );
        let bad = "Server returned non-2xx status code: 416 Range Not Satisfiable";
        assert_eq!(k(generic(bad)), StorageErrorKind::Permanent);
        let denied = ::object_store::Error::PermissionDenied {
            path: "k".into(),
            source: Box::new(Msg("403")),
        };
        assert_eq!(k(denied), StorageErrorKind::Permanent);
    }
}
