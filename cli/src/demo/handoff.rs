//! `objwal demo`'s handoff step: a region moves between two nodes' logs in
//! the same store, and is checked.
//!
//! Node A (prefix `<prefix>/handoff-<run>/node-a`) writes regions 1 to 3;
//! its engine flushed region 1 through its 15th entry. Region 1 moves to
//! node B (`.../node-b`), which has a log of its own: A stops writing
//! region 1 and flushes; B imports region 1's unflushed entries from A's
//! prefix with a `WalReader` (A is not fenced) and writes region 1 from
//! then on; A releases region 1 (rfcs/0009). After a restart of B the step
//! checks that B replays exactly A's unflushed entries and its own, in
//! order, with ids above every id A handed out, and that A's log reads
//! region 1 as empty and its other regions whole.
//!
//! Then region 2 moves by following (rfcs/0009, "Handoff by following"):
//! B takes it over (`Wal::take_over`) while A still writes it; at the
//! switch A stops writing region 2 and flushes, B finishes (copies what it
//! followed and the tail; the pause is printed) and A releases region 2.
//! The same checks hold after B's restart.

use std::time::{Duration, Instant};

use objwal::{Imported, Storage, Wal, WalReader};

use crate::{CliError, CliResult};

/// Entries node A writes per region.
const ENTRIES: usize = 40;
/// Region 1's entries the engine flushed on A.
const FLUSHED: usize = 15;
/// Entries A writes to regions 2 and 3 while B follows region 2.
const WHILE_FOLLOWED: usize = 30;
/// Region 2's entries the engine flushed on A before B started following.
const FLUSHED_2: usize = 10;
/// How long the demo waits for B's follower to reach A's last entry.
const CATCH_UP: Duration = Duration::from_secs(30);

fn failed(what: &str) -> impl Fn(objwal::Error) -> CliError + '_ {
    move |e| CliError::Failed(format!("handoff step: {what}: {e}"))
}

fn payload(region: u64, n: usize) -> String {
    format!("r{region} e{n}")
}

/// Runs the step on `storage` under `prefix`, tagged with the demo's run.
pub async fn run(storage: &Storage, prefix: &str, run: u32) -> CliResult {
    let base = format!("{prefix}/handoff-{run:08x}");
    let (a_prefix, b_prefix) = (format!("{base}/node-a"), format!("{base}/node-b"));
    let config = crate::store::base();
    let a = Wal::open(storage.clone(), &a_prefix, config.clone())
        .await
        .map_err(failed("opening node A"))?;
    let mut region_1 = Vec::new();
    for n in 0..ENTRIES {
        let entries = (1..=3).map(|r| (r, payload(r, n).into())).collect();
        let ids = a.append(entries).await.map_err(failed("node A appends"))?;
        region_1.push(ids[0]);
    }
    let flushed = region_1[FLUSHED - 1];
    a.obsolete(1, flushed)
        .await
        .map_err(failed("node A obsolete"))?;
    // The engine stops writing region 1 to A; everything A took is durable.
    a.flush().await.map_err(failed("node A flush"))?;

    let b = Wal::open(storage.clone(), &b_prefix, config.clone())
        .await
        .map_err(failed("opening node B"))?;
    b.append(vec![(9, "b's own".into())])
        .await
        .map_err(failed("node B appends"))?;
    let reader = WalReader::open(storage.clone(), &a_prefix, config.clone())
        .await
        .map_err(failed("reading node A's log"))?;
    let moved = b
        .import_region(&reader, 1, flushed + 1)
        .await
        .map_err(failed("node B imports region 1"))?;
    a.release_region(1)
        .await
        .map_err(failed("node A releases region 1"))?;
    let (moved_2, pause) = move_by_following(&a, &b, &reader).await?;
    a.stop().await.map_err(failed("node A stops"))?;
    b.append(vec![(1, "after the move".into())])
        .await
        .map_err(failed("node B appends to region 1"))?;
    b.append(vec![(2, "after the move".into())])
        .await
        .map_err(failed("node B appends to region 2"))?;
    b.stop().await.map_err(failed("node B stops"))?;

    // B restarts: the engine hands in the floor it recorded with the move.
    let b = Wal::open(storage.clone(), &b_prefix, config.clone())
        .await
        .map_err(failed("reopening node B"))?;
    b.obsolete(1, moved.floor)
        .await
        .map_err(failed("node B obsolete"))?;
    let replayed = entries(b.read(1, moved.floor + 1)).await?;
    b.obsolete(2, moved_2.floor)
        .await
        .map_err(failed("node B obsolete"))?;
    let replayed_2 = entries(b.read(2, moved_2.floor + 1)).await?;
    b.stop().await.map_err(failed("node B stops"))?;
    check_region_2(&replayed_2, &moved_2)?;
    let mut want: Vec<String> = (FLUSHED..ENTRIES).map(|n| payload(1, n)).collect();
    want.push("after the move".into());
    let got: Vec<String> = replayed.iter().map(|(_, p)| p.clone()).collect();
    let ordered = replayed.windows(2).all(|w| w[0].0 < w[1].0);
    let above = replayed.iter().all(|(id, _)| *id > moved.floor);
    let reader = WalReader::open(storage.clone(), &a_prefix, config)
        .await
        .map_err(failed("reading node A's log again"))?;
    let left = entries(reader.read(1, 0)).await?.len();
    let left_2 = entries(reader.read(2, 0)).await?.len();
    let others = entries(reader.read(3, 0)).await?.len();
    let want_others = ENTRIES + WHILE_FOLLOWED;
    if got != want || !ordered || !above || left + left_2 != 0 || others != want_others {
        return Err(CliError::Failed(format!(
            "handoff step: node B replays {} entries of region 1 (want {}), in order: {ordered}, \
             above every id of node A: {above}; node A still holds {left} of region 1, {left_2} of \
             region 2 and {others} of region 3 (want {want_others})",
            got.len(),
            want.len(),
        )));
    }
    out!(
        "handoff:      region 1 moved from node A to node B ({base}): {} unflushed entries imported, \
         new ids above {}; checked after B's restart",
        moved.entries,
        objwal::id::Dotted(moved.floor)
    );
    out!(
        "following:    region 2 moved while node A wrote it: B followed it, and the switch \
         (A flushes, B copies what it held and the tail) paused {:.1} ms for {} entries; checked \
         after B's restart",
        pause.as_secs_f64() * 1e3,
        moved_2.entries
    );
    Ok(())
}

