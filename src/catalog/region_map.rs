//! Maps keyed by region id, with a hasher made for them.
//!
//! Region ids come from the engine that owns the log, not from an
//! adversary, and the maps keyed by them are looked up on every append and
//! every indexed object, for every region of a node that may host hundreds
//! of thousands. The standard library's SipHash is built to resist hash
//! flooding, which costs more than the lookup it serves here; a
//! multiply-and-fold of the id (as FxHash and rustc do) spreads the dense,
//! sequential ids engines use as well, for a few cycles.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A map from region ids (or any `u64`) to `V`.
pub type RegionMap<V> = HashMap<crate::RegionId, V, BuildHasherDefault<RegionHasher>>;

/// A set of region ids.
pub type RegionSet = HashSet<crate::RegionId, BuildHasherDefault<RegionHasher>>;

/// The hasher of [`RegionMap`]: a 64-bit multiply, folded so that the high
/// bits hashbrown takes its control bytes from depend on every bit of the id.
#[derive(Debug, Default, Clone, Copy)]
pub struct RegionHasher {
    hash: u64,
}

/// An odd constant with well-spread bits (the golden ratio's fraction).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for RegionHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            if let Some(w) = word.get_mut(..chunk.len()) {
                w.copy_from_slice(chunk);
            }
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let product = u128::from(self.hash.rotate_left(5) ^ n) * u128::from(MIX);
        self.hash = (product as u64) ^ ((product >> 64) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_the_control_bits() {
        // hashbrown takes 7 control bits from the top of the hash and the
        // bucket from the bottom: both must vary over dense ids.
        let hashes: Vec<u64> = (0u64..4096)
            .map(|id| {
                let mut h = RegionHasher::default();
                h.write_u64(id);
                h.finish()
            })
            .collect();
        let tops: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        let lows: HashSet<u64> = hashes.iter().map(|h| h & 4095).collect();
        assert_eq!(tops.len(), 128, "every control value is used");
        assert!(lows.len() > 2500, "buckets: {}", lows.len());
        let mut map: RegionMap<u64> = RegionMap::default();
        map.insert(7, 1);
        assert_eq!(map.get(&7), Some(&1));
    }
}
