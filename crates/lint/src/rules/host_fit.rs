//! A VM that cannot exist on this host at all: more memory than the host
//! has for VMs, more vCPUs than it has CPUs, or more huge pages of its
//! size than the host has. No placement holds it, so it is named (one
//! error saying so) rather than planned: `--fix` leaves it as it is and
//! charges none of its memory against the other VMs' fixes.

use super::{finding, gib, plural, Context, Rule, DEFAULT_HUGEPAGE};
use crate::finding::{Finding, Severity};
use crate::host::HostView;
use crate::vm::Vm;
use std::fmt;

/// Cost of a VM larger than its host: it does not start. No figure.
pub const HOST_FIT_IMPACT: &str = "the VM does not start on this host: QEMU cannot take more memory or huge \
pages than the host has, and a vCPU count above the host's CPUs time-shares every CPU; no placement on this host \
holds it, so every fix of the other VMs is planned without it";

/// What makes a VM larger than its host, as typed values (the rule and
/// the fixer's notes word them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Beyond {
    /// Memory plus QEMU's overhead above the memory of every node
    /// together, memory-only nodes included (less the host's reserve and
    /// its huge page pools).
    Memory {
        /// The VM's memory, bytes.
        memory: u64,
        /// With the overhead, bytes.
        needed: u64,
        /// The host's memory for VMs, bytes.
        host: u64,
    },
    /// More vCPUs than the host has online CPUs.
    Cpus {
        /// The VM's vCPUs.
        vcpus: u32,
        /// The host's CPUs.
        host: u32,
    },
    /// More huge pages of a size than the host has of it on all its nodes.
    Pages {
        /// Page size, bytes.
        size: u64,
        /// Pages the VM's memory needs.
        needed: u64,
        /// Pages of that size the host has reserved.
        host: u64,
    },
}

impl fmt::Display for Beyond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Beyond::Memory { memory, needed, host } => write!(
                f,
                "its {} of memory ({} with QEMU's overhead) is more than the {} this host has for VMs",
                gib(*memory),
                gib(*needed),
                gib(*host)
            ),
            Beyond::Cpus { vcpus, host } => {
                write!(
                    f,
                    "its {} are more than this host's {}",
                    plural(u64::from(*vcpus), "vCPU"),
                    plural(u64::from(*host), "CPU")
                )
            }
            Beyond::Pages { size, needed, host } => write!(
                f,
                "its memory needs {needed} huge pages of {} and this host has {host} of that size",
                gib(*size)
            ),
        }
    }
}

/// Why a VM cannot exist on this host (empty: it can).
pub(crate) fn cannot_exist(vm: &Vm, host: &HostView<'_>) -> Vec<Beyond> {
    let mut out = Vec::new();
    let cpus: u32 = host.cpu_nodes().map(|(_, n)| n.pus.len() as u32).sum();
    // A shared VM numaplace planned with CPU overcommit has more vCPUs
    // than CPUs by request: it time-shares them, as it was planned to.
    if vm.vcpus > cpus && !vm.planned_shared {
        out.push(Beyond::Cpus { vcpus: vm.vcpus, host: cpus });
    }
    match vm.hugepages.first() {
        Some(page) => {
            let size = page.size_bytes.unwrap_or(DEFAULT_HUGEPAGE).max(1);
            let needed = vm.memory_bytes.div_ceil(size);
            let have: u64 = host.nodes.iter().filter_map(|n| n.pool(size)).map(|p| p.total).sum();
            // A host that lists no page pools at all (a synthetic or
            // capabilities source without them) is not known to lack them.
            let listed = host.nodes.iter().any(|n| !n.hugepages.is_empty());
            if listed && needed > have {
                out.push(Beyond::Pages { size, needed, host: have });
            }
        }
        None => {
            // Every node's, memory-only ones included: a VM may take its
            // memory from them, so only more than all of it cannot fit.
            let memory: u64 = host.nodes.iter().map(|n| n.memory_bytes).sum();
            // An overcommitting shared VM is charged what numaplace's mark
            // says, not its whole memory.
            let charged: u64 = vm.planned_charged.iter().map(|(_, b)| b).sum();
            let memory_bytes = if vm.planned_shared && charged > 0 { charged } else { vm.memory_bytes };
            let needed = memory_bytes.saturating_add(host.overhead(memory_bytes));
            if memory > 0 && needed > memory {
                out.push(Beyond::Memory { memory: vm.memory_bytes, needed, host: memory });
            }
        }
    }
    out
}

/// A VM larger than the whole host.
#[derive(Clone, Copy, Debug, Default)]
pub struct VmExceedsHost;

impl Rule for VmExceedsHost {
    fn id(&self) -> &'static str {
        "vm-exceeds-host"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "a VM larger than the whole host (memory, CPUs or huge pages): it cannot run here"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let why = cannot_exist(vm, cx.host);
        if why.is_empty() {
            return Vec::new();
        }
        let words: Vec<String> = why.iter().map(ToString::to_string).collect();
        let message = format!("this VM is bigger than this host and cannot run on it: {}", words.join("; "));
        let fix = "run it on a host large enough for it, or make it smaller (or reserve the huge pages); \
                   numaplace lint --fix leaves it as it is and plans the other VMs without counting its memory \
                   (with --allow-resize it drops huge pages the host lacks)"
            .to_string();
        let ev = why.iter().map(|b| match b {
            Beyond::Cpus { .. } => vm.ev(vm.vcpus_at),
            Beyond::Memory { .. } => vm.ev(vm.memory_at),
            Beyond::Pages { .. } => vm.hugepages.first().and_then(|h| vm.ev(h.at)).or_else(|| vm.ev(vm.memory_at)),
        });
        vec![finding(self, vm, message, ev, HOST_FIT_IMPACT, fix)]
    }
}
