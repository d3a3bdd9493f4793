//! Open modes (issue 21, item 2): with `create_if_missing = false` an open
//! of a prefix that holds no log fails before it writes anything, naming
//! the prefixes that do hold one; a prefix with a log opens as always.

use objwal::storage::{FileStorage, MemoryStorage, Rooted};
use objwal::{Config, Error, ObjectStorage, Storage, Wal};

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
