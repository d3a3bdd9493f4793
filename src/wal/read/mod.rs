//! The read path: entries out of the store.
//!
//! [`wal_reader`] is the read-only handle on a prefix. [`source`] is what
//! every read stands on: a page of a region's segments
//! from a catalog (a reader's frozen one, or the actor's), fetched and
//! checked by one rule. On it: [`reader`] (one region as a stream),
//! [`replay`] (every region in one pass), [`follow`] (new objects as they
//! land, from another process's prefix), and [`traced`] (their spans).
//!
//! It may call the open path (a follower lists and examines objects as
//! recovery does, and reports what recovery left out), never the write
//! path.

pub(crate) mod follow;
pub(crate) mod reader;
pub(crate) mod replay;
pub(crate) mod source;
pub(crate) mod traced;
pub(crate) mod wal_reader;
