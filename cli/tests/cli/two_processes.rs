//! The `objwal demo-child` process against a writer in this process (moved
//! from the library's fencing tests with the CLI).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use objwal::storage::FileStorage;
use objwal::{Config, Storage, Wal};
use tokio::io::AsyncReadExt;

const PREFIX: &str = "procs";
const REGIONS: u64 = 4;
/// Acknowledgements the child logs before the test process opens.
const ACKS_BEFORE_OPEN: usize = 300;

/// FNV-1a 64, the digest `demo-child` logs (cli/src/payload.rs).
fn digest(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The child's acknowledgement log: `A region id len digest`,
/// `W region id` (watermark), `R region 0` (released).
#[derive(Debug, Default)]
struct ChildLog {
    acked: HashMap<(u64, u64), (usize, u64)>,
    watermarks: HashMap<u64, u64>,
    released: HashSet<u64>,
}

fn parse(text: &str) -> ChildLog {
    let mut log = ChildLog::default();
    // A last line without its newline is still being written.
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    for line in complete.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| -> u64 {
            f.get(i)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad log line {line:?}"))
        };
        match f.first().copied() {
            Some("A") => {
                let digest = u64::from_str_radix(f[4], 16).unwrap();
                log.acked
                    .insert((num(1), num(2)), (num(3) as usize, digest));
            }
            Some("W") => {
                let w = log.watermarks.entry(num(1)).or_insert(0);
                *w = (*w).max(num(2));
            }
            Some("R") => {
                log.released.insert(num(1));
            }
            _ => panic!("unexpected log line {line:?}"),
        }
    }
    log
}

fn count_acks(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| l.starts_with("A ")).count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_fences_a_writing_child() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let log_path = dir.path().join("acks.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_objwal"))
        .arg("--prefix")
        .arg(PREFIX)
        .arg("demo-child")
        .arg("--store")
        .arg(format!("file://{}", store.display()))
        .arg("--log")
        .arg(&log_path)
        .arg("--ack-mode")
        .arg("durable")
        .arg("--regions")
        .arg(REGIONS.to_string())
        .arg("--writers")
        .arg("4")
        .arg("--seed")
        .arg("7")
        .arg("--flush-interval")
        .arg("5ms")
        .arg("--deadline")
        .arg("120")
        .arg("--drop-after")
        .arg("0.2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the objwal binary starts");
    let mut stderr = child.stderr.take().unwrap();
    let stderr_text = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });

    // Wait (polling) until the child logged some hundreds of acks.
    let deadline = Instant::now() + Duration::from_secs(60);
    while count_acks(&log_path) < ACKS_BEFORE_OPEN {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the child exited early ({status}): {}",
                stderr_text.await.unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the child logged {} acknowledgements in 60 s",
            count_acks(&log_path)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before_open = count_acks(&log_path);

    // Open the same prefix here: this fences the child.
    let storage = Storage::new(FileStorage::open(&store).unwrap());
    let config = Config {
        flush_interval: Duration::from_millis(5),
        ..Config::default()
    };
    let wal = Wal::open(storage.clone(), PREFIX, config.clone())
        .await
        .unwrap();
    let opened_at = Instant::now();
    let mut ours: Vec<(u64, u64, Bytes)> = Vec::new();
    for n in 0..100u64 {
        // Regions 0 and 1: the child releases only its last region.
        let region = n % 2;
        let data = Bytes::from(format!("test-process entry {n}"));
        let ids = wal.append(vec![(region, data.clone())]).await.unwrap();
        ours.push((region, ids[0], data));
    }

    // The child must notice by itself, and say why.
    let status = match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => {
            child.kill().await.unwrap();
            panic!("the fenced child was still running 30 s after the open");
        }
    };
    let child_stderr = stderr_text.await.unwrap();
    assert!(
        !status.success(),
        "the fenced child exited successfully; stderr:\n{child_stderr}"
    );
    assert!(
        child_stderr.contains("fenced"),
        "the child's exit ({status}) does not say it was fenced; stderr:\n{child_stderr}"
    );
    let fenced_after = opened_at.elapsed();
    wal.stop().await.unwrap();
    drop(wal);

    // A third opener replays what both acknowledged.
    let log = parse(&std::fs::read_to_string(&log_path).unwrap());
    let third = Wal::open(storage, PREFIX, config).await.unwrap();
    let mut replayed: HashMap<(u64, u64), Bytes> = HashMap::new();
    for region in 0..REGIONS {
        let mut stream = Box::pin(third.read(region, 0));
        let mut last = 0;
        while let Some(entry) = stream.next().await {
            let entry = entry.unwrap();
            assert!(
                entry.id > last,
                "region {region}: id {} after {last}",
                entry.id
            );
            last = entry.id;
            replayed.insert((region, entry.id), entry.data);
        }
    }
    let mut checked = 0;
    for (&(region, id), &(len, want)) in &log.acked {
        if log.released.contains(&region) || log.watermarks.get(&region).is_some_and(|w| id <= *w) {
            continue;
        }
        let data = replayed
            .get(&(region, id))
            .unwrap_or_else(|| panic!("the child's ack of region {region} id {id} is lost"));
        assert_eq!(
            (data.len(), digest(data)),
            (len, want),
            "region {region} id {id} replays other bytes than the child acknowledged"
        );
        checked += 1;
    }
    for (region, id, data) in &ours {
        assert_eq!(
            replayed.get(&(*region, *id)),
            Some(data),
            "the test process's ack of region {region} id {id} does not replay"
        );
    }
    third.stop().await.unwrap();
    let _ = writeln!(
        std::io::stderr(),
        "a_second_process_fences_a_writing_child: {before_open} child acks before the open, \
         {} logged in all ({checked} checked above watermarks), {} test acks; the child \
         exited {:.2} s after the open; {:.1} s in all",
        log.acked.len(),
        ours.len(),
        fenced_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

use std::io::Write;
