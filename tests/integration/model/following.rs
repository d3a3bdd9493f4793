//! Following (rfcs/0010) in the model: a `Follower` opened on the prefix
//! lives across the store's restarts, fencings and damage; at a catch-up
//! it must have yielded, per region, every promised entry above its start
//! that is not obsolete nor released, in id order, each once, and nothing
//! the log never held; and it must have ended every region released for
//! good with `RegionReleased`, also one whose release record collection
//! deleted before the follower started or read it (rfcs/0005, "A release
//! is forever"). What it yields is durable: an admitted entry it yields is
//! promised from then on (it must replay after any crash).
//!
//! A held follower (`Op::Follow` with `held`): a reader hold placed at 0
//! before its reader opens and kept by the follower (rfcs/0011). The
//! writer's collection must delete nothing it has not taken in: with no
//! corruption or damage in the case, it meets no hole at all, though it
//! falls behind collection between catch-ups (an unheld one does: `holes a
//! held follower was spared` counts where an unheld follower met them).
//! Corruption it met itself counts across the writer's restarts: reads
//! corrupted in transit on both of its looks leave a hole it keeps
//! (seed 4202446146762173463 blamed collection for one after a reopen).
//!
//! Over a jump (`Op::FollowJump`): the writer's object carries a jump
//! record, the next one lies above it; a follower at that object polls
//! the key the jump names and yields the next entry within three
//! `follow_max_interval`s, as it follows any busy writer (rfcs/0010). A
//! follower that polled the key after its place instead waited for an idle
//! check, ten intervals of quiet later: no catch-up (20 s) saw that.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use objwal::storage::fault::HoldPoint;
use objwal::{Entry, Error, Follower, Hold, RegionId, WalReader};

use super::driver::{listed_objects, within, Call, Driver, PREFIX};
use super::steps::{From, REGIONS};

/// The follower of a case and what it yielded.
pub struct Following {
    pub(super) follower: Follower,
    /// Per region, its start (entries above it).
    from: BTreeMap<RegionId, u64>,
    /// Per region, the entries yielded, in order.
    pub(super) seen: BTreeMap<RegionId, Vec<Entry>>,
    /// Regions whose release the follower reported.
    pub(super) ended: BTreeSet<RegionId>,
    /// Its reader's open left damaged objects out (reads failed alike
    /// while a fault was armed): under `on_corrupted_segment = "fail"` the
    /// follower fails where it reaches their holes, later, fault or not.
    damaged_at_open: bool,
    /// It lived through a step whose reads were corrupted in transit
    /// twice over: what it skipped there stays a hole of its own after
    /// the writer restarts (which clears the model's `corruption`).
    pub(super) met_corruption: bool,
    /// A permanent read failure was armed while it ran: its own reads in
    /// the background may have met it, and a follower ends with a
    /// permanent error (repeating it would not help) at its next catch-up.
    pub(super) met_permanent_failure: bool,
    /// It keeps a hold placed before its reader opened.
    held: bool,
}

impl Following {
    /// It may have met damage of its own (at its reader's open, or reads
    /// corrupted in transit): holes and, under `on_corrupted_segment =
    /// "fail"`, a failure where it reaches them are expected.
    pub(super) fn met_damage(&self) -> bool {
        self.damaged_at_open || self.met_corruption
    }
}

/// The longest gap between a follower's idle checks (`MAX_CHECK_GAP` of
/// the follower's schedule), and a minute.
const IDLE_CHECK_WAIT: Duration = Duration::from_secs(3660);

/// Whether an object stands right below a key that holds nothing, with
/// objects above it (read past the faults): a place collection keeps while
/// a key above it is gone (the running writer's void of a failed batch, or
/// a delete that failed). A follower whose place it is sees the log go on
/// only at its next idle check, up to an hour after a long quiet (rfcs/0010,
/// decision 3; the model test, seed 5359958427594230283, found the 20 s of a
/// catch-up too short for it). A jump leaves such a gap too: it only lets
/// the catch-up wait longer.
async fn kept_below_a_gap(inner: &objwal::Storage) -> Result<bool, String> {
    let (_, sequences) = listed_objects(inner).await?;
    let top = sequences.last().copied().unwrap_or(0);
    Ok(sequences
        .iter()
        .any(|&s| s < top && !sequences.contains(&(s + 1))))
}

/// The hold's ttl: longer than any case, so only a bug lets it lapse.
const HOLD_TTL: Duration = Duration::from_secs(24 * 3600);

