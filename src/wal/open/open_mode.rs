//! Open modes: whether `Wal::open` may start a new log
//! ([`Config::create_if_missing`](crate::Config::create_if_missing)).
//!
//! With `create_if_missing = false` an open first makes sure the prefix
//! holds a log (one of its fences, else one of its objects: see
//! [`Logs`]), before it writes anything: no fence is claimed, no leftover
//! removed, no start object created. When there is none it lists the whole
//! store, once, to name the prefixes that do hold a log (the same finding
//! the command line prints when a prefix holds nothing,
//! [`Logs::find`]) and fails with [`Error::NoLog`].
//!
//! A log that appears between this check and the claim is simply opened;
//! one that is deleted in between is started anew, as with `true`.

use crate::error::Error;
use crate::storage::keys::{Logs, Prefix};
use crate::storage::{ObjectStorage, Storage};

/// `Ok` when `prefix` holds a log; else [`Error::NoLog`] naming the logs
/// of the store.
pub(crate) async fn require_log(storage: &Storage, prefix: &Prefix) -> Result<(), Error> {
    // Fences first: one per open, kept forever, so the short listing.
    let fences = storage.list(&prefix.fences_prefix()).await?;
    if fences
        .iter()
        .any(|m| prefix.parse_fence_key(&m.key).is_some())
    {
        return Ok(());
    }
    // A log written before fences existed has objects only.
    let objects = storage.list(&prefix.objects_prefix()).await?;
    if objects
        .iter()
        .any(|m| prefix.parse_object_key(&m.key).is_some())
    {
        return Ok(());
    }
    let listing = storage.list("").await?;
    let logs = Logs::find(listing.iter().map(|m| m.key.as_str()));
    tracing::warn!(prefix = %prefix, logs = ?logs.prefixes, "no log under the prefix; not creating one");
    Err(Error::NoLog {
        prefix: prefix.as_str().to_owned(),
        existing: logs.prefixes,
        at_root: logs.at_root,
    })
}
