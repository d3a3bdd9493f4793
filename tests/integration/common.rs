//! Shared helpers of the integration tests.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::FaultyStorage;
use objwal::storage::MemoryStorage;
use objwal::{Config, Entry, EntryId, Error, RegionId, Storage, Wal};

/// A fault wrapper around a fresh in-memory store.
pub fn faulty_memory() -> FaultyStorage {
    FaultyStorage::new(Storage::new(MemoryStorage::new()))
}

/// A config with a short flush interval, for tests.
pub fn test_config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        ..Config::default()
    }
}

/// Opens a store on `storage` under the prefix "t".
pub async fn open(storage: &Storage, config: Config) -> Wal {
    Wal::open(storage.clone(), "t", config).await.unwrap()
}

/// Every entry a read of `region` from `from` yields, failing on an error.
pub async fn read_all(wal: &Wal, region: RegionId, from: EntryId) -> Vec<Entry> {
    try_read_all(wal, region, from).await.unwrap()
}

/// Every entry a read yields, or its first error.
pub async fn try_read_all(wal: &Wal, region: RegionId, from: EntryId) -> Result<Vec<Entry>, Error> {
    let mut stream = Box::pin(wal.read(region, from));
    let mut entries = Vec::new();
    while let Some(entry) = stream.next().await {
        entries.push(entry?);
    }
    Ok(entries)
}

/// The payloads of entries, as strings.
pub fn payloads(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .collect()
}

/// A payload from a string.
pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The S3 bucket every S3 case uses (created by `scripts/s3-test-server`).
pub const S3_BUCKET: &str = "objwal-test";

/// The endpoint of the S3-protocol test server, e.g. `http://127.0.0.1:PORT`.
///
/// `OBJWAL_S3_ENDPOINT` names a server that is already running (bucket
/// `objwal-test`). Without it, the first caller runs `scripts/s3-test-server
/// --exit-with-stdin` (which installs `moto[server]` into `.venv` on first
/// use) and every later caller in this process shares that server. The
/// script's standard input is a pipe whose write end this process keeps
/// open until it exits; the server ends when that pipe closes, so it dies
/// with the test process however the process ends (even SIGKILL), with no
/// exit hook and nothing to clean up.
///
/// Panics with the reason when no server can be had: an S3 case that cannot
/// run fails, it never passes without running.
pub fn s3_endpoint() -> String {
    static SERVER: std::sync::OnceLock<Result<S3Server, String>> = std::sync::OnceLock::new();
    match SERVER.get_or_init(S3Server::get) {
        Ok(server) => server.endpoint.clone(),
        Err(reason) => panic!("no S3-protocol test server: {reason}"),
    }
}

/// The dummy credentials, as environment variables, that
/// `Storage::from_url("s3://...")` (and an `objwal` process) reads; the test
/// server accepts any.
#[allow(dead_code, reason = "the CLI suite passes them to its processes")]
pub fn s3_credentials() -> [(&'static str, &'static str); 2] {
    [
        ("AWS_ACCESS_KEY_ID", "objwal-test"),
        ("AWS_SECRET_ACCESS_KEY", "objwal-test"),
    ]
}

/// A running S3-protocol server and what keeps it alive.
struct S3Server {
    endpoint: String,
    /// The write end of the server's standard input; never written, closed
    /// only when the process exits.
    _lifeline: Option<std::sync::Mutex<std::process::ChildStdin>>,
}

impl S3Server {
    fn get() -> Result<S3Server, String> {
        if let Ok(endpoint) = std::env::var("OBJWAL_S3_ENDPOINT") {
            if !endpoint.is_empty() {
                return Ok(S3Server {
                    endpoint,
                    _lifeline: None,
                });
            }
        }
        let script_path = repo_root().join("scripts/s3-test-server");
        let script = script_path.display();
        let mut child = std::process::Command::new(&script_path)
            .arg("--exit-with-stdin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {script}: {e}"))?;
        let lifeline = child.stdin.take();
        // The script exits once the server answers (its own deadline is
        // ~15 s, plus the first install of moto); the server holds neither
        // of the script's output pipes, so these reads end with the script.
        let output = child
            .wait_with_output()
            .map_err(|e| format!("{script} did not finish: {e}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(format!(
                "{script} failed ({}); it needs python3 with venv and pip, and PyPI for the \
                 first install of moto[server]; its stderr:\n{stderr}",
                output.status
            ));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let endpoint = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export OBJWAL_S3_ENDPOINT="))
            .ok_or_else(|| format!("{script} printed no endpoint: {stdout}\n{stderr}"))?
            .to_owned();
        Ok(S3Server {
            endpoint,
            _lifeline: lifeline.map(std::sync::Mutex::new),
        })
    }
}

/// How long any wait in a test may take before the test fails: far above
/// what a healthy run needs on a loaded machine, far below a CI timeout.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// `fut`, or a panic naming the caller's line when it is not done within
/// [`DEADLINE`]: a wait on a condition that never comes fails loudly
/// instead of hanging. Under paused time the deadline is virtual.
#[track_caller]
pub fn within<F: std::future::Future>(fut: F) -> impl std::future::Future<Output = F::Output> {
    let at = std::panic::Location::caller();
    async move {
        match tokio::time::timeout(DEADLINE, fut).await {
            Ok(out) => out,
            Err(_) => panic!("the wait at {at} did not finish within {DEADLINE:?}"),
        }
    }
}

