//! The held step, and the second opener.
//!
//! The held step: creates held at a point of the fault wrapper while two
//! appends (and in enqueued mode their `wait_durable`) run and a read goes
//! on; then the creates are let go (in order, newest first, or the first
//! failing), or a stop runs while each held create fails for good (once it
//! returns, nothing of the store may stay in flight), or the store crashes
//! with them held and a reopen is checked.
//!
//! The crash is what pins a barrier to the truth: an enqueued
//! `wait_durable` that answered `Ok` while its create was still held (and
//! then never landed) shows up as a promised entry missing after the
//! reopen.
//!
//! The second opener: a newer store opens the prefix while this one
//! lives. It must replay everything promised; the older one, fenced, may
//! refuse in any way but must acknowledge nothing more (two appends,
//! `races::check_fenced_store`).

use std::time::Duration;

use objwal::storage::fault::HoldPoint;
use objwal::storage::StorageErrorKind;
use objwal::{Error, RegionId, Wal};
use tokio::sync::mpsc;

use super::driver::{read_all, within, Call, Driver};
use super::steps::Letting;
use super::steps::REGIONS;

/// What a held step's task answered, in order.
enum Answer {
    Appended(usize, Result<Vec<u64>, Error>),
    Waited(u64, Result<(), Error>),
    Released(RegionId, Result<(), Error>),
}

/// Release `region` (the second task, instead of an append).
async fn release(wal: Wal, region: RegionId, answers: mpsc::UnboundedSender<Answer>) {
    let released = wal.release_region(region).await;
    let _ = answers.send(Answer::Released(region, released));
}

/// Append `batch` (task `task`), and in enqueued mode wait for it.
async fn run(
    wal: Wal,
    task: usize,
    batch: Vec<(RegionId, bytes::Bytes)>,
    enqueued: bool,
    answers: mpsc::UnboundedSender<Answer>,
) {
    let region = batch.first().map_or(0, |(r, _)| *r);
    let appended = wal.append(batch).await;
    let id = appended.as_ref().ok().and_then(|ids| ids.first().copied());
    let _ = answers.send(Answer::Appended(task, appended));
    if let (Some(id), true) = (id, enqueued) {
        let waited = wal.wait_durable(region, id).await;
        let _ = answers.send(Answer::Waited(id, waited));
    }
}

impl Driver {
    /// An append through handle 0 while creates may be held: it answers
    /// on admission in enqueued mode, unless the backlog's bound makes it
    /// wait for a create; then (after a second of virtual time) the held
    /// creates are let go and it is awaited. Also says whether the
    /// creates are still held.
    pub(super) async fn append_while_held(
        &mut self,
        batch: Vec<(RegionId, bytes::Bytes)>,
    ) -> Result<(Result<Vec<u64>, Error>, bool), String> {
        let wal = self.wal(0).clone();
        let mut append = tokio::spawn(async move { wal.append(batch).await });
        let (joined, holding) =
            match tokio::time::timeout(Duration::from_secs(1), &mut append).await {
                Ok(joined) => (joined, true),
                Err(_) => {
                    self.stats
                        .bump("appends that waited behind held creates", 1);
                    self.faulty.hold_creates_at(None);
                    self.faulty.release_all();
                    (
                        within("an append behind held creates", append).await?,
                        false,
                    )
                }
            };
        let appended = joined.map_err(|e| format!("the append's task failed: {e}"))?;
        Ok((appended, holding))
    }

