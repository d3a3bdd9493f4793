//! Hostile input, one test per case: keys that try to leave the prefix or
//! the file backend's root, objects whose lengths claim terabytes, listings
//! with unexpected names, objects changed or deleted behind the store's
//! back, and a prefix shared with a foreign writer.
//!
//! What every case checks: a clear error (its kind and the key or field it
//! names), nothing outside the prefix (or the root) touched, no panic, and
//! no read or allocation sized by a length the input claims (checked through
//! the fault wrapper's byte counters: a claimed length is never fetched).

use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use objwal::format::{self, MAX_SEQUENCE, TRAILER_LEN};
use objwal::storage::fault::FaultyStorage;
use objwal::storage::keys::Prefix;
use objwal::storage::MemoryStorage;
use objwal::{
    Config, CorruptionPolicy, Created, Error, ObjectMeta, ObjectStorage, Storage, StorageError,
    Wal, WalReader,
};

use crate::common::{b, faulty_memory, read_all, test_config, try_read_all};

const PREFIX: &str = "t";

/// The key of the object of `sequence` under [`PREFIX`].
fn key(sequence: u64) -> String {
    Prefix::new(PREFIX).unwrap().object_key(sequence)
}

/// Writes a short history under [`PREFIX`]: a start object, then one object
/// per batch (one region each); returns the first id of each batch.
async fn history(faulty: &FaultyStorage, batches: &[(u64, &str)]) -> Vec<u64> {
    let wal = Wal::open(faulty.storage(), PREFIX, test_config())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (region, payload) in batches {
        ids.push(wal.append(vec![(*region, b(payload))]).await.unwrap()[0]);
    }
    wal.stop().await.unwrap();
    ids
}

/// Replaces the object at `key` in `store` (behind every wrapper).
async fn replace(store: &Storage, key: &str, bytes: Vec<u8>) {
    store.delete(key).await.unwrap();
    assert_eq!(
        store.create(key, Bytes::from(bytes)).await.unwrap(),
        Created::New
    );
}

/// Every byte of `key` in `store`.
async fn bytes_of(store: &Storage, key: &str) -> Vec<u8> {
    let size = store
        .list(key)
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.key == key)
        .unwrap_or_else(|| panic!("{key} is listed"))
        .size;
    store.read(key, 0..size).await.unwrap().to_vec()
}

/// Writes a history of `batches`, rewrites the object of batch `which` with
/// `edit` behind the store, and zeroes the fault wrapper's counters; returns
/// the object's key and its size.
async fn tampered(
    faulty: &FaultyStorage,
    batches: &[(u64, &str)],
    which: usize,
    edit: impl FnOnce(&mut Vec<u8>),
) -> (String, u64) {
    let ids = history(faulty, batches).await;
    let target = key(format::sequence_of(ids[which]));
    let mut object = bytes_of(faulty.inner(), &target).await;
    edit(&mut object);
    let size = object.len() as u64;
    replace(faulty.inner(), &target, object).await;
    faulty.reset_counts();
    (target, size)
}

/// The error of a read-only open, which must fail.
async fn reader_open_error(storage: Storage, config: Config) -> Error {
    WalReader::open(storage, PREFIX, config)
        .await
        .map(drop)
        .unwrap_err()
}

/// Recomputes the footer CRC (when `footer` is true), the object CRC and
/// the trailer CRC of an object whose footer or trailer a test rewrote.
fn reseal(object: &mut [u8], footer: bool) {
    let n = object.len();
    let t = n - TRAILER_LEN;
    if footer {
        let footer_offset = u64::from_le_bytes(object[t + 40..t + 48].try_into().unwrap());
        let crc = crc32fast::hash(&object[footer_offset as usize..t]);
        object[t + 52..t + 56].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&object[..t]);
    object[t + 56..t + 60].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32fast::hash(&object[t..t + 68]);
    object[t + 68..t + 72].copy_from_slice(&crc.to_le_bytes());
}

/// The decoded footer entries of a whole object.
fn segments(object: &[u8]) -> Vec<format::SegmentIndex> {
    format::decode(object).unwrap();
    match format::decode_tail(object, object.len() as u64).unwrap() {
        format::TailDecode::Complete(tail) => tail.segments,
        other => panic!("a whole object is its own window: {other:?}"),
    }
}

/// The format error of a `Corrupted` error, checking it names `key`.
fn corrupted_at(err: &Error, key: &str) -> format::FormatError {
    match err {
        Error::Corrupted { key: k, source } => {
            assert_eq!(k, key, "the error names the damaged object: {err}");
            source.clone()
        }
        other => panic!("expected a corrupted-object error for {key}, got {other}"),
    }
}

