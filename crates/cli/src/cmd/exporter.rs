//! `numaplace exporter` (issue 6): serves the `top` figures as Prometheus
//! metrics at `/metrics` (docs/exporter.md). Each scrape takes a fresh
//! sample; the sampler lives as long as the exporter so home-node
//! migration counters keep counting.

use numaplace_observe::sample::{Options, Sampler};
use numaplace_observe::{prom, FsSource};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
EXAMPLES:
  numaplace exporter --listen 127.0.0.1:9464
  curl -s http://127.0.0.1:9464/metrics | grep numaplace_vm_local_memory_ratio";

/// Serves Prometheus metrics about VM NUMA locality.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub listen: String,
    /// Include processes that are not QEMU VMs (as numaplace_process_*).
    #[arg(long)]
    pub all: bool,
    /// Read a recorded tree (holding `proc/` and `sys/`) instead of `/`.
    #[arg(long, hide = true, default_value = "/")]
    pub root: std::path::PathBuf,
}

/// Runs `numaplace exporter`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let listener = std::net::TcpListener::bind(&args.listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let mut sampler = Sampler::new(FsSource::new(&args.root), Options { all: args.all, pids: Vec::new(), window: 3 });
    // Fail early (bad root, unreadable /proc) rather than on the first scrape.
    let first = sampler.sample()?;
    if !first.numa {
        eprintln!("numaplace exporter: note: this kernel exposes no NUMA nodes; all memory is reported on node 0");
    }
    eprintln!("numaplace exporter: serving http://{}/metrics", listener.local_addr()?);
    numaplace_server::exporter::serve(listener, prom::CONTENT_TYPE, move || {
        sampler.sample().map(|s| prom::render(&s)).map_err(|e| e.to_string())
    })?;
    Ok(ExitCode::SUCCESS)
}
