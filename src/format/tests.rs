//! Unit tests of whole objects and tail windows (the pieces have their own
//! tests beside them; fixtures and property tests live in tests/integration).

use bytes::Bytes;

use super::*;

fn sample() -> Object {
    let seq = 42;
    Object {
        header: Header {
            sequence: seq,
            epoch: 3,
            link: Some(Link {
                sequence: 41,
                epoch: 3,
            }),
            reclaim_boundary: 40,
        },
        segments: vec![
            Segment {
                region: 1,
                entries: vec![
                    (entry_id(seq, 1), Bytes::from_static(b"a")),
                    (entry_id(seq, 2), Bytes::from_static(b"bb")),
                ],
            },
            Segment {
                region: 9,
                entries: vec![(entry_id(seq, 1), Bytes::from_static(b"ccc"))],
            },
        ],
        marks: Vec::new(),
        releases: vec![ReleaseRecord {
            region: 4,
            released_through: entry_id(30, 7),
        }],
    }
}

#[test]
fn ids_pack_sequence_and_position() {
    let id = entry_id(MAX_SEQUENCE, MAX_POSITION);
    assert_eq!(id, u64::MAX);
    assert_eq!(sequence_of(id), MAX_SEQUENCE);
    assert_eq!(position_of(id), MAX_POSITION);
    assert_eq!(entry_id(1, 1), (1 << 20) | 1);
    assert_eq!(sequence_of(entry_id(7, 3)), 7);
    assert_eq!(position_of(entry_id(7, 3)), 3);
}

#[test]
fn round_trips_and_predicts_its_length() {
    let object = sample();
    let bytes = encode(&object).unwrap();
    assert_eq!(bytes.len() as u64, encoded_len(&object));
    assert_eq!(decode(&bytes).unwrap(), object);
    assert_eq!(encode(&decode(&bytes).unwrap()).unwrap(), bytes);
}

#[test]
fn object_crc_combined_equals_a_plain_pass() {
    // Small segments are hashed again, large ones combined: both give the
    // CRC of one plain pass.
    let mut large = sample();
    large.segments.push(Segment {
        region: 12,
        entries: vec![(entry_id(42, 1), Bytes::from(vec![7u8; 3 * 4096]))],
    });
    for object in [sample(), large] {
        let bytes = encode(&object).unwrap();
        let n = bytes.len();
        let stored = u32::from_le_bytes(bytes[n - 24..n - 20].try_into().unwrap());
        assert_eq!(stored, crc32fast::hash(&bytes[..n - 80]));
    }
}

#[test]
fn empty_object_is_header_and_trailer() {
    let object = Object {
        header: Header {
            sequence: 0,
            epoch: 0,
            link: None,
            reclaim_boundary: 0,
        },
        segments: vec![],
        marks: Vec::new(),
        releases: vec![],
    };
    let bytes = encode(&object).unwrap();
    assert_eq!(bytes.len() as u64, MIN_OBJECT_LEN);
    assert_eq!(decode(&bytes).unwrap(), object);
}

#[test]
fn encoder_rejects_broken_batches() {
    let seq = sample().header.sequence;
    let mut cases: Vec<(Object, &str)> = Vec::new();
    let mut o = sample();
    o.segments.swap(0, 1);
    cases.push((o, "segment.region"));
    let mut o = sample();
    o.segments[1].region = RELEASE_REGION;
    cases.push((o, "segment.region"));
    let mut o = sample();
    o.segments[0].entries.clear();
    cases.push((o, "segment"));
    let mut o = sample();
    o.segments[0].entries[1].0 = entry_id(seq + 1, 1);
    cases.push((o, "entry.id"));
    let mut o = sample();
    o.releases.push(ReleaseRecord {
        region: 2,
        released_through: 0,
    });
    cases.push((o, "release.region"));
    let mut o = sample();
    o.header.sequence = MAX_SEQUENCE + 1;
    cases.push((o, "header.sequence"));
    for (object, field) in cases {
        assert_eq!(encode(&object).unwrap_err().field, field);
    }
}

#[test]
fn tail_windows_of_every_size_agree() {
    let object = sample();
    let bytes = encode(&object).unwrap();
    let len = bytes.len() as u64;
    let full = match decode_tail(&bytes, len).unwrap() {
        TailDecode::Complete(tail) => tail,
        other => panic!("whole object as window: {other:?}"),
    };
    assert_eq!(full.header(), &object.header);
    assert_eq!(full.segments.len(), 3);
    assert_eq!(
        full.release_segment().map(|s| s.region),
        Some(RELEASE_REGION)
    );
    assert_eq!(full.segment_of(9).map(|s| s.count), Some(1));
    assert_eq!(full.region_segments().count(), 2);
    for w in TRAILER_LEN..bytes.len() {
        let window = &bytes[bytes.len() - w..];
        let tail = match decode_tail(window, len).unwrap() {
            TailDecode::Complete(tail) => tail,
            TailDecode::NeedFooter { trailer, footer } => {
                assert!(footer.start < len - w as u64);
                let f = &bytes[footer.start as usize..footer.end as usize];
                decode_footer(trailer, f).unwrap()
            }
        };
        assert_eq!(tail, full);
    }
    assert!(decode_tail(&bytes[1..], len + 5).is_err());
    assert!(decode_tail(&bytes[..10], 10).is_err());
    assert!(decode_tail(&bytes, len - 1).is_err());
}

