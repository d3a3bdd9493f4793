//! The storage conformance suite: one set of checks, run against every
//! backend (memory, file, opendal memory and fs, object_store in-memory and
//! local, and S3 through both adapters against a real S3-protocol server).
//!
//! S3 cases use the server of `OBJWAL_S3_ENDPOINT`, or the one the harness
//! starts ([`crate::common::s3_endpoint`]), bucket `objwal-test`; a case
//! that cannot get a server fails. Every S3 case works under its own unique
//! key prefix.
#![allow(
    clippy::print_stderr,
    reason = "a case reports what it measured on stderr"
)]

use bytes::Bytes;
use objwal::storage::{FileStorage, MemoryStorage, Rooted, StorageErrorKind};
use objwal::{Created, ObjectMeta, ObjectStorage, Storage};

/// A store under test, with whatever must live as long as it.
pub struct Backend {
    pub storage: Storage,
    _dir: Option<tempfile::TempDir>,
}

impl Backend {
    fn new(storage: Storage) -> Option<Backend> {
        Some(Backend {
            storage,
            _dir: None,
        })
    }

    fn with_dir(dir: tempfile::TempDir, storage: Storage) -> Option<Backend> {
        Some(Backend {
            storage,
            _dir: Some(dir),
        })
    }
}

pub use crate::common::S3_BUCKET;

/// A key prefix no other test (or earlier run against the same server) uses.
pub use crate::common::unique_root;

fn rooted(tag: &str, storage: Storage) -> Storage {
    Storage::new(Rooted::new(&unique_root(tag), storage).unwrap())
}

mod make {
    use super::*;

    pub async fn memory(_: &str) -> Option<Backend> {
        Backend::new(Storage::new(MemoryStorage::new()))
    }

    #[cfg(feature = "testing")]
    pub async fn faulty_memory(_: &str) -> Option<Backend> {
        // The fault wrapper with no faults must be invisible.
        let f = objwal::storage::fault::FaultyStorage::new(Storage::new(MemoryStorage::new()));
        Backend::new(f.storage())
    }

    pub async fn file(_: &str) -> Option<Backend> {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStorage::open(dir.path().join("root")).unwrap();
        Backend::with_dir(dir, Storage::new(s))
    }

    /// The directory backend where `O_TMPFILE` is missing: named temporary
    /// files (the default above uses unnamed ones on ext4 and XFS).
    #[cfg(feature = "testing")]
    pub async fn file_named_temps(_: &str) -> Option<Backend> {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStorage::open(dir.path().join("root")).unwrap();
        s.use_named_temps();
        Backend::with_dir(dir, Storage::new(s))
    }

    #[cfg(feature = "opendal")]
    pub async fn opendal_memory(_: &str) -> Option<Backend> {
        let op = opendal::Operator::new(opendal::services::Memory::default()).unwrap();
        Backend::new(Storage::from_opendal(op))
    }

    /// opendal fs without `atomic_write_dir`: it opens the final name with
    /// `O_EXCL` and writes in place, so creates ARE exclusive (the suite's
    /// checks pass) but NOT atomic: a racer or a crash can see a partial
    /// object. See `opendal_fs_atomic_write_dir_is_not_exclusive` for the
    /// other mode.
    #[cfg(feature = "opendal")]
    pub async fn opendal_fs(_: &str) -> Option<Backend> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap().to_owned();
        let op = opendal::Operator::new(opendal::services::Fs::default().root(&root)).unwrap();
        Backend::with_dir(dir, Storage::from_opendal(op))
    }

    #[cfg(feature = "object_store")]
    pub async fn object_store_memory(_: &str) -> Option<Backend> {
        let store = object_store::memory::InMemory::new();
        Backend::new(Storage::from_object_store(std::sync::Arc::new(store)))
    }

    #[cfg(feature = "object_store")]
    pub async fn object_store_local(_: &str) -> Option<Backend> {
        let dir = tempfile::tempdir().unwrap();
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        Backend::with_dir(dir, Storage::from_object_store(std::sync::Arc::new(store)))
    }

    #[cfg(feature = "opendal")]
    pub fn opendal_s3_operator(endpoint: &str) -> opendal::Operator {
        objwal::storage::install_crypto_provider();
        let b = opendal::services::S3::default()
            .bucket(S3_BUCKET)
            .endpoint(endpoint)
            .region("us-east-1")
            .access_key_id("objwal-test")
            .secret_access_key("objwal-test")
            .disable_config_load()
            .disable_ec2_metadata();
        opendal::Operator::new(b).unwrap()
    }

    #[cfg(feature = "opendal")]
    pub async fn opendal_s3(tag: &str) -> Option<Backend> {
        let endpoint = crate::common::s3_endpoint();
        let s = Storage::from_opendal(opendal_s3_operator(&endpoint));
        Backend::new(rooted(tag, s))
    }

    #[cfg(feature = "object_store")]
    pub async fn object_store_s3(tag: &str) -> Option<Backend> {
        let endpoint = crate::common::s3_endpoint();
        objwal::storage::install_crypto_provider();
        let store = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(S3_BUCKET)
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("objwal-test")
            .with_secret_access_key("objwal-test")
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            .build()
            .unwrap();
        Backend::new(rooted(
            tag,
            Storage::from_object_store(std::sync::Arc::new(store)),
        ))
    }
}

