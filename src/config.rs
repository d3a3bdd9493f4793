//! Configuration: public fields, defaults, serde, and validation.
//!
//! `Config` deserializes from TOML or JSON with durations written like
//! `"100ms"` and sizes like `"8MiB"` (plain integers are bytes).
//! [`Config::validate`] refuses values that cannot work and names the field.

use std::time::Duration;

use serde::Deserialize;

use crate::error::Error;

/// When `append` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// Once the entries' object and every earlier one are durable and indexed.
    #[default]
    Durable,
    /// Once the entries are admitted and have ids; objects are created behind.
    Enqueued,
}

/// What a read does with a segment whose CRC still fails after a second fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CorruptionPolicy {
    /// Record a hole, count it, log it, and go on with the next segment.
    #[default]
    Skip,
    /// Fail the read.
    Fail,
}

/// What opening a prefix does with a structurally damaged object (a
/// trailer, footer or release segment that does not decode, an implausible
/// epoch, a sequence that is not its key's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DamagePolicy {
    /// Fail the open, naming the object: nothing about it can be trusted,
    /// and an operator should look before anything is given up.
    #[default]
    Fail,
    /// Open without it: the object is left out of replay (it still links
    /// the chain when its header or a successor's link says where it
    /// stands) and recorded as holes, for the regions its footer names or,
    /// when the footer is unreadable, for every region; each is logged.
    /// Collection may later delete it with the garbage below the reclaim
    /// boundary; `objwal repair` moves it aside instead, where nothing
    /// deletes it (rfcs/0003, "Operating a damaged log").
    Quarantine,
}

/// The store's configuration. Every field has a default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Seal the open batch this long after it was opened, when it is not empty.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// Seal the open batch once it holds this many bytes of payload.
    #[serde(deserialize_with = "sizes::deserialize")]
    pub max_batch_bytes: u64,
    /// When `append` returns.
    pub ack_mode: AckMode,
    /// Enqueued mode: appends wait while this many bytes are not yet durable.
    #[serde(deserialize_with = "sizes::deserialize")]
    pub max_unpersisted_bytes: u64,
    /// Enqueued mode: appends wait while the oldest unpersisted admission is
    /// this old.
    #[serde(with = "humantime_serde")]
    pub max_unpersisted_age: Duration,
    /// What a read does with a corrupted segment.
    pub on_corrupted_segment: CorruptionPolicy,
    /// Conditional creates in flight at once.
    pub max_inflight_creates: usize,
    /// Objects whose tails recovery reads at once.
    pub recovery_concurrency: usize,
    /// What opening does with a structurally damaged object.
    pub on_damaged_object: DamagePolicy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            flush_interval: Duration::from_millis(100),
            max_batch_bytes: 8 << 20,
            ack_mode: AckMode::Durable,
            max_unpersisted_bytes: 64 << 20,
            max_unpersisted_age: Duration::from_secs(8),
            on_corrupted_segment: CorruptionPolicy::Skip,
            max_inflight_creates: 4,
            recovery_concurrency: 8,
            on_damaged_object: DamagePolicy::Fail,
        }
    }
}

/// The largest object payload a batch may be configured to hold. Entry
/// lengths are `u32` in the format, and one object is one request body.
pub const MAX_BATCH_BYTES_LIMIT: u64 = 1 << 30;

