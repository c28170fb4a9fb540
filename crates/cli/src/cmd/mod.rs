//! Subcommands and their shared flags.

pub mod balance;
pub mod exporter;
pub mod lint;
pub mod plan;
pub mod simulate;
pub mod top;
pub mod topology;
pub mod verify;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

/// NUMA placement for KVM/libvirt virtual machines.
#[derive(Parser, Debug)]
#[command(name = "numaplace", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Topology(topology::Args),
    Plan(plan::Args),
    Lint(lint::Args),
    Simulate(simulate::Args),
    Top(top::Args),
    Exporter(exporter::Args),
    Balance(balance::Args),
    Verify(verify::Args),
}

/// Output formats shared by the commands that show one thing.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A compact view for people.
    Text,
    /// Stable JSON for programs (documented under docs/).
    Json,
    /// An SVG picture.
    Svg,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Topology(args) => topology::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Lint(args) => lint::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Top(args) => top::run(args),
        Command::Exporter(args) => exporter::run(args),
        Command::Balance(args) => balance::run(args),
        Command::Verify(args) => verify::run(args),
    }
}

/// Writes to stdout, treating a closed pipe (`| head`) as success.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
