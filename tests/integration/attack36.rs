//! Attacks on the rules for damaged objects under `on_damaged_object =
//! "quarantine"` with damage whose header is TRULY unknown (both the
//! 64-byte header and the trailer's copy rotted, or the object truncated,
//! or unreadable): rfcs/0006 "Damage the tip links over"
//! (`recovery::check_no_newer_damage_under_the_tip`), Lemma 2 "A key the
//! older writer collected" (`recovery::run_went_past`), and the
//! moved-aside rules (`end_unknown`, `quarantine/`).
//!
//! Deterministic: paused time on the memory backend; each process gets its
//! own fault wrapper over one shared store. Damage at rest is made by
//! rewriting an object's bytes in the shared store.

use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::{MemoryStorage, StorageErrorKind};
use objwal::{Error, ObjectStorage, Storage, Wal};

use crate::attack32::{config, key, listed, replayed, P};
use crate::attack34::{bytes_of, kept_void_history, move_aside, quarantine};
use crate::attack35::{reader_replays, void_under_the_tip};
use crate::common::*;

/// Damage whose header recovery cannot know.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unknown {
    /// One byte of the 64-byte header (its sequence field) and one byte of
    /// the trailer's copy (its epoch field) flipped: neither copy decodes.
    HeaderAndTrailer,
    /// Truncated to 40 bytes: no header, no trailer.
    Truncated,
    /// Truncated to 100 bytes: the header reads, the trailer is gone.
    TruncatedPastHeader,
    /// Truncated to nothing: an empty object at the key.
    Emptied,
}

/// Rewrites the object at `sequence` damaged as `how`. Returns the intact
/// bytes.
pub(crate) async fn damage(shared: &Storage, sequence: u64, how: Unknown) -> bytes::Bytes {
    let intact = bytes_of(shared, sequence).await;
    let mut rotted = intact.to_vec();
    match how {
        Unknown::HeaderAndTrailer => {
            rotted[20] ^= 0xFF;
            let t = rotted.len() - 80;
            rotted[t + 8] ^= 0xFF;
        }
        Unknown::Truncated => rotted.truncate(40),
        Unknown::TruncatedPastHeader => rotted.truncate(100),
        Unknown::Emptied => rotted.clear(),
    }
    shared.delete(&key(sequence)).await.unwrap();
    shared
        .create(&key(sequence), bytes::Bytes::from(rotted))
        .await
        .unwrap();
    intact
}

fn opened_or(r: &Result<Wal, Error>) -> String {
    match r {
        Ok(_) => "opened".into(),
        Err(e) => format!("refused: {e}"),
    }
}

// ---------------------------------------------------------------------------
// 1. A newer process's start object, headerless, above the walk's block.
// ---------------------------------------------------------------------------

/// `A` (epoch 1) lands "a" at `T`. `B` (epoch 2) opens while `A` runs: its
/// walk lands a settle marker at `T+1`, its start object at `S`. `S` (B's
/// newest object; B wrote nothing yet) rots so that its header is unknown.
/// Returns `A`, `B`, `S`.
pub(crate) async fn newer_start_object_rotted(shared: &Storage, how: Unknown) -> (Wal, Wal, u64) {
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    let fb = FaultyStorage::new(shared.clone());
    let bw = within(Wal::open(fb.storage(), P, config())).await.unwrap();
    let s = *listed(shared).await.last().unwrap();
    damage(shared, s, how).await;
    (a, bw, s)
}

/// The refusal names `S` and (before this attack) said "stop the older
/// process, then move the object aside". The operator does that: `A` (the
/// older process, whose run the walk followed) stops; `S` is moved aside. `B`, the newer
/// process, still runs. The next open `C` succeeds; `B`'s next append must
/// then be fenced, or replayed by a later open.
async fn newer_start_object_moved_aside_after_the_older_stopped(how: Unknown) {
    newer_start_object_moved_aside_after_the_older_stopped_with(how, quarantine()).await;
}

