//! Attacks on the settle markers an open lands after objects moved aside
//! above its walk's block (rfcs/0006, "An object moved aside above the
//! block"; `recovery::block_past_moved_aside`, called from `Wal::open_in`).
//!
//! Deterministic: paused time on the memory backend; each process gets its
//! own fault wrapper over one shared store, so that its creates can be
//! held alone.

use futures::StreamExt;
use objwal::storage::fault::FaultyStorage;
use objwal::storage::MemoryStorage;
use objwal::{Error, Storage, Wal, WalReader};

use crate::attack32::{config, key, listed, replayed, until, P};
use crate::attack34::{move_aside, quarantine};
use crate::attack35::reader_replays;
use crate::attack36::{damage, newer_start_object_rotted, release_until, Unknown};
use crate::common::*;

fn opened_or(r: &Result<Wal, Error>) -> String {
    match r {
        Ok(_) => "opened".into(),
        Err(e) => format!("refused: {e}"),
    }
}

/// A (epoch 1) lands "a".."e", one object each, and its objects are all
/// moved aside (as if every one had rotted). Returns A and every key it
/// held (its start object included).
async fn everything_moved_aside(shared: &Storage) -> (Wal, Vec<u64>) {
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c", "d", "e"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    let all: Vec<u64> = listed(shared).await.into_iter().collect();
    for k in &all {
        assert!(move_aside(shared, *k).await);
    }
    assert!(listed(shared).await.is_empty());
    (a, all)
}

// ---------------------------------------------------------------------------
// 1. The empty listing: every object under objects/ moved aside.
// ---------------------------------------------------------------------------

/// Every object of A moved aside while A runs (no jump). One open `C`:
/// its listing is empty, it blocks the key after A's newest object. A's
/// next append must be fenced; C must be writable and a reopen replay C's
/// entry.
#[tokio::test(start_paused = true)]
async fn every_object_moved_aside_under_a_running_writer_then_one_open_fences_it_and_is_writable() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, all) = everything_moved_aside(&shared).await;
    let q = *all.last().unwrap();
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, config())).await {
        Ok(c) => c,
        Err(e) => panic!("the open over an empty objects/ (all of {all:?} moved aside): {e}"),
    };
    assert!(
        listed(&shared).await.contains(&(q + 1)),
        "{:?}",
        listed(&shared).await
    );
    let z = within(a.append(vec![(1, b("z"))])).await;
    assert!(
        matches!(z, Err(Error::Fenced { .. })),
        "A's append after C opened answered {z:?}; listed {:?}",
        listed(&shared).await
    );
    for p in ["c1", "c2", "c3", "c4", "c5"] {
        let r = within(c.append(vec![(1, b(p))])).await;
        assert!(
            r.is_ok(),
            "C's append {p}: {r:?}; listed {:?}",
            listed(&shared).await
        );
    }
    within(c.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(["c1", "c2", "c3", "c4", "c5"].map(String::from).to_vec())
    );
}

