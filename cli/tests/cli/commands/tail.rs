//! `objwal tail` as a process (issue 22, item 4): it prints a region's
//! entries as a writer in this process appends them, in `dump`'s format or
//! as raw frames, and exits 0 on SIGINT. Every wait has a deadline.

use std::process::Stdio;

use objwal::storage::FileStorage;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, Command};

use super::*;
use crate::common::{within, DEADLINE};

/// A writer on a fresh directory, prefix "t", with one entry of region 1.
async fn writer(dir: &Path) -> Wal {
    let storage = Storage::new(FileStorage::open(dir).unwrap());
    let config = Config {
        flush_interval: std::time::Duration::from_millis(10),
        ..Config::default()
    };
    let wal = Wal::open(storage, "t", config).await.unwrap();
    wal.append(vec![(1, b("before"))]).await.unwrap();
    wal
}

fn tail(dir: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_objwal"))
        .args(["--prefix", "t", "tail", &url(dir), "--region", "1"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the objwal binary runs")
}

async fn next_line<R: AsyncRead + Unpin>(lines: &mut Lines<BufReader<R>>) -> String {
    within(lines.next_line())
        .await
        .unwrap()
        .expect("a line before the output ends")
}

/// Waits until the command says it follows (on stderr).
async fn wait_following(child: &mut Child) -> Lines<BufReader<tokio::process::ChildStderr>> {
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = next_line(&mut stderr).await;
    assert!(line.contains("following region 1"), "{line}");
    stderr
}

/// SIGINT, then the exit status within the deadline.
async fn interrupt(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("tail exits on SIGINT")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_entries_as_they_land_and_exits_0_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let wal = writer(dir.path()).await;
    let mut child = tail(dir.path(), &["--from", "0"]);
    let _stderr = wait_following(&mut child).await;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = next_line(&mut lines).await;
    assert!(line.ends_with("6 bytes: \"before\""), "{line}");
    let ids = wal
        .append(vec![(1, b("after one")), (2, b("other"))])
        .await
        .unwrap();
    let line = next_line(&mut lines).await;
    assert!(line.starts_with(&format!("{} (", ids[0])), "{line}");
    assert!(line.ends_with("\"after one\""), "{line}");
    wal.append(vec![(1, b("after two"))]).await.unwrap();
    assert!(next_line(&mut lines).await.ends_with("\"after two\""));
    let status = interrupt(&mut child).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
    let summary = next_line(&mut lines).await;
    assert!(
        summary.starts_with("region 1: 3 entries, 24 bytes"),
        "{summary}"
    );
    wal.stop().await.unwrap();
}

/// Without `--from` only what lands after it started, as raw frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_raw_writes_frames_of_what_lands_after_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let wal = writer(dir.path()).await;
    let mut child = tail(dir.path(), &["--raw"]);
    let _stderr = wait_following(&mut child).await;
    let id = wal.append(vec![(1, b("new"))]).await.unwrap()[0];
    let mut stdout = child.stdout.take().unwrap();
    let mut frame = [0u8; 8 + 4 + 3];
    within(stdout.read_exact(&mut frame)).await.unwrap();
    assert_eq!(frame[..8], id.to_le_bytes());
    assert_eq!(frame[8..12], 3u32.to_le_bytes());
    assert_eq!(&frame[12..], b"new");
    let status = interrupt(&mut child).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
    let mut rest = Vec::new();
    within(stdout.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty(), "raw output holds frames only: {rest:?}");
    wal.stop().await.unwrap();
}

/// Issue 31: what a standby operator needs. `--hold` places a reader hold
/// that the writer's collection sees (`Wal::holds`) and releases it at the
/// end; `--lag-every` prints the lag on stderr, as does the last line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_holds_the_writers_collection_reports_its_lag_and_releases_the_hold() {
    use objwal::ObjectStorage;
    let dir = tempfile::tempdir().unwrap();
    let wal = writer(dir.path()).await;
    let mut child = tail(
        dir.path(),
        &["--from", "0", "--hold", "op-1", "--lag-every", "50ms"],
    );
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let holding = next_line(&mut stderr).await;
    assert!(
        holding.contains("holding the writer's collection as \"op-1\""),
        "{holding}"
    );
    assert!(next_line(&mut stderr).await.contains("following region 1"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(next_line(&mut lines).await.ends_with("\"before\""));
    let lag = next_line(&mut stderr).await;
    assert!(lag.starts_with("objwal tail: lag: "), "{lag}");
    // The writer's next collection pass sees the hold.
    let id = wal.append(vec![(1, b("x"))]).await.unwrap()[0];
    wal.obsolete(1, id).await.unwrap();
    within(async {
        while wal.holds().await.unwrap().is_empty() {
            wal.append(vec![(2, b("tick"))]).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(wal.holds().await.unwrap()[0].name, "op-1");
    let status = interrupt(&mut child).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
    let mut rest = Vec::new();
    while let Ok(Some(line)) = within(stderr.next_line()).await {
        rest.push(line);
    }
    assert!(
        rest.iter()
            .any(|l| l.contains("released the hold \"op-1\"")),
        "{rest:?}"
    );
    let storage = Storage::new(FileStorage::open(dir.path()).unwrap());
    assert!(storage.list("t/holds/").await.unwrap().is_empty());
    wal.stop().await.unwrap();
}
