//! Attacks on three rules of damage recovery (rfcs/0006, Lemma 2, "Damage
//! the tip links over", "An object moved aside at the run's end"; the
//! damaged header's boundary in `missing::missing_objects`).
//!
//! Deterministic: paused time on the memory backend; each process gets its
//! own fault wrapper over one shared store. Damage at rest is made by
//! rewriting an object's bytes in the shared store (one byte flipped).

use futures::StreamExt;
use objwal::format::{entry_id, sequence_of};
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::{Error, Storage, Wal, WalReader};

use crate::attack32::{config, key, listed, replayed, until, P};
use crate::attack34::{move_aside, quarantine, rot, Rot};
use crate::common::*;

pub(crate) async fn reader_replays(shared: &Storage, region: u64) -> Result<Vec<String>, String> {
    let reader = within(WalReader::open(shared.clone(), P, quarantine()))
        .await
        .map_err(|e| format!("reader open: {e}"))?;
    let mut s = Box::pin(reader.read(region, 0));
    let mut out = Vec::new();
    while let Some(e) = within(s.next()).await {
        out.push(String::from_utf8_lossy(&e.map_err(|e| format!("read: {e}"))?.data).into_owned());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// 1. A moved-aside object that carried a jump, at the run's end.
// ---------------------------------------------------------------------------

/// `A` lands "a" at `s`, then a flush mark of region 2 far ahead of its
/// ids: the object `J = s+1` carries a jump to `s+500`. `J` (A's newest
/// object, the run's end) rots at rest. Returns `A`, `s`, `J`, the far key.
async fn jumped_then_rotted(shared: &Storage, at: Rot) -> (Wal, u64, u64, u64) {
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    let id_a = within(a.append(vec![(1, b("a"))])).await.unwrap()[0];
    let s = sequence_of(id_a);
    let far = entry_id(s + 500, 1);
    within(a.obsolete(2, far)).await.unwrap();
    within(a.flush()).await.unwrap();
    until("J lands", || async {
        listed(shared).await.contains(&(s + 1))
    })
    .await;
    let j = *listed(shared).await.last().unwrap();
    assert_eq!(j, s + 1, "{:?}", listed(shared).await);
    rot(shared, j, at).await;
    (a, s, j, s + 500)
}

/// As the refusal says: stop the older process, then move the object
/// aside. `A` stops cleanly; `J` moved aside; `C` must open and replay
/// "a", write "c"; a later open replays "a", "c".
async fn jump_moved_aside_after_stop(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, s, j, far) = jumped_then_rotted(&shared, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fb.storage(), P, quarantine())).await;
    let first = match first {
        Err(e) => e.to_string(),
        Ok(w) => {
            // Opened over the rotted run end: then A must be fenced.
            let late = within(a.append(vec![(1, b("late"))])).await;
            assert!(
                matches!(late, Err(Error::Fenced { .. })),
                "B opened over the rotted jump object {j} ({at:?}); A's append answered {late:?}, B replays {:?}; listed {:?}",
                replayed(&w, 1).await,
                listed(&shared).await
            );
            return;
        }
    };
    assert!(first.contains(&key(j)), "{first}");
    let stopped = within(a.stop()).await;
    let at_stop = listed(&shared).await;
    assert!(move_aside(&shared, j).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after A stopped ({stopped:?}) and the jump object {j} ({at:?}) was moved \
             aside: {e}; s = {s}, far = {far}, listed at stop {at_stop:?}; first refusal {first}"
        ),
    };
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a"]);
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    let now = listed(&shared).await;
    let d = within(Wal::open(fb.storage(), P, quarantine()))
        .await
        .unwrap_or_else(|e| panic!("the open after C: {e}; listed {now:?}"));
    assert_eq!(replayed(&d, 1).await.unwrap(), ["a", "c"]);
    within(d.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(vec!["a".into(), "c".into()])
    );
}

