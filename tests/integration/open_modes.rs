//! Open modes (issue 21, item 2): with `create_if_missing = false` an open
//! of a prefix that holds no log fails before it writes anything, naming
//! the prefixes that do hold one; a prefix with a log opens as always. A
//! reader refuses such a prefix the same way (issue 30, item 6), unless
//! opened with `WalReader::open_or_empty`, whose follower waits for the
//! log to start.

use objwal::storage::{FileStorage, MemoryStorage, Rooted};
use objwal::{Config, Error, ObjectStorage, Storage, Wal, WalReader};

use crate::common::{b, payloads, read_all};

fn must_exist() -> Config {
    Config {
        create_if_missing: false,
        ..Config::default()
    }
}

/// A store with a log under "kv" holding one entry in region 1.
async fn store_with_a_log(storage: &Storage) {
    let wal = Wal::open(storage.clone(), "kv", Config::default())
        .await
        .unwrap();
    wal.append(vec![(1, b("put a=1"))]).await.unwrap();
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn a_mistyped_prefix_fails_naming_the_log_and_leaves_nothing_behind() {
    let storage = Storage::new(MemoryStorage::new());
    store_with_a_log(&storage).await;
    let before = storage.list("").await.unwrap();

    let e = Wal::open(storage.clone(), "Kv", must_exist())
        .await
        .unwrap_err();
    let text = e.to_string();
    match e {
        Error::NoLog {
            prefix,
            existing,
            at_root,
        } => assert_eq!(
            (prefix.as_str(), &existing[..], at_root),
            ("Kv", &["kv".to_owned()][..], false)
        ),
        other => panic!("expected NoLog, got {other:?}"),
    }
    assert!(
        text.contains("no log under prefix \"Kv\"")
            && text.contains("create_if_missing is false")
            && text.contains("prefixes holding a log here: \"kv\""),
        "{text}"
    );
    assert_eq!(
        storage.list("").await.unwrap(),
        before,
        "the refused open wrote"
    );

    // The log itself opens in this mode, with its history.
    let wal = Wal::open(storage.clone(), "kv", must_exist())
        .await
        .unwrap();
    assert_eq!(payloads(&read_all(&wal, 1, 0).await), ["put a=1"]);
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_open_on_a_directory_creates_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::new(FileStorage::open(dir.path()).unwrap());
    store_with_a_log(&storage).await;
    let e = Wal::open(storage.clone(), "kv2", must_exist())
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NoLog { .. }), "{e:?}");
    assert!(
        !dir.path().join("kv2").exists(),
        "the refused open made a folder"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["kv"]);
}

