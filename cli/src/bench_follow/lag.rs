//! `objwal bench-follow lag`: from a create landing to the follower
//! yielding its entry.
//!
//! Per run and per writer rate (a busy writer, an append every `--busy`,
//! and a light one, every `--light`, in alternating order), a writer on a
//! fresh prefix appends one entry of region 1 per tick for `--seconds`,
//! through a wrapper that delays each create by `--latency` and records
//! the instant the store answered it (the object landed). A follower with
//! the default settings (`follow_interval` 100 ms, `follow_max_interval`
//! 1 s) reads through the fault wrapper with `--latency` on every read and
//! listing, and records when each entry reaches it. The lag of an entry is
//! the time between the two; its percentiles are reported per rate,
//! medians over the runs, with the follower's requests per object.
//!
//! `--collect` makes the writer declare each entry obsolete once it is
//! acknowledged (collection as aggressive as it gets); `--hold` has the
//! follower keep a reader hold placed before its reader opened
//! (rfcs/0011). The holes the follower met are reported.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::keys::Prefix;
use objwal::{
    Config, Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix, Wal, WalReader,
};
use tokio::time::Instant;

use super::{duration, median, ms, quantile, run_prefix};
use crate::store::clean;
use crate::{CliError, CliResult};

/// Arguments of `objwal bench-follow lag`.
#[derive(Debug, clap::Args)]
pub struct LagArgs {
    /// The store URL the log is written to (latency is injected above it).
    #[arg(long, default_value = "memory://")]
    store: String,
    /// Latency of every create (the writer's) and every read and listing
    /// (the follower's).
    #[arg(long, default_value = "30ms", value_parser = duration)]
    latency: Duration,
    /// Time between the busy writer's appends.
    #[arg(long, default_value = "50ms", value_parser = duration)]
    busy: Duration,
    /// Time between the light writer's appends.
    #[arg(long, default_value = "1s", value_parser = duration)]
    light: Duration,
    /// Seconds each writer appends per run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Runs; figures are medians over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// The writer declares each entry obsolete once acknowledged.
    #[arg(long)]
    collect: bool,
    /// The follower keeps a reader hold placed before its reader opened.
    #[arg(long)]
    hold: bool,
}

/// When each object's create was answered, by key.
type Landings = Arc<Mutex<HashMap<String, Instant>>>;

/// The writer's store: each create waits `latency`, then the instant it
/// was answered is recorded.
#[derive(Debug)]
struct Landing {
    inner: Storage,
    latency: Duration,
    landed: Landings,
}

#[async_trait::async_trait]
impl ObjectStorage for Landing {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        tokio::time::sleep(self.latency).await;
        let created = self.inner.create(key, data).await?;
        let mut landed = self.landed.lock().unwrap_or_else(|e| e.into_inner());
        landed.entry(key.to_owned()).or_insert_with(Instant::now);
        Ok(created)
    }
    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.inner.read_suffix(key, len).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
    fn charges_per_request(&self) -> bool {
        self.inner.charges_per_request()
    }
    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

/// A library error, as a failure of `what`.
fn failed(what: &'static str) -> impl Fn(objwal::Error) -> CliError {
    move |e| CliError::Failed(format!("{what}: {e}"))
}

/// One rate's figures in one run.
#[derive(Debug, Clone, Default)]
struct Measured {
    /// Lag of every entry, in ms.
    lags: Vec<f64>,
    objects: u64,
    requests: u64,
    lists: u64,
    holes: usize,
}

/// Runs the scenario.
pub async fn run(prefix: &str, args: LagArgs) -> CliResult {
    let storage = crate::store::open(&args.store, true)?;
    let base = run_prefix(prefix, "lag");
    out!(
        "bench-follow lag: {:?} per create, read and listing; writers append every {:?} (busy) and {:?} (light) for {} s; {} run(s)",
        args.latency, args.busy, args.light, args.seconds, args.runs
    );
    out!(
        "follower: default settings (follow_interval 100 ms, follow_max_interval 1 s){}{}",
        if args.collect {
            "; each entry obsolete once acknowledged"
        } else {
            ""
        },
        if args.hold {
            "; keeping a reader hold"
        } else {
            ""
        }
    );
    let mut busy = Vec::new();
    let mut light = Vec::new();
    for n in 0..args.runs {
        let order = if n % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_busy in order {
            let every = if is_busy { args.busy } else { args.light };
            let prefix = format!("{base}/{n}-{}", if is_busy { "busy" } else { "light" });
            let measured = measure(&storage, &prefix, &args, every).await;
            clean(&storage, &prefix).await;
            let m = measured?;
            report_run(n, is_busy, &m);
            if is_busy {
                busy.push(m);
            } else {
                light.push(m);
            }
        }
    }
    let target = 100.0 + ms(args.latency);
    for (name, runs) in [("busy", &busy), ("light", &light)] {
        let pick = |q: f64| {
            median(
                &runs
                    .iter()
                    .map(|m| quantile(&m.lags, q))
                    .collect::<Vec<_>>(),
            )
        };
        let per_object = median(
            &runs
                .iter()
                .map(|m| m.requests as f64 / m.objects.max(1) as f64)
                .collect::<Vec<_>>(),
        );
        let lists: u64 = runs.iter().map(|m| m.lists).sum();
        let holes: usize = runs.iter().map(|m| m.holes).sum();
        out!(
            "{name:<6} lag p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms (p50 / target {:.0} ms = {:.2}); {:.2} follower requests per object, {} listings, {holes} holes",
            pick(0.5),
            pick(0.9),
            pick(0.99),
            target,
            pick(0.5) / target,
            per_object,
            lists
        );
    }
    Ok(())
}

