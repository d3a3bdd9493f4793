//! Every metric objwal emits, named once, through the `metrics` facade.
//!
//! Names are prefixed `objwal_`. Install any `metrics` recorder (Prometheus,
//! StatsD, ...) to collect them; without one they cost almost nothing.

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

/// Describes every metric to the installed recorder (units and help).
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(CREATED_OBJECTS_TOTAL, "objects created and made durable");
    describe_counter!(CREATE_CONFLICTS_TOTAL, "creates that met another object at their key");
    describe_counter!(CREATE_FAILURES_TOTAL, "creates that failed");
    describe_counter!(POISONED_TOTAL, "times the store was poisoned");
    describe_counter!(REJECTED_APPENDS_TOTAL, "appends and releases refused while failing");
    describe_counter!(STALLED_APPENDS_TOTAL, "appends that waited for the backlog");
    describe_counter!(SKIPPED_SEGMENTS_TOTAL, "corrupted segments skipped by reads");
    describe_counter!(RELEASE_RECORDS_TOTAL, "release records made durable");
    describe_counter!(DELETED_OBJECTS_TOTAL, "objects deleted by collection");
    describe_counter!(FAILED_DELETES_TOTAL, "deletes that failed");
    describe_gauge!(INDEXED_OBJECTS, "objects in the catalog");
    describe_gauge!(INDEXED_BYTES, Unit::Bytes, "bytes of the objects in the catalog");
    describe_gauge!(UNPERSISTED_BYTES, Unit::Bytes, "admitted payload bytes not yet durable");
    describe_histogram!(SEAL_TO_DURABLE_SECONDS, Unit::Seconds, "seal to durable and indexed");
    describe_histogram!(APPEND_ACK_SECONDS, Unit::Seconds, "append arrival to acknowledgement");
    describe_histogram!(OBJECT_BYTES, Unit::Bytes, "size of each created object");
    describe_histogram!(OBJECT_ENTRIES, "entries in each created object");
    describe_histogram!(RECOVERY_SECONDS, Unit::Seconds, "duration of recovery");
    describe_histogram!(READ_SECONDS, Unit::Seconds, "duration of a segment fetch");
    describe_histogram!(STALL_SECONDS, Unit::Seconds, "time an append waited for the backlog");
}
