//! A storage wrapper that counts requests, for `objwal bench`'s requests
//! per GiB and objects per second, and can delay creates and reads to model
//! a remote store (`--put-latency`, `--get-latency`).
//!
//! It forwards every call unchanged after its delay, and forwards
//! `charges_per_request` too (a wrapper that answered the trait's default,
//! `true`, would give a local directory a remote store's budget of early
//! seals and so measure the wrong policy). With a delay configured it says
//! `true`, as the remote store it stands in for would.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use objwal::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Request counts, shared by the wrapper and the bench.
#[derive(Debug, Default)]
pub struct Counters {
    creates: AtomicU64,
    reads: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    /// The size of every object created, in order.
    create_sizes: Mutex<Vec<u64>>,
    /// Distinct keys created (a hedged create sends one key twice).
    keys: Mutex<std::collections::HashSet<String>>,
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Conditional creates.
    pub creates: u64,
    /// Every request of any kind.
    pub requests: u64,
    /// Ranged reads (read-backs, recovery).
    pub reads: u64,
    /// Distinct keys created: objects (a hedge creates a key twice).
    pub objects: u64,
    /// Listings.
    pub lists: u64,
    /// Deletes (collection).
    pub deletes: u64,
    /// Sizes recorded so far (an index into the create sizes).
    sizes_at: usize,
}

impl Counters {
    /// The counts now.
    pub fn snapshot(&self) -> Snapshot {
        let creates = self.creates.load(Ordering::Relaxed);
        let reads = self.reads.load(Ordering::Relaxed);
        let lists = self.lists.load(Ordering::Relaxed);
        let deletes = self.deletes.load(Ordering::Relaxed);
        Snapshot {
            creates,
            reads,
            lists,
            deletes,
            objects: self.keys.lock().map_or(0, |k| k.len() as u64),
            requests: creates + reads + lists + deletes,
            sizes_at: self.sizes().len(),
        }
    }

    /// The sizes of the objects created between two snapshots.
    pub fn sizes_between(&self, from: Snapshot, to: Snapshot) -> Vec<u64> {
        self.sizes()
            .get(from.sizes_at..to.sizes_at)
            .map(<[u64]>::to_vec)
            .unwrap_or_default()
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.create_sizes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Snapshot {
    /// The requests and creates since `earlier`.
    pub fn since(self, earlier: Snapshot) -> Snapshot {
        Snapshot {
            creates: self.creates.saturating_sub(earlier.creates),
            reads: self.reads.saturating_sub(earlier.reads),
            objects: self.objects.saturating_sub(earlier.objects),
            lists: self.lists.saturating_sub(earlier.lists),
            deletes: self.deletes.saturating_sub(earlier.deletes),
            requests: self.requests.saturating_sub(earlier.requests),
            sizes_at: self.sizes_at,
        }
    }
}

/// The delays added before each create and each read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Before every conditional create (the median when the tail is
    /// lognormal).
    pub put: Duration,
    /// Before every ranged read.
    pub get: Duration,
    /// How create latencies spread around `put`.
    pub tail: Tail,
}

/// The shape of the creates' latency tail (`--put-tail`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Tail {
    /// Every create waits `put`.
    #[default]
    None,
    /// Every `every`-th create waits `factor` times `put`, the others `put`.
    Every {
        /// Which creates are slow (every this-many-th).
        every: u64,
        /// How much slower they are.
        factor: u32,
    },
    /// Each create waits `put` times `exp(sigma x N(0, 1))`: `put` is the
    /// median, and sigma 1 puts the 99th percentile at 10.2 times it.
    LogNormal {
        /// The standard deviation of the latency's logarithm.
        sigma: f64,
    },
}

impl Tail {
    /// The delay of the `n`-th create (from 1), drawing from `rng` when the
    /// shape is random.
    fn delay(self, put: Duration, n: u64, rng: &Mutex<SmallRng>) -> Duration {
        match self {
            Tail::None => put,
            Tail::Every { every, factor } => {
                if every > 0 && n.is_multiple_of(every) {
                    put * factor
                } else {
                    put
                }
            }
            Tail::LogNormal { sigma } => {
                let z = {
                    let mut rng = rng.lock().unwrap_or_else(|e| e.into_inner());
                    standard_normal(&mut rng)
                };
                // At most a minute, as `--put-latency` is.
                put.mul_f64((sigma * z).exp().min(60.0 / put.as_secs_f64().max(1e-9)))
            }
        }
    }
}

