//! `--fix`: corrected files for a set of VM files, planned together.
//! This module fixes one file against a host state ([`fix`]: the libvirt
//! fixer and the `.vmx` fixer's steps); [`joint`] fixes a set, [`trade`]
//! judges it, [`error`] says why a fix was not written.
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
//! planned again around it ([`joint`]). Floating domains
//! under the dedicated CPUs are narrowed as `numaplace apply` narrows
//! them (`numaplace_libvirt::apply::narrow_xml`).

pub mod error;
pub mod joint;
pub mod trade;
pub mod vmx;

use crate::error::VmError;
use crate::finding::Severity;
use crate::host::HostView;
use crate::rules::{self, nodes_needed, span, Context};
use crate::vm::{SourceFormat, Vm};
use crate::{hypervisor, VmFile};
use error::{FixError, RoomHolder};
use numaplace_plan::{Decision, DeviceWish, HostState, Placement, Request, Session};
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
fn even_count(vm: &Vm, host: &HostView<'_>, nodes: u32) -> u32 {
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
pub fn request_for(vm: &Vm, host: &HostView<'_>, opts: FixOptions) -> Request {
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
fn state_with(host: &HostView<'_>, vms: &[Vm]) -> Result<HostState, String> {
    let topology = host.topology;
    let held: Vec<crate::Held> = vms
        .iter()
        .map(|vm| {
            let mut h = numaplace_libvirt::held(&vm.def, &vm.file, topology).0;
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
    // The CPUs each VM holds, from the state's one map of holders (a
    // floating VM's CPUs are shared and not counted).
    let map = state.cpu_map();
    let mut out: Vec<RoomHolder> = state
        .placements()
        .iter()
        .map(|p| {
            let memory = if p.charged.is_empty() { &p.memory } else { &p.charged };
            RoomHolder {
                vm: p.vm.clone(),
                cpus: map.held_by(&p.vm).len() as u32,
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
    vm: &Vm,
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
    let views: Vec<Vm> = crate::views(all, &host).into_iter().filter(|v| hypervisor(v.format) == kind).collect();
    let others: Vec<Vm> = views.iter().filter(|v| v.file != file.name).cloned().collect();
    let mut state = state_with(&host, &others).map_err(FixError::State)?;
    fix_one(file, &views, &mut state, &host, opts)
}

/// Fixes one file against `state` (a libvirt VM's placement is recorded
/// there); `views` are every VM of the run, for the rules across VMs.
fn fix_one(
    file: &VmFile,
    views: &[Vm],
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
    views: &[Vm],
    host: &HostView<'_>,
) -> Result<(Vm, Vec<&'static str>), FixError> {
    let reread = crate::parse_file(&file.name, text.as_bytes()).map_err(|e| FixError::Unreadable(e.to_string()))?;
    let vm =
        crate::views(std::slice::from_ref(&reread), host).into_iter().next().ok_or(FixError::Unsupported("empty"))?;
    // The VM in its own place among the others: the rules across VMs
    // decide between two VMs by that order.
    let mut all: Vec<Vm> = views.to_vec();
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
    views: &[Vm],
    state: &HostState,
    host: &HostView<'_>,
    opts: FixOptions,
) -> Result<Fixed, FixError> {
    let original = views.iter().find(|v| v.file == file.name).ok_or(FixError::Unsupported("empty"))?;
    let mut fx = VmxFix { file, views, host, opts, set: BTreeMap::new(), notes: Vec::new() };
    fx.hotadd()?;
    fx.affinity(state)?;
    fx.memory()?;
    fx.shape()?;
    let (_, left) = fx.look()?;
    if left.contains(&"odd-vcpus-wide") && !opts.allow_resize {
        fx.notes.push(format!(
            "numvcpus left at {}: only another vCPU count splits evenly (--allow-resize)",
            original.vcpus
        ));
    }
    let text = vmx::apply(&file.text, &fx.set)?;
    Ok(Fixed { text, notes: fx.notes })
}

/// A `.vmx` fix under way: the settings to write so far and the notes.
struct VmxFix<'a> {
    file: &'a VmFile,
    views: &'a [Vm],
    host: &'a HostView<'a>,
    opts: FixOptions,
    /// The settings to write (key -> value).
    set: BTreeMap<String, String>,
    notes: Vec<String>,
}

impl VmxFix<'_> {
    /// The VM with the settings so far, and the rules it still trips.
    fn look(&self) -> Result<(Vm, Vec<&'static str>), FixError> {
        vmx_state(self.file, &vmx::apply(&self.file.text, &self.set)?, self.views, self.host)
    }

    /// Hot-add off, when it is what keeps the guest on one node.
    fn hotadd(&mut self) -> Result<(), FixError> {
        let (_, found) = self.look()?;
        if found.contains(&"cpu-hotadd-wide") {
            self.set.insert("vcpu.hotadd".into(), "FALSE".into());
            self.notes.push(
                "vcpu.hotadd -> FALSE: ESXi builds virtual NUMA nodes again; applies when the VM is powered off and on (add vCPUs while it is off)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Node affinity from the planner, for a restricted VM whose
    /// restriction puts it in the wrong place.
    fn affinity(&mut self, state: &HostState) -> Result<(), FixError> {
        let (topology, host) = (self.host.topology, self.host);
        let (vm, found) = self.look()?;
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
            self.set.insert("numa.nodeAffinity".into(), nodes.join(","));
            if vm.cpuset.is_some() {
                self.set.insert("sched.cpu.affinity".into(), "all".into());
            }
            self.notes.push(format!("numa.nodeAffinity -> {} (planner)", nodes.join(",")));
        }
        Ok(())
    }

    /// Memory that does not fit a node: split over virtual nodes, or
    /// (resizing) made to fit one.
    fn memory(&mut self) -> Result<(), FixError> {
        let (vm, found) = self.look()?;
        if !found.contains(&"memory-exceeds-node") {
            return Ok(());
        }
        let host = self.host;
        let k = nodes_needed(&vm, host).max(2);
        if self.opts.allow_resize {
            let node = host.node_memory();
            // Largest size in whole 4 MB steps (ESXi's granule) whose
            // overhead still fits the node.
            let mut mib = (node.saturating_sub(host.overhead(0)) / 65 * 64) >> 20;
            mib -= mib % 4;
            while mib > 4 && (mib << 20) + host.overhead(mib << 20) > node {
                mib -= 4;
            }
            self.set.insert("memSize".into(), mib.to_string());
            self.notes.push(format!(
                "memSize {} -> {mib} MB (--allow-resize) to fit one node with overhead",
                vm.memory_bytes >> 20
            ));
        } else if vm.vcpus >= k {
            let per = vm.vcpus.div_ceil(k);
            self.set.insert("numa.vcpu.maxPerVirtualNode".into(), per.to_string());
            if vm.vcpus < crate::vmx::VNUMA_MIN_VCPUS {
                self.set.insert("numa.vcpu.min".into(), vm.vcpus.to_string());
            }
            if vm.vcpus.is_multiple_of(per) && vm.shape.as_ref().is_some_and(|s| s.cores != per) {
                self.set.insert("cpuid.coresPerSocket".into(), per.to_string());
            }
            self.notes.push(format!(
                "{} of {per} vCPUs so the memory spreads over {} (memSize unchanged)",
                rules::plural(vm.vcpus.div_ceil(per), "virtual NUMA node"),
                rules::plural(k, "host node")
            ));
        } else {
            self.notes.push(format!(
                "memSize left at {} MB: with {} the VM cannot be split over the {k} nodes its memory needs; only a smaller memSize fits one node (--allow-resize)",
                vm.memory_bytes >> 20,
                rules::plural(vm.vcpus, "vCPU")
            ));
        }
        Ok(())
    }

    /// The vCPU count (resizing) and the guest shape: one virtual socket
    /// and node per host node the VM spans.
    fn shape(&mut self) -> Result<(), FixError> {
        let host = self.host;
        let (vm, found) = self.look()?;
        let (k, _) = span(&vm, host);
        let mut vcpus = vm.vcpus;
        if self.opts.allow_resize {
            vcpus = even_count(&vm, host, k);
            if vcpus != vm.vcpus {
                self.set.insert("numvcpus".into(), vcpus.to_string());
                self.notes.push(format!(
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
            self.set.insert("cpuid.coresPerSocket".into(), per.to_string());
            self.set.insert("numa.vcpu.maxPerVirtualNode".into(), per.to_string());
            self.notes.push(format!("{k} virtual sockets of {per} cores, one virtual NUMA node each"));
        } else if shape_wrong {
            self.notes.push(format!(
                "guest shape left alone: {} do not split evenly over {}; only another vCPU count does (--allow-resize)",
                rules::plural(vcpus, "vCPU"),
                rules::plural(k, "host node")
            ));
        }
        Ok(())
    }
}
