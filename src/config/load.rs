//! Loading a [`Config`] from where operators keep it: a TOML text or file,
//! and environment variables that override single fields.
//!
//! Every loader ends with [`Config::validate`], so what it returns can be
//! opened. Every refusal is an [`Error::Config`] that names what it can:
//! the file, the line, and the field (or the environment variable).
//!
//! Environment overrides are generic over the fields: the base config is
//! serialized to a TOML table, each `<PREFIX><FIELD>` variable replaces the
//! key `<field>` (its value read as a TOML value, e.g. `4096` or `true`, and
//! otherwise as a string, e.g. `100ms`, `8MiB`, `enqueued`), and the table is
//! deserialized back. A field added to `Config` is therefore configurable
//! from the environment with no change here. The field names come from the
//! `Deserialize` implementation itself ([`field_names`]), so a variable that
//! names no field is refused by name instead of being ignored.

use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::Config;
use crate::error::Error;

/// Variables of objwal's own tooling that share the `OBJWAL_` prefix and
/// are not config keys (the S3 test server's, the seeds and folders of the
/// test suites and the crash gate): [`Config::with_vars`] passes over
/// `<prefix><NAME>` for each, so that `Config::from_env("OBJWAL_")` works in
/// a shell where README's `eval "$(scripts/s3-test-server)"` exported them.
/// Any other variable with the prefix must name a field.
pub(crate) const TOOLING_VARIABLES: &[&str] = &[
    "S3_ENDPOINT",
    "S3_PID",
    "ENGINE_SEED",
    "ENGINE_SEEDS",
    "MODEL_SEED",
    "FENCE_SEED",
    "CRASH_SEED",
    "CRASH_DIR",
    "CRASH_ROUND",
];

impl Config {
    /// Parses a TOML document (every key optional, unknown keys refused) and
    /// validates the result. Errors name the line and the field.
    ///
    /// ```
    /// let config = objwal::Config::from_toml_str(r#"
    ///     flush_interval = "20ms"
    ///     max_batch_bytes = "4MiB"
    ///     ack_mode = "enqueued"
    /// "#)?;
    /// assert_eq!(config.max_batch_bytes, 4 << 20);
    /// assert!(objwal::Config::from_toml_str("flush_intervall = \"20ms\"").is_err());
    /// # Ok::<(), objwal::Error>(())
    /// ```
    pub fn from_toml_str(text: &str) -> Result<Config, Error> {
        parse_toml(text, None)
    }

    /// Reads and parses a TOML file (see [`Config::from_toml_str`]); errors
    /// also name the file. The repository's `objwal.toml` lists every field
    /// with its default.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config {
            file: Some(path.to_owned()),
            line: None,
            field: None,
            message: format!("cannot read the file: {e}"),
        })?;
        parse_toml(&text, Some(path))
    }

    /// The default config with overrides from the process environment:
    /// `<prefix><FIELD>` (e.g. `OBJWAL_FLUSH_INTERVAL=20ms` for prefix
    /// `"OBJWAL_"`) sets `flush_interval`. A variable with the prefix that
    /// names no field is an error naming it, except the variables of
    /// objwal's own tooling, which are passed over (`OBJWAL_S3_ENDPOINT`,
    /// see [`Config::with_vars`]).
    pub fn from_env(prefix: &str) -> Result<Config, Error> {
        Config::default().with_env(prefix)
    }

    /// This config with overrides from the process environment, e.g. on top
    /// of [`Config::from_file`]. See [`Config::with_vars`].
    pub fn with_env(self, prefix: &str) -> Result<Config, Error> {
        let vars = std::env::vars_os().filter_map(|(key, value)| {
            let key = key.into_string().ok()?;
            key.starts_with(prefix).then_some((key, value))
        });
        let mut pairs = Vec::new();
        for (key, value) in vars {
            match value.into_string() {
                Ok(value) => pairs.push((key, value)),
                Err(_) => {
                    let message = "the value is not UTF-8".into();
                    return Err(env_error(Some(&key), None, message));
                }
            }
        }
        self.with_vars(prefix, pairs)
    }

    /// This config with overrides from `(name, value)` pairs shaped like
    /// environment variables: a name `<prefix><FIELD>` (the field in upper
    /// case) sets that field; names without the prefix are ignored, and so
    /// are those of objwal's own tooling, `<prefix>` followed by
    /// `S3_ENDPOINT`, `S3_PID` (the S3 test server's), `ENGINE_SEED`,
    /// `ENGINE_SEEDS`, `MODEL_SEED`, `FENCE_SEED`, `CRASH_SEED`,
    /// `CRASH_DIR` or `CRASH_ROUND` (the test suites' and the crash
    /// gate's); other names with the prefix that name no field are refused
    /// (a typo is never ignored). A value is read as a TOML
    /// value when it is one (`4096`, `true`), else as a string (`100ms`,
    /// `8MiB`, `enqueued`). The result is validated.
    ///
    /// ```
    /// use objwal::{AckMode, Config};
    ///
    /// let vars = [("OBJWAL_ACK_MODE", "enqueued"), ("OBJWAL_MAX_BATCH_BYTES", "1MiB"), ("HOME", "/root")];
    /// let config = Config::default().with_vars("OBJWAL_", vars)?;
    /// assert_eq!(config.ack_mode, AckMode::Enqueued);
    /// assert_eq!(config.max_batch_bytes, 1 << 20);
    /// assert!(Config::default().with_vars("OBJWAL_", [("OBJWAL_FLUSH", "1s")]).is_err());
    /// # Ok::<(), objwal::Error>(())
    /// ```
    pub fn with_vars(
        self,
        prefix: &str,
        vars: impl IntoIterator<Item = (impl AsRef<str>, impl AsRef<str>)>,
    ) -> Result<Config, Error> {
        if prefix.is_empty() {
            let message = "the variable prefix is empty: every variable would be read as a field";
            return Err(env_error(None, None, message.into()));
        }
        let mut table = toml::Table::try_from(&self).map_err(|e| {
            env_error(
                None,
                None,
                format!("the base config does not serialize: {e}"),
            )
        })?;
        let fields = field_names();
        let mut overridden = Vec::new();
        for (name, value) in vars {
            let (name, value) = (name.as_ref(), value.as_ref());
            let Some(rest) = name.strip_prefix(prefix) else {
                continue;
            };
            if TOOLING_VARIABLES.contains(&rest) {
                continue;
            }
            let Some(&field) = fields.iter().find(|f| f.eq_ignore_ascii_case(rest)) else {
                let known: Vec<_> = (fields.iter())
                    .map(|f| format!("{prefix}{}", f.to_ascii_uppercase()))
                    .collect();
                let message = format!("names no config field (known: {})", known.join(", "));
                return Err(env_error(Some(name), None, message));
            };
            if rest != field.to_ascii_uppercase() {
                let message = format!("write it {prefix}{}", field.to_ascii_uppercase());
                return Err(env_error(Some(name), Some(field), message));
            }
            let parsed = value
                .parse::<toml::Value>()
                .unwrap_or_else(|_| toml::Value::String(value.to_owned()));
            table.insert(field.to_owned(), parsed);
            // Deserialized after each override, so a bad value is blamed on
            // its own variable.
            Config::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
                env_error(
                    Some(name),
                    Some(field),
                    format!("{value:?}: {}", e.message()),
                )
            })?;
            overridden.push((name.to_owned(), field));
        }
        let config = Config::deserialize(toml::Value::Table(table))
            .map_err(|e| env_error(None, None, e.message().to_owned()))?;
        config.validate().map_err(|e| match e {
            Error::InvalidConfig { field, message } => {
                let var = overridden.iter().find(|(_, f)| *f == field);
                env_error(var.map(|(name, _)| name.as_str()), Some(field), message)
            }
            other => other,
        })?;
        Ok(config)
    }
}

