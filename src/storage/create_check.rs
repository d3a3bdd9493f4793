//! Whether a store honours create-if-absent: the one property every
//! fencing rule and every acknowledgement rests on (a create never
//! replaces an object; rfcs/0006).
//!
//! Some S3-compatible servers (s3rver 3.7.1, older MinIO and Ceph
//! releases, several S3-compatible services) answer a second `PUT` with
//! `If-None-Match: *` with 200 and overwrite the object. On such a store
//! two processes on one prefix overwrite each other's objects and fencing
//! does nothing, silently. So the property is proven before anything
//! relies on it: a key this process just created is created again with
//! other bytes, and the answer must be "already exists" (`second_create`).
//! `Wal::open` does it on its fence right after the epoch claim (one create
//! per open), before it writes anything under `objects/`; `objwal verify`
//! does it on a scratch key outside every log's prefix, which it deletes
//! ([`check_scratch`]).
//!
//! A store that fails the check is refused with a permanent
//! [`Error::Storage`] that names the behaviour and what to do, not with a
//! variant of its own: a caller does what it does for any permanent
//! storage error (a missing bucket, refused credentials): stop, fix the
//! deployment, and open again.

use bytes::Bytes;

use crate::error::Error;
use crate::storage::{Created, ObjectStorage, Storage, StorageError};

/// What the check found.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// The second create answered "already exists".
    Honoured,
    /// The store answered "created" for a key that held an object: the
    /// error names what it did and what to do.
    Ignored(Error),
    /// A request of the check failed, so nothing was learnt.
    Unknown(Error),
}

/// The error of a store that answered "created" for `key`, which held an
/// object; `found` says what a read of the key then found, `then` what the
/// caller did about it.
fn ignored(key: &str, found: &str, then: &str) -> Error {
    Error::Storage {
        source: StorageError::permanent(format!(
            "the store does not honour create-if-absent: a second create of this key with other \
             bytes (a conditional PUT, If-None-Match: *) answered \"created\" and {found}. \
             objwal's fencing and acknowledgements rest on a create never replacing an object; \
             on this store two processes on one prefix would overwrite each other's objects. \
             {then}Use a store that honours conditional creates \
             (S3, GCS, Azure Blob, a recent MinIO, a local directory: README, \"Stores\"), or \
             upgrade this one"
        ))
        .with_key(key),
    }
}

/// Creates `key`, which holds `held`, again with `other` (other bytes)
/// and judges the answer. A create that fails is judged by reading the key
/// back: `other` there means it replaced the object; anything else teaches
/// nothing ([`Verdict::Unknown`]). `then` (a sentence, or empty) ends
/// the error's account of what was done.
pub(crate) async fn second_create(
    storage: &Storage,
    key: &str,
    held: &Bytes,
    other: Bytes,
    then: &str,
) -> Verdict {
    debug_assert_ne!(held, &other);
    let failure = match storage.create(key, other.clone()).await {
        Ok(Created::AlreadyExists) => return Verdict::Honoured,
        Ok(Created::New) => None,
        Err(e) => Some(e),
    };
    let len = held.len().max(other.len()) as u64;
    let read = match storage.read_suffix(key, len).await {
        Ok(suffix) => Ok(suffix.data),
        Err(e) => Err(e),
    };
    match (failure, read) {
        (None, Ok(found)) if found == other => Verdict::Ignored(ignored(
            key,
            "replaced the object's bytes with its own",
            then,
        )),
        (None, Ok(found)) if found == *held => Verdict::Ignored(ignored(
            key,
            "kept the first bytes: it acknowledges creates it did not make",
            then,
        )),
        (None, Ok(_)) => {
            Verdict::Ignored(ignored(key, "left bytes that are neither create's", then))
        }
        (None, Err(e)) => Verdict::Ignored(ignored(
            key,
            &format!("the key could not be read back ({e})"),
            then,
        )),
        (Some(_), Ok(found)) if found == other => Verdict::Ignored(ignored(
            key,
            "replaced the object's bytes (its answer was lost)",
            then,
        )),
        (Some(e), _) => Verdict::Unknown(e.into()),
    }
}

/// The check on a scratch key (which must not exist, and lies outside
/// every log's prefix): creates it, creates it again with other bytes,
/// judges the answer, and deletes it. What `objwal verify` runs; it
/// writes nothing else. A delete that fails is logged and leaves the key.
pub async fn check_scratch(storage: &Storage, key: &str) -> Verdict {
    let first = Bytes::from_static(b"objwal create-if-absent check: the first create");
    let second = Bytes::from_static(b"objwal create-if-absent check: a second create");
    let verdict = match storage.create(key, first.clone()).await {
        Ok(Created::New) => second_create(storage, key, &first, second, "").await,
        Ok(Created::AlreadyExists) => {
            return Verdict::Unknown(Error::invalid(format!(
                "the scratch key {key:?} of the create-if-absent check exists already; \
                 it was left as it is"
            )));
        }
        Err(e) => Verdict::Unknown(e.into()),
    };
    if let Err(error) = storage.delete(key).await {
        tracing::warn!(key, %error, "could not delete the scratch key of the create-if-absent check");
    }
    verdict
}
