//! One conditional create and what its outcome means.
//!
//! A writer creates at a key with one of *its* byte strings for that key
//! (a batch, or the batch's void once the batch failed; a start object; a
//! settle marker). The answer decides:
//!
//! | storage answer    | read back                                   | outcome            |
//! |-------------------|---------------------------------------------|--------------------|
//! | `New`             | -                                           | `Landed(0)`        |
//! | `AlreadyExists` or an error | one of our byte strings           | `Landed(i)` (a retry whose response was lost, a late request, the batch that beat its void) |
//! | `AlreadyExists` or an error | missing, or a read error            | `Failed` (transient for a phantom "exists": object_store reports any 409 so) |
//! | `AlreadyExists` or an error | another object                    | `Taken` (its epoch; whether it is a settle marker) |
//! | `AlreadyExists` or an error | bytes that fail their CRC, or our header over other bytes | `Failed` (transient: not known; corrupted in transit, or damaged at rest) |
//!
//! The read-back is the only retry here; repeating a failed create is the
//! caller's decision (STYLE: retries happen in one place).

use bytes::Bytes;

use crate::format::{self, HEADER_LEN};
use crate::storage::{Created, ObjectStorage, Storage, StorageError};

use crate::wal::protocol::rules::{self, Taken};

/// What a create achieved.
#[derive(Debug, Clone)]
pub(crate) enum CreateOutcome {
    /// The key holds our byte string number `i` (0: the one sent).
    Landed(usize),
    /// The create failed and none of our byte strings is there.
    Failed(StorageError),
    /// Another process's object holds the key.
    Taken {
        /// Its epoch (`None`: not an objwal object).
        epoch: Option<u64>,
        /// Whether it is a settle marker (a newer process walked here).
        settle_marker: bool,
        /// Whether it is empty (no segment, no record), when known.
        empty: bool,
    },
}

impl CreateOutcome {
    /// What a writer of `ours` does about a taken key, if it was taken.
    pub(crate) fn taken(&self, ours: u64) -> Option<Taken> {
        match self {
            CreateOutcome::Taken {
                epoch,
                settle_marker,
                empty,
            } => Some(rules::classify_taken(ours, *epoch, *settle_marker, *empty)),
            _ => None,
        }
    }
}

/// Creates `key` with `ours[0]` and classifies the outcome; `ours` lists
/// every byte string of ours that may be at the key.
pub(crate) async fn create_object(storage: &Storage, key: &str, ours: &[Bytes]) -> CreateOutcome {
    let Some(bytes) = ours.first() else {
        return CreateOutcome::Failed(StorageError::permanent("nothing to create").with_key(key));
    };
    match storage.create(key, bytes.clone()).await {
        Ok(Created::New) => CreateOutcome::Landed(0),
        Ok(Created::AlreadyExists) => classify_existing(storage, key, ours, None).await,
        Err(error) => {
            tracing::debug!(key, %error, "create failed; reading the key back");
            classify_existing(storage, key, ours, Some(error)).await
        }
    }
}

/// Reads `key` back and tells whose object is there. `failure` is the
/// create's error, when it returned one. A read-back that does not check
/// out (a CRC that fails, our header over other bytes) is not known, like a
/// transient read error: one read corrupted in transit is never taken for
/// another writer's object (which poisons the writer). The caller's retry
/// reads it again; an object damaged at rest keeps the key failing, and the
/// next open names it.
async fn classify_existing(
    storage: &Storage,
    key: &str,
    ours: &[Bytes],
    failure: Option<StorageError>,
) -> CreateOutcome {
    match read_back(storage, key, ours).await {
        ReadBack::Outcome(CreateOutcome::Failed(e)) => CreateOutcome::Failed(failure.unwrap_or(e)),
        ReadBack::Outcome(outcome) => outcome,
        ReadBack::Garbled => {
            tracing::debug!(
                key,
                "the read-back does not check out (corrupted in transit?)"
            );
            CreateOutcome::Failed(failure.unwrap_or_else(|| {
                StorageError::transient(
                    "the object at the key read back with a CRC that fails (corrupted in \
                     transit, or damaged at rest)",
                )
                .with_key(key)
            }))
        }
    }
}

