//! `numaplace plan` (issue 3).

use std::process::ExitCode;

/// Plan where VMs go on a host.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `numaplace plan`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("plan is not implemented yet")
}
