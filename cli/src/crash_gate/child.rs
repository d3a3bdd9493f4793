//! One life of the crash gate (`objwal crash-gate --child-life N`): a
//! storage-engine workload that runs until the parent SIGKILLs it.
//!
//! It reads what the history requires from its standard input (the
//! watermarks to hand in again, the regions released for good, the
//! releases to repeat), opens the WAL, and runs: `--writers` tasks
//! appending one to four entries at a time to random active regions, a
//! flusher marking regions obsolete up to ids known durable, a barrier task
//! calling `flush`, and a releaser dropping a region in most lives (a
//! released region is replaced by a fresh id, so `--regions` stay active).
//! In enqueued mode every entry's `wait_durable` runs behind its append; in
//! durable mode one append in sixteen is followed by a `wait_durable`.
//!
//! With `--faults` the life's storage goes through the fault wrapper
//! ([`super::faults`]): one kind of fault is armed every 50 to 300 ms, the
//! store's counters are reported as `M` lines, a reader task reads regions
//! back (so that read faults meet reads) and checks every byte it gets, the
//! open is repeated when a fault fails it, and the errors the faults cause
//! are recorded with their kind and tolerated (a permanent storage error
//! included); the lives with kept releases also release a region right
//! after each arming.
//!
//! With `--power-loss` (and no `--faults`) the lives arm the faults that
//! take the directory backend through "already exists" (slowed directory
//! fsyncs with hedged creates, creates whose answer and read-back are
//! lost), and every other life opens the prefix a second time while the
//! first store runs ([`second_opener`], logged `H`): its walk meets the
//! first store's creates as they land.
//!
//! Every fact goes to standard output, a pipe the parent reads, one line
//! per `write` (shorter than `PIPE_BUF`, so a kill never interleaves two),
//! in the grammar of [`super::check`]: an intent before its
//! call, an outcome once the library answered. A line can lag its fact (the
//! kill may fall in between) but never lead it. The pipe, not a file: what
//! the child wrote is in the kernel's pipe buffer once `write` returned, so
//! a SIGKILL cannot take it back and no fsync is needed.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use objwal::storage::fault::FaultyStorage;
use objwal::{Error, Wal};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::check::{payload_of, Key};
use super::faults::{self, Counters, Kind};
use crate::payload;
use crate::store::{self, AckModeArg};
use crate::{CliError, CliResult};

/// Entries an enqueued writer may have admitted but not yet seen durable.
const MAX_NOT_DURABLE: usize = 64;

/// The lives' `max_batch_bytes`: objects of up to 1 MiB, so that a life
/// fills some (the defaults' 8 MiB would never fill in a second).
const MAX_BATCH_BYTES: &str = "1MiB";

/// The lives' `max_unpersisted_bytes`: an enqueued backlog of at most
/// 4 MiB, so that writers meet the bound (and stall, rule E1) instead of
/// piling up 64 MiB that a kill then mostly loses.
const MAX_UNPERSISTED_BYTES: &str = "4MiB";

/// What the history hands to a life on its standard input, one item a
/// line: `W region id` (hand this watermark in), `F region id` (replayed
/// through this id: flushable, as an engine flushes what it replayed into
/// its memtable), `X region` (released: never append), `Y region` (release
/// again, then never append).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Inherited {
    /// Watermarks to hand in again.
    pub watermarks: Vec<(u64, u64)>,
    /// Per region, the largest id known durable.
    pub durable: Vec<(u64, u64)>,
    /// Regions released for good.
    pub released: BTreeSet<u64>,
    /// Regions whose release must be repeated.
    pub releasing: BTreeSet<u64>,
}

impl Inherited {
    /// The text the child reads.
    pub fn render(&self) -> String {
        let mut text = String::new();
        for (region, id) in &self.watermarks {
            text.push_str(&format!("W {region} {id}\n"));
        }
        for (region, id) in &self.durable {
            text.push_str(&format!("F {region} {id}\n"));
        }
        for region in &self.released {
            text.push_str(&format!("X {region}\n"));
        }
        for region in &self.releasing {
            text.push_str(&format!("Y {region}\n"));
        }
        text
    }

