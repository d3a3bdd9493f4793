//! Key naming, in exactly one place.
//!
//! An object of sequence `s` under prefix `p` is stored at
//! `p/objects/<s as 20 decimal digits>.wal`, the fence of epoch `e` at
//! `p/fences/<e as 20 decimal digits>.fence`, and the permanent marker of
//! the release of region `r` through id `t` at
//! `p/released/<r as 20 digits>-<t as 20 digits>` (an empty object: the key
//! says everything, rfcs/0005 "A release is forever"). Twenty digits hold
//! every `u64`, so the byte order of keys is numeric order and a listing
//! needs no sort by number. Parsing accepts only keys this module could
//! have made.
//!
//! A prefix is refused when a key built from it could leave it or could not
//! be stored: `.`/`..`/empty parts, a leading `/`, `\`, control characters,
//! a part that starts with the file backend's temporary-file marker (that
//! backend refuses such keys and hides such names from listings), and a
//! length that pushes the longest key past [`MAX_KEY_LEN`], the smallest key
//! limit of the object stores objwal targets (S3, GCS and Azure Blob all
//! allow 1024 bytes). Refusing at open gives one clear error instead of a
//! store whose every create fails.

use std::fmt;

/// The folder under the prefix that holds the objects.
const OBJECTS_DIR: &str = "objects";
/// The suffix of every object key.
const SUFFIX: &str = ".wal";
/// The folder under the prefix that holds the fences.
const FENCES_DIR: &str = "fences";
/// The suffix of every fence key.
const FENCE_SUFFIX: &str = ".fence";
/// The folder under the prefix that holds the release markers.
const RELEASED_DIR: &str = "released";
/// What separates the region from the released-through id in a marker key.
const RELEASED_SEPARATOR: char = '-';
/// The folder under the prefix that holds the readers' holds.
const HOLDS_DIR: &str = "holds";
/// What separates the numbers of a hold key.
const HOLD_SEPARATOR: char = '-';
/// The longest hold name, in bytes.
pub const MAX_HOLD_NAME_LEN: usize = 64;
/// Digits of a sequence in a key.
const DIGITS: usize = 20;
/// The longest key any supported object store accepts, in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// The longest prefix: its longest key (a release marker's) stays within
/// [`MAX_KEY_LEN`].
pub const MAX_PREFIX_LEN: usize = MAX_KEY_LEN - (1 + RELEASED_DIR.len() + 1 + DIGITS + 1 + DIGITS);

/// A validated key prefix: non-empty, relative, with no empty, `.` or `..`
/// parts, and no trailing slash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Prefix(String);

