//! Rules about the guest NUMA cells: how many there are for the host
//! nodes the VM spans, whether each maps onto one host node, and whether
//! a guest socket or core is cut between two cells.

use super::layout::{CellKind, Layout};
use super::{finding, plural, span, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{Cell, SourceFormat, Vm};
use numaplace_topo::CpuSet;
use std::collections::{BTreeMap, BTreeSet};

/// Cost of cells that do not map evenly (background § Guest NUMA topology).
pub const UNEVEN_IMPACT: &str = "docs/background.md § Guest NUMA topology [000], ESXi 6.0 AIDA64 PhotoWorxx on a \
2 x 12-core host: 24 vCPUs as 3 sockets x 8 cores (3 guest nodes) 23600 vs 53000 as 2 or 4 guest nodes; 20 vCPUs \
as 5 x 4 (5 guest nodes) 23000 vs 48900 as 4 x 5: about half speed";

/// Cost of one guest node over several host nodes (background § CPU
/// hot-add: the measurement is of that presentation, which hot-add forces).
pub const ONE_NODE_IMPACT: &str = "docs/background.md § CPU hot-add [001]: the same VM shown one guest node instead \
of two (what CPU hot-add forces), a 16 vCPU / 200 GB VM on a 2 x 8-core, 2 x 128 GB host: idle memory latency +25 ns \
(+22%), PassMark Memory Threaded 28662 vs 52927 (-46%), Memory Mark 1654 vs 1975, HammerDB SQL Server 5293 vs 5713 \
batch requests/s (-8%)";

/// Cost of many cells per host node (background § Guest NUMA topology).
pub const MANY_IMPACT: &str = "docs/background.md § Guest NUMA topology [000], ESXi 6.0 PhotoWorxx on 2 x 12-core \
nodes: 24 vCPUs as 6 guest nodes 53000, but 24500 when host memory was unbalanced; 48 vCPUs as 24 guest nodes \
35800 vs 53000 (12 guest nodes measured 50433, so this is a warning, not an error)";

/// Cost of a socket or core cut between cells (background § Guest NUMA topology).
pub const SOCKET_IMPACT: &str = "the guest scheduler treats a socket as one cache and memory domain and a core's \
threads as one core; docs/background.md § Guest NUMA topology [000]: 24 vCPUs as 3 sockets x 8 cores on 2 x \
12-core nodes (sockets cut across host nodes) ran PhotoWorxx at 23600 vs 53000";

fn cells_at(vm: &Vm) -> Vec<crate::vm::Source> {
    vm.cells.iter().map(|c| vm.ev(c.at)).collect()
}

fn shape_fix(vm: &Vm, nodes: u32) -> String {
    let per = vm.vcpus / nodes.max(1);
    match vm.format {
        SourceFormat::Vmx => format!(
            "set cpuid.coresPerSocket = \"{per}\" and numa.vcpu.maxPerVirtualNode = \"{per}\" so ESXi builds {}",
            plural(nodes, "guest node")
        ),
        _ => format!(
            "declare {} of {per} vCPUs, one per host node, each cell pinned and bound to its node (numaplace lint --fix)",
            plural(nodes, "guest cell")
        ),
    }
}

/// Host node positions of a cell's vCPUs, when all of them are pinned.
fn cell_nodes(vm: &Vm, cell: &Cell, cx: &Context<'_>) -> Option<BTreeSet<usize>> {
    let mut cpus = CpuSet::new();
    for v in cell.vcpus.iter() {
        cpus = cpus.union(&vm.pin(v)?.cpus);
    }
    Some(cx.host.nodes_of(&cpus))
}

/// Guest cells that do not map evenly onto the host nodes the VM spans.
#[derive(Clone, Copy, Debug, Default)]
pub struct GuestCellsUneven;

impl Rule for GuestCellsUneven {
    fn id(&self) -> &'static str {
        "guest-cells-uneven"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "guest NUMA cells that do not map evenly onto the host nodes the VM spans"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let layout = Layout::of(vm, cx.host);
        let c = layout.cpu_cells();
        if c < 2 {
            return Vec::new();
        }
        let k = layout.span;
        let mut out = Vec::new();
        if !c.is_multiple_of(k) {
            let message = format!(
                "{} on {}: the cells cannot split evenly over the host nodes, so some cell straddles two host nodes",
                plural(c, "guest NUMA cell"),
                plural(k, "host node")
            );
            let mut ev = cells_at(vm);
            ev.push(vm.ev(vm.vcpus_at));
            let mut f = finding(self, vm, message, ev, UNEVEN_IMPACT, shape_fix(vm, k));
            f.layout = Some(layout);
            out.push(f);
            return out;
        }
        // With pinning known: each cell on one node, and as many cells on
        // every node.
        let mut per_node: BTreeMap<usize, u32> = BTreeMap::new();
        for cell in vm.cells.iter().filter(|c| !c.vcpus.is_empty()) {
            let Some(nodes) = cell_nodes(vm, cell, cx) else { return out };
            if nodes.len() > 1 {
                let ids = cx.host.ids(&nodes);
                let message = format!(
                    "guest cell {} has vCPUs {} pinned to host nodes {ids}: one guest node spans several host nodes",
                    cell.id, cell.vcpus
                );
                let ev = std::iter::once(vm.ev(cell.at))
                    .chain(cell.vcpus.iter().filter_map(|v| vm.pin(v)).map(|p| vm.ev(p.at)));
                out.push(finding(self, vm, message, ev, UNEVEN_IMPACT, shape_fix(vm, k)));
            } else if let Some(&n) = nodes.first() {
                *per_node.entry(n).or_default() += 1;
            }
        }
        let counts: BTreeSet<u32> = per_node.values().copied().collect();
        if out.is_empty() && counts.len() > 1 {
            let detail: Vec<String> = per_node
                .iter()
                .filter_map(|(&n, &count)| cx.host.nodes.get(n).map(|f| format!("{} on node{}", count, f.id.0)))
                .collect();
            let message = format!("guest cells are spread unevenly over host nodes ({})", detail.join(", "));
            out.push(finding(self, vm, message, cells_at(vm), UNEVEN_IMPACT, shape_fix(vm, k)));
        }
        for f in &mut out {
            f.layout = Some(layout.clone());
        }
        out
    }
}

