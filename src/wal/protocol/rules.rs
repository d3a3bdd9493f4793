//! The fencing protocol's rules (rfcs/0006), pure: numbers and summaries
//! in, decisions out. The actor, `Wal::open` and the fencing model in the
//! tests call these functions, so the argument is checked on the code that
//! runs.
//!
//! A writer's *run* is its start object and the data objects after it, each
//! at the key after the one before ([`next_key`]): the sequence plus one, or,
//! after an object that carries a jump record, the sequence above the
//! jump. The rules:
//!
//! - **K1 resolved keys.** A writer never abandons a key of its run: a
//!   failed create is settled on the same key, by the same bytes again or by
//!   the writer's own *void* (the batch without its entries), whichever
//!   lands first.
//! - **K2 in-order acknowledgement.** A writer acknowledges the object at a
//!   key only when every key of its run from its start object through that
//!   key holds its own object. A key that holds another process's object
//!   fences it.
//! - **K3 window.** A writer creates only at the first [`WINDOW`] keys of its
//!   run that are not yet acknowledged, and never past a jump whose object is
//!   not yet acknowledged.
//! - **K4 the walk.** A newer process, after listing, walks the run of the
//!   tip it found: each next key either holds an object continuing the chain
//!   (adopted) or gets the newer process's *settle marker*, until a key holds
//!   an object that does not continue it (the marker, or any other). The
//!   older writer can never hold that key, so by K2 it acknowledges nothing
//!   at or after it, and by K3 it creates nothing at or after that key plus
//!   [`WINDOW`]: the start object goes there ([`start_sequence`]).
//! - **Fillers.** An older epoch's empty object that is not a settle marker
//!   (the start object of an opener whose open failed) may land at any key,
//!   also in a live writer's run. No request ever deletes it: the writer,
//!   the walk and a follower classify it alike ([`at_key`]) and step over
//!   it, so they always agree where the run goes on.

use crate::format::{self, Header, Link, Object};
use crate::EntryId;

/// How many keys of its run a writer may create at beyond its last
/// acknowledged one (K3), and so how far past the key a newer process's walk
/// stopped at an older writer's creates can still land. `max_inflight_creates`
/// is at most this.
pub(crate) const WINDOW: u64 = 64;

/// The key after `sequence` in its writer's run: the next sequence, or the
/// sequence above `jump` (the id the writer's later ids lie above) when the
/// object at `sequence` carries a jump record.
pub(crate) fn next_key(sequence: u64, jump: Option<EntryId>) -> u64 {
    let after = sequence.saturating_add(1);
    jump.map_or(after, |id| {
        after.max(format::sequence_of(id).saturating_add(1))
    })
}

/// The sequence of a newer process's start object, after its walk stopped at
/// `blocked` (a key holding an object that does not continue the older run)
/// and its listing found `listed_max`: above every create an older writer of
/// this protocol can still make (`blocked + WINDOW - 1`, K3), above every
/// create a writer of the probe-based release could make (`listed_max + 64`),
/// and at or above its own epoch (every object has `epoch <= sequence`).
pub(crate) fn start_sequence(blocked: u64, listed_max: u64, epoch: u64) -> u64 {
    start_sequence_with(blocked, listed_max, epoch, WINDOW)
}

/// [`start_sequence`] with another window (the fencing model explores small
/// ones).
pub(crate) fn start_sequence_with(blocked: u64, listed_max: u64, epoch: u64, window: u64) -> u64 {
    blocked
        .saturating_add(window)
        .max(listed_max.saturating_add(window + 1))
        .max(epoch)
}

/// The settle marker a process of `epoch` lands at `sequence` during its
/// walk: an empty object whose link names epoch 0, which no writer has, so it
/// never completes a chain (never a tip, never a predecessor). Its epoch is
/// kept at or below its sequence (rule W4) and at least 1.
pub(crate) fn settle_marker(sequence: u64, epoch: u64) -> Object {
    Object {
        header: Header {
            sequence,
            epoch: epoch.min(sequence).max(1),
            link: Some(Link {
                sequence: sequence.saturating_sub(1),
                epoch: 0,
            }),
            reclaim_boundary: 0,
        },
        segments: Vec::new(),
        marks: Vec::new(),
        releases: Vec::new(),
    }
}

/// Whether a header is a settle marker's.
pub(crate) fn is_settle_marker(header: &Header) -> bool {
    header.link.is_some_and(|l| l.epoch == 0)
}

/// Whether an object with `header` continues a chain whose tip is
/// `tip` (sequence, epoch): it links to exactly that object and is not a
/// settle marker.
pub(crate) fn continues(header: &Header, tip: (u64, u64)) -> bool {
    !is_settle_marker(header)
        && header.link
            == Some(Link {
                sequence: tip.0,
                epoch: tip.1,
            })
}

/// The most keys one round of a walk tries: four windows, so that a round
/// (its markers' creates, then one read of each key found taken: two round
/// trips) covers more keys than a writer with a full window in flight lands
/// in that time (issue 29 item 3).
pub(crate) const WALK_ROUND_MAX: u64 = 4 * WINDOW;

/// The keys a walk round tries at once: one at first, doubling each round
/// up to [`WALK_ROUND_MAX`], so a restart after a clean stop costs one
/// marker while a walk racing a busy older writer soon outpaces it.
pub(crate) fn walk_round_len(round: u32) -> u64 {
    1u64.checked_shl(round)
        .unwrap_or(WALK_ROUND_MAX)
        .min(WALK_ROUND_MAX)
}

