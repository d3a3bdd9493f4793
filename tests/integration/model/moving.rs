//! A move by following (rfcs/0009 decision 6, issue 30 items 1, 2 and 11)
//! in the model: the store under test takes a region over from the other
//! log (`Wal::take_over`) while the other log still writes it and its
//! collection deletes the objects its engine flushed; then the switch (the
//! other log stops writing the region and flushes, `Takeover::finish`),
//! and the other log releases the region.
//!
//! What must hold: `finish` answers `Ok` only with every entry the other
//! log acknowledged for the region above what its engine flushed, each
//! once, in its order, with ids above a floor at or above every id the
//! other log acknowledged for it (`Driver::check_brought`, the oracle of
//! `import_region`); where the follower could not read an entry (a
//! segment corrupted in transit on both reads) it answers
//! `Error::Incomplete` and appends nothing, and the move is then repeated
//! by `import_region` with the faults cleared, which must bring
//! everything. A region the other log released is refused with
//! `RegionReleased`. Under an armed fault any documented error may come;
//! the move is then repeated the same way.
//!
//! The history of issue 30 item 1 is drawn on purpose: with a slow
//! follower (it waits seconds after a poll that missed), the other log
//! writes an object of a scratch region at the key the follower waits
//! for, flushes that region (its collection then deletes the object),
//! and lands the region's next entry at the key after: a catch-up that
//! took the emptied key for the end of the log would move nothing.

use std::time::Duration;

use bytes::Bytes;
use objwal::{Config, Error, RegionId, WalReader};

use super::driver::{within, Call, Driver};
use super::surface::SOURCE;

/// A region of the other log the model never reads: objects its engine
/// flushes at once, for its collection to delete under the follower.
const SCRATCH: RegionId = 1000;

/// How a move is drawn (`Op::Move`).
#[derive(Debug, Clone, Copy)]
pub struct MoveShape {
    /// Rounds of writes on the other log while it is followed.
    pub rounds: usize,
    /// The other log's engine flushes the region before the takeover
    /// starts (its `from` is the flushed id plus one).
    pub flushed_first: bool,
    /// It flushes the region again in the middle of the rounds: those
    /// entries need not move.
    pub flush_mid: bool,
    /// The next two reads of the other log's objects after the takeover
    /// starts are corrupted in transit (with no other fault armed).
    pub corrupt: bool,
    /// The follower waits 5 s after a poll that missed.
    pub slow: bool,
}