/// What one read-back of a taken key found.
enum ReadBack {
    Outcome(CreateOutcome),
    /// The bytes read do not check out.
    Garbled,
}

async fn read_back(storage: &Storage, key: &str, ours: &[Bytes]) -> ReadBack {
    let failed = |e: StorageError| ReadBack::Outcome(CreateOutcome::Failed(e));
    let header = match storage.read(key, 0..HEADER_LEN as u64).await {
        Ok(bytes) => match format::decode_header(&bytes) {
            Ok(header) => Some(header),
            Err(e) if e.is_crc_mismatch() => return ReadBack::Garbled,
            Err(_) => None,
        },
        Err(e) if e.is_not_found() => {
            // "Already exists" with nothing there is a race (object_store
            // maps every HTTP 409, S3's ConditionalRequestConflict included,
            // to AlreadyExists): it may pass, so it is transient.
            return failed(
                StorageError::transient(
                    "the create answered that the key exists, but nothing is there \
                     (a racing or crashed request)",
                )
                .with_key(key),
            );
        }
        // Not known: a read error (even one that says repeating will not
        // help, as a read past the end of an object shorter than a header
        // does) never makes the key another writer's.
        Err(e) => return failed(e),
    };
    let Some(header) = header else {
        return ReadBack::Outcome(taken(None, false, false));
    };
    // Ours share the header's sequence and epoch; compare whole byte
    // strings, longest first (a read past a shorter object's end fails).
    let mut order: Vec<usize> = (0..ours.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(ours.get(i).map_or(0, Bytes::len)));
    let mut our_header = false;
    for i in order {
        let Some(candidate) = ours.get(i) else {
            continue;
        };
        let Ok(mine) = format::decode_header(candidate) else {
            continue;
        };
        if mine != header {
            continue;
        }
        our_header = true;
        match storage.read(key, 0..candidate.len() as u64).await {
            // Our bytes end with our trailer (magic, CRCs over everything
            // before it), so equal bytes over our length are our object.
            Ok(found) if found == *candidate => return ReadBack::Outcome(CreateOutcome::Landed(i)),
            Ok(_) => {}
            Err(e) if e.is_transient() && !e.is_not_found() => return failed(e),
            Err(_) => {}
        }
    }
    if our_header {
        // Our sequence and epoch (no other process has our epoch), yet
        // none of our byte strings: ours as the read changed it.
        return ReadBack::Garbled;
    }
    match is_empty_object(storage, key).await {
        Ok(Some(empty)) => ReadBack::Outcome(taken(
            Some(header.epoch),
            rules::is_settle_marker(&header),
            empty,
        )),
        Ok(None) => ReadBack::Garbled,
        // Not known: a transient error must not make a filler look like
        // another writer's object (which poisons the writer).
        Err(e) => failed(e),
    }
}

fn taken(epoch: Option<u64>, settle_marker: bool, empty: bool) -> CreateOutcome {
    CreateOutcome::Taken {
        epoch,
        settle_marker,
        empty,
    }
}

/// Whether `key` holds an empty objwal object (no segment, no record):
/// exactly a header and a trailer that decode as one object; `None` when
/// the bytes read fail their CRC (read again). A transient read error is
/// returned: the answer is not known.
async fn is_empty_object(storage: &Storage, key: &str) -> Result<Option<bool>, StorageError> {
    match storage.read(key, 0..format::MIN_OBJECT_LEN).await {
        Ok(bytes) => match format::decode(&bytes) {
            Ok(o) => Ok(Some(
                o.segments.is_empty() && o.marks.is_empty() && o.releases.is_empty(),
            )),
            Err(e) if e.is_crc_mismatch() => Ok(None),
            // A longer object's first bytes: not an empty one.
            Err(_) => Ok(Some(false)),
        },
        Err(e) if e.is_not_found() => Err(StorageError::transient(
            "the object at the key vanished while it was read back",
        )
        .with_key(key)),
        // Not known (see `read_back`).
        Err(e) => Err(e),
    }
}
