//! The steps of the model-based test, how proptest draws them, and how a
//! fault is armed in the wrapper.
//!
//! A case is a list of [`Step`]s. Every step is valid in every state (an
//! operation that names "the k-th id of a region" takes it modulo the ids
//! known, or does nothing when there is none), so shrinking may drop any
//! step and the rest still runs.

use std::time::Duration;

use objwal::storage::fault::{FaultyStorage, Op as StorageOp};
use objwal::storage::StorageErrorKind;
use objwal::{AckMode, Config, CorruptionPolicy, DamagePolicy, EarlySeals, HedgeCreates};
use proptest::prelude::*;

use super::moving::MoveShape;
use super::network::Network;

/// Regions the steps use.
pub const REGIONS: u64 = 4;
/// Handles (clones of one `Wal`) the steps use.
pub const HANDLES: usize = 3;

/// Every setting that changes behaviour, drawn per case.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `flush_interval`, ms.
    pub flush_ms: u64,
    /// `max_batch_bytes` (small ones make appends span objects).
    pub max_batch_bytes: u64,
    /// `max_inflight_creates`.
    pub inflight: usize,
    /// `early_seals`: auto, unlimited, off, or 20 per second.
    pub early_seals: u8,
    /// `hedge_creates`: `None` off, else a budget.
    pub hedge: Option<f64>,
    /// `request_timeout`, ms (`None`: off; a stall fault then becomes
    /// latency, or every stalled call would hang by design).
    pub request_timeout_ms: Option<u64>,
    /// `on_damaged_object = "quarantine"`.
    pub quarantine: bool,
    /// `on_corrupted_segment = "fail"`.
    pub fail_on_corruption: bool,
    /// `stop_attempts`.
    pub stop_attempts: u32,
    /// `max_batch_bytes` 2 KiB and `max_unpersisted_bytes` 4 KiB: enqueued
    /// appends wait behind creates.
    pub tight_backlog: bool,
    /// The seed of slow object creates (`network`: some answer late, some
    /// land late, after their caller gave up); `None`: every create is
    /// prompt. With it, `request_timeout` is 500 ms unless drawn.
    pub slow: Option<u64>,
}

impl Settings {
    /// The store's configuration in `mode`.
    pub fn config(&self, mode: AckMode) -> Config {
        let max_batch_bytes = if self.tight_backlog {
            2048
        } else {
            self.max_batch_bytes
        };
        Config {
            flush_interval: Duration::from_millis(self.flush_ms),
            ack_mode: mode,
            retry_jitter: false,
            max_batch_bytes,
            max_inflight_creates: self.inflight,
            early_seals: match self.early_seals {
                0 => EarlySeals::Auto,
                1 => EarlySeals::Unlimited,
                2 => EarlySeals::Off,
                _ => EarlySeals::PerSecond(20.0),
            },
            hedge_creates: self.hedge.map_or(HedgeCreates::Off, HedgeCreates::Budget),
            // Hedges need a slow create to hedge: with a budget, a
            // timeout (half of it is the latest a hedge waits) is set too.
            // Slow creates want one too: a request that lands late is
            // one its caller gave up on.
            request_timeout: self
                .request_timeout_ms
                .or(self.hedge.map(|_| 500))
                .or(self.slow.map(|_| 500))
                .map(Duration::from_millis),
            on_damaged_object: if self.quarantine {
                DamagePolicy::Quarantine
            } else {
                DamagePolicy::Fail
            },
            on_corrupted_segment: if self.fail_on_corruption {
                CorruptionPolicy::Fail
            } else {
                CorruptionPolicy::Skip
            },
            stop_attempts: self.stop_attempts,
            max_unpersisted_bytes: if self.tight_backlog {
                4096
            } else {
                Config::default().max_unpersisted_bytes
            },
            ..Config::default()
        }
    }
}

