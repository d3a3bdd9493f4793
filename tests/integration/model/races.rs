//! The steps of the fencing races of issue 29 (rfcs/0006): dead objects at
//! a writer's keys, and a second opener walking over a jump while the older
//! writer still runs.
//!
//! **A dead object at the writer's next key** (`Op::DeadObject`). The step
//! creates an older epoch's empty object (a start object: it links to the
//! object the writer's own start object links to) at the key the writer
//! uses next, through the store beneath every wrapper. Real stores produce
//! this history; rfcs/0006 ("Fillers", Guarantee 3) and the fencing model's
//! `fillers_are_needed` trace show how: two openers Y and W race while an
//! older writer P still lands the creates of its window. Y claims epoch
//! `y` first but lists later than W (epochs are claimed before the
//! listing, and a listing is one slow request), so Y's listing holds P's
//! objects that landed after W's listing, above the key W's walk stopped
//! P at. Y's start key, above its own listing plus 64, lies among W's
//! first data keys. Y's start object lands there before W reaches that
//! key; Y's closing read finds `fences/<y+1>` and its open fails. The key
//! holds an empty object of epoch `y < w`, which nothing will ever build
//! on: a filler. The step uses the epoch below the writer's (in this test
//! the previous life's; in the history the failed opener's: which process
//! claimed that fence changes nothing the writer or a walk decides).
//!
//! What must hold: the writer steps over it. In durable mode the batch at
//! that key is answered `NotDurable` (and never replays: the oracle holds
//! a `NotDurable` append to that), the filler stays (no request deletes
//! it), the next append lands past it; in enqueued mode the writer is
//! poisoned (the ids handed out at that key can be logged nowhere else)
//! and the engine opens the prefix again. With `then_open` a newer process
//! opens first: its walk meets the filler right after the writer's tip and
//! must step over it as the writer does, so the writer, fenced, lands
//! nothing it acknowledges (the loss of issue 29 item 2).
//!
//! **A jump, then a second opener** (`Op::JumpOpener`): `obsolete` of an id
//! some objects above every id handed out makes the writer's batch carry a
//! jump record; the writer's next object goes above it. With `held`, that
//! batch's create lands but its answer is held while a newer process
//! opens: its walk adopts the object and must follow the jump (rule K4 over
//! jumps), settling the key the writer uses next; then the answer arrives,
//! the older writer acknowledges its jump and appends: it must acknowledge
//! nothing.

use std::time::Duration;

use bytes::Bytes;
use objwal::format::{self, Header, Link, Object};
use objwal::storage::fault::HoldPoint;
use objwal::storage::{Created, ObjectStorage};
use objwal::{Error, RegionId, Wal};

use super::driver::{listed_objects, within, Call, Driver, PREFIX};
use super::reference::Key;

/// The writer's newest object and where its run goes next.
pub(super) struct Tip {
    epoch: u64,
    pub(super) next_key: u64,
    /// What the writer's start object links to (the tip its open chose),
    /// and its reclaim boundary.
    start_link: Option<Link>,
    start_boundary: u64,
}

fn object_key(sequence: u64) -> String {
    format!("{PREFIX}/objects/{sequence:020}.wal")
}

/// The start object of an opener of `epoch` whose open failed, at
/// `sequence`: empty, linked to the tip it chose, never built on.
fn dead_start_object(sequence: u64, epoch: u64, link: Option<Link>, boundary: u64) -> Bytes {
    format::encode(&Object {
        header: Header {
            sequence,
            epoch,
            link,
            reclaim_boundary: boundary,
        },
        segments: Vec::new(),
        marks: Vec::new(),
        releases: Vec::new(),
    })
    .unwrap_or_default()
}

impl Driver {
    /// Everything admitted made durable (so that the writer's next key
    /// follows its newest object): whether the flush returned `Ok`.
    pub(super) async fn flushed_first(&mut self, faulty: bool) -> Result<bool, String> {
        let (_, admitted) = self.model.snapshot();
        let flushed = within("flush", self.wal(0).flush()).await?;
        let ok = self.answered(Call::Flush, &flushed, faulty)?;
        if ok {
            self.model.flushed(&admitted);
        }
        Ok(ok)
    }

