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
    use crate::wal::protocol::create::{create_object, CreateOutcome};
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

/// What the directory-sync hook saw, by thread name, in order.
type Log = std::sync::Arc<std::sync::Mutex<Vec<(String, SyncEvent)>>>;

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

/// The position of the first entry of `log` matching `f`.
fn at(log: &[(String, SyncEvent)], f: impl Fn(&(String, SyncEvent)) -> bool) -> usize {
    log.iter()
        .position(f)
        .unwrap_or_else(|| panic!("not in {log:?}"))
}

/// A create of `key` on a thread named `name` (the hook's log tells
/// threads by name); its return is logged as `"<name> returned"`.
fn create_on_thread<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    s: &'scope FileStorage,
    log: &Log,
    name: &'static str,
    key: &'static str,
) -> std::thread::ScopedJoinHandle<'scope, Result<Created, StorageError>> {
    let log = log.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, move || {
            let created = s.inner.create(key, b"object");
            let done = SyncEvent::Finished {
                through: u64::MAX,
                ok: created.is_ok(),
            };
            log.lock().unwrap().push((format!("{name} returned"), done));
            created
        })
        .unwrap()
}

/// Issue 23: a create that links while another create's directory fsync
/// runs must not ride on that fsync (it started before the link, so it may
/// not cover it): it returns only after a second fsync, which started after
/// its link. The hook holds the first fsync until the second create has
/// linked; no sleeps.
#[test]
fn a_create_returns_only_after_a_directory_fsync_that_started_after_its_link() {
    use std::sync::mpsc;
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    s.inner.create("p/objects/0", b"dir").unwrap();
    let log: Log = Default::default();
    let (a_syncing_tx, a_syncing_rx) = mpsc::channel::<()>();
    let (b_linked_tx, b_linked_rx) = mpsc::channel::<()>();
    let (a_syncing_tx, b_linked_tx, b_linked_rx) = (
        std::sync::Mutex::new(a_syncing_tx),
        std::sync::Mutex::new(b_linked_tx),
        std::sync::Mutex::new(b_linked_rx),
    );
    let seen = log.clone();
    s.on_dir_sync(std::sync::Arc::new(move |_dir, event| {
        let who = thread_name();
        seen.lock().unwrap().push((who.clone(), event.clone()));
        match (who.as_str(), event) {
            // A's fsync started: let the test start B, and hold the fsync
            // until B has linked.
            ("a", SyncEvent::Started { .. }) => {
                a_syncing_tx.lock().unwrap().send(()).unwrap();
                b_linked_rx.lock().unwrap().recv().unwrap();
            }
            ("b", SyncEvent::Linked { .. }) => b_linked_tx.lock().unwrap().send(()).unwrap(),
            _ => {}
        }
    }));
    std::thread::scope(|scope| {
        let a = create_on_thread(scope, &s, &log, "a", "p/objects/1");
        a_syncing_rx.recv().unwrap();
        let b = create_on_thread(scope, &s, &log, "b", "p/objects/2");
        assert_eq!(a.join().unwrap().unwrap(), Created::New);
        assert_eq!(b.join().unwrap().unwrap(), Created::New);
    });
    let log = log.lock().unwrap().clone();
    let b_linked = at(&log, |(w, e)| {
        w == "b" && matches!(e, SyncEvent::Linked { .. })
    });
    let SyncEvent::Linked { ticket } = log[b_linked].1 else {
        unreachable!()
    };
    // A's fsync started before B linked, and did not cover B's ticket.
    let first = at(&log, |(w, e)| {
        w == "a" && matches!(e, SyncEvent::Started { .. })
    });
    assert!(first < b_linked, "{log:?}");
    assert!(!matches!(log[first].1, SyncEvent::Started { through } if through >= ticket));
    // B returned after an fsync that started after its link and covered it.
    let second = at(
        &log,
        |e| matches!(e.1, SyncEvent::Started { through } if through >= ticket),
    );
    let second_done = at(
        &log,
        |e| matches!(e.1, SyncEvent::Finished { through, ok: true } if through >= ticket && through != u64::MAX),
    );
    let b_returned = at(&log, |(w, _)| w == "b returned");
    assert!(
        b_linked < second && second < second_done && second_done < b_returned,
        "{log:?}"
    );
    assert_eq!(
        log.iter()
            .filter(|e| matches!(e.1, SyncEvent::Started { .. }))
            .count(),
        2
    );
    assert_eq!(&s.inner.read("p/objects/2", 0..6).unwrap()[..], b"object");
}

/// Two creates that both linked before an fsync started share it: one
/// directory fsync for both. The hook holds A after its link until B has
/// linked too.
#[test]
fn concurrent_creates_share_one_directory_fsync() {
    let (log, results) = two_creates_linked_before_one_fsync(|_| {});
    for r in &results {
        assert_eq!(r.as_ref().unwrap(), &Created::New, "{log:?}");
    }
    let syncs: Vec<_> = log
        .iter()
        .filter(|e| matches!(e.1, SyncEvent::Started { .. }))
        .collect();
    assert_eq!(syncs.len(), 1, "{log:?}");
    assert_eq!(syncs[0].1, SyncEvent::Started { through: 3 }, "{log:?}");
}

