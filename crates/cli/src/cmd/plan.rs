//! `numaplace plan`: place VMs on a host, in order, on top of the VMs
//! already there, and show the result for people (text), programs (JSON,
//! which is also the next run's `--state`), libvirt (domain XML) or QEMU
//! (arguments). Exit code 0 when every VM was placed, 1 when any was
//! rejected, 2 on bad input.

use anyhow::{anyhow, bail, Context};
use clap::ValueEnum;
use numaplace_emit::{plan_text, qemu};
use numaplace_libvirt::domain as libvirt;
use numaplace_plan::{
    neighbour_notes, CpuMode, Decision, HostState, Placement, Policy, Rejection, Request, Reservations, Session,
    SessionError,
};
use numaplace_topo::{Accel, CpuSet, Topology};
use numaplace_wire::plan::request::{request_from_spec, requests_from_json};
use numaplace_wire::plan::{
    HeldDoc, HostTopologyDoc, NoteDoc, PlacementDoc, PlacementView, PlanDoc, RejectionDoc, ReservedDoc,
};
use numaplace_wire::profile::{Document, HostProfile};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
VM REQUESTS (--vm KEY=VALUE,... or a JSON list in --vms FILE; see docs/formats/request.md):
  name, vcpus, memory           required (memory: 64GiB, 512MiB, or bytes)
  cpu=dedicated|shared          dedicated (default): each vCPU pinned to its own PU
  smt=prefer-cores|pairs|require|isolate|any
  policy=compact|smt-aware|balanced|spread|pack
  hugepages=2MiB|1GiB  overcommit=4  max-nodes=2  max-vcpus=16 (CPU hot-add)  force=true
  device=0000:3b:00.0  required-device=node1  emulator=vm-nodes|isolate|housekeeping|0-1
  cells=4:8GiB,2:4GiB (guest cells, each on its own host node)  guest-nodes=2  cells-share-nodes=true
  cells=0,2,4,6:4GiB,1,3,5,7:4GiB (each cell's own vCPUs, as Nova's hw:numa_cpus.N)
  memory-kind=hbm|cxl|dram,hbm|any  memory-tiers=hidden|visible (hidden: HBM/CXL backs the CPU cells;
                                  visible: memory-only guest cells for it)

EXIT STATUS:
  0 every VM placed; 1 some VM rejected (reasons on stdout, or stderr for
  libvirt/qemu output); 2 bad input (the file and field are named)

EXAMPLES:
  numaplace plan --host '2 sockets x 16 cores x 2 threads, 128GiB per node' \\
      --vm name=db1,vcpus=32,memory=64GiB --vm name=web,vcpus=4,memory=8GiB,cpu=shared
  numaplace plan --host host.xml --vms vms.json --format json > plan.json
  numaplace plan --host host.xml --vms vms.json --format json --compact | my-scheduler
  numaplace plan --host host.xml --state plan.json --vm name=db2,vcpus=8,memory=16GiB --format libvirt
  numaplace plan --host host.xml --state plan.json --remove web --format json > plan2.json
  numaplace plan --host host.xml --vms vms.json --format qemu --accel tcg
  numaplace plan --host host.xml --reserved-cpus 0,32 --reserved-memory 2GiB --vms vms.json
  numaplace plan --host host.xml --host-config host.toml --vms vms.json   (the host profile; default /etc/numaplace/host.toml)
  numaplace plan --host host.xml --reserved-cpus 0,32 --shared-cpus 1-3,33-35 \\
      --vm name=rt,vcpus=4,memory=8GiB,cells=2:4GiB,2:4GiB,emulator=isolate --vm name=web,vcpus=4,memory=4GiB,cpu=shared
  numaplace plan --host knl.xml --vm name=hpc,vcpus=8,memory=2GiB,memory-kind=hbm,memory-tiers=visible
  numaplace plan --host host.json --vm name=nfv,vcpus=8,memory=16GiB,shared-vcpus=0-1
      (a mixed VM: vCPUs 0-1 float in the shared pool of host.json's \"reserved\")";

/// What to print.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanFormat {
    /// The choices, alternatives, rejections and a host map, for people.
    Text,
    /// The plan JSON (docs/formats/plan-json.md); reads back as --state.
    Json,
    /// One libvirt domain XML per placed VM.
    Libvirt,
    /// One QEMU command line per placed VM.
    Qemu,
}

