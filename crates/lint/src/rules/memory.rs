//! Rules about where memory and devices are: a VM whose memory does not
//! fit the node its vCPUs fit, memory bound away from the vCPUs, huge
//! pages the host does not have, a passthrough device on another node.

use super::{allowed_cpus, finding, gib, overhead_bytes, plural, span, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{BindMode, SourceFormat, VmView};
use numaplace_topo::CpuSet;
use std::collections::BTreeSet;

/// Cost of memory that does not fit the node (background § Memory larger than a node).
pub const FIT_IMPACT: &str = "docs/background.md § Memory larger than a node [002]: on 96 GB nodes an 8 vCPU + \
96 GB VM and a 16 vCPU + 192 GB VM stayed below 100% local memory (N%L) while VMs that fit 128 GB nodes were \
100% local; § Remote memory [002]: remote memory costs 1.55x latency (70.9 vs 45.6 ns) and half the peak \
bandwidth (3116 vs 6286 MB/s)";

/// Cost of remote memory (background § Remote memory).
pub const REMOTE_IMPACT: &str = "docs/background.md § Remote memory [002] (2-socket Opteron, RightMark Memory \
Analyzer): memory on another node than the CPUs using it costs 1.55x latency (70.9 vs 45.6 ns pseudo-random) and \
half the peak read bandwidth (3116 vs 6286 MB/s)";

/// Cost of missing huge pages.
pub const HUGE_IMPACT: &str = "the domain fails to start (QEMU cannot take its memory from the pool) or, with \
pages on other nodes only, its memory is remote: 1.55x latency and half the bandwidth (docs/background.md § Remote \
memory [002]); § Pinning and a mirrored guest topology [003] names huge pages as a further gain, not measured";

/// Cost of a remote device (background § Remote memory).
pub const DEVICE_IMPACT: &str = "the device's DMA and interrupts cross the interconnect to reach the VM's memory \
and CPUs: remote memory measured 1.55x latency and half the bandwidth (70.9 vs 45.6 ns; 3116 vs 6286 MB/s, \
docs/background.md § Remote memory [002])";

/// Huge page size assumed when the file names none (x86 default).
pub const DEFAULT_HUGEPAGE: u64 = 2 << 20;

/// Node positions the VM's vCPUs may run on, when restricted.
fn vcpu_nodes(vm: &VmView, cx: &Context<'_>) -> Option<BTreeSet<usize>> {
    let (cpus, _) = allowed_cpus(vm, cx.host)?;
    let nodes = cx.host.nodes_of(&cpus);
    (!nodes.is_empty()).then_some(nodes)
}

/// A VM whose vCPUs fit one node but whose memory plus overhead does not.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryExceedsNode;

impl Rule for MemoryExceedsNode {
    fn id(&self) -> &'static str {
        "memory-exceeds-node"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "VM memory plus overhead larger than a node while its vCPUs fit one node"
    }

    fn check(&self, vm: &VmView, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        if vm.vcpus > host.node_pus() || vm.cells.len() > 1 {
            return Vec::new();
        }
        // A request without a node limit is split by the planner itself.
        if vm.format == SourceFormat::Request && vm.max_nodes != Some(1) {
            return Vec::new();
        }
        // The node it is confined to, else the largest.
        let (node_mem, which) = match vcpu_nodes(vm, cx) {
            Some(nodes) if nodes.len() == 1 => {
                let n = nodes.first().and_then(|&p| host.nodes.get(p));
                (n.map_or(0, |n| n.memory_bytes), n.map(|n| format!("node{}", n.id.0)).unwrap_or_default())
            }
            Some(_) => return Vec::new(),
            None => (host.node_memory(), "the largest node".to_string()),
        };
        let total = vm.memory_bytes.saturating_add(overhead_bytes(vm.memory_bytes));
        if total <= node_mem {
            return Vec::new();
        }
        let message = format!(
            "{} vCPUs fit one node but {} of memory plus {} overhead does not fit {} ({}): part of the memory is remote",
            vm.vcpus,
            gib(vm.memory_bytes),
            gib(overhead_bytes(vm.memory_bytes)),
            which,
            gib(node_mem)
        );
        let fits = node_mem.saturating_sub(256 << 20) / 65 * 64;
        let fix = match vm.format {
            SourceFormat::Vmx => format!(
                "size the VM to the node: memSize = \"{}\" or less (or give it 2 virtual NUMA nodes with numa.vcpu.min and numa.vcpu.maxPerVirtualNode = \"{}\")",
                fits >> 20,
                vm.vcpus.div_ceil(2)
            ),
            SourceFormat::Libvirt => format!(
                "size memory to at most {} or declare one guest cell per host node it needs, pinned and bound (numaplace lint --fix)",
                gib(fits)
            ),
            SourceFormat::Request => "drop \"max_nodes\": 1 so the planner can split the memory over nodes, or ask for less memory".to_string(),
        };
        vec![finding(self, vm, message, [vm.memory_at.clone(), vm.vcpus_at.clone()], FIT_IMPACT, fix)]
    }
}