/// A libvirt domain whose vCPUs need, or are pinned to, more than one host
/// node while it declares at most one guest cell: the guest sees one NUMA
/// node, as with CPU hot-add, and cannot keep its memory local. The
/// default domain (`virt-install` writes no `<numa>`) is this case as soon
/// as it is wider than a node.
#[derive(Clone, Copy, Debug, Default)]
pub struct GuestCellsMissing;

impl Rule for GuestCellsMissing {
    fn id(&self) -> &'static str {
        "guest-cells-missing"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a domain whose vCPUs need or run on several host nodes, shown one guest NUMA node"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        // ESXi builds virtual nodes itself (the .vmx view has them), a
        // request's cells are the planner's, and hot-add is
        // cpu-hotadd-wide's finding.
        if vm.format != SourceFormat::Libvirt || vm.cells.len() > 1 || vm.hotadd.is_some() {
            return Vec::new();
        }
        let host = cx.host;
        // Where the vCPUs may run, when the domain says: each vCPU pinned
        // inside one node and the vCPUs over several nodes is a spread the
        // guest cannot see; all of them within one node is one guest node
        // told the truth.
        let allowed = super::allowed_cpus(vm, host);
        let spread = allowed.as_ref().map(|(cpus, _)| host.nodes_of(cpus).len() as u32);
        let per_vcpu_local = vm.fully_pinned() && vm.pins.iter().all(|p| host.nodes_of(&p.cpus).len() == 1);
        let wide = super::is_wide(vm, host);
        let message = match spread {
            Some(0 | 1) => return Vec::new(),
            Some(k) if per_vcpu_local => format!(
                "{} pinned over {} but the domain declares {}: the guest sees one NUMA node and cannot keep memory local",
                plural(vm.vcpus, "vCPU"),
                plural(k, "host node"),
                if vm.cells.is_empty() { "no guest NUMA cells" } else { "one guest NUMA cell" }
            ),
            _ if wide => format!(
                "{} vCPUs, more than the {} cores of one host node, and the domain declares {}: the guest sees one NUMA node over several host nodes and cannot keep memory local",
                vm.vcpus,
                host.node_cores(),
                if vm.cells.is_empty() { "no guest NUMA cells" } else { "one guest NUMA cell" }
            ),
            _ => return Vec::new(),
        };
        let k = super::nodes_needed(vm, host).max(spread.unwrap_or(0)).max(2);
        let mut ev = vec![vm.ev(vm.vcpus_at)];
        if let Some((_, at)) = allowed {
            ev.extend(at.into_iter().take(4));
        }
        ev.extend(cells_at(vm));
        let fix = format!(
            "declare {}, one per host node, each pinned and bound to its node (numaplace lint --fix; applies at the next cold boot)",
            plural(k, "guest cell")
        );
        vec![finding(self, vm, message, ev, ONE_NODE_IMPACT, fix)]
    }
}