    /// Enqueued mode: an entry admitted while creates are held, so not
    /// durable, is handed to `obsolete`; the store clamps the mark to the
    /// region's durable id (API `obsolete`, lib.rs E4), which is below the
    /// entry. Once the creates go and the entry is durable, it must read.
    pub(super) async fn obsolete_unlanded(
        &mut self,
        region: RegionId,
        faulty: bool,
    ) -> Result<(), String> {
        if !self.model.enqueued || self.stopped.is_some() || self.model.released_now(region) {
            return Ok(());
        }
        let floor = self.model.floor();
        self.faulty.hold_creates_at(Some(HoldPoint::BeforeInner));
        let (keys, batch) = self.register(&[(region, 10)]);
        let (appended, held) = self.append_while_held(batch).await?;
        let id = appended.as_ref().ok().and_then(|ids| ids.first().copied());
        let marked = match id {
            Some(id) => Some(
                within(
                    "obsolete of an unlanded entry",
                    self.wal(0).obsolete(region, id),
                )
                .await?,
            ),
            None => None,
        };
        self.faulty.hold_creates_at(None);
        self.faulty.release_all();
        self.append_answered(&keys, appended, faulty, &floor)?;
        let (Some(id), Some(marked)) = (id, marked) else {
            return Ok(());
        };
        if self.answered(Call::Obsolete, &marked, faulty)? {
            // At most the ids below the entry are hidden (what the model
            // knows of the region below it), and only while the creates
            // were still held at the call.
            let through = if held {
                self.model.known_below(region, id)
            } else {
                Some(id)
            };
            if let Some(through) = through {
                self.model.obsoleted(region, through);
            }
            self.stats.bump("marks over unlanded entries", 1);
        }
        let waited = within("wait_durable", self.wal(1).wait_durable(region, id)).await?;
        self.wait_answered(id, waited, faulty)?;
        let (promised, _) = self.model.snapshot();
        let read = within(
            "a read after a clamped mark",
            read_all(self.wal(2), region, 0),
        )
        .await?;
        self.read_answered(2, region, 0, read, faulty, &promised)
    }

    /// A second store opens the prefix while this one lives: it fences
    /// this one, which may then acknowledge nothing; the second replays
    /// everything promised and becomes the store of later steps.
    pub(super) async fn second_opener(&mut self, faulty: bool) -> Result<(), String> {
        let older = std::mem::take(&mut self.handles);
        let was_stopped = self.stopped.is_some();
        let newer = self.open(faulty).await?;
        self.check_restart(newer).await?;
        let Some(old) = older.first().filter(|_| !was_stopped) else {
            return Ok(());
        };
        let region = (0..REGIONS)
            .find(|r| !self.model.released_now(*r))
            .unwrap_or(0);
        let old = old.clone();
        self.check_fenced_store(&old, region).await
    }

