//! Attacks on three recent changes: the fencing re-walk after a walk that
//! stopped at a key the older writer collected (rfcs/0006, Lemma 2, "A key
//! the older writer collected"; `recovery::run_went_past`), the follower's
//! repeated listings (rfcs/0010) and the import floor (rfcs/0009).
//!
//! Deterministic: paused time on the memory backend; each process gets its
//! own fault wrapper over one shared store, so that its creates can be
//! held and its reads gated alone.

use std::collections::BTreeSet;
use std::time::Duration;

use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::keys::Prefix;
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::{Config, Error, Storage, Wal};

use crate::common::*;

pub(crate) const P: &str = "t";

pub(crate) fn config() -> Config {
    Config {
        flush_interval: Duration::from_millis(10),
        follow_interval: Duration::from_millis(10),
        follow_max_interval: Duration::from_millis(100),
        // Held creates and gated reads wait as long as the test says.
        request_timeout: None,
        ..Config::default()
    }
}

pub(crate) fn key(sequence: u64) -> String {
    Prefix::new(P).unwrap().object_key(sequence)
}

/// After `B` opened, `A` is fenced: its next append answers `Fenced` (one it
/// acknowledged could be on no chain of `B`'s). Returns `B`'s replay of
/// region 1, taken after that append.
async fn fenced_after_open(a: &Wal, b_wal: &Wal, shared: &Storage) -> Result<Vec<String>, Error> {
    let after = within(a.append(vec![(1, b("after"))])).await;
    let seen = replayed(b_wal, 1).await;
    assert!(
        matches!(after, Err(Error::Fenced { .. })),
        "A's append after B opened answered {after:?}; B replays {seen:?}; listed {:?}",
        listed(shared).await
    );
    seen
}

/// The sequences under `objects/`, asked of the shared store.
pub(crate) async fn listed(storage: &Storage) -> BTreeSet<u64> {
    listed_objects(storage, P).await
}

/// Waits (paused time: virtual 1 ms steps) until `cond` holds.
pub(crate) async fn until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..20_000 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never: {what}");
}

/// Releases every create `faulty` holds that is not of `object`, until the
/// create of `object` is held.
pub(crate) async fn release_until_held(faulty: &FaultyStorage, object: &str) {
    within(async {
        loop {
            faulty.wait_held(1).await;
            let held = faulty.held();
            if held.iter().any(|k| k == object) {
                return;
            }
            for k in held {
                assert!(
                    !k.contains("/objects/"),
                    "held an unexpected object create {k}"
                );
                faulty.release(&k);
            }
        }
    })
    .await
}

/// The payloads of region `region` as a fresh open (after `wal` stopped or
/// not) replays them.
pub(crate) async fn replayed(wal: &Wal, region: u64) -> Result<Vec<String>, Error> {
    Ok(payloads(&try_read_all(wal, region, 0).await?))
}

// ---------------------------------------------------------------------------
// 1. Fencing re-walk.
// ---------------------------------------------------------------------------

