//! The model-based test: proptest draws a case, settings and a sequence
//! of steps over the public API, runs them against a real store and checks
//! every answer against a small reference model of what must be true.
//!
//! Settings (`steps::Settings`, drawn per case): `flush_interval`,
//! `max_batch_bytes`, `max_inflight_creates`, `early_seals`,
//! `hedge_creates` (off, half, or every create), `request_timeout`,
//! `on_damaged_object`, `on_corrupted_segment`, `stop_attempts`,
//! `max_unpersisted_bytes`, and slow creates (`network`: one object create
//! in five answers 400 ms late, so that hedges go out and meet "exists").
//!
//! Steps (`steps`): appends of one to three entries to four regions
//! through three handles (clones of one `Wal`), reads from 0 or from a
//! known id, bulk `replay` of several regions (checked like reads and equal
//! to them), a burst of more objects than a replay page holds followed by
//! a `replay` of every region, a `WalReader` on the live prefix (its reads and replay),
//! `obsolete` (of a known id, of an entry admitted while its create is
//! held, of an id above every id handed out), `wait_durable`,
//! `release_region` (also followed by collection past its record, a
//! reopen, an append and a follower on the region), `flush`, virtual time
//! passing, `stop`, a reopen, a crash (every handle dropped, then a
//! reopen), a second opener (a newer store fences the running one), a
//! second log on the same store and `import_region` from it followed by
//! the release there (rfcs/0009; some with two of its reads corrupted in
//! transit), a move by following from it (`Wal::take_over`, then
//! `Takeover::finish`: `moving`) while it writes the region and its
//! collection deletes what its engine flushed (some with a slow follower
//! over a key that collection emptied, some with two reads corrupted in
//! transit), a follower (from a known id, or from inside a segment still in
//! flight, or through a backend with only the four required methods of
//! `ObjectStorage`, then idle for a minute: `outside`), objects damaged or
//! deleted by hand (the
//! tools must name them; restored, everything replays), a dead object (an
//! older epoch's empty start object, a filler) at the writer's next key,
//! met by the writer or first by a second opener's walk, and a second
//! opener walking over a jump while the older writer's batch carrying it
//! is in flight (`races`), calls run at once,
//! creates held (before they reach the store or after they landed) and let
//! go in order, in reverse or with the first failing, and every fault of
//! the fault wrapper armed for the calls of one step: failed creates
//! (transient or permanent, of objects or of fences), lost create
//! responses, phantom "already exists" (409, 412), failed reads, corrupted
//! reads (a few, or every read of the newest object for the step: damage
//! each look agrees on), failed lists, failed deletes, latency, requests that never
//! answer (until `request_timeout`), 503 throttling of every kind, a
//! long outage (every request fails for seconds of virtual time), durable
//! voids whose answer is lost (and their read-backs too), and creates that
//! fail for their caller but land later (`network`), racing the void or
//! the repeat that settles their key. After a
//! faulty step the faults are cleared and the store must work again
//! (imports that failed are repeated; a `flush` returns `Ok`).
//!
//! The model (`reference`) knows each entry's fate (pending, maybe,
//! refused, admitted, promised) and checks: what is promised reads and
//! replays exactly once, in order, byte for byte (unless obsolete and
//! collected, or skipped as a reported hole after a corrupted read, or in
//! an object left out as damaged); what was released reads and replays as
//! nothing, is reported released by every later open (also once its record
//! was collected) and ends every follower of it with `RegionReleased`;
//! nothing replays that was never appended, refused, answered
//! `NotDurable` (nothing of its batch is logged), or gone at an earlier
//! replay; nothing at or below a flush mark known durable replays
//! after a restart; an import or a move brings every entry the other log
//! acknowledged above what its engine flushed, each once, in order, above
//! a floor at or above every id the other log acknowledged, and a move
//! that could not read an entry answers `Incomplete` and appends nothing;
//! an idle follower lists at most a few times a minute; enqueued losses after a crash
//! are whole objects and a suffix; ids rise across lives; each error is one
//! the documentation names for that call in that state
//! (`driver::Driver::expect_error`); `latest_entry_id` covers what was
//! acknowledged; every open leaves a fence of its own (epochs dense from
//! 1); a stopped store changes nothing under its prefix until the next
//! open; an enqueued import does not wait for the flush timer; and no call
//! hangs: every await is under a 30 s deadline of virtual time (the
//! runtime's clock is paused, so the store's timers, retries and latencies
//! cost no real time and the run is deterministic), and a case that makes
//! no progress for [`WALL_LIMIT`] of wall time (a busy loop stops the
//! paused clock) is named and ends the run.
//!
//! What a run reached is printed per path (`driver::Stats`: the driver's
//! counts and the store's `objwal_*` counters, from a recorder local to the
//! case), so a path no case reached shows as missing.
//!
//! A failure shrinks to a minimal case and prints it with the seed:
//! `OBJWAL_MODEL_SEED=<seed> PROPTEST_CASES=<n> cargo test --all-features
//! --test integration model::` reproduces it. CI runs [`CI_CASES`] cases
//! per ack mode from a fresh seed; `PROPTEST_CASES=2000` runs more.

