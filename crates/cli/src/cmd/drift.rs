//! `numaplace drift`: what runs against what was planned. Exit 0 when
//! every VM runs as planned or is stopped, 1 when any differs (a stopped
//! one too with `--stopped-is-drift`), 2 on bad input.

use super::TextOrJson;
use anyhow::{anyhow, bail, Context};
use numaplace_libvirt::check::{iothreads_of, Wanted};
use numaplace_libvirt::domain::{domain_xml, LibvirtOptions};
use numaplace_libvirt::drift::{compare, observe, on_dedicated, render_text, Difference, Report, Verdict};
use numaplace_libvirt::{HeldWarning, Libvirt, Virsh, DEFAULT_URI};
use numaplace_observe::FsSource;
use numaplace_topo::CpuSet;
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

With --plan, a plan naming CPUs or nodes this host lacks is drift (nothing
can run as it says), and so is every running floating domain (hand-made
too) whose vCPUs, emulator or I/O threads may run on a CPU the plan
dedicates: apply narrows them all off those CPUs. The domains the plan
records it narrows are shown either way.

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
    // With a plan: the CPUs it dedicates, and the domains it narrowed.
    let mut dedicated = CpuSet::new();
    let mut narrowed: Vec<String> = Vec::new();
    match &args.plan {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
            let doc = PlanDoc::parse(&text).map_err(|e| anyhow!("{path}: {e}"))?;
            let opts = LibvirtOptions::default().for_host(&host);
            for p in doc.to_placements().map_err(|e| anyhow!("{path}: {e}"))? {
                dedicated = dedicated.union(&Wanted::of(&p).cpus.dedicated());
                planned.push((p.vm.clone(), domain_xml(&p, &opts)));
            }
            narrowed = doc.held.iter().filter(|h| !h.cpus_after.is_empty()).map(|h| h.vm.clone()).collect();
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
        // With a plan, a floating domain of the host it may have narrowed
        // is checked too.
        let on_host = || args.plan.is_some() && matches!(lv.domain(name), Ok(Some(_)));
        if !planned.iter().any(|(n, _)| n == name) && !on_host() {
            bail!("--vm {name}: no VM of that name in {}", args.plan.as_deref().unwrap_or("libvirt"));
        }
    }
    let source = FsSource::live();
    let mut reports = Vec::new();
    for (name, xml) in planned.iter().filter(|&(n, _)| args.vm.is_empty() || args.vm.contains(n)).cloned() {
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
        let (expected, warnings) = numaplace_libvirt::held(&definition, &name, &host);
        let observed = observe(&lv, &source, &name).map_err(|e| anyhow!("{e}"))?;
        if args.plan.is_none() && !observed.defined {
            // Compared with its own definition, a domain undefined since it
            // was read has no plan left to drift from.
            eprintln!("numaplace: warning: {}", numaplace_libvirt::HeldWarning::Vanished { vm: name });
            continue;
        }
        // Pins this host lacks are never read as "anywhere": nothing runs
        // as such a plan says.
        let mut differences: Vec<Difference> = warnings
            .into_iter()
            .filter_map(|w| match w {
                HeldWarning::Unknown { what, ids, .. } => Some(Difference::NotOnHost { what, ids }),
                _ => None,
            })
            .collect();
        differences.extend(compare(&expected, &observed));
        // A floating VM of the plan (one it carried and narrowed): its
        // emulator and I/O threads must keep off the dedicated CPUs too
        // (its vCPUs are compared with their planned sets above).
        if args.plan.is_some() && observed.running && !expected.floating_cpus().is_empty() {
            let iothreads = if iothreads_of(&xml).is_empty() {
                Vec::new()
            } else {
                lv.iothread_affinity(&name).unwrap_or_default()
            };
            let threads = on_dedicated(&observed, &iothreads, expected.pinned, &dedicated);
            differences.extend(threads.into_iter().filter(|d| match d {
                Difference::OnDedicated { thread, .. } => !thread.starts_with("vCPU"),
                _ => true,
            }));
        }
        reports.push(Report { vm: name, planned: expected, observed, differences });
    }
    if args.plan.is_some() {
        reports.extend(floating_reports(&args, &lv, &source, &host, &planned, &dedicated, &narrowed)?);
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

/// The floating domains a plan's apply narrows, against the CPUs it
/// dedicates: each running floating domain (not one of the plan's) whose
/// vCPUs, emulator or I/O threads may run on one of them is drift, and
/// the domains the plan recorded it narrows are reported either way.
fn floating_reports(
    args: &Args,
    lv: &Virsh,
    source: &FsSource,
    host: &numaplace_topo::Topology,
    planned: &[(String, String)],
    dedicated: &CpuSet,
    narrowed: &[String],
) -> anyhow::Result<Vec<Report>> {
    let listing = lv.domains().map_err(|e| anyhow!("{}: {e}", lv.describe()))?;
    let mut out = Vec::new();
    for d in listing.domains {
        if planned.iter().any(|(n, _)| *n == d.name) || (!args.vm.is_empty() && !args.vm.contains(&d.name)) {
            continue;
        }
        let Ok(definition) = numaplace_libvirt::domain::read(&d.file, &d.xml) else { continue };
        let (held, _) = numaplace_libvirt::held(&definition, &d.name, host);
        let named = narrowed.contains(&d.name);
        // A narrowed domain left one vCPU on one CPU reads as pinned 1:1
        // (libvirt writes the live pin into its live definition): named
        // by the plan, it is checked all the same.
        if !named && (held.floating_cpus().is_empty() || !d.running) {
            continue;
        }
        let observed = observe(lv, source, &d.name).map_err(|e| anyhow!("{e}"))?;
        let iothreads = if observed.running && !iothreads_of(&d.xml).is_empty() {
            lv.iothread_affinity(&d.name).unwrap_or_default()
        } else {
            Vec::new()
        };
        let differences = if observed.running {
            on_dedicated(&observed, &iothreads, held.pinned, dedicated)
        } else {
            compare(&held, &observed)
        };
        if named || !differences.is_empty() {
            // Shown as planned: its persistent definition (what apply
            // narrowed it to), else what runs.
            let planned = lv
                .persistent_xml(&d.name)
                .ok()
                .and_then(|x| numaplace_libvirt::domain::read(&d.file, &x).ok())
                .map_or(held, |def| numaplace_libvirt::held(&def, &d.name, host).0);
            out.push(Report { vm: d.name, planned, observed, differences });
        }
    }
    Ok(out)
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
