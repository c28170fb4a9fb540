//! `numaplace apply`: puts a plan into libvirt. Each VM is prepared (read
//! only), logged with its placement before and after, then carried out
//! step by step with undo on failure. Exit 0 when every VM is as planned,
//! 1 when any was refused or rolled back, 2 on bad input.

use super::plan::Accel;
use super::TextOrJson;
use anyhow::{anyhow, bail, Context};
use numaplace_libvirt::apply::{carry_out, prepare, ApplyOptions, Outcome, Step};
use numaplace_libvirt::{Libvirt, Virsh, DEFAULT_URI};
use numaplace_wire::libvirt::{ApplyDoc, ApplyVmDoc, StepDoc};
use numaplace_wire::plan::PlanDoc;
use numaplace_wire::profile::Document;
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Which VMs: those the plan placed in its run (\"new\": true), or those named
with --vm. Domains the plan only read from the host are never changed.

What changes:
  a new VM        defined from the domain XML `plan --format libvirt` writes,
                  or from --base FILE (your disks and NICs) with only the
                  NUMA elements merged in, every other byte kept
  an existing VM  its persistent definition gets the plan's NUMA elements
  a running VM    also re-pinned now (vcpupin/emulatorpin --live); guest
                  cells, CPU topology, huge pages and strict memory nodes
                  wait for the next start and are reported as such
Each VM ends as it was or as planned: a failed step undoes the ones before.

EXIT STATUS:
  0 every VM as planned; 1 some VM refused or rolled back; 2 bad input

EXAMPLES:
  numaplace plan --state libvirt --vm name=db2,vcpus=8,memory=16GiB --format json > plan.json
  numaplace apply --plan plan.json --dry-run
  numaplace apply --plan plan.json --vm db2 --base db2-disks.xml
  numaplace apply --plan plan.json --connect qemu+ssh://host2/system --format json
  numaplace apply --plan plan.json --host-config /etc/numaplace/host.toml --dry-run";

/// Apply a plan to libvirt: define new domains, update existing ones and
/// re-pin running ones, logging every change with before and after.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The plan document (`plan --format json`).
    #[arg(long, value_name = "FILE")]
    plan: String,
    /// Only this VM of the plan (repeatable).
    #[arg(long, value_name = "NAME")]
    vm: Vec<String>,
    /// libvirt URI.
    #[arg(long, value_name = "URI", default_value = DEFAULT_URI)]
    connect: String,
    /// The host the plan was made for (default: the live host).
    #[arg(long, value_name = "SOURCE")]
    host: Option<String>,
    /// A domain XML to build the (one) new VM on: its disks, NICs and
    /// everything else are kept, the plan's NUMA elements merged in.
    #[arg(long, value_name = "FILE")]
    base: Option<String>,
    /// Guest type of a new domain written from scratch (default: the
    /// host profile's accel, else kvm).
    #[arg(long, value_enum)]
    accel: Option<Accel>,
    /// Show what would change, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    format: TextOrJson,
    /// The host profile and the reservation flags: a VM the plan puts on
    /// a CPU they keep for the host is refused.
    #[command(flatten)]
    reserve: super::profile::HostArgs,
}