    /// A stop while creates are held, each held create of this store
    /// failing for good as it comes: the stop gives up after
    /// `stop_attempts` (`Lost`), or gets through. Once it returned, the
    /// store has nothing in flight (a stop that gave up once left the
    /// creates of its backlog running, and they landed later).
    async fn stop_while_held(&mut self) -> Result<(), String> {
        let ours = format!("{}/", super::driver::PREFIX);
        let failer = tokio::spawn({
            let faulty = self.faulty.clone();
            let ours = ours.clone();
            async move {
                loop {
                    if let Some(key) = faulty.held().into_iter().find(|k| k.starts_with(&ours)) {
                        faulty.release_with_error(&key, StorageErrorKind::Permanent);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
        let stopped = self.stop(true).await;
        failer.abort();
        stopped?;
        self.stats.bump("stops while creates were held", 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let left: Vec<String> = self
            .faulty
            .held()
            .into_iter()
            .filter(|k| k.starts_with(&ours))
            .collect();
        self.faulty.hold_creates_at(None);
        self.faulty.release_all();
        if !left.is_empty() {
            return Err(format!(
                "the stop returned {:?}, yet its store still has creates in flight: {left:?}",
                self.stopped
            ));
        }
        Ok(())
    }

    /// Lets the held creates go: in order, newest first, or the first
    /// failing.
    fn let_held_go(&self, letting: Letting) {
        self.faulty.hold_creates_at(None);
        let mut held = self.faulty.held();
        if letting == Letting::Reverse {
            held.reverse();
        }
        for (i, key) in held.iter().enumerate() {
            if i == 0 && letting == Letting::FailFirst {
                self.faulty
                    .release_with_error(key, StorageErrorKind::Transient);
            } else {
                self.faulty.release(key);
            }
        }
        self.faulty.release_all();
    }

    pub(super) async fn held(
        &mut self,
        after_landed: bool,
        letting: Letting,
        crash: bool,
        release_second: bool,
        (x, y): (RegionId, RegionId),
    ) -> Result<(), String> {
        if self.stopped.is_some() || self.model.released_now(x) || self.model.released_now(y) {
            return Ok(());
        }
        let (promised, _) = self.model.snapshot();
        let floor = self.model.floor();
        let point = if after_landed {
            HoldPoint::AfterLanded
        } else {
            HoldPoint::BeforeInner
        };
        self.faulty.hold_creates_at(Some(point));
        let keys = [self.register(&[(x, 12)]), self.register(&[(y, 12)])];
        let enqueued = self.model.enqueued;
        let (tx, mut answers) = mpsc::unbounded_channel();
        let first = tokio::spawn(run(
            self.wal(0).clone(),
            0,
            keys[0].1.clone(),
            enqueued,
            tx.clone(),
        ));
        within("a held create", self.faulty.wait_held(1)).await?;
        let read = within("a read while creates are held", read_all(self.wal(2), x, 0)).await?;
        self.read_answered(2, x, 0, read, false, &promised)?;
        let second = if release_second {
            tokio::spawn(release(self.wal(1).clone(), y, tx))
        } else {
            tokio::spawn(run(self.wal(1).clone(), 1, keys[1].1.clone(), enqueued, tx))
        };
        // Virtual time: the store runs until it is idle (the second call
        // joins a create of its own, or waits behind the held one).
        tokio::time::sleep(Duration::from_millis(50)).await;
        if crash {
            first.abort();
            second.abort();
            let _ = first.await;
            let _ = second.await;
            self.handles.clear();
            // The actor ends with its last handle and drops its creates.
            // (The other log of the store, alive, may hold creates too:
            // they are let go.)
            let ours = format!("{}/", super::driver::PREFIX);
            within("the crashed store dropping its held creates", async {
                while self.faulty.held().iter().any(|k| k.starts_with(&ours)) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await?;
            self.faulty.hold_creates_at(None);
            self.faulty.release_all();
        } else {
            if letting == Letting::StopFailing {
                self.stop_while_held().await?;
            } else {
                self.let_held_go(letting);
            }
            within("the first held append", first)
                .await?
                .map_err(|e| e.to_string())?;
            within("the second held append", second)
                .await?
                .map_err(|e| e.to_string())?;
        }
        let failing = matches!(letting, Letting::FailFirst | Letting::StopFailing) && !crash;
        // Under `StopFailing` the calls were made before the stop: their
        // answers are judged as such.
        let stopped = if letting == Letting::StopFailing && !crash {
            self.stopped.take()
        } else {
            None
        };
        let mut appended = [None, None];
        let mut released = false;
        let mut all = Vec::new();
        while let Ok(answer) = answers.try_recv() {
            all.push(answer);
        }
        // Appends were admitted before the release was (if they were at
        // all): their answers first.
        all.sort_by_key(|a| match a {
            Answer::Appended(..) => 0,
            Answer::Waited(..) => 1,
            Answer::Released(..) => 2,
        });
        for answer in all {
            match answer {
                // An append still waiting for backlog room when the stop
                // came is dropped by it, never admitted (`Stopped`, "the
                // request was dropped by stop"): found at seed 5 with a
                // tight backlog.
                Answer::Appended(task, Err(Error::Stopped { .. }))
                    if letting == Letting::StopFailing && !crash =>
                {
                    self.model.refuse(&keys[task].0);
                    appended[task] = Some(false);
                }
                Answer::Appended(task, result) => {
                    self.append_answered(&keys[task].0, result.clone(), failing, &floor)?;
                    appended[task] = Some(result.is_ok());
                }
                Answer::Waited(id, result) => self.wait_answered(id, result, failing)?,
                Answer::Released(region, result) => {
                    released = true;
                    self.release_answered(region, result, failing)?;
                }
            }
        }
        if stopped.is_some() {
            self.stopped = stopped;
        }
        if release_second {
            // The second append was never made.
            self.model.refuse(&keys[1].0);
            if !released {
                // Cut short by the crash: in force in memory, maybe durable.
                self.model.release_answered(y, false, true);
            }
        }
        if crash {
            for (task, (task_keys, _)) in keys.iter().enumerate() {
                if appended[task].is_none() {
                    self.model.unanswered(task_keys);
                }
            }
            let wal = self.open(false).await?;
            return self.check_restart(wal).await;
        }
        self.settle().await
    }
}
