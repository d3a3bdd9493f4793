//! Adapter for `opendal::Operator` (feature `opendal`).
//!
//! Responsibility: the [`ObjectStorage`] contract on top of any opendal
//! service: creates are `write_with(..).if_not_exists(true)`, reads are
//! ranged reads, listings are recursive listings filtered by the prefix.
//!
//! Invariants and limits:
//! - On object stores (S3, GCS, Azure Blob) an if-not-exists write is a
//!   conditional request the server decides, so a create is exclusive and
//!   atomic.
//! - **opendal's `fs` service does not create atomically.** Without
//!   `atomic_write_dir` it opens the final name with `O_EXCL` and writes in
//!   place: exclusive, but a racer or a crash can see a partial object under
//!   its final name. With `atomic_write_dir` it checks for the key and then
//!   renames a temporary file over it: not exclusive at all (every racer
//!   "wins"). Neither syncs the directory. The caller's read-back decides
//!   what such a store holds; use [`FileStorage`](super::FileStorage) for a
//!   local directory instead.
//! - A read whose range ends past the object is an error: the returned length
//!   is checked against the requested one.
//! - Keys with an empty or `.`/`..` part (`p/objects//stray`, legal in S3,
//!   written by another tool) are left out of listings with a warning, as
//!   the object_store adapter does: no objwal key is named so.
//!
//! Error mapping: `ConditionNotMatch`/`AlreadyExists` on create are
//! [`Created::AlreadyExists`]; `NotFound` is not-found; `RateLimited`,
//! `Conflict`, HTTP 409 and every error opendal marks temporary (timeouts,
//! 5xx, connection errors) are transient; everything else is permanent.
//! The message is the error chain in one line, a known cause named with
//! its fix (`explain`).

use std::ops::Range;

use ::opendal::{ErrorKind, Operator};
use bytes::Bytes;

use super::explain::{explain, missing_bucket};
use super::{check_range, sort_listing, Created, ObjectMeta, ObjectStorage, Storage};
use super::{StorageError, StorageErrorKind, Suffix};

/// An [`ObjectStorage`] backed by an `opendal::Operator`.
///
/// Beware: opendal's `fs` service does not create atomically (exclusive but
/// torn without `atomic_write_dir`, not exclusive with it); the caller's
/// read-back decides what such a store holds.
#[derive(Debug, Clone)]
pub struct OpendalStorage {
    op: Operator,
}

impl OpendalStorage {
    /// Wraps an operator. Installs opendal's default (reqwest) HTTP
    /// transport unless the process installed one before (first wins).
    pub fn new(op: Operator) -> Self {
        ::opendal::install_default();
        OpendalStorage { op }
    }
}

impl Storage {
    /// A storage handle over an opendal operator (feature `opendal`).
    ///
    /// Creates use if-not-exists writes. Beware: opendal's `fs` service does
    /// not create atomically (see [`OpendalStorage`]);
    /// the caller's read-back decides what such a store holds.
    pub fn from_opendal(op: Operator) -> Storage {
        // An operator built by hand uses opendal's default transport, which
        // opendal no longer installs by itself without aws-lc-rs.
        super::install_crypto_provider();
        Storage::new(OpendalStorage::new(op))
    }
}

/// Installs opendal's process-wide default HTTP transport, once: a reqwest
/// client with the timeouts of the URL-built backends. The crypto provider
/// must be installed first (`install_crypto_provider` does both).
pub(crate) fn install_default_transport() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let client = ::reqwest::Client::builder()
            .timeout(super::url::cloud::HTTP_TIMEOUT)
            .connect_timeout(super::url::cloud::CONNECT_TIMEOUT)
            .build();
        match client {
            Ok(client) => ::opendal::HttpTransporter::install_default(
                ::opendal_http_transport_reqwest::ReqwestTransport::new(client),
            ),
            Err(e) => tracing::warn!(error = %e, "cannot build opendal's default HTTP client"),
        }
    });
}

/// Maps an opendal error about `key`.
pub(crate) fn map_error(e: ::opendal::Error, key: &str) -> StorageError {
    let text = e.to_string();
    let kind = match e.kind() {
        ErrorKind::NotFound => return StorageError::not_found(key).told_by(e),
        ErrorKind::RateLimited | ErrorKind::Conflict => StorageErrorKind::Transient,
        _ if e.is_temporary() => StorageErrorKind::Transient,
        // S3's ConditionalRequestConflict (409: a racing conditional write is
        // in progress) reaches us as a persistent `Unexpected`.
        _ if text.contains("ConditionalRequestConflict") || text.contains("status: 409") => {
            StorageErrorKind::Transient
        }
        _ => StorageErrorKind::Permanent,
    };
    StorageError::new(kind, explain(&e))
        .with_key(key)
        .told_by(e)
}

