//! Every metric objwal emits, named once, through the `metrics` facade.
//!
//! Names are prefixed `objwal_`; every metric carries the label `prefix`
//! (the WAL prefix of the store that emits it), so several stores in one
//! process stay apart. Install any `metrics` recorder (Prometheus, StatsD,
//! ...) to collect them; without one they cost almost nothing.
//!
//! Invariant: every name is a constant here and [`describe`] gives each its
//! unit and help text. The first store a process opens calls [`describe`]
//! (once per process), so a recorder installed before that learns every
//! description without the application doing anything; one installed later
//! can be told by calling [`describe`] again.

/// Objects created and made durable.
pub const CREATED_OBJECTS_TOTAL: &str = "objwal_created_objects_total";
/// Creates that met an existing object of different bytes.
pub const CREATE_CONFLICTS_TOTAL: &str = "objwal_create_conflicts_total";
/// Creates that failed (the batch failed, or is repeated in enqueued mode).
pub const CREATE_FAILURES_TOTAL: &str = "objwal_create_failures_total";
/// Times the store was poisoned.
pub const POISONED_TOTAL: &str = "objwal_poisoned_total";
/// Appends and releases refused at once because the store is failing.
pub const REJECTED_APPENDS_TOTAL: &str = "objwal_rejected_appends_total";
/// Appends that waited for the backlog to shrink.
pub const STALLED_APPENDS_TOTAL: &str = "objwal_stalled_appends_total";
/// Corrupted segments skipped by reads.
pub const SKIPPED_SEGMENTS_TOTAL: &str = "objwal_skipped_segments_total";
/// Release records made durable in indexed objects.
pub const RELEASE_RECORDS_TOTAL: &str = "objwal_release_records_total";
/// Objects deleted by garbage collection.
pub const DELETED_OBJECTS_TOTAL: &str = "objwal_deleted_objects_total";
/// Deletes that failed (retried later).
pub const FAILED_DELETES_TOTAL: &str = "objwal_failed_deletes_total";
/// Objects in the catalog.
pub const INDEXED_OBJECTS: &str = "objwal_indexed_objects";
/// Bytes of the objects in the catalog.
pub const INDEXED_BYTES: &str = "objwal_indexed_bytes";
/// Indexed objects live regions keep from collection: from the oldest
/// object holding a live entry through the newest.
pub const PINNED_OBJECTS: &str = "objwal_pinned_objects";
/// Payload bytes admitted but not yet durable.
pub const UNPERSISTED_BYTES: &str = "objwal_unpersisted_bytes";
/// From sealing a batch to its object being durable and indexed.
pub const SEAL_TO_DURABLE_SECONDS: &str = "objwal_seal_to_durable_seconds";
/// From an append's arrival to its acknowledgement.
pub const APPEND_ACK_SECONDS: &str = "objwal_append_ack_seconds";
/// Size of each created object.
pub const OBJECT_BYTES: &str = "objwal_object_bytes";
/// Entries in each created object.
pub const OBJECT_ENTRIES: &str = "objwal_object_entries";
/// Duration of recovery at open.
pub const RECOVERY_SECONDS: &str = "objwal_recovery_seconds";
/// Duration of each segment fetch of a read.
pub const READ_SECONDS: &str = "objwal_read_seconds";
/// Time an append waited for the backlog to shrink.
pub const STALL_SECONDS: &str = "objwal_stall_seconds";
/// Damaged objects recovery left out of replay at open (in place under
/// `on_damaged_object = "quarantine"`, or moved aside by `objwal repair`).
pub const QUARANTINED_OBJECTS: &str = "objwal_quarantined_objects";
/// Objects above the tip, holding entries or release records, that recovery
/// did not replay at open (their chain is broken by a missing object).
pub const UNREPLAYED_OBJECTS: &str = "objwal_unreplayed_objects";
/// Creates sent a second time, with the same bytes, because the first had
/// not answered after a high percentile of recent creates (`hedge_creates`).
pub const HEDGED_CREATES_TOTAL: &str = "objwal_hedged_creates_total";
/// Live reader holds the writer's latest collection pass saw
/// (`Wal::holds`).
pub const HOLDS: &str = "objwal_holds";
/// Objects the writer's latest collection pass kept only for live reader
/// holds (it would have deleted them otherwise).
pub const HELD_OBJECTS: &str = "objwal_held_objects";

