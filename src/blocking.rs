//! A blocking handle, for engines that are not async.
//!
//! [`blocking::Wal`](Wal) has the methods of [`crate::Wal`] as plain
//! functions, in the spirit of `reqwest::blocking`: each call hands its
//! request to the same actor an async [`crate::Wal`] talks to and parks the
//! calling thread until the answer comes, so the semantics are exactly the
//! async handle's (ids, durability, `obsolete`, releases, stop, fencing,
//! errors). [`read`](Wal::read) and [`replay`](Wal::replay) return
//! iterators. [`WalReader`] opens a log without writing to it and
//! [follows](WalReader::follow) it: a [`Follower`] is an iterator of the
//! entries as they land, with [`next_timeout`](Follower::next_timeout) for
//! a standby loop that does other work, and
//! [`catch_up`](Follower::catch_up) and [`lag`](Follower::lag) to know
//! how far behind it is.
//!
//! # The runtime
//!
//! The handle owns a multi-thread tokio runtime (two worker threads named
//! `objwal`, timers and I/O enabled) that runs the actor, its uploads and
//! the reads of its iterators: [`Wal::open`] builds one per store;
//! [`Wal::open_with_runtime`] takes one the caller built (to size it or name
//! its threads; it must be multi-thread). The runtime lives as long as the
//! last clone of the handle or iterator and is then shut down without
//! waiting: call [`stop`](Wal::stop) first, as with the async handle
//! (dropping without `stop` is a crash as far as the log is concerned).
//!
//! # Inside async code
//!
//! It never deadlocks: the calling thread only waits, and the work is done
//! by the handle's own runtime threads, which no caller's code runs on. So a
//! blocking call made from async code (a task of another runtime, even a
//! current-thread one) completes; but it blocks that thread for the call's
//! whole duration (a durable append waits for its object's create), which
//! stalls the other tasks of that thread. In async code use
//! [`as_async`](Wal::as_async) (an async [`crate::Wal`] on the same actor,
//! usable from any tokio runtime) or `tokio::task::spawn_blocking`. Dropping
//! the last handle inside async code is fine too (its runtime is shut down
//! in the background), and an open that fails there returns its error like
//! anywhere else.
//!
//! # Example: a small synchronous engine
//!
//! ```
//! use objwal::blocking::Wal;
//! use objwal::{Config, Storage};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let url = format!("file://{}", dir.path().display());
//!
//! // No #[tokio::main]: the handle brings its runtime.
//! let wal = Wal::open(Storage::from_url(&url)?, "engine", Config::default())?;
//! let ids = wal.append(vec![(1, "put a=1".into()), (2, "put b=2".into())])?; // durable
//! wal.append(vec![(1, "put a=2".into())])?;
//! wal.obsolete(1, ids[0])?; // the memtable holding "put a=1" was flushed
//! wal.release_region(2)?; // shard 2 dropped, durably
//! wal.stop()?;
//!
//! // Restart: replay what was not flushed.
//! let wal = Wal::open(Storage::from_url(&url)?, "engine", Config::default())?;
//! let replayed: Vec<_> = wal.read(1, 0).collect::<Result<_, _>>()?;
//! assert_eq!(replayed.len(), 1);
//! assert_eq!(&replayed[0].data[..], b"put a=2");
//! assert_eq!(wal.read(2, 0).count(), 0); // released
//! wal.stop()?;
//! # Ok(())
//! # }
//! ```
//!
//! `examples/blocking_engine.rs` is a fuller one: a memtable per shard,
//! flushes to local files with `obsolete`, a dropped shard, and a restart
//! that replays every shard in one pass.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

use crate::catalog::{Pinning, RegionInfo};
use crate::config::Config;
use crate::error::Error;
use crate::storage::Storage;
use crate::wal::{Entry, Hole};
use crate::{EntryId, RegionId};

/// Worker threads of the runtime [`Wal::open`] builds: the actor is one
/// task and uploads are futures it polls; a second thread keeps reads and
/// a busy actor from waiting on each other.
const WORKER_THREADS: usize = 2;

