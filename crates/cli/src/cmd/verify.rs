//! `numaplace verify`: boots each planned guest and checks that its kernel
//! sees the planned NUMA topology.

use anyhow::Context;
use numaplace_guest::verify::{verify, Options, Via};
use numaplace_wire::plan::PlanDoc;
use numaplace_wire::verify::{CheckDoc, VerifiedDoc, VerifyDoc};
use std::process::ExitCode;
use std::time::Duration;

const AFTER_HELP: &str = "\
Boots a minimal guest (the distribution's kernel and a busybox initramfs,
prepared once and cached) with exactly the plan's guest topology, under
software-emulated QEMU or through libvirt, and compares what the guest
kernel reports, cell by cell: node list, each node's CPUs, memory (by
memory blocks), distance rows, and each CPU's thread siblings and package.
Exit 0 only when everything matches.

On a machine that lacks the planned host's nodes or CPUs, the guest side is
verified and host pinning and memory binding are mapped onto this machine
(the report says so).

EXAMPLES:
  numaplace plan --host fixtures/topologies/mpibind/epyc-corona.xml --vm name=db,vcpus=16,memory=4GiB --format json > plan.json
  numaplace verify --plan plan.json
  numaplace verify --plan plan.json --vm db --via libvirt --format json
  numaplace verify --plan gpu.json --via libvirt --host fixtures/topologies/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml

With --host (the host the plan was made for) and --via libvirt, each of a
VM's PCI devices near one of its guest cells is stood in for by a virtio
device behind that cell's PCIe expander bus, and the guest's numa_node of
it is checked (`device cells`).";

/// Boot the planned guests and check what their kernels see.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// A plan written by `numaplace plan --format json`.
    #[arg(long, value_name = "PLAN.json")]
    plan: String,
    /// Only this VM (default: every placed VM).
    #[arg(long, value_name = "NAME")]
    vm: Option<String>,
    /// Start the guest with QEMU directly or through libvirt.
    #[arg(long, value_enum, default_value_t = ViaArg::Qemu)]
    via: ViaArg,
    /// Seconds a guest may take to boot and report.
    #[arg(long, default_value_t = 180)]
    timeout: u64,
    /// Largest guest memory to boot; larger plans are scaled down (and say so).
    /// Sizes as everywhere in numaplace: 4GiB or 4G is 4 x 2^30 bytes, 4GB
    /// is 4 x 10^9 (docs/formats/request.md#sizes).
    #[arg(long, default_value = "4GiB", value_parser = parse_size)]
    max_memory: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutFormat::Text)]
    format: OutFormat,
    /// The host the plan was made for (any `topology --from` source): with
    /// `--via libvirt`, the guest cell each passed-through device is near
    /// is checked too.
    #[arg(long, value_name = "SOURCE")]
    host: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ViaArg {
    Qemu,
    Libvirt,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OutFormat {
    Text,
    Json,
}

/// The workspace's one size grammar; its error already names the text.
fn parse_size(s: &str) -> Result<u64, String> {
    numaplace_topo::try_parse_size(s).map_err(|e| e.to_string())
}

/// Runs `numaplace verify`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("reading {}", args.plan))?;
    let doc = PlanDoc::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.plan))?;
    let placements = doc.to_placements().map_err(|e| anyhow::anyhow!("{}: {e}", args.plan))?;
    let chosen: Vec<_> = placements.iter().filter(|p| args.vm.as_ref().is_none_or(|v| &p.vm == v)).collect();
    if chosen.is_empty() {
        match &args.vm {
            Some(v) => anyhow::bail!("{}: no placed VM named `{v}`", args.plan),
            None => anyhow::bail!("{}: the plan places no VM", args.plan),
        }
    }
    let local = numaplace_read::read_live().context("reading this machine's topology")?;
    let opts = Options {
        via: match args.via {
            ViaArg::Qemu => Via::Qemu,
            ViaArg::Libvirt => Via::Libvirt,
        },
        cache: numaplace_guest::prepare::default_cache(),
        timeout: Duration::from_secs(args.timeout),
        max_memory: args.max_memory,
        // A plan file does not say which node each device is on: the
        // planning host does.
        device_nodes: match &args.host {
            Some(source) => {
                let host = numaplace_read::read_source(source).with_context(|| format!("reading {source}"))?;
                host.devices().iter().filter_map(|d| d.node.map(|n| (d.address.to_ascii_lowercase(), n))).collect()
            }
            None => Vec::new(),
        },
    };
    let mut all_ok = true;
    let mut verified = Vec::new();
    for p in chosen {
        if args.format == OutFormat::Text {
            eprintln!("numaplace: booting {} ({} cells)...", p.vm, p.guest.cells.len());
        }
        let outcome = verify(p, &local, &opts).with_context(|| format!("verifying {}", p.vm))?;
        all_ok &= outcome.verdict.passed();
        match args.format {
            OutFormat::Text => super::print(&text_view(&outcome))?,
            OutFormat::Json => verified.push(outcome),
        }
    }
    if args.format == OutFormat::Json {
        let doc = VerifyDoc { passed: all_ok, verified: verified.iter().map(verified_doc).collect() };
        super::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn verified_doc(o: &numaplace_guest::verify::Outcome) -> VerifiedDoc<'_> {
    VerifiedDoc {
        checks: o
            .verdict
            .checks
            .iter()
            .map(|c| CheckDoc { cell: c.cell, expected: &c.expected, found: &c.found, ok: c.ok(), what: &c.what })
            .collect(),
        host_side_verified: o.host_side_verified,
        notes: &o.notes,
        passed: o.verdict.passed(),
        vm: &o.vm,
    }
}

fn text_view(o: &numaplace_guest::verify::Outcome) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let verdict = if o.verdict.passed() { "MATCH" } else { "MISMATCH" };
    let _ = writeln!(s, "{}: {verdict}", o.vm);
    for n in &o.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    let mut last_cell = None;
    for c in &o.verdict.checks {
        // Per-CPU sibling checks are many; show them only when they fail.
        if c.ok() && (c.what.starts_with("thread siblings") || c.what.starts_with("package of")) {
            continue;
        }
        if c.cell != last_cell {
            if let Some(cell) = c.cell {
                let _ = writeln!(s, "  cell {cell}");
            }
            last_cell = c.cell;
        }
        let mark = if c.ok() { "ok " } else { "BAD" };
        if c.ok() {
            let _ = writeln!(s, "    {mark} {:<12} {}", c.what, c.found);
        } else {
            let _ = writeln!(s, "    {mark} {:<12} planned {}, guest saw {}", c.what, c.expected, c.found);
        }
    }
    let sib = o.verdict.checks.iter().filter(|c| c.what.starts_with("thread siblings")).count();
    let bad = o.verdict.checks.iter().filter(|c| c.what.starts_with("thread siblings") && !c.ok()).count();
    let _ = writeln!(s, "  thread siblings: {} of {sib} CPUs as planned", sib - bad);
    s
}
