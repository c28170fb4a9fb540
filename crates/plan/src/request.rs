//! What a user asks for: one VM's size and preferences. Plain data; the
//! wire crate parses it from JSON and `key=value` lists.

use numaplace_topo::{CpuSet, MemoryKind, NodeId};

pub use crate::placement::CpuMode;

/// How vCPUs may share a physical core's hardware threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SmtPolicy {
    /// One vCPU per physical core; widen to more nodes before doubling up
    /// on siblings (the default).
    #[default]
    PreferCores,
    /// Sibling threads go to the same VM; the guest sees threads=2.
    Pairs,
    /// A whole core per vCPU, its sibling kept idle.
    Isolate,
    /// Sibling pairs only (Nova's `hw:cpu_thread_policy=require`):
    /// refused on a host without SMT, where `Pairs` falls back to cores.
    Require,
    /// Any free PU.
    Any,
}

/// Which node-set policy to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    /// Smallest node set that holds the memory (ESXi/XAPI classic).
    Compact,
    /// As compact, but the set must also have free cores >= vCPUs.
    SmtAware,
    /// Fewest nodes with memory and cores, then closest, then least
    /// loaded, then least stranded capacity (the default).
    #[default]
    Balanced,
    /// All nodes, memory interleaved.
    Spread,
    /// The fewest, closest nodes, and among those the fullest that still
    /// fits (Nova's packing weigher, Kubernetes' packed allocation): keeps
    /// empty nodes empty for large VMs.
    Pack,
}

impl Policy {
    /// Every policy, in the order help and documents list them.
    pub const ALL: [Policy; 5] = [Policy::Compact, Policy::SmtAware, Policy::Balanced, Policy::Spread, Policy::Pack];

    /// The policy's name, the one table of them: requests, the plan
    /// document, `--policy` and the simulator's reports all spell it so.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Compact => "compact",
            Policy::SmtAware => "smt-aware",
            Policy::Balanced => "balanced",
            Policy::Spread => "spread",
            Policy::Pack => "pack",
        }
    }

    /// The policy `name` names, exactly as [`Policy::name`] spells it.
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Whether the guest is shown the memory tiers (HBM, CXL) its memory is
/// on, as NUMA cells of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MemoryTiers {
    /// Memory of another kind backs the CPU cells themselves: each guest
    /// cell's memory is bound to the memory-only nodes nearest its CPU
    /// node (and its own node's DRAM, when it has some there), and the
    /// guest sees no memory-only cell for them (the default: most guests
    /// run software that does not place memory by node).
    #[default]
    Hidden,
    /// The tiers as the host has them: CPU cells, then memory-only cells
    /// for the HBM or CXL nodes, so software that binds its memory by
    /// node (numactl, memkind) can choose.
    Visible,
}

/// A device whose node matters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceWish {
    /// PCI address (`0000:3b:00.0`) as the host topology lists it, or
    /// `None` when only a node is named.
    pub address: Option<String>,
    /// The node, when given directly or resolved from the address.
    pub node: Option<NodeId>,
    /// Required (placement fails elsewhere) or only preferred.
    pub required: bool,
}

/// Where emulator threads go.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum EmulatorPlacement {
    /// On the CPUs of the VM's own nodes (the default).
    #[default]
    VmNodes,
    /// On a housekeeping CPU set.
    Housekeeping(CpuSet),
    /// On the host's reserved CPUs (on the VM's nodes when it has some
    /// there); refused on a host that reserves none.
    HostReserved,
    /// On one more dedicated CPU of its own, on the node of guest cell 0
    /// (Nova's `hw:emulator_threads_policy=isolate`); dedicated VMs only.
    Isolate,
}

/// One guest NUMA cell as the request gives it (Nova's
/// `hw:numa_cpus.N` and `hw:numa_mem.N`): guest cell N gets `vcpus`
/// vCPUs (the next ones in guest order, or those `listed`) and
/// `memory_bytes`, all on one host node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellWish {
    /// vCPUs in the cell (>= 1).
    pub vcpus: u32,
    /// Memory in the cell, bytes (> 0).
    pub memory_bytes: u64,
    /// The cell's vCPUs when the request lists them: any set (`0,2,4,6`,
    /// as Nova's `hw:numa_cpus.N` allows), of `vcpus` members. The
    /// planner refuses lists that overlap, leave a vCPU out or name one
    /// the VM lacks, and a request listing some cells but not others.
    pub listed: Option<CpuSet>,
}

impl CellWish {
    /// A cell of `vcpus` vCPUs and `memory_bytes`, its vCPUs not listed.
    pub fn new(vcpus: u32, memory_bytes: u64) -> CellWish {
        CellWish { vcpus, memory_bytes, listed: None }
    }

    /// A cell of the listed vCPUs and `memory_bytes`.
    pub fn listed(vcpus: CpuSet, memory_bytes: u64) -> CellWish {
        CellWish { vcpus: vcpus.len() as u32, memory_bytes, listed: Some(vcpus) }
    }
}

