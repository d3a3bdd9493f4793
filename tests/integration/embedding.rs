//! What an engine that embeds objwal asks of it beyond appends and reads:
//! per-region information from the writer and from a reader, and storage
//! opened from a URL with an options map against the S3-protocol test server.

use objwal::format::ENTRY_OVERHEAD;
use objwal::{Config, Error, RegionInfo, Storage, Wal, WalReader};

use crate::common::b;

/// Bytes a segment of these payloads takes in an object.
fn segment_bytes(payloads: &[&str]) -> u64 {
    payloads
        .iter()
        .map(|p| (ENTRY_OVERHEAD + p.len()) as u64)
        .sum()
}

fn row(rows: &[RegionInfo], region: u64) -> RegionInfo {
    *rows
        .iter()
        .find(|r| r.region == region)
        .unwrap_or_else(|| panic!("no row for region {region} in {rows:?}"))
}

#[tokio::test]
async fn regions_report_ids_bytes_watermarks_and_releases() {
    let storage = Storage::from_url("memory://").unwrap();
    let wal = Wal::open(storage.clone(), "e", Config::default())
        .await
        .unwrap();
    let first = wal
        .append(vec![(1, b("a1")), (2, b("b1")), (3, b("c1"))])
        .await
        .unwrap();
    let second = wal
        .append(vec![(1, b("a22")), (3, b("c22"))])
        .await
        .unwrap();
    wal.obsolete(1, first[0]).await.unwrap();
    wal.release_region(3).await.unwrap();

    let rows = wal.regions().await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.region).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let one = row(&rows, 1);
    assert_eq!((one.first_id, one.last_id), (first[0], second[0]));
    assert_eq!((one.entries, one.objects), (2, 2));
    assert_eq!(one.bytes, segment_bytes(&["a1", "a22"]));
    assert_eq!((one.watermark, one.released), (first[0], false));
    let two = row(&rows, 2);
    assert_eq!(
        (two.first_id, two.last_id, two.entries),
        (first[1], first[1], 1)
    );
    assert_eq!((two.bytes, two.watermark), (segment_bytes(&["b1"]), 0));
    // A released region still holds its segments until they are collected
    // (the objects also hold live entries of regions 1 and 2).
    let three = row(&rows, 3);
    assert!(three.released);
    assert!(three.watermark >= second[1], "{three:?}");
    assert_eq!(three.bytes, segment_bytes(&["c1", "c22"]));

    // The bytes are those of the region's segments in the indexed objects.
    wal.stop().await.unwrap();
    let reader = WalReader::open(storage, "e", Config::default())
        .await
        .unwrap();
    for r in &rows {
        let held: u64 = (reader.objects().iter())
            .flat_map(|o| o.segments.iter())
            .filter(|s| s.region == r.region)
            .map(|s| s.len)
            .sum();
        assert_eq!(r.bytes, held, "region {}", r.region);
    }
    // A reader sees the same ids and bytes; it knows releases but no
    // engine watermark (watermarks are not persisted).
    let read = reader.regions();
    assert_eq!(read.len(), 3);
    for (w, r) in rows.iter().zip(&read) {
        assert_eq!(
            (w.region, w.first_id, w.last_id, w.entries, w.bytes, w.released),
            (r.region, r.first_id, r.last_id, r.entries, r.bytes, r.released)
        );
    }
    assert_eq!(row(&read, 1).watermark, 0);
    assert!(row(&read, 3).watermark >= second[1]);

    let e = wal.regions().await.unwrap_err();
    assert!(matches!(e, Error::Stopped { .. }), "{e}");
}

/// `from_url_opts` with the endpoint and credentials in the options map (the
/// URL names neither, so without the options nothing could reach the
/// server), through each compiled S3 adapter: the storage creates, reads
/// and lists, and a log opened on it appends and replays.
#[cfg(any(feature = "opendal", feature = "object_store"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_url_opts_reaches_the_s3_server_with_options_alone() {
    use objwal::{Created, ObjectMeta, ObjectStorage};

    let endpoint = crate::common::s3_endpoint();
    let mut adapters = Vec::new();
    if cfg!(feature = "object_store") {
        adapters.push("object_store");
    }
    if cfg!(feature = "opendal") {
        adapters.push("opendal");
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    for adapter in adapters {
        let root = format!("embedding/{}-{nanos}/{adapter}", std::process::id());
        let url = format!("s3://objwal-test/{root}?adapter={adapter}");
        let options = [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_access_key_id", "objwal-test"),
            ("aws_secret_access_key", "objwal-test"),
            ("aws_region", "us-east-1"),
        ];
        let s = Storage::from_url_opts(&url, options).unwrap();
        let data = bytes::Bytes::from_static(b"payload");
        assert_eq!(
            s.create("k", data.clone()).await.unwrap(),
            Created::New,
            "{adapter}"
        );
        assert_eq!(s.read("k", 0..7).await.unwrap(), data, "{adapter}");
        assert_eq!(
            s.list("").await.unwrap(),
            vec![ObjectMeta {
                key: "k".into(),
                size: 7
            }],
            "{adapter}"
        );
        let wal = Wal::open(s.clone(), "log", Config::default())
            .await
            .unwrap();
        let ids = wal.append(vec![(5, b("on s3"))]).await.unwrap();
        wal.stop().await.unwrap();
        let reader = WalReader::open(s, "log", Config::default()).await.unwrap();
        assert_eq!(reader.latest_entry_id(5), ids[0], "{adapter}");
    }
}