#[tokio::test(start_paused = true)]
async fn a_rotted_jump_object_at_the_run_s_end_moved_aside_after_a_stop_lets_the_store_open() {
    jump_moved_aside_after_stop(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_jump_object_with_a_rotted_footer_moved_aside_after_a_stop_lets_the_store_open() {
    jump_moved_aside_after_stop(Rot::Footer).await;
}

#[tokio::test(start_paused = true)]
async fn a_jump_object_with_a_rotted_header_moved_aside_after_a_stop_lets_the_store_open() {
    jump_moved_aside_after_stop(Rot::Header).await;
}

/// The weaker history: the operator moves `J` aside while `A` still runs
/// (not what the refusal asks). `C` opens; `A`'s next append lands past
/// the jump, far from `C`'s keys. It must be fenced, or a later open must
/// replay it.
async fn jump_moved_aside_while_running(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, s, j, far) = jumped_then_rotted(&shared, at).await;
    assert!(move_aside(&shared, j).await);
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("the open after {j} was moved aside: {e}"),
    };
    let z = within(a.append(vec![(1, b("z"))])).await;
    let in_c = replayed(&c, 1).await;
    if z.is_ok() {
        within(c.stop()).await.ok();
        let fd = FaultyStorage::new(shared.clone());
        let d = within(Wal::open(fd.storage(), P, quarantine())).await;
        let seen = match &d {
            Ok(d) => replayed(d, 1).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        assert!(
            seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
            "A (still running; {j} ({at:?}) moved aside under it) acknowledged \"z\" ({z:?}, \
             seq {:?}) after C opened (C replays {in_c:?}); a later open replays {seen:?}; \
             s = {s}, far = {far}, listed {:?}",
            z.as_ref().map(|ids| sequence_of(ids[0])),
            listed(&shared).await
        );
    } else {
        assert!(matches!(z, Err(Error::Fenced { .. })), "{z:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_jump_object_with_a_rotted_header_moved_aside_under_a_running_writer_fences_it() {
    jump_moved_aside_while_running(Rot::Header).await;
}

/// `A`'s run went past the jump: "z" at `s+501` links to `J`. Then `J`
/// rots (now under the tip: the tip's link), `A` stops. Under Quarantine
/// the open must replay "a" and "z" (J held nothing but marks), and so
/// after `J` is moved aside.
async fn jump_under_the_tip(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    let id_a = within(a.append(vec![(1, b("a"))])).await.unwrap()[0];
    let s = sequence_of(id_a);
    within(a.obsolete(2, entry_id(s + 500, 1))).await.unwrap();
    let z = within(a.append(vec![(1, b("z"))])).await.unwrap()[0];
    assert!(sequence_of(z) > s + 500);
    within(a.stop()).await.unwrap();
    let j = s + 1;
    assert!(
        listed(&shared).await.contains(&j),
        "{:?}",
        listed(&shared).await
    );
    rot(&shared, j, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let opened = within(Wal::open(fb.storage(), P, quarantine())).await;
    let before_move = match &opened {
        Ok(w) => format!("opened, replays {:?}", replayed(w, 1).await),
        Err(e) => format!("refused: {e}"),
    };
    if let Ok(w) = &opened {
        assert_eq!(
            replayed(w, 1).await.map_err(|e| e.to_string()),
            Ok(vec!["a".to_owned(), "z".to_owned()]),
            "rot {at:?} of {j}; listed {:?}",
            listed(&shared).await
        );
        within(w.stop()).await.unwrap();
    }
    assert!(move_aside(&shared, j).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after {j} ({at:?}) was moved aside: {e}; before: {before_move}"),
    };
    assert_eq!(
        replayed(&c, 1).await.map_err(|e| e.to_string()),
        Ok(vec!["a".to_owned(), "z".to_owned()]),
        "after the move; before: {before_move}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rotted_jump_object_under_the_tip_keeps_what_follows_it() {
    jump_under_the_tip(Rot::FirstSegment).await;
}

#[tokio::test(start_paused = true)]
async fn a_jump_object_with_a_rotted_header_under_the_tip_keeps_what_follows_it() {
    jump_under_the_tip(Rot::Header).await;
}

// ---------------------------------------------------------------------------
// 2. A rotted void between the tip's predecessor and the tip (rule 1).
// ---------------------------------------------------------------------------

/// `A` lands "a" at `s`; a batch "x" fails but its object `V` lands (a
/// void); "b" lands at `V+1`, linking over `V` to `s`. Returns `A`, `V`.
pub(crate) async fn void_under_the_tip(shared: &Storage) -> (Wal, u64) {
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
    assert_eq!(sequence_of(bid), v + 1);
    (a, v)
}

/// The void rots at rest (`at`). `B` (Quarantine) must refuse naming it,
/// or open, fence `A` and replay "a", "b" (V's header, A's own epoch). Then `A` stops, `V` is moved aside, and the open must replay
/// "a", "b" and be writable.
async fn rotted_void_stop_and_move(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, v) = void_under_the_tip(&shared).await;
    rot(&shared, v, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fb.storage(), P, quarantine())).await;
    let first = match first {
        Err(e) => {
            assert!(e.to_string().contains(&key(v)), "{e}");
            e.to_string()
        }
        Ok(w) => {
            // A flipped header byte may go unseen: the tail's copy of the
            // header is what recovery reads (then V is judged intact).
            let late = within(a.append(vec![(1, b("late"))])).await;
            assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
            assert_eq!(replayed(&w, 1).await.unwrap(), ["a", "b"]);
            return;
        }
    };
    within(a.stop()).await.unwrap();
    assert!(move_aside(&shared, v).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "after A stopped and the void {v} ({at:?}) was moved aside: {e}; listed {:?}; first: {first}",
            listed(&shared).await
        ),
    };
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a", "b"]);
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(vec!["a".into(), "b".into(), "c".into()])
    );
    // And the default policy, now that no damage is under objects/.
    let d = within(Wal::open(fb.storage(), P, config())).await;
    assert!(d.is_ok(), "default-policy open: {:?}", d.err());
}

#[tokio::test(start_paused = true)]
async fn a_void_with_a_rotted_header_under_the_tip_refuses_until_moved_aside() {
    rotted_void_stop_and_move(Rot::Header).await;
}

#[tokio::test(start_paused = true)]
async fn a_void_with_rotted_entries_under_the_tip_refuses_or_fences_and_reopens_when_moved() {
    rotted_void_stop_and_move(Rot::FirstSegment).await;
}

/// The void's header rots; the operator moves it aside while `A` runs.
/// `C` must open, fence `A`, and replay every append `A` acknowledged.
#[tokio::test(start_paused = true)]
async fn a_void_with_a_rotted_header_moved_aside_under_a_running_writer_fences_it() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, v) = void_under_the_tip(&shared).await;
    rot(&shared, v, Rot::Header).await;
    assert!(move_aside(&shared, v).await);
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "after {v} was moved aside: {e}; listed {:?}",
            listed(&shared).await
        ),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a", "b"]);
}

