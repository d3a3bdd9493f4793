//! The verdict on a prefix that `inspect`, `verify` and `repair` share,
//! taken from the library's own recovery (so the tools and `Wal::open`
//! never disagree about what is damaged or what will not replay).
//!
//! The prefix is recovered read-only with `on_damaged_object =
//! "quarantine"`, which lists every structurally damaged object instead of
//! stopping at the first. A prefix is healthy when recovery succeeds, no
//! damaged object lies under `objects/` and no object above the tip holds
//! entries or release records that recovery will not replay. Objects
//! already moved under `quarantine/` by `objwal repair` are reported but
//! are not a problem: the operator decided, and holes name what they held.
//!
//! Objects above the tip that will not replay are a problem only when a
//! second look, `--recheck-after` later, finds them still cut off at the
//! same sequence ([`crate::inspect::looks`]): on a prefix a writer is appending to,
//! the "missing" sequence is usually an object still uploading. Objects
//! cut off only at the second look are reported as pending, not as a
//! problem.

use objwal::storage::keys::Prefix;
use objwal::wal::damage::{DamagedObject, UnreplayedObject};
use objwal::{Config, DamagePolicy, Storage, WalReader};

use crate::inspect::looks::Recheck;

/// Objects named in one health line before "and N more".
const NAMED: usize = 5;

/// What recovery says of a prefix.
pub struct Health {
    /// The recovered reader (of the last look), when recovery succeeded.
    pub reader: Option<WalReader>,
    /// Why recovery failed, when it did.
    pub recovery_error: Option<String>,
    /// Objects above the tip cut off at the same sequence at both looks.
    unreplayed: Vec<UnreplayedObject>,
    /// Objects above the tip cut off only at the last look: behind an
    /// object that may still be in flight.
    pending: Vec<UnreplayedObject>,
}

impl Health {
    /// Recovers `prefix` read-only, listing every damaged object; when
    /// objects above the tip will not replay, looks again as `recheck`
    /// says and keeps only those cut off at the same sequence both times.
    pub async fn of(storage: &Storage, prefix: &Prefix, recheck: &Recheck) -> Health {
        let first = Self::look(storage, prefix).await;
        if first.unreplayed.is_empty() {
            return first;
        }
        tracing::info!(wait = ?recheck.recheck_after, gaps = %first.breaks(),
            "objects above the tip will not replay: looking again before calling the gap missing");
        recheck.wait().await;
        let mut second = Self::look(storage, prefix).await;
        let (stayed, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut second.unreplayed)
            .into_iter()
            .partition(|u| first.unreplayed.iter().any(|f| f == u));
        if stayed.len() < first.unreplayed.len() {
            tracing::info!("a gap filled while looking: an object was still in flight");
        }
        second.unreplayed = stayed;
        second.pending = pending;
        second
    }

    /// One look: recovery, read-only.
    async fn look(storage: &Storage, prefix: &Prefix) -> Health {
        let config = Config {
            on_damaged_object: DamagePolicy::Quarantine,
            ..crate::store::base()
        };
        match WalReader::open(storage.clone(), prefix.as_str(), config).await {
            Ok(reader) => Health {
                unreplayed: reader.unreplayed().to_vec(),
                reader: Some(reader),
                recovery_error: None,
                pending: Vec::new(),
            },
            Err(e) => Health {
                reader: None,
                recovery_error: Some(e.to_string()),
                unreplayed: Vec::new(),
                pending: Vec::new(),
            },
        }
    }

    /// The sequences where the chain of the unreplayed objects breaks.
    fn breaks(&self) -> String {
        breaks(&self.unreplayed)
    }

    /// Damaged objects still under `objects/`.
    pub fn damaged(&self) -> Vec<&DamagedObject> {
        self.all_damaged().filter(|d| !d.quarantined).collect()
    }

    /// Damaged objects already moved under `quarantine/`.
    pub fn quarantined(&self) -> Vec<&DamagedObject> {
        self.all_damaged().filter(|d| d.quarantined).collect()
    }

    fn all_damaged(&self) -> impl Iterator<Item = &DamagedObject> {
        self.reader.iter().flat_map(|r| r.damaged())
    }

