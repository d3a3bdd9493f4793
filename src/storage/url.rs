//! Storage URLs: `Storage::from_url` and `Storage::from_url_opts`.
//!
//! Responsibility: turn one string (and an options map) into a configured
//! backend, or into an `Error::InvalidArgument` that says what is wrong.
//!
//! | URL | backend |
//! | --- | --- |
//! | `file:///abs/path`, `file://rel/path` | [`FileStorage`] (a relative path is taken from the current directory) |
//! | `memory://` | a new, empty [`MemoryStorage`] on every call |
//! | `s3://bucket[/root]?endpoint=URL&region=R&adapter=A` | object_store's S3 (feature `object_store`), else opendal's (feature `opendal`); `adapter=opendal` or `adapter=object_store` picks one |
//! | `gs://bucket[/root]?endpoint=URL` | opendal's GCS (feature `opendal`) |
//! | `azblob://container[/root]?account=A&endpoint=URL` | opendal's Azure Blob (feature `opendal`) |
//!
//! The `root` is a key prefix inside the bucket ([`Rooted`]), validated like
//! a WAL prefix. The adapters' own retries are turned off: objwal retries in
//! one place, above the storage. An option beats a URL query parameter,
//! which beats the environment.
//!
//! # Credentials: the provider's standard chain
//!
//! - `s3://` with object_store: `AmazonS3Builder::from_env()` reads every
//!   `AWS_*` variable it knows (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
//!   `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...). Without keys it uses, in
//!   order, web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`:
//!   EKS IRSA), the ECS/EKS container endpoint
//!   (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` / `_FULL_URI`), then the EC2
//!   instance metadata service (IMDSv2). object_store does not read
//!   `~/.aws/config` profiles: export the profile's keys, or use
//!   `adapter=opendal`. The region defaults to `us-east-1`. An `http://`
//!   endpoint allows plain HTTP unless `aws_allow_http` says otherwise.
//! - `s3://` with opendal: its loader reads the same variables,
//!   `AWS_ENDPOINT_URL`, the shared config and credentials files with
//!   `AWS_PROFILE`, web identity, and the instance metadata service.
//! - `gs://`: opendal's loader reads `GOOGLE_APPLICATION_CREDENTIALS` and
//!   asks the GCE metadata service.
//! - `azblob://`: the account from `?account=`, an option or
//!   `AZURE_STORAGE_ACCOUNT_NAME`; a key from an option, `AZURE_STORAGE_KEY`
//!   or `AZURE_STORAGE_ACCOUNT_KEY`; a SAS token from an option or
//!   `AZURE_STORAGE_SAS_TOKEN`.
//!
//! # Options (`from_url_opts`)
//!
//! Keys are case-insensitive; an unknown or repeated key is an error.
//!
//! - `s3://`, object_store: every name of object_store's `AmazonS3ConfigKey`
//!   and `ClientConfigKey` (`aws_access_key_id`, `aws_secret_access_key`,
//!   `aws_session_token`, `aws_endpoint`, `aws_region`, `aws_allow_http`,
//!   `aws_virtual_hosted_style_request`, `aws_skip_signature`, `timeout`,
//!   `connect_timeout`, ...), except the bucket (it comes from the URL).
//! - `s3://`, opendal: `aws_access_key_id`, `aws_secret_access_key`,
//!   `aws_session_token` (`aws_token`), `aws_region` (`aws_default_region`),
//!   `aws_endpoint` (`aws_endpoint_url`), `aws_allow_http`,
//!   `aws_virtual_hosted_style_request`, `aws_skip_signature`,
//!   `aws_role_arn`, `aws_profile`; each also without its `aws_` prefix.
//! - every opendal backend (`s3://` with opendal, `gs://`, `azblob://`):
//!   `timeout` and `connect_timeout`, object_store's names, durations like
//!   `"60s"`.
//!
//! The HTTP clients built for these URLs, through either adapter, end a
//! request after `timeout` (60 s unless an option says otherwise) and a
//! connection attempt after `connect_timeout` (5 s): a backstop under
//! `Config::request_timeout` (30 s by default) for `request_timeout =
//! "off"` and for a `Storage` used directly. A `request_timeout` above 60 s
//! needs a `timeout` option at least as long.
//! - `gs://`: `google_service_account` (`google_service_account_path`,
//!   `google_application_credentials`, `service_account`,
//!   `service_account_path`, `credential_path`: a key file), `credential`
//!   (the key file's JSON, base64), `token`, `scope`, `endpoint`,
//!   `google_skip_signature` (`skip_signature`).
//! - `azblob://`: `azure_storage_account_name` (`account_name`, `account`),
//!   `azure_storage_account_key` (`azure_storage_access_key`,
//!   `account_key`, `access_key`), `azure_storage_sas_key`
//!   (`azure_storage_sas_token`, `sas_key`, `sas_token`),
//!   `azure_storage_endpoint` (`endpoint`), `azure_skip_signature`
//!   (`skip_signature`).
//!
//! # What the tests here cannot reach
//!
//! The tests run an S3-protocol server on loopback and pass credentials by
//! option, URL and environment variable, through both adapters. Nothing on
//! this machine can play the instance metadata service, EKS web identity,
//! the ECS container endpoint, AWS profiles against real STS, the GCE
//! metadata service or Azure. Those paths are the adapters' own (objwal
//! only hands the builder over without turning any source off) and are
//! reached by running in that environment with no keys in the URL,
//! options or variables.
//!
//! Invariant: every refusal names the offending part of the URL or option
//! (and, for a backend that is not compiled in, the cargo feature that
//! enables it).

