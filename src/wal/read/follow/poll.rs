//! One look at a key of the log: a suffix read that either misses (the
//! object has not landed) or returns the object's end and its size, from
//! which the tail is decoded as recovery decodes it.
//!
//! A follower does not know whether the next key holds anything, let alone
//! how large it is, so it asks for the object's last bytes
//! ([`ObjectStorage::read_suffix`]: one GET on S3, answered with the size):
//! the learned tail window, and at least [`POLL_WINDOW`]. Objects up to that
//! size come whole, so their segments need no second read.
//! A tail that does not decode, or decodes to something implausible, is
//! looked at again by recovery's rule ([`examine`]: damage only when two
//! reads agree, R3).

use bytes::Bytes;

use crate::error::Error;
use crate::storage::keys::Prefix;
use crate::storage::{ObjectStorage, Storage};
use crate::wal::open::quarantine::{examine, Damaged, Examined};
use crate::wal::open::tail::{check_plausible, tail_from_window, RecoveredObject, TailWindow};
use crate::wal::read::replay::plan::READ_THROUGH;

/// The least a poll asks for: on a remote store a request waits 20-30 ms
/// for its first byte while 64 KiB more of an answer take about a
/// millisecond (the bulk replay's read-through, RFC 0009), so a light
/// writer's objects come whole with the poll instead of costing a segment
/// read each. A poll that misses costs the same either way.
pub(crate) const POLL_WINDOW: u64 = READ_THROUGH;

/// An object found at a key, with the bytes read at its end.
#[derive(Debug)]
pub(crate) struct Landed {
    pub(crate) object: RecoveredObject,
    /// The object's last bytes (empty when the tail came from a second
    /// look), starting at object offset `window_start`.
    pub(crate) window: Bytes,
    pub(crate) window_start: u64,
}

impl Landed {
    /// The bytes of `range` (object offsets) when the window holds them.
    pub(crate) fn slice(&self, range: std::ops::Range<u64>) -> Option<Bytes> {
        let start = range.start.checked_sub(self.window_start)?;
        let end = range.end.checked_sub(self.window_start)?;
        let (start, end) = (usize::try_from(start).ok()?, usize::try_from(end).ok()?);
        (start <= end && end <= self.window.len()).then(|| self.window.slice(start..end))
    }
}

/// What a key holds.
#[derive(Debug)]
pub(crate) enum Polled {
    /// Nothing (yet, or any more).
    Missing,
    /// An intact, plausible object.
    Landed(Box<Landed>),
    /// A structurally damaged object (two reads agree).
    Damaged(Box<Damaged>),
}

/// Looks at the key of `sequence`: one suffix read of `window.len()` bytes,
/// more reads only when the footer starts before the window, or when the
/// tail does not decode (then recovery's second look decides).
pub(crate) async fn poll(
    storage: &Storage,
    prefix: &Prefix,
    sequence: u64,
    window: &TailWindow,
) -> Result<Polled, Error> {
    let key = prefix.object_key(sequence);
    let suffix = match storage
        .read_suffix(&key, window.len().max(POLL_WINDOW))
        .await
    {
        Ok(suffix) => suffix,
        Err(e) if e.is_not_found() => return Ok(Polled::Missing),
        Err(e) => return Err(e.into()),
    };
    let size = suffix.size;
    let window_start = size - suffix.data.len() as u64;
    let first = tail_from_window(storage, &key, size, window_start, &suffix.data, window).await;
    match first {
        Ok(object) if plausible(&key, sequence, &object) => {
            return Ok(Polled::Landed(Box::new(Landed {
                object,
                window: suffix.data,
                window_start,
            })))
        }
        Ok(_) | Err(Error::Corrupted { .. }) => {}
        Err(Error::Storage { source }) if source.is_not_found() => return Ok(Polled::Missing),
        Err(e) => return Err(e),
    }
    // One look failed: recovery's rule decides (reads again, damage only
    // when two looks agree).
    Ok(
        match examine(storage, &key, size, sequence, window, None).await? {
            None => Polled::Missing,
            Some(Examined::Intact(object)) => Polled::Landed(Box::new(Landed {
                object,
                window: Bytes::new(),
                window_start: size,
            })),
            Some(Examined::Damaged(damaged)) => Polled::Damaged(Box::new(damaged)),
        },
    )
}

/// Whether a decoded tail is the object of its key and plausible.
fn plausible(key: &str, sequence: u64, object: &RecoveredObject) -> bool {
    let header = object.tail.header();
    header.sequence == sequence && check_plausible(key, header).is_ok()
}
