//! What cost a new user minutes (issue 21, items 4 and 7), as the binary
//! shows it: ids in `sequence.position` in both of `inspect`'s tables, a
//! released region named as such by `dump`, a URL naming the log itself
//! answered with its parent URL, `dump`'s usage with `--prefix` optional,
//! the demo's directory cleaned up after a success, and storage failures
//! reported in one line with their fix.

use super::*;

/// Runs the binary with `unset` removed from its environment, then `env`
/// added.
fn objwal_env(args: &[&str], env: &[(&str, &str)], unset: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_objwal"));
    for name in unset {
        command.env_remove(name);
    }
    command.args(args).envs(env.iter().copied());
    command.output().expect("the objwal binary runs")
}

#[tokio::test]
async fn inspect_prints_ids_as_sequence_position_in_both_tables() {
    let dir = tempfile::tempdir().unwrap();
    let again = written_store(dir.path()).await;
    let o = objwal(&["--prefix", "t", "inspect", &url(dir.path())]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let region_1 = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1") && l.contains(" 2.1 "))
        .unwrap_or_else(|| panic!("no region row for region 1 in:\n{out}"));
    let cells: Vec<&str> = region_1.split_whitespace().collect();
    assert_eq!(&cells[4..6], ["2.1", "3.1"], "{region_1}");
    assert!(!out.contains(&again.to_string()), "a raw id in:\n{out}");
}

/// Issue 31: an operator sees the readers' holds on a prefix, in text and
/// in JSON.
#[tokio::test]
async fn inspect_shows_the_readers_holds() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let storage = Storage::new(FileStorage::open(dir.path()).unwrap());
    let ttl = std::time::Duration::from_secs(90);
    let hold = objwal::Hold::place(storage, "t", &Config::default(), "standby-9", ttl, 2)
        .await
        .unwrap();
    let o = objwal(&["--prefix", "t", "inspect", &url(dir.path())]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("hold \"standby-9\""))
        .unwrap_or_else(|| panic!("no hold line in:\n{out}"));
    assert!(
        line.contains("from object 2") && line.contains("ttl 90000 ms"),
        "{line}"
    );
    let o = objwal(&["--prefix", "t", "inspect", "--json", &url(dir.path())]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(json["holds"][0]["name"], "standby-9");
    assert_eq!(json["holds"][0]["position"], 2);
    hold.release().await.unwrap();
    let o = objwal(&["--prefix", "t", "inspect", &url(dir.path())]);
    assert!(!stdout(&o).contains("hold \""), "{}", stdout(&o));
}

#[tokio::test]
async fn dump_of_a_released_region_says_it_was_released() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::new(FileStorage::open(dir.path()).unwrap());
    let wal = Wal::open(storage, "t", Config::default()).await.unwrap();
    wal.append(vec![(1, b("kept")), (5, b("dropped"))])
        .await
        .unwrap();
    wal.release_region(5).await.unwrap();
    wal.stop().await.unwrap();
    let o = objwal(&["--prefix", "t", "dump", &url(dir.path()), "--region", "5"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("region 5 is released (through id 2.1)") && !err.contains("has no entries"),
        "{err}"
    );
}

#[tokio::test]
async fn a_url_naming_the_log_itself_is_answered_with_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let inside = url(&dir.path().join("t"));
    for command in ["inspect", "verify"] {
        let o = objwal(&[command, &inside]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        let parent = format!("use its parent, {} --prefix t", url(dir.path()));
        assert!(
            err.contains("this URL names a log itself") && err.contains(&parent),
            "{command}: {err}"
        );
    }
    // Which works.
    let o = objwal(&["inspect", &url(dir.path()), "--prefix", "t"]);
    assert_exit(&o, 0);
}

#[test]
fn dump_usage_shows_the_prefix_as_optional() {
    let usage =
        "Usage: objwal dump <URL> --region <REGION> [--from <ID>] [--raw] [--prefix <PREFIX>]";
    let o = objwal(&["dump", "--help"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains(usage), "{}", stdout(&o));
    let o = objwal(&["dump", "file:///nowhere"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains(usage), "{}", stderr(&o));
}

/// The demo used to leave its directory (tens of MiB) under the temp
/// directory after every run.
#[test]
fn the_demo_removes_its_directory_after_a_success_unless_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().to_str().unwrap();
    let demos = || -> Vec<String> {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("objwal-demo-"))
            .collect()
    };
    let args = ["demo", "--seconds", "0.5", "--seed", "11", "--regions", "4"];
    let o = objwal_env(&args, &[("TMPDIR", tmpdir)], &[]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("cleaned up:   removed ") && out.contains("--keep keeps it"),
        "{out}"
    );
    assert!(!out.contains("look inside:"), "{out}");
    assert!(demos().is_empty(), "left {:?}", demos());

    let mut kept = args.to_vec();
    kept.push("--keep");
    let o = objwal_env(&kept, &[("TMPDIR", tmpdir)], &[]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(
        out.contains("look inside:  objwal inspect file://"),
        "{out}"
    );
    assert_eq!(demos().len(), 1, "{out}");
}

/// A port on loopback that nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

/// The variables that give the AWS chain credentials, removed so that the
/// chain finds none.
const CREDENTIALS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];

/// Issue 21, item 4, as a user meets it: a missing bucket, a closed port
/// and missing credentials are each one line on stderr, naming the cause
/// and what to do, with no XML and no metadata-service request.
#[test]
fn storage_failures_are_one_line_naming_the_cause_and_the_fix() {
    let endpoint = crate::common::s3_endpoint();
    let credentials = crate::common::s3_credentials();
    let metadata = format!("http://127.0.0.1:{}", closed_port());
    let cases = [
        (
            format!("s3://no-such-bucket-objwal?endpoint={endpoint}"),
            credentials.to_vec(),
            vec![
                "the bucket \"no-such-bucket-objwal\" does not exist",
                "create it, or fix the bucket name in the storage URL",
            ],
        ),
        (
            format!(
                "s3://{}?endpoint=http://127.0.0.1:{}",
                crate::common::S3_BUCKET,
                closed_port()
            ),
            credentials.to_vec(),
            vec![
                "connection refused by http://127.0.0.1:",
                "is the store running there",
            ],
        ),
        (
            format!("s3://{}?endpoint={endpoint}", crate::common::S3_BUCKET),
            vec![("AWS_METADATA_ENDPOINT", metadata.as_str())],
            vec![
                "no credentials",
                "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            ],
        ),
    ];
    for (store, env, says) in cases {
        let o = objwal_env(&["inspect", &store], &env, CREDENTIALS);
        assert_exit(&o, 1);
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            !err.contains('<') && !err.contains("/latest/api/token"),
            "{err}"
        );
        for part in says {
            assert!(err.contains(part), "{part:?} missing from {err}");
        }
    }
}
