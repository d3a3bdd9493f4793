//! Release markers: the permanent record of every release (rfcs/0005, "A
//! release is forever").
//!
//! A release record lives in an object, and collection deletes objects. So
//! once a writer has indexed an object carrying the record of region `r`
//! released through `t`, it also creates the marker
//! `<prefix>/released/<r>-<t>` (keys: [`crate::storage::keys`]): an empty
//! object that collection never deletes. Everyone who must know every
//! release ever made (a writer's open, a reader's open, a follower that met
//! a hole) lists `released/` and reads nothing: the keys say it all.
//!
//! Invariants:
//! - **M1** a marker names a release whose record some writer indexed (so
//!   it is on every later opener's chain, rfcs/0006 W2): it is created only
//!   after that, never before the record. A process fenced before its
//!   record was acknowledged never makes a marker, so a fenced writer's
//!   failed release never leaks into the newer one's log.
//! - **M2** a writer's reclaim boundary never passes an object carrying a
//!   release record whose marker is not known durable (the actor's
//!   `markers` room): the record stays readable until its marker exists.
//! - **M3** an open makes every release record of its chain permanent
//!   (creates the missing markers) before its start object, whose boundary
//!   may free the records' objects.
//! - **M4** markers are listed only after the objects: a release whose
//!   record a listing of `objects/` no longer found was marked before its
//!   object was deleted (M2), so before the markers were listed.
//!
//! Creating a marker is idempotent (the key is the content): "already
//! exists" is success once a listing of the key confirms it is there (a
//! phantom "exists" over nothing, which some stores answer, is not).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::Error;
use crate::storage::keys::Prefix;
use crate::storage::{Created, ObjectStorage, Storage, StorageError};
use crate::{EntryId, RegionId};

use super::retry::RetryPolicy;

/// Every release the markers of `prefix` record: per region, the highest
/// released-through id. One listing (a page per 1,000 markers on S3), no
/// read.
pub(crate) async fn list(
    storage: &Storage,
    prefix: &Prefix,
) -> Result<BTreeMap<RegionId, EntryId>, Error> {
    let mut released = BTreeMap::new();
    for meta in storage.list(&prefix.released_prefix()).await? {
        match prefix.parse_released_key(&meta.key) {
            Some((region, through)) => {
                let slot = released.entry(region).or_insert(through);
                *slot = (*slot).max(through);
            }
            None => tracing::warn!(key = %meta.key, "ignoring a key that is not a release marker"),
        }
    }
    Ok(released)
}

/// Creates the marker of `region`'s release through `through`, repeating a
/// transient failure after the retry delay, at most `stop_attempts` tries
/// in all. `Ok` once the marker is there.
pub(crate) async fn create(
    storage: &Storage,
    prefix: &Prefix,
    region: RegionId,
    through: EntryId,
    retry: &RetryPolicy,
) -> Result<(), StorageError> {
    let key = prefix.released_key(region, through);
    let mut backoff = retry.backoff();
    loop {
        let failure = match storage.create(&key, Bytes::new()).await {
            Ok(Created::New) => return Ok(()),
            Ok(Created::AlreadyExists) => match is_listed(storage, &key).await {
                Ok(true) => return Ok(()),
                Ok(false) => StorageError::transient(
                    "the create answered that the release marker exists, but no listing finds it",
                )
                .with_key(&key),
                Err(e) => e,
            },
            Err(e) => e,
        };
        if !failure.is_transient() || backoff.failures() + 1 >= retry.stop_attempts {
            return Err(failure);
        }
        let delay = backoff.fail();
        tracing::debug!(%key, error = %failure, ?delay, "a release marker failed; repeating it");
        tokio::time::sleep(delay).await;
    }
}

/// Whether a listing finds `key` itself.
async fn is_listed(storage: &Storage, key: &str) -> Result<bool, StorageError> {
    Ok(storage.list(key).await?.iter().any(|m| m.key == key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::storage::fault::{FaultyStorage, Op};
    use crate::storage::{MemoryStorage, StorageErrorKind};

    fn setup() -> (FaultyStorage, Storage, Prefix, RetryPolicy) {
        let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
        let storage = faulty.storage();
        let retry = RetryPolicy::new(&Config::default(), 1);
        (faulty, storage, Prefix::new("p").unwrap(), retry)
    }

    #[tokio::test(start_paused = true)]
    async fn markers_are_created_once_and_listed_by_region() {
        let (_, storage, prefix, retry) = setup();
        create(&storage, &prefix, 3, 10, &retry).await.unwrap();
        create(&storage, &prefix, 3, 10, &retry).await.unwrap();
        create(&storage, &prefix, 3, 12, &retry).await.unwrap();
        create(&storage, &prefix, 9, 0, &retry).await.unwrap();
        let listed = list(&storage, &prefix).await.unwrap();
        assert_eq!(listed, BTreeMap::from([(3, 12), (9, 0)]));
        // Another prefix's markers are not this prefix's.
        let other = Prefix::new("p2").unwrap();
        create(&storage, &other, 4, 1, &retry).await.unwrap();
        assert_eq!(list(&storage, &prefix).await.unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_repeated_and_a_phantom_exists_is_not_believed() {
        let (faulty, storage, prefix, retry) = setup();
        faulty.fail_next(Op::Create, "released", 2, StorageErrorKind::Transient);
        create(&storage, &prefix, 3, 10, &retry).await.unwrap();
        faulty.phantom_exists_next("released", 1);
        create(&storage, &prefix, 4, 10, &retry).await.unwrap();
        assert_eq!(
            list(&storage, &prefix).await.unwrap(),
            BTreeMap::from([(3, 10), (4, 10)]),
            "the phantom answer was followed by a create that landed"
        );
        // A failure that never passes is returned after stop_attempts.
        faulty.fail_next(Op::Create, "released", 100, StorageErrorKind::Transient);
        let err = create(&storage, &prefix, 5, 10, &retry).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert_eq!(faulty.counts().create.failures, 2 + 5);
    }
}