/// Every path under `dir`, relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn prefixes_that_leave_their_place_are_refused_before_any_request() {
    let faulty = faulty_memory();
    let long = "p/".repeat(600);
    let bad = [
        "",
        "..",
        "../sibling",
        "a/../../escape",
        "/etc",
        "a/./b",
        "a//b",
        "a/",
        "a\\..\\b",
        "a\0b",
        "a\nb",
        "a/.objwal-tmp-1-1/b",
        long.trim_end_matches('/'),
    ];
    for prefix in bad {
        for result in [
            Wal::open(faulty.storage(), prefix, test_config())
                .await
                .map(drop),
            WalReader::open(faulty.storage(), prefix, test_config())
                .await
                .map(drop),
        ] {
            let err = result.expect_err(prefix);
            assert!(
                matches!(err, Error::InvalidArgument { .. }) && err.to_string().contains("prefix"),
                "{prefix:?}: {err}"
            );
        }
    }
    assert_eq!(
        faulty.counts(),
        Default::default(),
        "no request reached the store"
    );
}

#[tokio::test]
async fn a_file_store_refuses_keys_that_leave_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("victim"), b"keep me").unwrap();
    let storage = Storage::from_url(&format!("file://{}", root.display())).unwrap();
    let absolute = outside.join("new").display().to_string();
    let hostile = [
        "../outside/victim",
        "../outside/new",
        "a/../../outside/new",
        "./a",
        absolute.as_str(),
        "a\0b",
        "",
        "a//b",
        "x/.objwal-tmp-1-1",
    ];
    for key in hostile {
        let create = storage.create(key, b("x")).await.unwrap_err();
        assert!(
            !create.is_transient() && create.to_string().contains("invalid key"),
            "{key:?}: {create}"
        );
        assert!(storage.read(key, 0..1).await.is_err(), "{key:?}");
        assert!(storage.delete(key).await.is_err(), "{key:?}");
    }
    for prefix in ["../", "../outside/", "a/../../", "a/../../outside"] {
        assert!(storage.list(prefix).await.is_err(), "list {prefix:?}");
    }
    // No key starts with '/': nothing to list, and no walk outside the root.
    assert_eq!(storage.list("/").await.unwrap(), []);
    // Backslashes are no separators here: such a key is one file in the root.
    storage.create("a\\..\\..\\b", b("inside")).await.unwrap();
    assert_eq!(
        std::fs::read(outside.join("victim")).unwrap(),
        b"keep me",
        "the file outside the root is untouched"
    );
    assert_eq!(
        walk(dir.path()),
        ["outside", "outside/victim", "root", "root/a\\..\\..\\b"],
        "nothing was created outside the root"
    );
}

#[tokio::test]
async fn very_long_keys_fail_clearly_on_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::from_url(&format!("file://{}", dir.path().display())).unwrap();
    let long_part = format!("a/{}", "x".repeat(300));
    let long_path = vec!["y".repeat(200); 30].join("/");
    for key in [long_part, long_path] {
        let err = storage.create(&key, b("x")).await.unwrap_err();
        assert!(!err.is_transient(), "{err}");
        assert_eq!(err.key(), Some(key.as_str()), "the error names the key");
        assert!(storage.read(&key, 0..1).await.is_err());
    }
    // A long prefix within every limit works...
    let prefix = vec!["z".repeat(250); 3].join("/");
    let wal = Wal::open(storage.clone(), &prefix, test_config())
        .await
        .unwrap();
    let id = wal.append(vec![(1, b("x"))]).await.unwrap()[0];
    assert_eq!(read_all(&wal, 1, 0).await[0].id, id);
    wal.stop().await.unwrap();
    // ... and one whose keys the file system refuses fails to open, clearly.
    let prefix = vec!["z".repeat(300); 2].join("/");
    let err = Wal::open(storage, &prefix, test_config())
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
}

#[tokio::test]
async fn a_trailer_claiming_a_terabyte_footer_fails_recovery_without_reading_it() {
    let faulty = faulty_memory();
    let (target, size) = tampered(&faulty, &[(1, "a"), (2, "b")], 1, |object| {
        let t = object.len() - TRAILER_LEN;
        // u32::MAX footer entries of 48 bytes: a 192 GiB footer, and a
        // footer offset that puts it a terabyte into the object.
        object[t + 48..t + 52].copy_from_slice(&u32::MAX.to_le_bytes());
        object[t + 40..t + 48].copy_from_slice(&(1u64 << 40).to_le_bytes());
        reseal(object, false);
    })
    .await;
    let err = reader_open_error(faulty.storage(), test_config()).await;
    let source = corrupted_at(&err, &target);
    assert_eq!(source.field, "trailer.footer_offset", "{err}");
    let read = faulty.counts().read;
    assert!(
        read.bytes <= 3 * size + 1024,
        "recovery read {} bytes of objects of about {size}",
        read.bytes
    );
}

