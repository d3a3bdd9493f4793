//! Whole-object decoding: never panics; whatever decodes re-encodes to the
//! same bytes (an object has exactly one encoding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use objwal::format::{decode, encode};
use objwal_fuzz::BoundedAlloc;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    if let Ok(object) = decode(data) {
        let again = encode(&object).expect("a decoded object encodes");
        assert_eq!(&again[..], data, "decode/encode is not the identity");
    }
});
