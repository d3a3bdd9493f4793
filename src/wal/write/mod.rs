//! The write path: an append, from admission to its acknowledgement.
//!
//! An append enters the [`actor`] (the one task that owns the store's
//! mutable state), joins the open [`batch`], is sealed into an object when
//! the sealing [`policy`] says so, and is created and acknowledged by the
//! actor's pipeline; collection, releases, flush marks and the
//! [`pressure`] on cold regions live here too, because only the actor
//! changes them.
//!
//! It may call the protocol's floor (`super::protocol`: the fencing rules,
//! one create, retries) and the read path's segment sources (the actor
//! serves reads and replay pages from its catalog); nothing in the open or
//! read paths calls into it but the handle's commands.

pub(crate) mod actor;
pub(crate) mod batch;
pub(crate) mod policy;
pub(crate) mod pressure;