#![allow(
    clippy::print_stderr,
    reason = "the seed and what a run exercised, captured by libtest"
)]

use objwal::AckMode;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

mod driver;
mod following;
mod forever;
mod held;
mod moving;
mod network;
mod outside;
mod races;
mod reference;
mod steps;
mod surface;
mod together;

use driver::{Driver, Stats};
use steps::{Op, Settings, Step};

/// Cases per ack mode in CI.
const CI_CASES: u32 = 1024;
/// The longest case, in steps.
const MAX_STEPS: usize = 40;

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// The longest a case may take in wall time. Cases run on paused time,
/// where a task that loops without ever waiting stops the clock: no
/// `within` deadline can fire and the test would hang. Cases take
/// milliseconds; past this one the case is named as spinning.
const WALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// How a case failed.
pub enum CaseFailure {
    /// A violation of the model, or a call past its deadline.
    Violation(String),
    /// No answer within [`WALL_LIMIT`] of wall time: something busy-loops.
    Spun,
}

/// Runs a case on a thread of its own, under [`WALL_LIMIT`].
pub fn run_case(mode: AckMode, settings: &Settings, steps: &[Step]) -> Result<Stats, CaseFailure> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (settings, steps) = (settings.clone(), steps.to_vec());
    std::thread::Builder::new()
        .name("model case".into())
        .spawn(move || {
            // OBJWAL_MODEL_TRACE=objwal=debug prints what the library logs
            // (to replay one failing case with its story).
            let _trace = std::env::var("OBJWAL_MODEL_TRACE").ok().map(|filter| {
                tracing::subscriber::set_default(
                    tracing_subscriber::fmt()
                        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                        .with_test_writer()
                        .finish(),
                )
            });
            let _ = tx.send(run_case_here(mode, &settings, &steps));
        })
        .map_err(|e| CaseFailure::Violation(format!("no thread for the case: {e}")))?;
    match rx.recv_timeout(WALL_LIMIT) {
        Ok(outcome) => outcome.map_err(CaseFailure::Violation),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(CaseFailure::Spun),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(CaseFailure::Violation(
            "the case panicked (its message is above)".into(),
        )),
    }
}

/// Runs `steps` in `mode` on a fresh store; what it exercised, or the
/// first violation.
fn run_case_here(mode: AckMode, settings: &Settings, steps: &[Step]) -> Result<Stats, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| format!("no runtime: {e}"))?;
    // The store's own metrics, counted per case (the actor runs on this
    // thread: the runtime is current-thread).
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let outcome: Result<Stats, String> = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let mut driver = Driver::new(mode, settings.clone()).await?;
            for (i, step) in steps.iter().enumerate() {
                driver
                    .step(step)
                    .await
                    .map_err(|e| format!("step {i} {step:?}: {e}"))?;
                driver
                    .check_latest()
                    .map_err(|e| format!("after step {i}: {e}"))?;
            }
            driver
                .op(&Op::Reopen, false)
                .await
                .map_err(|e| format!("the final reopen: {e}"))?;
            Ok(driver.finish_stats())
        })
    });
    let mut stats = outcome?;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if let metrics_util::debugging::DebugValue::Counter(n) = value {
            stats.bump(key.key().name(), n);
        }
    }
    Ok(stats)
}