    /// Parses [`render`](Self::render)'s text.
    pub fn parse(text: &str) -> Result<Inherited, String> {
        let mut inherited = Inherited::default();
        for line in text.lines() {
            let bad = || format!("crash-gate: bad inherited line {line:?}");
            let mut f = line.split(' ');
            let kind = f.next().ok_or_else(bad)?;
            let region: u64 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            match kind {
                "W" | "F" => {
                    let id = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                    let list = if kind == "W" {
                        &mut inherited.watermarks
                    } else {
                        &mut inherited.durable
                    };
                    list.push((region, id));
                }
                "X" => {
                    inherited.released.insert(region);
                }
                "Y" => {
                    inherited.releasing.insert(region);
                }
                _ => return Err(bad()),
            }
            if f.next().is_some() {
                return Err(bad());
            }
        }
        Ok(inherited)
    }
}

/// What one life is told by the parent.
pub struct LifeArgs {
    /// The store URL.
    pub store: String,
    /// This life's number (from 1): the `run` of its payloads.
    pub life: u32,
    /// The ack mode.
    pub ack_mode: AckModeArg,
    /// Regions kept active.
    pub regions: u32,
    /// Writer tasks.
    pub writers: u16,
    /// The seed of this life's choices.
    pub seed: u64,
    /// The store's flush interval.
    pub flush_interval: String,
    /// The longest the parent lets a life run (the releaser's horizon).
    pub life_seconds: f64,
    /// The kind of fault this life arms, if any.
    pub faults: Option<Kind>,
    /// Journal what a power loss would keep (the directory backend).
    pub power_loss: bool,
}

/// The fact log on standard output (whose lock keeps lines whole).
#[derive(Clone, Copy)]
struct Log;

impl Log {
    fn line(&self, line: std::fmt::Arguments<'_>) -> CliResult {
        let text = format!("{line}\n");
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| CliError::Failed(format!("crash-gate child: cannot write its log: {e}")))
    }
}

/// The active regions: `regions` ids that are neither released nor being
/// released; a released one is replaced by the next fresh id.
struct Regions {
    active: Vec<u64>,
    next: u64,
}

impl Regions {
    fn new(count: u32, avoid: &BTreeSet<u64>) -> Regions {
        let mut regions = Regions {
            active: Vec::new(),
            next: 0,
        };
        for _ in 0..count {
            regions.add_fresh(avoid);
        }
        regions
    }

    fn add_fresh(&mut self, avoid: &BTreeSet<u64>) {
        while avoid.contains(&self.next) {
            self.next += 1;
        }
        self.active.push(self.next);
        self.next += 1;
    }
}

/// State the tasks of a life share.
struct Shared {
    wal: Wal,
    log: Log,
    life: u32,
    enqueued: bool,
    /// Faults are armed in this life: the errors they cause are tolerated.
    faulty: bool,
    avoid: Mutex<(Regions, BTreeSet<u64>)>,
    /// Per region, the largest id this life knows durable.
    durable: Mutex<HashMap<u64, u64>>,
    /// A second opener of the prefix started in this life.
    second: AtomicBool,
    /// The store was fenced by it: the tasks stop.
    parked: AtomicBool,
}

impl Shared {
    fn pick(&self, rng: &mut StdRng) -> u64 {
        let guard = self.avoid.lock().unwrap_or_else(|e| e.into_inner());
        let active = &guard.0.active;
        active
            .get(rng.random_range(0..active.len().max(1)))
            .copied()
            .unwrap_or(0)
    }

    fn is_active(&self, region: u64) -> bool {
        let guard = self.avoid.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.active.contains(&region)
    }

