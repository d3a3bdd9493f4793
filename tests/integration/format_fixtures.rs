//! The frozen version 1 fixtures decode to exactly their descriptions, by
//! every decoding path, and their descriptions re-encode to identical bytes.

use std::path::PathBuf;

use bytes::Bytes;
use objwal::format::{
    decode, decode_footer, decode_header, decode_marks, decode_releases, decode_segment,
    decode_tail, encode, encoded_len, Tail, TailDecode, FOOTER_ENTRY_LEN, MARKS_REGION,
    RELEASE_REGION, TRAILER_LEN,
};

#[path = "../../examples/make_fixtures/desc.rs"]
mod desc;

use desc::FixtureDesc;

/// One fixture: its description and its bytes.
pub struct Fixture {
    pub desc: FixtureDesc,
    pub bytes: Bytes,
}

/// Every fixture under `compatibility/v1`, sorted by name.
pub fn load() -> Vec<Fixture> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("compatibility/v1");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".wal").map(str::to_owned))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let json = std::fs::read_to_string(dir.join(format!("{name}.json")))
                .unwrap_or_else(|e| panic!("{name}.wal has no readable {name}.json: {e}"));
            let desc: FixtureDesc = serde_json::from_str(&json).unwrap();
            assert_eq!(desc.name, name);
            let bytes = Bytes::from(std::fs::read(dir.join(format!("{name}.wal"))).unwrap());
            Fixture { desc, bytes }
        })
        .collect()
}

/// Resolves a tail window of `window` bytes, doing the second read when asked.
pub fn tail_via_window(bytes: &[u8], window: usize) -> Tail {
    let len = bytes.len();
    let w = window.min(len);
    match decode_tail(&bytes[len - w..], len as u64).unwrap() {
        TailDecode::Complete(tail) => tail,
        TailDecode::NeedFooter { trailer, footer } => {
            assert!(footer.start < (len - w) as u64, "asked for a footer it had");
            decode_footer(trailer, &bytes[footer.start as usize..footer.end as usize]).unwrap()
        }
    }
}

#[test]
fn the_required_fixtures_are_all_present() {
    let names: Vec<String> = load().into_iter().map(|f| f.desc.name).collect();
    for required in [
        "empty_start",
        "one_region",
        "many_regions",
        "large_entry_1mib",
        "regions_and_releases",
        "releases_only",
        "high_sequence",
        "max_sequence",
        "link_and_boundary",
        "marks_and_jump",
        "settle_marker",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "missing fixture {required}"
        );
    }
}

#[test]
fn each_fixture_decodes_to_exactly_its_description() {
    for f in load() {
        let name = &f.desc.name;
        let object = decode(&f.bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(object, f.desc.to_object().unwrap(), "{name}");
        let described = FixtureDesc::of(name, &f.desc.description, &object, &f.bytes);
        assert_eq!(described, f.desc, "{name}");
        assert_eq!(decode_header(&f.bytes).unwrap(), object.header, "{name}");
    }
}

#[test]
fn reencoding_each_description_gives_identical_bytes() {
    for f in load() {
        let object = f.desc.to_object().unwrap();
        assert_eq!(
            encoded_len(&object),
            f.bytes.len() as u64,
            "{}",
            f.desc.name
        );
        let encoded = encode(&object).unwrap();
        assert!(
            encoded == f.bytes,
            "{}: re-encoding changed the bytes",
            f.desc.name
        );
    }
}

#[test]
fn tail_windows_of_every_kind_give_the_described_index() {
    for f in load() {
        let name = &f.desc.name;
        let object = f.desc.to_object().unwrap();
        let segment_count = object.segments.len()
            + usize::from(!object.marks.is_empty())
            + usize::from(!object.releases.is_empty());
        let tail_len = TRAILER_LEN + FOOTER_ENTRY_LEN * segment_count;
        let windows = [
            TRAILER_LEN,  // trailer only: needs the footer unless there is none
            tail_len - 1, // one byte short of the footer
            tail_len,     // exactly footer + trailer
            tail_len + 1,
            4096,
            64 * 1024,
            f.bytes.len(),
        ];
        let whole = tail_via_window(&f.bytes, f.bytes.len());
        for w in windows {
            let w = w.min(f.bytes.len());
            let window = &f.bytes[f.bytes.len() - w..];
            if w < TRAILER_LEN {
                assert!(
                    decode_tail(window, f.bytes.len() as u64).is_err(),
                    "{name}: window {w}"
                );
                continue;
            }
            let decoded = decode_tail(window, f.bytes.len() as u64).unwrap();
            assert_eq!(
                matches!(decoded, TailDecode::NeedFooter { .. }),
                w < tail_len,
                "{name}: window {w}"
            );
            assert_eq!(tail_via_window(&f.bytes, w), whole, "{name}: window {w}");
        }
        assert_eq!(whole.header(), &object.header, "{name}");
        let mut regions: Vec<u64> = object.segments.iter().map(|s| s.region).collect();
        if !object.marks.is_empty() {
            regions.push(MARKS_REGION);
            regions.sort_unstable();
        }
        if !object.releases.is_empty() {
            regions.push(RELEASE_REGION);
        }
        let indexed: Vec<u64> = whole.segments.iter().map(|s| s.region).collect();
        assert_eq!(indexed, regions, "{name}");
        for (index, segment) in whole.region_segments().zip(&object.segments) {
            assert_eq!(index.count as usize, segment.entries.len(), "{name}");
            assert_eq!(index.first_id, segment.entries[0].0, "{name}");
            assert_eq!(
                index.last_id,
                segment.entries[segment.entries.len() - 1].0,
                "{name}"
            );
        }
        assert_eq!(
            whole.release_segment().is_some(),
            !object.releases.is_empty(),
            "{name}"
        );
        assert_eq!(
            whole.marks_segment().is_some(),
            !object.marks.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn every_segment_decodes_alone_to_its_description() {
    for f in load() {
        let name = &f.desc.name;
        let object = f.desc.to_object().unwrap();
        let tail = tail_via_window(&f.bytes, TRAILER_LEN);
        let sequence = object.header.sequence;
        let mut regions = object.segments.iter();
        for index in &tail.segments {
            let seg = f
                .bytes
                .slice(index.offset as usize..index.range().end as usize);
            if index.is_release() {
                assert_eq!(
                    decode_releases(&seg, index, sequence).unwrap(),
                    object.releases,
                    "{name}"
                );
            } else if index.is_marks() {
                assert_eq!(
                    decode_marks(&seg, index, sequence).unwrap(),
                    object.marks,
                    "{name}"
                );
            } else {
                let expected = regions.next().unwrap();
                assert_eq!(index.region, expected.region, "{name}");
                assert_eq!(
                    decode_segment(&seg, index, sequence).unwrap(),
                    expected.entries,
                    "{name}"
                );
            }
        }
        assert!(
            regions.next().is_none(),
            "{name}: a described segment is not indexed"
        );
    }
}
