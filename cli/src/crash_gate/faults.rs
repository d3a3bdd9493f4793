//! The faults of `objwal crash-gate --faults KIND`, armed inside each life,
//! and the store's own counters, reported by each life as facts.
//!
//! A life wraps its storage in the `testing` feature's [`FaultyStorage`]
//! (and, on a directory, slows its fsyncs: [`Kind::SlowFsyncs`]) and runs
//! [`arm`]: every 50 to 300 ms (drawn from the life's seed) it
//! clears every rule and arms its one kind of fault for the next 1 to 3
//! matching requests, logging `F kind n` first. A line can lag what it
//! says but never lead it; an `F` line is written before the rule is armed,
//! so every fault the parent counts was armed (its requests may not have
//! come before the kill).
//!
//! The counters ([`Counters`], a `metrics` recorder of the life's process)
//! are printed every 100 ms as one `M name=value ...` line when they
//! changed: a SIGKILL leaves no exit hook, so the parent takes each life's
//! last complete report (what happened after it is not counted).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::StorageErrorKind;
use rand::rngs::StdRng;
use rand::Rng;

use crate::CliResult;

/// `--faults`: which kind of fault the lives inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Faults {
    /// No faults.
    None,
    /// Creates fail (transiently; one rule in four permanently).
    FailedCreates,
    /// Creates answer "already exists" over nothing (S3's 409).
    PhantomExists,
    /// Creates land, but their answer is a transient error.
    LostResponses,
    /// Reads fail transiently.
    FailedReads,
    /// Reads of objects return one flipped byte.
    CorruptedReads,
    /// Deletes (collection) fail transiently.
    FailedDeletes,
    /// Lists fail transiently.
    FailedLists,
    /// Creates of objects fail while a release is called at once, so that
    /// releases meet a failing store (refused with `Failing`, kept).
    KeptReleases,
    /// Requests that never answer; the life sets `request_timeout` and a
    /// budget of hedged creates.
    Stalls,
    /// Directory fsyncs after a link take 150 ms longer (a `file://` store;
    /// elsewhere nothing); the life sets `request_timeout` and a budget of
    /// hedged creates, so hedges meet an entry whose fsync runs: the
    /// directory backend's "already exists" path.
    SlowFsyncs,
    /// Creates land, their answer is lost and the read-backs of objects
    /// fail, so the create is repeated (enqueued) or its void sent
    /// (durable) at a key that holds it: "already exists".
    UnreadLandings,
    /// One kind per life, in turn (the nine before `slow-fsyncs`).
    All,
}

/// One kind of fault, as a life arms it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// See [`Faults::FailedCreates`].
    FailedCreates,
    /// See [`Faults::PhantomExists`].
    PhantomExists,
    /// See [`Faults::LostResponses`].
    LostResponses,
    /// See [`Faults::FailedReads`].
    FailedReads,
    /// See [`Faults::CorruptedReads`].
    CorruptedReads,
    /// See [`Faults::FailedDeletes`].
    FailedDeletes,
    /// See [`Faults::FailedLists`].
    FailedLists,
    /// See [`Faults::KeptReleases`].
    KeptReleases,
    /// See [`Faults::Stalls`].
    Stalls,
    /// See [`Faults::SlowFsyncs`].
    SlowFsyncs,
    /// See [`Faults::UnreadLandings`].
    UnreadLandings,
}

impl Kind {
    /// Every kind, in the order `--faults all` takes them.
    pub const ALL: [Kind; 9] = [
        Kind::FailedCreates,
        Kind::PhantomExists,
        Kind::LostResponses,
        Kind::FailedReads,
        Kind::CorruptedReads,
        Kind::FailedDeletes,
        Kind::FailedLists,
        Kind::KeptReleases,
        Kind::Stalls,
    ];

    /// The kinds a `--power-loss` gate without `--faults` arms, in turn:
    /// those that take the directory backend through "already exists"
    /// (issue 29 item 9).
    pub const POWER_LOSS: [Kind; 2] = [Kind::SlowFsyncs, Kind::UnreadLandings];

    /// Its name, as `--faults` spells it (and the `F` lines).
    pub fn name(self) -> &'static str {
        match self {
            Kind::FailedCreates => "failed-creates",
            Kind::PhantomExists => "phantom-exists",
            Kind::LostResponses => "lost-responses",
            Kind::FailedReads => "failed-reads",
            Kind::CorruptedReads => "corrupted-reads",
            Kind::FailedDeletes => "failed-deletes",
            Kind::FailedLists => "failed-lists",
            Kind::KeptReleases => "kept-releases",
            Kind::Stalls => "stalls",
            Kind::SlowFsyncs => "slow-fsyncs",
            Kind::UnreadLandings => "unread-landings",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .chain(Kind::POWER_LOSS)
            .find(|k| k.name() == name)
    }