/// Every object of A moved aside (A stopped, as advised). Two opens race:
/// `C1` (the older epoch) and `C2` both list an empty objects/; C1's
/// marker at the key after A's newest object `q` lands first, and C2's
/// create there finds it. C1 then fails (C2 claimed after it). C2, the
/// newest, must open and be able to append.
///
/// Broke before the start above a placeholder tip: C2's open failed with
/// "link sequence 6 is not below the object's sequence 3" (with no walk
/// the start went to the epoch's key, under the moved-aside placeholder
/// tip), so neither racing open succeeded.
#[tokio::test(start_paused = true)]
async fn two_opens_racing_over_an_emptied_objects_dir_leave_the_survivor_writable() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, all) = everything_moved_aside(&shared).await;
    within(a.stop()).await.ok();
    // A's stop may have landed something: move that aside too.
    for k in listed(&shared).await {
        assert!(move_aside(&shared, k).await);
    }
    let q = *all.last().unwrap();
    let f1 = FaultyStorage::new(shared.clone());
    f1.hold_creates(true);
    let s1 = f1.storage();
    let c1 = tokio::spawn(async move { Wal::open(s1, P, config()).await });
    release_until(&f1, &key(q + 1)).await;
    let f2 = FaultyStorage::new(shared.clone());
    f2.hold_creates(true);
    let s2 = f2.storage();
    let c2 = tokio::spawn(async move { Wal::open(s2, P, config()).await });
    release_until(&f2, &key(q + 1)).await;
    // C1's marker lands after C2 listed.
    assert!(f1.release(&key(q + 1)));
    until("C1's marker lands", || async {
        listed(&shared).await.contains(&(q + 1))
    })
    .await;
    f1.hold_creates(false);
    f1.release_all();
    let c1 = within(c1).await.unwrap();
    f2.hold_creates(false);
    f2.release_all();
    let c2 = within(c2).await.unwrap();
    let c2 = match (c1, c2) {
        (Err(_), Ok(c2)) => c2,
        (c1, c2) => {
            // Not forever: an open after the race lists C1's marker.
            let fd = FaultyStorage::new(shared.clone());
            let d = within(Wal::open(fd.storage(), P, config())).await;
            let wrote = match &d {
                Ok(d) => format!("{:?}", within(d.append(vec![(1, b("d"))])).await),
                Err(_) => "-".into(),
            };
            panic!(
                "two racing opens over an emptied objects/ (moved aside {all:?}): neither \
                 opened. C1: {}; C2: {}. A third open: {} (its append: {wrote}); listed {:?}",
                opened_or(&c1),
                opened_or(&c2),
                opened_or(&d),
                listed(&shared).await
            )
        }
    };
    let after_open = listed(&shared).await;
    let mut answers = Vec::new();
    for p in ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"] {
        answers.push((p, within(c2.append(vec![(1, b(p))])).await.map(|_| ())));
    }
    let failed: Vec<_> = answers.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "C2, the only process left (C1 failed), had appends refused: {failed:?}; moved aside \
         {all:?}, C1's marker at {}; listed after C2 opened {after_open:?}",
        q + 1
    );
}

// ---------------------------------------------------------------------------
// 2. A newer writer's moved-aside start object (the attack36 history),
//    with that writer racing the open.
// ---------------------------------------------------------------------------

/// `A` lands "a"; `B` opens (marker at `T+1`, start object `S`); `S` rots
/// headerless; the first open refuses naming `S`; `A` stops; `S` is moved
/// aside; `B` still runs. Returns `B`, `S`, the shared store.
async fn newer_start_moved_aside(shared: &Storage) -> (Wal, u64) {
    let (a, bw, s) = newer_start_object_rotted(shared, Unknown::HeaderAndTrailer).await;
    let fc = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fc.storage(), P, quarantine())).await;
    assert!(first.is_err(), "{}", opened_or(&first));
    let _ = within(a.stop()).await;
    assert!(move_aside(shared, s).await);
    (bw, s)
}

/// The open `C` lists; before its marker at `S+1` lands, `B` appends "n"
/// there (acknowledged). C's create finds B's object: it recovers again.
/// C must open, fence B, and replay "n".
#[tokio::test(start_paused = true)]
async fn a_newer_writer_appending_between_the_opens_listing_and_its_marker_is_replayed_and_fenced()
{
    let shared = Storage::new(MemoryStorage::new());
    let (bw, s) = newer_start_moved_aside(&shared).await;
    let fc = FaultyStorage::new(shared.clone());
    fc.hold_creates(true);
    let sc = fc.storage();
    let opening = tokio::spawn(async move { Wal::open(sc, P, quarantine()).await });
    release_until(&fc, &key(s + 1)).await;
    let n = within(bw.append(vec![(1, b("n"))])).await;
    assert!(n.is_ok(), "{n:?}");
    fc.hold_creates(false);
    fc.release_all();
    let c = match within(opening).await.unwrap() {
        Ok(c) => c,
        Err(e) => panic!("C's open after B landed S+1 under it: {e}"),
    };
    let late = within(bw.append(vec![(1, b("late"))])).await;
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        matches!(late, Err(Error::Fenced { .. })),
        "B's append after C opened: {late:?}; C replays {seen:?}; listed {:?}",
        listed(&shared).await
    );
    assert!(
        seen.as_ref().is_ok_and(|v| v.contains(&"n".to_owned())),
        "LOST: \"n\" (acknowledged at S+1 = {}) not replayed by C: {seen:?}; listed {:?}",
        s + 1,
        listed(&shared).await
    );
}