/// The older writer `A` has its tip at `T`. An opener `B` lists, and its
/// settle marker at `T+1` is held. `A` lands `T+1` (entry), a marks-only
/// `T+2` (boundary `T+2`) and collects `T+1`; `B`'s marker lands on the
/// freed key and the walk stops there. `B`'s `run_went_past` lists (`T+2`
/// is above the block, boundary `T+2 > T+1`), but its look at `T+2` is
/// held; meanwhile `A` lands `T+3` (entry "e3", boundary `T+3`) and
/// collects `T+2`. The look then finds nothing: does `B` still see that the
/// run went past, replay "e3", and fence `A`?
// Failed before 9c42ee1 (10:09 UTC) with: B's replay Err(Storage { .. NotFound,
// key: "t/objects/00000000000000000002.wal" .. }) lacks e3, acknowledged by A
// before B's open completed; A's append after B's open answered Ok([6291457]);
// t = 2, listed {5, 6, 67}. (run_went_past read `Looked::Missing` for the
// listed T+2 that A collected after the listing as "did not pass".) Passes now.
#[tokio::test(start_paused = true)]
async fn a_collection_between_the_went_past_listing_and_its_look_still_fences_the_older_writer() {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("e1"))])).await.unwrap();
    let t = *listed(&shared).await.last().unwrap();

    // B: its own wrapper (creates held), and a gate on its first read of T+2.
    let fb = FaultyStorage::new(shared.clone());
    fb.hold_creates(true);
    let gate = Instrumented::wrap(fb.storage(), Some(&key(t + 2)));
    let b_storage = gate.storage();
    let opening = tokio::spawn(async move { Wal::open(b_storage, P, config()).await });
    release_until_held(&fb, &key(t + 1)).await;
    fb.hold_creates(false);

    // A lands T+1 and a marks-only T+2, and collects T+1.
    let ids = within(a.append(vec![(1, b("e2"))])).await.unwrap();
    within(a.obsolete(1, ids[0])).await.unwrap();
    within(a.flush()).await.unwrap();
    let listed_now = listed(&shared).await;
    assert!(listed_now.contains(&(t + 2)), "{listed_now:?} (t = {t})");
    until("A collects T+1", || async {
        !listed(&shared).await.contains(&(t + 1))
    })
    .await;

    // B's marker lands on the freed key; its walk stops there, and its
    // went-past check lists and then looks at T+2: held.
    assert!(fb.release(&key(t + 1)));
    within(gate.arrived.notified()).await;

    // A lands T+3 with an entry (boundary T+3) and collects T+2.
    let e3 = within(a.append(vec![(1, b("e3"))])).await;
    assert!(e3.is_ok(), "A's append of e3: {e3:?}");
    until("A collects T+2", || async {
        !listed(&shared).await.contains(&(t + 2))
    })
    .await;
    gate.open();

    let b_wal = within(opening).await.unwrap().expect("B opens");
    // A acknowledged e3 before B's open completed: B replays it.
    let seen = replayed(&b_wal, 1).await;
    let regions = b_wal.regions().await;
    // After B opened, A is fenced: an append it acknowledges must be in B's
    // history, which it cannot be (B's replay is taken).
    let e4 = within(a.append(vec![(1, b("e4"))])).await;
    assert!(
        seen.as_ref().is_ok_and(|s| s.contains(&"e3".to_owned())),
        "B's replay {seen:?} lacks e3, acknowledged by A before B's open completed; \
         A's append after B's open answered {e4:?}; t = {t}, listed {:?}; B's regions {regions:?}",
        listed(&shared).await
    );
    assert!(
        matches!(e4, Err(Error::Fenced { .. })),
        "A's append after B opened answered {e4:?}, not Fenced"
    );
}

/// Drives `rounds` rounds of the RFC's history against one opener `B`:
/// `B`'s settle marker at `k` is held while `A` lands `k` (an entry) and a
/// marks-only `k+1` (boundary `k+1`) and collects `k`; then the marker
/// lands on the freed key. Returns `A`, `B`'s open, the shared store and
/// the payloads `A` acknowledged and never obsoleted (none).
async fn collected_under_rewalks(rounds: usize) -> (Wal, Result<Wal, Error>, Storage) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("e1"))])).await.unwrap();
    let mut k = *listed(&shared).await.last().unwrap() + 1;
    let fb = FaultyStorage::new(shared.clone());
    fb.hold_creates(true);
    let b_storage = fb.storage();
    let opening = tokio::spawn(async move { Wal::open(b_storage, P, config()).await });
    for round in 0..rounds {
        release_until_held(&fb, &key(k)).await;
        let ids = within(a.append(vec![(1, b(&format!("r{round}")))]))
            .await
            .unwrap();
        within(a.obsolete(1, ids[0])).await.unwrap();
        within(a.flush()).await.unwrap();
        let now = listed(&shared).await;
        assert!(now.contains(&(k + 1)), "round {round}: {now:?} (k = {k})");
        until("A collects k", || async {
            !listed(&shared).await.contains(&k)
        })
        .await;
        assert!(fb.release(&key(k)));
        k += 2;
    }
    // From here B's creates go through.
    fb.hold_creates(false);
    fb.release_all();
    let opened = within(opening).await.unwrap();
    (a, opened, shared)
}

/// The RFC's history once (the model test's seed): `B`'s marker lands on a
/// key `A` collected, the check sees `A`'s marks-only object above it with
/// a higher boundary, `B` walks again and opens; `A` is then fenced, and
/// what it acknowledged last before the open is in `B`'s history.
#[tokio::test(start_paused = true)]
async fn an_older_writer_collecting_under_one_rewalk_stays_fenced() {
    let (a, opened, shared) = collected_under_rewalks(1).await;
    let b_wal = opened.expect("B opens after one re-walk");
    let seen = fenced_after_open(&a, &b_wal, &shared).await;
    assert!(seen.is_ok(), "B's replay: {seen:?}");
}