fn report_run(n: u32, busy: bool, m: &Measured) {
    out!(
        "run {n} {:<5}: {} entries in {} objects; lag p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms; {} requests ({} listings); {} holes",
        if busy { "busy" } else { "light" },
        m.lags.len(),
        m.objects,
        quantile(&m.lags, 0.5),
        quantile(&m.lags, 0.9),
        quantile(&m.lags, 1.0),
        m.requests,
        m.lists,
        m.holes
    );
}

async fn measure(
    storage: &Storage,
    prefix: &str,
    args: &LagArgs,
    every: Duration,
) -> Result<Measured, CliError> {
    let landed: Landings = Arc::default();
    let writer_storage = Storage::new(Landing {
        inner: storage.clone(),
        latency: args.latency,
        landed: landed.clone(),
    });
    let wal = Wal::open(writer_storage, prefix, crate::store::base())
        .await
        .map_err(failed("opening the writer"))?;
    let start = wal
        .append(vec![(1, Bytes::from_static(b"start"))])
        .await
        .map_err(failed("appending"))?[0];
    let faulty = FaultyStorage::new(storage.clone());
    for op in [Op::Read, Op::List] {
        faulty.set_latency(op, args.latency);
    }
    let hold = if args.hold {
        let ttl = Duration::from_secs(60);
        Some(
            objwal::Hold::place(storage.clone(), prefix, &Config::default(), "bench", ttl, 0)
                .await
                .map_err(failed("placing the hold"))?,
        )
    } else {
        None
    };
    let reader = WalReader::open(faulty.storage(), prefix, Config::default())
        .await
        .map_err(failed("opening the reader"))?;
    faulty.reset_counts();
    let mut follower = reader.follow([(1, start)]);
    if let Some(hold) = hold {
        follower.keep_hold(hold);
    }
    let holes = Arc::new(Mutex::new(0usize));
    let seen_holes = holes.clone();
    let keys = Prefix::new(prefix).map_err(|e| CliError::Usage(e.to_string()))?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = tokio::spawn(async move {
        while let Some(item) = follower.next().await {
            *seen_holes.lock().unwrap_or_else(|e| e.into_inner()) = follower.holes(1).len();
            let _ = tx.send((item, Instant::now()));
        }
    });
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let payload = Bytes::from(vec![b'x'; 100]);
    let mut appended = 0usize;
    while Instant::now() < end {
        ticker.tick().await;
        let id = wal
            .append(vec![(1, payload.clone())])
            .await
            .map_err(failed("appending"))?[0];
        if args.collect {
            wal.obsolete(1, id).await.map_err(failed("obsoleting"))?;
        }
        appended += 1;
    }
    let mut measured = Measured::default();
    let mut objects = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while measured.lags.len() < appended {
        let got = tokio::time::timeout_at(deadline, rx.recv()).await;
        let Ok(Some((item, at))) = got else {
            // Entries in holes never come.
            if *holes.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
                break;
            }
            return Err(CliError::Failed(format!(
                "the follower yielded {} of {appended} entries within 30 s",
                measured.lags.len()
            )));
        };
        let entry = item.map_err(failed("following"))?;
        let sequence = objwal::format::sequence_of(entry.id);
        let key = keys.object_key(sequence);
        let landed_at = landed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        if let Some(landed_at) = landed_at {
            measured
                .lags
                .push(ms(at.saturating_duration_since(landed_at)));
        }
        objects.insert(sequence);
    }
    consumer.abort();
    let counts = faulty.counts();
    measured.objects = objects.len() as u64;
    measured.requests = counts.read.requests + counts.list.requests;
    measured.lists = counts.list.requests;
    measured.holes = *holes.lock().unwrap_or_else(|e| e.into_inner());
    wal.stop().await.map_err(failed("stopping the writer"))?;
    Ok(measured)
}