/// The same race, but B lands three objects ("n1", "n2", "n3") before C's
/// marker at `S+1` is sent, and one more ("n4") while C recovers again
/// (its second marker, at B's next key, held until then).
#[tokio::test(start_paused = true)]
async fn a_newer_writer_appending_fast_under_two_recoveries_of_the_open_is_replayed_and_fenced() {
    let shared = Storage::new(MemoryStorage::new());
    let (bw, s) = newer_start_moved_aside(&shared).await;
    let fc = FaultyStorage::new(shared.clone());
    fc.hold_creates(true);
    let sc = fc.storage();
    let opening = tokio::spawn(async move { Wal::open(sc, P, quarantine()).await });
    release_until(&fc, &key(s + 1)).await;
    let mut acked = Vec::new();
    for p in ["n1", "n2", "n3"] {
        within(bw.append(vec![(1, b(p))])).await.unwrap();
        acked.push(p.to_owned());
    }
    // C's create at S+1 finds B's object; it recovers again, and its walk
    // of B's run settles S+4.
    assert!(fc.release(&key(s + 1)));
    within(async {
        loop {
            fc.wait_held(1).await;
            let held = fc.held();
            if held.iter().any(|k| k.contains("/objects/")) {
                return;
            }
            for k in held {
                fc.release(&k);
            }
        }
    })
    .await;
    let held = fc.held();
    let n4 = within(bw.append(vec![(1, b("n4"))])).await;
    if n4.is_ok() {
        acked.push("n4".into());
    }
    fc.hold_creates(false);
    fc.release_all();
    let c = match within(opening).await.unwrap() {
        Ok(c) => c,
        Err(e) => panic!("C's open under B's appends (held {held:?}): {e}"),
    };
    let late = within(bw.append(vec![(1, b("late"))])).await;
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        matches!(late, Err(Error::Fenced { .. })),
        "B's append after C opened: {late:?}; C replays {seen:?}"
    );
    let seen = seen.unwrap_or_default();
    let lost: Vec<_> = acked.iter().filter(|p| !seen.contains(p)).collect();
    assert!(
        lost.is_empty(),
        "LOST {lost:?} (acknowledged by B; n4 answered {n4:?}; C's held creates {held:?}); C \
         replays {seen:?}; listed {:?}",
        listed(&shared).await
    );
}

/// B (the newer process, running) lands "n1" at `S+1`; both `S` and `S+1`
/// rot headerless and are moved aside (consecutive moved-aside keys). C
/// must fence B at `S+2` ("n1" is a hole: moved aside).
#[tokio::test(start_paused = true)]
async fn consecutive_moved_aside_objects_of_a_running_newer_writer_fence_it_at_the_next_key() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, bw, s) = newer_start_object_rotted(&shared, Unknown::HeaderAndTrailer).await;
    let _ = within(a.stop()).await;
    within(bw.append(vec![(1, b("n1"))])).await.unwrap();
    assert!(listed(&shared).await.contains(&(s + 1)));
    damage(&shared, s + 1, Unknown::HeaderAndTrailer).await;
    assert!(move_aside(&shared, s).await);
    assert!(move_aside(&shared, s + 1).await);
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after {s} and {} were moved aside: {e}", s + 1),
    };
    let z = within(bw.append(vec![(1, b("z"))])).await;
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        matches!(z, Err(Error::Fenced { .. }))
            || seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
        "LOST: B acknowledged \"z\" ({z:?}) after C opened; C replays {seen:?}; listed {:?}",
        listed(&shared).await
    );
}

/// Several moved-aside objects above the block, not consecutive: B's
/// headerless start object `S` and B's third object `S+2` (B lands "n1",
/// "n2"; `S+2` rots headerless); `S+1` stays. C must fence B (its next key
/// `S+3`) and replay "n1".
#[tokio::test(start_paused = true)]
async fn two_moved_aside_objects_of_a_running_newer_writer_around_an_intact_one_fence_it() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, bw, s) = newer_start_object_rotted(&shared, Unknown::HeaderAndTrailer).await;
    let _ = within(a.stop()).await;
    within(bw.append(vec![(1, b("n1"))])).await.unwrap();
    within(bw.append(vec![(1, b("n2"))])).await.unwrap();
    assert!(listed(&shared).await.contains(&(s + 2)));
    damage(&shared, s + 2, Unknown::HeaderAndTrailer).await;
    assert!(move_aside(&shared, s).await);
    assert!(move_aside(&shared, s + 2).await);
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after {s} and {} were moved aside: {e}", s + 2),
    };
    let z = within(bw.append(vec![(1, b("z"))])).await;
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        matches!(z, Err(Error::Fenced { .. }))
            || seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
        "LOST: B acknowledged \"z\" ({z:?}) after C opened; C replays {seen:?}; listed {:?}",
        listed(&shared).await
    );
    assert!(
        seen.as_ref().is_ok_and(|v| v.contains(&"n1".to_owned())),
        "LOST: \"n1\" (intact at {}): C replays {seen:?}",
        s + 1
    );
}

