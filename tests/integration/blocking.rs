//! The blocking handle (issue 21, item 5): the async handle's behaviours
//! through plain functions (append, read, obsolete, release, flush,
//! wait_durable, stop, restart), its runtime choices, calls from inside
//! async code, and the example engine run on the in-memory store.

use std::sync::mpsc;

use objwal::blocking::Wal;
use objwal::storage::MemoryStorage;
use objwal::{AckMode, Config, Error, ObjectStorage, Storage};

use crate::common::{b, payloads, DEADLINE};

#[path = "../../examples/blocking_engine.rs"]
#[allow(dead_code, reason = "the example's main is not run here")]
mod example;

/// Runs `body` on its own thread and fails the test if it has not returned
/// within [`DEADLINE`]: a deadlock fails instead of hanging.
fn on_a_thread<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(answer) => answer,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the blocking calls did not return: deadlocked")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the thread panicked (above)"),
    }
}

fn texts(entries: impl Iterator<Item = Result<objwal::Entry, Error>>) -> Vec<String> {
    let entries: Vec<_> = entries.collect::<Result<_, _>>().unwrap();
    payloads(&entries)
}

#[test]
fn a_blocking_store_appends_reads_obsoletes_releases_and_restarts() {
    let storage = Storage::new(MemoryStorage::new());
    let wal = Wal::open(storage.clone(), "t", Config::default()).unwrap();
    let ids = wal
        .append(vec![(1, b("a1")), (2, b("b1")), (1, b("a2"))])
        .unwrap();
    assert_eq!(ids.len(), 3);
    assert!(ids[2] > ids[0]);
    assert_eq!(wal.latest_entry_id(1), ids[2]);
    assert_eq!(texts(wal.read(1, 0)), ["a1", "a2"]);
    wal.obsolete(1, ids[0]).unwrap();
    assert_eq!(texts(wal.read(1, 0)), ["a2"]);
    wal.release_region(2).unwrap();
    assert!(matches!(
        wal.append(vec![(2, b("b2"))]),
        Err(Error::RegionReleased { region: 2 })
    ));
    let regions = wal.regions().unwrap();
    assert!(regions.iter().any(|r| r.region == 2 && r.released));
    wal.stop().unwrap();
    wal.stop().unwrap(); // idempotent
    assert!(wal.append(vec![(1, b("late"))]).unwrap_err().is_stopped());

    let wal = Wal::open(storage, "t", Config::default()).unwrap();
    assert_eq!(texts(wal.read(1, 0)), ["a2"]);
    assert_eq!(wal.read(2, 0).count(), 0);
    let replayed = texts(wal.replay([(1, 0), (2, 0)]));
    assert_eq!(replayed, ["a2"]);
    let next = wal.append(vec![(1, b("a3"))]).unwrap();
    assert!(next[0] > ids[2], "ids keep increasing across lives");
    wal.stop().unwrap();
}

#[test]
fn enqueued_appends_are_made_durable_by_wait_durable_and_flush() {
    let storage = Storage::new(MemoryStorage::new());
    let config = Config {
        ack_mode: AckMode::Enqueued,
        flush_interval: std::time::Duration::from_secs(3600),
        max_unpersisted_age: std::time::Duration::from_secs(3600),
        early_seals: objwal::EarlySeals::Off,
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), "t", config).unwrap();
    let first = wal.append(vec![(1, b("one"))]).unwrap();
    wal.flush().unwrap();
    let second = wal.append(vec![(1, b("two"))]).unwrap();
    // Nothing seals by itself here: flush makes what it admitted durable.
    wal.wait_durable(1, first[0]).unwrap();
    wal.flush().unwrap();
    wal.wait_durable(1, second[0]).unwrap();
    // Dropped without stop: a crash. Both are durable.
    drop(wal);
    let wal = Wal::open(storage, "t", Config::default()).unwrap();
    assert_eq!(texts(wal.read(1, 0)), ["one", "two"]);
    wal.stop().unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn blocking_calls_from_inside_async_code_complete_without_deadlock() {
    // This test's own runtime has one thread, which the calls below block:
    // they complete because the store runs on the handle's runtime.
    let storage = Storage::new(MemoryStorage::new());
    let wal = Wal::open(storage.clone(), "t", Config::default()).unwrap();
    let id = wal.append(vec![(1, b("from async"))]).unwrap();
    assert_eq!(texts(wal.read(1, 0)), ["from async"]);
    // The async handle of the same store works on this runtime.
    let more = wal
        .as_async()
        .append(vec![(1, b("async handle"))])
        .await
        .unwrap();
    assert!(more[0] > id[0]);
    wal.stop().unwrap();
    // Dropping the last handle (and its runtime) inside async code is fine.
    drop(wal);
}

