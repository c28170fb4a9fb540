//! `unknown-reference`: a pin, binding, cell or device that names a CPU,
//! vCPU, node, guest cell, page size or PCI device that does not exist.
//! libvirt refuses such a domain, or runs it other than written (a CPU
//! list with a missing CPU, a nodeset with a missing node); every other
//! rule reads only the parts that exist, so without this one the file
//! would look clean.

use super::{finding, Context, Rule, DEFAULT_HUGEPAGE};
use crate::finding::{Finding, Severity};
use crate::vm::{Source, SourceFormat, Vm};
use numaplace_topo::CpuSet;

/// What a missing reference costs.
pub const IMPACT: &str = "the VM does not run as written: libvirt refuses to define or start a domain whose \
pins, bindings or cells name CPUs, nodes or cells that do not exist, and a hypervisor that accepts one runs the \
VM where the file does not say";

/// A reference to something the host or the VM does not have.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnknownReference;

impl UnknownReference {
    fn one(&self, vm: &Vm, message: String, at: Vec<Source>, fix: String) -> Finding {
        finding(self, vm, message, at, IMPACT, fix)
    }
}

/// `what` with `count` vCPUs: `0-3`.
fn vcpu_range(count: u32) -> String {
    if count <= 1 {
        "0".to_string()
    } else {
        format!("0-{}", count - 1)
    }
}

impl Rule for UnknownReference {
    fn id(&self) -> &'static str {
        "unknown-reference"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "a pin, binding, cell or device names a CPU, vCPU, node, guest cell, page size or device that does not exist"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let host = cx.host;
        let node_ids: CpuSet = host.nodes.iter().map(|n| n.id.0).collect();
        let cell_ids: CpuSet = vm.cells.iter().map(|c| c.id).collect();
        let mut out = Vec::new();
        self.host_cpus(vm, cx, &node_ids, &mut out);
        self.bindings_and_cells(vm, &node_ids, &cell_ids, &mut out);
        self.memory(vm, cx, &node_ids, &cell_ids, &mut out);
        self.devices(vm, cx, &mut out);
        out
    }
}

impl UnknownReference {
    /// Pins, `cpuset` and node affinity naming CPUs or nodes the host
    /// lacks, and pins of vCPUs the VM lacks.
    fn host_cpus(&self, vm: &Vm, cx: &Context<'_>, node_ids: &CpuSet, out: &mut Vec<Finding>) {
        let cpus = cx.host.topology.online_cpus();
        let replan = replan(vm);
        let bad_pins: Vec<_> = vm.pins.iter().filter(|p| !p.cpus.difference(&cpus).is_empty()).collect();
        if !bad_pins.is_empty() {
            let missing = bad_pins.iter().fold(CpuSet::new(), |acc, p| acc.union(&p.cpus.difference(&cpus)));
            out.push(self.one(
                vm,
                format!(
                    "{} pinned to CPUs {missing}, which this host does not have (its CPUs are {cpus})",
                    if bad_pins.len() == 1 { "1 vCPU is".to_string() } else { format!("{} vCPUs are", bad_pins.len()) },
                ),
                bad_pins.iter().map(|p| vm.ev(p.at)).collect(),
                replan.to_string(),
            ));
        }
        let ghosts: Vec<_> = vm.pins.iter().filter(|p| p.vcpu >= vm.vcpus).collect();
        if let Some(first) = ghosts.first() {
            out.push(self.one(
                vm,
                format!("a pin names vCPU {} but the VM has {} vCPUs ({})", first.vcpu, vm.vcpus, vcpu_range(vm.vcpus)),
                ghosts.iter().map(|p| vm.ev(p.at)).chain([vm.ev(vm.vcpus_at)]).collect(),
                format!("pin only vCPUs {} (numaplace lint --fix writes one pin per vCPU)", vcpu_range(vm.vcpus)),
            ));
        }
        if let Some((set, at)) = &vm.cpuset {
            let missing = set.difference(&cpus);
            if !missing.is_empty() {
                out.push(self.one(
                vm,
                format!("the VM may run only on CPUs {set}, of which {missing} do not exist on this host (its CPUs are {cpus})"),
                vec![vm.ev(*at)],
                replan.to_string(),
            ));
            }
        }
        if let Some((ids, at)) = &vm.node_affinity {
            let missing = ids.difference(node_ids);
            if !missing.is_empty() {
                out.push(self.one(
                vm,
                format!("the VM is restricted to host nodes {ids}, of which {missing} do not exist (the host has nodes {node_ids})"),
                vec![vm.ev(*at)],
                replan.to_string(),
            ));
            }
        }
    }

