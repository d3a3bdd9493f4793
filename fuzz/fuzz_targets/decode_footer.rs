//! Footer decoding against an arbitrary trailer: the input is
//! `footer_offset: u64 | object_len: u64 | segment_count: u32 |
//! footer_crc: u32 | sequence: u64 | mode: u8 | footer bytes` (33 bytes of
//! head, little-endian). Mode bit 0 makes the trailer agree with the bytes
//! (count and object length), bit 1 fixes the footer CRC up, so the fuzzer
//! reaches the entry checks. `decode_footer` is public: it must hold for a
//! trailer it never saw decoded. Never panics, never allocates beyond the
//! input's bound; a decoded footer tiles the object as its doc says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use objwal::format::{
    decode_footer, Header, Trailer, FOOTER_ENTRY_LEN, HEADER_LEN, MAX_SEQUENCE, TRAILER_LEN,
};
use objwal_fuzz::{u32_at, u64_at, BoundedAlloc};

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    if data.len() < 33 {
        return;
    }
    let (head, footer) = data.split_at(33);
    let mode = head[32];
    let footer_offset = u64_at(head, 0);
    let mut trailer = Trailer {
        header: Header {
            sequence: u64_at(head, 24) & MAX_SEQUENCE,
            epoch: 1,
            link: None,
            reclaim_boundary: 0,
        },
        footer_offset,
        segment_count: u32_at(head, 16),
        footer_crc: u32_at(head, 20),
        object_crc: 0,
        object_len: u64_at(head, 8),
    };
    if mode & 1 == 1 {
        trailer.segment_count = (footer.len() / FOOTER_ENTRY_LEN) as u32;
        trailer.object_len = footer_offset
            .saturating_add(footer.len() as u64)
            .saturating_add(TRAILER_LEN as u64);
    }
    if mode & 2 == 2 {
        trailer.footer_crc = crc32fast::hash(footer);
    }
    if let Ok(tail) = decode_footer(trailer.clone(), footer) {
        assert_eq!(tail.segments.len(), trailer.segment_count as usize);
        let mut next = HEADER_LEN as u64;
        for s in &tail.segments {
            assert_eq!(s.offset, next, "segments tile the body");
            assert!(s.count >= 1);
            next = s.offset + s.len;
        }
        assert_eq!(next, trailer.footer_offset);
        assert!(tail.segments.windows(2).all(|w| w[0].region < w[1].region));
    }
});
