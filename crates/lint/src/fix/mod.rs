//! `--fix`: corrected files for a set of VM files, planned together.
//!
//! Every file with a finding of warning or worse is fixed; the VMs of the
//! other files keep their pins and count as taken. One host state holds
//! them, and each file to fix is planned against it through a
//! [`numaplace_plan::Session`] (the one `numaplace plan --state` uses; a
//! .vmx file's nodes are a session's decision too), so two fixes never
//! get the same CPU or a core's two threads. The files are planned in one canonical order
//! ([`crate::canonical_order`]: by VM name, never the order they were
//! named in), so the same set gives the same files whatever that order.
//!
//! A VM that cannot exist on the host (`vm-exceeds-host`) is left as it
//! is and holds none of its memory against the other fixes.
//!
//! libvirt XML: the planner places the VM (its vCPUs, memory, huge pages
//! and devices; no hot-add) and the placement is spliced into the domain
//! (`numaplace_libvirt::domain::splice`). `.vmx`: the settings the findings name are
//! rewritten ([`vmx::apply`]), one step at a time, each step read back
//! and linted again. Request JSON has no fix of its own: `numaplace plan`
//! is its fix.
//!
//! A fix never changes what the VM has (its vCPU count, its memory, its
//! huge pages, its devices) unless [`FixOptions::allow_resize`] says so;
//! a finding whose only fix is a resize says so ([`Finding::resize`]) and
//! its file is left alone.
//!
//! The joint fix never makes the set worse: the texts about to be written
//! are linted together, and the set is written only when it is strictly
//! better as a whole ([`trade`]): no error the input lacked, and fewer
//! errors or a lower cost-weighted sum of warnings (with
//! [`FixOptions::strict`]: no error or warning the input lacked). A file left alone holds its CPUs, and the fixes are
//! planned again around it ([`fix_all_reserved`]). Floating domains
//! under the dedicated CPUs are narrowed as `numaplace apply` narrows
//! them (`numaplace_libvirt::apply::narrow_xml`).

pub mod trade;
pub mod vmx;

pub use trade::{rule_cost, Trade};

use crate::error::{FixError, NewFinding, RoomHolder, VmError};
use crate::finding::Severity;
use crate::host::HostView;
use crate::rules::{self, nodes_needed, span, Context};
use crate::vm::{SourceFormat, VmView};
use crate::{hypervisor, Hypervisor, VmFile};
use numaplace_plan::{Decision, DeviceWish, HostState, Placement, Request, Reservations, Session};
use numaplace_topo::{CpuSet, Topology};
use std::collections::BTreeMap;

/// A corrected file and what changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixed {
    /// The new text.
    pub text: String,
    /// What was changed, for the operator.
    pub notes: Vec<String>,
}

/// What a fix may change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixOptions {
    /// Let a fix change the VM's size: its vCPU count (to one that splits
    /// evenly over its nodes), its memory (to fit one node), and drop huge
    /// pages the host has not reserved. Off by default: an advisor must
    /// not shrink a production VM by surprise.
    pub allow_resize: bool,
    /// The first `held` files are VMs already on the host (`lint --state
    /// libvirt`): fixes are planned around them, and they are never fixed.
    pub held: usize,
    /// Write a fix only when the set then has no error or warning the
    /// input lacked (`lint --fix --strict`), rather than when the set is
    /// better as a whole.
    pub strict: bool,
}

/// The vCPU count a resizing fix uses: unchanged unless the VM is wide and
/// the count does not split over the nodes it needs.
fn even_count(vm: &VmView, host: &HostView<'_>, nodes: u32) -> u32 {
    let vcpus = if vm.vcpus > host.node_cores() && nodes >= 2 && !vm.vcpus.is_multiple_of(nodes) {
        rules::even_vcpus(vm.vcpus, nodes, host.total_cores())
    } else {
        vm.vcpus
    };
    vcpus.min(host.total_cores().max(1))
}

/// The planner request that describes a VM as it should be: the same
/// vCPUs, memory, huge pages and devices, without hot-add (a resizing fix
/// may round the vCPU count, see [`FixOptions::allow_resize`]).
pub fn request_for(vm: &VmView, host: &HostView<'_>, opts: FixOptions) -> Request {
    let vcpus = if opts.allow_resize {
        let mut shaped = vm.clone();
        shaped.pins.clear();
        shaped.cpuset = None;
        shaped.node_affinity = None;
        even_count(vm, host, nodes_needed(&shaped, host))
    } else {
        vm.vcpus
    };
    let mut r = Request::new(vm.name.clone(), vcpus, vm.memory_bytes);
    r.hugepage_bytes = vm.hugepages.first().map(|h| h.size_bytes.unwrap_or(rules::DEFAULT_HUGEPAGE));
    r.devices = vm
        .devices
        .iter()
        .map(|d| DeviceWish { address: Some(d.address.clone()), node: None, required: false })
        .collect();
    r
}

