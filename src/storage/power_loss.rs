//! A power loss, simulated for the directory backend (feature `testing`).
//!
//! A SIGKILL keeps the page cache: whatever a killed process wrote reaches
//! the disk in the end, fsynced or not, so a crash test that kills a
//! process never sees what an fsync that was left out would have lost. A
//! power loss keeps only what was made durable: a file's bytes once the
//! file was fsynced, a name once its directory was fsynced after the link.
//!
//! [`FileStorage::record_power_loss`](super::FileStorage::record_power_loss)
//! makes a store journal, in order, each step that decides what a power
//! loss keeps of a create (one line each, appended to a file outside the
//! store; the lines survive a SIGKILL as any write does):
//!
//! - `D <key>`: the new object's bytes were fsynced (before its link);
//! - `L <key>`: the object was linked under its key;
//! - `B <n> <dir>`: fsync number `n` of directory `dir` starts (it covers
//!   every link made in `dir` before it);
//! - `E <n>`: that fsync succeeded.
//!
//! After the kill, [`apply`] turns the directory into what a power loss at
//! that instant may leave: a key linked without a later successful fsync
//! of its directory loses its name (the file is removed), and a key whose
//! name is durable but whose bytes were never fsynced loses its bytes (the
//! file is truncated to nothing, as a journaling file system that orders
//! only metadata may leave it). Each is the worst outcome the rules allow,
//! so an acknowledgement that relied on a missing fsync shows as a missing
//! or damaged object at the next open.
//!
//! Not simulated: a deletion that a power loss undoes (collection's
//! deletes are not fsynced, and an object that comes back holds entries
//! the log already hides), and directories (created durably, fsynced in
//! their parent, before any object is linked in them).

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The journal a store appends to (see the module docs).
#[derive(Debug)]
pub(crate) struct Journal {
    file: Mutex<File>,
    syncs: AtomicU64,
}

impl Journal {
    pub(crate) fn create(path: &Path) -> io::Result<Journal> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Journal {
            file: Mutex::new(file),
            syncs: AtomicU64::new(0),
        })
    }

    fn line(&self, line: String) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // One write per line: a SIGKILL leaves whole lines.
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "the power-loss journal could not be written");
        }
    }

    pub(crate) fn data_synced(&self, key: &str) {
        self.line(format!("D {key}\n"));
    }

    pub(crate) fn linked(&self, key: &str) {
        self.line(format!("L {key}\n"));
    }

    /// Journals the start of an fsync of `dir` (a path below the root);
    /// returns its number for [`Journal::dir_synced`].
    pub(crate) fn dir_sync_starts(&self, dir: &str) -> u64 {
        let n = self.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        self.line(format!("B {n} {dir}\n"));
        n
    }

    pub(crate) fn dir_synced(&self, n: u64) {
        self.line(format!("E {n}\n"));
    }
}

/// What [`apply`] did to the directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PowerLoss {
    /// Keys whose name was not durable: removed.
    pub names_lost: Vec<String>,
    /// Keys whose name was durable but whose bytes were not: truncated.
    pub bytes_lost: Vec<String>,
}

/// Makes the store under `root` what a power loss at the end of `journal`
/// may leave of it (the worst case the rules of the module docs allow),
/// and says what it changed. Lines of a journal cut short are ignored.
pub fn apply(root: &Path, journal: &Path) -> io::Result<PowerLoss> {
    let text = std::fs::read_to_string(journal)?;
    let mut synced_data = HashSet::new();
    // Per key: the directory it was linked in, and whether a successful
    // fsync of that directory started after the link.
    let mut linked: Vec<(String, String)> = Vec::new();
    let mut durable_names = HashSet::new();
    // Per fsync started: its directory and the links it covers.
    let mut started: HashMap<u64, (String, Vec<String>)> = HashMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("D"), Some(key), None) => {
                synced_data.insert(key.to_owned());
            }
            (Some("L"), Some(key), None) => {
                linked.push((key.to_owned(), parent_of(key)));
            }
            (Some("B"), Some(n), Some(dir)) => {
                let Ok(n) = n.parse::<u64>() else { continue };
                let covered = linked
                    .iter()
                    .filter(|(_, d)| d == dir)
                    .map(|(k, _)| k.clone())
                    .collect();
                started.insert(n, (dir.to_owned(), covered));
            }
            (Some("E"), Some(n), None) => {
                let Ok(n) = n.parse::<u64>() else { continue };
                if let Some((_, covered)) = started.remove(&n) {
                    durable_names.extend(covered);
                }
            }
            _ => {}
        }
    }
    let mut report = PowerLoss::default();
    let mut seen = HashSet::new();
    for (key, _) in &linked {
        if !seen.insert(key.clone()) {
            continue;
        }
        let path: PathBuf = root.join(key);
        if !durable_names.contains(key) {
            match std::fs::remove_file(&path) {
                Ok(()) => report.names_lost.push(key.clone()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        } else if !synced_data.contains(key) {
            match OpenOptions::new().write(true).open(&path) {
                Ok(file) => {
                    file.set_len(0)?;
                    report.bytes_lost.push(key.clone());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(report)
}

fn parent_of(key: &str) -> String {
    key.rsplit_once('/')
        .map(|(dir, _)| dir.to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "power_loss_tests.rs"]
mod tests;
