//! Segment and release decoding against an arbitrary footer entry: the input
//! is `index (48 bytes, footer layout) | sequence: u64 LE | mode: u8 | bytes`.
//! When `mode` is odd the index's length and CRC are fixed up to match the
//! bytes, so the fuzzer gets past the CRC into the frame parser. Never panics;
//! decoded entries agree with the index.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use objwal::format::{decode_releases, decode_segment, SegmentIndex};

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 57 {
        return;
    }
    let (head, rest) = data.split_at(57);
    let mut index = SegmentIndex {
        region: u64_at(head, 0),
        first_id: u64_at(head, 8),
        last_id: u64_at(head, 16),
        offset: u64_at(head, 24),
        len: u64_at(head, 32),
        count: u32_at(head, 40),
        crc: u32_at(head, 44),
    };
    let sequence = u64_at(head, 48) >> 20;
    let mode = head[56];
    if mode & 1 == 1 {
        index.len = rest.len() as u64;
        index.crc = crc32fast::hash(rest);
    }
    let bytes = Bytes::copy_from_slice(rest);
    if let Ok(entries) = decode_segment(&bytes, &index, sequence) {
        assert_eq!(entries.len(), index.count as usize);
        assert_eq!(entries.first().map(|e| e.0), Some(index.first_id));
        assert_eq!(entries.last().map(|e| e.0), Some(index.last_id));
        assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
    }
    if let Ok(records) = decode_releases(&bytes, &index, sequence) {
        assert!(!records.is_empty());
        assert!(records.windows(2).all(|w| w[0].region < w[1].region));
    }
});
