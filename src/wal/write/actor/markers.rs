//! The release markers of this life (rfcs/0005, "A release is forever";
//! `protocol::released`): once an object carrying release records is
//! indexed, each record's marker is created, and the callers of those
//! releases are answered only once their markers are durable.
//!
//! Invariants:
//! - an indexed record waits here, under the sequence of the object that
//!   carries it (its *carrier*), until its marker is durable; the reclaim
//!   boundary never passes the lowest carrier waiting
//!   ([`Markers::first_carrier`], M2), so the record stays readable until
//!   its marker exists, in this life and, after a crash, until the next
//!   open makes the marker (M3);
//! - a marker is created only after its record was indexed (M1), never
//!   before: a writer fenced before its record was acknowledged leaves no
//!   marker behind;
//! - a release caller is answered once its record is indexed and every
//!   marker of its carrier is durable, or with the marker's error (the
//!   record stays durable and its marker is repeated on a later tick);
//! - `marked` only grows, and holds every release of the catalog the
//!   actor started from (the open made them permanent).
//!
//! Cost: one create per release over the log's life (a repeated release
//! of a marked region creates nothing), never on the append path.

use std::collections::BTreeMap;

use futures::stream::FuturesUnordered;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use crate::catalog::region_map::RegionMap;
use crate::error::Error;
use crate::storage::StorageError;
use crate::wal::protocol::released;
use crate::{EntryId, RegionId};

use super::{Actor, Waiter};

/// The records of one carrier whose markers are not durable yet, and the
/// callers waiting for them.
struct Job {
    records: Vec<(RegionId, EntryId)>,
    waiters: Vec<Waiter>,
    running: bool,
}

/// What a marker task did.
#[derive(Debug)]
pub(super) struct Done {
    carrier: u64,
    result: Result<(), StorageError>,
}

/// The markers room.
pub(super) struct Markers {
    /// Per region, the highest release known to have its marker.
    marked: RegionMap<EntryId>,
    /// Indexed records without a durable marker, by carrier.
    waiting: BTreeMap<u64, Job>,
    /// Marker tasks in flight (one per carrier).
    pub(super) running: FuturesUnordered<JoinHandle<Done>>,
    /// When failed markers are tried again.
    pub(super) retry_at: Option<Instant>,
}

impl Markers {
    /// The room of a store whose open made every release in `marked`
    /// permanent.
    pub(super) fn new(marked: impl IntoIterator<Item = (RegionId, EntryId)>) -> Self {
        Markers {
            marked: marked.into_iter().collect(),
            waiting: BTreeMap::new(),
            running: FuturesUnordered::new(),
            retry_at: None,
        }
    }

    /// The lowest sequence of an indexed object carrying a record whose
    /// marker is not durable: no reclaim boundary may pass it (M2).
    pub(super) fn first_carrier(&self) -> Option<u64> {
        self.waiting.keys().next().copied()
    }

    /// Whether no marker task runs.
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty()
    }

    /// Whether the marker of `region` through `through` (or a higher one)
    /// is known durable.
    fn is_marked(&self, region: RegionId, through: EntryId) -> bool {
        self.marked.get(&region).is_some_and(|&m| m >= through)
    }
}

impl Actor {
    /// The object of `carrier`, carrying the release records `records`, was
    /// indexed: its callers `waiters` are answered once every record has
    /// its marker (at once when all have one already).
    pub(super) fn await_markers(
        &mut self,
        carrier: u64,
        records: &BTreeMap<RegionId, EntryId>,
        waiters: Vec<Waiter>,
    ) {
        let records: Vec<(RegionId, EntryId)> = records
            .iter()
            .map(|(&region, &through)| (region, through))
            .filter(|&(region, through)| !self.markers.is_marked(region, through))
            .collect();
        if records.is_empty() {
            for waiter in waiters {
                waiter.succeed(&self.metrics);
            }
            return;
        }
        self.markers.waiting.insert(
            carrier,
            Job {
                records,
                waiters,
                running: false,
            },
        );
        self.start_markers();
    }

