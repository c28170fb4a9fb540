//! `numaplace apply`: puts a plan into libvirt. Each VM is prepared (read
//! only), logged with its placement before and after, then carried out
//! step by step with undo on failure. Exit 0 when every VM is as planned,
//! 1 when any was refused or rolled back, 2 on bad input.

use super::TextOrJson;
use anyhow::{anyhow, bail, Context};
use numaplace_libvirt::apply::{
    carry_out, check_host, prepare, prepare_narrowing, undo, ApplyError, ApplyOptions, Outcome, PlannedHost, Prepared,
    Step,
};
use numaplace_libvirt::check::{
    decide, iothreads_of, recheck, taken, Assumed, Holder, HostFacts, Refusal, Wanted, Write,
};
use numaplace_libvirt::{Libvirt, Virsh, DEFAULT_URI};
use numaplace_plan::{CpuMode, Placement};
use numaplace_topo::Accel;
use numaplace_topo::{CpuSet, Topology};
use numaplace_wire::libvirt::{ApplyDoc, ApplyVmDoc, RefusalDoc, StepDoc};
use numaplace_wire::plan::{HeldDoc, HostTopologyDoc, PlanDoc};
use numaplace_wire::profile::{Document, HostProfile};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
Which VMs: those the plan placed in its run (\"new\": true), or those named
with --vm, and the shared VMs a plan made from a plan document carried.

Checked against the host as it is now: every domain libvirt has is read
first, and the plan is refused (exit 1, nothing written, the holder named)
when a CPU it dedicates, its memory or a device is held by another domain
now, when a domain it planned around changed since, when it pins a CPU,
node or device this host lacks (whatever --force-host says: --force-host is
for twins, and nothing is ever widened to other CPUs), or when a vCPU would
sit on a reserved CPU. Every domain is read again under a lock just before
the first write; one changed since voids the run (two applies at once
take turns, and the second sees the first's VMs).

What changes:
  floating VMs    every floating domain (hand-made too) whose vCPUs,
                  emulator or I/O threads may run on a CPU dedicated after
                  the plan, or reserved, is narrowed off it, first:
                  its definition (an <emulatorpin> written where there was
                  none) and live (vcpupin/emulatorpin/iothreadpin --live)
  a new VM        defined from the domain XML `plan --format libvirt` writes,
                  or from --base FILE (your disks and NICs) with only the
                  NUMA elements merged in, every other byte kept
  an existing VM  its persistent definition gets the plan's NUMA elements
  a running VM    also re-pinned now (vcpupin/emulatorpin --live); guest
                  cells, CPU topology, huge pages and strict memory nodes
                  wait for the next start and are reported as such
All or nothing: a failed step undoes the steps before it, and the VMs
written before it.

EXIT STATUS:
  0 every VM as planned; 1 refused against the host as it is now (nothing
  written) or rolled back; 2 bad input (a plan for another host without
  --force-host, --accel against the plan's, a VM name libvirt would not
  accept)

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
    #[arg(long, value_parser = super::profile::accel_values())]
    accel: Option<Accel>,
    /// Apply a plan made for a twin (another machine of the same nodes
    /// and CPUs), said loudly on stderr; pins, nodes or devices this host
    /// lacks are refused all the same.
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
    /// A floating domain of the host narrowed off the CPUs dedicated VMs
    /// hold after the plan, and the reserved ones.
    Narrowed { vm: String, taken: CpuSet },
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
            Target::Narrowed { taken, .. } => Some(format!(
                "it floats over CPUs {taken}, which are dedicated (the plan's or another domain's) or reserved after \
                 the plan: its vCPUs, emulator and I/O threads are narrowed off them"
            )),
        }
    }
}

/// A domain name the plan document gives for a VM apply would write:
/// what libvirt accepts as a name (never a path: no `/`), else the field
/// and what was expected (exit 2).
fn check_names(plan: &str, doc: &PlanDoc) -> anyhow::Result<()> {
    for (i, d) in doc.placements.iter().enumerate() {
        let name = d.vm.as_str();
        let bad = name.trim().is_empty()
            || name.trim() != name
            || name.contains('/')
            || name.chars().any(char::is_control)
            || name == "."
            || name == ".."
            || name.len() > 200;
        if bad {
            bail!(
                "{plan}: placements[{i}].vm: {name:?} is not a domain name libvirt accepts: expected 1 to 200 bytes, \
                 no `/`, no control characters, no leading or trailing blanks"
            );
        }
    }
    Ok(())
}

