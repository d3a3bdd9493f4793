//! The cloud backends of storage URLs: how each adapter is built from a
//! parsed URL, an options map and the provider's standard credential chain.
//!
//! Order of precedence, everywhere: an option beats a URL query parameter,
//! which beats the environment. Every option key is checked: a key the
//! backend does not know is an error listing the names it does know, never
//! silently dropped (object_store's own `parse_url_opts` drops them).
//!
//! Invariant: the adapters' own retries stay off (objwal retries in one
//! place, above the storage), whatever the options say.
//!
//! Invariant: every HTTP client built here ends a request that has not
//! finished after `HTTP_TIMEOUT` (60 s; the `timeout` option changes it)
//! and a connection not made after `CONNECT_TIMEOUT` (5 s;
//! `connect_timeout`), for both adapters: object_store's client has such
//! defaults, opendal's default client has none, so its backends get a
//! client of their own. It is a backstop under `Config::request_timeout`
//! (30 s by default, which so decides first), for what runs without one:
//! `request_timeout = "off"`, and a `Storage` used directly (the command
//! line's tools).
//!
//! A backend whose endpoint (from the URL, an option or, for S3,
//! `AWS_ENDPOINT_URL`) can only be a self-hosted server answers
//! `charges_per_request() == false` (`billing`): `early_seals = "auto"` is
//! then unlimited, as on a local directory.

use super::{invalid, CloudUrl, Error, Options, Storage};
#[cfg(any(feature = "opendal", feature = "object_store"))]
use crate::storage::billing::unless_self_hosted;

/// The overall timeout of a request of the HTTP clients built here: twice
/// the default `request_timeout`, so that a `request_timeout` up to it
/// decides first.
#[cfg(any(feature = "opendal", feature = "object_store"))]
pub(crate) const HTTP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The connect timeout of the HTTP clients built here (object_store's
/// default).
#[cfg(any(feature = "opendal", feature = "object_store"))]
pub(crate) const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Builds a backend from the URL text (for messages), its parts and options.
pub(super) type Builder = fn(&str, &CloudUrl, &Options) -> Result<Storage, Error>;

/// A setting the opendal-built backends take from an options map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(feature = "opendal"),
    allow(
        dead_code,
        reason = "the tables are documented and tested without opendal"
    )
)]
pub(super) enum Setting {
    AccessKeyId,
    SecretAccessKey,
    SessionToken,
    Region,
    Endpoint,
    AllowHttp,
    VirtualHostedStyle,
    SkipSignature,
    RoleArn,
    Profile,
    CredentialPath,
    Credential,
    Token,
    Scope,
    Account,
    AccountKey,
    SasToken,
    Timeout,
    ConnectTimeout,
}

/// The HTTP client settings every opendal table accepts (object_store's
/// names).
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
const HTTP_OPTIONS: [(Setting, &[&str]); 2] = [
    (Setting::Timeout, &["timeout"]),
    (Setting::ConnectTimeout, &["connect_timeout"]),
];

/// The option names of `s3://` when opendal builds it (object_store's names
/// first, then the short forms).
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
pub(super) const S3_OPTIONS: &[(Setting, &[&str])] = &[
    (
        Setting::AccessKeyId,
        &["aws_access_key_id", "access_key_id"],
    ),
    (
        Setting::SecretAccessKey,
        &["aws_secret_access_key", "secret_access_key"],
    ),
    (
        Setting::SessionToken,
        &["aws_session_token", "aws_token", "session_token", "token"],
    ),
    (
        Setting::Region,
        &[
            "aws_region",
            "region",
            "aws_default_region",
            "default_region",
        ],
    ),
    (
        Setting::Endpoint,
        &[
            "aws_endpoint",
            "aws_endpoint_url",
            "endpoint",
            "endpoint_url",
        ],
    ),
    (Setting::AllowHttp, &["aws_allow_http", "allow_http"]),
    (
        Setting::VirtualHostedStyle,
        &[
            "aws_virtual_hosted_style_request",
            "virtual_hosted_style_request",
        ],
    ),
    (
        Setting::SkipSignature,
        &["aws_skip_signature", "skip_signature"],
    ),
    (Setting::RoleArn, &["aws_role_arn", "role_arn"]),
    (Setting::Profile, &["aws_profile", "profile"]),
    HTTP_OPTIONS[0],
    HTTP_OPTIONS[1],
];

