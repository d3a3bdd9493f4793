//! A small storage engine whose log and tables both live in one object
//! store:
//!
//! ```text
//! cargo run --example engine                          # a temporary directory
//! cargo run --example engine -- memory://
//! cargo run --example engine -- 's3://bucket/root?endpoint=http://127.0.0.1:9000&region=us-east-1'
//! ```
//!
//! Shards (regions) of a key-value store. A `put` is logged with
//! [`objwal::Wal::append`] (durable when it returns) and applied to the
//! shard's memtable. A flush writes the shard's rows into a new, immutable
//! table object (`tables/<shard>/<through>.tbl`, created if absent), then
//! tells the log with `obsolete` that it may forget them, then deletes the
//! shard's older tables. Dropping a shard is `release_region`, then its
//! tables go. A restart loads each shard's newest table, hands the log its
//! flush mark again, and replays every shard's unflushed entries in one
//! pass (`replay`, from the id after the table's).
//!
//! The suite runs [`demo`] on the in-memory store and on the S3 test
//! server (tests/integration/examples.rs).
#![allow(clippy::print_stdout, reason = "an example prints what it did")]

use std::collections::BTreeMap;
use std::error::Error;

use bytes::Bytes;
use futures::StreamExt;
use objwal::{Config, EntryId, ObjectStorage, RegionId, Storage, Wal};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Where the tables live, beside the log's prefix.
const TABLES: &str = "tables";
/// The log's prefix.
const LOG: &str = "engine-log";

/// One shard in memory.
#[derive(Debug, Default)]
struct Shard {
    /// Rows of the newest table.
    table: BTreeMap<String, String>,
    /// The id the newest table holds through (0: none).
    through: EntryId,
    /// Puts not yet in a table.
    memtable: BTreeMap<String, String>,
    /// The id of the last put applied.
    last_id: EntryId,
}

/// The engine: a log, tables in the same store, the shards.
pub struct Engine {
    wal: Wal,
    storage: Storage,
    shards: BTreeMap<RegionId, Shard>,
}

impl Engine {
    /// Opens the engine: the newest table of each shard, then what the log
    /// holds above it.
    pub async fn open(storage: Storage) -> Result<Engine> {
        let mut shards: BTreeMap<RegionId, Shard> = BTreeMap::new();
        for (shard, key, through) in tables(&storage).await? {
            let state = shards.entry(shard).or_default();
            if through > state.through {
                let bytes = read_whole(&storage, &key).await?;
                state.table = decode_table(&bytes)?;
                state.through = through;
                state.last_id = through;
            }
        }
        let wal = Wal::open(storage.clone(), LOG, Config::default()).await?;
        for info in wal.regions().await? {
            if !info.released {
                shards.entry(info.region).or_default();
            }
        }
        // The engine's side of flush marks: the log may have lost a mark
        // handed in just before a crash; the tables are the truth.
        for (shard, state) in &shards {
            if state.through > 0 {
                wal.obsolete(*shard, state.through).await?;
            }
        }
        let starts: Vec<(RegionId, EntryId)> = shards
            .iter()
            .map(|(shard, s)| (*shard, s.through + 1))
            .collect();
        let mut replay = Box::pin(wal.replay(starts));
        while let Some(entry) = replay.next().await {
            let entry = entry?;
            let (key, value) = decode_put(&entry.data)?;
            let state = shards.entry(entry.region).or_default();
            state.memtable.insert(key, value);
            state.last_id = entry.id;
        }
        Ok(Engine {
            wal,
            storage,
            shards,
        })
    }

    /// Logs a put durably, then applies it.
    pub async fn put(&mut self, shard: RegionId, key: &str, value: &str) -> Result<()> {
        let ids = self
            .wal
            .append(vec![(shard, encode_put(key, value))])
            .await?;
        let state = self.shards.entry(shard).or_default();
        state.memtable.insert(key.to_owned(), value.to_owned());
        state.last_id = ids.first().copied().unwrap_or(state.last_id);
        Ok(())
    }

    /// The value of `key` in `shard`.
    pub fn get(&self, shard: RegionId, key: &str) -> Option<&str> {
        let state = self.shards.get(&shard)?;
        state
            .memtable
            .get(key)
            .or_else(|| state.table.get(key))
            .map(String::as_str)
    }

    /// Writes the shard's rows into a new table, then marks them obsolete
    /// in the log, then deletes the older tables.
    pub async fn flush(&mut self, shard: RegionId) -> Result<()> {
        let Some(state) = self.shards.get_mut(&shard) else {
            return Ok(());
        };
        if state.memtable.is_empty() {
            return Ok(());
        }
        let mut rows = state.table.clone();
        rows.extend(std::mem::take(&mut state.memtable));
        let key = table_key(shard, state.last_id);
        self.storage.create(&key, encode_table(&rows)).await?;
        let older = state.through;
        state.table = rows;
        state.through = state.last_id;
        // Only once the table is durable may the log forget its entries.
        self.wal.obsolete(shard, state.through).await?;
        if older > 0 {
            self.storage.delete(&table_key(shard, older)).await?;
        }
        Ok(())
    }

