//! Storage URLs: `Storage::from_url`.
//!
//! Responsibility: turn one string into a configured backend, or into an
//! `Error::InvalidArgument` that says what is wrong.
//!
//! | URL | backend |
//! | --- | --- |
//! | `file:///abs/path`, `file://rel/path` | [`FileStorage`] (a relative path is taken from the current directory) |
//! | `memory://` | a new, empty [`MemoryStorage`] on every call |
//! | `s3://bucket[/root]?endpoint=URL&region=R` | object_store's S3 (feature `object_store`), else opendal's (feature `opendal`) |
//! | `gs://bucket[/root]` | opendal's GCS (feature `opendal`) |
//! | `azblob://container[/root]?account=A[&endpoint=URL]` | opendal's Azure Blob (feature `opendal`) |
//!
//! S3 credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//! `AWS_SESSION_TOKEN`; the region from `region=`, else `AWS_REGION` /
//! `AWS_DEFAULT_REGION`, else `us-east-1`. With `endpoint=` requests are
//! path-style, `http://` endpoints are allowed, and no cloud metadata service
//! is asked for credentials. Azure's key comes from `AZURE_STORAGE_KEY`.
//! The `root` is a key prefix inside the bucket ([`Rooted`]), validated like
//! a WAL prefix. The adapters' own retries are turned off: objwal retries in
//! one place, above the storage.
//!
//! Invariant: every refusal names the offending part of the URL (and, for a
//! backend that is not compiled in, the cargo feature that enables it).

use std::collections::BTreeMap;

use super::{FileStorage, MemoryStorage, Rooted, Storage};
use crate::error::Error;

impl Storage {
    /// Opens the storage a URL names (see the table in this module's docs):
    /// `file://PATH`, `memory://`, `s3://bucket[/root]?endpoint=..&region=..`,
    /// `gs://bucket[/root]`, `azblob://container[/root]?account=..`.
    ///
    /// A `file://` URL creates the directory and cleans temporary files with
    /// blocking I/O.
    pub fn from_url(url: &str) -> Result<Storage, Error> {
        let scheme = url
            .split_once("://")
            .map(|(s, _)| s)
            .ok_or_else(|| invalid(url, "expected SCHEME://..., e.g. file:///var/lib/wal"))?;
        match scheme {
            "file" => file(url),
            "memory" => {
                if url != "memory://" && url != "memory:///" {
                    return Err(invalid(url, "a memory:// URL takes no path or parameters"));
                }
                Ok(Storage::new(MemoryStorage::new()))
            }
            "s3" | "gs" | "azblob" => cloud(url, scheme),
            other => Err(invalid(
                url,
                &format!("unknown scheme {other:?} (expected file, memory, s3, gs or azblob)"),
            )),
        }
    }
}

fn invalid(url: &str, why: &str) -> Error {
    Error::invalid(format!("storage URL {url:?}: {why}"))
}

fn file(url: &str) -> Result<Storage, Error> {
    let rest = url.strip_prefix("file://").unwrap_or_default();
    if rest.contains(['?', '#']) {
        return Err(invalid(url, "a file:// URL takes no query or fragment"));
    }
    let path = if rest.starts_with('/') {
        let parsed = ::url::Url::parse(url).map_err(|e| invalid(url, &e.to_string()))?;
        parsed
            .to_file_path()
            .map_err(|()| invalid(url, "not a local absolute path"))?
    } else if rest.is_empty() {
        return Err(invalid(
            url,
            "no path (write file:///abs/path or file://rel/path)",
        ));
    } else {
        std::path::PathBuf::from(rest)
    };
    let storage = FileStorage::open(&path).map_err(Error::from)?;
    Ok(Storage::new(storage))
}

/// The parts every cloud URL has.
#[derive(Debug)]
struct CloudUrl {
    bucket: String,
    root: Option<String>,
    params: BTreeMap<String, String>,
}

fn parse_cloud(url: &str, allowed: &[&str]) -> Result<CloudUrl, Error> {
    let parsed = ::url::Url::parse(url).map_err(|e| invalid(url, &format!("malformed: {e}")))?;
    let bucket = match parsed.host_str() {
        Some(b) if !b.is_empty() => b.to_owned(),
        _ => return Err(invalid(url, "missing the bucket (container) name")),
    };
    if parsed.port().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(url, "the bucket part must be a plain name"));
    }
    if parsed.fragment().is_some() {
        return Err(invalid(url, "a fragment ('#') is not allowed"));
    }
    // The url crate resolves `.` and `..` away: refuse them in the raw text.
    let raw_path = url
        .split(['?', '#'])
        .next()
        .and_then(|u| u.split_once("://"))
        .and_then(|(_, rest)| rest.split_once('/'))
        .map_or("", |(_, p)| p);
    if raw_path.split('/').any(|p| p == "." || p == "..") {
        return Err(invalid(url, "root: it has a '.' or '..' part"));
    }
    let path = parsed.path().trim_start_matches('/');
    let path = path.strip_suffix('/').unwrap_or(path);
    let root = if path.is_empty() {
        None
    } else {
        let decoded = percent_decode(path).ok_or_else(|| invalid(url, "root is not UTF-8"))?;
        super::keys::Prefix::new(&decoded).map_err(|e| invalid(url, &format!("root: {e}")))?;
        Some(decoded)
    };
    let mut params = BTreeMap::new();
    if let Some(query) = parsed.query() {
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let Some((k, _)) = pair.split_once('=') else {
                return Err(invalid(
                    url,
                    &format!("query part {pair:?} is not key=value"),
                ));
            };
            if !allowed.contains(&k) {
                return Err(invalid(
                    url,
                    &format!("unknown parameter {k:?} (allowed: {})", allowed.join(", ")),
                ));
            }
        }
        for (k, v) in parsed.query_pairs() {
            if v.is_empty() {
                return Err(invalid(url, &format!("parameter {k:?} is empty")));
            }
            if params.insert(k.to_string(), v.to_string()).is_some() {
                return Err(invalid(url, &format!("parameter {k:?} is given twice")));
            }
        }
    }
    if let Some(endpoint) = params.get("endpoint") {
        match ::url::Url::parse(endpoint) {
            Ok(e) if matches!(e.scheme(), "http" | "https") && e.host_str().is_some() => {}
            _ => return Err(invalid(url, "endpoint must be an http:// or https:// URL")),
        }
    }
    Ok(CloudUrl {
        bucket,
        root,
        params,
    })
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |j: usize| bytes.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).ok()?);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn cloud(url: &str, scheme: &str) -> Result<Storage, Error> {
    let (allowed, build): (&[&str], Builder) = match scheme {
        "s3" => (&["endpoint", "region"], s3),
        "gs" => (&["endpoint"], gcs),
        _ => (&["account", "endpoint"], azblob),
    };
    let parsed = parse_cloud(url, allowed)?;
    let storage = build(url, &parsed)?;
    match &parsed.root {
        None => Ok(storage),
        Some(root) => Ok(Storage::new(Rooted::new(root, storage)?)),
    }
}