    /// The writer's newest object (read past the faults), when it is the
    /// writer's: its epoch is the newest fence's.
    pub(super) async fn writer_tip(&self) -> Result<Option<Tip>, String> {
        let inner = self.faulty.inner().clone();
        let (listed, sequences) = listed_objects(&inner).await?;
        let Some(&top) = sequences.last() else {
            return Ok(None);
        };
        let meta = listed
            .iter()
            .find(|m| m.key == object_key(top))
            .ok_or("the newest object vanished")?;
        let bytes = within("a read of the tip", inner.read(&meta.key, 0..meta.size))
            .await?
            .map_err(|e| format!("reading the tip: {e}"))?;
        let Ok(tip) = format::decode(&bytes) else {
            return Ok(None);
        };
        let newest_fence = self.fences().await?.last().copied().unwrap_or(0);
        let epoch = tip.header.epoch;
        if epoch != newest_fence {
            return Ok(None);
        }
        let jump = tip.marks.iter().find(|m| m.is_jump()).map(|m| m.watermark);
        let next_key = jump.map_or(top + 1, |id| (top + 1).max(format::sequence_of(id) + 1));
        // The writer's start object: its lowest object of its epoch.
        let mut start = (tip.header.link, tip.header.reclaim_boundary);
        for sequence in sequences.iter().copied() {
            let header = within(
                "a read of a header",
                inner.read(&object_key(sequence), 0..format::HEADER_LEN as u64),
            )
            .await?;
            let Ok(Ok(header)) = header.map(|h| format::decode_header(&h)) else {
                continue;
            };
            // (Not its walk's settle markers: their link names epoch 0.)
            if header.epoch == epoch && header.link.is_none_or(|l| l.epoch != 0) {
                start = (header.link, header.reclaim_boundary);
                break;
            }
        }
        Ok(Some(Tip {
            epoch,
            next_key,
            start_link: start.0,
            start_boundary: start.1,
        }))
    }

    /// The writer's tip once everything admitted is durable (its next key
    /// is where the writer goes next), unless the store is stopped, the
    /// region released or the flush failed.
    async fn quiet_tip(&mut self, region: RegionId, faulty: bool) -> Result<Option<Tip>, String> {
        if self.stopped.is_some() || self.model.released_now(region) {
            return Ok(None);
        }
        if !self.flushed_first(faulty).await? {
            return Ok(None);
        }
        self.writer_tip().await
    }

    /// Whether the object at `key` is still `bytes`.
    async fn still_there(&self, sequence: u64, bytes: &Bytes) -> Result<bool, String> {
        let found = within(
            "a read of the dead object",
            self.faulty
                .inner()
                .read(&object_key(sequence), 0..bytes.len() as u64),
        )
        .await?;
        Ok(found.is_ok_and(|found| found == *bytes))
    }

    /// See the module documentation.
    pub(super) async fn dead_object(
        &mut self,
        region: RegionId,
        then_open: bool,
        faulty: bool,
    ) -> Result<(), String> {
        let Some(tip) = self.quiet_tip(region, faulty).await? else {
            return Ok(());
        };
        if tip.epoch < 2 {
            // No process older than the first one can have opened.
            self.stats.bump("dead objects: the writer has epoch 1", 1);
            return Ok(());
        }
        let dead = tip.next_key;
        let bytes = dead_start_object(dead, tip.epoch - 1, tip.start_link, tip.start_boundary);
        let created = within(
            "planting a dead object",
            self.faulty.inner().create(&object_key(dead), bytes.clone()),
        )
        .await?
        .map_err(|e| format!("planting a dead object: {e}"))?;
        if created != Created::New {
            return Ok(());
        }
        self.stats.bump("dead objects planted", 1);
        if then_open {
            return self
                .open_over_dead_object(region, dead, &bytes, faulty)
                .await;
        }
        let floor = self.model.floor();
        let (keys, batch) = self.register(&[(region, 11)]);
        let appended = within("an append at a dead object", self.wal(0).append(batch)).await?;
        if self.model.enqueued {
            return self
                .poisoned_by_dead_object(&keys, appended, dead, faulty, &floor)
                .await;
        }
        match &appended {
            Err(Error::NotDurable { .. }) => {
                if !self.still_there(dead, &bytes).await? {
                    return Err(format!(
                        "the dead object at {dead} is gone after the append that met it"
                    ));
                }
                self.stats
                    .bump("appends answered NotDurable at a dead object", 1);
                // Documented for a batch whose key a filler settled.
                return self.append_answered(&keys, appended, true, &floor);
            }
            Ok(ids) if ids.iter().any(|id| format::sequence_of(*id) == dead) => {
                return Err(format!(
                    "an append was acknowledged in object {dead}, whose key a dead object holds"
                ));
            }
            Ok(_) => self.stats.bump("dead objects met by another batch", 1),
            Err(_) => {}
        }
        self.append_answered(&keys, appended, faulty, &floor)
    }

