//! The power-loss simulation: its rules on journals written by hand, and a
//! log whose acknowledged entries must survive a power loss at any instant.

use super::*;
use crate::storage::{FileStorage, ObjectStorage, Storage};
use crate::{Config, Wal};
use bytes::Bytes;
use futures::StreamExt;

fn store(root: &Path, files: &[&str]) {
    for key in files {
        let path = root.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"bytes").unwrap();
    }
}

#[test]
fn a_power_loss_keeps_only_names_whose_directory_was_fsynced_after_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    store(&root, &["p/a", "p/b", "p/c", "p/d", "q/e"]);
    let journal = dir.path().join("journal");
    std::fs::write(
        &journal,
        // a: bytes and name durable. b: linked after fsync 1 started, so
        // fsync 3 covers it. d: name durable, bytes never fsynced. e: only
        // an fsync of another directory followed. c: its fsync never
        // finished. And a line cut short.
        "D p/a\nL p/a\nB 1 p\nD p/b\nL p/b\nE 1\n\
         L p/d\nD q/e\nL q/e\nB 3 p\nE 3\nD p/c\nL p/c\nB 5 p\nB 4 q\nE",
    )
    .unwrap();
    let loss = apply(&root, &journal).unwrap();
    assert_eq!(loss.names_lost, vec!["q/e".to_owned(), "p/c".to_owned()]);
    assert_eq!(loss.bytes_lost, vec!["p/d".to_owned()]);
    assert_eq!(std::fs::read(root.join("p/a")).unwrap(), b"bytes");
    assert_eq!(std::fs::read(root.join("p/b")).unwrap(), b"bytes");
    assert!(!root.join("p/c").exists() && !root.join("q/e").exists());
    assert_eq!(std::fs::read(root.join("p/d")).unwrap(), b"");
}

/// The directory backend's creates journal each step, in the order the
/// rules need, with named and with unnamed (`O_TMPFILE`) temporary files.
#[tokio::test]
async fn the_directory_backend_journals_bytes_link_and_directory_fsync_in_order() {
    for named in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let fs = FileStorage::open(dir.path().join("store")).unwrap();
        if named {
            fs.use_named_temps();
        }
        let journal = dir.path().join("journal");
        fs.record_power_loss(&journal).unwrap();
        fs.create("p/objects/1", Bytes::from_static(b"x"))
            .await
            .unwrap();
        let text = std::fs::read_to_string(&journal).unwrap();
        assert_eq!(
            text, "D p/objects/1\nL p/objects/1\nB 1 p/objects\nE 1\n",
            "named temporaries: {named}"
        );
        let loss = apply(&dir.path().join("store"), &journal).unwrap();
        assert_eq!(loss, PowerLoss::default());
    }
}

/// Every entry a durable append acknowledged is read back after a power
/// loss at the instant the process stopped (here: the handle dropped
/// without `stop`, so nothing was flushed on the way out).
#[tokio::test]
async fn acknowledged_entries_survive_a_power_loss_of_the_directory_backend() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let journal = dir.path().join("journal");
    let fs = FileStorage::open(&root).unwrap();
    fs.record_power_loss(&journal).unwrap();
    let wal = Wal::open(Storage::new(fs), "log", Config::default())
        .await
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..40u32 {
        let region = u64::from(i % 4);
        let ids = wal
            .append(vec![(region, Bytes::from(format!("e{i}")))])
            .await
            .unwrap();
        acked.push((region, ids[0], format!("e{i}")));
    }
    drop(wal);
    apply(&root, &journal).unwrap();

    let wal = Wal::open(
        Storage::new(FileStorage::open(&root).unwrap()),
        "log",
        Config::default(),
    )
    .await
    .unwrap();
    for region in 0..4u64 {
        let mut read = Box::pin(wal.read(region, 0));
        let mut got = Vec::new();
        while let Some(entry) = read.next().await {
            let entry = entry.unwrap();
            got.push((
                region,
                entry.id,
                String::from_utf8_lossy(&entry.data).into_owned(),
            ));
        }
        let want: Vec<_> = acked.iter().filter(|a| a.0 == region).cloned().collect();
        assert_eq!(got, want, "region {region}");
    }
    wal.stop().await.unwrap();
}
