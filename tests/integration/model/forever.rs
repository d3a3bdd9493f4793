//! A release is forever (rfcs/0005, issue 30 item 3) in the model: a
//! release, then collection past the object carrying its record (every
//! region's known entries flushed and obsolete, virtual time until no
//! object of the prefix carries the record), a reopen, an append to the
//! region, and a follower started on it. The reopen must report the
//! region released (`reference_restart`), the append must be refused, and
//! the follower must end the region with `RegionReleased`
//! (`following`): before markers, all three forgot the release once its
//! record was collected.

use std::time::Duration;

use objwal::{RegionId, WalReader};

use super::driver::{within, Call, Driver, PREFIX};
use super::steps::{From, REGIONS};

impl Driver {
    pub(super) async fn release_forever(
        &mut self,
        region: RegionId,
        faulty: bool,
    ) -> Result<(), String> {
        if self.stopped.is_some() {
            return Ok(());
        }
        let result = within("release_region", self.wal(2).release_region(region)).await?;
        let ok = result.is_ok();
        self.release_answered(region, result, faulty)?;
        if !ok || faulty {
            return Ok(());
        }
        // Nothing known pins collection: every entry durable, then obsolete.
        let (_, admitted) = self.model.snapshot();
        let flushed = within("flush", self.wal(0).flush()).await?;
        self.flush_answered(flushed, faulty, &admitted)?;
        for r in 0..REGIONS {
            let Some(id) = self.model.newest_of(r) else {
                continue;
            };
            let result = within("obsolete", self.wal(0).obsolete(r, id)).await?;
            if self.answered(Call::Obsolete, &result, faulty)? {
                self.model.obsoleted(r, id);
            }
        }
        // The idle collection tick carries the boundary past the record.
        let tick = self.config.flush_interval.max(Duration::from_millis(10));
        for _ in 0..40 {
            if !self.carries_release(region).await? {
                self.stats.bump("release records collected", 1);
                break;
            }
            tokio::time::sleep(tick * 2).await;
        }
        // A restart: still released.
        self.stop(false).await?;
        self.handles.clear();
        let wal = self.open(false).await?;
        self.check_restart(wal).await?;
        // Still refused.
        let floor = self.model.floor();
        let (keys, batch) = self.register(&[(region, 8)]);
        let result = within("append", self.wal(0).append(batch)).await?;
        self.append_answered(&keys, result, false, &floor)?;
        // A follower started on it ends it (checked at the catch-up).
        self.stats.bump("followers started on a released region", 1);
        self.follow(&[(region, From::Start)], false, false).await?;
        self.catch_up(false).await
    }

    /// Whether an object of the prefix carries a release record of
    /// `region`, as a reader sees it now.
    async fn carries_release(&self, region: RegionId) -> Result<bool, String> {
        let reader = within(
            "WalReader::open",
            WalReader::open(self.faulty.storage(), PREFIX, self.config.clone()),
        )
        .await?
        .map_err(|e| format!("a reader did not open: {e}"))?;
        Ok(reader
            .objects()
            .iter()
            .any(|o| o.releases.iter().any(|r| r.region == region)))
    }
}
