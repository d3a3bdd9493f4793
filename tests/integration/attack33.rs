//! Attacks on three recent changes: the fencing went-past check over
//! damaged evidence (rfcs/0006, Lemma 2, "A key the older writer
//! collected"; `recovery::run_went_past`), the import floor in enqueued
//! mode (rfcs/0009) and a follower whose place is a kept void (rfcs/0010,
//! decision 3).
//!
//! Deterministic: paused time on the memory backend; each process gets its
//! own fault wrapper over one shared store, so that its creates can be
//! held and its reads gated alone.

use std::time::Duration;

use objwal::config::DamagePolicy;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::keys::Prefix;
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::wal::damage::quarantine_key;
use objwal::{Config, Error, Storage, Wal};

use crate::attack32::{config, key, listed, release_until_held, replayed, until, P};
use crate::common::*;

// ---------------------------------------------------------------------------
// 1. The went-past check over damaged evidence.
// ---------------------------------------------------------------------------

/// `B` (config `b_config`) opens over `A`; its settle marker at `k` is
/// held while `A` lands `k` (an entry, then obsoleted) and a marks-only
/// `k+1` (boundary past `k`), and collects `k`. `arm` is called on `B`'s
/// wrapper once `B`'s first recovery listed. Returns `A`, `B`'s open, the
/// shared store and `k`.
async fn b_opens_while_a_collects(
    b_config: Config,
    arm: impl FnOnce(&FaultyStorage, u64),
) -> (Wal, Result<Wal, Error>, Storage, u64, FaultyStorage) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("e1"))])).await.unwrap();
    let k = *listed(&shared).await.last().unwrap() + 1;
    let fb = FaultyStorage::new(shared.clone());
    fb.hold_creates(true);
    let b_storage = fb.storage();
    let opening = tokio::spawn(async move { Wal::open(b_storage, P, b_config).await });
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
    (a, opened, shared, k, fb)
}

/// The history of attack32's damaged-evidence test, but `B` opens under
/// `on_damaged_object = Quarantine` and every read `B` makes of `A`'s
/// marks-only `k+1` (the only evidence that `A` went past `k`) is damaged
/// (the object rotted after `A` wrote it; `A` never reads it). The first
/// check counts the damage as passing (recovery had not listed `k+1`); the
/// second recovery lists and quarantines `k+1`, its walk stops at `B`'s old
/// marker at `k` again, and its check no longer counts `k+1` (listed). `A`
/// is still free at `k+2`: its next append must be `Fenced`, or be in
/// `B`'s replay.
#[tokio::test(start_paused = true)]
async fn quarantined_evidence_above_the_block_still_fences_the_older_writer() {
    let b_config = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..config()
    };
    let (a, opened, shared, k, _fb) = b_opens_while_a_collects(b_config.clone(), |fb, k| {
        fb.corrupt_next_reads(&key(k + 1), usize::MAX);
    })
    .await;
    // Observed: refused, "no complete chain among 1 objects" (every
    // intact object of A's was collected, the evidence is quarantined).
    let Ok(b_wal) = opened else {
        return; // refused: nothing opened past A
    };
    let after = within(a.append(vec![(1, b("after"))])).await;
    let seen = replayed(&b_wal, 1).await;
    let in_b = seen.as_ref().is_ok_and(|s| s.contains(&"after".to_owned()));
    assert!(
        matches!(after, Err(Error::Fenced { .. })) || in_b,
        "A's append after B opened (under Quarantine) answered {after:?}, and B replays {seen:?}; \
         k = {k}, listed {:?}",
        listed(&shared).await
    );
}

// ---------------------------------------------------------------------------
// 3. A follower whose place is a void the writer keeps.
// ---------------------------------------------------------------------------

/// The longest gap between a follower's idle checks (an hour), twice, and
/// a minute: a follower that shows nothing by then never will.
const TWO_IDLE_CHECKS: Duration = Duration::from_secs(2 * 3600 + 60);

/// What a follower shows, as text: `"<region> <payload>"`, `"released
/// <region>"`, or the error.
fn shown(item: Result<objwal::Entry, Error>) -> String {
    match item {
        Ok(e) => format!("{} {}", e.region, String::from_utf8_lossy(&e.data)),
        Err(Error::RegionReleased { region }) => format!("released {region}"),
        Err(e) => format!("error {e:?}"),
    }
}

