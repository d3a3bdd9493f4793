//! Object storage: one narrow trait, the handle every part of objwal uses, and
//! the backends.
//!
//! The trait is the contract an outside backend implements: a conditional
//! create (if-not-exists), a ranged read, a listing and a delete. Nothing else
//! is asked of a backend; retries, read-backs and every decision about what a
//! failure means live above it, in the log store.
//!
//! Invariants every backend keeps (checked by the conformance suite):
//! - `create` never replaces an existing key: of racing creates of one key at
//!   most one returns [`Created::New`] and the first bytes stay.
//! - `list` returns keys in ascending byte order, with their sizes.
//! - `delete` of a missing key is `Ok`.
//!
//! [`Storage`] enforces at its boundary, for every backend including outside
//! ones, what a backend might get wrong without noticing: listings are
//! sorted, and a read returns exactly the bytes of the range asked for (S3:
//! an answer of another length is a transient error, never bytes handed on;
//! a short answer decoded as an object would look like damage).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

#[cfg(any(feature = "object_store", feature = "opendal"))]
mod billing;
#[doc(hidden)]
pub mod create_check;
mod dir_sync;
#[cfg(any(feature = "object_store", feature = "opendal"))]
mod explain;
mod file;
#[doc(hidden)]
pub mod keys;
mod memory;
#[cfg(feature = "object_store")]
mod object_store;
#[cfg(feature = "opendal")]
mod opendal;
mod rooted;
mod suffix;
mod timeout;
mod url;

#[cfg(any(test, feature = "testing"))]
pub mod fault;
#[cfg(test)]
pub(crate) mod forwarding_tests;
#[cfg(any(test, feature = "testing"))]
pub mod power_loss;

#[cfg(feature = "object_store")]
pub use self::object_store::ObjectStoreStorage;
#[cfg(feature = "opendal")]
pub use self::opendal::OpendalStorage;
pub use file::FileStorage;
#[doc(hidden)]
pub use file::TEMP_MARKER;
pub use memory::MemoryStorage;
#[doc(hidden)]
pub use rooted::Rooted;

/// Installs ring as the process's TLS crypto provider, unless one is
/// installed already (then it does nothing); with the `opendal` feature,
/// also opendal's process-wide default HTTP transport (a reqwest client with
/// a 60 s request and a 5 s connect timeout), unless one is installed.
///
/// The adapters' HTTP clients are built with rustls and ring instead of
/// aws-lc-rs (whose C build was the longest part of an adapter build), so
/// a TLS client needs a provider installed for the process before it is
/// built. [`Storage::from_url`] and `Storage::from_opendal` call this;
/// call it yourself before you build an `object_store` client of your own
/// for `Storage::from_object_store`, or use an opendal operator before
/// handing it over (or enable object_store's `aws` feature, which brings
/// aws-lc-rs back and needs nothing installed).
///
/// ring's provider has no post-quantum key exchange (X25519 and the NIST
/// curves only). To have it, install aws-lc-rs's provider before the first
/// storage is built (`rustls::crypto::aws_lc_rs::default_provider()
/// .install_default()` with rustls's `aws-lc-rs` feature): this function
/// then leaves it in place.
#[cfg(any(feature = "object_store", feature = "opendal"))]
pub fn install_crypto_provider() {
    // An error means a provider is installed: whichever was first stays.
    #[allow(
        deprecated,
        reason = "rustls 0.23.48 deprecates ring's provider for its lack of post-quantum key \
                  exchange; the trade against aws-lc-rs's build is in BENCHMARKS.md (Build times)"
    )]
    let _ = ::rustls::crypto::ring::default_provider().install_default();
    #[cfg(feature = "opendal")]
    self::opendal::install_default_transport();
}

/// What a conditional create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The key did not exist; the object now holds the given bytes durably.
    New,
    /// The key already existed; its bytes were left untouched. The caller must
    /// read them back to learn whether they are its own (a retried create
    /// whose first response was lost) or another writer's.
    AlreadyExists,
}