/// Settings drawn for a case: mostly the defaults, each knob moved on its
/// own often enough that every one is reached in CI's cases.
pub fn settings() -> impl Strategy<Value = Settings> {
    (
        prop_oneof![1 => Just(1u64), 3 => Just(10), 1 => Just(100)],
        prop_oneof![3 => Just(Config::default().max_batch_bytes), 1 => Just(2048u64), 1 => Just(64 << 10)],
        prop_oneof![3 => Just(4usize), 1 => Just(1), 1 => Just(2), 1 => Just(8)],
        0u8..4,
        // Every create may be hedged in some cases (issue 29 item 9: hedges
        // that meet "exists" often, with slow creates).
        prop_oneof![4 => Just(None), 1 => Just(Some(0.5)), 1 => Just(Some(1.0))],
        prop_oneof![2 => Just(None), 1 => Just(Some(500u64))],
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop_oneof![3 => Just(5u32), 1 => Just(1), 1 => Just(2)],
        prop::bool::weighted(0.25),
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some)],
    )
        .prop_map(
            |(
                flush_ms,
                max_batch_bytes,
                inflight,
                early_seals,
                hedge,
                request_timeout_ms,
                quarantine,
                fail_on_corruption,
                stop_attempts,
                tight_backlog,
                slow,
            )| Settings {
                flush_ms,
                max_batch_bytes,
                inflight,
                early_seals,
                hedge,
                request_timeout_ms,
                quarantine,
                fail_on_corruption,
                stop_attempts,
                tight_backlog,
                slow,
            },
        )
}

/// Where a read starts.
#[derive(Debug, Clone, Copy)]
pub enum From {
    /// Id 0.
    Start,
    /// At the k-th known id of the region.
    At(usize),
    /// Just after the k-th known id of the region.
    After(usize),
}