/// A writer `W` (durable mode) on its own wrapper, and a follower of
/// regions 1 and 2 from the start on its own "eyes". The follower yields
/// "a" (region 1), then `W`'s next create fails, so that batch ("x") is
/// settled by its void at `s`; the follower takes the void in (its place).
/// Its eyes then fail every read while `W` runs `then` (which lands and
/// collects objects above `s`; `W` keeps the void). Returns the follower
/// (eyes cleared), `W`, `s` and the shared store.
async fn a_follower_at_a_kept_void<F, Fut>(then: F) -> (objwal::Follower, Wal, u64, Storage)
where
    F: FnOnce(Wal, u64, u64, Storage) -> Fut,
    Fut: std::future::Future<Output = Wal>,
{
    use futures::StreamExt;
    let shared = Storage::new(MemoryStorage::new());
    let fw = FaultyStorage::new(shared.clone());
    let w = within(Wal::open(fw.storage(), P, config())).await.unwrap();
    let a = within(w.append(vec![(1, b("a"))])).await.unwrap()[0];
    let eyes = FaultyStorage::new(shared.clone());
    let reader = within(objwal::WalReader::open(eyes.storage(), P, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0), (2, 0)]);
    let first = within(follower.next()).await.unwrap();
    assert_eq!(shown(first), "1 a");
    let before = listed(&shared).await;
    fw.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    let x = within(w.append(vec![(1, b("x"))])).await;
    assert!(x.is_err(), "the failed batch's append answered {x:?}");
    let now = listed(&shared).await;
    let s = *now.last().unwrap();
    assert!(
        !before.contains(&s),
        "the void's key {s}: {before:?} -> {now:?}"
    );
    // The follower takes the void in: nothing to yield.
    let idle = tokio::time::timeout(Duration::from_millis(500), follower.next()).await;
    assert!(
        idle.is_err(),
        "the follower showed {:?}",
        idle.map(|i| i.map(shown))
    );
    eyes.fail_next(Op::Read, "", usize::MAX, StorageErrorKind::Transient);
    eyes.fail_next(Op::List, "", usize::MAX, StorageErrorKind::Transient);
    let w = then(w, s, a, shared.clone()).await;
    eyes.clear_faults();
    (follower, w, s, shared)
}

/// Everything the follower shows within two idle checks (or until `stop`
/// items were shown).
async fn shown_within_two_checks(follower: &mut objwal::Follower, stop: usize) -> Vec<String> {
    use futures::StreamExt;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + TWO_IDLE_CHECKS;
    while out.len() < stop {
        match tokio::time::timeout_at(deadline, follower.next()).await {
            Ok(Some(item)) => out.push(shown(item)),
            Ok(None) => {
                out.push("ended".to_owned());
                break;
            }
            Err(_) => break,
        }
    }
    out
}

/// From the kept void at `s`: `W` lands "b" (region 2) at `s+1`,
/// obsoletes region 1 through "a" and region 2 through "b", and lands "c"
/// (region 2): its collection deletes `s+1` (and "a"'s object) and keeps
/// the void, so "c" stands above a gap. Within an idle check the follower
/// must show "2 c" (and neither "b" nor "x").
#[tokio::test(start_paused = true)]
async fn a_follower_at_a_kept_void_shows_what_lands_above_a_collected_key() {
    let (mut follower, w, s, shared) = a_follower_at_a_kept_void(|w, s, a, shared| async move {
        let bid = within(w.append(vec![(2, b("b"))])).await.unwrap()[0];
        within(w.obsolete(1, a)).await.unwrap();
        within(w.obsolete(2, bid)).await.unwrap();
        within(w.append(vec![(2, b("c"))])).await.unwrap();
        until("W collects s+1", || async {
            !listed(&shared).await.contains(&(s + 1))
        })
        .await;
        let now = listed(&shared).await;
        assert!(now.contains(&s), "the void at {s} was collected: {now:?}");
        w
    })
    .await;
    let got = shown_within_two_checks(&mut follower, 1).await;
    assert_eq!(
        got,
        vec!["2 c"],
        "s = {s}, listed {:?}",
        listed(&shared).await
    );
    drop(w);
}

/// `W`'s history of the kept void, then above it: "b" (region 2) at
/// `s+1`, region 1 obsoleted through "a" and region 2 through "b", "c"
/// (region 2) landed and `s+1` collected.
async fn above_a_kept_void(w: Wal, s: u64, a: u64, shared: Storage) -> Wal {
    let bid = within(w.append(vec![(2, b("b"))])).await.unwrap()[0];
    within(w.obsolete(1, a)).await.unwrap();
    within(w.obsolete(2, bid)).await.unwrap();
    within(w.append(vec![(2, b("c"))])).await.unwrap();
    until("W collects s+1", || async {
        !listed(&shared).await.contains(&(s + 1))
    })
    .await;
    assert!(
        listed(&shared).await.contains(&s),
        "the void at {s} was collected"
    );
    w
}

/// The kept-void history, then `catch_up()`: "Everything that landed
/// before catch_up() was called is applied" (`Follower::catch_up`). "c"
/// landed before the call: the catch-up must show it before it ends.
#[tokio::test(start_paused = true)]
async fn a_catch_up_at_a_kept_void_shows_what_landed_above_a_collected_key() {
    use futures::StreamExt;
    let (mut follower, w, s, shared) = a_follower_at_a_kept_void(above_a_kept_void).await;
    let mut got = Vec::new();
    {
        let mut caught_up = follower.catch_up();
        let deadline = tokio::time::Instant::now() + TWO_IDLE_CHECKS;
        loop {
            match tokio::time::timeout_at(deadline, caught_up.next()).await {
                Ok(Some(item)) => got.push(shown(item)),
                Ok(None) => break,
                Err(_) => {
                    got.push("no end within two idle checks".to_owned());
                    break;
                }
            }
        }
    }
    assert_eq!(
        got,
        vec!["2 c"],
        "catch-up at the void {s}; listed {:?}",
        listed(&shared).await
    );
    drop(w);
}

