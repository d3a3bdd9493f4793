//! Reader holds: a reader's durable, expiring claim on the objects from
//! its position on (rfcs/0011).
//!
//! A hold is a set of empty objects `<prefix>/holds/<name>/<generation>-
//! <position>-<ttl ms>` (keys: [`crate::storage::keys`]); the key says it
//! all, so a writer learns every hold from one listing and reads nothing.
//! The holder places a new generation to move or refresh its hold, then
//! deletes the generations below it; the highest listed generation of a
//! name is the hold (a lower one left by a failed delete only lingers).
//! Nobody creates at a key twice: a generation is created once, by its
//! holder, so deleting an old generation never races a create.
//!
//! A writer's collection lists the holds at the start of every pass and
//! deletes no object at or above the position of a live hold. A hold is
//! live until the writer has seen the same generation for longer than
//! its ttl, on the writer's own clock (no clocks are compared across
//! processes): a dead holder's hold stops pinning one ttl after the
//! writer first saw its last generation (after a writer's restart, one
//! ttl after the new writer's first pass).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::error::Error;
use crate::storage::keys::{check_hold_name, HoldKey, Prefix, MAX_KEY_LEN};
use crate::storage::{ObjectStorage, Storage};

/// A reader's hold on a log (see [`WalReader::hold`](crate::WalReader::hold)):
/// while it is refreshed within its ttl, the writer's collection deletes
/// no object at or above its position.
///
/// Move it with [`advance`](Self::advance) as the reader progresses, or
/// hand it to a [`Follower`](crate::Follower) with
/// [`Follower::keep_hold`](crate::Follower::keep_hold), which moves and
/// refreshes it as it follows. A hold that is not refreshed within its ttl
/// stops pinning (collection may then delete what it held); one that is
/// [`release`](Self::release)d stops at once. Dropping a `Hold` neither
/// refreshes nor releases it: it expires.
pub struct Hold {
    storage: Storage,
    prefix: Prefix,
    key: HoldKey,
    /// The generation the next move creates: above every one this holder
    /// tried, landed or not.
    next_generation: u64,
    /// Generations of this name that may stand besides the hold (the one
    /// before a move, a move whose create failed but may have landed, a
    /// failed delete).
    stale: Vec<HoldKey>,
}

