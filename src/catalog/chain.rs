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
//! A link may name a key that holds an older epoch's empty object, a
//! *filler* the linking run stepped over (rfcs/0006 rule 8: the run's
//! writer sealed the next object before it learned that the key was taken).
//! The run continues below the fillers: at its own object whose next key is
//! the first of them ([`predecessor`]). Fillers are never on a chain.
//!
//! Pure: summaries in, a selection out. Completeness is computed once per
//! object, in sequence order (links always point to lower sequences), so the
//! selection is linear in the number of objects, times the length of the
//! filler run a link goes into (as long as the opens that raced one writer:
//! a few keys; rfcs/0006, "Chain selection's cost").

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
    /// The run's next key after it: `sequence + 1`, or where its jump
    /// record sends the run.
    pub next_key: u64,
    /// Whether it holds nothing (no segment, mark or release) and is not a
    /// settle marker: a filler where a newer run's link names its key.
    pub empty: bool,
}

impl ObjectSummary {
    /// Whether it is a settle marker (its link names epoch 0): never a
    /// run's object, never a tip (rfcs/0006 K4).
    pub fn is_settle_marker(&self) -> bool {
        self.link.is_some_and(|l| l.epoch == 0)
    }

    /// Whether it is a filler to a run of `epoch`.
    pub fn is_filler_for(&self, epoch: u64) -> bool {
        self.empty && self.epoch < epoch
    }
}

/// Where the chain of `object` continues: `None` when it has no link,
/// `Some(Ok(s))` at the object of sequence `s`, `Some(Err(k))` broken at key
/// `k` (nothing of the linked run there; [`broken`] gives every key of the
/// break). A link to an object of the linked epoch is followed; a link to a
/// filler is followed down through the fillers below it to the run's object
/// whose next key is the first of them.
pub fn predecessor(
    objects: &BTreeMap<u64, ObjectSummary>,
    object: &ObjectSummary,
) -> Option<Result<u64, u64>> {
    follow(objects, object).map(|step| step.map_err(|b| b.high))
}

/// Where the chain of `object` breaks, when it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Break {
    /// The lowest key of the break: the key the linked run certainly used
    /// (its object below says its run went on there), or the linked key.
    pub low: u64,
    /// The highest key of the break, the one nearest the link: what a
    /// boundary must lie above to excuse it ([`predecessor`]'s key).
    pub high: u64,
    /// Where the run goes on above the break: the linking object, or the
    /// first of the fillers its link goes into.
    pub resume: u64,
}

/// Where the chain of `object` breaks: `None` when it has no link or its
/// predecessor is there. Between `low` and `high` the run's keys are
/// unknown: one object with a jump, or several, held them.
pub fn broken(objects: &BTreeMap<u64, ObjectSummary>, object: &ObjectSummary) -> Option<Break> {
    follow(objects, object)?.err()
}

/// The run's next key after `object`, stepped over fillers of `epoch`
/// that stand there (start objects of failed opens), up to `limit`.
pub fn next_key_over_fillers(
    objects: &BTreeMap<u64, ObjectSummary>,
    object: &ObjectSummary,
    epoch: u64,
    limit: u64,
) -> u64 {
    let mut key = object.next_key;
    while key < limit && objects.get(&key).is_some_and(|o| o.is_filler_for(epoch)) {
        key += 1;
    }
    key
}

fn follow(
    objects: &BTreeMap<u64, ObjectSummary>,
    object: &ObjectSummary,
) -> Option<Result<u64, Break>> {
    let link = object.link?;
    let at = |key: u64, resume: u64| Break {
        low: key,
        high: key,
        resume,
    };
    if link.sequence >= object.sequence {
        return Some(Err(at(link.sequence, object.sequence)));
    }
    match objects.get(&link.sequence) {
        Some(p) if p.epoch == link.epoch => return Some(Ok(link.sequence)),
        Some(p) if p.is_filler_for(link.epoch) => {}
        _ => return Some(Err(at(link.sequence, object.sequence))),
    }
    // `first`: the lowest key of the fillers that end at the link.
    let mut first = link.sequence;
    for (&sequence, below) in objects.range(..link.sequence).rev() {
        if below.epoch == link.epoch {
            // Fillers may also stand at the run's next keys above it (start
            // objects of failed opens); the first key past them that holds
            // nothing is where the break begins, not a filler's key.
            let key = next_key_over_fillers(objects, below, link.epoch, first);
            return Some(match key {
                _ if (first..=link.sequence).contains(&key) => Ok(sequence),
                // Keys of the run between it and the fillers are missing:
                // the break spans them. A boundary above the highest, the
                // one nearest the link, excuses every hole below; one at or
                // below it excuses none (an object the boundary keeps is
                // gone).
                _ if key < first => Err(Break {
                    low: key,
                    high: highest_absent(objects, key, first),
                    resume: first,
                }),
                _ => Err(at(link.sequence, object.sequence)),
            });
        }
        if sequence + 1 == first && below.is_filler_for(link.epoch) {
            first = sequence;
        }
        // Anything else lies inside a jump of the run, or the run's own
        // objects below were collected: look further down.
    }
    Some(Err(at(first.saturating_sub(1), first)))
}