#[tokio::test]
async fn a_footer_entry_claiming_a_terabyte_segment_fails_recovery_without_reading_it() {
    let faulty = faulty_memory();
    let mut footer_offset = 0;
    let (target, size) = tampered(&faulty, &[(1, "a"), (2, "b")], 1, |object| {
        footer_offset = object.len() - TRAILER_LEN - 48 * segments(object).len();
        // The entry's length (offset 32 in its footer entry) claims 2^40 bytes.
        let at = footer_offset + 32;
        object[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        reseal(object, true);
    })
    .await;
    let err = reader_open_error(faulty.storage(), test_config()).await;
    let source = corrupted_at(&err, &target);
    assert_eq!(source.field, "footer.len", "{err}");
    assert_eq!(source.offset, footer_offset as u64 + 32, "{err}");
    assert!(faulty.counts().read.bytes <= 3 * size + 1024);
}

#[tokio::test]
async fn an_entry_claiming_four_gigabytes_fails_its_read_without_fetching_them() {
    let faulty = faulty_memory();
    let mut segment_len = 0;
    let (target, _) = tampered(&faulty, &[(1, "payload")], 0, |object| {
        let index = segments(object)[0];
        segment_len = index.len;
        let at = index.offset as usize;
        // The frame's length field (after its 8-byte id) claims u32::MAX
        // bytes; the segment, footer and trailer CRCs are fixed up to match.
        object[at + 8..at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32fast::hash(&object[at..at + index.len as usize]);
        // Region 1's footer entry is the first (the marks segment, which
        // every batch carries, comes after it).
        let t = object.len() - TRAILER_LEN;
        let footer_offset = u64::from_le_bytes(object[t + 40..t + 48].try_into().unwrap());
        let entry = footer_offset as usize;
        object[entry + 44..entry + 48].copy_from_slice(&crc.to_le_bytes());
        reseal(object, true);
    })
    .await;
    let config = Config {
        on_corrupted_segment: CorruptionPolicy::Fail,
        ..test_config()
    };
    let reader = WalReader::open(faulty.storage(), PREFIX, config)
        .await
        .unwrap();
    faulty.reset_counts();
    let mut stream = Box::pin(reader.read(1, 0));
    let err = stream.next().await.unwrap().unwrap_err();
    let source = corrupted_at(&err, &target);
    assert_eq!(source.field, "entry.data", "{err}");
    assert!(
        matches!(source.kind, format::FormatErrorKind::Truncated { needed, .. } if needed > u64::from(u32::MAX)),
        "{err}"
    );
    let read = faulty.counts().read;
    assert!(
        read.bytes <= 2 * segment_len,
        "the read fetched {} bytes for a segment of {segment_len} (at most once more)",
        read.bytes
    );
}

/// Reports every object a terabyte long: a listing that lies.
#[derive(Debug)]
struct TerabyteListing(Storage);

#[async_trait::async_trait]
impl ObjectStorage for TerabyteListing {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.0.create(key, data).await
    }
    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.0.read(key, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let listed = self.0.list(prefix).await?;
        Ok(listed
            .into_iter()
            .map(|m| ObjectMeta { size: 1 << 40, ..m })
            .collect())
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.0.delete(key).await
    }
}

#[tokio::test]
async fn a_listing_claiming_terabyte_objects_fails_recovery_clearly() {
    let faulty = faulty_memory();
    history(&faulty, &[(1, "a")]).await;
    faulty.reset_counts();
    let lying = Storage::new(TerabyteListing(faulty.storage()));
    let err = reader_open_error(lying, test_config()).await;
    let Error::Storage { source } = &err else {
        panic!("expected the storage error of the out-of-range read, got {err}");
    };
    assert!(!source.is_transient(), "{err}");
    assert!(source.key().is_some_and(|k| k.starts_with("t/objects/")));
    assert_eq!(faulty.counts().read.bytes, 0, "nothing was fetched");
}

#[tokio::test]
async fn junk_names_under_objects_and_fences_are_ignored_and_left_alone() {
    let faulty = faulty_memory();
    let inner = faulty.inner().clone();
    let junk = [
        "t/objects/readme.txt",
        "t/objects/42.wal",
        "t/objects/00000000000000000001.wal.bak",
        "t/objects/0000000000000000000x.wal",
        "t/objects/99999999999999999999.wal",
        "t/objects/sub/00000000000000000009.wal",
        "t/objects/../00000000000000000003.wal",
        "t/objects/",
        "t/fences/junk",
        "t/fences/00000000000000000001.fence.old",
        "t/fences/99999999999999999999.fence",
        "t/objectsX/00000000000000000001.wal",
    ];
    for (i, k) in junk.iter().enumerate() {
        inner.create(k, b(&format!("junk {i}"))).await.unwrap();
    }
    let ids = history(&faulty, &[(1, "a"), (2, "b")]).await;
    let wal = Wal::open(faulty.storage(), PREFIX, test_config())
        .await
        .unwrap();
    assert_eq!(
        read_all(&wal, 1, 0)
            .await
            .iter()
            .map(|e| e.id)
            .collect::<Vec<_>>(),
        [ids[0]]
    );
    wal.obsolete(1, ids[0]).await.unwrap();
    wal.append(vec![(3, b("c"))]).await.unwrap();
    wal.stop().await.unwrap();
    for (i, k) in junk.iter().enumerate() {
        assert_eq!(
            bytes_of(&inner, k).await,
            format!("junk {i}").as_bytes(),
            "{k} is left alone"
        );
    }
    let reader = WalReader::open(faulty.storage(), PREFIX, test_config())
        .await
        .unwrap();
    assert_eq!(reader.latest_entry_id(2), ids[1]);
}

#[tokio::test]
async fn an_object_changed_behind_the_stores_back_is_reported_as_corrupted() {
    let faulty = faulty_memory();
    let ids = history(&faulty, &[(1, "first"), (1, "second")]).await;
    let changed = key(format::sequence_of(ids[0]));
    let mut object = bytes_of(faulty.inner(), &changed).await;
    let index = segments(&object)[0];
    object[index.offset as usize + 12] ^= 0x20; // a payload byte
    replace(faulty.inner(), &changed, object).await;

    // Reads fetch the segment twice, then skip it as a hole (the default)...
    let wal = Wal::open(faulty.storage(), PREFIX, test_config())
        .await
        .unwrap();
    let entries = read_all(&wal, 1, 0).await;
    assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [ids[1]]);
    let holes = wal.holes(1);
    assert_eq!(holes.len(), 1);
    assert_eq!(holes[0].key, changed);
    assert_eq!((holes[0].first_id, holes[0].last_id), (ids[0], ids[0]));
    wal.stop().await.unwrap();
    // ... or fail, naming the object and the CRC that does not match.
    let config = Config {
        on_corrupted_segment: CorruptionPolicy::Fail,
        ..test_config()
    };
    let wal = Wal::open(faulty.storage(), PREFIX, config).await.unwrap();
    let err = try_read_all(&wal, 1, 0).await.unwrap_err();
    assert!(corrupted_at(&err, &changed).is_crc_mismatch(), "{err}");
    wal.stop().await.unwrap();

    // A changed trailer fails opening: nothing about the object is trusted.
    let mut object = bytes_of(faulty.inner(), &changed).await;
    let n = object.len();
    object[n - TRAILER_LEN + 8] ^= 1; // the trailer's epoch
    replace(faulty.inner(), &changed, object).await;
    let err = Wal::open(faulty.storage(), PREFIX, test_config())
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(corrupted_at(&err, &changed).field, "trailer.crc", "{err}");
}