fn run(mode: AckMode) {
    let cases = env_number("PROPTEST_CASES").map_or(CI_CASES, |n| n as u32);
    let seed = env_number("OBJWAL_MODEL_SEED").unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ u64::from(std::process::id()).rotate_left(40)
    });
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        // `PROPTEST_MAX_SHRINK_ITERS=0` reports the first failing case as
        // drawn (scripts/planted-bugs wants the verdict, not the minimum).
        max_shrink_iters: env_number("PROPTEST_MAX_SHRINK_ITERS").map_or(10_000, |n| n as u32),
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let total = std::cell::RefCell::new(Stats::default());
    // Cases run, and the number of the first that failed (shrinking runs
    // more): how soon a seed finds a bug, which scripts/planted-bugs reports.
    let ran = std::cell::Cell::new(0u64);
    let first_failure = std::cell::Cell::new(None::<u64>);
    let reproduce = format!(
        "reproduce: OBJWAL_MODEL_SEED={seed} PROPTEST_CASES={cases} cargo test --all-features --test integration model::"
    );
    let outcome = runner.run(&steps::case(MAX_STEPS), |(settings, case)| {
        ran.set(ran.get() + 1);
        let stats = match run_case(mode, &settings, &case) {
            Ok(stats) => stats,
            Err(failure) => {
                if first_failure.get().is_none() {
                    first_failure.set(Some(ran.get()));
                }
                match failure {
                    CaseFailure::Violation(e) => return Err(TestCaseError::fail(e)),
                    // Its thread spins on: neither shrinking nor the next
                    // case can run beside it. The process ends here.
                    // Written past libtest's capture, which an exit drops.
                    CaseFailure::Spun => {
                        let message = format!(
                            "model test ({mode:?}): first failure at case {} of {cases}: it made no progress in {WALL_LIMIT:?} of wall time (a task busy-loops while the clock is paused)\nsettings {settings:?}: {case:#?}\n{reproduce}\n",
                            ran.get()
                        );
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), message.as_bytes());
                        std::process::exit(101);
                    }
                }
            }
        };
        total.borrow_mut().add(&stats);
        Ok(())
    });
    eprintln!(
        "model test ({mode:?}), seed {seed}, {cases} cases; what they reached:\n{}",
        total.borrow()
    );
    if let Some(case) = first_failure.get() {
        eprintln!("model test ({mode:?}): first failure at case {case} of {cases}");
    }
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(reason, (settings, minimal))) => panic!(
            "the model test ({mode:?}) failed: {reason}\nminimal case, {} steps, settings {settings:?}: {minimal:#?}\n{reproduce}",
            minimal.len()
        ),
        Err(TestError::Abort(reason)) => panic!("the model test ({mode:?}) aborted: {reason}\n{reproduce}"),
    }
}

#[test]
fn model_based_durable() {
    run(AckMode::Durable);
}

#[test]
fn model_based_enqueued() {
    run(AckMode::Enqueued);
}

/// The settings the regression cases below were found with: one
/// millisecond flushes, no hedges, no timeouts, the default policies.
fn plain_settings() -> Settings {
    Settings {
        flush_ms: 1,
        max_batch_bytes: 8388608,
        inflight: 4,
        early_seals: 0,
        hedge: None,
        request_timeout_ms: None,
        quarantine: false,
        fail_on_corruption: false,
        stop_attempts: 5,
        tight_backlog: false,
        slow: None,
    }
}

/// Runs a regression case, failing the test on any violation.
fn must_pass(mode: AckMode, settings: &Settings, steps: &[Step]) {
    match run_case(mode, settings, steps) {
        Ok(_) => {}
        Err(CaseFailure::Violation(e)) => panic!("{mode:?}: {e}"),
        Err(CaseFailure::Spun) => panic!("{mode:?}: spun"),
    }
}

