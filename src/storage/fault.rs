//! A fault-injecting wrapper for tests (feature `testing`).
//!
//! Responsibility: make every storage failure a later test needs happen on
//! demand, deterministically: failed requests, a create that lands but whose
//! response is lost, creates held at a chosen point and released in a chosen
//! order, requests that never answer, latency, corrupted reads, and request
//! counters.
//!
//! Invariants: nothing here sleeps or draws random numbers, except the
//! explicit latency (a `tokio::time::sleep`, so paused-time tests work);
//! every rule is consumed in the order it was added; clones share all state.
//!
//! The order of a request through the wrapper: count it; latency; a
//! `stall_next` rule (it never answers); a `fail_next` rule (the inner
//! store is not touched). Then, for a create: the [`HoldPoint::BeforeInner`] hold;
//! a `phantom_exists_next` rule (answers `AlreadyExists`, nothing lands);
//! the inner create; a `lose_next_create_responses` rule (the object landed,
//! a transient error is returned); the [`HoldPoint::AfterLanded`] hold.
//!
//! ```
//! # async fn demo() {
//! use objwal::storage::fault::{FaultyStorage, Op};
//! use objwal::storage::{MemoryStorage, StorageErrorKind};
//! use objwal::{ObjectStorage, Storage};
//!
//! let faulty = FaultyStorage::new(Storage::new(MemoryStorage::new()));
//! faulty.fail_next(Op::Create, "objects/", 2, StorageErrorKind::Transient);
//! let storage: Storage = faulty.storage();
//! assert!(storage.create("p/objects/1", "x".into()).await.is_err());
//! assert_eq!(faulty.counts().create.failures, 1);
//! # }
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{oneshot, watch};

use super::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, StorageErrorKind, Suffix};

/// A kind of storage request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// `create`
    Create,
    /// `read`
    Read,
    /// `list` (rules match the listed prefix)
    List,
    /// `delete`
    Delete,
}

/// Where a held create waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldPoint {
    /// Before the create reaches the inner store: nothing landed yet.
    BeforeInner,
    /// After the object landed in the inner store, before the response
    /// returns to the caller.
    AfterLanded,
}

/// Counters of one request kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Requests made to the wrapper.
    pub requests: u64,
    /// Bytes sent to the inner store (creates) or returned (reads).
    pub bytes: u64,
    /// Requests that returned an error (injected or from the inner store).
    pub failures: u64,
}

/// A snapshot of the request counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Creates.
    pub create: OpCounts,
    /// Reads.
    pub read: OpCounts,
    /// Lists.
    pub list: OpCounts,
    /// Deletes.
    pub delete: OpCounts,
}

impl Counts {
    fn of(&mut self, op: Op) -> &mut OpCounts {
        match op {
            Op::Create => &mut self.create,
            Op::Read => &mut self.read,
            Op::List => &mut self.list,
            Op::Delete => &mut self.delete,
        }
    }
}

/// A rule that applies to the next `remaining` matching requests.
#[derive(Debug)]
struct Rule<T> {
    key_contains: String,
    remaining: usize,
    what: T,
}

/// Finds the first rule matching `key`, consumes one use of it.
fn take_rule<T: Clone>(rules: &mut Vec<Rule<T>>, key: &str) -> Option<T> {
    let i = rules
        .iter()
        .position(|r| r.remaining > 0 && key.contains(&r.key_contains))?;
    let rule = &mut rules[i];
    rule.remaining -= 1;
    let what = rule.what.clone();
    if rule.remaining == 0 {
        rules.remove(i);
    }
    Some(what)
}

struct Held {
    id: u64,
    key: String,
    release: oneshot::Sender<Option<StorageErrorKind>>,
}

#[derive(Default)]
struct State {
    fail: Vec<Rule<(Op, StorageErrorKind)>>,
    stall: Vec<Rule<Op>>,
    lose: Vec<Rule<()>>,
    phantom: Vec<Rule<()>>,
    corrupt: Vec<Rule<Option<u64>>>,
    latency: [Duration; 4],
    hold: Option<HoldPoint>,
    held: VecDeque<Held>,
    next_held_id: u64,
    counts: Counts,
}

struct Shared {
    state: Mutex<State>,
    held_count: watch::Sender<usize>,
}

/// Wraps a [`Storage`] and injects faults into the requests that pass
/// through. Clones share their rules, holds and counters.
#[derive(Clone)]
pub struct FaultyStorage {
    inner: Storage,
    shared: Arc<Shared>,
}

