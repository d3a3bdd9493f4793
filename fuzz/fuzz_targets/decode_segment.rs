//! Segment and release decoding against an arbitrary footer entry: the input
//! is `index (48 bytes, footer layout) | sequence: u64 LE | mode: u8 | bytes`.
//! Mode bit 0 fixes the index's length and CRC up to match the bytes, so the
//! fuzzer gets past the CRC into the frame parser; bit 1 makes the index the
//! release region's, so the release-record parser is reached as often.
//! Never panics, never allocates beyond the input's bound; decoded entries
//! agree with the index.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use objwal::format::{decode_releases, decode_segment, SegmentIndex, RELEASE_REGION};
use objwal_fuzz::{u32_at, u64_at, BoundedAlloc};

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
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
    if mode & 2 == 2 {
        index.region = RELEASE_REGION;
    }
    let bytes = Bytes::copy_from_slice(rest);
    if let Ok(entries) = decode_segment(&bytes, &index, sequence) {
        assert_eq!(entries.len(), index.count as usize);
        assert_eq!(entries.first().map(|e| e.0), Some(index.first_id));
        assert_eq!(entries.last().map(|e| e.0), Some(index.last_id));
        assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(entries.iter().all(|e| e.0 >> 20 == sequence));
    }
    if let Ok(records) = decode_releases(&bytes, &index, sequence) {
        assert!(index.is_release());
        assert!(!records.is_empty());
        assert!(records.windows(2).all(|w| w[0].region < w[1].region));
        assert!(records.iter().all(|r| r.region != RELEASE_REGION));
    }
});
