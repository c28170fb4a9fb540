//! `numaplace`: the command line. Thin: parse flags, call the libraries,
//! print. Every command offers a text view for people and `--format json`
//! for programs.

mod cmd;

use clap::Parser;
use std::process::ExitCode;

// Planning and simulating allocate many small, short-lived vectors; the
// system allocator spent about a third of a fleet replay's time on them
// (docs/performance.md), mimalloc a fraction of that; `numaplace-alloc`
// calls mimalloc the way its fast path wants.
#[global_allocator]
static ALLOCATOR: numaplace_alloc::Allocator = numaplace_alloc::Allocator;

fn main() -> ExitCode {
    let cli = cmd::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("numaplace: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