/// One call on the public API (or a lifecycle event).
#[derive(Debug, Clone)]
pub enum Op {
    /// `append` through handle `handle` of entries (region, payload length).
    Append {
        handle: usize,
        entries: Vec<(u64, usize)>,
    },
    /// `read(region, from)` to its end, then `holes(region)`.
    Read {
        handle: usize,
        region: u64,
        from: From,
    },
    /// `obsolete(region, k-th known id)`.
    Obsolete { region: u64, pick: usize },
    /// Enqueued mode: with creates held, an append of one entry to
    /// `region`, then `obsolete` of its id while it cannot be durable; the
    /// creates let go, the entry must read (a mark is clamped to the
    /// durable id, API `obsolete`).
    ObsoleteUnlanded { region: u64 },
    /// `obsolete(region, id)` with an id `ahead` positions above the
    /// newest id handed out (an import's floor may be so): the region's
    /// next ids must lie above it, also inside the open batch's sequence.
    ObsoleteAhead { region: u64, ahead: u64 },
    /// `wait_durable(region, k-th known id)`.
    WaitDurable { region: u64, pick: usize },
    /// `release_region(region)`.
    Release { region: u64 },
    /// `release_region(region)`, then collection past its record (every
    /// known entry flushed and obsolete, time until no object carries the
    /// record), a reopen, an append to the region and a follower started
    /// on it: released for good, refused, ended (`forever`).
    ReleaseForever { region: u64 },
    /// `flush()`.
    Flush,
    /// Virtual time passes (timers, retries, collection).
    Advance { ms: u64 },
    /// `stop()`; the store stays stopped until a reopen.
    Stop,
    /// `stop()` (unless stopped), then `Wal::open` again; replay checked.
    Reopen,
    /// Every handle dropped (a crash), then `Wal::open`; replay checked.
    Crash,
    /// A second `Wal::open` of the prefix while the first store lives: it
    /// fences the first, whose handles are then dropped.
    SecondOpener,
    /// `replay` of several regions at once, each from its point, checked
    /// like reads and (with no fault armed) equal to their `read`s.
    Replay { from: Vec<(u64, From)> },
    /// `objects` appends of one entry to `region`, each followed by a
    /// `flush` (an object each), then `replay` of every region from the
    /// start: more objects than a replay page holds (at least 32), so a
    /// page fills and the next starts after it (a plant that dropped a
    /// region's last segment of a full page went unseen).
    Burst { region: u64, objects: usize },
    /// A `WalReader` opened on the prefix (it never fences the store):
    /// its `read` and `replay` of the regions, checked against what is
    /// durable.
    Reader { from: Vec<(u64, From)> },
    /// The other log of the store (prefix `model-src`, its own `Wal`)
    /// appends `n` entries to `region`.
    SourceAppend { region: u64, n: usize },
    /// `import_region` of `region` from the other log through a
    /// `WalReader`, then its release there (rfcs/0009's handoff). Repeated
    /// imports of a region import nothing more.
    /// With `fill`, the other log first appends two entries to the
    /// region (an import that moves something). With `corrupt`, the next
    /// two reads of the other log's objects after its reader opened are
    /// corrupted in transit (a segment read twice bad is a hole the import
    /// must not copy around).
    Import {
        region: u64,
        fill: bool,
        corrupt: bool,
    },
    /// An object damaged (a byte of its trailer flipped) or deleted by
    /// hand after a crash; the operator's tools must name it (its holes,
    /// or the objects left unreplayed), an open under `"fail"` must refuse
    /// naming it, and after the object is restored everything promised
    /// replays (`surface::Driver::damage`).
    Damage { pick: usize, delete: bool },
    /// As `Damage` (not deleted; an odd `pick` cuts the object to 40
    /// bytes, so no copy of its header is left), then the operator's repair instead of a
    /// restore: every process stopped (the crash), the damaged object
    /// moved under `quarantine/` as `objwal repair --yes` does, and the
    /// store opened again. Its entries are lost for good (holes, or
    /// objects named unreplayed above it); an object with flush marks or
    /// release records is restored instead (the model does not follow
    /// records lost with it). The open blocks the key after a moved-aside
    /// object at or above its walk's block (rfcs/0006).
    Repair { pick: usize },
    /// A follower (`WalReader::follow`) of the regions from their points;
    /// it lives across restarts and fencings until another replaces it.
    /// With `held`, a reader hold placed before its reader opens, kept by
    /// the follower (rfcs/0011): it must meet no hole (`following`).
    Follow { from: Vec<(u64, From)>, held: bool },
    /// A `flush`, then the follower catches up: it must have yielded every
    /// promised entry of its regions above its start.
    CatchUp,
    /// An append of `n` entries to `region` (one segment; in enqueued mode
    /// with creates held, so it lands later), a follower of the region
    /// from a middle id of it, then a catch-up: the segment straddles the
    /// follower's position.
    FollowInFlight { region: u64, n: usize },
    /// An older epoch's empty object (the start object of an opener whose
    /// open failed: `races.rs` says which history lands one there) at the
    /// writer's next key, then an append of one entry to `region` that
    /// meets it; with `then_open`, a second opener first, whose walk must
    /// step over it as the fenced writer does.
    DeadObject { region: u64, then_open: bool },
    /// `obsolete(region, id)` with an id `skip` objects above the newest,
    /// so the batch carrying it carries a jump record; with `held`, its
    /// create lands but its answer is held; a second opener walks the run
    /// over the jump, then the older store (its jump acknowledged) appends:
    /// it must acknowledge nothing.
    JumpOpener { region: u64, skip: u64, held: bool },
    /// A follower of `region` from its newest entry, then a jump `skip`
    /// objects ahead (a watermark of another region above every id) and
    /// an append to `region`: the follower yields it within three
    /// `follow_max_interval`s (`following.rs`).
    FollowJump { region: u64, skip: u64 },
    /// A move by following of `region` from the other log
    /// (`Wal::take_over`, then the switch: `Takeover::finish`) while the
    /// other log writes the region and its collection deletes what its
    /// engine flushed (`moving`).
    Move { region: u64, shape: MoveShape },
    /// A follower of the regions from their points through a backend
    /// with only the four required methods of `ObjectStorage`; it must
    /// catch up as any follower, and an idle minute of it costs about one
    /// request per wait and a few listings (`outside`).
    FollowOutside { from: Vec<(u64, From)> },
}

