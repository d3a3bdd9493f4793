//! The soak's bounded form: `objwal soak` as a process for 60 seconds on a
//! local directory and on the S3-protocol test server, mixed load with a
//! transient fault injected every 250 to 750 ms, the store opened, loaded,
//! stopped and dropped every 10 s (durable and enqueued in turn). The
//! process checks its own resident memory against the configured bounds,
//! and its file descriptors and tokio tasks after every stop; this test
//! checks its verdict and that every round did work under faults.
//!
//! The long form is a documented command in RELIABILITY.md.

use std::process::Command;

fn soak(store: &str, envs: &[(&str, &str)]) {
    let o = Command::new(env!("CARGO_BIN_EXE_objwal"))
        .args(["soak", "--store", store, "--seconds", "60", "--round", "10"])
        .envs(envs.iter().copied())
        .output()
        .expect("the objwal binary runs");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let tail: String = err.lines().rev().take(30).collect::<Vec<_>>().join("\n");
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{out}\nstderr (last lines, reversed):\n{tail}"
    );
    assert!(out.contains("verdict:      OK"), "{out}");
    let rounds: Vec<&str> = out.lines().filter(|l| l.starts_with("round ")).collect();
    assert_eq!(rounds.len(), 6, "{out}");
    for round in rounds {
        // "N entries (...), ...; F faults, ..."
        let number = |after: &str| -> u64 {
            let head = round.split(after).next().unwrap_or_default();
            let word = head
                .split([' ', '(', ':'])
                .rfind(|w| !w.is_empty())
                .unwrap_or("0");
            word.parse().unwrap_or(0)
        };
        assert!(number(" entries") > 0, "no entries appended: {round}");
        assert!(number(" faults") > 0, "no faults injected: {round}");
    }
}

#[test]
fn soak_on_a_directory_for_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    soak(&format!("file://{}", dir.path().display()), &[]);
}

#[test]
fn soak_on_s3_for_a_minute() {
    let store = crate::crash_gate::s3_store("soak");
    soak(&store, &crate::common::s3_credentials());
}
