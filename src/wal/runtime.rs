//! The tokio runtime a store runs on.
//!
//! A [`Wal`](super::Wal) is a handle to an actor task spawned on the runtime
//! that opened it. Two mistakes used to read badly:
//!
//! - **An open outside any runtime** got as far as its first requests
//!   (a fence, leftovers removed) and then panicked with tokio's "there is
//!   no reactor running". [`require`] refuses it first, before anything is
//!   written, naming what to do.
//! - **A runtime that shut down under a store** (dropped, or `#[tokio::main]`
//!   returning while a handle lives on) drops the actor's task without
//!   finishing it; every later call answered "the WAL is stopped", as if
//!   `stop` had been called. [`Watched`] wraps the actor's future and tells
//!   the two apart: the actor's future completes when the store stops
//!   (after `stop`, when every handle is gone, or by a panic), and is
//!   dropped unfinished only when its task is cancelled, which nothing in
//!   objwal does (no handle of the task is kept) and a runtime shutting down
//!   always does. Calls then say that the runtime shut down.
//!
//! Invariant: no call waits forever on a store whose runtime shut down.
//! A request is either answered by the actor, or dropped (its reply sender
//! with it) when [`Watched`] is dropped: the actor's state first, then every
//! request still queued. A request queued after that last drain is seen by
//! its caller, who checks [`gone`](Watched) after sending (the flag is set
//! before the drain; the channel's lock orders the rest).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::Error;

/// Refuses a call that needs a tokio runtime on a thread without one,
/// before it does anything.
pub(crate) fn require(what: &str) -> Result<(), Error> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Ok(()),
        Err(_) => Err(Error::invalid(format!(
            "{what} needs a tokio runtime and none is running on this thread (nothing was \
             written): call it from async code run by tokio (#[tokio::main], \
             Runtime::block_on), or use objwal::blocking::Wal, which runs its own"
        ))),
    }
}

/// Set once the runtime of a store shut down under it.
#[derive(Debug, Default)]
pub(crate) struct RuntimeGone(AtomicBool);

impl RuntimeGone {
    /// Whether the store's runtime shut down, ending its actor.
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// The error of every call once the runtime shut down.
    pub(crate) fn error() -> Error {
        Error::Stopped {
            detail: Some(
                "the tokio runtime it was opened on shut down before the store was stopped, \
                 which ended its background task: nothing more is logged and what was not yet \
                 durable is lost, as in a crash; keep the runtime running until stop returns, \
                 and open the log again"
                    .into(),
            ),
        }
    }
}

/// The actor's future, watched: dropped before it completed means the
/// runtime shut down.
pub(crate) struct Watched<F, T> {
    future: Option<Pin<Box<F>>>,
    gone: Arc<super::Shared>,
    /// A receiver of the actor's channel, to drop what is still queued.
    queue: flume::Receiver<T>,
    done: bool,
}

impl<F: Future<Output = ()>, T> Watched<F, T> {
    pub(crate) fn new(future: F, shared: Arc<super::Shared>, queue: flume::Receiver<T>) -> Self {
        Watched {
            future: Some(Box::pin(future)),
            gone: shared,
            queue,
            done: false,
        }
    }
}

impl<F: Future<Output = ()>, T> Future for Watched<F, T> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(future) = self.future.as_mut() else {
            return Poll::Ready(());
        };
        match future.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.done = true;
                self.future = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

// `Watched` holds its future boxed: it is never pinned itself.
impl<F, T> Unpin for Watched<F, T> {}

impl<F, T> Drop for Watched<F, T> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Cancelled: the runtime shut down. Say so before any caller wakes.
        self.gone.runtime_gone.set();
        tracing::debug!("the tokio runtime of a store shut down before it was stopped");
        // The actor's state first (requests it was working on), then what
        // is still queued: each dropped reply wakes its caller.
        self.future = None;
        for request in self.queue.drain() {
            drop(request);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_outside_a_runtime_is_refused_naming_the_fix() {
        let e = require("Wal::open").unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(
            text.contains("Wal::open needs a tokio runtime")
                && text.contains("nothing was written")
                && text.contains("objwal::blocking::Wal"),
            "{text}"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async { require("Wal::open").unwrap() });
    }
}