/// Which keys a fault rule matches.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// Data, start and marker objects.
    Objects,
    /// Fences (claims at open, probes before acknowledgements).
    Fences,
    /// Release markers (rfcs/0005): a release whose marker fails answers
    /// a retryable error and its record stays until the marker is made.
    Released,
}

impl Target {
    pub fn key(self) -> &'static str {
        match self {
            Target::Objects => "/objects/",
            Target::Fences => "/fences/",
            Target::Released => "/released/",
        }
    }
}

/// A fault of the wrapper, armed for the operations of one step.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// The next `n` creates fail, the inner store untouched.
    FailCreate {
        target: Target,
        n: usize,
        permanent: bool,
    },
    /// The next `n` creates land, then answer a transient error.
    LoseResponse { target: Target, n: usize },
    /// The next `n` creates answer "already exists" and land nothing: a
    /// 409 Conflict of a racing request, or a 412 Precondition Failed of
    /// `If-None-Match`, as the adapters report both.
    PhantomExists { target: Target, n: usize },
    /// The next `n` reads fail.
    FailRead {
        target: Target,
        n: usize,
        permanent: bool,
    },
    /// The next `n` reads of objects return one flipped byte.
    CorruptRead { n: usize },
    /// Every read of the prefix's newest object, for the step's calls,
    /// returns one flipped byte: damage every look agrees on (rot at rest
    /// as this process sees it, or a path that corrupts it each time),
    /// gone after the step. Under quarantine an open judges it damaged.
    CorruptNewest,
    /// The next `n` lists fail (transiently).
    FailList { n: usize },
    /// The next `n` deletes fail (transiently).
    FailDelete { n: usize },
    /// Every create and read takes `ms` longer.
    Latency { ms: u64 },
    /// The next `n` requests of one kind (0 create, 1 read, 2 list) never
    /// answer, until `request_timeout` gives up on them (with no timeout
    /// configured it is 20 ms of latency instead: a request that never
    /// answers with no timeout hangs its caller by design).
    Stall { kind: u8, n: usize },
    /// 503 Slow Down: the next `n` requests of every kind fail
    /// transiently (the adapters map a 503 to a transient error).
    Throttle { n: usize },
    /// A long outage: every request fails for the step's calls and `ms` of
    /// virtual time after them (retries back off, backlogs fill, stops give
    /// up).
    Outage { ms: u64 },
    /// Durable mode's voids: the next object create fails, and the create
    /// after it (the void that settles the key) lands but its answer is
    /// lost; with `read_back_fails`, the read-backs of objects fail too, so
    /// the void's outcome is not known at once.
    LoseVoidResponse { read_back_fails: bool },
    /// The next object create fails at once for its caller but lands `ms`
    /// later (a request still on the wire, `network`), and the `voids`
    /// object creates after it fail: the late request races the void (or
    /// the repeat) that settles its key (rule K1).
    LateLanding { ms: u64, voids: usize },
}