/// A write-ahead log on object storage with blocking calls (see the
/// [module docs](self)). Cheap to clone; every clone talks to the same
/// actor and shares its runtime.
#[derive(Clone)]
pub struct Wal {
    inner: Arc<Inner>,
}

/// The async handle and the runtime it lives on.
struct Inner {
    wal: crate::Wal,
    handle: Handle,
    /// Shut down (without waiting) when the last clone is dropped.
    _runtime: OwnedRuntime,
}

/// A runtime this module owns, shut down without waiting when dropped.
///
/// Dropping a [`Runtime`] waits for its tasks, which tokio forbids (a
/// panic) on a thread that runs async code; `shutdown_background` may be
/// called anywhere. Every runtime the handle receives or builds is wrapped
/// at once, so no path (a handle dropped, an open that fails early or
/// late) drops one the panicking way.
struct OwnedRuntime(Option<Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Wal")
            .field("wal", &self.inner.wal)
            .finish_non_exhaustive()
    }
}

impl Wal {
    /// Opens the log under `prefix` as [`crate::Wal::open`] does, on a new
    /// multi-thread runtime of two worker threads that this handle owns.
    /// A failed open returns its error ([`Error::NoLog`], a fenced or
    /// unreachable store, a bad configuration), also when called from
    /// async code.
    pub fn open(storage: Storage, prefix: &str, config: Config) -> Result<Wal, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("objwal")
            .enable_all()
            .build()
            .map_err(|e| Error::Stopped {
                detail: Some(
                    format!("the blocking handle could not start its runtime: {e}").into(),
                ),
            })?;
        Wal::open_with_runtime(runtime, storage, prefix, config)
    }

    /// Opens the log under `prefix` as [`crate::Wal::open`] does, on
    /// `runtime`, which this handle then owns. It must be a multi-thread
    /// runtime with timers and I/O enabled (`Builder::enable_all`): a
    /// current-thread runtime runs tasks only inside its `block_on`, which
    /// nothing would call, and is refused.
    ///
    /// A failed open returns its error wherever it is called (async code
    /// included): the runtime is then shut down without waiting.
    pub fn open_with_runtime(
        runtime: Runtime,
        storage: Storage,
        prefix: &str,
        config: Config,
    ) -> Result<Wal, Error> {
        let handle = runtime.handle().clone();
        let runtime = OwnedRuntime(Some(runtime));
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return Err(Error::invalid(
                "objwal::blocking::Wal needs a multi-thread runtime: a current-thread runtime \
                 runs its tasks only inside block_on, which nothing would call",
            ));
        }
        let prefix = prefix.to_owned();
        let wal = wait(&handle, async move {
            crate::Wal::open(storage, &prefix, config).await
        })?;
        Ok(Wal {
            inner: Arc::new(Inner {
                wal,
                handle,
                _runtime: runtime,
            }),
        })
    }

    /// Runs a request of the async handle on the runtime and waits.
    fn call<T, F>(&self, request: impl FnOnce(crate::Wal) -> F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        wait(&self.inner.handle, request(self.inner.wal.clone()))
    }

    /// [`crate::Wal::append`]: returns the ids in input order, once the
    /// entries are durable (durable mode) or admitted (enqueued mode).
    pub fn append(&self, entries: Vec<(RegionId, Bytes)>) -> Result<Vec<EntryId>, Error> {
        self.call(|wal| async move { wal.append(entries).await })
    }

    /// [`crate::Wal::read`]: the entries of `region` with id >= `from`, in
    /// id order, as an iterator. Up to `replay_concurrency` reads run ahead
    /// on the handle's runtime while the caller consumes.
    pub fn read(&self, region: RegionId, from: EntryId) -> Entries {
        let _entered = self.inner.handle.enter();
        let stream = self.inner.wal.read(region, from);
        Entries::spawn(self.inner.clone(), stream)
    }

    /// [`crate::Wal::replay`]: the entries of many regions in one iterator,
    /// each region's in id order, each object fetched once.
    pub fn replay(
        &self,
        regions_and_from: impl IntoIterator<Item = (RegionId, EntryId)>,
    ) -> Entries {
        let _entered = self.inner.handle.enter();
        let stream = self.inner.wal.replay(regions_and_from);
        Entries::spawn(self.inner.clone(), stream)
    }

    /// [`crate::Wal::obsolete`]: the entries of `region` up to `id` are
    /// flushed by the engine (hidden from reads, collectable).
    pub fn obsolete(&self, region: RegionId, id: EntryId) -> Result<(), Error> {
        self.call(|wal| async move { wal.obsolete(region, id).await })
    }

    /// [`crate::Wal::release_region`]: drops `region` durably.
    pub fn release_region(&self, region: RegionId) -> Result<(), Error> {
        self.call(|wal| async move { wal.release_region(region).await })
    }

    /// [`crate::Wal::latest_entry_id`]: the largest acknowledged id of
    /// `region`; 0 when it has none. Does not wait.
    pub fn latest_entry_id(&self, region: RegionId) -> EntryId {
        self.inner.wal.latest_entry_id(region)
    }

    /// [`crate::Wal::wait_durable`]: returns once every entry of `region`
    /// up to `id` is durable and indexed.
    pub fn wait_durable(&self, region: RegionId, id: EntryId) -> Result<(), Error> {
        self.call(|wal| async move { wal.wait_durable(region, id).await })
    }

    /// [`crate::Wal::flush`]: seals now; returns once everything admitted
    /// before the call is durable and indexed.
    pub fn flush(&self) -> Result<(), Error> {
        self.call(|wal| async move { wal.flush().await })
    }

    /// [`crate::Wal::holes`]: what `region` misses. Does not wait.
    pub fn holes(&self, region: RegionId) -> Vec<Hole> {
        self.inner.wal.holes(region)
    }

    /// [`crate::Wal::regions`]: what the log holds per region.
    pub fn regions(&self) -> Result<Vec<RegionInfo>, Error> {
        self.call(|wal| async move { wal.regions().await })
    }

    /// [`crate::Wal::pinning`]: the regions that hold objects from
    /// collection.
    pub fn pinning(&self) -> Result<Vec<Pinning>, Error> {
        self.call(|wal| async move { wal.pinning().await })
    }

    /// [`crate::Wal::holds`]: the reader holds the latest collection pass
    /// saw.
    pub fn holds(&self) -> Result<Vec<crate::HoldInfo>, Error> {
        self.call(|wal| async move { wal.holds().await })
    }

    /// [`crate::Wal::stop`]: drains what was admitted and stops;
    /// idempotent. The runtime stays up until the last clone is dropped.
    pub fn stop(&self) -> Result<(), Error> {
        self.call(|wal| async move { wal.stop().await })
    }

    /// The async handle of the same store (same actor, same state): for
    /// async code, and for what has no blocking form here
    /// ([`flush_requests`](crate::Wal::flush_requests),
    /// [`import_region`](crate::Wal::import_region)). Poll its futures and
    /// streams on any tokio runtime; it stays usable while a clone of this
    /// handle keeps the runtime it lives on.
    pub fn as_async(&self) -> &crate::Wal {
        &self.inner.wal
    }
}

