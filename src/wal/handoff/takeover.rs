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
//! poll misses, then lists once: a key the other node's collection
//! emptied is not the end of its log; every object that landed is taken
//! in), refuses to copy around a hole ([`Error::Incomplete`], appending
//! nothing), then does what [`Wal::import_region`] does with what it
//! holds: raises this log's watermark of the region to the floor (above
//! every id of the region the other log handed out) and appends the
//! entries in order, in appends that each fit one object. So the switch
//! reads the other prefix only for the objects that landed since the
//! follower's last poll (one listing, no open, no read of what it holds),
//! and keeps every guarantee of `import_region`: the same floor,
//! `Incomplete` where anything is missing, the same crash windows, the
//! same repeat after a failure.
//!
//! Invariants: what the takeover holds is, in id order, every entry of
//! the region above `from` that the follower yielded and no flush mark or
//! release of the other log covers; the floor is at or above every id of
//! the region the follower passed (yielded, hidden, or skipped in a hole)
//! and every id this log acknowledged for it; `finish` appends only when
//! no entry at or above `from` that the other node has not flushed lies in
//! a hole the follower could not read (entries of objects the other
//! node's collection deleted were flushed there: not missing).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use crate::error::Error;
use crate::format::RELEASE_REGION;
use crate::{EntryId, RegionId};

use crate::wal::handoff::Chunk;
use crate::wal::read::follow::{Event, Follower, HoleBook};
use crate::wal::{Entry, Hole, Imported, Wal, WalReader};

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
    /// The highest id of the region the other node's flush marks or
    /// release hide.
    hidden: EntryId,
}

type FinishReply = oneshot::Sender<Result<Held, Error>>;

/// A region being taken over from another node's log by following it
/// (from [`Wal::take_over`]). Dropping it abandons the takeover: nothing
/// was appended to this log.
#[derive(Debug)]
pub struct Takeover {
    wal: Wal,
    region: RegionId,
    /// The first id taken over.
    from: EntryId,
    /// The follower's holes, by cause.
    book: HoleBook,
    /// The highest id of the region the other node's flush marks or
    /// release hide, as the follower's task last saw.
    hidden: Arc<AtomicU64>,
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
        let book = follower.hole_book();
        let hidden = Arc::new(AtomicU64::new(0));
        let (progress_tx, progress) = watch::channel(TakeoverProgress {
            position: start,
            ..TakeoverProgress::default()
        });
        let (finish, asked) = oneshot::channel();
        let task = tokio::spawn(hold(follower, region, progress_tx, hidden.clone(), asked));
        Ok(Takeover {
            wal: self.clone(),
            region,
            from: from.max(1),
            book,
            hidden,
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

    /// What the move misses so far: the region's entries at or above
    /// `from` that the follower could not read (a segment still corrupted
    /// after a second read, a damaged object, also one the reader's open
    /// left out) and that the other node has not flushed. While there is
    /// one, [`finish`](Self::finish) returns [`Error::Incomplete`] and
    /// appends nothing: the other node releases the region after the
    /// switch, so nothing may be copied around a hole. (Entries of objects
    /// the other node's collection deleted before the follower read them
    /// are not missing: they were flushed there.)
    pub fn holes(&self) -> Vec<Hole> {
        missing(
            &self.book,
            self.region,
            self.from,
            self.hidden.load(Ordering::Relaxed),
        )
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
    /// (nothing is appended). Where anything is missing (see
    /// [`holes`](Self::holes)) it returns [`Error::Incomplete`] naming the
    /// first hole, and appends nothing: as `import_region`, a move never
    /// copies around a hole, because the other node releases the region
    /// next.
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
        // The other node releases the region next: nothing may be copied
        // around an entry the follower could not read (as
        // `import_region`), and nothing is appended then.
        if let Some(hole) = missing(&self.book, region, self.from, held.hidden)
            .into_iter()
            .next()
        {
            tracing::error!(region, key = %hole.key, first_id = hole.first_id,
                last_id = hole.last_id, "a takeover misses entries it could not read: not moved");
            return Err(Error::Incomplete {
                region,
                key: hole.key,
                first_id: hole.first_id,
                last_id: hole.last_id,
            });
        }
        // Raised to every id of the region this log handed out, too.
        let mut imported = wal.raise_floor(region, held.reached).await?;
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
            floor = imported.floor,
            entries = imported.entries,
            last_id = imported.last_id,
            "took a region over by following"
        );
        Ok(imported)
    }
}

/// The holes of `region` that a move from `from` may not go around:
/// unreadable entries at or above `from` that the other node's flush marks
/// (or release) through `hidden` do not cover.
fn missing(book: &HoleBook, region: RegionId, from: EntryId, hidden: EntryId) -> Vec<Hole> {
    book.unreadable(region)
        .into_iter()
        .filter(|h| h.last_id >= from && h.last_id > hidden)
        .collect()
}

/// The takeover's task: follows, holds, and answers the switch.
async fn hold(
    mut follower: Follower,
    region: RegionId,
    progress: watch::Sender<TakeoverProgress>,
    hidden_seen: Arc<AtomicU64>,
    mut asked: oneshot::Receiver<FinishReply>,
) {
    let mut held: VecDeque<Entry> = VecDeque::new();
    let mut bytes = 0u64;
    let mut failed: Option<Error> = None;
    let mut finishing: Option<(u64, FinishReply)> = None;
    loop {
        // Biased: the one request to finish goes before the stream's
        // next event, the same way every run.
        let event = tokio::select! {
            biased;
            ask = &mut asked, if finishing.is_none() => {
                let Ok(reply) = ask else { return };
                if let Some(error) = failed.take() {
                    let _ = reply.send(Err(error));
                    return;
                }
                finishing = Some((follower.ask_catch_up(), reply));
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
                        hidden: follower.hidden_through(region),
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
        hidden_seen.fetch_max(hidden, Ordering::Relaxed);
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
