//! Releases a follower learns from the release markers (rfcs/0005, "A
//! release is forever"): a hole (objects collected before the follower
//! read them) may have swallowed the object carrying a release record, so
//! after one the follower lists `released/` once (after the listing of the
//! objects that found the hole: a record that listing missed was marked
//! before its object went, M4) and ends each followed region released
//! there with `Err(RegionReleased)`. A follower whose reader opened after
//! the release knows it from that open.

use crate::wal::protocol::released;
use crate::RegionId;

use super::Engine;

impl Engine {
    /// A hole was found: the markers are listed at the next step.
    pub(super) fn releases_may_be_missed(&mut self) {
        self.relist_released = true;
    }

    /// Lists the markers, teaches the catalog every release (it never
    /// forgets one, also after its record's object is trimmed) and ends
    /// the followed regions released.
    pub(super) async fn learn_released(&mut self) {
        self.relist_released = false;
        let marked = match released::list(&self.storage, &self.prefix).await {
            Ok(marked) => marked,
            Err(error) => {
                self.relist_released = true;
                return self.failed(error).await;
            }
        };
        for (&region, &through) in &marked {
            self.catalog.learn_release(region, through);
        }
        let followed: Vec<RegionId> = self
            .regions
            .keys()
            .copied()
            .filter(|r| self.catalog.is_released(*r))
            .collect();
        for region in followed {
            self.learn_hidden(region);
        }
    }
}
