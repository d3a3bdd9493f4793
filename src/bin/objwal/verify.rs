//! `objwal verify` (being written).

use crate::{CliError, CliResult};

/// Arguments of `objwal verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {}

/// Runs the command.
pub async fn run(_prefix: &str, _args: VerifyArgs) -> CliResult {
    Err(CliError::Failed("not yet".into()))
}
