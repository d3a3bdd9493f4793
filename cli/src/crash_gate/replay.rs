//! The crash gate's second look at a reopen: bulk replays (`Wal::replay`,
//! `WalReader::replay`, from 0 and from a start drawn per region) must
//! give each region exactly what its per-region read gave from the same
//! point. Pure: the reads and the replays in, violations out.
//!
//! An entry is kept as its id, its length and a 64-bit hash of its bytes
//! (not the bytes: a reopen may replay hundreds of megabytes), so "equal"
//! means equal ids in the same order with bytes equal but for a hash
//! collision. The per-region reads themselves were checked byte for byte
//! against the appended payloads ([`super::Cycle::entry`]).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use rand::Rng;

/// One entry as the comparison sees it: id, length, hash of the bytes.
pub type Seen = (u64, usize, u64);

/// What `entry` contributes to a comparison.
pub fn seen(id: u64, data: &[u8]) -> Seen {
    let mut h = std::hash::DefaultHasher::new();
    data.hash(&mut h);
    (id, data.len(), h.finish())
}

/// Every region's per-region read from id 0, in read order.
#[derive(Debug, Default)]
pub struct Reads {
    regions: BTreeMap<u64, Vec<Seen>>,
}

impl Reads {
    /// One entry of `region`'s read, in read order.
    pub fn add(&mut self, region: u64, id: u64, data: &[u8]) {
        self.regions.entry(region).or_default().push(seen(id, data));
    }

    /// A start per region of `regions` for the replay "from a random id":
    /// for a region that read entries, an id of them (the boundary
    /// itself), one above an id of them (between two), or above the last;
    /// for an empty one, 0 or a random id.
    pub fn draw_starts(
        &self,
        regions: impl Iterator<Item = u64>,
        rng: &mut impl Rng,
    ) -> BTreeMap<u64, u64> {
        regions
            .map(|region| {
                let ids = self.regions.get(&region).map_or(&[][..], Vec::as_slice);
                let i = rng.random_range(0..=ids.len());
                let start = match ids.get(i) {
                    Some((id, _, _)) if rng.random_bool(0.5) => *id,
                    Some((id, _, _)) => id.saturating_add(1),
                    None => match ids.last() {
                        Some((id, _, _)) => id.saturating_add(1),
                        None if rng.random_bool(0.5) => 0,
                        None => rng.random(),
                    },
                };
                (region, start)
            })
            .collect()
    }

    /// Compares a bulk replay (`replayed`: region and entry, in stream
    /// order) of every region of `starts` from its start with the reads:
    /// one line per region that differs.
    pub fn compare(&self, starts: &BTreeMap<u64, u64>, replayed: &[(u64, Seen)]) -> Vec<String> {
        let mut by_region: BTreeMap<u64, Vec<Seen>> = BTreeMap::new();
        for (region, s) in replayed {
            by_region.entry(*region).or_default().push(*s);
        }
        let mut lines = Vec::new();
        for region in by_region.keys().filter(|r| !starts.contains_key(r)) {
            lines.push(format!("region {region}: replayed, but not asked for"));
        }
        for (region, from) in starts {
            let expected: Vec<Seen> = (self.regions.get(region).into_iter().flatten())
                .filter(|(id, _, _)| id >= from)
                .copied()
                .collect();
            let got = by_region.get(region).map_or(&[][..], Vec::as_slice);
            if let Some(why) = first_difference(&expected, got) {
                lines.push(format!("region {region} from id {from}: {why}"));
            }
        }
        lines
    }
}

/// Where `got` first departs from `expected`, if it does.
fn first_difference(expected: &[Seen], got: &[Seen]) -> Option<String> {
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if e.0 != g.0 {
            return Some(format!(
                "entry {i}: the replay gave id {} where the read gave id {}",
                g.0, e.0
            ));
        }
        if e != g {
            return Some(format!(
                "id {}: the replay gave other bytes ({} bytes, the read {})",
                g.0, g.1, e.1
            ));
        }
    }
    match expected.len().cmp(&got.len()) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater => expected.get(got.len()).map(|e| {
            format!(
                "the replay ended after {} entries; the read went on from id {} ({} more)",
                got.len(),
                e.0,
                expected.len() - got.len()
            )
        }),
        std::cmp::Ordering::Less => got.get(expected.len()).map(|g| {
            format!(
                "the replay gave id {} (and {} more) after the read's last of {} entries",
                g.0,
                got.len() - expected.len() - 1,
                expected.len()
            )
        }),
    }
}