/// Above the kept void `s`: "b" (region 1) at `s+1`, region 1 released,
/// "c" (region 2), a flush, and `s+1` collected while the void stays.
async fn released_above_the_void(w: Wal, s: u64, shared: Storage) -> Wal {
    within(w.append(vec![(1, b("b"))])).await.unwrap();
    within(w.release_region(1)).await.unwrap();
    within(w.append(vec![(2, b("c"))])).await.unwrap();
    within(w.flush()).await.unwrap();
    until("W collects s+1", || async {
        !listed(&shared).await.contains(&(s + 1))
    })
    .await;
    assert!(
        listed(&shared).await.contains(&s),
        "the void at {s} was collected"
    );
    w
}

/// The kept void, then above it: "b" (region 1) at `s+1`, region 1
/// released, "c" (region 2), and region 2 obsoleted through nothing: the
/// release lets collection delete "a", "b" and the release's own object
/// (once its marker is permanent); the void stays. The follower must end
/// region 1 (`RegionReleased`) and show "2 c", never "1 b".
#[tokio::test(start_paused = true)]
async fn a_follower_at_a_kept_void_ends_a_region_released_above_a_collected_key() {
    let (mut follower, w, s, shared) =
        a_follower_at_a_kept_void(|w, s, _a, shared| released_above_the_void(w, s, shared)).await;
    let mut got = shown_within_two_checks(&mut follower, 2).await;
    got.sort();
    assert_eq!(
        got,
        vec!["2 c", "released 1"],
        "s = {s}, listed {:?}",
        listed(&shared).await
    );
    drop(w);
}

/// The same, asked by a catch-up.
#[tokio::test(start_paused = true)]
async fn a_catch_up_at_a_kept_void_ends_a_region_released_above_a_collected_key() {
    use futures::StreamExt;
    let (mut follower, w, s, shared) =
        a_follower_at_a_kept_void(|w, s, _a, shared| released_above_the_void(w, s, shared)).await;
    let mut got = Vec::new();
    {
        let mut caught_up = follower.catch_up();
        let deadline = tokio::time::Instant::now() + TWO_IDLE_CHECKS;
        loop {
            match tokio::time::timeout_at(deadline, caught_up.next()).await {
                Ok(Some(item)) => got.push(shown(item)),
                Ok(None) => break,
                Err(_) => {
                    got.push("no end within two idle checks".to_owned());
                    break;
                }
            }
        }
    }
    got.sort();
    assert_eq!(
        got,
        vec!["2 c", "released 1"],
        "catch-up at the void {s}; listed {:?}",
        listed(&shared).await
    );
    drop(w);
}

// ---------------------------------------------------------------------------
// 2. The import floor in enqueued mode.
// ---------------------------------------------------------------------------

fn enqueued() -> Config {
    Config {
        ack_mode: objwal::AckMode::Enqueued,
        max_unpersisted_age: Duration::from_millis(200),
        ..config()
    }
}

