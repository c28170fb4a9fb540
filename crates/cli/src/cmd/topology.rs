//! `numaplace topology`: read a host's topology from any source and show
//! it as text, JSON or SVG.

use super::Format;
use anyhow::Context;
use numaplace_topo::Topology;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
SOURCES:
  (none)                         the live host (/sys and /proc)
  DIR                            a copy of a host's /sys and /proc trees
  FILE.tar[.bz2/.gz/.xz]         a tarball of such a tree (hwloc-gather-topology), told by content
  FILE.xml                       hwloc XML (lstopo --of xml) or libvirt capabilities (virsh capabilities)
  FILE.json                      numaplace topology JSON
  \"2 sockets x 8 cores x 2 threads, 64GiB per node\"   a synthetic description
  hwloc:F, libvirt:F, sysfs:F, json:F, synthetic:TEXT  force the kind

EXAMPLES:
  numaplace topology
  numaplace topology --from fixtures/topologies/mpibind/epyc-corona.xml
  numaplace topology --from '2 sockets x 2 nodes x 8 cores x 2 threads, 64GiB per node, distances 10/12/32' --format json
  numaplace topology --from host.tar.bz2 --format svg > host.svg";

/// Show a host's NUMA topology: packages, nodes, cores, threads, memory,
/// huge pages, distances and devices.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Where to read the topology from (default: the live host).
    #[arg(long, value_name = "SOURCE")]
    from: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Reads a topology from a source named on the command line, or the live
/// host when none is given.
pub fn load(source: Option<&str>) -> anyhow::Result<Topology> {
    load_host(source).map(|h| h.topology)
}

/// [`load`], with the reservations a topology JSON carries.
pub fn load_host(source: Option<&str>) -> anyhow::Result<numaplace_read::Host> {
    match source {
        Some(s) => numaplace_read::read_host(s).map_err(anyhow::Error::from),
        None => {
            numaplace_read::read_live().map(Into::into).context("reading the live host (use --from to read a file)")
        }
    }
}

/// Runs `numaplace topology`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let topology = load(args.from.as_deref())?;
    let out = match args.format {
        Format::Text => numaplace_emit::text::topology(&topology),
        Format::Json => {
            let mut s = numaplace_read::json::to_string(&topology);
            s.push('\n');
            s
        }
        Format::Svg => numaplace_emit::svg::topology(&topology),
    };
    super::print(&out)?;
    Ok(ExitCode::SUCCESS)
}
