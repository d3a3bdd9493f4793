//! The one error type of the public interface.
//!
//! Variants are coarse: each is a different thing for a caller to do (retry,
//! give up, fix the argument, restart the process). Messages carry the detail
//! and the `source` chain is kept. Errors are `Clone` because one failure is
//! often the answer to many waiting callers, and a poisoned store returns the
//! same error to every later call.

use std::sync::Arc;

use crate::format::FormatError;
use crate::storage::StorageError;
use crate::RegionId;

/// Every error objwal returns.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store was stopped (by `stop`, or because every handle was
    /// dropped); the request was not carried out.
    #[error("the WAL is stopped{}", suffix(.detail))]
    Stopped {
        /// What was not done, when there is something to say.
        detail: Option<Arc<str>>,
    },

    /// The store hit a terminal condition and refuses every further request
    /// but `stop`. A new process must open the prefix again.
    #[error("the WAL is poisoned: {reason}")]
    Poisoned {
        /// Why, including the error that caused it.
        reason: Arc<str>,
    },

    /// A newer process opened this prefix (it claimed epoch `newer`; ours is
    /// `ours`): this process acknowledges nothing more and refuses every
    /// request but `stop`. It is also poisoned ([`Error::is_poisoned`]).
    /// Stop it; do not reopen in a loop, or two processes keep fencing each
    /// other.
    #[error(
        "the WAL is fenced: a newer process (epoch {newer}) opened this prefix; \
         this process (epoch {ours}) acknowledges nothing more{}", suffix(.detail)
    )]
    Fenced {
        /// This process's epoch.
        ours: u64,
        /// The newest epoch known (at least `ours + 1`).
        newer: u64,
        /// What the fencing cost this process, when there is something to
        /// say (a stop names what it admitted but never made durable).
        detail: Option<Arc<str>>,
    },

    /// The store is failing to create objects (enqueued mode). The backlog is
    /// kept and retried; this request was refused and may be repeated.
    #[error("the WAL is failing to persist its backlog, retry later: {reason}")]
    Failing {
        /// The last create failure.
        reason: Arc<str>,
    },

    /// The region was released with `release_region`.
    #[error("region {region} is released")]
    RegionReleased {
        /// The released region.
        region: RegionId,
    },

    /// An argument was refused (reserved region, empty batch, too many
    /// entries, a payload that is too large, a bad prefix).
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },

    /// `Wal::open` with [`Config::create_if_missing`](crate::Config::create_if_missing)
    /// `false`, or [`WalReader::open`](crate::WalReader::open), found no log
    /// under the prefix (no object and no fence): a mistyped prefix, or a
    /// store that is not the one meant. Nothing was written. Fix the prefix
    /// or the storage; or start a new log there (`Wal::open` with
    /// `create_if_missing = true`), or follow one that has not started yet
    /// ([`WalReader::open_or_empty`](crate::WalReader::open_or_empty)).
    #[error(
        "no log under prefix {prefix:?}, and none was started (nothing was written: \
         create_if_missing is false, or a reader opened it); {}",
        crate::storage::keys::describe_logs(.existing, *.at_root)
    )]
    NoLog {
        /// The prefix asked for.
        prefix: String,
        /// The prefixes of the same store that do hold a log.
        existing: Vec<String>,
        /// Whether the store's root itself holds a log's objects: the
        /// storage names a log's directory instead of the one holding it.
        at_root: bool,
    },

    /// A configuration field was refused.
    #[error("invalid configuration: {field}: {message}")]
    InvalidConfig {
        /// The field, as named in `Config`.
        field: &'static str,
        /// What is wrong with its value.
        message: String,
    },

    /// A configuration text, file or environment variable could not be
    /// turned into a valid [`Config`](crate::Config) (`Config::from_file`,
    /// `from_toml_str`, `from_env`): a syntax error, an unknown field or
    /// variable, a value of the wrong kind, or a value `validate` refused.
    #[error("invalid configuration{}: {message}", config_location(.file, .line, .field))]
    Config {
        /// The file, when the configuration came from one.
        file: Option<std::path::PathBuf>,
        /// The line (from 1) of the offending text, when known.
        line: Option<usize>,
        /// The offending field, or the environment variable, when known.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },

    /// Stored bytes are damaged or are not an objwal object.
    #[error("corrupted object {key}: {source}")]
    Corrupted {
        /// The object's key.
        key: String,
        /// What the decoder found.
        #[source]
        source: FormatError,
    },

    /// The store's history cannot be recovered (no complete chain, an
    /// implausible epoch, a missing object that must exist).
    #[error("cannot recover the WAL: {message}")]
    Recovery {
        /// What is wrong.
        message: String,
    },

    /// A storage request failed. It prints as the [`StorageError`] does
    /// (one line: the key, the kind, the cause and, where known, the fix),
    /// and its source is that error's source.
    #[error(transparent)]
    Storage {
        /// The backend's error.
        #[from]
        source: StorageError,
    },

    /// Acknowledged entries (enqueued mode), release records or flush
    /// marks were dropped before they became durable: by a stop whose
    /// retries ran out, a permanent failure during stop, or a poisoning.
    #[error("{entries} acknowledged entries ({bytes} bytes), {releases} release records and {marks} flush marks were lost: {reason}")]
    Lost {
        /// Entries lost.
        entries: u64,
        /// Payload bytes lost.
        bytes: u64,
        /// Release records lost.
        releases: u64,
        /// Flush marks (`Wal::obsolete`) that never became durable: the
        /// entries they hid replay after a restart until the engine hands
        /// them in again.
        marks: u64,
        /// Why.
        reason: Arc<str>,
    },

    /// `Wal::import_region` met entries of the region that the other log's
    /// reader could not read (a [`Hole`](crate::Hole): a segment that
    /// failed its check twice, or a damaged object its open left out), so
    /// it did not finish: an import never copies around a hole, because
    /// the other node releases the region afterwards and what the import
    /// skipped would be gone. What it appended is hidden by the floor of
    /// the next import. A read damaged in transit clears when the import is
    /// repeated with a newly opened reader; a damaged object needs
    /// `objwal repair` on the other log first.
    #[error(
        "region {region} was not imported whole: entries {first_id}..={last_id} in object {key} \
         could not be read on the other log; repeat with a newly opened reader, or repair that \
         object first if it is damaged"
    )]
    Incomplete {
        /// The region being imported.
        region: RegionId,
        /// The object holding the entries that could not be read.
        key: String,
        /// The first id that could not be read.
        first_id: crate::EntryId,
        /// The last id that could not be read.
        last_id: crate::EntryId,
    },

    /// A batch was not made durable for a reason that may pass (a failed
    /// create in durable mode, an earlier-epoch object at its sequence).
    #[error("the batch was not made durable, retry: {reason}")]
    NotDurable {
        /// Why.
        reason: Arc<str>,
    },
}

