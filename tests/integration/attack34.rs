//! Attacks on the went-past check's rule for damage recovery judged
//! (rfcs/0006, Lemma 2, "A key the older writer collected";
//! `recovery::run_went_past`): a damaged object above the walk's block
//! fails the open under `Quarantine` unless its readable header shows it
//! carries no boundary past the block.
//!
//! Deterministic: paused time on the memory backend; each process gets its
//! own fault wrapper over one shared store. Damage at rest is made by
//! rewriting an object's bytes in the shared store (one byte flipped).

use objwal::config::DamagePolicy;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::keys::Prefix;
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::wal::damage::quarantine_key;
use objwal::{Config, Error, ObjectStorage, Storage, Wal};

use crate::attack32::{config, key, listed, replayed, until, P};
use crate::common::*;

pub(crate) fn quarantine() -> Config {
    Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..config()
    }
}

/// The whole object at `sequence`.
pub(crate) async fn bytes_of(shared: &Storage, sequence: u64) -> bytes::Bytes {
    let k = key(sequence);
    let size = shared.read_suffix(&k, 1).await.unwrap().size;
    shared.read(&k, 0..size).await.unwrap()
}

/// Where a byte is flipped at rest.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rot {
    /// Byte 20 of the 64-byte header: its CRC fails, but recovery reads the
    /// header's fields from the trailer's copy and does not notice.
    Header,
    /// The first byte after the header: the first segment (for a
    /// marks-only object, its marks segment).
    FirstSegment,
    /// The last byte before the trailer (the footer's end).
    Footer,
}

/// Rewrites the object at `sequence` with one byte flipped (damage at
/// rest; nobody reads it in between). Returns the intact bytes.
pub(crate) async fn rot(shared: &Storage, sequence: u64, at: Rot) -> bytes::Bytes {
    let intact = bytes_of(shared, sequence).await;
    let mut rotted = intact.to_vec();
    let offset = match at {
        Rot::Header => 20,
        Rot::FirstSegment => 64,
        Rot::Footer => rotted.len() - 81,
    };
    rotted[offset] ^= 0xFF;
    shared.delete(&key(sequence)).await.unwrap();
    shared
        .create(&key(sequence), bytes::Bytes::from(rotted))
        .await
        .unwrap();
    intact
}

/// `objwal repair --yes`: the object's bytes go under `quarantine/`, the
/// original is deleted.
/// Returns false when the object is gone already (its writer collected it).
pub(crate) async fn move_aside(shared: &Storage, sequence: u64) -> bool {
    if !listed(shared).await.contains(&sequence) {
        return false;
    }
    let data = bytes_of(shared, sequence).await;
    let prefix = Prefix::new(P).unwrap();
    shared
        .create(&quarantine_key(&prefix, sequence), data)
        .await
        .unwrap();
    shared.delete(&key(sequence)).await.unwrap();
    true
}

/// The older writer `A` (durable mode) keeps the void `V` of a failed
/// batch, goes on past it ("b" at `V+1`, obsoleted), lands a marks-only
/// `X` (boundary past `V+1`) and collects `V+1`. Returns `A`, its wrapper,
/// `V` and `X`.
pub(crate) async fn kept_void_history(shared: &Storage) -> (Wal, FaultyStorage, u64, u64) {
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    let before = listed(shared).await;
    fa.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    let x = within(a.append(vec![(1, b("x"))])).await;
    assert!(x.is_err(), "{x:?}");
    let v = *listed(shared).await.last().unwrap();
    assert!(!before.contains(&v));
    let bid = within(a.append(vec![(1, b("b"))])).await.unwrap()[0];
    within(a.obsolete(1, bid)).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects V+1", || async {
        let now = listed(shared).await;
        !now.contains(&(v + 1)) && now.contains(&v)
    })
    .await;
    let x_key = *listed(shared).await.last().unwrap();
    assert!(x_key > v + 1, "{:?} (V = {v})", listed(shared).await);
    (a, fa, v, x_key)
}

// ---------------------------------------------------------------------------
// 1. Damage at rest with a readable header, then `objwal repair`.
// ---------------------------------------------------------------------------