    /// Whether the life sets `request_timeout` and a budget of hedged
    /// creates for it.
    pub fn hedges(self) -> bool {
        matches!(self, Kind::Stalls | Kind::SlowFsyncs)
    }
}

/// How much longer a slowed directory fsync takes: past the hedge of a
/// create (half of [`STALL_TIMEOUT`]), within the timeout.
pub const SLOW_FSYNC: Duration = Duration::from_millis(150);

/// The `request_timeout` of a life with stalls: a stalled request is given
/// up this long after it was sent (and a slow create is hedged at half).
pub const STALL_TIMEOUT: &str = "200ms";

/// The `hedge_creates` budget of a life with stalls: at most this fraction
/// of creates is sent a second time.
pub const STALL_HEDGE_BUDGET: f64 = 0.2;

impl Faults {
    /// The name `--faults` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Faults::None => "none",
            Faults::All => "all",
            Faults::FailedCreates => Kind::FailedCreates.name(),
            Faults::PhantomExists => Kind::PhantomExists.name(),
            Faults::LostResponses => Kind::LostResponses.name(),
            Faults::FailedReads => Kind::FailedReads.name(),
            Faults::CorruptedReads => Kind::CorruptedReads.name(),
            Faults::FailedDeletes => Kind::FailedDeletes.name(),
            Faults::FailedLists => Kind::FailedLists.name(),
            Faults::KeptReleases => Kind::KeptReleases.name(),
            Faults::Stalls => Kind::Stalls.name(),
            Faults::SlowFsyncs => Kind::SlowFsyncs.name(),
            Faults::UnreadLandings => Kind::UnreadLandings.name(),
        }
    }

    /// The kind life `life` (from 1) arms, if any: `all` takes the kinds
    /// in turn, life by life; with `power_loss` and no faults named, the
    /// kinds of [`Kind::POWER_LOSS`] in turn.
    pub fn of_life(self, life: u32, power_loss: bool) -> Option<Kind> {
        let one = match self {
            Faults::None if power_loss => {
                let i = (life.saturating_sub(1) as usize) % Kind::POWER_LOSS.len();
                return Kind::POWER_LOSS.get(i).copied();
            }
            Faults::None => return None,
            Faults::All => {
                let i = (life.saturating_sub(1) as usize) % Kind::ALL.len();
                return Kind::ALL.get(i).copied();
            }
            Faults::FailedCreates => Kind::FailedCreates,
            Faults::PhantomExists => Kind::PhantomExists,
            Faults::LostResponses => Kind::LostResponses,
            Faults::FailedReads => Kind::FailedReads,
            Faults::CorruptedReads => Kind::CorruptedReads,
            Faults::FailedDeletes => Kind::FailedDeletes,
            Faults::FailedLists => Kind::FailedLists,
            Faults::KeptReleases => Kind::KeptReleases,
            Faults::Stalls => Kind::Stalls,
            Faults::SlowFsyncs => Kind::SlowFsyncs,
            Faults::UnreadLandings => Kind::UnreadLandings,
        };
        Some(one)
    }
}