/// A host state holding `vms` as `plan --state` reads a host's domains
/// (`numaplace_libvirt::held`): pinned VMs by their pins, floating ones as load on the
/// CPUs they may use, memory where their bindings put it. What the state
/// refuses (an overlap with one recorded before) is left out; its own
/// lint reports it. The state has the host's reservations, so a fix
/// never plans onto a CPU or into memory the host keeps for itself.
///
/// Reservations this host cannot hold (a CPU it lacks or has offline) are
/// an error, never a host state without them: a fix planned without the
/// host's reservations could pin a vCPU on its housekeeping CPUs.
fn state_with(host: &HostView<'_>, vms: &[VmView]) -> Result<HostState, String> {
    let topology = host.topology;
    let held: Vec<crate::Held> = vms
        .iter()
        .map(|vm| {
            let mut h = numaplace_libvirt::held(&crate::domain::definition(vm), &vm.file, topology).0;
            // A VM larger than the host never runs here: it keeps its
            // pinned CPUs (it may yet be resized, or its pages reserved)
            // but holds no memory against the others' fixes.
            if !rules::cannot_exist(vm, host).is_empty() {
                for (_, bytes) in &mut h.placement.memory {
                    *bytes = 0;
                }
                h.placement.memory_bytes = 0;
                h.placement.charged.clear();
                h.placement.hugepage_bytes = None;
            }
            h
        })
        .collect();
    match numaplace_libvirt::host_state(topology, host.reservations.clone(), held) {
        Ok(h) => Ok(h.state),
        Err(_) => HostState::with_reservations(topology, host.reservations.clone())
            .map_err(|e| format!("the host's reservations: {e}")),
    }
}

/// The VMs holding room in `state`, largest memory first: who a "no
/// room" is owed to.
fn holders(state: &HostState) -> Vec<RoomHolder> {
    let mut out: Vec<RoomHolder> = state
        .placements()
        .iter()
        .map(|p| {
            let memory = if p.charged.is_empty() { &p.memory } else { &p.charged };
            RoomHolder {
                vm: p.vm.clone(),
                cpus: if p.cpu_mode == numaplace_plan::CpuMode::Shared { 0 } else { p.cpuset.len() as u32 },
                memory: memory.iter().map(|(_, b)| b).sum(),
            }
        })
        .filter(|h| h.cpus > 0 || h.memory > 0)
        .collect();
    out.sort_by(|a, b| (b.memory, b.cpus, &a.vm).cmp(&(a.memory, a.cpus, &b.vm)));
    out
}

/// Places one VM in `state` (recorded there) through the planner's
/// change call; with `allow_resize`, retried without huge pages the host
/// lacks and with a vCPU count that splits over the nodes chosen.
fn place_vm(
    vm: &VmView,
    state: &mut HostState,
    host: &HostView<'_>,
    opts: FixOptions,
    notes: &mut Vec<String>,
) -> Result<Placement, FixError> {
    let topology = host.topology;
    let req = request_for(vm, host, opts);
    if req.vcpus != vm.vcpus {
        notes.push(format!(
            "vCPUs {} -> {} (--allow-resize): a count that splits evenly over the host nodes and stays within the host's {} physical cores",
            vm.vcpus,
            req.vcpus,
            host.total_cores()
        ));
    }
    let one = |state: &mut HostState, req: &Request| -> Result<Decision, FixError> {
        let outcome = Session::new(topology, &mut *state)
            .place(std::slice::from_ref(req))
            .map_err(|e| FixError::State(e.to_string()))?;
        match outcome.results.into_iter().next() {
            Some(Ok(d)) => Ok(d),
            Some(Err(r)) => {
                Err(FixError::NoPlacement { vm: vm.name.clone(), reason: r.reason, held_by: holders(state) })
            }
            None => Err(FixError::State("the planner returned no result".into())),
        }
    };
    let decision = match one(state, &req) {
        Ok(d) => d,
        Err(FixError::NoPlacement { reason, .. }) if req.hugepage_bytes.is_some() && opts.allow_resize => {
            let mut plain = req.clone();
            plain.hugepage_bytes = None;
            let d = one(state, &plain)?;
            notes.push(format!(
                "huge pages dropped (--allow-resize): {reason}; reserve them and run the fix again to keep them"
            ));
            d
        }
        Err(e) => return Err(e),
    };
    let mut decision = decision;
    // The planner spreads vCPUs evenly; if the node count it chose does
    // not divide them, a resizing fix asks once more with a count that
    // does.
    let k = decision.placement.nodes.len() as u32;
    let wide = req.vcpus > host.node_cores();
    if opts.allow_resize && k >= 2 && wide && !req.vcpus.is_multiple_of(k) {
        let mut again = req.clone();
        again.vcpus = rules::even_vcpus(req.vcpus, k, host.total_cores());
        let name = decision.placement.vm.clone();
        let mut trial = state.clone();
        if trial.remove(&name).is_ok() {
            if let Ok(d) = one(&mut trial, &again) {
                notes.push(format!(
                    "vCPUs {} -> {} (--allow-resize) so they split evenly over {k} host nodes",
                    req.vcpus, again.vcpus
                ));
                *state = trial;
                decision = d;
            }
        }
    }
    let placement = std::sync::Arc::unwrap_or_clone(decision.placement);
    if vm.hotadd.is_some() {
        notes.push(format!(
            "CPU hot-add turned off: all {} vCPUs are present at boot and the guest sees one NUMA node per host node; applies at the next cold boot (shut the guest down, then start it)",
            placement.vcpus.len()
        ));
    }
    notes.push(format!(
        "placed on host nodes {}: {} vCPUs pinned 1:1, {}",
        placement.nodes.iter().map(|n| n.0).collect::<CpuSet>(),
        placement.vcpus.len(),
        rules::plural(placement.guest.cells.len() as u64, "guest cell")
    ));
    notes.extend(decision.notes.iter().map(ToString::to_string));
    Ok(placement)
}

