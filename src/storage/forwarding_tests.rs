//! Every wrapper passes every provided method of [`ObjectStorage`] on.
//!
//! A wrapper that forgets one silently gets the trait's default instead:
//! issue 30 found the self-hosted wrapper answering `read_suffix` with the
//! default (then a listing per follower poll on MinIO). The probe below
//! overrides every provided method with an answer the default never
//! gives and counts what reaches it; [`check_forwards`] wraps it and calls
//! each provided method through the wrapper. A provided method added to
//! the trait must be added to the probe and to [`check_forwards`].

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Created, MemoryStorage, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};

/// What reached the probe, per method.
#[derive(Debug, Default)]
struct Seen {
    reads: AtomicU64,
    lists: AtomicU64,
    suffixes: AtomicU64,
    charges: AtomicU64,
    leftovers: AtomicU64,
}

/// A backend whose provided methods answer what no default answers.
#[derive(Debug)]
struct Probe {
    inner: Storage,
    seen: Arc<Seen>,
}

/// The probe's suffix: not what the object holds, so a default that reads
/// the object cannot produce it.
const PROBE_SUFFIX: &[u8] = b"probe";
const PROBE_SIZE: u64 = 1_000_000;

#[async_trait::async_trait]
impl ObjectStorage for Probe {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.seen.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read(key, range).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.seen.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    async fn read_suffix(&self, _key: &str, _len: u64) -> Result<Suffix, StorageError> {
        self.seen.suffixes.fetch_add(1, Ordering::SeqCst);
        Ok(Suffix {
            data: Bytes::from_static(PROBE_SUFFIX),
            size: PROBE_SIZE,
        })
    }

    fn charges_per_request(&self) -> bool {
        self.seen.charges.fetch_add(1, Ordering::SeqCst);
        false
    }

    async fn remove_leftovers(&self, _prefix: &str) -> Result<(), StorageError> {
        self.seen.leftovers.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Wraps the probe with `wrap` and checks that each provided method called
/// through the wrapper reached the probe's own (`name` names the wrapper in
/// failures). `charges_told` is whether the wrapper asks the probe whether
/// requests are billed (a wrapper that decides it itself, as the
/// self-hosted one does, must still answer `false` over a free store).
pub(crate) async fn check_forwards(
    name: &str,
    charges_told: bool,
    wrap: impl FnOnce(Storage) -> Storage,
) {
    let seen = Arc::new(Seen::default());
    let probe = Storage::new(Probe {
        inner: Storage::new(MemoryStorage::new()),
        seen: seen.clone(),
    });
    let wrapped = wrap(probe);
    wrapped
        .create("k", Bytes::from_static(b"the object's own bytes"))
        .await
        .unwrap_or_else(|e| panic!("{name}: create: {e}"));

    let suffix = wrapped
        .read_suffix("k", PROBE_SUFFIX.len() as u64)
        .await
        .unwrap_or_else(|e| panic!("{name}: read_suffix: {e}"));
    assert_eq!(
        (&suffix.data[..], suffix.size),
        (PROBE_SUFFIX, PROBE_SIZE),
        "{name} answered read_suffix with the trait's default"
    );
    assert_eq!(
        seen.suffixes.load(Ordering::SeqCst),
        1,
        "{name}: read_suffix"
    );
    assert_eq!(
        (
            seen.reads.load(Ordering::SeqCst),
            seen.lists.load(Ordering::SeqCst)
        ),
        (0, 0),
        "{name}: read_suffix made other requests"
    );

    assert!(
        !wrapped.charges_per_request(),
        "{name} answered charges_per_request with the trait's default"
    );
    if charges_told {
        assert!(
            seen.charges.load(Ordering::SeqCst) >= 1,
            "{name}: charges_per_request"
        );
    }

    wrapped
        .remove_leftovers("p")
        .await
        .unwrap_or_else(|e| panic!("{name}: remove_leftovers: {e}"));
    assert_eq!(
        seen.leftovers.load(Ordering::SeqCst),
        1,
        "{name} dropped remove_leftovers"
    );
}

#[tokio::test]
async fn the_storage_handle_passes_every_provided_method_on() {
    check_forwards("Storage", true, |probe| probe).await;
    check_forwards("Storage of a Storage", true, Storage::new).await;
}

#[tokio::test]
async fn the_timeout_wrapper_passes_every_provided_method_on() {
    check_forwards("request timeout", true, |probe| {
        probe.with_request_timeout(Some(Duration::from_secs(60)))
    })
    .await;
}

#[tokio::test]
async fn the_rooted_wrapper_passes_every_provided_method_on() {
    check_forwards("rooted", true, |probe| {
        Storage::new(super::Rooted::new("root", probe).unwrap())
    })
    .await;
}

#[tokio::test]
async fn the_fault_wrapper_passes_every_provided_method_on() {
    check_forwards("fault", true, |probe| {
        super::fault::FaultyStorage::new(probe).storage()
    })
    .await;
}

#[cfg(any(feature = "object_store", feature = "opendal"))]
#[tokio::test]
async fn the_self_hosted_wrapper_passes_every_provided_method_on() {
    check_forwards("self-hosted", false, |probe| {
        super::billing::unless_self_hosted(probe, Some("http://127.0.0.1:9000"))
    })
    .await;
}