/// Two opens race over the moved-aside start object: both list, `C1`'s
/// marker at `S+1` lands first, `C2` finds it. The survivor must be
/// writable, B fenced.
#[tokio::test(start_paused = true)]
async fn two_opens_racing_over_a_moved_aside_start_object_leave_the_survivor_writable() {
    let shared = Storage::new(MemoryStorage::new());
    let (bw, s) = newer_start_moved_aside(&shared).await;
    let f1 = FaultyStorage::new(shared.clone());
    f1.hold_creates(true);
    let s1 = f1.storage();
    let c1 = tokio::spawn(async move { Wal::open(s1, P, quarantine()).await });
    release_until(&f1, &key(s + 1)).await;
    let f2 = FaultyStorage::new(shared.clone());
    f2.hold_creates(true);
    let s2 = f2.storage();
    let c2 = tokio::spawn(async move { Wal::open(s2, P, quarantine()).await });
    release_until(&f2, &key(s + 1)).await;
    assert!(f1.release(&key(s + 1)));
    until("C1's marker lands", || async {
        listed(&shared).await.contains(&(s + 1))
    })
    .await;
    f1.hold_creates(false);
    f1.release_all();
    let c1 = within(c1).await.unwrap();
    f2.hold_creates(false);
    f2.release_all();
    let c2 = within(c2).await.unwrap();
    let z = within(bw.append(vec![(1, b("z"))])).await;
    assert!(matches!(z, Err(Error::Fenced { .. })), "{z:?}");
    let c2 = match (c1, c2) {
        (Err(_), Ok(c2)) => c2,
        (c1, c2) => panic!("C1: {}, C2: {}", opened_or(&c1), opened_or(&c2)),
    };
    for p in ["c1", "c2", "c3"] {
        let r = within(c2.append(vec![(1, b(p))])).await;
        assert!(
            r.is_ok(),
            "C2's append {p}: {r:?}; listed {:?}",
            listed(&shared).await
        );
    }
    within(c2.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(["a", "c1", "c2", "c3"].map(String::from).to_vec())
    );
}

// ---------------------------------------------------------------------------
// 3. Collection past the extra marker, a follower, later opens.
// ---------------------------------------------------------------------------

