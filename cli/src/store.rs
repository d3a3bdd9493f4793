//! Opening stores and building configurations from command line values.
//!
//! Every refusal here is bad input (exit 2) with a message naming the URL or
//! the field. Commands that read (and `bench`) open a `file://` store only
//! when its directory exists, so that a mistyped path is not created; a
//! file where the directory should be is named as such. A prefix without
//! objects is refused with the prefixes that do hold a log.

use objwal::storage::keys::{Logs, Prefix};
use objwal::{Config, ObjectMeta, ObjectStorage, Storage};

use crate::CliError;

/// The storage a URL names (`Storage::from_url`), as a usage error when the
/// URL is refused. `must_exist` refuses a `file://` directory that does not
/// exist instead of creating it.
pub fn open(url: &str, must_exist: bool) -> Result<Storage, CliError> {
    if let Some(path) = file_path(url) {
        if path.exists() && !path.is_dir() {
            return Err(CliError::Usage(format!(
                "storage URL {url:?}: {} is a file, not a directory (a file:// store is a directory of objects)",
                path.display()
            )));
        }
        if must_exist && !path.is_dir() {
            return Err(CliError::Usage(format!(
                "storage URL {url:?}: no such directory {}",
                path.display()
            )));
        }
    }
    Storage::from_url(url).map_err(|e| CliError::Usage(e.to_string()))
}

/// The objects under `prefix`, refusing (exit 2) a prefix that holds none
/// with the prefixes of this store that hold a log (the library's finding,
/// [`Logs`], which `Wal::open` names too when `create_if_missing` is
/// false), or, when `url` names a log's own directory (its root holds
/// `objects/` and `fences/`), with the parent URL and the `--prefix` to
/// use instead. Lists the whole store only on that path.
pub async fn objects(
    storage: &Storage,
    prefix: &Prefix,
    url: &str,
) -> Result<Vec<ObjectMeta>, CliError> {
    let listed = storage.list(&prefix.objects_prefix()).await?;
    if !listed.is_empty() {
        return Ok(listed);
    }
    let everything = storage.list("").await?;
    let logs = Logs::find(everything.iter().map(|m| m.key.as_str()));
    let mut hints = Vec::new();
    if logs.at_root {
        hints.push(match parent_of(url) {
            Some((parent, last)) => format!(
                "this URL names a log itself (its root holds the log's objects): use its parent, \
                 {parent} --prefix {last}"
            ),
            None => "the store's root holds a log's objects itself; objwal reads a log under a \
                     prefix"
                .to_owned(),
        });
    }
    if !logs.prefixes.is_empty() {
        let names: Vec<String> = (logs.prefixes.iter())
            .map(|p| format!("--prefix {p}"))
            .collect();
        hints.push(format!("prefixes holding a log here: {}", names.join(", ")));
    }
    if hints.is_empty() {
        hints.push("the store holds no objwal log".to_owned());
    }
    Err(CliError::Usage(format!(
        "no objects under prefix {prefix:?}; {}",
        hints.join("; "),
        prefix = prefix.as_str()
    )))
}

/// Deletes everything under `prefix` (a benchmark's scratch prefix);
/// failures are reported, not fatal.
pub async fn clean(storage: &Storage, prefix: &str) {
    let Ok(listed) = storage.list(&format!("{prefix}/")).await else {
        out!("cleanup:   could not list {prefix}/; remove it by hand");
        return;
    };
    for meta in listed {
        if let Err(e) = storage.delete(&meta.key).await {
            out!("cleanup:   could not delete {}: {e}", meta.key);
        }
    }
}

/// The URL of the folder (or bucket) holding what `url` names, with the
/// same query, and the name of that last part: `file:///data/kv` gives
/// `file:///data` and `kv`. `None` for a URL with no path to go up from
/// (`s3://bucket`).
pub fn parent_of(url: &str) -> Option<(String, String)> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = base.trim_end_matches('/').split_once("://")?;
    let (parent, last) = rest.rsplit_once('/')?;
    if last.is_empty() {
        return None;
    }
    let parent = if parent.is_empty() && rest.starts_with('/') {
        "/"
    } else {
        parent
    };
    Some((format!("{scheme}://{parent}{query}"), last.to_owned()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_of_a_url_keeps_its_scheme_and_query() {
        for (url, parent, last) in [
            ("file:///tmp/x/kv", "file:///tmp/x", "kv"),
            ("file:///tmp/x/kv/", "file:///tmp/x", "kv"),
            ("file:///kv", "file:///", "kv"),
            ("file://rel/kv", "file://rel", "kv"),
            (
                "s3://b/root/kv?endpoint=http://h:9000",
                "s3://b/root?endpoint=http://h:9000",
                "kv",
            ),
            ("s3://b/kv", "s3://b", "kv"),
        ] {
            assert_eq!(
                parent_of(url),
                Some((parent.to_owned(), last.to_owned())),
                "{url}"
            );
        }
        assert_eq!(parent_of("s3://b"), None);
        assert_eq!(parent_of("s3://b?endpoint=http://h:9000/x"), None);
        assert_eq!(parent_of("memory://"), None);
    }
}

/// The configuration file `--config` named, read once by `main`.
static BASE: std::sync::OnceLock<(std::path::PathBuf, Config)> = std::sync::OnceLock::new();

/// Reads `--config FILE` (`Config::from_file`: every key optional, unknown
/// keys refused, validated) as the base of every command's configuration.
/// A file that is missing or refused is bad input.
pub fn load_base(path: &std::path::Path) -> Result<(), CliError> {
    let config = Config::from_file(path)?;
    // `main` calls this once, before any command reads the base.
    let _ = BASE.set((path.to_owned(), config));
    Ok(())
}

/// The configuration a command starts from: the `--config` file's, else
/// the library's defaults.
pub fn base() -> Config {
    BASE.get().map(|(_, c)| c.clone()).unwrap_or_default()
}

/// Passes `--config FILE` on to a child process of this binary (the
/// demo's writer, the crash gate's lives), so that it runs with the same
/// configuration.
pub fn forward_config(command: &mut tokio::process::Command) {
    if let Some((path, _)) = BASE.get() {
        command.arg("--config").arg(path);
    }
}

/// A configuration from [`base`] and `overrides`, written as in a config
/// file (`"flush_interval": "10ms"`, `"max_batch_bytes": "8MiB"`), then
/// validated: the library's own parsing and messages.
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
    let mut merged = match serde_json::to_value(base()) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => {
            return Err(CliError::Failed(
                "the base configuration does not serialize as a map".into(),
            ))
        }
    };
    merged.extend(overrides);
    let config: Config = serde_json::from_value(serde_json::Value::Object(merged))
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