/// Runs `future` on the runtime of `handle` and parks this thread until it
/// is done. The thread is never one of that runtime's workers (callers
/// cannot run code there), so this cannot deadlock; a runtime gone before
/// the answer (it cannot be while a handle owns it) is a stopped store.
fn wait<T: Send + 'static>(
    handle: &Handle,
    future: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<T, Error> {
    let (tx, rx) = flume::bounded(1);
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().map_err(|_| Error::Stopped {
        detail: Some("the runtime of the blocking handle shut down before it answered".into()),
    })?
}

/// The entries of a [`Wal::read`] or [`Wal::replay`], in order; after an
/// error the iteration ends. The reads run on the handle's runtime, ahead
/// of the consumer within `replay_buffer_bytes`; dropping the iterator
/// stops them. It keeps the runtime alive.
pub struct Entries {
    next: flume::Receiver<Result<Entry, Error>>,
    task: tokio::task::JoinHandle<()>,
    /// The runtime the reads run on.
    _store: Arc<Inner>,
}

impl Entries {
    fn spawn(
        store: Arc<Inner>,
        stream: impl futures::Stream<Item = Result<Entry, Error>> + Send + 'static,
    ) -> Entries {
        // One entry handed over at a time: the stream's own buffer bounds
        // what is fetched ahead.
        let (tx, next) = flume::bounded(1);
        let task = store.handle.spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if tx.send_async(item).await.is_err() {
                    break;
                }
            }
        });
        Entries {
            next,
            task,
            _store: store,
        }
    }
}

