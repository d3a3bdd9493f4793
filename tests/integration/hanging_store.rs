//! No call waits forever on a store that stops answering (issue 29, item
//! 6): an outside-style backend (the four required `ObjectStorage` methods
//! only, over memory) whose requests, once told to, never answer (a
//! future that never completes). With the default configuration every
//! public call returns within a bounded time: `request_timeout` (30 s by
//! default) ends each request, the writer's retries are bounded, `stop`
//! abandons a collection pass that does not answer, and a follower whose
//! requests keep failing ends.
//!
//! Paused time: the deadlines are virtual, and each test asserts how many
//! request timeouts its call took (the figures of rfcs/0002, "A deadline on
//! every request"). The blocking handle's runtime is multi-threaded, where
//! time cannot be paused: its case runs in real time with a short timeout.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::{
    AckMode, Config, Created, Error, ObjectMeta, ObjectStorage, Storage, StorageError, Wal,
    WalReader,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::common::b;

const PREFIX: &str = "t";

/// The default request timeout, which every case runs with.
const T: Duration = Duration::from_secs(30);

/// Requests of these kinds hang (bits).
const CREATE: u8 = 1;
const READ: u8 = 2;
const LIST: u8 = 4;
const DELETE: u8 = 8;
const ALL: u8 = CREATE | READ | LIST | DELETE;

/// An outside backend: memory underneath, and requests of the kinds set
/// with [`Hanging::hang`] never answer.
#[derive(Debug, Clone, Default)]
struct Hanging {
    inner: Arc<objwal::storage::MemoryStorage>,
    hang: Arc<AtomicU8>,
    /// Requests that began to hang.
    hung: Arc<AtomicU64>,
    started: Arc<Notify>,
}

impl Hanging {
    fn hang(&self, kinds: u8) {
        self.hang.store(kinds, Ordering::SeqCst);
    }

    async fn maybe_hang(&self, kind: u8) {
        if self.hang.load(Ordering::SeqCst) & kind != 0 {
            self.hung.fetch_add(1, Ordering::SeqCst);
            self.started.notify_waiters();
            std::future::pending::<()>().await;
        }
    }

    fn storage(&self) -> Storage {
        Storage::new(self.clone())
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Hanging {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.maybe_hang(CREATE).await;
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.maybe_hang(READ).await;
        self.inner.read(key, range).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.maybe_hang(LIST).await;
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.maybe_hang(DELETE).await;
        self.inner.delete(key).await
    }
}

/// A bound far above what any call may take: a call still running then
/// hangs, and the test fails instead of stalling the suite.
const DEADLINE: Duration = Duration::from_secs(3600);

/// Runs `call` to its end within [`DEADLINE`] of virtual time; returns its
/// result and how many request timeouts it took.
async fn timed<R>(what: &str, call: impl std::future::Future<Output = R>) -> (R, f64) {
    let started = Instant::now();
    let result = tokio::time::timeout(DEADLINE, call)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within {DEADLINE:?}: it hangs"));
    let took = started.elapsed().as_secs_f64() / T.as_secs_f64();
    tracing::debug!("{what}: {took:.2} x request_timeout");
    (result, took)
}

/// A log with one durable entry of region 1 (and one of region 2) on an
/// answering store, opened with `config`.
async fn written(store: &Hanging, config: Config) -> Wal {
    let wal = Wal::open(store.storage(), PREFIX, config).await.unwrap();
    wal.append(vec![(1, b("one")), (2, b("two"))])
        .await
        .unwrap();
    // Durable in enqueued mode too.
    wal.flush().await.unwrap();
    wal
}

#[test]
fn the_default_request_timeout_is_finite() {
    assert_eq!(Config::default().request_timeout, Some(T));
}

#[tokio::test(start_paused = true)]
async fn wal_open_on_a_store_that_never_answers_fails() {
    for create_if_missing in [true, false] {
        let store = Hanging::default();
        store.hang(ALL);
        let config = Config {
            create_if_missing,
            ..Config::default()
        };
        let what = format!("Wal::open (create_if_missing = {create_if_missing})");
        let (result, took) = timed(&what, Wal::open(store.storage(), PREFIX, config)).await;
        let e = result.unwrap_err();
        assert!(e.is_retryable(), "{what}: {e}");
        assert!(e.to_string().contains("request_timeout"), "{what}: {e}");
        assert!(took <= 1.01, "{what} took {took} timeouts");
    }
}

/// The log check under `create_if_missing = false` ran on the store before
/// the timeout wrapped it: an open of an existing log whose listing hung
/// waited forever even with `request_timeout` set.
#[tokio::test(start_paused = true)]
async fn the_log_check_of_an_open_has_the_deadline() {
    let store = Hanging::default();
    written(&store, Config::default())
        .await
        .stop()
        .await
        .unwrap();
    store.hang(LIST);
    let config = Config {
        create_if_missing: false,
        request_timeout: Some(Duration::from_secs(1)),
        ..Config::default()
    };
    let (result, _) = timed(
        "Wal::open's log check",
        Wal::open(store.storage(), PREFIX, config),
    )
    .await;
    assert!(result.unwrap_err().is_retryable());
}

#[tokio::test(start_paused = true)]
async fn a_reader_open_on_a_store_that_never_answers_fails() {
    let store = Hanging::default();
    written(&store, Config::default())
        .await
        .stop()
        .await
        .unwrap();
    store.hang(ALL);
    let (result, took) = timed(
        "WalReader::open",
        WalReader::open(store.storage(), PREFIX, Config::default()),
    )
    .await;
    assert!(result.unwrap_err().is_retryable());
    assert!(took <= 1.01, "{took}");
}

#[tokio::test(start_paused = true)]
async fn a_read_on_a_store_that_stops_answering_fails() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    store.hang(ALL);
    let mut entries = Box::pin(wal.read(1, 0));
    let (item, took) = timed("Wal::read", entries.next()).await;
    assert!(item.unwrap().unwrap_err().is_retryable());
    assert!(took <= 2.01, "{took}");
}

