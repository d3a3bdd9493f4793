//! Sealing and creating: the policy's decision, a batch becoming an object,
//! and its conditional create started. What the create's outcome does is
//! in `outcome.rs`; acknowledgement (indexing in run order) in `ack.rs`.

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::Error;
use crate::format::{self, Header, Link, Object, TailDecode};
use crate::{EntryId, RegionId};

use super::super::policy::{Decision, OpenState, SealReason};
use super::pipeline::{CreateDone, FlightState, Sealed};
use super::Actor;
use crate::wal::protocol::create::{create_object, CreateOutcome};

impl Actor {
    /// Asks the policy about the open batch and seals when it says so, or
    /// gathers the commands queued in `rx` first (group commit); whether it
    /// did either (then it is asked again).
    pub(super) fn apply_policy(&mut self, rx: &flume::Receiver<super::Command>) -> bool {
        self.seal_at = None;
        let Some(open) = self.open.as_ref().filter(|o| !o.batch.is_empty()) else {
            return false;
        };
        let state = OpenState {
            encoded_bytes: open.batch.encoded_bytes(),
            opened_at: open.batch.opened_at,
            gathered: open.gathered,
        };
        let can_start = self.backlog.failing.is_none()
            && self.pipeline.could_start(self.config.max_inflight_creates);
        match self
            .policy
            .decide(Instant::now(), Some(state), can_start, rx.len())
        {
            Decision::Seal(reason) => {
                self.seal(reason);
                true
            }
            Decision::Gather(n) => {
                self.gather(rx, n);
                true
            }
            Decision::WaitUntil(at) => {
                self.seal_at = Some(at);
                false
            }
            Decision::Idle => false,
        }
    }

    /// Group commit: handles up to `n` commands already queued before the
    /// open batch is sealed early, so that appends that arrived while the
    /// actor was busy share its object (rfcs/0008, "Group commit"). Only
    /// what is queued now: nothing here waits.
    fn gather(&mut self, rx: &flume::Receiver<super::Command>, n: usize) {
        if let Some(open) = self.open.as_mut() {
            open.gathered = true;
        }
        for _ in 0..n {
            // A batch that grew large enough to be its own create stops
            // gathering: the rest goes into the next object, beside it.
            let large = self.open.as_ref().is_some_and(|o| {
                o.batch.encoded_bytes() >= super::super::policy::GATHER_BELOW_BYTES
            });
            if large {
                return;
            }
            match rx.try_recv() {
                Ok(command) => self.handle(command),
                Err(_) => return,
            }
        }
    }

    /// Seals the open batch (if it holds anything) into the pipeline, with
    /// the flush marks handed in since the last seal.
    pub(super) fn seal(&mut self, reason: SealReason) {
        // Kept release records ride with any batch sealed while the store
        // is not failing.
        if self.backlog.failing.is_none() && !self.kept.records.is_empty() {
            if let Some(open) = self.open.as_mut() {
                open.batch
                    .add_releases(std::mem::take(&mut self.kept.records));
                self.kept.deadline = None;
            }
        }
        if !self.marks.is_empty() {
            if let Some(open) = self.open.as_mut() {
                open.batch.add_marks(std::mem::take(&mut self.marks));
            }
        }
        let collect = reason == SealReason::Collect;
        let Some(open) = self.open.take_if(|o| collect || !o.batch.is_empty()) else {
            return;
        };
        let mut batch = open.batch;
        let sequence = batch.sequence;
        batch.acknowledged_through = self.run_tip.map(|l| l.sequence);
        let span = tracing::debug_span!("seal", sequence, reason = reason.as_str());
        let _guard = span.enter();
        // The run's previous key: the last sealed batch, else the last key
        // acknowledged (its object, or a filler that settled it).
        let link = match self.pipeline.back() {
            Some(previous) => Some(Link {
                sequence: previous.sequence,
                epoch: self.epoch,
            }),
            None => self.run_tip,
        };
        let reclaim_boundary = self.reclaim_boundary(sequence, &batch.releases);
        let entries = batch.entries;
        let payload_bytes = batch.payload_bytes;
        let opened_at = batch.opened_at;
        let last_ids = batch.last_ids();
        let releases = batch.releases.clone();
        let marks = batch.mark_records();
        let jump = batch.jump.is_some();
        let object = batch.into_object(Header {
            sequence,
            epoch: self.epoch,
            link,
            reclaim_boundary,
        });
        #[cfg(test)]
        let object = test_hooks::maybe_break(self.prefix.as_str(), object);
        #[cfg(test)]
        test_hooks::maybe_panic(self.prefix.as_str(), sequence);
        let (bytes, tail) = match encode(&object) {
            Ok(encoded) => encoded,
            Err(e) => {
                let reason = format!("encoding object {sequence} failed: {e}");
                let error = Error::Poisoned {
                    reason: reason.clone().into(),
                };
                for waiter in open.waiters {
                    waiter.fail(error.clone());
                }
                self.lose(entries, payload_bytes, releases.len() as u64, &reason);
                self.poison(error);
                return;
            }
        };
        self.boundary = reclaim_boundary;
        if sequence == format::MAX_SEQUENCE {
            self.exhausted = true;
        }
        tracing::debug!(
            bytes = bytes.len(),
            entries,
            marks = marks.len(),
            releases = releases.len(),
            "sealed"
        );
        self.pipeline.push(Sealed {
            sequence,
            bytes,
            tail,
            void: None,
            landed_void: false,
            filler: false,
            answered: false,
            waiters: open.waiters,
            opened_at,
            sealed_at: Instant::now(),
            entries,
            payload_bytes,
            last_ids,
            marks,
            releases,
            jump,
            state: FlightState::Waiting,
        });
        self.start_creates();
    }

