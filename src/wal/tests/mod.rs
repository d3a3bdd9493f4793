//! Tests of the log store that need its internals: the failure matrix (one
//! row of which plants a catalog the actor must refuse) and recovery.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

use crate::storage::fault::FaultyStorage;
use crate::storage::{Created, MemoryStorage, ObjectMeta, ObjectStorage, StorageError};
use crate::{Config, Entry, EntryId, Error, RegionId, Storage, Wal};

mod attack;
mod collect;
mod features4;
mod fencing;
mod fencing_model;
mod hardening;
mod hedging;
mod lifecycle;
mod matrix;
mod matrix_enqueued;
mod model_found;
mod pinning;
mod recovery;
mod release;
mod review3;
mod review4;
mod sealing;

/// A metrics recorder that keeps counters (never reset) per name and prefix
/// label, so parallel tests read only their own store's deltas.
#[derive(Default)]
struct TestRecorder {
    slots: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

fn slot_name(key: &Key) -> String {
    let prefix = key
        .labels()
        .find(|l| l.key() == "prefix")
        .map(|l| l.value().to_owned())
        .unwrap_or_default();
    format!("{}|{prefix}", key.name())
}

impl TestRecorder {
    fn slot(&self, name: String) -> Arc<AtomicU64> {
        let mut slots = self.slots.lock().unwrap();
        slots.entry(name).or_default().clone()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(slot_name(key)))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.slot(slot_name(key)))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn recorder() -> &'static TestRecorder {
    static RECORDER: OnceLock<&'static TestRecorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static TestRecorder = Box::leak(Box::default());
        // Another test binary may not share this process; ignore a second install.
        let _ = metrics::set_global_recorder(recorder);
        recorder
    })
}

/// The value of counter `name` of the store under `prefix`.
pub(crate) fn counter(name: &str, prefix: &str) -> u64 {
    recorder()
        .slot(format!("{name}|{prefix}"))
        .load(Ordering::SeqCst)
}

/// A store under test: a fault wrapper around memory, a unique prefix, and
/// the counters read as deltas from when it was made.
pub(crate) struct Bench {
    pub(crate) faulty: FaultyStorage,
    pub(crate) storage: Storage,
    pub(crate) prefix: String,
    pub(crate) config: Config,
}

impl Bench {
    pub(crate) fn new(prefix: &str, config: Config) -> Self {
        recorder();
        let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
        Bench {
            storage: faulty.storage(),
            faulty,
            prefix: prefix.to_owned(),
            config,
        }
    }

    pub(crate) fn on(storage: Storage, prefix: &str, config: Config) -> Self {
        recorder();
        let faulty = FaultyStorage::new(storage);
        Bench {
            storage: faulty.storage(),
            faulty,
            prefix: prefix.to_owned(),
            config,
        }
    }

    pub(crate) async fn open(&self) -> Wal {
        Wal::open(self.storage.clone(), &self.prefix, self.config.clone())
            .await
            .unwrap()
    }

    pub(crate) async fn try_open(&self) -> Result<Wal, Error> {
        Wal::open(self.storage.clone(), &self.prefix, self.config.clone()).await
    }

    pub(crate) fn counter(&self, name: &str) -> u64 {
        counter(name, &self.prefix)
    }

    pub(crate) fn key(&self, sequence: u64) -> String {
        format!("{}/objects/{sequence:020}.wal", self.prefix)
    }

    /// The sequences present in storage.
    pub(crate) async fn sequences(&self) -> Vec<u64> {
        let listed = self
            .faulty
            .inner()
            .list(&format!("{}/objects/", self.prefix))
            .await
            .unwrap();
        listed
            .iter()
            .filter_map(|m| m.key.rsplit('/').next()?.strip_suffix(".wal")?.parse().ok())
            .collect()
    }

    /// The sequence of the first data batch of a store just opened: the
    /// key after its start object, the highest object present.
    pub(crate) async fn first_data_sequence(&self) -> u64 {
        let start = self.sequences().await.into_iter().max().unwrap_or(0);
        start + 1
    }