impl Fault {
    /// Its name, for the per-path counts.
    pub fn name(self) -> &'static str {
        match self {
            Fault::FailCreate {
                permanent: true, ..
            } => "failed creates (permanent)",
            Fault::FailCreate { .. } => "failed creates",
            Fault::LoseResponse { .. } => "lost responses",
            Fault::PhantomExists { .. } => "phantom exists (409/412)",
            Fault::FailRead { .. } => "failed reads",
            Fault::CorruptRead { .. } => "reads corrupted in transit",
            Fault::CorruptNewest => "newest object read damaged",
            Fault::FailList { .. } => "failed lists",
            Fault::FailDelete { .. } => "failed deletes",
            Fault::Latency { .. } => "latency",
            Fault::Stall { .. } => "requests that never answer",
            Fault::Throttle { .. } => "throttling (503)",
            Fault::Outage { .. } => "long outages",
            Fault::LoseVoidResponse {
                read_back_fails: false,
            } => "voids whose answer is lost",
            Fault::LoseVoidResponse { .. } => "voids whose answer and read-back are lost",
            Fault::LateLanding { .. } => "creates that land late",
        }
    }

    /// Arms this fault in `f` (and `network`); `timeout`:
    /// `request_timeout` is configured.
    pub fn arm(self, f: &FaultyStorage, network: &Network, timeout: bool) {
        let kind = |permanent: bool| {
            if permanent {
                StorageErrorKind::Permanent
            } else {
                StorageErrorKind::Transient
            }
        };
        match self {
            Fault::FailCreate {
                target,
                n,
                permanent,
            } => {
                f.fail_next(StorageOp::Create, target.key(), n, kind(permanent));
            }
            Fault::LoseResponse { target, n } => f.lose_next_create_responses(target.key(), n),
            Fault::PhantomExists { target, n } => f.phantom_exists_next(target.key(), n),
            Fault::FailRead {
                target,
                n,
                permanent,
            } => {
                f.fail_next(StorageOp::Read, target.key(), n, kind(permanent));
            }
            Fault::CorruptRead { n } => f.corrupt_next_reads("/objects/", n),
            // Its key is known only from a listing: the driver arms it.
            Fault::CorruptNewest => {}
            Fault::FailList { n } => {
                f.fail_next(StorageOp::List, "", n, StorageErrorKind::Transient)
            }
            Fault::FailDelete { n } => {
                f.fail_next(StorageOp::Delete, "", n, StorageErrorKind::Transient);
            }
            Fault::Latency { ms } => {
                f.set_latency(StorageOp::Create, Duration::from_millis(ms));
                f.set_latency(StorageOp::Read, Duration::from_millis(ms));
            }
            Fault::Stall { kind, n } if timeout => {
                let op =
                    [StorageOp::Create, StorageOp::Read, StorageOp::List][usize::from(kind % 3)];
                f.stall_next(op, "", n);
            }
            Fault::Stall { .. } => Fault::Latency { ms: 20 }.arm(f, network, timeout),
            Fault::Throttle { n } => {
                for op in [
                    StorageOp::Create,
                    StorageOp::Read,
                    StorageOp::List,
                    StorageOp::Delete,
                ] {
                    f.fail_next(op, "", n, StorageErrorKind::Transient);
                }
            }
            Fault::Outage { .. } => {
                for op in [
                    StorageOp::Create,
                    StorageOp::Read,
                    StorageOp::List,
                    StorageOp::Delete,
                ] {
                    f.fail_next(op, "", usize::MAX, StorageErrorKind::Transient);
                }
            }
            Fault::LoseVoidResponse { read_back_fails } => {
                // The failed create gets no inner request, so the lost
                // answer is the next create's to reach the store: the void.
                f.fail_next(
                    StorageOp::Create,
                    "/objects/",
                    1,
                    StorageErrorKind::Transient,
                );
                f.lose_next_create_responses("/objects/", 1);
                if read_back_fails {
                    f.fail_next(StorageOp::Read, "/objects/", 3, StorageErrorKind::Transient);
                }
            }
            Fault::LateLanding { ms, voids } => {
                network.late_next(Duration::from_millis(ms));
                if voids > 0 {
                    f.fail_next(
                        StorageOp::Create,
                        "/objects/",
                        voids,
                        StorageErrorKind::Transient,
                    );
                }
            }
        }
    }
}

