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

/// `objwal bench --metrics-addr` serves the bench's own store metrics while
/// it runs; the address is its first line.
#[test]
fn the_bench_serves_metrics_to_a_scrape_while_it_runs() {
    let mut bench = Command::new(env!("CARGO_BIN_EXE_objwal"))
        .args([
            "bench",
            "--store",
            "memory://",
            "--seconds",
            "3",
            "--rounds",
            "1",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(bench.stdout.take().unwrap());
    let line = line_starting_with(&mut out, "metrics: http://");
    let addr = line
        .trim()
        .strip_prefix("metrics: http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    // The round appends for 3 s; its first objects land within milliseconds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let body = loop {
        let (status, body) = http_get(&addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        if body.contains("objwal_created_objects_total{prefix=\"objwal/bench-") {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no created object counted within 2 s:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(
        body.contains("# TYPE objwal_append_ack_seconds summary"),
        "{body}"
    );
    let status = bench.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut bench.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
}