/// After `C` blocked `S+1` (B still running), C appends, obsoletes and
/// flushes until its boundary lies above `S+1` and it collected below it.
/// The marker at `S+1` must stay (B's next key), B must stay fenced, a
/// follower must see C's newest entry, and a later open must replay it.
#[tokio::test(start_paused = true)]
async fn collection_past_the_marker_after_a_moved_aside_object_keeps_the_running_writer_fenced() {
    let shared = Storage::new(MemoryStorage::new());
    let (bw, s) = newer_start_moved_aside(&shared).await;
    let fc = FaultyStorage::new(shared.clone());
    let c = within(Wal::open(fc.storage(), P, quarantine()))
        .await
        .unwrap();
    assert!(listed(&shared).await.contains(&(s + 1)));
    let reader = within(WalReader::open(shared.clone(), P, quarantine()))
        .await
        .unwrap();
    let mut follower = reader.follow([(1, 0)]);
    let mut last = 0;
    for i in 0..6 {
        last = within(c.append(vec![(1, b(&format!("c{i}")))]))
            .await
            .unwrap()[0];
    }
    within(c.obsolete(1, last - 1)).await.unwrap();
    within(c.flush()).await.unwrap();
    within(c.append(vec![(1, b("c6"))])).await.unwrap();
    within(c.flush()).await.unwrap();
    // C's collection deletes what lies below its boundary: A's "a" at T.
    // C's collection deleted what lies below its boundary (its own start
    // object at S+65 included): the boundary passed the marker at S+1.
    let before = listed(&shared).await;
    assert!(
        !before.contains(&(s + 65)) && before.iter().any(|k| *k > s + 65),
        "C did not collect past the marker: listed {before:?}, S = {s}"
    );
    let now = listed(&shared).await;
    assert!(
        now.contains(&(s + 1)),
        "the marker after the moved-aside {s} was collected: listed {now:?}"
    );
    let z = within(bw.append(vec![(1, b("z"))])).await;
    assert!(
        matches!(z, Err(Error::Fenced { .. })),
        "B's append after C collected: {z:?}; listed {:?}",
        listed(&shared).await
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(600);
    let mut out = Vec::new();
    while !out.iter().any(|s: &String| s == "c6") {
        match tokio::time::timeout_at(deadline, follower.next()).await {
            Ok(Some(Ok(e))) => out.push(String::from_utf8_lossy(&e.data).into_owned()),
            Ok(Some(Err(e))) => {
                out.push(format!("error {e:?}"));
                break;
            }
            Ok(None) => {
                out.push("ended".into());
                break;
            }
            Err(_) => break,
        }
    }
    assert!(
        out.iter().any(|s| s == "c6"),
        "the follower showed {out:?}; listed {:?}",
        listed(&shared).await
    );
    within(c.stop()).await.unwrap();
    let fd = FaultyStorage::new(shared.clone());
    let d = within(Wal::open(fd.storage(), P, quarantine()))
        .await
        .unwrap_or_else(|e| panic!("the open after C collected: {e}"));
    let seen = replayed(&d, 1).await.unwrap();
    assert!(
        seen.ends_with(&["c5".to_owned(), "c6".to_owned()]),
        "{seen:?}"
    );
    within(d.append(vec![(1, b("d"))])).await.unwrap();
    within(d.stop()).await.unwrap();
    let e = within(Wal::open(fd.storage(), P, config()))
        .await
        .unwrap_or_else(|e| panic!("a default-policy open after D: {e}"));
    let seen = replayed(&e, 1).await.unwrap();
    assert!(
        seen.ends_with(&["c6".to_owned(), "d".to_owned()]),
        "{seen:?}"
    );
}

/// A moved-aside object BELOW the walk's block: A's middle object (no
/// jump) moved aside while A runs, then A appends on. The walk of A's run
/// blocks above it; A must be fenced and what it landed after the move
/// replayed.
#[tokio::test(start_paused = true)]
async fn a_moved_aside_object_below_the_block_of_a_running_writer_leaves_it_fenced() {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    let all: Vec<u64> = listed(&shared).await.into_iter().collect();
    let m = all[all.len() - 2];
    damage(&shared, m, Unknown::HeaderAndTrailer).await;
    assert!(move_aside(&shared, m).await);
    within(a.append(vec![(1, b("d"))])).await.unwrap();
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after {m} was moved aside: {e}"),
    };
    let z = within(a.append(vec![(1, b("z"))])).await;
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        matches!(z, Err(Error::Fenced { .. })),
        "{z:?}; C replays {seen:?}"
    );
    assert!(
        seen.as_ref()
            .is_ok_and(|v| v.contains(&"c".to_owned()) && v.contains(&"d".to_owned())),
        "LOST: C replays {seen:?} (b at {m} moved aside)"
    );
}

// ---------------------------------------------------------------------------
// 4. The missing-object search (`missing::gaps`): a damaged object whose
//    header reads and is NOT a settle marker still names the key below it.
// ---------------------------------------------------------------------------

