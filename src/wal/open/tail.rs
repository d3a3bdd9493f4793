//! One object's tail, read and checked: what recovery reads of every
//! object and what quarantine reads again before it calls one damaged.
//!
//! The tail is the footer, the trailer and the records segments (releases,
//! flush marks) before them; one ranged read of a learned window gets all
//! of it in the usual case ([`TailWindow`]).

use bytes::Bytes;

use crate::catalog::chain::ObjectSummary;
use crate::catalog::IndexedObject;
use crate::error::Error;
use crate::format::{self, Header, MarkRecord, ReleaseRecord, SegmentIndex, Tail, TailDecode};
use crate::storage::{ObjectStorage, Storage};

/// Bytes read at the end of a damaged object to learn what it still says
/// of itself ([`crate::wal::open::quarantine::learn`]; rare, so generous).
pub(crate) const TAIL_WINDOW: u64 = 64 * 1024;

/// The smallest tail window: a trailer and a footer of 83 segments. A tail
/// this small never needs a second read, whatever was learned.
pub(crate) const FIRST_TAIL_WINDOW: u64 = 4 * 1024;

/// Bytes read before a footer that starts before the window, for the
/// records segments that sit right before it (a marks segment of a few
/// records, a release segment): one read instead of two or three.
pub(crate) const RECORDS_SLACK: u64 = 1024;

/// The window recovery reads at the end of each object, learned from the
/// objects already read: the largest tail needed so far (footer, trailer
/// and the release segment before them) plus a quarter, and never less than
/// [`FIRST_TAIL_WINDOW`]. Objects of one prefix have similar footers (one
/// entry per region of the batch), so after the first few objects one read
/// per object is the rule, and a tail larger than all before costs one
/// more read (and raises the window). Shared by the reads in flight.
#[derive(Debug, Default)]
pub(crate) struct TailWindow {
    /// The largest tail needed so far (0: nothing read yet).
    needed: std::sync::atomic::AtomicU64,
}

impl TailWindow {
    /// The bytes to read at the end of the next object.
    pub(crate) fn len(&self) -> u64 {
        let needed = self.needed.load(std::sync::atomic::Ordering::Relaxed);
        needed.saturating_add(needed / 4).max(FIRST_TAIL_WINDOW)
    }