/// A corrected text for `file` alone; every other file of `all` keeps its
/// pins and counts as taken.
pub fn fix(file: &VmFile, all: &[VmFile], topology: &Topology, opts: FixOptions) -> Result<Fixed, FixError> {
    let host = HostView::new(topology);
    let kind = hypervisor(file.format);
    let views: Vec<VmView> = crate::views(all, &host).into_iter().filter(|v| hypervisor(v.format) == kind).collect();
    let others: Vec<VmView> = views.iter().filter(|v| v.file != file.name).cloned().collect();
    let mut state = state_with(&host, &others).map_err(FixError::State)?;
    fix_one(file, &views, &mut state, &host, opts)
}

/// Fixes one file against `state` (a libvirt VM's placement is recorded
/// there); `views` are every VM of the run, for the rules across VMs.
fn fix_one(
    file: &VmFile,
    views: &[VmView],
    state: &mut HostState,
    host: &HostView<'_>,
    opts: FixOptions,
) -> Result<Fixed, FixError> {
    let vm = views.iter().find(|v| v.file == file.name).ok_or(FixError::Unsupported("empty"))?;
    match file.format {
        SourceFormat::Request => Err(FixError::Unsupported("request JSON")),
        SourceFormat::Libvirt => {
            let mut notes = Vec::new();
            let placement = place_vm(vm, state, host, opts, &mut notes)?;
            let text = numaplace_libvirt::domain::splice(&file.text, &placement).map_err(VmError::from)?;
            Ok(Fixed { text, notes })
        }
        SourceFormat::Vmx => fix_vmx(file, views, state, host, opts),
    }
}

/// The VM of a `.vmx` text as ESXi would derive it on this host, and the
/// rule ids it still trips among `views` (the others of the run).
fn vmx_state(
    file: &VmFile,
    text: &str,
    views: &[VmView],
    host: &HostView<'_>,
) -> Result<(VmView, Vec<&'static str>), FixError> {
    let reread = crate::parse_file(&file.name, text.as_bytes()).map_err(|e| FixError::Unreadable(e.to_string()))?;
    let vm =
        crate::views(std::slice::from_ref(&reread), host).into_iter().next().ok_or(FixError::Unsupported("empty"))?;
    // The VM in its own place among the others: the rules across VMs
    // decide between two VMs by that order.
    let mut all: Vec<VmView> = views.to_vec();
    match all.iter().position(|v| v.file == file.name) {
        Some(at) => all[at] = vm.clone(),
        None => all.push(vm.clone()),
    }
    let held = rules::counted(&all, host);
    // The host's domains (`--state`) are KVM's: an ESXi VM has none
    // beside it.
    let cx = Context { host, vms: &all, held: &held, incumbents: 0 };
    let found = rules::all()
        .iter()
        .flat_map(|r| r.check(&vm, &cx))
        .filter(|f| f.severity >= Severity::Warning)
        .map(|f| f.rule)
        .collect();
    Ok((vm, found))
}