/// How the held creates of a [`Step::Held`] are let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Letting {
    /// In the order they arrived.
    InOrder,
    /// Newest first.
    Reverse,
    /// The first fails with a transient error, the second proceeds.
    FailFirst,
    /// A stop, while every held create fails for good as it comes.
    StopFailing,
}

/// One step of a case.
#[derive(Debug, Clone)]
pub enum Step {
    /// One operation.
    Op(Op),
    /// Calls run at once (appends from several handles, reads, barriers).
    Together(Vec<Op>),
    /// A fault armed for `ops`; then cleared, and the store settles.
    Faulty { fault: Fault, ops: Vec<Op> },
    /// Creates held (before they reach the store, or after they landed)
    /// while an append to the first region, a read, and an append to (or
    /// the release of) the second region run; then let go, or the store
    /// stops while each held create fails for good, or the store crashes
    /// with them held (and a reopen is checked).
    Held {
        after_landed: bool,
        letting: Letting,
        crash: bool,
        release_second: bool,
        regions: (u64, u64),
    },
}

fn region() -> impl Strategy<Value = u64> {
    0..REGIONS
}

fn entry() -> impl Strategy<Value = (u64, usize)> {
    let len = prop_oneof![8 => 6usize..48, 1 => 2000usize..4000];
    (region(), len)
}

fn from() -> impl Strategy<Value = From> {
    prop_oneof![
        2 => Just(From::Start),
        1 => (0usize..8).prop_map(From::At),
        1 => (0usize..8).prop_map(From::After),
    ]
}

fn append() -> impl Strategy<Value = Op> {
    (0..HANDLES, prop::collection::vec(entry(), 1..=3))
        .prop_map(|(handle, entries)| Op::Append { handle, entries })
}

fn read() -> impl Strategy<Value = Op> {
    (0..HANDLES, region(), from()).prop_map(|(handle, region, from)| Op::Read {
        handle,
        region,
        from,
    })
}

fn wait_durable() -> impl Strategy<Value = Op> {
    (region(), 0usize..16).prop_map(|(region, pick)| Op::WaitDurable { region, pick })
}

/// Calls that can run at once without making a read's answer ambiguous.
fn together_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => append(),
        2 => read(),
        1 => wait_durable(),
        1 => Just(Op::Flush),
    ]
}

fn from_points() -> impl Strategy<Value = Vec<(u64, From)>> {
    prop::collection::vec((region(), from()), 1..=REGIONS as usize)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => append(),
        2 => from_points().prop_map(|from| Op::Replay { from }),
        1 => (region(), 33usize..=40).prop_map(|(region, objects)| Op::Burst { region, objects }),
        1 => from_points().prop_map(|from| Op::Reader { from }),
        2 => (region(), 1usize..=4).prop_map(|(region, n)| Op::SourceAppend { region, n }),
        2 => (region(), any::<bool>(), prop::bool::weighted(0.3))
            .prop_map(|(region, fill, corrupt)| Op::Import { region, fill, corrupt }),
        1 => (from_points(), any::<bool>()).prop_map(|(from, held)| Op::Follow { from, held }),
        2 => Just(Op::CatchUp),
        1 => (region(), 2usize..=4).prop_map(|(region, n)| Op::FollowInFlight { region, n }),
        1 => region().prop_map(|region| Op::ObsoleteUnlanded { region }),
        1 => (region(), 1u64..=3).prop_map(|(region, ahead)| Op::ObsoleteAhead { region, ahead }),
        5 => read(),
        3 => (region(), 0usize..16).prop_map(|(region, pick)| Op::Obsolete { region, pick }),
        3 => wait_durable(),
        1 => region().prop_map(|region| Op::Release { region }),
        1 => region().prop_map(|region| Op::ReleaseForever { region }),
        2 => Just(Op::Flush),
        2 => prop_oneof![Just(5u64), Just(50), Just(1_000)].prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Stop),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
        1 => Just(Op::SecondOpener),
        1 => (0usize..16, any::<bool>()).prop_map(|(pick, delete)| Op::Damage { pick, delete }),
        1 => (0usize..16).prop_map(|pick| Op::Repair { pick }),
        1 => (region(), prop::bool::weighted(0.4))
            .prop_map(|(region, then_open)| Op::DeadObject { region, then_open }),
        1 => (region(), 1u64..=8, any::<bool>())
            .prop_map(|(region, skip, held)| Op::JumpOpener { region, skip, held }),
        1 => (region(), 1u64..=8).prop_map(|(region, skip)| Op::FollowJump { region, skip }),
        2 => (region(), move_shape()).prop_map(|(region, shape)| Op::Move { region, shape }),
        1 => from_points().prop_map(|from| Op::FollowOutside { from }),
    ]
}