#[tokio::test]
async fn an_object_deleted_behind_a_running_store_fails_its_read_clearly() {
    let faulty = faulty_memory();
    let wal = Wal::open(faulty.storage(), PREFIX, test_config())
        .await
        .unwrap();
    let first = wal.append(vec![(1, b("first"))]).await.unwrap()[0];
    wal.append(vec![(1, b("second"))]).await.unwrap();
    let deleted = key(format::sequence_of(first));
    faulty.inner().delete(&deleted).await.unwrap();
    let err = try_read_all(&wal, 1, 0).await.unwrap_err();
    let Error::Storage { source } = &err else {
        panic!("expected a not-found storage error, got {err}");
    };
    assert!(source.is_not_found(), "{err}");
    assert_eq!(source.key(), Some(deleted.as_str()), "{err}");
    wal.stop().await.unwrap();
}

/// An object deleted from the middle of the chain behind a stopped store:
/// recovery cannot replay what lies above it, and must say so. Issue 29
/// item 7: it did not fail the open (a crash with an earlier create in
/// flight leaves the same shape), so nothing but a warning and
/// `WalReader::unreplayed` told, and a writer's collection then deleted the
/// acknowledged objects above it. Every batch now says how far its writer
/// had acknowledged (a jump record below its sequence), so the batch after
/// the gap shows it was acknowledged: the open fails, naming it, unless the
/// policy quarantines it (a hole of every region).
#[tokio::test]
async fn an_object_deleted_behind_a_stopped_store_fails_the_open_naming_it() {
    let faulty = faulty_memory();
    let ids = history(&faulty, &[(1, "first"), (1, "second"), (1, "third")]).await;
    let deleted = format::sequence_of(ids[1]);
    faulty.inner().delete(&key(deleted)).await.unwrap();
    let err = reader_open_error(faulty.storage(), test_config()).await;
    assert!(matches!(err, Error::Recovery { .. }), "{err}");
    assert!(err.to_string().contains(&key(deleted)), "{err}");
    let config = Config {
        on_damaged_object: objwal::DamagePolicy::Quarantine,
        ..test_config()
    };
    let reader = WalReader::open(faulty.storage(), PREFIX, config)
        .await
        .unwrap();
    assert!(reader.unreplayed().is_empty(), "{:?}", reader.unreplayed());
    let holes = reader.holes(1);
    assert_eq!(holes.len(), 1, "{holes:?}");
    assert_eq!(holes[0].sequence, deleted);
    let read = crate::common::collect_entries(reader.read(1, 0))
        .await
        .unwrap();
    let read: Vec<_> = read.iter().map(|e| e.id).collect();
    assert_eq!(read, [ids[0], ids[2]]);
}