/// Suffix reads a follower made to ask for the next key of the log (one GET
/// each, whether an object was there or not), or for the fence of the next
/// opener while no poll of the next key can tell where the log goes on.
pub const FOLLOW_POLLS_TOTAL: &str = "objwal_follow_polls_total";
/// Ranged reads a follower made besides its polls (segments, footers, the
/// tails of listed objects, and the looks at its place that stand in for
/// every other poll once the log has been quiet for two caps).
pub const FOLLOW_READS_TOTAL: &str = "objwal_follow_reads_total";
/// Listings a follower made (a writer's restart or fencing, an idle check,
/// a prefix without a log yet).
pub const FOLLOW_LISTS_TOTAL: &str = "objwal_follow_lists_total";
/// Objects of the chain a follower took in.
pub const FOLLOW_OBJECTS_TOTAL: &str = "objwal_follow_objects_total";
/// Objects of the chain a follower found deleted (collected) before it read
/// what it needed of them: holes of the regions it follows.
pub const FOLLOW_MISSED_OBJECTS_TOTAL: &str = "objwal_follow_missed_objects_total";
/// Objects of the chain a follower saw landed and has not yielded yet
/// (`Follower::lag`).
pub const FOLLOW_LAG_OBJECTS: &str = "objwal_follow_lag_objects";
/// How long ago the oldest object a follower saw landed and has not yielded
/// was first seen, in seconds (`Follower::lag`).
pub const FOLLOW_LAG_SECONDS: &str = "objwal_follow_lag_seconds";
/// Generations of a hold a follower placed to move and refresh it
/// (`Follower::keep_hold`).
pub const FOLLOW_HOLD_REFRESHES_TOTAL: &str = "objwal_follow_hold_refreshes_total";
/// Refreshes of a follower's hold that failed (repeated sooner; a hold not
/// refreshed within its ttl stops pinning).
pub const FOLLOW_HOLD_FAILURES_TOTAL: &str = "objwal_follow_hold_failures_total";

/// Describes every metric to the installed recorder (units and help).
///
/// Opening the first store of the process calls this; call it again only
/// after installing a recorder later than that.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(CREATED_OBJECTS_TOTAL, "objects created and made durable");
    describe_counter!(
        CREATE_CONFLICTS_TOTAL,
        "creates that met another object at their key"
    );
    describe_counter!(CREATE_FAILURES_TOTAL, "creates that failed");
    describe_counter!(POISONED_TOTAL, "times the store was poisoned");
    describe_counter!(
        REJECTED_APPENDS_TOTAL,
        "appends and releases refused while failing"
    );
    describe_counter!(STALLED_APPENDS_TOTAL, "appends that waited for the backlog");
    describe_counter!(
        SKIPPED_SEGMENTS_TOTAL,
        "corrupted segments skipped by reads"
    );
    describe_counter!(RELEASE_RECORDS_TOTAL, "release records made durable");
    describe_counter!(DELETED_OBJECTS_TOTAL, "objects deleted by collection");
    describe_counter!(FAILED_DELETES_TOTAL, "deletes that failed");
    describe_gauge!(INDEXED_OBJECTS, "objects in the catalog");
    describe_gauge!(
        INDEXED_BYTES,
        Unit::Bytes,
        "bytes of the objects in the catalog"
    );
    describe_gauge!(
        PINNED_OBJECTS,
        "indexed objects live regions keep from collection"
    );
    describe_gauge!(
        UNPERSISTED_BYTES,
        Unit::Bytes,
        "admitted payload bytes not yet durable"
    );
    describe_histogram!(
        SEAL_TO_DURABLE_SECONDS,
        Unit::Seconds,
        "seal to durable and indexed"
    );
    describe_histogram!(
        APPEND_ACK_SECONDS,
        Unit::Seconds,
        "append arrival to acknowledgement"
    );
    describe_histogram!(OBJECT_BYTES, Unit::Bytes, "size of each created object");
    describe_histogram!(OBJECT_ENTRIES, "entries in each created object");
    describe_histogram!(RECOVERY_SECONDS, Unit::Seconds, "duration of recovery");
    describe_histogram!(READ_SECONDS, Unit::Seconds, "duration of a segment fetch");
    describe_histogram!(
        STALL_SECONDS,
        Unit::Seconds,
        "time an append waited for the backlog"
    );
    describe_gauge!(
        QUARANTINED_OBJECTS,
        "damaged objects recovery left out of replay at open"
    );
    describe_gauge!(
        UNREPLAYED_OBJECTS,
        "objects above the tip whose entries recovery did not replay"
    );
    describe_counter!(
        HEDGED_CREATES_TOTAL,
        "creates sent a second time because the first was slow"
    );
    describe_gauge!(HOLDS, "live reader holds the latest collection pass saw");
    describe_gauge!(
        HELD_OBJECTS,
        "objects the latest collection pass kept only for reader holds"
    );
    describe_counter!(
        FOLLOW_HOLD_REFRESHES_TOTAL,
        "hold generations followers placed to move and refresh their holds"
    );
    describe_counter!(
        FOLLOW_HOLD_FAILURES_TOTAL,
        "refreshes of followers' holds that failed"
    );
    describe_counter!(
        FOLLOW_POLLS_TOTAL,
        "reads of the next key (or the next opener's fence) by followers, one GET each"
    );
    describe_counter!(
        FOLLOW_READS_TOTAL,
        "ranged reads by followers besides their polls (the looks at the place among them)"
    );
    describe_counter!(FOLLOW_LISTS_TOTAL, "listings by followers");
    describe_counter!(FOLLOW_OBJECTS_TOTAL, "chain objects followers took in");
    describe_counter!(
        FOLLOW_MISSED_OBJECTS_TOTAL,
        "chain objects collected before a follower read them"
    );
    describe_gauge!(
        FOLLOW_LAG_OBJECTS,
        "chain objects a follower saw landed and has not yielded"
    );
    describe_gauge!(
        FOLLOW_LAG_SECONDS,
        Unit::Seconds,
        "age of the oldest object a follower saw landed and has not yielded"
    );
}