/// Why a prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid prefix {prefix:?}: {reason}")]
pub struct PrefixError {
    /// The prefix as given.
    pub prefix: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Prefix {
    /// Validates `prefix`.
    pub fn new(prefix: &str) -> Result<Prefix, PrefixError> {
        let refuse = |reason| {
            Err(PrefixError {
                prefix: prefix.to_owned(),
                reason,
            })
        };
        if prefix.is_empty() {
            return refuse("it is empty");
        }
        if prefix.len() > MAX_PREFIX_LEN {
            return refuse(
                "it is longer than 973 bytes (keys would pass the stores' 1024-byte limit)",
            );
        }
        if prefix.starts_with('/') {
            return refuse("it must be relative (no leading '/')");
        }
        if prefix.contains('\\') {
            return refuse("it must not contain '\\'");
        }
        if prefix.chars().any(char::is_control) {
            return refuse("it must not contain control characters");
        }
        for part in prefix.split('/') {
            match part {
                "" => return refuse("it has an empty part ('//' or a trailing '/')"),
                "." | ".." => return refuse("it has a '.' or '..' part"),
                p if p.starts_with(super::TEMP_MARKER) => {
                    return refuse("a part starts with the reserved temporary-file marker")
                }
                _ => {}
            }
        }
        Ok(Prefix(prefix.to_owned()))
    }

    /// The prefix as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The listing prefix of this prefix's objects (ends with `/`).
    pub fn objects_prefix(&self) -> String {
        format!("{}/{OBJECTS_DIR}/", self.0)
    }

    /// The key of the object with `sequence`.
    pub fn object_key(&self, sequence: u64) -> String {
        format!("{}/{OBJECTS_DIR}/{sequence:0DIGITS$}{SUFFIX}", self.0)
    }

    /// The sequence named by `key`, if `key` is a well-formed object key of
    /// this prefix.
    pub fn parse_object_key(&self, key: &str) -> Option<u64> {
        self.parse(key, OBJECTS_DIR, SUFFIX)
    }

    /// The listing prefix of this prefix's fences (ends with `/`).
    pub fn fences_prefix(&self) -> String {
        format!("{}/{FENCES_DIR}/", self.0)
    }

    /// The key of the fence of `epoch`.
    pub fn fence_key(&self, epoch: u64) -> String {
        format!("{}/{FENCES_DIR}/{epoch:0DIGITS$}{FENCE_SUFFIX}", self.0)
    }

    /// The epoch named by `key`, if `key` is a well-formed fence key of this
    /// prefix.
    pub fn parse_fence_key(&self, key: &str) -> Option<u64> {
        self.parse(key, FENCES_DIR, FENCE_SUFFIX)
    }

    /// The listing prefix of this prefix's release markers (ends with `/`).
    pub fn released_prefix(&self) -> String {
        format!("{}/{RELEASED_DIR}/", self.0)
    }

    /// The key of the marker of `region`'s release through `through`.
    pub fn released_key(&self, region: u64, through: u64) -> String {
        format!(
            "{}/{RELEASED_DIR}/{region:0DIGITS$}{RELEASED_SEPARATOR}{through:0DIGITS$}",
            self.0
        )
    }

    /// The region and released-through id named by `key`, if `key` is a
    /// well-formed release marker key of this prefix.
    pub fn parse_released_key(&self, key: &str) -> Option<(u64, u64)> {
        let rest = key.strip_prefix(self.0.as_str())?.strip_prefix('/')?;
        let name = rest.strip_prefix(RELEASED_DIR)?.strip_prefix('/')?;
        let (region, through) = name.split_once(RELEASED_SEPARATOR)?;
        Some((number(region)?, number(through)?))
    }

    /// The listing prefix of this prefix's holds (ends with `/`).
    pub fn holds_prefix(&self) -> String {
        format!("{}/{HOLDS_DIR}/", self.0)
    }

    /// The listing prefix of the generations of the hold `name` (ends with
    /// `/`).
    pub fn hold_name_prefix(&self, name: &str) -> String {
        format!("{}/{HOLDS_DIR}/{name}/", self.0)
    }

    /// The key of `hold`: `holds/<name>/<generation>-<position>-<ttl in
    /// ms>`, each number in 20 digits. An empty object: the key says it
    /// all, so a writer learns every hold from one listing.
    pub fn hold_key(&self, hold: &HoldKey) -> String {
        format!(
            "{}/{HOLDS_DIR}/{}/{:0DIGITS$}{HOLD_SEPARATOR}{:0DIGITS$}{HOLD_SEPARATOR}{:0DIGITS$}",
            self.0, hold.name, hold.generation, hold.position, hold.ttl_ms
        )
    }

    /// The hold named by `key`, if `key` is a well-formed hold key of this
    /// prefix.
    pub fn parse_hold_key(&self, key: &str) -> Option<HoldKey> {
        let rest = key.strip_prefix(self.0.as_str())?.strip_prefix('/')?;
        let rest = rest.strip_prefix(HOLDS_DIR)?.strip_prefix('/')?;
        let (name, numbers) = rest.split_once('/')?;
        check_hold_name(name).ok()?;
        let mut parts = numbers.split(HOLD_SEPARATOR);
        let hold = HoldKey {
            name: name.to_owned(),
            generation: number(parts.next()?)?,
            position: number(parts.next()?)?,
            ttl_ms: number(parts.next()?)?,
        };
        parts.next().is_none().then_some(hold)
    }

    fn parse(&self, key: &str, dir: &str, suffix: &str) -> Option<u64> {
        let rest = key.strip_prefix(self.0.as_str())?;
        let rest = rest.strip_prefix('/')?;
        let rest = rest.strip_prefix(dir)?;
        let rest = rest.strip_prefix('/')?;
        number(rest.strip_suffix(suffix)?)
    }
}

/// One generation of a reader's hold, as its key names it (see
/// [`Prefix::hold_key`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HoldKey {
    /// The hold's name.
    pub name: String,
    /// Grows by one at every refresh: the highest listed is the hold.
    pub generation: u64,
    /// The lowest object sequence the holder still needs.
    pub position: u64,
    /// How long the hold lasts unrefreshed, in milliseconds.
    pub ttl_ms: u64,
}