/// The values `--policy` takes, each with its help, read into the
/// planner's [`Policy`] by its own name table (`Policy::name`).
fn policy_values() -> impl clap::builder::TypedValueParser<Value = Policy> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let help = |p: Policy| match p {
        Policy::Compact => "Smallest node set that holds the memory",
        Policy::SmtAware => "As compact, but with enough free physical cores",
        Policy::Balanced => "Fewest, closest, least loaded nodes with memory and cores",
        Policy::Spread => "All nodes, memory interleaved",
        Policy::Pack => "Fewest, closest nodes, the fullest that fits first",
    };
    PossibleValuesParser::new(Policy::ALL.map(|p| PossibleValue::new(p.name()).help(help(p))))
        // The parser accepted only the names the table spells.
        .map(|name| Policy::from_name(&name).unwrap_or_default())
}

/// Plan where VMs go on a host: nodes, vCPU pinning, memory per node and
/// the guest NUMA topology, explained.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
#[command(group(clap::ArgGroup::new("requests").required(true).multiple(true).args(["vm", "vms", "remove"])))]
pub struct Args {
    /// The host: a file or synthetic description as for `topology --from`
    /// (default: the live host).
    #[arg(long, value_name = "SOURCE")]
    host: Option<String>,
    /// VMs already on the host: a plan JSON from an earlier run;
    /// `libvirt` or `libvirt:URI` (every domain defined there, default
    /// URI qemu:///system); or a directory of `virsh dumpxml` files.
    /// Domains numaplace did not plan are planned around, never moved.
    #[arg(long, value_name = "FILE|DIR|libvirt[:URI]")]
    state: Option<String>,
    /// With --state libvirt or DIR: only the running domains (default:
    /// every defined one, since a stopped domain comes back on start).
    #[arg(long, requires = "state")]
    running_only: bool,
    /// A VM to place, as key=value pairs (repeatable; placed in order,
    /// after those of --vms).
    #[arg(long, value_name = "SPEC")]
    vm: Vec<String>,
    /// A JSON list of VMs to place, in order.
    #[arg(long, value_name = "FILE")]
    vms: Option<String>,
    /// A VM of --state that is gone (repeatable): its CPUs and memory are
    /// free for this run's VMs, and the plan written leaves it out.
    #[arg(long, value_name = "NAME", requires = "state")]
    remove: Vec<String>,
    /// Policy for the VMs whose request names none (default: balanced).
    #[arg(long, value_parser = policy_values())]
    policy: Option<Policy>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    format: PlanFormat,
    /// With --format json: the document on one line without spaces, for
    /// programs (the default layout puts each VM's fields on a line each).
    #[arg(long)]
    compact: bool,
    /// Only this VM, for --format libvirt or qemu.
    #[arg(long, value_name = "NAME")]
    vm_name: Option<String>,
    /// Guest type for --format libvirt or qemu (default: the host
    /// profile's accel, else kvm). Given (here or in the profile), the
    /// plan JSON records it and `apply` writes new domains for it.
    #[arg(long, value_parser = super::profile::accel_values())]
    accel: Option<Accel>,
    /// The host profile and the reservation flags.
    #[command(flatten)]
    reserve: super::profile::HostArgs,
}

/// The host's reservations: each flag, else the state document's
/// `reserved`, else the host document's (a topology JSON's `reserved`),
/// else the host profile's (`numaplace_wire::profile::resolve`).
fn reservations(
    args: &Args,
    topology: &Topology,
    profile: Option<&HostProfile>,
    state_doc: Option<&PlanDoc>,
    host_doc: Option<&ReservedDoc>,
) -> anyhow::Result<Reservations> {
    let document = match (state_doc.and_then(|d| d.reserved.as_ref()), host_doc) {
        (Some(reserved), _) => Some(Document { name: args.state.as_deref().unwrap_or("the state"), reserved }),
        (None, Some(reserved)) => Some(Document { name: args.host.as_deref().unwrap_or("the host"), reserved }),
        (None, None) => None,
    };
    args.reserve.resolve(topology, profile, document)
}