impl Iterator for Entries {
    type Item = Result<Entry, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next.recv().ok()
    }
}

impl Drop for Entries {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entries").finish_non_exhaustive()
    }
}

/// A reader of a log with blocking calls: [`crate::WalReader`] on a runtime
/// this handle owns (built as [`Wal::open`] builds one). It never writes,
/// so it never fences the writer.
pub struct WalReader {
    reader: crate::WalReader,
    handle: Handle,
    runtime: Arc<OwnedRuntime>,
}

impl std::fmt::Debug for WalReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::WalReader")
            .finish_non_exhaustive()
    }
}

impl WalReader {
    /// [`crate::WalReader::open`], on a new runtime of two worker threads:
    /// [`Error::NoLog`] where no log is.
    pub fn open(storage: Storage, prefix: &str, config: Config) -> Result<WalReader, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("objwal-reader")
            .enable_all()
            .build()
            .map_err(|e| Error::Stopped {
                detail: Some(
                    format!("the blocking reader could not start its runtime: {e}").into(),
                ),
            })?;
        let handle = runtime.handle().clone();
        let runtime = Arc::new(OwnedRuntime(Some(runtime)));
        let prefix = prefix.to_owned();
        let reader = wait(&handle, async move {
            crate::WalReader::open(storage, &prefix, config).await
        })?;
        Ok(WalReader {
            reader,
            handle,
            runtime,
        })
    }

    /// [`crate::WalReader::follow`]: a [`Follower`] of `regions`, each from
    /// its id.
    pub fn follow(&self, regions: impl IntoIterator<Item = (RegionId, EntryId)>) -> Follower {
        let _entered = self.handle.enter();
        Follower {
            follower: Some(self.reader.follow(regions)),
            handle: self.handle.clone(),
            _runtime: self.runtime.clone(),
        }
    }

    /// [`crate::WalReader::hold`]: places the reader hold `name` at this
    /// reader's first object; give it to a follower
    /// ([`Follower::keep_hold`]) to have it moved and refreshed.
    pub fn hold(&self, name: &str, ttl: Duration) -> Result<crate::Hold, Error> {
        let reader = self.reader.clone();
        let name = name.to_owned();
        wait(&self.handle, async move { reader.hold(&name, ttl).await })
    }

    /// The async reader, for what this handle does not wrap.
    pub fn as_async(&self) -> &crate::WalReader {
        &self.reader
    }
}

/// A blocking [`crate::Follower`]: an iterator of the followed regions'
/// entries as they land (it blocks until the next one); after an error
/// that ends the follower, the iteration ends. It keeps its reader's
/// runtime alive.
pub struct Follower {
    /// `None` only while a call has lent it to the runtime (a call that
    /// panicked leaves it so: the follower is then ended).
    follower: Option<crate::Follower>,
    handle: Handle,
    _runtime: Arc<OwnedRuntime>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Follower")
            .field("follower", &self.follower)
            .finish_non_exhaustive()
    }
}