/// The end of an object and its size, as
/// [`ObjectStorage::read_suffix`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suffix {
    /// The object's last `min(len, size)` bytes.
    pub data: Bytes,
    /// The object's size in bytes.
    pub size: u64,
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The full key, including the prefix it was listed under.
    pub key: String,
    /// The object's size in bytes.
    pub size: u64,
}

/// How a storage request failed, as far as a caller acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// The key does not exist.
    NotFound,
    /// The request may succeed if repeated (timeouts, 5xx, throttling,
    /// connection errors, 409 conflicts).
    Transient,
    /// Repeating the request will not help (bad credentials, bad request,
    /// a missing bucket).
    Permanent,
}

impl fmt::Display for StorageErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StorageErrorKind::NotFound => "not found",
            StorageErrorKind::Transient => "transient failure",
            StorageErrorKind::Permanent => "permanent failure",
        })
    }
}

/// A failed storage request: its kind, the key it was about (when known),
/// a message and, when there is one, the backend's error.
///
/// It prints as one line that names the cause and, where objwal knows it,
/// what to do: `storage request for "node-7/objects/…" failed (permanent
/// failure): the bucket "logs" does not exist at http://10.0.0.5:9000:
/// create it, or fix the bucket name in the storage URL`. Each fact is said
/// once in a report of the whole chain (`anyhow`'s `{:#}` or `{:?}`):
/// [`source`](std::error::Error::source) returns the backend's error only
/// where the message does not already say it. The S3, GCS and Azure
/// adapters put the backend's chain into the message themselves (a
/// missing bucket, missing or refused credentials and an unreachable
/// endpoint named with their fix, anything else condensed to each level's
/// own words, with no XML), so their errors have no `source`; the backend's
/// error is still there for a program to inspect, with
/// [`backend_error`](Self::backend_error).
///
/// An outside backend builds one with [`not_found`](Self::not_found),
/// [`transient`](Self::transient) or [`permanent`](Self::permanent) and
/// keeps its own error with [`with_source`](Self::with_source); a message
/// that quotes that error (`e.to_string()`) is fine: the error is then not
/// reported a second time as the source.
#[derive(Debug, Clone)]
pub struct StorageError {
    kind: StorageErrorKind,
    key: Option<String>,
    message: String,
    backend: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    /// The message already tells what the backend's error says: it is not
    /// reported as the source.
    told: bool,
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("storage request ")?;
        if let Some(key) = &self.key {
            write!(f, "for {key:?} ")?;
        }
        write!(f, "failed ({}): {}", self.kind, self.message)
    }
}

impl std::error::Error for StorageError {
    /// The first error of the backend's chain whose text the message does
    /// not already hold; none when the message tells it all.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if self.told {
            return None;
        }
        let backend: &(dyn std::error::Error + 'static) = self.backend.as_deref()?;
        let mut current = Some(backend);
        while let Some(e) = current {
            if !self.message.contains(&e.to_string()) {
                return Some(e);
            }
            current = e.source();
        }
        None
    }
}

impl StorageError {
    /// The key does not exist.
    pub fn not_found(key: impl Into<String>) -> Self {
        let key = key.into();
        StorageError {
            kind: StorageErrorKind::NotFound,
            message: "no such object".to_owned(),
            key: Some(key),
            backend: None,
            told: false,
        }
    }

