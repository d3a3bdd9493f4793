//! Reach: the sequences a process may create at, so that a newer process
//! never meets an older one's object at a sequence it uses for data.
//!
//! Pure: numbers in, numbers out. The actor, the open sequence and the
//! fencing model in the tests all use these functions, so the argument of
//! rfcs/0006 is checked on the code that runs.
//!
//! The rule (W5): a process of epoch `e` starts a create at sequence `s` only
//! if `s <= verified + GAP` or `s <= e`, where `verified` is a sequence that
//! was *present* in storage (some object existed there) before a fence probe
//! that found no newer epoch started. The maximum sequence present only ever
//! grows (collection never deletes the newest tip nor anything above it), and
//! a newer process lists after its claim, which came after every probe that
//! missed its fence. So every create of an older process lies at or below
//! `listed + GAP` of every newer process's listing, and a newer process that
//! starts its data above that ([`first_data_sequence`]) never meets one.
//!
//! The bound depends on nothing the older process can vary: not
//! `max_inflight_creates`, not a run of failed creates (failed sequences do
//! not advance `verified`), not a watermark that moves the next sequence.
//!
//! When the next batch lies beyond reach (after a run of failed creates, or
//! a watermark that jumped ahead), the process first lands a *marker*, an
//! empty object, just below it ([`marker_sequence`]), and probes. A marker is
//! the one create W5 lets go anywhere, and rule W6 makes that safe: a newer
//! process that meets an older process's *empty* object at one of its data
//! sequences deletes it and creates its own. Such an object landed after the
//! newer process listed (else it would lie below the data), so no probe of
//! its writer verified it, so its writer created nothing beyond it and
//! acknowledged nothing that depends on it.

/// How far beyond its last verified sequence a process may create, and so
/// the gap a newer process leaves between what it listed and its data.
pub(crate) const GAP: u64 = 64;

/// What a process knows about where it may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    epoch: u64,
    verified: u64,
    gap: u64,
}

impl Reach {
    /// A process of `epoch` whose `verified` sequence is known present
    /// before a probe that missed every newer fence.
    pub(crate) fn new(epoch: u64, verified: u64) -> Self {
        Self::with_gap(epoch, verified, GAP)
    }

    /// The same with another gap (the fencing model explores small ones).
    pub(crate) fn with_gap(epoch: u64, verified: u64, gap: u64) -> Self {
        Reach {
            epoch,
            verified,
            gap,
        }
    }

    /// The largest sequence an ordinary create may use (W5).
    pub(crate) fn limit(&self) -> u64 {
        self.verified.saturating_add(self.gap).max(self.epoch)
    }

    /// Whether a create at `sequence` keeps W5.
    pub(crate) fn allows(&self, sequence: u64) -> bool {
        sequence <= self.limit()
    }

    /// A probe that started when `present` was the highest sequence known
    /// present found no newer fence.
    pub(crate) fn verify(&mut self, present: u64) {
        self.verified = self.verified.max(present);
    }

    /// The verified sequence.
    pub(crate) fn verified(&self) -> u64 {
        self.verified
    }
}

/// The first sequence a process of `epoch` uses for data, after it listed
/// `listed_max` (the largest sequence present, orphans included) and wrote
/// its start object at `start`. Epoch 1 is the first process of a prefix
/// (fences are dense from 1), so nothing older can be creating.
pub(crate) fn first_data_sequence(epoch: u64, listed_max: u64, start: u64) -> u64 {
    first_data_sequence_with_gap(epoch, listed_max, start, GAP)
}

/// [`first_data_sequence`] with another gap.
pub(crate) fn first_data_sequence_with_gap(
    epoch: u64,
    listed_max: u64,
    start: u64,
    gap: u64,
) -> u64 {
    let after_start = start.saturating_add(1);
    if epoch <= 1 {
        after_start
    } else {
        after_start.max(listed_max.saturating_add(gap).saturating_add(1))
    }
}

/// Where a marker goes when the next batch, at `next`, lies beyond reach:
/// just below it, so one marker and one probe bring it within reach however
/// far it lies. The sequence was handed out already (to a failed batch) or
/// skipped (by a watermark), so the marker may meet one of this process's
/// own late objects there: any object present serves.
pub(crate) fn marker_sequence(reach: &Reach, next: u64) -> Option<u64> {
    if reach.allows(next) {
        return None;
    }
    Some(next.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_limit_is_the_verified_sequence_plus_the_gap_or_the_epoch() {
        let mut r = Reach::new(3, 10);
        assert_eq!(r.limit(), 10 + GAP);
        assert!(r.allows(10 + GAP));
        assert!(!r.allows(11 + GAP));
        r.verify(5);
        assert_eq!(r.verified(), 10, "verification never moves back");
        r.verify(20);
        assert_eq!(r.limit(), 20 + GAP);
        assert_eq!(Reach::new(500, 1).limit(), 500);
    }

    #[test]
    fn data_starts_beyond_every_older_create() {
        assert_eq!(first_data_sequence(1, 0, 1), 2);
        assert_eq!(first_data_sequence(1, 7, 8), 9);
        assert_eq!(first_data_sequence(2, 7, 8), 7 + GAP + 1);
        // A start object moved far up (late objects, a high epoch).
        assert_eq!(first_data_sequence(2, 7, 200), 201);
    }

    #[test]
    fn a_marker_lands_just_below_the_next_batch() {
        let r = Reach::new(2, 10);
        assert_eq!(marker_sequence(&r, 10 + GAP), None);
        assert_eq!(marker_sequence(&r, 11 + GAP), Some(10 + GAP));
        assert_eq!(marker_sequence(&r, 10_000), Some(9_999));
        let mut verified = r;
        verified.verify(9_999);
        assert!(
            verified.allows(10_000),
            "one marker brings the batch within reach"
        );
    }

    proptest! {
        /// Whatever an older process verified before a newer one listed
        /// (`verified <= listed`), every create W5 allows it lies below the
        /// newer process's first data sequence.
        #[test]
        fn older_creates_never_reach_newer_data(
            older_epoch in 1u64..1000,
            verified in 0u64..1_000_000,
            extra in 0u64..1000,
            newer_above in 1u64..1000,
            start_above in 1u64..500,
        ) {
            let listed = verified + extra;
            let newer_epoch = older_epoch + newer_above;
            // The newer start object is at or above both the listing and its epoch.
            let start = (listed + start_above).max(newer_epoch);
            let older = Reach::new(older_epoch, verified);
            let data = first_data_sequence(newer_epoch, listed, start);
            prop_assert!(older.limit() < data, "{} >= {}", older.limit(), data);
        }

        /// The newer process may create its first data batch once its start
        /// object is verified.
        #[test]
        fn the_first_data_batch_is_within_reach_of_the_start_object(
            epoch in 2u64..1000, listed in 0u64..1_000_000, above in 1u64..1000,
        ) {
            let start = (listed + above).max(epoch);
            let data = first_data_sequence(epoch, listed, start);
            prop_assert!(Reach::new(epoch, start).allows(data));
        }
    }
}
