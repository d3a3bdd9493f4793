//! Crash test of the file backend: a child process creating objects is
//! SIGKILLed at random (seeded) moments, 50 times. After each kill every key
//! present holds exactly the complete bytes written to it, every key the
//! child saw created is present, and no temporary file is listed (nor left
//! behind once a writer reopens the store and cleans up).
//!
//! The child is this test binary re-executed on the ignored test
//! `crash_child` with `OBJWAL_CRASH_DIR` set. Replay a failure with
//! `OBJWAL_CRASH_SEED=<seed printed by the failing run>`.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "child/parent protocol and seed"
)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use objwal::storage::{FileStorage, TEMP_MARKER};
use objwal::{Created, ObjectStorage};
use rand::{Rng, SeedableRng};

const KILLS: u32 = 50;
const READY: &str = "OBJWAL-CRASH-CHILD-READY";
const LOG: &str = "created.log";

/// The bytes of `key`: its length (1 byte to ~300 KiB) and content both
/// derive from the key, so the parent can check any object alone.
fn expected(key: &str) -> Vec<u8> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let len = (h % 300_000) as usize + 1;
    (0..len)
        .map(|i| (h >> ((i % 8) * 8)) as u8 ^ (i as u8))
        .collect()
}

/// The child: creates objects until killed, logging each key once `create`
/// returned `New`.
#[test]
#[ignore = "helper process of storage_crash::file_storage_survives_sigkill"]
fn crash_child() {
    let Ok(dir) = std::env::var("OBJWAL_CRASH_DIR") else {
        return;
    };
    let round: u32 = std::env::var("OBJWAL_CRASH_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = FileStorage::open(Path::new(&dir).join("store")).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&dir).join(LOG))
        .unwrap();
    rt.block_on(async {
        // Bounded, so a parent that fails to kill it cannot fill the disk.
        for i in 0u32..20_000 {
            // A new directory every 8 objects exercises durable mkdir too.
            let key = format!("r{round:02}/d{:04}/{i:06}.obj", i / 8);
            let created = store
                .create(&key, Bytes::from(expected(&key)))
                .await
                .unwrap();
            assert_eq!(created, Created::New, "{key}");
            // One write of the whole line: `writeln!` writes the key and
            // the newline apart, and a kill between them once joined this
            // round's key to the next round's on one line.
            log.write_all(format!("{key}\n").as_bytes()).unwrap();
            if i == 0 {
                println!("{READY}");
                std::io::stdout().flush().unwrap();
            }
        }
    });
}

fn temp_files(dir: &Path, found: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            temp_files(&e.path(), found);
        } else if e.file_name().to_string_lossy().starts_with(TEMP_MARKER) {
            found.push(e.path().display().to_string());
        }
    }
}

/// Kills the child if the parent fails before killing it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn file_storage_survives_sigkill() {
    let seed: u64 = match std::env::var("OBJWAL_CRASH_SEED") {
        Ok(s) => s.parse().unwrap(),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    eprintln!("storage crash test seed: OBJWAL_CRASH_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let mut unlogged = 0usize;
    for round in 0..KILLS {
        let mut child = KillOnDrop(
            Command::new(&exe)
                .args([
                    "--exact",
                    "storage_crash::crash_child",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("OBJWAL_CRASH_DIR", dir.path())
                .env("OBJWAL_CRASH_ROUND", round.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let child = &mut child.0;
        // Wait (blocking on the pipe, no polling) until the child has
        // created its first object, then kill it a random moment later.
        let stdout = child.stdout.take().unwrap();
        let ready = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains(READY)); // libtest prints its own prefix first
        assert!(
            ready,
            "round {round}: the child exited before creating anything"
        );
        std::thread::sleep(Duration::from_micros(rng.random_range(0..40_000)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "round {round}: the child was not killed: {status}"
        );

        // Reopen, as a restarted writer would; its cleanup removes the dead
        // child's temporary files.
        let store = FileStorage::open(dir.path().join("store")).unwrap();
        rt.block_on(store.remove_leftovers("")).unwrap();
        let mut temps = Vec::new();
        temp_files(&dir.path().join("store"), &mut temps);
        assert!(
            temps.is_empty(),
            "round {round}: temporary files left: {temps:?}"
        );
        let listed = rt.block_on(store.list("")).unwrap();
        let logged = std::fs::read_to_string(dir.path().join(LOG)).unwrap();
        for key in logged.lines() {
            assert!(
                listed.iter().any(|m| m.key == key),
                "round {round}: {key} was created but is missing"
            );
        }
        let logged_count = logged.lines().count();
        // At most one object per round can exist without being logged (the
        // kill came between `create` returning and the log line).
        unlogged = listed.len() - logged_count;
        assert!(
            listed.len() <= logged_count + round as usize + 1,
            "round {round}: extra objects"
        );
        // Earlier rounds' objects were checked already and never change.
        let this_round = format!("r{round:02}/");
        for m in &listed {
            assert!(
                !m.key.contains(TEMP_MARKER),
                "round {round}: listed a temp file {}",
                m.key
            );
            if !m.key.starts_with(&this_round) {
                continue;
            }
            assert!(
                !m.key.contains(TEMP_MARKER),
                "round {round}: listed a temp file {}",
                m.key
            );
            let want = expected(&m.key);
            assert_eq!(
                m.size,
                want.len() as u64,
                "round {round}: {} has a torn size",
                m.key
            );
            let got = rt.block_on(store.read(&m.key, 0..m.size)).unwrap();
            assert!(
                got[..] == want[..],
                "round {round}: {} holds other bytes",
                m.key
            );
        }
    }
    eprintln!(
        "storage crash test: {KILLS} kills in {:?}; {unlogged} objects landed without being logged",
        started.elapsed()
    );
}