/// A source log "src" with `payloads` in region 5, one append each, and a
/// reader of it.
async fn source(shared: &Storage, payloads: &[&str]) -> (Wal, objwal::WalReader) {
    let source = within(Wal::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    for p in payloads {
        within(source.append(vec![(5, b(p))])).await.unwrap();
    }
    let reader = within(objwal::WalReader::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    (source, reader)
}

/// Region 5 of `dest` reads `want` (ids strictly above `floor`, each once),
/// and so it does after `dest` stops and its prefix is opened again, and
/// in a reader.
async fn region_5_reads(
    dest: Wal,
    shared: &Storage,
    config: Config,
    floor: u64,
    want: &[&str],
    what: &str,
) {
    let seen = read_all(&dest, 5, 0).await;
    assert!(
        seen.iter().all(|e| e.id > floor),
        "{what}: ids {:?} floor {floor}",
        seen.iter().map(|e| e.id).collect::<Vec<_>>()
    );
    assert_eq!(payloads(&seen), want, "{what}");
    let ids: Vec<u64> = seen.iter().map(|e| e.id).collect();
    let stopped = within(dest.stop()).await;
    let reopened = within(Wal::open(shared.clone(), P, config.clone()))
        .await
        .unwrap();
    within(reopened.obsolete(5, floor)).await.unwrap();
    let again = read_all(&reopened, 5, 0).await;
    assert_eq!(
        (
            payloads(&again),
            again.iter().map(|e| e.id).collect::<Vec<_>>()
        ),
        (
            want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            ids.clone()
        ),
        "after a reopen (stop answered {stopped:?}); {what}"
    );
    within(reopened.stop()).await.unwrap();
    let reader = within(objwal::WalReader::open(shared.clone(), P, config))
        .await
        .unwrap();
    let read: Vec<_> = collect_entries(reader.read(5, floor + 1)).await.unwrap();
    assert_eq!(
        (
            payloads(&read),
            read.iter().map(|e| e.id).collect::<Vec<_>>()
        ),
        (want.iter().map(|s| s.to_string()).collect::<Vec<_>>(), ids),
        "a reader from above the floor; {what}"
    );
}

/// Enqueued mode: the engine appends "mine" to region 5 here (answered at
/// once); its create is held when the import starts. The import's floor
/// covers "mine" (an earlier stay of the region), its own entries lie
/// above it, and "mine" lands only after the import's entries were
/// admitted. Region 5 then reads x1, x2 once, here and after a reopen.
#[tokio::test(start_paused = true)]
async fn an_enqueued_import_over_a_held_local_append_hides_it_and_reads_each_import_once() {
    let shared = Storage::new(MemoryStorage::new());
    let (_source, from_log) = source(&shared, &["x1", "x2"]).await;
    let fd = FaultyStorage::new(shared.clone());
    let dest = within(Wal::open(fd.storage(), P, enqueued()))
        .await
        .unwrap();
    fd.hold_creates(true);
    let mine = within(dest.append(vec![(5, b("mine"))])).await.unwrap()[0];
    within(fd.wait_held(1)).await;
    let d2 = dest.clone();
    let importing = tokio::spawn(async move { d2.import_region(&from_log, 5, 0).await });
    // Let the import admit its entries while "mine" is held.
    tokio::time::sleep(Duration::from_millis(50)).await;
    fd.hold_creates(false);
    fd.release_all();
    let imported = within(importing).await.unwrap().expect("the import");
    assert!(
        imported.floor >= mine,
        "floor {} below mine {mine}",
        imported.floor
    );
    region_5_reads(
        dest,
        &shared,
        enqueued(),
        imported.floor,
        &["x1", "x2"],
        &format!("{imported:?}"),
    )
    .await;
}

/// Enqueued mode: the first import's creates fail until it answers an
/// error, the store stops (its failed batches on their way), the prefix is
/// opened again, and the import is repeated in the new life: the copies
/// the first left (landed, or replayed by the new life's recovery) lie at
/// or below the new floor. Region 5 reads x1, x2 once.
#[tokio::test(start_paused = true)]
async fn an_enqueued_import_repeated_after_a_reopen_shows_each_entry_once() {
    let shared = Storage::new(MemoryStorage::new());
    let (_source, from_log) = source(&shared, &["x1", "x2"]).await;
    let fd = FaultyStorage::new(shared.clone());
    let dest = within(Wal::open(fd.storage(), P, enqueued()))
        .await
        .unwrap();
    // The first create fails, its answer lost after it landed: a copy lands.
    fd.hold_creates_at(Some(objwal::storage::fault::HoldPoint::AfterLanded));
    let d2 = dest.clone();
    let fl = from_log.clone();
    let first = tokio::spawn(async move { d2.import_region(&fl, 5, 0).await });
    within(fd.wait_held(1)).await;
    let held = fd.held();
    fd.fail_next(Op::Create, "/objects/", 40, StorageErrorKind::Transient);
    fd.hold_creates_at(None);
    for k in &held {
        fd.release_with_error(k, StorageErrorKind::Transient);
    }
    let first = within(first).await.unwrap();
    let stopped = within(dest.stop()).await;
    fd.clear_faults();
    fd.release_all();
    let dest = within(Wal::open(fd.storage(), P, enqueued()))
        .await
        .unwrap();
    let before = payloads(&read_all(&dest, 5, 0).await);
    let mut second = within(dest.import_region(&from_log, 5, 0)).await;
    for _ in 0..50 {
        if !matches!(second, Err(Error::Failing { .. })) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        second = within(dest.import_region(&from_log, 5, 0)).await;
    }
    let imported = second.expect("the repeated import");
    let what =
        format!("first {first:?}, stop {stopped:?}, replay before {before:?}, second {imported:?}");
    region_5_reads(
        dest,
        &shared,
        enqueued(),
        imported.floor,
        &["x1", "x2"],
        &what,
    )
    .await;
}

/// The kept-void history with "c" above the gap, then `W` stops and a new
/// process `W2` opens the prefix (its walk, its start object) and appends
/// "d" (region 2). The follower shows "2 c" and "2 d", once each, within
/// two idle checks.
#[tokio::test(start_paused = true)]
async fn a_follower_at_a_kept_void_follows_the_writer_s_restart_once() {
    let (mut follower, w, s, shared) = a_follower_at_a_kept_void(above_a_kept_void).await;
    within(w.stop()).await.unwrap();
    let w2 = within(Wal::open(shared.clone(), P, config()))
        .await
        .unwrap();
    within(w2.append(vec![(2, b("d"))])).await.unwrap();
    let mut got = shown_within_two_checks(&mut follower, 3).await;
    // No third item may come.
    assert_eq!(
        got.len(),
        2,
        "{got:?}; s = {s}, listed {:?}",
        listed(&shared).await
    );
    got.sort();
    assert_eq!(
        got,
        vec!["2 c", "2 d"],
        "s = {s}, listed {:?}",
        listed(&shared).await
    );
}

/// `W`'s release of region 1 rides in a batch whose create fails: its void
/// carries the release record. A follower of regions 1 and 2 (which
/// yielded "a") must end region 1, and show "2 c" appended after.
#[tokio::test(start_paused = true)]
async fn a_follower_ends_a_region_whose_release_rides_in_a_void() {
    use futures::StreamExt;
    let shared = Storage::new(MemoryStorage::new());
    let fw = FaultyStorage::new(shared.clone());
    let w = within(Wal::open(fw.storage(), P, config())).await.unwrap();
    within(w.append(vec![(1, b("a"))])).await.unwrap();
    let reader = within(objwal::WalReader::open(shared.clone(), P, config()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0), (2, 0)]);
    assert_eq!(shown(within(follower.next()).await.unwrap()), "1 a");
    fw.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    let released = within(w.release_region(1)).await;
    let x = within(w.append(vec![(1, b("x"))])).await;
    within(w.append(vec![(2, b("c"))])).await.unwrap();
    let mut got = shown_within_two_checks(&mut follower, 3).await;
    assert_eq!(
        got.len(),
        2,
        "{got:?}; release answered {released:?}, x {x:?}"
    );
    got.sort();
    assert_eq!(
        got,
        vec!["2 c", "released 1"],
        "release answered {released:?}; x {x:?}; listed {:?}",
        listed(&shared).await
    );
}

// ---------------------------------------------------------------------------
// 1, continued.
// ---------------------------------------------------------------------------

/// The RFC's history once, and only `B`'s first read of `A`'s evidence
/// (`k+1`, the went-past look) comes back damaged (in transit). The check
/// counts it as passing, `B` walks again, its recovery reads `k+1` intact,
/// and `B` opens past `A`'s run: `A` is fenced at its next append.
#[tokio::test(start_paused = true)]
async fn a_went_past_look_damaged_once_in_transit_walks_again_and_fences_the_older_writer() {
    let (a, opened, shared, k, _fb) = b_opens_while_a_collects(config(), |fb, k| {
        fb.corrupt_next_reads(&key(k + 1), 1);
    })
    .await;
    let b_wal = opened.expect("B opens after one more walk");
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(
        matches!(after, Err(Error::Fenced { .. })),
        "A's append after B opened answered {after:?}; k = {k}, listed {:?}",
        listed(&shared).await
    );
    let seen = replayed(&b_wal, 1).await;
    assert!(seen.is_ok(), "{seen:?}");
}

/// Under `Quarantine`, an undecodable junk object lies far above the run,
/// listed by `B`'s first recovery, while the RFC's history runs (`A`
/// collects the key `B`'s marker then lands on). The first check sees
/// `A`'s intact evidence and walks again; the second recovery judges the
/// junk damaged, and it lies above the block: nothing tells whether `A`'s
/// run went on through it, so `B` refuses, naming it (it opened before
/// the fix, which left `A` free when the damage was `A`'s own evidence).
/// Moved aside, as `objwal repair --yes` does, the next open fences `A`.
#[tokio::test(start_paused = true)]
async fn junk_listed_above_the_block_under_quarantine_fails_the_open_until_moved_aside() {
    use objwal::ObjectStorage;
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("e1"))])).await.unwrap();
    let k = *listed(&shared).await.last().unwrap() + 1;
    let junk = bytes::Bytes::from_static(b"not an object at all, junk");
    shared.create(&key(k + 40), junk.clone()).await.unwrap();
    let fb = FaultyStorage::new(shared.clone());
    fb.hold_creates(true);
    let b_storage = fb.storage();
    let b_config = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..config()
    };
    let b_config2 = b_config.clone();
    let opening = tokio::spawn(async move { Wal::open(b_storage, P, b_config2).await });
    release_until_held(&fb, &key(k)).await;
    let ids = within(a.append(vec![(1, b("r0"))])).await.unwrap();
    within(a.obsolete(1, ids[0])).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects k", || async {
        !listed(&shared).await.contains(&k)
    })
    .await;
    fb.hold_creates(false);
    fb.release_all();
    match within(opening).await.unwrap() {
        Err(e) => assert!(e.to_string().contains(&key(k + 40)), "{e}"),
        Ok(_) => panic!("B opened over the junk above its walk's block"),
    }
    // Nothing opened past A: it goes on.
    within(a.append(vec![(1, b("mid"))])).await.unwrap();
    let prefix = Prefix::new(P).unwrap();
    shared
        .create(&quarantine_key(&prefix, k + 40), junk)
        .await
        .unwrap();
    shared.delete(&key(k + 40)).await.unwrap();
    let c = match within(Wal::open(fb.storage(), P, b_config)).await {
        Ok(c) => c,
        Err(e) => panic!("the open after the junk was moved aside: {e}"),
    };
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(
        matches!(after, Err(Error::Fenced { .. })),
        "A's append after C opened answered {after:?}; k = {k}, listed {:?}",
        listed(&shared).await
    );
    // "e1" and "r0" are obsolete (A's mark through "r0").
    assert_eq!(replayed(&c, 1).await.unwrap(), ["mid"]);
}