    /// A failure that may pass if the request is repeated.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(StorageErrorKind::Transient, message)
    }

    /// A failure that repeating the request will not fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(StorageErrorKind::Permanent, message)
    }

    /// An error of the given kind.
    pub fn new(kind: StorageErrorKind, message: impl Into<String>) -> Self {
        StorageError {
            kind,
            key: None,
            message: message.into(),
            backend: None,
            told: false,
        }
    }

    /// Names the key the failed request was about.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Keeps the backend's own error: the source, unless the message
    /// already quotes it.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.backend = Some(Arc::new(source));
        self.told = false;
        self
    }

    /// Keeps the backend's own error for [`backend_error`](Self::backend_error)
    /// only: the message already says, in its own words, what that error
    /// and its chain say (the adapters' messages, `explain`).
    #[must_use]
    #[cfg_attr(
        not(any(feature = "object_store", feature = "opendal")),
        allow(dead_code, reason = "only the HTTP adapters word their errors")
    )]
    pub(crate) fn told_by(
        mut self,
        backend: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.backend = Some(Arc::new(backend));
        self.told = true;
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }

    /// Whether the key did not exist.
    pub fn is_not_found(&self) -> bool {
        self.kind == StorageErrorKind::NotFound
    }

    /// Whether repeating the request may help.
    pub fn is_transient(&self) -> bool {
        self.kind == StorageErrorKind::Transient
    }

    /// The key the request was about, when known.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The message: the cause and, where known, what to do.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The backend's own error (object_store's, opendal's, an I/O error),
    /// when there is one, whether or not it is reported as the source: for
    /// a program that inspects it (downcasts it). Its text is in the
    /// message or the source chain already.
    pub fn backend_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.backend.as_deref()
    }
}

/// The narrow interface objwal needs from an object store.
///
/// Implement it to plug in any backend; wrap the implementation with
/// [`Storage::new`]. Every method may be called concurrently.
///
/// A backend implements the four required methods; the provided ones
/// (`read_suffix`, `charges_per_request`, `remove_leftovers`) have correct
/// defaults that a backend overrides when it can do better. A *wrapper*
/// around another store must pass every provided method on to it, or the
/// default silently replaces what the inner store does (the built-in
/// wrappers are checked by `src/storage/forwarding_tests.rs`, which a new
/// provided method joins).
#[async_trait::async_trait]
pub trait ObjectStorage: Send + Sync + fmt::Debug + 'static {
    /// Creates `key` with `data` only if it does not exist. `Created::New`
    /// promises the bytes are durable.
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError>;

    /// Reads the bytes of `key` in `range`; a missing key is
    /// [`StorageError::not_found`].
    ///
    /// A range that ends past the object's end may be answered either way:
    /// with the bytes the object holds in it (fewer than asked, as an HTTP
    /// range request is answered), or with an error. objwal asks for such a
    /// range only through the provided [`read_suffix`](Self::read_suffix),
    /// which learns an object's size from a short answer and lists the key
    /// when it gets an error instead. Every other range objwal asks for lies
    /// within the object, and [`Storage`] treats an answer of another
    /// length as a transient error (invariant S3).
    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError>;

    /// Lists every object whose key starts with `prefix`, in ascending key order.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError>;

    /// Deletes `key`; deleting a missing key is `Ok`.
    async fn delete(&self, key: &str) -> Result<(), StorageError>;

    /// Reads the last `len` bytes of `key` (all of it when the object is
    /// shorter; `len` is at least 1) and learns the object's size: one
    /// request where the backend can (an HTTP suffix range, `Range:
    /// bytes=-len`, whose answer names the size). A follower
    /// ([`WalReader::follow`](crate::WalReader::follow)) asks for the next
    /// key of a log this way without knowing whether it exists, let alone
    /// its size: a missing key costs one cheap read that misses
    /// (not-found), never a listing.
    ///
    /// The default never lists a missing key: it reads `0..len`, so a key
    /// that is not there costs one read (not-found), and an object of up to
    /// `len` bytes comes whole in that read when the backend answers a
    /// range past the end short (see [`read`](Self::read)). A longer
    /// object is read on in growing ranges until an answer comes short. A
    /// backend that answers a range past the end with an error gets a
    /// listing of the key and a read of its end instead (only when the
    /// key exists). Correct for any backend; a backend that can answer a
    /// suffix range in one request (S3's `Range: bytes=-len`) should
    /// override it, as the built-in backends and adapters do.
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        suffix::read_suffix(self, key, len).await
    }

    /// Whether each request has a price (and a round trip) worth saving: a
    /// remote object store. It sets the default budget of early seals
    /// (`Config::early_seals`): unlimited where requests cost nothing, one
    /// per flush interval elsewhere. Defaults to `true`; a local backend
    /// says `false`, and so does a cloud URL whose endpoint can only be a
    /// self-hosted server (loopback, a private or link-local address, a
    /// name without a dot or under `.local`, `.internal`, `.svc`, ...:
    /// rfcs/0008-sealing.md).
    fn charges_per_request(&self) -> bool {
        true
    }

    /// Removes what a crashed writer of this backend left under `prefix`
    /// that is not an object (the local directory's temporary files of
    /// processes that no longer run), so that it does not accumulate.
    ///
    /// Only a writer calls it: [`Wal::open`](crate::Wal::open), before it
    /// creates anything, and `objwal repair --yes`. Readers
    /// ([`WalReader`](crate::WalReader)) and the read-only tools never do,
    /// so they create, delete and rename nothing. Defaults to nothing to
    /// remove; a wrapper around another backend should pass it on.
    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        let _ = prefix;
        Ok(())
    }
}