/// The option names of `gs://` (opendal).
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
pub(super) const GCS_OPTIONS: &[(Setting, &[&str])] = &[
    (
        Setting::CredentialPath,
        &[
            "google_service_account",
            "google_service_account_path",
            "google_application_credentials",
            "service_account",
            "service_account_path",
            "credential_path",
        ],
    ),
    (Setting::Credential, &["credential"]),
    (Setting::Token, &["token"]),
    (Setting::Scope, &["scope"]),
    (Setting::Endpoint, &["endpoint"]),
    (
        Setting::SkipSignature,
        &["google_skip_signature", "skip_signature"],
    ),
    HTTP_OPTIONS[0],
    HTTP_OPTIONS[1],
];

/// The option names of `azblob://` (opendal).
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
pub(super) const AZBLOB_OPTIONS: &[(Setting, &[&str])] = &[
    (
        Setting::Account,
        &["azure_storage_account_name", "account_name", "account"],
    ),
    (
        Setting::AccountKey,
        &[
            "azure_storage_account_key",
            "azure_storage_access_key",
            "account_key",
            "access_key",
        ],
    ),
    (
        Setting::SasToken,
        &[
            "azure_storage_sas_key",
            "azure_storage_sas_token",
            "sas_key",
            "sas_token",
        ],
    ),
    (Setting::Endpoint, &["azure_storage_endpoint", "endpoint"]),
    (
        Setting::SkipSignature,
        &["azure_skip_signature", "skip_signature"],
    ),
    HTTP_OPTIONS[0],
    HTTP_OPTIONS[1],
];

/// The settings `options` name, in key order, or an error naming the first
/// unknown key and the names `table` knows.
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
pub(super) fn settings<'a>(
    url: &str,
    table: &[(Setting, &[&str])],
    options: &'a Options,
) -> Result<Vec<(Setting, &'a str, &'a str)>, Error> {
    let mut out: Vec<(Setting, &str, &str)> = Vec::new();
    for (key, value) in options {
        let Some((setting, _)) = table
            .iter()
            .find(|(_, names)| names.contains(&key.as_str()))
        else {
            let known: Vec<&str> = table.iter().flat_map(|(_, n)| n.iter().copied()).collect();
            return Err(invalid(
                url,
                &format!("unknown option {key:?} (known: {})", known.join(", ")),
            ));
        };
        if out.iter().any(|(s, _, _)| s == setting) {
            return Err(invalid(
                url,
                &format!("option {key:?} repeats a setting given under another name"),
            ));
        }
        out.push((*setting, key.as_str(), value.as_str()));
    }
    Ok(out)
}

/// A boolean option value, as object_store reads them.
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
pub(super) fn truthy(url: &str, key: &str, value: &str) -> Result<bool, Error> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(invalid(
            url,
            &format!("option {key:?} must be true or false, not {value:?}"),
        )),
    }
}

/// A duration option value (`"30s"`, `"500ms"`), as object_store reads
/// them.
#[cfg_attr(not(feature = "opendal"), allow(dead_code, reason = "see Setting"))]
fn duration(url: &str, key: &str, value: &str) -> Result<std::time::Duration, Error> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        invalid(
            url,
            &format!("option {key:?} must be a duration like \"60s\", not {value:?}: {e}"),
        )
    })
}

/// The HTTP client settings of an opendal backend.
#[cfg(feature = "opendal")]
#[derive(Debug, Clone, Copy)]
struct Http {
    timeout: std::time::Duration,
    connect_timeout: std::time::Duration,
}