/// The same, `C`'s open after the move under `after_move`.
async fn newer_start_object_moved_aside_after_the_older_stopped_with(
    how: Unknown,
    after_move: objwal::Config,
) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, bw, s) = newer_start_object_rotted(&shared, how).await;
    let fc = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fc.storage(), P, quarantine())).await;
    let first = match first {
        Err(e) => e.to_string(),
        Ok(c) => {
            // Opened over the damage: then B must be fenced or on C's chain.
            let n = within(bw.append(vec![(1, b("n"))])).await;
            let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
            assert!(
                matches!(n, Err(Error::Fenced { .. }))
                    || seen.as_ref().is_ok_and(|v| v.contains(&"n".to_owned())),
                "C opened over B's rotted start object {s} ({how:?}); B's append answered {n:?}, \
                 C replays {seen:?}"
            );
            return;
        }
    };
    assert!(first.contains(&key(s)), "{first}");
    // The older process: A.
    let _ = within(a.stop()).await;
    assert!(move_aside(&shared, s).await);
    let c = match within(Wal::open(fc.storage(), P, after_move)).await {
        Ok(c) => c,
        Err(e) => panic!(
            "the open after A stopped and {s} ({how:?}) was moved aside: {e}; first: {first}"
        ),
    };
    let n = within(bw.append(vec![(1, b("n"))])).await;
    if matches!(n, Err(Error::Fenced { .. })) {
        return;
    }
    let in_c = replayed(&c, 1).await.map_err(|e| e.to_string());
    within(c.stop()).await.ok();
    let _ = within(bw.stop()).await;
    let fd = FaultyStorage::new(shared.clone());
    let d = within(Wal::open(fd.storage(), P, quarantine())).await;
    let seen = match &d {
        Ok(d) => replayed(d, 1).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(
        n.is_err() || seen.as_ref().is_ok_and(|v| v.contains(&"n".to_owned())),
        "LOST: B (the newer process, left running as the refusal advised: \"stop the older \
         process\") acknowledged \"n\" ({n:?}) after C opened over its moved-aside start object \
         {s} ({how:?}); C replays {in_c:?}, a later open replays {seen:?}; listed {:?}; first \
         refusal: {first}",
        listed(&shared).await
    );
}

/// Broke before `recovery::block_past_moved_aside`: `B` acknowledged "n"
/// at `S+1` after `C` opened, and no later open replayed it. Once `S` was
/// moved aside nothing linked to it (headerless, quarantined), the tip was
/// `A`'s, `C`'s walk stopped at `B`'s marker, and `B`'s next key was free
/// below `C`'s start object. The open now blocks `S+1`.
#[tokio::test(start_paused = true)]
async fn a_newer_writers_headerless_start_object_moved_aside_after_the_older_stopped_keeps_its_next_append(
) {
    newer_start_object_moved_aside_after_the_older_stopped(Unknown::HeaderAndTrailer).await;
}

/// As above, with the start object truncated to 40 bytes.
#[tokio::test(start_paused = true)]
async fn a_newer_writers_truncated_start_object_moved_aside_after_the_older_stopped_keeps_its_next_append(
) {
    newer_start_object_moved_aside_after_the_older_stopped(Unknown::Truncated).await;
}

/// As above: `C`'s open after the move under the default policy
/// (moved-aside objects are left out under either policy).
#[tokio::test(start_paused = true)]
async fn a_newer_writers_headerless_start_object_moved_aside_then_a_default_policy_open_keeps_its_next_append(
) {
    newer_start_object_moved_aside_after_the_older_stopped_with(
        Unknown::HeaderAndTrailer,
        config(),
    )
    .await;
}

/// The contrast: `S` truncated past its header (the header reads). `S`
/// is then a link of the chain (epoch 2, its link known), the tip, and
/// the walk follows `B`'s run: `B` is fenced whatever the operator does.
#[tokio::test(start_paused = true)]
async fn a_newer_writers_start_object_truncated_past_its_header_keeps_the_newer_writer_fenced() {
    newer_start_object_moved_aside_after_the_older_stopped(Unknown::TruncatedPastHeader).await;
}

