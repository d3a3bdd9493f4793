//! Opening stores and building configurations from command line values.
//!
//! Every refusal here is bad input (exit 2) with a message naming the URL or
//! the field. Read-only commands open a `file://` store only when its
//! directory exists, so that inspecting a mistyped path does not create it.

use objwal::storage::keys::Prefix;
use objwal::{Config, Storage};

use crate::CliError;

/// The storage a URL names (`Storage::from_url`), as a usage error when the
/// URL is refused. `read_only` refuses a `file://` directory that does not
/// exist instead of creating it.
pub fn open(url: &str, read_only: bool) -> Result<Storage, CliError> {
    if read_only {
        if let Some(path) = file_path(url) {
            if !path.is_dir() {
                return Err(CliError::Usage(format!(
                    "storage URL {url:?}: no such directory {}",
                    path.display()
                )));
            }
        }
    }
    Storage::from_url(url).map_err(|e| CliError::Usage(e.to_string()))
}

/// The local directory of a `file://` URL, when it is one.
pub fn file_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("file://")?;
    if rest.starts_with('/') {
        ::url::Url::parse(url).ok()?.to_file_path().ok()
    } else {
        Some(std::path::PathBuf::from(rest))
    }
}

/// The validated prefix, as a usage error when it is refused.
pub fn prefix(prefix: &str) -> Result<Prefix, CliError> {
    Prefix::new(prefix).map_err(|e| CliError::Usage(e.to_string()))
}

/// A configuration from the library's defaults and `overrides`, written
/// as in a config file (`"flush_interval": "10ms"`, `"max_batch_bytes":
/// "8MiB"`), then validated: the library's own parsing and messages.
pub fn config(overrides: serde_json::Map<String, serde_json::Value>) -> Result<Config, CliError> {
    // serde_json does not name the field it refused: try each alone.
    for (field, value) in &overrides {
        let one = serde_json::Map::from_iter([(field.clone(), value.clone())]);
        if let Err(e) = serde_json::from_value::<Config>(serde_json::Value::Object(one)) {
            return Err(CliError::Usage(format!(
                "invalid configuration: {field}: {e}"
            )));
        }
    }
    let config: Config = serde_json::from_value(serde_json::Value::Object(overrides))
        .map_err(|e| CliError::Usage(format!("invalid configuration: {e}")))?;
    config.validate()?;
    Ok(config)
}

/// The command line spelling of an ack mode, for the JSON overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AckModeArg {
    /// `append` returns once durable.
    Durable,
    /// `append` returns on admission.
    Enqueued,
}

impl AckModeArg {
    /// The name `Config` deserializes.
    pub fn as_str(self) -> &'static str {
        match self {
            AckModeArg::Durable => "durable",
            AckModeArg::Enqueued => "enqueued",
        }
    }
}

/// Parses a positive number of seconds (fractions allowed), at most a day.
pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(format!("{s} is outside (0, 86400] seconds"))
    }
}
