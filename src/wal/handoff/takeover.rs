//! Handoff by following: a log takes a region over from another node's
//! log while that node still writes it, so that the switch copies only
//! the tail (rfcs/0009, "Handoff by following").
//!
//! [`Wal::take_over`] starts a [`Follower`] of the region on the other
//! node's prefix in a task of its own; the task keeps every entry it
//! yields (the other node's unflushed entries of the region: what its
//! memtable holds) and drops those the other node's durable flush marks
//! cover. [`Takeover::finish`], called once the other node stopped
//! appending to the region and flushed, catches up (polls at once until a
//! poll misses: every object that landed is taken in), then does what
//! [`Wal::import_region`] does with what it holds: raises this log's
//! watermark of the region to the floor (above every id of the region the
//! other log handed out) and appends the entries in order, in appends
//! that each fit one object. So the switch reads the other prefix only
//! for the objects that landed since the follower's last poll (no listing,
//! no open, no read of what it holds), and keeps every guarantee of
//! `import_region`: the same floor, the same crash windows, the same
//! repeat after a failure.
//!
//! Invariants: what the takeover holds is, in id order, every entry of
//! the region above `from` that the follower yielded and no flush mark or
//! release of the other log covers; the floor is at or above every id of
//! the region the follower passed (yielded, hidden, or skipped in a hole)
//! and every id this log acknowledged for it.

use std::collections::VecDeque;

use tokio::sync::{oneshot, watch};

use crate::error::Error;
use crate::format::RELEASE_REGION;
use crate::{EntryId, RegionId};

use crate::wal::handoff::Chunk;
use crate::wal::read::follow::{Event, Follower};
use crate::wal::{Entry, Imported, Wal, WalReader};

/// Where a [`Takeover`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakeoverProgress {
    /// The last id of the region the follower yielded (`from - 1` until
    /// one is).
    pub position: EntryId,
    /// Entries held for the switch.
    pub entries: u64,
    /// Their payload bytes: memory the takeover holds.
    pub bytes: u64,
}

/// What the follower's task hands [`Takeover::finish`].
#[derive(Debug)]
struct Held {
    entries: VecDeque<Entry>,
    /// Every id of the region the follower passed lies at or below this.
    reached: EntryId,
}

type FinishReply = oneshot::Sender<Result<Held, Error>>;

