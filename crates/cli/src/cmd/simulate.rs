//! `numaplace simulate`: replay a VM trace over a fleet of hosts once per
//! placement policy and compare what each did (a text table, JSON, and an
//! optional report of SVG charts). Exit code 0 on success, 2 on bad input.

use anyhow::Context;
use clap::ValueEnum;
use numaplace_sim::{report, Config, HostOrder, Progress, SimPolicy};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
TRACES (--trace):
  v1.test.txt        an Azure V1 flavor trace; its v1.test.c<T>.txt durations,
                     flav_map.txt and v1.interval_map.txt must sit beside it
  vms.csv            a header names the columns, in any order: vcpus (or cores,
                     cpus), memory_gib (memory, mem: GiB), arrival_s (start,
                     submit), lifetime_s (duration); others are ignored. No
                     header: vmid,vcpus,memory_gib,arrival_s,lifetime_s.
                     Seconds whole or decimal; lifetime empty: runs past the end
  synthetic:N        N generated VMs (Poisson arrivals, from --seed)

FLEET (--fleet, docs/formats/fleet.md):
  {\"hosts\": [{\"topology\": \"epyc.xml\", \"count\": 150, \"cpu_overcommit\": 1.0}]}

POLICIES: compact, smt-aware, balanced, spread, pack (numaplace's planner,
  vCPUs pinned), no-numa (vCPUs float over the host, memory by first touch),
  no-vnuma (balanced pinning, the guest shown one NUMA node)

HOST ORDERS (--hosts): cost (the default, `serve`'s), cores-first,
  memory-first, pack: the fleet's rankings; each VM goes where the selection
  loop of `numaplace serve` puts it (every host that passes its filters is
  tried, in that order)

EXAMPLES:
  numaplace simulate --fleet fixtures/traces/fleet-small.json \\
      --trace fixtures/traces/azure-v1/v1.test.txt --limit 20000
  numaplace simulate --fleet fleet.json --trace v1.test.txt \\
      --policies balanced,compact,no-numa --report out/ --format json > out/results.json
  numaplace simulate --fleet fleet.json --trace vms.csv --policies balanced \\
      --hosts memory-first,cores-first,cost --sensitivity";

/// Output format.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimFormat {
    /// A table for people.
    Text,
    /// The results document (docs/simulate.md).
    Json,
}

/// Replay a VM trace over a fleet of hosts and compare placement policies.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The fleet description (JSON).
    #[arg(long, value_name = "FILE")]
    fleet: PathBuf,
    /// The VM trace.
    #[arg(long, value_name = "FILE")]
    trace: String,
    /// Policies to compare, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "compact,smt-aware,balanced,spread,no-numa")]
    policies: String,
    /// Write SVG charts and an index.html into this directory.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = SimFormat::Text)]
    format: SimFormat,
    /// Seed for lifetimes within the trace's bins (and synthetic traces).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Replay only the first N VMs.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// How hosts are ranked for each VM, comma-separated to compare: cost
    /// (`serve`'s: the planner's cost among the first hosts, by free cores,
    /// that take the VM), cores-first (the first host by most free cores,
    /// then memory, that takes it), memory-first (most free memory first),
    /// pack (best fit). Each policy is replayed with each order.
    #[arg(long, value_name = "LIST", default_value = "cost")]
    hosts: String,
    /// Also follow predicted performance with each model parameter at both
    /// ends of its measured range, and report whether the ranking holds.
    #[arg(long)]
    sensitivity: bool,
    /// Accepted for old scripts and ignored: the replay runs the fleet
    /// engine of `numaplace serve`, which offers a VM to every host that
    /// passes its filters, in rank order, until one takes it.
    #[arg(long, hide = true, value_parser = clap::value_parser!(u32).range(1..=64))]
    tries: Option<u32>,
    /// Policies replayed at once (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    jobs: Option<u32>,
    /// Seconds between samples in the charts.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(60..))]
    sample_every: u64,
}