/// One draw of N(0, 1) (Box-Muller).
fn standard_normal(rng: &mut SmallRng) -> f64 {
    use rand::Rng;
    // (0, 1]: the logarithm stays finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The seed of the lognormal draws: every run sees the same sequence.
const TAIL_SEED: u64 = 0x7a11;

impl Latency {
    /// Whether any request is delayed (the wrapper then models a remote store).
    pub fn is_remote(self) -> bool {
        !self.put.is_zero() || !self.get.is_zero()
    }
}

/// Counts every request made through it, after its delay.
#[derive(Debug, Clone)]
pub struct Counting {
    inner: Storage,
    counters: Arc<Counters>,
    latency: Latency,
    /// The lognormal tail's draws, seeded.
    rng: Arc<Mutex<SmallRng>>,
}

impl Counting {
    /// Wraps `inner` with `latency`; returns the wrapper and its counters.
    pub fn new(inner: Storage, latency: Latency) -> (Counting, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        (
            Counting {
                inner,
                counters: counters.clone(),
                latency,
                rng: Arc::new(Mutex::new(SmallRng::seed_from_u64(TAIL_SEED))),
            },
            counters,
        )
    }
}

async fn delay(by: Duration) {
    if !by.is_zero() {
        tokio::time::sleep(by).await;
    }
}

#[async_trait::async_trait]
impl ObjectStorage for Counting {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        let n = self.counters.creates.fetch_add(1, Ordering::Relaxed) + 1;
        if self
            .counters
            .keys
            .lock()
            .is_ok_and(|mut k| k.insert(key.to_owned()))
        {
            self.counters.sizes().push(data.len() as u64);
        }
        delay(self.latency.tail.delay(self.latency.put, n, &self.rng)).await;
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        delay(self.latency.get).await;
        self.inner.read(key, range).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        delay(self.latency.get).await;
        self.inner.read_suffix(key, len).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.counters.deletes.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(key).await
    }

    fn charges_per_request(&self) -> bool {
        self.latency.is_remote() || self.inner.charges_per_request()
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Storage {
        Storage::new(objwal::storage::MemoryStorage::new())
    }

    /// The wrapper once answered the trait's default (`true`), so a bench on
    /// a local directory ran with a remote store's budget of early seals.
    #[test]
    fn a_wrapped_local_store_keeps_the_local_budget() {
        let (plain, _) = Counting::new(memory(), Latency::default());
        assert!(!plain.charges_per_request());
        for latency in [
            Latency {
                put: Duration::from_millis(30),
                ..Latency::default()
            },
            Latency {
                get: Duration::from_millis(30),
                ..Latency::default()
            },
        ] {
            let (slow, _) = Counting::new(memory(), latency);
            assert!(
                slow.charges_per_request(),
                "{latency:?} models a remote store"
            );
        }
    }

    #[test]
    fn the_tail_shapes_delay_as_they_say() {
        let put = Duration::from_millis(30);
        let rng = Mutex::new(SmallRng::seed_from_u64(TAIL_SEED));
        let every = Tail::Every {
            every: 100,
            factor: 10,
        };
        let delays: Vec<Duration> = (1..=200).map(|n| every.delay(put, n, &rng)).collect();
        assert_eq!(delays.iter().filter(|&&d| d == put * 10).count(), 2);
        assert_eq!(delays[99], put * 10, "the 100th");
        let lognormal = Tail::LogNormal { sigma: 1.0 };
        let mut delays: Vec<Duration> = (1..=10_000)
            .map(|n| lognormal.delay(put, n, &rng))
            .collect();
        delays.sort_unstable();
        // exp(N(0, 1)): the median 1x, the 99th percentile e^2.326 = 10.2x.
        let ratio = |q: usize| delays[q].as_secs_f64() / put.as_secs_f64();
        assert!((0.9..1.1).contains(&ratio(5_000)), "p50 {}", ratio(5_000));
        assert!((8.5..12.5).contains(&ratio(9_900)), "p99 {}", ratio(9_900));
    }

    #[tokio::test(start_paused = true)]
    async fn creates_and_reads_wait_their_latency_and_are_counted() {
        let latency = Latency {
            put: Duration::from_millis(30),
            get: Duration::from_millis(7),
            ..Latency::default()
        };
        let (slow, counters) = Counting::new(memory(), latency);
        let started = tokio::time::Instant::now();
        slow.create("k", Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_millis(30));
        let read = tokio::time::Instant::now();
        assert_eq!(slow.read("k", 0..3).await.unwrap(), &b"abc"[..]);
        assert_eq!(read.elapsed(), Duration::from_millis(7));
        let at = tokio::time::Instant::now();
        slow.list("").await.unwrap();
        slow.delete("k").await.unwrap();
        assert_eq!(
            at.elapsed(),
            Duration::ZERO,
            "lists and deletes are not delayed"
        );
        let counts = counters.snapshot();
        assert_eq!((counts.creates, counts.reads, counts.requests), (1, 1, 4));
        assert_eq!(counts.objects, 1);
    }
}