type Builder = fn(&str, &CloudUrl) -> Result<Storage, Error>;

#[cfg(any(feature = "opendal", feature = "object_store"))]
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(any(feature = "opendal", feature = "object_store"))]
fn region(u: &CloudUrl) -> String {
    u.params
        .get("region")
        .cloned()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".to_owned())
}

#[cfg(feature = "object_store")]
fn s3(url: &str, u: &CloudUrl) -> Result<Storage, Error> {
    use ::object_store::aws::AmazonS3Builder;
    use ::object_store::RetryConfig;
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(&u.bucket)
        .with_region(region(u))
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        });
    if let Some(endpoint) = u.params.get("endpoint") {
        b = b
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false);
    }
    if let Some(v) = env("AWS_ACCESS_KEY_ID") {
        b = b.with_access_key_id(v);
    }
    if let Some(v) = env("AWS_SECRET_ACCESS_KEY") {
        b = b.with_secret_access_key(v);
    }
    if let Some(v) = env("AWS_SESSION_TOKEN") {
        b = b.with_token(v);
    }
    let store = b.build().map_err(|e| invalid(url, &e.to_string()))?;
    Ok(Storage::from_object_store(std::sync::Arc::new(store)))
}

#[cfg(all(feature = "opendal", not(feature = "object_store")))]
fn s3(url: &str, u: &CloudUrl) -> Result<Storage, Error> {
    let mut b = ::opendal::services::S3::default()
        .bucket(&u.bucket)
        .region(&region(u));
    if let Some(endpoint) = u.params.get("endpoint") {
        b = b
            .endpoint(endpoint)
            .disable_config_load()
            .disable_ec2_metadata();
    }
    if let Some(v) = env("AWS_ACCESS_KEY_ID") {
        b = b.access_key_id(&v);
    }
    if let Some(v) = env("AWS_SECRET_ACCESS_KEY") {
        b = b.secret_access_key(&v);
    }
    if let Some(v) = env("AWS_SESSION_TOKEN") {
        b = b.session_token(&v);
    }
    let op = ::opendal::Operator::new(b).map_err(|e| invalid(url, &e.to_string()))?;
    Ok(Storage::from_opendal(op))
}

#[cfg(not(any(feature = "opendal", feature = "object_store")))]
fn s3(url: &str, _: &CloudUrl) -> Result<Storage, Error> {
    Err(invalid(
        url,
        "s3:// needs the cargo feature `object_store` or `opendal` (neither is enabled)",
    ))
}

#[cfg(feature = "opendal")]
fn gcs(url: &str, u: &CloudUrl) -> Result<Storage, Error> {
    let mut b = ::opendal::services::Gcs::default().bucket(&u.bucket);
    if let Some(endpoint) = u.params.get("endpoint") {
        b = b.endpoint(endpoint);
    }
    let op = ::opendal::Operator::new(b).map_err(|e| invalid(url, &e.to_string()))?;
    Ok(Storage::from_opendal(op))
}

#[cfg(not(feature = "opendal"))]
fn gcs(url: &str, _: &CloudUrl) -> Result<Storage, Error> {
    Err(invalid(url, "gs:// needs the cargo feature `opendal`"))
}

#[cfg(feature = "opendal")]
fn azblob(url: &str, u: &CloudUrl) -> Result<Storage, Error> {
    let account = u
        .params
        .get("account")
        .ok_or_else(|| invalid(url, "azblob:// needs ?account=NAME"))?;
    let endpoint = u
        .params
        .get("endpoint")
        .cloned()
        .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
    let mut b = ::opendal::services::Azblob::default()
        .container(&u.bucket)
        .account_name(account)
        .endpoint(&endpoint);
    if let Some(key) = env("AZURE_STORAGE_KEY").or_else(|| env("AZURE_STORAGE_ACCOUNT_KEY")) {
        b = b.account_key(&key);
    }
    let op = ::opendal::Operator::new(b).map_err(|e| invalid(url, &e.to_string()))?;
    Ok(Storage::from_opendal(op))
}

#[cfg(not(feature = "opendal"))]
fn azblob(url: &str, _: &CloudUrl) -> Result<Storage, Error> {
    Err(invalid(url, "azblob:// needs the cargo feature `opendal`"))
}

#[cfg(test)]
#[path = "url_tests.rs"]
mod tests;