/// Every domain libvirt has now, as the check counts it. A domain
/// numaplace cannot read is said on stderr and left out (what it holds
/// is unknown; lint names it).
fn read_holders(lv: &dyn Libvirt, host: &Topology) -> anyhow::Result<Vec<Holder>> {
    let listing = lv.domains().map_err(|e| anyhow!("{}: cannot read the host's domains: {e}", lv.describe()))?;
    let mut out = Vec::new();
    for d in &listing.domains {
        match numaplace_libvirt::domain::read(&d.file, &d.xml) {
            Ok(definition) => {
                let (held, _) = numaplace_libvirt::held(&definition, &d.file, host);
                out.push(Holder::of(&held, d.running, iothreads_of(&d.xml)));
            }
            Err(e) => eprintln!("numaplace: warning: {}: {e}; what it holds is not known to apply", d.file),
        }
    }
    Ok(out)
}

/// Runs `numaplace apply`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.plan).with_context(|| format!("{}: cannot read", args.plan))?;
    let doc = PlanDoc::parse(&text).map_err(|e| anyhow!("{}: {e}", args.plan))?;
    check_names(&args.plan, &doc)?;
    let placements = doc.to_placements().map_err(|e| anyhow!("{}: {e}", args.plan))?;
    check_named(&args, &doc, &placements)?;
    let host = super::topology::load(args.host.as_deref())?;
    let this_host = check_host_of(&args, &doc, &host)?;
    // The plan's own `reserved` over the profile's, the flags over both;
    // a plan forced onto another host says nothing of this one's.
    let profile = args.reserve.profile()?;
    let host = args.reserve.declared(host, profile.as_ref())?;
    let document = doc.reserved.as_ref().filter(|_| this_host).map(|reserved| Document { name: &args.plan, reserved });
    let reserved = args.reserve.resolve(&host, profile.as_ref(), document)?;
    let accel = accel_of(&args, &doc, profile.as_ref())?;

    let (placed, mut carried) = asked(&args, &doc, &placements)?;
    let base = read_base(&args, placed.len())?;
    let emit = super::profile::libvirt_options(accel).for_host(&host);
    let opts = ApplyOptions { topology: &host, emit, base: base.as_deref() };
    let mut lv = Virsh::new(&args.connect);

    let mut out = ApplyDoc { connect: lv.describe(), dry_run: args.dry_run, vms: Vec::new(), refusals: Vec::new() };
    // A plan that puts a vCPU where this host's reservations say no VM
    // goes is refused before libvirt is asked anything.
    let reserved_refusals = reserved_refusals(&placed, &reserved);
    if !reserved_refusals.is_empty() {
        return refuse(&args, &lv, out, &placed, reserved_refusals);
    }

    // The host as it is now, and the check of the plan against it: the
    // writes to make, or every reason to make none.
    let holders = read_holders(&lv, &host)?;
    let defined = |vm: &str| holders.iter().any(|h| h.vm == vm);
    // A carried VM never applied is not on this host: nothing to set.
    carried.retain(|p| defined(&p.vm));
    let wanted: Vec<Wanted> = carried.iter().chain(&placed).map(|p| Wanted::of(p)).collect();
    let assumed: Vec<Assumed> = doc.held.iter().map(assumed_of).collect();
    let facts = host_facts(&host, &reserved);
    let all: Vec<&Placement> = carried.iter().chain(&placed).copied().collect();
    let assumed_ref = (!doc.held.is_empty()).then_some(&assumed[..]);
    let writes = match decide(&holders, &wanted, assumed_ref, &facts) {
        Ok(w) => w,
        Err(refusals) => return refuse(&args, &lv, out, &all, refusals.iter().map(refusal_doc).collect()),
    };
    let taken = taken(&holders, &wanted, &facts);

    // Everything is prepared (libvirt only read) before anything changes.
    let mut ready: Vec<(Target<'_>, Prepared)> = Vec::new();
    let mut failed: Vec<RefusalDoc> = Vec::new();
    for w in &writes {
        let (t, prepared) = match w {
            Write::Narrow { vm, taken: here, .. } => {
                let t = Target::Narrowed { vm: vm.clone(), taken: here.clone() };
                match prepare_narrowing(&lv, vm, &taken, &host) {
                    // Undefined since it was read: nothing to narrow.
                    Ok(None) => continue,
                    Ok(Some(p)) => (t, Ok(p)),
                    Err(e) => (t, Err(e)),
                }
            }
            Write::Place { vm } => {
                let Some(p) = all.iter().find(|p| p.vm == *vm) else { continue };
                if carried.iter().any(|c| c.vm == *vm) {
                    (Target::Carried(p), prepare(&lv, p, &ApplyOptions { base: None, ..opts.clone() }))
                } else {
                    (Target::Placed(p), prepare(&lv, p, &opts))
                }
            }
        };
        match prepared {
            // A carried VM already as the plan has it is no change.
            Ok(p) if p.steps.is_empty() && matches!(t, Target::Carried(_)) => {}
            Ok(p) => ready.push((t, p)),
            Err(e) => failed.push(error_doc(&t, &e)),
        }
    }
    if !failed.is_empty() {
        return refuse(&args, &lv, out, &all, failed);
    }

    if !args.dry_run && ready.iter().any(|(_, p)| !p.steps.is_empty()) {
        // The commit: under a lock other numaplace applies on this machine
        // take too, the host is read again. A domain apply writes that
        // changed since the check (another operator's apply, a hand
        // `virsh`) voids it, and so does any change elsewhere that alters
        // the decision (a new holder of the plan's CPUs, a new floating
        // domain over them); a VM merely started elsewhere does not.
        let _lock = ApplyLock::take(&args.connect)?;
        let now = read_holders(&lv, &host)?;
        let written = |h: &&Holder| writes.iter().any(|w| w.vm() == h.vm);
        let (was, is): (Vec<Holder>, Vec<Holder>) =
            (holders.iter().filter(written).cloned().collect(), now.iter().filter(written).cloned().collect());
        if let Some(moved) = recheck(&was, &is) {
            return refuse(&args, &lv, out, &all, vec![refusal_doc(&moved)]);
        }
        match decide(&now, &wanted, assumed_ref, &facts) {
            Err(refusals) => return refuse(&args, &lv, out, &all, refusals.iter().map(refusal_doc).collect()),
            Ok(again) if again != writes => {
                let moved = recheck(&holders, &now).unwrap_or_else(|| {
                    let vm = again.iter().find(|w| !writes.contains(w)).map_or("", |w| w.vm());
                    Refusal::Moved { holder: vm.to_string() }
                });
                return refuse(&args, &lv, out, &all, vec![refusal_doc(&moved)]);
            }
            Ok(_) => {}
        }
        return commit(&args, &mut lv, out, ready);
    }
    for (t, prepared) in &ready {
        let outcome = if args.dry_run { Outcome::DryRun } else { carry_out(&mut lv, prepared, false) };
        out.vms.push(entry_of(t, prepared, outcome));
    }
    finish(&args, out)
}

