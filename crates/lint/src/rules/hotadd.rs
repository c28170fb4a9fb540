//! `cpu-hotadd-wide`: CPU hot-add on a VM wider than a host node, which
//! makes the guest see a single NUMA node.

use super::{finding, is_wide, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{SourceFormat, VmView};

/// The measured cost (background § CPU hot-add).
pub const IMPACT: &str = "docs/background.md § CPU hot-add [001]: a 16 vCPU / 200 GB VM on a 2 x 8-core, \
2 x 128 GB host with hot-add on (1 guest node) vs off (2): idle memory latency +25 ns (+22%), PassMark Memory \
Threaded 28662 vs 52927 (-46%), Memory Mark 1654 vs 1975, HammerDB SQL Server 5293 vs 5713 batch requests/s (-8%)";

/// CPU hot-add enabled on a VM with more vCPUs than a node has cores.
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
        "CPU hot-add on a VM wider than a host node (the guest sees one NUMA node)"
    }

    fn check(&self, vm: &VmView, cx: &Context<'_>) -> Vec<Finding> {
        let Some(hot) = &vm.hotadd else { return Vec::new() };
        if !is_wide(vm, cx.host) {
            return Vec::new();
        }
        // libvirt keeps declared cells with hot-pluggable vCPUs; only a
        // domain without them presents a single node. ESXi always does.
        if vm.format == SourceFormat::Libvirt && vm.cells.len() > 1 {
            return Vec::new();
        }
        // Confined to one host node (a shared VM floating over it, or
        // pins on it): one guest node is the truth, not a hidden topology.
        if vm.format == SourceFormat::Libvirt {
            if let Some((cpus, _)) = super::allowed_cpus(vm, cx.host) {
                if cx.host.nodes_of(&cpus).len() == 1 {
                    return Vec::new();
                }
            }
        }
        let cores = cx.host.node_cores();
        let message = format!(
            "CPU hot-add is on for {} vCPUs, more than the {cores} cores of one host node: the guest sees one NUMA node and cannot keep memory local",
            vm.vcpus
        );
        let fix = match vm.format {
            SourceFormat::Vmx => "set vcpu.hotadd = \"FALSE\" (ESXi then builds virtual NUMA nodes); add vCPUs by reconfiguring while powered off".to_string(),
            SourceFormat::Libvirt => format!(
                "remove `current` from <vcpu> and the <vcpus> list so all {} vCPUs are present at boot, and declare one guest cell per host node (numaplace lint --fix does both)",
                vm.vcpus
            ),
            SourceFormat::Request => "set \"cpu_hotadd\": false (the planner refuses hot-add on a VM spanning nodes unless forced)".to_string(),
        };
        vec![finding(self, vm, message, [hot.at.clone(), hot.also.clone(), vm.vcpus_at.clone()], IMPACT, fix)]
    }
}
