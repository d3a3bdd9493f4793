//! A hot standby for a synchronous key-value engine: a primary process
//! writes, a standby process follows its log, the primary is killed, and
//! the standby catches up, promotes itself and goes on writing, with
//! nothing the primary acknowledged lost.
//!
//! ```text
//! cargo run --example standby            # on a temporary directory
//! cargo run --example standby -- URL     # on any store URL
//! ```
//!
//! The example runs itself twice: `main` starts the primary as a child
//! process (`standby primary URL`), which appends puts with
//! [`objwal::blocking::Wal`] and prints the id of each one it got back
//! (durable once `append` returns). The standby follows with
//! [`objwal::blocking::WalReader::follow`], applying each entry to its
//! own memtable. After a while the standby kills the primary (SIGKILL: no
//! stop, a crash), takes in everything that landed
//! ([`objwal::blocking::Follower::catch_up`]), promotes itself by opening
//! the prefix ([`objwal::blocking::Wal::open`] fences the dead primary, or
//! a primary that is not quite dead), reads only what lies above the
//! position it had followed to, and checks that every id the primary
//! printed is in its memtable.
//!
//! What a standby needs besides the log: the state behind `obsolete`. A
//! follower never yields entries the primary had flushed and marked
//! obsolete (they may be collected), so a real standby starts from a copy
//! of the primary's flushed files (or never lets the primary flush what it
//! has not taken in). This example's primary never flushes.
#![allow(clippy::print_stdout, reason = "an example prints what it did")]

use std::collections::BTreeMap;
use std::error::Error;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use objwal::blocking::{Wal, WalReader};
use objwal::{Config, EntryId, Storage};

/// The region of the example's puts.
const REGION: u64 = 1;
/// The prefix of the primary's log.
const PREFIX: &str = "kv";

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("primary") {
        let url = args.get(2).ok_or("primary: no store URL")?;
        return primary(url);
    }
    let dir = tempfile::tempdir()?;
    let url = match args.get(1) {
        Some(url) => url.clone(),
        None => format!("file://{}", dir.path().display()),
    };
    standby(&url)
}

/// The primary: puts in a loop, each id printed once it is durable.
fn primary(url: &str) -> Result<(), Box<dyn Error>> {
    let wal = Wal::open(Storage::from_url(url)?, PREFIX, Config::default())?;
    for n in 0u64.. {
        let ids = wal.append(vec![(REGION, format!("put k{} = {n}", n % 100).into())])?;
        println!("{}", ids[0]);
    }
    Ok(())
}

/// The standby: follows, kills the primary, catches up, promotes.
fn standby(url: &str) -> Result<(), Box<dyn Error>> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["primary", url])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout of the primary")?;
    let acknowledged = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| line.trim().parse::<EntryId>().ok())
            .collect::<Vec<_>>()
    });

    // The primary's first open may not have happened yet.
    let reader =
        WalReader::open(Storage::from_url(url)?, PREFIX, Config::default()).or_else(|_| {
            std::thread::sleep(Duration::from_millis(500));
            WalReader::open(Storage::from_url(url)?, PREFIX, Config::default())
        })?;
    let mut follower = reader.follow([(REGION, 0)]);
    let mut memtable: BTreeMap<EntryId, String> = BTreeMap::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        if let Some(entry) = follower.next_timeout(Duration::from_millis(100))? {
            memtable.insert(entry.id, String::from_utf8_lossy(&entry.data).into_owned());
        }
    }
    println!(
        "following: {} entries applied, lag {:?}",
        memtable.len(),
        follower.lag()
    );

    // The primary dies (no stop: a crash).
    child.kill()?;
    child.wait()?;
    let acknowledged = acknowledged
        .join()
        .map_err(|_| "the primary's output reader panicked")?;

    // Everything that landed, then promotion: the open fences the primary.
    follower.catch_up(|entry| {
        memtable.insert(entry.id, String::from_utf8_lossy(&entry.data).into_owned());
    })?;
    let position = memtable.keys().next_back().copied().unwrap_or(0);
    let promoted = Instant::now();
    let wal = Wal::open(Storage::from_url(url)?, PREFIX, Config::default())?;
    // Only what lies above the standby's position: normally nothing.
    for entry in wal.read(REGION, position + 1) {
        let entry = entry?;
        memtable.insert(entry.id, String::from_utf8_lossy(&entry.data).into_owned());
    }
    let id = wal.append(vec![(REGION, "put k0 = from the standby".into())])?;
    println!(
        "promoted in {:?}: the first append as the writer is id {}",
        promoted.elapsed(),
        id[0]
    );
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !memtable.contains_key(id))
        .collect();
    println!(
        "the primary acknowledged {} puts; the standby holds {} entries; lost: {}",
        acknowledged.len(),
        memtable.len(),
        lost.len()
    );
    wal.stop()?;
    if lost.is_empty() {
        Ok(())
    } else {
        Err(format!("acknowledged puts lost: {lost:?}").into())
    }
}
