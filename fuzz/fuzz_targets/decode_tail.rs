//! Tail-window decoding: the input is `extra: u64 LE | window`, the window
//! being the end of an object `extra` bytes longer than it (saturating).
//! Never panics; a `NeedFooter` range lies before the window; a footer
//! decoded from a second input slice never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use objwal::format::{decode_footer, decode_tail, TailDecode};
use objwal_fuzz::BoundedAlloc;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    let Some((extra, window)) = data.split_first_chunk::<8>() else {
        return;
    };
    // Keep the claimed object small now and then so windows cover footers.
    let extra = u64::from_le_bytes(*extra) % (1 << 16);
    let object_len = (window.len() as u64).saturating_add(extra);
    match decode_tail(window, object_len) {
        Ok(TailDecode::NeedFooter { trailer, footer }) => {
            assert!(footer.start < object_len - window.len() as u64);
            // Feed the window's own prefix as the footer bytes: wrong bytes,
            // but they must only ever produce an Err or a consistent Tail.
            let n = usize::try_from(footer.end - footer.start).unwrap_or(usize::MAX);
            let _ = decode_footer(
                trailer,
                window.get(..n.min(window.len())).unwrap_or_default(),
            );
        }
        Ok(TailDecode::Complete(tail)) => {
            assert_eq!(tail.segments.len(), tail.trailer.segment_count as usize);
        }
        Err(_) => {}
    }
});
