//! Release records: the data of the single entry of the release segment.
//!
//! The release segment is the segment of the reserved region
//! [`RELEASE_REGION`](super::RELEASE_REGION) (`u64::MAX`), so it always sorts
//! last. It holds exactly one entry, id `(sequence << 20) | 1`, whose data is
//! `n >= 1` records:
//!
//! ```text
//! record: region: u64 | released_through: u64      (RELEASE_RECORD_LEN = 16 bytes)
//! ```
//!
//! Invariants: regions strictly increase and none is `RELEASE_REGION`. To a
//! reader that knows nothing of releases it is an ordinary segment of a region
//! it never opens. The codec is the one the marks segment shares
//! (`records.rs`).

use bytes::Bytes;

use super::error::FormatError;
use super::footer::SegmentIndex;
use super::records::{decode_records, Record};
use super::RELEASE_REGION;

/// A region dropped for good: its entries through `released_through` (in
/// practice all it ever had) are obsolete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseRecord {
    /// The released region.
    pub region: u64,
    /// The largest entry id of the region that the release covers.
    pub released_through: u64,
}

impl Record for ReleaseRecord {
    const SEGMENT_REGION: u64 = RELEASE_REGION;
    const SEGMENT: &'static str = "release";
    const RECORDS: &'static str = "release records";
    const REGION_FIELD: &'static str = "release.region";
    const VALUE_FIELD: &'static str = "release.released_through";
    const OWN_REGION: &'static str = "the reserved region cannot be released";

    fn new(region: u64, released_through: u64) -> Self {
        ReleaseRecord {
            region,
            released_through,
        }
    }

    fn region(&self) -> u64 {
        self.region
    }

    fn value(&self) -> u64 {
        self.released_through
    }
}

/// Decodes the release segment. `bytes` is exactly its bytes, `index` its
/// footer entry (region `RELEASE_REGION`). Checks everything
/// [`decode_segment`](super::decode_segment) checks, then the records.
pub fn decode_releases(
    bytes: &Bytes,
    index: &SegmentIndex,
    sequence: u64,
) -> Result<Vec<ReleaseRecord>, FormatError> {
    decode_records(bytes, index, sequence)
}
