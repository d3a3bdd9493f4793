//! One life of the crash gate, from the parent's side: start the child
//! process, hand it the history, read its log from the pipe, kill it at the
//! chosen moment, and collect what it wrote.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::child::Inherited;
use super::{life_args, Gate, PIPE_DEADLINE};
use crate::CliError;

impl Gate<'_> {
    /// Runs life `life` until its kill; returns its log and when it was
    /// killed (since its start).
    pub(super) async fn life(
        &self,
        life: u32,
        seed: u64,
        kill: Kill,
    ) -> Result<(String, Duration), CliError> {
        let exe = std::env::current_exe()
            .map_err(|e| CliError::Failed(format!("cannot find the objwal binary: {e}")))?;
        let a = life_args(self.args, self.url.to_owned(), life, seed);
        let mut command = tokio::process::Command::new(exe);
        crate::store::forward_config(&mut command);
        if self.verbose > 0 {
            command.arg(format!("-{}", "v".repeat(usize::from(self.verbose))));
        }
        command
            .args(["--prefix", self.prefix, "crash-gate", "--store", &a.store])
            .args([
                "--child-life",
                &life.to_string(),
                "--child-seed",
                &seed.to_string(),
            ])
            .args([
                "--ack-mode",
                a.ack_mode.as_str(),
                "--regions",
                &a.regions.to_string(),
            ])
            .args([
                "--writers",
                &a.writers.to_string(),
                "--life",
                &a.life_seconds.to_string(),
            ])
            .args(["--flush-interval", &a.flush_interval])
            .args(["--faults", self.args.faults.as_str()])
            .args(self.args.power_loss.then_some("--power-loss"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let started = Instant::now();
        let mut process = command
            .spawn()
            .map_err(|e| CliError::Failed(format!("cannot start life {life}: {e}")))?;
        let inherited = Inherited {
            watermarks: self.history.watermarks(),
            durable: self.history.durable(),
            released: self.history.released().clone(),
            releasing: self.history.releasing().clone(),
        }
        .render();
        let stdin = process.stdin.take();
        let feed = tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                // A life killed before it read its input leaves a broken pipe.
                let _ = stdin.write_all(inherited.as_bytes()).await;
            }
        });
        let (opened, open_seen) = tokio::sync::oneshot::channel();
        let stdout = drain(process.stdout.take(), Some(opened));
        let stderr = drain(process.stderr.take(), None);
        let kill_moment = async {
            match kill {
                Kill::FromStart(after) => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(started + after)).await;
                }
                Kill::AfterOpen(after) => {
                    // A life that ends without opening ends the wait below.
                    if open_seen.await.is_ok() {
                        tokio::time::sleep(after).await;
                    } else {
                        futures::future::pending::<()>().await;
                    }
                }
            }
        };
        tokio::select! {
            status = process.wait() => {
                let status = status.map_err(|e| CliError::Failed(format!("life {life}: {e}")))?;
                let stderr = collect(stderr).await.unwrap_or_default();
                let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(CliError::Failed(format!(
                    "crash-gate: life {life} ended by itself ({status}) before its kill; its stderr ends:\n{}",
                    tail.join("\n")
                )));
            }
            () = kill_moment => {}
        }
        let killed_at = started.elapsed();
        tracing::info!(life, killed_ms = killed_at.as_millis() as u64, "killing");
        // SIGKILL: no destructor, no stop, no flush runs in the life.
        process
            .start_kill()
            .map_err(|e| CliError::Failed(format!("cannot kill life {life}: {e}")))?;
        process
            .wait()
            .await
            .map_err(|e| CliError::Failed(format!("life {life}: {e}")))?;
        let _ = feed.await;
        let _ = collect(stderr).await;
        let log = collect(stdout).await.ok_or_else(|| {
            CliError::Failed(format!(
                "life {life}: its log pipe did not close within {PIPE_DEADLINE:?}"
            ))
        })?;
        Ok((log, killed_at))
    }
}

/// When a life is killed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kill {
    /// This long after its start, wherever it is (maybe in its open).
    FromStart(Duration),
    /// This long after its open returned (its `O` line).
    AfterOpen(Duration),
}

/// Reads a pipe to its end in a task; `opened` is sent once the bytes
/// hold a life's `O` line (its first, but for the lines of faults armed
/// and of failed opens before it).
fn drain<R>(
    pipe: Option<R>,
    mut opened: Option<tokio::sync::oneshot::Sender<()>>,
) -> tokio::task::JoinHandle<Vec<u8>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut bytes = Vec::new();
        let Some(mut pipe) = pipe else {
            return bytes;
        };
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match pipe.read(&mut chunk).await {
                Ok(0) | Err(_) => return bytes,
                Ok(n) => bytes.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            }
            let opened_now = || bytes.starts_with(b"O\n") || contains(&bytes, b"\nO\n");
            if opened.is_some() && opened_now() {
                if let Some(tx) = opened.take() {
                    let _ = tx.send(());
                }
            }
        }
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What a drained pipe held, or `None` when it did not close in time.
async fn collect(task: tokio::task::JoinHandle<Vec<u8>>) -> Option<String> {
    match tokio::time::timeout(PIPE_DEADLINE, task).await {
        Ok(Ok(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        _ => None,
    }
}
