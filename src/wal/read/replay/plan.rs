//! The replay planner: which ranged reads fetch a page of wanted segments.
//!
//! Pure: the wanted segments of each object in, ranged reads out. Within
//! one object, adjacent wanted segments are merged into one read, and a gap
//! of unwanted bytes is read through when it is at most
//! [`Limits::read_through`] long (a second request costs a round trip: on a
//! remote store ~20-30 ms before its first byte, while 64 KiB more of one
//! response takes about a millisecond at 50 MB/s); a read grows no longer
//! than [`Limits::max_read`] unless one segment alone is longer (memory is
//! bounded per read).
//!
//! Invariants of a plan: reads come in the objects' order and, within an
//! object, in offset order, their ranges disjoint; every wanted segment
//! lies in exactly one read, whose range covers it, and a read's range
//! starts at its first segment and ends at its last; between two segments
//! of one read lie at most `read_through` bytes; two consecutive reads of
//! one object are apart by more than `read_through`, or merging them would
//! pass `max_read`.

use std::ops::Range;

use crate::catalog::ObjectSegments;
use crate::format::SegmentIndex;

/// Unwanted bytes a read goes through rather than issuing a second request.
pub(crate) const READ_THROUGH: u64 = 64 << 10;

/// How reads are shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The longest gap of unwanted bytes read through.
    pub(crate) read_through: u64,
    /// The longest merged read (a single longer segment is read alone).
    pub(crate) max_read: u64,
}

impl Limits {
    /// The limits of a replay holding at most `buffer_bytes`: a read takes
    /// at most a quarter of it, so several run at once.
    pub(crate) fn for_buffer(buffer_bytes: u64) -> Self {
        Limits {
            read_through: READ_THROUGH,
            max_read: (buffer_bytes / 4).max(READ_THROUGH),
        }
    }
}

/// One ranged read of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlannedRead {
    /// The object's sequence.
    pub(crate) sequence: u64,
    /// The byte range read.
    pub(crate) range: Range<u64>,
    /// The wanted segments it covers, in offset order.
    pub(crate) segments: Vec<SegmentIndex>,
}

impl PlannedRead {
    /// Bytes it fetches.
    pub(crate) fn len(&self) -> u64 {
        self.range.end - self.range.start
    }
}

