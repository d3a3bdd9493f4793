//! objwal: a write-ahead log whose log lives in object storage.
//!
//! A storage engine with many regions (tables, shards, partitions) appends
//! entries to one [`Wal`], replays a region after a restart from the last
//! entry it flushed, tells the log which entries are flushed
//! ([`Wal::obsolete`]) so their objects can be deleted, and drops regions
//! durably ([`Wal::release_region`]). The log is a sequence of immutable
//! objects under a key prefix of S3, GCS, Azure Blob, MinIO or a local
//! directory, each created once with a conditional put. Nothing else is
//! needed: no local disk that must survive, no broker, no lease service.
//!
//! # Quickstart
//!
//! ```
//! use futures::{StreamExt, TryStreamExt};
//! use objwal::{Config, Storage, Wal};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dir = tempfile::tempdir()?;
//!     let url = format!("file://{}", dir.path().display());
//!
//!     // Open (recover, claim the prefix) and append to two regions.
//!     let wal = Wal::open(Storage::from_url(&url)?, "node-7", Config::default()).await?;
//!     let ids = wal.append(vec![(1, "put a=1".into()), (2, "put b=2".into())]).await?;
//!     // Durable once it returns (the default `AckMode::Durable`).
//!     let more = wal.append(vec![(1, "put a=3".into())]).await?;
//!     // The engine flushed region 1 through its first entry: hidden from
//!     // reads, and its object can be collected once nothing else needs it.
//!     wal.obsolete(1, ids[0]).await?;
//!     wal.release_region(2).await?; // region 2 dropped, durably
//!     wal.stop().await?;
//!
//!     // A restart: reopen and replay region 1 from where the engine flushed.
//!     let wal = Wal::open(Storage::from_url(&url)?, "node-7", Config::default()).await?;
//!     let replayed: Vec<_> = wal.read(1, ids[0] + 1).try_collect().await?;
//!     assert_eq!(replayed.len(), 1);
//!     assert_eq!((replayed[0].id, &replayed[0].data[..]), (more[0], &b"put a=3"[..]));
//!     assert_eq!(wal.read(2, 0).count().await, 0); // released: nothing to replay
//!     println!("region 1 ends at {}", objwal::id::Dotted(wal.latest_entry_id(1)));
//!     wal.stop().await?;
//!     Ok(())
//! }
//! ```
//!
//! The README's example, compiled here (a test keeps the two identical):
//!
//! ```rust,no_run
//! use objwal::{Config, Storage, Wal};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), objwal::Error> {
//!     let storage = Storage::from_url("file:///var/lib/app/wal")?;
//!     let wal = Wal::open(storage, "node-7", Config::default()).await?;
//!     let ids = wal.append(vec![(1, "row".into())]).await?; // durable once it returns
//!     wal.obsolete(1, ids[0]).await?; // flushed: collectable
//!     wal.release_region(2).await?; // region 2 dropped, durably
//!     wal.stop().await?;
//!     Ok(())
//! }
//! ```
//!
//! An engine that is not async uses [`blocking::Wal`]: the same calls as
//! plain functions, on a runtime the handle brings (no `#[tokio::main]`).
//!
//! # A standby with a reader hold
//!
//! A hold placed before the reader opens keeps the primary's collection
//! from deleting what the follower has not taken in (rfcs/0011):
//!
//! ```rust,no_run
//! # async fn standby(storage: objwal::Storage) -> Result<(), objwal::Error> {
//! use std::time::Duration;
//! use objwal::{Config, Hold, WalReader};
//! let config = Config::default();
//! let hold = Hold::place(storage.clone(), "node-7", &config, "standby-1", Duration::from_secs(300), 0).await?;
//! let reader = WalReader::open(storage, "node-7", config).await?;
//! let mut follower = reader.follow([(1, 0)]);
//! follower.keep_hold(hold); // moved and refreshed as the follower reads
//! // ... follow; when done: follower.take_hold().await.map(|h| h.release());
//! # Ok(())
//! # }
//! ```
//!
//! # Architecture in ten lines
//!
//! ```text
//! callers ──append/read/obsolete/release──▶ Wal (Clone handle) ──flume──▶ actor task (owns all state)
//!   1. append joins the one open batch; ids are assigned at admission: (sequence << 20) | position
//!   2. the batch is sealed when full (max_batch_bytes), on its timer (flush_interval), or on request
//!   3. sealed batches become objects: header | segment per region | footer | trailer   (format)
//!   4. up to max_inflight_creates conditional creates run at once, started in sequence order
//!   5. an object is acknowledged once it and every key of its run before it hold its own objects
//!   6. each object links to its predecessor; recovery reads only the tails and follows the chain
//!   7. open claims an epoch, walks the older run and settles its next key: the key is the fence
//!   8. flush marks and release records ride in objects and set the reclaim boundary each carries
//!   9. objects below a durable boundary are deleted in the background, never on the append path
//!  10. reads fetch one region's segments by range, hide obsolete entries, and skip or fail on damage
//! ```
//!
//! [`Storage`] is any backend behind the narrow [`ObjectStorage`] trait
//! (create-if-absent, ranged read, list, delete); [`format`](mod@format) is the pure
//! encoder and decoder of objects; [`WalReader`] recovers a prefix without
//! writing, for tools and for replaying another node's log.
//!
//! The source tree shows the paths. Under `src/wal/`: `write/` holds the
//! actor and what only it uses (steps 1-5, 8, 9: the open batch, the sealing
//! policy, the pipeline, acknowledgement, collection, releases, marks);
//! `open/` is recovery, quarantine and damage (steps 6, 7); `read/` is
//! per-region reads, bulk replay and the follower on one segment source
//! (step 10); `handoff/` moves a region from another log; `protocol/` is the
//! floor write and open share (the fencing rules, one create, the epoch
//! claim, retries). Beside `wal/`: `catalog/` (the index of objects),
//! `format/`, `storage/` (the backends), `config/`.
//!
//! # Invariants
//!
//! Each is named once, here and in the RFC that argues it (`rfcs/`), and
//! checked in one place (the encoder and decoders, the conformance suite,
//! the catalog's `check_invariants` after every change in debug builds, and
//! the failure matrices).
//!
//! Format (RFC 0001):
//! - **F1 canonical**: an object has exactly one valid encoding; the same
//!   batch always encodes to the same bytes (a create that meets identical
//!   bytes is its own retry).
//! - **F2 checked**: header, each segment, footer, trailer and the whole
//!   object carry CRCs; every reader checks what it reads.
//! - **F3 bounded decoding**: every malformed input is an `Err`, never a
//!   panic; every length is checked against the bytes present before
//!   anything is allocated.
//! - **F4 ids**: `id = (sequence << 20) | position`, position >= 1; a
//!   segment's ids belong to its object's sequence and strictly increase.
//! - **F5 tails**: the trailer repeats every header field, so recovery
//!   never reads a header.
//! - **F6 reserved regions**: region `u64::MAX` holds release records and
//!   region `u64::MAX - 255` flush marks and the writer's jump, each one
//!   entry of 16-byte records; an older reader sees regions it never opens.
//!
//! Storage (RFC 0002):
//! - **S1 no replace**: a create never replaces a key; of racing creates at
//!   most one is `Created::New`, which means durable.
//! - **S2 sorted listings**: `list` returns keys in ascending order with
//!   their sizes.
//! - **S3 exact reads**: a range past an object's end is an error, never a
//!   short read (`Storage` refuses an answer of another length for every
//!   backend, as a transient error); deleting a missing key is `Ok`.
//!
//! Log store and recovery (RFC 0003):
//! - **L1 one owner**: only the actor mutates the store's state.
//! - **L2 ids**: a region's ids strictly increase across lives; no new id is
//!   at or below a watermark the engine handed in.
//! - **L3 order**: creates start in sequence order; objects are indexed and
//!   callers acknowledged strictly in sequence order, each once every key of
//!   its run before it holds this writer's own object (K2).
//! - **L4 no reuse**: a sequence is handed out to one batch once; a failed
//!   batch's key is settled by the batch or its void, never given to another
//!   (K1).
//! - **L8 no silent loss**: every admitted entry is durable, refused to its
//!   caller, counted lost, or pending, at every stop.
//! - **L5 one chain**: every object links to its predecessor; the catalog
//!   is one chain.
//! - **L6 catalog** (C1-C3): strictly increasing sequences; one segment per
//!   region per object; a region's id ranges strictly increase.
//! - **L7 poison is terminal**: latched once, returned to every call but
//!   `stop`.
//! - **R1 tails only**: recovery reads one window per object, never a
//!   header or a segment.
//! - **R2 claim before write**: the start object, of an epoch above every
//!   epoch present, is durable before the first append is admitted.
//! - **R3 damage is confirmed**: an object is damaged only when two reads
//!   of it fail the same way; one read gone wrong (or a failed request) is
//!   a retryable error, never a verdict.
//!
//! Enqueued acknowledgement (RFC 0004):
//! - **E1 bounded risk**: nothing is admitted while the backlog is at a
//!   bound, another append waits, or the store is failing.
//! - **E2 same bytes**: a sequence is created with one byte string, however
//!   often it is tried.
//! - **E3 barrier**: `wait_durable` returns `Ok` only for ids whose object
//!   and every earlier one are durable and indexed.
//! - **E4 clamp**: a watermark never exceeds the region's durable id.
//! - **E5 no silent loss**: a dropped acknowledged entry or release record
//!   makes `stop` return `Error::Lost` with its counts.
//!
//! Release and collection (RFC 0005):
//! - **G1** an object is deleted only below the boundary carried by a
//!   durable, indexed object, never the tip and never a settle marker (K5).
//! - **G2** the boundary never decreases, within a life or across lives.
//! - **G3** every chain object below a carried boundary held only obsolete
//!   or released entries when the carrier was sealed.
//! - **G4** recovery treats a missing predecessor as collected only below
//!   the carried boundary.
//! - **G5** released watermarks and durable flush marks are seeded before
//!   any boundary is computed; a boundary counts a release or a mark only
//!   when its record rides in that object or one below it on its run.
//! - **G6** a release that returned `Ok` is in a durable indexed object and
//!   its marker (`<prefix>/released/<region>-<through>`) is durable; a
//!   release record dropped after stop began makes `stop` fail.
//! - **G8 a release is forever**: a released region reads as empty,
//!   refuses appends, is reported released and ends every follower across
//!   restarts, collection and moves. A marker is made only after its record
//!   was indexed (M1); no boundary passes a record whose marker is missing
//!   (M2); a writer's open makes missing markers before its start object
//!   (M3); markers are listed after the objects (M4); the catalog never
//!   forgets a release (C4).
//! - **G7** the catalog's live index (each region's first live object,
//!   kept as segments, watermarks and records change) answers what a scan
//!   of every region answers; checked after every change in debug builds.
//!
//! Fencing (RFC 0006): the object's key is the fence.
//! - **K1 resolved keys**: a writer never abandons a key of its run; a
//!   failed create is settled by the same bytes or by the batch's void.
//! - **K2 in-order acknowledgement**: an object is acknowledged once every
//!   key of its writer's run from the start object through it holds that
//!   writer's own object; no request follows the create.
//! - **K3 window**: a writer creates only at the first 64 unacknowledged
//!   keys of its run, never past an unacknowledged jump.
//! - **K4 the walk**: an opener walks the listed tip's run, adopts what
//!   continues the chain, and lands a settle marker at the first empty key;
//!   its start object goes at least 64 keys above where the walk stopped.
//! - **K5 settle markers stay**: collection never deletes one.
//! - **W1 the older stops**: once a newer process opened, an older one
//!   acknowledges nothing the newer chain lacks and is fenced at its next
//!   create at or after the walk's key.
//! - **W2 nothing acknowledged is lost**: every object either process
//!   acknowledged is on the chain the newer one continues.
//! - **W3 no late poison**: an older process's objects never land at a key
//!   a newer one uses for its start object or data (dead objects, the start
//!   objects of failed opens, are deleted).
//! - **W4 plausible epochs**: every object has `epoch <= sequence`;
//!   recovery refuses one that does not.
//! - **W7 dense fences**: a claim moves to the next epoch only after reading
//!   another opener's fence; an "exists" answer over nothing is repeated.
//!
//! # Storage
//!
//! [`Storage::from_url`] opens `file://`, `memory://`, `s3://`, `gs://` and
//! `azblob://` URLs, with the providers' standard credential chains;
//! [`Storage::from_url_opts`] adds an options map. An existing client is
//! taken as it is:
//!
//! ```
//! # #[cfg(feature = "object_store")] {
//! let store = std::sync::Arc::new(object_store::memory::InMemory::new());
//! let storage = objwal::Storage::from_object_store(store);
//! # }
//! # #[cfg(feature = "opendal")] {
//! let op = opendal::Operator::new(opendal::services::Memory::default()).map_err(|e| e.to_string())?;
//! let storage = objwal::Storage::from_opendal(op);
//! # }
//! # Ok::<(), String>(())
//! ```
//!
//! Any other backend implements [`ObjectStorage`] and is wrapped with
//! [`Storage::new`]; the fault-injecting wrapper for tests is
//! `storage::fault::FaultyStorage` (feature `testing`).
//!
//! # Configuration
//!
//! [`Config`] has public fields with defaults; each field's documentation
//! says what it trades (latency, requests and so money, memory). Operators
//! keep it in a TOML file (`objwal.toml` at the repository top lists every
//! key with its default) and override single keys from the environment:
//!
//! ```
//! let path = concat!(env!("CARGO_MANIFEST_DIR"), "/objwal.toml");
//! let config = objwal::Config::from_file(path)?
//!     .with_vars("OBJWAL_", [("OBJWAL_FLUSH_INTERVAL", "20ms")])?; // or .with_env("OBJWAL_")
//! assert_eq!(config.flush_interval, std::time::Duration::from_millis(20));
//! println!("{}", toml::to_string(&config)?); // the effective config
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Errors
//!
//! One [`Error`] enum; what to do is in its kind: [`Error::is_retryable`]
//! (repeat later: `Failing`, `NotDurable`, transient `Storage`),
//! [`Error::is_poisoned`] (terminal: stop and open the prefix again in a
//! new process; when it says "fenced", another process took over: do not
//! restart in a loop), [`Error::is_stopped`] (also once the tokio runtime
//! a store runs on shut down: the message says so), `RegionReleased`,
//! `InvalidArgument` / `InvalidConfig` / `Config` (fix the call or the
//! configuration; an open outside a tokio runtime is an `InvalidArgument`),
//! `NoLog` (an open with `create_if_missing = false` found no log under
//! the prefix: it names the prefixes that hold one), `Corrupted` and
//! `Recovery` (alert: the stored history is damaged), and `Lost` (a stop
//! gave up entries it had acknowledged). Every error prints as one line
//! that says what happened and, where objwal knows it, what to do; a
//! storage error names a missing bucket, missing or refused credentials or
//! an unreachable endpoint with its fix, and its `source` chain repeats
//! nothing its message says.
//!
//! # Cargo features
//!
//! | feature | what it adds |
//! | --- | --- |
//! | (none, the default) | the memory and local directory backends |
//! | `object_store` | `Storage::from_object_store`; `s3://` URLs through object_store |
//! | `opendal` | `Storage::from_opendal`; `gs://` and `azblob://` URLs, and `s3://` when `object_store` is off (or with `?adapter=opendal`) |
//! | `testing` | `storage::fault`, the fault-injecting storage wrapper, and `storage::power_loss`, a simulated power loss of the directory backend |
//!
//! The `objwal` command line (`demo`, `inspect`, `verify`, `dump`, `tail`,
//! `repair`, `bench`, the crash gate) is a crate of its own in the
//! repository's workspace (`cli/`), so depending on this one brings none of
//! its dependencies.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
#[doc(hidden)]
pub mod catalog;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod error;
pub mod format;
pub mod id;
pub mod metrics;
pub mod storage;
#[doc(hidden)]
pub mod wal;