    /// Takes a random active region out of use (writers stop choosing it
    /// before its release is called) and brings in a fresh one.
    fn retire(&self, rng: &mut StdRng) -> u64 {
        let mut guard = self.avoid.lock().unwrap_or_else(|e| e.into_inner());
        let (regions, avoid) = &mut *guard;
        if regions.active.is_empty() {
            regions.add_fresh(avoid);
        }
        let i = rng.random_range(0..regions.active.len());
        let region = regions.active.swap_remove(i);
        avoid.insert(region);
        regions.add_fresh(avoid);
        region
    }

    /// Waits forever once the store was fenced by the life's second
    /// opener (its calls would only answer fenced).
    async fn park(&self) {
        if self.parked.load(Ordering::SeqCst) {
            futures::future::pending::<()>().await;
        }
    }

    fn durable(&self, region: u64, id: u64) {
        let mut map = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        let slot = map.entry(region).or_insert(0);
        *slot = (*slot).max(id);
    }
}

/// Runs one life until it is killed; returning at all is a failure.
pub async fn run(prefix: &str, args: LifeArgs) -> CliResult {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| CliError::Failed(format!("crash-gate child: cannot read its input: {e}")))?;
    let inherited = Inherited::parse(&input).map_err(CliError::Failed)?;
    let (storage, directory) = life_storage(&args)?;
    let faulty = FaultyStorage::new(storage);
    let mut overrides = serde_json::Map::new();
    overrides.insert("ack_mode".into(), args.ack_mode.as_str().into());
    overrides.insert("flush_interval".into(), args.flush_interval.clone().into());
    overrides.insert("max_batch_bytes".into(), MAX_BATCH_BYTES.into());
    overrides.insert("max_unpersisted_bytes".into(), MAX_UNPERSISTED_BYTES.into());
    if args.faults.is_some_and(Kind::hedges) {
        overrides.insert("request_timeout".into(), faults::STALL_TIMEOUT.into());
        // `auto` hedges only where requests cost money, never on a
        // directory: a budget of our own, so that stalled creates are
        // hedged and the hedge's race with the void is exercised.
        overrides.insert("hedge_creates".into(), faults::STALL_HEDGE_BUDGET.into());
    }
    let config = store::config(overrides)?;
    let log = Log;
    let rng =
        |salt: u64| StdRng::seed_from_u64(args.seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut tasks = tokio::task::JoinSet::new();
    // Before the open, so that the store's handles reach the recorder and
    // faults may fall into the open.
    if let Some(counters) = Counters::install() {
        tasks.spawn(faults::report(counters, move |l| log.line(l)));
    }
    let release_now = Arc::new(tokio::sync::Notify::new());
    if let Some(kind) = args.faults {
        let (faulty, release_now) = (faulty.clone(), release_now.clone());
        tasks.spawn(faults::arm(
            faulty,
            directory,
            kind,
            rng(5 << 20),
            move |l| log.line(l),
            release_now,
        ));
    }
    let config_of_second = config.clone();
    let wal = open(&faulty, prefix, config, args.faults.is_some(), log).await?;
    log.line(format_args!("O"))?;
    let mut avoid = inherited.released.clone();
    avoid.extend(&inherited.releasing);
    for (region, id) in &inherited.watermarks {
        if !avoid.contains(region) {
            wal.obsolete(*region, *id).await?;
        }
    }
    let shared = Arc::new(Shared {
        wal: wal.clone(),
        log,
        life: args.life,
        enqueued: args.ack_mode == AckModeArg::Enqueued,
        faulty: args.faults.is_some(),
        avoid: Mutex::new((Regions::new(args.regions.max(1), &avoid), avoid)),
        durable: Mutex::new(inherited.durable.iter().copied().collect()),
        second: AtomicBool::new(false),
        parked: AtomicBool::new(false),
    });
    for writer in 0..args.writers {
        tasks.spawn(write(shared.clone(), writer, rng(u64::from(writer) + 1)));
    }
    tasks.spawn(flusher(shared.clone(), inherited.watermarks, rng(1 << 20)));
    tasks.spawn(barriers(shared.clone(), rng(2 << 20)));
    let horizon = Duration::from_secs_f64(args.life_seconds);
    let kept_releases = (args.faults == Some(Kind::KeptReleases)).then_some(release_now);
    tasks.spawn(releaser(
        shared.clone(),
        inherited.releasing,
        horizon,
        kept_releases,
        rng(3 << 20),
    ));
    if args.faults.is_some() {
        tasks.spawn(reader(shared.clone(), rng(4 << 20)));
    }
    if args.power_loss && args.life.is_multiple_of(2) {
        tasks.spawn(second_opener(
            shared.clone(),
            faulty.clone(),
            prefix.to_owned(),
            config_of_second,
            horizon,
            rng(6 << 20),
        ));
    }
    let deadline = tokio::time::sleep(horizon + Duration::from_secs(120));
    tokio::select! {
        () = deadline => Err(CliError::Failed("crash-gate child: not killed before its deadline".into())),
        Some(done) = tasks.join_next() => match done {
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => Err(CliError::Failed("crash-gate child: a task ended early".into())),
            Err(e) => Err(CliError::Failed(format!("crash-gate child: a task failed: {e}"))),
        },
    }
}