    /// Bindings naming host nodes or guest cells that do not exist, and
    /// cells holding vCPUs the VM lacks.
    fn bindings_and_cells(&self, vm: &Vm, node_ids: &CpuSet, cell_ids: &CpuSet, out: &mut Vec<Finding>) {
        let replan = replan(vm);
        for b in &vm.bindings {
            let missing = b.nodes.difference(node_ids);
            if !missing.is_empty() {
                out.push(self.one(
                vm,
                format!(
                    "memory is bound to host node(s) {}, of which {missing} do not exist (the host has nodes {node_ids})",
                    b.nodes
                ),
                vec![vm.ev(b.at)],
                replan.to_string(),
            ));
            }
            if let Some(id) = b.cell {
                if !cell_ids.contains(id) {
                    out.push(
                        self.one(
                            vm,
                            if vm.cells.is_empty() {
                                format!("a per-cell binding names guest cell {id} but the VM declares no guest cells")
                            } else {
                                format!("a per-cell binding names guest cell {id} but the VM's cells are {cell_ids}")
                            },
                            vec![vm.ev(b.at)],
                            "bind only declared cells: one <memnode> per <cell> (numaplace lint --fix writes both)"
                                .to_string(),
                        ),
                    );
                }
            }
        }
        if !vm.cells_derived {
            for c in &vm.cells {
                let beyond: CpuSet = c.vcpus.iter().filter(|&v| v >= vm.vcpus).collect();
                if !beyond.is_empty() {
                    out.push(
                        self.one(
                            vm,
                            format!(
                                "guest cell {} holds vCPUs {beyond} but the VM has {} vCPUs ({})",
                                c.id,
                                vm.vcpus,
                                vcpu_range(vm.vcpus)
                            ),
                            vec![vm.ev(c.at), vm.ev(vm.vcpus_at)],
                            "give the cells exactly the VM's vCPUs (numaplace lint --fix derives them from the pins)"
                                .to_string(),
                        ),
                    );
                }
            }
        }
    }

    /// Huge pages of a size the host lacks or for cells the VM lacks, and
    /// memory devices naming nodes or cells that do not exist.
    fn memory(&self, vm: &Vm, cx: &Context<'_>, node_ids: &CpuSet, cell_ids: &CpuSet, out: &mut Vec<Finding>) {
        let host = cx.host;
        for wish in &vm.hugepages {
            let size = wish.size_bytes.unwrap_or(DEFAULT_HUGEPAGE);
            if host.lacks_page_size(size) {
                let sizes: std::collections::BTreeSet<u64> =
                    host.nodes.iter().flat_map(|n| n.hugepages.iter().map(|p| p.size_bytes)).collect();
                let sizes: Vec<String> = sizes.into_iter().map(super::gib).collect();
                out.push(self.one(
                    vm,
                    format!(
                        "huge pages of {} are asked for but this host's nodes offer only {} pages",
                        super::gib(size),
                        sizes.join(" and ")
                    ),
                    vec![vm.ev(wish.at)],
                    format!("use a page size the host offers ({})", sizes.join(", ")),
                ));
            }
            if let Some(ids) = &wish.cells {
                let missing = ids.difference(cell_ids);
                if !missing.is_empty() && !vm.cells.is_empty() {
                    out.push(self.one(
                        vm,
                        format!("huge pages are asked for guest cells {ids}, of which {missing} are not declared"),
                        vec![vm.ev(wish.at)],
                        "name only declared cells in the page's nodeset".to_string(),
                    ));
                }
            }
        }
        for dev in &vm.memory_devices {
            if let Some(mask) = &dev.host_nodes {
                let missing = mask.difference(node_ids);
                if !missing.is_empty() {
                    out.push(self.one(
                    vm,
                    format!(
                        "a memory device ({}) takes its memory from host node(s) {mask}, of which {missing} do not exist (the host has nodes {node_ids})",
                        if dev.model.is_empty() { "memory" } else { dev.model.as_str() }
                    ),
                    vec![vm.ev(dev.at)],
                    "name only nodes the host has in the device's <source><nodemask>".to_string(),
                ));
                }
            }
            if let Some(id) = dev.cell {
                if !vm.cells.is_empty() && !cell_ids.contains(id) {
                    out.push(self.one(
                        vm,
                        format!("a memory device attaches to guest cell {id} but the VM's cells are {cell_ids}"),
                        vec![vm.ev(dev.at)],
                        "attach the device to a declared cell (<target><node>)".to_string(),
                    ));
                }
            }
        }
    }

    /// Passthrough devices the host does not list.
    fn devices(&self, vm: &Vm, cx: &Context<'_>, out: &mut Vec<Finding>) {
        let host = cx.host;
        let listed = host.topology.devices();
        if !listed.is_empty() {
            for dev in &vm.devices {
                if !listed.iter().any(|d| d.address.eq_ignore_ascii_case(&dev.address)) {
                    out.push(self.one(
                    vm,
                    format!("passthrough device {} is not among the host's {} PCI devices", dev.address, listed.len()),
                    vec![vm.ev(dev.at)],
                    "correct the address (lspci -D on the host lists them) or remove the device; a fix never drops a device".to_string(),
                ));
                }
            }
        }
    }
}

/// The fix that replans a VM onto CPUs and nodes the host has.
fn replan(vm: &Vm) -> &'static str {
    match vm.format {
        SourceFormat::Vmx => "set sched.cpu.affinity / numa.nodeAffinity to CPUs and nodes the host has (numaplace lint --fix asks the planner)",
        _ => "pin and bind the VM to CPUs and nodes the host has (numaplace lint --fix replans the pins, cells and bindings)",
    }
}
