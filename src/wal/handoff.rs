//! Region handoff: a log takes a region over from another node's log.
//!
//! With every node's log in one bucket a region can move: node B replays
//! region R's unflushed entries from node A's prefix through a
//! [`WalReader`] (which never fences A) and appends them to its own log
//! with new ids above every id A handed out for R, so the region's ids
//! keep increasing across the move. The protocol around the call (who
//! stops writing R, who releases it, what an engine records) and the crash
//! windows of each step are rfcs/0009.
//!
//! Invariants of [`Wal::import_region`]: every entry it appends has an id
//! above [`Imported::floor`], which is at or above every id of R the other
//! log had indexed or released when the reader opened, `from - 1` (the
//! other engine's flushed id, whose objects its collection may have
//! deleted), and every id of R this log handed out before (also to a batch
//! answered as failed, which may land yet); the watermark of R here is
//! raised to the floor (so copies of an earlier, failed import are hidden,
//! and the next sequence lies above the floor: one marker, see `reach.rs`); entries are
//! appended in their order, in appends that each fit one object (their
//! framed size, payloads plus [`ENTRY_OVERHEAD`] each and the region's
//! footer entry, within `max_batch_bytes`, and at most [`MAX_POSITION`]
//! entries: the positions of one object), or of one entry larger than
//! that; the call returns once all of them are durable and indexed, in both
//! ack modes.

pub(crate) mod takeover;
use futures::StreamExt;

use bytes::Bytes;

use crate::error::Error;
use crate::format::{ENTRY_OVERHEAD, FOOTER_ENTRY_LEN, MAX_POSITION, RELEASE_REGION};
use crate::{EntryId, RegionId};

use super::write::actor::Command;
use super::{Wal, WalReader};

/// What [`Wal::import_region`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Imported {
    /// The region.
    pub region: RegionId,
    /// Every id of the region in this log at or below this one is not part
    /// of its history here: ids of the other log, copies of an earlier
    /// import that failed, an earlier stay of the region here. The engine
    /// records it with the move, and after each restart hands it to
    /// `obsolete` and replays the region from the next id.
    pub floor: EntryId,
    /// The first new id (0 when nothing was imported).
    pub first_id: EntryId,
    /// The last new id (0 when nothing was imported): the region's entries
    /// the engine appends from now on come after it.
    pub last_id: EntryId,
    /// Entries imported.
    pub entries: u64,
}

impl Imported {
    /// Counts the ids of one append of the import.
    fn appended(&mut self, ids: &[EntryId]) {
        if self.first_id == 0 {
            self.first_id = ids.first().copied().unwrap_or(0);
        }
        self.last_id = ids.last().copied().unwrap_or(self.last_id);
        self.entries += ids.len() as u64;
    }
}

impl Wal {
    /// An import's first step: hides what this log holds of `region`
    /// through `floor`, or through the last id it handed out for the region
    /// when that is higher (a failed import's copies, landed or still on
    /// their way), and moves the next sequence above it (both ways of
    /// taking a region over start so).
    async fn raise_floor(&self, region: RegionId, floor: EntryId) -> Result<Imported, Error> {
        let floor = self
            .call(|reply| Command::RaiseFloor {
                region,
                floor,
                reply,
            })
            .await?;
        Ok(Imported {
            region,
            floor,
            first_id: 0,
            last_id: 0,
            entries: 0,
        })
    }

    /// Takes `region` over from another node's log: appends every entry
    /// `from_log.read(region, from)` yields (the other node's unflushed
    /// entries, `from` being the engine's flushed id there plus one) to
    /// this log, in order, with new ids above every id the other log
    /// handed out for the region, and returns once they are durable and
    /// indexed. The engine must have stopped writing the region to the
    /// other log first, and releases it there afterwards (rfcs/0009).
    /// It seals what it appended at once rather than waiting for
    /// `flush_interval` (in durable mode each chunk's append waits for its
    /// seal, as any append does).
    ///
    /// Calling it again after a failure (or a crash) is safe: the new floor
    /// hides the copies the failed call left, and the engine replays from
    /// the floor it got from the call that succeeded.
    ///
    /// A region the other log released (its reader knows every release
    /// ever made, also one whose record collection deleted) is refused with
    /// [`Error::RegionReleased`]: its entries are gone, and importing
    /// nothing would look like an empty region.
    pub async fn import_region(
        &self,
        from_log: &WalReader,
        region: RegionId,
        from: EntryId,
    ) -> Result<Imported, Error> {
        if region == RELEASE_REGION {
            return Err(Error::invalid(format!(
                "region {region} (u64::MAX) is reserved for release records"
            )));
        }
        // A stopped, poisoned or fenced store says so, also when there is
        // nothing to import (the model test found an import of nothing on
        // a stopped store answering `Ok`).
        self.regions().await?;
        // Released there: its entries are gone, and there is nothing to
        // move (rfcs/0005, "A release is forever").
        if from_log.is_released(region) {
            return Err(Error::RegionReleased { region });
        }
        // The other log's ids of the region: those its reader indexes,
        // and those below `from`, which its engine flushed (its collection
        // may have deleted every object that held them: the model test
        // found a floor of 0 then, and ids handed out here below theirs).
        let theirs = from_log
            .latest_entry_id(region)
            .max(from_log.released_through(region))
            .max(from.saturating_sub(1));
        // Raised to every id of the region this log handed out, too.
        let mut imported = self.raise_floor(region, theirs).await?;
        let mut entries = Box::pin(from_log.read(region, from));
        let mut chunk = Chunk::new(region, self.handle.batch_bytes);
        loop {
            let next = entries.next().await.transpose()?;
            let full = next.as_ref().is_some_and(|e| !chunk.takes(&e.data));
            if full || (next.is_none() && !chunk.is_empty()) {
                imported.appended(&self.append(chunk.take()).await?);
            }
            let Some(entry) = next else { break };
            chunk.push(entry.data);
        }
        // Holes the reader's open left out or this read skipped: the other
        // node releases the region after the import, so nothing may be
        // copied around one (the model test found an import that answered
        // `Ok` without the entries of a segment corrupted twice in transit).
        // (Segments the writer collected under the read are not missing:
        // its engine had flushed them.)
        if let Some(hole) = from_log
            .unreadable_holes(region)
            .into_iter()
            .find(|h| h.last_id >= from)
        {
            return Err(Error::Incomplete {
                region,
                key: hole.key,
                first_id: hole.first_id,
                last_id: hole.last_id,
            });
        }
        if imported.entries > 0 {
            // Seal now: under a seal budget or with early seals off, waiting
            // for the last id alone would wait for the timer.
            self.flush().await?;
            self.wait_durable(region, imported.last_id).await?;
        }
        tracing::info!(
            region,
            floor = imported.floor,
            entries = imported.entries,
            last_id = imported.last_id,
            "imported a region from another log"
        );
        Ok(imported)
    }
}