/// `.vmx`: hot-add off first (ESXi then builds virtual NUMA nodes), then
/// node affinity from the planner (before the memory step, so that a
/// split of the memory over virtual nodes is never written beside an
/// affinity that holds it to one node), then memory that does not fit a
/// node split over virtual nodes, then the guest shape; each step is read
/// back and linted again before the next.
fn fix_vmx(
    file: &VmFile,
    views: &[VmView],
    state: &HostState,
    host: &HostView<'_>,
    opts: FixOptions,
) -> Result<Fixed, FixError> {
    let topology = host.topology;
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    let mut notes = Vec::new();
    let original = views.iter().find(|v| v.file == file.name).ok_or(FixError::Unsupported("empty"))?;
    let look = |set: &BTreeMap<String, String>| -> Result<(VmView, Vec<&'static str>), FixError> {
        vmx_state(file, &vmx::apply(&file.text, set)?, views, host)
    };

    let (_, found) = look(&set)?;
    if found.contains(&"cpu-hotadd-wide") {
        set.insert("vcpu.hotadd".into(), "FALSE".into());
        notes.push(
            "vcpu.hotadd -> FALSE: ESXi builds virtual NUMA nodes again; applies when the VM is powered off and on (add vCPUs while it is off)"
                .into(),
        );
    }

    let (vm, found) = look(&set)?;
    let restricted = vm.cpuset.is_some() || vm.node_affinity.is_some();
    let misplaced = [
        "smt-contention",
        "device-remote",
        "unknown-reference",
        "siblings-shared",
        "pinning-overlap",
        "reserved-cpus",
        "affinity-too-narrow",
    ];
    if restricted && misplaced.iter().any(|r| found.contains(r)) {
        let mut free = vm.clone();
        free.cpuset = None;
        free.node_affinity = None;
        free.hotadd = None;
        let req = request_for(&free, host, FixOptions::default());
        let decision = Session::new(topology, state).decide(&req).map_err(|r| FixError::NoPlacement {
            vm: vm.name.clone(),
            reason: r.reason,
            held_by: holders(state),
        })?;
        let nodes: Vec<String> = decision.placement.nodes.iter().map(|n| n.0.to_string()).collect();
        set.insert("numa.nodeAffinity".into(), nodes.join(","));
        if vm.cpuset.is_some() {
            set.insert("sched.cpu.affinity".into(), "all".into());
        }
        notes.push(format!("numa.nodeAffinity -> {} (planner)", nodes.join(",")));
    }

    let (vm, found) = look(&set)?;
    if found.contains(&"memory-exceeds-node") {
        let k = nodes_needed(&vm, host).max(2);
        if opts.allow_resize {
            let node = host.node_memory();
            // Largest size in whole 4 MB steps (ESXi's granule) whose
            // overhead still fits the node.
            let mut mib = (node.saturating_sub(host.overhead(0)) / 65 * 64) >> 20;
            mib -= mib % 4;
            while mib > 4 && (mib << 20) + host.overhead(mib << 20) > node {
                mib -= 4;
            }
            set.insert("memSize".into(), mib.to_string());
            notes.push(format!(
                "memSize {} -> {mib} MB (--allow-resize) to fit one node with overhead",
                vm.memory_bytes >> 20
            ));
        } else if vm.vcpus >= k {
            let per = vm.vcpus.div_ceil(k);
            set.insert("numa.vcpu.maxPerVirtualNode".into(), per.to_string());
            if vm.vcpus < crate::vmx::VNUMA_MIN_VCPUS {
                set.insert("numa.vcpu.min".into(), vm.vcpus.to_string());
            }
            if vm.vcpus.is_multiple_of(per) && vm.shape.as_ref().is_some_and(|s| s.cores != per) {
                set.insert("cpuid.coresPerSocket".into(), per.to_string());
            }
            notes.push(format!(
                "{} of {per} vCPUs so the memory spreads over {} (memSize unchanged)",
                rules::plural(vm.vcpus.div_ceil(per), "virtual NUMA node"),
                rules::plural(k, "host node")
            ));
        } else {
            notes.push(format!(
                "memSize left at {} MB: with {} the VM cannot be split over the {k} nodes its memory needs; only a smaller memSize fits one node (--allow-resize)",
                vm.memory_bytes >> 20,
                rules::plural(vm.vcpus, "vCPU")
            ));
        }
    }

    let (vm, found) = look(&set)?;
    let (k, _) = span(&vm, host);
    let mut vcpus = vm.vcpus;
    if opts.allow_resize {
        vcpus = even_count(&vm, host, k);
        if vcpus != vm.vcpus {
            set.insert("numvcpus".into(), vcpus.to_string());
            notes.push(format!(
                "numvcpus {} -> {vcpus} (--allow-resize): splits evenly over {k} host nodes and stays within the host's {} physical cores",
                vm.vcpus,
                host.total_cores()
            ));
        }
    }
    let shape_wrong =
        ["guest-cells-uneven", "guest-cells-per-node", "socket-spans-cells"].iter().any(|r| found.contains(r));
    let cps_breaks = vm.shape.as_ref().is_some_and(|s| !vcpus.is_multiple_of(s.cores));
    if (shape_wrong || cps_breaks) && vcpus.is_multiple_of(k.max(1)) {
        let per = vcpus / k.max(1);
        set.insert("cpuid.coresPerSocket".into(), per.to_string());
        set.insert("numa.vcpu.maxPerVirtualNode".into(), per.to_string());
        notes.push(format!("{k} virtual sockets of {per} cores, one virtual NUMA node each"));
    } else if shape_wrong {
        notes.push(format!(
            "guest shape left alone: {} do not split evenly over {}; only another vCPU count does (--allow-resize)",
            rules::plural(vcpus, "vCPU"),
            rules::plural(k, "host node")
        ));
    }
    let (_, left) = look(&set)?;
    if left.contains(&"odd-vcpus-wide") && !opts.allow_resize {
        notes.push(format!(
            "numvcpus left at {}: only another vCPU count splits evenly (--allow-resize)",
            original.vcpus
        ));
    }
    let text = vmx::apply(&file.text, &set)?;
    Ok(Fixed { text, notes })
}

