//! `objwal dump URL --region R [--from ID]`: the entries of one region, read
//! through [`objwal::WalReader`] (the tip's chain, nothing written): id,
//! length, and the payload as text when it is UTF-8, else a hex prefix.
//!
//! `--raw` writes the entries as binary frames to stdout, one per entry:
//!
//! ```text
//! | entry id: u64 LE | length: u32 LE | payload: length bytes |
//! ```
//!
//! so a consumer can split them again (payloads may hold any bytes). It
//! refuses to write frames to a terminal.
//!
//! A damaged log is dumped as far as it goes: damaged objects are left out
//! (`on_damaged_object = "quarantine"`) and the command exits 1 naming the
//! holes they leave in the region.

use std::io::{IsTerminal, Write};

use futures::StreamExt;
use objwal::id::Dotted;
use objwal::{Config, DamagePolicy, WalReader};

use crate::{store, CliError, CliResult};

/// Arguments of `objwal dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// The store URL (file:///path, s3://bucket/root?..., ...).
    url: String,
    /// The region to dump.
    #[arg(long)]
    region: u64,
    /// The first entry id to show: SEQUENCE.POSITION (as `inspect` and
    /// this listing print ids) or a plain integer.
    #[arg(long, default_value = "0")]
    from: objwal::id::Dotted,
    /// Write binary frames (id u64 LE, length u32 LE, payload) to stdout
    /// instead of a listing.
    #[arg(long)]
    raw: bool,
}

/// Text payloads are shown up to this many characters.
const TEXT_PREFIX: usize = 120;
/// Binary payloads are shown as this many leading bytes of hex.
const HEX_PREFIX: usize = 32;

/// The reader `dump` and `tail` print from: refuses `--raw` to a terminal
/// and a URL that holds no log under `prefix`, and opens without the
/// damaged objects (they are named on stderr, their entries as holes).
pub(crate) async fn open_reader(prefix: &str, url: &str, raw: bool) -> Result<WalReader, CliError> {
    let parsed = store::prefix(prefix)?;
    if raw && std::io::stdout().is_terminal() {
        return Err(CliError::Usage(
            "--raw writes binary frames; redirect stdout to a file or a pipe".into(),
        ));
    }
    let storage = store::open(url, true)?;
    store::objects(&storage, &parsed, url).await?;
    let config = Config {
        on_damaged_object: DamagePolicy::Quarantine,
        ..crate::store::base()
    };
    Ok(WalReader::open(storage, prefix, config).await?)
}

/// Runs `dump`.
pub async fn run(prefix: &str, args: DumpArgs) -> CliResult {
    let reader = open_reader(prefix, &args.url, args.raw).await?;
    let regions: Vec<u64> = (reader.regions().iter())
        .filter(|r| r.objects > 0)
        .map(|r| r.region)
        .collect();
    let released = reader.released_through(args.region);
    if released > 0 {
        return Err(CliError::Usage(format!(
            "region {} is released (through id {}): release_region dropped it and its entries, \
             so there is nothing to dump",
            args.region,
            Dotted(released)
        )));
    }
    if !regions.contains(&args.region) {
        return Err(CliError::Usage(format!(
            "region {} has no entries under prefix {prefix} (regions: {})",
            args.region,
            list(&regions)
        )));
    }
    match write_entries(&reader, &args).await {
        // A closed pipe (`objwal dump ... | head`) ends the output early.
        Err(Output::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(Output::Write(e)) => return Err(CliError::Failed(format!("cannot write: {e}"))),
        Err(Output::Read(e)) => return Err(e.into()),
        Ok(()) => {}
    }
    let holes: Vec<_> = reader
        .holes(args.region)
        .into_iter()
        .filter(|h| h.last_id >= args.from.0)
        .collect();
    if !holes.is_empty() {
        return Err(CliError::Failed(format!(
            "region {} misses entries: {} holes (first: {} ids {}..{})",
            args.region,
            holes.len(),
            holes.first().map_or("", |h| h.key.as_str()),
            holes.first().map_or(0, |h| h.first_id),
            holes.first().map_or(0, |h| h.last_id),
        )));
    }
    Ok(())
}

/// Why writing the entries stopped.
enum Output {
    Read(objwal::Error),
    Write(std::io::Error),
}

async fn write_entries(reader: &WalReader, args: &DumpArgs) -> Result<(), Output> {
    let mut entries = Box::pin(reader.read(args.region, args.from.0));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut count, mut bytes) = (0u64, 0u64);
    let write_err = Output::Write;
    while let Some(entry) = entries.next().await {
        let entry = entry.map_err(Output::Read)?;
        count += 1;
        bytes += entry.data.len() as u64;
        if args.raw {
            let len = u32::try_from(entry.data.len())
                .map_err(|_| Output::Write(std::io::Error::other("an entry longer than 4 GiB")))?;
            out.write_all(&entry.id.to_le_bytes()).map_err(write_err)?;
            out.write_all(&len.to_le_bytes()).map_err(write_err)?;
            out.write_all(&entry.data).map_err(write_err)?;
        } else {
            writeln!(
                out,
                "{} ({}) {} bytes: {}",
                entry.id,
                Dotted(entry.id),
                entry.data.len(),
                show(&entry.data)
            )
            .map_err(write_err)?;
        }
    }
    if !args.raw {
        writeln!(
            out,
            "region {}: {count} entries, {bytes} bytes from id {}",
            args.region, args.from
        )
        .map_err(write_err)?;
    }
    out.flush().map_err(write_err)
}

/// A payload on one line: escaped text, or hex of its first bytes.
pub fn show(data: &[u8]) -> String {
    match std::str::from_utf8(data) {
        Ok(text) => {
            let shown: String = text.chars().take(TEXT_PREFIX).collect();
            let more = if shown.len() < text.len() { "..." } else { "" };
            format!("\"{}\"{more}", shown.escape_debug())
        }
        Err(_) => {
            let hex: String = data
                .iter()
                .take(HEX_PREFIX)
                .map(|b| format!("{b:02x}"))
                .collect();
            let more = if data.len() > HEX_PREFIX { "..." } else { "" };
            format!("hex {hex}{more}")
        }
    }
}

/// A short list of regions, abbreviated when long.
fn list(regions: &[u64]) -> String {
    if regions.is_empty() {
        return "none".to_owned();
    }
    let shown: Vec<String> = regions.iter().take(20).map(u64::to_string).collect();
    let more = if regions.len() > 20 {
        format!(" and {} more", regions.len() - 20)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}