/// The life's store: with `--power-loss`, the directory backend journaling
/// what a power loss would keep (`super::journal_path`), and that backend
/// (its fsyncs can be slowed: [`Kind::SlowFsyncs`]).
fn life_storage(
    args: &LifeArgs,
) -> Result<(objwal::Storage, Option<objwal::storage::FileStorage>), CliError> {
    if !args.power_loss {
        return Ok((store::open(&args.store, false)?, None));
    }
    let root = store::file_path(&args.store)
        .ok_or_else(|| CliError::Usage("crash-gate --power-loss needs a file:// store".into()))?;
    let fs = objwal::storage::FileStorage::open(root)?;
    fs.record_power_loss(&super::journal_path(&args.store, args.life)?)?;
    Ok((objwal::Storage::new(CountingExists(fs.clone())), Some(fs)))
}

/// The directory backend, counting its "already exists" answers to
/// creates of objects (`crash_gate_exists_total` among the `M` counters):
/// the path a `--power-loss` gate must take (a hedge or a repeat meeting
/// the writer's own landing, a walk's marker meeting the first store's
/// object, the first store's create meeting a marker).
#[derive(Debug)]
struct CountingExists(objwal::storage::FileStorage);

#[async_trait::async_trait]
impl objwal::ObjectStorage for CountingExists {
    async fn create(
        &self,
        key: &str,
        data: bytes::Bytes,
    ) -> Result<objwal::storage::Created, objwal::storage::StorageError> {
        let created = self.0.create(key, data).await;
        if key.contains("/objects/")
            && matches!(created, Ok(objwal::storage::Created::AlreadyExists))
        {
            metrics::counter!("crash_gate_exists_total").increment(1);
        }
        created
    }

