//! Fingerprints: every field of a state packed into 64-bit words and mixed
//! into one `u64` (two states with the same fingerprint are taken as the
//! same state; at a few million states a collision has odds below 1e-6).
//!
//! Written by hand rather than derived because the explorer runs in debug
//! builds, where a derived `Hash` costs hundreds of calls per state.
//! Invariant: every field of [`State`] is in some word (the test
//! `fingerprints_tell_states_apart` checks it over an exploration).

use super::state::{Flight, Ghost, Obj, Orphan, Phase, Probe, Proc, State, Store, Tip, SEQS};

/// 24 bits: epoch (5), empty (1), link present (1), link (6 + 5), boundary (6).
fn obj(o: &Obj) -> u64 {
    let (has_link, link_seq, link_epoch) = match o.link {
        Some((s, e)) => (1, u64::from(s), u64::from(e)),
        None => (0, 0, 0),
    };
    u64::from(o.epoch)
        | u64::from(o.empty) << 5
        | has_link << 6
        | link_seq << 7
        | link_epoch << 13
        | u64::from(o.boundary) << 18
}

fn opt_obj(o: &Option<Obj>) -> u64 {
    match o {
        Some(o) => 1 << 24 | obj(o),
        None => 0,
    }
}

fn opt_seq(s: Option<u8>) -> u64 {
    s.map_or(0, |s| 1 << 6 | u64::from(s))
}

fn phase(p: Phase) -> u64 {
    let (kind, arg) = match p {
        Phase::Idle => (0, 0),
        Phase::ListFences { floor } => (1, floor),
        Phase::Claim { trying } => (2, trying),
        Phase::List => (3, 0),
        Phase::ProbeBeforeStart => (4, 0),
        Phase::Start { seq } => (5, seq),
        Phase::ProbeAfterStart => (6, 0),
        Phase::Running => (7, 0),
        Phase::Dead => (8, 0),
    };
    kind | u64::from(arg) << 4
}

fn tip(t: Option<Tip>) -> u64 {
    t.map_or(0, |t| {
        1 << 18 | u64::from(t.seq) | u64::from(t.epoch) << 6 | u64::from(t.boundary) << 12
    })
}

fn flight(f: Flight) -> u64 {
    match f {
        Flight::Waiting => 1,
        Flight::Durable => 2,
        Flight::Running { deletes } => 3 + u64::from(deletes),
    }
}

fn probe(p: &Probe) -> u64 {
    1 | opt_seq(p.covers) << 1
        | u64::from(p.present) << 8
        | u64::from(p.fenced) << 14
        | u64::from(p.newer_listed) << 15
        | u64::from(p.stale) << 16
}

fn orphan(o: &Orphan) -> u64 {
    u64::from(o.seq) | obj(&o.obj) << 6 | u64::from(o.deletes) << 30
}

fn ghost(g: &Ghost) -> u64 {
    u64::from(g.seq) | obj(&g.obj) << 6
}

/// A 64-bit mixer (the finaliser of SplitMix64).
struct Mix(u64);

impl Mix {
    fn add(&mut self, word: u64) {
        let mut x = self.0 ^ word;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = x ^ (x >> 31);
    }
}

fn add_store(m: &mut Mix, s: &Store) {
    m.add(u64::from(s.fences));
    let mut i = 0;
    while i < SEQS {
        let hi = if i + 1 < SEQS {
            opt_obj(&s.objects[i + 1])
        } else {
            0
        };
        m.add(opt_obj(&s.objects[i]) | hi << 32);
        i += 2;
    }
}

fn add_proc(m: &mut Mix, p: &Proc) {
    m.add(
        phase(p.phase)
            | u64::from(p.epoch) << 10
            | u64::from(p.listings) << 16
            | u64::from(p.listed) << 32
            | u64::from(p.start) << 38
            | u64::from(p.first_data) << 44
            | u64::from(p.next) << 50
            | u64::from(p.sealed) << 56,
    );
    m.add(
        u64::from(p.verified)
            | u64::from(p.present) << 6
            | u64::from(p.boundary) << 12
            | opt_seq(p.low_live) << 18
            | opt_seq(p.started_covers) << 25
            | u64::from(p.started_present) << 32
            | u64::from(p.failures) << 38
            | tip(p.tip) << 44,
    );
    let marker = p
        .marker
        .map_or(0, |(s, o)| 1 << 30 | u64::from(s) | obj(&o) << 6);
    m.add(
        marker
            | (p.pipeline.len() as u64) << 31
            | (p.probes.len() as u64) << 34
            | u64::from(p.jumped) << 37,
    );
    for b in p.pipeline.as_slice() {
        m.add(u64::from(b.seq) | obj(&b.obj) << 6 | flight(b.flight) << 30);
    }
    let mut probes = 0;
    for (i, pr) in p.probes.as_slice().iter().enumerate() {
        probes |= probe(pr) << (17 * i);
    }
    m.add(probes);
    m.add((p.orphans.len() as u64) | (p.ghosts.len() as u64) << 8);
    for o in p.orphans.as_slice() {
        m.add(orphan(o));
    }
    for g in p.ghosts.as_slice() {
        m.add(ghost(g));
    }
}

/// The fingerprint of a whole state.
pub(super) fn fingerprint(s: &State) -> u64 {
    let mut m = Mix(0x6a09_e667_f3bc_c908);
    add_store(&mut m, &s.store);
    for p in &s.procs {
        add_proc(&mut m, p);
    }
    let mut acked = [0u64; SEQS.div_ceil(12)];
    for (i, e) in s.acked.iter().enumerate() {
        acked[i / 12] |= u64::from(*e) << (5 * (i % 12));
    }
    for word in acked {
        m.add(word);
    }
    m.add(u64::from(s.phantoms));
    m.0
}

/// The fingerprint of storage alone (what a replay depends on).
pub(super) fn store_fingerprint(s: &Store) -> u64 {
    let mut m = Mix(0xbb67_ae85_84ca_a73b);
    add_store(&mut m, s);
    m.0
}