/// What fixing a set of files did.
#[derive(Debug, Default)]
pub struct FixReport {
    /// (index into the files, the fixed text), in file order; only
    /// files whose text changed. Besides the files with findings, a
    /// floating domain another fix put a dedicated VM under is here,
    /// narrowed off that VM's CPUs.
    pub fixed: Vec<(usize, String)>,
    /// (index, remark) for the operator: what each fix changed, or why a
    /// file was left as it was.
    pub notes: Vec<(usize, String)>,
    /// (index, why no fix was written): that file keeps its findings, and
    /// the fixes written were planned around it as it is.
    pub failed: Vec<(usize, FixError)>,
    /// What the fixes written traded, for the whole set (`None` when
    /// nothing was written).
    pub trade: Option<Trade>,
}

/// Fixes every file with a finding of warning or worse, planned together:
/// the VMs of the other files keep their pins and count as taken (their
/// CPUs and idle sibling threads), and each file to fix is planned in
/// the canonical order ([`crate::canonical_order`]) against one host
/// state that holds them and every fix before it. `files` is updated in
/// place with each fix read back. A VM the planner cannot place keeps its
/// findings and the other files are still fixed.
pub fn fix_all(files: &mut [VmFile], topology: &Topology, opts: FixOptions) -> FixReport {
    fix_all_reserved(files, topology, &Reservations::default(), opts)
}

/// [`fix_all`] on a host with reservations (the planner's, as `plan`
/// resolves them from the host profile and its flags): the findings are
/// [`crate::lint_held`]'s, and no fix plans a vCPU onto a reserved CPU
/// (or a dedicated one into the shared pool) or into the memory the host
/// keeps.
///
/// The answer depends on the set of files, not on their order: they are
/// fixed in the canonical order, and the report is given back in the
/// order of `files`.
///
/// The guarantee, as a property of the whole set: no error the input
/// lacked (per file, VM and rule), and the set is strictly better
/// ([`trade::Score::better_than`]), or nothing is written; with
/// [`FixOptions::strict`], no error or warning the input lacked. A file
/// whose fix cannot be made (the planner finds no room, it would resize,
/// it would add an error) is left as it was and counts as kept: the fixes
/// are planned again, from the start, around it as it is, until the set
/// as it would be written is acceptable. A file whose VM cannot exist on
/// the host is left as it is from the start, and holds no memory. Files
/// of the two hypervisors (KVM domains and requests, ESXi `.vmx`) are
/// held in two host states: they never share a host.
pub fn fix_all_reserved(
    files: &mut [VmFile],
    topology: &Topology,
    reservations: &Reservations,
    opts: FixOptions,
) -> FixReport {
    let order = crate::canonical_order(files, opts.held.min(files.len()));
    let mut sorted: Vec<VmFile> = order.iter().map(|&i| files[i].clone()).collect();
    let report = fix_in_order(&mut sorted, topology, reservations, opts);
    for (k, file) in sorted.into_iter().enumerate() {
        files[order[k]] = file;
    }
    let back = |k: usize| order[k];
    let mut out = FixReport {
        fixed: report.fixed.into_iter().map(|(k, t)| (back(k), t)).collect(),
        notes: report.notes.into_iter().map(|(k, n)| (back(k), n)).collect(),
        failed: report.failed.into_iter().map(|(k, e)| (back(k), e)).collect(),
        trade: report.trade,
    };
    // Stable: each file's notes keep their order.
    out.fixed.sort_by_key(|f| f.0);
    out.notes.sort_by_key(|n| n.0);
    out.failed.sort_by_key(|f| f.0);
    out
}

