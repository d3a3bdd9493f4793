//! A small synchronous storage engine on objwal's blocking handle:
//!
//! ```text
//! cargo run --example blocking_engine
//! ```
//!
//! Four shards (regions) of a key-value store. A `put` is logged through
//! [`objwal::blocking::Wal::append`] (durable when it returns) and then
//! applied to the shard's memtable. A flush writes the memtable to the
//! shard's table file (atomically: a temporary file renamed over it) and
//! then tells the log with `obsolete`, so the log can collect what the file
//! now holds. Dropping a shard is `release_region`. A restart loads the
//! table files and replays every shard's unflushed entries in one pass
//! (`replay`, from the id each file says it holds through). No async code,
//! no `#[tokio::main]`: the handle brings its runtime.
//!
//! The test suite runs [`run`] on the in-memory store (tests/integration/
//! blocking.rs); `main` runs it on a local directory and removes it after.
#![allow(clippy::print_stdout, reason = "an example prints what it did")]

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use objwal::blocking::Wal;
use objwal::{Config, EntryId, RegionId, Storage};

/// One shard's state in memory.
#[derive(Debug, Default)]
struct Shard {
    /// Puts not yet in the table file.
    memtable: BTreeMap<String, String>,
    /// The id of the last put in the memtable.
    last_id: EntryId,
    /// The id the table file holds through (0: no file).
    flushed_through: EntryId,
}

/// The engine: a log, a directory of table files, the shards.
pub struct Engine {
    wal: Wal,
    tables: PathBuf,
    shards: BTreeMap<RegionId, Shard>,
}

impl Engine {
    /// Opens the engine: loads the table files, then replays what the log
    /// holds above them.
    pub fn open(storage: Storage, tables: &Path) -> Result<Engine, Box<dyn Error>> {
        std::fs::create_dir_all(tables)?;
        let wal = Wal::open(storage, "engine", Config::default())?;
        let mut shards: BTreeMap<RegionId, Shard> = BTreeMap::new();
        for info in wal.regions()? {
            if !info.released {
                shards.entry(info.region).or_default();
            }
        }
        // A flushed shard may have nothing left in the log.
        for file in std::fs::read_dir(tables)? {
            let name = file?.file_name();
            let shard = name
                .to_str()
                .and_then(|n| n.strip_prefix("shard-")?.strip_suffix(".table"));
            if let Some(shard) = shard.and_then(|s| s.parse().ok()) {
                shards.entry(shard).or_default();
            }
        }
        for (shard, state) in shards.iter_mut() {
            if let Some((through, _)) = read_table(tables, *shard)? {
                state.flushed_through = through;
            }
        }
        let starts: Vec<(RegionId, EntryId)> = shards
            .iter()
            .map(|(shard, s)| (*shard, s.flushed_through + 1))
            .collect();
        for entry in wal.replay(starts) {
            let entry = entry?;
            let (key, value) = decode_put(&entry.data)?;
            let shard = shards.entry(entry.region).or_default();
            shard.memtable.insert(key, value);
            shard.last_id = entry.id;
        }
        Ok(Engine {
            wal,
            tables: tables.to_owned(),
            shards,
        })
    }

    /// Logs a put durably, then applies it.
    pub fn put(&mut self, shard: RegionId, key: &str, value: &str) -> Result<(), Box<dyn Error>> {
        let ids = self
            .wal
            .append(vec![(shard, format!("{key}={value}").into())])?;
        let state = self.shards.entry(shard).or_default();
        state.memtable.insert(key.to_owned(), value.to_owned());
        state.last_id = ids.first().copied().unwrap_or(state.last_id);
        Ok(())
    }

    /// The value of `key` in `shard`: the memtable, else the table file.
    pub fn get(&self, shard: RegionId, key: &str) -> Result<Option<String>, Box<dyn Error>> {
        let Some(state) = self.shards.get(&shard) else {
            return Ok(None);
        };
        if let Some(value) = state.memtable.get(key) {
            return Ok(Some(value.clone()));
        }
        let table = read_table(&self.tables, shard)?.map(|(_, rows)| rows);
        Ok(table.and_then(|mut rows| rows.remove(key)))
    }

