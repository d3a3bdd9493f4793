//! The network between the log and its object store, as the model test
//! draws it: object creates that answer late, and creates that land late,
//! after their caller gave up on them.
//!
//! It wraps the fault wrapper (`objwal::storage::fault`), whose faults and
//! holds still apply beneath it, and changes only creates of objects
//! (`/objects/` keys; fences, reads, lists and deletes pass straight
//! through):
//!
//! - **Slow answers** (`Settings::slow`, drawn per case): a seeded draw per
//!   create makes about one in five answer 400 ms after the request reached
//!   the store (it landed, or met "exists", at once): slower than half the
//!   500 ms `request_timeout` of such cases, within the timeout. With
//!   hedging on, the hedge goes out at half `request_timeout` at the latest
//!   while the first request has already landed or met another object:
//!   the hedge meets "already exists" and must read the key back (rfcs/0006,
//!   "Hedged creates"). Nothing fails: the step is not faulty.
//! - **Late landings** (`Fault::LateLanding`, a faulty step): the next
//!   object create fails at once for its caller (the client gave up) and
//!   still reaches the store later, even though its caller is gone: a
//!   request already on the wire is not called back by the client that sent
//!   it, so it races the void or the repeat its writer sends meanwhile
//!   (rule K1), exactly as on S3.
//!
//! A create that lands after its caller gave up is the network's, not the
//! store's: [`Network::abandoned`] lists the keys of those, so that the
//! check that a stopped store changes nothing under its prefix
//! (`Driver::check_stopped_quiet`) does not count them against the store.

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use objwal::storage::fault::FaultyStorage;
use objwal::storage::{
    Created, ObjectMeta, ObjectStorage, Storage, StorageError, StorageErrorKind, Suffix,
};

/// How long a slow answer takes after its request reached the store.
const SLOW_ANSWER: Duration = Duration::from_millis(400);

#[derive(Default)]
struct State {
    /// The seeded draw of slow creates (`None`: every create is prompt).
    draw: Option<u64>,
    /// The next object creates that fail at once for their caller and land
    /// after the delay.
    late: Vec<Duration>,
    /// Keys of creates that reached the store after their caller gave up.
    abandoned: BTreeSet<String>,
    /// Creates answered late, landed late (counts for the coverage).
    slow_answers: u64,
    late_landings: u64,
    /// Object creates answered "already exists" (repeats of a key: hedges,
    /// retries, voids, creates that met another object).
    exists: u64,
}

/// What the network does to one create.
enum Fate {
    Prompt,
    SlowAnswer,
    /// Lands after the delay; its caller is told `error` at once.
    Late(Duration, StorageError),
}

/// See the module documentation. Clones share their state.
#[derive(Clone)]
pub struct Network {
    faulty: FaultyStorage,
    state: Arc<Mutex<State>>,
}

/// splitmix64: the draw of slow creates, from the case's seed.
impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network").finish_non_exhaustive()
    }
}

fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Network {
    /// The network in front of `faulty`; `slow`: the seed of slow creates.
    pub fn new(faulty: FaultyStorage, slow: Option<u64>) -> Network {
        Network {
            faulty,
            state: Arc::new(Mutex::new(State {
                draw: slow,
                ..State::default()
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A storage handle whose requests go through the network.
    pub fn storage(&self) -> Storage {
        Storage::new(self.clone())
    }

    /// The next object create fails at once for its caller (a transient
    /// error: the client gave up) and lands `delay` later.
    pub fn late_next(&self, delay: Duration) {
        self.state().late.push(delay);
    }

    /// Drops armed late landings (the faults are cleared).
    pub fn clear(&self) {
        self.state().late.clear();
    }

    /// Keys of creates that reached the store after their caller gave up.
    pub fn abandoned(&self) -> BTreeSet<String> {
        self.state().abandoned.clone()
    }

    /// Creates answered late, creates landed late and object creates
    /// answered "already exists" so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        let s = self.state();
        (s.slow_answers, s.late_landings, s.exists)
    }

    fn fate(&self, key: &str) -> Fate {
        if !key.contains("/objects/") {
            return Fate::Prompt;
        }
        let mut s = self.state();
        if !s.late.is_empty() {
            let delay = s.late.remove(0);
            s.late_landings += 1;
            let error = StorageError::new(
                StorageErrorKind::Transient,
                "the request timed out (it is still on its way)",
            )
            .with_key(key);
            return Fate::Late(delay, error);
        }
        let Some(draw) = s.draw.as_mut() else {
            return Fate::Prompt;
        };
        if next(draw).is_multiple_of(5) {
            s.slow_answers += 1;
            Fate::SlowAnswer
        } else {
            Fate::Prompt
        }
    }
}

impl Network {
    /// A create as the network delivers it.
    async fn create_through(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        match self.fate(key) {
            Fate::Prompt => self.faulty.create(key, data).await,
            Fate::SlowAnswer => {
                let created = self.faulty.create(key, data).await;
                tokio::time::sleep(SLOW_ANSWER).await;
                created
            }
            Fate::Late(delay, error) => {
                // On its way whatever the caller does: a task of its own,
                // past the fault wrapper (its faults and holds are the
                // sender's; this request is already on the wire).
                let (inner, state, owned) = (
                    self.faulty.inner().clone(),
                    self.state.clone(),
                    key.to_owned(),
                );
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if inner.create(&owned, data).await.is_ok() {
                        state
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .abandoned
                            .insert(owned);
                    }
                });
                Err(error)
            }
        }
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Network {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        let created = self.create_through(key, data).await;
        if key.contains("/objects/") && matches!(created, Ok(Created::AlreadyExists)) {
            self.state().exists += 1;
        }
        created
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.faulty.read(key, range).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.faulty.read_suffix(key, len).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.faulty.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.faulty.delete(key).await
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.faulty.remove_leftovers(prefix).await
    }

    fn charges_per_request(&self) -> bool {
        self.faulty.charges_per_request()
    }
}
