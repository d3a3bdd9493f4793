//! The ledger: where every admitted entry went, so no loss goes uncounted.
//!
//! Invariant (checked at every stop in debug builds and tests):
//! `admitted = durable + failed + lost + pending`, where *failed* entries
//! were refused to their callers (a durable-mode batch that failed), *lost*
//! entries were dropped after they were acknowledged or after a stop took
//! them on, and *pending* ones are still in the open batch or the pipeline.

/// Counts of entries and what became of them.
#[derive(Debug, Clone, Default)]
pub(super) struct Ledger {
    admitted: u64,
    durable: u64,
    failed: u64,
    lost_entries: u64,
    lost_bytes: u64,
    lost_releases: u64,
    lost_marks: u64,
    reason: Option<String>,
    /// Where the count of entries not yet settled is published, so that a
    /// handle can say what may be lost if the actor dies.
    shared: Option<std::sync::Arc<crate::wal::Shared>>,
}

impl Ledger {
    /// A ledger that publishes its unsettled count to `shared`.
    pub(super) fn new(shared: std::sync::Arc<crate::wal::Shared>) -> Self {
        Ledger {
            shared: Some(shared),
            ..Ledger::default()
        }
    }

    fn publish(&self) {
        if let Some(shared) = &self.shared {
            let settled = self.durable + self.failed + self.lost_entries;
            shared.set_unsettled(self.admitted.saturating_sub(settled));
        }
    }

    pub(super) fn admit(&mut self, entries: u64) {
        self.admitted += entries;
        self.publish();
    }

    pub(super) fn durable(&mut self, entries: u64) {
        self.durable += entries;
        self.publish();
    }

    /// Entries whose callers were told their batch failed.
    pub(super) fn failed(&mut self, entries: u64) {
        self.failed += entries;
        self.publish();
    }

    /// Entries (and payload bytes) dropped that were acknowledged or taken
    /// on by a stop, and why (the first reason is kept).
    pub(super) fn lose(&mut self, entries: u64, bytes: u64, reason: impl FnOnce() -> String) {
        self.lost_entries += entries;
        self.lost_bytes += bytes;
        if entries > 0 {
            self.reason.get_or_insert_with(reason);
        }
        self.publish();
    }

    /// Release records that could not be made durable.
    pub(super) fn lose_releases(&mut self, records: u64, reason: impl FnOnce() -> String) {
        self.lost_releases += records;
        if records > 0 {
            self.reason.get_or_insert_with(reason);
        }
    }

    /// Flush marks that could not be made durable.
    pub(super) fn lose_marks(&mut self, marks: u64, reason: impl FnOnce() -> String) {
        self.lost_marks += marks;
        if marks > 0 {
            self.reason.get_or_insert_with(reason);
        }
    }

    pub(super) fn has_loss(&self) -> bool {
        self.lost_entries > 0 || self.lost_releases > 0 || self.lost_marks > 0
    }

    pub(super) fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The error that reports the loss.
    pub(super) fn lost_error(&self) -> crate::Error {
        crate::Error::Lost {
            entries: self.lost_entries,
            bytes: self.lost_bytes,
            releases: self.lost_releases,
            marks: self.lost_marks,
            reason: self
                .reason
                .clone()
                .unwrap_or_else(|| "unknown".to_owned())
                .into(),
        }
    }

    /// The error a fenced store's stop returns: fenced, naming what it
    /// admitted but never made durable (in enqueued mode no `wait_durable`
    /// returned for those entries, so nothing promised is among them).
    pub(super) fn fenced_error(&self, ours: u64, newer: u64) -> crate::Error {
        let detail = if self.has_loss() {
            Some(
                format!(
                    "{} entries ({} bytes) admitted but never made durable, {} release records \
                     and {} flush marks are not in the log",
                    self.lost_entries, self.lost_bytes, self.lost_releases, self.lost_marks
                )
                .into(),
            )
        } else {
            None
        };
        crate::Error::Fenced {
            ours,
            newer,
            detail,
        }
    }

    /// Checks the invariant with `pending` entries still in the store.
    pub(super) fn check(&self, pending: u64) -> Result<(), String> {
        let accounted = self.durable + self.failed + self.lost_entries + pending;
        if self.admitted == accounted {
            Ok(())
        } else {
            Err(format!(
                "ledger out of balance: admitted {} != durable {} + failed {} + lost {} + pending {}",
                self.admitted, self.durable, self.failed, self.lost_entries, pending
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_admitted_entry_is_accounted_for() {
        let mut l = Ledger::default();
        l.admit(10);
        l.durable(4);
        l.failed(2);
        assert!(l.check(4).is_ok());
        assert!(l.check(3).is_err());
        l.lose(4, 400, || "stop gave up".into());
        assert!(l.check(0).is_ok() && l.has_loss());
        match l.lost_error() {
            crate::Error::Lost {
                entries: 4,
                bytes: 400,
                reason,
                ..
            } => {
                assert_eq!(&*reason, "stop gave up");
            }
            other => panic!("{other:?}"),
        }
        l.lose(0, 0, || "not kept".into());
        assert_eq!(l.reason(), Some("stop gave up"));
    }
}