/// Reads `--state`: the plan document (kept, to be written back as it
/// was) and its placements.
fn read_state(path: &str) -> anyhow::Result<(PlanDoc, Vec<Placement>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
    let doc = PlanDoc::parse(&text).map_err(|e| anyhow!("{path}: {e}"))?;
    let placements = doc.to_placements().map_err(|e| anyhow!("{path}: {e}"))?;
    Ok((doc, placements))
}

/// Every request, `--vms` first, then each `--vm` in order.
fn read_requests(args: &Args, default_policy: Policy) -> anyhow::Result<Vec<Request>> {
    // The file's list is kept as read, not copied into another.
    let mut out = match &args.vms {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("{path}: cannot read"))?;
            requests_from_json(&text, default_policy).map_err(|e| anyhow!("{path}: {e}"))?
        }
        None => Vec::new(),
    };
    for spec in &args.vm {
        out.push(request_from_spec(spec, default_policy)?);
    }
    Ok(out)
}

/// Runs `numaplace plan`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let profile = args.reserve.profile()?;
    let default_policy = args.policy.unwrap_or(Policy::Balanced);
    if args.vm_name.is_some() && matches!(args.format, PlanFormat::Text | PlanFormat::Json) {
        bail!("--vm-name picks the VM for --format libvirt or qemu; text and json show the whole plan");
    }
    if args.compact && args.format != PlanFormat::Json {
        bail!("--compact lays out the plan JSON; use it with --format json");
    }
    let host = super::topology::load_host(args.host.as_deref())?;
    let topology = args.reserve.declared(host.topology, profile.as_ref())?;
    let lv = match args.state.as_deref() {
        Some(spec) => numaplace_libvirt::open_state(spec).map_err(|e| anyhow!("--state {spec}: {e}"))?,
        None => None,
    };
    if let Some(lv) = lv {
        let reserved = reservations(&args, &topology, profile.as_ref(), None, host.reserved.as_ref())?;
        let accel = decide_accel(args.accel, None, profile.as_ref())?;
        return run_on_libvirt(&args, accel, &topology, reserved, lv.as_ref(), default_policy);
    }
    if args.running_only {
        bail!("--running-only picks domains of --state libvirt or a directory of domain XML; a plan JSON has no running state");
    }
    let (state_doc, state_placements) = match &args.state {
        Some(path) => {
            let (doc, placements) = read_state(path)?;
            if let (Some(planned_for), Some(host)) = (&doc.host, topology.name()) {
                if planned_for != host {
                    eprintln!("numaplace: warning: {path} was planned for host `{planned_for}`, not `{host}`");
                }
            }
            (Some(doc), placements)
        }
        None => (None, Vec::new()),
    };
    let accel = decide_accel(args.accel, args.state.as_deref().zip(state_doc.as_ref()), profile.as_ref())?;
    let requests = read_requests(&args, default_policy)?;
    let state_name = args.state.as_deref().unwrap_or("the state");
    let reserved = reservations(&args, &topology, profile.as_ref(), state_doc.as_ref(), host.reserved.as_ref())?;
    // The reservations were checked against the host as they were
    // resolved: what is left to refuse is a placement of the state.
    let mut session = Session::open(&topology, reserved, &state_placements).map_err(|(i, e)| match i {
        Some(i) => anyhow!("{state_name}: placements[{i}] \"{}\": {e}", state_placements[i].vm),
        None => anyhow!("reserved: {e}"),
    })?;
    let outcome = session.change(&args.remove, &requests).map_err(|e| match e {
        SessionError::UnknownVm(name) => anyhow!("--remove {name}: no VM of that name in {state_name}"),
        SessionError::AlreadyPlaced(name) => anyhow!("VM name `{name}` is already placed in {state_name}"),
        other => anyhow!("{other}"),
    })?;
    let state = session.into_state();
    // The document written keeps the state's entries as they were read,
    // less the removed VMs.
    let state_doc = state_doc.map(|mut doc| {
        doc.placements.retain(|p| !args.remove.contains(&p.vm));
        doc
    });
    let code = output(&args, accel, &topology, state_doc, &requests, outcome.results, &state, Vec::new());
    leave((requests, state));
    code
}

