//! Recovery over an arbitrary set of objects: the input is cut after every
//! trailer magic (`OBJWALTR`), and each piece is stored in a `MemoryStorage`
//! under prefix `t`. A piece of at least 80 bytes goes to the object key of
//! the sequence its trailer names (shifted by its first byte unless that is
//! the header magic's `O`, so keys and contents can disagree); a shorter
//! piece becomes a junk key under `t/objects/` or `t/fences/`. So the
//! concatenation of real objects is a real prefix, and every fixture is a
//! seed as it is.
//!
//! Then `WalReader::open` recovers the prefix and every region it reports is
//! read to the end. Nothing may panic or allocate beyond the input's bound;
//! every read yields strictly increasing ids of its own region. A hang is
//! caught by libFuzzer's `-timeout`.
#![no_main]

use std::sync::LazyLock;

use bytes::Bytes;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use objwal::format::{RELEASE_REGION, TRAILER_LEN, TRAILER_MAGIC};
use objwal::storage::MemoryStorage;
use objwal::{Config, ObjectStorage, Storage, WalReader};
use objwal_fuzz::{u64_at, BoundedAlloc};

#[global_allocator]
static ALLOC: BoundedAlloc = BoundedAlloc::new();

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime builds")
});

/// The pieces of `data`, each ending after a trailer magic (the last one
/// may not).
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at + TRAILER_MAGIC.len() <= data.len() {
        if data[at..at + TRAILER_MAGIC.len()] == TRAILER_MAGIC {
            at += TRAILER_MAGIC.len();
            out.push(&data[start..at]);
            start = at;
        } else {
            at += 1;
        }
    }
    if start < data.len() {
        out.push(&data[start..]);
    }
    out
}

fn key_of(piece: &[u8]) -> String {
    if piece.len() >= TRAILER_LEN {
        let sequence = u64_at(piece, piece.len() - TRAILER_LEN);
        let shift = if piece[0] == b'O' {
            0
        } else {
            u64::from(piece[0])
        };
        format!("t/objects/{:020}.wal", sequence.wrapping_add(shift))
    } else {
        let dir = if piece.first() == Some(&b'F') {
            "fences"
        } else {
            "objects"
        };
        format!("t/{dir}/{}", String::from_utf8_lossy(piece))
    }
}

fuzz_target!(|data: &[u8]| {
    ALLOC.arm(data.len());
    RUNTIME.block_on(async {
        let storage = Storage::new(MemoryStorage::new());
        for piece in pieces(data) {
            let key = key_of(piece);
            // An empty or duplicate key is refused or ignored: fine either way.
            let _ = storage.create(&key, Bytes::copy_from_slice(piece)).await;
        }
        let Ok(reader) = WalReader::open(storage, "t", Config::default()).await else {
            return;
        };
        let mut regions: Vec<u64> = reader.regions().iter().map(|r| r.region).collect();
        regions.push(RELEASE_REGION);
        for region in regions {
            let mut stream = Box::pin(reader.read(region, 0));
            let mut last = 0;
            while let Some(entry) = stream.next().await {
                let Ok(entry) = entry else { break };
                assert_eq!(entry.region, region);
                assert!(entry.id > last, "ids of a read strictly increase");
                last = entry.id;
            }
            assert!(last <= reader.latest_entry_id(region) || region == RELEASE_REGION);
        }
    });
});