/// The same history five times over: each of `B`'s walks stops at a key
/// `A` collected. After five walks the open must answer a transient error
/// (not hang, not open past `A`'s run); a later quiet open then replays
/// `A`'s entry acknowledged after that, and fences `A`.
#[tokio::test(start_paused = true)]
async fn five_rewalks_under_an_older_writer_collecting_give_a_transient_error_and_lose_nothing() {
    let (a, opened, shared) = collected_under_rewalks(5).await;
    match &opened {
        Err(Error::Storage { source }) if source.is_transient() => {}
        other => panic!("B's open after five collected walks answered {other:?}"),
    }
    within(a.append(vec![(1, b("kept"))])).await.unwrap();
    let c = within(Wal::open(shared.clone(), P, config()))
        .await
        .unwrap();
    let seen = replayed(&c, 1).await.unwrap();
    assert_eq!(seen, vec!["kept".to_owned()]);
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(matches!(after, Err(Error::Fenced { .. })), "{after:?}");
}

/// Four such walks, then a quiet one: `B` opens on its fifth walk and
/// fences `A`; nothing `A` acknowledged is missing.
#[tokio::test(start_paused = true)]
async fn four_rewalks_under_an_older_writer_collecting_then_an_open_fences_it() {
    let (a, opened, shared) = collected_under_rewalks(4).await;
    let b_wal = opened.expect("B opens on its fifth walk");
    let _ = fenced_after_open(&a, &b_wal, &shared).await;
}

// ---------------------------------------------------------------------------
// 2. A follower while the writer collects past it and listings fail.
// ---------------------------------------------------------------------------