    async fn read(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, objwal::storage::StorageError> {
        self.0.read(key, range).await
    }

    async fn read_suffix(
        &self,
        key: &str,
        len: u64,
    ) -> Result<objwal::storage::Suffix, objwal::storage::StorageError> {
        self.0.read_suffix(key, len).await
    }

    async fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<objwal::storage::ObjectMeta>, objwal::storage::StorageError> {
        self.0.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), objwal::storage::StorageError> {
        self.0.delete(key).await
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), objwal::storage::StorageError> {
        self.0.remove_leftovers(prefix).await
    }

    fn charges_per_request(&self) -> bool {
        self.0.charges_per_request()
    }
}

/// A second opener in the life (`--power-loss`, every other life): at 5%
/// to 30% of the life it logs `H` and opens the prefix again through the
/// same store, as a restarted process whose predecessor still runs. Its
/// walk meets the first store's run while creates of that run land (the
/// directory backend's "already exists" for a marker, and for the first
/// store's create at a marker), and fences the first store: its calls
/// answer fenced, and its tasks stop ([`Shared::park`]) until the kill.
/// The second store writes nothing but its open's objects; it stays open
/// until the kill.
async fn second_opener(
    shared: Arc<Shared>,
    faulty: FaultyStorage,
    prefix: String,
    config: objwal::Config,
    horizon: Duration,
    mut rng: StdRng,
) -> CliResult {
    tokio::time::sleep(horizon.mul_f64(rng.random_range(0.05..0.3))).await;
    shared.second.store(true, Ordering::SeqCst);
    shared.log.line(format_args!("H"))?;
    match Wal::open(faulty.storage(), &prefix, config).await {
        Ok(wal) => {
            let _kept = wal;
            futures::future::pending::<()>().await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "crash-gate child: the second opener failed");
            futures::future::pending::<()>().await;
        }
    }
    Ok(())
}

/// Opens the WAL: once without faults; with faults, again after a failed
/// open (logged `G kind`: a fault may fail a claim, a listing or a tail
/// read), up to [`OPEN_ATTEMPTS`] times.
async fn open(
    faulty: &FaultyStorage,
    prefix: &str,
    config: objwal::Config,
    faults: bool,
    log: Log,
) -> Result<Wal, CliError> {
    let mut attempt = 1;
    loop {
        match Wal::open(faulty.storage(), prefix, config.clone()).await {
            Ok(wal) => return Ok(wal),
            Err(e) if faults && attempt < OPEN_ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "crash-gate child: open failed under faults");
                log.line(format_args!("G {}", error_kind(&e)))?;
            }
            Err(e) => return Err(e.into()),
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How often a life with faults tries to open before it gives up.
const OPEN_ATTEMPTS: u32 = 20;

/// The name of an error's kind in the log (`N`, `K`, `Z`, `G` lines).
pub fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::NotDurable { .. } => "not-durable",
        Error::Storage { .. } => "storage",
        Error::Failing { .. } => "failing",
        Error::Lost { .. } => "lost",
        Error::Stopped { .. } => "stopped",
        Error::Fenced { .. } => "fenced",
        Error::Poisoned { .. } => "poisoned",
        Error::RegionReleased { .. } => "released",
        Error::Corrupted { .. } => "corrupted",
        _ => "other",
    }
}

/// A failure the workload goes on after: a retryable error (the engine
/// would retry), and with faults armed also a permanent storage error (an
/// injected one). Anything else ends the life, and so fails the gate.
fn tolerated(shared: &Shared, e: Error) -> CliResult {
    // Fenced by the life's second opener (a marker of its walk, or a filler
    // met as it opened): the tasks stop.
    if shared.second.load(Ordering::SeqCst) && e.is_poisoned() {
        shared.parked.store(true, Ordering::SeqCst);
        return Ok(());
    }
    let injected = shared.faulty && matches!(e, Error::Storage { .. });
    if e.is_retryable() || injected {
        tracing::warn!(error = %e, "crash-gate child: tolerated error");
        Ok(())
    } else {
        Err(CliError::Failed(format!("crash-gate child: {e}")))
    }
}