/// Every `--vm` names a VM the plan placed (or a floating domain it
/// narrows, which is narrowed whether named or not).
fn check_named(args: &Args, doc: &PlanDoc, placements: &[Placement]) -> anyhow::Result<()> {
    for name in &args.vm {
        if !placements.iter().any(|p| &p.vm == name) {
            if doc.held.iter().any(|h| &h.vm == name && !h.cpus_after.is_empty()) {
                // Narrowing is no longer asked for by name: every floating
                // domain over a dedicated CPU is narrowed.
                continue;
            }
            if doc.held.iter().any(|h| &h.vm == name) {
                bail!("--vm {name}: {} only read that domain from the host and changes nothing in it", args.plan);
            }
            bail!("--vm {name}: no VM of that name is placed in {}", args.plan);
        }
    }
    Ok(())
}

/// What the plan asks: its new VMs (or those named), and the shared VMs
/// it carried from its state.
fn asked<'a>(
    args: &Args,
    doc: &PlanDoc,
    placements: &'a [Placement],
) -> anyhow::Result<(Vec<&'a Placement>, Vec<&'a Placement>)> {
    let named = |vm: &str| args.vm.iter().any(|n| n == vm);
    let mut placed = Vec::new();
    let mut carried = Vec::new();
    for (p, d) in placements.iter().zip(&doc.placements) {
        if if args.vm.is_empty() { d.new } else { named(&p.vm) } {
            placed.push(p);
        } else if !d.new && p.cpu_mode == CpuMode::Shared {
            carried.push(p);
        }
    }
    if placed.is_empty() && carried.is_empty() {
        bail!("{}: no VM to apply (the plan placed none in its run; name one with --vm)", args.plan);
    }
    Ok((placed, carried))
}

