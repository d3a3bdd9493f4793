//! Configuration: public fields, defaults, serde, and validation.
//!
//! `Config` deserializes from TOML or JSON with durations written like
//! `"100ms"` and sizes like `"8MiB"` (plain integers are bytes), and
//! serializes back to the same notation, so the effective config prints and
//! parses to an equal value. [`Config::validate`] refuses values that cannot
//! work and names the field. [`Config::from_file`], [`Config::from_toml_str`]
//! and [`Config::from_env`] load it from where operators keep it (`load`).
//! Each field's documentation says what it trades: latency, requests per
//! second (money, on a store that bills per request), memory.

use std::time::Duration;

use serde::{Deserialize, Serialize};

mod load;
mod validate;

pub use validate::{MAX_BATCH_BYTES_LIMIT, MIN_EARLY_SEAL_RATE, MIN_REPLAY_BUFFER_BYTES};

/// The default [`Config::request_timeout`] (see there why 30 s).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// When `append` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AckMode {
    /// Once the entries' object and every earlier one are durable and indexed.
    #[default]
    Durable,
    /// Once the entries are admitted and have ids; objects are created behind.
    Enqueued,
}

/// What a read does with a segment whose CRC still fails after a second fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What [`Wal::open`](crate::Wal::open) does with a prefix that holds no
    /// log: start one (`true`, the default) or fail with
    /// [`Error::NoLog`](crate::Error::NoLog), which names the prefixes of
    /// the store that do hold one, before anything is written.
    ///
    /// A prefix holds a log when at least one key under it is one of its
    /// objects or fences (`<prefix>/objects/<20 digits>.wal`,
    /// `<prefix>/fences/<20 digits>.fence`); a log opened once keeps its
    /// fence forever, even when every object was collected. With `false`
    /// a restart that mistyped its prefix (`Kv` for `kv`) fails instead of
    /// replaying nothing from a new, empty log and leaving it behind. Costs
    /// one listing of the prefix's fences per open (and of its objects when
    /// there is no fence); the store-wide listing that names the other logs
    /// is made only when the open fails. [`WalReader`](crate::WalReader)
    /// creates nothing in any case and ignores it.
    pub create_if_missing: bool,
    /// Seal the open batch this long after it was opened, when it is not empty.
    ///
    /// Trades latency for requests. A durable append that does not fill a
    /// batch waits up to this long before its object is even started, so
    /// it bounds the latency of a light load. Under such a load every
    /// interval with an append costs one create (a PUT, billed per request
    /// on S3, and no other request): 100ms is at
    /// most 10 objects a second, 1s at most one. Memory: the open batch
    /// holds what arrives in one interval, up to `max_batch_bytes`.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// Seal the open batch once it holds this many bytes of payload.
    ///
    /// Trades memory and per-object latency for requests. Under a heavy
    /// load objects are this large, so creates per second are the write
    /// rate divided by it (8 MiB: 128 PUTs per GiB written). A larger batch
    /// means fewer requests, but one object is one request body: it is held
    /// in memory until it is durable (`max_inflight_creates` of them are
    /// uploaded at once) and takes longer to upload, which every durable
    /// append in it waits for.
    #[serde(with = "sizes")]
    pub max_batch_bytes: u64,
    /// When `append` returns.
    ///
    /// `Durable` makes every append wait for its object's create (latency
    /// of one PUT plus the batch's wait); `Enqueued` returns at admission,
    /// so latency is the channel's, and a crash loses what was not yet
    /// durable (bounded by `max_unpersisted_bytes` and `_age`). Requests
    /// per second are the same in both modes: batching decides them.
    pub ack_mode: AckMode,
    /// Enqueued mode: appends wait while this many bytes are not yet durable.
    ///
    /// Trades memory and the data a crash can lose for fewer stalls: the
    /// backlog (open batch and objects being created) is held in memory up
    /// to this bound, and all of it is lost by a crash before it is durable.
    /// It changes no request rate; too small a bound stalls appends behind
    /// slow creates.
    #[serde(with = "sizes")]
    pub max_unpersisted_bytes: u64,
    /// Enqueued mode: appends wait while the oldest unpersisted admission is
    /// this old. Both modes: once creates have failed for this long, `flush`
    /// and `wait_durable`, and appends held back by a full backlog, answer
    /// the retryable `Failing` instead of waiting out the outage.
    ///
    /// The recovery point objective: a crash loses at most about this much
    /// time of acknowledged appends. Shorter bounds stall appends sooner
    /// while storage is slow or failing, and give up barriers sooner; it
    /// changes no request rate and no memory bound.
    #[serde(with = "humantime_serde")]
    pub max_unpersisted_age: Duration,
    /// What a read does with a corrupted segment.
    ///
    /// Costs nothing until a segment fails its CRC; then either choice has
    /// already paid one extra read (the second fetch). `Skip` keeps a
    /// replay going past the damage (recorded as a hole), `Fail` stops it.
    pub on_corrupted_segment: CorruptionPolicy,
    /// Conditional creates in flight at once.
    ///
    /// Trades memory and request concurrency for throughput and latency
    /// under load: with one object's create taking a round trip, this many
    /// objects can be uploaded at once (each held in memory, up to
    /// `max_batch_bytes`). It does not add requests by itself: objects are
    /// sealed by size and time. At most 64, because a newer process leaves
    /// a gap of 64 sequences for an older one's creates in flight.
    pub max_inflight_creates: usize,
    /// Objects whose tails recovery reads at once.
    ///
    /// Trades open time for request bursts and memory: recovery reads one
    /// window (sized from the footers it met, 4 KiB at least) at the end of
    /// every object once, so the number of GETs per open is fixed by the
    /// number of objects; this only decides how many are in flight, and so
    /// how long an open with many objects takes on a high-latency store.
    pub recovery_concurrency: usize,
    /// Early seals per second: a batch that is not full is sealed as soon
    /// as a create could start, while this budget has a token (timer seals
    /// take a token too). `"auto"` (the default) is unlimited on backends
    /// without a per-request price (a local directory, memory, a cloud URL
    /// whose endpoint can only be self-hosted: loopback, a private address,
    /// a name without a dot or under `.local`, `.internal`, `.svc`; see
    /// [`ObjectStorage::charges_per_request`](crate::ObjectStorage::charges_per_request))
    /// and one per `flush_interval` elsewhere; `"unlimited"`; `"off"` (only size and
    /// timer seal: every durable append waits for the timer); or a number
    /// per second. More early seals: lower latency for a light load, more
    /// requests (on S3, more PUTs per second when the load is light).
    pub early_seals: EarlySeals,
    /// The first delay before a failed create (or an open's failed tail
    /// read) is repeated; it doubles per failure up to `retry_max_delay`.
    #[serde(with = "humantime_serde")]
    pub retry_initial_delay: Duration,
    /// The longest delay between repeats of a failed request.
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
    /// Add a random part of up to one delay to each retry delay, so that
    /// many stores failing together do not retry in step. Seeded per store
    /// instance.
    pub retry_jitter: bool,
    /// Attempts a stop gives a failed create before it gives up and
    /// reports `Lost`. An open gives a request it must repeat as many tries
    /// (a settle marker's create, a read of an object's tail that failed
    /// transiently) before it fails.
    pub stop_attempts: u32,
    /// A storage request that has not answered after this long fails with a
    /// transient error and is handled like any failure: the writer reads a
    /// create back and repeats it (a durable append then fails with a
    /// retryable error, a stop reports what it gave up as `Lost`); a
    /// [`WalReader`](crate::WalReader), a read, a replay and a follower
    /// return the retryable error to their caller. It bounds every request
    /// of every path: `Wal::open` (its log check under `create_if_missing =
    /// false` and its cleanup of leftovers included), `WalReader::open`,
    /// reads, replays, followers, collection, `stop` and the blocking
    /// handle. So no call waits forever on a store that stops answering
    /// (how long each takes: rfcs/0002, "A deadline on every request").
    ///
    /// 30 s by default (`"30s"`), chosen to be well above a slow create of
    /// a full batch on a real store (8 MiB: a fraction of a second on S3
    /// from the same region, about 8 s through an uplink of 1 MiB/s), so a
    /// healthy store's request is never cut, and compatible with hedging:
    /// a slow create is hedged at half the timeout at the latest (15 s;
    /// after the 95th percentile of recent creates in practice), which
    /// leaves the hedge as long again to land. It is also object_store's
    /// default request timeout. Shorter: a stalled request is given up
    /// sooner, at the price of cutting slow ones (large batches on a slow
    /// link). `"off"`: no limit; **a call may then wait forever on a store
    /// that stops answering** (the storage URLs' HTTP clients still end a
    /// request after their own `timeout`, 60 s by default; a backend you
    /// build yourself has only its own).
    #[serde(with = "optional_duration")]
    pub request_timeout: Option<Duration>,
    /// What opening does with a structurally damaged object.
    pub on_damaged_object: DamagePolicy,
    /// Reads a replay keeps in flight: object ranges of a bulk
    /// [`Wal::replay`](crate::Wal::replay), segments of a single region's
    /// `read` (its prefetch).
    ///
    /// Trades request bursts for restart time on a high-latency store: a
    /// read of a remote object store waits a round trip (tens of ms) for
    /// its first byte, so a replay goes at about this many reads per round
    /// trip. It adds no request (each object range is fetched once either
    /// way) and no memory beyond `replay_buffer_bytes`. 16 suits S3-class
    /// latency; a local directory gains little beyond a few.
    pub replay_concurrency: usize,
    /// Bytes a replay or a read holds at once: reads in flight plus fetched
    /// entries the consumer has not taken yet.
    ///
    /// Trades memory for throughput: when `replay_concurrency` reads would
    /// need more, fewer run at once. A consumer that stops taking entries
    /// stops the fetching once this much is held. One range larger than
    /// this (a huge segment) is still fetched, alone.
    #[serde(with = "sizes")]
    pub replay_buffer_bytes: u64,
    /// Flush requests ([`Wal::flush_requests`](crate::Wal::flush_requests)):
    /// a live region whose oldest live entry keeps more than this many
    /// indexed objects from collection is asked to flush (0: never ask).
    ///
    /// Trades engine flushes for storage and restart time: objects held,
    /// their bytes (billed per GiB-month) and the tails an open reads stay
    /// near this bound plus what arrives before the engine acts, instead of
    /// growing without bound behind one cold region. A small bound asks
    /// cold regions to flush small memtables often.
    pub max_pinned_objects: u64,
    /// Hedged creates: a create that has not answered after the 95th
    /// percentile of recent creates (on a tight distribution, whose 99th
    /// percentile is within 1.2 times the median, that 99th percentile, at
    /// least 1.05 times the median), or half `request_timeout` if that
    /// comes first, is sent again with the
    /// same bytes to the same key; the first
    /// answer wins (rfcs/0006, "Hedged creates"). The value is the budget of
    /// extra creates, as a fraction of creates: `"auto"` (0.05 where
    /// requests cost money, off elsewhere), `"off"`, or a number in
    /// (0, 1].
    ///
    /// Trades requests for tail latency: an object store's slowest creates
    /// take several times its median, and a durable append waits for the
    /// slowest create before it.
    pub hedge_creates: HedgeCreates,
    /// A follower ([`WalReader::follow`](crate::WalReader::follow)) asks
    /// for the next key of the log this often while the writer is busy
    /// (one GET each, a read that misses while nothing new landed), and
    /// never less often than this after an object landed.
    ///
    /// Trades lag for requests: an object is yielded about half of this
    /// after it landed, plus one read (rfcs/0010). The default matches the
    /// default `flush_interval`: a writer under a light load seals about
    /// one object per flush interval, so polling faster mostly misses.
    #[serde(with = "humantime_serde")]
    pub follow_interval: Duration,
    /// The longest wait between a follower's polls: while nothing lands
    /// the wait grows from `follow_interval` (a quarter of the time the
    /// log has been quiet) up to this.
    ///
    /// Trades the lag of the first object after a quiet spell for the
    /// cost of an idle follower: one GET per this interval (1s: 3,600 an
    /// hour, about $1.04 a month at S3's $0.0004 per 1,000 GETs). After 2
    /// such intervals without an object every other GET reads the object
    /// the follower last took in instead of the next key, to notice
    /// objects collected before the follower read them (so the first
    /// object after a longer quiet is seen within 2 intervals); after 10,
    /// a listing, then after 20, 40, ... at most one an hour, to notice a
    /// writer's restart whose start object does not follow the follower's
    /// place.
    #[serde(with = "humantime_serde")]
    pub follow_max_interval: Duration,
}

