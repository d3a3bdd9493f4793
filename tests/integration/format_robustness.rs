//! Damaged input never decodes: every single-byte change and every
//! truncation of every fixture is an `Err` from the full decoder, the tail
//! path (tail window, footer, segments) never returns different content, and
//! no decoder panics on arbitrary bytes.

use bytes::Bytes;
use objwal::format::{
    decode, decode_footer, decode_header, decode_releases, decode_segment, decode_tail,
    ReleaseRecord, SegmentIndex, Tail, TailDecode, HEADER_LEN, TRAILER_LEN,
};
use proptest::prelude::*;

use crate::format_fixtures::{load, Fixture};

/// What the tail path (recovery, then reads) makes of an object.
#[derive(Debug, PartialEq)]
struct TailView {
    tail: Tail,
    segments: Vec<Vec<(u64, Bytes)>>,
    releases: Vec<ReleaseRecord>,
}

/// Decodes `bytes` the way recovery and reads do, with a tail window of
/// `window` bytes (a second read for the footer when needed).
fn tail_path(bytes: &Bytes, window: usize) -> Result<TailView, String> {
    let len = bytes.len();
    let w = window.min(len);
    let tail = match decode_tail(&bytes[len - w..], len as u64).map_err(|e| e.to_string())? {
        TailDecode::Complete(tail) => tail,
        TailDecode::NeedFooter { trailer, footer } => {
            let f = bytes
                .get(footer.start as usize..footer.end as usize)
                .ok_or("footer range outside the object")?;
            decode_footer(trailer, f).map_err(|e| e.to_string())?
        }
    };
    let sequence = tail.header().sequence;
    let mut segments = Vec::new();
    let mut releases = Vec::new();
    for index in &tail.segments {
        let seg = bytes.slice(index.offset as usize..index.range().end as usize);
        if index.is_release() {
            releases = decode_releases(&seg, index, sequence).map_err(|e| e.to_string())?;
        } else {
            segments.push(decode_segment(&seg, index, sequence).map_err(|e| e.to_string())?);
        }
    }
    Ok(TailView {
        tail,
        segments,
        releases,
    })
}

/// Checks one damaged copy of `f`: the full decoder rejects it; the tail
/// path (which never reads the header) either rejects it or, when the damage
/// is outside what it reads, returns exactly the original content.
fn check_damaged(f: &Fixture, damaged: &Bytes, original: &[TailView; 2], what: &str) {
    let name = &f.desc.name;
    assert!(
        decode(damaged).is_err(),
        "{name}: {what}: full decode accepted it"
    );
    for (window, expected) in [(damaged.len(), &original[0]), (TRAILER_LEN, &original[1])] {
        if let Ok(view) = tail_path(damaged, window) {
            assert_eq!(
                &view, expected,
                "{name}: {what}: tail path (window {window}) changed content"
            );
        }
    }
}

/// Byte offsets of `f` that hold structure (not payload): header, frame
/// headers, footer, trailer, release records.
fn structural_offsets(f: &Fixture, tail: &Tail) -> Vec<usize> {
    let mut out: Vec<usize> = (0..HEADER_LEN).collect();
    for index in &tail.segments {
        let seg = f
            .bytes
            .slice(index.offset as usize..index.range().end as usize);
        let mut pos = 0;
        while pos < seg.len() {
            out.extend(index.offset as usize + pos..index.offset as usize + pos + 12);
            let len = u32::from_le_bytes(seg[pos + 8..pos + 12].try_into().unwrap()) as usize;
            if index.is_release() {
                out.extend(
                    index.offset as usize + pos + 12..index.offset as usize + pos + 12 + len,
                );
            }
            pos += 12 + len;
        }
    }
    out.extend(tail.trailer.footer_offset as usize..f.bytes.len());
    out
}

/// Fixtures at most this long get all 255 changes of every byte.
const SMALL: usize = 4096;

