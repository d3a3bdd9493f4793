//! Chain selection at recovery: which objects form the store's history.
//!
//! Every object links to its predecessor (sequence and epoch). An object is
//! *complete* when following links from it reaches a first object (one with
//! no link), or a link to a sequence below the object's reclaim boundary
//! (the predecessor was collected, which the boundary allows). The tip is
//! the complete object with the largest epoch, then the largest sequence.
//! Only the tip's chain is indexed; every other object is an orphan, never
//! read, but its sequence and epoch still count when the next ones are
//! chosen.
//!
//! Pure: summaries in, a selection out. Completeness is computed once per
//! object, in sequence order (links always point to lower sequences), so the
//! selection is linear in the number of objects.

use std::collections::{BTreeMap, HashMap};

use crate::format::Link;

/// What chain selection needs of one object (all of it is in the tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectSummary {
    /// The object's sequence.
    pub sequence: u64,
    /// The epoch of its writer.
    pub epoch: u64,
    /// Its predecessor.
    pub link: Option<Link>,
    /// The reclaim boundary it carries.
    pub reclaim_boundary: u64,
}

/// The outcome of chain selection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The tip, when there are objects.
    pub tip: Option<ObjectSummary>,
    /// The tip's chain at or above its reclaim boundary, ascending: the
    /// objects to index.
    pub chain: Vec<u64>,
    /// Objects of the tip's chain below its boundary (collectable), ascending.
    pub below_boundary: Vec<u64>,
    /// Every other object, ascending.
    pub orphans: Vec<u64>,
    /// The largest sequence present (0 when none).
    pub max_sequence: u64,
    /// The largest epoch present (0 when none).
    pub max_epoch: u64,
}

/// Why no history could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no complete chain among {objects} objects: the newest object {newest} has a missing predecessor at sequence {missing}")]
pub struct NoCompleteChain {
    /// Objects present.
    pub objects: usize,
    /// The newest object's sequence.
    pub newest: u64,
    /// The first missing predecessor walking back from the newest object.
    pub missing: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    /// The chain reaches an object without a link.
    First,
    /// The chain breaks at a link to this sequence.
    Missing(u64),
}

/// Chooses the tip and its chain among `objects` (keyed by sequence).
pub fn select(objects: &BTreeMap<u64, ObjectSummary>) -> Result<Selection, NoCompleteChain> {
    let mut roots: HashMap<u64, Root> = HashMap::with_capacity(objects.len());
    for (&sequence, object) in objects {
        let root = match object.link {
            None => Root::First,
            Some(link) => match objects.get(&link.sequence) {
                Some(pred) if pred.epoch == link.epoch && link.sequence < sequence => roots
                    .get(&link.sequence)
                    .copied()
                    .unwrap_or(Root::Missing(link.sequence)),
                _ => Root::Missing(link.sequence),
            },
        };
        roots.insert(sequence, root);
    }
    let complete = |o: &ObjectSummary| match roots.get(&o.sequence) {
        Some(Root::First) => true,
        Some(Root::Missing(missing)) => *missing < o.reclaim_boundary,
        None => false,
    };

    let mut selection = Selection {
        max_sequence: objects.keys().next_back().copied().unwrap_or(0),
        max_epoch: objects.values().map(|o| o.epoch).max().unwrap_or(0),
        ..Selection::default()
    };
    let tip = objects
        .values()
        .filter(|o| complete(o))
        .max_by_key(|o| (o.epoch, o.sequence));
    let Some(tip) = tip.copied() else {
        return match objects.values().next_back() {
            None => Ok(selection),
            Some(newest) => Err(NoCompleteChain {
                objects: objects.len(),
                newest: newest.sequence,
                missing: match roots.get(&newest.sequence) {
                    Some(Root::Missing(m)) => *m,
                    _ => newest.sequence,
                },
            }),
        };
    };

    let mut on_chain = Vec::new();
    let mut cursor = Some(tip);
    while let Some(object) = cursor {
        on_chain.push(object.sequence);
        cursor = object
            .link
            .and_then(|link| objects.get(&link.sequence))
            .filter(|pred| Some(pred.epoch) == object.link.map(|l| l.epoch))
            .copied();
    }
    on_chain.reverse();
    for &sequence in &on_chain {
        if sequence >= tip.reclaim_boundary || sequence == tip.sequence {
            selection.chain.push(sequence);
        } else {
            selection.below_boundary.push(sequence);
        }
    }
    selection.orphans = objects
        .keys()
        .copied()
        .filter(|s| on_chain.binary_search(s).is_err())
        .collect();
    selection.tip = Some(tip);
    Ok(selection)
}