impl Driver {
    /// Opens a follower of `from`'s regions (replacing any), through a
    /// reader of the prefix.
    pub(super) async fn follow(
        &mut self,
        from: &[(u64, From)],
        held: bool,
        faulty: bool,
    ) -> Result<(), String> {
        let mut points = BTreeMap::new();
        for (region, f) in from {
            points
                .entry(*region)
                .or_insert_with(|| self.from(*region, *f));
        }
        self.follow_points(points, held, faulty).await
    }

    /// Opens a follower of the regions from these positions (replacing
    /// any).
    async fn follow_points(
        &mut self,
        points: BTreeMap<RegionId, u64>,
        held: bool,
        faulty: bool,
    ) -> Result<(), String> {
        self.follow_through(self.storage(), points, held, faulty)
            .await
    }

    /// Opens a follower of the regions from these positions (replacing
    /// any) through a reader on `storage`.
    pub(super) async fn follow_through(
        &mut self,
        storage: objwal::Storage,
        points: BTreeMap<RegionId, u64>,
        held: bool,
        faulty: bool,
    ) -> Result<(), String> {
        // The follower replaced lets its hold go.
        if let Some(mut old) = self.following.take() {
            if let Some(hold) = within("take a hold back", old.follower.take_hold()).await? {
                let _ = within("release a hold", hold.release()).await?;
            }
        }
        // The hold's requests go past the case's faults: a step that holds
        // or counts the store's creates must not meet the follower's (the
        // hold's own faults are `holds_attack`'s).
        let hold = if held {
            let placed = within(
                "place a hold",
                Hold::place(
                    self.faulty.inner().clone(),
                    PREFIX,
                    &self.config,
                    "model",
                    HOLD_TTL,
                    0,
                ),
            )
            .await?;
            match placed {
                Ok(hold) => Some(hold),
                Err(_) if faulty => return Ok(()),
                Err(e) => return Err(format!("a hold was refused with no fault armed: {e}")),
            }
        } else {
            None
        };
        let opened = within(
            "WalReader::open for a follower",
            WalReader::open(storage, PREFIX, self.config.clone()),
        )
        .await?;
        let reader = match opened {
            Ok(reader) => reader,
            Err(_) if faulty => return Ok(()),
            Err(e) => return Err(format!("a reader for a follower did not open: {e}")),
        };
        let mut follower = reader.follow(points.clone());
        if let Some(hold) = hold {
            follower.keep_hold(hold);
            self.stats.bump("held followers opened", 1);
        }
        self.stats.bump("followers opened", 1);
        self.following = Some(Following {
            follower,
            from: points,
            seen: BTreeMap::new(),
            ended: BTreeSet::new(),
            damaged_at_open: !reader.damaged().is_empty(),
            met_corruption: false,
            met_permanent_failure: false,
            held,
        });
        Ok(())
    }

    /// An append of `n` entries to `region` in one call (one segment),
    /// a follower of the region from a middle id of it, then a catch-up.
    /// In enqueued mode the creates are held from before the append until
    /// the follower is open, so the object lands after the follower's
    /// start and its segment straddles the follower's position (a plant
    /// that skipped such a segment went unseen); in durable mode the
    /// object is there when the follower opens.
    pub(super) async fn follow_in_flight(
        &mut self,
        region: RegionId,
        n: usize,
        faulty: bool,
    ) -> Result<(), String> {
        if self.stopped.is_some() || self.model.released_now(region) {
            return Ok(());
        }
        let floor = self.model.floor();
        if self.model.enqueued {
            self.faulty.hold_creates_at(Some(HoldPoint::BeforeInner));
        }
        let (keys, batch) = self.register(&vec![(region, 16); n]);
        let (appended, _) = self.append_while_held(batch).await?;
        let ids = appended.as_ref().ok().cloned().unwrap_or_default();
        self.append_answered(&keys, appended, faulty, &floor)?;
        if let Some(position) = ids
            .get(ids.len().saturating_sub(1) / 2)
            .filter(|_| ids.len() > 1)
        {
            self.stats.bump("followers started inside a segment", 1);
            self.follow_points(BTreeMap::from([(region, *position)]), false, faulty)
                .await?;
        }
        self.faulty.hold_creates_at(None);
        self.faulty.release_all();
        self.catch_up(faulty).await
    }

