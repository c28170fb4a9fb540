//! `numaplace apply`: puts a plan into libvirt. Each VM is prepared (read
//! only), logged with its placement before and after, then carried out
//! step by step with undo on failure. Exit 0 when every VM is as planned,
//! 1 when any was refused or rolled back, 2 on bad input.

use super::plan::Accel;
use super::TextOrJson;
use anyhow::{anyhow, bail, Context};
use numaplace_libvirt::apply::{
    carry_out, check_host, prepare, prepare_narrow, ApplyError, ApplyOptions, Outcome, PlannedHost, Prepared, Step,
};
use numaplace_libvirt::{Libvirt, Virsh, DEFAULT_URI};
use numaplace_plan::{CpuMode, Placement};
use numaplace_topo::{CpuSet, Topology};
use numaplace_wire::libvirt::{ApplyDoc, ApplyVmDoc, StepDoc};
use numaplace_wire::plan::{HeldDoc, HostTopologyDoc, PlanDoc};
use numaplace_wire::profile::{Document, HostProfile};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Which VMs: those the plan placed in its run (\"new\": true), or those named
with --vm, and the changes the plan made to VMs already on the host: a
shared VM whose floating CPUs a dedicated VM of the plan takes is narrowed
first (numaplace's own domains by default; another's only when named).
Domains the plan only read from the host and did not change are never
changed. A plan made for another host (its nodes' CPUs, or its machine) is
refused unless --force-host.

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
  (a plan for another host, --accel against the plan's, --vm leaving the
  plan's changes half done)

EXAMPLES:
  numaplace plan --state libvirt --vm name=db2,vcpus=8,memory=16GiB --format json > plan.json
  numaplace apply --plan plan.json --dry-run
  numaplace apply --plan plan.json
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
    /// The host to apply to (default: the live host); the plan must have
    /// been made for it.
    #[arg(long, value_name = "SOURCE")]
    host: Option<String>,
    /// A domain XML to build the (one) new VM on: its disks, NICs and
    /// everything else are kept, the plan's NUMA elements merged in.
    #[arg(long, value_name = "FILE")]
    base: Option<String>,
    /// Guest type of a new domain written from scratch (default: the
    /// plan's `--accel`, else the host profile's, else kvm); contradicting
    /// the plan is refused.
    #[arg(long, value_enum)]
    accel: Option<Accel>,
    /// Apply a plan made for another host (its nodes' CPUs, or its
    /// machine, differ from this one's), said loudly on stderr.
    #[arg(long)]
    force_host: bool,
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

/// A VM to apply and why.
enum Target<'a> {
    /// A VM the plan placed (in its run, or named with --vm).
    Placed(&'a Placement),
    /// A shared VM carried from the plan's `--state` document, whose
    /// floating set the plan may have narrowed.
    Carried(&'a Placement),
    /// A domain of the host the plan narrowed (`held` with `cpus_after`).
    Narrowed { vm: &'a str, was: CpuSet, after: CpuSet },
}

impl Target<'_> {
    fn vm(&self) -> &str {
        match self {
            Target::Placed(p) | Target::Carried(p) => &p.vm,
            Target::Narrowed { vm, .. } => vm,
        }
    }

    /// Why a VM not placed in the plan's run is changed.
    fn reason(&self) -> Option<String> {
        match self {
            Target::Placed(_) => None,
            Target::Carried(p) => Some(format!(
                "carried from the plan's state as a shared VM, floating over CPUs {}: set as the plan has it",
                p.cpuset
            )),
            Target::Narrowed { was, after, .. } => Some(format!(
                "the plan narrows its floating CPUs from {was} to {after}: a dedicated VM of the plan takes {}",
                was.difference(after)
            )),
        }
    }
}

/// Runs `numaplace apply`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("{}: cannot read", args.plan))?;
    let doc = PlanDoc::parse(&text).map_err(|e| anyhow!("{}: {e}", args.plan))?;
    let placements = doc.to_placements().map_err(|e| anyhow!("{}: {e}", args.plan))?;
    let narrowed: Vec<(&HeldDoc, CpuSet, CpuSet)> = doc
        .held
        .iter()
        .filter(|h| !h.cpus_after.is_empty())
        .map(|h| (h, h.cpus.iter().copied().collect(), h.cpus_after.iter().copied().collect()))
        .collect();
    for name in &args.vm {
        if !placements.iter().any(|p| &p.vm == name) && !narrowed.iter().any(|(h, ..)| &h.vm == name) {
            if doc.held.iter().any(|h| &h.vm == name) {
                bail!("--vm {name}: {} only read that domain from the host and changes nothing in it", args.plan);
            }
            bail!("--vm {name}: no VM of that name is placed in {}", args.plan);
        }
    }
    let host = super::topology::load(args.host.as_deref())?;
    let this_host = check_host_of(&args, &doc, &host)?;
    // The plan's own `reserved` over the profile's, the flags over both;
    // a plan forced onto another host says nothing of this one's.
    let profile = args.reserve.profile()?;
    let document = doc.reserved.as_ref().filter(|_| this_host).map(|reserved| Document { name: &args.plan, reserved });
    let reserved = args.reserve.resolve(&host, profile.as_ref(), document)?;
    let accel = accel_of(&args, &doc, profile.as_ref())?;

    // What the plan asks: its new VMs (or those named), and the changes
    // it made to VMs already on the host.
    let named = |vm: &str| args.vm.iter().any(|n| n == vm);
    let mut placed = Vec::new();
    let mut changes = Vec::new();
    for (p, d) in placements.iter().zip(&doc.placements) {
        if if args.vm.is_empty() { d.new } else { named(&p.vm) } {
            placed.push(Target::Placed(p));
        } else if !d.new && p.cpu_mode == CpuMode::Shared {
            changes.push(Target::Carried(p));
        }
    }
    let mut not_ours = Vec::new();
    for (h, was, after) in narrowed {
        let target = Target::Narrowed { vm: &h.vm, was, after };
        if h.managed || named(&h.vm) {
            changes.push(target);
        } else {
            not_ours.push(target);
        }
    }
    if placed.is_empty() && changes.is_empty() {
        bail!("{}: no VM to apply (the plan placed none in its run; name one with --vm)", args.plan);
    }
    let base = match &args.base {
        Some(path) if placed.len() > 1 => {
            bail!(
                "--base {path}: one base domain builds one VM, and {} are to be applied; pick one with --vm",
                placed.len()
            )
        }
        Some(path) => Some(std::fs::read_to_string(path).with_context(|| format!("--base {path}: cannot read"))?),
        None => None,
    };
    let emit = accel.libvirt().for_host(&host);
    let opts = ApplyOptions { topology: &host, emit, base: base.as_deref() };
    let mut lv = Virsh::new(&args.connect);

    // Everything is prepared (libvirt only read) before anything changes.
    let mut ready: Vec<(Target<'_>, Result<Prepared, ApplyError>)> = Vec::new();
    for t in changes {
        let prepared = match &t {
            Target::Carried(p) => match lv.domain(&p.vm) {
                // Planned, never applied: not on this host, nothing to change.
                Ok(None) => continue,
                Ok(Some(_)) => prepare(&lv, p, &ApplyOptions { base: None, ..opts.clone() }),
                Err(e) => Err(e.into()),
            },
            Target::Narrowed { vm, was, after } => match prepare_narrow(&lv, vm, was, after, &host) {
                // Undefined since the plan was made: nothing to narrow.
                Ok(None) => continue,
                Ok(Some(p)) => Ok(p),
                Err(e) => Err(e),
            },
            Target::Placed(_) => continue,
        };
        // A carried VM already as the plan has it is no change.
        if matches!(&prepared, Ok(p) if p.steps.is_empty()) && matches!(t, Target::Carried(_)) {
            continue;
        }
        ready.push((t, prepared));
    }
    // With --vm, a new VM named without the changes the plan made for it
    // would leave the host half done: refused, nothing changed.
    let new_named = placed.iter().any(|t| doc.placements.iter().any(|d| d.vm == t.vm() && d.new));
    if !args.vm.is_empty() && new_named {
        let left: Vec<String> = ready.iter().filter(|(t, _)| !named(t.vm())).map(|(t, _)| t.vm().to_string()).collect();
        if !left.is_empty() {
            bail!(
                "{}: the plan also changes {} ({}); applying only the VMs named would leave it half done: add --vm {} \
                 or leave out --vm",
                args.plan,
                left.join(", "),
                ready.iter().find(|(t, _)| !named(t.vm())).and_then(|(t, _)| t.reason()).unwrap_or_default(),
                left.join(" --vm ")
            );
        }
    }
    for t in &not_ours {
        eprintln!(
            "numaplace: warning: {} is not numaplace's and is left as it is, though {}; `apply --vm {}` narrows it too",
            t.vm(),
            t.reason().unwrap_or_default(),
            t.vm()
        );
    }
    for t in placed {
        let prepared = match &t {
            // A plan that puts a vCPU where this host's reservations say
            // no VM goes is refused before libvirt is asked anything.
            Target::Placed(p) => match reserved.conflict(p) {
                Some(c) => Err(ApplyError::Reserved(c)),
                None => prepare(&lv, p, &opts),
            },
            _ => continue,
        };
        ready.push((t, prepared));
    }

    // The changes to VMs already on the host first: a floating VM leaves
    // the CPUs before a dedicated VM is given them. When one fails, the
    // VMs after it are not applied.
    let mut out = ApplyDoc { connect: lv.describe(), dry_run: args.dry_run, vms: Vec::new() };
    let mut failed: Option<String> = None;
    for (t, prepared) in ready {
        let entry = match (prepared, &failed) {
            (Err(e), _) => refused(&t, e.to_string(), &lv),
            (Ok(_), Some(vm)) => {
                refused(&t, format!("not applied: the plan's change to {vm} failed, and this VM depends on it"), &lv)
            }
            (Ok(prepared), None) => entry_of(&t, &prepared, carry_out(&mut lv, &prepared, args.dry_run)),
        };
        // Only a change to a VM already there blocks the rest: each of the
        // plan's own VMs is applied on its own, as before.
        let change = !matches!(t, Target::Placed(_));
        if change && failed.is_none() && matches!(entry.outcome.as_str(), "refused" | "rolled-back" | "broken") {
            failed = Some(entry.vm.clone());
        }
        if args.format == TextOrJson::Text {
            super::print(&entry_text(&entry, args.dry_run))?;
        }
        out.vms.push(entry);
    }
    if args.format == TextOrJson::Json {
        super::print(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
    }
    let failed = out.vms.iter().any(|v| matches!(v.outcome.as_str(), "refused" | "rolled-back" | "broken"));
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Refuses (exit 2) a plan made for another host, unless --force-host,
/// which says so loudly.
/// Whether the plan was made for this host: `Ok(true)` when it was,
/// `Ok(false)` when it was not and `--force-host` says to go on (said
/// loudly), an error otherwise.
fn check_host_of(args: &Args, doc: &PlanDoc, host: &Topology) -> anyhow::Result<bool> {
    let recorded = doc.host_topology.as_ref();
    let planned = PlannedHost {
        name: doc.host.clone(),
        live: recorded.is_some_and(|t| t.live),
        nodes: recorded.map(HostTopologyDoc::node_cpus),
    };
    let Err(mismatch) = check_host(&planned, host, args.host.is_none()) else { return Ok(true) };
    let what = match &doc.host {
        Some(name) => format!("{} was made for host `{name}`, not this one", args.plan),
        None => format!("{} may have been made for another host", args.plan),
    };
    if !args.force_host {
        bail!("{what}: {mismatch}; plan again on this host (or add --force-host to apply it anyway)");
    }
    eprintln!("numaplace: WARNING: --force-host: {what}: {mismatch}; applying it anyway, as asked");
    if doc.reserved.is_some() {
        eprintln!(
            "numaplace: WARNING: --force-host: the plan's `reserved` describes that other host; this host's profile and flags decide what it keeps"
        );
    }
    Ok(false)
}

/// The guest type: `--accel`, else the plan's, else the host profile's,
/// else kvm; a flag that contradicts the plan is refused.
fn accel_of(args: &Args, doc: &PlanDoc, profile: Option<&HostProfile>) -> anyhow::Result<Accel> {
    let planned = match &doc.accel {
        Some(name) => Some(
            Accel::from_name(name)
                .ok_or_else(|| anyhow!("{}: accel: expected \"kvm\" or \"tcg\", found {name:?}", args.plan))?,
        ),
        None => None,
    };
    match (args.accel, planned) {
        (Some(asked), Some(planned)) if asked != planned => bail!(
            "--accel {}: {} was planned with --accel {}; leave out --accel to apply it as planned, or plan again \
             with --accel {}",
            asked.name(),
            args.plan,
            planned.name(),
            asked.name()
        ),
        (asked, planned) => Ok(super::profile::accel(asked.or(planned), profile)),
    }
}

/// A VM not applied; `running` as libvirt has it now (a VM refused
/// before libvirt was asked anything, by the reservation check, may well
/// run: it was labelled "not running").
fn refused(t: &Target<'_>, error: String, lv: &dyn Libvirt) -> ApplyVmDoc {
    ApplyVmDoc {
        vm: t.vm().to_string(),
        outcome: "refused".into(),
        error: Some(error),
        changed_by_plan: t.reason(),
        running: lv.domain(t.vm()).ok().flatten().is_some_and(|d| d.running),
        before: None,
        after: None,
        steps: Vec::new(),
        restart_needed: Vec::new(),
    }
}

fn entry_of(t: &Target<'_>, prepared: &Prepared, outcome: Outcome) -> ApplyVmDoc {
    let (code, error) = match &outcome {
        Outcome::Applied => ("applied", None),
        Outcome::Unchanged => ("unchanged", None),
        Outcome::DryRun => ("dry-run", None),
        Outcome::RolledBack { step, error } => {
            ("rolled-back", Some(format!("step {} failed: {error}; the steps before it were undone", step + 1)))
        }
        Outcome::Broken { step, error, undo } => {
            ("broken", Some(format!("step {} failed: {error}; undoing failed too: {undo}", step + 1)))
        }
    };
    ApplyVmDoc {
        vm: prepared.vm.clone(),
        outcome: code.into(),
        error,
        changed_by_plan: t.reason(),
        running: prepared.running,
        before: prepared.before.clone(),
        after: Some(prepared.after.clone()),
        steps: prepared.steps.iter().map(step_doc).collect(),
        restart_needed: prepared.restart.iter().map(|r| r.to_string()).collect(),
    }
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

fn entry_text(v: &ApplyVmDoc, dry_run: bool) -> String {
    use std::fmt::Write;
    let mut x = String::new();
    let state = if v.running { "running" } else { "not running" };
    let _ = writeln!(x, "{} ({state}): {}", v.vm, v.outcome);
    if let Some(why) = &v.changed_by_plan {
        let _ = writeln!(x, "  changed by the plan: {why}");
    }
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
        // A dry run shows the very definition apply would write.
        if dry_run && s.action == "define" {
            for line in s.after.lines() {
                let _ = writeln!(x, "    | {line}");
            }
        }
    }
    for r in &v.restart_needed {
        let _ = writeln!(x, "  restart needed: {r}");
    }
    x
}
