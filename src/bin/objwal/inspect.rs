//! `objwal inspect` (being written).

use crate::{CliError, CliResult};

/// Arguments of `objwal inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {}

/// Runs the command.
pub async fn run(_prefix: &str, _args: InspectArgs) -> CliResult {
    Err(CliError::Failed("not yet".into()))
}
