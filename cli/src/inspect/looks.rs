//! Looking again before calling something broken: the rules `inspect`,
//! `verify` and `repair` share (rfcs/0003, "One bad read is not damage" and
//! "A live prefix is not a broken one").
//!
//! Damage. A read can go wrong in transit (a flipped byte, an answer cut
//! short), so one failed decode proves nothing about the object. An object
//! is damaged only when two looks at it fail the same way (the same ranges
//! read, the same failure); a look that decodes wins at once. A request
//! that fails is not damage either: looks whose requests keep failing, or
//! that never agree, leave the object unsettled, which the tools report as
//! such (a problem, exit 1, but never "damaged", and never a reason to move
//! it).
//!
//! Gaps. A writer uploads up to `max_inflight_creates` objects at once, so
//! a listing taken while it appends can hold an object whose predecessor is
//! still uploading: a gap in the chain that fills a moment later. A gap is
//! called missing only when a second look, [`Recheck::recheck_after`]
//! later, finds the same objects above the tip still cut off at the same
//! sequence ([`Health::of`](crate::inspect::health::Health::of) applies it).

use std::future::Future;
use std::time::Duration;

/// When `inspect`, `verify` and `repair` look at a gap in the chain again.
#[derive(Debug, Clone, clap::Args)]
pub struct Recheck {
    /// Wait this long, then look again, before reporting objects above the
    /// tip that will not replay: the gap below them (a "missing" sequence)
    /// is reported only if it is still there, cutting off the same objects,
    /// at the second look. A writer's object that was still uploading fills
    /// it meanwhile. An upload slower than this is still reported.
    #[arg(long, value_name = "DURATION", default_value = "2s",
        value_parser = humantime::parse_duration)]
    pub recheck_after: Duration,
    /// Test hook: before the second look, print a line on stderr and wait
    /// for a line (or the end) on stdin.
    #[arg(long, hide = true)]
    pub hold_before_recheck: bool,
}

/// The line `--hold-before-recheck` prints before it waits.
pub const HOLD_LINE: &str = "objwal: holding before the second look at a gap";

impl Recheck {
    /// Waits for the second look: `recheck_after`, then the test hook.
    pub async fn wait(&self) {
        tokio::time::sleep(self.recheck_after).await;
        if self.hold_before_recheck {
            eprintln!("{HOLD_LINE}");
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)
            })
            .await;
        }
    }
}

/// Looks at one object before a verdict is given up on.
pub const LOOKS: usize = 3;

/// Why one look at an object failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Its bytes failed to decode (or decode to something implausible):
    /// damage, if another look fails the same way.
    Decode(String),
    /// A request failed (or the object is gone): says nothing of its bytes.
    Request(String),
}

/// The settled verdict on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// A look decoded.
    Sound(T),
    /// Two looks failed to decode the same way.
    Damaged(String),
    /// Nothing settled within [`LOOKS`]: the last failure.
    Unsettled(String),
}

/// Looks at an object with `look` until the verdict settles: the first
/// look that succeeds, two looks that fail to decode the same way, or
/// [`LOOKS`] looks.
pub async fn settle<T, F, Fut>(mut look: F) -> Verdict<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut decoded: Vec<String> = Vec::new();
    let mut last = String::new();
    for attempt in 1..=LOOKS {
        match look().await {
            Ok(value) => {
                if attempt > 1 {
                    tracing::warn!(attempt, failure = %last,
                        "a read failed, then a look again read it intact: not damage");
                }
                return Verdict::Sound(value);
            }
            Err(Failure::Decode(failure)) => {
                if decoded.contains(&failure) {
                    return Verdict::Damaged(failure);
                }
                decoded.push(failure.clone());
                last = failure;
            }
            Err(Failure::Request(failure)) => last = failure,
        }
    }
    Verdict::Unsettled(format!(
        "{LOOKS} reads did not settle what it holds (last: {last})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    async fn run(answers: &[Result<u8, Failure>]) -> (Verdict<u8>, usize) {
        let answers = RefCell::new(answers.iter().cloned());
        let looks = RefCell::new(0);
        let verdict = settle(|| {
            *looks.borrow_mut() += 1;
            let next = answers.borrow_mut().next();
            async move { next.unwrap_or(Err(Failure::Request("none left".into()))) }
        })
        .await;
        let n = *looks.borrow();
        (verdict, n)
    }

    fn decode(s: &str) -> Result<u8, Failure> {
        Err(Failure::Decode(s.into()))
    }

    #[tokio::test]
    async fn only_two_looks_failing_the_same_way_are_damage() {
        assert_eq!(run(&[Ok(1)]).await, (Verdict::Sound(1), 1));
        assert_eq!(run(&[decode("a"), Ok(2)]).await, (Verdict::Sound(2), 2));
        assert_eq!(
            run(&[decode("a"), decode("a")]).await,
            (Verdict::Damaged("a".into()), 2)
        );
        assert_eq!(
            run(&[decode("a"), decode("b"), decode("b")]).await,
            (Verdict::Damaged("b".into()), 3)
        );
        let (verdict, looks) = run(&[decode("a"), decode("b"), decode("c")]).await;
        assert!(matches!(verdict, Verdict::Unsettled(_)) && looks == 3);
        // A failed request is no evidence either way.
        let failed = Err(Failure::Request("timeout".into()));
        let (verdict, _) = run(&[decode("a"), failed.clone(), failed]).await;
        assert!(matches!(verdict, Verdict::Unsettled(ref m) if m.contains("timeout")));
    }
}
