//! Humane edges of the read-only tools: a wrong prefix, a file for a
//! directory, a junk file among the objects, and a store they leave as it
//! was.

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
                && err.contains("prefixes holding a log here: --prefix t"),
            "{command}: {err}"
        );
    }
    for command in ["dump", "tail"] {
        let o = objwal(&["--prefix", "typo", command, &store, "--region", "1"]);
        assert_exit(&o, 2);
        assert!(
            stderr(&o).contains("--prefix t"),
            "{command}: {}",
            stderr(&o)
        );
    }
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

/// Every file and directory under `root`: its path, and its bytes for a file.
fn tree(root: &std::path::Path) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().unwrap().is_dir() {
                out.push((name, None));
                stack.push(path);
            } else {
                out.push((name, Some(std::fs::read(&path).unwrap())));
            }
        }
    }
    out.sort();
    out
}

/// Issue 18, item 9: `inspect`, `verify` and `dump` removed a dead
/// process's temporary file from a directory store (the file backend's
/// open cleaned up). A read-only tool creates, deletes and renames nothing
/// (`verify` creates and deletes one scratch key at the store's root, to
/// check create-if-absent: the tree is the same after it); only a writer's
/// open (and `repair --yes`) cleans up.
#[tokio::test]
async fn read_only_tools_leave_a_store_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    written_store(dir.path()).await;
    // A temporary file a crashed writer left (pid 4000000000: never alive).
    let stale = dir.path().join(format!(
        "t/objects/{}4000000000-3",
        objwal::storage::TEMP_MARKER
    ));
    std::fs::write(&stale, b"half an object").unwrap();
    let before = tree(dir.path());
    let store = url(dir.path());
    for args in [
        vec!["--prefix", "t", "inspect", &store],
        vec!["--prefix", "t", "inspect", "--json", &store],
        vec!["--prefix", "t", "verify", &store],
        vec!["--prefix", "t", "dump", &store, "--region", "1"],
        vec!["--prefix", "t", "repair", &store],
    ] {
        let o = objwal(&args);
        assert_exit(&o, 0);
        let after = tree(dir.path());
        let names = |t: &[(String, Option<Vec<u8>>)]| -> Vec<String> {
            t.iter().map(|(name, _)| name.clone()).collect()
        };
        assert_eq!(names(&after), names(&before), "{args:?} changed the tree");
        assert!(after == before, "{args:?} changed a file's bytes");
    }
    // A writer cleans up: repair --yes, and Wal::open.
    let o = objwal(&["--prefix", "t", "repair", &store, "--yes"]);
    assert_exit(&o, 0);
    assert!(!stale.exists(), "repair --yes removes a dead writer's file");
    std::fs::write(&stale, b"half an object").unwrap();
    let storage = Storage::new(FileStorage::open(dir.path()).unwrap());
    let wal = Wal::open(storage, "t", Config::default()).await.unwrap();
    assert!(
        !stale.exists(),
        "a writer's open removes a dead writer's file"
    );
    wal.stop().await.unwrap();
}