/// Kept-void history; `X` (A's marks-only evidence that it went past
/// `V+1`) rots at rest where `at` says, its header still readable. `B`
/// (Quarantine) must refuse naming `X` (its header shows a boundary past
/// the block). `A` goes on ("after" at `X+1`). The operator moves `X`
/// aside (A still runs): `C` (Quarantine) must open, fence `A` and replay
/// "after".
async fn rotted_evidence_then_repair_with_a_running_writer(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, v, x) = kept_void_history(&shared).await;
    rot(&shared, x, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let opened = within(Wal::open(fb.storage(), P, quarantine())).await;
    match &opened {
        Err(e) => assert!(e.to_string().contains(&key(x)), "{e}"),
        Ok(_) => panic!(
            "B opened over the rotted {x} (rot {at:?}) above its block; V = {v}, listed {:?}",
            listed(&shared).await
        ),
    }
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(after.is_ok(), "A's append after B refused: {after:?}");
    let moved = move_aside(&shared, x).await;
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after {x} (rot {at:?}) was moved aside ({moved}: false = A collected it \
             first): {e}; V = {v}, listed {:?}",
            listed(&shared).await
        ),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    assert!(
        matches!(late, Err(Error::Fenced { .. })),
        "A's append after C opened answered {late:?}; listed {:?}",
        listed(&shared).await
    );
    assert_eq!(replayed(&c, 1).await.unwrap(), ["after"]);
}

#[tokio::test(start_paused = true)]
async fn rotted_marks_of_the_evidence_refuse_until_moved_aside_then_fence_the_running_writer() {
    rotted_evidence_then_repair_with_a_running_writer(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_rotted_footer_of_the_evidence_refuses_until_moved_aside_then_fences_the_running_writer()
{
    rotted_evidence_then_repair_with_a_running_writer(Rot::Footer).await;
}

/// Kept-void history; `X` (A's newest object) rots at rest; `B` refuses
/// naming it; `A` crashes (dropped: nothing more is created). The operator
/// moves `X` aside, as the refusal says. No damage is left under
/// `objects/` and no process runs: the next open (Quarantine, and then the
/// default policy) must succeed, and the store is writable.
async fn rotted_newest_evidence_then_repair_after_a_crash(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, v, x) = kept_void_history(&shared).await;
    rot(&shared, x, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let opened = within(Wal::open(fb.storage(), P, quarantine())).await;
    match &opened {
        Err(e) => assert!(e.to_string().contains(&key(x)), "{e}"),
        Ok(_) => panic!("B opened over the rotted {x} above its block"),
    }
    let first = opened.unwrap_err().to_string();
    drop(a);
    move_aside(&shared, x).await;
    let c = within(Wal::open(fb.storage(), P, quarantine())).await;
    let c = match c {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after {x} (rot {at:?}, A crashed) was moved aside: {e}; V = {v}, listed {:?}; \
             B's first refusal: {first}",
            listed(&shared).await
        ),
    };
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    assert_eq!(replayed(&c, 1).await.unwrap(), ["c"]);
}

#[tokio::test(start_paused = true)]
async fn rotted_marks_of_the_newest_evidence_moved_aside_after_a_crash_let_the_store_open() {
    rotted_newest_evidence_then_repair_after_a_crash(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_rotted_footer_of_the_newest_evidence_moved_aside_after_a_crash_lets_the_store_open() {
    rotted_newest_evidence_then_repair_after_a_crash(Rot::Footer).await;
}

// ---------------------------------------------------------------------------
// 2. No damage at rest.
// ---------------------------------------------------------------------------

/// Kept-void history, no damage at rest. `B` (Quarantine) reads `X`
/// damaged in transit at the marks segment (header readable) for its whole
/// open: refused, naming `X`. The reads clear. A second open by the same
/// process (same wrapper) and a third by a fresh one must open, fence `A`
/// and replay what `A` acknowledged meanwhile.
#[tokio::test(start_paused = true)]
async fn damage_in_transit_at_the_marks_of_the_evidence_refuses_once_then_opens() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, _v, x) = kept_void_history(&shared).await;
    let fb = FaultyStorage::new(shared.clone());
    fb.corrupt_next_reads_at(&key(x), usize::MAX, 64);
    let opened = within(Wal::open(fb.storage(), P, quarantine())).await;
    match &opened {
        Err(e) => assert!(e.to_string().contains(&key(x)), "{e}"),
        Ok(_) => panic!("B opened over {x}, read damaged, above its block"),
    }
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(after.is_ok(), "{after:?}");
    fb.clear_faults();
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("the open after the reads cleared: {e}"),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    assert_eq!(replayed(&c, 1).await.unwrap(), ["after"]);
}

// ---------------------------------------------------------------------------
// 3. Damage below the block.
// ---------------------------------------------------------------------------

/// `A` lands "d" at `D` and "e" at `D+1`; `D`'s footer rots at rest
/// (header readable, records unknown). `D` is below the run's end (its
/// intact successor links to it): `B` (Quarantine) must open (left out,
/// its "d" a hole), fence `A` and replay "e" and what follows.
#[tokio::test(start_paused = true)]
async fn a_rotted_object_below_the_run_s_end_is_left_out_and_the_writer_fenced() {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    within(a.append(vec![(1, b("d"))])).await.unwrap();
    let d = *listed(&shared).await.last().unwrap();
    within(a.append(vec![(1, b("e"))])).await.unwrap();
    assert!(listed(&shared).await.contains(&(d + 1)));
    rot(&shared, d, Rot::Footer).await;
    let fb = FaultyStorage::new(shared.clone());
    let bw = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(w) => w,
        Err(e) => panic!("B refused over {d} below the run's end: {e}"),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    let seen = replayed(&bw, 1).await;
    let seen = seen.map_err(|e| e.to_string());
    assert!(
        seen.as_ref()
            .is_ok_and(|s| s.contains(&"e".to_owned()) && s.contains(&"a".to_owned())),
        "B replays {seen:?}"
    );
}

/// As the refusal says: "stop the older process, then move the object
/// aside". Kept-void history; `X` rots at rest; `B` refuses naming it;
/// `A` stops cleanly (`Wal::stop`); `X` is moved aside. The next open
/// (Quarantine) must succeed and the store be writable.
async fn rotted_newest_evidence_then_stop_and_repair(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, v, x) = kept_void_history(&shared).await;
    rot(&shared, x, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("B opened over the rotted {x} above its block"),
    };
    assert!(first.contains(&key(x)), "{first}");
    let stopped = within(a.stop()).await;
    let at_stop = listed(&shared).await;
    let moved = move_aside(&shared, x).await;
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after A stopped ({stopped:?}) and {x} (rot {at:?}) was moved aside \
             ({moved}): {e}; V = {v}, listed at A's stop {at_stop:?}, now {:?}; B's first \
             refusal: {first}",
            listed(&shared).await
        ),
    };
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    assert_eq!(replayed(&c, 1).await.unwrap(), ["c"]);
}