/// The guest type this run writes for, decided once: `--accel`, else the
/// `accel` of the plan read back as the state (the guest type its VMs
/// were planned for, over the profile's, which that plan recorded when it
/// was made), else the host profile's. `None` when none says: kvm is
/// written and nothing recorded, so `apply` decides by its own host's
/// profile.
fn decide_accel(
    flag: Option<Accel>,
    state: Option<(&str, &PlanDoc)>,
    profile: Option<&HostProfile>,
) -> anyhow::Result<Option<Accel>> {
    if flag.is_some() {
        return Ok(flag);
    }
    if let Some((path, name)) = state.and_then(|(path, doc)| Some((path, doc.accel.as_ref()?))) {
        let accel =
            Accel::from_name(name).ok_or_else(|| anyhow!("{path}: accel: expected kvm or tcg, found {name:?}"))?;
        return Ok(Some(accel));
    }
    Ok(profile.and_then(|p| p.accel))
}

/// Leaves `plan` to the process's exit, which takes its memory back at
/// once: printing a plan is the command's last act, and freeing a batch's
/// requests, decisions and placements one by one first cost about 3% of
/// the batch (docs/performance.md). Compilers skip the same work before
/// they exit.
fn leave<T>(plan: T) {
    std::mem::forget(plan);
}

/// `plan --state libvirt[:URI]` or `--state DIR`: the host's domains as
/// state, then as any plan.
fn run_on_libvirt(
    args: &Args,
    accel: Option<Accel>,
    topology: &Topology,
    reserved: Reservations,
    lv: &dyn numaplace_libvirt::Libvirt,
    default_policy: Policy,
) -> anyhow::Result<ExitCode> {
    let requests = read_requests(args, default_policy)?;
    let source = lv.describe();
    let domains = numaplace_libvirt::state::read_state(lv, topology, reserved, args.running_only)
        .map_err(|e| anyhow!("--state {source}: {e}"))?;
    for w in &domains.host.warnings {
        eprintln!("numaplace: warning: {w}");
    }
    for s in &domains.skipped {
        eprintln!("numaplace: warning: {s}");
    }
    let mut state = domains.host.state;
    let outcome = Session::new(topology, &mut state).change(&args.remove, &requests).map_err(|e| match e {
        SessionError::UnknownVm(name) => anyhow!("--remove {name}: no domain of that name in {source}"),
        SessionError::AlreadyPlaced(name) => {
            anyhow!("a domain named `{name}` is already defined in {source}; to plan it again, add --remove {name}")
        }
        other => anyhow!("{other}"),
    })?;
    let held = domains
        .host
        .held
        .iter()
        .filter(|h| !args.remove.contains(&h.placement.vm))
        .map(|h| {
            let running = domains.running.contains(&h.placement.vm);
            let doc = HeldDoc::new(&h.placement, &source, h.managed, running);
            // A floating domain whose CPUs a dedicated VM of this run
            // takes: the document says where it may run after, for apply.
            match state.placement(&h.placement.vm) {
                Some(now) if h.placement.cpu_mode == CpuMode::Shared => doc.narrowed_to(&now.cpuset),
                _ => doc,
            }
        })
        .collect();
    let code = output(args, accel, topology, None, &requests, outcome.results, &state, held);
    leave((requests, state));
    code
}

