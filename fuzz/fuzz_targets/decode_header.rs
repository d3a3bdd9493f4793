//! Header decoding: never panics; a decoded header obeys the header rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use objwal::format::{decode_header, MAX_SEQUENCE};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = decode_header(data) {
        assert!(header.sequence <= MAX_SEQUENCE);
        assert!(header.reclaim_boundary <= header.sequence);
        if let Some(link) = header.link {
            assert!(link.sequence < header.sequence);
        }
    }
});
