//! The demo's self-describing payloads and the digest logged for each.
//!
//! Layout (little-endian), 20 to 65535 bytes:
//!
//! ```text
//! 0        4        6        8          12       16       20
//! | region | writer | length | counter  | crc32  | run    | filler ...
//!   u32      u16      u16      u32        u32      u32
//! ```
//!
//! The CRC covers every byte but its own four, so a replayed entry can be
//! validated on its own: its length, its region and its checksum. `run` is
//! drawn anew by each `objwal demo` (not from the seed), so `(run, writer,
//! counter)` names a payload uniquely across runs on one store.

use bytes::Bytes;
use rand::{Rng, RngCore};

/// Bytes of the fixed part.
pub const HEADER: usize = 20;
/// The largest payload the demo writes.
pub const MAX_LEN: usize = 16 * 1024;

/// What a valid payload says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The region it was appended to.
    pub region: u32,
    /// The writer task that appended it.
    pub writer: u16,
    /// The writer's counter.
    pub counter: u32,
    /// The demo run that wrote it.
    pub run: u32,
}

/// A payload of `len` bytes (clamped to `HEADER..=MAX_LEN`) for `id`.
pub fn make(id: Identity, len: usize, rng: &mut impl RngCore) -> Bytes {
    let len = len.clamp(HEADER, MAX_LEN);
    let mut buf = vec![0u8; len];
    if let Some(filler) = buf.get_mut(HEADER..) {
        rng.fill_bytes(filler);
    }
    put(&mut buf, 0, &id.region.to_le_bytes());
    put(&mut buf, 4, &id.writer.to_le_bytes());
    put(&mut buf, 6, &(len as u16).to_le_bytes());
    put(&mut buf, 8, &id.counter.to_le_bytes());
    put(&mut buf, 16, &id.run.to_le_bytes());
    let crc = crc(&buf);
    put(&mut buf, 12, &crc.to_le_bytes());
    Bytes::from(buf)
}

/// A length between 16 B and 16 KiB, log-uniform: many small, some large
/// ([`make`] raises it to [`HEADER`]).
pub fn random_len(rng: &mut impl Rng) -> usize {
    let exponent: f64 = rng.random_range(4.0..=14.0);
    exponent.exp2() as usize
}

/// Validates a replayed payload: its length field, its checksum.
pub fn check(data: &[u8]) -> Result<Identity, String> {
    if data.len() < HEADER || data.len() > MAX_LEN {
        return Err(format!("{} bytes is not a demo payload length", data.len()));
    }
    let len = u16::from_le_bytes([byte(data, 6), byte(data, 7)]) as usize;
    if len != data.len() {
        return Err(format!("length field {len} but {} bytes", data.len()));
    }
    let stored = u32::from_le_bytes([
        byte(data, 12),
        byte(data, 13),
        byte(data, 14),
        byte(data, 15),
    ]);
    let computed = crc(data);
    if stored != computed {
        return Err(format!(
            "checksum {stored:#010x} but the bytes give {computed:#010x}"
        ));
    }
    Ok(Identity {
        region: u32::from_le_bytes([byte(data, 0), byte(data, 1), byte(data, 2), byte(data, 3)]),
        writer: u16::from_le_bytes([byte(data, 4), byte(data, 5)]),
        counter: u32::from_le_bytes([byte(data, 8), byte(data, 9), byte(data, 10), byte(data, 11)]),
        run: u32::from_le_bytes([
            byte(data, 16),
            byte(data, 17),
            byte(data, 18),
            byte(data, 19),
        ]),
    })
}

/// The digest logged for an acknowledged payload: FNV-1a 64 of its bytes.
pub fn digest(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// CRC32 of everything but the CRC field (bytes 12..16).
fn crc(data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(data.get(..12).unwrap_or_default());
    hasher.update(data.get(16..).unwrap_or_default());
    hasher.finalize()
}

fn byte(data: &[u8], at: usize) -> u8 {
    data.get(at).copied().unwrap_or(0)
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(slot) = buf.get_mut(at..at + bytes.len()) {
        slot.copy_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn payloads_validate_and_damage_is_caught() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for len in [0, 16, 20, 21, 100, 16 * 1024, 1 << 20] {
            let id = Identity {
                region: 3,
                writer: 1,
                counter: 9,
                run: 0xdead_beef,
            };
            let p = make(id, len, &mut rng);
            assert_eq!(check(&p), Ok(id));
            let mut bad = p.to_vec();
            if let Some(b) = bad.last_mut() {
                *b ^= 1;
            }
            assert!(check(&bad).is_err());
        }
    }
}