/// Checks a hold name: 1 to [`MAX_HOLD_NAME_LEN`] bytes of ASCII letters,
/// digits, `.`, `_` and `-`, starting with a letter or a digit (so it is
/// one key part on every store, never the file backend's temporary-file
/// marker).
pub fn check_hold_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_HOLD_NAME_LEN {
        return Err("a hold name has 1 to 64 bytes");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err("a hold name starts with an ASCII letter or digit");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("a hold name has only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// The number written as exactly [`DIGITS`] decimal digits.
fn number(digits: &str) -> Option<u64> {
    if digits.len() != DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where the logs of a store are, found in a listing of the whole store:
/// what a tool (or `Wal::open` with `create_if_missing = false`) names
/// when a prefix holds no log.
///
/// A prefix *holds a log* when at least one key under it is an object key
/// or a fence key of that prefix (`<prefix>/objects/<20 digits>.wal`,
/// `<prefix>/fences/<20 digits>.fence`): a log that was opened once has
/// its fence, kept forever, even when every object was collected. Other
/// keys (a quarantine folder, temporary files, another tool's) make no
/// log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Logs {
    /// The prefixes that hold a log, in byte order, each once.
    pub prefixes: Vec<String>,
    /// Whether the store's root itself holds a log's objects or fences
    /// (`objects/...` or `fences/...` with no prefix): the store was opened
    /// at a log's directory instead of the directory holding it.
    pub at_root: bool,
}

impl Logs {
    /// The logs among `keys` (a listing of the whole store).
    pub fn find<'a>(keys: impl IntoIterator<Item = &'a str>) -> Logs {
        let mut prefixes = std::collections::BTreeSet::new();
        let mut at_root = false;
        for key in keys {
            for (dir, suffix) in [(OBJECTS_DIR, SUFFIX), (FENCES_DIR, FENCE_SUFFIX)] {
                if let Some(name) = key.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) {
                    at_root |= is_numbered(name, suffix);
                }
                let Some((prefix, _)) = key.rsplit_once(&format!("/{dir}/")) else {
                    continue;
                };
                if Prefix::new(prefix).is_ok_and(|p| p.parse(key, dir, suffix).is_some()) {
                    prefixes.insert(prefix.to_owned());
                }
            }
        }
        Logs {
            prefixes: prefixes.into_iter().collect(),
            at_root,
        }
    }

    /// One clause naming them for a message: "prefixes holding a log here:
    /// \"a\", \"b\"", or why there is none.
    pub fn describe(&self) -> String {
        describe_logs(&self.prefixes, self.at_root)
    }
}

/// [`Logs::describe`] of its parts.
pub fn describe_logs(prefixes: &[String], at_root: bool) -> String {
    let root = "the store's root itself holds a log's objects (the storage names a log's \
                directory: open its parent, with that directory as the prefix)";
    match (prefixes.is_empty(), at_root) {
        (true, false) => "this store holds no log".to_owned(),
        (true, true) => root.to_owned(),
        (false, at_root) => {
            let names: Vec<String> = prefixes.iter().map(|p| format!("{p:?}")).collect();
            let also = if at_root {
                format!("; {root}")
            } else {
                String::new()
            };
            format!("prefixes holding a log here: {}{also}", names.join(", "))
        }
    }
}