/// Prints a plan in the format asked, for guests run by `accel` (kvm
/// when `None`); the exit code says whether every VM was placed.
#[allow(clippy::too_many_arguments)]
fn output(
    args: &Args,
    accel: Option<Accel>,
    topology: &Topology,
    state_doc: Option<PlanDoc>,
    requests: &[Request],
    results: Vec<Result<Decision, Rejection>>,
    state: &HostState,
    held: Vec<HeldDoc>,
) -> anyhow::Result<ExitCode> {
    let rejected = results.iter().any(Result::is_err);
    match args.format {
        PlanFormat::Text => {
            let mut text = plan_text::render(topology, &results, state);
            if !held.is_empty() {
                text.push_str(&held_text(&held));
            }
            super::print(&text)?
        }
        PlanFormat::Json => {
            let beside = Beside { live_host: args.host.is_none(), accel, held };
            let doc = plan_doc(topology, state_doc, requests, &results, state, beside);
            write_doc(&doc, placed_views(requests, &results, state), args.compact)?;
        }
        PlanFormat::Libvirt | PlanFormat::Qemu => {
            // A host numaplace writes no domain for is refused before any
            // output, never given an x86 domain.
            if let Err(e) = numaplace_emit::arch::target(topology.arch()) {
                bail!("--format {}: {e}", if args.format == PlanFormat::Libvirt { "libvirt" } else { "qemu" });
            }
            let chosen = pick(args, &results, state)?;
            let out = match args.format {
                PlanFormat::Libvirt => {
                    let opts = super::profile::libvirt_options(accel.unwrap_or_default()).for_host(topology);
                    libvirt::domains_xml(&chosen, &opts)
                }
                _ => qemu_lines(&chosen, accel.unwrap_or_default(), topology),
            };
            super::print(&out)?;
            for r in results.iter().filter_map(|r| r.as_ref().err()) {
                eprintln!("numaplace: {} rejected: {}", r.vm, r.reason);
            }
        }
    }
    leave(results);
    Ok(if rejected { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The placements the libvirt/QEMU output covers: `--vm-name` (which may
/// name a VM from the state), else every VM placed by this run.
fn pick<'a>(
    args: &Args,
    results: &'a [Result<Decision, Rejection>],
    state: &'a HostState,
) -> anyhow::Result<Vec<&'a Placement>> {
    match &args.vm_name {
        Some(name) => {
            if let Some(p) = state.placement(name) {
                return Ok(vec![p]);
            }
            if results.iter().any(|r| matches!(r, Err(rej) if &rej.vm == name)) {
                // Rejected: nothing to print; the reason goes to stderr
                // and the exit code says 1.
                return Ok(Vec::new());
            }
            bail!("--vm-name: no VM named `{name}` in this plan")
        }
        // The state's copy: a shared VM's floating set may have shrunk
        // since it was planned.
        None => Ok(results
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|d| state.placement(&d.placement.vm).unwrap_or(&d.placement))
            .collect()),
    }
}

fn qemu_lines(chosen: &[&Placement], accel: Accel, topology: &Topology) -> String {
    let opts = qemu::QemuOptions::for_accel(accel);
    // The caller refused an architecture without a target.
    let opts = opts.clone().for_arch(topology.arch()).unwrap_or(opts).with_devices(topology);
    let mut out = String::new();
    for (i, p) in chosen.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("# {}\n", p.vm.replace('\n', " ")));
        for note in qemu::notes_for(p, &opts) {
            out.push_str(&format!("# {note}\n"));
        }
        out.push_str(&qemu::command_line(p, &opts));
        out.push('\n');
    }
    out
}

/// Streams the plan JSON to stdout, treating a closed pipe (`| head`) as
/// success: a plan of thousands of VMs is never held as one string.
fn write_doc<'a>(
    doc: &PlanDoc,
    placed: impl IntoIterator<Item = PlacementView<'a>>,
    compact: bool,
) -> anyhow::Result<()> {
    // The writer gathers about 8 KiB before each write: no buffer here.
    super::quiet_pipe(super::stdout_raw().and_then(|mut out| doc.write_json_with(placed, &mut out, compact)))
}

/// This run's placements in the plan JSON, as views of the decisions
/// written straight from them, each made as it is written.
fn placed_views<'a>(
    requests: &'a [Request],
    results: &'a [Result<Decision, Rejection>],
    state: &'a HostState,
) -> impl Iterator<Item = PlacementView<'a>> + 'a {
    // plan_batch answers in request order, one result per request.
    requests.iter().zip(results).filter_map(|(req, r)| {
        let d = r.as_ref().ok()?;
        let view = PlacementView::of_decision(d, Some(req));
        // A shared VM's floating set shrinks when a later dedicated VM
        // takes some of its CPUs; the document says where each VM may run
        // now. Only shared VMs' sets change (`HostState::place`), so only
        // they are looked up.
        if d.placement.cpu_mode != CpuMode::Shared {
            return Some(view);
        }
        Some(match state.placement(&d.placement.vm) {
            Some(now) => view.with_cpus_of(now),
            None => view,
        })
    })
}

