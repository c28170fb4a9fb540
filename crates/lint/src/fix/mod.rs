//! `--fix`: a corrected file for one VM file.
//!
//! libvirt XML: the planner places the VM (as many vCPUs, rounded to split
//! evenly when it is wide; its memory, huge pages and devices; no
//! hot-add), around the dedicated CPUs of the other VMs given, and the
//! placement is spliced into the domain ([`libvirt::apply`]). `.vmx`: the
//! settings the findings name are rewritten ([`vmx::apply`]). Request
//! JSON has no fix of its own: `numaplace plan` is its fix.

pub mod libvirt;
pub mod vmx;

use crate::error::FixError;
use crate::host::HostView;
use crate::rules::{self, nodes_needed, overhead_bytes, span, Context};
use crate::vm::{SourceFormat, VmView};
use crate::VmFile;
use numaplace_plan::{CpuMode, DeviceWish, GuestTopology, HostState, MemoryMode, Placement, Request, VcpuPin};
use numaplace_topo::{CpuSet, NodeId, Topology};
use std::collections::BTreeMap;

/// A corrected file and what changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fixed {
    /// The new text.
    pub text: String,
    /// What was changed, for the operator.
    pub notes: Vec<String>,
}

/// The vCPU count a fix uses: unchanged unless the VM is wide and the
/// count does not split over the nodes it needs.
fn fixed_vcpus(vm: &VmView, host: &HostView<'_>, nodes: u32) -> u32 {
    if vm.vcpus > host.node_cores() && nodes >= 2 && !vm.vcpus.is_multiple_of(nodes) {
        rules::even_vcpus(vm.vcpus, nodes, host.total_cores())
    } else {
        vm.vcpus
    }
}

/// The planner request that describes a VM as it should be.
pub fn request_for(vm: &VmView, host: &HostView<'_>) -> Request {
    let mut shaped = vm.clone();
    shaped.pins.clear();
    shaped.cpuset = None;
    shaped.node_affinity = None;
    let vcpus = fixed_vcpus(vm, host, nodes_needed(&shaped, host)).min(host.total_cores().max(1));
    let mut r = Request::new(vm.name.clone(), vcpus, vm.memory_bytes);
    r.hugepage_bytes = vm.hugepages.first().map(|h| h.size_bytes.unwrap_or(rules::DEFAULT_HUGEPAGE));
    r.devices = vm
        .devices
        .iter()
        .map(|d| DeviceWish { address: Some(d.address.clone()), node: None, required: false })
        .collect();
    r
}

/// A placement standing for a VM the linter read (dedicated pins only),
/// so the planner keeps its CPUs free.
fn placement_of(vm: &VmView, host: &HostView<'_>) -> Option<Placement> {
    if !vm.dedicated() {
        return None;
    }
    let mut vcpus = Vec::new();
    let mut cpuset = CpuSet::new();
    for pin in &vm.pins {
        let pu = pin.cpus.first()?;
        let node = host.nodes.get(host.node_of_cpu(pu)?)?.id;
        vcpus.push(VcpuPin { vcpu: pin.vcpu, pu, node });
        cpuset.insert(pu);
    }
    let nodes: Vec<NodeId> = {
        let mut n: Vec<NodeId> = vcpus.iter().map(|v| v.node).collect();
        n.sort();
        n.dedup();
        n
    };
    let share = vm.memory_bytes / nodes.len().max(1) as u64;
    Some(Placement {
        vm: vm.name.clone(),
        nodes: nodes.clone(),
        cpu_mode: CpuMode::Dedicated,
        vcpus,
        cpuset,
        emulator: CpuSet::new(),
        memory: nodes.iter().map(|&n| (n, share)).collect(),
        memory_bytes: share * nodes.len() as u64,
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: None,
        guest: GuestTopology { sockets: 1, dies: 1, cores: vm.vcpus, threads: 1, cells: Vec::new() },
        online_vcpus: vm.hotadd.as_ref().and_then(|h| h.current),
        devices: vm.devices.iter().map(|d| d.address.clone()).collect(),
        floating: Vec::new(),
        charged: Vec::new(),
    })
}

