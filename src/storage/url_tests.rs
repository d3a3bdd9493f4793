//! Unit tests of storage URL parsing.

use super::*;
use crate::ObjectStorage;

/// The message `from_url` refuses `url` with (it must name the URL).
fn refused(url: &str) -> String {
    refused_with(url, &[])
}

#[test]
fn malformed_urls_are_refused_with_a_reason() {
    for (url, says) in [
        ("", "SCHEME://"),
        ("/var/lib/wal", "SCHEME://"),
        ("ftp://host/x", "unknown scheme"),
        ("memory://x", "no path"),
        ("memory://?a=b", "no path"),
        ("file://", "no path"),
        ("file:///tmp/x?sync=1", "no query"),
        ("s3:///root", "missing the bucket"),
        ("s3://", "missing the bucket"),
        ("s3://b?color=red", "unknown parameter \"color\""),
        ("s3://b?region", "not key=value"),
        ("s3://b?region=", "is empty"),
        ("s3://b?region=a&region=b", "given twice"),
        ("s3://b?endpoint=localhost:9000", "endpoint must be"),
        ("s3://b/a//c", "root"),
        ("s3://b/a/../c", "root"),
        ("s3://b:99", "plain name"),
        ("s3://b#frag", "fragment"),
        ("azblob://c/x?region=us", "unknown parameter"),
    ] {
        let message = refused(url);
        assert!(
            message.contains(says),
            "{url}: {message:?} should say {says:?}"
        );
    }
}

#[test]
fn missing_features_name_the_feature_to_enable() {
    if !cfg!(any(feature = "opendal", feature = "object_store")) {
        assert!(refused("s3://b").contains("`object_store` or `opendal`"));
    }
    if !cfg!(feature = "opendal") {
        assert!(refused("gs://b").contains("`opendal`"));
        assert!(refused("azblob://c?account=a").contains("`opendal`"));
    } else {
        assert!(refused("azblob://c").contains("account="));
    }
}

#[test]
fn cloud_urls_split_bucket_root_and_params() {
    let u = parse_cloud(
        "s3://my-bucket/some/r%20oot/?endpoint=http://127.0.0.1:9000&region=eu-west-1",
        &["endpoint", "region"],
    )
    .unwrap();
    assert_eq!(u.bucket, "my-bucket");
    assert_eq!(u.root.as_deref(), Some("some/r oot"));
    assert_eq!(u.params["endpoint"], "http://127.0.0.1:9000");
    assert_eq!(u.params["region"], "eu-west-1");
    let u = parse_cloud("s3://b", &[]).unwrap();
    assert!(u.root.is_none() && u.params.is_empty());
}

#[tokio::test]
async fn memory_urls_are_fresh_stores() {
    let a = Storage::from_url("memory://").unwrap();
    a.create("k", bytes::Bytes::from_static(b"x"))
        .await
        .unwrap();
    let b = Storage::from_url("memory://").unwrap();
    assert!(b.list("").await.unwrap().is_empty());
}

#[tokio::test]
async fn file_urls_open_absolute_and_relative_paths() {
    let dir = tempfile::tempdir().unwrap();
    let abs = dir.path().join("w a l");
    let url = ::url::Url::from_file_path(&abs).unwrap();
    let s = Storage::from_url(url.as_str()).unwrap();
    s.create("p/k", bytes::Bytes::from_static(b"x"))
        .await
        .unwrap();
    assert!(abs.join("p/k").is_file());
    // Relative: under the current directory (the crate root in tests).
    let rel = format!("target/tmp-url-test-{}", std::process::id());
    let s = Storage::from_url(&format!("file://{rel}")).unwrap();
    assert!(s.list("").await.unwrap().is_empty());
    std::fs::remove_dir_all(&rel).unwrap();
}

#[cfg(any(feature = "opendal", feature = "object_store"))]
#[test]
fn s3_urls_build_without_contacting_the_server() {
    let s = Storage::from_url("s3://bucket/root?endpoint=http://127.0.0.1:1&region=us-east-1");
    assert!(s.is_ok(), "{s:?}");
}