/// More than two guest cells per host node.
#[derive(Clone, Copy, Debug, Default)]
pub struct ManyCellsPerNode;

impl Rule for ManyCellsPerNode {
    fn id(&self) -> &'static str {
        "guest-cells-per-node"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "three or more guest NUMA cells per host node (6 or 8 cells on two 12-core nodes)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let layout = Layout::of(vm, cx.host);
        // Memory-only and empty cells share no CPUs' memory: they are
        // guest-cells-cpuless's (a tier or a placeholder, not a split).
        let c = layout.cpu_cells();
        let k = layout.span;
        if c < 3 || !c.is_multiple_of(k) || c / k < 3 {
            return Vec::new();
        }
        let message = format!(
            "{} on {}: {} guest nodes per host node, which the guest treats as remote from each other though they share memory",
            plural(c, "guest NUMA cell"),
            plural(k, "host node"),
            c / k
        );
        let mut ev = cells_at(vm);
        ev.push(vm.shape.as_ref().and_then(|s| vm.ev(s.at)));
        let mut f = finding(self, vm, message, ev, MANY_IMPACT, shape_fix(vm, k));
        f.layout = Some(layout);
        vec![f]
    }
}

/// Guest cells without vCPUs: memory-only cells (a memory tier the guest
/// sees as a CPU-less node) and empty cells (neither vCPUs nor memory,
/// as ACPI generic initiators use). Neither is a split of the VM's
/// vCPUs, so the cell-count rules leave them out; this rule says where
/// such a cell is, so the operator sees it was read.
#[derive(Clone, Copy, Debug, Default)]
pub struct GuestCellsCpuless;

impl Rule for GuestCellsCpuless {
    fn id(&self) -> &'static str {
        "guest-cells-cpuless"
    }

    fn severity(&self) -> Severity {
        Severity::Info
    }

    fn summary(&self) -> &'static str {
        "guest NUMA cells without vCPUs: memory-only cells and empty cells, and where their memory is"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let layout = Layout::of(vm, cx.host);
        let mut out = Vec::new();
        for (place, cell) in layout.cells.iter().zip(&vm.cells) {
            let message = match place.kind {
                CellKind::MemoryOnly => format!(
                    "guest cell {} has {} of memory and no vCPUs: the guest sees a CPU-less node (a memory tier), its memory {}",
                    place.id,
                    super::gib(place.memory_bytes),
                    match &place.memory_nodes {
                        Some(n) => format!("bound to host node(s) {n}"),
                        None => "on whichever host node the kernel picks".to_string(),
                    }
                ),
                CellKind::Empty => format!(
                    "guest cell {} has neither vCPUs nor memory: the guest sees an empty node (what ACPI generic initiators use for devices)",
                    place.id
                ),
                CellKind::Ordinary | CellKind::CpusOnly => continue,
            };
            let mut f = finding(
                self,
                vm,
                message,
                [vm.ev(cell.at)],
                "none measured: a CPU-less guest node holds no vCPUs to slow",
                "none needed".to_string(),
            );
            super::as_info(&mut f, "", "give the cell vCPUs (cpus='...') or remove it");
            f.layout = Some(layout.clone());
            out.push(f);
        }
        out
    }
}