#[test]
fn calls_on_many_threads_share_one_store() {
    let wal = Wal::open(Storage::new(MemoryStorage::new()), "t", Config::default()).unwrap();
    let ids = on_a_thread(move || {
        let threads: Vec<_> = (0..4u64)
            .map(|region| {
                let wal = wal.clone();
                std::thread::spawn(move || {
                    (0..5)
                        .map(|i| {
                            wal.append(vec![(region, b(&format!("{region}.{i}")))])
                                .unwrap()[0]
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let ids: Vec<Vec<u64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for region in 0..4u64 {
            let want: Vec<String> = (0..5).map(|i| format!("{region}.{i}")).collect();
            assert_eq!(texts(wal.read(region, 0)), want);
        }
        wal.stop().unwrap();
        ids
    });
    for region_ids in ids {
        assert!(region_ids.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn a_runtime_of_ones_own_is_used_and_a_current_thread_one_is_refused() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("engine-wal")
        .enable_all()
        .build()
        .unwrap();
    let storage = Storage::new(MemoryStorage::new());
    let wal = Wal::open_with_runtime(runtime, storage.clone(), "t", Config::default()).unwrap();
    wal.append(vec![(1, b("x"))]).unwrap();
    wal.stop().unwrap();

    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = Wal::open_with_runtime(current, storage, "t", Config::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    assert!(e.to_string().contains("multi-thread runtime"), "{e}");
}

#[test]
fn an_iterator_dropped_early_stops_its_reads_and_the_store_goes_on() {
    let wal = Wal::open(Storage::new(MemoryStorage::new()), "t", Config::default()).unwrap();
    for i in 0..20 {
        wal.append(vec![(1, b(&format!("e{i}")))]).unwrap();
    }
    let mut entries = wal.read(1, 0);
    assert_eq!(&entries.next().unwrap().unwrap().data[..], b"e0");
    drop(entries);
    assert_eq!(wal.read(1, 0).count(), 20);
    wal.stop().unwrap();
}

#[test]
fn the_blocking_engine_example_keeps_every_put_across_a_restart() {
    let tables = tempfile::tempdir().unwrap();
    let replayed = example::run(Storage::new(MemoryStorage::new()), tables.path()).unwrap();
    // Shard 0 flushed after six puts, shard 1 after all ten, shard 2 never,
    // shard 3 dropped.
    let replayed: Vec<(u64, usize)> = replayed.into_iter().collect();
    assert_eq!(replayed, [(0, 4), (1, 0), (2, 10)]);
}

/// A store whose every fence claim is followed at once by a newer
/// process's claim (the fence of the next epoch): the open is fenced at
/// its closing check.
#[derive(Debug)]
struct OvertakenAtOnce {
    inner: Storage,
}

#[async_trait::async_trait]
impl objwal::ObjectStorage for OvertakenAtOnce {
    async fn create(
        &self,
        key: &str,
        data: bytes::Bytes,
    ) -> Result<objwal::Created, objwal::StorageError> {
        let created = self.inner.create(key, data.clone()).await?;
        if let Some((dir, epoch)) = key
            .strip_suffix(".fence")
            .and_then(|k| k.rsplit_once('/'))
            .and_then(|(dir, epoch)| Some((dir, epoch.parse::<u64>().ok()?)))
        {
            let newer = format!("{dir}/{:020}.fence", epoch + 1);
            self.inner.create(&newer, data).await?;
        }
        Ok(created)
    }
    async fn read(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, objwal::StorageError> {
        self.inner.read(key, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<objwal::ObjectMeta>, objwal::StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), objwal::StorageError> {
        self.inner.delete(key).await
    }
}

/// Every way an open of the blocking handle fails, each with a check of
/// the error it must return.
#[allow(clippy::type_complexity, reason = "a table of cases")]
fn failing_opens() -> Vec<(
    &'static str,
    Box<dyn FnOnce() -> Result<Wal, Error>>,
    fn(&Error) -> bool,
)> {
    let no_log = Config {
        create_if_missing: false,
        ..Config::default()
    };
    let bad_config = Config {
        stop_attempts: 0,
        ..Config::default()
    };
    let unreachable = crate::common::faulty_memory();
    unreachable.fail_next(
        objwal::storage::fault::Op::List,
        "",
        usize::MAX,
        objwal::storage::StorageErrorKind::Transient,
    );
    let overtaken = Storage::new(OvertakenAtOnce {
        inner: Storage::new(MemoryStorage::new()),
    });
    let current_thread = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let multi_thread = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let memory = || Storage::new(MemoryStorage::new());
    vec![
        (
            "no log",
            Box::new(move || Wal::open(memory(), "t", no_log)),
            |e| matches!(e, Error::NoLog { .. }),
        ),
        (
            "no log, own runtime",
            Box::new(move || {
                let config = Config {
                    create_if_missing: false,
                    ..Config::default()
                };
                Wal::open_with_runtime(multi_thread(), memory(), "t", config)
            }),
            |e| matches!(e, Error::NoLog { .. }),
        ),
        (
            "bad config",
            Box::new(move || Wal::open(memory(), "t", bad_config)),
            |e| matches!(e, Error::InvalidConfig { .. }),
        ),
        (
            "bad prefix",
            Box::new(move || Wal::open(memory(), "../t", Config::default())),
            |e| matches!(e, Error::InvalidArgument { .. }),
        ),
        (
            "fenced",
            Box::new(move || Wal::open(overtaken, "t", Config::default())),
            Error::is_fenced,
        ),
        (
            "unreachable store",
            Box::new(move || Wal::open(unreachable.storage(), "t", Config::default())),
            Error::is_retryable,
        ),
        (
            "current-thread runtime",
            Box::new(move || {
                Wal::open_with_runtime(current_thread(), memory(), "t", Config::default())
            }),
            |e| matches!(e, Error::InvalidArgument { .. }),
        ),
    ]
}

/// Runs every failing open and checks that each returned its error.
fn every_failing_open_returns_its_error() {
    let mut wrong = Vec::new();
    for (name, open, expected) in failing_opens() {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)) {
            Ok(Ok(_)) => wrong.push(format!("{name}: opened")),
            Ok(Err(e)) if expected(&e) => {}
            Ok(Err(e)) => wrong.push(format!("{name}: unexpected error {e:?}")),
            Err(_) => wrong.push(format!("{name}: panicked instead of returning its error")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Issue 30, item 4: a failed open dropped the handle's runtime on the
/// calling thread, which panics ("Cannot drop a runtime in a context where
/// blocking is not allowed") inside async code. From a plain thread.
#[test]
fn a_failed_blocking_open_returns_its_error_on_a_plain_thread() {
    on_a_thread(every_failing_open_returns_its_error);
}

/// The same, inside a current-thread runtime's `block_on`.
#[test]
fn a_failed_blocking_open_returns_its_error_inside_block_on() {
    on_a_thread(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async { every_failing_open_returns_its_error() })
    });
}

/// The same, on a worker thread of a multi-thread runtime.
#[test]
fn a_failed_blocking_open_returns_its_error_on_a_runtime_worker() {
    on_a_thread(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime
            .block_on(runtime.spawn(async { every_failing_open_returns_its_error() }))
            .unwrap();
    });
}

/// Issue 31 item 3: a synchronous standby follows its primary with
/// `blocking::WalReader::follow`: entries come out of an iterator, a
/// `next_timeout` gives up when nothing lands (the loop does other work),
/// `catch_up` takes in what landed before it and ends, and the lag is zero
/// after it.
#[test]
fn a_blocking_follower_iterates_times_out_catches_up_and_reports_its_lag() {
    on_a_thread(|| {
        let storage = Storage::new(MemoryStorage::new());
        let config = Config {
            follow_interval: std::time::Duration::from_millis(20),
            ..Config::default()
        };
        let primary = Wal::open(storage.clone(), "standby", config.clone()).unwrap();
        primary.append(vec![(1, b("a")), (1, b("b"))]).unwrap();
        let reader = objwal::blocking::WalReader::open(storage, "standby", config).unwrap();
        let mut follower = reader.follow([(1, 0)]);
        let first: Vec<_> = follower.by_ref().take(2).collect::<Result<_, _>>().unwrap();
        assert_eq!(payloads(&first), ["a", "b"]);
        // Nothing lands: the wait gives up and the follower goes on.
        let idle = follower
            .next_timeout(std::time::Duration::from_millis(50))
            .unwrap();
        assert!(idle.is_none(), "{idle:?}");
        primary.append(vec![(1, b("c"))]).unwrap();
        let next = follower.next_timeout(DEADLINE).unwrap().expect("c lands");
        assert_eq!(payloads(&[next]), ["c"]);
        // What landed before the question, and then the end.
        primary.append(vec![(1, b("d")), (1, b("e"))]).unwrap();
        let mut caught = Vec::new();
        let taken = follower.catch_up(|entry| caught.push(entry)).unwrap();
        assert_eq!(taken, 2);
        assert_eq!(payloads(&caught), ["d", "e"]);
        assert_eq!(follower.lag().objects, 0);
        primary.append(vec![(1, b("f"))]).unwrap();
        let next = follower.next_timeout(DEADLINE).unwrap().expect("f lands");
        assert_eq!(payloads(&[next]), ["f"]);
        primary.stop().unwrap();
    });
}

/// Issue 31 item 2 for a synchronous standby: the blocking reader places a
/// hold, its follower keeps it, the primary reports it (`holds`), and
/// `release_hold` removes it from the store.
#[test]
fn a_blocking_follower_keeps_and_releases_a_hold() {
    on_a_thread(|| {
        let storage = Storage::new(MemoryStorage::new());
        let config = Config {
            flush_interval: std::time::Duration::from_millis(10),
            ..Config::default()
        };
        let primary = Wal::open(storage.clone(), "standby", config.clone()).unwrap();
        let id = primary.append(vec![(1, b("a"))]).unwrap()[0];
        let reader = objwal::blocking::WalReader::open(storage.clone(), "standby", config).unwrap();
        let hold = reader
            .hold("standby-1", std::time::Duration::from_secs(60))
            .unwrap();
        let mut follower = reader.follow([(1, 0)]);
        follower.keep_hold(hold);
        assert_eq!(follower.next().unwrap().unwrap().id, id);
        // The primary's collection sees the hold at its next pass.
        primary.obsolete(1, id).unwrap();
        primary.append(vec![(1, b("b"))]).unwrap();
        let listed = |storage: &Storage| {
            let storage = storage.clone();
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(async move { storage.list("standby/holds/").await.unwrap().len() })
        };
        assert_eq!(listed(&storage), 1);
        let deadline = std::time::Instant::now() + DEADLINE;
        while primary.holds().unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the primary never saw the hold"
            );
            primary.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(primary.holds().unwrap()[0].name, "standby-1");
        follower.release_hold().unwrap();
        assert_eq!(listed(&storage), 0);
        primary.stop().unwrap();
    });
}