/// Memory bound (numatune) to nodes other than the ones the vCPUs run on.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryBindingRemote;

impl Rule for MemoryBindingRemote {
    fn id(&self) -> &'static str {
        "memory-binding-remote"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "memory bound to nodes other than the ones the VM's vCPUs run on"
    }

    fn check(&self, vm: &VmView, cx: &Context<'_>) -> Vec<Finding> {
        let mut out = Vec::new();
        let host = cx.host;
        for b in &vm.bindings {
            // Interleaving over nodes is deliberate spreading.
            if b.mode == BindMode::Interleave {
                continue;
            }
            // The whole-VM binding only bounds the per-cell ones when every
            // cell has its own: those are checked one by one (a cell of
            // memory only is remote by design, and the guest is told so).
            let every_cell_bound = !vm.cells.is_empty()
                && vm.cells.iter().all(|c| {
                    c.memory_bytes == 0
                        || vm.bindings.iter().any(|o| o.cell == Some(c.id) && o.mode != BindMode::Interleave)
                });
            if b.cell.is_none() && every_cell_bound {
                continue;
            }
            let (cpus, cpu_at) = match b.cell {
                None => match allowed_cpus(vm, host) {
                    // vCPUs in a guest cell declared without memory are
                    // told their memory is remote (the cell's distances
                    // say how far): a visible choice, not a binding that
                    // forgot them. Only the other cells' pins count then.
                    Some((_, at)) if vm.cells.iter().any(|c| c.memory_bytes == 0 && !c.vcpus.is_empty()) => {
                        let fed: CpuSet = vm
                            .cells
                            .iter()
                            .filter(|c| c.memory_bytes > 0)
                            .flat_map(|c| c.vcpus.iter())
                            .filter_map(|v| vm.pin(v))
                            .fold(CpuSet::new(), |acc, p| acc.union(&p.cpus));
                        (fed, at)
                    }
                    Some((cpus, at)) => (cpus, at),
                    None => continue,
                },
                Some(id) => {
                    let Some(cell) = vm.cells.iter().find(|c| c.id == id) else { continue };
                    let mut cpus = CpuSet::new();
                    let mut at = Vec::new();
                    let mut all = true;
                    for v in cell.vcpus.iter() {
                        match vm.pin(v) {
                            Some(p) => {
                                cpus = cpus.union(&p.cpus);
                                at.push(p.at.clone());
                            }
                            None => all = false,
                        }
                    }
                    if !all || cpus.is_empty() {
                        continue;
                    }
                    (cpus, at)
                }
            };
            // A memory-less node can hold none of the memory: vCPUs there
            // are fed from elsewhere whatever the binding says.
            let fed: BTreeSet<usize> =
                host.nodes_of(&cpus).into_iter().filter(|&i| host.nodes[i].memory_bytes > 0).collect();
            let run: CpuSet = host.ids(&fed);
            if run.is_empty() || b.nodes == run {
                continue;
            }
            let away = b.nodes.difference(&run);
            let unfed = run.difference(&b.nodes);
            let who = match b.cell {
                Some(id) => format!("guest cell {id}'s memory"),
                None => "the VM's memory".to_string(),
            };
            let message = if !away.is_empty() {
                format!("{who} is bound to host nodes {} but its vCPUs run on nodes {run}: memory on node(s) {away} is remote", b.nodes)
            } else {
                format!("{who} is bound to host nodes {} but its vCPUs also run on nodes {unfed}, where every access is remote", b.nodes)
            };
            let fix = match b.cell {
                Some(id) => format!("bind cell {id} to the node its vCPUs are pinned to: <memnode cellid='{id}' mode='strict' nodeset='{run}'/>"),
                None => format!("bind memory to the vCPUs' nodes: <memory mode='strict' nodeset='{run}'/> (or pin the vCPUs to nodes {})", b.nodes),
            };
            let mut ev = vec![b.at.clone()];
            ev.extend(cpu_at);
            out.push(finding(self, vm, message, ev, REMOTE_IMPACT, fix));
        }
        out
    }
}