pub use catalog::{IndexedObject, Pinning, RegionInfo};
pub use config::{AckMode, Config, CorruptionPolicy, DamagePolicy, EarlySeals, HedgeCreates};
pub use error::Error;
pub use storage::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};
pub use wal::{
    CatchUp, Entry, FlushRequest, Follower, Hold, HoldInfo, Hole, Imported, Lag, Takeover,
    TakeoverProgress, Wal, WalReader,
};

/// A region: one log stream. `u64::MAX` (release records) and
/// `u64::MAX - 255` (flush marks) are reserved.
pub type RegionId = u64;
/// An entry id: `(sequence << 20) | position`; 0 means "no entry". It prints
/// as `sequence.position` through [`id::Dotted`] and parses with
/// [`id::parse`].
pub type EntryId = u64;

#[cfg(test)]
mod tests {
    /// The fenced code blocks of a markdown text: (info string, body).
    fn code_blocks(markdown: &str) -> Vec<(String, String)> {
        let mut blocks = Vec::new();
        let mut open: Option<(String, Vec<&str>)> = None;
        for line in markdown.lines() {
            match (&mut open, line.trim_start().strip_prefix("```")) {
                (None, Some(info)) => open = Some((info.trim().to_owned(), Vec::new())),
                (Some(_), Some(_)) => {
                    if let Some((info, body)) = open.take() {
                        blocks.push((info, body.join("\n")));
                    }
                }
                (Some((_, body)), None) => body.push(line),
                (None, None) => {}
            }
        }
        blocks
    }

    #[test]
    fn the_readme_rust_examples_are_crate_doctests() {
        let crate_docs: String = include_str!("lib.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let doctests = code_blocks(&crate_docs);
        let readme = code_blocks(include_str!("../README.md"));
        let examples: Vec<_> = readme
            .iter()
            .filter(|(info, _)| info.starts_with("rust"))
            .collect();
        assert!(!examples.is_empty(), "README has no rust example");
        for (info, body) in examples {
            assert!(
                doctests.iter().any(|(i, b)| i == info && b == body),
                "README's ```{info} block is not a doctest of lib.rs (copy it verbatim):\n{body}"
            );
        }
    }
}
