//! Shared pieces of the fuzz targets: a global allocator that refuses
//! allocations no input of this size can justify, and the little-endian
//! field readers the targets use to carve structured inputs out of bytes.
//!
//! Invariant: a target calls [`BoundedAlloc::arm`] with the length of its
//! input before it calls into objwal; from then on any single allocation
//! larger than [`BoundedAlloc::limit_for`] that length aborts the process,
//! which libFuzzer reports as a crash with the input that caused it. This
//! is how "never allocate what a corrupt length claims" is checked without
//! a sanitizer.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes any single allocation may take on top of the input-proportional
/// allowance (runtime set-up, small fixed buffers).
const BASE_ALLOWANCE: usize = 8 << 20;
/// How many times the input length one allocation may take (decoders copy
/// the input once or twice; recovery keeps the objects in memory).
const PER_INPUT_BYTE: usize = 8;

/// A `System` allocator with a per-allocation ceiling set from the input.
pub struct BoundedAlloc {
    limit: AtomicUsize,
}

impl BoundedAlloc {
    /// An allocator with no ceiling until [`arm`](Self::arm) is called.
    pub const fn new() -> Self {
        BoundedAlloc {
            limit: AtomicUsize::new(usize::MAX),
        }
    }

    /// The largest single allocation allowed while handling `input_len`
    /// bytes of input.
    pub fn limit_for(input_len: usize) -> usize {
        input_len
            .saturating_mul(PER_INPUT_BYTE)
            .saturating_add(BASE_ALLOWANCE)
    }

    /// Sets the ceiling for an input of `input_len` bytes.
    pub fn arm(&self, input_len: usize) {
        self.limit
            .store(Self::limit_for(input_len), Ordering::Relaxed);
    }

    fn check(&self, layout: Layout) {
        let limit = self.limit.load(Ordering::Relaxed);
        if layout.size() > limit {
            // Allocating a message here would recurse: write raw bytes.
            let msg = b"objwal-fuzz: an allocation exceeded the bound its input allows\n";
            // SAFETY: writing a static buffer to stderr; the result is moot,
            // the process aborts next.
            #[allow(unsafe_code)]
            unsafe {
                libc_write(2, msg.as_ptr(), msg.len());
            }
            std::process::abort();
        }
    }
}

impl Default for BoundedAlloc {
    fn default() -> Self {
        Self::new()
    }
}

extern "C" {
    #[link_name = "write"]
    fn libc_write(fd: i32, buf: *const u8, count: usize) -> isize;
}

// SAFETY: every method forwards to `System` after a check that either
// returns or aborts; no allocation is altered.
unsafe impl GlobalAlloc for BoundedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.check(layout);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.check(layout);
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Ok(grown) = Layout::from_size_align(new_size, layout.align()) {
            self.check(grown);
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// The little-endian `u64` at `at`, or 0 where the bytes run out.
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The little-endian `u32` at `at`, or 0 where the bytes run out.
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}