#[tokio::test(start_paused = true)]
async fn rotted_marks_of_the_newest_evidence_let_the_store_open_once_the_writer_stopped_and_it_moved_aside(
) {
    rotted_newest_evidence_then_stop_and_repair(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_rotted_footer_of_the_newest_evidence_lets_the_store_open_once_the_writer_stopped_and_it_moved_aside(
) {
    rotted_newest_evidence_then_stop_and_repair(Rot::Footer).await;
}

// ---------------------------------------------------------------------------
// 4. The held-marker history: the damage lands after recovery listed.
// ---------------------------------------------------------------------------

/// `A` keeps a void `V` (a failed batch). `B` (Quarantine) opens; its
/// settle marker at `k = V+1` is held while `A` lands "r" at `k`,
/// obsoletes it and lands a marks-only `k+1` (boundary past `k`),
/// collecting `k`. Then `k+1` rots at rest (`at`), and `B` goes on: its
/// marker lands on the freed `k`, its check reads `k+1` damaged (not
/// judged: walk again), and its second recovery judges it. Returns `A`,
/// `B`'s open, the store, `k`.
async fn rot_after_recovery_listed(at: Rot) -> (Wal, Result<Wal, Error>, Storage, u64) {
    use crate::attack32::release_until_held;
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    fa.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    let x = within(a.append(vec![(1, b("x"))])).await;
    assert!(x.is_err(), "{x:?}");
    let v = *listed(&shared).await.last().unwrap();
    let k = v + 1;
    let fb = FaultyStorage::new(shared.clone());
    fb.hold_creates(true);
    let b_storage = fb.storage();
    let opening = tokio::spawn(async move { Wal::open(b_storage, P, quarantine()).await });
    release_until_held(&fb, &key(k)).await;
    let ids = within(a.append(vec![(1, b("r"))])).await.unwrap();
    within(a.obsolete(1, ids[0])).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects k", || async {
        let now = listed(&shared).await;
        !now.contains(&k) && now.contains(&(k + 1))
    })
    .await;
    rot(&shared, k + 1, at).await;
    fb.hold_creates(false);
    fb.release_all();
    let opened = within(opening).await.unwrap();
    (a, opened, shared, k)
}