/// The highest key in `low..high` that holds no object, or `high - 1`
/// when every key there holds one (`low < high`).
fn highest_absent(objects: &BTreeMap<u64, ObjectSummary>, low: u64, high: u64) -> u64 {
    let mut key = high - 1;
    for (&sequence, _) in objects.range(low..high).rev() {
        if sequence != key || key == low {
            break;
        }
        key -= 1;
    }
    if objects.contains_key(&key) {
        high - 1
    } else {
        key
    }
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
        let root = match predecessor(objects, object) {
            None => Root::First,
            Some(Ok(pred)) => roots.get(&pred).copied().unwrap_or(Root::Missing(pred)),
            Some(Err(missing)) => Root::Missing(missing),
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
        cursor = match predecessor(objects, &object) {
            Some(Ok(pred)) => objects.get(&pred).copied(),
            _ => None,
        };
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
            next_key: sequence + 1,
            empty: false,
        }
    }

    /// An older epoch's empty object (a filler to newer runs).
    pub(crate) fn filler(sequence: u64, epoch: u64) -> ObjectSummary {
        ObjectSummary {
            empty: true,
            ..obj(sequence, epoch, None, 1)
        }
    }

    /// Summaries keyed by sequence.
    pub(crate) fn map(objects: &[ObjectSummary]) -> BTreeMap<u64, ObjectSummary> {
        objects.iter().map(|o| (o.sequence, *o)).collect()
    }

    #[test]
    fn a_deleted_object_between_two_fillers_breaks_the_chain_at_its_own_key() {
        // Epoch 2 writes 3; epoch 1's fillers stand at 4 and 6; epoch 2's 5
        // links to the filler at 4 and 7 to the filler at 6 (boundary 5).
        // 5 is deleted by hand: the chain of 7 is broken at 5, not at the
        // filler's key 4 (that once accepted the chain across the hole when
        // the boundary was 5, and named no missing object below it).
        let mut objects = map(&[
            obj(3, 2, None, 1),
            filler(4, 1),
            obj(5, 2, Some((4, 2)), 1),
            filler(6, 1),
            obj(7, 2, Some((6, 2)), 5),
        ]);
        assert_eq!(predecessor(&objects, &objects[&7]), Some(Ok(5)));
        assert_eq!(predecessor(&objects, &objects[&5]), Some(Ok(3)));
        objects.remove(&5);
        assert_eq!(predecessor(&objects, &objects[&7]), Some(Err(5)));
        let tip = select(&objects)
            .ok()
            .and_then(|s| s.tip)
            .map(|t| t.sequence);
        assert_ne!(
            tip,
            Some(7),
            "a chain accepted across a missing object at its boundary"
        );
    }

    #[test]
    fn a_run_goes_on_past_its_fillers() {
        // Epoch 2 writes 3, 4; fillers of epoch 1 at 5 and 6 (start objects
        // of failed opens); its object at 7 links to the filler at 6.
        let s = select(&map(&[
            obj(1, 1, None, 1),
            obj(2, 2, Some((1, 1)), 1),
            obj(3, 2, Some((2, 2)), 1),
            obj(4, 2, Some((3, 2)), 1),
            filler(5, 1),
            filler(6, 1),
            obj(7, 2, Some((6, 2)), 1),
        ]))
        .unwrap();
        assert_eq!(s.tip.unwrap().sequence, 7);
        assert_eq!(s.chain, vec![1, 2, 3, 4, 7]);
        assert_eq!(s.orphans, vec![5, 6]);
    }

    #[test]
    fn a_run_goes_on_past_a_filler_at_its_jump() {
        // 3 jumps to 10 (its next key); a filler at 10; 11 links to it.
        let mut jumped = obj(3, 2, Some((2, 2)), 1);
        jumped.next_key = 10;
        let s = select(&map(&[
            obj(2, 2, None, 1),
            jumped,
            filler(5, 1),
            filler(10, 1),
            obj(11, 2, Some((10, 2)), 1),
        ]))
        .unwrap();
        assert_eq!(s.chain, vec![2, 3, 11]);
        // Without the jump the run's key 4 is missing below the fillers.
        let broken = select(&map(&[
            obj(2, 2, None, 1),
            obj(3, 2, Some((2, 2)), 1),
            filler(10, 1),
            obj(11, 2, Some((10, 2)), 1),
        ]))
        .unwrap();
        assert_eq!(broken.tip.unwrap().sequence, 3, "11 is broken at key 4");
    }

    #[test]
    fn a_filler_of_a_newer_epoch_or_with_content_breaks_the_link() {
        let not_a_filler = |o: ObjectSummary| {
            select(&map(&[obj(1, 2, None, 1), o, obj(3, 2, Some((2, 2)), 1)]))
                .unwrap()
                .chain
        };
        assert_eq!(not_a_filler(filler(2, 1)), vec![1, 3]);
        assert_eq!(
            not_a_filler(filler(2, 3)),
            vec![2],
            "a newer epoch's object"
        );
        assert_eq!(
            not_a_filler(obj(2, 1, None, 1)),
            vec![1],
            "not empty: 3 is broken"
        );
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