/// `--base`, read: the domain the one VM applied is built on.
fn read_base(args: &Args, placed: usize) -> anyhow::Result<Option<String>> {
    match &args.base {
        Some(path) if placed > 1 => {
            bail!("--base {path}: one base domain builds one VM, and {placed} are to be applied; pick one with --vm")
        }
        Some(path) => Ok(Some(std::fs::read_to_string(path).with_context(|| format!("--base {path}: cannot read"))?)),
        None => Ok(None),
    }
}

/// The placements that put a vCPU where this host's reservations say no
/// VM goes.
fn reserved_refusals(placed: &[&Placement], reserved: &numaplace_plan::Reservations) -> Vec<RefusalDoc> {
    placed
        .iter()
        .filter_map(|p| {
            let c = reserved.conflict(p)?;
            Some(RefusalDoc {
                code: "reserved".into(),
                vm: Some(p.vm.clone()),
                holder: None,
                text: format!("{}: {}", p.vm, ApplyError::Reserved(c)),
            })
        })
        .collect()
}

/// What the check knows of this host: its CPUs, the reserved ones, each
/// node's memory less its reserve, its devices.
fn host_facts(host: &Topology, reserved: &numaplace_plan::Reservations) -> HostFacts {
    HostFacts {
        cpus: host.online_cpus(),
        reserved: reserved.cpus.clone(),
        memory: host
            .nodes()
            .iter()
            .map(|n| (n.id.0, n.memory_bytes.saturating_sub(reserved.memory_per_node)))
            .collect(),
        devices: host.devices().iter().map(|d| d.address.clone()).collect(),
    }
}

