//! Generates the frozen format fixtures, once:
//!
//! ```text
//! cargo run --example make_fixtures -- compatibility/v1
//! ```
//!
//! Writes `NAME.wal` (the encoded object) and `NAME.json` (its description,
//! see `desc.rs`) for every fixture below into the given directory. It
//! refuses to run if any of those files already exists: fixtures are frozen,
//! added but never regenerated. To add a fixture, add it to `fixtures()` and
//! run the command against a fresh directory, then copy the new pair over.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use bytes::Bytes;
use objwal::format::{
    decode, encode, entry_id, Header, Link, MarkRecord, Object, ReleaseRecord, Segment, JUMP,
    MAX_POSITION, MAX_SEQUENCE,
};

#[path = "desc.rs"]
mod desc;

use desc::{pattern, FixtureDesc};

fn header(sequence: u64, epoch: u64, link: Option<(u64, u64)>, reclaim_boundary: u64) -> Header {
    Header {
        sequence,
        epoch,
        link: link.map(|(sequence, epoch)| Link { sequence, epoch }),
        reclaim_boundary,
    }
}

fn segment(sequence: u64, region: u64, entries: &[(u64, &[u8])]) -> Segment {
    Segment {
        region,
        entries: entries
            .iter()
            .map(|(position, data)| (entry_id(sequence, *position), Bytes::copy_from_slice(data)))
            .collect(),
    }
}

fn release(region: u64, released_through: u64) -> ReleaseRecord {
    ReleaseRecord {
        region,
        released_through,
    }
}

