//! What an open learns of the releases ever made, and what a writer's
//! open makes permanent (rfcs/0005, "A release is forever").
//!
//! A release record lives in an object, and collection deletes objects;
//! its marker (`protocol::released`) stays. So every open lists the
//! markers, after recovery listed the objects (M4: a record the objects'
//! listing missed was marked before its object went), and teaches the
//! catalog each release for good ([`Catalog::learn_release`]): the region
//! reads as empty, refuses appends, is reported released and ends every
//! follower, whatever collection deleted. A writer's open also makes the
//! records of its chain permanent before its start object (M3): a record
//! whose marker is missing (a crash between the record and its marker, or
//! a log written before markers existed) gets it now, before any boundary
//! this process writes can free its object.
//!
//! Cost: one listing of `released/` per open (a page per 1,000 markers on
//! S3), no read; a create per record without a marker (none after a clean
//! stop).

use futures::{StreamExt, TryStreamExt};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::error::Error;
use crate::storage::keys::Prefix;
use crate::storage::Storage;
use crate::wal::protocol::released;
use crate::wal::protocol::retry::RetryPolicy;
use crate::{EntryId, RegionId};

/// Lists the markers of `prefix` and teaches `catalog` every release they
/// record; returns them (per region, the highest released-through id).
/// Call it after the listing of the objects (M4).
pub(crate) async fn learn(
    storage: &Storage,
    prefix: &Prefix,
    catalog: &mut Catalog,
) -> Result<std::collections::BTreeMap<RegionId, EntryId>, Error> {
    let marked = released::list(storage, prefix).await?;
    for (&region, &through) in &marked {
        catalog.learn_release(region, through);
    }
    if !marked.is_empty() {
        tracing::debug!(
            released = marked.len(),
            "learnt the released regions from their markers"
        );
    }
    Ok(marked)
}

/// A writer's open, before its start object: [`learn`]s the markers, then
/// creates the marker of every release the catalog knows that has none
/// (M3). Fails the open when a marker cannot be made: the start object's
/// boundary could otherwise free a record that nothing else keeps.
pub(crate) async fn make_permanent(
    storage: &Storage,
    prefix: &Prefix,
    catalog: &mut Catalog,
    config: &Config,
) -> Result<(), Error> {
    let marked = learn(storage, prefix, catalog).await?;
    let missing: Vec<(RegionId, EntryId)> = catalog
        .released()
        .filter(|(region, through)| marked.get(region).is_none_or(|m| m < through))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    tracing::info!(
        records = missing.len(),
        "making release records permanent: their markers are missing"
    );
    let retry = RetryPolicy::new(config, 0);
    let retry = &retry;
    futures::stream::iter(missing)
        .map(|(region, through)| async move {
            released::create(storage, prefix, region, through, retry)
                .await
                .map_err(|source| Error::Storage { source })
        })
        .buffer_unordered(config.recovery_concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}