/// An error of an environment override: `var` is named in the message,
/// `field` is the config field it sets, when known.
fn env_error(var: Option<&str>, field: Option<&str>, message: String) -> Error {
    Error::Config {
        file: None,
        line: None,
        field: field.map(str::to_owned),
        message: match var {
            Some(var) => format!("environment variable {var}: {message}"),
            None => message,
        },
    }
}

/// Parses and validates a TOML document, naming `file` in every error.
fn parse_toml(text: &str, file: Option<&Path>) -> Result<Config, Error> {
    let config: Config = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|span| line_of(text, span.start));
        Error::Config {
            file: file.map(Path::to_owned),
            line,
            field: line.and_then(|l| key_on_line(text, l)),
            message: e.message().to_owned(),
        }
    })?;
    config.validate().map_err(|e| match e {
        Error::InvalidConfig { field, message } => Error::Config {
            file: file.map(Path::to_owned),
            line: (1..=text.lines().count())
                .find(|&l| key_on_line(text, l).as_deref() == Some(field)),
            field: Some(field.to_owned()),
            message,
        },
        other => other,
    })?;
    Ok(config)
}

/// The line (from 1) holding byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.get(..offset).unwrap_or(text);
    before.bytes().filter(|&b| b == b'\n').count() + 1
}

/// The key a line of a flat TOML document sets (`key = value`, or the name
/// of a `[table]` header), without quotes.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let content = text.lines().nth(line.checked_sub(1)?)?.trim();
    let key = match content.strip_prefix('[') {
        Some(header) => header.trim_end_matches(']'),
        None => content.split_once('=')?.0,
    };
    let key = key.trim().trim_matches(['"', '\'']);
    (!key.is_empty()).then(|| key.to_owned())
}

/// The names of `Config`'s fields, as its `Deserialize` implementation
/// declares them (so fields added later are known with no list to update).
pub(crate) fn field_names() -> &'static [&'static str] {
    match Config::deserialize(FieldNames) {
        Err(Captured::Fields(fields)) => fields,
        // Unreachable for a derived struct; an empty list refuses every
        // override, which a test would notice.
        _ => &[],
    }
}

/// A deserializer that answers nothing and records the field names a
/// struct asks for.
struct FieldNames;

#[derive(Debug)]
enum Captured {
    Fields(&'static [&'static str]),
    Other,
}

impl std::fmt::Display for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field-name capture")
    }
}

impl std::error::Error for Captured {}

impl de::Error for Captured {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Captured::Other
    }
}

impl<'de> Deserializer<'de> for FieldNames {
    type Error = Captured;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Captured> {
        Err(Captured::Other)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Captured> {
        Err(Captured::Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