/// Huge pages the host's nodes do not have.
#[derive(Clone, Copy, Debug, Default)]
pub struct HugepagesMissing;

impl Rule for HugepagesMissing {
    fn id(&self) -> &'static str {
        "hugepages-missing"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "huge pages requested that the host's nodes do not have"
    }

    fn check(&self, vm: &VmView, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        let mut out = Vec::new();
        // The nodes memory may come from: the binding, else all nodes.
        let bound: Vec<usize> = match vm.vm_binding() {
            Some(b) => b.nodes.iter().filter_map(|id| host.node_pos(id)).collect(),
            None => (0..host.nodes.len()).collect(),
        };
        for wish in &vm.hugepages {
            let size = wish.size_bytes.unwrap_or(DEFAULT_HUGEPAGE);
            let memory: u64 = match &wish.cells {
                Some(ids) if !vm.cells.is_empty() => {
                    vm.cells.iter().filter(|c| ids.contains(c.id)).map(|c| c.memory_bytes).sum()
                }
                _ => vm.memory_bytes,
            };
            let need = memory.div_ceil(size.max(1));
            let have: u64 = bound
                .iter()
                .filter_map(|&p| host.nodes.get(p))
                .flat_map(|n| n.hugepages.iter())
                .filter(|(s, _)| *s == size)
                .map(|(_, pages)| *pages)
                .sum();
            if have >= need {
                continue;
            }
            let where_ = if vm.vm_binding().is_some() {
                format!("on nodes {}", host.ids(&bound.iter().copied().collect()))
            } else {
                "on the host".to_string()
            };
            let message = format!(
                "{} of {} pages needed for {} but {} {where_}",
                need,
                gib(size),
                gib(memory),
                if have == 0 { "none are reserved".to_string() } else { format!("only {have} are available") }
            );
            let per_node = need.div_ceil(bound.len().max(1) as u64);
            let fix = format!(
                "reserve the pages before starting the VM: echo {per_node} > /sys/devices/system/node/nodeN/hugepages/hugepages-{}kB/nr_hugepages on each node the VM uses, or drop <hugepages> / use a size the host has",
                size >> 10
            );
            out.push(finding(self, vm, message, [wish.at.clone(), vm.memory_at.clone()], HUGE_IMPACT, fix));
        }
        out
    }
}

/// A passthrough device on another node than the VM's CPUs.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceRemote;

impl Rule for DeviceRemote {
    fn id(&self) -> &'static str {
        "device-remote"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a passthrough PCI device on a different node than the VM's CPUs"
    }

    fn check(&self, vm: &VmView, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        let Some(nodes) = vcpu_nodes(vm, cx) else { return Vec::new() };
        let (k, _) = span(vm, host);
        let mut out = Vec::new();
        for dev in &vm.devices {
            let same: Vec<_> =
                host.topology.devices().iter().filter(|d| d.address.eq_ignore_ascii_case(&dev.address)).collect();
            // An address the host lists twice on different nodes (seen in
            // hwloc exports) is ambiguous: no finding rather than a guess.
            let Some(hd) = same.first() else { continue };
            if same.iter().any(|d| d.node != hd.node) {
                continue;
            }
            let Some(node) = hd.node else { continue };
            let Some(pos) = host.node_pos(node.0) else { continue };
            if nodes.contains(&pos) {
                continue;
            }
            let run = host.ids(&nodes);
            let message = format!(
                "passthrough device {} ({}) is on node{} but the VM's vCPUs run on nodes {run}",
                dev.address,
                hd.name.as_deref().unwrap_or(hd.kind.as_str()),
                node.0
            );
            let fix = match vm.format {
                SourceFormat::Vmx => format!("set numa.nodeAffinity = \"{}\" (the device's node) or pass through a device on node(s) {run}", node.0),
                _ => format!(
                    "place the VM on {} including node{} (numaplace lint --fix asks the planner for the device's node), or use a device on node(s) {run}",
                    plural(k, "node"),
                    node.0
                ),
            };
            out.push(finding(self, vm, message, [dev.at.clone()], DEVICE_IMPACT, fix));
        }
        out
    }
}