    /// Waits, by yielding (never sleeping), until `key` exists in storage.
    pub(crate) async fn until_present(&self, key: &str) {
        for _ in 0..10_000 {
            if self.faulty.inner().read(key, 0..1).await.is_ok() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{key} never appeared");
    }
}

/// How long any wait in a test may take before the test fails: far above
/// what a healthy run needs on a loaded machine, far below a CI timeout.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// `fut`, or a panic naming the caller's line when it is not done within
/// [`DEADLINE`]: a wait on a condition that never comes fails loudly
/// instead of hanging. Under paused time the deadline is virtual, so a wait
/// nothing can finish fails at once.
#[track_caller]
pub(crate) fn within<F: std::future::Future>(
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    let at = std::panic::Location::caller();
    async move {
        match tokio::time::timeout(DEADLINE, fut).await {
            Ok(out) => out,
            Err(_) => panic!("the wait at {at} did not finish within {DEADLINE:?}"),
        }
    }
}

/// One row of a failure matrix: its name and its run.
pub(crate) type Row = (
    &'static str,
    fn() -> futures::future::BoxFuture<'static, ()>,
);

/// Runs a failure matrix after checking it holds exactly the required rows
/// (so a row cannot go missing unnoticed).
pub(crate) async fn run_matrix(table: Vec<Row>, required: &[&str]) {
    let names: std::collections::BTreeSet<_> = table.iter().map(|(name, _)| *name).collect();
    let required: std::collections::BTreeSet<_> = required.iter().copied().collect();
    assert_eq!(
        names, required,
        "the matrix must hold exactly the required rows"
    );
    for (name, row) in table {
        tracing::info!(row = name, "failure matrix row");
        row().await;
    }
}

/// Enqueued acknowledgement with an age bound that never stalls a test.
pub(crate) fn enqueued() -> Config {
    Config {
        ack_mode: crate::config::AckMode::Enqueued,
        max_unpersisted_age: Duration::from_secs(3600),
        ..config()
    }
}

/// `config` with an hour's flush interval and no early seals: nothing is
/// sealed until a test asks (a release, a stop, `flush`, a size bound).
pub(crate) fn slow(config: Config) -> Config {
    Config {
        flush_interval: Duration::from_secs(3600),
        max_unpersisted_age: Duration::from_secs(7200),
        early_seals: crate::EarlySeals::Off,
        ..config
    }
}

/// A test config: a short flush interval.
pub(crate) fn config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        ..Config::default()
    }
}

pub(crate) fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub(crate) async fn try_read(
    wal: &Wal,
    region: RegionId,
    from: EntryId,
) -> Result<Vec<Entry>, Error> {
    let mut stream = Box::pin(wal.read(region, from));
    let mut out = Vec::new();
    while let Some(entry) = stream.next().await {
        out.push(entry?);
    }
    Ok(out)
}

/// Lets the held creates of an open (its walk's settle markers, its start
/// object) land one by one until `opening` returns its store.
pub(crate) async fn finish_open(
    faults: &FaultyStorage,
    opening: &mut tokio::task::JoinHandle<Result<Wal, Error>>,
) -> Wal {
    within(async {
        loop {
            let start = faults.held().remove(0);
            assert!(faults.release(&start));
            tokio::select! {
                opened = &mut *opening => break opened.unwrap().unwrap(),
                () = faults.wait_held(1) => {}
            }
        }
    })
    .await
}

/// The ids of `region` a fresh reader of `prefix` replays, in order.
pub(crate) async fn replays(storage: &Storage, prefix: &str, region: RegionId) -> Vec<EntryId> {
    let reader = crate::WalReader::open(storage.clone(), prefix, config())
        .await
        .unwrap();
    let mut stream = Box::pin(reader.read(region, 0));
    let mut ids = Vec::new();
    while let Some(entry) = stream.next().await {
        ids.push(entry.unwrap().id);
    }
    ids
}

pub(crate) async fn read(wal: &Wal, region: RegionId) -> Vec<String> {
    try_read(wal, region, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .collect()
}

/// Creates twice: the first create lands, the second answers (as an SDK's
/// retry after a lost response would).
#[derive(Debug)]
pub(crate) struct RepeatCreate(pub(crate) Storage);

#[async_trait::async_trait]
impl ObjectStorage for RepeatCreate {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.0.create(key, data.clone()).await?;
        self.0.create(key, data).await
    }
    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.0.read(key, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.0.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.0.delete(key).await
    }
}

/// Fails the next `n` reads whose range covers `offset` with a transient
/// error (to fail a footer fetch but not the tail window before it).
#[derive(Debug)]
pub(crate) struct FailReadsAt {
    pub(crate) inner: Storage,
    pub(crate) offset: AtomicU64,
    pub(crate) remaining: AtomicUsize,
}

#[async_trait::async_trait]
impl ObjectStorage for FailReadsAt {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }
    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        if range.contains(&self.offset.load(Ordering::SeqCst))
            && self
                .remaining
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(StorageError::transient("injected footer fetch failure").with_key(key));
        }
        self.inner.read(key, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

/// Holds the first read of `key` until `open()` is called, and tells when
/// that read arrived: a read made to wait at an exact point.
#[derive(Debug)]
pub(crate) struct GateReads {
    pub(crate) inner: Storage,
    pub(crate) key: String,
    pub(crate) arrived: tokio::sync::Notify,
    pub(crate) gate: tokio::sync::Semaphore,
    pub(crate) held: std::sync::atomic::AtomicBool,
}

impl GateReads {
    pub(crate) fn new(inner: Storage, key: String) -> Self {
        GateReads {
            inner,
            key,
            arrived: tokio::sync::Notify::new(),
            gate: tokio::sync::Semaphore::new(0),
            held: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[async_trait::async_trait]
impl ObjectStorage for GateReads {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }
    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        if key == self.key && !self.held.swap(true, Ordering::SeqCst) {
            self.arrived.notify_one();
            let _permit = self.gate.acquire().await;
        }
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
#[should_panic(expected = "did not finish within")]
async fn a_wait_that_never_ends_fails_at_its_deadline() {
    within(std::future::pending::<()>()).await;
}
