//! The examples, run by the suite: `examples/engine.rs` (a storage engine
//! whose log and tables live in one object store) on the in-memory store
//! and on the S3-protocol test server. (`examples/blocking_engine.rs` runs
//! in `blocking.rs`.)

use objwal::{ObjectStorage, Storage};

#[path = "../../examples/engine.rs"]
#[allow(dead_code, reason = "the example's main is not run here")]
mod engine;

/// What the example's run must leave: shards 0-2, shard 0's first key
/// updated after its flush, shard 3 dropped, every other put kept.
fn check(rows: &std::collections::BTreeMap<u64, std::collections::BTreeMap<String, String>>) {
    assert_eq!(
        rows.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2],
        "{rows:?}"
    );
    assert_eq!(rows[&0].get("k0").map(String::as_str), Some("updated"));
    for shard in 0..3u32 {
        assert_eq!(rows[&u64::from(shard)].len(), 10, "shard {shard}");
        for i in (shard..40).step_by(4).filter(|i| *i != 0) {
            assert_eq!(
                rows[&u64::from(shard)].get(&format!("k{i}")),
                Some(&format!("v{i}"))
            );
        }
    }
}

#[tokio::test]
async fn the_engine_example_keeps_every_row_across_a_crash_in_memory() {
    let (rows, unflushed) = engine::demo(Storage::from_url("memory://").unwrap())
        .await
        .unwrap();
    check(&rows);
    // Shard 0's update and shard 2's ten puts come from the log.
    assert_eq!(unflushed, 11);
}

#[tokio::test]
async fn the_engine_example_keeps_every_row_across_a_crash_on_s3() {
    let url = format!(
        "s3://{}/{}?endpoint={}&region=us-east-1",
        crate::common::S3_BUCKET,
        crate::storage_conformance::unique_root("engine-example"),
        crate::common::s3_endpoint()
    );
    let options = [
        ("aws_access_key_id", "objwal-test"),
        ("aws_secret_access_key", "objwal-test"),
    ];
    let storage = Storage::from_url_opts(&url, options).unwrap();
    let (rows, unflushed) = engine::demo(storage.clone()).await.unwrap();
    check(&rows);
    assert_eq!(unflushed, 11);
    // The tables live beside the log: one per flushed shard (shard 1's
    // second flush had nothing new; the dropped shard's is gone).
    let tables = storage.list("tables/").await.unwrap();
    assert_eq!(tables.len(), 2, "{tables:?}");
}