/// A shared fsync that fails fails every create it covered, and each one's
/// entry is removed (visible is not durable); the next create succeeds.
#[test]
fn a_failed_shared_directory_fsync_fails_every_create_it_covered() {
    let (_, results) = two_creates_linked_before_one_fsync(|s| s.fail_next_dir_syncs(1));
    for r in &results {
        let e = r.as_ref().unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert!(
            e.to_string().contains("shared by concurrent creates"),
            "{e}"
        );
    }
}

/// The hook's log and the results of two creates.
type TwoCreates = (Vec<(String, SyncEvent)>, Vec<Result<Created, StorageError>>);

/// Creates `p/objects/1` (thread a) and `p/objects/2` (thread b), each
/// held after its link until the other linked too, so that one fsync
/// covers both; `setup` runs on the store first. Returns the hook's log and
/// both results, and checks what a failure leaves.
fn two_creates_linked_before_one_fsync(setup: impl Fn(&FileStorage)) -> TwoCreates {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    s.inner.create("p/objects/0", b"dir").unwrap();
    setup(&s);
    let log: Log = Default::default();
    let both_linked = std::sync::Barrier::new(2);
    let seen = log.clone();
    s.on_dir_sync(std::sync::Arc::new(move |_dir, event| {
        let who = thread_name();
        seen.lock().unwrap().push((who.clone(), event.clone()));
        if matches!(event, SyncEvent::Linked { .. }) && (who == "a" || who == "b") {
            both_linked.wait();
        }
    }));
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = [("a", "p/objects/1"), ("b", "p/objects/2")]
            .into_iter()
            .map(|(name, key)| {
                let s = &s;
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(scope, move || s.inner.create(key, b"object"))
                    .unwrap()
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (i, r) in results.iter().enumerate() {
        let path = dir.path().join(format!("p/objects/{}", i + 1));
        assert_eq!(path.exists(), r.is_ok(), "{path:?}: {r:?}");
    }
    if results.iter().any(Result::is_err) {
        assert_eq!(
            s.inner.create("p/objects/1", b"again").unwrap(),
            Created::New
        );
    }
    let log = log.lock().unwrap().clone();
    (log, results)
}

/// Where `O_TMPFILE` is there (ext4, XFS) creates use it and leave no name
/// behind; with named temporary files (its fallback) a create behaves the
/// same: no temporary name left, never replaces.
#[test]
fn unnamed_and_named_temporary_files_create_the_same_objects() {
    for named in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStorage::open(dir.path()).unwrap();
        if named {
            s.use_named_temps();
        }
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
        assert_eq!(names, vec!["c"], "named temporaries: {named}");
        let journaled_fs = rustix::fs::statfs(dir.path()).is_ok_and(|st| journaled(st.f_type))
            && Path::new("/proc/self/fd").is_dir();
        let used_unnamed = s.inner.unnamed_temps_in(&dir.path().join("a/b"));
        assert_eq!(used_unnamed, journaled_fs && !named);
    }
}

/// Issue 30 item 10(a): "already exists" racing the undo of a failed
/// create of the same key. A create (thread a) links, its directory fsync
/// fails, so it removes its entry again; a create of the same key with the
/// same bytes in the same process (a hedge, or a repeat of a request that
/// timed out while its thread went on, thread b) met a's entry (`EEXIST`)
/// and, after a directory fsync of its own that succeeded, answered
/// `AlreadyExists`: its caller reads back its own bytes and takes the
/// object as landed, and then a's undo removes it (an acknowledged object
/// gone). The hook holds a's fsync until b has met the key. Now creates of
/// one key in one store take turns: b waits for a's create, undo included,
/// and then creates the key afresh.
#[test]
fn an_exists_answer_never_races_the_undo_of_a_failed_create_of_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    s.inner.create("p/objects/0", b"dir").unwrap();
    s.fail_next_dir_syncs(1);
    let (b_met, met) = std::sync::mpsc::channel::<()>();
    let b_met = std::sync::Mutex::new(b_met);
    let met = std::sync::Mutex::new(met);
    s.on_dir_sync(std::sync::Arc::new(move |_dir, event| {
        let who = thread_name();
        match (who.as_str(), event) {
            // b met the key: its link answered EEXIST, or it waits its turn.
            ("b", SyncEvent::Linked { .. } | SyncEvent::KeyBusy) => {
                let _ = b_met.lock().unwrap().send(());
            }
            ("a", SyncEvent::Started { .. }) => {
                met.lock()
                    .unwrap()
                    .recv_timeout(std::time::Duration::from_secs(30))
                    .expect("b met the key within the deadline");
            }
            _ => {}
        }
    }));
    let (a, b) = std::thread::scope(|scope| {
        let a = std::thread::Builder::new()
            .name("a".into())
            .spawn_scoped(scope, || s.inner.create("p/objects/1", b"object"))
            .unwrap();
        // b starts once a's entry is there.
        let path = dir.path().join("p/objects/1");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !path.exists() && !a.is_finished() {
            assert!(std::time::Instant::now() < deadline, "a never linked");
            std::thread::yield_now();
        }
        let b = std::thread::Builder::new()
            .name("b".into())
            .spawn_scoped(scope, || s.inner.create("p/objects/1", b"object"))
            .unwrap();
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.unwrap_err().is_transient());
    let path = dir.path().join("p/objects/1");
    match b {
        Ok(_) => assert!(path.exists(), "b answered {b:?} for a key a's undo emptied"),
        Err(e) => panic!("b: {e}"),
    }
    assert_eq!(fs::read(&path).unwrap(), b"object");
}
