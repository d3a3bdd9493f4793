//! The tokio runtime under a store (issue 21, item 4): an open without a
//! runtime is refused before it writes anything, and a store whose runtime
//! shut down says so instead of "stopped", also to a call that was waiting
//! when it happened.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use objwal::storage::MemoryStorage;
use objwal::{Config, EarlySeals, Error, ObjectStorage, Storage, Wal};

use crate::common::b;

/// Polls `future` once on this thread, with no runtime anywhere.
fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut future = pin!(future);
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The detail of the error every call of a store whose runtime shut down
/// gets: a stopped store, saying why.
fn assert_runtime_gone(e: &Error) {
    assert!(e.is_stopped(), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("the tokio runtime it was opened on shut down before the store was stopped"),
        "{text}"
    );
}

#[test]
fn an_open_outside_a_runtime_is_refused_before_writing_anything() {
    let storage = Storage::new(MemoryStorage::new());
    match poll_once(Wal::open(storage.clone(), "kv", Config::default())) {
        Poll::Ready(Err(e @ Error::InvalidArgument { .. })) => {
            let text = e.to_string();
            assert!(
                text.contains("Wal::open needs a tokio runtime") && text.contains("blocking"),
                "{text}"
            );
        }
        other => panic!("expected a refusal at the first poll, got {other:?}"),
    }
    let listed = current_thread().block_on(storage.list("")).unwrap();
    assert!(listed.is_empty(), "the refused open wrote {listed:?}");
}

#[test]
fn calls_after_the_runtime_shut_down_say_so_instead_of_stopped() {
    let storage = Storage::new(MemoryStorage::new());
    let first = current_thread();
    let wal = first.block_on(async {
        let wal = Wal::open(storage.clone(), "kv", Config::default())
            .await
            .unwrap();
        wal.append(vec![(1, b("before"))]).await.unwrap();
        wal
    });
    drop(first);

    let second = current_thread();
    second.block_on(async {
        assert_runtime_gone(&wal.append(vec![(1, b("after"))]).await.unwrap_err());
        assert_runtime_gone(&wal.flush().await.unwrap_err());
        assert_runtime_gone(&wal.obsolete(1, 1).await.unwrap_err());
        // stop too: it was never called, nothing was drained.
        assert_runtime_gone(&wal.stop().await.unwrap_err());
        // A newer life of the log sees what the first acknowledged.
        let reopened = Wal::open(storage.clone(), "kv", Config::default())
            .await
            .unwrap();
        let entries = crate::common::read_all(&reopened, 1, 0).await;
        assert_eq!(crate::common::payloads(&entries), ["before"]);
        reopened.stop().await.unwrap();
    });
}

#[test]
fn a_call_waiting_when_the_runtime_shut_down_is_answered() {
    let storage = Storage::new(MemoryStorage::new());
    // Appends wait for the timer, which never fires here.
    let config = Config {
        early_seals: EarlySeals::Off,
        flush_interval: std::time::Duration::from_secs(3600),
        max_unpersisted_age: std::time::Duration::from_secs(3600),
        ..Config::default()
    };
    let first = current_thread();
    let wal = first.block_on(async {
        Wal::open(storage.clone(), "kv", config.clone())
            .await
            .unwrap()
    });
    // Admitted by the actor, then the runtime goes: the actor held its reply.
    let mut held = Box::pin(wal.append(vec![(1, b("held"))]));
    first.block_on(async {
        assert!(futures::poll!(held.as_mut()).is_pending());
        tokio::task::yield_now().await;
        assert!(futures::poll!(held.as_mut()).is_pending());
    });
    // Sent but never received: the request waits in the actor's queue.
    let mut queued = Box::pin(wal.flush());
    assert!(poll_once(queued.as_mut()).is_pending());
    drop(first);

    let second = current_thread();
    second.block_on(async {
        let held = crate::common::within(held).await.unwrap_err();
        assert_runtime_gone(&held);
        let queued = crate::common::within(queued).await.unwrap_err();
        assert_runtime_gone(&queued);
    });
}

#[test]
fn a_stopped_store_still_says_stopped_after_its_runtime_is_gone() {
    let storage = Storage::new(MemoryStorage::new());
    let first = current_thread();
    let wal = first.block_on(async {
        let wal = Wal::open(storage, "kv", Config::default()).await.unwrap();
        wal.stop().await.unwrap();
        wal
    });
    drop(first);
    current_thread().block_on(async {
        let e = wal.append(vec![(1, b("late"))]).await.unwrap_err();
        assert!(e.is_stopped() && !e.to_string().contains("runtime"), "{e}");
        wal.stop().await.unwrap();
    });
}
