//! `numaplace topology`.

use std::process::ExitCode;

/// Show a host's NUMA topology.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `numaplace topology`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::SUCCESS)
}