/// Issue 21, item 6: `early_seals = "auto"` budgeted every `s3://` store,
/// MinIO on loopback included, so a durable engine waited a flush interval
/// per append. An endpoint only a self-hosted server can be counts as
/// unbilled; a public one, and no endpoint at all, keep the budget.
#[cfg(any(feature = "opendal", feature = "object_store"))]
#[test]
fn a_self_hosted_endpoint_is_not_billed_per_request() {
    let billed = |url: &str, options: &[(&str, &str)]| {
        Storage::from_url_opts(url, options.iter().copied())
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .charges_per_request()
    };
    let adapters: &[&str] = match (cfg!(feature = "object_store"), cfg!(feature = "opendal")) {
        (true, true) => &["&adapter=object_store", "&adapter=opendal"],
        _ => &[""],
    };
    for adapter in adapters {
        for (url, options, want) in [
            ("s3://b?endpoint=http://127.0.0.1:9000", &[][..], false),
            ("s3://b/root?endpoint=http://minio:9000", &[], false),
            ("s3://b?endpoint=http://192.168.1.5:9000", &[], false),
            ("s3://b?endpoint=https://minio.example.com", &[], true),
            (
                "s3://b?endpoint=https://s3.eu-west-1.amazonaws.com",
                &[],
                true,
            ),
            (
                "s3://b?region=us-east-1",
                &[("aws_endpoint", "http://10.1.2.3:9000")],
                false,
            ),
        ] {
            let url = format!("{url}{adapter}");
            assert_eq!(billed(&url, options), want, "{url} {options:?}");
        }
    }
    if cfg!(feature = "opendal") {
        assert!(!billed("gs://b?endpoint=http://127.0.0.1:4443", &[]));
        assert!(billed("gs://b", &[]));
        let azurite =
            "azblob://c?account=devstoreaccount1&endpoint=http://127.0.0.1:10000/devstoreaccount1";
        assert!(!billed(azurite, &[]));
        assert!(billed("azblob://c?account=a", &[]));
    }
}

/// The message `from_url_opts` refuses `url` and `options` with.
fn refused_with(url: &str, options: &[(&str, &str)]) -> String {
    match Storage::from_url_opts(url, options.iter().copied()) {
        Ok(s) => panic!("{url} {options:?} was accepted: {s:?}"),
        Err(Error::InvalidArgument { message }) => {
            assert!(message.contains(url), "{message} does not name {url}");
            message
        }
        Err(e) => panic!("{url}: wrong error {e}"),
    }
}

#[test]
fn options_are_refused_where_they_cannot_apply() {
    let m = refused_with("memory://", &[("aws_region", "x")]);
    assert!(m.contains("takes no options (got aws_region)"), "{m}");
    let m = refused_with("file:///tmp/x", &[("a", "b")]);
    assert!(m.contains("takes no options"), "{m}");
    let m = refused_with("s3://b", &[("AWS_REGION", "a"), ("aws_region", "b")]);
    assert!(m.contains("given twice"), "{m}");
    let m = refused_with("s3://b", &[("aws_region", "")]);
    assert!(m.contains("is empty"), "{m}");
    let m = refused_with("s3://b?adapter=ftp", &[]);
    assert!(m.contains("adapter \"ftp\" is unknown"), "{m}");
}

#[cfg(feature = "object_store")]
#[test]
fn object_store_s3_takes_its_config_keys_and_refuses_others() {
    let endpoint = ("aws_endpoint", "http://127.0.0.1:1");
    for options in [
        vec![
            endpoint,
            ("aws_access_key_id", "k"),
            ("aws_secret_access_key", "s"),
        ],
        vec![
            endpoint,
            ("region", "eu-west-1"),
            ("timeout", "5s"),
            ("aws_allow_http", "false"),
        ],
    ] {
        let s = Storage::from_url_opts("s3://b/root", options.iter().copied());
        assert!(s.is_ok(), "{options:?}: {s:?}");
    }
    let m = refused_with("s3://b", &[("aws_acces_key_id", "k")]);
    assert!(m.contains("unknown option \"aws_acces_key_id\""), "{m}");
    let m = refused_with("s3://b", &[("aws_bucket", "other")]);
    assert!(m.contains("bucket comes from the URL"), "{m}");
}

