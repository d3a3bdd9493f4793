//! Runs the steps against the real store (a `Wal` over the fault wrapper
//! around an in-memory store) and checks every answer against the
//! reference model. Every await is under [`DEADLINE`] (virtual time: the
//! runtime's clock is paused), so a call that hangs fails the case.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use objwal::storage::fault::FaultyStorage;
use objwal::storage::ObjectStorage;
use objwal::{AckMode, Config, Entry, Error, RegionId, Wal};

use super::network::Network;
use super::reference::{Key, Model};
use super::steps::{Fault, From, Op, Settings, Step, REGIONS};

/// The longest any call may take (virtual time).
const DEADLINE: Duration = Duration::from_secs(30);
pub(super) const PREFIX: &str = "model";

/// `fut`, or a failure naming `what` when it does not finish in time.
pub(super) async fn within<T>(
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .map_err(|_| format!("{what} did not finish within {DEADLINE:?} (virtual time): it hangs"))
}

/// A call, for the rules of which errors it may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    Append,
    Read,
    /// A read of a `WalReader`: it outlives the store's stop.
    ReaderRead,
    Obsolete,
    WaitDurable,
    Release,
    Flush,
    Stop,
    Open,
    Import,
}

/// What a run exercised, path by path (printed by the test, so a path
/// no case reached shows as 0 without planting anything): the driver's
/// own counts (`steps`, `errors`, `imports`, ...) and the store's metrics
/// (`objwal_*`, read from a recorder local to the case).
#[derive(Debug, Default, Clone)]
pub struct Stats {
    counts: BTreeMap<String, u64>,
}

impl Stats {
    /// Adds `n` to the count `name`.
    pub fn bump(&mut self, name: &str, n: u64) {
        *self.counts.entry(name.to_owned()).or_insert(0) += n;
    }

    pub fn add(&mut self, other: &Stats) {
        for (name, n) in &other.counts {
            self.bump(name, *n);
        }
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (name, n) in &self.counts {
            writeln!(f, "  {name:<44} {n}")?;
        }
        Ok(())
    }
}

/// The store under test and the model it is checked against.
pub struct Driver {
    pub stats: Stats,
    pub(super) faulty: FaultyStorage,
    /// The network in front of `faulty` (slow and late creates): every
    /// store of the case reaches the object store through it.
    pub(super) network: Network,
    pub(super) settings: Settings,
    pub(super) config: Config,
    /// The other log of the store, once a step used it.
    pub(super) source: Option<super::surface::Source>,
    /// Imports that failed: repeated once the faults are cleared.
    pub(super) imports_to_repeat: BTreeSet<RegionId>,
    /// The follower of the prefix, once a step opened one.
    pub(super) following: Option<super::following::Following>,
    /// Releases on the other log after an import under faults: repeated
    /// once the faults are cleared.
    pub(super) source_releases_to_repeat: BTreeSet<RegionId>,
    pub(super) handles: Vec<Wal>,
    /// The first `stop()` result of the current store, once stopped.
    pub(super) stopped: Option<Result<(), Error>>,
    /// The keys of the prefix when the current store's stop returned:
    /// nothing may change them until the next open.
    pub(super) stopped_keys: Option<BTreeSet<String>>,
    pub(super) model: Model,
    /// The fault armed for the current step's calls, if any.
    pub(super) armed: Option<Fault>,
    /// A permanent read failure of a read-back poisoned the store (it could
    /// not learn what holds its key): the engine opens the prefix again
    /// once the faults are cleared.
    pub(super) poisoned: bool,
}

/// The objects under the model's prefix, listed from `inner` (past the
/// faults), with their sequences.
pub(super) async fn listed_objects(
    inner: &objwal::Storage,
) -> Result<(Vec<objwal::storage::ObjectMeta>, BTreeSet<u64>), String> {
    let listed = within(
        "a list of objects",
        inner.list(&format!("{PREFIX}/objects/")),
    )
    .await?
    .map_err(|e| format!("listing objects: {e}"))?;
    let sequences = listed
        .iter()
        .filter_map(|m| m.key.rsplit('/').next()?.strip_suffix(".wal")?.parse().ok())
        .collect();
    Ok((listed, sequences))
}