/// Every fixture: name, what it pins, the object.
fn fixtures() -> Vec<(&'static str, &'static str, Object)> {
    let binary: Vec<u8> = (0u8..=255).collect();
    let large = pattern(1 << 20);
    let high = MAX_SEQUENCE - 1;
    vec![
        (
            "empty_start",
            "A start object: no segments, no link, boundary 0 (header, empty footer, trailer: 144 bytes).",
            Object {
                header: header(1, 1, None, 0),
                segments: vec![],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
        (
            "one_region",
            "One region with three entries, one of them empty.",
            Object {
                header: header(2, 1, Some((1, 1)), 0),
                segments: vec![segment(2, 7, &[(1, b"hello"), (2, b""), (3, b"world")])],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
        (
            "many_regions",
            "Ten regions from 0 to u64::MAX - 1, gaps in positions, text and binary payloads.",
            Object {
                header: header(3, 1, Some((2, 1)), 1),
                segments: vec![
                    segment(3, 0, &[(1, b"region zero")]),
                    segment(3, 1, &[(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")]),
                    segment(3, 2, &[(1, &binary)]),
                    segment(3, 3, &[(5, b"gap before"), (9, b"gap again")]),
                    segment(3, 10, &[(1, b"\x00\x01\x02")]),
                    segment(3, 100, &[(1, b"")]),
                    segment(3, 1 << 32, &[(2, b"big region")]),
                    segment(3, 1 << 63, &[(1, b"x"), (MAX_POSITION, b"last position")]),
                    segment(3, u64::MAX - 2, &[(1, b"near the end")]),
                    segment(3, u64::MAX - 1, &[(1, b"largest ordinary region")]),
                ],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
        (
            "large_entry_1mib",
            "One 1 MiB entry (a generated pattern) followed by a small one, plus a second region.",
            Object {
                header: header(4, 2, Some((3, 1)), 2),
                segments: vec![
                    segment(4, 1, &[(1, &large), (2, b"after the large entry")]),
                    segment(4, 2, &[(1, b"small")]),
                ],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
        (
            "regions_and_releases",
            "Two regions and a release segment with two records.",
            Object {
                header: header(5, 2, Some((4, 2)), 3),
                segments: vec![
                    segment(5, 1, &[(1, b"one"), (2, b"two")]),
                    segment(5, 4, &[(1, b"four")]),
                ],
                marks: Vec::new(),
                releases: vec![release(3, entry_id(4, 2)), release(9, entry_id(2, 1))],
            },
        ),
        (
            "releases_only",
            "A release segment alone: three records, one with released_through 0 (a region that never had an entry).",
            Object {
                header: header(6, 2, Some((5, 2)), 4),
                segments: vec![],
                marks: Vec::new(),
                releases: vec![release(0, 0), release(7, entry_id(3, 9)), release(u64::MAX - 1, entry_id(5, 1))],
            },
        ),
        (
            "high_sequence",
            "Sequence 2^44 - 2: ids near 2^64, positions 1, 2 and 2^20 - 1.",
            Object {
                header: header(high, u64::MAX, Some((high - 1, u64::MAX - 1)), high - 5),
                segments: vec![segment(high, 5, &[(1, b"first"), (2, b"second"), (MAX_POSITION, b"last")])],
                marks: Vec::new(),
                releases: vec![release(6, entry_id(high - 1, 3))],
            },
        ),
        (
            "max_sequence",
            "Sequence 2^44 - 1, the largest: its last id is u64::MAX.",
            Object {
                header: header(MAX_SEQUENCE, 9, Some((0, 0)), MAX_SEQUENCE),
                segments: vec![segment(MAX_SEQUENCE, 1, &[(MAX_POSITION, b"id u64::MAX")])],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
        (
            "link_and_boundary",
            "A chain link to an earlier epoch and a non-zero reclaim boundary.",
            Object {
                header: header(1000, 7, Some((998, 6)), 990),
                segments: vec![segment(1000, 42, &[(1, b"linked"), (2, b"bounded")])],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
        (
            "marks_and_jump",
            "Flush marks of two regions and the writer's jump in the marks segment (region \
             2^64 - 256), in region order before a region above it, and a release segment.",
            Object {
                header: header(77, 3, Some((76, 3)), 70),
                segments: vec![
                    segment(77, 5, &[(1, b"kept")]),
                    segment(77, u64::MAX - 2, &[(1, b"a high region")]),
                ],
                marks: vec![
                    mark(5, entry_id(70, 9)),
                    mark(9, entry_id(77, 1)),
                    mark(JUMP, entry_id(5000, 1)),
                ],
                releases: vec![release(8, entry_id(60, 2))],
            },
        ),
        (
            "settle_marker",
            "A settle marker: empty, its link names epoch 0 (no writer has it), so it \
             completes no chain.",
            Object {
                header: header(12, 4, Some((11, 0)), 0),
                segments: vec![],
                marks: Vec::new(),
                releases: vec![],
            },
        ),
    ]
}

fn mark(region: u64, watermark: u64) -> MarkRecord {
    MarkRecord { region, watermark }
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: make_fixtures <directory, e.g. compatibility/v1>")?,
    );
    let fixtures = fixtures();
    for (name, _, _) in &fixtures {
        for ext in ["wal", "json"] {
            let path = dir.join(format!("{name}.{ext}"));
            if path.exists() {
                return Err(format!(
                    "{} exists: fixtures are frozen, never regenerated",
                    path.display()
                )
                .into());
            }
        }
    }
    std::fs::create_dir_all(&dir)?;
    let mut out = std::io::stdout().lock();
    for (name, description, object) in &fixtures {
        let bytes = encode(object)?;
        if decode(&bytes)? != *object {
            return Err(format!("{name}: does not round-trip").into());
        }
        let desc = FixtureDesc::of(name, description, object, &bytes);
        if desc.to_object()? != *object {
            return Err(format!("{name}: description does not round-trip").into());
        }
        std::fs::write(dir.join(format!("{name}.wal")), &bytes)?;
        let json = serde_json::to_string_pretty(&desc)? + "\n";
        std::fs::write(dir.join(format!("{name}.json")), json)?;
        writeln!(out, "{name}: {} bytes", bytes.len())?;
    }
    Ok(())
}