/// The held-marker history: `B` must refuse (naming `k+1`) or fence `A`
/// with everything `A` acknowledged on its chain. Then `A` stops, `k+1`
/// is moved aside, and an open must succeed.
async fn rot_after_recovery_listed_then_repair(at: Rot) {
    let (a, opened, shared, k) = rot_after_recovery_listed(at).await;
    match opened {
        Ok(bw) => {
            let after = within(a.append(vec![(1, b("after"))])).await;
            let seen = replayed(&bw, 1).await;
            let in_b = seen.as_ref().is_ok_and(|s| s.contains(&"after".to_owned()));
            assert!(
                matches!(after, Err(Error::Fenced { .. })) || in_b,
                "B opened over the rotted {} ({at:?}); A's append after it answered {after:?}, \
                 B replays {seen:?}; listed {:?}",
                k + 1,
                listed(&shared).await
            );
            return;
        }
        Err(e) => assert!(e.to_string().contains(&key(k + 1)), "{e}"),
    }
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(after.is_ok(), "A's append after B refused: {after:?}");
    within(a.stop()).await.unwrap();
    let at_stop = listed(&shared).await;
    let moved = move_aside(&shared, k + 1).await;
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after A stopped and {} ({at:?}) was moved aside ({moved}): {e}; listed at \
             A's stop {at_stop:?}",
            k + 1
        ),
    };
    assert_eq!(replayed(&c, 1).await.unwrap(), ["after"]);
}

#[tokio::test(start_paused = true)]
async fn marks_rotted_after_recovery_listed_refuse_or_fence_and_repair_reopens() {
    rot_after_recovery_listed_then_repair(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_footer_rotted_after_recovery_listed_refuses_or_fences_and_repair_reopens() {
    rot_after_recovery_listed_then_repair(Rot::Footer).await;
}

/// The held-marker history; `B` refuses naming `k+1`; `A` crashes at once
/// (nothing more lands: `k+1` is its newest object). `k+1` is moved aside,
/// as the refusal says: the next open must succeed, empty ("a" and "r"
/// are obsolete) and writable.
async fn rot_after_recovery_listed_then_crash_and_repair(at: Rot) {
    let (a, opened, shared, k) = rot_after_recovery_listed(at).await;
    let first = match opened {
        Ok(_) => panic!("B opened over the rotted {} ({at:?})", k + 1),
        Err(e) => e.to_string(),
    };
    assert!(first.contains(&key(k + 1)), "{first}");
    drop(a);
    let at_crash = listed(&shared).await;
    let moved = move_aside(&shared, k + 1).await;
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after A crashed and {} ({at:?}) was moved aside ({moved}): {e}; listed at \
             the crash {at_crash:?}; B's refusal: {first}",
            k + 1
        ),
    };
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    assert_eq!(replayed(&c, 1).await.unwrap(), ["c"]);
}

