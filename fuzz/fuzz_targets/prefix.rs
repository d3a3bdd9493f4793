//! Prefix and key parsing (src/storage/keys.rs) on arbitrary strings. Never
//! panics; a prefix that is accepted obeys every rule its doc states; keys
//! round-trip; a key is parsed only if the key builder makes exactly it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use objwal::storage::keys::Prefix;
use objwal_fuzz::BoundedAlloc;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

/// Checks that `key` parses under `prefix` only when the builders make it.
fn parse_only_what_is_built(prefix: &Prefix, key: &str) {
    if let Some(sequence) = prefix.parse_object_key(key) {
        assert_eq!(prefix.object_key(sequence), key);
    }
    if let Some(epoch) = prefix.parse_fence_key(key) {
        assert_eq!(prefix.fence_key(epoch), key);
    }
}

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(prefix) = Prefix::new(s) {
        assert!(!s.is_empty() && !s.starts_with('/') && !s.contains('\\'));
        assert!(!s.chars().any(char::is_control));
        assert!(s.split('/').all(|p| !matches!(p, "" | "." | "..")));
        assert_eq!(prefix.as_str(), s);
        for n in [0, 1, 42, (1 << 44) - 1, u64::MAX] {
            let key = prefix.object_key(n);
            assert!(key.starts_with(&prefix.objects_prefix()));
            assert_eq!(prefix.parse_object_key(&key), Some(n));
            assert_eq!(prefix.parse_fence_key(&key), None);
            let fence = prefix.fence_key(n);
            assert!(fence.starts_with(&prefix.fences_prefix()));
            assert_eq!(prefix.parse_fence_key(&fence), Some(n));
            assert_eq!(prefix.parse_object_key(&fence), None);
        }
    }
    // The input as a key: under a fixed prefix, and under the prefix it names.
    parse_only_what_is_built(&Prefix::new("t").expect("a valid prefix"), s);
    for dir in ["/objects/", "/fences/"] {
        if let Some((named, _)) = s.split_once(dir) {
            if let Ok(prefix) = Prefix::new(named) {
                parse_only_what_is_built(&prefix, s);
            }
        }
    }
});