/// The budget of hedged creates (see [`Config::hedge_creates`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum HedgeCreates {
    /// 5% more creates where requests cost money, none elsewhere.
    #[default]
    Auto,
    /// No hedged creates.
    Off,
    /// At most this fraction of creates is sent a second time.
    Budget(f64),
}

impl HedgeCreates {
    /// The budget as a fraction of creates (`None`: no hedging) for a
    /// backend that `charges_per_request` or not.
    #[doc(hidden)]
    pub fn budget_for(self, charges_per_request: bool) -> Option<f64> {
        self.budget(charges_per_request)
    }

    pub(crate) fn budget(self, charges_per_request: bool) -> Option<f64> {
        match self {
            HedgeCreates::Auto if charges_per_request => Some(0.05),
            HedgeCreates::Auto | HedgeCreates::Off => None,
            HedgeCreates::Budget(fraction) => Some(fraction),
        }
    }
}

impl<'de> Deserialize<'de> for HedgeCreates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Fraction(f64),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Fraction(f) => Ok(HedgeCreates::Budget(f)),
            Raw::Word(w) => match w.trim() {
                "auto" => Ok(HedgeCreates::Auto),
                "off" => Ok(HedgeCreates::Off),
                other => other.parse::<f64>().map(HedgeCreates::Budget).map_err(|_| {
                    serde::de::Error::custom(format!(
                        "invalid hedge_creates {other:?}: expected \"auto\", \"off\" or a fraction of creates"
                    ))
                }),
            },
        }
    }
}

