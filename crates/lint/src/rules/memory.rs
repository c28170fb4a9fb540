//! Rules about where memory and devices are: a VM whose memory does not
//! fit the node its vCPUs fit, memory bound away from the vCPUs, huge
//! pages the host does not have, a passthrough device on another node.

use super::layout::Layout;
use super::{allowed_cpus, finding, gib, nodes_needed, plural, resize_only, span, usable, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::host::{HostView, HugePool};
use crate::vm::{BindMode, Source, SourceFormat, Vm};
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
fn vcpu_nodes(vm: &Vm, cx: &Context<'_>) -> Option<BTreeSet<usize>> {
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

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        // Memory bound `strict` or `restrictive` does not spill: a binding
        // too small for it is a VM that cannot get its memory.
        let bound = bound_too_small(self, vm, cx);
        if !bound.is_empty() {
            return bound;
        }
        if vm.vcpus > host.node_pus() || vm.cells.len() > 1 {
            return Vec::new();
        }
        // A request without a node limit is split by the planner itself.
        if vm.format == SourceFormat::Request && vm.max_nodes != Some(1) {
            return Vec::new();
        }
        // An affinity that holds the memory to too few nodes is
        // affinity-too-narrow's finding: its fix widens the affinity first.
        if affinity_too_narrow(vm, host).is_some() {
            return Vec::new();
        }
        // The node it is confined to, else the largest.
        let (node_mem, which) = match vcpu_nodes(vm, cx) {
            Some(nodes) if nodes.len() == 1 => {
                let n = nodes.first().and_then(|&p| host.nodes.get(p));
                (n.map_or(0, |n| n.memory_bytes), n.map(|n| format!("node{}", n.id.0)).unwrap_or_default())
            }
            // ESXi gives a VM whose vCPUs fit one node one home node (one
            // NUMA client) even when its affinity allows more: the memory
            // that does not fit that node is remote, and the guest sees
            // one node.
            Some(nodes) if vm.format == SourceFormat::Vmx => {
                let largest = nodes.iter().filter_map(|&p| host.nodes.get(p)).map(|n| n.memory_bytes).max();
                (largest.unwrap_or(0), "the largest node it may use".to_string())
            }
            Some(_) => return Vec::new(),
            // Hot-add on a VM free to span nodes: cpu-hotadd-wide's
            // finding, whose fix also splits the memory.
            None if vm.hotadd.is_some() => return Vec::new(),
            None => (host.node_memory(), "the largest node".to_string()),
        };
        let total = vm.memory_bytes.saturating_add(host.overhead(vm.memory_bytes));
        if total <= node_mem {
            return Vec::new();
        }
        // What the kernel does with the pages that do not fit, by the
        // binding's mode (strict and restrictive were handled above).
        let spill = match vm.vm_binding().map(|b| (b.mode, &b.nodes)) {
            Some((BindMode::Preferred, nodes)) => format!(
                "bound `preferred` to node(s) {nodes}: once they are full the kernel takes pages from other nodes, so part of the memory is remote"
            ),
            Some((BindMode::Interleave, nodes)) => format!(
                "interleaved over node(s) {nodes}: once they are full the kernel takes pages from other nodes, so part of the memory is remote"
            ),
            _ => "once the node is full the kernel takes pages from other nodes, so part of the memory is remote".to_string(),
        };
        let message = format!(
            "{} vCPUs fit one node but {} of memory plus {} overhead does not fit {} ({}): {spill}",
            vm.vcpus,
            gib(vm.memory_bytes),
            gib(host.overhead(vm.memory_bytes)),
            which,
            usable(host, node_mem)
        );
        let fits = node_mem.saturating_sub(256 << 20) / 65 * 64;
        let k = nodes_needed(vm, host).max(2);
        let fix = match vm.format {
            SourceFormat::Vmx => format!(
                "give it {} so its memory spreads over {}: numa.vcpu.maxPerVirtualNode = \"{}\"{} (numaplace lint --fix; memSize unchanged); or size memSize to \"{}\" or less (a resize: --allow-resize)",
                plural(k, "virtual NUMA node"),
                plural(k, "host node"),
                vm.vcpus.div_ceil(k),
                if vm.vcpus < crate::vmx::VNUMA_MIN_VCPUS { format!(" and numa.vcpu.min = \"{}\"", vm.vcpus) } else { String::new() },
                fits >> 20
            ),
            SourceFormat::Libvirt => format!(
                "declare one guest cell per host node it needs ({k}), each pinned and bound to its node (numaplace lint --fix); or size memory to at most {} (a resize: --allow-resize)",
                gib(fits)
            ),
            SourceFormat::Request => "drop \"max_nodes\": 1 so the planner can split the memory over nodes, or ask for less memory".to_string(),
        };
        let mut f = finding(self, vm, message, [vm.ev(vm.memory_at), vm.ev(vm.vcpus_at)], FIT_IMPACT, fix);
        if vm.vcpus < k && vm.format != SourceFormat::Request {
            // One vCPU cannot be split over two nodes: only a smaller
            // memory keeps it local.
            f = resize_only(f);
        }
        vec![f]
    }
}

