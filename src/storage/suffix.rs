//! The provided [`ObjectStorage::read_suffix`]: an object's last bytes and
//! its size, for a backend that implements only the four required methods,
//! without a listing where the backend allows it.
//!
//! Responsibility: learn an object's size from range reads alone. The
//! trait's `read` contract lets a backend answer a range that ends past the
//! object's end either with the bytes the object holds in it (a *short*
//! answer, as an HTTP range request is answered) or with an error. So:
//!
//! 1. Read `0..len`. A missing key answers not-found: one request, which
//!    is what a follower's poll of a key that has not landed costs. A
//!    short answer is the whole object: its length is the size (one
//!    request for any object up to `len` bytes).
//! 2. A full answer means the object holds at least `len` bytes: read on
//!    from the last byte known to exist, in ranges four times longer each
//!    time, until an answer comes short; the size is where it ends. Only
//!    the last `len` bytes are kept. (A range that starts inside the
//!    object is never refused for starting past the end, as S3 refuses
//!    one that starts at the end.)
//! 3. An error other than not-found (the backend refuses ranges past the
//!    end, or the request failed) falls back to a listing of the key and a
//!    read of its end, as before: correct for any backend, at the price of
//!    a listing only when the key exists.
//!
//! Invariant: the answer is the object's exact size and exactly its last
//! `min(len, size)` bytes, or an error; an answer longer than asked is a
//! transient error, never bytes handed on.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::{ObjectStorage, StorageError, Suffix};

/// How much longer each read of step 2 is than the one before.
const GROWTH: u64 = 4;

/// [`ObjectStorage::read_suffix`] from `read` (and `list` only as the
/// fallback of step 3); `len` is at least 1.
pub(crate) async fn read_suffix<S>(storage: &S, key: &str, len: u64) -> Result<Suffix, StorageError>
where
    S: ObjectStorage + ?Sized,
{
    let len = len.max(1);
    match by_reads(storage, key, len).await {
        Ok(suffix) => Ok(suffix),
        Err(e) if e.is_not_found() => Err(e),
        Err(e) => {
            tracing::debug!(key, error = %e,
                "a suffix read by ranges failed; listing the key to learn its size");
            by_listing(storage, key, len).await
        }
    }
}

/// Steps 1 and 2: reads only.
async fn by_reads<S>(storage: &S, key: &str, len: u64) -> Result<Suffix, StorageError>
where
    S: ObjectStorage + ?Sized,
{
    let first = checked(key, 0..len, storage.read(key, 0..len).await?)?;
    if (first.len() as u64) < len {
        let size = first.len() as u64;
        return Ok(Suffix { data: first, size });
    }
    // The object holds at least `len` bytes; `tail` is its last `len`
    // bytes up to `end`, the end of what was read.
    let (mut tail, mut end, mut step) = (first, len, len.saturating_mul(GROWTH));
    loop {
        // Start on the last byte known to exist, so the range never starts
        // at or past the end.
        let start = end - 1;
        let asked = start..start.saturating_add(step);
        let data = checked(key, asked.clone(), storage.read(key, asked).await?)?;
        if data.is_empty() {
            return Err(StorageError::transient(format!(
                "a read from offset {start} answered nothing, though an earlier read saw the byte there"
            ))
            .with_key(key));
        }
        let new = data.slice(1..);
        let short = (data.len() as u64) < step;
        end += new.len() as u64;
        tail = last_bytes(&tail, &new, len);
        if short || end == u64::MAX {
            return Ok(Suffix {
                data: tail,
                size: end,
            });
        }
        step = step.saturating_mul(GROWTH);
    }
}

/// Step 3: the size from a listing of the key, then a read of the end.
async fn by_listing<S>(storage: &S, key: &str, len: u64) -> Result<Suffix, StorageError>
where
    S: ObjectStorage + ?Sized,
{
    let size = storage
        .list(key)
        .await?
        .into_iter()
        .find(|m| m.key == key)
        .map(|m| m.size)
        .ok_or_else(|| StorageError::not_found(key))?;
    let data = storage.read(key, size.saturating_sub(len)..size).await?;
    Ok(Suffix { data, size })
}

/// An answer longer than its range is a backend's error (a transient one:
/// a repeated read may not repeat it).
fn checked(key: &str, asked: Range<u64>, data: Bytes) -> Result<Bytes, StorageError> {
    let want = asked.end - asked.start;
    if data.len() as u64 <= want {
        return Ok(data);
    }
    Err(StorageError::transient(format!(
        "a read of {}..{} answered {} bytes, more than asked",
        asked.start,
        asked.end,
        data.len()
    ))
    .with_key(key))
}

/// The last `len` bytes of `before` followed by `after`.
fn last_bytes(before: &Bytes, after: &Bytes, len: u64) -> Bytes {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if after.len() >= len {
        return after.slice(after.len() - len..);
    }
    let keep = len - after.len();
    let from = before.len().saturating_sub(keep);
    let mut joined = BytesMut::with_capacity(before.len() - from + after.len());
    joined.extend_from_slice(&before[from..]);
    joined.extend_from_slice(after);
    joined.freeze()
}

#[cfg(test)]
#[path = "suffix_tests.rs"]
mod tests;