/// Calls [`describe`] the first time in this process.
fn describe_once() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(describe);
}

/// The metric handles of one store, labelled with its prefix so that several
/// stores in one process (and parallel tests) stay apart.
#[derive(Clone)]
pub(crate) struct StoreMetrics {
    pub(crate) created_objects: metrics::Counter,
    pub(crate) create_conflicts: metrics::Counter,
    pub(crate) create_failures: metrics::Counter,
    pub(crate) poisoned: metrics::Counter,
    pub(crate) rejected_appends: metrics::Counter,
    pub(crate) stalled_appends: metrics::Counter,
    pub(crate) skipped_segments: metrics::Counter,
    pub(crate) release_records: metrics::Counter,
    pub(crate) deleted_objects: metrics::Counter,
    pub(crate) failed_deletes: metrics::Counter,
    pub(crate) indexed_objects: metrics::Gauge,
    pub(crate) indexed_bytes: metrics::Gauge,
    pub(crate) pinned_objects: metrics::Gauge,
    pub(crate) unpersisted_bytes: metrics::Gauge,
    pub(crate) seal_to_durable: metrics::Histogram,
    pub(crate) append_ack: metrics::Histogram,
    pub(crate) object_bytes: metrics::Histogram,
    pub(crate) object_entries: metrics::Histogram,
    pub(crate) recovery: metrics::Histogram,
    pub(crate) read: metrics::Histogram,
    pub(crate) stall: metrics::Histogram,
    pub(crate) quarantined_objects: metrics::Gauge,
    pub(crate) unreplayed_objects: metrics::Gauge,
    pub(crate) hedged_creates: metrics::Counter,
    pub(crate) holds: metrics::Gauge,
    pub(crate) held_objects: metrics::Gauge,
}

impl StoreMetrics {
    /// The handles of the store under `prefix` (describing every metric
    /// first, once per process).
    pub(crate) fn new(prefix: &str) -> Self {
        describe_once();
        let p = prefix.to_owned();
        StoreMetrics {
            created_objects: metrics::counter!(CREATED_OBJECTS_TOTAL, "prefix" => p.clone()),
            create_conflicts: metrics::counter!(CREATE_CONFLICTS_TOTAL, "prefix" => p.clone()),
            create_failures: metrics::counter!(CREATE_FAILURES_TOTAL, "prefix" => p.clone()),
            poisoned: metrics::counter!(POISONED_TOTAL, "prefix" => p.clone()),
            rejected_appends: metrics::counter!(REJECTED_APPENDS_TOTAL, "prefix" => p.clone()),
            stalled_appends: metrics::counter!(STALLED_APPENDS_TOTAL, "prefix" => p.clone()),
            skipped_segments: metrics::counter!(SKIPPED_SEGMENTS_TOTAL, "prefix" => p.clone()),
            release_records: metrics::counter!(RELEASE_RECORDS_TOTAL, "prefix" => p.clone()),
            deleted_objects: metrics::counter!(DELETED_OBJECTS_TOTAL, "prefix" => p.clone()),
            failed_deletes: metrics::counter!(FAILED_DELETES_TOTAL, "prefix" => p.clone()),
            indexed_objects: metrics::gauge!(INDEXED_OBJECTS, "prefix" => p.clone()),
            indexed_bytes: metrics::gauge!(INDEXED_BYTES, "prefix" => p.clone()),
            pinned_objects: metrics::gauge!(PINNED_OBJECTS, "prefix" => p.clone()),
            unpersisted_bytes: metrics::gauge!(UNPERSISTED_BYTES, "prefix" => p.clone()),
            seal_to_durable: metrics::histogram!(SEAL_TO_DURABLE_SECONDS, "prefix" => p.clone()),
            append_ack: metrics::histogram!(APPEND_ACK_SECONDS, "prefix" => p.clone()),
            object_bytes: metrics::histogram!(OBJECT_BYTES, "prefix" => p.clone()),
            object_entries: metrics::histogram!(OBJECT_ENTRIES, "prefix" => p.clone()),
            recovery: metrics::histogram!(RECOVERY_SECONDS, "prefix" => p.clone()),
            read: metrics::histogram!(READ_SECONDS, "prefix" => p.clone()),
            stall: metrics::histogram!(STALL_SECONDS, "prefix" => p.clone()),
            quarantined_objects: metrics::gauge!(QUARANTINED_OBJECTS, "prefix" => p.clone()),
            unreplayed_objects: metrics::gauge!(UNREPLAYED_OBJECTS, "prefix" => p.clone()),
            hedged_creates: metrics::counter!(HEDGED_CREATES_TOTAL, "prefix" => p.clone()),
            holds: metrics::gauge!(HOLDS, "prefix" => p.clone()),
            held_objects: metrics::gauge!(HELD_OBJECTS, "prefix" => p),
        }
    }
}