/// What a writer does about a key of its run that another process's object
/// holds (found by a create): that object's epoch (`None`: not an objwal
/// object) and whether it is a settle marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// A newer process walked or wrote here: this writer is fenced.
    Fenced {
        /// The newest epoch known (at least `ours + 1`).
        newer: u64,
    },
    /// An older epoch's empty object that is not a settle marker: the start
    /// object of an opener whose open failed (or a marker of the
    /// probe-based release). Nothing was ever built on it, and nothing ever
    /// will be: it is a *filler*. The key is settled by it for good (no
    /// request deletes it: a delete would race the creates others may still
    /// make at that key), and the writer, a walk and a follower all step
    /// over it the same way: the run goes on at the next key, whose object
    /// links to this key as if the writer's own object were here.
    Filler,
    /// Anything else: another writer uses this prefix.
    Foreign,
}

/// Classifies another process's object met at one of our keys.
pub(crate) fn classify_taken(
    ours: u64,
    epoch: Option<u64>,
    settle_marker: bool,
    empty: bool,
) -> Taken {
    match epoch {
        Some(e) if settle_marker || e > ours => Taken::Fenced {
            newer: e.max(ours.saturating_add(1)),
        },
        Some(e) if e < ours && empty => Taken::Filler,
        _ => Taken::Foreign,
    }
}

/// What a key of a run holds, seen from the run's last object `at`
/// (sequence, epoch): the one decision the writer's outcome, the walk, the
/// recovery of a reader and a follower share, so that they all agree on
/// where a run goes (rfcs/0006, "Fillers").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtKey {
    /// The run's next object: it links to `at` exactly.
    Continues,
    /// A filler ([`Taken::Filler`]): the run goes on at the next key, as if
    /// its writer's object (of `at`'s epoch) stood here.
    Filler,
    /// Anything else: the run's writer can never hold this key.
    Blocks,
}

/// Classifies the object with `header` (`empty`: no segment, mark or
/// release) found at the key after `at` in a run.
pub(crate) fn at_key(header: &Header, empty: bool, at: (u64, u64)) -> AtKey {
    if continues(header, at) {
        return AtKey::Continues;
    }
    match classify_taken(at.1, Some(header.epoch), is_settle_marker(header), empty) {
        Taken::Filler => AtKey::Filler,
        Taken::Fenced { .. } | Taken::Foreign => AtKey::Blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_next_key_follows_a_jump() {
        assert_eq!(next_key(7, None), 8);
        assert_eq!(next_key(7, Some(format::entry_id(100, 3))), 101);
        // A jump below the next key changes nothing.
        assert_eq!(next_key(7, Some(format::entry_id(3, 1))), 8);
        assert_eq!(next_key(7, Some(format::entry_id(7, 1))), 8);
    }

    #[test]
    fn a_settle_marker_never_continues_a_chain() {
        let m = settle_marker(10, 3);
        assert!(is_settle_marker(&m.header));
        assert!(!continues(&m.header, (9, 0)));
        assert!(format::encode(&m).is_ok());
        assert_eq!(settle_marker(2, 9).header.epoch, 2, "epoch <= sequence");
        assert_eq!(settle_marker(1, 1).header.link.map(|l| l.sequence), Some(0));
    }

    #[test]
    fn walk_rounds_double_up_to_four_windows() {
        let lens: Vec<u64> = (0..11).map(walk_round_len).collect();
        assert_eq!(lens, [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
        assert_eq!(walk_round_len(200), WALK_ROUND_MAX);
    }

    #[test]
    fn what_a_writer_does_about_a_taken_key() {
        assert_eq!(
            classify_taken(5, Some(7), false, false),
            Taken::Fenced { newer: 7 }
        );
        assert_eq!(
            classify_taken(5, Some(2), true, true),
            Taken::Fenced { newer: 6 }
        );
        assert_eq!(classify_taken(5, Some(3), false, true), Taken::Filler);
        assert_eq!(classify_taken(5, Some(3), false, false), Taken::Foreign);
        assert_eq!(classify_taken(5, Some(5), false, true), Taken::Foreign);
        assert_eq!(classify_taken(5, None, false, false), Taken::Foreign);
    }

    #[test]
    fn a_run_continues_steps_over_a_filler_or_is_blocked() {
        let at = (9, 5);
        let header = |epoch, link: Option<(u64, u64)>| Header {
            sequence: 10,
            epoch,
            link: link.map(|(sequence, epoch)| Link { sequence, epoch }),
            reclaim_boundary: 0,
        };
        assert_eq!(
            at_key(&header(5, Some((9, 5))), false, at),
            AtKey::Continues
        );
        // A failed opener's start object (older, empty, linked elsewhere).
        assert_eq!(at_key(&header(3, Some((4, 2))), true, at), AtKey::Filler);
        // Older but with entries: another writer.
        assert_eq!(at_key(&header(3, Some((4, 2))), false, at), AtKey::Blocks);
        // A newer process's object, or any settle marker.
        assert_eq!(at_key(&header(6, Some((4, 2))), true, at), AtKey::Blocks);
        assert_eq!(
            at_key(&settle_marker(10, 2).header, true, at),
            AtKey::Blocks
        );
        // The writer's own object that does not link to `at`.
        assert_eq!(at_key(&header(5, Some((8, 5))), false, at), AtKey::Blocks);
    }

    proptest! {
        /// Whatever key an older writer was blocked at, every create K3 still
        /// lets it make lies below the newer start object.
        #[test]
        fn older_creates_stay_below_the_start_object(
            blocked in 1u64..1_000_000, listed_above in 0u64..1000, epoch in 1u64..1000,
            window_used in 0u64..WINDOW,
        ) {
            let listed_max = blocked.saturating_sub(1) + listed_above;
            let start = start_sequence(blocked, listed_max, epoch);
            prop_assert!(blocked + window_used < start);
            prop_assert!(start > listed_max + WINDOW);
            prop_assert!(start >= epoch);
        }
    }
}
