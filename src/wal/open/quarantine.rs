//! Recovery around damage: classifying each listed object, keeping the chain
//! whole across damaged objects, and naming what will not be replayed.
//!
//! A damaged object (its tail does not decode, its epoch is implausible, it
//! holds another sequence than its key's) stays a link of the chain when
//! something says where it stands: its own header, read from its first
//! bytes when its tail is gone, or else a successor's link to it, from which
//! its epoch is known and its predecessor is taken to be the nearest lower
//! object of an epoch not above it (a warning names any sequences that
//! assumption skips). On the chain it is indexed as a placeholder without
//! segments, so reads pass over it, the next start object links through it
//! and every later open finds it again. What it held becomes holes
//! ([`crate::wal::open::damage`]).
//!
//! Pure except [`examine`] and [`learn`], which read one object.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::chain::{ObjectSummary, Selection};
use crate::catalog::{Catalog, IndexedObject};
use crate::error::Error;
use crate::format::{self, Header, Link, MarkRecord, ReleaseRecord, SegmentIndex, TailDecode};
use crate::storage::{ObjectStorage, Storage, StorageError};
use crate::wal::protocol::retry::{Backoff, RetryPolicy};

use super::damage::{Damage, DamagedObject, UnreplayedObject};
use super::tail::{check_plausible, read_tail_sized, RecoveredObject, TailWindow, TAIL_WINDOW};

/// One listed object, as recovery found it.
#[derive(Debug)]
pub(crate) enum Examined {
    /// Its tail decoded and is plausible.
    Intact(RecoveredObject),
    /// It is structurally damaged.
    Damaged(Damaged),
}

/// A structurally damaged object and what could still be learned of it.
#[derive(Debug)]
pub(crate) struct Damaged {
    pub(crate) key: String,
    pub(crate) size: u64,
    /// What recovery would have failed with.
    pub(crate) error: Error,
    /// Moved under `quarantine/` by `objwal repair`.
    pub(crate) quarantined: bool,
    /// Its header fields, when a decodable, plausible copy names its key's
    /// sequence (from the tail, else from the header itself).
    pub(crate) header: Option<Header>,
    /// Its region segments, when its footer decodes.
    pub(crate) segments: Option<Vec<SegmentIndex>>,
    /// Its mark records (flush marks and its jump) and release records,
    /// when its tail still gives them (`None`: unknown). Its jump says where
    /// its writer's run goes on after it (rfcs/0006, "Runs"); its marks and
    /// releases still count, as in an intact object: they have CRCs of
    /// their own.
    pub(crate) records: Option<(Vec<MarkRecord>, Vec<ReleaseRecord>)>,
    /// Nothing is at its key: a missing object ([`super::missing`]).
    pub(crate) absent: bool,
}

impl Damaged {
    /// Where its writer's run goes on after it, at `sequence`: past its
    /// jump, when its records are known and carry one.
    pub(crate) fn next_key(&self, sequence: u64) -> u64 {
        let jump = self
            .records
            .as_ref()
            .and_then(|(marks, _)| marks.iter().find(|m| m.is_jump()).map(|m| m.watermark));
        crate::wal::protocol::rules::next_key(sequence, jump)
    }
}

/// Looks an object recovery takes before it gives up on settling a
/// verdict: a failure is believed (damage) only when two looks fail the
/// same way, so one read gone wrong in transit never is.
const LOOKS: usize = 3;

/// What one look at an object's tail found.
enum Look {
    Intact(RecoveredObject),
    /// Collected after the listing.
    Gone,
    /// It failed in a way its bytes decide: a tail that does not decode
    /// (`misplaced: false`), or a tail that decodes but is implausible or
    /// names another sequence (`misplaced: true`: nothing in it is trusted).
    Damaged {
        error: Error,
        misplaced: bool,
    },
    /// The request failed.
    Failed(Error),
}