/// The metric handles of the followers of one prefix.
#[derive(Clone)]
pub(crate) struct FollowMetrics {
    pub(crate) polls: metrics::Counter,
    pub(crate) reads: metrics::Counter,
    pub(crate) lists: metrics::Counter,
    pub(crate) objects: metrics::Counter,
    pub(crate) missed_objects: metrics::Counter,
    pub(crate) lag_objects: metrics::Gauge,
    pub(crate) lag_seconds: metrics::Gauge,
    pub(crate) hold_refreshes: metrics::Counter,
    pub(crate) hold_failures: metrics::Counter,
}

impl FollowMetrics {
    /// The handles of the followers of `prefix` (describing every metric
    /// first, once per process).
    pub(crate) fn new(prefix: &str) -> Self {
        describe_once();
        let p = prefix.to_owned();
        FollowMetrics {
            polls: metrics::counter!(FOLLOW_POLLS_TOTAL, "prefix" => p.clone()),
            reads: metrics::counter!(FOLLOW_READS_TOTAL, "prefix" => p.clone()),
            lists: metrics::counter!(FOLLOW_LISTS_TOTAL, "prefix" => p.clone()),
            objects: metrics::counter!(FOLLOW_OBJECTS_TOTAL, "prefix" => p.clone()),
            missed_objects: metrics::counter!(FOLLOW_MISSED_OBJECTS_TOTAL, "prefix" => p.clone()),
            lag_objects: metrics::gauge!(FOLLOW_LAG_OBJECTS, "prefix" => p.clone()),
            lag_seconds: metrics::gauge!(FOLLOW_LAG_SECONDS, "prefix" => p.clone()),
            hold_refreshes: metrics::counter!(FOLLOW_HOLD_REFRESHES_TOTAL, "prefix" => p.clone()),
            hold_failures: metrics::counter!(FOLLOW_HOLD_FAILURES_TOTAL, "prefix" => p),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    /// Records the names `describe_*` was called with.
    #[derive(Default)]
    struct Descriptions(Mutex<Vec<String>>);

    impl Descriptions {
        fn add(&self, key: &KeyName) {
            let mut names = self.0.lock().unwrap_or_else(|e| e.into_inner());
            names.push(key.as_str().to_owned());
        }
    }

    impl Recorder for Descriptions {
        fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.add(&key);
        }
        fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.add(&key);
        }
        fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
            self.add(&key);
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    /// Every `pub const NAME: &str = "objwal_..."` of this file.
    fn names_in_this_file() -> Vec<String> {
        include_str!("metrics.rs")
            .lines()
            .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \"objwal_"))
            .filter_map(|l| l.split('"').nth(1).map(str::to_owned))
            .collect()
    }

    #[test]
    fn every_named_metric_is_described_once_and_listed_in_the_readme() {
        let recorder = Descriptions::default();
        metrics::with_local_recorder(&recorder, super::describe);
        let mut described = recorder.0.into_inner().unwrap_or_else(|e| e.into_inner());
        described.sort();
        let mut named = names_in_this_file();
        named.sort();
        assert!(named.len() >= 20, "{named:?}");
        assert_eq!(described, named, "described vs named");
        let readme = include_str!("../README.md");
        for name in &named {
            assert!(
                readme.contains(&format!("`{name}`")),
                "README does not list {name}"
            );
        }
    }
}
