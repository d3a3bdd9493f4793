//! The object format, version 1: pure code, bytes in and plain values out
//! (no async, no I/O). The byte-exact specification is `format/README.md`;
//! the frozen fixtures under `compatibility/v1/` pin it.
//!
//! An object is `header | segment* | footer | trailer`, all integers
//! little-endian, every CRC a CRC32 (IEEE, `crc32fast`):
//!
//! ```text
//! offset 0               64                                footer_offset          object_len-80   object_len
//! +----------------------+--------------+-----+-------------+--------------------+---------------+
//! | header (64)          | segment r1   | ... | marks, then | footer             | trailer (80)  |
//! | magic OBJWALHD, ver, | frames:      |     | release seg | 48 bytes/segment:  | header fields,|
//! | flags, seq, epoch,   | id u64       |     | regions     | region, first id,  | footer offset,|
//! | link, boundary, CRC  | len u32      |     |MAX-255, MAX:| last id, offset,   | count, CRCs,  |
//! |                      | data         |     | 1 entry each| len, count, CRC    | magic OBJWALTR|
//! +----------------------+--------------+-----+-------------+--------------------+---------------+
//!                        |<- segments tile [64, footer_offset) exactly ->|
//! ```
//!
//! - Segments: one per region, regions strictly increasing; each at least one
//!   entry; entry ids strictly increasing, `id = (sequence << 20) | position`,
//!   position >= 1.
//! - The release segment is the segment of the reserved region
//!   [`RELEASE_REGION`] (`u64::MAX`, so always last): one entry, id
//!   `(sequence << 20) | 1`, whose data is 16-byte `(region, released_through)`
//!   records. A reader that knows nothing of releases sees a region it never opens.
//! - The marks segment is the segment of the reserved region [`MARKS_REGION`]
//!   (`u64::MAX - 255`, usually right before the release segment), shaped the
//!   same way:
//!   one entry of 16-byte `(region, watermark)` records, the flush marks the
//!   engine handed in and, for region [`JUMP`], where the writer's run goes
//!   next. A reader that knows nothing of marks sees a region it never opens.
//! - The trailer repeats every header field, so recovery reads one window at
//!   the end of an object ([`decode_tail`]) and never the header.
//! - CRCs: header (bytes 0..60), each segment (in its footer entry), the
//!   footer and the whole object before the trailer (in the trailer), the
//!   trailer (bytes 0..68).
//!
//! Every decoder returns an error (kind, object offset, field) for every
//! malformed input, never panics, and checks every length against the bytes
//! present before allocating or slicing. Encoding is deterministic.
//!
//! Module map: `codec` little-endian helpers; `header`, `segment`,
//! `marks`, `release`, `footer`, `trailer` one structure each (`records`
//! the codec the marks and release segments share); `tail` the recovery
//! window; `object` whole-object encode and decode.

mod codec;
mod error;
mod footer;
mod header;
mod marks;
mod object;
mod records;
mod release;
mod segment;
mod tail;
mod trailer;

pub use error::{FormatError, FormatErrorKind};
pub use footer::SegmentIndex;
pub use header::{decode_header, Header, Link, FLAG_HAS_LINK, HEADER_MAGIC};
pub use marks::{decode_marks, MarkRecord, JUMP};
pub use object::{decode, encode, encoded_len, Object};
pub use release::{decode_releases, ReleaseRecord};
pub use segment::{decode_segment, Segment};
pub use tail::{decode_footer, decode_tail, Tail, TailDecode};
pub use trailer::{Trailer, MIN_OBJECT_LEN, TRAILER_MAGIC};

/// The format version this module writes and reads.
pub const VERSION: u16 = 1;
/// Bytes in the header.
pub const HEADER_LEN: usize = 64;
/// Bytes in the trailer.
pub const TRAILER_LEN: usize = 80;
/// Bytes in one footer entry.
pub const FOOTER_ENTRY_LEN: usize = 48;
/// Bytes of framing per entry (id u64 + len u32).
pub const ENTRY_OVERHEAD: usize = 12;
/// Bytes in one release record (region u64 + released-through id u64).
pub const RELEASE_RECORD_LEN: usize = 16;
/// The largest sequence: ids are `sequence << 20`, so a sequence has 44 bits.
pub const MAX_SEQUENCE: u64 = (1 << 44) - 1;
/// Bits of an entry id that hold the position.
pub const POSITION_BITS: u32 = 20;
/// The largest position of an entry in its segment (positions start at 1).
pub const MAX_POSITION: u64 = (1 << POSITION_BITS) - 1;
/// The reserved region whose segment holds the release records.
pub const RELEASE_REGION: u64 = u64::MAX;
/// The reserved region whose segment holds the mark records (flush marks
/// and the writer's jump): above the regions engines use, so it sorts near
/// the release segment, inside recovery's tail window. Reserved since
/// objwal 0.2: version 1 left every region but `u64::MAX` to the engine, and
/// the frozen fixtures use `u64::MAX - 1` and `u64::MAX - 2`; an object
/// whose segment of this region is not marks-shaped fails to decode, naming
/// it.
pub const MARKS_REGION: u64 = u64::MAX - 0xFF;
/// Bytes in one mark record (region u64 + watermark id u64).
pub const MARK_RECORD_LEN: usize = 16;

/// Whether `region` is reserved (the marks or the release region): never
/// appended to, never a region of the catalog.
pub fn is_reserved_region(region: u64) -> bool {
    region == MARKS_REGION || region == RELEASE_REGION
}

/// The id of the entry at `position` (1..=[`MAX_POSITION`]) in the object of
/// `sequence` (<= [`MAX_SEQUENCE`]). Bits outside those ranges are dropped.
pub fn entry_id(sequence: u64, position: u64) -> u64 {
    (sequence << POSITION_BITS) | (position & MAX_POSITION)
}

/// The sequence of the object that holds entry `id`.
pub fn sequence_of(id: u64) -> u64 {
    id >> POSITION_BITS
}

/// The position of entry `id` in its segment.
pub fn position_of(id: u64) -> u64 {
    id & MAX_POSITION
}

#[cfg(test)]
mod tests;