#[async_trait::async_trait]
impl ObjectStorage for OpendalStorage {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        match self.op.write_with(key, data).if_not_exists(true).await {
            Ok(_) => Ok(Created::New),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConditionNotMatch | ErrorKind::AlreadyExists
                ) =>
            {
                Ok(Created::AlreadyExists)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Err(StorageError::permanent(missing_bucket(&e))
                    .with_key(key)
                    .told_by(e))
            }
            Err(e) => Err(map_error(e, key)),
        }
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        if range.start >= range.end {
            // An empty (or reversed) range: opendal cannot ask for it, check
            // it against the object's size instead.
            let meta = self.op.stat(key).await.map_err(|e| map_error(e, key))?;
            check_range(key, &range, meta.content_length())?;
            return Ok(Bytes::new());
        }
        let want = range.end - range.start;
        let data = match self.op.read_with(key).range(range.clone()).await {
            Ok(buf) => buf.to_bytes(),
            Err(e) if e.kind() == ErrorKind::RangeNotSatisfied => {
                return Err(past_end(key, &range, e));
            }
            Err(e) => return Err(map_error(e, key)),
        };
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

    /// A stat, then a ranged read (opendal asks for ranges by offset): a
    /// missing key costs one request, an object two.
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        let size = self
            .op
            .stat(key)
            .await
            .map_err(|e| map_error(e, key))?
            .content_length();
        let data = self.read(key, size.saturating_sub(len)..size).await?;
        Ok(Suffix { data, size })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        // List the directory the prefix surely lies in, filter by the whole
        // prefix: services disagree on prefixes that do not end at a `/`.
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..=i]);
        let entries = match self.op.list_with(dir).recursive(true).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(map_error(e, prefix)),
        };
        let objects = entries
            .into_iter()
            .filter(|e| e.metadata().is_file() && e.path().starts_with(prefix))
            .filter(|e| {
                let ok = nameable(e.path());
                if !ok {
                    tracing::warn!(
                        key = e.path(),
                        prefix,
                        "ignoring a key with an empty or '.' part (written by another tool)"
                    );
                }
                ok
            })
            .map(|e| ObjectMeta {
                size: e.metadata().content_length(),
                key: e.path().to_owned(),
            })
            .collect();
        Ok(sort_listing(objects))
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match self.op.delete(key).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(map_error(e, key)),
        }
    }
}

/// Whether `key` could be an object key of objwal's: no empty, `.` or `..`
/// part (a trailing `/`, as of a folder marker, aside). Other tools may
/// write such keys into a bucket (S3 allows any string); nothing objwal
/// writes or reads is named so, and the object_store adapter cannot even
/// name them, so both adapters list past them.
fn nameable(key: &str) -> bool {
    let key = key.strip_suffix('/').unwrap_or(key);
    !key.split('/').any(|part| matches!(part, "" | "." | ".."))
}

/// The error of a range the object does not cover (a permanent one: it is
/// the caller's mistake, repeating will not help).
fn past_end(key: &str, range: &Range<u64>, e: ::opendal::Error) -> StorageError {
    StorageError::permanent(format!(
        "range {}..{} is outside the object: {}",
        range.start,
        range.end,
        explain(&e)
    ))
    .with_key(key)
    .told_by(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_an_empty_or_dot_part_are_not_nameable() {
        for key in ["p/objects/1.wal", "p/objects/", "a", "p/.hidden/x"] {
            assert!(nameable(key), "{key}");
        }
        for key in [
            "p/objects//x",
            "p/./x",
            "p/../x",
            "/p",
            "p//",
            "p/objects/..",
        ] {
            assert!(!nameable(key), "{key}");
        }
    }

    #[test]
    fn errors_map_to_kinds() {
        let k = |e: ::opendal::Error| map_error(e, "k").kind();
        assert!(map_error(::opendal::Error::new(ErrorKind::NotFound, "x"), "k").is_not_found());
        assert_eq!(
            k(::opendal::Error::new(ErrorKind::RateLimited, "x")),
            StorageErrorKind::Transient
        );
        assert_eq!(
            k(::opendal::Error::new(ErrorKind::Unexpected, "503").set_temporary()),
            StorageErrorKind::Transient
        );
        assert_eq!(
            k(::opendal::Error::new(
                ErrorKind::Unexpected,
                "S3Error { code: \"ConditionalRequestConflict\" }"
            )),
            StorageErrorKind::Transient
        );
        assert_eq!(
            k(::opendal::Error::new(ErrorKind::PermissionDenied, "x")),
            StorageErrorKind::Permanent
        );
        assert_eq!(
            k(::opendal::Error::new(
                ErrorKind::ConfigInvalid,
                "NoSuchBucket"
            )),
            StorageErrorKind::Permanent
        );
    }

    /// Issue 21, item 4: opendal's message (with its response headers) was
    /// the message and the source. One line now, told once.
    #[test]
    fn a_mapped_error_tells_its_chain_once_and_keeps_the_backends_error() {
        let raw =
            "S3Error { code: \"NoSuchBucket\", message: \"The specified bucket does not exist\" }";
        let e = ::opendal::Error::new(ErrorKind::ConfigInvalid, raw)
            .with_context("uri", "http://127.0.0.1:9000/logs/p/objects/x");
        let e = map_error(e, "p/objects/x");
        assert!(std::error::Error::source(&e).is_none());
        assert!(e.backend_error().is_some());
        assert!(
            e.message()
                .starts_with("the bucket does not exist at http://127.0.0.1:9000: create it"),
            "{e}"
        );
    }
}
