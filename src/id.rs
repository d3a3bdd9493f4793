//! The one text notation of entry ids: `sequence.position`.
//!
//! An [`EntryId`] is `(sequence << 20) | position`: the sequence of the object
//! holding the entry and the entry's place in its region's segment. Written
//! as a plain integer it hides both, so everything that shows an id to a
//! person (`objwal inspect`, `objwal dump`, logs, an engine's own tooling)
//! writes it as `sequence.position`, e.g. `3.17`, through [`Dotted`], and
//! everything that takes an id from text accepts that notation or a plain
//! integer (the raw `u64`) through [`parse`].
//!
//! Invariants: every `u64` has exactly one dotted form and parses back to
//! itself from it and from its decimal form; text that names no id (an empty
//! part, a sign, a sequence above [`MAX_SEQUENCE`], a position above
//! [`MAX_POSITION`], anything but ASCII digits and one dot) is refused with
//! a [`ParseIdError`] that quotes it and says why. Nothing here panics.
//!
//! ```
//! use objwal::id::{self, Dotted};
//!
//! let id = objwal::format::entry_id(3, 17);
//! assert_eq!(Dotted(id).to_string(), "3.17");
//! assert_eq!(id::parse("3.17")?, id);
//! assert_eq!(id::parse(&id.to_string())?, id); // the raw integer
//! assert!(id::parse("3.x").is_err());
//! # Ok::<(), objwal::id::ParseIdError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::format::{entry_id, position_of, sequence_of, MAX_POSITION, MAX_SEQUENCE};
use crate::EntryId;

/// An entry id that prints as `sequence.position` and parses from that
/// notation or from a plain integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Dotted(pub EntryId);

impl fmt::Display for Dotted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", sequence_of(self.0), position_of(self.0))
    }
}

impl FromStr for Dotted {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(Dotted)
    }
}

impl From<EntryId> for Dotted {
    fn from(id: EntryId) -> Self {
        Dotted(id)
    }
}

impl From<Dotted> for EntryId {
    fn from(id: Dotted) -> Self {
        id.0
    }
}

/// Text that is not an entry id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an entry id (write SEQUENCE.POSITION, e.g. 3.17, or a plain integer): {reason}")]
pub struct ParseIdError {
    text: String,
    reason: &'static str,
}

impl ParseIdError {
    /// The refused text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl From<ParseIdError> for crate::Error {
    fn from(e: ParseIdError) -> Self {
        crate::Error::invalid(e.to_string())
    }
}

/// Parses an entry id written as `sequence.position` or as a plain integer.
/// Surrounding whitespace is ignored.
pub fn parse(text: &str) -> Result<EntryId, ParseIdError> {
    let refuse = |reason| ParseIdError {
        text: text.to_owned(),
        reason,
    };
    let trimmed = text.trim();
    match trimmed.split_once('.') {
        None => digits(trimmed)
            .ok_or(refuse("not a decimal number"))?
            .ok_or(refuse("the number is larger than 2^64 - 1")),
        Some((sequence, position)) => {
            let sequence = digits(sequence)
                .ok_or(refuse("the sequence is not a decimal number"))?
                .filter(|s| *s <= MAX_SEQUENCE)
                .ok_or(refuse("the sequence is above 2^44 - 1"))?;
            let position = digits(position)
                .ok_or(refuse("the position is not a decimal number"))?
                .filter(|p| *p <= MAX_POSITION)
                .ok_or(refuse("the position is above 2^20 - 1"))?;
            Ok(entry_id(sequence, position))
        }
    }
}

/// `None` unless `s` is one or more ASCII digits; then `Some(None)` when the
/// value does not fit a `u64`.
fn digits(s: &str) -> Option<Option<u64>> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().ok())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn every_id_round_trips_through_both_notations(id in any::<u64>()) {
            prop_assert_eq!(parse(&Dotted(id).to_string()), Ok(id));
            prop_assert_eq!(parse(&id.to_string()), Ok(id));
            prop_assert_eq!(Dotted(id).to_string().parse::<Dotted>(), Ok(Dotted(id)));
        }

        #[test]
        fn dotted_text_names_its_sequence_and_position(
            sequence in 0..=MAX_SEQUENCE,
            position in 0..=MAX_POSITION,
        ) {
            let id = parse(&format!("{sequence}.{position}")).unwrap();
            prop_assert_eq!(sequence_of(id), sequence);
            prop_assert_eq!(position_of(id), position);
        }

        #[test]
        fn arbitrary_text_never_panics_and_errors_quote_it(text in "\\PC{0,30}") {
            if let Err(e) = parse(&text) {
                prop_assert_eq!(e.text(), text.as_str());
                prop_assert!(e.to_string().contains("is not an entry id"));
            }
        }
    }

    #[test]
    fn refusals_say_why() {
        for (text, says) in [
            ("", "not a decimal number"),
            ("-1", "not a decimal number"),
            ("+1", "not a decimal number"),
            ("0x10", "not a decimal number"),
            ("18446744073709551616", "larger than 2^64 - 1"),
            (".1", "sequence is not a decimal"),
            ("1.", "position is not a decimal"),
            ("1.2.3", "position is not a decimal"),
            ("1. 2", "position is not a decimal"),
            ("17592186044416.1", "sequence is above"),
            ("1.1048576", "position is above"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.to_string().contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_largest_parts_and_whitespace_are_accepted() {
        assert_eq!(parse(" 3.1\n"), Ok(entry_id(3, 1)));
        assert_eq!(parse("17592186044415.1048575"), Ok(u64::MAX));
        assert_eq!(Dotted(u64::MAX).to_string(), "17592186044415.1048575");
        assert_eq!(Dotted(0).to_string(), "0.0");
        assert_eq!(parse("0"), Ok(0));
    }

    #[test]
    fn a_parse_error_becomes_an_invalid_argument() {
        let e = crate::Error::from(parse("x").unwrap_err());
        assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e}");
    }
}