/// `A` lands "a", "b", "c" (one object each) and stops. The object holding
/// "b" vanishes (acknowledged, then lost by the store) and the one holding
/// "c" rots in its marks segment (its header still reads; a data object,
/// not a settle marker). The open (Quarantine) must refuse naming the
/// missing key, or open and report "b" as a hole: never drop it silently.
#[tokio::test(start_paused = true)]
async fn a_missing_object_under_a_damaged_data_object_whose_header_reads_is_still_named() {
    use crate::attack34::{rot, Rot};
    use objwal::ObjectStorage;
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    within(a.stop()).await.unwrap();
    let all: Vec<u64> = listed(&shared).await.into_iter().collect();
    let (kb, kc) = (all[all.len() - 2], all[all.len() - 1]);
    shared.delete(&key(kb)).await.unwrap();
    rot(&shared, kc, Rot::FirstSegment).await;
    let fc = FaultyStorage::new(shared.clone());
    match within(Wal::open(fc.storage(), P, quarantine())).await {
        Err(e) => assert!(
            e.to_string().contains(&key(kb)) || e.to_string().contains(&key(kc)),
            "{e}"
        ),
        Ok(c) => {
            let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
            let holes = c.holes(1);
            assert!(
                seen.as_ref().is_ok_and(|v| v.contains(&"b".to_owned())) || !holes.is_empty(),
                "LOST silently: \"b\" (at the vanished {kb}, under the damaged {kc}) is neither \
                 replayed ({seen:?}) nor a hole ({holes:?})"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 5. The way out for a junk file high above the log: move it aside.
// ---------------------------------------------------------------------------

/// `A` lands "a" and stops. A junk file appears at a key high above the
/// log (`MAX_SEQUENCE - 10`): the open refuses naming it (rfcs/0006: "a
/// junk file ... refuses every open until the operator ... moves it
/// aside"). Once it is moved aside, the open must succeed, replay "a" and
/// be writable.
///
// FAILS, left for the next stop: every open after the move fails "no
// sequence is left for a start object: the prefix is exhausted", forever. `Wal::open_in` starts at
// `start_sequence(max(blocked, moved_max), listed, epoch)`, and both
// `listed` (`selection.max_sequence`, which counts quarantined keys:
// quarantine.rs "No sequence of a damaged object may be used again") and,
// since f362f69, `moved_max` (the marker `block_past_moved_aside` lands at
// j+1) put it at j+65 > MAX_SEQUENCE. The marker at j+1 is a settle marker
// under objects/, which nothing ever deletes (K5): deleting the moved-aside
// copy as well no longer helps.
#[tokio::test(start_paused = true)]
#[ignore = "open defect, issue 32 note: a junk key near MAX_SEQUENCE moved aside exhausts the prefix"]
async fn a_junk_file_high_above_the_log_moved_aside_lets_the_store_open() {
    use objwal::ObjectStorage;
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    within(a.stop()).await.unwrap();
    let j = objwal::format::MAX_SEQUENCE - 10;
    shared
        .create(
            &key(j),
            bytes::Bytes::from_static(b"not an object at all, junk"),
        )
        .await
        .unwrap();
    let fc = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fc.storage(), P, quarantine())).await;
    let first = match first {
        Ok(c) => {
            let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
            assert_eq!(seen, Ok(vec!["a".to_owned()]));
            return;
        }
        Err(e) => e.to_string(),
    };
    assert!(move_aside(&shared, j).await);
    for cfg in [quarantine(), config()] {
        let c = match within(Wal::open(fc.storage(), P, cfg)).await {
            Ok(c) => c,
            Err(e) => {
                let after_move = listed(&shared).await;
                // Even dropping the junk for good does not help: the failed
                // open left its settle marker at j+1 under objects/.
                let prefix = objwal::storage::keys::Prefix::new(P).unwrap();
                shared
                    .delete(&objwal::wal::damage::quarantine_key(&prefix, j))
                    .await
                    .unwrap();
                let d = within(Wal::open(fc.storage(), P, config())).await;
                panic!(
                    "after the junk file at {j} was moved aside (as the refusal advised: \
                     {first}), the open failed: {e}; listed {after_move:?}. With the \
                     moved-aside copy deleted too, the next open: {}; listed {:?}",
                    opened_or(&d),
                    listed(&shared).await
                )
            }
        };
        assert_eq!(
            replayed(&c, 1).await.map_err(|e| e.to_string()),
            Ok(vec!["a".to_owned()])
        );
        let w = within(c.append(vec![(1, b("c"))])).await;
        assert!(w.is_ok(), "{w:?}");
        within(c.stop()).await.unwrap();
    }
}

/// Every object of A moved aside while A runs (no jump); the open `C`
/// lists an empty objects/, and before its marker at `q+1` lands A appends
/// "z" there (acknowledged). C must open, replay "z" and fence A.
#[tokio::test(start_paused = true)]
async fn a_writer_appending_after_the_empty_listing_before_the_marker_is_replayed_and_fenced() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, all) = everything_moved_aside(&shared).await;
    let q = *all.last().unwrap();
    let fc = FaultyStorage::new(shared.clone());
    fc.hold_creates(true);
    let sc = fc.storage();
    let opening = tokio::spawn(async move { Wal::open(sc, P, config()).await });
    release_until(&fc, &key(q + 1)).await;
    let z = within(a.append(vec![(1, b("z"))])).await;
    assert!(z.is_ok(), "{z:?}");
    fc.hold_creates(false);
    fc.release_all();
    let c = match within(opening).await.unwrap() {
        Ok(c) => c,
        Err(e) => panic!(
            "C's open after A landed {} under it: {e}; listed {:?}",
            q + 1,
            listed(&shared).await
        ),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        matches!(late, Err(Error::Fenced { .. })),
        "A's append after C opened: {late:?}; C replays {seen:?}; listed {:?}",
        listed(&shared).await
    );
    assert!(
        seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
        "LOST: \"z\" (acknowledged at {}) not replayed: {seen:?}; listed {:?}",
        q + 1,
        listed(&shared).await
    );
}

