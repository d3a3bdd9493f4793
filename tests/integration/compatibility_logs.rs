//! Logs written by earlier releases open, replay and go on under this one
//! (`compatibility/logs/`): the prefix is copied to a fresh directory,
//! read with a `WalReader`, opened for writing, appended to, and opened
//! again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::StreamExt;
use objwal::{Config, Error, Storage, Wal, WalReader};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn log_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compatibility/logs")
        .join(name)
}

type Expected = BTreeMap<u64, Vec<(u64, String)>>;

async fn replayed(
    read: impl futures::Stream<Item = Result<objwal::Entry, Error>>,
) -> Vec<(u64, String)> {
    let mut read = Box::pin(read);
    let mut out = Vec::new();
    while let Some(entry) = read.next().await {
        let entry = entry.unwrap();
        out.push((entry.id, String::from_utf8(entry.data.to_vec()).unwrap()));
    }
    out
}

#[tokio::test]
async fn a_log_of_the_probe_based_release_opens_replays_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&log_dir("probe-release/legacy"), &dir.path().join("legacy"));
    let expected: Expected = serde_json::from_str(
        &std::fs::read_to_string(log_dir("probe-release/expected.json")).unwrap(),
    )
    .unwrap();
    let url = format!("file://{}", dir.path().display());
    let reader = WalReader::open(
        Storage::from_url(&url).unwrap(),
        "legacy",
        Config::default(),
    )
    .await
    .unwrap();
    for (region, entries) in &expected {
        assert_eq!(
            &replayed(reader.read(*region, 0)).await,
            entries,
            "region {region}"
        );
    }
    assert!(replayed(reader.read(2, 0)).await.is_empty(), "released");

    let wal = Wal::open(
        Storage::from_url(&url).unwrap(),
        "legacy",
        Config::default(),
    )
    .await
    .unwrap();
    for (region, entries) in &expected {
        assert_eq!(
            &replayed(wal.read(*region, 0)).await,
            entries,
            "region {region}"
        );
    }
    assert!(matches!(
        wal.append(vec![(2, Bytes::from("x"))]).await,
        Err(Error::RegionReleased { .. })
    ));
    let more = wal.append(vec![(1, Bytes::from("r1-new"))]).await.unwrap();
    let last = expected[&1].last().unwrap().0;
    assert!(more[0] > last, "ids keep rising: {} after {last}", more[0]);
    wal.stop().await.unwrap();

    let wal = Wal::open(
        Storage::from_url(&url).unwrap(),
        "legacy",
        Config::default(),
    )
    .await
    .unwrap();
    let mut region_1 = expected[&1].clone();
    region_1.push((more[0], "r1-new".into()));
    assert_eq!(replayed(wal.read(1, 0)).await, region_1);
    assert_eq!(&replayed(wal.read(3, 0)).await, &expected[&3]);
    wal.stop().await.unwrap();
}