#[cfg(feature = "opendal")]
impl Default for Http {
    fn default() -> Self {
        Http {
            timeout: HTTP_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
        }
    }
}

#[cfg(feature = "opendal")]
impl Http {
    /// Takes `setting` if it is an HTTP client setting; `false` if not.
    fn take(&mut self, url: &str, setting: Setting, key: &str, value: &str) -> Result<bool, Error> {
        match setting {
            Setting::Timeout => self.timeout = duration(url, key, value)?,
            Setting::ConnectTimeout => self.connect_timeout = duration(url, key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `op` with a reqwest client of these timeouts as its HTTP transport
    /// (opendal's default client has no overall timeout).
    fn apply(self, url: &str, op: ::opendal::Operator) -> Result<::opendal::Operator, Error> {
        crate::storage::install_crypto_provider();
        let client = ::reqwest::Client::builder()
            .timeout(self.timeout)
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(|e| invalid(url, &format!("cannot build the HTTP client: {e}")))?;
        let transport = ::opendal::HttpTransporter::new(
            ::opendal_http_transport_reqwest::ReqwestTransport::new(client),
        );
        Ok(op.with_context(::opendal::OperationContext::new().with_http_transport(transport)))
    }
}

#[cfg(any(feature = "opendal", feature = "object_store"))]
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `s3://` through the adapter `?adapter=` names (`object_store` or
/// `opendal`), by default object_store when it is compiled in.
pub(super) fn s3(url: &str, u: &CloudUrl, options: &Options) -> Result<Storage, Error> {
    match u.params.get("adapter").map(String::as_str) {
        Some("object_store") => s3_object_store(url, u, options),
        Some("opendal") => s3_opendal(url, u, options),
        Some(other) => Err(invalid(
            url,
            &format!("adapter {other:?} is unknown (expected object_store or opendal)"),
        )),
        None if cfg!(feature = "object_store") => s3_object_store(url, u, options),
        None if cfg!(feature = "opendal") => s3_opendal(url, u, options),
        None => Err(invalid(
            url,
            "s3:// needs the cargo feature `object_store` or `opendal` (neither is enabled)",
        )),
    }
}

#[cfg(not(feature = "object_store"))]
fn s3_object_store(url: &str, _: &CloudUrl, _: &Options) -> Result<Storage, Error> {
    Err(invalid(
        url,
        "adapter=object_store needs the cargo feature `object_store`",
    ))
}

#[cfg(not(feature = "opendal"))]
fn s3_opendal(url: &str, _: &CloudUrl, _: &Options) -> Result<Storage, Error> {
    Err(invalid(
        url,
        "adapter=opendal needs the cargo feature `opendal`",
    ))
}

/// `s3://` through object_store: `AmazonS3Builder::from_env()` (every
/// `AWS_*` variable it knows), then the URL, then the options.
#[cfg(feature = "object_store")]
fn s3_object_store(url: &str, u: &CloudUrl, options: &Options) -> Result<Storage, Error> {
    use ::object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
    use ::object_store::{ClientConfigKey, RetryConfig};
    let mut b = AmazonS3Builder::from_env().with_bucket_name(&u.bucket);
    if let Some(region) = u.params.get("region") {
        b = b.with_region(region);
    }
    if let Some(endpoint) = u.params.get("endpoint") {
        b = b
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false);
    }
    // The backstop timeouts (module docs); an option may change them.
    b = b
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            humantime::format_duration(HTTP_TIMEOUT).to_string(),
        )
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            humantime::format_duration(CONNECT_TIMEOUT).to_string(),
        );
    let mut http_named = env("AWS_ALLOW_HTTP").is_some();
    for (key, value) in options {
        let config_key = match key.parse::<AmazonS3ConfigKey>() {
            Ok(AmazonS3ConfigKey::Bucket) => {
                return Err(invalid(url, "the bucket comes from the URL, not an option"));
            }
            Ok(k) => k,
            Err(_) => match key.parse::<ClientConfigKey>() {
                Ok(k) => AmazonS3ConfigKey::Client(k),
                Err(_) => {
                    return Err(invalid(
                        url,
                        &format!(
                            "unknown option {key:?} (expected one of object_store's \
                             AmazonS3ConfigKey or ClientConfigKey names, e.g. \
                             aws_access_key_id, aws_secret_access_key, aws_session_token, \
                             aws_endpoint, aws_region, aws_allow_http)"
                        ),
                    ));
                }
            },
        };
        http_named |= config_key == AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp);
        b = b.with_config(config_key, value);
    }
    // Naming an http:// endpoint is consent to plain HTTP, unless
    // allow_http was set either way.
    let endpoint = b.get_config_value(&AmazonS3ConfigKey::Endpoint);
    let plain = endpoint.as_ref().is_some_and(|e| e.starts_with("http://"));
    if plain && !http_named {
        b = b.with_allow_http(true);
    }
    crate::storage::install_crypto_provider();
    let store = b
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()
        .map_err(|e| invalid(url, &e.to_string()))?;
    // Paginated: listings go past keys object_store cannot parse.
    let storage = Storage::from_paginated_object_store(std::sync::Arc::new(store));
    Ok(unless_self_hosted(storage, endpoint.as_deref()))
}

