//! The reference model's rules on hand-written answers: each rule refuses
//! the answer that breaks it and accepts the one that keeps it, so a model
//! that stopped checking something fails here.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use objwal::format::entry_id;
use objwal::{Entry, Hole};

use super::*;

fn entry(model: &Model, key: Key, id: u64) -> Entry {
    let e = &model.entries[&key];
    Entry {
        region: e.region,
        id,
        data: e.data.clone(),
    }
}

/// A model in `enqueued` mode with `n` entries of region 1 appended one
/// append each, the i-th at sequence 10 + i.
fn appended(enqueued: bool, n: u32) -> (Model, Vec<(Key, u64)>) {
    let mut model = Model::new(enqueued);
    let mut keys = Vec::new();
    for i in 0..n {
        let (key, _) = model.add(1, 8);
        let id = entry_id(10 + u64::from(i), 1);
        model
            .appended(&[key], &Ok(vec![id]), &HashMap::new())
            .unwrap();
        keys.push((key, id));
    }
    (model, keys)
}

fn replay(model: &Model, keys: &[(Key, u64)]) -> BTreeMap<u64, Vec<Entry>> {
    let entries = keys.iter().map(|(k, id)| entry(model, *k, *id)).collect();
    BTreeMap::from([(1, entries)])
}

#[test]
fn a_promised_entry_must_replay_exactly_once() {
    let (mut model, keys) = appended(false, 2);
    let missing = replay(&model, &keys[..1]);
    assert!(model
        .restarted(&missing, &[], &[], &BTreeSet::new())
        .is_err());
    let (mut model, keys) = appended(false, 2);
    let twice = replay(&model, &[keys[0], keys[1], keys[1]]);
    assert!(model.restarted(&twice, &[], &[], &BTreeSet::new()).is_err());
    let (mut model, keys) = appended(false, 2);
    let all = replay(&model, &keys);
    model.restarted(&all, &[], &[], &BTreeSet::new()).unwrap();
    // Replayed once, it must replay at every later restart.
    assert!(model
        .restarted(&replay(&model, &keys[..1]), &[], &[], &BTreeSet::new())
        .is_err());
}

#[test]
fn what_was_never_appended_released_or_gone_must_not_replay() {
    let (mut model, keys) = appended(false, 1);
    let mut stranger = replay(&model, &keys);
    stranger.get_mut(&1).unwrap().push(Entry {
        region: 1,
        id: entry_id(20, 1),
        data: bytes::Bytes::from_static(b"\xff\xff\x00\x00\x01junk"),
    });
    assert!(
        model
            .restarted(&stranger, &[], &[], &BTreeSet::new())
            .is_err(),
        "never appended"
    );
    let (mut model, keys) = appended(false, 1);
    model.release_answered(1, true, true);
    assert!(
        model
            .restarted(&replay(&model, &keys), &[], &[], &BTreeSet::new())
            .is_err(),
        "released"
    );
    // An entry that failed and did not replay is gone for good.
    let mut model = Model::new(false);
    let (key, _) = model.add(1, 8);
    let failed = Err(objwal::Error::NotDurable { reason: "x".into() });
    model.appended(&[key], &failed, &HashMap::new()).unwrap();
    model
        .restarted(&BTreeMap::new(), &[], &[], &BTreeSet::new())
        .unwrap();
    let back = replay(&model_with(key, 1), &[(key, entry_id(5, 1))]);
    assert!(
        model.restarted(&back, &[], &[], &BTreeSet::new()).is_err(),
        "gone, then back"
    );
}

/// A model that knows `key` of `region` (to build its bytes).
fn model_with(key: Key, region: u64) -> Model {
    let mut m = Model::new(false);
    while m.next <= key {
        m.add(region, 8);
    }
    m
}

#[test]
fn enqueued_losses_are_whole_objects_and_a_suffix() {
    let (mut model, keys) = appended(true, 3);
    model
        .restarted(&replay(&model, &keys[..1]), &[], &[], &BTreeSet::new())
        .unwrap();
    let (mut model, keys) = appended(true, 3);
    assert!(
        model
            .restarted(
                &replay(&model, &[keys[0], keys[2]]),
                &[],
                &[],
                &BTreeSet::new()
            )
            .is_err(),
        "not a suffix"
    );
    let (mut model, keys) = appended(true, 3);
    model.durable(keys[1].1);
    assert!(
        model
            .restarted(&replay(&model, &keys[..1]), &[], &[], &BTreeSet::new())
            .is_err(),
        "a barrier's entry lost"
    );
}

#[test]
fn reads_show_what_is_promised_and_hide_what_is_obsolete_or_released() {
    let (mut model, keys) = appended(false, 2);
    let (promised, _) = model.snapshot();
    let one = [entry(&model, keys[1].0, keys[1].1)];
    assert!(
        model.read(1, 0, &one, &[], &promised).is_err(),
        "promised entry missing"
    );
    model.obsoleted(1, keys[0].1);
    model.read(1, 0, &one, &[], &promised).unwrap();
    let both = [entry(&model, keys[0].0, keys[0].1), one[0].clone()];
    assert!(
        model.read(1, 0, &both, &[], &promised).is_err(),
        "obsolete entry readable"
    );
    model.release_answered(1, false, true);
    assert!(
        model.read(1, 0, &one, &[], &promised).is_err(),
        "released region readable"
    );
    model.read(1, 0, &[], &[], &promised).unwrap();
}