/// The longest ttl a hold takes: a dead holder pins at most this long.
pub const MAX_HOLD_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("prefix", &self.prefix.as_str())
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Hold {
    /// Places the hold `name` on the log under `prefix` at the object
    /// sequence `position` (0 holds every object): a generation above every
    /// one listed under the name, so a holder that restarts takes its hold
    /// over, then removes the older ones. One listing, one create, a delete
    /// per older generation.
    ///
    /// [`WalReader::hold`](crate::WalReader::hold) places it at the reader's
    /// first object. Placing it at 0 *before* a reader opens leaves no
    /// window in which collection may delete what the reader's open found
    /// (a follower given it with [`Follower::keep_hold`](crate::Follower::keep_hold)
    /// moves it up as it reads).
    ///
    /// `config`: its `request_timeout` bounds every request of the hold
    /// (this call's and those of later refreshes). `name`: 1 to 64 ASCII
    /// letters, digits, `.`, `_`, `-`, starting with a letter or digit; one
    /// name per holder. `ttl`: how long the hold lasts unrefreshed, at least
    /// a millisecond; the writer judges it on its own clock, from when it
    /// first saw the hold's latest generation.
    pub async fn place(
        storage: Storage,
        prefix: &str,
        config: &crate::Config,
        name: &str,
        ttl: Duration,
        position: u64,
    ) -> Result<Hold, Error> {
        let prefix = Prefix::new(prefix)?;
        let storage = storage.with_request_timeout(config.request_timeout);
        Self::place_at(storage, prefix, name, ttl, position).await
    }

    pub(crate) async fn place_at(
        storage: Storage,
        prefix: Prefix,
        name: &str,
        ttl: Duration,
        position: u64,
    ) -> Result<Hold, Error> {
        check_hold_name(name).map_err(|reason| Error::InvalidArgument {
            message: format!("hold name {name:?}: {reason}"),
        })?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl_ms == 0 || ttl > MAX_HOLD_TTL {
            return Err(Error::InvalidArgument {
                message: format!(
                    "hold {name:?}: the ttl must be from one millisecond to 30 days (got {ttl:?})"
                ),
            });
        }
        let stale = listed(&storage, &prefix, name).await?;
        let generation = stale
            .iter()
            .map(|k| k.generation)
            .max()
            .map_or(Ok(1), |g| {
                g.checked_add(1).ok_or_else(|| Error::InvalidArgument {
                    message: format!("hold {name:?} has no generation left"),
                })
            })?;
        let key = HoldKey {
            name: name.to_owned(),
            generation,
            position,
            ttl_ms,
        };
        if prefix.hold_key(&key).len() > MAX_KEY_LEN {
            return Err(Error::InvalidArgument {
                message: format!(
                    "hold {name:?}: its keys under this prefix would pass the stores' \
                     {MAX_KEY_LEN}-byte key limit (use a shorter name or prefix)"
                ),
            });
        }
        let mut hold = Hold {
            storage,
            prefix,
            next_generation: generation.saturating_add(1),
            key,
            stale,
        };
        hold.create().await?;
        hold.clean().await;
        Ok(hold)
    }

    /// The hold's name.
    pub fn name(&self) -> &str {
        &self.key.name
    }

    /// The lowest object sequence it holds (objects below it may be
    /// collected).
    pub fn position(&self) -> u64 {
        self.key.position
    }

    /// How long it lasts unrefreshed.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.key.ttl_ms)
    }

    /// Moves the hold to `position` and refreshes it: one create, then one
    /// delete of the generation before. Moving it down does not bring back
    /// what collection deleted meanwhile. On an error the hold stays where
    /// it was (and expires unless a later call succeeds).
    pub async fn advance(&mut self, position: u64) -> Result<(), Error> {
        let generation = self.next_generation;
        if generation == u64::MAX {
            return Err(Error::InvalidArgument {
                message: format!("hold {:?} has no generation left", self.key.name),
            });
        }
        self.next_generation = generation + 1;
        let moved = HoldKey {
            generation,
            position,
            ..self.key.clone()
        };
        if let Err(e) = self.create_key(&moved).await {
            // It may have landed: removed once a later move lands (the
            // next generation goes above it).
            self.stale.push(moved);
            return Err(e);
        }
        let before = std::mem::replace(&mut self.key, moved);
        self.stale.push(before);
        self.clean().await;
        Ok(())
    }

    /// Refreshes the hold where it is ([`advance`](Self::advance) to its
    /// position).
    pub async fn refresh(&mut self) -> Result<(), Error> {
        self.advance(self.key.position).await
    }

    /// Removes the hold: every generation of its name. From the writer's
    /// next collection pass on, it pins nothing.
    pub async fn release(self) -> Result<(), Error> {
        for key in listed(&self.storage, &self.prefix, &self.key.name).await? {
            self.storage.delete(&self.prefix.hold_key(&key)).await?;
        }
        Ok(())
    }

    async fn create(&self) -> Result<(), Error> {
        self.create_key(&self.key).await
    }

    async fn create_key(&self, key: &HoldKey) -> Result<(), Error> {
        let key = self.prefix.hold_key(key);
        // "Already exists" is our own create repeated by a store or a
        // proxy: the key is the content.
        self.storage.create(&key, Bytes::new()).await?;
        Ok(())
    }

    /// Deletes the generations below the current one; what fails stays
    /// for the next call (a lower generation only lingers: the highest
    /// one is the hold). One tried above it (a failed move) waits for a
    /// move that lands above it.
    async fn clean(&mut self) {
        let mut left = Vec::new();
        for key in std::mem::take(&mut self.stale) {
            if key.generation >= self.key.generation {
                left.push(key);
                continue;
            }
            if let Err(error) = self.storage.delete(&self.prefix.hold_key(&key)).await {
                if !error.is_not_found() {
                    tracing::debug!(%error, hold = %key.name, "an old hold generation stays");
                    left.push(key);
                }
            }
        }
        self.stale = left;
    }
}