#[cfg(feature = "opendal")]
#[test]
fn opendal_backends_take_their_option_tables_and_refuse_others() {
    let s3 = "s3://b/root?adapter=opendal&endpoint=http://127.0.0.1:1";
    let ok = Storage::from_url_opts(
        s3,
        [
            ("aws_access_key_id", "k"),
            ("secret_access_key", "s"),
            ("aws_allow_http", "yes"),
        ],
    );
    assert!(ok.is_ok(), "{ok:?}");
    let m = refused_with(s3, &[("aws_acces_key_id", "k")]);
    assert!(
        m.contains("known: aws_access_key_id, access_key_id,"),
        "{m}"
    );
    let m = refused_with(s3, &[("aws_region", "a"), ("region", "b")]);
    assert!(m.contains("repeats a setting"), "{m}");
    let m = refused_with(s3, &[("aws_skip_signature", "maybe")]);
    assert!(m.contains("must be true or false"), "{m}");
    let ok = Storage::from_url_opts(
        "azblob://c",
        [
            ("account_name", "acct"),
            ("azure_storage_account_key", "a2V5"),
        ],
    );
    assert!(ok.is_ok(), "{ok:?}");
    let m = refused_with("azblob://c", &[("account", "a"), ("azure_client_id", "x")]);
    assert!(m.contains("unknown option \"azure_client_id\""), "{m}");
    let ok = Storage::from_url_opts(
        "gs://b/root",
        [("token", "t"), ("endpoint", "http://127.0.0.1:1")],
    );
    assert!(ok.is_ok(), "{ok:?}");
    let m = refused_with("gs://b", &[("google_bucket", "x")]);
    assert!(m.contains("known: google_service_account,"), "{m}");
}

/// Issue 29, item 6: the opendal backends' HTTP client had no overall
/// timeout. Every opendal table takes object_store's `timeout` and
/// `connect_timeout`, as durations.
#[cfg(feature = "opendal")]
#[test]
fn opendal_backends_take_http_timeouts() {
    for url in [
        "s3://b/root?adapter=opendal&endpoint=http://127.0.0.1:1",
        "gs://b/root?endpoint=http://127.0.0.1:1",
        "azblob://c?account=acct&endpoint=http://127.0.0.1:1",
    ] {
        let ok = Storage::from_url_opts(url, [("timeout", "90s"), ("connect_timeout", "2s")]);
        assert!(ok.is_ok(), "{url}: {ok:?}");
        let m = refused_with(url, &[("timeout", "soon")]);
        assert!(m.contains("must be a duration"), "{url}: {m}");
    }
}

#[test]
fn the_module_docs_name_every_option() {
    let docs: String = include_str!("url.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    for table in [cloud::S3_OPTIONS, cloud::GCS_OPTIONS, cloud::AZBLOB_OPTIONS] {
        for name in table.iter().flat_map(|(_, names)| names.iter()) {
            let short = name.strip_prefix("aws_").unwrap_or(name);
            assert!(
                docs.contains(&format!("`{name}`")) || docs.contains(&format!("`aws_{short}`")),
                "the module docs do not name the option {name}"
            );
        }
    }
}

/// The adapters' TLS is rustls with ring, installed by `from_url` before it
/// builds a client: an https endpoint gets as far as the network (here a
/// closed port on loopback) instead of panicking for want of a provider.
#[cfg(feature = "object_store")]
#[tokio::test]
async fn an_https_endpoint_builds_its_tls_client_with_ring() {
    use crate::storage::ObjectStorage;
    let s = Storage::from_url_opts(
        "s3://b/root",
        [
            ("aws_endpoint", "https://127.0.0.1:1"),
            ("aws_access_key_id", "k"),
            ("aws_secret_access_key", "s"),
        ],
    )
    .unwrap();
    let e = s.list("p/").await.unwrap_err();
    assert!(!e.to_string().is_empty());
}
