//! Writes the seed corpus of every fuzz target under `fuzz/corpus/<target>/`
//! from the frozen fixtures in `compatibility/v1/` (each target gets the
//! fixtures in the shape its input takes), plus a small real history for the
//! recovery target and a few URLs and prefixes. Existing files are
//! overwritten; the fuzzers add their own files beside them.
//!
//! Fixtures larger than `MAX_SEED` are left out of the object targets: the
//! runs cap inputs at that size (`-max_len`) so that executions stay fast;
//! their tails still seed `decode_tail`, `decode_footer` and
//! `decode_segment`.

use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use objwal::format::{
    decode_tail, encode, entry_id, Header, Link, Object, ReleaseRecord, Segment, TailDecode,
    RELEASE_REGION,
};

/// The largest seed of a target whose input is a whole object.
const MAX_SEED: usize = 64 * 1024;

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).expect("the corpus directory is created");
    fs::write(dir.join(name), bytes).expect("a seed is written");
}

fn le(parts: &[u64]) -> Vec<u8> {
    parts.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A three-object history: a start object, a batch of two regions, and a
/// batch with a release record, linked as a writer links them.
fn history() -> Vec<Bytes> {
    let header = |sequence: u64, link: Option<u64>| Header {
        sequence,
        epoch: 1,
        link: link.map(|sequence| Link { sequence, epoch: 1 }),
        reclaim_boundary: 1,
    };
    let entry = |seq: u64, pos: u64, text: &'static str| (entry_id(seq, pos), Bytes::from(text));
    let objects = [
        Object {
            header: header(1, None),
            segments: vec![],
            marks: Vec::new(),
            releases: vec![],
        },
        Object {
            header: header(2, Some(1)),
            segments: vec![
                Segment {
                    region: 1,
                    entries: vec![entry(2, 1, "a"), entry(2, 2, "bb")],
                },
                Segment {
                    region: 7,
                    entries: vec![entry(2, 1, "c")],
                },
            ],
            marks: Vec::new(),
            releases: vec![],
        },
        Object {
            header: header(3, Some(2)),
            segments: vec![Segment {
                region: 1,
                entries: vec![entry(3, 1, "d")],
            }],
            marks: Vec::new(),
            releases: vec![ReleaseRecord {
                region: 7,
                released_through: entry_id(2, 1),
            }],
        },
    ];
    objects
        .iter()
        .map(|o| encode(o).expect("the history encodes"))
        .collect()
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let corpus = root.join("corpus");
    let fixtures = root.join("../compatibility/v1");
    let mut names: Vec<PathBuf> = fs::read_dir(&fixtures)
        .expect("compatibility/v1 is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    names.sort();
    let mut all_small = Vec::new();
    for path in &names {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a fixture name")
            .to_owned();
        let object = fs::read(path).expect("a fixture is readable");
        let len = object.len() as u64;
        if object.len() <= MAX_SEED {
            for target in ["decode", "decode_header", "recovery"] {
                write(&corpus.join(target), &name, &object);
            }
            all_small.extend_from_slice(&object);
            // decode_tail: `extra | window`; the whole object, then the trailer alone.
            let mut whole = le(&[0]);
            whole.extend_from_slice(&object);
            write(&corpus.join("decode_tail"), &name, &whole);
        }
        let mut trailer_only = le(&[len - 80]);
        trailer_only.extend_from_slice(&object[object.len() - 80..]);
        write(
            &corpus.join("decode_tail"),
            &format!("{name}-trailer"),
            &trailer_only,
        );
        let trailer = match decode_tail(&object, len).expect("a fixture decodes") {
            TailDecode::Complete(tail) => tail,
            TailDecode::NeedFooter { .. } => unreachable!("the whole object is the window"),
        };
        let t = &trailer.trailer;
        let footer = &object[t.footer_offset as usize..t.trailer_offset() as usize];
        let mut head = le(&[t.footer_offset, len]);
        head.extend_from_slice(&t.segment_count.to_le_bytes());
        head.extend_from_slice(&t.footer_crc.to_le_bytes());
        head.extend_from_slice(&le(&[t.header.sequence]));
        head.push(0);
        head.extend_from_slice(footer);
        write(&corpus.join("decode_footer"), &name, &head);
        for (i, s) in trailer.segments.iter().enumerate() {
            let mut input = le(&[s.region, s.first_id, s.last_id, s.offset, s.len]);
            input.extend_from_slice(&s.count.to_le_bytes());
            input.extend_from_slice(&s.crc.to_le_bytes());
            input.extend_from_slice(&le(&[t.header.sequence << 20]));
            input.push(if s.region == RELEASE_REGION { 2 } else { 0 });
            let bytes = &object[s.offset as usize..(s.offset + s.len) as usize];
            if bytes.len() <= MAX_SEED {
                input.extend_from_slice(bytes);
                write(
                    &corpus.join("decode_segment"),
                    &format!("{name}-{i}"),
                    &input,
                );
            }
        }
    }
    write(&corpus.join("recovery"), "all-fixtures", &all_small);
    let history: Vec<u8> = history().iter().flat_map(|b| b.to_vec()).collect();
    write(&corpus.join("recovery"), "history", &history);
    for (i, url) in [
        "memory://",
        "file://wal",
        "file:///abs/wal",
        "file:///a%20b/c",
        "s3://bucket/root?endpoint=http://127.0.0.1:9000&region=us-east-1",
        "gs://bucket/some/root",
        "azblob://container/root?account=acct&endpoint=http://127.0.0.1:10000",
        "s3://bucket/a%2Fb?region=eu",
    ]
    .iter()
    .enumerate()
    {
        write(&corpus.join("url"), &format!("seed-{i}"), url.as_bytes());
    }
    for (i, s) in [
        "node-7",
        "a/b/c",
        "t/objects/00000000000000000042.wal",
        "t/fences/00000000000000000007.fence",
        "weird name/é/x.y",
        "n/objects/x/objects/00000000000000000001.wal",
    ]
    .iter()
    .enumerate()
    {
        write(&corpus.join("prefix"), &format!("seed-{i}"), s.as_bytes());
    }
    println!("seed corpora written under {}", corpus.display());
}