/// No held marker needed: the older writer `A` (durable mode) keeps the
/// void `V` of a failed batch while it runs; it goes on past it ("b" at
/// `V+1`, obsoleted), lands a marks-only `X = V+2` and collects `V+1`:
/// the listing holds `V` and `X` with a gap between. `B` opens under
/// `Quarantine`, and every read it makes of `X` (the only object that
/// says `A` went past `V+1`) is damaged. `B`'s walk from `V` settles
/// `V+1` (empty again) and stops there. The went-past check skipped `X`
/// (damaged, and recovery listed it) and `B` opened, leaving `A`'s next key
/// `X+1` free: `A` acknowledged "after" on no chain of `B`'s. `B` must
/// refuse, naming `X`; with `clear_after_open` the damage was in transit,
/// and the next open must fence `A` and replay "after".
async fn damaged_evidence_above_a_kept_void(clear_after_open: bool) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    let before = listed(&shared).await;
    fa.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    let x = within(a.append(vec![(1, b("x"))])).await;
    assert!(x.is_err(), "{x:?}");
    let v = *listed(&shared).await.last().unwrap();
    assert!(!before.contains(&v));
    let bid = within(a.append(vec![(1, b("b"))])).await.unwrap()[0];
    within(a.obsolete(1, bid)).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects V+1", || async {
        let now = listed(&shared).await;
        !now.contains(&(v + 1)) && now.contains(&v)
    })
    .await;
    let at_open = listed(&shared).await;
    let x_key = *at_open.last().unwrap();
    assert!(x_key > v + 1, "{at_open:?} (V = {v})");
    let fb = FaultyStorage::new(shared.clone());
    fb.corrupt_next_reads(&key(x_key), usize::MAX);
    let b_config = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..config()
    };
    let opened = within(Wal::open(fb.storage(), P, b_config.clone())).await;
    // X may be on A's run past V+1, to keys nothing tells: B refuses,
    // naming it (it opened and left A free at X+1 before the fix).
    match &opened {
        Err(e) => assert!(e.to_string().contains(&key(x_key)), "{e}"),
        Ok(_) => panic!(
            "B opened over the damaged {x_key} above its walk's block; V = {v}, listed at B's \
             open {at_open:?}, now {:?}",
            listed(&shared).await
        ),
    }
    // Nothing opened past A: it goes on.
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(after.is_ok(), "{after:?}");
    if clear_after_open {
        // The damage was in transit: the next open reads X intact, walks
        // past A's run and fences it, and holds what A acknowledged.
        fb.clear_faults();
        let c = match within(Wal::open(fb.storage(), P, b_config)).await {
            Ok(c) => c,
            Err(e) => panic!("the open after the damage cleared: {e}"),
        };
        let late = within(a.append(vec![(1, b("late"))])).await;
        assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
        // "a" and "b" are obsolete (A's mark through "b"); "x" failed.
        assert_eq!(replayed(&c, 1).await.unwrap(), ["after"]);
    }
}