    /// Starts a task for every carrier whose markers are not being made.
    pub(super) fn start_markers(&mut self) {
        self.markers.retry_at = None;
        let retry = self.retry;
        for (&carrier, job) in self.markers.waiting.iter_mut().filter(|(_, j)| !j.running) {
            job.running = true;
            let (storage, prefix) = (self.storage.clone(), self.prefix.clone());
            let records = job.records.clone();
            self.markers.running.push(tokio::spawn(async move {
                for (region, through) in records {
                    if let Err(e) =
                        released::create(&storage, &prefix, region, through, &retry).await
                    {
                        return Done {
                            carrier,
                            result: Err(e),
                        };
                    }
                }
                Done {
                    carrier,
                    result: Ok(()),
                }
            }));
        }
    }

    /// A marker task ended: its callers are answered; a failure is tried
    /// again one `flush_interval` later (not after a stop began).
    pub(super) fn on_marker_done(&mut self, done: Result<Done, JoinError>) {
        let done = match done {
            Ok(done) => done,
            Err(e) => {
                // A task that panicked or was aborted: its job is tried
                // again like a failure.
                tracing::warn!(error = %e, "a release marker task ended early");
                for job in self.markers.waiting.values_mut() {
                    job.running = false;
                }
                self.retry_markers_later();
                return;
            }
        };
        let Some(job) = self.markers.waiting.get_mut(&done.carrier) else {
            return;
        };
        match done.result {
            Ok(()) => {
                if let Some(job) = self.markers.waiting.remove(&done.carrier) {
                    for (region, through) in job.records {
                        let slot = self.markers.marked.entry(region).or_insert(through);
                        *slot = (*slot).max(through);
                    }
                    for waiter in job.waiters {
                        waiter.succeed(&self.metrics);
                    }
                }
                // The boundary may move past the carrier now.
                self.arm_collect();
            }
            Err(error) => {
                job.running = false;
                let regions: Vec<String> = job.records.iter().map(|(r, _)| r.to_string()).collect();
                let regions = regions.join(", ");
                tracing::warn!(%error, carrier = done.carrier, %regions,
                    "a release marker could not be created; its record stays durable and it is tried again");
                let error = Error::Storage {
                    source: StorageError::new(
                        error.kind(),
                        format!(
                            "{} (the release record of region {regions} is durable, but its \
                             permanent marker could not be created: it is tried again, and the \
                             next open makes it; repeating the release is harmless)",
                            error.message()
                        ),
                    )
                    .with_key(error.key().unwrap_or_default()),
                };
                for waiter in job.waiters.drain(..) {
                    waiter.fail(error.clone());
                }
                self.retry_markers_later();
            }
        }
    }

    fn retry_markers_later(&mut self) {
        if self.stopping.is_none() && self.markers.retry_at.is_none() {
            self.markers.retry_at = Some(Instant::now() + self.config.flush_interval);
        }
    }

    /// A stop began: markers still waiting get one more try, and the stop
    /// waits for them (each task is bounded by `stop_attempts` tries).
    pub(super) fn markers_at_stop(&mut self) {
        self.start_markers();
    }

    /// At the end of a stop: markers that could not be made are not a
    /// loss (their records are durable and no boundary passed them), but
    /// the next open must make them.
    pub(super) fn warn_unmarked_at_stop(&self) {
        for (carrier, job) in &self.markers.waiting {
            tracing::warn!(prefix = %self.prefix, carrier, records = job.records.len(),
                "stopped with release markers not made; their records are durable and the next \
                 open makes them");
        }
    }

    /// Every handle is gone: no marker is made by this life any more.
    pub(super) fn abort_markers(&mut self) {
        for task in self.markers.running.iter() {
            task.abort();
        }
    }
}