impl serde::Serialize for HedgeCreates {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HedgeCreates::Auto => s.serialize_str("auto"),
            HedgeCreates::Off => s.serialize_str("off"),
            HedgeCreates::Budget(f) => s.serialize_f64(*f),
        }
    }
}

/// The budget of early seals (see [`Config::early_seals`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum EarlySeals {
    /// Unlimited where requests cost nothing (a local directory, memory, a
    /// self-hosted endpoint), one per `flush_interval` elsewhere.
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
            create_if_missing: true,
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
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            on_damaged_object: DamagePolicy::Fail,
            replay_concurrency: 16,
            replay_buffer_bytes: 64 << 20,
            max_pinned_objects: 256,
            hedge_creates: HedgeCreates::Auto,
            follow_interval: Duration::from_millis(100),
            follow_max_interval: Duration::from_secs(1),
        }
    }
}

/// An optional duration: `"off"` (or `"none"`) for none, else like `"2s"`.
mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            None => s.serialize_str("off"),
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        match text.trim() {
            "off" | "none" => Ok(None),
            t => humantime::parse_duration(t).map(Some).map_err(|e| {
                serde::de::Error::custom(format!(
                    "invalid duration {t:?}: {e} (or \"off\" for no timeout)"
                ))
            }),
        }
    }
}

