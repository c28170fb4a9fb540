//! A test workload for `numaplace balance`, run inside a guest by
//! `tests/observe_guest.rs`: it faults memory in on one set of CPUs and
//! then lives on another, which puts its memory on the wrong node without
//! a memory policy (first touch decides where a page goes). An example,
//! not a subcommand, so the shipped binary carries no test workload.
//!
//! ```text
//! touch_memory --bytes 64MiB --touch-cpus 1 --run-cpus 0 --hold 300s --ready /tmp/ready
//! ```

use clap::Parser;
use numaplace_observe::act::{Live, System};
use numaplace_observe::units;
use numaplace_topo::CpuSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Memory faulted in on some CPUs, then held on others.
#[derive(Parser, Debug)]
struct Args {
    /// Memory to allocate and touch.
    #[arg(long, default_value = "64MiB", value_parser = units::parse_bytes)]
    bytes: u64,
    /// CPUs to touch the memory on (its pages land on their node).
    #[arg(long)]
    touch_cpus: Option<CpuSet>,
    /// CPUs to run on afterwards.
    #[arg(long)]
    run_cpus: Option<CpuSet>,
    /// Spin on the CPU instead of sleeping while holding.
    #[arg(long)]
    spin: bool,
    /// How long to hold the memory.
    #[arg(long, default_value = "30s", value_parser = units::parse_duration)]
    hold: Duration,
    /// A file to create once the memory is placed.
    #[arg(long)]
    ready: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("touch_memory: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let me = std::process::id();
    let mut kernel = Live::default();
    // The process is single-threaded: its pid is its one thread's id.
    if let Some(c) = &args.touch_cpus {
        kernel.set_affinity(me, c)?;
    }
    let len = usize::try_from(args.bytes)?;
    // Writing every page is what makes the kernel place it (first touch).
    let mut buf = vec![0u8; len];
    for i in (0..len).step_by(4096) {
        if let Some(b) = buf.get_mut(i) {
            *b = 1;
        }
    }
    if let Some(c) = &args.run_cpus {
        kernel.set_affinity(me, c)?;
    }
    eprintln!("touch_memory: pid {me} holds {} MiB", args.bytes >> 20);
    if let Some(path) = &args.ready {
        std::fs::write(path, format!("{me}\n"))?;
    }
    let end = Instant::now() + args.hold;
    while Instant::now() < end {
        if args.spin {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Keep the buffer alive (and observed) until the end.
    let sum: u64 = buf.iter().step_by(4096).map(|b| u64::from(*b)).sum();
    eprintln!("touch_memory: done ({sum} pages)");
    Ok(())
}