/// `s3://` through opendal: its own loader (the `AWS_*` variables,
/// `AWS_ENDPOINT_URL`, the shared config and credentials files and
/// profile, web identity, the instance metadata service), then the URL,
/// then the options.
#[cfg(feature = "opendal")]
fn s3_opendal(url: &str, u: &CloudUrl, options: &Options) -> Result<Storage, Error> {
    let mut b = ::opendal::services::S3::default().bucket(&u.bucket);
    let mut region = u.params.get("region").cloned();
    let mut endpoint = u.params.get("endpoint").cloned();
    if let Some(endpoint) = &endpoint {
        b = b.endpoint(endpoint);
    }
    let mut http = Http::default();
    for (setting, key, value) in settings(url, S3_OPTIONS, options)? {
        if http.take(url, setting, key, value)? {
            continue;
        }
        b = match setting {
            Setting::AccessKeyId => b.access_key_id(value),
            Setting::SecretAccessKey => b.secret_access_key(value),
            Setting::SessionToken => b.session_token(value),
            Setting::Region => {
                region = Some(value.to_owned());
                b
            }
            Setting::Endpoint => {
                endpoint = Some(value.to_owned());
                b.endpoint(value)
            }
            // opendal follows the endpoint's scheme.
            Setting::AllowHttp => {
                truthy(url, key, value)?;
                b
            }
            Setting::VirtualHostedStyle if truthy(url, key, value)? => {
                b.enable_virtual_host_style()
            }
            Setting::SkipSignature if truthy(url, key, value)? => b.skip_signature(),
            Setting::RoleArn => b.role_arn(value),
            Setting::Profile => b.profile(value),
            _ => b,
        };
    }
    let region = region
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".to_owned());
    let op =
        ::opendal::Operator::new(b.region(&region)).map_err(|e| invalid(url, &e.to_string()))?;
    let op = http.apply(url, op)?;
    // opendal's loader reads AWS_ENDPOINT_URL when nothing else names one.
    let endpoint = endpoint.or_else(|| env("AWS_ENDPOINT_URL"));
    Ok(unless_self_hosted(
        Storage::from_opendal(op),
        endpoint.as_deref(),
    ))
}