/// Every generation listed under the hold `name`.
async fn listed(storage: &Storage, prefix: &Prefix, name: &str) -> Result<Vec<HoldKey>, Error> {
    Ok(storage
        .list(&prefix.hold_name_prefix(name))
        .await?
        .into_iter()
        .filter_map(|meta| prefix.parse_hold_key(&meta.key))
        .filter(|key| key.name == name)
        .collect())
}

/// A hold as the writer's collection last saw it (see
/// [`Wal::holds`](crate::Wal::holds)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldInfo {
    /// Its name.
    pub name: String,
    /// The lowest object sequence it holds.
    pub position: u64,
    /// How long it lasts unrefreshed.
    pub ttl: Duration,
    /// Whether it expired: the writer saw the same generation for longer
    /// than its ttl. An expired hold pins nothing.
    pub expired: bool,
    /// Objects at or above its position that collection would have
    /// deleted but for the live holds, at the latest pass.
    pub held_objects: u64,
}

/// The writer's view of the holds: when it first saw each generation.
#[derive(Debug, Default, Clone)]
pub(crate) struct HoldsView {
    first_seen: BTreeMap<HoldKey, Instant>,
}

impl HoldsView {
    /// Takes in a listing of `holds/` made at `now`: per name, the highest
    /// generation (the lowest position among equals) is the hold. Returns
    /// the holds, each with whether it is live.
    pub(crate) fn update(&mut self, listed: Vec<HoldKey>, now: Instant) -> Vec<(HoldKey, bool)> {
        let mut newest: BTreeMap<String, HoldKey> = BTreeMap::new();
        for key in listed {
            match newest.get(&key.name) {
                Some(held)
                    if (held.generation, std::cmp::Reverse(held.position))
                        >= (key.generation, std::cmp::Reverse(key.position)) => {}
                _ => {
                    newest.insert(key.name.clone(), key);
                }
            }
        }
        let before = std::mem::take(&mut self.first_seen);
        newest
            .into_values()
            .map(|key| {
                let first = before.get(&key).copied().unwrap_or(now);
                self.first_seen.insert(key.clone(), first);
                let age = now.saturating_duration_since(first);
                let live = age < Duration::from_millis(key.ttl_ms);
                (key, live)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, generation: u64, position: u64) -> HoldKey {
        HoldKey {
            name: name.into(),
            generation,
            position,
            ttl_ms: 10_000,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_expires_when_its_generation_stays_for_its_ttl() {
        let mut view = HoldsView::default();
        let held = vec![key("a", 1, 5), key("b", 1, 7)];
        let all_live = |v: &[(HoldKey, bool)]| v.iter().all(|(_, live)| *live);
        assert!(all_live(&view.update(held.clone(), Instant::now())));
        tokio::time::advance(Duration::from_millis(9_999)).await;
        // b refreshed (generation 2), a did not.
        let seen = view.update(vec![key("a", 1, 5), key("b", 2, 9)], Instant::now());
        assert!(all_live(&seen), "{seen:?}");
        tokio::time::advance(Duration::from_millis(1)).await;
        let seen = view.update(vec![key("a", 1, 5), key("b", 2, 9)], Instant::now());
        assert_eq!(seen, vec![(key("a", 1, 5), false), (key("b", 2, 9), true)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_highest_generation_is_the_hold_and_lower_ones_only_linger() {
        let mut view = HoldsView::default();
        let seen = view.update(
            vec![key("a", 3, 9), key("a", 2, 1), key("a", 3, 4)],
            Instant::now(),
        );
        assert_eq!(seen, vec![(key("a", 3, 4), true)]);
    }
}