/// The follower yielded "a" (its place is `a`'s object). Its eyes then
/// fail every read while the writer obsoletes "a", lands a marks-only
/// object and then "b", collecting both keys behind the follower's place
/// (place and next key gone). The eyes read again but fail the next
/// `listings` listings: the follower must list again and yield "b".
async fn a_follower_past_collected_keys_with_failing_listings(listings: usize, extra: bool) {
    use futures::StreamExt;
    let shared = Storage::new(MemoryStorage::new());
    let w = within(Wal::open(shared.clone(), P, config()))
        .await
        .unwrap();
    let a = within(w.append(vec![(1, b("a"))])).await.unwrap()[0];
    let eyes = FaultyStorage::new(shared.clone());
    let reader = within(objwal::WalReader::open(eyes.storage(), P, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    let first = within(follower.next()).await.unwrap().unwrap();
    assert_eq!(first.data, b("a"));
    eyes.fail_next(Op::Read, "", usize::MAX, StorageErrorKind::Transient);
    let place = *listed(&shared).await.last().unwrap();
    within(w.obsolete(1, a)).await.unwrap();
    within(w.flush()).await.unwrap();
    within(w.append(vec![(1, b("b"))])).await.unwrap();
    until("the writer collects the place and the next key", || async {
        let now = listed(&shared).await;
        !now.contains(&place) && !now.contains(&(place + 1))
    })
    .await;
    if extra {
        // Once more: the follower's listing, when it comes, finds a chain
        // whose next key was collected too.
        let c = within(w.append(vec![(1, b("c"))])).await.unwrap()[0];
        let _ = c;
    }
    eyes.clear_faults();
    eyes.fail_next(Op::List, "", listings, StorageErrorKind::Transient);
    let got = within(follower.next()).await.unwrap();
    assert_eq!(
        got.map(|e| e.data).ok(),
        Some(b("b")),
        "listed {:?}",
        listed(&shared).await
    );
    if extra {
        let got = within(follower.next()).await.unwrap();
        assert_eq!(got.map(|e| e.data).ok(), Some(b("c")));
    }
    let _ = first;
}

#[tokio::test(start_paused = true)]
async fn a_follower_whose_place_and_next_key_were_collected_lists_again_after_one_failed_listing() {
    a_follower_past_collected_keys_with_failing_listings(1, false).await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_whose_place_and_next_key_were_collected_lists_again_after_many_failed_listings()
{
    a_follower_past_collected_keys_with_failing_listings(7, true).await;
}

// ---------------------------------------------------------------------------
// 3. The import floor after a failed import.
// ---------------------------------------------------------------------------

/// An import into `t` whose creates fail until it answers an error (the
/// failed batch stays queued and lands once the store answers), then a
/// repeated import that succeeds. Every reader, and a reopen, must show the
/// region's entries once each, above the second floor.
async fn a_repeated_import_after_a_failed_one_shows_each_entry_once(mode: objwal::AckMode) {
    let shared = Storage::new(MemoryStorage::new());
    let source = within(Wal::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    within(source.append(vec![(5, b("x1")), (5, b("x2"))]))
        .await
        .unwrap();
    let from_log = within(objwal::WalReader::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    let fd = FaultyStorage::new(shared.clone());
    let dest_config = Config {
        ack_mode: mode,
        max_unpersisted_age: Duration::from_millis(200),
        ..config()
    };
    let dest = within(Wal::open(fd.storage(), P, dest_config.clone()))
        .await
        .unwrap();
    fd.fail_next(Op::Create, "/objects/", 40, StorageErrorKind::Transient);
    let first = within(dest.import_region(&from_log, 5, 0)).await;
    fd.clear_faults();
    // A failing store answers `Failing` until a create succeeds: call
    // again (the failed batch lands meanwhile).
    let mut second = within(dest.import_region(&from_log, 5, 0)).await;
    for _ in 0..50 {
        if !matches!(second, Err(Error::Failing { .. })) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        second = within(dest.import_region(&from_log, 5, 0)).await;
    }
    assert!(
        second.is_ok(),
        "the repeated import (after {first:?}): {second:?}"
    );
    let imported = second.unwrap();
    within(dest.flush()).await.unwrap();
    let what = format!("first import {first:?}, second {imported:?}");
    once_here_and_after_a_reopen(dest, &shared, dest_config, &what).await;
    let reader = within(objwal::WalReader::open(shared.clone(), P, config()))
        .await
        .unwrap();
    let seen = payloads(&collect_entries(reader.read(5, 0)).await.unwrap());
    assert_eq!(seen, vec!["x1", "x2"], "a reader; first import {first:?}");
}

#[tokio::test(start_paused = true)]
async fn a_repeated_durable_import_after_a_failed_one_shows_each_entry_once() {
    a_repeated_import_after_a_failed_one_shows_each_entry_once(objwal::AckMode::Durable).await;
}

#[tokio::test(start_paused = true)]
async fn a_repeated_enqueued_import_after_a_failed_one_shows_each_entry_once() {
    a_repeated_import_after_a_failed_one_shows_each_entry_once(objwal::AckMode::Enqueued).await;
}

/// The RFC's history once, but `B`'s reads of `A`'s marks-only object
/// above the block (`T+2`, the only evidence that `A` went past) come back
/// corrupted (in transit: the object is intact): the went-past check's
/// look finds it "damaged". `B` must not open past `A`'s run: either its
/// open fails, or `A` is fenced and nothing it acknowledges is lost.
// FAILED before 1168f07: A's append after B opened answered Ok([5242881]); B replays
// Err(Storage { .. NotFound, key: "t/objects/00000000000000000002.wal" .. });
// listed {5, 67}
// (run_went_past, src/wal/open/recovery.rs: `Looked::Damaged(_) => Ok(None)`
// counts the damaged evidence as "did not pass"; A's collection then deletes
// B's marker at T+1 and A acknowledges at T+3, off B's chain.)
#[tokio::test(start_paused = true)]
async fn a_went_past_look_that_reads_the_evidence_damaged_still_fences_the_older_writer() {
    let (a, opened, shared) = b_opens_while_a_collects(|fb, k| {
        fb.corrupt_next_reads(&key(k + 1), usize::MAX);
    })
    .await;
    let Ok(b_wal) = opened else {
        return; // refused: nothing opened past A
    };
    let _ = fenced_after_open(&a, &b_wal, &shared).await;
}

/// The RFC's history once (`B`'s settle marker at `k` held while `A` lands
/// `k` and a marks-only `k+1` and collects `k`), with `arm` called on
/// `B`'s wrapper once `B`'s recovery listed. Returns `A`, `B`'s open and
/// the shared store, `B`'s faults cleared.
async fn b_opens_while_a_collects(
    arm: impl FnOnce(&FaultyStorage, u64),
) -> (Wal, Result<Wal, Error>, Storage) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("e1"))])).await.unwrap();
    let k = *listed(&shared).await.last().unwrap() + 1;
    let fb = FaultyStorage::new(shared.clone());
    fb.hold_creates(true);
    let b_storage = fb.storage();
    let opening = tokio::spawn(async move { Wal::open(b_storage, P, config()).await });
    release_until_held(&fb, &key(k)).await;
    arm(&fb, k);
    let ids = within(a.append(vec![(1, b("r0"))])).await.unwrap();
    within(a.obsolete(1, ids[0])).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects k", || async {
        !listed(&shared).await.contains(&k)
    })
    .await;
    fb.hold_creates(false);
    fb.release_all();
    let opened = within(opening).await.unwrap();
    fb.clear_faults();
    (a, opened, shared)
}

