//! Firmware and OS quirks that a topology is read with, not rejected for.
//! Each is shown to the operator because it changes what placement can do.

use crate::cpuset::CpuSet;
use crate::ids::NodeId;
use std::fmt;

/// A quirk of the host that affects placement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Warning {
    /// A node with CPUs but no memory: its CPUs always use remote memory.
    MemorylessNode(NodeId),
    /// A node with memory but no online CPUs (HBM, GPU or CXL memory, or
    /// a socket whose CPUs are offline): usable only as a memory target.
    CpulessNode(NodeId),
    /// CPUs the OS knows but that are offline.
    OfflineCpus(CpuSet),
    /// No distance matrix in the source: 10 local and 20 remote assumed.
    NoDistances,
    /// Online CPUs that no node lists.
    CpusWithoutNode(CpuSet),
    /// A core whose threads sit on different nodes: its siblings cannot
    /// both be given to a guest cell that mirrors one host node.
    CoreSpansNodes(CpuSet),
    /// The source has no NUMA information; the whole machine is one node.
    NoNumaInfo,
    /// The source has no core information; each PU is treated as a core
    /// (SMT siblings are unknown).
    NoCoreInfo,
    /// The source has no memory sizes; nodes show 0 bytes.
    NoMemoryInfo,
    /// Sibling lists or ids that contradict each other; the grouping was
    /// repaired (packages renumbered, cores split) the way hwloc does.
    InconsistentSiblings(CpuSet),
    /// A node's memory kind the source does not name, found from other
    /// evidence (issue 48): HMAT figures against its CPUs' own node, the
    /// kernel's memory tiers, a DAX device's backing, or a CPU model that
    /// carries HBM with CPU-less nodes beside its sub-NUMA domains. The evidence is named so an operator can check
    /// it, and declare the kind in the host profile where it is wrong.
    KindFound {
        /// The node.
        node: NodeId,
        /// The kind found.
        kind: crate::ids::MemoryKind,
        /// What says so.
        evidence: crate::evidence::KindEvidence,
    },
    /// Some file of a sysfs tree could not be read and was skipped.
    Skipped {
        /// What was skipped, relative to the tree root.
        path: String,
        /// Why.
        reason: String,
    },
}

impl Warning {
    /// A short stable code for JSON and filtering.
    pub fn code(&self) -> &'static str {
        match self {
            Warning::MemorylessNode(_) => "memoryless-node",
            Warning::CpulessNode(_) => "cpuless-node",
            Warning::OfflineCpus(_) => "offline-cpus",
            Warning::NoDistances => "no-distances",
            Warning::CpusWithoutNode(_) => "cpus-without-node",
            Warning::CoreSpansNodes(_) => "core-spans-nodes",
            Warning::NoNumaInfo => "no-numa-info",
            Warning::NoCoreInfo => "no-core-info",
            Warning::NoMemoryInfo => "no-memory-info",
            Warning::InconsistentSiblings(_) => "inconsistent-siblings",
            Warning::KindFound { kind: crate::ids::MemoryKind::Hbm, .. } => "hbm-found",
            Warning::KindFound { kind: crate::ids::MemoryKind::Cxl, .. } => "cxl-found",
            Warning::KindFound { .. } => "memory-kind-found",
            Warning::Skipped { .. } => "skipped",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::MemorylessNode(n) => {
                write!(f, "{n} has CPUs but no memory: VMs there always use remote memory")
            }
            Warning::CpulessNode(n) => {
                write!(f, "{n} has no online CPUs: usable only as extra memory for VMs on nearby nodes")
            }
            Warning::OfflineCpus(c) => write!(f, "CPUs {c} are offline and will not be used"),
            Warning::NoDistances => {
                write!(f, "no distance information: assuming 10 local, 20 remote")
            }
            Warning::CpusWithoutNode(c) => write!(f, "CPUs {c} belong to no NUMA node"),
            Warning::CoreSpansNodes(c) => {
                write!(f, "core with threads {c} spans NUMA nodes (firmware bug?)")
            }
            Warning::NoNumaInfo => write!(f, "no NUMA information: the machine is treated as one node"),
            Warning::NoCoreInfo => {
                write!(f, "no core information: each CPU treated as a core, SMT siblings unknown")
            }
            Warning::NoMemoryInfo => write!(f, "no memory sizes in the source: nodes show 0 bytes"),
            Warning::InconsistentSiblings(c) => {
                write!(f, "sibling lists of CPUs {c} contradict their ids; grouping repaired as hwloc does")
            }
            Warning::KindFound { node, kind, evidence } => {
                write!(f, "{node} read as {} memory although the source names no kind: {evidence}", kind.as_str())
            }
            Warning::Skipped { path, reason } => write!(f, "skipped {path}: {reason}"),
        }
    }
}