/// Arms `kind` on `faulty` every 50 to 300 ms until the life is killed,
/// each time for 1 to 3 requests (kept releases: 2 to 4 failed creates, as
/// a durable store is failing only once a batch and its void both failed),
/// after clearing every earlier rule. `log` writes the `F` line first;
/// `released` is told after each arming of kept releases (the releaser
/// then calls a release at once).
pub async fn arm(
    faulty: FaultyStorage,
    directory: Option<objwal::storage::FileStorage>,
    kind: Kind,
    mut rng: StdRng,
    log: impl Fn(std::fmt::Arguments<'_>) -> CliResult,
    release_now: Arc<tokio::sync::Notify>,
) -> CliResult {
    let transient = StorageErrorKind::Transient;
    loop {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..=300))).await;
        faulty.clear_faults();
        let n = rng.random_range(1..=3usize);
        let n = if kind == Kind::KeptReleases { n + 1 } else { n };
        log(format_args!("F {} {n}", kind.name()))?;
        match kind {
            Kind::FailedCreates => {
                let error = if rng.random_ratio(1, 4) {
                    StorageErrorKind::Permanent
                } else {
                    transient
                };
                faulty.fail_next(Op::Create, "", n, error);
            }
            Kind::PhantomExists => faulty.phantom_exists_next("", n),
            Kind::LostResponses => faulty.lose_next_create_responses("", n),
            Kind::FailedReads => faulty.fail_next(Op::Read, "", n, transient),
            Kind::CorruptedReads => faulty.corrupt_next_reads("/objects/", n),
            Kind::FailedDeletes => faulty.fail_next(Op::Delete, "", n, transient),
            Kind::FailedLists => faulty.fail_next(Op::List, "", n, transient),
            Kind::KeptReleases => {
                faulty.fail_next(Op::Create, "/objects/", n, transient);
                release_now.notify_one();
            }
            Kind::Stalls => {
                let ops = [Op::Create, Op::Read, Op::List, Op::Delete];
                let op = ops
                    .get(rng.random_range(0..ops.len()))
                    .copied()
                    .unwrap_or(Op::Create);
                faulty.stall_next(op, "", n);
            }
            Kind::SlowFsyncs => {
                if let Some(directory) = &directory {
                    directory.slow_next_dir_syncs(n, SLOW_FSYNC);
                }
            }
            Kind::UnreadLandings => {
                faulty.lose_next_create_responses("/objects/", n);
                // The read-back of each, and of the void's or repeat's
                // "already exists" that follows once.
                faulty.fail_next(Op::Read, "/objects/", n, transient);
            }
        }
    }
}

/// The store's counters in a life's process: a `metrics` recorder that
/// keeps every counter (summed over labels: a life has one store) and
/// drops gauges and histograms.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    counters: Arc<Mutex<BTreeMap<String, Arc<AtomicU64>>>>,
}

impl Counters {
    /// Installs a recorder as the process's global one (before the store
    /// opens, so that its handles reach it) and returns its counters.
    /// `None` when the process has a recorder already.
    pub fn install() -> Option<Counters> {
        let counters = Counters::default();
        metrics::set_global_recorder(counters.clone()).ok()?;
        Some(counters)
    }

    /// The `M` line's fields: `name=value` for every counter, `objwal_`
    /// left out, in name order.
    pub fn render(&self) -> String {
        let map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let fields: Vec<String> = map
            .iter()
            .map(|(name, n)| {
                let name = name.strip_prefix("objwal_").unwrap_or(name);
                format!("{name}={}", n.load(Ordering::Relaxed))
            })
            .collect();
        fields.join(" ")
    }
}

impl metrics::Recorder for Counters {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let mut map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let counter = map.entry(key.name().to_owned()).or_default().clone();
        metrics::Counter::from_arc(counter)
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Prints the counters every 100 ms when they changed.
pub async fn report(
    counters: Counters,
    log: impl Fn(std::fmt::Arguments<'_>) -> CliResult,
) -> CliResult {
    let mut last = String::new();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = counters.render();
        if now != last && !now.is_empty() {
            log(format_args!("M {now}"))?;
            last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_takes_every_kind_in_turn_and_names_round_trip() {
        let lives: Vec<Kind> = (1..=10)
            .filter_map(|l| Faults::All.of_life(l, false))
            .collect();
        assert_eq!(lives.get(..9), Some(&Kind::ALL[..]));
        assert_eq!(lives.get(9), Some(&Kind::FailedCreates));
        assert_eq!(Faults::None.of_life(1, false), None);
        assert_eq!(Faults::Stalls.of_life(7, true), Some(Kind::Stalls));
        let power_loss: Vec<Kind> = (1..=4)
            .filter_map(|l| Faults::None.of_life(l, true))
            .collect();
        assert_eq!(
            power_loss,
            [
                Kind::SlowFsyncs,
                Kind::UnreadLandings,
                Kind::SlowFsyncs,
                Kind::UnreadLandings
            ]
        );
        for kind in Kind::ALL.into_iter().chain(Kind::POWER_LOSS) {
            assert_eq!(Kind::parse(kind.name()), Some(kind));
        }
        assert_eq!(Kind::parse("none"), None);
    }

    #[test]
    fn counters_render_every_counter_without_the_prefix() {
        let counters = Counters::default();
        let key = metrics::Key::from_name("objwal_created_objects_total");
        let meta = metrics::Metadata::new("t", metrics::Level::INFO, None);
        metrics::Recorder::register_counter(&counters, &key, &meta).increment(3);
        metrics::Recorder::register_counter(&counters, &key, &meta).increment(1);
        assert_eq!(counters.render(), "created_objects_total=4");
    }
}