    /// Enqueued mode: the append at a dead object's key was admitted; the
    /// writer is poisoned once its create meets the dead object (a flush
    /// says so), and the engine opens the prefix again.
    async fn poisoned_by_dead_object(
        &mut self,
        keys: &[Key],
        appended: Result<Vec<u64>, Error>,
        dead: u64,
        faulty: bool,
        floor: &std::collections::HashMap<RegionId, u64>,
    ) -> Result<(), String> {
        let at_dead = appended
            .as_ref()
            .is_ok_and(|ids| ids.iter().any(|id| format::sequence_of(*id) == dead));
        self.append_answered(keys, appended, faulty, floor)?;
        let flushed = within("a flush after a dead object", self.wal(0).flush()).await?;
        match flushed {
            Err(e) if e.is_poisoned() => {
                self.stats.bump("writers poisoned by a dead object", 1);
            }
            Ok(()) if at_dead => {
                return Err(format!(
                    "a flush confirmed an entry of object {dead} durable, whose key a dead object holds"
                ));
            }
            Ok(()) => self.stats.bump("dead objects met by another batch", 1),
            Err(e) => self.expect_error(Call::Flush, &e, faulty, &[])?,
        }
        // The engine opens the prefix again: what the poisoned store
        // admitted past its barriers may be lost (whole objects, a suffix).
        self.handles.clear();
        let wal = self.open(faulty).await?;
        self.check_restart(wal).await
    }

    /// A newer process opens while a dead object sits at the writer's next
    /// key: its walk steps over it; the older store acknowledges nothing.
    async fn open_over_dead_object(
        &mut self,
        region: RegionId,
        dead: u64,
        bytes: &Bytes,
        faulty: bool,
    ) -> Result<(), String> {
        let older = std::mem::take(&mut self.handles);
        let newer = self.open(faulty).await?;
        self.check_restart(newer).await?;
        self.stats
            .bump("second openers over a dead object at the writer's key", 1);
        let Some(old) = older.first() else {
            return Ok(());
        };
        self.check_fenced_store(old, region).await?;
        if !self.still_there(dead, bytes).await? {
            return Err(format!(
                "the dead object at {dead} is gone after a walk and the fenced writer met it"
            ));
        }
        Ok(())
    }

    /// See the module documentation.
    pub(super) async fn jump_opener(
        &mut self,
        region: RegionId,
        skip: u64,
        held: bool,
        faulty: bool,
    ) -> Result<(), String> {
        let Some(tip) = self.quiet_tip(region, faulty).await? else {
            return Ok(());
        };
        // The open batch (empty after the flush) is at the next key; the
        // watermark lies `skip` objects above it.
        let id = format::entry_id(tip.next_key + skip, 1);
        if held {
            self.faulty.hold_creates_at(Some(HoldPoint::AfterLanded));
        }
        let marked = within("obsolete above every id", self.wal(0).obsolete(region, id)).await?;
        let jumped = self.answered(Call::Obsolete, &marked, faulty)?;
        if jumped {
            self.model.obsoleted(region, id);
        }
        let holding = held
            && jumped
            && tokio::time::timeout(Duration::from_secs(1), self.faulty.wait_held(1))
                .await
                .is_ok();
        self.faulty.hold_creates_at(None);
        if !jumped {
            self.faulty.release_all();
            return Ok(());
        }
        self.stats.bump(
            if holding {
                "second openers over a jump whose answer is held"
            } else {
                "second openers over a jump"
            },
            1,
        );
        let older = std::mem::take(&mut self.handles);
        let newer = self.open(faulty).await?;
        self.check_restart(newer).await?;
        // The jump's answer arrives: the older store acknowledges it (it
        // landed before the walk adopted it) and goes on above the jump.
        self.faulty.release_all();
        let Some(old) = older.first() else {
            return Ok(());
        };
        self.check_fenced_store(old, region).await
    }

    /// A store a newer one fenced: two appends (the first may meet a
    /// filler), neither acknowledged; in enqueued mode, `wait_durable` of
    /// what it admitted never answers `Ok`. Then it is stopped.
    pub(super) async fn check_fenced_store(
        &mut self,
        old: &Wal,
        region: RegionId,
    ) -> Result<(), String> {
        for _ in 0..2 {
            let (keys, batch) = self.register(&[(region, 9)]);
            let appended = within("an append of the fenced store", old.append(batch)).await?;
            // The fenced store may not know yet (a failing store refuses
            // with `Failing` first, a filler answers `NotDurable`); what it
            // must never do is acknowledge.
            match &appended {
                Err(_) => {}
                Ok(ids) if self.model.enqueued => {
                    let waited = within(
                        "wait_durable of the fenced store",
                        old.wait_durable(region, ids[0]),
                    )
                    .await?;
                    if waited.is_ok() {
                        return Err(
                            "the fenced store confirmed an entry durable after a newer store opened"
                                .into(),
                        );
                    }
                }
                Ok(ids) => return Err(format!("the fenced store acknowledged an append: {ids:?}")),
            }
            self.model.refuse(&keys);
        }
        let _ = within("stop of the fenced store", old.stop()).await?;
        Ok(())
    }
}
