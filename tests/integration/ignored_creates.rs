//! A store that ignores conditional creates is refused, not trusted (issue
//! 29, item 8). Every fencing rule rests on create-if-absent; some
//! S3-compatible servers (s3rver 3.7.1, older MinIO and Ceph) answer a
//! second `PUT` with `If-None-Match: *` with 200 and overwrite. `Wal::open`
//! proves the property on its fence (one more create) and fails, naming
//! the behaviour, before anything is written under `objects/`. The honest
//! case of every backend is in `storage_conformance`
//! (`create_twice_keeps_the_first_bytes`, `the_create_if_absent_check_passes`).

use std::sync::Arc;

use bytes::Bytes;
use objwal::storage::create_check::{check_scratch, Verdict};
use objwal::storage::MemoryStorage;
use objwal::{Config, Created, Error, ObjectMeta, ObjectStorage, Storage, StorageError, Wal};

use crate::common::faulty_memory;

/// How a dishonest store answers a create of a key that exists.
#[derive(Debug, Clone, Copy)]
enum Lie {
    /// Overwrites and answers `New` (s3rver 3.7.1).
    Overwrite,
    /// Keeps the first bytes and answers `New`.
    KeepAndSayNew,
}

/// A test-only backend over memory whose creates ignore the condition.
#[derive(Debug, Clone)]
struct Dishonest {
    inner: Arc<MemoryStorage>,
    lie: Lie,
}

impl Dishonest {
    fn new(lie: Lie) -> Self {
        Dishonest {
            inner: Arc::new(MemoryStorage::new()),
            lie,
        }
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Dishonest {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        if matches!(self.lie, Lie::Overwrite) {
            self.inner.delete(key).await?;
        }
        self.inner.create(key, data).await?;
        Ok(Created::New)
    }

    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

#[tokio::test(start_paused = true)]
async fn an_open_on_a_store_that_ignores_conditional_creates_fails_before_writing_objects() {
    for (lie, says) in [
        (Lie::Overwrite, "replaced the object's bytes"),
        (Lie::KeepAndSayNew, "kept the first bytes"),
    ] {
        let store = Dishonest::new(lie);
        let e = Wal::open(Storage::new(store.clone()), "t", Config::default())
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::Storage { .. }), "{lie:?}: {e:?}");
        assert!(!e.is_retryable(), "{lie:?}: {text}");
        assert!(
            text.contains("does not honour create-if-absent")
                && text.contains("If-None-Match")
                && text.contains(says)
                && text.contains("t/fences/"),
            "{lie:?}: {text}"
        );
        assert!(
            text.contains("before writing anything under objects/"),
            "{lie:?}: {text}"
        );
        assert!(
            store.inner.list("t/objects/").await.unwrap().is_empty(),
            "{lie:?}: objects were written"
        );
    }
}

/// The check on a scratch key, as `objwal verify` runs it: refused on a
/// dishonest store, passed on an honest one, and the key is gone after.
#[tokio::test(start_paused = true)]
async fn the_scratch_check_tells_an_honest_store_from_one_that_overwrites() {
    let key = "objwal-create-check-test";
    let dishonest = Dishonest::new(Lie::Overwrite);
    match check_scratch(&Storage::new(dishonest.clone()), key).await {
        Verdict::Ignored(e) => {
            assert!(e.to_string().contains("does not honour"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(dishonest.inner.list("").await.unwrap().is_empty());
    let honest = Storage::new(MemoryStorage::new());
    assert!(matches!(
        check_scratch(&honest, key).await,
        Verdict::Honoured
    ));
    assert!(honest.list("").await.unwrap().is_empty());
}

/// The second create of the fence whose answer is lost (it may have
/// landed) teaches nothing by itself: the fence still holds the claim's
/// bytes, so the check is repeated, and an honest store passes it.
#[tokio::test(start_paused = true)]
async fn a_lost_answer_to_the_check_is_repeated_not_taken_for_a_verdict() {
    let faulty = faulty_memory();
    // The claim's create, then the check's.
    faulty.lose_next_create_responses("t/fences/", 2);
    let wal = Wal::open(faulty.storage(), "t", Config::default())
        .await
        .unwrap();
    // The fence, the check twice, the start object.
    assert_eq!(faulty.counts().create.requests, 4);
    wal.stop().await.unwrap();
}

/// The check costs one create per open and nothing else: an open of a
/// new log on memory makes exactly one create more under `fences/` than
/// the claim.
#[tokio::test(start_paused = true)]
async fn the_check_costs_one_create_per_open() {
    let faulty = faulty_memory();
    let wal = Wal::open(faulty.storage(), "t", Config::default())
        .await
        .unwrap();
    let counts = faulty.counts();
    wal.stop().await.unwrap();
    // The fence, the check, the start object.
    assert_eq!(counts.create.requests, 3, "{counts:?}");
}