#[tokio::test(start_paused = true)]
async fn a_replay_on_a_store_that_stops_answering_fails() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    store.hang(ALL);
    let mut entries = Box::pin(wal.replay([(1, 0), (2, 0)]));
    let (item, took) = timed("Wal::replay", entries.next()).await;
    assert!(item.unwrap().unwrap_err().is_retryable());
    assert!(took <= 2.01, "{took}");
}

/// A durable append's create does not answer: it fails with a retryable
/// error once its key is given up (the create and its read-back end at the
/// timeout, then those of its void: four timeouts). A stop then repeats the
/// void `stop_attempts` times (a create and a read-back each) and gives up
/// the key, to be settled by the next opener; it lost nothing acknowledged
/// (the append was answered with an error), so it answers `Ok`.
#[tokio::test(start_paused = true)]
async fn a_durable_append_and_the_stop_after_it_end() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    store.hang(ALL);
    let (result, took) = timed("a durable append", wal.append(vec![(1, b("x"))])).await;
    let e = result.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(took <= 4.01, "{took}");
    let (result, took) = timed("stop after it", wal.stop()).await;
    result.unwrap();
    assert!(took <= 10.1, "{took}");
}

/// `e` is the retryable `Failing`, answered within `max_unpersisted_age`
/// of the store's failing (and a few timeouts `T`).
fn failed_after_the_age(e: Error, took: f64, config: &Config) {
    assert!(
        matches!(e, Error::Failing { .. }) && e.is_retryable(),
        "{e}"
    );
    let bound = 3.0 + config.max_unpersisted_age.as_secs_f64() / T.as_secs_f64();
    assert!(took <= bound, "{took}");
}

/// Enqueued: the append is admitted at once; its barrier answers the
/// retryable `Failing` once the store has failed for `max_unpersisted_age`.
#[tokio::test(start_paused = true)]
async fn an_enqueued_append_and_its_barrier_end() {
    let store = Hanging::default();
    let config = Config {
        ack_mode: AckMode::Enqueued,
        ..Config::default()
    };
    let wal = written(&store, config.clone()).await;
    store.hang(ALL);
    let (result, took) = timed("an enqueued append", wal.append(vec![(1, b("x"))])).await;
    let ids = result.unwrap();
    assert!(took < 0.01, "{took}");
    let (result, took) = timed("wait_durable", wal.wait_durable(1, ids[0])).await;
    failed_after_the_age(result.unwrap_err(), took, &config);
    // The admitted entry was never made durable: the stop reports it.
    let (result, took) = timed("stop after it", wal.stop()).await;
    assert!(
        matches!(result, Err(Error::Lost { entries: 1, .. })),
        "{result:?}"
    );
    assert!(took <= 10.1, "{took}");
}

/// Enqueued, the backlog full: an append held back behind creates that
/// never answer is refused with the retryable `Failing` once the store has
/// failed for `max_unpersisted_age`, as one arriving then would be (the
/// model test, seed 166346635387990, found it waiting out the outage).
#[tokio::test(start_paused = true)]
async fn an_append_held_back_by_a_full_backlog_ends_when_the_store_fails() {
    let store = Hanging::default();
    let config = Config {
        ack_mode: AckMode::Enqueued,
        max_batch_bytes: 2048,
        max_unpersisted_bytes: 4096,
        ..Config::default()
    };
    let wal = written(&store, config.clone()).await;
    store.hang(ALL);
    let big = Bytes::from(vec![7u8; 2000]);
    // Past the bound: the first three are admitted (the third crosses it).
    for _ in 0..3 {
        let (result, took) = timed("an append", wal.append(vec![(1, big.clone())])).await;
        result.unwrap();
        assert!(took < 0.01, "{took}");
    }
    let (result, took) = timed("a held-back append", wal.append(vec![(1, big)])).await;
    failed_after_the_age(result.unwrap_err(), took, &config);
}

#[tokio::test(start_paused = true)]
async fn a_flush_on_a_store_that_stops_answering_fails() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    store.hang(ALL);
    // A mark to carry: the flush must create an object.
    wal.obsolete(2, wal.latest_entry_id(2)).await.unwrap();
    let (result, took) = timed("flush", wal.flush()).await;
    assert!(result.unwrap_err().is_retryable());
    assert!(took <= 4.01, "{took}");
}