    /// Intact objects above the tip that will not replay: cut off at the
    /// same sequence at both looks.
    pub fn unreplayed(&self) -> &[UnreplayedObject] {
        &self.unreplayed
    }

    /// Objects above the tip cut off only at the second look (behind an
    /// object that may still be in flight): not a problem.
    pub fn pending(&self) -> &[UnreplayedObject] {
        &self.pending
    }

    /// Whether nothing needs an operator.
    pub fn is_ok(&self) -> bool {
        self.recovery_error.is_none() && self.damaged().is_empty() && self.unreplayed().is_empty()
    }

    /// One line: `health: OK` or what is wrong, naming the objects.
    pub fn line(&self) -> String {
        let mut problems = Vec::new();
        if let Some(e) = &self.recovery_error {
            problems.push(format!("recovery fails: {e}"));
        }
        let (missing, damaged): (Vec<_>, Vec<_>) =
            self.damaged().into_iter().partition(|d| d.absent);
        if !damaged.is_empty() {
            problems.push(format!(
                "{} damaged object(s) stop a default open: {} (objwal repair moves them aside)",
                damaged.len(),
                named(damaged.iter().map(|d| d.sequence))
            ));
        }
        if !missing.is_empty() {
            problems.push(format!(
                "{} missing object(s) stop a default open: {} (acknowledged, then gone: restore \
                 them, or open with on_damaged_object = \"quarantine\" for holes)",
                missing.len(),
                named(missing.iter().map(|d| d.sequence))
            ));
        }
        let unreplayed = self.unreplayed();
        if !unreplayed.is_empty() {
            let entries: u64 = unreplayed.iter().map(UnreplayedObject::entries).sum();
            problems.push(format!(
                "{} object(s) above the tip hold {entries} entries that will not replay: {} \
                 (the chain breaks at missing sequence {}, at two looks)",
                unreplayed.len(),
                named(unreplayed.iter().map(|u| u.sequence)),
                breaks(unreplayed)
            ));
        }
        let quarantined = self.quarantined();
        let mut note = if quarantined.is_empty() {
            String::new()
        } else {
            format!(
                "; {} object(s) moved aside under quarantine/ ({}): their entries are holes",
                quarantined.len(),
                named(quarantined.iter().map(|d| d.sequence))
            )
        };
        if !self.pending.is_empty() {
            note.push_str(&format!(
                "; {} object(s) above the tip wait for sequence {}, still in flight when \
                 looked at again ({})",
                self.pending.len(),
                breaks(&self.pending),
                named(self.pending.iter().map(|u| u.sequence))
            ));
        }
        if problems.is_empty() {
            format!("health: OK{note}")
        } else {
            format!("health: PROBLEM: {}{note}", problems.join("; "))
        }
    }

    /// One line per object that is not replayed: `DAMAGED`, `MISSING`,
    /// `QUARANTINED` or `UNREPLAYED`, its key, why, and what it held.
    pub fn object_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for d in self.all_damaged() {
            let tag = if d.quarantined {
                "QUARANTINED"
            } else if d.absent {
                "MISSING"
            } else {
                "DAMAGED"
            };
            lines.push(format!("{tag} {}: {}; held: {}", d.key, d.reason, d.held()));
        }
        for u in self.unreplayed() {
            lines.push(format!(
                "UNREPLAYED {}: above the tip, its chain breaks at missing sequence {}; holds: {}",
                u.key,
                u.broken_at,
                u.held()
            ));
        }
        for u in self.pending() {
            lines.push(format!(
                "PENDING {}: above the tip, waiting for sequence {} (in flight when looked at \
                 again); holds: {}",
                u.key,
                u.broken_at,
                u.held()
            ));
        }
        lines
    }
}

/// The distinct sequences where the chains of `objects` break.
fn breaks(objects: &[UnreplayedObject]) -> String {
    let mut breaks: Vec<u64> = objects.iter().map(|u| u.broken_at).collect();
    breaks.sort_unstable();
    breaks.dedup();
    named(breaks.into_iter())
}

/// Up to [`NAMED`] sequences, then how many more.
fn named(sequences: impl Iterator<Item = u64>) -> String {
    let all: Vec<u64> = sequences.collect();
    let shown: Vec<String> = all.iter().take(NAMED).map(u64::to_string).collect();
    let more = all.len().saturating_sub(NAMED);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}