/// The orphans above the tip, ascending: objects recovery will not replay
/// although they are newer than everything it does (their chain is broken
/// below them, or they belong to another history). Empty without a tip.
pub fn above_tip(selection: &Selection) -> Vec<u64> {
    match selection.tip {
        None => Vec::new(),
        Some(tip) => selection
            .orphans
            .iter()
            .copied()
            .filter(|s| *s > tip.sequence)
            .collect(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A summary from plain numbers (also used by `wal::quarantine`'s tests).
    pub(crate) fn obj(
        sequence: u64,
        epoch: u64,
        link: Option<(u64, u64)>,
        boundary: u64,
    ) -> ObjectSummary {
        ObjectSummary {
            sequence,
            epoch,
            link: link.map(|(sequence, epoch)| Link { sequence, epoch }),
            reclaim_boundary: boundary,
        }
    }

    /// Summaries keyed by sequence.
    pub(crate) fn map(objects: &[ObjectSummary]) -> BTreeMap<u64, ObjectSummary> {
        objects.iter().map(|o| (o.sequence, *o)).collect()
    }

    #[test]
    fn empty_prefix_has_no_tip() {
        let s = select(&BTreeMap::new()).unwrap();
        assert_eq!(s, Selection::default());
    }

    #[test]
    fn linear_chain_is_indexed_whole() {
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(3, 1, Some((2, 1)), 1),
        ]))
        .unwrap();
        assert_eq!(s.tip.unwrap().sequence, 3);
        assert_eq!(s.chain, vec![1, 2, 3]);
        assert!(s.orphans.is_empty());
    }

    #[test]
    fn orphans_below_and_above_the_tip() {
        // 2 failed (orphan below the tip, 4 links past it); 5 lost its
        // predecessor (orphan above the tip); 6 is a stray object.
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(4, 1, Some((1, 1)), 1),
            obj(5, 1, Some((3, 1)), 1),
        ]))
        .unwrap();
        assert_eq!(s.tip.unwrap().sequence, 4);
        assert_eq!(s.chain, vec![1, 4]);
        assert_eq!(s.orphans, vec![2, 5]);
        assert_eq!(s.max_sequence, 5);
    }

    #[test]
    fn larger_epoch_wins_over_larger_sequence() {
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 2, Some((1, 1)), 1),
            obj(3, 1, Some((1, 1)), 1),
        ]))
        .unwrap();
        assert_eq!(s.tip.unwrap().sequence, 2);
        assert_eq!(s.orphans, vec![3]);
        assert_eq!(s.max_epoch, 2);
    }

    #[test]
    fn a_link_with_the_wrong_epoch_breaks_the_chain() {
        let s = select(&map(&[obj(1, 1, None, 1), obj(2, 1, Some((1, 7)), 1)])).unwrap();
        assert_eq!(s.tip.unwrap().sequence, 1);
        assert_eq!(s.orphans, vec![2]);
    }

    #[test]
    fn a_missing_predecessor_below_the_boundary_is_collected_not_missing() {
        let s = select(&map(&[
            obj(5, 1, Some((4, 1)), 5),
            obj(6, 1, Some((5, 1)), 5),
        ]))
        .unwrap();
        assert_eq!(s.tip.unwrap().sequence, 6);
        assert_eq!(s.chain, vec![5, 6]);
        // The same gap above the boundary is a missing object.
        let err = select(&map(&[
            obj(5, 1, Some((4, 1)), 4),
            obj(6, 1, Some((5, 1)), 4),
        ]))
        .unwrap_err();
        assert_eq!(err.missing, 4);
        assert_eq!(err.newest, 6);
    }

    #[test]
    fn chain_objects_below_the_boundary_are_collectable() {
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(3, 1, Some((2, 1)), 3),
        ]))
        .unwrap();
        assert_eq!(s.chain, vec![3]);
        assert_eq!(s.below_boundary, vec![1, 2]);
    }

    #[test]
    fn orphans_above_the_tip_are_named_and_those_below_are_not() {
        // 3 is missing: the tip falls back to 2, and 4 and 5 (whose chain
        // breaks at 3) are above it.
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(4, 1, Some((3, 1)), 1),
            obj(5, 1, Some((4, 1)), 1),
        ]))
        .unwrap();
        assert_eq!(above_tip(&s), vec![4, 5]);
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(3, 1, Some((1, 1)), 1),
        ]))
        .unwrap();
        // 2 is an orphan below the tip (a failed create that landed late).
        assert_eq!(s.orphans, vec![2]);
        assert!(above_tip(&s).is_empty());
        assert!(above_tip(&Selection::default()).is_empty());
    }

    #[test]
    fn a_broken_tip_falls_back_to_the_latest_complete_object() {
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(4, 2, Some((3, 2)), 1),
        ]))
        .unwrap();
        assert_eq!(s.tip.unwrap().sequence, 2);
        assert_eq!(s.orphans, vec![4]);
    }
}
