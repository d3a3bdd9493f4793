//! The `objwal` binary: the demo in both ack modes, the read-only tools on a
//! store written here by the library, damage detection, exit codes for bad
//! input, and a short bench. Each test runs the built binary as a process.

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
    let o = objwal(&["--prefix", "t", "dump", &store, "--region", "1", "--raw"]);
    assert_exit(&o, 0);
    assert_eq!(o.stdout, b"helloagain");
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

#[test]
fn bench_runs_briefly_and_prints_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let o = objwal(&[
        "bench",
        "--store",
        &store,
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--flush-interval",
        "5ms",
    ]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for figure in [
        "CPUs (nproc)",
        "flush_interval 5ms",
        "appends/s",
        "MiB/s",
        "latency p99 ms",
        "objects/s",
        "requests per GiB",
        "baseline:",
    ] {
        assert!(out.contains(figure), "{figure:?} missing from:\n{out}");
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

/// Running the demo twice on one store checks only each run's own entries:
/// the second run counts the first run's entries as earlier content instead
/// of reporting them "replayed twice" (issue 13: the false alarm).
#[test]
fn the_demo_twice_on_one_store_checks_only_its_own_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let first = objwal(&["demo", "--store", &store, "--seconds", "1", "--seed", "3"]);
    assert_exit(&first, 0);
    assert!(!stdout(&first).contains("earlier"), "{}", stdout(&first));
    // The same seed: the same writers and counters, so only the run tag and
    // the earlier-content boundary keep the two runs apart.
    let second = objwal(&["demo", "--store", &store, "--seconds", "1", "--seed", "3"]);
    assert_exit(&second, 0);
    let out = stdout(&second);
    assert!(
        out.contains("earlier:      the prefix already holds"),
        "{out}"
    );
    assert!(out.contains("of earlier runs, not checked"), "{out}");
    assert!(out.contains("verdict:      OK"), "{out}");
    assert!(!out.contains("twice"), "{out}");
}

/// Reads lines of `reader` until one starts with `prefix`; panics (with
/// what was read) if the stream ends first.
fn line_starting_with(reader: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).unwrap();
        assert!(
            n > 0,
            "no line starting with {prefix:?}; output was:\n{seen}"
        );
        if line.starts_with(prefix) {
            return line;
        }
        seen.push_str(&line);
    }
}

/// One HTTP GET over a plain TCP stream: (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

/// `objwal demo --metrics-addr 127.0.0.1:0` serves the writer's metrics as
/// Prometheus text while it runs: the `metrics:` line names the bound
/// address once the writer has opened its store, and a scrape finds every
/// store metric described (help and type, which the library does by
/// itself) and counted under the store's prefix label.
#[test]
fn the_demo_serves_metrics_to_a_scrape_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let mut demo = Command::new(env!("CARGO_BIN_EXE_objwal"))
        .args(["demo", "--store", &store, "--seconds", "3", "--seed", "5"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(demo.stdout.take().unwrap());
    let line = line_starting_with(&mut out, "metrics:");
    let url = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"));
    // The writer appends from its first moment; its first objects land
    // within a few flush intervals (10 ms). The kill comes 1.2 s at the
    // earliest: poll for the first created object well before that.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let body = loop {
        let (status, body) = http_get(addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        if body.contains("objwal_created_objects_total{prefix=\"objwal\"}") {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no created object counted within 1 s:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for needle in [
        "# TYPE objwal_created_objects_total counter",
        "# HELP objwal_created_objects_total objects created and made durable",
        "# TYPE objwal_indexed_objects gauge",
        "# HELP objwal_append_ack_seconds append arrival to acknowledgement",
        "objwal_recovery_seconds_count{prefix=\"objwal\"} 1",
    ] {
        assert!(body.contains(needle), "{needle:?} missing from:\n{body}");
    }
    let (status, _) = http_get(addr, "/nothing-here");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = demo.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{rest}\n{err}");
    assert!(rest.contains("verdict:      OK"), "{rest}");
}