/// The same history, but the operator stops both processes before the
/// move: nothing is lost, the store opens and is writable.
#[tokio::test(start_paused = true)]
async fn a_newer_writers_headerless_start_object_moved_aside_after_both_stopped_lets_the_store_open(
) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, bw, s) = newer_start_object_rotted(&shared, Unknown::HeaderAndTrailer).await;
    let fc = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fc.storage(), P, quarantine())).await;
    assert!(first.is_err(), "{}", opened_or(&first));
    let _ = within(a.stop()).await;
    let _ = within(bw.stop()).await;
    assert!(move_aside(&shared, s).await);
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after both stopped and {s} was moved aside: {e}"),
    };
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a"]);
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(vec!["a".into(), "c".into()])
    );
}

/// The same refusal and move (A stopped, B running), but `B` appends "n"
/// before `C` opens: `C`'s recovery sees `B`'s object at `S+1` linking to
/// the moved-aside `S`, bridges `S` and walks `B`'s run: `B` is fenced and
/// "n" replayed.
#[tokio::test(start_paused = true)]
async fn a_newer_writers_headerless_start_object_moved_aside_then_appended_over_is_replayed() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, bw, s) = newer_start_object_rotted(&shared, Unknown::HeaderAndTrailer).await;
    let fc = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fc.storage(), P, quarantine())).await;
    assert!(first.is_err(), "{}", opened_or(&first));
    let _ = within(a.stop()).await;
    assert!(move_aside(&shared, s).await);
    let n = within(bw.append(vec![(1, b("n"))])).await;
    assert!(n.is_ok(), "{n:?}");
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after A stopped and {s} was moved aside, B appended: {e}"),
    };
    let late = within(bw.append(vec![(1, b("late"))])).await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    assert_eq!(
        replayed(&c, 1).await.map_err(|e| e.to_string()),
        Ok(vec!["a".to_owned(), "n".to_owned()])
    );
}

// ---------------------------------------------------------------------------
// 2. A headerless void the tip links over (check_no_newer_damage_under_the_tip).
// ---------------------------------------------------------------------------

/// `A` lands "a", a void `V` (failed batch "x"), "b" at `V+1` linking over
/// `V`. `V` rots (`how`). `B` (Quarantine) must refuse naming `V`, or open,
/// fence `A` and replay "a", "b". Then `A` stops, `V` is moved aside: the
/// open must replay "a", "b", be writable, and the default policy opens.
async fn headerless_void_under_the_tip(how: Unknown) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, v) = void_under_the_tip(&shared).await;
    damage(&shared, v, how).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fb.storage(), P, quarantine())).await;
    let first = match first {
        Err(e) => {
            assert!(e.to_string().contains(&key(v)), "{e}");
            e.to_string()
        }
        Ok(w) => {
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
            "after A stopped and the void {v} ({how:?}) was moved aside: {e}; listed {:?}; \
             first: {first}",
            listed(&shared).await
        ),
    };
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a", "b"], "{how:?}");
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(vec!["a".into(), "b".into(), "c".into()])
    );
    let d = within(Wal::open(fb.storage(), P, config())).await;
    assert!(d.is_ok(), "default-policy open: {:?}", d.err());
}

#[tokio::test(start_paused = true)]
async fn a_void_with_both_header_copies_rotted_under_the_tip_refuses_until_moved_aside() {
    headerless_void_under_the_tip(Unknown::HeaderAndTrailer).await;
}

#[tokio::test(start_paused = true)]
async fn a_truncated_void_under_the_tip_refuses_until_moved_aside() {
    headerless_void_under_the_tip(Unknown::Truncated).await;
}

#[tokio::test(start_paused = true)]
async fn a_void_truncated_past_its_header_under_the_tip_refuses_until_moved_aside() {
    headerless_void_under_the_tip(Unknown::TruncatedPastHeader).await;
}