/// One writer: appends until killed.
async fn write(shared: Arc<Shared>, writer: u16, mut rng: StdRng) -> CliResult {
    let log = &shared.log;
    let mut counter = 0u32;
    let mut pending = FuturesOrdered::new();
    loop {
        shared.park().await;
        let n = rng.random_range(1..=4);
        let entries: Vec<(Key, u64)> = (0..n)
            .map(|_| {
                counter += 1;
                ((shared.life, writer, counter), shared.pick(&mut rng))
            })
            .collect();
        for ((_, w, c), region) in &entries {
            log.line(format_args!("P {w} {c} {region}"))?;
        }
        let batch = entries
            .iter()
            .map(|(key, region)| (*region, payload_of(*key, *region)))
            .collect();
        match shared.wal.append(batch).await {
            Ok(ids) => {
                let kind = if shared.enqueued { "E" } else { "A" };
                for (((_, w, c), region), id) in entries.iter().zip(&ids) {
                    log.line(format_args!("{kind} {w} {c} {id}"))?;
                    if !shared.enqueued {
                        shared.durable(*region, *id);
                    }
                }
                let last = entries.last().zip(ids.last());
                if let Some(((_, region), id)) =
                    last.filter(|_| shared.enqueued || rng.random_ratio(1, 16))
                {
                    let wal = shared.wal.clone();
                    let (region, id) = (*region, *id);
                    pending
                        .push_back(async move { (region, id, wal.wait_durable(region, id).await) });
                }
            }
            Err(Error::RegionReleased { .. }) => {
                for ((_, w, c), _) in &entries {
                    log.line(format_args!("Q {w} {c}"))?;
                }
            }
            Err(e) => {
                let kind = error_kind(&e);
                for ((_, w, c), _) in &entries {
                    log.line(format_args!("N {w} {c} {kind}"))?;
                }
                tolerated(&shared, e)?;
            }
        }
        while pending.len() >= MAX_NOT_DURABLE {
            if let Some(done) = pending.next().await {
                barrier_done(&shared, done)?;
            }
        }
        while let Some(Some(done)) = pending.next().now_or_never() {
            barrier_done(&shared, done)?;
        }
    }
}

fn barrier_done(shared: &Shared, (region, id, result): (u64, u64, Result<(), Error>)) -> CliResult {
    match result {
        Ok(()) => {
            shared.log.line(format_args!("D {region} {id}"))?;
            shared.durable(region, id);
            Ok(())
        }
        Err(e) => tolerated(shared, e),
    }
}

/// Every 10 to 100 ms, marks about a third of the regions obsolete up to
/// the largest id known durable (replayed before this life, acknowledged
/// or confirmed in it), as an engine flushes its memtables.
async fn flusher(shared: Arc<Shared>, inherited: Vec<(u64, u64)>, mut rng: StdRng) -> CliResult {
    let mut watermarks: HashMap<u64, u64> = inherited.into_iter().collect();
    loop {
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..=100))).await;
        shared.park().await;
        let durable: Vec<(u64, u64)> = {
            let map = shared.durable.lock().unwrap_or_else(|e| e.into_inner());
            map.iter().map(|(r, id)| (*r, *id)).collect()
        };
        for (region, id) in durable {
            let above = watermarks.get(&region).is_none_or(|w| *w < id);
            if !above || !rng.random_ratio(1, 3) || !shared.is_active(region) {
                continue;
            }
            shared.log.line(format_args!("V {region} {id}"))?;
            match shared.wal.obsolete(region, id).await {
                Ok(()) => {
                    watermarks.insert(region, id);
                    shared.log.line(format_args!("W {region} {id}"))?;
                }
                Err(e) => tolerated(&shared, e)?,
            }
        }
    }
}

/// Every 30 to 300 ms, a `flush` barrier.
async fn barriers(shared: Arc<Shared>, mut rng: StdRng) -> CliResult {
    for k in 1u64.. {
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..=300))).await;
        shared.park().await;
        shared.log.line(format_args!("B {k}"))?;
        match shared.wal.flush().await {
            Ok(()) => shared.log.line(format_args!("C {k}"))?,
            Err(e) => tolerated(&shared, e)?,
        }
    }
    Ok(())
}