/// [`fix_all_reserved`] on files already in the canonical order.
fn fix_in_order(files: &mut [VmFile], topology: &Topology, reservations: &Reservations, opts: FixOptions) -> FixReport {
    let host = HostView::reserved(topology, reservations);
    let lint = |files: &[VmFile]| crate::lint_held(files, opts.held, topology, reservations);
    let before = lint(files);
    let mut left: BTreeMap<usize, Option<FixError>> = BTreeMap::new();
    let candidates: Vec<usize> = (opts.held.min(files.len())..files.len())
        .filter(|&i| files[i].format != SourceFormat::Request)
        .filter(|&i| before.iter().any(|f| f.file == files[i].name && f.severity >= Severity::Warning))
        .collect();
    // A VM that cannot exist on this host is named, not planned: its
    // file is left as it is (and holds no memory in the host states).
    let views = crate::views(files, &host);
    let mut to_fix = Vec::new();
    for i in candidates {
        let beyond = views.iter().filter(|v| v.file == files[i].name).find_map(|v| {
            let why = rules::cannot_exist(v, &host);
            // Pages the host lacks are what a resizing fix drops.
            let resizable = opts.allow_resize && why.iter().all(|b| matches!(b, rules::Beyond::Pages { .. }));
            (!why.is_empty() && !resizable).then(|| (v.name.clone(), why))
        });
        match beyond {
            Some((vm, why)) => {
                left.insert(i, Some(FixError::CannotExist { vm, why }));
            }
            None => to_fix.push(i),
        }
    }
    // A floating domain whose only findings are about where it floats
    // keeps floating: it is narrowed (below) rather than planned 1:1.
    let floating_only = ["floating-on-dedicated", "floating-over-reserved"];
    let narrow_only: Vec<usize> = to_fix
        .iter()
        .copied()
        .filter(|&i| {
            files[i].format == SourceFormat::Libvirt
                && before
                    .iter()
                    .filter(|f| f.file == files[i].name && f.severity >= Severity::Warning)
                    .all(|f| floating_only.contains(&f.rule))
        })
        .collect();
    let to_fix: Vec<usize> = to_fix.into_iter().filter(|i| !narrow_only.contains(i)).collect();
    let mut notes_left: Vec<(usize, String)> = Vec::new();
    // Each pass leaves at least one more file alone, or ends.
    loop {
        let mut round = fix_round(files, &to_fix, &left, &host, opts);
        let mut again = false;
        for (i, why) in std::mem::take(&mut round.left) {
            match why {
                Left::Failed(e) => left.insert(i, Some(e)),
                Left::Unchanged(notes) => {
                    notes_left.extend(notes.into_iter().map(|n| (i, n)));
                    left.insert(i, None)
                }
            };
            again = true;
        }
        if again {
            // A file left as it was holds its CPUs: plan the others again
            // around it.
            continue;
        }
        let mut trial = files.to_vec();
        for (i, file, _, _) in &round.fixed {
            trial[*i] = file.clone();
        }
        // Floating domains of the run (not the host's, which lint never
        // writes) are taken off the CPUs the set dedicates, as `apply`
        // narrows a floating domain under a plan's dedicated VM.
        for (i, file, text, note) in narrow_floating(&trial, opts.held, &left, &host) {
            trial[i] = file.clone();
            round.fixed.retain(|f| f.0 != i);
            round.fixed.push((i, file, text, vec![note]));
        }
        round.fixed.sort_by_key(|f| f.0);
        let after = lint(&trial);
        let (added, errors_fixed, warnings_fixed) = trade::diff(&before, &after);
        let (was, now) = (trade::Score::of(&before), trade::Score::of(&after));
        let new_errors: Vec<NewFinding> = added.iter().filter(|f| f.severity == Severity::Error).cloned().collect();
        let acceptable = round.fixed.is_empty()
            || if opts.strict { added.is_empty() } else { new_errors.is_empty() && now.better_than(&was) };
        if acceptable {
            let mut report = FixReport::default();
            if !round.fixed.is_empty() {
                let needs =
                    added.iter().any(|a| a.rule == "smt-contention" || a.rule == "siblings-shared").then(|| {
                        let vcpus: u64 = crate::views(&trial, &host)
                            .iter()
                            .filter(|v| hypervisor(v.format) == Hypervisor::Kvm)
                            .map(|v| u64::from(v.vcpus))
                            .sum();
                        (vcpus, host.total_cores())
                    });
                let needs = needs.filter(|(v, c)| *v > u64::from(*c));
                report.trade = Some(Trade { before: was, after: now, errors_fixed, warnings_fixed, added, needs });
            }
            for (i, file, text, notes) in round.fixed {
                report.notes.extend(notes.into_iter().map(|n| (i, n)));
                files[i] = file;
                report.fixed.push((i, text));
            }
            report.notes.extend(notes_left);
            report.notes.sort_by_key(|n| n.0);
            report.failed = left.into_iter().filter_map(|(i, e)| Some((i, e?))).collect();
            return report;
        }
        // Blame the fixed file a new finding is on, else the fixed files
        // its evidence names, else the last fix made. What is blamed:
        // the errors the input lacked; without any (the set is merely not
        // better), every finding the input lacked.
        let worse = if opts.strict || new_errors.is_empty() { added } else { new_errors };
        let fixed: Vec<usize> = round.fixed.iter().map(|f| f.0).collect();
        if worse.is_empty() {
            // Nothing added, and still no better: no fix is worth writing.
            let t = Trade { before: was, after: now, errors_fixed, warnings_fixed, added: Vec::new(), needs: None };
            for i in fixed {
                left.insert(i, Some(FixError::NoGain(t.clone())));
            }
            continue;
        }
        let index = |name: &str| fixed.iter().copied().find(|&i| files[i].name == name);
        let mut blamed: BTreeMap<usize, Vec<NewFinding>> = BTreeMap::new();
        for f in &worse {
            let mut culprits: Vec<usize> = index(&f.file).into_iter().collect();
            if culprits.is_empty() {
                let found = after.iter().find(|a| a.file == f.file && a.vm == f.vm && a.rule == f.rule);
                culprits =
                    found.map(|a| a.evidence.iter().filter_map(|e| index(&e.file)).collect()).unwrap_or_default();
            }
            if culprits.is_empty() {
                culprits.extend(fixed.last().copied());
            }
            for c in culprits {
                blamed.entry(c).or_default().push(f.clone());
            }
        }
        for (i, found) in blamed {
            left.insert(i, Some(FixError::WouldWorsen(found)));
        }
    }
}