/// Sizes written as integers (bytes) or strings like `"8MiB"`. They are
/// written back as `"<n>KiB"`, `"<n>MiB"` or `"<n>GiB"` when exact, else as
/// an integer (or, above `i64::MAX`, which TOML cannot hold, as a string of
/// digits), so every value round-trips exactly.
mod sizes {
    use serde::{Deserialize, Deserializer, Serializer};

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

    pub fn serialize<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
        for (unit, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
            if *n >= unit && n.is_multiple_of(unit) {
                return s.serialize_str(&format!("{}{name}", n / unit));
            }
        }
        if i64::try_from(*n).is_ok() {
            s.serialize_u64(*n)
        } else {
            s.serialize_str(&n.to_string())
        }
    }
}

#[cfg(test)]
mod size_tests {
    use proptest::prelude::*;

    #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
    struct Holder {
        #[serde(with = "super::sizes")]
        size: u64,
    }

    proptest! {
        #[test]
        fn every_size_round_trips_through_toml(size in any::<u64>(), shift in 0u32..40) {
            for size in [size, (size >> 40) << shift] {
                let text = toml::to_string(&Holder { size }).unwrap();
                prop_assert_eq!(toml::from_str::<Holder>(&text).unwrap(), Holder { size }, "{}", text);
            }
        }
    }

