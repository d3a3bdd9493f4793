//! Header decoding: never panics; a decoded header obeys the header rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use objwal::format::{decode_header, MAX_SEQUENCE};
use objwal_fuzz::BoundedAlloc;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    if let Ok(header) = decode_header(data) {
        assert!(header.sequence <= MAX_SEQUENCE);
        assert!(header.reclaim_boundary <= header.sequence);
        if let Some(link) = header.link {
            assert!(link.sequence < header.sequence);
        }
    }
});
