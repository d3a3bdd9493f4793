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
use proptest::prelude::*;

/// Regions the steps use.
pub const REGIONS: u64 = 4;
/// Handles (clones of one `Wal`) the steps use.
pub const HANDLES: usize = 3;

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
    /// `wait_durable(region, k-th known id)`.
    WaitDurable { region: u64, pick: usize },
    /// `release_region(region)`.
    Release { region: u64 },
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
}

/// Which keys a fault rule matches.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// Data, start and marker objects.
    Objects,
    /// Fences (claims at open, probes before acknowledgements).
    Fences,
}

impl Target {
    pub fn key(self) -> &'static str {
        match self {
            Target::Objects => "/objects/",
            Target::Fences => "/fences/",
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
    /// The next `n` creates answer "already exists" and land nothing.
    PhantomExists { target: Target, n: usize },
    /// The next `n` reads fail.
    FailRead {
        target: Target,
        n: usize,
        permanent: bool,
    },
    /// The next `n` reads of objects return one flipped byte.
    CorruptRead { n: usize },
    /// The next `n` lists fail (transiently).
    FailList { n: usize },
    /// The next `n` deletes fail (transiently).
    FailDelete { n: usize },
    /// Every create and read takes `ms` longer.
    Latency { ms: u64 },
}

impl Fault {
    /// Arms this fault in `f`.
    pub fn arm(self, f: &FaultyStorage) {
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
    /// crashes with them held (and a reopen is checked).
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

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => append(),
        5 => read(),
        3 => (region(), 0usize..16).prop_map(|(region, pick)| Op::Obsolete { region, pick }),
        3 => wait_durable(),
        1 => region().prop_map(|region| Op::Release { region }),
        2 => Just(Op::Flush),
        2 => prop_oneof![Just(5u64), Just(50), Just(1_000)].prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Stop),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
        1 => Just(Op::SecondOpener),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![3 => Just(Target::Objects), 1 => Just(Target::Fences)]
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
        n.clone().prop_map(|n| Fault::FailList { n }),
        n.prop_map(|n| Fault::FailDelete { n }),
        prop_oneof![Just(1u64), Just(20)].prop_map(|ms| Fault::Latency { ms }),
    ]
}

fn letting() -> impl Strategy<Value = Letting> {
    prop_oneof![
        Just(Letting::InOrder),
        Just(Letting::Reverse),
        Just(Letting::FailFirst)
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

/// A case: up to `max` steps.
pub fn case(max: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..=max)
}