    /// Learns that an object's tail took its last `needed` bytes.
    pub(crate) fn learn(&self, needed: u64) {
        self.needed
            .fetch_max(needed, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What recovery learned about one object.
#[derive(Debug, Clone)]
pub(crate) struct RecoveredObject {
    pub(crate) size: u64,
    pub(crate) tail: Tail,
    pub(crate) marks: Vec<MarkRecord>,
    pub(crate) releases: Vec<ReleaseRecord>,
}

/// The last key the writer of the object at `sequence` had acknowledged
/// when it sealed it: its jump record, when that lies below `sequence`
/// (above, it says where the run goes on).
pub(crate) fn acknowledged_through(marks: &[MarkRecord], sequence: u64) -> Option<u64> {
    marks
        .iter()
        .find(|m| m.is_jump())
        .map(|m| crate::format::sequence_of(m.watermark))
        .filter(|a| *a < sequence)
}

impl RecoveredObject {
    pub(crate) fn summary(&self) -> ObjectSummary {
        let h = self.tail.header();
        let jump = self.marks.iter().find(|m| m.is_jump()).map(|m| m.watermark);
        ObjectSummary {
            sequence: h.sequence,
            epoch: h.epoch,
            link: h.link,
            reclaim_boundary: h.reclaim_boundary,
            next_key: crate::wal::protocol::rules::next_key(h.sequence, jump),
            empty: self.is_empty() && !crate::wal::protocol::rules::is_settle_marker(h),
        }
    }

    /// The last key its writer had acknowledged when it sealed it (its
    /// jump record below its own sequence), if it says.
    pub(crate) fn acknowledged_through(&self) -> Option<u64> {
        acknowledged_through(&self.marks, self.tail.header().sequence)
    }

    pub(crate) fn indexed(&self) -> IndexedObject {
        IndexedObject::from_tail(
            &self.tail,
            self.size,
            self.marks.clone(),
            self.releases.clone(),
        )
    }
}

/// Reads the tail of one object of `size` bytes through a window of its
/// last `window_len` bytes (and the footer or a records segment when they
/// start before it), so that a second look reads the ranges the first read.
pub(crate) async fn read_tail_sized(
    storage: &Storage,
    key: &str,
    size: u64,
    window_len: u64,
    window: &TailWindow,
) -> Result<RecoveredObject, Error> {
    let window_len = window_len.min(size);
    let window_start = size - window_len;
    let bytes = storage.read(key, window_start..size).await?;
    tail_from_window(storage, key, size, window_start, &bytes, window).await
}

/// The tail of an object of `size` bytes whose last bytes, from
/// `window_start`, are `bytes`: the footer, and a marks or release segment,
/// read separately when they start before the window; teaches `window`
/// what this object's tail took. [`read_tail_sized`] after its first read,
/// and a follower after a poll that read an object's suffix.
pub(crate) async fn tail_from_window(
    storage: &Storage,
    key: &str,
    size: u64,
    window_start: u64,
    bytes: &Bytes,
    window: &TailWindow,
) -> Result<RecoveredObject, Error> {
    let corrupted = |e| Error::corrupted(key, e);
    // A footer that starts before the window is read with the bytes just
    // before it, where the records segments sit (the marks segment, which
    // most objects carry, and the release segment).
    let mut before_footer: Option<(u64, Bytes)> = None;
    let tail = match format::decode_tail(bytes, size).map_err(corrupted)? {
        TailDecode::Complete(tail) => tail,
        TailDecode::NeedFooter { trailer, footer } => {
            let from = footer.start.saturating_sub(RECORDS_SLACK);
            let read = storage.read(key, from..footer.end).await?;
            let skip = usize::try_from(footer.start - from).unwrap_or(usize::MAX);
            let footer_bytes = read
                .get(skip..)
                .map(|_| read.slice(skip..))
                .unwrap_or_default();
            let tail = format::decode_footer(trailer, &footer_bytes).map_err(corrupted)?;
            before_footer = Some((from, read));
            tail
        }
    };
    let release = tail.release_segment().copied();
    let marks = tail.marks_segment().copied();
    let tail_start = [release, marks]
        .into_iter()
        .flatten()
        .map(|s| s.offset)
        .fold(tail.trailer.footer_offset, u64::min);
    window.learn(size.saturating_sub(tail_start));
    let sequence = tail.header().sequence;
    // A records segment from the window when it holds it (the usual case:
    // both sit right before the footer), else with one ranged read.
    let slice_of = |from: u64, read: &Bytes, index: &SegmentIndex| {
        let start = usize::try_from(index.offset.checked_sub(from)?).ok()?;
        let end = start.checked_add(usize::try_from(index.len).ok()?)?;
        read.get(start..end).map(|_| read.slice(start..end))
    };
    let segment = |index: SegmentIndex| {
        let within = slice_of(window_start, bytes, &index).or_else(|| {
            before_footer
                .as_ref()
                .and_then(|(from, read)| slice_of(*from, read, &index))
        });
        async move {
            match within {
                Some(b) => Ok::<Bytes, Error>(b),
                None => Ok(storage.read(key, index.range()).await?),
            }
        }
    };
    let releases = match release {
        None => Vec::new(),
        Some(index) => {
            format::decode_releases(&segment(index).await?, &index, sequence).map_err(corrupted)?
        }
    };
    let marks = match marks {
        None => Vec::new(),
        Some(index) => {
            format::decode_marks(&segment(index).await?, &index, sequence).map_err(corrupted)?
        }
    };
    Ok(RecoveredObject {
        size,
        tail,
        marks,
        releases,
    })
}

/// Every process writes its start object at a sequence at or above its
/// epoch, so every object objwal writes has `epoch <= sequence`. An object
/// above that can only come from damage or a foreign writer, and must not
/// become the base of the next epoch.
pub(crate) fn check_plausible(key: &str, header: &Header) -> Result<(), Error> {
    if header.epoch > header.sequence {
        return Err(Error::recovery(format!(
            "object {key} has the implausible epoch {} above its sequence {}: \
             damage or a foreign writer; refusing to base a new epoch on it",
            header.epoch, header.sequence
        )));
    }
    Ok(())
}

/// What one look at a key found ([`look`]).
#[derive(Debug)]
pub(crate) enum Looked {
    /// Nothing (yet, or any more).
    Missing,
    /// An intact, plausible object of the key's sequence, with its size.
    Intact(RecoveredObject),
    /// A structurally damaged object (two reads agree).
    Damaged(Box<super::quarantine::Damaged>),
}

/// Looks at the object of `sequence` at `key` without knowing whether it
/// exists or how large it is: one suffix read of `len` bytes (answered with
/// the object's size), more reads only when the footer or a records segment
/// starts before it, or when the tail does not decode or is implausible
/// (then recovery's second look decides, R3). The walk of an open uses it
/// for a key found taken; no listing.
pub(crate) async fn look(
    storage: &Storage,
    key: &str,
    sequence: u64,
    len: u64,
    window: &TailWindow,
) -> Result<Looked, Error> {
    let suffix = match storage.read_suffix(key, len.max(1)).await {
        Ok(suffix) => suffix,
        Err(e) if e.is_not_found() => return Ok(Looked::Missing),
        Err(e) => return Err(e.into()),
    };
    let size = suffix.size;
    let window_start = size - suffix.data.len() as u64;
    match tail_from_window(storage, key, size, window_start, &suffix.data, window).await {
        Ok(object)
            if object.tail.header().sequence == sequence
                && check_plausible(key, object.tail.header()).is_ok() =>
        {
            return Ok(Looked::Intact(object))
        }
        Ok(_) | Err(Error::Corrupted { .. }) => {}
        Err(Error::Storage { source }) if source.is_not_found() => return Ok(Looked::Missing),
        Err(e) => return Err(e),
    }
    // One look failed: recovery's rule decides (damage only when two looks
    // agree).
    use super::quarantine::{examine, Examined};
    Ok(
        match examine(storage, key, size, sequence, window, None).await? {
            None => Looked::Missing,
            Some(Examined::Intact(object)) => Looked::Intact(object),
            Some(Examined::Damaged(damaged)) => Looked::Damaged(Box::new(damaged)),
        },
    )
}

impl RecoveredObject {
    /// Whether it holds nothing: no segment, no mark, no release (a start
    /// object, a settle marker; a writer's batches and voids carry at
    /// least the jump record of what it had acknowledged).
    pub(crate) fn is_empty(&self) -> bool {
        self.tail.region_segments().next().is_none()
            && self.marks.is_empty()
            && self.releases.is_empty()
    }
}