/// Model seed 1778448037786178824, shrunk: a dead start object of an older
/// epoch at the writer's next key, a reopen, and the new start object
/// deleted by hand. A reader under quarantine linked the lost start
/// object to the dead object below it, not to the tip its opener chose,
/// and dropped the older writer's acknowledged entries unnamed.
#[test]
fn a_lost_start_object_above_a_dead_object_keeps_the_run_its_opener_chose() {
    use steps::{Fault, Letting, Target};
    let settings = plain_settings();
    let a = || Op::Append {
        handle: 0,
        entries: vec![(0, 6)],
    };
    let held = |r: (u64, u64)| Step::Held {
        after_landed: false,
        letting: Letting::InOrder,
        crash: false,
        release_second: false,
        regions: r,
    };
    let steps = vec![
        held((2, 0)),
        Step::Together(vec![a(), a()]),
        Step::Op(a()),
        held((0, 0)),
        Step::Op(a()),
        Step::Together(vec![a(), a()]),
        Step::Op(Op::Import {
            region: 0,
            fill: true,
            corrupt: false,
        }),
        Step::Faulty {
            fault: Fault::FailRead {
                target: Target::Objects,
                n: 1,
                permanent: false,
            },
            ops: vec![Op::Release { region: 3 }, Op::Reopen],
        },
        Step::Op(a()),
        Step::Op(Op::DeadObject {
            region: 0,
            then_open: false,
        }),
        Step::Together(vec![a(), a()]),
        Step::Op(Op::Damage {
            pick: 15,
            delete: true,
        }),
    ];
    must_pass(AckMode::Enqueued, &settings, &steps);
}

/// Seed 4202446146762173463: a held follower's catch-up read an object
/// corrupted in transit on both of its looks and skipped its segment (a
/// hole, as `on_corrupted_segment = "skip"` says); after a reopen, which
/// clears the model's corruption, a catch-up with no fault blamed the
/// writer's collection for that hole. The oracle now remembers the
/// corruption the follower itself met.
#[test]
fn a_held_followers_hole_from_corrupted_reads_is_not_blamed_on_collection_after_a_reopen() {
    use steps::{Fault, From, Target};
    let settings = plain_settings();
    let steps = vec![
        Step::Op(Op::FollowInFlight { region: 1, n: 2 }),
        Step::Faulty {
            fault: Fault::FailCreate {
                target: Target::Objects,
                n: 1,
                permanent: false,
            },
            ops: vec![Op::Follow {
                from: vec![(1, From::Start)],
                held: true,
            }],
        },
        Step::Op(Op::Append {
            handle: 0,
            entries: vec![(0, 6)],
        }),
        Step::Faulty {
            fault: Fault::CorruptRead { n: 2 },
            ops: vec![Op::CatchUp],
        },
        Step::Op(Op::Reopen),
        Step::Op(Op::CatchUp),
    ];
    for mode in [AckMode::Durable, AckMode::Enqueued] {
        match run_case(mode, &settings, &steps) {
            Ok(_) => {}
            Err(CaseFailure::Violation(e)) => panic!("{mode:?}: {e}"),
            Err(CaseFailure::Spun) => panic!("spun"),
        }
    }
}

/// Seed 7802945342052479228: the older writer's create of its release
/// object at 2 timed out, and the newer opener's settle marker at 2 failed
/// twice (the faults); meanwhile the older writer landed 2, then 3 with a
/// boundary of 3, and collected 2. The marker landed on the freed key, the
/// walk stopped there, and the older writer went on to acknowledge 4, on
/// no chain of the newer process's.
#[test]
fn a_settle_marker_on_a_key_the_older_writer_collected_still_fences_it() {
    use steps::Fault;
    let settings = plain_settings();
    let steps = vec![Step::Faulty {
        fault: Fault::LateLanding { ms: 50, voids: 2 },
        ops: vec![
            Op::Release { region: 0 },
            Op::Release { region: 0 },
            Op::SecondOpener,
        ],
    }];
    must_pass(AckMode::Enqueued, &settings, &steps);
}

