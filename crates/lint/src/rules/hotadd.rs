//! `cpu-hotadd-wide`: CPU hot-add on a VM wider than a host node, which
//! makes the guest see a single NUMA node.

use super::{finding, gib, is_wide, nodes_needed, plural, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{SourceFormat, Vm};

/// The measured cost (background § CPU hot-add).
pub const IMPACT: &str = "docs/background.md § CPU hot-add [001]: a 16 vCPU / 200 GB VM on a 2 x 8-core, \
2 x 128 GB host with hot-add on (1 guest node) vs off (2): idle memory latency +25 ns (+22%), PassMark Memory \
Threaded 28662 vs 52927 (-46%), Memory Mark 1654 vs 1975, HammerDB SQL Server 5293 vs 5713 batch requests/s (-8%)";

/// CPU hot-add enabled on a VM with more vCPUs than a node has cores, or
/// more memory (with overhead) than a node has: the measured case itself
/// is 16 vCPUs on 8-core nodes and 200 GB on 128 GB nodes.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuHotaddWide;

impl Rule for CpuHotaddWide {
    fn id(&self) -> &'static str {
        "cpu-hotadd-wide"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "CPU hot-add on a VM that needs more than one host node by its vCPUs or its memory (the guest sees one NUMA node)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let Some(hot) = &vm.hotadd else { return Vec::new() };
        let host = cx.host;
        let by_cpus = is_wide(vm, host);
        let with_overhead = vm.memory_bytes.saturating_add(host.overhead(vm.memory_bytes));
        let by_memory = with_overhead > host.node_memory();
        if !by_cpus && !by_memory {
            return Vec::new();
        }
        // libvirt keeps declared cells with hot-pluggable vCPUs; only a
        // domain without them presents a single node. ESXi always does.
        if vm.format == SourceFormat::Libvirt && vm.cells.len() > 1 {
            return Vec::new();
        }
        // Confined to one host node (a shared VM floating over it, or
        // pins on it): one guest node is the truth, not a hidden topology
        // (memory that does not fit it is memory-exceeds-node's finding).
        if vm.format == SourceFormat::Libvirt {
            if let Some((cpus, _)) = super::allowed_cpus(vm, host) {
                if host.nodes_of(&cpus).len() == 1 {
                    return Vec::new();
                }
            }
        }
        let cores = host.node_cores();
        let k = nodes_needed(vm, host);
        let message = if by_cpus {
            format!(
                "CPU hot-add is on for {} vCPUs, more than the {cores} cores of one host node: the guest sees one NUMA node and cannot keep memory local",
                vm.vcpus
            )
        } else {
            format!(
                "CPU hot-add is on and {} of memory plus {} overhead is more than one host node's {}: the VM spans {} but the guest sees one NUMA node and cannot keep memory local",
                gib(vm.memory_bytes),
                gib(host.overhead(vm.memory_bytes)),
                gib(host.node_memory()),
                plural(k, "host node")
            )
        };
        let fix = match vm.format {
            SourceFormat::Vmx if by_cpus => "set vcpu.hotadd = \"FALSE\" (ESXi then builds virtual NUMA nodes; applies when the VM is powered off and on); add vCPUs by reconfiguring while powered off".to_string(),
            SourceFormat::Vmx => format!(
                "set vcpu.hotadd = \"FALSE\" and, as the vCPUs fit one node, numa.vcpu.maxPerVirtualNode = \"{}\" so ESXi builds {} for the memory (applies when the VM is powered off and on; numaplace lint --fix does both, memSize unchanged)",
                vm.vcpus.div_ceil(k),
                plural(k, "virtual NUMA node")
            ),
            SourceFormat::Libvirt => format!(
                "remove `current` from <vcpu> and the <vcpus> list so all {} vCPUs are present at boot, and declare one guest cell per host node (numaplace lint --fix does both; applies at the next cold boot)",
                vm.vcpus
            ),
            SourceFormat::Request => "set \"cpu_hotadd\": false (the planner refuses hot-add on a VM spanning nodes unless forced)".to_string(),
        };
        let mut ev = vec![vm.ev(hot.at), hot.also.and_then(|l| vm.ev(l)), vm.ev(vm.vcpus_at)];
        if by_memory && !by_cpus {
            ev.push(vm.ev(vm.memory_at));
        }
        vec![finding(self, vm, message, ev, IMPACT, fix)]
    }
}
