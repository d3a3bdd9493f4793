//! Fencing: a newer process of a prefix fences every older one.
//!
//! Every process that opens a prefix for writing first claims its epoch by
//! creating the fence object `<prefix>/fences/<epoch>.fence` with a
//! conditional create, before it lists anything. Epochs are dense: an
//! opener claims one above the largest fence it finds, and moves one up only
//! when it has read another opener's fence at the key. A create that answers
//! "already exists" while nothing is there (a racing or crashed request:
//! object_store reports any HTTP 409 so) is repeated on the same key, never
//! skipped, so no epoch is left without a fence. So a process of epoch `e` is
//! fenced exactly when the fence of `e + 1` exists, and learns it with one
//! read of one key.
//!
//! A writer does not read the fence before it acknowledges: its object
//! keys are the fence (rfcs/0006, rules K1-K5). A newer opener walks the
//! older writer's run and settles its first free key, so a create of the
//! older writer at that key answers "exists" and it acknowledges nothing
//! more. The fence of `e + 1` is read once, by an opener at the end of
//! its open. Only conditional creates and reads are needed, so every
//! backend fences.
//!
//! All of it rests on create-if-absent, so the claim proves it before the
//! open writes anything else: the fence just claimed is created again with
//! other bytes, and the store must answer "already exists"
//! ([`crate::storage::create_check`]). A store that answers "created"
//! fails the open with a permanent storage error naming that behaviour:
//! one create per open, and nothing under `objects/` is written first.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::Error;
use crate::storage::keys::Prefix;
use crate::storage::{Created, ObjectStorage, Storage, StorageError};
use crate::wal::protocol::retry::RetryPolicy;

/// The magic of a fence object.
const FENCE_MAGIC: &[u8; 8] = b"OBJWALFN";

/// How far above the number of fences a fence may lie and still be taken
/// as ours (fences are dense; one far above is damage or a foreign writer).
const PLAUSIBLE_FENCE_SLACK: u64 = 64;

/// Creates a claim tries before it gives up (each is a loss to another
/// opener, or a racing request on the same key).
const CLAIM_ATTEMPTS: usize = 16;

/// Second creates of the fence a claim tries while they fail without
/// teaching anything (a transient error, the fence still ours).
const PROOF_ATTEMPTS: usize = 3;

/// What a fence create achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// The fence is ours.
    Won,
    /// Another opener's fence is there.
    Lost,
    /// "Already exists", yet nothing is there: repeat the same key.
    Phantom,
}

/// The bytes of the fence of `epoch`: the magic, the epoch, and a nonce
/// that tells this opener's fence from another's of the same epoch (so a
/// create whose response was lost can be recognised by reading it back).
fn fence_bytes(epoch: u64) -> Bytes {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut b = BytesMut::with_capacity(40);
    b.put_slice(FENCE_MAGIC);
    b.put_u64_le(epoch);
    b.put_u64_le(u64::from(std::process::id()));
    b.put_u64_le(nanos);
    b.put_u64_le(COUNTER.fetch_add(1, Ordering::Relaxed));
    b.freeze()
}

/// Creates the fence `bytes` at `key`. A create that reports an error or an
/// existing key is decided by reading the key back (our own bytes: a retry
/// whose first response was lost).
async fn create_fence(storage: &Storage, key: &str, bytes: Bytes) -> Result<Claim, Error> {
    let failure = match storage.create(key, bytes.clone()).await {
        Ok(Created::New) => return Ok(Claim::Won),
        Ok(Created::AlreadyExists) => None,
        Err(e) => Some(e),
    };
    match storage.read(key, 0..bytes.len() as u64).await {
        Ok(found) if found == bytes => Ok(Claim::Won),
        // Shorter than ours, or other bytes: another opener's fence.
        Ok(_) => Ok(Claim::Lost),
        Err(e) if !e.is_not_found() && !e.is_transient() => Ok(Claim::Lost),
        Err(e) if e.is_not_found() => match failure {
            Some(f) => Err(f.into()),
            None => Ok(Claim::Phantom),
        },
        Err(e) => Err(failure.unwrap_or(e).into()),
    }
}