impl Driver {
    /// Arms `Fault::CorruptNewest`: every read of the newest object listed
    /// (past the faults) is corrupted until the step's faults are cleared.
    /// Under quarantine only an object without flush marks or release
    /// records: an open may leave such an object out, and the model does
    /// not follow the records lost with it (as for `Op::Damage`).
    async fn corrupt_newest(&mut self) -> Result<(), String> {
        let (listed, _) = listed_objects(self.faulty.inner()).await?;
        let Some(newest) = listed
            .into_iter()
            .filter(|m| m.key.ends_with(".wal"))
            .max_by(|a, b| a.key.cmp(&b.key))
        else {
            return Ok(());
        };
        if self.settings.quarantine {
            let inner = self.faulty.inner().clone();
            let bytes = within("a read", inner.read(&newest.key, 0..newest.size))
                .await?
                .map_err(|e| format!("reading {}: {e}", newest.key))?;
            let carries_records = objwal::format::decode(&bytes)
                .map(|o| !o.releases.is_empty() || !o.marks.is_empty())
                .unwrap_or(true);
            if carries_records {
                self.stats.bump("newest objects left whole (records)", 1);
                return Ok(());
            }
        }
        self.faulty.corrupt_next_reads(&newest.key, usize::MAX);
        Ok(())
    }
}

pub(super) async fn read_all(wal: &Wal, region: RegionId, from: u64) -> Result<Vec<Entry>, Error> {
    let mut stream = Box::pin(wal.read(region, from));
    let mut entries = Vec::new();
    while let Some(entry) = stream.next().await {
        entries.push(entry?);
    }
    Ok(entries)
}

/// The variant of `e`, for the per-path counts.
fn error_kind(e: &Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_owned()
}

