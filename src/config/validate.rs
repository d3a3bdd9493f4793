//! What `Config::validate` refuses, and the limits it refuses by: one
//! rule per field that has a value that cannot work, each naming its field.

use std::time::Duration;

use super::{Config, EarlySeals, HedgeCreates};
use crate::error::Error;

/// The smallest `early_seals` rate: one early seal a day. Below it the
/// token bucket's waits leave what a `Duration` holds, and "off" says it.
pub const MIN_EARLY_SEAL_RATE: f64 = 1.0 / 86_400.0;

/// The largest object payload a batch may be configured to hold. Entry
/// lengths are `u32` in the format, and one object is one request body.
pub const MAX_BATCH_BYTES_LIMIT: u64 = 1 << 30;

/// The smallest `replay_buffer_bytes`: a few segments' worth.
pub const MIN_REPLAY_BUFFER_BYTES: u64 = 64 << 10;

impl Config {
    /// Refuses values that cannot work, naming the field. (The flags,
    /// `create_if_missing` and `retry_jitter`, work either way.)
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
        if let HedgeCreates::Budget(fraction) = self.hedge_creates {
            if !(fraction.is_finite() && fraction > 0.0 && fraction <= 1.0) {
                return refuse(
                    "hedge_creates",
                    format!(
                        "{fraction} is not a fraction of creates in (0, 1]: use \"off\" for none"
                    ),
                );
            }
        }
        if let EarlySeals::PerSecond(rate) = self.early_seals {
            if !(rate.is_finite() && rate > 0.0) {
                return refuse(
                    "early_seals",
                    format!("{rate} is not a positive number of seals per second"),
                );
            }
            if rate < MIN_EARLY_SEAL_RATE {
                return refuse(
                    "early_seals",
                    format!(
                        "{rate} seals per second is below {MIN_EARLY_SEAL_RATE} (one a day): \
                         use \"off\" for no early seals"
                    ),
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
        if !(1..=1024).contains(&self.replay_concurrency) {
            return refuse(
                "replay_concurrency",
                format!("{} is outside 1 ..= 1024", self.replay_concurrency),
            );
        }
        if self.follow_interval < Duration::from_millis(1)
            || self.follow_interval > Duration::from_secs(3600)
        {
            return refuse(
                "follow_interval",
                format!("{:?} is outside 1ms ..= 1h", self.follow_interval),
            );
        }
        if self.follow_max_interval < self.follow_interval
            || self.follow_max_interval > Duration::from_secs(3600)
        {
            return refuse(
                "follow_max_interval",
                format!(
                    "{:?} is outside follow_interval ({:?}) ..= 1h",
                    self.follow_max_interval, self.follow_interval
                ),
            );
        }
        if self.replay_buffer_bytes < MIN_REPLAY_BUFFER_BYTES {
            return refuse(
                "replay_buffer_bytes",
                format!(
                    "{} is below {MIN_REPLAY_BUFFER_BYTES} bytes (64 KiB)",
                    self.replay_buffer_bytes
                ),
            );
        }
        Ok(())
    }
}
