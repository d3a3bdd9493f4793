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
    /// Early seals per second: a batch that is not full is sealed as soon
    /// as a create could start, while this budget has a token (timer seals
    /// take a token too). `"auto"` (the default) is unlimited on backends
    /// without a per-request price (a local directory, memory) and one per
    /// `flush_interval` elsewhere; `"unlimited"`; `"off"` (only size and
    /// timer seal: every durable append waits for the timer); or a number
    /// per second. More early seals: lower latency for a light load, more
    /// requests (on S3, more PUTs per second when the load is light).
    pub early_seals: EarlySeals,
    /// The first delay before a failed create or fence probe is repeated; it
    /// doubles per failure up to `retry_max_delay`.
    #[serde(with = "humantime_serde")]
    pub retry_initial_delay: Duration,
    /// The longest delay between repeats of a failed request.
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
    /// Add a random part of up to one delay to each retry delay, so that
    /// many stores failing together do not retry in step. Seeded per store
    /// instance.
    pub retry_jitter: bool,
    /// Attempts a stop gives a failed create (and a durable-mode fence probe
    /// its transient failures) before it gives up and reports `Lost`.
    pub stop_attempts: u32,
    /// A storage request that has not answered after this long fails with a
    /// transient error (unset: no limit, the adapters' own timeouts apply).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Option<Duration>,
}

/// The budget of early seals (see [`Config::early_seals`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum EarlySeals {
    /// Unlimited where requests cost nothing, one per `flush_interval` elsewhere.
    #[default]
    Auto,
    /// Seal whenever a create could start.
    Unlimited,
    /// At most this many early seals per second.
    PerSecond(f64),
    /// No early seals: batches are sealed when full or by the timer.
    Off,
}

impl EarlySeals {
    /// The budget as a rate per second (`None`: unlimited, `Some(0.0)`: no
    /// early seal) for a backend that `charges_per_request` or not.
    pub(crate) fn rate(self, flush_interval: Duration, charges_per_request: bool) -> Option<f64> {
        match self {
            EarlySeals::Unlimited => None,
            EarlySeals::PerSecond(rate) => Some(rate),
            EarlySeals::Off => Some(0.0),
            EarlySeals::Auto if charges_per_request => Some(1.0 / flush_interval.as_secs_f64()),
            EarlySeals::Auto => None,
        }
    }
}

impl<'de> Deserialize<'de> for EarlySeals {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Rate(f64),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Rate(rate) => Ok(EarlySeals::PerSecond(rate)),
            Raw::Word(w) => match w.trim() {
                "auto" => Ok(EarlySeals::Auto),
                "unlimited" => Ok(EarlySeals::Unlimited),
                "off" => Ok(EarlySeals::Off),
                other => other.parse::<f64>().map(EarlySeals::PerSecond).map_err(|_| {
                    serde::de::Error::custom(format!(
                        "invalid early_seals {other:?}: expected \"auto\", \"unlimited\", \"off\" or a number per second"
                    ))
                }),
            },
        }
    }
}

impl serde::Serialize for EarlySeals {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            EarlySeals::Auto => s.serialize_str("auto"),
            EarlySeals::Unlimited => s.serialize_str("unlimited"),
            EarlySeals::Off => s.serialize_str("off"),
            EarlySeals::PerSecond(rate) => s.serialize_f64(*rate),
        }
    }
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
            early_seals: EarlySeals::Auto,
            retry_initial_delay: Duration::from_millis(10),
            retry_max_delay: Duration::from_secs(2),
            retry_jitter: false,
            stop_attempts: 5,
            request_timeout: None,
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
        if let EarlySeals::PerSecond(rate) = self.early_seals {
            if !(rate.is_finite() && rate > 0.0) {
                return refuse(
                    "early_seals",
                    format!("{rate} is not a positive number of seals per second"),
                );
            }
        }
        if self.retry_initial_delay < Duration::from_millis(1)
            || self.retry_initial_delay > self.retry_max_delay
        {
            return refuse(
                "retry_initial_delay",
                format!(
                    "{:?} is outside 1ms ..= retry_max_delay ({:?})",
                    self.retry_initial_delay, self.retry_max_delay
                ),
            );
        }
        if self.retry_max_delay > Duration::from_secs(3600) {
            return refuse(
                "retry_max_delay",
                format!("{:?} is above one hour", self.retry_max_delay),
            );
        }
        if !(1..=1000).contains(&self.stop_attempts) {
            return refuse(
                "stop_attempts",
                format!("{} is outside 1 ..= 1000", self.stop_attempts),
            );
        }
        if let Some(timeout) = self.request_timeout {
            if timeout < Duration::from_millis(1) {
                return refuse("request_timeout", format!("{timeout:?} is below 1ms"));
            }
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
        for (json, want) in [
            (r#"{"early_seals":"auto"}"#, EarlySeals::Auto),
            (r#"{"early_seals":"unlimited"}"#, EarlySeals::Unlimited),
            (r#"{"early_seals":25}"#, EarlySeals::PerSecond(25.0)),
            (r#"{"early_seals":"2.5"}"#, EarlySeals::PerSecond(2.5)),
            (r#"{"early_seals":"off"}"#, EarlySeals::Off),
        ] {
            let c: Config = serde_json::from_str(json).unwrap();
            assert_eq!(c.early_seals, want, "{json}");
        }
        assert!(serde_json::from_str::<Config>(r#"{"early_seals":"sometimes"}"#).is_err());
        let c: Config = serde_json::from_str(r#"{"request_timeout":"2s"}"#).unwrap();
        assert_eq!(c.request_timeout, Some(Duration::from_secs(2)));
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
            (r#"{"early_seals":0}"#, "early_seals"),
            (r#"{"retry_initial_delay":"0s"}"#, "retry_initial_delay"),
            (r#"{"retry_initial_delay":"3s"}"#, "retry_initial_delay"),
            (r#"{"stop_attempts":0}"#, "stop_attempts"),
            (r#"{"request_timeout":"0s"}"#, "request_timeout"),
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
