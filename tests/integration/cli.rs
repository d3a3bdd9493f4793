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

/// A mistyped or empty prefix names the prefixes that hold objects; a file
/// where the store's directory should be is named as a file.
#[tokio::test]
async fn a_wrong_prefix_or_a_file_for_a_directory_is_said_plainly() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let store = url(dir.path());
    for command in ["inspect", "verify", "repair"] {
        let o = objwal(&["--prefix", "typo", command, &store]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(
            err.contains("no objects under prefix \"typo\"")
                && err.contains("prefixes with objects here: --prefix t"),
            "{command}: {err}"
        );
    }
    let o = objwal(&["--prefix", "typo", "dump", &store, "--region", "1"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--prefix t"), "{}", stderr(&o));
    let empty = tempfile::tempdir().unwrap();
    let o = objwal(&["inspect", &url(empty.path())]);
    assert_exit(&o, 2);
    assert!(
        stderr(&o).contains("the store holds no objwal log"),
        "{}",
        stderr(&o)
    );

    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    for args in [
        vec!["inspect", "FILE"],
        vec!["verify", "FILE"],
        vec!["bench", "--store", "FILE", "--seconds", "0.3"],
        vec!["demo", "--store", "FILE"],
    ] {
        let file_url = url(&file);
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "FILE" { file_url.as_str() } else { a })
            .collect();
        let o = objwal(&args);
        assert_exit(&o, 2);
        assert!(
            stderr(&o).contains("is a file, not a directory"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

/// A stray file among the objects: not an object key, so recovery ignores
/// it; `inspect` and `verify` both call it foreign and neither calls the
/// log damaged. Junk under an object key is damage to both, by name.
#[tokio::test]
async fn inspect_and_verify_agree_on_a_junk_file_among_the_objects() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let store = url(dir.path());
    std::fs::write(
        dir.path().join("t/objects/notes.txt"),
        "an operator's notes",
    )
    .unwrap();
    let inspect = objwal(&["--prefix", "t", "inspect", "--json", &store]);
    assert_exit(&inspect, 0);
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(json["damaged"], 0);
    let states: Vec<&str> = json["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["key"] == "t/objects/notes.txt")
        .map(|o| o["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["foreign"]);
    let verify = objwal(&["--prefix", "t", "verify", &store]);
    assert_exit(&verify, 0);
    assert!(
        stdout(&verify).contains("FOREIGN t/objects/notes.txt"),
        "{}",
        stdout(&verify)
    );
    assert!(
        stdout(&verify).contains("0 damaged, 1 foreign"),
        "{}",
        stdout(&verify)
    );

    let junk = "t/objects/00000000000000000009.wal";
    std::fs::write(dir.path().join(junk), "not an object").unwrap();
    let inspect = objwal(&["--prefix", "t", "inspect", "--json", &store]);
    assert_exit(&inspect, 1);
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(json["damaged"], 1);
    assert!(json["health"]
        .as_str()
        .unwrap()
        .contains("damaged object(s) stop a default open: 9"));
    let verify = objwal(&["--prefix", "t", "verify", &store]);
    assert_exit(&verify, 1);
    let out = stdout(&verify);
    assert!(out.contains(&format!("DAMAGED {junk}")), "{out}");
    assert!(out.contains("1 damaged, 1 foreign"), "{out}");
}

/// Copies a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A demo's store, and the keys of its chain objects that hold entries.
fn demo_store(dir: &Path, seed: &str) -> Vec<String> {
    let store = url(dir);
    assert_exit(
        &objwal(&["demo", "--store", &store, "--seconds", "1", "--seed", seed]),
        0,
    );
    let o = objwal(&["inspect", "--json", &store]);
    assert_exit(&o, 0);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys: Vec<String> = json["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["state"] == "chain" && !o["segments"].as_array().unwrap().is_empty())
        .map(|o| o["key"].as_str().unwrap().to_owned())
        .collect();
    assert!(keys.len() >= 3, "a demo writes more objects than {keys:?}");
    keys
}

/// A damaged copy of a demo store: `verify` and `inspect` name the object,
/// `repair` says what it would do and changes nothing without `--yes`, then
/// moves it under `quarantine/` (copy landed, original gone), after which
/// the prefix opens with the default configuration, reports the holes, and
/// every intact entry still replays.
#[tokio::test]
async fn repair_moves_a_damaged_object_aside_and_the_log_opens_again() {
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original");
    let keys = demo_store(&original, "21");
    let copy = dir.path().join("copy");
    copy_tree(&original, &copy);
    let store = url(&copy);
    let key = &keys[keys.len() / 2];
    let path = copy.join(key);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 80 - 3; // in the footer, before the trailer
    bytes[at] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    let verify = objwal(&["verify", &store]);
    assert_exit(&verify, 1);
    assert!(
        stdout(&verify).contains(&format!("DAMAGED {key}")),
        "{}",
        stdout(&verify)
    );
    let inspect = objwal(&["inspect", &store]);
    assert_exit(&inspect, 1);
    let sequence: u64 = key.rsplit('/').next().unwrap()[..20].parse().unwrap();
    assert!(
        stdout(&inspect).contains(&format!(
            "1 damaged object(s) stop a default open: {sequence}"
        )),
        "{}",
        stdout(&inspect)
    );
    let opened = Wal::open(
        Storage::new(FileStorage::open(&copy).unwrap()),
        "objwal",
        Config::default(),
    )
    .await;
    assert!(opened.is_err(), "a default open refuses the damaged prefix");

    let quarantined = format!("objwal/quarantine/{}", key.rsplit('/').next().unwrap());
    let dry = objwal(&["repair", &store]);
    assert_exit(&dry, 1);
    let out = stdout(&dry);
    assert!(
        out.contains(&format!("quarantine {key} -> {quarantined}")),
        "{out}"
    );
    assert!(
        out.contains("held: unknown (its footer is unreadable"),
        "{out}"
    );
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert!(path.exists() && !copy.join(&quarantined).exists());

    let repair = objwal(&["repair", &store, "--yes"]);
    assert_exit(&repair, 0);
    let out = stdout(&repair);
    assert!(
        out.contains(&format!("moved {key} -> {quarantined}")),
        "{out}"
    );
    assert!(
        out.contains("opens with the default configuration"),
        "{out}"
    );
    assert!(!path.exists(), "the original is moved");
    assert_eq!(std::fs::read(copy.join(&quarantined)).unwrap(), bytes);

    for command in ["verify", "inspect"] {
        let o = objwal(&[command, &store]);
        assert_exit(&o, 0);
        assert!(
            stdout(&o).contains("moved aside under quarantine/"),
            "{}",
            stdout(&o)
        );
    }
    // A default open now: every region misses the quarantined sequence and
    // replays the rest of the original store's entries.
    let storage = Storage::new(FileStorage::open(&copy).unwrap());
    let reader = objwal::WalReader::open(storage, "objwal", Config::default())
        .await
        .unwrap();
    let before = objwal::WalReader::open(
        Storage::new(FileStorage::open(&original).unwrap()),
        "objwal",
        Config::default(),
    )
    .await
    .unwrap();
    for region in before.regions() {
        let all = crate::common::payloads(&read_reader(&before, region).await);
        let now = read_reader(&reader, region).await;
        assert!(now
            .iter()
            .all(|e| objwal::format::sequence_of(e.id) != sequence));
        assert!(now.len() <= all.len());
        let holes = reader.holes(region);
        assert_eq!(holes.len(), 1, "region {region}: {holes:?}");
        assert_eq!(holes[0].sequence, sequence);
    }
}

async fn read_reader(reader: &objwal::WalReader, region: u64) -> Vec<objwal::Entry> {
    let mut stream = Box::pin(reader.read(region, 0));
    let mut entries = Vec::new();
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        entries.push(e.unwrap());
    }
    entries
}

/// An object deleted by hand is never silent: recovery warns, naming the
/// objects above the tip and what they hold; `inspect`'s health line names
/// them; `verify` exits 1 listing each (issue 10, item 7).
#[tokio::test]
async fn an_object_deleted_by_hand_is_named_by_recovery_inspect_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let keys = demo_store(dir.path(), "22");
    let store = url(dir.path());
    let deleted = &keys[keys.len() / 2];
    std::fs::remove_file(dir.path().join(deleted)).unwrap();
    let above: Vec<&String> = keys.iter().filter(|k| *k > deleted).collect();
    let sequence: u64 = deleted.rsplit('/').next().unwrap()[..20].parse().unwrap();

    let inspect = objwal(&["inspect", &store]);
    assert_exit(&inspect, 1);
    let out = stdout(&inspect);
    assert!(out.contains("above the tip hold"), "{out}");
    assert!(
        out.contains(&format!("the chain breaks at missing sequence {sequence}")),
        "{out}"
    );
    let err = stderr(&inspect);
    assert!(
        err.contains("will not be replayed"),
        "recovery warns:\n{err}"
    );
    for key in &above {
        assert!(err.contains(key.as_str()), "{key} not named in:\n{err}");
    }
    let verify = objwal(&["verify", &store]);
    assert_exit(&verify, 1);
    let out = stdout(&verify);
    for key in &above {
        assert!(out.contains(&format!("UNREPLAYED {key}")), "{key}:\n{out}");
    }
    let repair = objwal(&["repair", &store]);
    assert_exit(&repair, 1);
    assert!(
        stdout(&repair).contains("cannot repair"),
        "{}",
        stdout(&repair)
    );
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