/// One VM to place.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// VM name (unique within a plan).
    pub name: String,
    /// Number of vCPUs (>= 1).
    pub vcpus: u32,
    /// Memory in bytes (> 0).
    pub memory_bytes: u64,
    /// Huge page size in bytes, if the VM wants huge pages.
    pub hugepage_bytes: Option<u64>,
    /// Dedicated (1:1 pinned) or shared.
    pub cpu_mode: CpuMode,
    /// vCPUs per PU allowed in shared mode (e.g. 4.0); ignored when
    /// dedicated.
    pub overcommit: f64,
    /// SMT policy.
    pub smt: SmtPolicy,
    /// Node-set policy.
    pub policy: Policy,
    /// At most this many guest NUMA nodes.
    pub max_nodes: Option<u32>,
    /// Devices whose node matters.
    pub devices: Vec<DeviceWish>,
    /// CPU hot-add: the most vCPUs the VM may grow to (more than
    /// `vcpus`). Every one of them is planned, pinned and given a guest
    /// cell now, so a vCPU added later lands where the plan says; the VM
    /// boots with `vcpus` of them online.
    pub max_vcpus: Option<u32>,
    /// Accept plans that would normally be refused (CPU hot-add on a VM
    /// spanning nodes).
    pub force: bool,
    /// Emulator thread placement.
    pub emulator: EmulatorPlacement,
    /// The guest cells, in guest order, when the request gives them; the
    /// vCPUs and memory must add up to the VM's.
    pub cells: Vec<CellWish>,
    /// This many guest cells of equal size (Nova's `hw:numa_nodes`),
    /// when `cells` is empty.
    pub guest_nodes: Option<u32>,
    /// Whether two guest cells may share one host node (never by
    /// default: a guest told of two nodes expects two nodes' bandwidth).
    pub cells_share_nodes: bool,
    /// vCPUs that float in the host's shared pool while the others are
    /// pinned (Nova's `hw:cpu_policy=mixed`; its `hw:cpu_dedicated_mask`
    /// names the complement). Empty: every vCPU as `cpu_mode` says.
    pub shared_vcpus: CpuSet,
    /// Guest memory per byte charged to the host (Nova's
    /// `ram_allocation_ratio`): 1.5 charges a shared VM of 12 GiB as 8 GiB.
    /// Shared VMs without huge pages only; 1.0 (the default) for all others.
    pub memory_overcommit: f64,
    /// The kinds of memory the VM's memory may be on (`memory_kind`):
    /// `None` for the host's default (DRAM, and the kinds its profile
    /// allows); `[Hbm]` puts it all on HBM nodes local to its vCPUs (the
    /// guest sees it as the memory of its CPU cells, or as memory-only
    /// cells with [`MemoryTiers::Visible`]);
    /// `[Dram]` forbids every other kind whatever the profile says.
    pub memory_kinds: Option<Vec<MemoryKind>>,
    /// Whether memory on nodes of another kind than DRAM (HBM, CXL) is
    /// shown to the guest as memory-only cells, or backs its CPU cells.
    pub memory_tiers: MemoryTiers,
}

impl Request {
    /// Whether CPU hot-add is wanted (a `max_vcpus` above `vcpus`).
    pub fn cpu_hotadd(&self) -> bool {
        self.max_vcpus.is_some_and(|m| m > self.vcpus)
    }

    /// Whether the VM's memory may be on a node of this kind, on a host
    /// whose profile allows `host` beside DRAM.
    pub fn allows_memory(&self, kind: MemoryKind, host: &[MemoryKind]) -> bool {
        match &self.memory_kinds {
            Some(kinds) => kinds.contains(&kind),
            None => kind == MemoryKind::Dram || host.contains(&kind),
        }
    }

    /// The vCPUs planned: `max_vcpus` with hot-add, else `vcpus`.
    pub fn planned_vcpus(&self) -> u32 {
        self.max_vcpus.map_or(self.vcpus, |m| m.max(self.vcpus))
    }

    /// A request with the defaults: dedicated, prefer-cores, balanced.
    pub fn new(name: impl Into<String>, vcpus: u32, memory_bytes: u64) -> Request {
        Request {
            name: name.into(),
            vcpus,
            memory_bytes,
            hugepage_bytes: None,
            cpu_mode: CpuMode::Dedicated,
            overcommit: 1.0,
            smt: SmtPolicy::PreferCores,
            policy: Policy::Balanced,
            max_nodes: None,
            devices: Vec::new(),
            max_vcpus: None,
            force: false,
            emulator: EmulatorPlacement::VmNodes,
            cells: Vec::new(),
            guest_nodes: None,
            cells_share_nodes: false,
            shared_vcpus: CpuSet::new(),
            memory_overcommit: 1.0,
            memory_kinds: None,
            memory_tiers: MemoryTiers::Hidden,
        }
    }
}
