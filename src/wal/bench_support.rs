//! What the criterion benches (`benches/`) need from the private write
//! path, and nothing more: the open batch's admission (`encoded_growth`,
//! positions, `admit`) and its sealing into an [`Object`], exactly the code
//! the actor runs. Hidden from the documentation; not part of the
//! interface, and free to change with the benches.

use bytes::Bytes;
use tokio::time::Instant;

use crate::format::{Header, Object};
use crate::wal::write::batch::OpenBatch;
use crate::{EntryId, RegionId};

/// An open batch, as the actor holds it.
#[derive(Debug)]
pub struct Batch(OpenBatch);

impl Batch {
    /// An empty batch that will become the object of `sequence`.
    pub fn new(sequence: u64) -> Self {
        Batch(OpenBatch::new(sequence, Instant::now()))
    }

    /// What the actor checks before it admits an append: the encoded bytes
    /// it adds, and whether every region has positions left.
    pub fn check(&self, entries: &[(RegionId, Bytes)]) -> (u64, bool) {
        (
            self.0.encoded_growth(entries),
            self.0.has_positions_for(entries),
        )
    }

    /// Admits an append whole; its ids in input order.
    pub fn admit(&mut self, entries: Vec<(RegionId, Bytes)>) -> Vec<EntryId> {
        self.0.admit(entries).0
    }

    /// The bytes its segments and footer will take.
    pub fn encoded_bytes(&self) -> u64 {
        self.0.encoded_bytes()
    }

    /// The object it becomes when sealed (unlinked, boundary 0, epoch 1).
    pub fn seal(self) -> Object {
        let sequence = self.0.sequence;
        self.0.into_object(Header {
            sequence,
            epoch: 1,
            link: None,
            reclaim_boundary: 0,
        })
    }
}