/// Plans a VM around the others, dropping huge pages the host lacks.
fn plan_vm(
    vm: &VmView,
    others: &[VmView],
    topology: &Topology,
    notes: &mut Vec<String>,
) -> Result<Placement, FixError> {
    let host = HostView::new(topology);
    let mut state = HostState::new(topology);
    for other in others {
        if let Some(p) = placement_of(other, &host) {
            // A VM the host state refuses (it overlaps another) is left
            // out; its own lint reports the overlap.
            let _ = state.place(&p);
        }
    }
    let mut req = request_for(vm, &host);
    // Without huge pages the hypervisor's overhead comes out of the same
    // node memory, so the planner is asked for both and the guest's share
    // is scaled back below.
    if req.hugepage_bytes.is_none() {
        req.memory_bytes = vm.memory_bytes.saturating_add(overhead_bytes(vm.memory_bytes));
    }
    if req.vcpus != vm.vcpus {
        notes.push(format!(
            "vCPUs {} -> {}: a count that splits evenly over the host nodes and stays within the host's {} physical cores",
            vm.vcpus,
            req.vcpus,
            host.total_cores()
        ));
    }
    let first = numaplace_plan::plan(topology, &state, &req);
    let decision = match first {
        Ok(d) => d,
        Err(rej) if req.hugepage_bytes.is_some() => {
            req.hugepage_bytes = None;
            req.memory_bytes = vm.memory_bytes.saturating_add(overhead_bytes(vm.memory_bytes));
            match numaplace_plan::plan(topology, &state, &req) {
                Ok(d) => {
                    notes.push(format!(
                        "huge pages dropped: {}; reserve them and run the fix again to keep them",
                        rej.reason
                    ));
                    d
                }
                Err(r) => return Err(FixError::NoPlacement { vm: vm.name.clone(), reason: r.reason }),
            }
        }
        Err(r) => return Err(FixError::NoPlacement { vm: vm.name.clone(), reason: r.reason }),
    };
    let mut placement = decision.placement;
    // The planner spreads vCPUs evenly; if the node count it chose does
    // not divide them, ask once more with a count that does.
    let k = placement.nodes.len() as u32;
    if k >= 2 && !req.vcpus.is_multiple_of(k) && req.vcpus > host.node_cores() {
        let mut again = req.clone();
        again.vcpus = rules::even_vcpus(req.vcpus, k, host.total_cores());
        if let Ok(d) = numaplace_plan::plan(topology, &state, &again) {
            notes.push(format!("vCPUs {} -> {} so they split evenly over {k} host nodes", req.vcpus, again.vcpus));
            placement = d.placement;
        }
    }
    if placement.memory_bytes != vm.memory_bytes {
        scale_memory(&mut placement, vm.memory_bytes);
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

/// Guest cell sizes stay multiples of this, as the planner keeps them (the
/// memory block size guest kernels check node ranges against).
const CELL_BLOCK: u64 = 128 << 20;

/// Scales a placement's per-node and per-cell memory to `total` bytes, in
/// whole 128 MiB blocks, the last share taking the remainder.
fn scale_memory(p: &mut Placement, total: u64) {
    let planned = p.memory_bytes.max(1);
    let share = |part: u64| -> u64 {
        let scaled = u128::from(part) * u128::from(total) / u128::from(planned);
        u64::try_from(scaled).unwrap_or(total) / CELL_BLOCK * CELL_BLOCK
    };
    let n = p.memory.len();
    let mut given = 0u64;
    for (i, (_, bytes)) in p.memory.iter_mut().enumerate() {
        *bytes = if i + 1 == n { total.saturating_sub(given) } else { share(*bytes) };
        given += *bytes;
    }
    let cells = p.guest.cells.len();
    let mut given = 0u64;
    for (i, cell) in p.guest.cells.iter_mut().enumerate() {
        cell.memory_bytes = if i + 1 == cells { total.saturating_sub(given) } else { share(cell.memory_bytes) };
        given += cell.memory_bytes;
    }
    p.memory_bytes = total;
}

/// A corrected text for `file`; `all` are every file given (for the other
/// VMs' dedicated CPUs).
pub fn fix(file: &VmFile, all: &[VmFile], topology: &Topology) -> Result<Fixed, FixError> {
    let host = HostView::new(topology);
    let views = crate::views(all, &host);
    let mine: Vec<&VmView> = views.iter().filter(|v| v.file == file.name).collect();
    let others: Vec<VmView> = views.iter().filter(|v| v.file != file.name).cloned().collect();
    match file.format {
        SourceFormat::Request => Err(FixError::Unsupported("request JSON")),
        SourceFormat::Libvirt => {
            let vm = mine.first().ok_or(FixError::Unsupported("empty"))?;
            let mut notes = Vec::new();
            let placement = plan_vm(vm, &others, topology, &mut notes)?;
            let text = libvirt::apply(&file.text, &placement)?;
            Ok(Fixed { text, notes })
        }
        SourceFormat::Vmx => {
            let vm = mine.first().ok_or(FixError::Unsupported("empty"))?;
            let cx = Context { host: &host, vms: &views };
            fix_vmx(file, vm, &cx, &others, topology)
        }
    }
}

fn fix_vmx(
    file: &VmFile,
    vm: &VmView,
    cx: &Context<'_>,
    others: &[VmView],
    topology: &Topology,
) -> Result<Fixed, FixError> {
    let host = cx.host;
    let found: Vec<&'static str> = rules::all().iter().flat_map(|r| r.check(vm, cx)).map(|f| f.rule).collect();
    let has = |id: &str| found.contains(&id);
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    let mut notes = Vec::new();
    let mut vm2 = vm.clone();
    if has("cpu-hotadd-wide") {
        set.insert("vcpu.hotadd".into(), "FALSE".into());
        vm2.hotadd = None;
    }
    if has("memory-exceeds-node") {
        let node = host.node_memory();
        // Largest size in whole 4 MB steps (ESXi's granule) whose
        // overhead still fits the node.
        let mut mib = (node.saturating_sub(overhead_bytes(0)) / 65 * 64) >> 20;
        mib -= mib % 4;
        while mib > 4 && (mib << 20) + overhead_bytes(mib << 20) > node {
            mib -= 4;
        }
        set.insert("memSize".into(), mib.to_string());
        notes.push(format!("memSize {} -> {mib} MB to fit one node with overhead", vm.memory_bytes >> 20));
        vm2.memory_bytes = mib << 20;
    }
    let restricted = vm.cpuset.is_some() || vm.node_affinity.is_some();
    if restricted && (has("smt-contention") || has("device-remote")) {
        let mut notes_plan = Vec::new();
        let placement = plan_vm(&vm2, others, topology, &mut notes_plan)?;
        let nodes: Vec<String> = placement.nodes.iter().map(|n| n.0.to_string()).collect();
        set.insert("numa.nodeAffinity".into(), nodes.join(","));
        if vm.cpuset.is_some() {
            set.insert("sched.cpu.affinity".into(), "all".into());
        }
        notes.push(format!("numa.nodeAffinity -> {} (planner)", nodes.join(",")));
        vm2.node_affinity = Some((placement.nodes.iter().map(|n| n.0).collect(), None));
        vm2.cpuset = None;
    }
    let (k, _) = span(&vm2, host);
    let vcpus = fixed_vcpus(&vm2, host, k).min(host.total_cores().max(1));
    if vcpus != vm.vcpus {
        set.insert("numvcpus".into(), vcpus.to_string());
        notes.push(format!(
            "numvcpus {} -> {vcpus}: splits evenly over {k} host nodes and stays within the host's {} physical cores",
            vm.vcpus,
            host.total_cores()
        ));
    }
    let shape_wrong = has("guest-cells-uneven") || has("guest-cells-per-node") || has("socket-spans-cells");
    let cps_breaks = vm.shape.as_ref().is_some_and(|s| !vcpus.is_multiple_of(s.cores));
    if shape_wrong || cps_breaks {
        let per = vcpus / k.max(1);
        set.insert("cpuid.coresPerSocket".into(), per.to_string());
        set.insert("numa.vcpu.maxPerVirtualNode".into(), per.to_string());
        notes.push(format!("{k} virtual sockets of {per} cores, one virtual NUMA node each"));
    }
    if set.is_empty() {
        notes.push("nothing to change".into());
    }
    let text = vmx::apply(&file.text, &set)?;
    Ok(Fixed { text, notes })
}

/// What fixing a set of files did.
#[derive(Debug, Default)]
pub struct FixReport {
    /// (index into the files, the fixed text), in the order fixed.
    pub fixed: Vec<(usize, String)>,
    /// (index, remark) for the operator: what each fix changed.
    pub notes: Vec<(usize, String)>,
    /// (index, why no fix was written): that file keeps its findings.
    pub failed: Vec<(usize, FixError)>,
}

/// Fixes every file with findings, in order, each planned around the VMs
/// of the files before it as already fixed: `files` is updated in place
/// with each fix read back, so a later fix never takes the CPUs an
/// earlier one was given. A file an earlier fix already cleared (the
/// other side of an overlap) is left alone; a VM the planner cannot place
/// keeps its findings and the other files are still fixed.
pub fn fix_all(files: &mut [VmFile], topology: &Topology) -> FixReport {
    let mut report = FixReport::default();
    for i in 0..files.len() {
        if files[i].format == SourceFormat::Request {
            continue;
        }
        if !crate::lint(files, topology).iter().any(|f| f.file == files[i].name) {
            continue;
        }
        let fixed = match fix(&files[i], files, topology) {
            Ok(f) => f,
            Err(e) => {
                report.failed.push((i, e));
                continue;
            }
        };
        match crate::parse_file(&files[i].name, fixed.text.as_bytes()) {
            Ok(reparsed) => files[i] = reparsed,
            Err(e) => {
                // A fix that does not read back is a bug; the file is
                // left as it was rather than written half-understood.
                report.failed.push((i, FixError::Unreadable(e.to_string())));
                continue;
            }
        }
        report.notes.extend(fixed.notes.into_iter().map(|n| (i, n)));
        report.fixed.push((i, fixed.text));
    }
    report
}
