//! The provided `read_suffix` on outside backends that implement only the
//! four required methods: exact for every size, one read (no listing) for a
//! missing key and for an object up to the window, a listing only from a
//! backend that refuses ranges past the end.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use crate::storage::{Created, ObjectMeta, ObjectStorage, Storage, StorageError};

/// How an outside backend answers a range that ends past the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PastTheEnd {
    /// The bytes the object holds in it (a range starting at or past the
    /// end is refused, as S3 answers 416).
    Short,
    /// An error, as the built-in backends answer.
    Refused,
    /// More bytes than asked: a broken backend.
    Overlong,
}

/// A backend outside the crate: the four required methods, nothing else.
#[derive(Debug)]
struct Outside {
    objects: Mutex<HashMap<String, Bytes>>,
    past_the_end: PastTheEnd,
    reads: AtomicU64,
    lists: AtomicU64,
}

impl Outside {
    fn new(past_the_end: PastTheEnd) -> Self {
        Outside {
            objects: Mutex::default(),
            past_the_end,
            reads: AtomicU64::new(0),
            lists: AtomicU64::new(0),
        }
    }

    fn counts(&self) -> (u64, u64) {
        let counts = (
            self.reads.load(Ordering::SeqCst),
            self.lists.load(Ordering::SeqCst),
        );
        self.reads.store(0, Ordering::SeqCst);
        self.lists.store(0, Ordering::SeqCst);
        counts
    }

    fn object(&self, key: &str) -> Option<Bytes> {
        self.objects.lock().unwrap().get(key).cloned()
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Outside {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        let mut objects = self.objects.lock().unwrap();
        if objects.contains_key(key) {
            return Ok(Created::AlreadyExists);
        }
        objects.insert(key.to_owned(), data);
        Ok(Created::New)
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let data = self
            .object(key)
            .ok_or_else(|| StorageError::not_found(key))?;
        let size = data.len() as u64;
        if range.end <= size {
            return Ok(data.slice(range.start as usize..range.end as usize));
        }
        match self.past_the_end {
            PastTheEnd::Short if range.start < size => Ok(data.slice(range.start as usize..)),
            PastTheEnd::Short | PastTheEnd::Refused => {
                Err(StorageError::permanent("range not satisfiable").with_key(key))
            }
            PastTheEnd::Overlong => {
                Ok(Bytes::from(vec![0; (range.end - range.start) as usize + 1]))
            }
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        let objects = self.objects.lock().unwrap();
        Ok(objects
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| ObjectMeta {
                key: k.clone(),
                size: v.len() as u64,
            })
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.objects.lock().unwrap().remove(key);
        Ok(())
    }
}

const LEN: u64 = 8;

fn bytes_of(size: u64) -> Bytes {
    (0..size)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Reads a step-2 object of `size` bytes takes: the first, then ranges
/// four times longer each, until one comes short.
fn reads_for(size: u64) -> u64 {
    if size < LEN {
        return 1;
    }
    let (mut reads, mut end, mut step) = (1, LEN, LEN * 4);
    loop {
        reads += 1;
        let start = end - 1;
        if start + step > size {
            return reads;
        }
        end = start + step;
        step *= 4;
    }
}

#[tokio::test]
async fn every_size_comes_exact_without_a_listing_from_a_backend_that_answers_short() {
    for size in [
        0,
        1,
        LEN - 1,
        LEN,
        LEN + 1,
        4 * LEN,
        5 * LEN - 2,
        5 * LEN - 1,
        5 * LEN,
        21 * LEN - 3,
        1000,
    ] {
        let outside = std::sync::Arc::new(Outside::new(PastTheEnd::Short));
        let data = bytes_of(size);
        outside.create("k", data.clone()).await.unwrap();
        let storage = Storage::from_arc(outside.clone());
        let suffix = storage.read_suffix("k", LEN).await.unwrap();
        let want = data.slice(size.saturating_sub(LEN) as usize..);
        assert_eq!((suffix.size, suffix.data), (size, want), "size {size}");
        let (reads, lists) = outside.counts();
        if size == 0 {
            // Nothing to answer even short: S3 refuses the range; the key
            // is listed instead.
            assert_eq!((reads, lists), (2, 1), "size 0");
        } else {
            assert_eq!((reads, lists), (reads_for(size), 0), "size {size}");
        }
    }
}

#[tokio::test]
async fn a_missing_key_costs_one_read_and_no_listing_on_any_backend() {
    for past_the_end in [PastTheEnd::Short, PastTheEnd::Refused, PastTheEnd::Overlong] {
        let outside = std::sync::Arc::new(Outside::new(past_the_end));
        let storage = Storage::from_arc(outside.clone());
        let e = storage.read_suffix("missing", LEN).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert_eq!(outside.counts(), (1, 0), "{past_the_end:?}");
    }
}

#[tokio::test]
async fn a_backend_that_refuses_ranges_past_the_end_is_listed_only_for_a_present_key() {
    for size in [1, LEN - 1, LEN, LEN + 1, 1000] {
        let outside = std::sync::Arc::new(Outside::new(PastTheEnd::Refused));
        let data = bytes_of(size);
        outside.create("k", data.clone()).await.unwrap();
        let storage = Storage::from_arc(outside.clone());
        let suffix = storage.read_suffix("k", LEN).await.unwrap();
        let want = data.slice(size.saturating_sub(LEN) as usize..);
        assert_eq!((suffix.size, suffix.data), (size, want), "size {size}");
        let (_, lists) = outside.counts();
        assert_eq!(lists, 1, "size {size}");
    }
}

/// A broken backend's answer longer than its range is never handed on: the
/// size comes from the listing instead.
#[tokio::test]
async fn an_answer_longer_than_asked_is_not_handed_on() {
    let outside = std::sync::Arc::new(Outside::new(PastTheEnd::Overlong));
    let data = bytes_of(3);
    outside.create("k", data.clone()).await.unwrap();
    let storage = Storage::from_arc(outside.clone());
    let suffix = storage.read_suffix("k", LEN).await.unwrap();
    assert_eq!((suffix.size, suffix.data), (3, data));
    assert_eq!(outside.counts(), (2, 1));
}
