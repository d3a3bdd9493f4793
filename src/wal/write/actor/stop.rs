//! Stopping: idempotent, draining, and never `Ok` after a loss.
//!
//! In both ack modes a stop seals the open batch (with every kept release
//! record and every flush mark not yet carried), uploads everything admitted
//! and acknowledges it: a deploy's restart fails no append that was
//! admitted. A failed create (of a batch or of a void) is repeated, at most
//! `stop_attempts` times in all (a permanent create failure not at all);
//! then the backlog is dropped and stop reports how much was given up
//! (`Error::Lost`, or `Error::Fenced` naming what was never made durable).
//! Appends held back by the enqueued bounds were never admitted: they get
//! the stopped error. Stop returns once nothing is in flight (release
//! markers included: each gets one more try, bounded by `stop_attempts`),
//! except a collection pass, which it waits for at most one
//! `request_timeout` and then abandons (`collect.rs` says why that is
//! harmless).

use tokio::time::Instant;

use crate::error::Error;

use super::super::policy::SealReason;
use super::{Actor, Command, Reply, Stopping};

impl Actor {
    pub(super) fn on_stop(&mut self, reply: Reply<()>) {
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.replies.push(reply);
            return;
        }
        tracing::info!(prefix = %self.prefix, "stopping");
        self.stopping = Some(Stopping {
            replies: vec![reply],
            attempts_left: self.retry.stop_attempts,
            final_sealed: false,
        });
        self.bound_collection_at_stop();
        self.markers_at_stop();
        if self.poisoned.is_some() {
            return;
        }
        let stopped = Error::Stopped {
            detail: Some("the request was dropped by stop".into()),
        };
        self.fail_stalled(&stopped);
        if !self.kept.records.is_empty() || !self.marks.is_empty() {
            if let Err(e) = self.open_batch(Instant::now()) {
                tracing::error!(error = %e, "cannot seal kept release records and marks at stop");
            }
            let kept = std::mem::take(&mut self.kept.records);
            if let Some(open) = self.open.as_mut() {
                open.batch.add_releases(kept);
            }
        }
        // Sealed even while failing: stop repeats its creates.
        let failing = self.backlog.failing.take();
        self.seal(SealReason::Requested);
        self.backlog.failing = failing;
        self.kept.deadline = None;
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.final_sealed = true;
        }
    }

    /// Whether the stop has nothing left to wait for.
    pub(super) fn stop_is_complete(&self) -> bool {
        self.stopping.is_some()
            && self.collector.passes.is_empty()
            && self.markers.is_idle()
            && (self.poisoned.is_some()
                || (self.pipeline.is_empty()
                    && self.open.as_ref().is_none_or(|o| o.batch.is_empty())))
    }

    pub(super) fn finish_stop(&mut self) -> Result<(), Error> {
        let pending = self.pending_entries();
        if let Err(e) = self.ledger.check(pending) {
            tracing::error!(prefix = %self.prefix, "{e}");
            debug_assert!(false, "{e}");
        }
        self.warn_unmarked_at_stop();
        let result = match &self.poisoned {
            Some(Error::Fenced { ours, newer, .. }) => Err(self.ledger.fenced_error(*ours, *newer)),
            _ if self.ledger.has_loss() => Err(self.ledger.lost_error()),
            _ => Ok(()),
        };
        if let Err(e) = &result {
            tracing::error!(prefix = %self.prefix, error = %e, "stopped");
        } else {
            tracing::info!(prefix = %self.prefix, "stopped");
        }
        self.shared.set_stop_result(result.clone());
        if let Some(stopping) = self.stopping.as_mut() {
            for reply in stopping.replies.drain(..) {
                let _ = reply.send(result.clone());
            }
        }
        result
    }
}

/// After a stop: answers every request with the stopped error (and `stop`
/// with the stop's result) until every handle is gone. Leaving requests in
/// the channel unanswered would hang their callers.
pub(super) async fn answer_stopped(rx: flume::Receiver<Command>, result: Result<(), Error>) {
    while let Ok(command) = rx.recv_async().await {
        let stopped = Error::stopped();
        match command {
            Command::Append { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Obsolete { reply, .. }
            | Command::WaitDurable { reply, .. }
            | Command::Release { reply, .. }
            | Command::Flush { reply } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Segments { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Deleted { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::RaiseFloor { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Regions { reply } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Stop { reply } => {
                let _ = reply.send(result.clone());
            }
            other => other.refuse(stopped),
        }
    }
}