/// The reads that fetch `objects`' wanted segments.
pub(crate) fn plan(objects: &[ObjectSegments], limits: Limits) -> Vec<PlannedRead> {
    let mut reads = Vec::new();
    for object in objects {
        let mut sorted = object.segments.clone();
        sorted.sort_by_key(|s| s.offset);
        let mut current: Option<PlannedRead> = None;
        for segment in sorted {
            let range = segment.range();
            if let Some(read) = current.as_mut() {
                let gap = range.start.saturating_sub(read.range.end);
                let merged = range.end.max(read.range.end) - read.range.start;
                if gap <= limits.read_through && merged <= limits.max_read {
                    read.range.end = read.range.end.max(range.end);
                    read.segments.push(segment);
                    continue;
                }
            }
            if let Some(done) = current.replace(PlannedRead {
                sequence: object.sequence,
                range,
                segments: vec![segment],
            }) {
                reads.push(done);
            }
        }
        reads.extend(current);
    }
    reads
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::entry_id;
    use proptest::prelude::*;

    /// Segments of `(offset, len)`, regions numbered by position.
    fn object(sequence: u64, layout: &[(u64, u64)]) -> ObjectSegments {
        ObjectSegments {
            sequence,
            segments: layout
                .iter()
                .enumerate()
                .map(|(i, &(offset, len))| SegmentIndex {
                    region: i as u64,
                    first_id: entry_id(sequence, 1),
                    last_id: entry_id(sequence, 1),
                    offset,
                    len,
                    count: 1,
                    crc: 0,
                })
                .collect(),
        }
    }

    fn ranges(reads: &[PlannedRead]) -> Vec<(u64, Range<u64>, usize)> {
        reads
            .iter()
            .map(|r| (r.sequence, r.range.clone(), r.segments.len()))
            .collect()
    }

    const LIMITS: Limits = Limits {
        read_through: 100,
        max_read: 1000,
    };

    #[test]
    fn adjacent_segments_make_one_read() {
        let reads = plan(&[object(3, &[(64, 10), (74, 20), (94, 5)])], LIMITS);
        assert_eq!(ranges(&reads), vec![(3, 64..99, 3)]);
    }

    #[test]
    fn a_short_gap_is_read_through_and_a_long_one_splits() {
        let objects = [object(1, &[(64, 10), (174, 10), (285, 10)])];
        // 100 bytes apart: read through; 101 bytes: a second read.
        assert_eq!(
            ranges(&plan(&objects, LIMITS)),
            vec![(1, 64..184, 2), (1, 285..295, 1)]
        );
    }

    #[test]
    fn a_read_never_passes_the_longest_read_unless_one_segment_does() {
        let objects = [object(
            1,
            &[(64, 600), (664, 600), (1264, 2000), (3264, 10)],
        )];
        assert_eq!(
            ranges(&plan(&objects, LIMITS)),
            vec![
                (1, 64..664, 1),
                (1, 664..1264, 1),
                (1, 1264..3264, 1),
                (1, 3264..3274, 1)
            ]
        );
    }

    #[test]
    fn objects_are_read_in_their_order_and_never_merged() {
        let objects = [object(1, &[(64, 10)]), object(2, &[(64, 10), (74, 10)])];
        assert_eq!(
            ranges(&plan(&objects, LIMITS)),
            vec![(1, 64..74, 1), (2, 64..84, 2)]
        );
        assert!(plan(&[], LIMITS).is_empty());
        assert!(plan(&[object(1, &[])], LIMITS).is_empty());
    }

    #[test]
    fn the_buffer_sets_the_longest_read() {
        assert_eq!(Limits::for_buffer(64 << 20).max_read, 16 << 20);
        assert_eq!(Limits::for_buffer(64 << 10).max_read, READ_THROUGH);
    }

    proptest! {
        #[test]
        fn every_segment_is_read_once_and_reads_are_minimal(
            gaps_and_lens in proptest::collection::vec((0u64..300, 1u64..700), 0..40),
            wanted in proptest::collection::vec(any::<bool>(), 40),
            read_through in 0u64..200,
            max_read in 1u64..3000,
        ) {
            // Segments tile an object (with gaps standing for unwanted ones).
            let mut layout = Vec::new();
            let mut at = 64;
            for (i, (gap, len)) in gaps_and_lens.iter().enumerate() {
                at += gap;
                if wanted[i] {
                    layout.push((at, *len));
                }
                at += len;
            }
            let limits = Limits { read_through, max_read };
            let reads = plan(&[object(7, &layout)], limits);
            let covered: Vec<(u64, u64)> = reads
                .iter()
                .flat_map(|r| r.segments.iter().map(|s| (s.offset, s.len)))
                .collect();
            prop_assert_eq!(&covered, &layout);
            for r in &reads {
                let first = r.segments.first().map(|s| s.offset);
                let last = r.segments.last().map(|s| s.offset + s.len);
                prop_assert_eq!((first, last), (Some(r.range.start), Some(r.range.end)));
                prop_assert!(r.segments.len() == 1 || r.len() <= max_read);
                for pair in r.segments.windows(2) {
                    prop_assert!(pair[1].offset - (pair[0].offset + pair[0].len) <= read_through);
                }
            }
            for pair in reads.windows(2) {
                let gap = pair[1].range.start - pair[0].range.end;
                let merged = pair[1].range.end - pair[0].range.start;
                prop_assert!(pair[0].range.end <= pair[1].range.start);
                prop_assert!(gap > read_through || merged > max_read, "{:?}", ranges(&reads));
            }
        }
    }
}
