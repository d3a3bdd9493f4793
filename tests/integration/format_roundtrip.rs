//! Any valid batch round-trips: through `encode`/`decode`, and through
//! `encode`/`decode_tail` (any window size)/`decode_segment`, and encoding is
//! deterministic and exactly as long as `encoded_len` predicts.

use bytes::Bytes;
use objwal::format::{
    decode, decode_footer, decode_releases, decode_segment, decode_tail, encode, encoded_len,
    entry_id, Header, Link, Object, ReleaseRecord, Segment, TailDecode, MAX_POSITION, MAX_SEQUENCE,
    TRAILER_LEN,
};
use proptest::prelude::*;

fn sequence() -> impl Strategy<Value = u64> {
    prop_oneof![0..8u64, (MAX_SEQUENCE - 8)..=MAX_SEQUENCE, 0..=MAX_SEQUENCE]
}

fn region() -> impl Strategy<Value = u64> {
    prop_oneof![0..16u64, (u64::MAX - 16)..u64::MAX, 0..u64::MAX]
}

fn position() -> impl Strategy<Value = u64> {
    prop_oneof![
        1..16u64,
        (MAX_POSITION - 4)..=MAX_POSITION,
        1..=MAX_POSITION
    ]
}

fn entries(sequence: u64) -> impl Strategy<Value = Vec<(u64, Bytes)>> {
    prop::collection::btree_map(position(), prop::collection::vec(any::<u8>(), 0..48), 1..6)
        .prop_map(move |m| {
            m.into_iter()
                .map(|(p, d)| (entry_id(sequence, p), Bytes::from(d)))
                .collect()
        })
}

/// Any object the format allows.
pub fn object() -> impl Strategy<Value = Object> {
    (
        sequence(),
        any::<u64>(),
        any::<Option<(u64, u64)>>(),
        any::<u64>(),
    )
        .prop_flat_map(|(sequence, epoch, link, boundary)| {
            let header = Header {
                sequence,
                epoch,
                link: link.filter(|_| sequence > 0).map(|(s, e)| Link {
                    sequence: s % sequence,
                    epoch: e,
                }),
                reclaim_boundary: boundary % (sequence + 1),
            };
            let segments = prop::collection::btree_map(region(), entries(sequence), 0..6);
            let releases = prop::collection::btree_map(region(), any::<u64>(), 0..4);
            (Just(header), segments, releases).prop_map(|(header, segments, releases)| Object {
                header,
                segments: segments
                    .into_iter()
                    .map(|(region, entries)| Segment { region, entries })
                    .collect(),
                marks: Vec::new(),
                releases: releases
                    .into_iter()
                    .map(|(region, released_through)| ReleaseRecord {
                        region,
                        released_through,
                    })
                    .collect(),
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn whole_object_round_trips(object in object()) {
        let bytes = encode(&object).unwrap();
        prop_assert_eq!(bytes.len() as u64, encoded_len(&object));
        let decoded = decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &object);
        prop_assert_eq!(encode(&decoded).unwrap(), bytes);
    }

    #[test]
    fn tail_and_segments_round_trip(object in object(), window in any::<prop::sample::Index>()) {
        let bytes = encode(&object).unwrap();
        let len = bytes.len();
        let w = TRAILER_LEN + window.index(len - TRAILER_LEN + 1);
        let tail = match decode_tail(&bytes[len - w..], len as u64).unwrap() {
            TailDecode::Complete(tail) => tail,
            TailDecode::NeedFooter { trailer, footer } => {
                prop_assert!(footer.start < (len - w) as u64);
                decode_footer(trailer, &bytes[footer.start as usize..footer.end as usize]).unwrap()
            }
        };
        prop_assert_eq!(tail.header(), &object.header);
        let sequence = object.header.sequence;
        let mut segments = Vec::new();
        let mut releases = Vec::new();
        for index in &tail.segments {
            let seg = bytes.slice(index.offset as usize..index.range().end as usize);
            if index.is_release() {
                releases = decode_releases(&seg, index, sequence).unwrap();
            } else {
                let entries = decode_segment(&seg, index, sequence).unwrap();
                segments.push(Segment { region: index.region, entries });
            }
        }
        prop_assert_eq!(segments, object.segments);
        prop_assert_eq!(releases, object.releases);
    }
}
