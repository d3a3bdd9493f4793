//! Stopping: idempotent, and never `Ok` after a loss.
//!
//! Durable mode: the open batch and the creates not yet started are dropped
//! (their callers get a stopped error); creates in flight run to completion
//! and are acknowledged in order if they succeed; release records still
//! pending are sealed in one last object.
//!
//! Enqueued mode: appends held back by the bounds get the stopped error; the
//! open batch is sealed (with every kept release record) and the whole
//! backlog is uploaded before stop returns. A failed create is repeated at
//! most [`super::STOP_ATTEMPTS`] times (a permanent failure not at all);
//! then the backlog is dropped and stop reports how much was lost.

use tokio::time::Instant;

use crate::config::AckMode;
use crate::error::Error;

use super::super::policy::SealReason;
use super::{Actor, Command, FlightState, Reply, Stopping, Waiter, STOP_ATTEMPTS};

impl Actor {
    pub(super) fn on_stop(&mut self, reply: Reply<()>) {
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.replies.push(reply);
            return;
        }
        tracing::info!(prefix = %self.prefix, "stopping");
        self.stopping = Some(Stopping {
            replies: vec![reply],
            attempts_left: STOP_ATTEMPTS,
            final_sealed: false,
        });
        if self.poisoned.is_some() {
            return;
        }
        let stopped = Error::Stopped {
            detail: Some("the request was dropped by stop".into()),
        };
        self.fail_stalled(&stopped);
        match self.config.ack_mode {
            AckMode::Durable => self.stop_durable(&stopped),
            AckMode::Enqueued => {
                if !self.kept_releases.is_empty() {
                    if let Err(e) = self.open_batch(Instant::now()) {
                        tracing::error!(error = %e, "cannot seal kept release records at stop");
                    }
                    let kept = std::mem::take(&mut self.kept_releases);
                    if let Some(open) = self.open.as_mut() {
                        open.batch.add_releases(kept);
                    }
                }
                // Sealed even while failing: stop repeats its creates.
                let failing = self.failing.take();
                self.seal(SealReason::Requested);
                self.failing = failing;
            }
        }
        self.kept_deadline = None;
        if let Some(stopping) = self.stopping.as_mut() {
            stopping.final_sealed = true;
        }
    }

    /// Drops the open batch and the batches not started; keeps their release
    /// records and release callers for one last object.
    fn stop_durable(&mut self, stopped: &Error) {
        let mut carried = Vec::new();
        let mut drop_waiters = |waiters: Vec<Waiter>| {
            for waiter in waiters {
                match waiter {
                    Waiter::Release { .. } => carried.push(waiter),
                    other => other.fail(stopped.clone()),
                }
            }
        };
        let mut records = Vec::new();
        if let Some(open) = self.open.take() {
            drop_waiters(open.waiters);
            records.extend(open.batch.releases);
        }
        let mut kept = Vec::new();
        for sealed in self.pipeline.drain(..) {
            if sealed.state == FlightState::Waiting {
                drop_waiters(sealed.waiters);
                records.extend(sealed.releases);
            } else {
                kept.push(sealed);
            }
        }
        self.pipeline.extend(kept);
        self.keep_releases(records);
        if self.kept_releases.is_empty() {
            for waiter in carried {
                waiter.fail(stopped.clone());
            }
            return;
        }
        let kept = std::mem::take(&mut self.kept_releases);
        match self.open_batch(Instant::now()) {
            Ok(open) => {
                open.batch.add_releases(kept);
                open.waiters.extend(carried);
            }
            Err(e) => {
                self.lost.releases += kept.len() as u64;
                self.lost
                    .reason
                    .get_or_insert_with(|| format!("no last object could be opened: {e}"));
                return;
            }
        }
        self.seal(SealReason::Requested);
    }

    /// Whether the stop has nothing left to wait for.
    pub(super) fn stop_is_complete(&self) -> bool {
        self.stopping.is_some()
            && self.passes.is_empty()
            && self.probes.is_empty()
            && (self.poisoned.is_some()
                || (self.pipeline.is_empty()
                    && self.open.as_ref().is_none_or(|o| o.batch.is_empty())))
    }

    /// Called after the pipeline changed: nothing to do unless stopping.
    pub(super) fn after_pipeline_change(&mut self) {
        if self.poisoned.is_none() {
            self.start_creates();
        }
    }

    pub(super) fn finish_stop(&mut self) -> Result<(), Error> {
        let result = if self.lost.entries > 0 || self.lost.releases > 0 {
            Err(self.lost_error())
        } else {
            Ok(())
        };
        if let Err(e) = &result {
            tracing::error!(prefix = %self.prefix, error = %e, "stopped with a loss");
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
            | Command::Release { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Segments { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Deleted { reply, .. } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Regions { reply } => {
                let _ = reply.send(Err(stopped));
            }
            Command::Stop { reply } => {
                let _ = reply.send(result.clone());
            }
        }
    }
}
