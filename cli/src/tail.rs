//! `objwal tail URL --region R [--from ID] [--raw]`: the entries of one
//! region as they land, through a [`objwal::Follower`] (nothing written;
//! the writer is never fenced), in `dump`'s format, until Ctrl-C.
//!
//! Without `--from` it shows the entries that land after it started; with
//! `--from ID` it first shows the region's entries from `ID` (as `dump
//! --from ID` would), then goes on. It says on stderr when it follows
//! (`following region R ...`), so a script knows when an append will
//! show. `--raw` writes `dump --raw`'s binary frames (`id: u64 LE | length:
//! u32 LE | payload`), each flushed as it lands; it refuses a terminal.
//!
//! For a standby operator: `--hold NAME` places a reader hold on the
//! prefix (rfcs/0011) that the follower keeps moved to what it has shown
//! and refreshed every quarter of `--hold-ttl` (5 min by default), so the
//! writer's collection deletes nothing it has not shown; it is released
//! when the command ends (a killed command's hold expires after its ttl).
//! `--lag-every DURATION` prints the follower's lag on stderr at that
//! interval (`lag: N objects, oldest S s`); the last line gives it too.
//!
//! It stops with exit 0 on SIGINT (Ctrl-C), printing (in text mode) a
//! summary line, and when the region is released (saying so on stderr).
//! Holes (entries it could not show) are named on stderr as it finds them
//! and in a last line; a failure of the follower is exit 1.

use std::io::Write;

use futures::StreamExt;
use objwal::{Entry, Error};

use crate::inspect::dump::show;
use crate::{CliError, CliResult};
use objwal::id::Dotted;

/// Arguments of `objwal tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The store URL (file:///path, s3://bucket/root?..., ...).
    url: String,
    /// The region to follow.
    #[arg(long)]
    region: u64,
    /// Show the region's entries from this id first (SEQUENCE.POSITION or
    /// a plain integer), as `dump --from` would; without it, only entries
    /// that land after the command started.
    #[arg(long)]
    from: Option<objwal::id::Dotted>,
    /// Write binary frames (id u64 LE, length u32 LE, payload) to stdout
    /// instead of lines.
    #[arg(long)]
    raw: bool,
    /// Hold the writer's collection at what this command has not shown
    /// yet, under this name (released at the end).
    #[arg(long, value_name = "NAME")]
    hold: Option<String>,
    /// How long the hold lasts if this command dies without releasing it.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    hold_ttl: std::time::Duration,
    /// Print the lag (objects landed and not shown, and the age of the
    /// oldest) on stderr at this interval.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    lag_every: Option<std::time::Duration>,
}

/// Runs `tail`.
pub async fn run(prefix: &str, args: TailArgs) -> CliResult {
    let reader = crate::inspect::dump::open_reader(prefix, &args.url, args.raw).await?;
    let region = args.region;
    let start = match args.from {
        Some(from) => from.0.saturating_sub(1),
        None => reader
            .latest_entry_id(region)
            .max(reader.released_through(region)),
    };
    let mut follower = reader.follow([(region, start)]);
    if let Some(name) = &args.hold {
        let hold = reader.hold(name, args.hold_ttl).await?;
        eprintln!(
            "objwal tail: holding the writer's collection as {name:?} from object {} \
             (ttl {})",
            hold.position(),
            humantime::format_duration(args.hold_ttl)
        );
        follower.keep_hold(hold);
    }
    eprintln!(
        "objwal tail: following region {region} of prefix {prefix} above {} (Ctrl-C stops)",
        Dotted(start)
    );
    let result = follow(&mut follower, region, &args).await;
    if let Some(hold) = follower.take_hold().await {
        let name = hold.name().to_owned();
        match hold.release().await {
            Ok(()) => eprintln!("objwal tail: released the hold {name:?}"),
            Err(e) => eprintln!("objwal tail: cannot release the hold {name:?} (it expires): {e}"),
        }
    }
    let (count, bytes, holes) = result?;
    if !args.raw {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "region {region}: {count} entries, {bytes} bytes above {}",
            Dotted(start)
        );
        let _ = out.flush();
    }
    eprintln!("objwal tail: {}", lag_line(&follower));
    if holes > 0 {
        eprintln!("objwal tail: region {region} has {holes} holes");
    }
    Ok(())
}

fn lag_line(follower: &objwal::Follower) -> String {
    let lag = follower.lag();
    format!(
        "lag: {} objects, oldest {:.1} s",
        lag.objects,
        lag.age.as_secs_f64()
    )
}

/// Shows the entries until Ctrl-C, the release, a closed pipe or a
/// failure: how many entries and bytes, and the holes.
async fn follow(
    follower: &mut objwal::Follower,
    region: u64,
    args: &TailArgs,
) -> Result<(u64, u64, usize), CliError> {
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    let (mut count, mut bytes, mut holes) = (0u64, 0u64, 0usize);
    let mut report = args.lag_every.map(|every| {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    loop {
        let item = tokio::select! {
            _ = &mut interrupted => break,
            Some(_) = async { Some(report.as_mut()?.tick().await) }, if report.is_some() => {
                eprintln!("objwal tail: {}", lag_line(follower));
                continue;
            }
            item = follower.next() => item,
        };
        match item {
            Some(Ok(entry)) => {
                count += 1;
                bytes += entry.data.len() as u64;
                match write(&entry, args.raw) {
                    Ok(()) => {}
                    // A closed pipe (`objwal tail ... | head`) ends the output.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
                    Err(e) => return Err(CliError::Failed(format!("cannot write: {e}"))),
                }
            }
            Some(Err(Error::RegionReleased { .. })) => {
                eprintln!("objwal tail: region {region} was released");
                break;
            }
            Some(Err(e)) => return Err(e.into()),
            None => break,
        }
        let found = follower.holes(region);
        for hole in found.iter().skip(holes) {
            eprintln!(
                "objwal tail: region {region} misses ids {}..{} ({}): a hole",
                Dotted(hole.first_id),
                Dotted(hole.last_id),
                hole.key
            );
        }
        holes = found.len();
    }
    Ok((count, bytes, holes))
}

/// Writes one entry as `dump` does, and flushes it: it shows as it lands.
fn write(entry: &Entry, raw: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if raw {
        let len = u32::try_from(entry.data.len())
            .map_err(|_| std::io::Error::other("an entry longer than 4 GiB"))?;
        out.write_all(&entry.id.to_le_bytes())?;
        out.write_all(&len.to_le_bytes())?;
        out.write_all(&entry.data)?;
    } else {
        writeln!(
            out,
            "{} ({}) {} bytes: {}",
            entry.id,
            Dotted(entry.id),
            entry.data.len(),
            show(&entry.data)
        )?;
    }
    out.flush()
}