// ---------------------------------------------------------------------------
// 3. Damage at the tip itself.
// ---------------------------------------------------------------------------

/// `A` lands "a", "b", "c" (three objects); stops. The tip (with "c")
/// rots at `at`. The Quarantine open may refuse or open (with "c" a
/// hole); once the tip is moved aside, opens must succeed and stay
/// writable across reopens.
async fn rotted_tip(at: Rot) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    within(a.stop()).await.unwrap();
    let t = *listed(&shared).await.last().unwrap();
    rot(&shared, t, at).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(w) => {
            let seen = replayed(&w, 1).await.map_err(|e| e.to_string());
            within(w.stop()).await.ok();
            format!("opened, replays {seen:?}")
        }
        Err(e) => format!("refused: {e}"),
    };
    assert!(move_aside(&shared, t).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "after the tip {t} ({at:?}) was moved aside: {e}; listed {:?}; first: {first}",
            listed(&shared).await
        ),
    };
    let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
    assert!(
        seen.as_ref()
            .is_ok_and(|s| s.starts_with(&["a".to_owned(), "b".to_owned()])),
        "{seen:?}; first: {first}"
    );
    within(c.append(vec![(1, b("d"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    let d = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(d) => d,
        Err(e) => panic!(
            "the open after C wrote: {e}; listed {:?}",
            listed(&shared).await
        ),
    };
    let seen = replayed(&d, 1).await.map_err(|e| e.to_string());
    assert!(
        seen.as_ref()
            .is_ok_and(|s| s.contains(&"d".to_owned()) && s.contains(&"a".to_owned())),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tip_with_a_rotted_header_moved_aside_lets_the_store_open() {
    rotted_tip(Rot::Header).await;
}

#[tokio::test(start_paused = true)]
async fn a_tip_with_rotted_entries_moved_aside_lets_the_store_open() {
    rotted_tip(Rot::FirstSegment).await;
}
