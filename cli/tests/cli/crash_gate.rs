//! The crash gate's bounded form: `objwal crash-gate` as a process, 20
//! cycles (a life SIGKILLed at a random moment, reopened, checked, on one
//! prefix whose history accumulates) per ack mode and backend: a local
//! directory, and the S3-protocol test server on loopback; and on a
//! directory with `--faults all`, 27 cycles per ack mode (each life arms
//! one kind of storage fault, the next kind each life: three lives per
//! kind); and on a directory with `--power-loss`, 20 cycles per ack mode
//! (each kill a power loss; the lives arm the faults that take the
//! directory backend through "already exists", and every other life opens
//! the prefix a second time). Every reopen also compares bulk
//! replays with the per-region reads. Each run draws a new seed and prints
//! it; a failing run's output (asserted below) names it, and
//! `objwal crash-gate --seed N ...` replays its choices.
//!
//! The long forms (500 cycles; 100 per fault kind and mode) are documented
//! commands in RELIABILITY.md.

use std::process::{Command, Output};

const CYCLES: &str = "20";
/// Cycles with `--faults all`: three lives for each of the nine kinds.
const FAULT_CYCLES: &str = "27";
/// The longest life, in seconds (the long form's default is 1).
const LIFE: &str = "0.5";
/// Regions on a directory (the long form's default).
const REGIONS: &str = "32";
/// Regions on the S3 test server, whose range reads are slow: the reopen
/// reads every region's segment of every object, one request each.
const S3_REGIONS: &str = "8";

fn gate(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_objwal"))
        .arg("crash-gate")
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("the objwal binary runs")
}

/// The number on the summary line starting with `label`.
fn figure(out: &str, label: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{out}"));
    let rest = line.trim_start_matches(label).trim_start();
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number on {line:?}"))
}

/// Runs the bounded gate on `store` and checks its verdict and that the
/// history it built has every ingredient: acknowledgements, watermarks,
/// releases and flushes, and bulk replays compared; returns its output.
fn passes(store: &str, ack_mode: &str, regions: &str, envs: &[(&str, &str)]) -> String {
    passes_with(store, ack_mode, regions, "none", CYCLES, envs, &[])
}

fn passes_with(
    store: &str,
    ack_mode: &str,
    regions: &str,
    faults: &str,
    cycles: &str,
    envs: &[(&str, &str)],
    extra: &[&str],
) -> String {
    let mut args = vec![
        "--store",
        store,
        "--cycles",
        cycles,
        "--ack-mode",
        ack_mode,
        "--life",
        LIFE,
        "--regions",
        regions,
        "--faults",
        faults,
    ];
    args.extend_from_slice(extra);
    let o = gate(&args, envs);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(figure(&out, "cycles:").to_string(), cycles, "{out}");
    for zero in [
        "lost:",
        "duplicated:",
        "resurrected:",
        "misordered:",
        "corrupt:",
        "replay differs:",
    ] {
        assert_eq!(figure(&out, zero), 0, "{zero} in:\n{out}");
    }
    assert!(out.contains("verdict:      OK"), "{out}");
    let acknowledged = out
        .lines()
        .find(|l| l.starts_with("acknowledged:"))
        .unwrap_or_default();
    let numbers: Vec<u64> = acknowledged
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    // entries, promised, watermarks, releases, flushes
    assert_eq!(numbers.len(), 5, "{acknowledged}");
    assert!(
        numbers.iter().all(|n| *n > 0),
        "an ingredient is missing: {acknowledged}"
    );
    assert!(out.contains("recovery:     p50"), "{out}");
    assert!(figure(&out, "replays compared:") > 0, "{out}");
    out.into_owned()
}

fn file_store(dir: &tempfile::TempDir) -> String {
    format!("file://{}", dir.path().display())
}

#[test]
fn crash_gate_on_a_directory_in_durable_mode() {
    let dir = tempfile::tempdir().unwrap();
    passes(&file_store(&dir), "durable", REGIONS, &[]);
}

#[test]
fn crash_gate_on_a_directory_in_enqueued_mode() {
    let dir = tempfile::tempdir().unwrap();
    passes(&file_store(&dir), "enqueued", REGIONS, &[]);
}

