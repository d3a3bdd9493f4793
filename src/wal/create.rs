//! One conditional create and what its outcome means.
//!
//! | storage answer                        | read back                        | outcome    |
//! |---------------------------------------|----------------------------------|------------|
//! | `New`                                 | -                                | `Durable`  |
//! | `AlreadyExists`                       | identical bytes                  | `Durable` (a retry whose first response was lost) |
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
    /// older instance. Only this batch is lost.
    Stale { epoch: u64 },
    /// Another object of the same or a later epoch holds the key (`None`
    /// when it is not even an objwal object): another writer.
    Conflict { epoch: Option<u64> },
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
            return CreateOutcome::Failed(failure.unwrap_or(e));
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