#[test]
fn a_hole_is_allowed_only_after_a_corrupted_read_and_only_where_it_says() {
    let (mut model, keys) = appended(false, 2);
    let (promised, _) = model.snapshot();
    let hole = Hole {
        region: 1,
        key: "k".into(),
        sequence: 10,
        first_id: keys[0].1,
        last_id: keys[0].1,
    };
    let rest = [entry(&model, keys[1].0, keys[1].1)];
    assert!(model
        .read(1, 0, &rest, std::slice::from_ref(&hole), &promised)
        .is_err());
    model.corruption = true;
    model
        .read(1, 0, &rest, std::slice::from_ref(&hole), &promised)
        .unwrap();
    assert!(
        model.read(1, 0, &[], &[hole], &promised).is_err(),
        "outside the hole"
    );
}

#[test]
fn appends_must_be_refused_on_released_regions_and_ids_must_rise() {
    let mut model = Model::new(false);
    model.release_answered(2, true, true);
    let (key, _) = model.add(2, 8);
    assert!(model
        .appended(&[key], &Ok(vec![entry_id(3, 1)]), &HashMap::new())
        .is_err());
    let (key, _) = model.add(1, 8);
    let floor = HashMap::from([(1, entry_id(3, 1))]);
    assert!(model
        .appended(&[key], &Ok(vec![entry_id(3, 1)]), &floor)
        .is_err());
    let (a, _) = model.add(1, 8);
    let (b, _) = model.add(3, 8);
    let split = Ok(vec![entry_id(4, 1), entry_id(5, 1)]);
    assert!(
        model.appended(&[a, b], &split, &HashMap::new()).is_err(),
        "one append, two objects"
    );
}

#[test]
fn an_append_answered_not_durable_never_replays_one_answered_storage_may() {
    let failed = |error: objwal::Error| {
        let mut model = Model::new(false);
        let (key, _) = model.add(1, 8);
        model
            .appended(&[key], &Err(error), &HashMap::new())
            .unwrap();
        let replayed = replay(&model, &[(key, entry_id(10, 1))]);
        model.restarted(&replayed, &[], &[], &BTreeSet::new())
    };
    let not_durable = objwal::Error::NotDurable {
        reason: "its void settled the key".into(),
    };
    assert!(failed(not_durable).is_err(), "NotDurable replayed");
    let storage = objwal::Error::Storage {
        source: objwal::storage::StorageError::transient("may still land"),
    };
    failed(storage).unwrap();
}

/// A reader reports a segment collection deleted under it as a hole
/// (issue 30 item 10(b)): allowed where every id of it is obsolete, a
/// violation above the watermark (with no corrupted read).
#[test]
fn a_reader_s_hole_is_allowed_only_over_obsolete_entries() {
    let (mut model, keys) = appended(false, 2);
    model.flushed(&keys.iter().map(|k| k.0).collect());
    let hole = |id: u64| Hole {
        region: 1,
        key: "k".into(),
        sequence: 10,
        first_id: id,
        last_id: id,
    };
    let rest = [entry(&model, keys[1].0, keys[1].1)];
    assert!(model.observed(1, 0, &rest, &[hole(keys[0].1)]).is_err());
    model.obsoleted(1, keys[0].1);
    model.observed(1, 0, &rest, &[hole(keys[0].1)]).unwrap();
    assert!(model.observed(1, 0, &[], &[hole(keys[1].1)]).is_err());
}

/// Model seed 257292745896387: an outside follower yielded an enqueued
/// entry whose object had landed while the writer still waited for its
/// create's answer; the writer's read, which shows what it indexed, did
/// not show it yet. Such an entry is durable (it must replay after a
/// restart) but a read of this life need show it only once the writer
/// indexed it (a read showing a later object, a flush, a wait_durable).
#[test]
fn an_entry_a_follower_yielded_shows_in_the_writers_read_once_it_is_indexed() {
    let (mut model, keys) = appended(true, 2);
    let (key, id) = keys[1];
    model.followed(&[key]);
    let first = [entry(&model, keys[0].0, keys[0].1)];
    let promised: BTreeSet<Key> = [key].into();
    model.read(1, 0, &first, &[], &promised).unwrap();
    // Once the writer knows it durable, its reads must show it.
    model.durable(id);
    assert!(model.read(1, 0, &first, &[], &promised).is_err());
    // And it replays after a restart whatever the writer knew.
    let (mut model, keys) = appended(true, 2);
    model.followed(&[keys[1].0]);
    let missing = replay(&model, &keys[..1]);
    assert!(model
        .restarted(&missing, &[], &[], &BTreeSet::new())
        .is_err());
}
