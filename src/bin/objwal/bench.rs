//! `objwal bench` (being written).

use crate::{CliError, CliResult};

/// Arguments of `objwal bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs the command.
pub async fn run(_prefix: &str, _args: BenchArgs) -> CliResult {
    Err(CliError::Failed("not yet".into()))
}