/// No held marker needed: the older writer `A` (durable mode) keeps the
/// void `V` of a failed batch while it runs; it goes on past it ("b" at
/// `V+1`, obsoleted), lands a marks-only `X = V+2` and collects `V+1`:
/// the listing holds `V` and `X` with a gap between. `B` opens under
/// `Quarantine`, and every read it makes of `X` (the only object that
/// says `A` went past `V+1`) is damaged (X rotted; `A` never reads it).
/// `B` must refuse, naming `X` (see `damaged_evidence_above_a_kept_void`).
#[tokio::test(start_paused = true)]
async fn damaged_evidence_above_a_kept_void_lets_no_older_writer_acknowledge_off_the_chain() {
    damaged_evidence_above_a_kept_void(false).await;
}

/// The same, the damage in transit during `B`'s open only.
#[tokio::test(start_paused = true)]
async fn evidence_damaged_in_transit_during_an_open_above_a_kept_void_still_fences_the_older_writer(
) {
    damaged_evidence_above_a_kept_void(true).await;
}

/// Enqueued mode: while an import of three entries (one append each) is
/// between its appends (the source's reads are slow), the engine appends
/// "late" to the same region here. Every entry acknowledged (the import's
/// and "late") reads once, with the id it was given, here, after a
/// reopen, and in a reader; none at or below the floor.
#[tokio::test(start_paused = true)]
async fn an_append_between_an_enqueued_import_s_appends_reads_once_with_its_id() {
    let shared = Storage::new(MemoryStorage::new());
    let big = |c: char| c.to_string().repeat(700);
    let (x1, x2, x3) = (big('1'), big('2'), big('3'));
    let source = within(Wal::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    for p in [&x1, &x2, &x3] {
        within(source.append(vec![(5, b(p))])).await.unwrap();
    }
    let eyes = FaultyStorage::new(shared.clone());
    let from_log = within(objwal::WalReader::open(eyes.storage(), "src", config()))
        .await
        .unwrap();
    eyes.set_latency(Op::Read, Duration::from_secs(10));
    let dest_config = Config {
        max_batch_bytes: 1024,
        ..enqueued()
    };
    let dest = within(Wal::open(shared.clone(), P, dest_config.clone()))
        .await
        .unwrap();
    let d2 = dest.clone();
    let importing = tokio::spawn(async move { d2.import_region(&from_log, 5, 0).await });
    tokio::time::sleep(Duration::from_secs(25)).await;
    let late = within(dest.append(vec![(5, b("late"))])).await.unwrap()[0];
    let imported = tokio::time::timeout(Duration::from_secs(600), importing)
        .await
        .expect("the import finishes")
        .unwrap()
        .expect("the import");
    within(dest.flush()).await.unwrap();
    let seen = read_all(&dest, 5, 0).await;
    let got: Vec<(u64, String)> = seen
        .iter()
        .map(|e| (e.id, String::from_utf8_lossy(&e.data)[..1].to_owned()))
        .collect();
    let what = format!("{imported:?}, late {late}; read {got:?}");
    assert!(late > imported.floor, "{what}");
    assert_eq!(got.len(), 4, "{what}");
    assert!(got.iter().any(|(id, p)| *id == late && p == "l"), "{what}");
    let mut names: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["1", "2", "3", "l"], "{what}");
    assert!(got.iter().all(|(id, _)| *id > imported.floor), "{what}");
    within(dest.stop()).await.unwrap();
    let reopened = within(Wal::open(shared.clone(), P, dest_config))
        .await
        .unwrap();
    within(reopened.obsolete(5, imported.floor)).await.unwrap();
    let again: Vec<(u64, String)> = read_all(&reopened, 5, 0)
        .await
        .iter()
        .map(|e| (e.id, String::from_utf8_lossy(&e.data)[..1].to_owned()))
        .collect();
    assert_eq!(again, got, "after a reopen; {what}");
}