impl Config {
    /// Refuses values that cannot work, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        let refuse =
            |field: &'static str, message: String| Err(Error::InvalidConfig { field, message });
        if self.flush_interval < Duration::from_millis(1) {
            return refuse(
                "flush_interval",
                format!("{:?} is below 1ms", self.flush_interval),
            );
        }
        if self.flush_interval > Duration::from_secs(3600) {
            return refuse(
                "flush_interval",
                format!("{:?} is above one hour", self.flush_interval),
            );
        }
        if self.max_batch_bytes < 1024 || self.max_batch_bytes > MAX_BATCH_BYTES_LIMIT {
            return refuse(
                "max_batch_bytes",
                format!(
                    "{} is outside 1 KiB ..= {} bytes",
                    self.max_batch_bytes, MAX_BATCH_BYTES_LIMIT
                ),
            );
        }
        if self.max_unpersisted_bytes < self.max_batch_bytes {
            return refuse(
                "max_unpersisted_bytes",
                format!(
                    "{} is below max_batch_bytes ({}): a full batch could never be admitted",
                    self.max_unpersisted_bytes, self.max_batch_bytes
                ),
            );
        }
        if self.max_unpersisted_age < self.flush_interval {
            return refuse(
                "max_unpersisted_age",
                format!(
                    "{:?} is below flush_interval ({:?})",
                    self.max_unpersisted_age, self.flush_interval
                ),
            );
        }
        if !(1..=64).contains(&self.max_inflight_creates) {
            return refuse(
                "max_inflight_creates",
                format!("{} is outside 1 ..= 64", self.max_inflight_creates),
            );
        }
        if !(1..=1024).contains(&self.recovery_concurrency) {
            return refuse(
                "recovery_concurrency",
                format!("{} is outside 1 ..= 1024", self.recovery_concurrency),
            );
        }
        Ok(())
    }
}

/// Sizes written as integers (bytes) or strings like `"8MiB"`.
mod sizes {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(s) => s
                .trim()
                .parse::<bytesize::ByteSize>()
                .map(|b| b.as_u64())
                .map_err(|e| serde::de::Error::custom(format!("invalid size {s:?}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_interface() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(100));
        assert_eq!(c.max_batch_bytes, 8 * 1024 * 1024);
        assert_eq!(c.max_unpersisted_bytes, 64 * 1024 * 1024);
        assert_eq!(c.max_unpersisted_age, Duration::from_secs(8));
        assert_eq!(c.max_inflight_creates, 4);
        assert_eq!(c.recovery_concurrency, 8);
        assert_eq!(c.on_damaged_object, DamagePolicy::Fail);
        let c: Config = serde_json::from_str(r#"{"on_damaged_object":"quarantine"}"#).unwrap();
        assert_eq!(c.on_damaged_object, DamagePolicy::Quarantine);
        assert!(serde_json::from_str::<Config>(r#"{"on_damaged_object":"skip"}"#).is_err());
    }

    #[test]
    fn parses_human_durations_and_sizes() {
        let c: Config = serde_json::from_str(
            r#"{"flush_interval":"250ms","max_batch_bytes":"8MiB","max_unpersisted_bytes":"1 GiB",
                "ack_mode":"enqueued","on_corrupted_segment":"fail","max_unpersisted_age":"2s"}"#,
        )
        .unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(250));
        assert_eq!(c.max_batch_bytes, 8 << 20);
        assert_eq!(c.max_unpersisted_bytes, 1 << 30);
        assert_eq!(c.ack_mode, AckMode::Enqueued);
        assert_eq!(c.on_corrupted_segment, CorruptionPolicy::Fail);
        let c: Config = serde_json::from_str(r#"{"max_batch_bytes":4096}"#).unwrap();
        assert_eq!(c.max_batch_bytes, 4096);
    }

    #[test]
    fn bad_values_name_their_field() {
        for (json, field) in [
            (r#"{"max_batch_bytes":10}"#, "max_batch_bytes"),
            (r#"{"flush_interval":"0s"}"#, "flush_interval"),
            (r#"{"max_inflight_creates":0}"#, "max_inflight_creates"),
            (r#"{"recovery_concurrency":0}"#, "recovery_concurrency"),
            (
                r#"{"max_unpersisted_bytes":"1MiB"}"#,
                "max_unpersisted_bytes",
            ),
            (r#"{"max_unpersisted_age":"1ms"}"#, "max_unpersisted_age"),
        ] {
            let c: Config = serde_json::from_str(json).unwrap();
            match c.validate() {
                Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field, "{json}"),
                other => panic!("{json}: {other:?}"),
            }
        }
        assert!(serde_json::from_str::<Config>(r#"{"max_batch_bytes":"eight"}"#).is_err());
        assert!(serde_json::from_str::<Config>(r#"{"no_such_field":1}"#).is_err());
    }
}