    /// The boundary an object sealed now at `sequence` (carrying the release
    /// records `own`) carries: the lowest sequence that may still hold a live
    /// entry, indexed or in the pipeline, never below a boundary already
    /// carried. A release counts only once its record is in this object or
    /// in an indexed one: a batch below that has not landed yet may never
    /// land with its records (a filler can settle its key, rfcs/0006), so
    /// its records do not count (a release refused while failing does not
    /// free anything either, issue 10 item 8). A flush mark counts once
    /// handed in: the engine flushed what it covers, so an object it frees
    /// is not needed even if the mark's own object never lands. And it
    /// never passes an indexed object carrying a release record whose
    /// permanent marker is not durable yet (`markers.rs`, M2): collection
    /// would forget the release.
    pub(super) fn reclaim_boundary(
        &self,
        sequence: u64,
        own: &std::collections::BTreeMap<RegionId, EntryId>,
    ) -> u64 {
        // The catalog's live index knows the engine's watermarks and the
        // indexed records; the object's own records only raise a few
        // regions' (rfcs/0005, "The reclaim boundary at scale").
        let live = self.catalog.first_live(own);
        let pending = self.pipeline.front().map(|s| s.sequence);
        // An indexed release record stays until its marker is durable (M2).
        let unmarked = self.markers.first_carrier();
        [live, pending, Some(sequence), unmarked]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(sequence)
            .max(self.boundary)
    }

    /// Starts creates for waiting batches while slots are free and the
    /// window allows, in sequence order (not before the retry time of a
    /// failing store).
    pub(super) fn start_creates(&mut self) {
        if self.poisoned.is_some() {
            return;
        }
        if self
            .backlog
            .failing
            .as_ref()
            .is_some_and(|f| Instant::now() < f.retry_at)
        {
            return;
        }
        while let Some(sealed) = self
            .pipeline
            .next_startable(self.config.max_inflight_creates)
        {
            let sequence = sealed.sequence;
            let ours = sealed.ours();
            let hedge = self.hedger.starting();
            let task = self.create_task(sequence, ours, hedge);
            self.pipeline.start(sequence, task);
        }
    }