impl Driver {
    /// See the module documentation.
    pub(super) async fn move_by_following(
        &mut self,
        region: RegionId,
        shape: MoveShape,
        faulty: bool,
    ) -> Result<(), String> {
        if self.stopped.is_some()
            || self.model.released_now(region)
            || self.source_releases_to_repeat.contains(&region)
            || self.imports_to_repeat.contains(&region)
        {
            return Ok(());
        }
        let corrupt = shape.corrupt && !faulty;
        if self.source(faulty).await?.is_none() {
            return Ok(());
        }
        let released_there = self
            .source
            .as_ref()
            .is_some_and(|s| s.released.contains(&region));
        if !released_there && shape.flushed_first {
            self.flush_on_source(region).await?;
        }
        let from = self
            .source
            .as_ref()
            .and_then(|s| s.flushed.get(&region))
            .map_or(0, |id| id + 1);
        let reader_config = if shape.slow {
            Config {
                follow_interval: Duration::from_secs(5),
                follow_max_interval: Duration::from_secs(5),
                ..self.config.clone()
            }
        } else {
            self.config.clone()
        };
        let opened = within(
            "WalReader::open of the other log",
            WalReader::open(self.storage(), SOURCE, reader_config),
        )
        .await?;
        let reader = match opened {
            Ok(reader) => reader,
            Err(_) if faulty => return Ok(()),
            Err(e) => return Err(format!("a reader of the other log did not open: {e}")),
        };
        let takeover = match self.wal(0).take_over(&reader, region, from) {
            Err(Error::RegionReleased { region: r }) if r == region && released_there => {
                self.stats
                    .bump("moves of a region released there refused", 1);
                return Ok(());
            }
            Err(e) => {
                return Err(format!(
                    "take_over of region {region} (released there: {released_there}): {e}"
                ))
            }
            Ok(_) if released_there => {
                return Err(format!(
                    "take_over of region {region}, released on the other log, was not refused"
                ))
            }
            Ok(takeover) => takeover,
        };
        let latest_before = self.wal(0).latest_entry_id(region);
        if corrupt {
            self.stats.bump("moves through corrupted reads", 1);
            self.faulty
                .corrupt_next_reads(&format!("{SOURCE}/objects/"), 2);
        }
        if shape.slow {
            self.stats.bump("moves with a slow follower", 1);
        }
        // The follower's first poll (of the key after the other log's
        // tip) happens now, before anything lands there.
        let tick = self.config.flush_interval.max(Duration::from_millis(10));
        tokio::time::sleep(Duration::from_millis(1)).await;
        for round in 0..shape.rounds {
            // The first object the follower reads is the region's when its
            // reads are corrupted: the hole then holds an entry to move.
            if !(corrupt && round == 0) {
                self.scratch_on_source().await?;
            }
            // Entries of a few hundred bytes: a read corrupted in the
            // middle of an object hits a segment, not its small footer.
            self.source_append_sized(region, 1 + round % 2, 400, faulty)
                .await?;
            if shape.flush_mid && round == shape.rounds / 2 {
                self.flush_on_source(region).await?;
            }
            // Time for the other log's collection (and a busy follower).
            tokio::time::sleep(tick * 3).await;
        }
        // The switch: the other log stops writing the region and flushes.
        self.flush_source(faulty).await?;
        let holes_before = takeover.holes().len();
        let finished = within("Takeover::finish", takeover.finish()).await?;
        if corrupt {
            self.clear_faults();
        }
        let faulty = faulty || corrupt;
        match finished {
            Ok(imported) => {
                if self.stopped.is_some() {
                    return Err("a move on a stopped store answered Ok".into());
                }
                self.check_brought(region, &imported, "a move by following")
                    .await?;
                self.stats.bump("moves by following", 1);
                self.stats.bump("entries moved", imported.entries);
                if holes_before > 0 {
                    self.stats
                        .bump("moves whose holes the other log flushed", 1);
                }
                // The handoff's last step: the region is released there.
                if faulty {
                    self.source_releases_to_repeat.insert(region);
                } else {
                    self.release_on_source(region).await?;
                }
                Ok(())
            }
            Err(e) => {
                if let Error::Incomplete { .. } = e {
                    // Nothing may be appended around a hole.
                    let latest = self.wal(0).latest_entry_id(region);
                    if latest != latest_before {
                        return Err(format!(
                            "a move answered {e} but moved region {region}'s latest id from {latest_before} to {latest}"
                        ));
                    }
                    self.stats.bump("moves incomplete (a hole)", 1);
                } else {
                    self.stats.bump("moves failed", 1);
                }
                if !faulty {
                    return Err(format!(
                        "a move by following failed with no fault armed: {e}"
                    ));
                }
                self.expect_error(Call::Import, &e, faulty, &[region])?;
                // A switch that failed may have raised the floor and
                // appended some copies: the repeat's floor hides them.
                let floor = self
                    .source
                    .as_ref()
                    .map_or(0, |s| s.wal.latest_entry_id(region))
                    .max(self.wal(0).latest_entry_id(region));
                self.model.maybe_obsoleted(region, floor);
                let keys: Vec<_> = self
                    .source
                    .as_ref()
                    .and_then(|s| s.entries.get(&region))
                    .into_iter()
                    .flatten()
                    .map(|e| e.key)
                    .collect();
                self.model.import_failed(region, keys);
                // Repeated by `import_region` once the faults are cleared.
                self.imports_to_repeat.insert(region);
                if corrupt {
                    self.repeat_imports().await?;
                }
                Ok(())
            }
        }
    }

    /// The other log's `flush` before a switch. It may still be failing
    /// after earlier faults (it backs off): with no fault armed it is
    /// repeated until it returns `Ok`; under a fault one failure is let
    /// be (the switch then may or may not take in its last objects).
    async fn flush_source(&mut self, faulty: bool) -> Result<(), String> {
        let Some(source) = self.source.as_ref() else {
            return Ok(());
        };
        let mut last = None;
        for _ in 0..20 {
            match within("flush of the other log", source.wal.flush()).await? {
                Ok(()) => return Ok(()),
                Err(_) if faulty => return Ok(()),
                Err(e) if e.is_retryable() => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(format!("the other log's flush before a switch: {e}")),
            }
        }
        Err(format!(
            "the other log's flush before a switch kept failing with no fault armed: {last:?}"
        ))
    }

    /// The other log's engine flushed what it holds of `region`:
    /// `obsolete` of its newest acknowledged id there.
    async fn flush_on_source(&mut self, region: RegionId) -> Result<(), String> {
        let Some(source) = self.source.as_mut() else {
            return Ok(());
        };
        let flushed = source.flushed.get(&region).copied().unwrap_or(0);
        let Some(newest) = source.newest(region).filter(|id| *id > flushed) else {
            return Ok(());
        };
        let marked = within(
            "obsolete on the other log",
            source.wal.obsolete(region, newest),
        )
        .await?;
        if marked.is_ok() {
            source.flushed.insert(region, newest);
        }
        Ok(())
    }

    /// An object of the scratch region on the other log, flushed at once:
    /// its collection deletes the object soon after.
    async fn scratch_on_source(&mut self) -> Result<(), String> {
        let Some(source) = self.source.as_ref() else {
            return Ok(());
        };
        let appended = within(
            "an append to the other log",
            source
                .wal
                .append(vec![(SCRATCH, Bytes::from_static(b"scratch"))]),
        )
        .await?;
        if let Ok(ids) = appended {
            if let Some(id) = ids.first() {
                let _ = within(
                    "obsolete on the other log",
                    source.wal.obsolete(SCRATCH, *id),
                )
                .await?;
            }
        }
        Ok(())
    }
}
