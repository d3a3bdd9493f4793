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
//! - **object_store parses every listed key as a `Path`**, which refuses
//!   keys with an empty or `.`/`..` part (`p/objects//stray`, legal in S3,
//!   written by another tool), and one such key fails the whole page of the
//!   listing, and the listing. A store wrapped with
//!   [`ObjectStoreStorage::paginated`] (`s3://` URLs are) lists page by page
//!   from an offset and lists past such a key: the error names it, a
//!   search with smaller pages recovers the keys before it, and the listing
//!   goes on after it (ignored, with a warning). A plain `Arc<dyn
//!   ObjectStore>` cannot: its listing fails naming the key.
//!
//! Error mapping: `AlreadyExists`/`Precondition` on create are
//! [`Created::AlreadyExists`]; `NotFound` is not-found (and `Ok` for a
//! delete; for a create or a list, the bucket is missing); a `Generic`
//! error caused by a connection error, a timeout, a 5xx or a 429 is
//! transient; everything else is permanent. The message is the error chain
//! in one line, a known cause named with its fix (`explain`).

use std::error::Error as StdError;
use std::ops::Range;
use std::sync::Arc;

use ::object_store::list::{PaginatedListOptions, PaginatedListStore};
use ::object_store::path::Path;
use ::object_store::{
    GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
};
use bytes::Bytes;
use futures::TryStreamExt;

use super::explain::{explain, missing_bucket};
use super::{check_range, sort_listing, Created, ObjectMeta, ObjectStorage, Storage, Suffix};
use super::{StorageError, StorageErrorKind};

/// An [`ObjectStorage`] backed by an `object_store::ObjectStore`.
#[derive(Clone)]
pub struct ObjectStoreStorage {
    store: Arc<dyn ObjectStore>,
    /// The same store's paginated listing, when it has one: listings then
    /// go past keys object_store cannot parse.
    pages: Option<Arc<dyn PaginatedListStore>>,
}

impl std::fmt::Debug for ObjectStoreStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreStorage")
            .field("store", &self.store)
            .field("paginated", &self.pages.is_some())
            .finish()
    }
}