/// The RFC's history once, and `B`'s went-past listing fails (transient)
/// `n` times: the open either answers an error or opens with `A` fenced;
/// it never hangs.
async fn a_failing_went_past_listing(n: usize) {
    // B's recovery listed already: its next listing is the check's.
    let (a, opened, shared) = b_opens_while_a_collects(|fb, _| {
        fb.fail_next(Op::List, "/objects/", n, StorageErrorKind::Transient);
    })
    .await;
    let Ok(b_wal) = opened else {
        return;
    };
    let _ = fenced_after_open(&a, &b_wal, &shared).await;
}

#[tokio::test(start_paused = true)]
async fn a_went_past_listing_that_fails_once_never_opens_past_the_older_writer() {
    a_failing_went_past_listing(1).await;
}

#[tokio::test(start_paused = true)]
async fn a_went_past_listing_that_keeps_failing_answers_and_never_opens_past_the_older_writer() {
    a_failing_went_past_listing(usize::MAX).await;
}

/// A takeover whose `finish` fails (the destination's creates fail until
/// it answers `Failing`; the failed batch lands later), then a second
/// takeover of the region, finished once the store answers: every view of
/// the destination shows each entry once.
#[tokio::test(start_paused = true)]
async fn a_repeated_takeover_after_a_failed_finish_shows_each_entry_once() {
    let shared = Storage::new(MemoryStorage::new());
    let source = within(Wal::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    let last = within(source.append(vec![(5, b("x1")), (5, b("x2"))]))
        .await
        .unwrap()[1];
    let reader = within(objwal::WalReader::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    let fd = FaultyStorage::new(shared.clone());
    let dest_config = Config {
        max_unpersisted_age: Duration::from_millis(200),
        ..config()
    };
    let dest = within(Wal::open(fd.storage(), P, dest_config.clone()))
        .await
        .unwrap();
    let wait = |t: &objwal::Takeover| t.progress().position >= last;
    let first = dest.take_over(&reader, 5, 0).unwrap();
    until("the takeover follows x2", || {
        let done = wait(&first);
        async move { done }
    })
    .await;
    fd.fail_next(Op::Create, "/objects/", 40, StorageErrorKind::Transient);
    let failed = within(first.finish()).await;
    fd.clear_faults();
    let mut second = None;
    for _ in 0..50 {
        let t = dest.take_over(&reader, 5, 0).unwrap();
        until("the takeover follows x2", || {
            let done = wait(&t);
            async move { done }
        })
        .await;
        let finished = within(t.finish()).await;
        let again = matches!(finished, Err(Error::Failing { .. }));
        second = Some(finished);
        if !again {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        matches!(second, Some(Ok(_))),
        "second finish (after {failed:?}): {second:?}"
    );
    let what = format!("first finish {failed:?}");
    once_here_and_after_a_reopen(dest, &shared, dest_config, &what).await;
}

/// Region 5 of `dest` reads "x1", "x2" once each, and so it does after
/// `dest` stops and its prefix is opened again.
async fn once_here_and_after_a_reopen(dest: Wal, shared: &Storage, config: Config, what: &str) {
    let seen = payloads(&read_all(&dest, 5, 0).await);
    assert_eq!(seen, vec!["x1", "x2"], "{what}");
    within(dest.stop()).await.unwrap();
    let reopened = within(Wal::open(shared.clone(), P, config)).await.unwrap();
    let seen = payloads(&read_all(&reopened, 5, 0).await);
    assert_eq!(seen, vec!["x1", "x2"], "after a reopen; {what}");
}