/// Seed 6580169118244873080: a follower whose place and next key the
/// writer collected (a jump, two reopens) lists to find where the log went
/// on; that listing failed, and the follower counted it as made, polled
/// the emptied key ever after and never yielded the next entry.
#[test]
fn a_follower_whose_listing_past_collected_keys_failed_lists_again() {
    use steps::{Fault, From, Target};
    let settings = plain_settings();
    let append = || Op::Append {
        handle: 0,
        entries: vec![(1, 6)],
    };
    let steps = vec![
        Step::Op(Op::FollowOutside {
            from: vec![(1, From::Start)],
        }),
        Step::Op(append()),
        Step::Op(Op::Stop),
        Step::Faulty {
            fault: Fault::FailCreate {
                target: Target::Objects,
                n: 1,
                permanent: false,
            },
            ops: vec![Op::Reopen, Op::Reopen],
        },
        Step::Op(Op::ObsoleteAhead {
            region: 1,
            ahead: 1,
        }),
        Step::Op(append()),
        Step::Faulty {
            fault: Fault::FailList { n: 2 },
            ops: vec![Op::CatchUp],
        },
        Step::Op(Op::CatchUp),
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Seed 3472869389360383893: a follower found the newer process's settle
/// marker at its next key (a reopen) and listed during an outage; the
/// failed listing counted as made, the next one was due only after the
/// grown gap, and the follower never yielded what the writer appended
/// after the outage.
#[test]
fn a_follower_blocked_at_a_settle_marker_lists_again_after_a_failed_listing() {
    use steps::{Fault, Target};
    let settings = plain_settings();
    let a = |region| Op::Append {
        handle: 0,
        entries: vec![(region, 6)],
    };
    let steps = vec![
        Step::Op(Op::FollowJump { region: 3, skip: 1 }),
        Step::Together(vec![a(0), a(3)]),
        Step::Op(Op::Reopen),
        Step::Faulty {
            fault: Fault::FailCreate {
                target: Target::Objects,
                n: 1,
                permanent: false,
            },
            ops: vec![Op::CatchUp],
        },
        Step::Together(vec![a(3), a(0)]),
        Step::Faulty {
            fault: Fault::Outage { ms: 2000 },
            ops: vec![Op::CatchUp, Op::CatchUp],
        },
        Step::Op(Op::CatchUp),
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Seed 2473170180193635660, shrunk: an entry given an id in one object
/// read at the final reopen with the id of the object below it, after
/// creates that landed late and failed over an import and a catch-up.
#[test]
fn an_entry_keeps_its_id_after_late_creates_over_an_import() {
    use steps::Fault;
    let settings = plain_settings();
    let a = |region| Op::Append {
        handle: 0,
        entries: vec![(region, 6)],
    };
    let steps = vec![
        Step::Op(Op::SourceAppend { region: 3, n: 1 }),
        Step::Op(Op::FollowJump { region: 2, skip: 1 }),
        Step::Together(vec![a(2), a(0)]),
        Step::Faulty {
            fault: Fault::LateLanding { ms: 50, voids: 3 },
            ops: vec![
                Op::Import {
                    region: 3,
                    fill: false,
                    corrupt: false,
                },
                Op::CatchUp,
            ],
        },
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Seed 4907224035215440042, shrunk: a permanent read failure armed over a
/// step that was not a catch-up. The follower's own reads in the
/// background met it, and it ended with that error at the next catch-up,
/// which the oracle blamed on no fault.
#[test]
fn a_follower_ended_by_a_permanent_read_failure_it_met_in_the_background_is_not_blamed() {
    use steps::{Fault, From, Letting, Target};
    let settings = plain_settings();
    let steps = vec![
        Step::Op(Op::Follow {
            from: vec![(2, From::Start), (0, From::Start)],
            held: false,
        }),
        Step::Held {
            after_landed: false,
            letting: Letting::InOrder,
            crash: false,
            release_second: true,
            regions: (0, 2),
        },
        Step::Op(Op::CatchUp),
        Step::Faulty {
            fault: Fault::FailRead {
                target: Target::Objects,
                n: 1,
                permanent: true,
            },
            ops: vec![Op::ObsoleteAhead {
                region: 0,
                ahead: 1,
            }],
        },
        Step::Held {
            after_landed: true,
            letting: Letting::InOrder,
            crash: false,
            release_second: false,
            regions: (0, 0),
        },
        Step::Op(Op::CatchUp),
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Seed 128012547594120658, shrunk: in enqueued mode, a replay of a region
/// while its entry's flush timer was due, then a read of it.
#[test]
fn a_replay_and_a_read_after_it_agree_while_a_flush_is_due() {
    let settings = Settings {
        flush_ms: 10,
        early_seals: 2,
        ..plain_settings()
    };
    let a = |region| Op::Append {
        handle: 0,
        entries: vec![(region, 6)],
    };
    let steps = vec![
        Step::Together(vec![a(2), a(0)]),
        Step::Op(Op::Advance { ms: 5 }),
        Step::Op(Op::Advance { ms: 5 }),
        Step::Op(Op::Replay {
            from: vec![(2, steps::From::Start)],
        }),
    ];
    must_pass(AckMode::Enqueued, &settings, &steps);
}

/// Seed 5359958427594230283, shrunk: a follower through an outside backend
/// opened after throttled creates, a flush mark ahead of the writer, and an
/// entry of the followed region it yielded only at its next idle check.
/// Its place is the void of the throttled batch, which the writer keeps
/// from collection while it runs; the writer lands the next key and
/// collects it before the follower polls it, and the look at the place
/// finds the void there. rfcs/0010 (decision 3) accepts that only an idle
/// check finds the log again then; the catch-up's 20 s were shorter than
/// the gap to that check after the model's 60 s of idle quiet.
#[test]
fn an_outside_follower_yields_an_entry_appended_after_a_mark_ahead() {
    use steps::{Fault, From};
    let settings = plain_settings();
    let a = |region| Op::Append {
        handle: 0,
        entries: vec![(region, 6)],
    };
    let steps = vec![
        Step::Faulty {
            fault: Fault::Throttle { n: 2 },
            ops: vec![a(0)],
        },
        Step::Op(Op::FollowOutside {
            from: vec![(3, From::Start)],
        }),
        Step::Op(a(1)),
        Step::Op(Op::ObsoleteAhead {
            region: 1,
            ahead: 1,
        }),
        Step::Together(vec![a(3), a(0)]),
        Step::Op(Op::CatchUp),
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Seed 1981710169334720340, shrunk (enqueued mode): an entry of region 1
/// appended here, then an import of region 1 whose floor covered it. The
/// floor's mark was clamped to the region's durable id, so the entry,
/// durable by the import's flush, replayed after a reopen at or below the
/// floor the import answered.
#[test]
fn an_imports_floor_hides_what_this_log_appended_before_it_in_enqueued_mode() {
    use steps::{Fault, From, Letting, Target};
    let settings = Settings {
        slow: Some(13375676532305683134),
        ..plain_settings()
    };
    let a = |region| Op::Append {
        handle: 0,
        entries: vec![(region, 6)],
    };
    let import = |region| Op::Import {
        region,
        fill: false,
        corrupt: false,
    };
    let fail_create = Fault::FailCreate {
        target: Target::Objects,
        n: 1,
        permanent: false,
    };
    let steps = vec![
        Step::Faulty {
            fault: fail_create,
            ops: vec![Op::SecondOpener],
        },
        Step::Together(vec![a(0), a(0)]),
        Step::Op(Op::Reopen),
        Step::Op(Op::Stop),
        Step::Op(import(2)),
        Step::Op(import(0)),
        Step::Op(a(0)),
        Step::Faulty {
            fault: fail_create,
            ops: vec![Op::Reopen],
        },
        Step::Held {
            after_landed: false,
            letting: Letting::InOrder,
            crash: false,
            release_second: true,
            regions: (0, 2),
        },
        Step::Op(Op::SourceAppend { region: 0, n: 1 }),
        Step::Op(Op::Reopen),
        Step::Op(a(0)),
        Step::Op(a(0)),
        Step::Faulty {
            fault: Fault::FailRead {
                target: Target::Fences,
                n: 1,
                permanent: false,
            },
            ops: vec![
                a(1),
                Op::FollowOutside {
                    from: vec![(1, From::Start), (2, From::Start)],
                },
                import(1),
            ],
        },
    ];
    must_pass(AckMode::Enqueued, &settings, &steps);
}

/// Seed 6995857607238340077, shrunk: an append whose create landed though
/// its answer was lost (its void failed too), then a crash whose recovery
/// read that object corrupted twice and left it out as damage, and a
/// second opener that read it intact. The failed append has no id, so
/// the oracle could not place it in the hole and counted its entry gone
/// for good; it replayed at the second opener, as a hole says "unknown".
/// The same steps do not make the same history on every run (the two
/// corrupted reads meet that object in about one run in four before the
/// fix), so the history runs 30 times.
#[test]
fn a_failed_appends_entry_in_a_hole_may_replay_at_the_next_open() {
    use steps::{Fault, Target};
    let settings = Settings {
        flush_ms: 10,
        inflight: 8,
        hedge: Some(1.0),
        request_timeout_ms: Some(500),
        quarantine: true,
        ..plain_settings()
    };
    let steps = vec![
        Step::Faulty {
            fault: Fault::LoseResponse {
                target: Target::Released,
                n: 2,
            },
            ops: vec![Op::Burst {
                region: 3,
                objects: 33,
            }],
        },
        Step::Faulty {
            fault: Fault::LoseVoidResponse {
                read_back_fails: true,
            },
            ops: vec![Op::Append {
                handle: 0,
                entries: vec![(3, 28)],
            }],
        },
        Step::Faulty {
            fault: Fault::CorruptRead { n: 2 },
            ops: vec![Op::Flush, Op::Crash],
        },
        Step::Op(Op::SecondOpener),
    ];
    for _ in 0..30 {
        must_pass(AckMode::Durable, &settings, &steps);
    }
}

/// Seed 134 (with the `CorruptNewest` fault), shrunk: a crash, a new
/// process (epoch 2) whose start object is the log's newest, a dead start
/// object of epoch 1 planted at its next key, and an opener under
/// quarantine to which that start object reads damaged. The opener took
/// the dead object for the log's tip (its link passes over the damaged
/// key), walked above it and opened; the epoch 2 writer deleted the dead
/// object at its next key (rule 8), landed an append there and had it
/// acknowledged, on no chain of the opener's. The open now refuses damage
/// that the tip links over when its header is unknown or newer.
#[test]
fn damage_a_dead_tip_links_over_refuses_the_open() {
    use steps::{Fault, Letting};
    let settings = Settings {
        quarantine: true,
        ..plain_settings()
    };
    let steps = vec![
        Step::Held {
            after_landed: false,
            letting: Letting::InOrder,
            crash: true,
            release_second: false,
            regions: (0, 0),
        },
        Step::Faulty {
            fault: Fault::CorruptNewest,
            ops: vec![Op::DeadObject {
                region: 0,
                then_open: true,
            }],
        },
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Model seed 8652930830632197567 (and seven more in 114), shrunk: a jump
/// opener's settle marker, past the older run's jump, damaged by hand
/// under quarantine (its trailer; its header still reads). Its link to
/// epoch 0 named the key below it (which the jump passed over) a missing
/// object, and the open then refused that key as damage of unknown epoch
/// under the tip's link.
#[test]
fn a_damaged_settle_marker_names_no_missing_object_below_it() {
    use steps::{Fault, Letting, Target};
    let settings = Settings {
        quarantine: true,
        ..plain_settings()
    };
    let steps = vec![
        Step::Held {
            after_landed: false,
            letting: Letting::InOrder,
            crash: false,
            release_second: false,
            regions: (1, 0),
        },
        Step::Faulty {
            fault: Fault::LoseResponse {
                target: Target::Objects,
                n: 1,
            },
            ops: vec![
                Op::JumpOpener {
                    region: 0,
                    skip: 1,
                    held: false,
                },
                Op::Damage {
                    pick: 13,
                    delete: false,
                },
            ],
        },
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Model seed 5134908157749905687, shrunk: a repair (`Op::Repair`) after
/// a dead object, concurrent appends and reopens under the default policy.
#[test]
fn a_repair_after_reopens_lets_the_store_open() {
    use steps::{Fault, Letting, Target};
    let settings = Settings {
        flush_ms: 100,
        early_seals: 2,
        ..plain_settings()
    };
    let a = |region| Op::Append {
        handle: 0,
        entries: vec![(region, 6)],
    };
    let fail_create = |target, ops| Step::Faulty {
        fault: Fault::FailCreate {
            target,
            n: 1,
            permanent: false,
        },
        ops,
    };
    let steps = vec![
        Step::Held {
            after_landed: true,
            letting: Letting::InOrder,
            crash: true,
            release_second: false,
            regions: (2, 0),
        },
        fail_create(
            Target::Fences,
            vec![
                Op::DeadObject {
                    region: 0,
                    then_open: false,
                },
                a(1),
            ],
        ),
        Step::Together(vec![a(0), a(0)]),
        Step::Op(Op::Reopen),
        Step::Op(a(0)),
        Step::Op(Op::Reopen),
        fail_create(Target::Objects, vec![Op::Reopen]),
        fail_create(Target::Objects, vec![Op::Repair { pick: 15 }]),
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}

/// Model seed 8107967564328675028, case 464 of 512 (durable): it made no
/// progress in 120 s of wall time, on this stop's library and on fadcf03's
/// alike. Kept as drawn (a spinning case is not shrunk). What a trace
/// shows: during the `Outage` step the writer's collection lists, fails,
/// and lists again (about 300,000 passes in 25 s of wall time) while no
/// 30 s deadline of the paused clock fires. The cause is not found yet:
/// `cargo test --all-features --test integration model::seed_8107 --
/// --ignored` reproduces it.
#[test]
#[ignore = "spins (a hang of the paused clock), cause open: issue 32 note"]
fn seed_8107967564328675028_case_464_spins() {
    use steps::{Fault, From, Letting};
    let settings = Settings {
        inflight: 8,
        early_seals: 2,
        quarantine: true,
        ..plain_settings()
    };
    let ap = |handle, entries: Vec<(u64, usize)>| Op::Append { handle, entries };
    let steps = vec![
        Step::Op(Op::Damage {
            pick: 7,
            delete: true,
        }),
        Step::Op(Op::Follow {
            from: vec![
                (0, From::After(7)),
                (1, From::After(7)),
                (2, From::After(5)),
                (1, From::Start),
            ],
            held: true,
        }),
        Step::Op(Op::Flush),
        Step::Op(Op::Replay {
            from: vec![
                (0, From::Start),
                (1, From::Start),
                (1, From::At(7)),
                (0, From::Start),
            ],
        }),
        Step::Op(Op::SecondOpener),
        Step::Op(ap(1, vec![(1, 17), (1, 19), (3, 25)])),
        Step::Op(ap(2, vec![(0, 38), (2, 46), (2, 3649)])),
        Step::Op(Op::Crash),
        Step::Faulty {
            fault: Fault::Outage { ms: 2000 },
            ops: vec![
                Op::Import {
                    region: 1,
                    fill: true,
                    corrupt: false,
                },
                Op::FollowInFlight { region: 0, n: 3 },
            ],
        },
        Step::Together(vec![
            ap(0, vec![(3, 28), (2, 43), (1, 3116)]),
            ap(2, vec![(1, 18), (3, 46)]),
            ap(0, vec![(3, 35)]),
            Op::WaitDurable { region: 3, pick: 4 },
        ]),
        Step::Op(Op::SourceAppend { region: 2, n: 3 }),
        Step::Op(Op::Read {
            handle: 2,
            region: 1,
            from: From::Start,
        }),
        Step::Held {
            after_landed: true,
            letting: Letting::InOrder,
            crash: false,
            release_second: false,
            regions: (2, 0),
        },
        Step::Op(Op::Obsolete {
            region: 2,
            pick: 10,
        }),
    ];
    must_pass(AckMode::Durable, &settings, &steps);
}