/// The void rots headerless and is moved aside while `A` runs (no jump
/// anywhere). `C` must open, fence `A`, and replay "a", "b".
#[tokio::test(start_paused = true)]
async fn a_headerless_void_moved_aside_under_a_running_writer_fences_it() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, v) = void_under_the_tip(&shared).await;
    damage(&shared, v, Unknown::HeaderAndTrailer).await;
    assert!(move_aside(&shared, v).await);
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after {v} was moved aside: {e}"),
    };
    let late = within(a.append(vec![(1, b("late"))])).await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a", "b"]);
}

// ---------------------------------------------------------------------------
// 3. The writer's newest object headerless, at the run's end.
// ---------------------------------------------------------------------------

/// `A` lands "a", "b", "c" (one object each, no jump); its newest object
/// `k` (holding "c") rots (`how`). Returns `A`, `k`.
async fn newest_rotted(shared: &Storage, how: Unknown) -> (Wal, u64) {
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    let k = *listed(shared).await.last().unwrap();
    damage(shared, k, how).await;
    (a, k)
}

/// As the refusal says: `B` refuses naming `k`; `A` stops; `k` is moved
/// aside; `C` opens ("c" may be a hole), is writable, and a reopen replays
/// what `C` wrote.
async fn newest_rotted_stop_and_move(how: Unknown) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, k) = newest_rotted(&shared, how).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fb.storage(), P, quarantine())).await;
    match &first {
        Err(e) => assert!(e.to_string().contains(&key(k)), "{e}"),
        Ok(_) => {
            let late = within(a.append(vec![(1, b("late"))])).await;
            assert!(
                matches!(late, Err(Error::Fenced { .. })),
                "B opened over the rotted newest {k} ({how:?}); A's append answered {late:?}"
            );
            return;
        }
    }
    within(a.stop()).await.unwrap();
    assert!(move_aside(&shared, k).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after A stopped and {k} ({how:?}) was moved aside: {e}"),
    };
    let seen = replayed(&c, 1).await.unwrap();
    assert!(
        seen.starts_with(&["a".to_owned(), "b".to_owned()]),
        "{seen:?}"
    );
    within(c.append(vec![(1, b("d"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    let d = within(Wal::open(fb.storage(), P, quarantine()))
        .await
        .unwrap_or_else(|e| panic!("the open after C: {e}"));
    let seen = replayed(&d, 1).await.unwrap();
    assert!(
        seen.contains(&"a".to_owned()) && seen.contains(&"d".to_owned()),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_newest_object_with_both_header_copies_rotted_moved_aside_after_a_stop_lets_the_store_open(
) {
    newest_rotted_stop_and_move(Unknown::HeaderAndTrailer).await;
}

#[tokio::test(start_paused = true)]
async fn a_truncated_newest_object_moved_aside_after_a_stop_lets_the_store_open() {
    newest_rotted_stop_and_move(Unknown::Truncated).await;
}

#[tokio::test(start_paused = true)]
async fn an_emptied_newest_object_moved_aside_after_a_stop_lets_the_store_open() {
    newest_rotted_stop_and_move(Unknown::Emptied).await;
}

#[tokio::test(start_paused = true)]
async fn an_emptied_void_under_the_tip_refuses_until_moved_aside() {
    headerless_void_under_the_tip(Unknown::Emptied).await;
}

#[tokio::test(start_paused = true)]
async fn an_emptied_evidence_object_refuses_then_its_successor_replays_once_moved_aside() {
    headerless_evidence(Unknown::Emptied).await;
}

#[tokio::test(start_paused = true)]
async fn a_newest_object_truncated_past_its_header_moved_aside_after_a_stop_lets_the_store_open() {
    newest_rotted_stop_and_move(Unknown::TruncatedPastHeader).await;
}

/// Against the advice, without any jump: the headerless newest object `k`
/// is moved aside while `A` runs. `C`'s walk lands its settle marker on the
/// freed key `k` itself; `A`'s next key is `k+1`. `A`'s next append must be
/// fenced, or replayed by a later open.
async fn newest_moved_aside_while_running(how: Unknown) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, k) = newest_rotted(&shared, how).await;
    assert!(move_aside(&shared, k).await);
    let fc = FaultyStorage::new(shared.clone());
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("the open after {k} was moved aside: {e}"),
    };
    let z = within(a.append(vec![(1, b("z"))])).await;
    if matches!(z, Err(Error::Fenced { .. })) {
        return;
    }
    let in_c = replayed(&c, 1).await.map_err(|e| e.to_string());
    within(c.stop()).await.ok();
    let _ = within(a.stop()).await;
    let fd = FaultyStorage::new(shared.clone());
    let d = within(Wal::open(fd.storage(), P, quarantine())).await;
    let seen = match &d {
        Ok(d) => replayed(d, 1).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(
        z.is_err() || seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
        "LOST: A (running; its newest object {k} ({how:?}, no jump) moved aside under it) \
         acknowledged \"z\" ({z:?}) after C opened (C replays {in_c:?}); a later open replays \
         {seen:?}; listed {:?}",
        listed(&shared).await
    );
}

/// Against the advice (the writer still runs), with no jump. Broke before
/// `recovery::block_past_moved_aside`: `A` acknowledged "z" at `k+1`; the
/// headerless moved-aside `k` was not bridged, the tip was `k-1`, and
/// `C`'s walk landed its settle marker on the freed key `k` itself.
#[tokio::test(start_paused = true)]
async fn a_headerless_newest_object_without_a_jump_moved_aside_under_a_running_writer_fences_it() {
    newest_moved_aside_while_running(Unknown::HeaderAndTrailer).await;
}

/// With its header readable (truncated past it) the moved-aside object is
/// a link of the chain and the run's end: the walk goes on at `k+1`.
#[tokio::test(start_paused = true)]
async fn a_newest_object_truncated_past_its_header_moved_aside_under_a_running_writer_fences_it() {
    newest_moved_aside_while_running(Unknown::TruncatedPastHeader).await;
}

// ---------------------------------------------------------------------------
// 4. Lemma 2: the evidence above a collected key, headerless.
// ---------------------------------------------------------------------------

/// Kept-void history (A went past `V+1` and collected it; `X` is A's
/// marks-only object carrying the boundary past it). `X` rots (`how`). `B`
/// (Quarantine) must refuse naming `X`. `A` goes on ("after", linking to
/// `X`), then stops. `X` is moved aside: `C` must open and replay "after".
async fn headerless_evidence(how: Unknown) {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, v, x) = kept_void_history(&shared).await;
    damage(&shared, x, how).await;
    let fb = FaultyStorage::new(shared.clone());
    let opened = within(Wal::open(fb.storage(), P, quarantine())).await;
    match &opened {
        Err(e) => assert!(e.to_string().contains(&key(x)), "{e}"),
        Ok(_) => {
            let after = within(a.append(vec![(1, b("after"))])).await;
            panic!(
                "B opened over the rotted {x} ({how:?}) above its block; V = {v}; A's append \
                 answered {after:?}; listed {:?}",
                listed(&shared).await
            );
        }
    }
    let after = within(a.append(vec![(1, b("after"))])).await;
    assert!(after.is_ok(), "A's append after B refused: {after:?}");
    within(a.stop()).await.unwrap();
    // false: A collected X once "after" carried a boundary past it.
    let moved = move_aside(&shared, x).await;
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "after A stopped and {x} ({how:?}) was moved aside ({moved}): {e}; V = {v}, listed {:?}",
            listed(&shared).await
        ),
    };
    assert_eq!(
        replayed(&c, 1).await.map_err(|e| e.to_string()),
        Ok(vec!["after".to_owned()]),
        "LOST? {how:?}; listed {:?}",
        listed(&shared).await
    );
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    within(c.stop()).await.unwrap();
    assert_eq!(
        reader_replays(&shared, 1).await,
        Ok(vec!["after".into(), "c".into()])
    );
}

#[tokio::test(start_paused = true)]
async fn evidence_with_both_header_copies_rotted_refuses_then_its_successor_replays_once_moved_aside(
) {
    headerless_evidence(Unknown::HeaderAndTrailer).await;
}

#[tokio::test(start_paused = true)]
async fn truncated_evidence_refuses_then_its_successor_replays_once_moved_aside() {
    headerless_evidence(Unknown::Truncated).await;
}

#[tokio::test(start_paused = true)]
async fn evidence_truncated_past_its_header_refuses_then_its_successor_replays_once_moved_aside() {
    headerless_evidence(Unknown::TruncatedPastHeader).await;
}

/// Kept-void history; `X` headerless; `B` refuses; `A` crashes at once;
/// `X` moved aside: the next open must succeed (nothing live) and stay
/// writable.
#[tokio::test(start_paused = true)]
async fn headerless_newest_evidence_moved_aside_after_a_crash_lets_the_store_open() {
    let shared = Storage::new(MemoryStorage::new());
    let (a, _fa, v, x) = kept_void_history(&shared).await;
    damage(&shared, x, Unknown::HeaderAndTrailer).await;
    let fb = FaultyStorage::new(shared.clone());
    let first = within(Wal::open(fb.storage(), P, quarantine())).await;
    assert!(first.is_err(), "{}", opened_or(&first));
    drop(a);
    assert!(move_aside(&shared, x).await);
    let c = match within(Wal::open(fb.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!(
            "after A crashed and {x} was moved aside: {e}; V = {v}, listed {:?}",
            listed(&shared).await
        ),
    };
    within(c.append(vec![(1, b("c"))])).await.unwrap();
    assert_eq!(replayed(&c, 1).await.unwrap(), ["c"]);
}

// ---------------------------------------------------------------------------
// 5. An unreadable object: the open ends, naming it.
// ---------------------------------------------------------------------------

/// `A` lands "a", "b", "c" and stops. Every read of the middle object
/// fails (`kind`). The open (Quarantine) must end (no hang) with an error
/// naming it; once reads work, it opens and replays all three.
async fn unreadable(kind: StorageErrorKind) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    for p in ["a", "b", "c"] {
        within(a.append(vec![(1, b(p))])).await.unwrap();
    }
    within(a.stop()).await.unwrap();
    let all: Vec<u64> = listed(&shared).await.into_iter().collect();
    let m = all[all.len() - 2];
    let fb = FaultyStorage::new(shared.clone());
    fb.fail_next(Op::Read, &key(m), usize::MAX, kind);
    let cfg = objwal::Config {
        request_timeout: Some(std::time::Duration::from_secs(30)),
        ..quarantine()
    };
    match within(Wal::open(fb.storage(), P, cfg.clone())).await {
        Ok(w) => {
            let seen = replayed(&w, 1).await.map_err(|e| e.to_string());
            panic!("opened while {m} is unreadable ({kind:?}); replays {seen:?}");
        }
        Err(e) => assert!(format!("{e:?}").contains(&key(m)), "{e:?}"),
    }
    fb.clear_faults();
    let c = within(Wal::open(fb.storage(), P, cfg)).await.unwrap();
    assert_eq!(replayed(&c, 1).await.unwrap(), ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn an_object_every_read_of_which_fails_permanently_fails_the_open_naming_it() {
    unreadable(StorageErrorKind::Permanent).await;
}

#[tokio::test(start_paused = true)]
async fn an_object_every_read_of_which_fails_transiently_fails_the_open_naming_it() {
    unreadable(StorageErrorKind::Transient).await;
}

// ---------------------------------------------------------------------------
// 6. A dead start object as the tip, the newer writer's start object above
//    it headerless.
// ---------------------------------------------------------------------------

/// Releases every create `f` holds until one of `target` is held.
pub(crate) async fn release_until(f: &FaultyStorage, target: &str) {
    within(async {
        loop {
            f.wait_held(1).await;
            let held = f.held();
            if held.iter().any(|k| k == target) {
                return;
            }
            for k in held {
                f.release(&k);
            }
        }
    })
    .await
}

/// `A` (epoch 1) lands "a" at `T`. `O` (epoch 2) opens: its marker lands
/// at `T+1`, its start object's create at `T+65` is held. `N` (epoch 3)
/// opens (its walk stops at O's marker; its start object at `T+66`). O's
/// start object lands (a dead start object: O's open fails, fenced). `N`'s
/// start object rots headerless; the chain's tip is now O's dead start
/// object, whose run's next key is N's damaged start object: the open
/// refuses naming it. The operator stops `A` ("the older process") and
/// moves N's start object aside; `N` still runs. `C` opens; `N`'s next
/// append must be fenced, or replayed by a later open.
///
/// Broke before `recovery::block_past_moved_aside`: `N` acknowledged "z"
/// at `S+1`. The tip was O's dead start object `S-1`; `C`'s walk from it
/// landed its settle marker on the freed key `S`, and `N` went on at `S+1`.
#[tokio::test(start_paused = true)]
async fn a_newer_writers_headerless_start_object_above_a_dead_start_object_moved_aside_keeps_its_next_append(
) {
    let shared = Storage::new(MemoryStorage::new());
    let fa = FaultyStorage::new(shared.clone());
    let a = within(Wal::open(fa.storage(), P, config())).await.unwrap();
    within(a.append(vec![(1, b("a"))])).await.unwrap();
    let t = *listed(&shared).await.last().unwrap();
    let fo = FaultyStorage::new(shared.clone());
    fo.hold_creates(true);
    let o_storage = fo.storage();
    let o_opening = tokio::spawn(async move { Wal::open(o_storage, P, config()).await });
    release_until(&fo, &key(t + 65)).await;
    assert!(
        listed(&shared).await.contains(&(t + 1)),
        "{:?}",
        listed(&shared).await
    );
    let fnn = FaultyStorage::new(shared.clone());
    let n = within(Wal::open(fnn.storage(), P, config())).await.unwrap();
    let s = *listed(&shared).await.last().unwrap();
    assert!(s > t + 65, "N's start {s}, t = {t}");
    fo.hold_creates(false);
    fo.release_all();
    let o = within(o_opening).await.unwrap();
    assert!(o.is_err(), "O's open after N's: {}", opened_or(&o));
    assert!(listed(&shared).await.contains(&(t + 65)));
    damage(&shared, s, Unknown::HeaderAndTrailer).await;
    let fc = FaultyStorage::new(shared.clone());
    let first = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Err(e) => e.to_string(),
        Ok(c) => {
            let z = within(n.append(vec![(1, b("z"))])).await;
            let seen = replayed(&c, 1).await.map_err(|e| e.to_string());
            assert!(
                matches!(z, Err(Error::Fenced { .. }))
                    || seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
                "C opened over N's headerless start object {s}; N's append answered {z:?}, C \
                 replays {seen:?}"
            );
            return;
        }
    };
    assert!(first.contains(&key(s)), "{first}");
    let _ = within(a.stop()).await;
    assert!(move_aside(&shared, s).await);
    let c = match within(Wal::open(fc.storage(), P, quarantine())).await {
        Ok(c) => c,
        Err(e) => panic!("after A stopped and {s} was moved aside: {e}; first: {first}"),
    };
    let z = within(n.append(vec![(1, b("z"))])).await;
    if matches!(z, Err(Error::Fenced { .. })) {
        return;
    }
    let in_c = replayed(&c, 1).await.map_err(|e| e.to_string());
    within(c.stop()).await.ok();
    let _ = within(n.stop()).await;
    let fd = FaultyStorage::new(shared.clone());
    let d = within(Wal::open(fd.storage(), P, quarantine())).await;
    let seen = match &d {
        Ok(d) => replayed(d, 1).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(
        z.is_err() || seen.as_ref().is_ok_and(|v| v.contains(&"z".to_owned())),
        "LOST: N (the newer process, left running: the refusal said \"stop the older \
         process\") acknowledged \"z\" ({z:?}) after C opened over its moved-aside start object \
         {s} (the tip: O's dead start object {}); C replays {in_c:?}, a later open replays \
         {seen:?}; listed {:?}; first refusal: {first}",
        t + 65,
        listed(&shared).await
    );
}
