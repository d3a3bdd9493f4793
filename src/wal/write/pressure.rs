//! Collection pressure: which regions hold objects from collection
//! ([`Wal::pinning`]) and the requests to flush them
//! ([`Wal::flush_requests`]).
//!
//! The region with the oldest live entry holds the reclaim boundary for the
//! whole prefix: while every other region flushes, one cold region keeps
//! every object since its oldest unflushed entry, with their cost and the
//! tails every open reads. The store never deletes what a region has not
//! declared obsolete; it reports the pinning regions and, past
//! `max_pinned_objects`, asks the engine to flush them. The engine flushes
//! (its memtable to its own files), calls [`Wal::obsolete`] through the id
//! it flushed, and collection proceeds.

use futures::{Stream, StreamExt};
use tokio::sync::oneshot;

use crate::catalog::Pinning;
use crate::error::Error;

use super::actor::pinning::FlushRequest;
use super::actor::Command;
use crate::wal::Wal;

impl Wal {
    /// The regions that hold indexed objects from collection, the one
    /// holding the reclaim boundary first (see [`Pinning`]): per region its
    /// oldest live object, the objects and bytes it holds below the next
    /// region's, the id through which `obsolete` frees them, and the
    /// objects it holds in all. Regions whose only live entries are in the
    /// newest object (never collected) are not listed; released regions
    /// never are.
    ///
    /// Answered by the actor, which owns the catalog: it fails with
    /// [`Error::Stopped`] once the store is stopped (like [`Wal::regions`]).
    pub async fn pinning(&self) -> Result<Vec<Pinning>, Error> {
        self.call(|reply| Command::Pinning { reply }).await
    }

    /// The reader holds on this store's prefix as its collection's latest
    /// pass saw them (none before its first pass): per hold its name, its
    /// position (collection deletes nothing at or above it while the hold
    /// is live), its ttl, whether it expired (this writer saw the same
    /// generation for longer than the ttl), and the objects kept only for
    /// it. Holds are placed by readers ([`WalReader::hold`](crate::WalReader::hold));
    /// see rfcs/0011. They are not in [`pinning`](Self::pinning), whose rows
    /// are regions that `obsolete` can free.
    ///
    /// Answered by the actor: it fails with [`Error::Stopped`] once the
    /// store is stopped.
    pub async fn holds(&self) -> Result<Vec<crate::wal::HoldInfo>, Error> {
        self.call(|reply| Command::Holds { reply }).await
    }

    /// The flush requests of this store, from now on: a region that holds
    /// more than `max_pinned_objects` indexed objects from collection is
    /// asked once per crossing of the bound (again only once it came back
    /// within it, or once it obsoleted through the id asked for and is
    /// still beyond); a released region never. A new subscriber first gets
    /// the requests still outstanding. With `max_pinned_objects = 0` none
    /// comes. The stream ends when the store stops.
    pub fn flush_requests(&self) -> impl Stream<Item = FlushRequest> + Send + 'static {
        // Subscribed now, not at the first poll, so nothing sent in between
        // is missed.
        let (reply, answer) = oneshot::channel();
        let _ = self.handle.tx.send(Command::FlushRequests { reply });
        futures::stream::once(answer)
            .filter_map(|subscribed| async move { subscribed.ok().and_then(Result::ok) })
            .flat_map(flume::Receiver::into_stream)
    }
}