#[test]
fn every_single_byte_change_of_every_fixture_is_rejected() {
    for f in load() {
        let original = [
            tail_path(&f.bytes, f.bytes.len()).unwrap(),
            tail_path(&f.bytes, TRAILER_LEN).unwrap(),
        ];
        let mut work = f.bytes.to_vec();
        let (offsets, deltas): (Vec<usize>, Vec<u8>) = if f.bytes.len() <= SMALL {
            ((0..f.bytes.len()).collect(), (1..=255).collect())
        } else {
            // A large fixture: every structural byte and a stride of payload
            // bytes, with every single-bit flip and an all-bits flip. That is
            // enough: every payload byte is covered by its segment CRC and the
            // object CRC alike, CRC32 detects every error burst of <= 32 bits
            // (so any change within one byte, wherever it sits), and the frame
            // parser never branches on payload bytes, so the sampled offsets
            // exercise the same code as the rest.
            let mut offsets = structural_offsets(&f, &original[0].tail);
            offsets.extend((HEADER_LEN..f.bytes.len()).step_by(4093));
            offsets.sort_unstable();
            offsets.dedup();
            (offsets, vec![1, 2, 4, 8, 16, 32, 64, 128, 255])
        };
        for &at in &offsets {
            for &delta in &deltas {
                work[at] ^= delta;
                let damaged = Bytes::copy_from_slice(&work);
                check_damaged(
                    &f,
                    &damaged,
                    &original,
                    &format!("byte {at} ^ {delta:#04x}"),
                );
                work[at] ^= delta;
            }
        }
    }
}

#[test]
fn every_truncation_of_every_fixture_is_rejected() {
    for f in load() {
        let name = &f.desc.name;
        let n = f.bytes.len();
        for cut in 0..n {
            // Losing the end: the trailer is gone or misplaced.
            let head = &f.bytes[..cut];
            assert!(decode(head).is_err(), "{name}: first {cut} bytes decoded");
            assert!(
                decode_tail(head, cut as u64).is_err(),
                "{name}: first {cut} bytes as a tail"
            );
            // Losing the start: the object is shorter than its trailer says.
            let rest = &f.bytes[n - cut..];
            assert!(decode(rest).is_err(), "{name}: last {cut} bytes decoded");
            assert!(
                decode_tail(rest, cut as u64).is_err(),
                "{name}: last {cut} bytes as a tail"
            );
        }
        assert!(
            decode_header(&f.bytes[..HEADER_LEN - 1]).is_err(),
            "{name}: short header"
        );
    }
}

/// The small fixtures, loaded once for all proptest cases.
fn small_fixtures() -> &'static [Fixture] {
    static FIXTURES: std::sync::OnceLock<Vec<Fixture>> = std::sync::OnceLock::new();
    FIXTURES.get_or_init(|| {
        load()
            .into_iter()
            .filter(|f| f.bytes.len() <= SMALL)
            .collect()
    })
}

fn index_strategy() -> impl Strategy<Value = SegmentIndex> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        0..200u64,
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(region, first_id, last_id, offset, len, count, crc)| SegmentIndex {
                region,
                first_id,
                last_id,
                offset,
                len,
                count,
                crc,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_any_decoder(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        claimed_extra in any::<u64>(),
        index in index_strategy(),
        sequence in any::<u64>(),
    ) {
        // Results do not matter here (garbage is an Err); reaching the end
        // without a panic or an abort on a huge allocation is the property.
        let a = decode(&bytes).is_ok();
        let b = decode_header(&bytes).is_ok();
        let c = decode_tail(&bytes, bytes.len() as u64).is_ok();
        let d = decode_tail(&bytes, (bytes.len() as u64).saturating_add(claimed_extra)).is_ok();
        let seg = Bytes::from(bytes);
        let e = decode_segment(&seg, &index, sequence).is_ok();
        let g = decode_releases(&seg, &index, sequence).is_ok();
        // Random bytes essentially never form a valid object; when they do,
        // the other decoders must agree with the full decoder.
        if a {
            prop_assert!(b && c, "a full decode implies the header and tail decode");
        }
        let _ = (d, e, g);
    }

    #[test]
    fn random_multi_byte_damage_never_changes_content(
        which in any::<prop::sample::Index>(),
        changes in prop::collection::vec((any::<prop::sample::Index>(), 1..=255u8), 1..6),
    ) {
        let f = which.get(small_fixtures());
        let original = [tail_path(&f.bytes, f.bytes.len()).unwrap(), tail_path(&f.bytes, TRAILER_LEN).unwrap()];
        let mut work = f.bytes.to_vec();
        for (at, delta) in &changes {
            let at = at.index(work.len());
            work[at] ^= delta;
        }
        prop_assume!(work.as_slice() != &f.bytes[..]);
        check_damaged(f, &Bytes::from(work), &original, &format!("changes {changes:?}"));
    }
}