    /// Writes the shard's memtable into its table file, then marks what
    /// the file holds obsolete in the log.
    pub fn flush(&mut self, shard: RegionId) -> Result<(), Box<dyn Error>> {
        let Some(state) = self.shards.get_mut(&shard) else {
            return Ok(());
        };
        if state.memtable.is_empty() {
            return Ok(());
        }
        let mut rows = read_table(&self.tables, shard)?.map_or_else(BTreeMap::new, |(_, r)| r);
        rows.append(&mut state.memtable);
        write_table(&self.tables, shard, state.last_id, &rows)?;
        state.flushed_through = state.last_id;
        // Only once the file is durable may the log forget these entries.
        self.wal.obsolete(shard, state.last_id)?;
        Ok(())
    }

    /// Drops a shard: durably in the log, then its file.
    pub fn drop_shard(&mut self, shard: RegionId) -> Result<(), Box<dyn Error>> {
        self.wal.release_region(shard)?;
        self.shards.remove(&shard);
        match std::fs::remove_file(table_path(&self.tables, shard)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Entries each shard would replay at a restart (its memtable).
    pub fn unflushed(&self) -> BTreeMap<RegionId, usize> {
        self.shards
            .iter()
            .map(|(shard, s)| (*shard, s.memtable.len()))
            .collect()
    }

    /// Stops the log: what was admitted is durable once this returns.
    pub fn close(self) -> Result<(), Box<dyn Error>> {
        self.wal.stop()?;
        Ok(())
    }
}

fn decode_put(data: &[u8]) -> Result<(String, String), Box<dyn Error>> {
    let text = std::str::from_utf8(data)?;
    let (key, value) = text.split_once('=').ok_or("a put without '='")?;
    Ok((key.to_owned(), value.to_owned()))
}

fn table_path(dir: &Path, shard: RegionId) -> PathBuf {
    dir.join(format!("shard-{shard}.table"))
}

/// A table file: `through <id>` then one `key=value` line per row.
type Table = (EntryId, BTreeMap<String, String>);

fn read_table(dir: &Path, shard: RegionId) -> Result<Option<Table>, Box<dyn Error>> {
    let text = match std::fs::read_to_string(table_path(dir, shard)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut lines = text.lines();
    let through = lines
        .next()
        .and_then(|l| l.strip_prefix("through "))
        .ok_or("a table file without its 'through' line")?
        .parse()?;
    let mut rows = BTreeMap::new();
    for line in lines {
        let (key, value) = decode_put(line.as_bytes())?;
        rows.insert(key, value);
    }
    Ok(Some((through, rows)))
}

/// Writes a table file durably: a temporary file, synced, renamed over the
/// old one, the directory synced.
fn write_table(
    dir: &Path,
    shard: RegionId,
    through: EntryId,
    rows: &BTreeMap<String, String>,
) -> Result<(), Box<dyn Error>> {
    use std::io::Write;
    let path = table_path(dir, shard);
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)?;
    writeln!(file, "through {through}")?;
    for (key, value) in rows {
        writeln!(file, "{key}={value}")?;
    }
    file.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// The scenario: puts to four shards, two flushed, one dropped, a restart
/// that must find every put of the three live shards.
pub fn run(storage: Storage, tables: &Path) -> Result<BTreeMap<RegionId, usize>, Box<dyn Error>> {
    let mut engine = Engine::open(storage.clone(), tables)?;
    for round in 0..10 {
        for shard in 0..4 {
            engine.put(shard, &format!("k{round}"), &format!("v{round}-s{shard}"))?;
        }
        if round == 5 {
            engine.flush(0)?;
            engine.flush(1)?;
        }
    }
    engine.flush(1)?;
    engine.drop_shard(3)?;
    engine.close()?;

    let engine = Engine::open(storage, tables)?;
    for shard in 0..3 {
        for round in 0..10 {
            let got = engine.get(shard, &format!("k{round}"))?;
            let want = format!("v{round}-s{shard}");
            if got.as_deref() != Some(want.as_str()) {
                return Err(format!("shard {shard} k{round}: {got:?}, expected {want}").into());
            }
        }
    }
    if engine.get(3, "k0")?.is_some() {
        return Err("the dropped shard came back".into());
    }
    let replayed = engine.unflushed();
    engine.close()?;
    Ok(replayed)
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("objwal-blocking-engine-{}", std::process::id()));
    let storage = Storage::from_url(&format!("file://{}", dir.join("wal").display()))?;
    let result = run(storage, &dir.join("tables"));
    std::fs::remove_dir_all(&dir)?;
    let replayed = result?;
    println!(
        "every put of the live shards came back; replayed from the log per shard: {replayed:?}"
    );
    Ok(())
}