    /// Drops a shard: durably in the log, then its tables.
    pub async fn drop_shard(&mut self, shard: RegionId) -> Result<()> {
        self.wal.release_region(shard).await?;
        if let Some(state) = self.shards.remove(&shard) {
            if state.through > 0 {
                self.storage
                    .delete(&table_key(shard, state.through))
                    .await?;
            }
        }
        Ok(())
    }

    /// Every row, by shard (tables and memtables together).
    pub fn rows(&self) -> BTreeMap<RegionId, BTreeMap<String, String>> {
        self.shards
            .iter()
            .map(|(shard, s)| {
                let mut rows = s.table.clone();
                rows.extend(s.memtable.clone());
                (*shard, rows)
            })
            .collect()
    }

    /// Entries each shard holds only in the log.
    pub fn unflushed(&self) -> usize {
        self.shards.values().map(|s| s.memtable.len()).sum()
    }

    /// A clean stop of the log.
    pub async fn stop(self) -> Result<()> {
        Ok(self.wal.stop().await?)
    }
}

fn table_key(shard: RegionId, through: EntryId) -> String {
    format!("{TABLES}/{shard}/{through:020}.tbl")
}

/// Every table object: (shard, key, through).
async fn tables(storage: &Storage) -> Result<Vec<(RegionId, String, EntryId)>> {
    let listed = storage.list(&format!("{TABLES}/")).await?;
    Ok(listed
        .into_iter()
        .filter_map(|meta| {
            let rest = meta.key.strip_prefix(&format!("{TABLES}/"))?;
            let (shard, name) = rest.split_once('/')?;
            let through = name.strip_suffix(".tbl")?.parse().ok()?;
            Some((shard.parse().ok()?, meta.key.clone(), through))
        })
        .collect())
}

async fn read_whole(storage: &Storage, key: &str) -> Result<Bytes> {
    let size = storage
        .list(key)
        .await?
        .into_iter()
        .find(|m| m.key == key)
        .map(|m| m.size)
        .ok_or_else(|| format!("{key} vanished"))?;
    Ok(storage.read(key, 0..size).await?)
}

/// A put is `key`, a zero byte, then `value`.
fn encode_put(key: &str, value: &str) -> Bytes {
    Bytes::from(format!("{key}\0{value}"))
}

fn decode_put(data: &[u8]) -> Result<(String, String)> {
    let text = std::str::from_utf8(data)?;
    let (key, value) = text.split_once('\0').ok_or("a put without its separator")?;
    Ok((key.to_owned(), value.to_owned()))
}

/// A table is its rows, one put per line.
fn encode_table(rows: &BTreeMap<String, String>) -> Bytes {
    let mut out = Vec::new();
    for (key, value) in rows {
        out.extend_from_slice(&encode_put(key, value));
        out.push(b'\n');
    }
    Bytes::from(out)
}

fn decode_table(data: &[u8]) -> Result<BTreeMap<String, String>> {
    data.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(decode_put)
        .collect()
}

/// The example's run: puts into four shards, flushes two, drops one, then a
/// crash (the handle dropped without `stop`) and a restart that must find
/// every row of the three shards left and nothing of the dropped one.
/// Returns the rows after the restart and how many came from the log.
pub async fn demo(
    storage: Storage,
) -> Result<(BTreeMap<RegionId, BTreeMap<String, String>>, usize)> {
    let mut engine = Engine::open(storage.clone()).await?;
    for i in 0..40u32 {
        let shard = RegionId::from(i % 4);
        engine
            .put(shard, &format!("k{i}"), &format!("v{i}"))
            .await?;
    }
    engine.flush(0).await?;
    engine.put(0, "k0", "updated").await?;
    engine.flush(1).await?;
    engine.flush(1).await?;
    engine.drop_shard(3).await?;
    let before = engine.rows();
    drop(engine); // a crash: no stop
    let engine = Engine::open(storage).await?;
    let after = engine.rows();
    if after != before {
        return Err(format!("the restart found {after:?}, expected {before:?}").into());
    }
    let unflushed = engine.unflushed();
    engine.stop().await?;
    Ok((after, unflushed))
}

#[tokio::main]
async fn main() -> Result<()> {
    let scratch;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            scratch = std::env::temp_dir().join(format!("objwal-engine-{}", std::process::id()));
            std::fs::create_dir_all(&scratch)?;
            format!("file://{}", scratch.display())
        }
    };
    let (rows, unflushed) = demo(Storage::from_url(&url)?).await?;
    for (shard, rows) in &rows {
        println!("shard {shard}: {} rows", rows.len());
    }
    println!("restart replayed {unflushed} puts from the log; the rest came from tables in {url}");
    if std::env::args().nth(1).is_none() {
        let dir = url.trim_start_matches("file://");
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}
