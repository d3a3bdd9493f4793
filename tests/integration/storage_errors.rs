//! Storage errors say what happened and what to do, once (issue 21, item
//! 4), against the S3-protocol test server through both adapters: a
//! missing bucket, missing credentials and a closed port each print as one
//! line naming the cause and the fix, with no XML, and a report of the
//! whole `source` chain says nothing twice.
#![cfg(all(feature = "opendal", feature = "object_store"))]

use bytes::Bytes;
use objwal::{Error, ObjectStorage, Storage, StorageError};

use crate::common::{s3_endpoint, S3_BUCKET};

/// Every level of an error's chain, as an `anyhow` report prints them.
fn report(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut levels = Vec::new();
    let mut current = Some(e);
    while let Some(e) = current {
        levels.push(e.to_string());
        current = e.source();
    }
    levels
}

/// One line, no XML, each level of its report new, and what it must say.
fn assert_told_once(e: StorageError, says: &[&str]) -> String {
    let e = Error::from(e);
    let levels = report(&e);
    for pair in levels.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "a level repeats the next one: {levels:#?}"
        );
    }
    let text = e.to_string();
    assert!(!text.contains('\n') && !text.contains('<'), "{text}");
    for part in says {
        assert!(text.contains(part), "{text:?} does not say {part:?}");
    }
    text
}

fn with_keys(url: &str) -> Storage {
    let keys = [
        ("aws_access_key_id", "objwal-test"),
        ("aws_secret_access_key", "objwal-test"),
        ("aws_region", "us-east-1"),
    ];
    Storage::from_url_opts(url, keys).unwrap()
}

/// A port on loopback that nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_one_line_naming_it_and_the_fix() {
    let endpoint = s3_endpoint();
    for adapter in ["object_store", "opendal"] {
        let url = format!("s3://no-such-bucket-objwal?endpoint={endpoint}&adapter={adapter}");
        let storage = with_keys(&url);
        let e = storage
            .create("p/objects/x", Bytes::from_static(b"v"))
            .await
            .unwrap_err();
        assert!(!e.is_transient(), "{adapter}: {e}");
        assert!(
            e.backend_error().is_some(),
            "{adapter}: the backend's error is kept"
        );
        let says = [
            "does not exist",
            "create it, or fix the bucket name in the storage URL",
            endpoint.as_str(),
        ];
        let text = assert_told_once(e, &says);
        if adapter == "object_store" {
            assert!(
                text.contains("the bucket \"no-such-bucket-objwal\""),
                "{text}"
            );
        }
        let e = storage.list("p/").await.unwrap_err();
        assert_told_once(e, &says);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_says_connection_refused_and_where() {
    let port = closed_port();
    for adapter in ["object_store", "opendal"] {
        let url = format!("s3://{S3_BUCKET}?endpoint=http://127.0.0.1:{port}&adapter={adapter}");
        let storage = with_keys(&url);
        let e = storage
            .create("p/objects/x", Bytes::from_static(b"v"))
            .await
            .unwrap_err();
        assert!(e.is_transient(), "{adapter}: {e}");
        let by = format!("connection refused by http://127.0.0.1:{port}");
        assert_told_once(e, &[&by, "is the store running there"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_credentials_name_the_fix_not_the_metadata_request() {
    let endpoint = s3_endpoint();
    // object_store with no keys asks the instance metadata service; here
    // one on a closed port (the environment's variables are not read).
    let metadata = format!("http://127.0.0.1:{}", closed_port());
    objwal::storage::install_crypto_provider();
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(S3_BUCKET)
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_metadata_endpoint(&metadata)
        .with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        })
        .build()
        .unwrap();
    let storage = Storage::from_object_store(std::sync::Arc::new(store));
    let e = storage.list("p/").await.unwrap_err();
    let text = assert_told_once(
        e,
        &[
            &format!("no credentials: none were configured and the instance metadata service at {metadata} gave none"),
            "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        ],
    );
    assert!(!text.contains("/latest/api/token"), "{text}");

    // opendal with every credential source turned off.
    objwal::storage::install_crypto_provider();
    let op = opendal::services::S3::default()
        .bucket(S3_BUCKET)
        .endpoint(&endpoint)
        .region("us-east-1")
        .disable_config_load()
        .disable_ec2_metadata();
    let storage = Storage::from_opendal(opendal::Operator::new(op).unwrap());
    let e = storage
        .create("p/objects/x", Bytes::from_static(b"v"))
        .await
        .unwrap_err();
    assert_told_once(e, &["no credentials", "AWS_ACCESS_KEY_ID"]);
}
