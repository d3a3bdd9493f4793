//! `objwal bench`: its figures, its baseline column, ratios only where they
//! mean something, and a store left as the bench found it.

use super::*;

/// The row `name` of bench's summary table: (bench, baseline, ratio).
fn table_row(out: &str, name: &str) -> (String, String, String) {
    let line = out
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{out}"));
    let cells: Vec<&str> = line[name.len()..].split_whitespace().collect();
    assert_eq!(cells.len(), 3, "{line}");
    (cells[0].into(), cells[1].into(), cells[2].into())
}

/// The `name` figure of the `baseline:` line (`p99 1.234 ms` gives "1.234").
fn baseline_figure(out: &str, name: &str) -> String {
    let line = out.lines().find(|l| l.starts_with("baseline:")).unwrap();
    let after = line
        .split_once(&format!(" {name} "))
        .unwrap_or_else(|| panic!("{line}"))
        .1;
    after.split_whitespace().next().unwrap().to_owned()
}

/// The bench on a directory: its figures, the baseline's own percentiles in
/// the baseline column (not p50 four times), ratios, and afterwards the
/// directory as empty as it was (no objects, fences or folders left).
#[test]
fn bench_prints_its_figures_and_leaves_the_store_as_it_found_it() {
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
    for (row, figure) in [
        ("latency p50 ms", "p50"),
        ("latency p90 ms", "p90"),
        ("latency p99 ms", "p99"),
        ("latency max ms", "max"),
    ] {
        let (_, base, ratio) = table_row(&out, row);
        assert_eq!(base, baseline_figure(&out, figure), "{row}:\n{out}");
        assert!(ratio.ends_with('x'), "{row}: {ratio}");
    }
    assert_eq!(table_row(&out, "median object bytes").2, "-");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the bench left {left:?}");
}

/// On memory:// the baseline costs next to nothing: no ratio is shown. A
/// directory that does not exist is refused, not created.
#[test]
fn bench_shows_no_ratios_on_memory_and_never_creates_the_store_root() {
    let o = objwal(&[
        "bench",
        "--store",
        "memory://",
        "--seconds",
        "0.3",
        "--rounds",
        "1",
    ]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for row in ["MiB/s", "latency p50 ms", "latency max ms", "objects/s"] {
        let (_, base, ratio) = table_row(&out, row);
        assert_ne!(base, "-", "{row}: the baseline's own figure is shown");
        assert_eq!(ratio, "-", "{row}:\n{out}");
    }
    assert!(out.contains("no ratios"), "{out}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-yet");
    let o = objwal(&["bench", "--store", &url(&missing), "--seconds", "0.3"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("no such directory"), "{}", stderr(&o));
    assert!(!missing.exists(), "the bench created the store root");
}

/// The budget of early seals in effect is printed: a local directory's
/// (unlimited; the bench's own wrapper once hid it behind a remote store's
/// budget), a remote one's when `--put-latency`/`--get-latency` model a
/// remote store, and `--early-seals` overrides either. The baseline then
/// includes the delays.
#[test]
fn bench_prints_the_early_seal_budget_it_runs_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let common = [
        "bench",
        "--store",
        &store,
        "--seconds",
        "0.3",
        "--rounds",
        "1",
    ];
    let o = objwal(&common);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("early seals: unlimited (auto"), "{out}");
    assert!(!out.contains("latency:"), "{out}");

    let mut slow = common.to_vec();
    slow.extend([
        "--put-latency",
        "2ms",
        "--get-latency",
        "3ms",
        "--flush-interval",
        "50ms",
    ]);
    let o = objwal(&slow);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("latency: 2ms per create, 3ms per read"),
        "{out}"
    );
    assert!(out.contains("early seals: 20.0 per second (auto"), "{out}");
    let (_, base, _) = table_row(&out, "latency p50 ms");
    assert!(
        base.parse::<f64>().unwrap() >= 2.0,
        "a create waits its latency\n{out}"
    );
    let (per_object, _, _) = table_row(&out, "requests per object");
    assert!(
        per_object.parse::<f64>().unwrap() < 1.5,
        "an acknowledgement costs its create and no more: {per_object}\n{out}"
    );

    slow.extend(["--early-seals", "off"]);
    let o = objwal(&slow);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("early seals: off"), "{}", stdout(&o));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the bench left {left:?}");
}