// ---------------------------------------------------------------------------
// 6. A filler at the key after a moved-aside object.
// ---------------------------------------------------------------------------

/// A (epoch 1) lands "a".."e" and stops; earlier refused opens burned
/// epochs, so the next two opens have epochs above A's keys. All of A's
/// objects are moved aside. `C1` and `C2` race over the empty objects/
/// (C1's marker at `q+1` lands after C2 listed): C1 fails (fenced), its
/// start object stays at `q+65` (a dead start object: a filler to any newer
/// run); C2 opens with its start object at its epoch's key, below that
/// filler. C2 appends until its newest object sits right below the filler.
/// That object rots headerless and is moved aside while C2 runs (no jump:
/// the case rfcs/0006 says the rule covers). `D` opens. C2's next append
/// must be fenced, or replayed by a later open.
async fn filler_after_a_moved_aside_object(stop_first: bool) -> Result<(), String> {
    use objwal::ObjectStorage;
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c", "d", "e"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    within(a.stop()).await.ok();
    // Burn epochs: each open refused by a junk object claimed one.
    let junk = 1000;
    shared
        .create(&key(junk), bytes::Bytes::from_static(b"junk junk junk"))
        .await
        .unwrap();
    // Epochs 2..5: C1 gets 6, its marker at 7 epoch 6 (a marker's epoch is
    // capped at its key, so C2's must differ: C2 gets 8, its marker 7).
    let burn = || async {
        let fx = FaultyStorage::new(shared.clone());
        let r = within(Wal::open(fx.storage(), P, config())).await;
        assert!(r.is_err());
    };
    for _ in 0..4 {
        burn().await;
    }
    shared.delete(&key(junk)).await.unwrap();
    let all: Vec<u64> = listed(&shared).await.into_iter().collect();
    for k in &all {
        assert!(move_aside(&shared, *k).await);
    }
    let q = *all.last().unwrap();
    let f1 = FaultyStorage::new(shared.clone());
    f1.hold_creates(true);
    let s1 = f1.storage();
    let c1 = tokio::spawn(async move { Wal::open(s1, P, config()).await });
    release_until(&f1, &key(q + 1)).await;
    // Epoch 7, between C1's and C2's.
    shared
        .create(&key(junk), bytes::Bytes::from_static(b"junk junk junk"))
        .await
        .unwrap();
    burn().await;
    shared.delete(&key(junk)).await.unwrap();
    let f2 = FaultyStorage::new(shared.clone());
    f2.hold_creates(true);
    let s2 = f2.storage();
    let c2 = tokio::spawn(async move { Wal::open(s2, P, config()).await });
    release_until(&f2, &key(q + 1)).await;
    assert!(f1.release(&key(q + 1)));
    until("C1's marker lands", || async {
        listed(&shared).await.contains(&(q + 1))
    })
    .await;
    f1.hold_creates(false);
    f1.release_all();
    let c1 = within(c1).await.unwrap();
    let dead = *listed(&shared).await.last().unwrap();
    f2.hold_creates(false);
    f2.release_all();
    let c2 = within(c2).await.unwrap();
    let c2 = match (c1, c2) {
        (Err(_), Ok(c2)) => c2,
        (c1, c2) => {
            return Err(format!(
                "setup: C1 {}, C2 {}; listed {:?}",
                opened_or(&c1),
                opened_or(&c2),
                listed(&shared).await
            ))
        }
    };
    let start = *listed(&shared)
        .await
        .iter()
        .find(|k| **k > q + 1 && **k < dead)
        .ok_or(format!(
            "setup: C2's start; moved aside {all:?}, dead {dead}; listed {:?}",
            listed(&shared).await
        ))?;
    let mut n = 0;
    while !listed(&shared).await.contains(&(dead - 1)) {
        within(c2.append(vec![(1, b(&format!("n{n}")))]))
            .await
            .map_err(|e| format!("setup: C2's append {n}: {e}"))?;
        n += 1;
    }
    let k = dead - 1;
    damage(&shared, k, Unknown::HeaderAndTrailer).await;
    if stop_first {
        // As the refusal advises: every process writing the log stopped
        // (C2 killed), then the object moved aside.
        drop(c2);
        assert!(move_aside(&shared, k).await);
        let fd = FaultyStorage::new(shared.clone());
        let d = within(Wal::open(fd.storage(), P, quarantine())).await;
        let again = within(Wal::open(fd.storage(), P, quarantine())).await;
        return match (&d, &again) {
            (Ok(_), _) | (_, Ok(_)) => Ok(()),
            _ => Err(format!(
                "with every process stopped and C2's newest object {k} (below the filler {dead}: \
                 C1's dead start object) moved aside, the open fails: {}; and again: {}; \
                 listed {:?}",
                opened_or(&d),
                opened_or(&again),
                listed(&shared).await
            )),
        };
    }
    assert!(move_aside(&shared, k).await);
    let fd = FaultyStorage::new(shared.clone());
    let d = within(Wal::open(fd.storage(), P, quarantine())).await;
    let d = match d {
        Ok(d) => d,
        Err(e) => {
            let again = within(Wal::open(fd.storage(), P, quarantine())).await;
            return Err(format!(
                "D's open after C2's newest object {k} (below the filler {dead}) was moved aside \
                 failed: {e}; a further open: {}; listed {:?}",
                opened_or(&again),
                listed(&shared).await
            ));
        }
    };
    let z = within(c2.append(vec![(1, b("z"))])).await;
    if matches!(z, Err(Error::Fenced { .. })) {
        return Ok(());
    }
    let in_d = replayed(&d, 1).await.map_err(|e| e.to_string());
    within(d.stop()).await.ok();
    let _ = within(c2.stop()).await;
    let fe = FaultyStorage::new(shared.clone());
    let e = within(Wal::open(fe.storage(), P, quarantine())).await;
    let seen = match &e {
        Ok(e) => replayed(e, 1).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if z.is_ok() && !seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())) {
        return Err(format!(
            "LOST: C2 (running; its newest object {k} moved aside, no jump; {dead} a filler: \
             C1's dead start object; C2's start {start}) acknowledged \"z\" ({z:?}) after D \
             opened; D replays {in_d:?}, a later open replays {seen:?}; listed {:?}",
            listed(&shared).await
        ));
    }
    Ok(())
}