#[tokio::test(start_paused = true)]
async fn a_release_on_a_store_that_stops_answering_fails() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    store.hang(ALL);
    let (result, took) = timed("release_region", wal.release_region(2)).await;
    assert!(result.unwrap_err().is_retryable());
    assert!(took <= 4.01, "{took}");
}

/// `obsolete` makes no request (its mark rides with the next object), so
/// it answers at once. The collection it frees then runs into a store
/// whose deletes never answer: a pass of 21 deletes, 4 at a time, would
/// hold a stop for 6 request timeouts; the stop abandons it after one.
#[tokio::test(start_paused = true)]
async fn obsolete_answers_and_stop_abandons_a_collection_that_never_answers() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    for n in 0..20 {
        // One object each: the early-seal budget seals one per interval.
        wal.append(vec![(1, b(&format!("{n}")))]).await.unwrap();
    }
    store.hang(DELETE);
    for region in [1, 2] {
        let (result, took) = timed(
            "obsolete",
            wal.obsolete(region, wal.latest_entry_id(region)),
        )
        .await;
        result.unwrap();
        assert!(took < 0.01, "{took}");
    }
    // The next object carries the boundary that frees the others: a pass
    // lists them and its deletes hang.
    let started = store.started.notified();
    wal.append(vec![(1, b("next")), (2, b("next"))])
        .await
        .unwrap();
    tokio::time::timeout(DEADLINE, started)
        .await
        .expect("no collection pass started");
    assert!(store.hung.load(Ordering::SeqCst) >= 1);
    let (result, took) = timed("stop with a pass in flight", wal.stop()).await;
    result.unwrap();
    assert!((0.99..=1.01).contains(&took), "{took}");
    // What it did not delete is still there, for the next writer.
    let objects = store.inner.list("t/objects/").await.unwrap();
    assert!(objects.len() > 20, "{}", objects.len());
}

#[tokio::test(start_paused = true)]
async fn a_follower_of_a_store_that_stops_answering_ends() {
    let store = Hanging::default();
    let wal = written(&store, Config::default()).await;
    let reader = WalReader::open(store.storage(), PREFIX, Config::default())
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    let (first, _) = timed("the follower's first entry", follower.next()).await;
    assert_eq!(&first.unwrap().unwrap().data[..], b"one");
    store.hang(ALL);
    let (item, took) = timed("Follower::next", follower.next()).await;
    let e = item.unwrap().unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains("kept failing"), "{e}");
    assert!(took <= 2.2, "{took}");
    let (end, _) = timed("the follower's end", follower.next()).await;
    assert!(end.is_none());
    drop(wal);
}

/// The blocking handle opens through `Wal::open` on a runtime of its own,
/// a multi-thread one, where time cannot be paused: real time, with a
/// short `request_timeout`, and a deadline on the wait.
#[test]
fn a_blocking_open_on_a_store_that_never_answers_fails() {
    let store = Hanging::default();
    store.hang(ALL);
    let config = Config {
        request_timeout: Some(Duration::from_millis(200)),
        ..Config::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let storage = store.storage();
    std::thread::spawn(move || {
        let _ = tx.send(objwal::blocking::Wal::open(storage, PREFIX, config).map(|_| ()));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("blocking::Wal::open did not return within 60 s: it hangs");
    let e = result.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(e.to_string().contains("request_timeout"), "{e}");
}

/// A TCP server on loopback that accepts connections and never answers;
/// its address.
#[cfg(any(feature = "opendal", feature = "object_store"))]
fn silent_server() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            // Kept open, never read from nor written to.
            held.push(stream);
        }
    });
    address
}

/// The HTTP clients the storage URLs build (both adapters) end a request
/// that never answers after their `timeout` (60 s by default, 1 s here):
/// the backstop under `request_timeout`, for `"off"` and for a `Storage`
/// used directly. opendal's default client had no overall timeout.
#[cfg(all(feature = "opendal", feature = "object_store"))]
#[tokio::test]
async fn the_adapters_http_clients_end_a_request_that_never_answers() {
    let endpoint = format!("http://{}", silent_server());
    for (adapter, key_id, secret) in [
        ("object_store", "aws_access_key_id", "aws_secret_access_key"),
        ("opendal", "access_key_id", "secret_access_key"),
    ] {
        let url =
            format!("s3://bucket/root?adapter={adapter}&endpoint={endpoint}&region=us-east-1");
        let storage =
            Storage::from_url_opts(&url, [(key_id, "k"), (secret, "s"), ("timeout", "1s")])
                .unwrap();
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(60), storage.read("k", 0..1))
            .await
            .unwrap_or_else(|_| panic!("{adapter}: the read did not end within 60 s"));
        let e = result.unwrap_err();
        assert!(e.is_transient(), "{adapter}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{adapter}: ended after {:?}, not at its 1 s timeout",
            started.elapsed()
        );
    }
}
