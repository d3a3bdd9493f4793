//! Unit tests of the local directory backend.

use super::*;

/// Issue 18, item 9: opening a store (as every read-only tool does) left
/// it changed: the open removed other processes' temporary files. Now the
/// open touches nothing, and only `remove_leftovers` (a writer's open)
/// removes the temporary files of dead processes, never a live one's.
#[tokio::test]
async fn opening_a_store_removes_nothing_and_only_a_writers_cleanup_does() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("p/objects");
    fs::create_dir_all(&sub).unwrap();
    // pid 4000000000 is above any pid_max: never a running process.
    let dead = sub.join(format!("{TEMP_MARKER}4000000000-7"));
    let ours = sub.join(format!("{TEMP_MARKER}{}-999999", std::process::id()));
    let junk = sub.join(format!("{TEMP_MARKER}garbage"));
    let elsewhere = dir
        .path()
        .join(format!("q/objects/{TEMP_MARKER}4000000000-8"));
    fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
    for p in [&dead, &ours, &junk, &elsewhere] {
        fs::write(p, b"partial").unwrap();
    }
    fs::write(sub.join("keep"), b"object").unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    assert!(
        dead.exists() && junk.exists() && ours.exists() && elsewhere.exists(),
        "opening removed a file"
    );
    // Reading removes nothing either.
    s.list("").await.unwrap();
    s.read("p/objects/keep", 0..6).await.unwrap();
    assert!(dead.exists() && junk.exists());

    s.remove_leftovers("p/").await.unwrap();
    assert!(!dead.exists() && !junk.exists());
    assert!(ours.exists(), "a live process's temp file must stay");
    assert!(
        elsewhere.exists(),
        "another prefix's files are its writer's"
    );
    assert!(sub.join("keep").exists());
    s.remove_leftovers("").await.unwrap();
    assert!(!elsewhere.exists() && ours.exists());
    // A prefix with no directory yet has nothing to remove.
    s.remove_leftovers("nothing/here/").await.unwrap();
    // The live one is still never listed.
    let keys: Vec<_> = s
        .inner
        .list("")
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(keys, vec!["p/objects/keep"]);
}

#[test]
fn keys_escaping_the_root_or_using_the_marker_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path().join("root")).unwrap();
    for bad in [
        "",
        "/abs",
        "a/../../x",
        "..",
        "a//b",
        "a/",
        "./a",
        &format!("a/{TEMP_MARKER}1-1"),
    ] {
        let e = s.inner.create(bad, b"x").unwrap_err();
        assert_eq!(e.kind(), StorageErrorKind::Permanent, "{bad}");
    }
    assert!(s.inner.list("").unwrap().is_empty());
}

#[test]
fn create_leaves_no_temp_file_and_never_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    assert_eq!(s.inner.create("a/b/c", b"one").unwrap(), Created::New);
    assert_eq!(
        s.inner.create("a/b/c", b"two").unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(&s.inner.read("a/b/c", 0..3).unwrap()[..], b"one");
    let names: Vec<_> = fs::read_dir(dir.path().join("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["c"]);
    // A key that is a directory is not an object.
    assert_eq!(
        s.inner.create("a/b", b"x").unwrap_err().kind(),
        StorageErrorKind::Permanent
    );
    assert!(s.inner.read("a/b", 0..0).unwrap_err().is_not_found());
}

#[test]
fn io_errors_map_to_kinds() {
    let e = io_error(io::Error::from(io::ErrorKind::NotFound), Some("k"));
    assert!(e.is_not_found());
    assert_eq!(e.key(), Some("k"));
    let e = io_error(io::Error::from(io::ErrorKind::TimedOut), Some("k"));
    assert!(e.is_transient());
    let e = io_error(io::Error::from(io::ErrorKind::PermissionDenied), Some("k"));
    assert_eq!(e.kind(), StorageErrorKind::Permanent);
}

/// Issue 10, item 6: a create whose directory fsync failed is visible but
/// not durable; it must never be read back as durable. The entry is removed,
/// so the read-back finds nothing and a repeated create writes it afresh.
#[tokio::test]
async fn a_failed_directory_fsync_is_never_read_back_as_durable() {
    use crate::wal::create::{create_object, CreateOutcome};
    let dir = tempfile::tempdir().unwrap();
    let files = FileStorage::open(dir.path()).unwrap();
    let storage = crate::Storage::new(files.clone());
    let bytes = Bytes::from_static(b"an object");
    files.fail_next_dir_syncs(1);
    match create_object(&storage, "p/objects/1", std::slice::from_ref(&bytes)).await {
        CreateOutcome::Failed(e) => assert!(e.is_transient(), "{e}"),
        other => panic!("a create with no durable directory entry was {other:?}"),
    }
    assert!(
        !dir.path().join("p/objects/1").exists(),
        "the unsynced entry is gone"
    );
    // The repeat writes it afresh, durably.
    match create_object(&storage, "p/objects/1", std::slice::from_ref(&bytes)).await {
        CreateOutcome::Landed(0) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        storage.read("p/objects/1", 0..2).await.unwrap(),
        Bytes::from_static(b"an")
    );
    // An entry that could not be removed is refused to reads until replaced.
    let path = dir.path().join("p/objects/9");
    fs::write(&path, b"x").unwrap();
    files.inner.unsynced.lock().unwrap().insert(path.clone());
    assert!(storage
        .read("p/objects/9", 0..1)
        .await
        .unwrap_err()
        .is_transient());
    assert_eq!(
        storage.create("p/objects/9", bytes.clone()).await.unwrap(),
        Created::New,
        "our own unsynced entry is replaced"
    );
    assert_eq!(
        storage.read("p/objects/9", 0..2).await.unwrap(),
        Bytes::from_static(b"an")
    );
}