/// Runs `numaplace apply`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("{}: cannot read", args.plan))?;
    let doc = PlanDoc::parse(&text).map_err(|e| anyhow!("{}: {e}", args.plan))?;
    let placements = doc.to_placements().map_err(|e| anyhow!("{}: {e}", args.plan))?;
    for name in &args.vm {
        if !placements.iter().any(|p| &p.vm == name) {
            bail!("--vm {name}: no VM of that name is placed in {}", args.plan);
        }
    }
    let chosen: Vec<_> = placements
        .iter()
        .zip(&doc.placements)
        .filter(|(p, d)| if args.vm.is_empty() { d.new } else { args.vm.contains(&p.vm) })
        .map(|(p, _)| p)
        .collect();
    if chosen.is_empty() {
        bail!("{}: no VM to apply (the plan placed none in its run; name one with --vm)", args.plan);
    }
    let base = match &args.base {
        Some(path) if chosen.len() > 1 => {
            bail!(
                "--base {path}: one base domain builds one VM, and {} are to be applied; pick one with --vm",
                chosen.len()
            )
        }
        Some(path) => Some(std::fs::read_to_string(path).with_context(|| format!("--base {path}: cannot read"))?),
        None => None,
    };
    let host = super::topology::load(args.host.as_deref())?;
    if let (Some(planned), Some(here)) = (&doc.host, host.name()) {
        if planned != here {
            eprintln!("numaplace: warning: {} was planned for host `{planned}`, not `{here}`", args.plan);
        }
    }
    // The plan's own `reserved` over the profile's, the flags over both.
    let profile = args.reserve.profile()?;
    let document = doc.reserved.as_ref().map(|reserved| Document { name: &args.plan, reserved });
    let reserved = args.reserve.resolve(&host, profile.as_ref(), document)?;
    let accel = super::profile::accel(args.accel, profile.as_ref());
    let emit = accel.libvirt().for_host(&host);
    let opts = ApplyOptions { topology: &host, emit, base: base.as_deref() };
    let mut lv = Virsh::new(&args.connect);
    let mut out = ApplyDoc { connect: lv.describe(), dry_run: args.dry_run, vms: Vec::new() };
    for p in chosen {
        let checked = match reserved.conflict(p) {
            Some(c) => Err(format!("the plan {c}; plan it again with this host's reservations")),
            None => prepare(&lv, p, &opts).map_err(|e| e.to_string()),
        };
        let entry = match checked {
            Err(e) => ApplyVmDoc {
                vm: p.vm.clone(),
                outcome: "refused".into(),
                error: Some(e),
                running: false,
                before: None,
                after: None,
                steps: Vec::new(),
                restart_needed: Vec::new(),
            },
            Ok(prepared) => {
                let outcome = carry_out(&mut lv, &prepared, args.dry_run);
                let (code, error) = match &outcome {
                    Outcome::Applied => ("applied", None),
                    Outcome::Unchanged => ("unchanged", None),
                    Outcome::DryRun => ("dry-run", None),
                    Outcome::RolledBack { step, error } => (
                        "rolled-back",
                        Some(format!("step {} failed: {error}; the steps before it were undone", step + 1)),
                    ),
                    Outcome::Broken { step, error, undo } => {
                        ("broken", Some(format!("step {} failed: {error}; undoing failed too: {undo}", step + 1)))
                    }
                };
                ApplyVmDoc {
                    vm: prepared.vm.clone(),
                    outcome: code.into(),
                    error,
                    running: prepared.running,
                    before: prepared.before.clone(),
                    after: Some(prepared.after.clone()),
                    steps: prepared.steps.iter().map(step_doc).collect(),
                    restart_needed: prepared.restart.iter().map(|r| r.to_string()).collect(),
                }
            }
        };
        if args.format == TextOrJson::Text {
            super::print(&entry_text(&entry))?;
        }
        out.vms.push(entry);
    }
    if args.format == TextOrJson::Json {
        super::print(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
    }
    let failed = out.vms.iter().any(|v| matches!(v.outcome.as_str(), "refused" | "rolled-back" | "broken"));
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn step_doc(s: &Step) -> StepDoc {
    let (vcpu, before, after) = match s {
        Step::Define { before, after } => (None, before.clone(), after.clone()),
        Step::PinVcpu { vcpu, before, after } => (Some(*vcpu), Some(before.to_list()), after.to_list()),
        Step::PinEmulator { before, after } | Step::Numatune { before, after } => {
            (None, Some(before.to_list()), after.to_list())
        }
    };
    StepDoc { action: s.action().into(), text: s.to_string(), vcpu, before, after }
}

fn entry_text(v: &ApplyVmDoc) -> String {
    use std::fmt::Write;
    let mut x = String::new();
    let state = if v.running { "running" } else { "not running" };
    let _ = writeln!(x, "{} ({state}): {}", v.vm, v.outcome);
    if let Some(e) = &v.error {
        let _ = writeln!(x, "  error: {e}");
    }
    if let Some(b) = &v.before {
        let _ = writeln!(x, "  before: {b}");
    }
    if let Some(a) = &v.after {
        let _ = writeln!(x, "  after:  {a}");
    }
    for s in &v.steps {
        let _ = writeln!(x, "  - {}", s.text);
    }
    for r in &v.restart_needed {
        let _ = writeln!(x, "  restart needed: {r}");
    }
    x
}
