//! Bulk replay: the entries of many regions from one pass over the objects.
//!
//! An engine restarting a node replays every region from its flushed
//! watermark. Reading each region on its own fetches every shared object
//! once per region; [`Wal::replay`] and [`WalReader::replay`] instead page
//! through the catalog object by object ([`crate::catalog::ObjectSegments`]),
//! plan ranged reads of each page ([`plan`]: adjacent wanted segments of one
//! object merged, short gaps read through) and run `replay_concurrency` of
//! them at once within `replay_buffer_bytes` ([`engine`]).
//!
//! Invariants of the stream: each region's entries come in id order, each
//! once, exactly those a `read(region, from)` of the same store would yield
//! (ids at or above `from`, above the region's watermark, holes skipped or
//! failed by the same rules, [`crate::wal::read::source::fetch_segment`]); regions are
//! interleaved as reads complete, and a region waiting for its next read
//! never holds back entries of other regions that are fetched already;
//! after an error the stream ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::Stream;

use crate::error::Error;
use crate::{EntryId, RegionId};

use crate::wal::{ActorSource, Entry, Wal, WalReader};

mod engine;
pub(crate) mod plan;

use crate::wal::read::source::ReplayPage;

/// The wanted regions in region order, one start each: a region named twice
/// replays from the lower of its starts.
fn wanted(
    regions_and_from: impl IntoIterator<Item = (RegionId, EntryId)>,
) -> Arc<[(RegionId, EntryId)]> {
    let mut wanted: BTreeMap<RegionId, EntryId> = BTreeMap::new();
    for (region, from) in regions_and_from {
        let start = wanted.entry(region).or_insert(from);
        *start = (*start).min(from);
    }
    wanted.into_iter().collect()
}

impl Wal {
    /// The entries of many regions in one stream: for each `(region, from)`,
    /// the entries of `region` with id >= `from` above its watermark, in id
    /// order, regions interleaved as the objects are read. Each object is
    /// fetched once (adjacent wanted segments in one ranged read),
    /// `replay_concurrency` reads at a time, holding at most
    /// `replay_buffer_bytes`. Corrupted segments, damaged objects and objects
    /// collected under the replay behave as in [`Wal::read`]. A region named
    /// twice replays from the lower start; the release region is refused.
    ///
    /// Objects indexed while the replay runs are seen. After an error the
    /// stream ends; a replay from each region's next id resumes it. Its
    /// reads are spawned tasks (they go on while the consumer is busy, up
    /// to the bound): poll it inside a tokio runtime.
    pub fn replay(
        &self,
        regions_and_from: impl IntoIterator<Item = (RegionId, EntryId)>,
    ) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
        let source = Arc::new(ActorSource {
            tx: self.handle.tx.clone(),
            shared: self.handle.shared.clone(),
        });
        engine::Replay::new(
            source,
            self.handle.read.clone(),
            wanted(regions_and_from),
            &self.handle.shared.damage,
        )
    }
}

/// A bulk replay of `wanted` (sorted by region, one start each) from
/// `source`: what a follower's backfill reads.
pub(crate) fn stream(
    source: Arc<dyn crate::wal::read::source::SegmentSource>,
    ctx: crate::wal::read::source::ReadContext,
    wanted: Arc<[(RegionId, EntryId)]>,
    damage: &crate::wal::open::damage::Damage,
) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
    engine::Replay::new(source, ctx, wanted, damage)
}

impl WalReader {
    /// The entries of many regions in one stream, as [`Wal::replay`] gives
    /// them (released regions read as empty; a reader knows no engine
    /// watermarks).
    pub fn replay(
        &self,
        regions_and_from: impl IntoIterator<Item = (RegionId, EntryId)>,
    ) -> impl Stream<Item = Result<Entry, Error>> + Send + 'static {
        engine::Replay::new(
            self.source(),
            self.read.clone(),
            wanted(regions_and_from),
            &self.damage,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_named_twice_replays_from_its_lower_start() {
        let w = wanted([(3, 9), (1, 5), (3, 2), (1, 7)]);
        assert_eq!(&w[..], &[(1, 5), (3, 2)]);
        assert!(wanted([]).is_empty());
    }
}