    /// See the module documentation: an append to `region`, a follower of
    /// it from there, a jump `skip` objects ahead (a watermark of another
    /// region above every id handed out), an append to `region`; the
    /// follower yields it within three `follow_max_interval`s.
    pub(super) async fn follow_jump(
        &mut self,
        region: RegionId,
        skip: u64,
        faulty: bool,
    ) -> Result<(), String> {
        let other = (region + 1) % REGIONS;
        if self.stopped.is_some()
            || faulty
            || self.model.released_now(region)
            || self.model.released_now(other)
            || self.model.released_at_all(region)
        {
            return Ok(());
        }
        // An entry of the region below the jump keeps the objects from it
        // on uncollected (collection deletes only below the first live
        // object): a follower that had not read an object collected under
        // it waits for an idle check by design (`schedule.rs`).
        let floor = self.model.floor();
        let (keys, batch) = self.register(&[(region, 12)]);
        let appended = within("an append before a jump", self.wal(0).append(batch)).await?;
        let Ok(below) = appended.clone() else {
            return self.append_answered(&keys, appended, faulty, &floor);
        };
        self.append_answered(&keys, appended, faulty, &floor)?;
        if !self.flushed_first(faulty).await? {
            return Ok(());
        }
        let Some(tip) = self.writer_tip().await? else {
            return Ok(());
        };
        let from = below.first().copied().unwrap_or(0);
        self.follow_points(BTreeMap::from([(region, from)]), false, faulty)
            .await?;
        if self.following.is_none() {
            return Ok(());
        }
        let id = objwal::format::entry_id(tip.next_key + skip, 1);
        let marked = within("obsolete above every id", self.wal(0).obsolete(other, id)).await?;
        if !self.answered(Call::Obsolete, &marked, faulty)? {
            return Ok(());
        }
        self.model.obsoleted(other, id);
        let floor = self.model.floor();
        let (keys, batch) = self.register(&[(region, 13)]);
        let appended = within("an append after a jump", self.wal(0).append(batch)).await?;
        let ids = appended.as_ref().ok().cloned().unwrap_or_default();
        self.append_answered(&keys, appended, faulty, &floor)?;
        let (_, admitted) = self.model.snapshot();
        let flushed = within("flush after a jump", self.wal(0).flush()).await?;
        self.flush_answered(flushed, faulty, &admitted)?;
        let Some(&wanted) = ids.first() else {
            return Ok(());
        };
        let bound = self.config.follow_max_interval * 3;
        let deadline = tokio::time::Instant::now() + bound;
        let Some(following) = self.following.as_mut() else {
            return Ok(());
        };
        loop {
            if following
                .seen
                .get(&region)
                .is_some_and(|s| s.iter().any(|e| e.id == wanted))
            {
                break;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, following.follower.next()).await {
                Ok(Some(Ok(entry))) => following.seen.entry(entry.region).or_default().push(entry),
                Ok(other) => {
                    return Err(format!(
                        "a follower over a jump ended with {other:?} before it yielded id {wanted}"
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "a follower of region {region} did not yield id {wanted} within {bound:?} \
                         of its landing after a jump to object {} (it polls the key its place's \
                         jump names)",
                        tip.next_key + skip + 1
                    ))
                }
            }
        }
        self.stats.bump("followers over a jump", 1);
        self.catch_up(faulty).await
    }