/// The floating libvirt domains of `files` (from `held` on, not left
/// alone) that may run on CPUs another VM of the set holds dedicated,
/// each narrowed to the CPUs it may use that no dedicated VM holds, nor
/// their idle sibling threads, nor the host's reserved CPUs (the sibling
/// threads are given back when without them too few CPUs are left for its
/// vCPUs): (index, the file read back, its text, a note).
fn narrow_floating(
    files: &[VmFile],
    held: usize,
    left: &BTreeMap<usize, Option<FixError>>,
    host: &HostView<'_>,
) -> Vec<(usize, VmFile, String, String)> {
    let views: Vec<VmView> =
        crate::views(files, host).into_iter().filter(|v| hypervisor(v.format) == Hypervisor::Kvm).collect();
    let counted = rules::counted(&views, host);
    let mut out = Vec::new();
    for (i, file) in files.iter().enumerate().skip(held) {
        if file.format != SourceFormat::Libvirt || left.contains_key(&i) {
            continue;
        }
        let Some(me) = views.iter().position(|v| v.file == file.name) else { continue };
        let (vm, mine) = (&views[me], &counted[me]);
        let was = mine.floating_cpus();
        let dedicated = counted
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != me && views[j].format != SourceFormat::Request)
            .fold(CpuSet::new(), |u, (_, h)| u.union(&h.dedicated_cpus()));
        // Also a VM floating over the reserved CPUs of a host with a
        // shared pool (floating-over-reserved): it belongs in the pool.
        let pool = &host.reservations.shared_cpus;
        let over_reserved = !pool.is_empty() && !was.is_disjoint(&host.reservations.cpus);
        if was.is_disjoint(&dedicated) && !over_reserved {
            continue;
        }
        let topology = host.topology;
        let siblings: CpuSet = dedicated
            .iter()
            .filter_map(|c| topology.pu(c).and_then(|p| p.core).and_then(|k| topology.cores().get(k)))
            .fold(CpuSet::new(), |u, core| u.union(&core.cpus));
        let off = dedicated.union(&host.reservations.cpus);
        let mut after = was.difference(&off).difference(&siblings);
        if (after.len() as u32) < vm.vcpus {
            after = was.difference(&off);
        }
        // Where the host declares a shared pool, floating VMs belong in
        // it, when it holds enough of the CPUs left for the vCPUs.
        let pool = after.intersection(&host.reservations.shared_cpus);
        if pool.len() as u32 >= vm.vcpus {
            after = pool;
        }
        if after.is_empty() {
            continue;
        }
        let text = numaplace_libvirt::apply::narrow_xml(&file.text, &was, &after);
        let Ok(reread) = crate::parse_file(&file.name, text.as_bytes()) else { continue };
        if text == file.text || reread.sizes() != file.sizes() {
            continue;
        }
        let note = format!(
            "kept floating, over CPUs {after} now: the CPUs {} that dedicated VMs hold (and the host's reserved \
             CPUs) taken out of its CPU sets, as `numaplace apply` narrows a floating domain",
            was.intersection(&dedicated.union(&host.reservations.cpus))
        );
        out.push((i, reread, text, note));
    }
    out
}