#[tokio::test]
async fn an_empty_store_says_it_holds_no_log_and_the_default_still_creates() {
    let storage = Storage::new(MemoryStorage::new());
    let e = Wal::open(storage.clone(), "kv", must_exist())
        .await
        .unwrap_err();
    assert!(e.to_string().ends_with("this store holds no log"), "{e}");
    assert!(!e.is_retryable());
    assert!(storage.list("").await.unwrap().is_empty());
    // create_if_missing = true (the default) starts the log.
    let wal = Wal::open(storage.clone(), "kv", Config::default())
        .await
        .unwrap();
    wal.stop().await.unwrap();
    assert!(!storage.list("kv/").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_store_opened_at_the_log_itself_is_told_to_open_its_parent() {
    let storage = Storage::new(MemoryStorage::new());
    store_with_a_log(&storage).await;
    // The storage is rooted at the log's directory (`.../kv`), as a URL
    // naming the log itself would be.
    let inside = Storage::new(Rooted::new("kv", storage.clone()).unwrap());
    let e = Wal::open(inside.clone(), "kv", must_exist())
        .await
        .unwrap_err();
    match &e {
        Error::NoLog {
            existing, at_root, ..
        } => assert!(existing.is_empty() && *at_root, "{e:?}"),
        other => panic!("expected NoLog, got {other:?}"),
    }
    assert!(e.to_string().contains("open its parent"), "{e}");
}

/// Issue 30, item 6: `WalReader::open` opened a prefix with no log as an
/// empty log, so a mistyped prefix read (and followed) nothing, silently.
/// It fails as `Wal::open` with `create_if_missing = false` does, naming
/// the prefixes that hold a log, and writes nothing; the log itself opens.
#[tokio::test]
async fn a_reader_of_a_mistyped_prefix_fails_naming_the_log() {
    let storage = Storage::new(MemoryStorage::new());
    store_with_a_log(&storage).await;
    let before = storage.list("").await.unwrap();
    let e = WalReader::open(storage.clone(), "Kv", Config::default())
        .await
        .unwrap_err();
    match &e {
        Error::NoLog {
            prefix,
            existing,
            at_root,
        } => assert_eq!(
            (prefix.as_str(), &existing[..], *at_root),
            ("Kv", &["kv".to_owned()][..], false)
        ),
        other => panic!("expected NoLog, got {other:?}"),
    }
    assert!(!e.is_retryable(), "{e}");
    assert_eq!(storage.list("").await.unwrap(), before, "the reader wrote");
    // The same error as the writer's refused open.
    let writer = Wal::open(storage.clone(), "Kv", must_exist())
        .await
        .unwrap_err();
    assert_eq!(format!("{writer:?}"), format!("{e:?}"));

    let reader = WalReader::open(storage.clone(), "kv", Config::default())
        .await
        .unwrap();
    assert!(reader.latest_entry_id(1) > 0);

    // An empty store says so.
    let empty = Storage::new(MemoryStorage::new());
    let e = WalReader::open(empty, "kv", Config::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::NoLog { existing, .. } if existing.is_empty()),
        "{e:?}"
    );
}

/// A prefix that an opener claimed (its fence) but that holds no object yet
/// is a log starting: a reader opens it, empty, as `Wal::open` with
/// `create_if_missing = false` does.
#[tokio::test]
async fn a_reader_opens_a_prefix_whose_first_open_is_in_progress() {
    let storage = Storage::new(MemoryStorage::new());
    store_with_a_log(&storage).await;
    // Only the fence: the first opener of "new" died before its objects.
    let fence = storage.list("kv/fences/").await.unwrap().remove(0);
    let bytes = storage.read(&fence.key, 0..fence.size).await.unwrap();
    let key = fence.key.replacen("kv/", "new/", 1);
    storage.create(&key, bytes).await.unwrap();
    let reader = WalReader::open(storage.clone(), "new", Config::default())
        .await
        .unwrap();
    assert!(reader.objects().is_empty());
}

/// `WalReader::open_or_empty` opens a prefix with no log as an empty log,
/// writing nothing; its follower waits for the writer's first open and
/// then yields what it writes, from its first entry.
#[tokio::test(start_paused = true)]
async fn a_follower_of_a_log_not_started_yet_follows_it_from_its_first_entry() {
    use futures::StreamExt;

    let faulty = crate::common::faulty_memory();
    let storage = faulty.storage();
    let reader = WalReader::open_or_empty(storage.clone(), "kv", Config::default())
        .await
        .unwrap();
    assert!(reader.objects().is_empty());
    assert!(
        storage.list("").await.unwrap().is_empty(),
        "the reader wrote"
    );
    let mut follower = reader.follow([(1, 0)]);
    let consumer = tokio::spawn(async move {
        let mut got = Vec::new();
        while got.len() < 2 {
            got.push(follower.next().await.unwrap().unwrap());
        }
        got
    });
    // An hour before the writer comes: the follower waits, cheaply.
    faulty.reset_counts();
    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    let idle = faulty.counts();
    assert!(idle.list.requests <= 9, "{idle:?}");
    assert!(
        (3550..=3620).contains(&(idle.read.requests + idle.list.requests)),
        "{idle:?}"
    );

    let wal = Wal::open(storage.clone(), "kv", Config::default())
        .await
        .unwrap();
    let ids = wal
        .append(vec![(1, b("first")), (1, b("second"))])
        .await
        .unwrap();
    let got = tokio::time::timeout(crate::common::DEADLINE, consumer)
        .await
        .expect("the follower did not find the new log")
        .unwrap();
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
    assert_eq!(payloads(&got), ["first", "second"]);
    wal.stop().await.unwrap();
}
