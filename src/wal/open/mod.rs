//! The open path: what `Wal::open` and `WalReader::open` do before a
//! store serves anything.
//!
//! [`recovery`] lists the prefix, reads every object's tail, settles the
//! sequences an older process could still land and rebuilds the catalog;
//! [`quarantine`] decides, on a second look, whether an object that failed
//! its checks is damaged, and moves it aside under the policy that says
//! so; [`damage`] names what recovery left out of replay, for reads and
//! tools; [`open_mode`] refuses to start a new log where the opener asked
//! for an existing one. [`tail`] reads and checks one object's tail, for
//! recovery and quarantine alike. [`released`] learns every release ever
//! made from the release markers, and makes a writer's records permanent.
//!
//! It may call the protocol's floor (`super::protocol`) and the catalog;
//! the read path calls into it (a follower lists and examines as recovery
//! does), never the other way round.

pub mod damage;
pub(crate) mod missing;
pub(crate) mod open_mode;
pub(crate) mod quarantine;
pub(crate) mod recovery;
pub(crate) mod released;
pub(crate) mod tail;