/// The kept-void history under the default policy (`Fail`): `B`'s open
/// refuses (naming the damaged object) rather than opening past `A`.
#[tokio::test(start_paused = true)]
async fn damaged_evidence_above_a_kept_void_fails_the_open_under_the_default_policy() {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    fa.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    assert!(within(a.append(vec![(1, b("x"))])).await.is_err());
    let v = *listed(&shared).await.last().unwrap();
    let bid = within(a.append(vec![(1, b("b"))])).await.unwrap()[0];
    within(a.obsolete(1, bid)).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects V+1", || async {
        let now = listed(&shared).await;
        !now.contains(&(v + 1)) && now.contains(&v)
    })
    .await;
    let x_key = *listed(&shared).await.last().unwrap();
    let fb = FaultyStorage::new(shared.clone());
    fb.corrupt_next_reads(&key(x_key), usize::MAX);
    let opened = within(Wal::open(fb.storage(), P, config())).await;
    assert!(
        opened.is_err(),
        "B opened under Fail over a damaged {x_key}"
    );
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(after.is_ok(), "{after:?}");
}

/// The destination released region 5 earlier (a release is forever):
/// an import of region 5 into it must not answer `Ok` with entries that
/// no read shows.
#[tokio::test(start_paused = true)]
async fn an_import_into_a_region_released_here_never_answers_ok_with_hidden_entries() {
    let shared = Storage::new(MemoryStorage::new());
    let (_source, from_log) = source(&shared, &["x1", "x2"]).await;
    let dest = within(Wal::open(shared.clone(), P, enqueued()))
        .await
        .unwrap();
    within(dest.append(vec![(5, b("old"))])).await.unwrap();
    within(dest.release_region(5)).await.unwrap();
    let imported = within(dest.import_region(&from_log, 5, 0)).await;
    if let Ok(imported) = imported {
        let seen = try_read_all(&dest, 5, 0).await.map(|e| payloads(&e));
        assert!(
            imported.entries == 0 || seen.as_ref().is_ok_and(|s| s == &vec!["x1", "x2"]),
            "the import answered {imported:?}; region 5 reads {seen:?}"
        );
    }
}

