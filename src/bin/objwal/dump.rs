//! `objwal dump` (being written).

use crate::{CliError, CliResult};

/// Arguments of `objwal dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {}

/// Runs the command.
pub async fn run(_prefix: &str, _args: DumpArgs) -> CliResult {
    Err(CliError::Failed("not yet".into()))
}