/// Makes the writes in order, all or nothing: when one VM's step fails,
/// its steps before are undone (by `carry_out`) and so is every VM
/// written before it, last first.
fn commit(
    args: &Args,
    lv: &mut Virsh,
    mut out: ApplyDoc,
    ready: Vec<(Target<'_>, Prepared)>,
) -> anyhow::Result<ExitCode> {
    let mut done: Vec<usize> = Vec::new();
    for (i, (t, prepared)) in ready.iter().enumerate() {
        let outcome = carry_out(lv, prepared, false);
        let ok = outcome.ok();
        out.vms.push(entry_of(t, prepared, outcome));
        if ok {
            done.push(i);
            continue;
        }
        let failed = prepared.vm.clone();
        for &j in done.iter().rev() {
            let (_, p) = &ready[j];
            out.vms[j].outcome = match undo(lv, p) {
                Ok(()) => "rolled-back".into(),
                Err(e) => {
                    out.vms[j].error = Some(format!("undoing it failed: {e}"));
                    "broken".into()
                }
            };
            if out.vms[j].outcome == "rolled-back" {
                out.vms[j].error = Some(format!("undone: the write to {failed} failed, and apply is all or nothing"));
            }
        }
        for (t, _) in &ready[i + 1..] {
            out.vms.push(refused(
                t,
                format!("not applied: the write to {failed} failed, and apply is all or nothing"),
                lv,
            ));
        }
        break;
    }
    finish(args, out)
}

fn finish(args: &Args, out: ApplyDoc) -> anyhow::Result<ExitCode> {
    match args.format {
        TextOrJson::Text => {
            for entry in &out.vms {
                super::print(&entry_text(entry, args.dry_run))?;
            }
        }
        TextOrJson::Json => super::print(&format!("{}\n", serde_json::to_string_pretty(&out)?))?,
    }
    let failed = out.vms.iter().any(|v| matches!(v.outcome.as_str(), "refused" | "rolled-back" | "broken"));
    Ok(if failed || !out.refusals.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Nothing is written: every VM the plan would write is refused, with
/// every reason (exit 1).
fn refuse(
    args: &Args,
    lv: &dyn Libvirt,
    mut out: ApplyDoc,
    all: &[&Placement],
    refusals: Vec<RefusalDoc>,
) -> anyhow::Result<ExitCode> {
    if args.format == TextOrJson::Text {
        let mut x = String::from("refused: nothing was written\n");
        for r in &refusals {
            x.push_str(&format!("  - {}\n", r.text));
        }
        super::print(&x)?;
    }
    for p in all {
        let own: Vec<&str> =
            refusals.iter().filter(|r| r.vm.as_deref().is_none_or(|v| v == p.vm)).map(|r| r.text.as_str()).collect();
        let error = if own.is_empty() {
            "not applied: the plan's other writes were refused, and apply is all or nothing".to_string()
        } else {
            own.join("; ")
        };
        out.vms.push(refused(&Target::Placed(p), error, lv));
    }
    out.refusals = refusals;
    if args.format == TextOrJson::Text {
        for entry in &out.vms {
            super::print(&entry_text(entry, args.dry_run))?;
        }
        return Ok(ExitCode::from(1));
    }
    finish(args, out)
}

fn refusal_doc(r: &Refusal) -> RefusalDoc {
    RefusalDoc {
        code: r.code().into(),
        vm: r.vm().map(str::to_string),
        holder: r.holder().map(str::to_string),
        text: r.to_string(),
    }
}

fn error_doc(t: &Target<'_>, e: &ApplyError) -> RefusalDoc {
    match e {
        ApplyError::Refused(r) => refusal_doc(r),
        _ => RefusalDoc {
            code: "prepare".into(),
            vm: Some(t.vm().to_string()),
            holder: None,
            text: format!("{}: {e}", t.vm()),
        },
    }
}

/// A domain the plan planned around, as its document recorded it.
fn assumed_of(h: &HeldDoc) -> Assumed {
    Assumed {
        vm: h.vm.clone(),
        dedicated: h.cpu_mode == "dedicated",
        cpus: h.cpus.iter().copied().collect(),
        devices: h.devices.clone(),
        after: (!h.cpus_after.is_empty()).then(|| h.cpus_after.iter().copied().collect()),
    }
}

/// An advisory lock on the host's writes, one per libvirt URI, held
/// from the commit's read to its last write: two numaplace applies on
/// this machine take turns, so the second reads what the first wrote.
struct ApplyLock {
    _file: std::fs::File,
}

impl ApplyLock {
    fn take(uri: &str) -> anyhow::Result<ApplyLock> {
        let safe: String = uri.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let path = std::env::temp_dir().join(format!("numaplace-apply-{safe}.lock"));
        // Another user's lock file can still be locked through a
        // read-only handle (flock needs no write access).
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .or_else(|_| std::fs::File::open(&path))
            .with_context(|| format!("{}: cannot open apply's lock", path.display()))?;
        file.lock().with_context(|| format!("{}: cannot take apply's lock", path.display()))?;
        Ok(ApplyLock { _file: file })
    }
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
        Step::PinIothread { before, after, .. } => (None, Some(before.to_list()), after.to_list()),
        Step::PinEmulator { before, after } | Step::Numatune { before, after } => {
            (None, Some(before.to_list()), after.to_list())
        }
    };
    StepDoc { action: s.action().into(), text: s.to_string(), vcpu, before, after }
}

fn entry_text(v: &ApplyVmDoc, dry_run: bool) -> String {
    use std::fmt::Write;
    let mut x = String::new();
    // A refused VM's state is libvirt's too (asked when it was refused).
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
