//! objwal: a write-ahead log engine whose log lives in object storage.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod catalog;
pub mod config;
pub mod error;
pub mod format;
pub mod metrics;
pub mod storage;
pub mod wal;

pub use config::{AckMode, Config, CorruptionPolicy, DamagePolicy};
pub use error::Error;
pub use storage::{Created, ObjectMeta, ObjectStorage, Storage, StorageError};
pub use wal::{Entry, Hole, Wal, WalReader};

/// A region: one log stream. `u64::MAX` is reserved for release records.
pub type RegionId = u64;
/// An entry id: `(sequence << 20) | position`; 0 means "no entry".
pub type EntryId = u64;