impl fmt::Debug for FaultyStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStorage")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

fn op_index(op: Op) -> usize {
    match op {
        Op::Create => 0,
        Op::Read => 1,
        Op::List => 2,
        Op::Delete => 3,
    }
}

fn injected(kind: StorageErrorKind, key: &str, what: &str) -> StorageError {
    match kind {
        StorageErrorKind::NotFound => StorageError::not_found(key),
        kind => StorageError::new(kind, format!("injected fault: {what}")).with_key(key),
    }
}

impl FaultyStorage {
    /// Wraps `inner` with no faults.
    pub fn new(inner: Storage) -> Self {
        FaultyStorage {
            inner,
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                held_count: watch::channel(0).0,
            }),
        }
    }

    /// A [`Storage`] handle whose requests go through this wrapper.
    pub fn storage(&self) -> Storage {
        Storage::new(self.clone())
    }

    /// The wrapped store (requests to it bypass every fault).
    pub fn inner(&self) -> &Storage {
        &self.inner
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fails the next `n` requests of kind `op` whose key (or listed prefix)
    /// contains `key_contains` (`""` matches all) with an error of `kind`.
    /// The inner store is not touched.
    pub fn fail_next(&self, op: Op, key_contains: &str, n: usize, kind: StorageErrorKind) {
        self.state().fail.push(Rule {
            key_contains: key_contains.to_owned(),
            remaining: n,
            what: (op, kind),
        });
    }

    /// The next `n` requests of kind `op` whose key (or listed prefix)
    /// contains `key_contains` never answer: a store that stopped
    /// responding. Each waits until its caller gives up on it (drops it, as
    /// a request timeout does); the inner store is not touched.
    pub fn stall_next(&self, op: Op, key_contains: &str, n: usize) {
        self.state().stall.push(Rule {
            key_contains: key_contains.to_owned(),
            remaining: n,
            what: op,
        });
    }

    /// The next `n` creates whose key contains `key_contains` land in the
    /// inner store, then return a transient error as if the response was lost.
    pub fn lose_next_create_responses(&self, key_contains: &str, n: usize) {
        self.state().lose.push(Rule {
            key_contains: key_contains.to_owned(),
            remaining: n,
            what: (),
        });
    }

    /// The next `n` creates whose key contains `key_contains` answer
    /// `AlreadyExists` without touching the inner store: what object_store
    /// reports for any HTTP 409, such as S3's ConditionalRequestConflict of
    /// a racing or crashed request, while nothing landed.
    pub fn phantom_exists_next(&self, key_contains: &str, n: usize) {
        self.state().phantom.push(Rule {
            key_contains: key_contains.to_owned(),
            remaining: n,
            what: (),
        });
    }

    /// Flips one byte (xor 0xFF) in the next `n` non-empty reads of keys
    /// containing `key_contains`: the middle byte of the returned range.
    pub fn corrupt_next_reads(&self, key_contains: &str, n: usize) {
        self.push_corrupt(key_contains, n, None);
    }

    /// Flips the byte at `object_offset` (counted from the object's start)
    /// in the next `n` reads of keys containing `key_contains` whose range
    /// covers that offset.
    pub fn corrupt_next_reads_at(&self, key_contains: &str, n: usize, object_offset: u64) {
        self.push_corrupt(key_contains, n, Some(object_offset));
    }

    fn push_corrupt(&self, key_contains: &str, n: usize, at: Option<u64>) {
        self.state().corrupt.push(Rule {
            key_contains: key_contains.to_owned(),
            remaining: n,
            what: at,
        });
    }

    /// Delays every request of kind `op` by `latency` (`Duration::ZERO`
    /// removes it), with `tokio::time::sleep`.
    pub fn set_latency(&self, op: Op, latency: Duration) {
        self.state().latency[op_index(op)] = latency;
    }

    /// Removes every fail, stall, lose and corrupt rule and every latency.
    /// Holding and held creates are unchanged (and requests already stalled
    /// stay stalled).
    pub fn clear_faults(&self) {
        let mut s = self.state();
        s.fail.clear();
        s.stall.clear();
        s.lose.clear();
        s.phantom.clear();
        s.corrupt.clear();
        s.latency = Default::default();
    }

    /// Holds every later create before it reaches the inner store (`true`),
    /// or stops holding new ones (`false`). Same as
    /// [`hold_creates_at`](Self::hold_creates_at) with `BeforeInner`.
    pub fn hold_creates(&self, hold: bool) {
        self.hold_creates_at(hold.then_some(HoldPoint::BeforeInner));
    }

    /// Holds every later create at `point`, or none (`None`). Creates already
    /// held stay held until released.
    pub fn hold_creates_at(&self, point: Option<HoldPoint>) {
        self.state().hold = point;
    }

    /// Waits, without sleeping, until at least `n` creates are held.
    pub async fn wait_held(&self, n: usize) {
        let mut rx = self.shared.held_count.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = rx.wait_for(|held| *held >= n).await;
    }

    /// The keys of the held creates, in arrival order.
    pub fn held(&self) -> Vec<String> {
        self.state().held.iter().map(|h| h.key.clone()).collect()
    }

    /// Lets the earliest held create of `key` proceed. False if none is held.
    pub fn release(&self, key: &str) -> bool {
        self.release_one(key, None)
    }

    /// Fails the earliest held create of `key` with an error of `kind`
    /// (held after landing, the object stays). False if none is held.
    pub fn release_with_error(&self, key: &str, kind: StorageErrorKind) -> bool {
        self.release_one(key, Some(kind))
    }

    /// Lets every held create proceed, in arrival order. Returns how many.
    pub fn release_all(&self) -> usize {
        let held: Vec<Held> = {
            let mut s = self.state();
            let held = s.held.drain(..).collect();
            self.shared.held_count.send_replace(0);
            held
        };
        let n = held.len();
        for h in held {
            let _ = h.release.send(None);
        }
        n
    }

    fn release_one(&self, key: &str, error: Option<StorageErrorKind>) -> bool {
        let held = {
            let mut s = self.state();
            let Some(i) = s.held.iter().position(|h| h.key == key) else {
                return false;
            };
            let held = s.held.remove(i);
            self.shared.held_count.send_replace(s.held.len());
            held
        };
        // A held create whose caller gave up is released all the same.
        held.is_some_and(|h| {
            let _ = h.release.send(error);
            true
        })
    }

    /// A snapshot of the request counters.
    pub fn counts(&self) -> Counts {
        self.state().counts
    }

    /// Sets every counter to zero.
    pub fn reset_counts(&self) {
        self.state().counts = Counts::default();
    }

    /// Counts a request, applies latency, `stall_next` and `fail_next` rules.
    async fn enter(&self, op: Op, key: &str) -> Result<(), StorageError> {
        let latency = {
            let mut s = self.state();
            s.counts.of(op).requests += 1;
            s.latency[op_index(op)]
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let stalled = {
            let mut s = self.state();
            let i = s
                .stall
                .iter()
                .position(|r| r.what == op && r.remaining > 0 && key.contains(&r.key_contains));
            i.map(|i| {
                let rule = &mut s.stall[i];
                rule.remaining -= 1;
                if rule.remaining == 0 {
                    s.stall.remove(i);
                }
            })
            .is_some()
        };
        if stalled {
            std::future::pending::<()>().await;
        }
        let mut s = self.state();
        let fail = {
            let i = s
                .fail
                .iter()
                .position(|r| r.what.0 == op && r.remaining > 0 && key.contains(&r.key_contains));
            i.map(|i| {
                let rule = &mut s.fail[i];
                rule.remaining -= 1;
                let kind = rule.what.1;
                if rule.remaining == 0 {
                    s.fail.remove(i);
                }
                kind
            })
        };
        match fail {
            Some(kind) => {
                s.counts.of(op).failures += 1;
                Err(injected(kind, key, "failed request"))
            }
            None => Ok(()),
        }
    }

    fn finish<T>(&self, op: Op, result: Result<T, StorageError>) -> Result<T, StorageError> {
        if result.is_err() {
            self.state().counts.of(op).failures += 1;
        }
        result
    }

    /// Holds a create at `point` if holding is on there; returns the error
    /// it was released with, if any.
    async fn maybe_hold(&self, point: HoldPoint, key: &str) -> Option<StorageErrorKind> {
        let rx = {
            let mut s = self.state();
            if s.hold != Some(point) {
                return None;
            }
            let (tx, rx) = oneshot::channel();
            let id = s.next_held_id;
            s.next_held_id += 1;
            s.held.push_back(Held {
                id,
                key: key.to_owned(),
                release: tx,
            });
            self.shared.held_count.send_replace(s.held.len());
            HeldGuard {
                faulty: self,
                id,
                rx,
            }
        };
        rx.wait().await
    }
}

/// Removes a held create from the list when its caller stops waiting.
struct HeldGuard<'a> {
    faulty: &'a FaultyStorage,
    id: u64,
    rx: oneshot::Receiver<Option<StorageErrorKind>>,
}