/// A cheap-to-clone handle to any [`ObjectStorage`] backend.
#[derive(Clone)]
pub struct Storage {
    inner: Arc<dyn ObjectStorage>,
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

impl Storage {
    /// Wraps a backend.
    pub fn new(backend: impl ObjectStorage) -> Self {
        Storage {
            inner: Arc::new(backend),
        }
    }

    /// Wraps a shared backend.
    pub fn from_arc(backend: Arc<dyn ObjectStorage>) -> Self {
        Storage { inner: backend }
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Storage {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        if range.start > range.end {
            return Err(StorageError::permanent(format!(
                "the range {}..{} is reversed",
                range.start, range.end
            ))
            .with_key(key));
        }
        let asked = range.clone();
        let data = self.inner.read(key, range).await?;
        exact(key, &asked, data)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        // Outside backends are trusted but not relied on: sorting a sorted
        // list is linear.
        self.inner.list(prefix).await.map(sort_listing)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        if len == 0 {
            return Err(
                StorageError::permanent("a suffix read of 0 bytes asks for nothing").with_key(key),
            );
        }
        let suffix = self.inner.read_suffix(key, len).await?;
        let want = len.min(suffix.size);
        exact(key, &(suffix.size - want..suffix.size), suffix.data)
            .map(|data| Suffix { data, ..suffix })
    }

    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

/// Invariant S3 at the [`Storage`] boundary: a read answers exactly the
/// bytes of the (not reversed) range `asked`. Any other length is a
/// transient error: every range objwal asks for lies within an object of
/// the size its listing gave, and objects never change, so an answer of
/// another length is a transfer gone wrong (or a backend's bug), which a
/// repeated read may not repeat. Handed on, a short answer would decode as
/// a damaged object.
fn exact(key: &str, asked: &Range<u64>, data: Bytes) -> Result<Bytes, StorageError> {
    let want = asked.end - asked.start;
    if data.len() as u64 == want {
        return Ok(data);
    }
    Err(StorageError::transient(format!(
        "a read of {}..{} answered {} bytes instead of {want}",
        asked.start,
        asked.end,
        data.len()
    ))
    .with_key(key))
}

/// Sorts a listing by key: the one place listings are put in the order the
/// trait promises (file-system backends list in directory order).
pub(crate) fn sort_listing(mut objects: Vec<ObjectMeta>) -> Vec<ObjectMeta> {
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    objects
}

/// Checks `range` against an object of `len` bytes: it must not be reversed
/// nor end past the object. Returns it as a `usize` range.
pub(crate) fn check_range(
    key: &str,
    range: &Range<u64>,
    len: u64,
) -> Result<Range<usize>, StorageError> {
    if range.start > range.end || range.end > len {
        return Err(StorageError::permanent(format!(
            "range {}..{} is outside the object of {len} bytes",
            range.start, range.end
        ))
        .with_key(key));
    }
    let start = usize::try_from(range.start)
        .map_err(|_| StorageError::permanent("range too large").with_key(key))?;
    let end = usize::try_from(range.end)
        .map_err(|_| StorageError::permanent("range too large").with_key(key))?;
    Ok(start..end)
}
