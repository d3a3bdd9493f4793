//! Writes a log with the probe-based release (fences, probes, a marker
//! beyond reach after a watermark jump, the gap after a reopen, a failed
//! create, a release) into a directory, and prints what must replay.
use std::collections::BTreeMap;

use bytes::Bytes;
use objwal::storage::fault::{FaultyStorage, Op};
use objwal::storage::StorageErrorKind;
use objwal::{Config, Storage, Wal};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: legacy_log DIR")?;
    let url = format!("file://{dir}");
    let config = Config::default();
    let mut expected: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
    let mut push = |region: u64, id: u64, data: &str| {
        expected.entry(region).or_default().push((id, data.to_owned()));
    };
    // Life 1: two regions, a flush mark (in memory only in this release).
    let wal = Wal::open(Storage::from_url(&url)?, "legacy", config.clone()).await?;
    for n in 0..3 {
        let ids = wal
            .append(vec![(1, Bytes::from(format!("r1-{n}"))), (2, Bytes::from(format!("r2-{n}")))])
            .await?;
        push(1, ids[0], &format!("r1-{n}"));
        push(2, ids[1], &format!("r2-{n}"));
    }
    wal.stop().await?;
    // Life 2 (a reopen: the gap of 64 after its start object), a failed
    // create (its sequence consumed), a watermark jump beyond reach (a
    // marker), a release.
    let faulty = FaultyStorage::new(Storage::from_url(&url)?);
    let wal = Wal::open(faulty.storage(), "legacy", config.clone()).await?;
    let ids = wal.append(vec![(1, Bytes::from("r1-3"))]).await?;
    push(1, ids[0], "r1-3");
    faulty.fail_next(Op::Create, "/objects/", 1, StorageErrorKind::Transient);
    assert!(wal.append(vec![(1, Bytes::from("failed"))]).await.is_err());
    let jump = objwal::format::entry_id(ids[0] >> 20 | 500, 1);
    wal.obsolete(7, jump).await?;
    let ids = wal.append(vec![(1, Bytes::from("r1-after-jump")), (3, Bytes::from("r3-0"))]).await?;
    push(1, ids[0], "r1-after-jump");
    push(3, ids[1], "r3-0");
    wal.release_region(2).await?;
    expected.remove(&2);
    wal.stop().await?;
    println!("{}", serde_json::to_string_pretty(&expected)?);
    Ok(())
}