/// The host nodes a `.vmx`'s affinity settings hold its memory to, with
/// the lines that say so, when they are fewer than the VM needs.
///
/// ESXi places a VM's vCPUs and memory only on the nodes of
/// `numa.nodeAffinity`, and its memory on the home nodes of the CPUs
/// `sched.cpu.affinity` allows; both hold, so the nodes are the
/// intersection. libvirt's `<vcpu cpuset>` confines no memory (the kernel
/// spills it to other nodes; a strict `<numatune>` does confine it, which
/// memory-exceeds-node's binding check reports), so only `.vmx` files
/// are read here.
pub(crate) fn affinity_too_narrow(vm: &Vm, host: &HostView<'_>) -> Option<(BTreeSet<usize>, u32, Vec<Source>)> {
    if vm.format != SourceFormat::Vmx {
        return None;
    }
    let mut nodes: Option<BTreeSet<usize>> = None;
    let mut at = Vec::new();
    if let Some((ids, line)) = &vm.node_affinity {
        nodes = Some(ids.iter().filter_map(|id| host.node_pos(id)).collect());
        at.push(vm.ev(*line));
    }
    if let Some((cpus, line)) = &vm.cpuset {
        let of_cpus = host.nodes_of(cpus);
        nodes = Some(match nodes {
            Some(n) => n.intersection(&of_cpus).copied().collect(),
            None => of_cpus,
        });
        at.push(vm.ev(*line));
    }
    // Nodes the host lacks are unknown-reference's finding.
    let nodes = nodes.filter(|n| !n.is_empty())?;
    let need = nodes_needed(vm, host);
    let have: u64 = nodes.iter().filter_map(|&p| host.nodes.get(p)).map(|n| n.memory_bytes).sum();
    let with_overhead = vm.memory_bytes.saturating_add(host.overhead(vm.memory_bytes));
    (with_overhead > have && (nodes.len() as u32) < need).then_some((nodes, need, at))
}

/// A `.vmx` whose `numa.nodeAffinity` or `sched.cpu.affinity` holds its
/// memory to fewer host nodes than the memory needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct AffinityTooNarrow;

impl Rule for AffinityTooNarrow {
    fn id(&self) -> &'static str {
        "affinity-too-narrow"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a .vmx node or CPU affinity that holds the VM's memory to fewer host nodes than it needs"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        let Some((nodes, need, at)) = affinity_too_narrow(vm, host) else { return Vec::new() };
        let have: u64 = nodes.iter().filter_map(|&p| host.nodes.get(p)).map(|n| n.memory_bytes).sum();
        let ids = host.ids(&nodes);
        let names: Vec<String> = ids.iter().map(|id| format!("node{id}")).collect();
        let by = match (vm.node_affinity.is_some(), vm.cpuset.is_some()) {
            (true, true) => "numa.nodeAffinity and sched.cpu.affinity hold",
            (true, false) => "numa.nodeAffinity holds",
            _ => "sched.cpu.affinity holds",
        };
        let message = format!(
            "{by} the VM to {} ({} of memory), but its {} of memory plus {} overhead needs {}: the memory that does not fit is remote from its vCPUs, and virtual NUMA nodes cannot spread it while the affinity stays",
            names.join(", "),
            gib(have),
            gib(vm.memory_bytes),
            gib(host.overhead(vm.memory_bytes)),
            plural(need, "host node")
        );
        let fix = format!(
            "widen numa.nodeAffinity to {} and sched.cpu.affinity to their CPUs (or remove both), and give the VM {} (numa.vcpu.maxPerVirtualNode; numaplace lint --fix does all of it, memSize unchanged)",
            plural(need, "node"),
            plural(need, "virtual NUMA node")
        );
        let mut ev = at;
        ev.push(vm.ev(vm.memory_at));
        vec![finding(self, vm, message, ev, FIT_IMPACT, fix)]
    }
}

