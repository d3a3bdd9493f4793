//! The `objwal` binary: the demo in both ack modes, the read-only tools on a
//! store written here by the library, damage detection, exit codes for bad
//! input, and reaching S3. Each test runs the built binary as a process.
//! Submodules: `bench`, `damage` (repair, a deleted object), `edges` (a
//! wrong prefix, a file for a directory, a junk file), `metrics` (the demo
//! twice on one store, and scraped while it runs), `tail` (following a
//! region as it lands, stopped by SIGINT).

use std::path::Path;
use std::process::{Command, Output};

use objwal::storage::FileStorage;
use objwal::{Config, Storage, Wal};

use crate::common::b;

fn objwal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_objwal"))
        .args(args)
        .output()
        .expect("the objwal binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Asserts the exit code, showing both streams when it is wrong.
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

/// A store under prefix "t" with region 1 = [hello, again], region 2 =
/// [world]; returns the id of "again".
async fn written_store(dir: &Path) -> u64 {
    let storage = Storage::new(FileStorage::open(dir).unwrap());
    let wal = Wal::open(storage, "t", Config::default()).await.unwrap();
    wal.append(vec![(1, b("hello")), (2, b("world"))])
        .await
        .unwrap();
    let again = wal.append(vec![(1, b("again"))]).await.unwrap()[0];
    wal.stop().await.unwrap();
    again
}

#[test]
fn the_demo_survives_a_kill_in_durable_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let o = objwal(&["demo", "--store", &store, "--seconds", "1", "--seed", "7"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for line in [
        "objects:",
        "acknowledged:",
        "replayed:",
        "open time:",
        "verdict:      OK",
        "handoff:      region 1 moved from node A to node B",
        "following:    region 2 moved while node A wrote it",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
}

#[test]
fn the_demo_survives_a_kill_in_enqueued_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let o = objwal(&[
        "demo",
        "--store",
        &store,
        "--seconds",
        "1",
        "--seed",
        "8",
        "--ack-mode",
        "enqueued",
    ]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for line in [
        "enqueued acks",
        "logged durable",
        "lost:",
        "verdict:      OK",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
}

#[tokio::test]
async fn inspect_verify_and_dump_show_what_the_library_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let again = written_store(dir.path()).await;
    let store = url(dir.path());

    let o = objwal(&["--prefix", "t", "inspect", &store]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("r1: 1 2.1..2.1, r2: 1 2.1..2.1"), "{out}");
    assert!(out.contains("r1: 1 3.1..3.1"), "{out}");
    let o = objwal(&["--prefix", "t", "inspect", "--json", &store]);
    assert_exit(&o, 0);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys: Vec<&str> = json["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"t/objects/00000000000000000002.wal"),
        "{keys:?}"
    );
    let regions = json["regions"].as_array().unwrap();
    let entries: Vec<(u64, u64)> = regions
        .iter()
        .map(|r| {
            (
                r["region"].as_u64().unwrap(),
                r["entries"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(entries, [(1, 2), (2, 1)]);
    assert_eq!(json["damaged"], 0);

    let o = objwal(&["--prefix", "t", "verify", &store]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("3 entries"), "{}", stdout(&o));
    assert!(stdout(&o).contains("0 damaged"), "{}", stdout(&o));
    // Issue 29, item 8: verify proves create-if-absent on a scratch key.
    assert!(
        stdout(&o).contains("create-if-absent: OK"),
        "{}",
        stdout(&o)
    );

    let o = objwal(&["--prefix", "t", "dump", &store, "--region", "1"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("\"hello\"") && out.contains("\"again\""),
        "{out}"
    );
    assert!(out.contains(&again.to_string()), "{out}");
    let from = again.to_string();
    let o = objwal(&[
        "--prefix", "t", "dump", &store, "--region", "1", "--from", &from,
    ]);
    assert!(!stdout(&o).contains("hello") && stdout(&o).contains("again"));
    // The id as the listings print it, SEQUENCE.POSITION, is accepted too.
    let dotted = objwal::id::Dotted(again).to_string();
    assert!(dotted.contains('.'), "{dotted}");
    let o = objwal(&[
        "--prefix", "t", "dump", &store, "--region", "1", "--from", &dotted,
    ]);
    assert_exit(&o, 0);
    assert!(
        !stdout(&o).contains("hello") && stdout(&o).contains("again"),
        "{}",
        stdout(&o)
    );
    let o = objwal(&[
        "--prefix", "t", "dump", &store, "--region", "1", "--from", "1.x",
    ]);
    assert_exit(&o, 2);
}

/// `dump --raw` frames each entry (id u64 LE, length u32 LE, payload), so
/// the payloads can be split again, whatever bytes they hold.
#[tokio::test]
async fn dump_raw_frames_each_entry_with_its_id_and_length() {
    let dir = tempfile::tempdir().unwrap();
    let again = written_store(dir.path()).await;
    let o = objwal(&[
        "--prefix",
        "t",
        "dump",
        &url(dir.path()),
        "--region",
        "1",
        "--raw",
    ]);
    assert_exit(&o, 0);
    let mut frames = Vec::new();
    let mut rest = o.stdout.as_slice();
    while !rest.is_empty() {
        let id = u64::from_le_bytes(rest[..8].try_into().unwrap());
        let len = u32::from_le_bytes(rest[8..12].try_into().unwrap()) as usize;
        frames.push((id, rest[12..12 + len].to_vec()));
        rest = &rest[12 + len..];
    }
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0].1, b"hello");
    assert_eq!(frames[1], (again, b"again".to_vec()));
    assert!(frames[0].0 < again);
}

#[tokio::test]
async fn verify_names_an_object_with_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let key = "t/objects/00000000000000000002.wal";
    let path = dir.path().join(key);
    let mut bytes = std::fs::read(&path).unwrap();
    // Inside the first segment (the header is 64 bytes).
    bytes[64 + 14] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let o = objwal(&["--prefix", "t", "verify", &url(dir.path())]);
    assert_exit(&o, 1);
    let out = stdout(&o);
    assert!(out.contains(&format!("DAMAGED {key}")), "{out}");
    assert!(out.contains("1 damaged"), "{out}");
}

#[tokio::test]
async fn bad_input_exits_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let store = url(dir.path());
    let cases: [(&[&str], &str); 6] = [
        (&["inspect", "ftp://somewhere"], "unknown scheme"),
        (
            &["verify", "file:///no/such/objwal/dir"],
            "no such directory",
        ),
        (&["demo", "--store", "memory://"], "outlives"),
        (
            &["--prefix", "t", "dump", &store, "--region", "99"],
            "region 99 has no entries",
        ),
        (
            &["--prefix", "t", "dump", &store, "--region", "one"],
            "--region",
        ),
        (
            &["bench", "--store", "memory://", "--flush-interval", "soon"],
            "flush_interval",
        ),
    ];
    for (args, message) in cases {
        let o = objwal(args);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains(message),
            "{args:?}: {message:?} missing from {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The binary reaches S3 (issue 13, item 1): a log the library wrote on the
/// loopback S3-protocol server is inspected and verified over `s3://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reaches_a_log_on_the_s3_test_server() {
    let endpoint = crate::common::s3_endpoint();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let store = format!(
        "s3://{}/cli/{}-{nanos}?endpoint={endpoint}&region=us-east-1",
        crate::common::S3_BUCKET,
        std::process::id()
    );
    for (k, v) in crate::common::s3_credentials() {
        std::env::set_var(k, v);
    }
    let wal = Wal::open(Storage::from_url(&store).unwrap(), "t", Config::default())
        .await
        .unwrap();
    wal.append(vec![(4, b("on s3"))]).await.unwrap();
    wal.stop().await.unwrap();
    let o = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_objwal"))
            .args(["--prefix", "t", "inspect", &store])
            .envs(crate::common::s3_credentials())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("r4: 1 2.1..2.1"), "{out}");
    assert!(out.contains("0 damaged"), "{out}");
}

mod adoption;
mod bench;
mod damage;
mod edges;
mod metrics;
mod tail;
