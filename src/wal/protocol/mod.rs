//! The floor the write and open paths share: how a process talks to the
//! store (rfcs/0006).
//!
//! [`rules`] are the fencing protocol's decisions (pure: numbers in,
//! decisions out, so the fencing model runs the same code); [`create`] is
//! one conditional create and what its outcome means; [`fence`] claims an
//! epoch at open; [`retry`] decides how long to wait before a request is
//! repeated and when to give up; [`released`] lists and creates the
//! permanent markers of releases (rfcs/0005). Nothing here calls the paths
//! above it.

pub(crate) mod create;
pub(crate) mod fence;
pub(crate) mod released;
pub(crate) mod retry;
pub(crate) mod rules;