    /// Lets the follower catch up with what is durable (after a `flush`),
    /// then checks what it yielded.
    pub(super) async fn catch_up(&mut self, faulty: bool) -> Result<(), String> {
        if self.following.is_none() {
            return Ok(());
        }
        if self.stopped.is_none() && !faulty {
            let (_, admitted) = self.model.snapshot();
            if within("flush before a catch-up", self.wal(0).flush())
                .await?
                .is_ok()
            {
                self.model.flushed(&admitted);
            }
        }
        let required = self.required_for_follower();
        let must_end = self.released_and_followed();
        let Some(following) = self.following.as_mut() else {
            return Ok(());
        };
        // Poll until every required entry came, or 20 s of virtual time
        // (200 follow intervals) passed; past a place collection keeps, up
        // to the longest gap between idle checks more (`kept_below_a_gap`).
        let inner = self.faulty.inner().clone();
        let mut deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut waited_for_a_check = false;
        let mut failure = None;
        loop {
            let done = must_end.is_subset(&following.ended)
                && required.iter().all(|(region, ids)| {
                    following.ended.contains(region)
                        || ids.iter().all(|id| {
                            following
                                .seen
                                .get(region)
                                .is_some_and(|s| s.iter().any(|e| e.id == *id))
                                || following
                                    .follower
                                    .holes(*region)
                                    .iter()
                                    .any(|h| h.first_id <= *id && *id <= h.last_id)
                        })
                });
            if done {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                if waited_for_a_check || !kept_below_a_gap(&inner).await? {
                    break;
                }
                waited_for_a_check = true;
                self.stats
                    .bump("catch-ups past a kept place (an idle check)", 1);
                deadline += IDLE_CHECK_WAIT;
            }
            match tokio::time::timeout(Duration::from_millis(500), following.follower.next()).await
            {
                Err(_) => {}
                Ok(None) => break,
                Ok(Some(Ok(entry))) => following.seen.entry(entry.region).or_default().push(entry),
                Ok(Some(Err(Error::RegionReleased { region }))) => {
                    following.ended.insert(region);
                }
                Ok(Some(Err(e))) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failure {
            let met_damage = self.following.as_ref().is_some_and(Following::met_damage);
            let met_permanent = self
                .following
                .as_ref()
                .is_some_and(|f| f.met_permanent_failure)
                && matches!(&e, Error::Storage { source }
                    if source.kind() == objwal::storage::StorageErrorKind::Permanent);
            self.following = None;
            return if faulty || self.model.corruption || met_damage || met_permanent {
                Ok(())
            } else {
                Err(format!("the follower failed with no fault armed: {e}"))
            };
        }
        self.stats.bump("follower catch-ups", 1);
        self.check_followed(&required, &must_end, faulty)
    }

    /// The followed regions released for good: the follower must end each.
    fn released_and_followed(&self) -> BTreeSet<RegionId> {
        let Some(following) = self.following.as_ref() else {
            return BTreeSet::new();
        };
        following
            .from
            .keys()
            .copied()
            .filter(|r| self.model.released_for_good(*r))
            .collect()
    }

    /// Per followed region, the ids the follower must yield: promised,
    /// above its start, not obsolete, the region not released.
    fn required_for_follower(&self) -> BTreeMap<RegionId, Vec<u64>> {
        let Some(following) = self.following.as_ref() else {
            return BTreeMap::new();
        };
        following
            .from
            .iter()
            .map(|(region, from)| {
                (
                    *region,
                    self.model
                        .promised_above(*region, (*from).max(self.model.watermark_ever(*region))),
                )
            })
            .collect()
    }

    fn check_followed(
        &mut self,
        required: &BTreeMap<RegionId, Vec<u64>>,
        must_end: &BTreeSet<RegionId>,
        faulty: bool,
    ) -> Result<(), String> {
        let Some(following) = self.following.as_ref() else {
            return Ok(());
        };
        let mut yielded = 0;
        let mut durable = Vec::new();
        for (region, from) in &following.from {
            let seen = following.seen.get(region).map_or(&[][..], Vec::as_slice);
            yielded += seen.len();
            let mut last = *from;
            let mut keys = BTreeSet::new();
            for entry in seen {
                if entry.id <= last || entry.region != *region {
                    return Err(format!(
                        "the follower yielded id {} of region {} after {last} (region {region})",
                        entry.id, entry.region
                    ));
                }
                last = entry.id;
                let key = self.model.follower_saw(*region, entry)?;
                if let Some(key) = key {
                    if !keys.insert(key) {
                        return Err(format!("the follower yielded entry {key} twice"));
                    }
                    durable.push(key);
                }
            }
            if following.ended.contains(region) && !self.model.released_at_all(*region) {
                return Err(format!(
                    "the follower ended region {region}, which is not released ({})",
                    self.model.release_state(*region)
                ));
            }
            if !faulty && must_end.contains(region) {
                if !following.ended.contains(region) {
                    return Err(format!(
                        "the follower of region {region} (from {from}) never ended it, though \
                         its release returned Ok (a release is forever)"
                    ));
                }
                self.stats.bump("released regions a follower ended", 1);
            }
            if faulty || self.model.released_at_all(*region) {
                continue;
            }
            let holes = following.follower.holes(*region);
            if !holes.is_empty() && !self.model.corruption && !following.met_damage() {
                if following.held {
                    return Err(format!(
                        "a held follower of region {region} (from {from}) met holes {holes:?}: \
                         collection deleted what its hold kept"
                    ));
                }
                self.stats.bump("holes a held follower was spared", 1);
            }
            for id in required.get(region).into_iter().flatten() {
                let shown = seen.iter().any(|e| e.id == *id);
                let skipped = holes.iter().any(|h| h.first_id <= *id && *id <= h.last_id);
                if !shown && !skipped && self.stopped.is_none() {
                    return Err(format!(
                        "the follower of region {region} (from {from}) never yielded promised id {id}; it yielded {:?}",
                        seen.iter().map(|e| e.id).collect::<Vec<_>>()
                    ));
                }
            }
        }
        self.stats.bump("entries followed", yielded as u64);
        // What a follower yields is durable and on the chain.
        self.model.followed(&durable);
        Ok(())
    }
}