use std::collections::BTreeMap;

use super::{FileStorage, MemoryStorage, Rooted, Storage};
use crate::error::Error;

impl Storage {
    /// Opens the storage a URL names (see the table in this module's docs):
    /// `file://PATH`, `memory://`, `s3://bucket[/root]?endpoint=..&region=..`,
    /// `gs://bucket[/root]`, `azblob://container[/root]?account=..`. Cloud
    /// URLs take their credentials from the provider's standard chain.
    ///
    /// A `file://` URL creates the directory when it is missing, with
    /// blocking I/O; nothing in an existing directory is touched (a
    /// writer's open removes what crashed writers left:
    /// [`ObjectStorage::remove_leftovers`](super::ObjectStorage::remove_leftovers)).
    ///
    /// ```
    /// use objwal::Storage;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let durable = Storage::from_url(&format!("file://{}", dir.path().display()))?;
    /// let in_process = Storage::from_url("memory://")?;
    /// assert!(Storage::from_url("ftp://host/wal").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// ```no_run
    /// # #[cfg(any(feature = "object_store", feature = "opendal"))] {
    /// // Credentials from AWS_ACCESS_KEY_ID and the rest of the AWS chain;
    /// // an explicit endpoint for MinIO or another S3-compatible store.
    /// let s3 = objwal::Storage::from_url("s3://my-bucket/wal")?;
    /// let minio = objwal::Storage::from_url(
    ///     "s3://my-bucket/wal?endpoint=http://127.0.0.1:9000&region=us-east-1",
    /// )?;
    /// # }
    /// # Ok::<(), objwal::Error>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Storage, Error> {
        Storage::from_url_opts(url, std::iter::empty::<(&str, String)>())
    }

    /// Opens the storage a URL names, with settings from an options map,
    /// as object_store's `parse_url_opts` takes them: for `s3://` every
    /// `AmazonS3ConfigKey` or `ClientConfigKey` name (`aws_access_key_id`,
    /// `aws_secret_access_key`, `aws_session_token`, `aws_endpoint`,
    /// `aws_region`, `aws_allow_http`, `timeout`, ...; with only the
    /// `opendal` feature, the names listed in this module's docs); for
    /// `gs://` and `azblob://` the names in this module's docs. Keys are
    /// case-insensitive; an unknown or repeated key, or any option for
    /// `file://` and `memory://`, is an error. Options override the URL's
    /// query parameters, which override the environment.
    ///
    /// ```no_run
    /// # #[cfg(feature = "object_store")] {
    /// let storage = objwal::Storage::from_url_opts(
    ///     "s3://my-bucket/wal",
    ///     [
    ///         ("aws_endpoint", "http://127.0.0.1:9000"),
    ///         ("aws_access_key_id", "minio"),
    ///         ("aws_secret_access_key", "minio-secret"),
    ///         ("aws_region", "us-east-1"),
    ///     ],
    /// )?;
    /// # }
    /// # Ok::<(), objwal::Error>(())
    /// ```
    pub fn from_url_opts<K: AsRef<str>, V: Into<String>>(
        url: &str,
        options: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Storage, Error> {
        let mut opts = Options::new();
        for (key, value) in options {
            let key = key.as_ref().to_ascii_lowercase();
            let value = value.into();
            if value.is_empty() {
                return Err(invalid(url, &format!("option {key:?} is empty")));
            }
            if opts.insert(key.clone(), value).is_some() {
                return Err(invalid(url, &format!("option {key:?} is given twice")));
            }
        }
        let scheme = url
            .split_once("://")
            .map(|(s, _)| s)
            .ok_or_else(|| invalid(url, "expected SCHEME://..., e.g. file:///var/lib/wal"))?;
        if !opts.is_empty() && matches!(scheme, "file" | "memory") {
            let keys: Vec<_> = opts.keys().map(String::as_str).collect();
            return Err(invalid(
                url,
                &format!(
                    "a {scheme}:// URL takes no options (got {})",
                    keys.join(", ")
                ),
            ));
        }
        match scheme {
            "file" => file(url),
            "memory" => {
                if url != "memory://" && url != "memory:///" {
                    return Err(invalid(url, "a memory:// URL takes no path or parameters"));
                }
                Ok(Storage::new(MemoryStorage::new()))
            }
            "s3" | "gs" | "azblob" => cloud(url, scheme, &opts),
            other => Err(invalid(
                url,
                &format!("unknown scheme {other:?} (expected file, memory, s3, gs or azblob)"),
            )),
        }
    }
}

/// Options of `from_url_opts`, by lower-case key.
type Options = BTreeMap<String, String>;

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
#[cfg_attr(
    not(any(feature = "opendal", feature = "object_store")),
    allow(dead_code, reason = "without an adapter cloud URLs are only checked")
)]
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

fn cloud(url: &str, scheme: &str, options: &Options) -> Result<Storage, Error> {
    let (allowed, build): (&[&str], cloud::Builder) = match scheme {
        "s3" => (&["endpoint", "region", "adapter"], cloud::s3),
        "gs" => (&["endpoint"], cloud::gcs),
        _ => (&["account", "endpoint"], cloud::azblob),
    };
    let parsed = parse_cloud(url, allowed)?;
    let storage = build(url, &parsed, options)?;
    match &parsed.root {
        None => Ok(storage),
        Some(root) => Ok(Storage::new(Rooted::new(root, storage)?)),
    }
}

#[path = "url_cloud.rs"]
pub(super) mod cloud;

#[cfg(test)]
#[path = "url_tests.rs"]
mod tests;