/// With `--power-loss` every kill drops what the directory backend had not
/// made durable (rfcs/0002's fsync order is what keeps the acknowledged
/// entries): the check holds and the losses were applied at each kill.
fn passes_a_power_loss_at_each_kill(ack_mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = passes_with(
        &file_store(&dir),
        ack_mode,
        REGIONS,
        "none",
        CYCLES,
        &[],
        &["--power-loss"],
    );
    assert!(out.contains("power loss at each kill"), "{out}");
    assert!(
        figure(&out, "power loss:") > 0,
        "no kill was a power loss:\n{out}"
    );
    // The directory backend's "already exists" paths (issue 29 item 9):
    // repeats and voids of creates whose answer and read-back were lost,
    // hedges of creates whose directory fsync was slow, the walks of a
    // second opener within a life.
    for kind in ["slow-fsyncs ", "unread-landings "] {
        assert!(number_after(&out, kind) > 0, "no {kind}fault armed:\n{out}");
    }
    assert!(
        number_before(&out, " second openers within a life") > 0,
        "no second opener:\n{out}"
    );
    assert!(
        number_after(&out, "crash_gate_exists_total ") > 0,
        "no create met an existing key:\n{out}"
    );
}

/// The number right after the first `label` in `out`.
fn number_after(out: &str, label: &str) -> u64 {
    let at = out
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{out}"));
    out[at + label.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?}"))
}

/// The number right before the first `label` in `out`.
fn number_before(out: &str, label: &str) -> u64 {
    let at = out
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{out}"));
    let digits: String = out[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number before {label:?}"))
}

#[test]
fn crash_gate_with_a_power_loss_at_each_kill_in_durable_mode() {
    passes_a_power_loss_at_each_kill("durable");
}

#[test]
fn crash_gate_with_a_power_loss_at_each_kill_in_enqueued_mode() {
    passes_a_power_loss_at_each_kill("enqueued");
}

#[test]
fn crash_gate_refuses_a_power_loss_on_a_store_that_is_not_a_directory() {
    let o = gate(
        &[
            "--store",
            "s3://objwal-test/power-loss?endpoint=http://127.0.0.1:9&region=us-east-1",
            "--cycles",
            "1",
            "--power-loss",
        ],
        &crate::common::s3_credentials(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not a file:// store"), "{err}");
}

/// With faults: `--faults all` over [`FAULT_CYCLES`] lives gives each of
/// the nine kinds three lives; the lives armed faults, every kind is named
/// in the per-path counts, and the check held. (A count per kind is not
/// asserted: a life killed before its first arming arms nothing.)
fn passes_with_faults(ack_mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = passes_with(
        &file_store(&dir),
        ack_mode,
        REGIONS,
        "all",
        FAULT_CYCLES,
        &[],
        &[],
    );
    assert!(out.contains("faults all"), "{out}");
    assert!(figure(&out, "faults armed:") > 0, "{out}");
    let armed = out
        .lines()
        .find(|l| l.starts_with("faults armed:"))
        .unwrap_or_default();
    for kind in [
        "failed-creates",
        "phantom-exists",
        "lost-responses",
        "failed-reads",
        "corrupted-reads",
        "failed-deletes",
        "failed-lists",
        "kept-releases",
        "stalls",
    ] {
        assert!(armed.contains(kind), "{kind} is not counted: {armed}");
    }
    for path in [
        "appends failed:",
        "releases kept:",
        "lives:",
        "store counters:",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(path)),
            "no {path:?} in:\n{out}"
        );
    }
}

#[test]
fn crash_gate_with_faults_on_a_directory_in_durable_mode() {
    passes_with_faults("durable");
}

#[test]
fn crash_gate_with_faults_on_a_directory_in_enqueued_mode() {
    passes_with_faults("enqueued");
}

/// A store URL on the S3 test server, under a root no other run uses.
pub fn s3_store(name: &str) -> String {
    format!(
        "s3://{}/{}?endpoint={}&region=us-east-1",
        crate::common::S3_BUCKET,
        crate::common::unique_root(name),
        crate::common::s3_endpoint()
    )
}

#[test]
fn crash_gate_on_s3_in_durable_mode() {
    passes(
        &s3_store("durable"),
        "durable",
        S3_REGIONS,
        &crate::common::s3_credentials(),
    );
}

#[test]
fn crash_gate_on_s3_in_enqueued_mode() {
    passes(
        &s3_store("enqueued"),
        "enqueued",
        S3_REGIONS,
        &crate::common::s3_credentials(),
    );
}

#[test]
fn crash_gate_refuses_a_prefix_in_use_and_a_store_that_dies_with_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("objwal/objects")).unwrap();
    std::fs::write(dir.path().join("objwal/objects/junk"), b"x").unwrap();
    let o = gate(&["--store", &file_store(&dir), "--cycles", "1"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not empty"), "{err}");
    let o = gate(&["--store", "memory://", "--cycles", "1"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("outlives"), "{err}");
}