fn move_shape() -> impl Strategy<Value = MoveShape> {
    (
        1usize..=4,
        prop::bool::weighted(0.7),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.4),
    )
        .prop_map(
            |(rounds, flushed_first, flush_mid, corrupt, slow)| MoveShape {
                rounds,
                flushed_first,
                flush_mid,
                corrupt,
                slow,
            },
        )
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        3 => Just(Target::Objects),
        1 => Just(Target::Fences),
        1 => Just(Target::Released)
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    let n = 1usize..=3;
    prop_oneof![
        (target(), n.clone(), prop::bool::weighted(0.3)).prop_map(|(target, n, permanent)| {
            Fault::FailCreate {
                target,
                n,
                permanent,
            }
        }),
        (target(), n.clone()).prop_map(|(target, n)| Fault::LoseResponse { target, n }),
        (target(), n.clone()).prop_map(|(target, n)| Fault::PhantomExists { target, n }),
        (target(), n.clone(), prop::bool::weighted(0.3)).prop_map(|(target, n, permanent)| {
            Fault::FailRead {
                target,
                n,
                permanent,
            }
        }),
        (1usize..=2).prop_map(|n| Fault::CorruptRead { n }),
        Just(Fault::CorruptNewest),
        n.clone().prop_map(|n| Fault::FailList { n }),
        n.prop_map(|n| Fault::FailDelete { n }),
        prop_oneof![Just(1u64), Just(20)].prop_map(|ms| Fault::Latency { ms }),
        ((0u8..3), (1usize..=2)).prop_map(|(kind, n)| Fault::Stall { kind, n }),
        (1usize..=3).prop_map(|n| Fault::Throttle { n }),
        prop_oneof![Just(2_000u64), Just(20_000)].prop_map(|ms| Fault::Outage { ms }),
        any::<bool>().prop_map(|read_back_fails| Fault::LoseVoidResponse { read_back_fails }),
        (prop_oneof![Just(50u64), Just(400)], 0usize..=3)
            .prop_map(|(ms, voids)| Fault::LateLanding { ms, voids }),
    ]
}

fn letting() -> impl Strategy<Value = Letting> {
    prop_oneof![
        Just(Letting::InOrder),
        Just(Letting::Reverse),
        Just(Letting::FailFirst),
        Just(Letting::StopFailing)
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => op().prop_map(Step::Op),
        2 => prop::collection::vec(together_op(), 2..=4).prop_map(Step::Together),
        4 => (fault(), prop::collection::vec(op(), 1..=3))
            .prop_map(|(fault, ops)| Step::Faulty { fault, ops }),
        2 => (
            any::<bool>(),
            letting(),
            prop::bool::weighted(0.4),
            prop::bool::weighted(0.3),
            (region(), region()),
        )
            .prop_map(|(after_landed, letting, crash, release_second, regions)| Step::Held {
                after_landed,
                letting,
                crash,
                release_second,
                regions,
            }),
    ]
}

/// A case: its settings and up to `max` steps.
pub fn case(max: usize) -> impl Strategy<Value = (Settings, Vec<Step>)> {
    (settings(), prop::collection::vec(step(), 1..=max))
}