/// Whether `name` is `<20 digits><suffix>`.
fn is_numbered(name: &str, suffix: &str) -> bool {
    name.strip_suffix(suffix)
        .is_some_and(|d| d.len() == DIGITS && d.bytes().all(|b| b.is_ascii_digit()))
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort_by_sequence() {
        let p = Prefix::new("node-7/wal").unwrap();
        let k = p.object_key(42);
        assert_eq!(k, "node-7/wal/objects/00000000000000000042.wal");
        assert_eq!(p.parse_object_key(&k), Some(42));
        assert_eq!(p.parse_object_key(&p.object_key(u64::MAX)), Some(u64::MAX));
        let mut keys: Vec<_> = [10u64, 9, 100, 1]
            .iter()
            .map(|s| p.object_key(*s))
            .collect();
        keys.sort();
        let seqs: Vec<_> = keys.iter().filter_map(|k| p.parse_object_key(k)).collect();
        assert_eq!(seqs, vec![1, 9, 10, 100]);
    }

    #[test]
    fn fence_keys_round_trip_and_are_no_object_keys() {
        let p = Prefix::new("n").unwrap();
        let k = p.fence_key(7);
        assert_eq!(k, "n/fences/00000000000000000007.fence");
        assert_eq!(p.parse_fence_key(&k), Some(7));
        assert_eq!(p.parse_object_key(&k), None);
        assert_eq!(p.parse_fence_key(&p.object_key(7)), None);
        assert!(k.starts_with(&p.fences_prefix()));
    }

    #[test]
    fn release_marker_keys_round_trip_and_are_no_other_keys() {
        let p = Prefix::new("n").unwrap();
        let k = p.released_key(7, 1 << 40);
        assert_eq!(k, "n/released/00000000000000000007-00000001099511627776");
        assert_eq!(p.parse_released_key(&k), Some((7, 1 << 40)));
        assert!(k.starts_with(&p.released_prefix()));
        assert_eq!(p.parse_object_key(&k), None);
        assert_eq!(p.parse_fence_key(&k), None);
        assert_eq!(p.parse_released_key(&p.object_key(7)), None);
        let max = p.released_key(u64::MAX, u64::MAX);
        assert_eq!(p.parse_released_key(&max), Some((u64::MAX, u64::MAX)));
        for bad in [
            "n/released/7-8",
            "n/released/00000000000000000007",
            "n/released/00000000000000000007-0000000000000000000x",
            "n/released/00000000000000000007_00000000000000000008",
            "m/released/00000000000000000007-00000000000000000008",
            "n/released/00000000000000000007-00000000000000000008.tmp",
            "n/released/x/00000000000000000007-00000000000000000008",
        ] {
            assert_eq!(p.parse_released_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn malformed_keys_are_not_parsed() {
        let p = Prefix::new("a").unwrap();
        for k in [
            "a/objects/42.wal",
            "a/objects/0000000000000000004x.wal",
            "a/objects/00000000000000000042.tmp",
            "b/objects/00000000000000000042.wal",
            "a/objects/00000000000000000042.wal.tmp",
            "ab/objects/00000000000000000042.wal",
            "a/objects/99999999999999999999.wal",
            "a/objects/x/00000000000000000042.wal",
        ] {
            assert_eq!(p.parse_object_key(k), None, "{k}");
        }
    }

    #[test]
    fn logs_are_the_prefixes_with_an_object_or_a_fence() {
        let kv = Prefix::new("kv").unwrap();
        let deep = Prefix::new("a/objects/b").unwrap();
        let fenced = Prefix::new("only/fences").unwrap();
        let object = kv.object_key(3);
        let keys = [
            object.as_str(),
            &deep.object_key(1),
            &fenced.fence_key(2),
            "kv/quarantine/00000000000000000001.wal",
            "junk/objects/42.wal",
            "tmp/objects/00000000000000000001.wal.tmp",
            "notes.txt",
        ];
        let logs = Logs::find(keys.iter().copied());
        assert_eq!(logs.prefixes, ["a/objects/b", "kv", "only/fences"]);
        assert!(!logs.at_root);
        assert_eq!(
            logs.describe(),
            "prefixes holding a log here: \"a/objects/b\", \"kv\", \"only/fences\""
        );
        let none = Logs::find(["notes.txt", "kv/quarantine/x"]);
        assert_eq!(none, Logs::default());
        assert_eq!(none.describe(), "this store holds no log");
    }

    #[test]
    fn a_store_opened_at_a_log_directory_is_told_apart() {
        let logs = Logs::find([
            "objects/00000000000000000002.wal",
            "fences/00000000000000000001.fence",
        ]);
        assert_eq!((logs.prefixes.len(), logs.at_root), (0, true));
        assert!(
            logs.describe().contains("open its parent"),
            "{}",
            logs.describe()
        );
        assert!(!Logs::find(["objects/2.wal", "objects"]).at_root);
    }

    #[test]
    fn bad_prefixes_are_refused_with_a_reason() {
        for bad in [
            "", "/abs", "a//b", "a/", "./a", "a/../b", "a/.", "a\\b", "a\nb",
        ] {
            let err = Prefix::new(bad).unwrap_err();
            assert!(!err.reason.is_empty(), "{bad}");
        }
        for good in ["a", "node-7", "a/b/c", "weird name/é/x.y"] {
            assert!(Prefix::new(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn the_longest_prefix_keeps_every_key_within_the_stores_limit() {
        assert_eq!(MAX_PREFIX_LEN, 973);
        let longest = "p".repeat(MAX_PREFIX_LEN);
        let p = Prefix::new(&longest).unwrap();
        assert_eq!(p.released_key(u64::MAX, u64::MAX).len(), MAX_KEY_LEN);
        assert!(p.fence_key(u64::MAX).len() <= MAX_KEY_LEN);
        assert!(p.object_key(u64::MAX).len() <= MAX_KEY_LEN);
        let err = Prefix::new(&format!("{longest}q")).unwrap_err();
        assert!(err.reason.contains("1024"), "{err}");
    }

    #[test]
    fn a_prefix_part_with_the_temporary_file_marker_is_refused() {
        for bad in [".objwal-tmp-1-2", "a/.objwal-tmp-x/b"] {
            let err = Prefix::new(bad).unwrap_err();
            assert!(err.reason.contains("temporary-file marker"), "{bad}: {err}");
        }
        assert!(Prefix::new("a/objwal-tmp-x").is_ok());
    }

    #[test]
    fn hold_keys_round_trip_and_refuse_what_they_could_not_make() {
        let p = Prefix::new("n").unwrap();
        let hold = HoldKey {
            name: "standby-1.eu_west".into(),
            generation: 3,
            position: u64::MAX,
            ttl_ms: 600_000,
        };
        let key = p.hold_key(&hold);
        assert!(key.starts_with(&p.hold_name_prefix("standby-1.eu_west")));
        assert!(key.starts_with(&p.holds_prefix()));
        assert_eq!(p.parse_hold_key(&key), Some(hold));
        for bad in [
            "n/holds/a/00000000000000000001-00000000000000000002",
            "n/holds/a/00000000000000000001-00000000000000000002-00000000000000000003-1",
            "n/holds/.a/00000000000000000001-00000000000000000002-00000000000000000003",
            "n/holds/a/b/00000000000000000001-00000000000000000002-00000000000000000003",
            "m/holds/a/00000000000000000001-00000000000000000002-00000000000000000003",
            "n/holds/a/0000000000000000000x-00000000000000000002-00000000000000000003",
        ] {
            assert_eq!(p.parse_hold_key(bad), None, "{bad}");
        }
        for bad in ["", ".x", "-x", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_hold_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_hold_name(&"x".repeat(64)).is_ok());
    }
}