/// Every item of a stream of entries, or its first error.
pub async fn collect_entries(
    entries: impl futures::Stream<Item = Result<Entry, Error>>,
) -> Result<Vec<Entry>, Error> {
    let mut entries = Box::pin(entries);
    let mut out = Vec::new();
    while let Some(entry) = entries.next().await {
        out.push(entry?);
    }
    Ok(out)
}

/// A storage wrapper for tests: counts the reads of each key (and their
/// bytes), can hold the first read of one key until [`Instrumented::open`]
/// (telling when it arrived), and can refuse creates under a key part once
/// a number of them went through (a node losing its store half-way).
#[derive(Debug)]
pub struct Instrumented {
    inner: Storage,
    reads: std::sync::Mutex<std::collections::BTreeMap<String, (u64, u64)>>,
    gate_key: Option<String>,
    /// Notified when the held read arrives.
    pub arrived: tokio::sync::Notify,
    gate: tokio::sync::Semaphore,
    held: std::sync::atomic::AtomicBool,
    /// Creates of keys containing the part still allowed, when limited.
    creates: std::sync::Mutex<Option<(String, usize)>>,
}

impl Instrumented {
    /// Wraps `inner`, holding the first read of `gate_key` if one is given.
    pub fn wrap(inner: Storage, gate_key: Option<&str>) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Instrumented {
            inner,
            reads: Default::default(),
            gate_key: gate_key.map(str::to_owned),
            arrived: tokio::sync::Notify::new(),
            gate: tokio::sync::Semaphore::new(0),
            held: std::sync::atomic::AtomicBool::new(false),
            creates: Default::default(),
        })
    }

    /// A storage handle whose requests go through the wrapper.
    pub fn storage(self: &std::sync::Arc<Self>) -> Storage {
        Storage::from_arc(self.clone())
    }

    /// Per key read: (reads, bytes), since the last reset.
    pub fn reads(&self) -> std::collections::BTreeMap<String, (u64, u64)> {
        self.reads.lock().unwrap().clone()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        self.reads.lock().unwrap().clear();
    }

    /// Lets the held read go on.
    pub fn open(&self) {
        self.gate.add_permits(1);
    }

    /// Whether `key` is in the wrapped store (asked past the wrapper).
    pub async fn inner_has(&self, key: &str) -> bool {
        use objwal::ObjectStorage as _;
        let listed = self.inner.list(key).await.unwrap();
        listed.iter().any(|m| m.key == key)
    }

    /// Lets `n` more creates of keys containing `part` through, then
    /// refuses every later one with a permanent error.
    pub fn refuse_creates_after(&self, part: &str, n: usize) {
        *self.creates.lock().unwrap() = Some((part.to_owned(), n));
    }

    /// Lets every create through again.
    pub fn allow_creates(&self) {
        *self.creates.lock().unwrap() = None;
    }
}

#[async_trait::async_trait]
impl objwal::ObjectStorage for Instrumented {
    async fn create(
        &self,
        key: &str,
        data: Bytes,
    ) -> Result<objwal::Created, objwal::StorageError> {
        if let Some((part, left)) = self.creates.lock().unwrap().as_mut() {
            if key.contains(part.as_str()) {
                if *left == 0 {
                    return Err(
                        objwal::StorageError::permanent("injected: the store is gone")
                            .with_key(key),
                    );
                }
                *left -= 1;
            }
        }
        self.inner.create(key, data).await
    }
    async fn read(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, objwal::StorageError> {
        use std::sync::atomic::Ordering;
        if self.gate_key.as_deref() == Some(key) && !self.held.swap(true, Ordering::SeqCst) {
            self.arrived.notify_one();
            let _permit = self.gate.acquire().await;
        }
        let bytes = self.inner.read(key, range).await?;
        let mut reads = self.reads.lock().unwrap();
        let slot = reads.entry(key.to_owned()).or_default();
        slot.0 += 1;
        slot.1 += bytes.len() as u64;
        Ok(bytes)
    }
    async fn list(&self, prefix: &str) -> Result<Vec<objwal::ObjectMeta>, objwal::StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), objwal::StorageError> {
        self.inner.delete(key).await
    }
}

/// The repository's root: the library's directory, or the parent of the
/// CLI crate's (this file serves both suites).
pub fn repo_root() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if manifest.join("scripts/s3-test-server").exists() {
        manifest.to_path_buf()
    } else {
        manifest.parent().unwrap_or(manifest).to_path_buf()
    }
}

/// A fresh key prefix per call, so runs never see each other's objects.
pub fn unique_root(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "conformance/{}-{nanos}-{}/{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The sequences of the objects under `<prefix>/objects/`, asked of
/// `storage` directly.
pub async fn listed_objects(storage: &Storage, prefix: &str) -> std::collections::BTreeSet<u64> {
    use objwal::ObjectStorage as _;
    let prefix = objwal::storage::keys::Prefix::new(prefix).unwrap();
    storage
        .list(&prefix.objects_prefix())
        .await
        .unwrap()
        .iter()
        .filter_map(|m| prefix.parse_object_key(&m.key))
        .collect()
}