// FAILED before the start above a placeholder tip, whose fix makes this setup
// unreachable (an open that failed forever; no loss reached): D's open and every
// open after it fail "an older writer under t kept collecting past the
// keys 5 walks stopped at; repeat the open once it is quiet". D's walk
// from C2's object 69 lands its marker on the freed key 70 (blocked = 70);
// `block_past_moved_aside` skips 71 (listed: `!recovered.present.contains`),
// though what is listed there is a filler, which C2's run steps over; then
// `recovery::run_went_past` lists 71, C1's dead start object (epoch 6 < D's,
// `reclaim_boundary` 71 > 70), and `passes` reads it as "the older writer
// went on past the block and collected it": recover again, the same on every
// listing, LISTINGS times, then the transient error. Nothing changes between
// opens (the dead start object stays forever: rule 8), so it never gets
// "quiet".
#[tokio::test(start_paused = true)]
#[ignore = "setup unreachable since the start above a placeholder tip; run_went_past's count of a filler above the block is open (issue 32 note)"]
async fn a_running_writers_newest_object_moved_aside_below_a_filler_fences_it() {
    if let Err(e) = filler_after_a_moved_aside_object(false).await {
        panic!("{e}");
    }
}

// FAILED likewise: the same with every process stopped first (C2 killed), as the
// refusal advises: every open after the move fails with the same transient
// error, forever (same mechanism: `run_went_past` counts the filler at 71,
// C1's dead start object, as evidence of collection past the block at 70).
#[tokio::test(start_paused = true)]
#[ignore = "setup unreachable since the start above a placeholder tip; run_went_past's count of a filler above the block is open (issue 32 note)"]
async fn a_stopped_writers_newest_object_moved_aside_below_a_filler_lets_the_store_open() {
    if let Err(e) = filler_after_a_moved_aside_object(true).await {
        panic!("{e}");
    }
}