#[tokio::test]
async fn a_foreign_object_at_a_sequence_key_is_a_clear_error() {
    let faulty = faulty_memory();
    let ids = history(&faulty, &[(1, "a")]).await;
    let inner = faulty.inner().clone();
    let foreign = [
        (key(1000), b"{\"owner\": \"another program\"}".to_vec()),
        (key(1001), vec![b'#'; 4096]),
    ];
    for (k, bytes) in &foreign {
        inner.create(k, Bytes::from(bytes.clone())).await.unwrap();
        let err = reader_open_error(faulty.storage(), test_config()).await;
        let source = corrupted_at(&err, k);
        assert!(
            matches!(
                source.kind,
                format::FormatErrorKind::BadMagic | format::FormatErrorKind::Truncated { .. }
            ),
            "{err}"
        );
        let err = Wal::open(faulty.storage(), PREFIX, test_config())
            .await
            .map(drop)
            .unwrap_err();
        corrupted_at(&err, k);
        assert_eq!(&bytes_of(&inner, k).await, bytes, "left as it was");
        inner.delete(k).await.unwrap();
    }
    // An objwal object of another history, under a key not its own.
    let stray = bytes_of(&inner, &key(format::sequence_of(ids[0]))).await;
    inner.create(&key(1009), Bytes::from(stray)).await.unwrap();
    let err = reader_open_error(faulty.storage(), test_config()).await;
    assert!(
        matches!(err, Error::Recovery { .. }) && err.to_string().contains(&key(1009)),
        "{err}"
    );
}

/// Found by the recovery fuzz target: the reader's cursor saturated at
/// u64::MAX and the stream repeated the last segment forever.
#[tokio::test]
async fn a_read_of_a_region_ending_at_id_u64_max_ends() {
    let fixture = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("compatibility/v1/max_sequence.wal"),
    )
    .unwrap();
    let object = format::decode(&fixture).unwrap();
    assert_eq!(object.header.sequence, MAX_SEQUENCE);
    let storage = Storage::new(MemoryStorage::new());
    storage
        .create(&key(MAX_SEQUENCE), Bytes::from(fixture))
        .await
        .unwrap();
    let reader = WalReader::open(storage, PREFIX, test_config())
        .await
        .unwrap();
    let segment = &object.segments[0];
    assert_eq!(segment.entries.last().map(|e| e.0), Some(u64::MAX));
    // Bounded by count, not time: the stream never waits, so a deadline
    // could not interrupt it.
    let read: Vec<u64> = reader
        .read(segment.region, 0)
        .take(segment.entries.len() + 1)
        .map(|e| e.unwrap().id)
        .collect()
        .await;
    let expected: Vec<u64> = segment.entries.iter().map(|e| e.0).collect();
    assert_eq!(read, expected, "each entry once, then the end");
}
