//! The planner's answer for one VM: where each vCPU runs, where memory
//! lives, and the guest NUMA topology that mirrors it. Emitters (libvirt
//! XML, QEMU arguments, JSON) read only this type.

use numaplace_topo::{CpuSet, NodeId};

/// How vCPUs use host CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CpuMode {
    /// Each vCPU pinned 1:1 to its own PU.
    #[default]
    Dedicated,
    /// vCPUs float over the chosen nodes' CPUs (overcommit allowed).
    Shared,
}

/// How guest memory is bound to host nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MemoryMode {
    /// Each guest cell's memory is bound to its host node.
    #[default]
    Strict,
    /// Memory interleaved over all chosen nodes (`spread`).
    Interleave,
}

/// One vCPU's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuPin {
    /// vCPU number, 0-based.
    pub vcpu: u32,
    /// Host PU it is pinned to (in shared mode: the PU it is counted
    /// against; it floats over [`Placement::cpuset`]).
    pub pu: u32,
    /// Host node of that PU.
    pub node: NodeId,
}

/// One guest NUMA cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestCell {
    /// Guest node number, 0-based.
    pub id: u32,
    /// The vCPUs in the cell.
    pub vcpus: CpuSet,
    /// Memory of the cell, bytes.
    pub memory_bytes: u64,
    /// The host node the cell mirrors.
    pub host_node: NodeId,
    /// Distances to every cell, in cell order (copied from the host).
    pub distances: Vec<u32>,
    /// The host nodes holding the cell's memory, with bytes each, when
    /// that is not `host_node` alone: a CPU cell backed by the HBM or CXL
    /// node nearest its node, the tier hidden from the guest
    /// ([`crate::MemoryTiers::Hidden`]), its own node's share first when
    /// it has one. Empty: all of `memory_bytes` is on `host_node`.
    pub memory_nodes: Vec<(NodeId, u64)>,
}

impl GuestCell {
    /// The host nodes holding the cell's memory, with bytes each
    /// (`host_node` alone unless `memory_nodes` says otherwise).
    pub fn backing(&self) -> Vec<(NodeId, u64)> {
        if self.memory_nodes.is_empty() {
            vec![(self.host_node, self.memory_bytes)]
        } else {
            self.memory_nodes.clone()
        }
    }
}

/// Floating vCPUs of a mixed VM on one host node (Nova's
/// `hw:cpu_policy=mixed`): they run on that node's CPUs of the host's
/// shared pool, so the guest cell holding them still mirrors the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Floating {
    /// The host node.
    pub node: NodeId,
    /// The vCPUs that float there.
    pub vcpus: CpuSet,
    /// The CPUs they float over (the node's shared pool).
    pub cpus: CpuSet,
}

/// The guest CPU and NUMA topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestTopology {
    /// Sockets: one per host package the VM's vCPUs use, when the cells
    /// allow it (see the planner's guest module).
    pub sockets: u32,
    /// Dies per socket: one per guest cell of the socket (or, for uneven
    /// cells, per equal slice of one), so no die, and no last-level cache
    /// the guest believes a die shares, crosses a cell boundary.
    pub dies: u32,
    /// Cores per die.
    pub cores: u32,
    /// Threads per core.
    pub threads: u32,
    /// NUMA cells (one per host node used).
    pub cells: Vec<GuestCell>,
}

/// Where a VM goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// VM name.
    pub vm: String,
    /// Host nodes used, by id.
    pub nodes: Vec<NodeId>,
    /// CPU mode.
    pub cpu_mode: CpuMode,
    /// vCPU pinning, by vCPU.
    pub vcpus: Vec<VcpuPin>,
    /// The CPUs the VM may run on: when dedicated, the pinned PUs plus the
    /// idle siblings it keeps to itself (`isolate`, or the last core of an
    /// odd `pairs` VM), all of which a host state records as taken; when
    /// shared, the non-dedicated CPUs of its nodes, less those that VMs
    /// dedicated later took (see [`crate::HostState::place`]).
    pub cpuset: CpuSet,
    /// Emulator threads' CPUs.
    pub emulator: CpuSet,
    /// Memory per host node, bytes.
    pub memory: Vec<(NodeId, u64)>,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// Memory binding mode.
    pub memory_mode: MemoryMode,
    /// Huge page size in bytes, if the VM is backed by huge pages.
    pub hugepage_bytes: Option<u64>,
    /// The guest topology.
    pub guest: GuestTopology,
    /// With CPU hot-add, the vCPUs online at boot (the first ones);
    /// `vcpus` then lists every vCPU the VM may have. `None`: all online.
    pub online_vcpus: Option<u32>,
    /// PCI devices passed through to the VM (`0000:3b:00.0`), in the
    /// order requested.
    pub devices: Vec<String>,
    /// A mixed VM's floating vCPUs, by node (empty for every other VM).
    /// Their entries in `vcpus` name the shared-pool PU each is counted
    /// against; `cpuset` holds only the dedicated vCPUs' CPUs.
    pub floating: Vec<Floating>,
    /// Memory charged to each host node, bytes, when it differs from
    /// `memory`: a shared VM whose request overcommits memory
    /// (`memory_overcommit`) is charged its memory divided by the ratio.
    /// Empty: charged as `memory`.
    pub charged: Vec<(NodeId, u64)>,
}

impl Placement {
    /// The CPUs a vCPU may run on when it floats (a mixed VM's floating
    /// vCPU), `None` when it is pinned to its PU or the VM is shared.
    pub fn floats(&self, vcpu: u32) -> Option<&CpuSet> {
        self.floating.iter().find(|f| f.vcpus.contains(vcpu)).map(|f| &f.cpus)
    }

    /// Whether some vCPUs are pinned and others float (a mixed VM).
    pub fn is_mixed(&self) -> bool {
        !self.floating.is_empty()
    }

    /// The memory charged to the host, per node: `charged`, or `memory`.
    pub fn charged_memory(&self) -> &[(NodeId, u64)] {
        if self.charged.is_empty() {
            &self.memory
        } else {
            &self.charged
        }
    }

    /// Every CPU some vCPU may run on: `cpuset` and, for a mixed VM, the
    /// CPUs its floating vCPUs use.
    pub fn run_cpus(&self) -> CpuSet {
        self.floating.iter().fold(self.cpuset.clone(), |all, f| all.union(&f.cpus))
    }
}