fn config_location(
    file: &Option<std::path::PathBuf>,
    line: &Option<usize>,
    field: &Option<String>,
) -> String {
    let mut parts = Vec::new();
    if let Some(file) = file {
        parts.push(file.display().to_string());
    }
    if let Some(line) = line {
        parts.push(format!("line {line}"));
    }
    if let Some(field) = field {
        parts.push(format!("field `{field}`"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn suffix(detail: &Option<Arc<str>>) -> String {
    match detail {
        Some(d) => format!(": {d}"),
        None => String::new(),
    }
}

impl Error {
    /// Whether the same request may succeed if repeated later.
    pub fn is_retryable(&self) -> bool {
        match self {
            // A repeat with a new reader clears a read damaged in transit.
            Error::Failing { .. } | Error::NotDurable { .. } | Error::Incomplete { .. } => true,
            Error::Storage { source } => source.is_transient(),
            Error::Stopped { .. }
            | Error::Poisoned { .. }
            | Error::Fenced { .. }
            | Error::RegionReleased { .. }
            | Error::InvalidArgument { .. }
            | Error::InvalidConfig { .. }
            | Error::Config { .. }
            | Error::NoLog { .. }
            | Error::Corrupted { .. }
            | Error::Recovery { .. }
            | Error::Lost { .. } => false,
        }
    }

    /// Whether this is the terminal error of a poisoned store (a fenced
    /// store is poisoned too).
    pub fn is_poisoned(&self) -> bool {
        matches!(self, Error::Poisoned { .. } | Error::Fenced { .. })
    }

    /// Whether a newer process took this prefix over: stop, do not restart
    /// in a loop. Never decided from message text.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Fenced { .. })
    }

    /// Whether the store was stopped.
    pub fn is_stopped(&self) -> bool {
        matches!(self, Error::Stopped { .. })
    }

    pub(crate) fn stopped() -> Self {
        Error::Stopped { detail: None }
    }

    pub(crate) fn fenced(ours: u64, newer: u64) -> Self {
        Error::Fenced {
            ours,
            newer,
            detail: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            message: message.into(),
        }
    }

    pub(crate) fn recovery(message: impl Into<String>) -> Self {
        Error::Recovery {
            message: message.into(),
        }
    }

    pub(crate) fn corrupted(key: impl Into<String>, source: FormatError) -> Self {
        Error::Corrupted {
            key: key.into(),
            source,
        }
    }
}

impl From<crate::storage::keys::PrefixError> for Error {
    fn from(e: crate::storage::keys::PrefixError) -> Self {
        Error::invalid(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        assert!(Error::Failing { reason: "x".into() }.is_retryable());
        assert!(Error::from(StorageError::transient("timeout")).is_retryable());
        assert!(!Error::from(StorageError::permanent("denied")).is_retryable());
        assert!(!Error::Poisoned { reason: "x".into() }.is_retryable());
        assert!(!Error::stopped().is_retryable());
        assert!(!Error::RegionReleased { region: 3 }.is_retryable());
        let fenced = Error::fenced(2, 3);
        assert!(fenced.is_fenced() && fenced.is_poisoned() && !fenced.is_retryable());
        assert!(!Error::Poisoned {
            reason: "fenced".into()
        }
        .is_fenced());
    }

    #[test]
    fn messages_carry_context() {
        let e = Error::from(StorageError::transient("503 slow down").with_key("p/objects/1.wal"));
        let s = e.to_string();
        assert!(
            s.contains("503 slow down") && s.contains("p/objects/1.wal"),
            "{s}"
        );
        let e = Error::InvalidConfig {
            field: "max_batch_bytes",
            message: "must be at least 1 KiB".into(),
        };
        assert!(e.to_string().contains("max_batch_bytes"));
    }
}