/// Whether every guest cell with memory has a per-cell binding that
/// `counts`: then the whole-VM binding only bounds those and is not
/// checked on its own.
fn every_cell_bound(vm: &Vm, counts: impl Fn(&crate::vm::Binding) -> bool) -> bool {
    !vm.cells.is_empty()
        && vm.cells.iter().all(|c| c.memory_bytes == 0 || vm.bindings.iter().any(|b| b.cell == Some(c.id) && counts(b)))
}

/// Findings for memory bound `strict` or `restrictive` to nodes too small
/// for it (the whole VM's with overhead, or one cell's).
fn bound_too_small(rule: &MemoryExceedsNode, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
    let host = cx.host;
    let every_cell_bound = every_cell_bound(vm, |_| true);
    let mut out = Vec::new();
    for b in &vm.bindings {
        let mode = match b.mode {
            BindMode::Strict => "strict",
            BindMode::Restrictive => "restrictive",
            BindMode::Preferred | BindMode::Interleave => continue,
        };
        let (need, who) = match b.cell {
            None if every_cell_bound => continue,
            None => (
                vm.memory_bytes.saturating_add(host.overhead(vm.memory_bytes)),
                format!("{} of memory plus {} overhead", gib(vm.memory_bytes), gib(host.overhead(vm.memory_bytes))),
            ),
            Some(id) => match vm.cells.iter().find(|c| c.id == id) {
                Some(c) => (c.memory_bytes, format!("guest cell {id}'s {}", gib(c.memory_bytes))),
                None => continue,
            },
        };
        let known: Vec<_> =
            b.nodes.iter().filter_map(|id| host.node_pos(id)).filter_map(|p| host.nodes.get(p)).collect();
        if known.is_empty() {
            continue; // unknown-reference names the missing node
        }
        let have: u64 = known.iter().map(|n| n.memory_bytes).sum();
        if need <= have {
            continue;
        }
        let how = if mode == "strict" {
            "the kernel allocates only there (libvirt's `strict` sets both the memory policy and the cgroup's cpuset.mems)"
        } else {
            "the cgroup's cpuset.mems lets the kernel allocate only there"
        };
        let message = format!(
            "{who} is bound `{mode}` to host node(s) {} ({}): {how}, so the VM fails to start or is killed by the OOM killer when they are full; none of it goes remote",
            // The nodes that exist, whose memory `have` counts (the others
            // are unknown-reference's).
            known.iter().map(|n| n.id.0).collect::<CpuSet>(),
            usable(host, have)
        );
        let k = nodes_needed(vm, host).max(2);
        let fix = format!(
            "bind to enough nodes for the memory: one guest cell per host node ({k}), each pinned and bound `strict` to its node (numaplace lint --fix), or mode='preferred' to let the excess go remote; or less memory (a resize)"
        );
        let mut f = finding(rule, vm, message, [vm.ev(b.at), vm.ev(vm.memory_at)], FIT_IMPACT, fix);
        f.severity = Severity::Error;
        out.push(f);
    }
    out
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

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
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
            let every_cell_bound = every_cell_bound(vm, |o| o.mode != BindMode::Interleave);
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
                                at.push(vm.ev(p.at));
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
            // Nodes the host lacks are unknown-reference's: the binding's
            // place is the nodes that exist, as the layout reads it.
            let bound: CpuSet = b.nodes.iter().filter(|&id| host.node_pos(id).is_some()).collect();
            if run.is_empty() || bound.is_empty() || bound == run {
                continue;
            }
            let away = bound.difference(&run);
            let unfed = run.difference(&bound);
            let who = match b.cell {
                Some(id) => format!("guest cell {id}'s memory"),
                None => "the VM's memory".to_string(),
            };
            let message = if !away.is_empty() {
                format!("{who} is bound to host nodes {bound} but its vCPUs run on nodes {run}: memory on node(s) {away} is remote")
            } else {
                format!("{who} is bound to host nodes {bound} but its vCPUs also run on nodes {unfed}, where every access is remote")
            };
            let fix = match b.cell {
                Some(id) => format!("bind cell {id} to the node its vCPUs are pinned to: <memnode cellid='{id}' mode='strict' nodeset='{run}'/>"),
                None => format!("bind memory to the vCPUs' nodes: <memory mode='strict' nodeset='{run}'/> (or pin the vCPUs to nodes {})", b.nodes),
            };
            let mut ev = vec![vm.ev(b.at)];
            ev.extend(cpu_at);
            out.push(finding(self, vm, message, ev, REMOTE_IMPACT, fix));
        }
        out.extend(remote_memory_devices(self, vm, cx));
        if !out.is_empty() {
            let layout = Layout::of(vm, host);
            for f in &mut out {
                f.layout = Some(layout.clone());
            }
        }
        out
    }
}