    #[test]
    fn exact_multiples_are_written_with_a_unit() {
        let text = |size| toml::to_string(&Holder { size }).unwrap();
        assert_eq!(text(8 << 20), "size = \"8MiB\"\n");
        assert_eq!(text(3 << 30), "size = \"3GiB\"\n");
        assert_eq!(text(1536), "size = 1536\n");
        assert_eq!(text(0), "size = 0\n");
        assert_eq!(text(u64::MAX), "size = \"18446744073709551615\"\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

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
        assert_eq!(c.replay_concurrency, 16);
        assert_eq!(c.replay_buffer_bytes, 64 << 20);
        assert_eq!(c.max_pinned_objects, 256);
        assert_eq!(c.follow_interval, Duration::from_millis(100));
        assert_eq!(c.follow_max_interval, Duration::from_secs(1));
        assert!(c.create_if_missing);
        let c: Config = serde_json::from_str(r#"{"create_if_missing":false}"#).unwrap();
        assert!(!c.create_if_missing);
        c.validate().unwrap();
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
        let c: Config = serde_json::from_str(r#"{"request_timeout":"off"}"#).unwrap();
        assert_eq!(c.request_timeout, None);
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
            (r#"{"hedge_creates":0}"#, "hedge_creates"),
            (r#"{"hedge_creates":1.5}"#, "hedge_creates"),
            // Issue 18 item 7: passed validation and panicked the actor.
            (r#"{"early_seals":1e-30}"#, "early_seals"),
            (r#"{"retry_initial_delay":"0s"}"#, "retry_initial_delay"),
            (r#"{"retry_initial_delay":"3s"}"#, "retry_initial_delay"),
            (r#"{"stop_attempts":0}"#, "stop_attempts"),
            (r#"{"request_timeout":"0s"}"#, "request_timeout"),
            (r#"{"replay_concurrency":0}"#, "replay_concurrency"),
            (r#"{"replay_concurrency":1025}"#, "replay_concurrency"),
            (r#"{"replay_buffer_bytes":"63KiB"}"#, "replay_buffer_bytes"),
            (r#"{"follow_interval":"0s"}"#, "follow_interval"),
            (r#"{"follow_interval":"2h"}"#, "follow_interval"),
            (r#"{"follow_max_interval":"10ms"}"#, "follow_max_interval"),
            (r#"{"follow_max_interval":"2h"}"#, "follow_max_interval"),
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