/// Enqueued mode: a takeover whose `finish` fails (the destination's
/// creates fail until it answers `Failing`; the failed batch stays queued
/// and lands later), then a second takeover of the region, finished once
/// the store answers: every view of the destination (here, after a
/// reopen) shows each entry once, above the second floor.
#[tokio::test(start_paused = true)]
async fn a_repeated_enqueued_takeover_after_a_failed_finish_shows_each_entry_once() {
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
    let dest = within(Wal::open(fd.storage(), P, enqueued()))
        .await
        .unwrap();
    let first = dest.take_over(&reader, 5, 0).unwrap();
    until("the takeover follows x2", || {
        let done = first.progress().position >= last;
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
            let done = t.progress().position >= last;
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
    let imported = match second {
        Some(Ok(imported)) => imported,
        other => panic!("second finish (after {failed:?}): {other:?}"),
    };
    within(dest.flush()).await.unwrap();
    let what = format!("first finish {failed:?}, second {imported:?}");
    region_5_reads(
        dest,
        &shared,
        enqueued(),
        imported.floor,
        &["x1", "x2"],
        &what,
    )
    .await;
}

/// Enqueued mode: the engine releases region 5 here while an import of it
/// runs (the source's reads are slow). Appends after a release are refused
/// (`RegionReleased`), so the import answers that, or `Ok` when all its
/// appends came first. Either way the release is forever: region 5 reads
/// nothing here, nor after a reopen (no copy of the import, no earlier
/// entry, replays above the release).
#[tokio::test(start_paused = true)]
async fn a_release_during_an_enqueued_import_hides_the_region_for_good() {
    let shared = Storage::new(MemoryStorage::new());
    let big = |c: char| c.to_string().repeat(700);
    let source = within(Wal::open(shared.clone(), "src", config()))
        .await
        .unwrap();
    for c in ['1', '2', '3'] {
        within(source.append(vec![(5, b(&big(c)))])).await.unwrap();
    }
    let eyes = FaultyStorage::new(shared.clone());
    let from_log = within(objwal::WalReader::open(eyes.storage(), "src", config()))
        .await
        .unwrap();
    eyes.set_latency(Op::Read, Duration::from_secs(10));
    let dest_config = Config {
        max_batch_bytes: 1024,
        ..enqueued()
    };
    let dest = within(Wal::open(shared.clone(), P, dest_config.clone()))
        .await
        .unwrap();
    within(dest.append(vec![(5, b("mine"))])).await.unwrap();
    let d2 = dest.clone();
    let importing = tokio::spawn(async move { d2.import_region(&from_log, 5, 0).await });
    tokio::time::sleep(Duration::from_secs(10)).await;
    let released = within(dest.release_region(5)).await;
    let imported = tokio::time::timeout(Duration::from_secs(600), importing)
        .await
        .expect("the import finishes")
        .unwrap();
    assert!(
        matches!(imported, Ok(_) | Err(Error::RegionReleased { .. })),
        "the import answered {imported:?} (release {released:?})"
    );
    let what = format!("import {imported:?}, release {released:?}");
    let seen = try_read_all(&dest, 5, 0).await.map(|e| payloads(&e).len());
    assert!(
        seen.as_ref().is_ok_and(|n| *n == 0),
        "region 5 reads {seen:?}; {what}"
    );
    within(dest.stop()).await.unwrap();
    let reopened = within(Wal::open(shared.clone(), P, dest_config))
        .await
        .unwrap();
    let seen = try_read_all(&reopened, 5, 0)
        .await
        .map(|e| payloads(&e).len());
    assert!(
        seen.as_ref().is_ok_and(|n| *n == 0),
        "after a reopen region 5 reads {seen:?}; {what}"
    );
}

/// A follower under `Quarantine` at a kept void `V` (as above); above the
/// gap, the marks-only object `X` that collected `V+1` reads damaged to
/// the follower, and "c" (region 2) lands after it. The follower must
/// show "2 c" within two idle checks (never nothing).
#[tokio::test(start_paused = true)]
async fn a_quarantine_follower_at_a_kept_void_below_damaged_evidence_shows_what_follows() {
    use futures::StreamExt;
    let shared = Storage::new(MemoryStorage::new());
    let fw = FaultyStorage::new(shared.clone());
    let w = within(Wal::open(fw.storage(), P, config())).await.unwrap();
    let a = within(w.append(vec![(1, b("a"))])).await.unwrap()[0];
    let eyes = FaultyStorage::new(shared.clone());
    let fconfig = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..config()
    };
    let reader = within(objwal::WalReader::open(eyes.storage(), P, fconfig))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0), (2, 0)]);
    assert_eq!(shown(within(follower.next()).await.unwrap()), "1 a");
    fw.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    assert!(within(w.append(vec![(1, b("x"))])).await.is_err());
    let v = *listed(&shared).await.last().unwrap();
    let idle = tokio::time::timeout(Duration::from_millis(500), follower.next()).await;
    assert!(idle.is_err());
    eyes.fail_next(Op::Read, "", usize::MAX, StorageErrorKind::Transient);
    eyes.fail_next(Op::List, "", usize::MAX, StorageErrorKind::Transient);
    let bid = within(w.append(vec![(1, b("b"))])).await.unwrap()[0];
    assert!(bid > a);
    within(w.obsolete(1, bid)).await.unwrap();
    within(w.flush()).await.unwrap();
    until("W collects V+1", || async {
        let now = listed(&shared).await;
        !now.contains(&(v + 1)) && now.contains(&v)
    })
    .await;
    let x_key = *listed(&shared).await.last().unwrap();
    within(w.append(vec![(2, b("c"))])).await.unwrap();
    eyes.clear_faults();
    eyes.corrupt_next_reads(&key(x_key), usize::MAX);
    let got = shown_within_two_checks(&mut follower, 1).await;
    assert_eq!(
        got,
        vec!["2 c"],
        "V = {v}, X = {x_key}, listed {:?}",
        listed(&shared).await
    );
}

/// The same loss without a void: `A`'s collection fails to delete its
/// oldest object (`2`, "a", obsolete; the delete is repeated by a later
/// pass), deletes "b"'s object above it, and its marks-only `X` (which
/// carries the boundary) reads damaged to `B` (under `Quarantine`). `B`'s
/// chain ends at `2` and its walk stops at the collected key after it. The
/// went-past check skipped `X` and `B` opened, leaving `A` free at `X+1`:
/// `B` must refuse, naming `X`.
#[tokio::test(start_paused = true)]
async fn damaged_evidence_above_an_object_whose_delete_failed_lets_no_older_writer_acknowledge_off_the_chain(
) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    let oldest = *listed(&shared).await.last().unwrap();
    fa.fail_next(
        Op::Delete,
        &key(oldest),
        usize::MAX,
        StorageErrorKind::Transient,
    );
    let bid = within(a.append(vec![(1, b("b"))])).await.unwrap()[0];
    within(a.obsolete(1, bid)).await.unwrap();
    within(a.flush()).await.unwrap();
    until("A collects b's object", || async {
        let now = listed(&shared).await;
        !now.contains(&(oldest + 1)) && now.contains(&oldest)
    })
    .await;
    let at_open = listed(&shared).await;
    let x_key = *at_open.last().unwrap();
    assert!(x_key > oldest + 1, "{at_open:?}");
    let fb = FaultyStorage::new(shared.clone());
    fb.corrupt_next_reads(&key(x_key), usize::MAX);
    let b_config = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..config()
    };
    let opened = within(Wal::open(fb.storage(), P, b_config)).await;
    match &opened {
        Err(e) => assert!(e.to_string().contains(&key(x_key)), "{e}"),
        Ok(_) => panic!(
            "B opened over the damaged {x_key} above its walk's block; listed at B's open \
             {at_open:?}, now {:?}",
            listed(&shared).await
        ),
    }
}