/// The checks every backend passes.
mod checks {
    use super::*;

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    async fn read_all(s: &Storage, key: &str) -> Bytes {
        let size = s
            .list(key)
            .await
            .unwrap()
            .iter()
            .find(|m| m.key == key)
            .unwrap()
            .size;
        s.read(key, 0..size).await.unwrap()
    }

    pub async fn create_twice_keeps_the_first_bytes(s: Storage) {
        assert_eq!(
            s.create("p/objects/1", b("first")).await.unwrap(),
            Created::New
        );
        let again = s.create("p/objects/1", b("second, longer")).await.unwrap();
        assert_eq!(again, Created::AlreadyExists);
        assert_eq!(read_all(&s, "p/objects/1").await, b("first"));
        // The same bytes again is still AlreadyExists (a retried create).
        assert_eq!(
            s.create("p/objects/1", b("first")).await.unwrap(),
            Created::AlreadyExists
        );
    }

    pub async fn concurrent_creates_have_one_winner(s: Storage) {
        let tasks: Vec<_> = (0..16u8)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move {
                    let data = Bytes::from(vec![i; 64 + usize::from(i)]);
                    (i, s.create("p/objects/race", data).await)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            let (i, r) = t.await.unwrap();
            match r {
                Ok(Created::New) => winners.push(i),
                Ok(Created::AlreadyExists) => {}
                Err(e) => panic!("create {i} failed: {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "winners: {winners:?}");
        let w = winners[0];
        assert_eq!(
            read_all(&s, "p/objects/race").await,
            Bytes::from(vec![w; 64 + usize::from(w)])
        );
    }

    pub async fn ranged_reads_check_both_edges(s: Storage) {
        s.create("p/r", b("0123456789")).await.unwrap();
        assert_eq!(s.read("p/r", 0..10).await.unwrap(), b("0123456789"));
        assert_eq!(s.read("p/r", 0..1).await.unwrap(), b("0"));
        assert_eq!(s.read("p/r", 9..10).await.unwrap(), b("9"));
        assert_eq!(s.read("p/r", 3..7).await.unwrap(), b("3456"));
        assert_eq!(s.read("p/r", 10..10).await.unwrap(), Bytes::new());
        for past in [0..11, 9..11, 10..11, 11..12, 20..30] {
            let e = s.read("p/r", past.clone()).await.unwrap_err();
            assert!(!e.is_transient() && !e.is_not_found(), "{past:?}: {e}");
        }
        let e = s.read("p/missing", 0..1).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
    }

    /// A follower's poll (issue 22): the end of an object whose size the
    /// caller does not know, and the size, in one read; a missing key is
    /// not-found.
    pub async fn suffix_reads_learn_the_size(s: Storage) {
        s.create("p/s", b("0123456789")).await.unwrap();
        let suffix = s.read_suffix("p/s", 4).await.unwrap();
        assert_eq!((suffix.data, suffix.size), (b("6789"), 10));
        let whole = s.read_suffix("p/s", 10).await.unwrap();
        assert_eq!((whole.data, whole.size), (b("0123456789"), 10));
        let longer = s.read_suffix("p/s", 4096).await.unwrap();
        assert_eq!((longer.data, longer.size), (b("0123456789"), 10));
        let e = s.read_suffix("p/missing", 64).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = s.read_suffix("p/s", 0).await.unwrap_err();
        assert!(!e.is_transient() && !e.is_not_found(), "{e}");
    }

    pub async fn listings_are_ordered_isolated_and_sized(s: Storage) {
        assert!(s.list("p/").await.unwrap().is_empty());
        for (k, v) in [
            ("p/a/3", "ccc"),
            ("p/a10/x", "x"),
            ("p/a/1", "a"),
            ("p/b/1", "bbbbbbbb"),
            ("p/a/2", ""),
            ("q/a/1", "other"),
        ] {
            assert_eq!(s.create(k, b(v)).await.unwrap(), Created::New, "{k}");
        }
        let meta = |k: &str, n: u64| ObjectMeta {
            key: k.into(),
            size: n,
        };
        assert_eq!(
            s.list("p/a/").await.unwrap(),
            vec![meta("p/a/1", 1), meta("p/a/2", 0), meta("p/a/3", 3)]
        );
        let keys = |v: Vec<ObjectMeta>| v.into_iter().map(|m| m.key).collect::<Vec<_>>();
        assert_eq!(
            keys(s.list("p/a").await.unwrap()),
            ["p/a/1", "p/a/2", "p/a/3", "p/a10/x"]
        );
        assert_eq!(
            keys(s.list("p/").await.unwrap()),
            ["p/a/1", "p/a/2", "p/a/3", "p/a10/x", "p/b/1"]
        );
        assert_eq!(keys(s.list("").await.unwrap()).len(), 6);
        assert!(s.list("p/c/").await.unwrap().is_empty());
        assert!(s.list("p/a/1/").await.unwrap().is_empty());
    }

    pub async fn deletes_are_idempotent(s: Storage) {
        s.delete("p/never").await.unwrap();
        s.create("p/k", b("v")).await.unwrap();
        s.delete("p/k").await.unwrap();
        s.delete("p/k").await.unwrap();
        assert!(s.read("p/k", 0..1).await.unwrap_err().is_not_found());
        assert!(s.list("p/").await.unwrap().is_empty());
        // A deleted key can be created again.
        assert_eq!(s.create("p/k", b("w")).await.unwrap(), Created::New);
    }

    pub async fn long_and_unusual_keys_work(s: Storage) {
        // 900 bytes in parts of at most 200 (a file name is at most 255).
        let part = |c: char| std::iter::repeat_n(c, 199).collect::<String>();
        let long = format!(
            "p/{}/{}/{}/{}/{}",
            part('a'),
            part('b'),
            part('c'),
            part('d'),
            "e".repeat(98)
        );
        assert_eq!(long.len(), 900);
        let unusual = [
            long.as_str(),
            "p/with space/a b",
            "p/unicode/é日本🙂",
            "p/plus+sign/1+1",
            "p/equals=/k=v",
            "p/mixed/a-b_c.d~e,f;g@h",
        ];
        for (i, k) in unusual.iter().enumerate() {
            let data = Bytes::from(format!("value {i}"));
            assert_eq!(
                s.create(k, data.clone()).await.unwrap(),
                Created::New,
                "{k}"
            );
            assert_eq!(
                s.create(k, b("x")).await.unwrap(),
                Created::AlreadyExists,
                "{k}"
            );
            assert_eq!(s.read(k, 0..data.len() as u64).await.unwrap(), data, "{k}");
        }
        let mut want: Vec<String> = unusual.iter().map(|k| (*k).to_owned()).collect();
        want.sort();
        let got: Vec<String> = s
            .list("p/")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(got, want);
        for k in unusual {
            s.delete(k).await.unwrap();
        }
        assert!(s.list("p/").await.unwrap().is_empty());
    }

    /// The check `Wal::open` and `objwal verify` make (issue 29, item 8):
    /// a second create of a key with other bytes answers "already exists";
    /// the scratch key is deleted after.
    pub async fn the_create_if_absent_check_passes(s: Storage) {
        use objwal::storage::create_check::{check_scratch, Verdict};
        let verdict = check_scratch(&s, "p/create-check").await;
        assert!(matches!(verdict, Verdict::Honoured), "{verdict:?}");
        assert!(s.list("p/").await.unwrap().is_empty());
    }

    /// Errors must say which kind they are (used by S3 cases: a missing
    /// bucket is not retryable).
    pub fn is_permanent(kind: StorageErrorKind) -> bool {
        kind == StorageErrorKind::Permanent
    }
}

macro_rules! conformance {
    ($(#[$attr:meta])* $backend:ident) => {
        $(#[$attr])*
        mod $backend {
            use super::*;

            macro_rules! case {
                ($check:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $check() {
                        let tag = concat!(stringify!($backend), "/", stringify!($check));
                        if let Some(b) = make::$backend(tag).await {
                            checks::$check(b.storage.clone()).await;
                        }
                    }
                };
            }

            case!(create_twice_keeps_the_first_bytes);
            case!(concurrent_creates_have_one_winner);
            case!(ranged_reads_check_both_edges);
            case!(suffix_reads_learn_the_size);
            case!(listings_are_ordered_isolated_and_sized);
            case!(deletes_are_idempotent);
            case!(long_and_unusual_keys_work);
            case!(the_create_if_absent_check_passes);
        }
    };
}

conformance!(memory);
conformance!(
    #[cfg(feature = "testing")]
    faulty_memory
);
conformance!(file);
conformance!(
    #[cfg(feature = "testing")]
    file_named_temps
);
conformance!(
    #[cfg(feature = "opendal")]
    opendal_memory
);
conformance!(
    #[cfg(feature = "opendal")]
    opendal_fs
);
conformance!(
    #[cfg(feature = "object_store")]
    object_store_memory
);
conformance!(
    #[cfg(feature = "object_store")]
    object_store_local
);
conformance!(
    #[cfg(feature = "opendal")]
    opendal_s3
);
conformance!(
    #[cfg(feature = "object_store")]
    object_store_s3
);

/// opendal fs WITH `atomic_write_dir` checks for the key, then renames a
/// temporary file over it: sequential creates see AlreadyExists, racing ones
/// may all "win" (the last rename's bytes stay). What the suite asserts
/// instead: the object always holds one writer's complete bytes.
#[cfg(feature = "opendal")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opendal_fs_atomic_write_dir_is_not_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let tmp = dir.path().join("tmp");
    let b = opendal::services::Fs::default()
        .root(root.to_str().unwrap())
        .atomic_write_dir(tmp.to_str().unwrap());
    let s = Storage::from_opendal(opendal::Operator::new(b).unwrap());
    assert_eq!(
        s.create("k", Bytes::from_static(b"a")).await.unwrap(),
        Created::New
    );
    assert_eq!(
        s.create("k", Bytes::from_static(b"b")).await.unwrap(),
        Created::AlreadyExists
    );
    let tasks: Vec<_> = (0..16u8)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { s.create("race", Bytes::from(vec![i; 4096])).await.unwrap() })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if t.await.unwrap() == Created::New {
            winners += 1;
        }
    }
    eprintln!("opendal fs with atomic_write_dir: {winners} of 16 racing creates returned New");
    assert!(winners >= 1);
    let data = s.read("race", 0..4096).await.unwrap();
    assert!(
        data.iter().all(|b| *b == data[0]),
        "a torn object under its final name"
    );
}

/// A missing bucket is a permanent error through both adapters, and
/// `from_url` reaches the server with the standard AWS variables.
#[cfg(any(feature = "opendal", feature = "object_store"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_from_url_and_missing_bucket() {
    let endpoint = crate::common::s3_endpoint();
    // Read by from_url; every S3 client in this binary uses the same dummies.
    std::env::set_var("AWS_ACCESS_KEY_ID", "objwal-test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "objwal-test");
    let root = unique_root("from_url");
    let s = Storage::from_url(&format!(
        "s3://{S3_BUCKET}/{root}?endpoint={endpoint}&region=us-east-1"
    ))
    .unwrap();
    assert_eq!(
        s.create("k", Bytes::from_static(b"v")).await.unwrap(),
        Created::New
    );
    assert_eq!(
        s.create("k", Bytes::from_static(b"w")).await.unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(
        s.list("").await.unwrap(),
        vec![ObjectMeta {
            key: "k".into(),
            size: 1
        }]
    );
    let missing =
        Storage::from_url(&format!("s3://no-such-bucket-objwal?endpoint={endpoint}")).unwrap();
    let e = missing
        .create("k", Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert!(checks::is_permanent(e.kind()), "{e}");
    #[cfg(feature = "opendal")]
    {
        objwal::storage::install_crypto_provider();
        let b = opendal::services::S3::default()
            .bucket("no-such-bucket-objwal")
            .endpoint(&endpoint)
            .region("us-east-1")
            .access_key_id("objwal-test")
            .secret_access_key("objwal-test")
            .disable_config_load()
            .disable_ec2_metadata();
        let s = Storage::from_opendal(opendal::Operator::new(b).unwrap());
        let e = s.create("k", Bytes::from_static(b"v")).await.unwrap_err();
        assert!(checks::is_permanent(e.kind()), "{e}");
        let e = s.list("").await.unwrap_err();
        assert!(checks::is_permanent(e.kind()), "{e}");
    }
}

/// Writes `key` to the S3 test server with a plain, unsigned HTTP PUT: any
/// S3 key, even one with an empty or `.` part that neither adapter can
/// write (the test server, moto, does not check signatures).
#[cfg(any(feature = "opendal", feature = "object_store"))]
fn put_raw(endpoint: &str, key: &str, body: &[u8]) {
    use std::io::{Read, Write};
    let host = endpoint
        .strip_prefix("http://")
        .expect("an http:// endpoint")
        .trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(crate::common::DEADLINE))
        .unwrap();
    let head = format!(
        "PUT /{S3_BUCKET}/{key} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "PUT {key}: {response}"
    );
}

/// Issue 18, item 12: through `adapter=object_store`, one key with an empty
/// or `.` part under the prefix (legal in S3, written by another tool) made
/// every listing fail for good (object_store parses each listed key), so
/// `Wal::open` and `WalReader::open` refused the prefix. Both adapters list
/// past such keys, in every listing: fences, objects, quarantine.
#[cfg(all(feature = "opendal", feature = "object_store"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_key_with_an_empty_or_dot_part_does_not_lock_the_log() {
    use objwal::{Config, Wal, WalReader};
    let endpoint = crate::common::s3_endpoint();
    for adapter in ["object_store", "opendal"] {
        let root = unique_root(&format!("stray-{adapter}"));
        let url = format!(
            "s3://{S3_BUCKET}/{root}?endpoint={endpoint}&region=us-east-1&adapter={adapter}"
        );
        let options = [
            ("aws_access_key_id", "objwal-test"),
            ("aws_secret_access_key", "objwal-test"),
        ];
        let storage = Storage::from_url_opts(&url, options).unwrap();
        let wal = Wal::open(storage.clone(), "p", Config::default())
            .await
            .unwrap();
        let one = wal.append(vec![(1, Bytes::from("one"))]).await.unwrap();
        wal.append(vec![(1, Bytes::from("two"))]).await.unwrap();
        wal.stop().await.unwrap();
        let first = storage.list("p/objects/").await.unwrap()[0].key.clone();
        for stray in [
            "p/objects//stray".to_owned(),
            "p/objects/./stray".to_owned(),
            // Between two objects, in the middle of a listing's page.
            format!("{first}/./stray"),
            "p/fences//stray".to_owned(),
            "p/quarantine/./stray".to_owned(),
        ] {
            put_raw(&endpoint, &format!("{root}/{stray}"), b"another tool's");
        }

        let wal = Wal::open(storage.clone(), "p", Config::default())
            .await
            .unwrap_or_else(|e| panic!("{adapter}: {e}"));
        wal.append(vec![(1, Bytes::from("three"))]).await.unwrap();
        wal.obsolete(1, one[0]).await.unwrap();
        wal.stop().await.unwrap();
        let reader = WalReader::open(storage.clone(), "p", Config::default())
            .await
            .unwrap_or_else(|e| panic!("{adapter}: {e}"));
        let mut entries = Box::pin(reader.read(1, 0));
        let mut got = Vec::new();
        while let Some(entry) = futures::StreamExt::next(&mut entries).await {
            got.push(entry.unwrap().data);
        }
        // The stop made the flush mark through "one" durable: hidden.
        assert_eq!(got, ["two", "three"], "{adapter}");
        for listing in ["p/objects/", "p/fences/", "p/quarantine/", ""] {
            let listed = storage.list(listing).await.unwrap();
            assert!(
                listed
                    .iter()
                    .all(|m| !m.key.contains("//") && !m.key.contains("/./")),
                "{adapter} listed a stray under {listing:?}: {listed:?}"
            );
        }
        assert!(storage.list("p/objects/").await.unwrap().len() >= 4);
    }
}