/// One pass of the joint fix.
struct Round {
    /// (index, the fixed file read back, its text, notes), in order.
    fixed: Vec<(usize, VmFile, String, Vec<String>)>,
    /// Files left as they were in this pass, and why.
    left: Vec<(usize, Left)>,
}

/// Why a file of a pass was left as it was.
enum Left {
    /// No fix could be written.
    Failed(FixError),
    /// The fix changed nothing (the fixer's notes, which say why).
    Unchanged(Vec<String>),
}

/// Fixes the files of `to_fix` not in `left`, in order, against one host
/// state per hypervisor holding every other VM as it is.
fn fix_round(
    files: &[VmFile],
    to_fix: &[usize],
    left: &BTreeMap<usize, Option<FixError>>,
    host: &HostView<'_>,
    opts: FixOptions,
) -> Round {
    let mut round = Round { fixed: Vec::new(), left: Vec::new() };
    let attempt: Vec<usize> = to_fix.iter().copied().filter(|i| !left.contains_key(i)).collect();
    let views = crate::views(files, host);
    let kept = |kind: Hypervisor| -> Vec<VmView> {
        views
            .iter()
            .filter(|v| hypervisor(v.format) == kind)
            .filter(|v| !attempt.iter().any(|&i| files[i].name == v.file))
            .cloned()
            .collect()
    };
    let mut states = [
        (Hypervisor::Kvm, state_with(host, &kept(Hypervisor::Kvm))),
        (Hypervisor::Esxi, state_with(host, &kept(Hypervisor::Esxi))),
    ];
    let mut work = files.to_vec();
    for i in attempt {
        let kind = hypervisor(work[i].format);
        let same: Vec<VmView> =
            crate::views(&work, host).into_iter().filter(|v| hypervisor(v.format) == kind).collect();
        let Some((_, state)) = states.iter_mut().find(|(k, _)| *k == kind) else { continue };
        let state = match state {
            Ok(state) => state,
            Err(e) => {
                round.left.push((i, Left::Failed(FixError::State(e.clone()))));
                continue;
            }
        };
        let fixed = match fix_one(&work[i], &same, state, host, opts) {
            Ok(f) => f,
            Err(e) => {
                round.left.push((i, Left::Failed(e)));
                continue;
            }
        };
        if fixed.text == work[i].text {
            let mut notes = fixed.notes;
            notes.push("left as it was: nothing a fix may change would remove its findings".into());
            round.left.push((i, Left::Unchanged(notes)));
            continue;
        }
        let reparsed = match crate::parse_file(&work[i].name, fixed.text.as_bytes()) {
            Ok(r) => r,
            Err(e) => {
                // A fix that does not read back is a bug; the file is
                // left as it was rather than written half-understood.
                round.left.push((i, Left::Failed(FixError::Unreadable(e.to_string()))));
                continue;
            }
        };
        // The guarantee, checked on the text to be written rather than
        // trusted to each fixer: no vCPU, byte of memory, huge page size
        // or device is lost or added unless resizing was allowed.
        let (before, after) = (work[i].sizes(), reparsed.sizes());
        if !opts.allow_resize && before != after {
            round.left.push((i, Left::Failed(FixError::WouldResize(format!("{before:?} -> {after:?}")))));
            continue;
        }
        work[i] = reparsed.clone();
        round.fixed.push((i, reparsed, fixed.text, fixed.notes));
    }
    round
}