/// Reads the tail of the object at `key` (with the open's learned
/// `window`) and classifies it; `None` when it is gone (collected after the
/// listing).
///
/// An object is damaged only when a second look fails the same way (the
/// same ranges read, the same failure): one read corrupted in transit,
/// followed by a read that decodes, is an intact object. A decode failure
/// no second look confirms within [`LOOKS`] is a retryable error: recovery
/// neither trusts the object nor calls it damaged (under
/// `on_damaged_object = "quarantine"` damage means holes and, once the
/// boundary passes it, deletion).
///
/// A failed request says nothing of the object's bytes (an answer cut
/// short is one: `Storage::read` refuses it). With `retry` (an open), a
/// transient failure is repeated after the policy's delay, up to its
/// `stop_attempts` tries, and does not count as a look; then, or when it
/// is not transient, or without `retry` (a follower, which repeats its own
/// step), it is returned as it is.
pub(crate) async fn examine(
    storage: &Storage,
    key: &str,
    listed_size: u64,
    sequence: u64,
    window: &TailWindow,
    retry: Option<&RetryPolicy>,
) -> Result<Option<Examined>, Error> {
    // Every look reads the same ranges: the same bytes fail the same way.
    // The size is the listing's until damage is about to be confirmed,
    // then the object's own (a listing can understate it: issue 30 item 9).
    let mut size = listed_size;
    let mut size_confirmed = false;
    let mut window_len = size.min(window.len());
    let mut failures: Vec<String> = Vec::new();
    let mut last: Option<Error> = None;
    let mut repeats = Repeats::new(retry);
    let mut look = 0;
    while look < LOOKS {
        let (error, misplaced) =
            match look_once(storage, key, size, sequence, window_len, window).await {
                Look::Intact(object) => {
                    if let Some(error) = &last {
                        tracing::warn!(key, look = look + 1, %error,
                        "an object's tail failed a read, then read intact: a read gone wrong \
                         in transit, not damage");
                    }
                    return Ok(Some(Examined::Intact(object)));
                }
                Look::Gone => return Ok(None),
                // A failed request says nothing of the bytes: repeated (not
                // a look), or the error.
                Look::Failed(e) => {
                    repeats.after(key, e).await?;
                    continue;
                }
                Look::Damaged { error, misplaced } => (error, misplaced),
            };
        look += 1;
        let failure = error.to_string();
        if !failures.contains(&failure) {
            failures.push(failure);
            last = Some(error);
            continue;
        }
        if !size_confirmed {
            // Two looks agree: before anything is called damaged, the
            // object's size from the object itself (one suffix read).
            let actual = match storage.read_suffix(key, 1).await {
                Ok(suffix) => suffix.size,
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => {
                    repeats.after(key, Error::Storage { source: e }).await?;
                    continue;
                }
            };
            size_confirmed = true;
            if actual != size {
                tracing::warn!(
                    key,
                    listed = size,
                    actual,
                    "the listing gave a size the object does not have: looking again at its \
                     own size"
                );
                size = actual;
                window_len = size.min(window.len());
                failures.clear();
                last = None;
                look = 0;
                continue;
            }
        }
        let (header, segments, records) = if misplaced {
            (None, None, None)
        } else {
            loop {
                match learn(storage, key, size, sequence).await {
                    Ok(learned) => break learned,
                    Err(e) => repeats.after(key, e).await?,
                }
            }
        };
        return Ok(Some(Examined::Damaged(Damaged {
            key: key.to_owned(),
            size,
            error,
            quarantined: false,
            header,
            segments,
            records,
            absent: false,
        })));
    }
    let detail = last.map_or_else(String::new, |e| e.to_string());
    Err(Error::Storage {
        source: StorageError::transient(format!(
            "{LOOKS} reads of its tail did not agree on what it holds (last: {detail}); \
             neither trusted nor taken for damaged: repeat the open"
        ))
        .with_key(key),
    })
}

/// The repeats of the failed requests of one examination.
struct Repeats<'a> {
    retry: Option<&'a RetryPolicy>,
    backoff: Option<Backoff>,
}

impl<'a> Repeats<'a> {
    fn new(retry: Option<&'a RetryPolicy>) -> Self {
        Repeats {
            retry,
            backoff: retry.map(RetryPolicy::backoff),
        }
    }