/// `gs://` through opendal: its loader reads
/// `GOOGLE_APPLICATION_CREDENTIALS` and asks the VM metadata service.
#[cfg(feature = "opendal")]
pub(super) fn gcs(url: &str, u: &CloudUrl, options: &Options) -> Result<Storage, Error> {
    let mut b = ::opendal::services::Gcs::default().bucket(&u.bucket);
    let mut endpoint = u.params.get("endpoint").cloned();
    if let Some(endpoint) = &endpoint {
        b = b.endpoint(endpoint);
    }
    let mut http = Http::default();
    for (setting, key, value) in settings(url, GCS_OPTIONS, options)? {
        if http.take(url, setting, key, value)? {
            continue;
        }
        b = match setting {
            Setting::CredentialPath => b.credential_path(value),
            Setting::Credential => b.credential(value),
            Setting::Token => b.token(value.to_owned()),
            Setting::Scope => b.scope(value),
            Setting::Endpoint => {
                endpoint = Some(value.to_owned());
                b.endpoint(value)
            }
            Setting::SkipSignature if truthy(url, key, value)? => b.skip_signature(),
            _ => b,
        };
    }
    let op = ::opendal::Operator::new(b).map_err(|e| invalid(url, &e.to_string()))?;
    let op = http.apply(url, op)?;
    Ok(unless_self_hosted(
        Storage::from_opendal(op),
        endpoint.as_deref(),
    ))
}

#[cfg(not(feature = "opendal"))]
pub(super) fn gcs(url: &str, _: &CloudUrl, _: &Options) -> Result<Storage, Error> {
    Err(invalid(url, "gs:// needs the cargo feature `opendal`"))
}

/// `azblob://` through opendal: the account from `?account=`, an option or
/// `AZURE_STORAGE_ACCOUNT_NAME`; the key from an option,
/// `AZURE_STORAGE_KEY` or `AZURE_STORAGE_ACCOUNT_KEY`; a SAS token from an
/// option or `AZURE_STORAGE_SAS_TOKEN`.
#[cfg(feature = "opendal")]
pub(super) fn azblob(url: &str, u: &CloudUrl, options: &Options) -> Result<Storage, Error> {
    let mut account = u
        .params
        .get("account")
        .cloned()
        .or_else(|| env("AZURE_STORAGE_ACCOUNT_NAME"));
    let mut endpoint = u.params.get("endpoint").cloned();
    let mut account_key = env("AZURE_STORAGE_KEY").or_else(|| env("AZURE_STORAGE_ACCOUNT_KEY"));
    let mut sas = env("AZURE_STORAGE_SAS_TOKEN");
    let mut skip_signature = false;
    let mut http = Http::default();
    for (setting, key, value) in settings(url, AZBLOB_OPTIONS, options)? {
        if http.take(url, setting, key, value)? {
            continue;
        }
        let skip = setting == Setting::SkipSignature && truthy(url, key, value)?;
        let value = value.to_owned();
        match setting {
            Setting::Account => account = Some(value),
            Setting::AccountKey => account_key = Some(value),
            Setting::SasToken => sas = Some(value),
            Setting::Endpoint => endpoint = Some(value),
            Setting::SkipSignature => skip_signature = skip,
            _ => {}
        }
    }
    let account = account.ok_or_else(|| {
        invalid(
            url,
            "azblob:// needs ?account=NAME (or the option account_name, or AZURE_STORAGE_ACCOUNT_NAME)",
        )
    })?;
    let named = endpoint.clone();
    let endpoint = endpoint.unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
    let mut b = ::opendal::services::Azblob::default()
        .container(&u.bucket)
        .account_name(&account)
        .endpoint(&endpoint);
    if let Some(key) = account_key {
        b = b.account_key(&key);
    }
    if let Some(sas) = sas {
        b = b.sas_token(&sas);
    }
    if skip_signature {
        b = b.skip_signature();
    }
    let op = ::opendal::Operator::new(b).map_err(|e| invalid(url, &e.to_string()))?;
    let op = http.apply(url, op)?;
    Ok(unless_self_hosted(
        Storage::from_opendal(op),
        named.as_deref(),
    ))
}

#[cfg(not(feature = "opendal"))]
pub(super) fn azblob(url: &str, _: &CloudUrl, _: &Options) -> Result<Storage, Error> {
    Err(invalid(url, "azblob:// needs the cargo feature `opendal`"))
}