/// A guest socket or core whose vCPUs sit in two cells.
#[derive(Clone, Copy, Debug, Default)]
pub struct SocketSpansCells;

impl Rule for SocketSpansCells {
    fn id(&self) -> &'static str {
        "socket-spans-cells"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "a guest socket or core whose vCPUs sit in two guest NUMA cells"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let Some(shape) = &vm.shape else { return Vec::new() };
        if vm.cells.len() < 2 {
            return Vec::new();
        }
        let cells_of = |first: u32, count: u32| -> BTreeSet<u32> {
            (first..first.saturating_add(count).min(vm.vcpus)).filter_map(|v| vm.cell_of(v).map(|c| c.id)).collect()
        };
        let mut out = Vec::new();
        // A shape larger than the VM (which libvirt refuses) is cut to it,
        // so the walks below stay within the vCPUs.
        let threads = shape.threads.clamp(1, vm.vcpus.max(1));
        let cores: Vec<u32> =
            (0..vm.vcpus.div_ceil(threads)).filter(|&i| cells_of(i * threads, threads).len() > 1).collect();
        // With dies, each die is what must sit in one cell (the guest
        // believes a die shares a cache); a socket of several dies is free
        // to hold several cells, as a package of several nodes does.
        let (per_socket, unit_name) = if shape.dies > 1 {
            (shape.per_die().clamp(1, vm.vcpus.max(1)), "die")
        } else {
            (shape.per_socket().clamp(1, vm.vcpus.max(1)), "socket")
        };
        // Sockets cut into cells mirror hosts that have several nodes per
        // package (SNC, EPYC NPS); there only a cut core is wrong.
        let sockets: Vec<u32> = if shape.dies <= 1 && cx.host.nodes_share_packages() {
            Vec::new()
        } else {
            (0..vm.vcpus.div_ceil(per_socket)).filter(|&s| cells_of(s * per_socket, per_socket).len() > 1).collect()
        };
        if cores.is_empty() && sockets.is_empty() {
            return out;
        }
        let (what, list, unit) =
            if !cores.is_empty() { ("core", cores, threads) } else { (unit_name, sockets, per_socket) };
        let first = list.first().copied().unwrap_or(0);
        let message = format!(
            "guest {what} {first} (vCPUs {}) lies in cells {}; {} of {} cut across cells ({} sockets x {} dies x {} cores x {} threads, cells of {})",
            CpuSet::range(first * unit, (first * unit + unit - 1).min(vm.vcpus.saturating_sub(1))),
            cells_of(first * unit, unit).iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" and "),
            list.len(),
            plural(if what == "core" { vm.vcpus.div_ceil(threads) } else { vm.vcpus.div_ceil(per_socket) }, what),
            shape.sockets,
            shape.dies,
            shape.cores,
            shape.threads,
            vm.cells.iter().map(|c| c.vcpus.len().to_string()).collect::<Vec<_>>().join("/")
        );
        let (k, _) = span(vm, cx.host);
        let mut ev = cells_at(vm);
        ev.push(vm.ev(shape.at));
        out.push(finding(self, vm, message, ev, SOCKET_IMPACT, shape_fix(vm, k)));
        out
    }
}