/// `read_all`, going on past the holes a read under
/// `on_corrupted_segment = "fail"` stops at (each named by `holes`).
pub(super) async fn read_past_holes(
    wal: &Wal,
    region: RegionId,
    from: u64,
) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    let mut from = from;
    loop {
        let mut stream = Box::pin(wal.read(region, from));
        let mut stopped = None;
        while let Some(entry) = stream.next().await {
            match entry {
                Ok(entry) => {
                    from = entry.id + 1;
                    entries.push(entry);
                }
                Err(e @ Error::Corrupted { .. }) => {
                    stopped = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let Some(e) = stopped else {
            return Ok(entries);
        };
        let past = wal
            .holes(region)
            .iter()
            .filter(|h| h.last_id >= from)
            .map(|h| h.last_id + 1)
            .min();
        match past {
            Some(next) if next > from => from = next,
            _ => return Err(e),
        }
    }
}

fn same(a: &Result<(), Error>, b: &Result<(), Error>) -> bool {
    match (a, b) {
        (Ok(()), Ok(())) => true,
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

impl Driver {
    /// A fresh store in `mode` with `settings`.
    pub async fn new(mode: AckMode, settings: Settings) -> Result<Driver, String> {
        let faulty = crate::common::faulty_memory();
        let network = Network::new(faulty.clone(), settings.slow);
        let config = settings.config(mode);
        config
            .validate()
            .map_err(|e| format!("the drawn settings are invalid: {e}"))?;
        let mut driver = Driver {
            stats: Stats::default(),
            faulty,
            network,
            settings,
            config,
            source: None,
            imports_to_repeat: BTreeSet::new(),
            source_releases_to_repeat: BTreeSet::new(),
            following: None,
            handles: Vec::new(),
            stopped: None,
            stopped_keys: None,
            model: Model::new(mode == AckMode::Enqueued),
            armed: None,
            poisoned: false,
        };
        let wal = driver.open(false).await?;
        driver.handles = vec![wal; super::steps::HANDLES];
        Ok(driver)
    }

    /// The object store as the case's stores reach it.
    pub(super) fn storage(&self) -> objwal::storage::Storage {
        self.network.storage()
    }

    /// Clears every fault of the wrapper and the network's armed late
    /// landings (the per-case slowness stays).
    pub(super) fn clear_faults(&self) {
        self.faulty.clear_faults();
        self.network.clear();
    }

    /// What the case reached, with the network's counts.
    pub fn finish_stats(&mut self) -> Stats {
        let (slow, late, exists) = self.network.counts();
        self.stats.bump("creates answered late (network)", slow);
        self.stats.bump("creates landed late (network)", late);
        self.stats
            .bump("object creates answered exists (network)", exists);
        std::mem::take(&mut self.stats)
    }

    pub(super) fn wal(&self, handle: usize) -> &Wal {
        &self.handles[handle % self.handles.len()]
    }

    /// Whether `e` is an answer the documentation allows for `call` now.
    pub(super) fn expect_error(
        &mut self,
        call: Call,
        e: &Error,
        faulty: bool,
        regions: &[RegionId],
    ) -> Result<(), String> {
        self.stats.bump("errors", 1);
        self.stats
            .bump(&format!("error {call:?}: {}", error_kind(e)), 1);
        // A reader is not the stopped store's (the model test found a
        // reader's read after a stop held to the store's rule).
        if self.stopped.is_some() && !matches!(call, Call::Stop | Call::Open | Call::ReaderRead) {
            return if e.is_stopped() {
                Ok(())
            } else {
                Err(format!(
                    "{call:?} on a stopped store answered {e} (expected: stopped)"
                ))
            };
        }
        let released = regions.iter().any(|r| self.model.released_now(*r));
        if call == Call::Append && released {
            return match e {
                Error::RegionReleased { .. } => Ok(()),
                e => Err(format!(
                    "an append to a released region answered {e} (expected: released)"
                )),
            };
        }
        // A create that met an object at its key reads it back; when that
        // read fails for good the writer cannot learn what holds its key
        // and stops: poisoned (with a dead object at its key, rfcs/0006
        // rule 8, a create meets "exists" with no fault of its own).
        if e.is_poisoned()
            && !e.is_fenced()
            && matches!(
                self.armed,
                Some(Fault::FailRead {
                    permanent: true,
                    ..
                })
            )
        {
            self.poisoned = true;
            return Ok(());
        }
        if self.poisoned && e.is_poisoned() {
            return Ok(());
        }
        let enqueued = self.model.enqueued;
        // Under `on_corrupted_segment = "fail"` a read stops at a segment
        // that fails its check (one corrupted in transit).
        let corrupted_read = matches!(call, Call::Read | Call::ReaderRead | Call::Import)
            && matches!(e, Error::Corrupted { .. })
            && self.settings.fail_on_corruption
            && (faulty || self.model.corruption || self.model.has_quarantined());
        if corrupted_read {
            return Ok(());
        }
        let allowed = faulty
            && match (call, e) {
                (Call::Append, Error::Storage { .. } | Error::NotDurable { .. }) => !enqueued,
                // Calls waiting when a stop gave up on its backlog: a
                // durable append (its create may have landed), a barrier,
                // a release (its record may have landed).
                (Call::Append, Error::Lost { .. }) => !enqueued,
                (Call::WaitDurable | Call::Release, Error::Lost { .. }) => true,
                // Refused while a failed key is being settled (durable) or
                // the backlog is repeated (enqueued): never admitted.
                (Call::Append, Error::Failing { .. }) => true,
                (
                    Call::Release | Call::Flush,
                    Error::Storage { .. } | Error::NotDurable { .. } | Error::Failing { .. },
                ) => true,
                // A barrier refused once the store has failed for
                // `max_unpersisted_age` (a long outage).
                (Call::WaitDurable, Error::Failing { .. }) => true,
                (Call::Read | Call::ReaderRead, Error::Storage { .. }) => true,
                (Call::Import, e) => !e.is_poisoned() && !e.is_stopped(),
                (Call::Stop, Error::Lost { .. }) => true,
                (Call::Open, Error::Storage { .. } | Error::Corrupted { .. }) => true,
                // A recovery that met a request failing, or stalled until
                // `request_timeout`, in the middle of its reads.
                (Call::Open, Error::Recovery { .. }) => true,
                _ => false,
            };
        if allowed {
            Ok(())
        } else {
            let when = if faulty {
                "with a fault armed"
            } else {
                "with no fault armed"
            };
            Err(format!(
                "{call:?} answered an undocumented error {when}: {e} ({e:?})"
            ))
        }
    }

    /// Opens the prefix; with `faulty`, an open that fails as documented is
    /// repeated once the faults are cleared (and must then succeed).
    ///
    /// Every open that succeeds must leave a fence of its own: the number
    /// of fences grows (rfcs/0006: epochs are dense and each has its
    /// fence, so the next opener claims above it; a create answered
    /// "exists" over nothing taken as won left an epoch without one).
    pub(super) async fn open(&mut self, faulty: bool) -> Result<Wal, String> {
        self.check_stopped_quiet().await?;
        let storage = self.storage();
        let before = self.fences().await?;
        let opened = within(
            "open",
            Wal::open(storage.clone(), PREFIX, self.config.clone()),
        )
        .await?;
        let wal = match opened {
            Ok(wal) => wal,
            Err(e) => {
                self.expect_error(Call::Open, &e, faulty, &[])?;
                self.clear_faults();
                let before = self.fences().await?;
                let wal = within("open", Wal::open(storage, PREFIX, self.config.clone()))
                    .await?
                    .map_err(|e| format!("open failed with no fault armed: {e}"))?;
                self.check_fenced(&before).await?;
                return Ok(wal);
            }
        };
        self.check_fenced(&before).await?;
        Ok(wal)
    }

    /// The keys the store writes under the prefix (read past the faults):
    /// not the readers' holds, which a follower places and moves while the
    /// store is stopped.
    async fn keys(&self) -> Result<BTreeSet<String>, String> {
        let inner = self.faulty.inner().clone();
        let listed = within("a list of the prefix", inner.list(&format!("{PREFIX}/")))
            .await?
            .map_err(|e| format!("listing the prefix: {e}"))?;
        let holds = format!("{PREFIX}/holds/");
        Ok(listed
            .into_iter()
            .map(|m| m.key)
            .filter(|k| !k.starts_with(&holds))
            .collect())
    }

    /// A store whose `stop` returned writes and deletes nothing more (a
    /// stop that gave up once left the creates of its backlog running):
    /// after two seconds of virtual time the prefix holds the keys it held
    /// when the stop returned. Checked before the next open.
    pub(super) async fn check_stopped_quiet(&mut self) -> Result<(), String> {
        let Some(at_stop) = self.stopped_keys.take() else {
            return Ok(());
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        // A request its store gave up on may still land: the network's.
        let abandoned = self.network.abandoned();
        let now: BTreeSet<String> = self
            .keys()
            .await?
            .into_iter()
            .filter(|k| !abandoned.contains(k) || at_stop.contains(k))
            .collect();
        if now != at_stop {
            let added: Vec<_> = now.difference(&at_stop).collect();
            let removed: Vec<_> = at_stop.difference(&now).collect();
            return Err(format!(
                "a stopped store changed its prefix after its stop returned {:?}: added {added:?}, removed {removed:?}",
                self.stopped
            ));
        }
        self.stats.bump("stops checked quiet", 1);
        Ok(())
    }

    /// The epochs of the fences in the store (read past the faults).
    pub(super) async fn fences(&self) -> Result<BTreeSet<u64>, String> {
        let inner = self.faulty.inner().clone();
        let listed = within("a list of fences", inner.list(&format!("{PREFIX}/fences/")))
            .await?
            .map_err(|e| format!("listing fences: {e}"))?;
        Ok(listed
            .iter()
            .filter_map(|m| {
                m.key
                    .rsplit('/')
                    .next()?
                    .strip_suffix(".fence")?
                    .parse()
                    .ok()
            })
            .collect())
    }

    /// An open that succeeded left a fence above every fence there was
    /// before it, and the epochs stay dense from 1.
    async fn check_fenced(&mut self, before: &BTreeSet<u64>) -> Result<(), String> {
        let after = self.fences().await?;
        let newest_before = before.last().copied().unwrap_or(0);
        if after.last().copied().unwrap_or(0) <= newest_before {
            return Err(format!(
                "an open succeeded without a fence of its own: fences {after:?}, before it {before:?}"
            ));
        }
        let dense = after.iter().copied().eq(1..=after.len() as u64);
        if !dense {
            return Err(format!("the fences are not dense from 1: {after:?}"));
        }
        self.stats.bump("opens with their fence checked", 1);
        Ok(())
    }

    /// After an open: the faults are cleared, every region is replayed
    /// from 0 and checked, and failed releases are repeated.
    pub(super) async fn check_restart(&mut self, wal: Wal) -> Result<(), String> {
        self.check_restart_allowing(wal, &BTreeSet::new()).await
    }

    /// [`Self::check_restart`], where the entries of objects `lost` (deleted
    /// by hand, or named unreplayed) may be missing.
    pub(super) async fn check_restart_allowing(
        &mut self,
        wal: Wal,
        lost: &BTreeSet<u64>,
    ) -> Result<(), String> {
        self.clear_faults();
        let infos = within("regions", wal.regions())
            .await?
            .map_err(|e| format!("regions() after an open: {e}"))?;
        let mut replay = BTreeMap::new();
        let mut holes = Vec::new();
        for region in 0..REGIONS {
            let entries = within("replay", read_past_holes(&wal, region, 0))
                .await?
                .map_err(|e| format!("replay of region {region}: {e}"))?;
            holes.extend(wal.holes(region));
            replay.insert(region, entries);
        }
        // The bulk replay of every region yields what the reads did.
        let bulk = within("bulk replay", super::surface::replay_all(&wal, 0..REGIONS)).await?;
        if !self.settings.fail_on_corruption || holes.is_empty() {
            let bulk = bulk.map_err(|e| format!("bulk replay after an open: {e}"))?;
            super::surface::same_as_reads(&bulk, &replay, "the bulk replay after an open")?;
        }
        self.stats.bump("restarts", 1);
        self.stats.bump(
            "entries replayed",
            replay.values().map(|e| e.len() as u64).sum::<u64>(),
        );
        self.stats.bump("holes at restarts", holes.len() as u64);
        self.model.restarted(&replay, &infos, &holes, lost)?;
        self.stopped = None;
        for region in self.model.to_release_again() {
            within("release", wal.release_region(region))
                .await?
                .map_err(|e| format!("repeating the release of region {region}: {e}"))?;
            self.model.release_answered(region, true, true);
        }
        self.handles = vec![wal; super::steps::HANDLES];
        Ok(())
    }

    /// Runs one step.
    pub async fn step(&mut self, step: &Step) -> Result<(), String> {
        self.stats.bump("steps", 1);
        match step {
            Step::Op(op) => self.op(op, false).await,
            Step::Together(ops) => self.together(ops).await,
            Step::Faulty { fault, ops } => {
                // One read corrupted in transit is never damage (a second
                // look reads it whole): only two may leave holes.
                let damaging = matches!(fault, Fault::CorruptNewest)
                    || matches!(fault, Fault::CorruptRead { n } if *n >= 2);
                self.model.corruption |= damaging;
                self.stats.bump(&format!("fault {}", fault.name()), 1);
                fault.arm(
                    &self.faulty,
                    &self.network,
                    self.config.request_timeout.is_some(),
                );
                if let Fault::CorruptNewest = fault {
                    self.corrupt_newest().await?;
                }
                self.armed = Some(*fault);
                for op in ops {
                    let done = self.op(op, true).await;
                    if done.is_err() {
                        self.armed = None;
                    }
                    done?;
                }
                self.armed = None;
                if let Some(following) = self.following.as_mut() {
                    following.met_corruption |= damaging;
                    following.met_permanent_failure |= matches!(
                        fault,
                        Fault::FailRead {
                            permanent: true,
                            ..
                        }
                    );
                }
                if let Fault::Outage { ms } = fault {
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                }
                self.clear_faults();
                self.settle().await
            }
            Step::Held {
                after_landed,
                letting,
                crash,
                release_second,
                regions,
            } => {
                self.held(*after_landed, *letting, *crash, *release_second, *regions)
                    .await
            }
        }
    }

    /// After the faults are cleared the store must work again: a flush
    /// returns `Ok` (an enqueued store that was failing has repeated its
    /// creates by then).
    pub(super) async fn settle(&mut self) -> Result<(), String> {
        if self.poisoned {
            self.poisoned = false;
            self.stats.bump("stores poisoned by a failed read-back", 1);
            self.handles.clear();
            let wal = self.open(false).await?;
            return self.check_restart(wal).await;
        }
        if self.stopped.is_some() {
            return Ok(());
        }
        self.repeat_imports().await?;
        // A batch sealed under the faults may still fail after they are
        // cleared (a stalled create gives up at `request_timeout`, then its
        // void settles the key): the first flushes may report it.
        // Slow creates (`network`) make the repeats of a backlog slower.
        let attempts = if self.settings.slow.is_some() { 10 } else { 3 };
        for attempt in 0..attempts {
            let (_, admitted) = self.model.snapshot();
            let flushed = within("flush after the faults", self.wal(0).flush()).await?;
            match flushed {
                Ok(()) => {
                    self.model.flushed(&admitted);
                    return Ok(());
                }
                Err(e) if attempt + 1 < attempts && e.is_retryable() => {
                    self.expect_error(Call::Flush, &e, true, &[])?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    return Err(format!(
                        "the store did not recover once the faults were cleared: flush: {e}"
                    ))
                }
            }
        }
        Ok(())
    }

    /// Runs one operation; `faulty`: a fault is armed.
    pub async fn op(&mut self, op: &Op, faulty: bool) -> Result<(), String> {
        let (promised, admitted) = self.model.snapshot();
        let floor = self.model.floor();
        match op {
            Op::Append { handle, entries } => {
                let (keys, batch) = self.register(entries);
                let result = within("append", self.wal(*handle).append(batch)).await?;
                self.append_answered(&keys, result, faulty, &floor)
            }
            Op::Read {
                handle,
                region,
                from,
            } => {
                let from = self.from(*region, *from);
                let result = within("read", read_all(self.wal(*handle), *region, from)).await?;
                self.read_answered(*handle, *region, from, result, faulty, &promised)
            }
            Op::Obsolete { region, pick } => {
                let Some(id) = self.model.pick(*region, *pick) else {
                    return Ok(());
                };
                let result = within("obsolete", self.wal(0).obsolete(*region, id)).await?;
                if self.answered(Call::Obsolete, &result, faulty)? {
                    self.model.obsoleted(*region, id);
                }
                Ok(())
            }
            Op::WaitDurable { region, pick } => {
                let Some(id) = self.model.pick(*region, *pick) else {
                    return Ok(());
                };
                let result = within("wait_durable", self.wal(1).wait_durable(*region, id)).await?;
                self.wait_answered(id, result, faulty)
            }
            Op::Release { region } => {
                let result = within("release_region", self.wal(2).release_region(*region)).await?;
                self.release_answered(*region, result, faulty)
            }
            Op::ReleaseForever { region } => self.release_forever(*region, faulty).await,
            Op::Flush => {
                let result = within("flush", self.wal(0).flush()).await?;
                self.flush_answered(result, faulty, &admitted)
            }
            Op::Advance { ms } => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                Ok(())
            }
            Op::Stop => self.stop(faulty).await,
            Op::Reopen => {
                if self.stopped.is_none() {
                    self.stop(faulty).await?;
                }
                self.handles.clear();
                let wal = self.open(faulty).await?;
                self.check_restart(wal).await
            }
            Op::Crash => {
                self.handles.clear();
                let wal = self.open(faulty).await?;
                self.check_restart(wal).await
            }
            Op::SecondOpener => self.second_opener(faulty).await,
            Op::Replay { from } => self.replay(from, faulty).await,
            Op::Burst { region, objects } => {
                for _ in 0..*objects {
                    let floor = self.model.floor();
                    let (keys, batch) = self.register(&[(*region, 8)]);
                    let result = within("append", self.wal(0).append(batch)).await?;
                    self.append_answered(&keys, result, faulty, &floor)?;
                    let (_, admitted) = self.model.snapshot();
                    let result = within("flush", self.wal(0).flush()).await?;
                    self.flush_answered(result, faulty, &admitted)?;
                }
                self.stats.bump("bursts", 1);
                let all: Vec<(u64, From)> = (0..super::steps::REGIONS)
                    .map(|r| (r, From::Start))
                    .collect();
                self.replay(&all, faulty).await
            }
            Op::Reader { from } => self.reader(from, faulty).await,
            Op::SourceAppend { region, n } => self.source_append(*region, *n, faulty).await,
            Op::Import {
                region,
                fill,
                corrupt,
            } => {
                if *fill {
                    self.source_append(*region, 2, faulty).await?;
                }
                self.import(*region, *corrupt, faulty).await
            }
            Op::Damage { pick, delete } => {
                // A follower waiting at the damaged object may fail or
                // report holes: it is let go.
                self.following = None;
                self.damage(*pick, *delete, false).await
            }
            Op::Repair { pick } => {
                self.following = None;
                self.damage(*pick, false, true).await
            }
            Op::Follow { from, held } => self.follow(from, *held, faulty).await,
            Op::CatchUp => self.catch_up(faulty).await,
            Op::FollowInFlight { region, n } => self.follow_in_flight(*region, *n, faulty).await,
            Op::ObsoleteUnlanded { region } => self.obsolete_unlanded(*region, faulty).await,
            Op::DeadObject { region, then_open } => {
                self.dead_object(*region, *then_open, faulty).await
            }
            Op::JumpOpener { region, skip, held } => {
                self.jump_opener(*region, *skip, *held, faulty).await
            }
            Op::FollowJump { region, skip } => self.follow_jump(*region, *skip, faulty).await,
            Op::Move { region, shape } => self.move_by_following(*region, *shape, faulty).await,
            Op::FollowOutside { from } => self.follow_outside(from, faulty).await,
            Op::ObsoleteAhead { region, ahead } => {
                let Some(newest) = self.model.newest_id() else {
                    return Ok(());
                };
                let id = newest + ahead;
                let result = within("obsolete ahead", self.wal(0).obsolete(*region, id)).await?;
                if self.answered(Call::Obsolete, &result, faulty)? {
                    self.model.obsoleted(*region, id);
                    self.stats.bump("marks above every id", 1);
                }
                Ok(())
            }
        }
    }

    pub(super) fn register(
        &mut self,
        entries: &[(RegionId, usize)],
    ) -> (Vec<Key>, Vec<(RegionId, bytes::Bytes)>) {
        entries
            .iter()
            .map(|(region, len)| {
                let (key, data) = self.model.add(*region, *len);
                (key, (*region, data))
            })
            .unzip()
    }

    pub(super) fn from(&self, region: RegionId, from: From) -> u64 {
        match from {
            From::Start => 0,
            From::At(k) => self.model.pick(region, k).unwrap_or(0),
            From::After(k) => self.model.pick(region, k).map_or(0, |id| id + 1),
        }
    }

    pub(super) fn append_answered(
        &mut self,
        keys: &[Key],
        result: Result<Vec<u64>, Error>,
        faulty: bool,
        floor: &HashMap<RegionId, u64>,
    ) -> Result<(), String> {
        if let Err(e) = &result {
            let regions = self.model.regions_of(keys);
            self.expect_error(Call::Append, e, faulty, &regions)?;
        } else if self.stopped.is_some() {
            return Err("an append on a stopped store answered Ok".into());
        }
        self.model.appended(keys, &result, floor)
    }

    pub(super) fn read_answered(
        &mut self,
        handle: usize,
        region: RegionId,
        from: u64,
        result: Result<Vec<Entry>, Error>,
        faulty: bool,
        promised: &BTreeSet<Key>,
    ) -> Result<(), String> {
        match result {
            Ok(entries) => {
                if self.stopped.is_some() && !entries.is_empty() {
                    return Err(format!(
                        "a read on a stopped store returned {} entries",
                        entries.len()
                    ));
                }
                let holes = self.wal(handle).holes(region);
                self.stats.bump("entries read", entries.len() as u64);
                self.stats.bump("holes read", holes.len() as u64);
                self.model.read(region, from, &entries, &holes, promised)
            }
            Err(e) => self.expect_error(Call::Read, &e, faulty, &[]),
        }
    }

    /// Whether a call answering `()` succeeded (`Ok(true)`: the model
    /// learns it) or failed as documented (`Ok(false)`).
    pub(super) fn answered(
        &mut self,
        call: Call,
        result: &Result<(), Error>,
        faulty: bool,
    ) -> Result<bool, String> {
        match result {
            Ok(()) if self.stopped.is_some() => {
                Err(format!("{call:?} on a stopped store answered Ok"))
            }
            Ok(()) => Ok(true),
            Err(e) => self.expect_error(call, e, faulty, &[]).map(|()| false),
        }
    }

    pub(super) fn release_answered(
        &mut self,
        region: RegionId,
        result: Result<(), Error>,
        faulty: bool,
    ) -> Result<(), String> {
        let ok = self.answered(Call::Release, &result, faulty)?;
        // A refused release is kept (in force in memory), unless the store
        // is stopped or poisoned.
        let kept = result
            .as_ref()
            .err()
            .is_none_or(|e| !e.is_stopped() && !e.is_poisoned());
        self.model.release_answered(region, ok, kept);
        Ok(())
    }

    pub(super) fn wait_answered(
        &mut self,
        id: u64,
        result: Result<(), Error>,
        faulty: bool,
    ) -> Result<(), String> {
        if self.answered(Call::WaitDurable, &result, faulty)? {
            self.model.durable(id);
        }
        Ok(())
    }

    pub(super) fn flush_answered(
        &mut self,
        result: Result<(), Error>,
        faulty: bool,
        admitted: &BTreeSet<Key>,
    ) -> Result<(), String> {
        if self.answered(Call::Flush, &result, faulty)? {
            self.model.flushed(admitted);
        }
        Ok(())
    }

    pub(super) async fn stop(&mut self, faulty: bool) -> Result<(), String> {
        let result = within("stop", self.wal(1).stop()).await?;
        if let Some(first) = &self.stopped {
            return if same(first, &result) {
                Ok(())
            } else {
                Err(format!(
                    "a second stop answered {result:?}, the first {first:?}"
                ))
            };
        }
        match &result {
            Ok(()) => self.model.stopped_ok(),
            Err(e) => self.expect_error(Call::Stop, e, faulty, &[])?,
        }
        self.stopped = Some(result);
        self.stopped_keys = Some(self.keys().await?);
        Ok(())
    }

    /// `latest_entry_id` covers every id acknowledged in this life.
    pub fn check_latest(&self) -> Result<(), String> {
        for region in 0..REGIONS {
            let latest = self.wal(0).latest_entry_id(region);
            let floor = self.model.latest_floor(region);
            if latest < floor {
                return Err(format!(
                    "latest_entry_id({region}) is {latest}, below the acknowledged id {floor}"
                ));
            }
        }
        Ok(())
    }
}