/// Region 2 moves by following: B takes it over while A writes regions 2
/// and 3; the engine had flushed region 2 on A through its
/// [`FLUSHED_2`]th entry. Returns the import and the switch's pause.
async fn move_by_following(
    a: &Wal,
    b: &Wal,
    reader: &WalReader,
) -> Result<(Imported, Duration), CliError> {
    let region_2: Vec<u64> = entries(reader.read(2, 0))
        .await?
        .iter()
        .map(|e| e.0)
        .collect();
    let flushed = region_2.get(FLUSHED_2 - 1).copied().unwrap_or(0);
    a.obsolete(2, flushed)
        .await
        .map_err(failed("node A obsolete"))?;
    let takeover = b
        .take_over(reader, 2, flushed + 1)
        .map_err(failed("node B takes region 2 over"))?;
    let mut last = 0;
    for n in ENTRIES..ENTRIES + WHILE_FOLLOWED {
        let entries = (2..=3).map(|r| (r, payload(r, n).into())).collect();
        let ids = a.append(entries).await.map_err(failed("node A appends"))?;
        last = ids[0];
    }
    // B's follower keeps up while A writes (a standby a few polls behind).
    let deadline = Instant::now() + CATCH_UP;
    while takeover.progress().position < last {
        if Instant::now() > deadline {
            return Err(CliError::Failed(format!(
                "handoff step: node B's follower did not reach region 2's last entry within {CATCH_UP:?} \
                 ({:?})",
                takeover.progress()
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The switch: the engine stops writing region 2 to A, A flushes, B
    // finishes, A releases.
    let started = Instant::now();
    a.flush().await.map_err(failed("node A flush"))?;
    let moved = takeover
        .finish()
        .await
        .map_err(failed("node B finishes the takeover of region 2"))?;
    let pause = started.elapsed();
    a.release_region(2)
        .await
        .map_err(failed("node A releases region 2"))?;
    Ok((moved, pause))
}

/// B replays region 2: A's entries after the flushed ones, then its own.
fn check_region_2(replayed: &[(u64, String)], moved: &Imported) -> Result<(), CliError> {
    let mut want: Vec<String> = (FLUSHED_2..ENTRIES + WHILE_FOLLOWED)
        .map(|n| payload(2, n))
        .collect();
    want.push("after the move".into());
    let got: Vec<String> = replayed.iter().map(|(_, p)| p.clone()).collect();
    let ordered = replayed.windows(2).all(|w| w[0].0 < w[1].0);
    let above = replayed.iter().all(|(id, _)| *id > moved.floor);
    if got != want || !ordered || !above {
        return Err(CliError::Failed(format!(
            "handoff step: after a move by following node B replays {} entries of region 2 \
             (want {}), in order: {ordered}, above every id of node A: {above}",
            got.len(),
            want.len()
        )));
    }
    Ok(())
}

/// Every (id, payload) of a read.
async fn entries(
    read: impl futures::Stream<Item = Result<objwal::Entry, objwal::Error>>,
) -> Result<Vec<(u64, String)>, CliError> {
    use futures::StreamExt;
    let mut read = Box::pin(read);
    let mut out = Vec::new();
    while let Some(entry) = read.next().await {
        let entry = entry.map_err(failed("a replay"))?;
        out.push((entry.id, String::from_utf8_lossy(&entry.data).into_owned()));
    }
    Ok(out)
}