/// Runs `numaplace simulate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let policies = SimPolicy::parse_list(&args.policies)?;
    anyhow::ensure!(!policies.is_empty(), "--policies names no policy");
    let fleet = numaplace_sim::load::load_fleet(&args.fleet, |source| {
        numaplace_read::read_source(source).map_err(|e| format!("{e:#}"))
    })?;
    let mut trace = numaplace_sim::load::load_trace(&args.trace, args.seed)?;
    if let Some(n) = args.limit {
        trace.truncate(n);
    }
    let mut orders: Vec<HostOrder> = Vec::new();
    for name in args.hosts.split(',').filter(|n| !n.trim().is_empty()) {
        let order = HostOrder::parse(name).ok_or_else(|| {
            anyhow::anyhow!(
                "--hosts: unknown host order {:?}; known: cores-first, memory-first, cost, pack",
                name.trim()
            )
        })?;
        if !orders.contains(&order) {
            orders.push(order);
        }
    }
    anyhow::ensure!(!orders.is_empty(), "--hosts names no host order");
    if args.tries.is_some() {
        eprintln!(
            "numaplace: warning: --tries no longer has an effect: every host that passes the fleet's filters is tried, as `numaplace serve` does"
        );
    }
    let cfg = Config {
        host_order: orders[0],
        sample_every_s: args.sample_every,
        sensitivity: args.sensitivity,
        ..Config::default()
    };
    let setups: Vec<(SimPolicy, HostOrder)> =
        policies.iter().flat_map(|&p| orders.iter().map(move |&o| (p, o))).collect();
    let show = std::io::stderr().is_terminal() && trace.vms.len() >= 10_000;
    let mut done = vec![0usize; setups.len()];
    let mut last_shown = usize::MAX;
    let mut progress = |p: Progress| {
        if !show {
            return;
        }
        if let Some(d) = done.get_mut(p.policy) {
            *d = p.vms_done;
        }
        let all = (p.vms_total * p.policies).max(1);
        let sum: usize = done.iter().sum();
        let width = sum * 40 / all;
        if width == last_shown && sum < all {
            return;
        }
        last_shown = width;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\rreplaying [{}{}] {:>3}% of {} VMs x {} policies",
            "#".repeat(width),
            " ".repeat(40 - width),
            sum * 100 / all,
            p.vms_total,
            p.policies
        );
        if sum >= all {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    };
    let step = cfg.sample_step(numaplace_sim::engine::replay_span(&trace));
    if step > cfg.sample_every_s {
        eprintln!(
            "numaplace: note: sampling every {step} s instead of --sample-every {}: the trace spans {} s and a replay \
             takes at most {} samples",
            cfg.sample_every_s,
            numaplace_sim::engine::replay_span(&trace),
            numaplace_sim::engine::MAX_SAMPLES
        );
    }
    let threads = args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |j| j as usize);
    let results = numaplace_sim::run_setups(&fleet, &trace, &setups, &cfg, threads, &mut progress);
    let doc = report::document(&trace, &fleet, args.seed, &cfg.model, &results);
    if let Some(dir) = &args.report {
        write_report(dir, &doc)?;
    }
    let out = match args.format {
        // The text view carries the warnings after its table.
        SimFormat::Text => report::text(&doc),
        SimFormat::Json => {
            // Standard output stays one JSON document; people still hear.
            for w in report::warnings(&doc) {
                eprintln!("numaplace: warning: {w}");
            }
            let mut s = serde_json::to_string_pretty(&doc)?;
            s.push('\n');
            s
        }
    };
    super::print(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn write_report(dir: &Path, doc: &numaplace_wire::sim::SimulationDoc) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let charts = report::charts(doc);
    for (file, _, svg) in &charts {
        let path = dir.join(file);
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    let index = dir.join("index.html");
    std::fs::write(&index, report::index_html(doc, &charts)).with_context(|| format!("writing {}", index.display()))?;
    Ok(())
}