#[test]
fn segments_decode_alone() {
    let object = sample();
    let bytes = encode(&object).unwrap();
    let TailDecode::Complete(tail) = decode_tail(&bytes, bytes.len() as u64).unwrap() else {
        panic!("incomplete");
    };
    for (index, segment) in tail.region_segments().zip(&object.segments) {
        let seg = bytes.slice(index.offset as usize..index.range().end as usize);
        assert_eq!(decode_segment(&seg, index, 42).unwrap(), segment.entries);
        assert!(decode_releases(&seg, index, 42).is_err());
    }
    let rel = tail.release_segment().unwrap();
    let seg = bytes.slice(rel.offset as usize..rel.range().end as usize);
    assert_eq!(decode_releases(&seg, rel, 42).unwrap(), object.releases);
}

#[test]
fn full_decode_rejects_header_trailer_disagreement() {
    let mut a = sample();
    a.header.epoch = 4;
    let good = encode(&sample()).unwrap();
    let other = encode(&a).unwrap();
    let mut spliced = good.to_vec();
    spliced[..HEADER_LEN].copy_from_slice(&other[..HEADER_LEN]);
    let err = decode(&spliced).unwrap_err();
    assert_eq!(err.field, "trailer");
}

#[test]
fn full_decode_checks_the_object_crc() {
    // Change a payload byte and repair the segment CRC: only the object CRC can tell.
    let good = encode(&sample()).unwrap();
    let TailDecode::Complete(tail) = decode_tail(&good, good.len() as u64).unwrap() else {
        panic!("incomplete");
    };
    let mut b = good.to_vec();
    let seg = tail.segments[0];
    b[seg.offset as usize + 12] ^= 1;
    let crc = crc32fast::hash(&b[seg.offset as usize..seg.range().end as usize]);
    let entry = tail.trailer.footer_offset as usize;
    b[entry + 44..entry + 48].copy_from_slice(&crc.to_le_bytes());
    // Repair the footer CRC in the trailer, and the trailer CRC.
    let n = b.len();
    let fcrc = crc32fast::hash(&b[entry..n - 80]);
    b[n - 28..n - 24].copy_from_slice(&fcrc.to_le_bytes());
    let tcrc = crc32fast::hash(&b[n - 80..n - 12]);
    b[n - 12..n - 8].copy_from_slice(&tcrc.to_le_bytes());
    assert!(decode_tail(&b, n as u64).is_ok());
    let err = decode(&b).unwrap_err();
    assert!(err.is_crc_mismatch(), "{err}");
    assert_eq!(
        (err.field, err.offset),
        ("trailer.object_crc", n as u64 - 80 + 56)
    );
}

/// The tail of `sample()`'s encoding split as recovery reads it when the
/// window holds only the trailer: the trailer and the footer bytes.
fn trailer_and_footer() -> (Trailer, Vec<u8>) {
    let bytes = encode(&sample()).unwrap();
    let len = bytes.len() as u64;
    match decode_tail(&bytes[bytes.len() - TRAILER_LEN..], len).unwrap() {
        TailDecode::NeedFooter { trailer, footer } => {
            let f = bytes[footer.start as usize..footer.end as usize].to_vec();
            (trailer, f)
        }
        other => panic!("a trailer-only window needs the footer: {other:?}"),
    }
}

#[test]
fn a_short_footer_read_is_truncated_not_a_crc_mismatch() {
    let (trailer, footer) = trailer_and_footer();
    let at = trailer.footer_offset;
    let err = decode_footer(trailer.clone(), &footer[..footer.len() - 1]).unwrap_err();
    assert_eq!(
        err,
        FormatError::new(
            FormatErrorKind::Truncated {
                needed: footer.len() as u64,
                available: footer.len() as u64 - 1,
            },
            "footer",
            at,
        )
    );
    let mut long = footer.clone();
    long.push(0);
    let err = decode_footer(trailer.clone(), &long).unwrap_err();
    assert!(matches!(err.kind, FormatErrorKind::Invalid(_)), "{err}");
    assert_eq!((err.field, err.offset), ("footer", at));
    assert_eq!(decode_footer(trailer, &footer).unwrap().segments.len(), 3);
}

#[test]
fn a_footer_for_a_trailer_whose_range_disagrees_with_its_count_is_refused() {
    let (trailer, footer) = trailer_and_footer();
    // Bytes of the right length for the count, but an object length that
    // puts the footer range elsewhere.
    let moved = Trailer {
        object_len: trailer.object_len + 48,
        ..trailer.clone()
    };
    let err = decode_footer(moved, &footer).unwrap_err();
    assert!(matches!(err.kind, FormatErrorKind::Invalid(_)), "{err}");
    assert_eq!(err.field, "footer");
}

#[test]
fn a_footer_whose_crc_fails_names_the_trailer_field_at_its_offset() {
    let (trailer, mut footer) = trailer_and_footer();
    footer[0] ^= 1;
    let err = decode_footer(trailer.clone(), &footer).unwrap_err();
    assert!(err.is_crc_mismatch(), "{err}");
    assert_eq!(err.field, "trailer.footer_crc");
    assert_eq!(err.offset, trailer.trailer_offset() + 52);
}