    /// After request failed with `error`: waits the policy's delay when
    /// the failure is transient and tries are left (the caller repeats the
    /// request), else the error.
    async fn after(&mut self, key: &str, error: Error) -> Result<(), Error> {
        let transient = matches!(&error, Error::Storage { source } if source.is_transient());
        let (Some(retry), Some(backoff)) = (self.retry, self.backoff.as_mut()) else {
            return Err(error);
        };
        if !transient || backoff.failures() + 1 >= retry.stop_attempts {
            return Err(error);
        }
        let delay = backoff.fail();
        tracing::info!(key, %error, ?delay, tries = backoff.failures(),
            "a read of an object's tail failed; repeating it");
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

/// One look at an object's tail, reading the last `window_len` bytes.
async fn look_once(
    storage: &Storage,
    key: &str,
    size: u64,
    sequence: u64,
    window_len: u64,
    window: &TailWindow,
) -> Look {
    let object = match read_tail_sized(storage, key, size, window_len, window).await {
        Ok(object) => object,
        Err(Error::Storage { source }) if source.is_not_found() => return Look::Gone,
        Err(error @ Error::Corrupted { .. }) => {
            return Look::Damaged {
                error,
                misplaced: false,
            }
        }
        Err(e) => return Look::Failed(e),
    };
    let header = object.tail.header();
    let problem = check_plausible(key, header).err().or_else(|| {
        (header.sequence != sequence).then(|| {
            Error::recovery(format!(
                "object {key} holds sequence {}, not the sequence of its key",
                header.sequence
            ))
        })
    });
    match problem {
        None => Look::Intact(object),
        // A misplaced or implausible object: nothing in it is trusted.
        Some(error) => Look::Damaged {
            error,
            misplaced: true,
        },
    }
}

/// What a damaged object still says of itself: the header fields and the
/// region segments of a footer that decodes (the damage was elsewhere),
/// else the header from its first bytes. Decoding failures are answers
/// (`None`); storage failures are errors.
pub(crate) async fn learn(
    storage: &Storage,
    key: &str,
    size: u64,
    sequence: u64,
) -> Result<Learned, Error> {
    let trusted = |h: &Header| h.sequence == sequence && check_plausible(key, h).is_ok();
    let window_start = size.saturating_sub(TAIL_WINDOW);
    let window = storage.read(key, window_start..size).await?;
    let tail = match format::decode_tail(&window, size) {
        Ok(TailDecode::Complete(tail)) => Some(tail),
        Ok(TailDecode::NeedFooter { trailer, footer }) => {
            let bytes = storage.read(key, footer).await?;
            format::decode_footer(trailer, &bytes).ok()
        }
        Err(_) => None,
    };
    if let Some(tail) = tail.filter(|t| trusted(t.header())) {
        let segments = tail.region_segments().copied().collect();
        // The records segments the footer locates (each with its CRC).
        let marks = match tail.marks_segment() {
            None => Some(Vec::new()),
            Some(index) => {
                let bytes = storage.read(key, index.range()).await?;
                format::decode_marks(&bytes, index, sequence).ok()
            }
        };
        let releases = match tail.release_segment() {
            None => Some(Vec::new()),
            Some(index) => {
                let bytes = storage.read(key, index.range()).await?;
                format::decode_releases(&bytes, index, sequence).ok()
            }
        };
        let records = marks.zip(releases);
        return Ok((Some(*tail.header()), Some(segments), records));
    }
    let header_len = format::HEADER_LEN as u64;
    if size < header_len {
        return Ok((None, None, None));
    }
    let bytes = storage.read(key, 0..header_len).await?;
    let header = format::decode_header(&bytes).ok().filter(trusted);
    Ok((header, None, None))
}

/// What [`learn`] found: the header, the region segments and the records
/// (marks and releases), each when known.
pub(crate) type Learned = (
    Option<Header>,
    Option<Vec<SegmentIndex>>,
    Option<(Vec<MarkRecord>, Vec<ReleaseRecord>)>,
);

/// Chain selection over intact and damaged objects: the catalog of the
/// tip's chain (damaged links as placeholders) and what is left out.
///
/// `collected_below`: objects below it were listed and collected while
/// recovery read them (0: none), so every chain counts as collected below
/// it, whatever boundary its objects carry.
pub(crate) fn assemble(
    intact: &BTreeMap<u64, RecoveredObject>,
    damaged: &BTreeMap<u64, Damaged>,
    collected_below: u64,
    object_key: impl Fn(u64) -> String,
) -> Result<(Catalog, Selection, Damage), Error> {
    let mut summaries: BTreeMap<u64, ObjectSummary> = intact
        .iter()
        .map(|(s, o)| {
            let mut summary = o.summary();
            summary.reclaim_boundary = summary.reclaim_boundary.max(collected_below.min(*s));
            (*s, summary)
        })
        .collect();
    for (&sequence, d) in damaged {
        if let Some(h) = d.header {
            summaries.insert(sequence, summary(&h, d));
        }
    }
    // From the top down: a damaged object's linkers may be damaged too.
    let named = |k: u64| damaged.get(&k).is_some_and(|d| d.absent);
    let headerless: BTreeSet<u64> = damaged
        .iter()
        .filter(|(_, d)| !d.absent && d.header.is_none())
        .map(|(s, _)| *s)
        .collect();
    let acknowledged = |k: u64| match (intact.get(&k), damaged.get(&k)) {
        (Some(o), _) => o.acknowledged_through(),
        (None, Some(d)) => d
            .records
            .as_ref()
            .and_then(|(marks, _)| super::tail::acknowledged_through(marks, k)),
        (None, None) => None,
    };
    // Again until nothing changes: a start object's stand-in links to the
    // tip its opener chose, which may lie above a lower stand-in bridged
    // after it (each pass settles at least the lowest changed one).
    let unknown: Vec<(u64, &Damaged)> = damaged
        .iter()
        .rev()
        .filter(|(_, d)| d.header.is_none())
        .map(|(s, d)| (*s, d))
        .collect();
    for _ in 0..=unknown.len() {
        let mut changed = false;
        for &(sequence, d) in &unknown {
            let Some(s) = bridge(
                &summaries,
                sequence,
                d.next_key(sequence),
                named,
                &headerless,
                acknowledged,
            ) else {
                continue;
            };
            changed |= summaries.insert(sequence, s) != Some(s);
        }
        if !changed {
            break;
        }
    }
    for &(sequence, d) in &unknown {
        let link = summaries.get(&sequence).and_then(|s| s.link);
        if let Some(Link { sequence: p, .. }) = link.filter(|l| l.sequence + 1 < sequence) {
            tracing::warn!(key = %d.key, predecessor = p,
                "a damaged object's predecessor is unknown: taking the nearest lower object; \
                 sequences between them are absent (never created, or missing)");
        }
    }
    let mut selection =
        crate::catalog::chain::select(&summaries).map_err(|e| Error::recovery(e.to_string()))?;
    // No sequence of a damaged object may be used again.
    if let Some((&last, _)) = damaged.last_key_value() {
        selection.max_sequence = selection.max_sequence.max(last);
    }
    let mut catalog = Catalog::new();
    for sequence in &selection.chain {
        let indexed = match (intact.get(sequence), damaged.get(sequence)) {
            (Some(object), _) => object.indexed(),
            (None, Some(d)) => placeholder(summaries.get(sequence), *sequence, d),
            (None, None) => continue,
        };
        catalog
            .insert(indexed)
            .map_err(|e| Error::recovery(e.to_string()))?;
    }
    let boundary = selection.tip.map_or(0, |t| t.reclaim_boundary);
    let damaged = damaged
        .iter()
        .map(|(&sequence, d)| DamagedObject {
            key: d.key.clone(),
            sequence,
            reason: d.error.to_string(),
            quarantined: d.quarantined,
            segments: d.segments.clone(),
            missing: sequence >= boundary
                && (selection.chain.contains(&sequence) || !summaries.contains_key(&sequence)),
            absent: d.absent,
            last_sequence: if d.absent {
                d.next_key(sequence).saturating_sub(1).max(sequence)
            } else {
                sequence
            },
        })
        .collect();
    let unreplayed = unreplayed(intact, &summaries, &selection, object_key);
    Ok((
        catalog,
        selection,
        Damage {
            damaged,
            unreplayed,
        },
    ))
}

pub(super) fn summary(h: &Header, d: &Damaged) -> ObjectSummary {
    // Its content is not known. Where a newer run links to its key, an
    // older epoch's object there can only be a filler (rule 8 of rfcs/0006:
    // the run's own object would carry the run's epoch), so it counts as
    // empty; at any other key emptiness changes nothing. Its jump, when its
    // records decode, says where its run goes on.
    let jump = d
        .records
        .as_ref()
        .and_then(|(marks, _)| marks.iter().find(|m| m.is_jump()))
        .map(|m| m.watermark);
    ObjectSummary {
        sequence: h.sequence,
        epoch: h.epoch,
        link: h.link,
        reclaim_boundary: h.reclaim_boundary,
        next_key: crate::wal::protocol::rules::next_key(h.sequence, jump),
        empty: !crate::wal::protocol::rules::is_settle_marker(h),
    }
}

/// A summary for the damaged object of `sequence` whose header is unknown
/// (or the missing object there), from the objects that link to it; `None`
/// when nothing does. `next_key`: where its run goes on after it (its jump,
/// when known). `named(k)`: whether the key `k`, which holds nothing, is a
/// missing object too (rfcs/0003); `headerless`: the keys where a damaged
/// object whose header is unknown stands; `acknowledged(s)`: the last key
/// the writer of the object at `s` had acknowledged when it sealed it, when
/// it says.
pub(super) fn bridge(
    summaries: &BTreeMap<u64, ObjectSummary>,
    sequence: u64,
    next_key: u64,
    named: impl Fn(u64) -> bool,
    headerless: &BTreeSet<u64>,
    acknowledged: impl Fn(u64) -> Option<u64>,
) -> Option<ObjectSummary> {
    use crate::catalog::chain;
    // Objects that link to it, directly or over fillers above it.
    let linkers: Vec<&ObjectSummary> = summaries
        .range(sequence.checked_add(1)?..)
        .map(|(_, o)| o)
        .filter(|o| {
            o.link.is_some_and(|l| l.sequence == sequence)
                || chain::broken(summaries, o).is_some_and(|b| (b.low..=b.high).contains(&sequence))
        })
        .collect();
    let epoch = linkers
        .iter()
        .filter_map(|o| o.link)
        .map(|l| l.epoch)
        .max()?;
    let boundary = linkers
        .iter()
        .map(|o| o.reclaim_boundary)
        .min()
        .unwrap_or(0)
        .min(sequence);
    // The nearest object of its run below it (fillers lie between the run's
    // objects, rfcs/0006 rule 8; a settle marker is nobody's run), else,
    // for a run's first object, the tip its opener chose: chain selection
    // over the older epochs' objects below it, as that open ran it (the
    // nearest older object may be a dead one the opener passed over, and
    // a chain through it skips the run it did choose). Failing that, the
    // nearest older object that is not a settle marker.
    let below = || summaries.range(..sequence).rev().map(|(_, o)| o);
    let run_below = below().find(|o| o.epoch == epoch && !o.is_settle_marker());
    // With none of its run listed below, it is the run's start object
    // unless an object of its run above says its writer had acknowledged
    // a key below it: then the run's objects below are gone too, and it
    // links within the run (to the key below it), not to an older tip.
    let within_run = run_below.is_some()
        || summaries
            .range(sequence.checked_add(1)?..)
            .any(|(&s, o)| o.epoch == epoch && acknowledged(s).is_some_and(|a| a < sequence));
    // It links as its writer's object did, so that the walk goes down
    // there as for any object of the run: to a filler right below it (the
    // writer sealed it before it learned the key was taken; only within a
    // run: a start object never links to a filler, rule 6), to a damaged
    // object right below it, or to the run's next key after its object
    // below when every key from there to it holds nothing and that key is
    // a missing object too (one object with a jump, or several, stood
    // there: the search names the lowest, which the run certainly used).
    let over = sequence
        .checked_sub(1)
        .and_then(|k| match summaries.get(&k) {
            Some(o) => (o.is_filler_for(epoch) && within_run).then_some(k),
            None if headerless.contains(&k) => Some(k),
            None if run_below.is_none() => within_run.then_some(k),
            None => {
                let run = run_below?;
                let n = chain::next_key_over_fillers(summaries, run, epoch, sequence);
                let between = summaries.range(n..sequence).next().is_some()
                    || headerless.range(n..sequence).next().is_some();
                if n >= sequence {
                    None
                } else if between {
                    // Something stands between: not one object with a
                    // jump; the key right below, which holds nothing.
                    Some(k)
                } else {
                    named(n).then_some(n)
                }
            }
        });
    let predecessor = run_below
        .or_else(|| openers_tip(summaries, sequence, epoch))
        .or_else(|| below().find(|o| o.epoch < epoch && !o.is_settle_marker()));
    let link = match (over, predecessor) {
        (Some(k), _) => Some(Link { sequence: k, epoch }),
        (None, Some(p)) => Some(Link {
            sequence: p.sequence,
            epoch: p.epoch,
        }),
        // Nothing below but settle markers: a first object, or everything
        // below is missing. Below the boundary its linkers carry it was
        // collected: it links there (the chain is complete, and the search
        // does not name, key by key, what never held an object); else to
        // the key below (complete only if a boundary says it was collected).
        (None, None) => (sequence > 1).then(|| Link {
            sequence: if boundary > 1 {
                boundary - 1
            } else {
                sequence - 1
            },
            epoch,
        }),
    };
    Some(ObjectSummary {
        sequence,
        epoch,
        link,
        reclaim_boundary: boundary,
        next_key,
        empty: false,
    })
}

/// The tip the opener of a run of `epoch` whose start object is at
/// `sequence` chose: chain selection over the objects of older epochs
/// below it (settle markers are never a tip, rfcs/0006 K4), as that open
/// listed them, less what was collected since. That run's later objects
/// and newer runs chain through the start object, and what the highest
/// boundary among them says is collected is so on the opener's chain: no
/// candidate's break below it counts against it (its own boundary may be
/// older than the collection).
fn openers_tip(
    summaries: &BTreeMap<u64, ObjectSummary>,
    sequence: u64,
    epoch: u64,
) -> Option<&ObjectSummary> {
    let boundary = summaries
        .range(sequence..)
        .filter(|(_, o)| o.epoch >= epoch)
        .map(|(_, o)| o.reclaim_boundary)
        .max()
        .unwrap_or(0)
        .min(sequence);
    let older: BTreeMap<u64, ObjectSummary> = summaries
        .range(..sequence)
        .filter(|(_, o)| o.epoch < epoch && !o.is_settle_marker())
        .map(|(&s, o)| {
            let mut o = *o;
            o.reclaim_boundary = o.reclaim_boundary.max(boundary.min(s));
            (s, o)
        })
        .collect();
    let tip = crate::catalog::chain::select(&older).ok()?.tip?;
    summaries.get(&tip.sequence)
}

/// A damaged chain link as the catalog keeps it: no segments to read, its
/// records when known (so that its run's next key is right, and its flush
/// marks and releases hold).
fn placeholder(summary: Option<&ObjectSummary>, sequence: u64, d: &Damaged) -> IndexedObject {
    let (marks, releases) = d.records.clone().unwrap_or_default();
    IndexedObject {
        sequence,
        epoch: summary.map_or(0, |s| s.epoch),
        link: summary.and_then(|s| s.link),
        reclaim_boundary: summary.map_or(0, |s| s.reclaim_boundary),
        size: d.size,
        segments: Vec::new(),
        marks,
        releases,
    }
}

/// Intact objects off the tip's chain holding entries or release records:
/// above the tip, of an epoch not below the tip's (an older epoch's orphans
/// above a newer tip were superseded by a newer process: fencing
/// guarantees none of their entries was acknowledged); and anywhere, of an
/// epoch above the tip's (a newer writer's chain that broke, while an
/// older epoch's object, a filler, is complete).
fn unreplayed(
    intact: &BTreeMap<u64, RecoveredObject>,
    summaries: &BTreeMap<u64, ObjectSummary>,
    selection: &Selection,
    object_key: impl Fn(u64) -> String,
) -> Vec<UnreplayedObject> {
    let Some(tip) = selection.tip else {
        return Vec::new();
    };
    selection
        .orphans
        .iter()
        .copied()
        .filter_map(|sequence| {
            let object = intact.get(&sequence)?;
            let header = object.tail.header();
            if sequence < tip.sequence && header.epoch <= tip.epoch {
                return None;
            }
            let segments: Vec<SegmentIndex> = object.tail.region_segments().copied().collect();
            if header.epoch < tip.epoch || (segments.is_empty() && object.releases.is_empty()) {
                return None;
            }
            Some(UnreplayedObject {
                key: object_key(sequence),
                sequence,
                epoch: header.epoch,
                segments,
                releases: object.releases.clone(),
                broken_at: broken_at(summaries, selection, sequence),
            })
        })
        .collect()
}

/// Following links down from `sequence`: the first predecessor that is not
/// present (or not of the linked epoch); the last object walked when the
/// walk ends otherwise.
fn broken_at(
    summaries: &BTreeMap<u64, ObjectSummary>,
    selection: &Selection,
    sequence: u64,
) -> u64 {
    let mut cursor = sequence;
    while let Some(object) = summaries.get(&cursor) {
        match crate::catalog::chain::predecessor(summaries, object) {
            None => return cursor,
            Some(Ok(pred)) if selection.chain.contains(&pred) => return cursor,
            Some(Ok(pred)) => cursor = pred,
            Some(Err(missing)) => return missing,
        }
    }
    cursor
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::chain::tests::{filler, map, obj};

    #[test]
    fn a_missing_object_between_two_fillers_is_named_and_bridged_at_its_own_key() {
        // Epoch 2's 3, epoch 1's fillers at 4 and 6, epoch 2's 7 linking to
        // the filler at 6; 5 (linking to the filler at 4) is absent or
        // damaged. The break is at 5, not at the filler's key 4, and a
        // damaged 5 is bridged from 7.
        let s = map(&[
            obj(3, 2, None, 1),
            filler(4, 1),
            filler(6, 1),
            obj(7, 2, Some((6, 2)), 1),
        ]);
        let selection = crate::catalog::chain::select(&s).unwrap();
        assert_eq!(selection.tip.map(|t| t.sequence), Some(3));
        assert_eq!(broken_at(&s, &selection, 7), 5);
        // Bridged as its writer sealed it: linking to the filler at 4,
        // which the walk steps over to 3.
        let bridged = bridge(&s, 5, 6, |_| false, &BTreeSet::new(), |_| None)
            .expect("7's chain goes down to 5");
        assert_eq!(
            (bridged.epoch, bridged.link.map(|l| l.sequence)),
            (2, Some(4))
        );
        let mut s = s;
        s.insert(5, bridged);
        assert_eq!(
            crate::catalog::chain::predecessor(&s, &bridged),
            Some(Ok(3))
        );
    }

    #[test]
    fn a_bridge_takes_the_linkers_epoch_and_the_nearest_lower_object() {
        // 1 <- (2 damaged) <- 3; 64 <- (70 damaged) <- 71 across a fence gap.
        let s = map(&[
            obj(1, 1, None, 1),
            obj(3, 1, Some((2, 1)), 1),
            obj(64, 2, Some((3, 1)), 1),
            obj(71, 2, Some((70, 2)), 1),
        ]);
        assert_eq!(
            bridge(&s, 2, 3, |_| false, &BTreeSet::new(), |_| None),
            Some(obj(2, 1, Some((1, 1)), 1))
        );
        assert_eq!(
            bridge(&s, 70, 71, |_| false, &BTreeSet::new(), |_| None),
            Some(obj(70, 2, Some((64, 2)), 1))
        );
        // Nothing links to 50.
        assert_eq!(
            bridge(&s, 50, 51, |_| false, &BTreeSet::new(), |_| None),
            None
        );
        // Nothing below: the link names the missing predecessor, which the
        // boundary of the linker may or may not excuse.
        let s = map(&[obj(8, 1, Some((7, 1)), 7)]);
        assert_eq!(
            bridge(&s, 7, 8, |_| false, &BTreeSet::new(), |_| None),
            Some(obj(7, 1, Some((6, 1)), 7))
        );
    }

    #[test]
    fn the_break_is_the_first_absent_predecessor() {
        let s = map(&[
            obj(1, 1, None, 1),
            obj(2, 1, Some((1, 1)), 1),
            obj(4, 1, Some((3, 1)), 1),
            obj(5, 1, Some((4, 1)), 1),
        ]);
        let selection = crate::catalog::chain::select(&s).unwrap();
        assert_eq!(broken_at(&s, &selection, 5), 3);
        assert_eq!(broken_at(&s, &selection, 4), 3);
    }
}