/// Issue 21, item 6: on a store billed per request a lone writer waits for
/// the budget's next token, about a flush interval, against a create of a
/// few ms; the bench says that the budget, not the store, set the
/// latency, and which knob trades it. Without a budget it says nothing.
#[test]
fn bench_says_when_the_budget_not_the_store_set_its_latency() {
    let dir = tempfile::tempdir().unwrap();
    let store = url(dir.path());
    let mut args = vec![
        "bench",
        "--store",
        &store,
        "--seconds",
        "1",
        "--rounds",
        "1",
        "--writers",
        "1",
        "--put-latency",
        "2ms",
        "--get-latency",
        "3ms",
        "--flush-interval",
        "50ms",
    ];
    let o = objwal(&args);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let note = out
        .lines()
        .find(|l| l.starts_with("note:"))
        .unwrap_or_else(|| panic!("no note in:\n{out}"));
    assert!(
        note.contains("the early-seal budget (auto")
            && note.contains("not the store, set this latency")
            && note.contains("against a budget of 20.0/s")
            && note.contains("--early-seals unlimited"),
        "{note}"
    );

    args.extend(["--early-seals", "unlimited"]);
    let o = objwal(&args);
    assert_exit(&o, 0);
    assert!(!stdout(&o).contains("note:"), "{}", stdout(&o));
}

/// `--config FILE` is the base of a command's configuration: its values
/// show in the bench's config line, the command's own options override it,
/// and a file that is missing or refused is bad input (exit 2) naming the
/// file and the key.
#[test]
fn every_command_takes_a_config_file_its_options_override() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objwal.toml");
    std::fs::write(
        &file,
        "max_batch_bytes = \"3MiB\"\nmax_inflight_creates = 3\nflush_interval = \"7ms\"\n",
    )
    .unwrap();
    let config = file.to_str().unwrap();
    let bench = |extra: &[&str]| {
        let mut args = vec!["--config", config, "bench", "--store", "memory://"];
        args.extend_from_slice(&["--seconds", "0.2", "--rounds", "1"]);
        args.extend_from_slice(extra);
        objwal(&args)
    };
    let o = bench(&[]);
    assert_exit(&o, 0);
    let line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("config:"))
        .unwrap()
        .to_owned();
    for part in [
        "flush_interval 7ms",
        "max_batch_bytes 3145728",
        "max_inflight_creates 3",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    let o = bench(&["--max-inflight-creates", "2"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("max_inflight_creates 2,"),
        "{}",
        stdout(&o)
    );

    std::fs::write(&file, "max_inflight_creatse = 3\n").unwrap();
    let o = objwal(&["--config", config, "inspect", "memory://"]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("max_inflight_creatse") && stderr(&o).contains("objwal.toml"),
        "{}",
        stderr(&o)
    );
    let missing = dir.path().join("none.toml");
    let o = objwal(&[
        "--config",
        missing.to_str().unwrap(),
        "inspect",
        "memory://",
    ]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("none.toml"), "{}", stderr(&o));
}

/// Appends spread over more regions than writers, uniformly and skewed:
/// the setup line says how, and the rounds run.
#[test]
fn bench_spreads_appends_over_regions_independently_of_the_writers() {
    for (spread, says) in [("uniform", "uniformly random region"), ("zipf", "Zipf")] {
        let o = objwal(&[
            "bench",
            "--store",
            "memory://",
            "--writers",
            "4",
            "--regions",
            "10000",
            "--region-spread",
            spread,
            "--seconds",
            "0.3",
            "--rounds",
            "1",
        ]);
        assert_exit(&o, 0);
        let out = stdout(&o);
        assert!(out.contains("regions 10000"), "{out}");
        assert!(out.contains(says), "{spread}: {out}");
        assert!(out.contains("appends/s"), "{out}");
    }
    let o = objwal(&["bench", "--store", "memory://", "--region-spread", "hot"]);
    assert_exit(&o, 2);
}

/// `bench-replay regions` opens a log of many idle regions against one of
/// few and reports the open time and the heap held per idle region.
#[test]
fn bench_replay_regions_reports_open_time_and_memory_per_region() {
    let o = objwal(&[
        "bench-replay",
        "regions",
        "--regions",
        "2000",
        "--regions-per-object",
        "500",
        "--runs",
        "1",
    ]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for figure in ["open time:", "with 2000 regions", "heap held:"] {
        assert!(out.contains(figure), "{figure:?} missing from:\n{out}");
    }
}
