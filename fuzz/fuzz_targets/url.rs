//! Storage URL parsing: `Storage::from_url` on arbitrary strings. Never
//! panics, never allocates beyond the input's bound.
//!
//! Guard: a `file://` URL creates its directory, so the target never lets
//! one reach outside a scratch directory (on `/dev/shm` when there is one,
//! so the fsyncs cost nothing): the process works from inside it, an
//! absolute path is rebased under it, and inputs that could climb out of it
//! (`..` in any spelling, `\`, which the URL parser treats as `/`) are not
//! run as `file://` URLs. The scratch directory is emptied after each input.
//! Hostile paths themselves are pinned by tests/integration/hostile_input.rs.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use objwal::Storage;
use objwal_fuzz::BoundedAlloc;

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

static SCRATCH: LazyLock<PathBuf> = LazyLock::new(|| {
    let base = PathBuf::from("/dev/shm");
    let base = if base.is_dir() {
        base
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("objwal-fuzz-url-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the scratch directory is created");
    std::env::set_current_dir(&dir).expect("the scratch directory is entered");
    dir
});

fn empty_scratch() {
    if let Ok(entries) = std::fs::read_dir(&*SCRATCH) {
        for entry in entries.flatten() {
            let path = entry.path();
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    let Ok(url) = std::str::from_utf8(data) else {
        return;
    };
    let scratch = &*SCRATCH;
    let Some(rest) = url.strip_prefix("file://") else {
        let _ = Storage::from_url(url);
        return;
    };
    let lower = rest.to_ascii_lowercase();
    if rest.contains("..") || lower.contains("%2e") || rest.contains('\\') {
        return;
    }
    let rebased = if rest.starts_with('/') {
        format!("file://{}{rest}", scratch.display())
    } else {
        url.to_owned()
    };
    let _ = Storage::from_url(&rebased);
    empty_scratch();
});