impl ObjectStoreStorage {
    /// Wraps a store. Its listings fail on a key object_store cannot
    /// parse (an empty or `.`/`..` part); see [`paginated`](Self::paginated).
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        ObjectStoreStorage { store, pages: None }
    }

    /// Wraps a store that also lists page by page from an offset (S3 and
    /// GCS do: `AmazonS3`, `GoogleCloudStorage`), so that its listings go
    /// past keys object_store cannot parse, ignoring them with a warning.
    /// The store must honour `PaginatedListOptions::offset` (a listing
    /// that does not is refused rather than looped over).
    pub fn paginated<S: ObjectStore + PaginatedListStore>(store: Arc<S>) -> Self {
        ObjectStoreStorage {
            store: store.clone(),
            pages: Some(store),
        }
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

    /// A storage handle over an `object_store` store that lists page by
    /// page from an offset (S3, GCS; feature `object_store`): as
    /// [`from_object_store`](Self::from_object_store), and its listings go
    /// past keys object_store cannot parse (`p/objects//stray`), ignored
    /// with a warning. See [`ObjectStoreStorage::paginated`].
    pub fn from_paginated_object_store<S: ObjectStore + PaginatedListStore>(
        store: Arc<S>,
    ) -> Storage {
        Storage::new(ObjectStoreStorage::paginated(store))
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

/// Maps an object_store error about `key`: its kind, and its chain worded
/// as one line (`explain`), the error kept as the backend's.
pub(crate) fn map_error(e: ::object_store::Error, key: &str) -> StorageError {
    use ::object_store::Error as E;
    let kind = match &e {
        E::NotFound { .. } => return StorageError::not_found(key).told_by(e),
        E::Generic { .. } if looks_transient(&e) => StorageErrorKind::Transient,
        // A 409 seen outside a create (object_store's "already exists").
        E::AlreadyExists { .. } => StorageErrorKind::Transient,
        E::JoinError { .. } => StorageErrorKind::Transient,
        _ => StorageErrorKind::Permanent,
    };
    StorageError::new(kind, explain(&e))
        .with_key(key)
        .told_by(e)
}

/// For a create or a list, "not found" means the bucket is missing.
fn not_found_is_permanent(e: ::object_store::Error, key: &str) -> StorageError {
    match e {
        ::object_store::Error::NotFound { .. } => StorageError::permanent(missing_bucket(&e))
            .with_key(key)
            .told_by(e),
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

    /// One GET with a suffix range (`bytes=-len`); its answer names the
    /// object's size.
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        let location = path(key)?;
        let opts = GetOptions {
            range: Some(GetRange::Suffix(len)),
            ..GetOptions::default()
        };
        let got = self
            .store
            .get_opts(&location, opts)
            .await
            .map_err(|e| map_error(e, key))?;
        let (size, range) = (got.meta.size, got.range.clone());
        let data = got.bytes().await.map_err(|e| map_error(e, key))?;
        if range.end != size || data.len() as u64 != range.end - range.start {
            return Err(StorageError::transient(format!(
                "a suffix read of {len} bytes answered {} bytes for the range {}..{} of an \
                 object of {size} bytes",
                data.len(),
                range.start,
                range.end
            ))
            .with_key(key));
        }
        Ok(Suffix { data, size })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        if let Some(pages) = &self.pages {
            return list_past_unparseable(pages.as_ref(), prefix).await;
        }
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
            .map_err(|e| match unparseable(&e) {
                Some(key) => StorageError::permanent(format!(
                    "the listing holds the key {key:?}, which object_store cannot name (an \
                     empty or '.' part); delete it, or wrap the store with \
                     Storage::from_paginated_object_store to list past it"
                ))
                .with_key(prefix)
                .with_source(e),
                None => not_found_is_permanent(e, prefix),
            })?;
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

/// The key a listing page failed on because object_store cannot parse it
/// as a `Path` (an empty, `.` or `..` part).
fn unparseable(e: &::object_store::Error) -> Option<String> {
    use ::object_store::path::Error as P;
    match e {
        ::object_store::Error::InvalidPath {
            source: P::EmptySegment { path } | P::BadSegment { path, .. },
        } => Some(path.clone()),
        _ => None,
    }
}

/// Lists every key under `prefix` page by page, each page from the last
/// key listed (`start-after`), going past keys object_store cannot parse.
///
/// A page holding such a key fails whole, naming the key. The keys before
/// it in that page are recovered with smaller pages from the same offset
/// (the largest page that parses ends just before it: found by doubling,
/// then halving, about 2 log2 of its position requests), the key is
/// skipped with a warning, and the listing goes on after it. Keys are
/// compared as raw strings, so the offset can be a key object_store could
/// not name.
async fn list_past_unparseable(
    pages: &dyn PaginatedListStore,
    prefix: &str,
) -> Result<Vec<ObjectMeta>, StorageError> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        match page(pages, prefix, after.as_deref(), None).await? {
            Page::Listed { objects, more } => {
                let Some(last) = objects.last() else { break };
                after = Some(last.key.clone());
                out.extend(objects);
                if !more {
                    break;
                }
            }
            Page::Unparseable(bad) => {
                out.extend(before_unparseable(pages, prefix, after.as_deref()).await?);
                tracing::warn!(key = %bad, prefix,
                    "ignoring a key object_store cannot name (an empty or '.' part)");
                after = Some(bad);
            }
        }
    }
    // A key deleted while the search looked for it leaves keys listed twice.
    let mut out = sort_listing(out);
    out.dedup_by(|a, b| a.key == b.key);
    Ok(out)
}

/// One page of a listing.
enum Page {
    /// The page's keys (each after the offset) and whether more follow.
    Listed {
        objects: Vec<ObjectMeta>,
        more: bool,
    },
    /// The page holds a key object_store cannot parse (the first one).
    Unparseable(String),
}

/// The page of up to `max_keys` keys under `prefix` after `after`.
async fn page(
    pages: &dyn PaginatedListStore,
    prefix: &str,
    after: Option<&str>,
    max_keys: Option<usize>,
) -> Result<Page, StorageError> {
    let options = PaginatedListOptions {
        offset: after.map(str::to_owned),
        max_keys,
        ..PaginatedListOptions::default()
    };
    let listed = match pages.list_paginated(Some(prefix), options).await {
        Ok(listed) => listed,
        Err(e) => {
            return match unparseable(&e) {
                Some(bad) => Ok(Page::Unparseable(bad)),
                None => Err(not_found_is_permanent(e, prefix)),
            }
        }
    };
    let mut objects = Vec::with_capacity(listed.result.objects.len());
    for m in listed.result.objects {
        let key = m.location.to_string();
        if after.is_some_and(|a| key.as_str() <= a) {
            return Err(StorageError::permanent(format!(
                "the store listed {key:?}, not after the offset {after:?}: it does not honour \
                 list offsets; wrap it with Storage::from_object_store instead"
            ))
            .with_key(prefix));
        }
        if key.starts_with(prefix) {
            objects.push(ObjectMeta { key, size: m.size });
        }
    }
    Ok(Page::Listed {
        objects,
        more: listed.page_token.is_some(),
    })
}

/// The keys under `prefix` after `after` and before the first key
/// object_store cannot parse there: the largest page from `after` that
/// parses.
async fn before_unparseable(
    pages: &dyn PaginatedListStore,
    prefix: &str,
    after: Option<&str>,
) -> Result<Vec<ObjectMeta>, StorageError> {
    // `good` keys are known to parse (with their page); a page of `bad`
    // keys is known to fail.
    let (mut good, mut best) = (0usize, Vec::new());
    let mut bad = 1usize;
    loop {
        match page(pages, prefix, after, Some(bad)).await? {
            Page::Unparseable(_) => break,
            Page::Listed { objects, more } => {
                if !more || objects.len() < bad {
                    // The key is gone (deleted meanwhile): all is listed.
                    return Ok(objects);
                }
                (good, best) = (bad, objects);
                bad = bad.saturating_mul(2);
            }
        }
    }
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        match page(pages, prefix, after, Some(mid)).await? {
            Page::Unparseable(_) => bad = mid,
            Page::Listed { objects, .. } => (good, best) = (mid, objects),
        }
    }
    Ok(best)
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

    /// A paginated store with pages of `page` keys that, as object_store's
    /// S3 client does, fails a whole page holding a key `Path` refuses.
    #[derive(Debug)]
    struct Pages {
        keys: Vec<String>,
        page: usize,
    }

    #[async_trait::async_trait]
    impl PaginatedListStore for Pages {
        async fn list_paginated(
            &self,
            prefix: Option<&str>,
            options: PaginatedListOptions,
        ) -> ::object_store::Result<::object_store::list::PaginatedListResult> {
            let prefix = prefix.unwrap_or("");
            let offset = options.offset.unwrap_or_default();
            let after: Vec<&String> = self
                .keys
                .iter()
                .filter(|k| k.starts_with(prefix) && k.as_str() > offset.as_str())
                .collect();
            let n = options.max_keys.unwrap_or(self.page).min(self.page);
            let mut objects = Vec::new();
            for key in after.iter().take(n) {
                objects.push(::object_store::ObjectMeta {
                    location: Path::parse(key.as_str())?,
                    last_modified: Default::default(),
                    size: key.len() as u64,
                    e_tag: None,
                    version: None,
                });
            }
            Ok(::object_store::list::PaginatedListResult {
                result: ::object_store::ListResult {
                    common_prefixes: Vec::new(),
                    objects,
                    extensions: Default::default(),
                },
                page_token: (after.len() > n).then(|| "more".to_owned()),
            })
        }
    }

    /// Issue 18, item 12: one key object_store cannot parse failed the
    /// whole listing. A paginated listing goes past it, keeping every key
    /// of the page it was in, on either side of it.
    #[tokio::test]
    async fn a_listing_goes_past_keys_object_store_cannot_name() {
        let mut keys: Vec<String> = [
            "p/./x", "p//y", "p/0", "p/1", "p/2", "p/2/./z", "p/3", "p/4", "p/5", "p/6", "p/6/..",
            "p/7", "q/0",
        ]
        .iter()
        .map(|k| (*k).to_owned())
        .collect();
        keys.sort();
        for page in [1, 2, 3, 4, 100] {
            let pages = Pages {
                keys: keys.clone(),
                page,
            };
            let listed = list_past_unparseable(&pages, "p/").await.unwrap();
            let got: Vec<&str> = listed.iter().map(|m| m.key.as_str()).collect();
            assert_eq!(
                got,
                ["p/0", "p/1", "p/2", "p/3", "p/4", "p/5", "p/6", "p/7"],
                "pages of {page}"
            );
            assert!(listed.iter().all(|m| m.size == 3));
        }
        // Nothing but strays, and nothing at all.
        let pages = Pages {
            keys: vec!["p//a".into(), "p/./b".into()],
            page: 2,
        };
        assert!(list_past_unparseable(&pages, "p/")
            .await
            .unwrap()
            .is_empty());
        assert!(list_past_unparseable(&pages, "r/")
            .await
            .unwrap()
            .is_empty());
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

    /// Issue 21, item 4: a storage error repeated object_store's chain in
    /// its message and again as its source. The message tells it once, in
    /// one line; the error stays reachable for a program.
    #[test]
    fn a_mapped_error_tells_its_chain_once_and_keeps_the_backends_error() {
        let e = map_error(
            generic("tcp connect error: Connection refused (os error 111)"),
            "p/objects/1.wal",
        );
        assert!(std::error::Error::source(&e).is_none());
        let text = e.to_string();
        assert_eq!(
            text,
            "storage request for \"p/objects/1.wal\" failed (transient failure): connection \
             refused: is the store running, and is the endpoint in the storage URL right? \
             (tcp connect error: Connection refused (os error 111))"
        );
        let backend = e.backend_error().unwrap();
        assert!(backend.downcast_ref::<::object_store::Error>().is_some());
        let missing = not_found_is_permanent(
            ::object_store::Error::NotFound {
                path: "k".into(),
                source: Box::new(Msg("Server returned non-2xx status code: 404 Not Found")),
            },
            "k",
        );
        assert!(!missing.is_not_found() && !missing.is_transient());
        assert!(
            missing
                .message()
                .starts_with("the bucket (or the root inside it) is missing: create it"),
            "{missing}"
        );
    }
}
