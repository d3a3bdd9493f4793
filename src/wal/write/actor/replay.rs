//! The pages of a bulk replay, answered from the catalog and the region
//! tables without any I/O (the replay fetches the objects itself).

use crate::error::Error;
use crate::{EntryId, RegionId};

use super::{check_region, Actor};
use crate::wal::read::source::ReplayPage;

impl Actor {
    /// The first `limit` objects at or above `after` holding segments of
    /// `wanted` regions above their starts and hidden-through ids, and those
    /// ids. Refused when poisoned, or when the release region is wanted.
    pub(super) fn on_replay_page(
        &self,
        wanted: &[(RegionId, EntryId)],
        after: u64,
        limit: usize,
    ) -> Result<ReplayPage, Error> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        for (region, _) in wanted {
            check_region(*region)?;
        }
        let hidden = |region| self.hidden_through(region);
        Ok(ReplayPage {
            objects: self.catalog.replay_page(wanted, hidden, after, limit),
            hidden: wanted.iter().map(|&(region, _)| hidden(region)).collect(),
        })
    }
}

impl super::Command {
    /// Answers a request of the replay, pinning and handoff rooms with
    /// `error` (a stopped store answers them so). Other requests are
    /// answered where they are handled; a dropped reply reads as stopped.
    pub(super) fn refuse(self, error: Error) {
        use super::Command;
        match self {
            Command::ReplayPage { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Command::Pinning { reply } => {
                let _ = reply.send(Err(error));
            }
            Command::Holds { reply } => {
                let _ = reply.send(Err(error));
            }
            // A stopped store sends no flush request: the stream ends.
            Command::FlushRequests { reply } => drop(reply),
            _ => {}
        }
    }
}
