//! One conditional create and what its outcome means.
//!
//! | storage answer                        | read back                        | outcome    |
//! |---------------------------------------|----------------------------------|------------|
//! | `New`                                 | -                                | `Durable`  |
//! | `AlreadyExists`                       | identical bytes                  | `Durable` (a retry whose first response was lost) |
//! | `AlreadyExists`                       | missing                          | `Failed`, transient (a racing or crashed request: object_store reports any 409 so) |
//! | `AlreadyExists`                       | other bytes, earlier epoch       | `Stale`    |
//! | `AlreadyExists`                       | other bytes, same or later epoch, or not an object | `Conflict` |
//! | error                                 | identical bytes                  | `Durable`  |
//! | error                                 | other bytes                      | as `AlreadyExists` above |
//! | error                                 | missing, or the read fails       | `Failed`   |
//!
//! The read-back is the only retry here; repeating a failed create is the
//! caller's decision (STYLE: retries happen in one place).

use bytes::Bytes;

use crate::format::{self, HEADER_LEN};
use crate::storage::{Created, ObjectStorage, Storage, StorageError};

/// What a create achieved.
#[derive(Debug, Clone)]
pub(crate) enum CreateOutcome {
    /// The object holds our bytes durably.
    Durable,
    /// The create failed and our bytes are not there.
    Failed(StorageError),
    /// Another object of an earlier epoch holds the key: a late object of an
    /// older instance. Only this batch is lost. (An empty one is deleted
    /// first when the caller allows it, see [`create_data_object`].)
    Stale { epoch: u64 },
    /// Another object of the same or a later epoch holds the key (`None`
    /// when it is not even an objwal object): another writer.
    Conflict { epoch: Option<u64> },
}

/// Deletes of an older process's marker one data create makes before it
/// reports a transient failure, so that the caller repeats it later with
/// its backoff (the marker's writer may repeat its create, and a request of
/// it that timed out may still land, until its next probe fences it). A
/// marker is never a reason to report the sequence stale: that would lose
/// the batch for an object that holds nothing (the fencing model found it,
/// `fencing_model::w6_never_gives_up_on_an_older_marker`).
const MARKER_DELETES: usize = 3;

/// Creates a data object (a batch) at one of this process's data sequences:
/// as [`create_object`], but an *empty* object of an earlier epoch found
/// there is a marker that landed after this process listed (rule W6 of
/// `reach.rs`): no probe of its writer verified it and nothing depends on
/// it, so it is deleted and the create repeated.
pub(crate) async fn create_data_object(
    storage: &Storage,
    key: &str,
    bytes: Bytes,
    epoch: u64,
) -> CreateOutcome {
    let mut outcome = create_object(storage, key, bytes.clone(), epoch).await;
    for _ in 0..MARKER_DELETES {
        let CreateOutcome::Stale { epoch: older } = outcome else {
            return outcome;
        };
        if !is_empty_object(storage, key).await {
            return outcome;
        }
        tracing::info!(
            key,
            older,
            "deleting an older process's marker at a data sequence"
        );
        if let Err(e) = storage.delete(key).await {
            return CreateOutcome::Failed(e);
        }
        outcome = create_object(storage, key, bytes.clone(), epoch).await;
    }
    match outcome {
        CreateOutcome::Stale { epoch: older } if is_empty_object(storage, key).await => {
            CreateOutcome::Failed(
                StorageError::transient(format!(
                    "an empty object of the older epoch {older} landed again at this data \
                     sequence after {MARKER_DELETES} deletes; the create is repeated later"
                ))
                .with_key(key),
            )
        }
        other => other,
    }
}

/// Whether `key` holds an empty objwal object (no segment, no release
/// record): exactly a header and a trailer that decode as one object.
async fn is_empty_object(storage: &Storage, key: &str) -> bool {
    match storage.read(key, 0..format::MIN_OBJECT_LEN).await {
        Ok(bytes) => {
            format::decode(&bytes).is_ok_and(|o| o.segments.is_empty() && o.releases.is_empty())
        }
        Err(_) => false,
    }
}

/// Creates `key` with `bytes` and classifies the outcome for a writer of `epoch`.
pub(crate) async fn create_object(
    storage: &Storage,
    key: &str,
    bytes: Bytes,
    epoch: u64,
) -> CreateOutcome {
    match storage.create(key, bytes.clone()).await {
        Ok(Created::New) => CreateOutcome::Durable,
        Ok(Created::AlreadyExists) => classify_existing(storage, key, &bytes, epoch, None).await,
        Err(error) => {
            tracing::debug!(key, %error, "create failed; reading the key back");
            classify_existing(storage, key, &bytes, epoch, Some(error)).await
        }
    }
}

/// Reads `key` back and compares it with `ours`. `failure` is the create's
/// error, when it returned one.
async fn classify_existing(
    storage: &Storage,
    key: &str,
    ours: &Bytes,
    epoch: u64,
    failure: Option<StorageError>,
) -> CreateOutcome {
    let whole = storage.read(key, 0..ours.len() as u64).await;
    match whole {
        // Our bytes end with our trailer (magic, CRCs over everything before
        // it), so equal bytes over our length are our object.
        Ok(found) if found == *ours => return CreateOutcome::Durable,
        Ok(_) => {}
        Err(e) if e.is_not_found() => {
            // "Already exists" with nothing there is a race (object_store
            // maps every HTTP 409, S3's ConditionalRequestConflict included,
            // to AlreadyExists): it may pass, so it is transient.
            return CreateOutcome::Failed(failure.unwrap_or_else(|| {
                StorageError::transient(
                    "the create answered that the key exists, but nothing is there \
                     (a racing or crashed request)",
                )
                .with_key(key)
            }));
        }
        Err(e) if e.is_transient() => return CreateOutcome::Failed(failure.unwrap_or(e)),
        // A permanent read error over our length: the object is shorter
        // than ours, so it is someone else's.
        Err(_) => {}
    }
    other_object(storage, key, epoch).await
}

/// Classifies an object at our key that is not ours by its header's epoch.
async fn other_object(storage: &Storage, key: &str, epoch: u64) -> CreateOutcome {
    match storage.read(key, 0..HEADER_LEN as u64).await {
        Ok(bytes) => match format::decode_header(&bytes) {
            Ok(header) if header.epoch < epoch => CreateOutcome::Stale {
                epoch: header.epoch,
            },
            Ok(header) => CreateOutcome::Conflict {
                epoch: Some(header.epoch),
            },
            Err(_) => CreateOutcome::Conflict { epoch: None },
        },
        Err(e) if e.is_transient() => CreateOutcome::Failed(e),
        Err(_) => CreateOutcome::Conflict { epoch: None },
    }
}
