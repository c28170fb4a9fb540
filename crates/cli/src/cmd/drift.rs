//! `numaplace drift`: what runs against what was planned. Exit 0 when
//! every VM runs as planned or is stopped, 1 when any differs (a stopped
//! one too with `--stopped-is-drift`), 2 on bad input.

use super::TextOrJson;
use anyhow::{anyhow, bail, Context};
use numaplace_libvirt::domain::{domain_xml, LibvirtOptions};
use numaplace_libvirt::drift::{compare, observe, render_text, Report, Verdict};
use numaplace_libvirt::{Libvirt, Virsh, DEFAULT_URI};
use numaplace_observe::FsSource;
use numaplace_wire::libvirt::{DifferenceDoc, DriftDoc, DriftVcpuDoc, DriftVmDoc};
use numaplace_wire::plan::PlanDoc;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
The plan: each VM of --plan FILE (its CPUs and memory nodes as the domain XML
numaplace writes for it says), or, without --plan, each domain's own
persistent definition (catching changes made live with virsh). What runs:
libvirt's live pins (virsh vcpuinfo, emulatorpin) and the QEMU process's
memory per node (/proc/PID/numa_maps). Memory counts as drift when more than
16 MiB, or 1/20 of the process, sits outside the nodes the plan binds.

A stopped domain is reported as stopped, not drift: nothing of it runs to
differ, and stopping a VM is an operator's choice. --stopped-is-drift counts
it (a check that every planned VM runs). A domain undefined while drift reads
the host is left out with a warning.

EXIT STATUS (for cron and Nagios-style checks: 0 OK, 1 WARNING, 2 UNKNOWN):
  0 every VM runs as planned or is stopped; 1 some VM differs from the plan
  (or a planned VM is not defined, or, with --stopped-is-drift, is stopped);
  2 bad input, or libvirt could not be read

EXAMPLES:
  numaplace drift                          every domain against its definition
  numaplace drift --stopped-is-drift       ... and every domain must run
  numaplace drift --plan plan.json         the plan's VMs against what runs
  numaplace drift --plan plan.json --vm db1 --format json";

/// Compare what runs with the plan: vCPU and emulator pins, memory per
/// node.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The plan document (default: each domain's persistent definition).
    #[arg(long, value_name = "FILE")]
    plan: Option<String>,
    /// Only this VM (repeatable).
    #[arg(long, value_name = "NAME")]
    vm: Vec<String>,
    /// libvirt URI.
    #[arg(long, value_name = "URI", default_value = DEFAULT_URI)]
    connect: String,
    /// The host (default: the live host).
    #[arg(long, value_name = "SOURCE")]
    host: Option<String>,
    /// Count a defined domain that does not run as drift (exit 1).
    #[arg(long)]
    stopped_is_drift: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    format: TextOrJson,
}

/// Runs `numaplace drift`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let host = super::topology::load(args.host.as_deref())?;
    let lv = Virsh::new(&args.connect);
    // What each VM should be: (name, its definition text).
    let mut planned: Vec<(String, String)> = Vec::new();
    match &args.plan {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
            let doc = PlanDoc::parse(&text).map_err(|e| anyhow!("{path}: {e}"))?;
            let opts = LibvirtOptions::default().for_host(&host);
            for p in doc.to_placements().map_err(|e| anyhow!("{path}: {e}"))? {
                planned.push((p.vm.clone(), domain_xml(&p, &opts)));
            }
        }
        None => {
            let listing = lv.domains().map_err(|e| anyhow!("{}: {e}", lv.describe()))?;
            let mut vanished = listing.vanished;
            for d in listing.domains {
                match lv.persistent_xml(&d.name) {
                    Ok(xml) => planned.push((d.name, xml)),
                    // Undefined since it was listed: nothing left to drift.
                    Err(e) if e.is_no_domain() || matches!(lv.domain(&d.name), Ok(None)) => vanished.push(d.name),
                    Err(e) => bail!("{e}"),
                }
            }
            for vm in vanished {
                eprintln!("numaplace: warning: {}", numaplace_libvirt::HeldWarning::Vanished { vm });
            }
        }
    }
    for name in &args.vm {
        if !planned.iter().any(|(n, _)| n == name) {
            bail!("--vm {name}: no VM of that name in {}", args.plan.as_deref().unwrap_or("libvirt"));
        }
    }
    let source = FsSource::live();
    let mut reports = Vec::new();
    for (name, xml) in planned.into_iter().filter(|(n, _)| args.vm.is_empty() || args.vm.contains(n)) {
        let definition = match numaplace_libvirt::domain::read(&name, &xml) {
            Ok(d) => d,
            // A host's domain that does not read is left out, named
            // (issue 52); a plan's own domain that does not read is ours.
            Err(error) if args.plan.is_none() => {
                let error = numaplace_libvirt::domain::DomainFileError { source_name: name, error };
                eprintln!("numaplace: warning: {}", numaplace_libvirt::state::Skipped(error));
                continue;
            }
            Err(error) => return Err(numaplace_libvirt::domain::DomainFileError { source_name: name, error }.into()),
        };
        let (expected, _) = numaplace_libvirt::held(&definition, &name, &host);
        let observed = observe(&lv, &source, &name).map_err(|e| anyhow!("{e}"))?;
        if args.plan.is_none() && !observed.defined {
            // Compared with its own definition, a domain undefined since it
            // was read has no plan left to drift from.
            eprintln!("numaplace: warning: {}", numaplace_libvirt::HeldWarning::Vanished { vm: name });
            continue;
        }
        let differences = compare(&expected, &observed);
        reports.push(Report { vm: name, planned: expected, observed, differences });
    }
    match args.format {
        TextOrJson::Text => super::print(&render_text(&reports, args.stopped_is_drift))?,
        TextOrJson::Json => {
            let vms = reports.iter().map(|r| doc(r, args.stopped_is_drift)).collect();
            let doc = DriftDoc { connect: lv.describe(), plan: args.plan.clone(), vms };
            super::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
        }
    }
    let drifted = reports.iter().any(|r| r.verdict(args.stopped_is_drift) == Verdict::Drift);
    Ok(if drifted { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn doc(r: &Report, stopped_is_drift: bool) -> DriftVmDoc {
    let state = match (r.observed.defined, r.observed.running) {
        (false, _) => "not-defined",
        (true, false) => "shut-off",
        (true, true) => "running",
    };
    DriftVmDoc {
        vm: r.vm.clone(),
        state: state.into(),
        verdict: r.verdict(stopped_is_drift).code().into(),
        planned: r.planned.vcpu_cpus.iter().map(|s| s.iter().collect()).collect(),
        vcpus: r
            .observed
            .vcpus
            .iter()
            .map(|v| DriftVcpuDoc { vcpu: v.vcpu, cpu: v.cpu, affinity: v.affinity.iter().collect() })
            .collect(),
        memory: r.observed.memory.as_ref().map(|m| m.iter().map(|(&n, &b)| (n, b)).collect()).unwrap_or_default(),
        differences: r
            .differences
            .iter()
            .map(|d| DifferenceDoc { code: d.code().into(), text: d.to_string() })
            .collect(),
    }
}