/// The epochs of the fences present, ascending, keeping only the plausible
/// ones: fences are dense from 1, so a fence far above the number of fences
/// can only come from damage or a foreign writer, and must not become the
/// base of the next epoch.
pub(crate) async fn fence_epochs(storage: &Storage, prefix: &Prefix) -> Result<Vec<u64>, Error> {
    let listed = storage.list(&prefix.fences_prefix()).await?;
    let mut epochs: Vec<u64> = listed
        .iter()
        .filter_map(|m| prefix.parse_fence_key(&m.key))
        .collect();
    epochs.sort_unstable();
    let count = epochs.len() as u64;
    let (plausible, implausible): (Vec<u64>, Vec<u64>) = epochs
        .into_iter()
        .partition(|e| *e <= count + PLAUSIBLE_FENCE_SLACK);
    for epoch in implausible {
        tracing::warn!(
            epoch,
            count,
            "ignoring an implausible fence (damage or a foreign writer)"
        );
    }
    Ok(plausible)
}

/// Claims the first free epoch above `floor` and above every plausible
/// fence: creates its fence. Returns the claimed epoch. It moves to the next
/// epoch only once it read another opener's fence at the key, and repeats a
/// create answered "already exists" over nothing after `retry`'s delay.
pub(crate) async fn claim_epoch(
    storage: &Storage,
    prefix: &Prefix,
    floor: u64,
    retry: &RetryPolicy,
) -> Result<u64, Error> {
    let fences = fence_epochs(storage, prefix).await?;
    let mut epoch = fences.last().copied().unwrap_or(0).max(floor) + 1;
    let mut backoff = retry.backoff();
    for _ in 0..CLAIM_ATTEMPTS {
        let key = prefix.fence_key(epoch);
        let bytes = fence_bytes(epoch);
        match create_fence(storage, &key, bytes.clone()).await? {
            Claim::Won => {
                prove_create_if_absent(storage, &key, epoch, &bytes, retry).await?;
                tracing::info!(epoch, "claimed the epoch; older processes are fenced");
                return Ok(epoch);
            }
            Claim::Lost => {
                tracing::info!(
                    epoch,
                    "another opener claimed the epoch first; trying the next"
                );
                epoch += 1;
            }
            Claim::Phantom => {
                let delay = backoff.fail();
                tracing::info!(
                    epoch,
                    ?delay,
                    "the fence create answered 'exists' over nothing; repeating it"
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
    Err(Error::recovery(format!(
        "could not claim an epoch after {CLAIM_ATTEMPTS} attempts: other processes keep opening this prefix"
    )))
}

/// Proves that the store honours create-if-absent, on the fence of `epoch`
/// this opener just created with `held` at `key`: a second create with
/// other bytes must answer "already exists". A store that answers
/// "created" is refused (a permanent storage error naming it); a check
/// that fails without teaching anything is repeated after `retry`'s delay,
/// [`PROOF_ATTEMPTS`] times in all, then its error is returned.
async fn prove_create_if_absent(
    storage: &Storage,
    key: &str,
    epoch: u64,
    held: &Bytes,
    retry: &RetryPolicy,
) -> Result<(), Error> {
    use crate::storage::create_check::{second_create, Verdict};
    let mut backoff = retry.backoff();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let then = "Wal::open refused the store before writing anything under objects/ (only \
                    its fence was written). ";
        match second_create(storage, key, held, fence_bytes(epoch), then).await {
            Verdict::Honoured => return Ok(()),
            Verdict::Ignored(error) => {
                tracing::error!(key, %error, "the store does not honour create-if-absent");
                return Err(error);
            }
            Verdict::Unknown(error) if error.is_retryable() && attempts < PROOF_ATTEMPTS => {
                let delay = backoff.fail();
                tracing::info!(key, %error, ?delay,
                    "the create-if-absent check failed without an answer; repeating it");
                tokio::time::sleep(delay).await;
            }
            Verdict::Unknown(error) => return Err(error),
        }
    }
}

/// An opener's closing read: whether a newer process already claimed the
/// prefix (its fence at `epoch + 1` exists).
pub(crate) async fn check_not_fenced(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
) -> Result<(), Error> {
    match fenced_by(storage, prefix, epoch).await? {
        None => Ok(()),
        Some(newer) => Err(Error::fenced(epoch, newer)),
    }
}

/// Whether a process of `epoch` is fenced: `Some(newer)` when the fence of
/// `epoch + 1` exists (`newer` is the newest fence, for the message).
pub(crate) async fn fenced_by(
    storage: &Storage,
    prefix: &Prefix,
    epoch: u64,
) -> Result<Option<u64>, StorageError> {
    match storage.read(&prefix.fence_key(epoch + 1), 0..8).await {
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
        Ok(_) => {
            let newest = match fence_epochs(storage, prefix).await {
                Ok(epochs) => epochs.last().copied().unwrap_or(epoch + 1),
                Err(_) => epoch + 1,
            };
            Ok(Some(newest.max(epoch + 1)))
        }
    }
}