impl Follower {
    /// The next entry, waiting at most `timeout`: `Ok(None)` when none came
    /// within it (the follower goes on: call again), the follower's error
    /// when it gave one, and [`Error::Stopped`] once it has ended.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Entry>, Error> {
        match self.poll(Some(timeout)) {
            Some(Some(item)) => item.map(Some),
            Some(None) => Err(ended()),
            None => Ok(None),
        }
    }

    /// [`crate::Follower::catch_up`]: takes in every entry that landed
    /// before the call, handing each to `each` in order, and returns how
    /// many once a listing confirms that nothing lies beyond (the follower
    /// then goes on as before). An error ends the catch-up (the follower's
    /// own errors are its items').
    pub fn catch_up(&mut self, mut each: impl FnMut(Entry)) -> Result<u64, Error> {
        let mut follower = self.follower.take().ok_or_else(ended)?;
        let (tx, rx) = flume::bounded(1);
        let (back, returned) = flume::bounded(1);
        self.handle.spawn(async move {
            {
                let mut caught = follower.catch_up();
                while let Some(item) = caught.next().await {
                    if tx.send_async(item).await.is_err() {
                        break;
                    }
                }
            }
            drop(tx);
            let _ = back.send(follower);
        });
        let mut taken = 0;
        let mut failed = None;
        for item in rx.iter() {
            match item {
                Ok(entry) => {
                    taken += 1;
                    each(entry);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(rx);
        self.follower = returned.recv().ok();
        match failed {
            Some(e) => Err(e),
            None => Ok(taken),
        }
    }

    /// [`crate::Follower::lag`]: objects seen landed and not yet yielded,
    /// and the age of the oldest.
    pub fn lag(&self) -> crate::Lag {
        self.follower
            .as_ref()
            .map(crate::Follower::lag)
            .unwrap_or_default()
    }

    /// [`crate::Follower::keep_hold`]: keeps `hold` moved to what this
    /// follower has not taken in, refreshed every quarter of its ttl, on
    /// the reader's runtime (also while the caller does other work).
    pub fn keep_hold(&mut self, hold: crate::Hold) {
        let _entered = self.handle.enter();
        if let Some(follower) = self.follower.as_mut() {
            follower.keep_hold(hold);
        }
    }

    /// Stops keeping the hold and releases it ([`crate::Hold::release`]):
    /// from the writer's next collection pass on it pins nothing. `Ok`
    /// when no hold was kept.
    pub fn release_hold(&mut self) -> Result<(), Error> {
        let Some(mut follower) = self.follower.take() else {
            return Err(ended());
        };
        let (follower, released) = wait(&self.handle, async move {
            let released = match follower.take_hold().await {
                Some(hold) => hold.release().await,
                None => Ok(()),
            };
            Ok::<_, Error>((follower, released))
        })?;
        self.follower = Some(follower);
        released
    }

    /// [`crate::Follower::holes`]: what could not be read of `region`.
    pub fn holes(&self, region: RegionId) -> Vec<Hole> {
        self.follower
            .as_ref()
            .map(|f| f.holes(region))
            .unwrap_or_default()
    }

    /// The next item within `timeout` (or without one): `None` on timeout,
    /// `Some(None)` at the end.
    fn poll(&mut self, timeout: Option<Duration>) -> Option<Option<Result<Entry, Error>>> {
        let Some(mut follower) = self.follower.take() else {
            return Some(None);
        };
        let (tx, rx) = flume::bounded(1);
        self.handle.spawn(async move {
            let next = match timeout {
                Some(timeout) => tokio::time::timeout(timeout, follower.next()).await.ok(),
                None => Some(follower.next().await),
            };
            let _ = tx.send((follower, next));
        });
        let (follower, next) = rx.recv().ok()?;
        self.follower = Some(follower);
        next
    }
}

impl Iterator for Follower {
    type Item = Result<Entry, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.poll(None).flatten()
    }
}

/// The error of a follower that has ended.
fn ended() -> Error {
    Error::Stopped {
        detail: Some("the follower has ended".into()),
    }
}