/// A region being taken over from another node's log by following it
/// (from [`Wal::take_over`]). Dropping it abandons the takeover: nothing
/// was appended to this log.
#[derive(Debug)]
pub struct Takeover {
    wal: Wal,
    region: RegionId,
    progress: watch::Receiver<TakeoverProgress>,
    finish: Option<oneshot::Sender<FinishReply>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Takeover {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Wal {
    /// Starts taking `region` over from another node's log by following
    /// it: from now on the entries of `region` with ids at or above `from`
    /// (the other node's flushed id plus one, as for
    /// [`import_region`](Self::import_region)) are followed on
    /// `from_log`'s prefix while the other node still writes them, and
    /// held in memory until [`Takeover::finish`] appends them to this log.
    /// Nothing is appended before that. Must be called inside a tokio
    /// runtime (the follower runs in a task of its own).
    ///
    /// It holds what the other node has not flushed of the region (its
    /// durable flush marks drop what they cover): an engine that cannot
    /// spare that memory uses [`import_region`](Self::import_region).
    ///
    /// A region `from_log` knows released is refused with
    /// [`Error::RegionReleased`]; one released while it is followed makes
    /// [`Takeover::finish`] return that error: there is nothing to move.
    pub fn take_over(
        &self,
        from_log: &WalReader,
        region: RegionId,
        from: EntryId,
    ) -> Result<Takeover, Error> {
        if region == RELEASE_REGION {
            return Err(Error::invalid(format!(
                "region {region} (u64::MAX) is reserved for release records"
            )));
        }
        // Released there: nothing to move (rfcs/0005).
        if from_log.is_released(region) {
            return Err(Error::RegionReleased { region });
        }
        let start = from.saturating_sub(1);
        let follower = from_log.follow([(region, start)]);
        let (progress_tx, progress) = watch::channel(TakeoverProgress {
            position: start,
            ..TakeoverProgress::default()
        });
        let (finish, asked) = oneshot::channel();
        let task = tokio::spawn(hold(follower, region, progress_tx, asked));
        Ok(Takeover {
            wal: self.clone(),
            region,
            progress,
            finish: Some(finish),
            task,
        })
    }
}

impl Takeover {
    /// The region being taken over.
    pub fn region(&self) -> RegionId {
        self.region
    }

    /// Where the follower is and what it holds.
    pub fn progress(&self) -> TakeoverProgress {
        *self.progress.borrow()
    }

    /// The switch: call it once the other node stopped appending to the
    /// region and its `flush()` returned (or, if it is gone, once its
    /// prefix was opened by a new `Wal`, which fences it). Takes in every
    /// object of the other log that landed by now, then appends what it
    /// holds to this log with new ids above the floor, and returns once
    /// they are durable and indexed, as
    /// [`import_region`](Wal::import_region) does (the same `Imported`, to
    /// record with the move; the same repeat after a failure: a new
    /// takeover, or an `import_region`, whose floor hides the copies a
    /// failed switch left).
    ///
    /// A failure of the follower (a storage error that does not pass, a
    /// damaged object under `DamagePolicy::Fail`) is returned here, and so
    /// is [`Error::RegionReleased`] when the other node released the region
    /// (nothing is appended).
    pub async fn finish(mut self) -> Result<Imported, Error> {
        let (reply, answer) = oneshot::channel();
        let gone = || Error::Stopped {
            detail: Some("the takeover's follower ended".into()),
        };
        self.finish
            .take()
            .ok_or_else(gone)?
            .send(reply)
            .map_err(|_| gone())?;
        let held = answer.await.map_err(|_| gone())??;
        let (wal, region) = (&self.wal, self.region);
        let floor = held.reached.max(wal.latest_entry_id(region));
        let mut imported = wal.raise_floor(region, floor).await?;
        // The appends are sent at once, in order (an append's first poll
        // hands it to the actor, which admits appends in the order they
        // come: ids and objects keep the region's order), so that their
        // creates overlap up to `max_inflight_creates`; then awaited in
        // order.
        let mut chunk = Chunk::new(region, wal.handle.batch_bytes);
        let mut appends = Vec::new();
        let mut entries = held.entries.into_iter();
        loop {
            let next = entries.next();
            let full = next.as_ref().is_some_and(|e| !chunk.takes(&e.data));
            if full || (next.is_none() && !chunk.is_empty()) {
                let mut append = Box::pin(wal.append(chunk.take()));
                let sent = futures::poll!(append.as_mut());
                appends.push((append, sent));
            }
            let Some(entry) = next else { break };
            chunk.push(entry.data);
        }
        for (append, sent) in appends {
            let ids = match sent {
                std::task::Poll::Ready(ids) => ids?,
                std::task::Poll::Pending => append.await?,
            };
            imported.appended(&ids);
        }
        if imported.entries > 0 {
            wal.wait_durable(region, imported.last_id).await?;
        }
        tracing::info!(
            region,
            floor,
            entries = imported.entries,
            last_id = imported.last_id,
            "took a region over by following"
        );
        Ok(imported)
    }
}

/// The takeover's task: follows, holds, and answers the switch.
async fn hold(
    mut follower: Follower,
    region: RegionId,
    progress: watch::Sender<TakeoverProgress>,
    mut asked: oneshot::Receiver<FinishReply>,
) {
    let mut held: VecDeque<Entry> = VecDeque::new();
    let mut bytes = 0u64;
    let mut failed: Option<Error> = None;
    let mut finishing: Option<(u64, FinishReply)> = None;
    loop {
        let event = tokio::select! {
            ask = &mut asked, if finishing.is_none() => {
                let Ok(reply) = ask else { return };
                if let Some(error) = failed.take() {
                    let _ = reply.send(Err(error));
                    return;
                }
                finishing = Some((follower.catch_up(), reply));
                continue;
            }
            event = futures::future::poll_fn(|cx| follower.poll_event(cx)), if failed.is_none() => event,
            else => return,
        };
        match event {
            Some(Event::Item(Ok(entry))) => {
                bytes += entry.data.len() as u64;
                held.push_back(entry);
            }
            // Released on the other node (also one the follower learns
            // after a hole): nothing to move; `finish` says so.
            Some(Event::Item(Err(error))) => failed = Some(error),
            Some(Event::CaughtUp(token)) => {
                if let Some((_, reply)) = finishing.take_if(|(t, _)| *t == token) {
                    let _ = reply.send(Ok(Held {
                        entries: std::mem::take(&mut held),
                        reached: follower.reached(region),
                    }));
                    return;
                }
            }
            None => {
                failed.get_or_insert_with(|| Error::Stopped {
                    detail: Some("the takeover's follower ended".into()),
                });
            }
        }
        // What the other node flushed since is not imported.
        let hidden = follower.hidden_through(region);
        while held.front().is_some_and(|e| e.id <= hidden) {
            if let Some(e) = held.pop_front() {
                bytes -= e.data.len() as u64;
            }
        }
        if let Some(error) = failed.clone() {
            if let Some((_, reply)) = finishing.take() {
                let _ = reply.send(Err(error));
                return;
            }
        }
        let position = follower
            .positions()
            .first()
            .map_or(progress.borrow().position, |p| p.1);
        progress.send_replace(TakeoverProgress {
            position,
            entries: held.len() as u64,
            bytes,
        });
    }
}
