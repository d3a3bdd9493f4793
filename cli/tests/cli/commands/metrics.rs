//! The demo as a process: run twice on one store, and scraped over HTTP
//! while it runs.

use std::process::Command;

use super::*;

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

/// Starts `objwal ARGS --metrics-addr 127.0.0.1:0` and reads its stdout up
/// to the `metrics:` line: the process, the rest of its stdout, and the
/// bound `HOST:PORT`.
fn serving(
    args: &[&str],
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
    String,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_objwal"))
        .args(args)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = line_starting_with(&mut out, "metrics:");
    let addr = line
        .split_whitespace()
        .nth(1)
        .and_then(|u| u.strip_prefix("http://"))
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    (child, out, addr)
}

/// Scrapes `addr` until the text holds `needle`; fails after `within`.
fn scrape_until(addr: &str, needle: &str, within: std::time::Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    loop {
        let (status, body) = http_get(addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        if body.contains(needle) {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{needle:?} not scraped within {within:?}:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits for the process and asserts it succeeded; returns the rest of
/// its stdout.
fn succeeded(mut child: std::process::Child, mut out: impl std::io::Read) -> String {
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{rest}\n{err}");
    rest
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
    let (demo, out, addr) = serving(&["demo", "--store", &store, "--seconds", "3", "--seed", "5"]);
    // The writer appends from its first moment; its first objects land
    // within a few flush intervals (10 ms). The kill comes 1.2 s at the
    // earliest: poll for the first created object well before that.
    let body = scrape_until(
        &addr,
        "objwal_created_objects_total{prefix=\"objwal\"}",
        std::time::Duration::from_secs(1),
    );
    for needle in [
        "# TYPE objwal_created_objects_total counter",
        "# HELP objwal_created_objects_total objects created and made durable",
        "# TYPE objwal_indexed_objects gauge",
        "# HELP objwal_append_ack_seconds append arrival to acknowledgement",
        "objwal_recovery_seconds_count{prefix=\"objwal\"} 1",
    ] {
        assert!(body.contains(needle), "{needle:?} missing from:\n{body}");
    }
    let (status, _) = http_get(&addr, "/nothing-here");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let rest = succeeded(demo, out);
    assert!(rest.contains("verdict:      OK"), "{rest}");
}

/// `objwal bench --metrics-addr` serves the bench's own store metrics while
/// it runs; the address is its first line.
#[test]
fn the_bench_serves_metrics_to_a_scrape_while_it_runs() {
    let args = [
        "bench",
        "--store",
        "memory://",
        "--seconds",
        "3",
        "--rounds",
        "1",
    ];
    let (bench, out, addr) = serving(&args);
    // The round appends for 3 s; its first objects land within milliseconds.
    let body = scrape_until(
        &addr,
        "objwal_created_objects_total{prefix=\"objwal/bench-",
        std::time::Duration::from_secs(2),
    );
    assert!(
        body.contains("# TYPE objwal_append_ack_seconds summary"),
        "{body}"
    );
    succeeded(bench, out);
}