    fn create_task(
        &self,
        sequence: u64,
        ours: Vec<bytes::Bytes>,
        hedge: Option<(std::time::Duration, std::sync::Arc<super::hedge::Budget>)>,
    ) -> impl std::future::Future<Output = CreateDone> + Send + 'static {
        let storage = self.storage.clone();
        let key = self.prefix.object_key(sequence);
        let hedged = self.metrics.hedged_creates.clone();
        let span = tracing::debug_span!("create", key = %key, bytes = ours.first().map_or(0, |b| b.len()), void = ours.len() > 1);
        async move {
            let started = Instant::now();
            let first = create_object(&storage, &key, &ours);
            tokio::pin!(first);
            let Some((after, budget)) = hedge else {
                let outcome = first.await;
                let took = matches!(outcome, CreateOutcome::Landed(_)).then(|| started.elapsed());
                return CreateDone { sequence, outcome, took };
            };
            // Biased here and below: a tie goes to the first request, so
            // the same history makes the same requests (the model test's
            // seeds replay); an unbiased select picks at random.
            tokio::select! {
                biased;
                outcome = &mut first => {
                    let took = matches!(outcome, CreateOutcome::Landed(_)).then(|| started.elapsed());
                    return CreateDone { sequence, outcome, took };
                }
                () = tokio::time::sleep(after) => {}
            }
            if !budget.try_take() {
                let outcome = first.await;
                let took = matches!(outcome, CreateOutcome::Landed(_)).then(|| started.elapsed());
                return CreateDone { sequence, outcome, took };
            }
            // The same bytes to the same key (rfcs/0006, "Hedged creates"):
            // the first definitive answer wins; a failure waits for the
            // other request.
            hedged.increment(1);
            tracing::debug!(?after, "hedging a slow create");
            let second = create_object(&storage, &key, &ours);
            tokio::pin!(second);
            let outcome = tokio::select! {
                biased;
                outcome = &mut first => match outcome {
                    CreateOutcome::Failed(_) => second.await,
                    other => other,
                },
                outcome = &mut second => match outcome {
                    CreateOutcome::Failed(_) => first.await,
                    other => other,
                },
            };
            CreateDone { sequence, outcome, took: None }
        }
        .instrument(span)
    }
}

/// Encodes an object and decodes its tail (what the catalog indexes).
pub(super) fn encode(object: &Object) -> Result<(bytes::Bytes, format::Tail), format::FormatError> {
    let bytes = format::encode(object)?;
    match format::decode_tail(&bytes, bytes.len() as u64)? {
        TailDecode::Complete(tail) => Ok((bytes, tail)),
        TailDecode::NeedFooter { .. } => Err(format::FormatError::invalid(
            "tail",
            0,
            "the tail of a whole object must decode from the object",
        )),
    }
}

/// Test hooks: make the encoding of a chosen object fail, to drive the
/// paths valid objects never take.
#[cfg(test)]
pub(crate) mod test_hooks {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use crate::format::Object;

    static BREAK: Mutex<Option<HashSet<(String, u64)>>> = Mutex::new(None);

    /// The object of `sequence` under `prefix` fails to encode.
    pub(crate) fn fail_encode(prefix: &str, sequence: u64) {
        let mut set = BREAK.lock().unwrap_or_else(|e| e.into_inner());
        set.get_or_insert_with(HashSet::new)
            .insert((prefix.to_owned(), sequence));
    }

    static PANIC: Mutex<Option<HashSet<(String, u64)>>> = Mutex::new(None);

    /// Sealing the object of `sequence` under `prefix` panics the actor (a
    /// bug, as a test stages one).
    pub(crate) fn panic_at_seal(prefix: &str, sequence: u64) {
        let mut set = PANIC.lock().unwrap_or_else(|e| e.into_inner());
        set.get_or_insert_with(HashSet::new)
            .insert((prefix.to_owned(), sequence));
    }

    pub(super) fn maybe_panic(prefix: &str, sequence: u64) {
        let set = PANIC.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = set
            .as_ref()
            .is_some_and(|s| s.contains(&(prefix.to_owned(), sequence)));
        drop(set);
        assert!(!wanted, "a staged bug: sealing {sequence} panics");
    }

    /// `object`, broken (an entry of another sequence) when a test asked.
    pub(super) fn maybe_break(prefix: &str, mut object: Object) -> Object {
        let set = BREAK.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = set
            .as_ref()
            .is_some_and(|s| s.contains(&(prefix.to_owned(), object.header.sequence)));
        if wanted {
            if let Some(segment) = object.segments.first_mut() {
                if let Some(entry) = segment.entries.first_mut() {
                    entry.0 = crate::format::entry_id(object.header.sequence + 1, 1);
                }
            }
        }
        object
    }
}