/// What the plan JSON says beside the placements.
struct Beside {
    /// The host was read live (no --host): `apply` checks it as such.
    live_host: bool,
    /// The guest type `apply` writes new domains for, as decided.
    accel: Option<Accel>,
    /// The domains a libvirt state held.
    held: Vec<HeldDoc>,
}

/// The whole plan JSON but this run's placements ([`placed_views`]),
/// assembled here once and then written: the state's placements as they
/// were read, then this run's rejections; CPU sets as the state has them
/// now; the host `apply` checks its own against, the guest type and the
/// held domains.
fn plan_doc(
    topology: &Topology,
    state_doc: Option<PlanDoc>,
    requests: &[Request],
    results: &[Result<Decision, Rejection>],
    state: &HostState,
    beside: Beside,
) -> PlanDoc {
    let mut doc = PlanDoc::new(topology.name().map(str::to_string));
    doc.reserved = ReservedDoc::new(state.reservations());
    doc.host_topology = Some(HostTopologyDoc::new(topology, beside.live_host));
    doc.accel = beside.accel.map(|a| a.name().to_string());
    doc.held = beside.held;
    if let Some(old) = state_doc {
        // Carried as read, in this version's form (a version 1 state is
        // written back as version 2).
        doc.placements = old.placements.into_iter().map(|p| PlacementDoc { new: false, ..p.into_current() }).collect();
    }
    let mut holders = None;
    for (req, r) in requests.iter().zip(results) {
        if let Err(rej) = r {
            doc.rejected.push(
                RejectionDoc::new(rej, Some(req)).with_holders(rej, holders.get_or_insert_with(|| state.cpu_holders())),
            );
        }
    }
    // A VM carried from the state whose idle siblings a new VM took says
    // so too (plan_batch already told the VMs of this run).
    for d in results.iter().filter_map(|r| r.as_ref().ok()) {
        for (vm, note) in neighbour_notes(d) {
            if let Some(entry) = doc.placements.iter_mut().find(|p| p.vm == vm) {
                entry.notes.push(NoteDoc::from_note(&note));
            }
        }
    }
    for d in &mut doc.placements {
        if let Some(now) = state.placement(&d.vm) {
            if !now.cpuset.iter().eq(d.cpuset.iter().copied()) {
                d.cpuset = now.cpuset.iter().collect();
            }
            if !now.emulator.iter().eq(d.emulator.iter().copied()) {
                d.emulator = now.emulator.iter().collect();
            }
        }
    }
    doc
}

/// The domains a libvirt host already had, as counted, for people.
fn held_text(held: &[HeldDoc]) -> String {
    use std::fmt::Write;
    let narrowed = held.iter().any(|h| !h.cpus_after.is_empty());
    let tail = if narrowed { "but for the floating sets this plan narrows" } else { "and left as they are" };
    let mut x = format!("\nDomains already on the host ({}), planned around {tail}:\n", held[0].source);
    for h in held {
        let whose = if h.managed { "numaplace's" } else { "not numaplace's" };
        let state = if h.running { "running" } else { "shut off" };
        let cpus: CpuSet = h.cpus.iter().copied().collect();
        let mem: Vec<String> =
            h.memory.iter().map(|m| format!("node{} {}", m.node, numaplace_topo::format_size(m.bytes))).collect();
        let _ = writeln!(
            x,
            "  {}: {} {} on CPUs {}, memory {} ({state}, {whose})",
            h.vm,
            numaplace_emit::text::plural(h.pins.len(), "vCPU"),
            h.cpu_mode,
            cpus,
            if mem.is_empty() { "none counted".to_string() } else { mem.join(", ") }
        );
        if !h.cpus_after.is_empty() {
            let after: CpuSet = h.cpus_after.iter().copied().collect();
            // apply narrows every floating domain, numaplace's or not
            // (vCPUs, emulator and I/O threads).
            let _ = writeln!(
                x,
                "    its vCPUs may use CPUs {after} once this plan is applied (`numaplace apply` narrows it)"
            );
        }
    }
    x
}