/// Repeats the inherited releases, then, in three lives of four, drops
/// one active region at a random moment of the first half of the life.
/// With `kept_releases` it also drops one right after each arming of
/// failed creates (so that releases meet a failing store).
async fn releaser(
    shared: Arc<Shared>,
    repeat: BTreeSet<u64>,
    horizon: Duration,
    kept_releases: Option<Arc<tokio::sync::Notify>>,
    mut rng: StdRng,
) -> CliResult {
    for region in repeat {
        release(&shared, region).await?;
    }
    if let Some(armed) = kept_releases {
        loop {
            armed.notified().await;
            let region = shared.retire(&mut rng);
            release(&shared, region).await?;
        }
    }
    if rng.random_ratio(3, 4) {
        tokio::time::sleep(horizon.mul_f64(rng.random_range(0.0..0.5))).await;
        let region = shared.retire(&mut rng);
        release(&shared, region).await?;
    }
    futures::future::pending::<()>().await;
    Ok(())
}

/// Releases `region` until a call returns `Ok` (a failed release is
/// repeated, as an engine whose manifest says "dropped" does); each failed
/// call is logged `K region kind` (`failing`: refused, its record kept).
async fn release(shared: &Shared, region: u64) -> CliResult {
    shared.log.line(format_args!("S {region}"))?;
    loop {
        shared.park().await;
        match shared.wal.release_region(region).await {
            Ok(()) => return shared.log.line(format_args!("R {region}")),
            Err(e) => {
                shared
                    .log
                    .line(format_args!("K {region} {}", error_kind(&e)))?;
                tolerated(shared, e)?;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With faults: every 20 to 100 ms reads an active region (from 0: what
/// is above its watermark), as an engine reads a region it takes over,
/// and checks every entry it gets against the bytes appended (`X region
/// id why` for one that differs: corruption must never reach a caller).
/// A read that ends is logged `Y region entries`, one that fails `Z region
/// kind`.
async fn reader(shared: Arc<Shared>, mut rng: StdRng) -> CliResult {
    loop {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..=100))).await;
        shared.park().await;
        let region = shared.pick(&mut rng);
        let mut entries = Box::pin(shared.wal.read(region, 0));
        let mut last = 0;
        let mut count = 0u64;
        let mut failed = None;
        while let Some(entry) = entries.next().await {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            count += 1;
            let why = match payload::check(&entry.data) {
                _ if entry.id <= last => Some("order"),
                Err(_) => Some("payload"),
                Ok(i) => {
                    let key = (i.run, i.writer, i.counter);
                    (entry.region != region || entry.data != payload_of(key, region))
                        .then_some("bytes")
                }
            };
            if let Some(why) = why {
                shared
                    .log
                    .line(format_args!("X {region} {} {why}", entry.id))?;
            }
            last = entry.id;
        }
        match failed {
            None => shared.log.line(format_args!("Y {region} {count}"))?,
            Some(e) => {
                shared
                    .log
                    .line(format_args!("Z {region} {}", error_kind(&e)))?;
                tolerated(&shared, e)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherited_state_round_trips_and_junk_is_refused() {
        let inherited = Inherited {
            watermarks: vec![(1, 1 << 20 | 3), (7, 9)],
            durable: vec![(1, 2 << 20 | 1)],
            released: BTreeSet::from([2, 5]),
            releasing: BTreeSet::from([6]),
        };
        assert_eq!(Inherited::parse(&inherited.render()), Ok(inherited));
        assert!(Inherited::parse("W 1\n").is_err());
        assert!(Inherited::parse("Z 1\n").is_err());
        assert!(Inherited::parse("X 1 2\n").is_err());
    }

    #[test]
    fn a_retired_region_is_replaced_by_a_fresh_one_never_by_an_avoided_one() {
        let avoid = BTreeSet::from([1, 4]);
        let regions = Regions::new(3, &avoid);
        assert_eq!(regions.active, vec![0, 2, 3]);
        let mut regions = regions;
        regions.add_fresh(&avoid);
        assert_eq!(regions.active, vec![0, 2, 3, 5]);
    }
}