impl HeldGuard<'_> {
    async fn wait(mut self) -> Option<StorageErrorKind> {
        (&mut self.rx).await.unwrap_or(None)
    }
}

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        let mut s = self.faulty.state();
        if let Some(i) = s.held.iter().position(|h| h.id == self.id) {
            s.held.remove(i);
            self.faulty.shared.held_count.send_replace(s.held.len());
        }
    }
}

fn flip(data: Bytes, index: usize) -> Bytes {
    let mut b = BytesMut::from(&data[..]);
    if let Some(byte) = b.get_mut(index) {
        *byte ^= 0xFF;
    }
    b.freeze()
}

#[async_trait::async_trait]
impl ObjectStorage for FaultyStorage {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.enter(Op::Create, key).await?;
        if let Some(kind) = self.maybe_hold(HoldPoint::BeforeInner, key).await {
            return self.finish(Op::Create, Err(injected(kind, key, "held create failed")));
        }
        if take_rule(&mut self.state().phantom, key).is_some() {
            return Ok(Created::AlreadyExists);
        }
        let len = data.len() as u64;
        self.state().counts.create.bytes += len;
        let created = match self.inner.create(key, data).await {
            Ok(c) => c,
            Err(e) => return self.finish(Op::Create, Err(e)),
        };
        if take_rule(&mut self.state().lose, key).is_some() {
            let err = injected(
                StorageErrorKind::Transient,
                key,
                "create landed, response lost",
            );
            return self.finish(Op::Create, Err(err));
        }
        if let Some(kind) = self.maybe_hold(HoldPoint::AfterLanded, key).await {
            let err = injected(kind, key, "create landed, held response failed");
            return self.finish(Op::Create, Err(err));
        }
        Ok(created)
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.enter(Op::Read, key).await?;
        let start = range.start;
        let data = match self.inner.read(key, range).await {
            Ok(d) => d,
            Err(e) => return self.finish(Op::Read, Err(e)),
        };
        Ok(self.after_read(key, start, data))
    }

    /// A read of the object's end: one request of kind [`Op::Read`], with
    /// the read's rules (latency, stalls, failures, corruption at object
    /// offsets).
    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.enter(Op::Read, key).await?;
        let suffix = match self.inner.read_suffix(key, len).await {
            Ok(s) => s,
            Err(e) => return self.finish(Op::Read, Err(e)),
        };
        let start = suffix.size.saturating_sub(suffix.data.len() as u64);
        Ok(Suffix {
            data: self.after_read(key, start, suffix.data),
            size: suffix.size,
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.enter(Op::List, prefix).await?;
        let result = self.inner.list(prefix).await;
        self.finish(Op::List, result)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.enter(Op::Delete, key).await?;
        let result = self.inner.delete(key).await;
        self.finish(Op::Delete, result)
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }

    /// A store with injected create or read latency stands in for a remote one.
    fn charges_per_request(&self) -> bool {
        let s = self.state();
        let slow =
            !s.latency[op_index(Op::Create)].is_zero() || !s.latency[op_index(Op::Read)].is_zero();
        slow || self.inner.charges_per_request()
    }
}

impl FaultyStorage {
    /// Counts the bytes a read returned and applies the next corrupt rule
    /// that matches (`start`: the object offset of `data`).
    fn after_read(&self, key: &str, start: u64, data: Bytes) -> Bytes {
        let mut s = self.state();
        s.counts.read.bytes += data.len() as u64;
        let len = data.len() as u64;
        let applies = |at: &Option<u64>| match at {
            None => len > 0,
            Some(off) => *off >= start && *off < start + len,
        };
        let i = s
            .corrupt
            .iter()
            .position(|r| r.remaining > 0 && key.contains(&r.key_contains) && applies(&r.what));
        let Some(i) = i else {
            return data;
        };
        let rule = &mut s.corrupt[i];
        rule.remaining -= 1;
        let at = rule.what;
        if rule.remaining == 0 {
            s.corrupt.remove(i);
        }
        drop(s);
        let index = at.map_or(len / 2, |off| off - start);
        flip(data, usize::try_from(index).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
#[path = "fault_tests.rs"]
mod tests;
