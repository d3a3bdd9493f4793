//! Humane edges of the read-only tools: a wrong prefix, a file for a
//! directory, a junk file among the objects.

use super::*;

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

/// `dump --raw` writes binary frames, so it refuses a terminal for stdout
/// (run under `script`, from util-linux, which gives the command a pty).
#[tokio::test]
async fn dump_raw_refuses_to_write_frames_to_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    let command = format!(
        "{} --prefix t dump {} --region 1 --raw",
        env!("CARGO_BIN_EXE_objwal"),
        url(dir.path())
    );
    let o = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    assert_exit(&o, 2);
    assert!(stdout(&o).contains("redirect stdout"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("hello"), "{}", stdout(&o));
}