/// Memory devices (`<memory model='dimm'>`) whose `<source><nodemask>`
/// takes their memory from host nodes other than those of the vCPUs of
/// the guest cell they attach to (`<target><node>`), or of the whole VM's
/// vCPUs when it has no cells. Nodes the host lacks and cells the VM
/// lacks are unknown-reference's.
fn remote_memory_devices(rule: &MemoryBindingRemote, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
    let host = cx.host;
    let layout = Layout::of(vm, host);
    let mut out = Vec::new();
    for dev in &vm.memory_devices {
        let Some(mask) = &dev.host_nodes else { continue };
        let mask: CpuSet = mask.iter().filter(|&id| host.node_pos(id).is_some()).collect();
        if mask.is_empty() {
            continue;
        }
        let (run, whose) = match dev.cell {
            Some(id) => match layout.cells.iter().find(|c| c.id == id).and_then(|c| c.cpu_nodes.clone()) {
                Some(nodes) => (nodes, format!("guest cell {id}'s vCPUs")),
                None => continue,
            },
            None if vm.cells.is_empty() => match vcpu_nodes(vm, cx) {
                Some(nodes) => (host.ids(&nodes), "the VM's vCPUs".to_string()),
                None => continue,
            },
            None => continue,
        };
        let away = mask.difference(&run);
        if away.is_empty() {
            continue;
        }
        let message = format!(
            "memory device ({}, {}) takes its memory from host nodes {mask} but {whose} run on nodes {run}: its memory on node(s) {away} is remote",
            if dev.model.is_empty() { "memory" } else { dev.model.as_str() },
            gib(dev.size_bytes)
        );
        let fix = format!("set the device's <source><nodemask>{run}</nodemask> (or attach it to a cell whose vCPUs run on nodes {mask})");
        out.push(finding(rule, vm, message, [vm.ev(dev.at)], REMOTE_IMPACT, fix));
    }
    out
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

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        let layout = Layout::of(vm, host);
        let mut out = Vec::new();
        for wish in &vm.hugepages {
            let size = wish.size_bytes.unwrap_or(DEFAULT_HUGEPAGE);
            // A size no node offers is unknown-reference's finding.
            if host.lacks_page_size(size) {
                continue;
            }
            let memory: u64 = match &wish.cells {
                Some(ids) if !vm.cells.is_empty() => {
                    vm.cells.iter().filter(|c| ids.contains(c.id)).map(|c| c.memory_bytes).sum()
                }
                _ => vm.memory_bytes,
            };
            let pages = |bytes: u64| bytes.div_ceil(size.max(1));
            let sysfs = |id: u32| {
                format!("/sys/devices/system/node/node{id}/hugepages/hugepages-{}kB/nr_hugepages", size >> 10)
            };
            let (message, fix) = match page_homes(&layout, wish.cells.as_ref(), memory, host) {
                Some(homes) => {
                    // (node, pages needed, pool) for the nodes short of pages.
                    let short: Vec<(u32, u64, HugePool)> = homes
                        .iter()
                        .filter_map(|&(p, bytes)| {
                            let n = host.nodes.get(p)?;
                            let pool = n.pool(size).unwrap_or(HugePool { size_bytes: size, total: 0, free: 0 });
                            (pages(bytes) > pool.free).then_some((n.id.0, pages(bytes), pool))
                        })
                        .collect();
                    if short.is_empty() {
                        continue;
                    }
                    let have: Vec<String> = short
                        .iter()
                        .map(|(id, need, pool)| format!("node{id} needs {need} and has {} free", pool.free))
                        .collect();
                    let steps: Vec<String> = short
                        .iter()
                        .map(|(id, need, pool)| {
                            let more = need - pool.free;
                            format!("node{id}: {more} more, echo {} > {}", pool.total + more, sysfs(*id))
                        })
                        .collect();
                    (
                        format!(
                            "{} pages of {} are needed for {} on the nodes it is bound to, but {}",
                            pages(memory),
                            gib(size),
                            gib(memory),
                            have.join(", ")
                        ),
                        format!(
                            "reserve the pages on each node before starting the VM ({}), or use a size the host has; dropping <hugepages> changes the VM (--allow-resize)",
                            steps.join("; ")
                        ),
                    )
                }
                None => {
                    let need = pages(memory);
                    let free: u64 = host.nodes.iter().filter_map(|n| n.pool(size)).map(|p| p.free).sum();
                    if free >= need {
                        continue;
                    }
                    let nodes = host.cpu_node_count().max(1);
                    (
                        format!(
                            "{need} pages of {} are needed for {} but {} on the host",
                            gib(size),
                            gib(memory),
                            if free == 0 { "none are free".to_string() } else { format!("only {free} are free") }
                        ),
                        format!(
                            "reserve {} more pages in total before starting the VM: unbound, its memory may come from any node (about {} more on each of {}, e.g. {}); better, bind it to its nodes (numaplace lint --fix) and reserve them there",
                            need - free,
                            (need - free).div_ceil(u64::from(nodes)),
                            plural(nodes, "node"),
                            sysfs(host.cpu_nodes().next().map_or(0, |(_, n)| n.id.0))
                        ),
                    )
                }
            };
            let mut f = finding(self, vm, message, [vm.ev(wish.at), vm.ev(vm.memory_at)], HUGE_IMPACT, fix);
            f.layout = Some(layout.clone());
            out.push(f);
        }
        out
    }
}

/// Where a VM's huge pages would be taken, as (node position, bytes):
/// where the [`Layout`] puts the memory of the cells they back (each
/// cell's memory split evenly over its nodes), or `memory` split over a
/// whole-VM binding; `None` when the memory may come from any node.
fn page_homes(layout: &Layout, cells: Option<&CpuSet>, memory: u64, host: &HostView<'_>) -> Option<Vec<(usize, u64)>> {
    let homes = layout.memory_homes(cells, memory)?;
    homes.into_iter().map(|(id, bytes)| Some((host.node_pos(id)?, bytes))).collect()
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

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
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
            let mut f = finding(self, vm, message, [vm.ev(dev.at)], DEVICE_IMPACT, fix);
            // numaplace placed it so on purpose, and its plan says why
            // (the device's node could not hold the VM): worth knowing,
            // not a mistake in the file.
            if vm.planned_remote_devices.iter().any(|a| a.eq_ignore_ascii_case(&dev.address)) {
                super::as_info(
                    &mut f,
                    " (planned so by numaplace: the plan's notes say why)",
                    &format!("free CPUs on node{} and plan the VM again, or use a device on node(s) {run}", node.0),
                );
            }
            out.push(f);
        }
        out
    }
}