/// One append of an import: entries of one region that fit one object.
///
/// An append is admitted whole into one batch, so it must fit an object:
/// its positions (one per entry, at most [`MAX_POSITION`] per region and
/// object, or the append is refused) and its framed size (what
/// `max_batch_bytes` bounds: each entry's payload plus [`ENTRY_OVERHEAD`],
/// plus the region's footer entry). Counting payload bytes alone let a
/// region of small entries make an append of more entries than an object
/// has positions, refused on every retry.
pub(super) struct Chunk {
    region: RegionId,
    limit: u64,
    entries: Vec<(RegionId, Bytes)>,
    framed: u64,
}

impl Chunk {
    pub(super) fn new(region: RegionId, limit: u64) -> Self {
        Chunk {
            region,
            limit,
            entries: Vec::new(),
            framed: FOOTER_ENTRY_LEN as u64,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether an entry of `data` joins this append (an empty one takes
    /// any entry: an entry larger than an object goes alone).
    pub(super) fn takes(&self, data: &Bytes) -> bool {
        self.entries.is_empty()
            || ((self.entries.len() as u64) < MAX_POSITION
                && self.framed + framed(data) <= self.limit)
    }

    pub(super) fn push(&mut self, data: Bytes) {
        self.framed += framed(&data);
        self.entries.push((self.region, data));
    }

    /// The entries, leaving the chunk empty.
    pub(super) fn take(&mut self) -> Vec<(RegionId, Bytes)> {
        self.framed = FOOTER_ENTRY_LEN as u64;
        std::mem::take(&mut self.entries)
    }
}

/// The bytes an entry of `data` takes in a segment.
fn framed(data: &Bytes) -> u64 {
    data.len() as u64 + ENTRY_OVERHEAD as u64
}

impl WalReader {
    /// Through which id `region` was released (0 when it was not): by an
    /// indexed release record or a release marker, so also after
    /// collection deleted the record (rfcs/0005, "A release is forever").
    pub fn released_through(&self, region: RegionId) -> EntryId {
        self.catalog.released_through(region)
    }

    /// Whether `region` was released, as of this reader's open (its
    /// followers learn later releases as they come).
    pub fn is_released(&self, region: RegionId) -> bool {
        self.catalog.is_released(region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18, item 6: an append of an import fits one object by
    /// positions even when `max_batch_bytes` would hold more entries, and
    /// by framed size (payload plus framing), not payload alone.
    #[test]
    fn a_chunk_fits_one_object_by_positions_and_by_framed_size() {
        let tiny = Bytes::from_static(b"12345678");
        let mut chunk = Chunk::new(7, crate::config::MAX_BATCH_BYTES_LIMIT);
        for _ in 0..MAX_POSITION {
            assert!(chunk.takes(&tiny));
            chunk.push(tiny.clone());
        }
        assert!(!chunk.takes(&tiny), "past the positions of one object");
        assert_eq!(chunk.take().len() as u64, MAX_POSITION);
        assert!(chunk.is_empty() && chunk.takes(&tiny));

        // 1 KiB holds (1024 - 48) / 20 = 48 framed 8-byte entries, not 128.
        let mut chunk = Chunk::new(7, 1024);
        let mut n = 0;
        while chunk.takes(&tiny) {
            chunk.push(tiny.clone());
            n += 1;
        }
        assert_eq!(n, (1024 - FOOTER_ENTRY_LEN) / (8 + ENTRY_OVERHEAD));
        // An entry larger than an object goes alone.
        let huge = Bytes::from(vec![0u8; 4096]);
        let mut chunk = Chunk::new(7, 1024);
        assert!(chunk.takes(&huge));
        chunk.push(huge.clone());
        assert!(!chunk.takes(&tiny));
    }
}