#[tokio::test(start_paused = true)]
async fn marks_rotted_after_recovery_listed_moved_aside_after_a_crash_let_the_store_open() {
    rot_after_recovery_listed_then_crash_and_repair(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_footer_rotted_after_recovery_listed_moved_aside_after_a_crash_lets_the_store_open() {
    rot_after_recovery_listed_then_crash_and_repair(Rot::Footer).await;
}

// ---------------------------------------------------------------------------
// 5. Followers are not affected.
// ---------------------------------------------------------------------------

/// A follower (its reader under Quarantine) of region 1 from the start,
/// created before anything rots. Kept-void history; `X` rots at rest
/// (marks segment); `A` lands "after" above it (and may collect it). The
/// follower must show "after" within two idle checks.
#[tokio::test(start_paused = true)]
async fn a_quarantine_follower_reads_past_rotted_evidence_above_a_collected_key() {
    use futures::StreamExt;
    let shared = Storage::new(MemoryStorage::new());
    let eyes = FaultyStorage::new(shared.clone());
    let (a, _fa, _v, x) = kept_void_history(&shared).await;
    let reader = within(objwal::WalReader::open(eyes.storage(), P, quarantine()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    rot(&shared, x, Rot::FirstSegment).await;
    within(a.append(vec![(1, b("after"))])).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2 * 3600 + 60);
    let mut out = Vec::new();
    while !out.iter().any(|s: &String| s.contains("after")) {
        match tokio::time::timeout_at(deadline, follower.next()).await {
            Ok(Some(Ok(e))) => out.push(String::from_utf8_lossy(&e.data).into_owned()),
            Ok(Some(Err(e))) => out.push(format!("error {e:?}")),
            Ok(None) => {
                out.push("ended".into());
                break;
            }
            Err(_) => break,
        }
        if out.len() > 10 {
            break;
        }
    }
    assert!(
        out.iter().any(|s| s == "after"),
        "the follower showed {out:?}; X = {x}, listed {:?}",
        listed(&shared).await
    );
}

/// The same as `rotted_newest_evidence_then_stop_and_repair`, but the open
/// after the repair uses the default policy (`Fail`): with the damage
/// moved aside, it must open too.
#[tokio::test(start_paused = true)]
async fn rotted_newest_evidence_stopped_and_moved_aside_opens_under_the_default_policy() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, v, x) = kept_void_history(&shared).await;
    rot(&shared, x, Rot::Footer).await;
    within(a.stop()).await.unwrap();
    assert!(move_aside(&shared, x).await);
    let fc = FaultyStorage::new(shared.clone());
    match within(Wal::open(fc.storage(), P, config())).await {
        Ok(c) => {
            within(c.append(vec![(1, b("c"))])).await.unwrap();
            assert_eq!(replayed(&c, 1).await.unwrap(), ["c"]);
        }
        Err(e) => panic!(
            "the default-policy open after A stopped and {x} was moved aside: {e}; V = {v}, \
             listed {:?}",
            listed(&shared).await
        ),
    }
}

// ---------------------------------------------------------------------------
// 6. Damage in transit after recovery listed: a sweep over how many reads.
// ---------------------------------------------------------------------------

/// The held-marker history without damage at rest: instead, `B`'s next
/// `n` reads of `k+1` (A's evidence, landed after `B`'s first recovery
/// listed) are corrupted at its marks segment (header readable), for each
/// `n` in 0..=16: the check's look sees damage recovery did not judge,
/// and the second recovery sees what is left of the `n`. Whatever `n`:
/// `B`'s open ends (no hang); if it opened, `A` is fenced or its append is
/// in `B`'s replay; and a clean open `C` afterwards replays everything `A`
/// acknowledged and fences it.
#[tokio::test(start_paused = true)]
async fn evidence_read_damaged_n_times_in_transit_after_recovery_listed_never_loses_an_append() {
    use crate::attack32::release_until_held;
    for n in 0..=16usize {
        let shared = Storage::new(MemoryStorage::new());
        let fa = FaultyStorage::new(shared.clone());
        let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
        within(a.append(vec![(1, b("a"))])).await.unwrap();
        fa.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
        let x = within(a.append(vec![(1, b("x"))])).await;
        assert!(x.is_err(), "{x:?}");
        let v = *listed(&shared).await.last().unwrap();
        let k = v + 1;
        let fb = FaultyStorage::new(shared.clone());
        fb.hold_creates(true);
        let b_storage = fb.storage();
        let opening = tokio::spawn(async move { Wal::open(b_storage, P, quarantine()).await });
        release_until_held(&fb, &key(k)).await;
        let ids = within(a.append(vec![(1, b("r"))])).await.unwrap();
        within(a.obsolete(1, ids[0])).await.unwrap();
        within(a.flush()).await.unwrap();
        until("A collects k", || async {
            let now = listed(&shared).await;
            !now.contains(&k) && now.contains(&(k + 1))
        })
        .await;
        if n > 0 {
            fb.corrupt_next_reads_at(&key(k + 1), n, 64);
        }
        fb.hold_creates(false);
        fb.release_all();
        let opened = within(opening).await.unwrap();
        let outcome = format!("{:?}", opened.as_ref().map(|_| "opened"));
        let after = within(a.append(vec![(1, b("after"))])).await;
        if let Ok(bw) = &opened {
            let seen = replayed(bw, 1).await;
            let in_b = seen.as_ref().is_ok_and(|s| s.contains(&"after".to_owned()));
            assert!(
                matches!(after, Err(Error::Fenced { .. })) || in_b,
                "n = {n}: B opened; A's append after it answered {after:?}, B replays {seen:?}; \
                 k = {k}, listed {:?}",
                listed(&shared).await
            );
            within(bw.stop()).await.ok();
        }
        fb.clear_faults();
        let fc = FaultyStorage::new(shared.clone());
        let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
            Ok(c) => c,
            Err(e) => panic!(
                "n = {n}: the clean open after B ({outcome}) failed: {e}; listed {:?}",
                listed(&shared).await
            ),
        };
        let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
        if after.is_ok() {
            assert!(
                seen.as_ref().is_ok_and(|s| s.contains(&"after".to_owned())),
                "n = {n}: A acknowledged \"after\" ({after:?}), B {outcome}, and C replays \
                 {seen:?}; listed {:?}",
                listed(&shared).await
            );
        }
        let late = within(a.append(vec![(1, b("late"))])).await;
        assert!(
            matches!(late, Err(Error::Fenced { .. })),
            "n = {n}: A's append after C opened answered {late:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// 7. A damaged older-epoch object off the chain, header readable.
// ---------------------------------------------------------------------------

/// Kept-void history under a first process (epoch 1) that stopped, and an
/// older-epoch object planted far above the run at `q = X+40` (no link,
/// one mark record; boundary `q` when `past`, else 1), its marks segment
/// rotted at rest (its header still reads). Returns `A`, the shared store,
/// `q` and `B`'s fault wrapper.
async fn a_rotted_older_object_above_the_run(past: bool) -> (Wal, Storage, u64, FaultyStorage) {
    use objwal::format::{self, Header, MarkRecord, Object};
    let shared = Storage::new(MemoryStorage::new());
    // A first process (epoch 1) stops: A gets epoch 2, the planted object 1.
    let w0 = within(Wal::open(shared.clone(), P, config()))
        .await
        .unwrap();
    within(w0.stop()).await.unwrap();
    let (a, _fa, _v, x) = kept_void_history(&shared).await;
    let q = x + 40;
    let planted = Object {
        header: Header {
            sequence: q,
            epoch: 1,
            link: None,
            reclaim_boundary: if past { q } else { 1 },
        },
        segments: Vec::new(),
        marks: vec![MarkRecord {
            region: 1,
            watermark: 0,
        }],
        releases: Vec::new(),
    };
    shared
        .create(&key(q), format::encode(&planted).unwrap())
        .await
        .unwrap();
    rot(&shared, q, Rot::FirstSegment).await;
    let fb = FaultyStorage::new(shared.clone());
    (a, shared, q, fb)
}

/// Kept-void history (A's run went past `V+1` and collected it; `X` is
/// intact). An older-epoch object stands far above the run at `q = X+40`
/// (synthetic: an epoch older than A's, no link, boundary `q`, one mark
/// record: the kind of late object an older writer's window leaves), and its marks segment
/// rotted at rest: its header still reads, and says it carries a boundary
/// past any block below `q`. `B` (Quarantine) must refuse naming `q` (the
/// rule of the change: judged damage above the block whose header does
/// not show "does not pass"); moved aside, the next open must fence `A`
/// and replay "after".
#[tokio::test(start_paused = true)]
async fn a_rotted_older_epoch_object_off_the_chain_with_a_passing_header_refuses_until_moved_aside()
{
    let (a, shared, q, fb) = a_rotted_older_object_above_the_run(true).await;
    let first = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!(
            "B opened over the rotted {q} above its block; listed {:?}",
            listed(&shared).await
        ),
    };
    assert!(
        first.contains(&key(q)) && first.contains("lies above key"),
        "B's refusal: {first}"
    );
    // B's settle markers stay: A may already be fenced (then it
    // acknowledged nothing more).
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(
        after.is_ok() || matches!(after, Err(Error::Fenced { .. })),
        "{after:?}"
    );
    assert!(move_aside(&shared, q).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after {q} was moved aside: {e}; listed {:?}",
            listed(&shared).await
        ),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    let want: &[&str] = if after.is_ok() { &["after"] } else { &[] };
    assert_eq!(
        replayed(&c, 1).await.unwrap(),
        want,
        "A's \"after\": {after:?}"
    );
}

/// The same planted, rotted older-epoch object off the chain, but its
/// readable header carries boundary 1 (below any block): the exemption of
/// the change applies, so `B` (Quarantine) must open, fence `A` and hold
/// everything `A` acknowledged.
#[tokio::test(start_paused = true)]
async fn a_rotted_older_epoch_object_off_the_chain_whose_header_does_not_pass_lets_the_open_fence()
{
    let (a, shared, q, fb) = a_rotted_older_object_above_the_run(false).await;
    let bw = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(w) => w,
        Err(e) => panic!(
            "B refused over {q}, whose header shows no boundary past its block: {e}; listed {:?}",
            listed(&shared).await
        ),
    };
    let after = within(a.append(vec![(1, b("after"))])).await;
    let seen = replayed(&bw, 1).await;
    assert!(
        matches!(after, Err(Error::Fenced { .. }))
            || seen.as_ref().is_ok_and(|s| s.contains(&"after".to_owned())),
        "A's append after B opened answered {after:?}; B replays {seen:?}"
    );
}
