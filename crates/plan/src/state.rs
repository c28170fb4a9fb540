//! Host state: what the VMs placed so far take from a host, kept as
//! per-node counters the node-set search reads in O(1).
//!
//! Free memory is the node's total memory (`memory_bytes`) minus its huge
//! page pools minus what placed VMs use, not the `free_bytes` a reader may
//! have seen: numaplace plans for the VMs it places, and a snapshot of
//! page-cache-heavy free memory would make plans depend on the moment the
//! host was read. Huge pages start from the pool's `free` count when the
//! source gives one (pages other users already hold stay taken), else from
//! its `total`.
//!
//! Reservations ([`Reservations`]) and the per-VM overhead
//! ([`vm_overhead_bytes`]) are planning margins: the planner never puts a
//! vCPU on a reserved CPU and keeps each node's reserve and its VMs'
//! overhead free, but recording a placement ([`HostState::place`]) checks
//! only what the host physically has, so a state written before a
//! reservation was declared still loads.
//!
//! The topology-derived facts (per-node core lists, the distance order of
//! nodes seen from each node) are computed once in [`HostState::new`], so
//! planning never walks the whole topology.
//!
//! [`HostState`] and its types are here; its methods are in child
//! modules: `build` (a new state and the topology-derived facts), `record`
//! (placing and removing VMs, keeping the counters in step), `query`
//! (free capacity and the planner's lookups) and `holders` (the one map
//! of who holds each CPU thread, [`CpuMap`]).

use crate::placement::{CpuMode, Placement};
use numaplace_topo::{Arch, CpuSet, DeviceKind, NodeId, Topology};
use std::collections::BTreeMap;
use std::sync::Arc;

mod build;
mod carried;
mod holders;
mod probes;
mod query;
mod record;

pub use holders::{CpuMap, HeldAs, Hold, VmCpus};

use record::*;

/// Memory QEMU needs beside a VM's own on the host, by the default rule
/// ([`Overhead::default`]): 64 MiB for the process (its code, heap,
/// device models and I/O buffers) plus 1/128 of the guest memory (the
/// guest's 4 KiB page tables and the hypervisor's extended page tables
/// are 1/512 each; the rest is margin for dirty-page bitmaps and vhost
/// rings). numaplace's own estimate, not a measured figure: the
/// measurements (`docs/background.md` § Memory larger than a node) show
/// that a VM whose memory plus overhead does not fit its node is partly
/// remote, without giving QEMU's figure. A host profile may set another
/// rule ([`Reservations::overhead`]); `numaplace lint` uses the host's.
pub fn vm_overhead_bytes(memory_bytes: u64) -> u64 {
    Overhead::default().bytes(memory_bytes)
}

/// The rule for the memory QEMU needs beside a VM's own: a fixed part
/// plus a part proportional to the guest's memory. A host setting (the
/// host profile's `qemu_overhead`), since what QEMU really takes depends
/// on its version, its devices and the host's page sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overhead {
    /// Bytes for every VM, whatever its size.
    pub fixed_bytes: u64,
    /// Bytes per GiB of guest memory (the default 8 MiB is 1/128).
    pub per_gib_bytes: u64,
}

impl Default for Overhead {
    /// 64 MiB plus 8 MiB per GiB (1/128) of the guest's memory.
    fn default() -> Overhead {
        Overhead { fixed_bytes: 64 << 20, per_gib_bytes: 8 << 20 }
    }
}

impl Overhead {
    /// The overhead of a VM of `memory_bytes`, rounded down.
    pub fn bytes(&self, memory_bytes: u64) -> u64 {
        let part = (u128::from(memory_bytes) * u128::from(self.per_gib_bytes)) >> 30;
        self.fixed_bytes.saturating_add(u64::try_from(part).unwrap_or(u64::MAX))
    }
}

/// What a host keeps for itself: CPUs no vCPU may use (housekeeping,
/// interrupts, the host's own daemons; emulator threads may run there),
/// and memory kept free on every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservations {
    /// CPUs reserved for the host.
    pub cpus: CpuSet,
    /// Bytes kept free on every node.
    pub memory_per_node: u64,
    /// The shared pool (Nova's `cpu_shared_set`), when the host declares
    /// one: shared VMs float only here and dedicated vCPUs never come
    /// here; the CPUs neither reserved nor shared are the dedicated pool.
    /// Empty: no pools, shared VMs float over any CPU no dedicated VM
    /// holds.
    pub shared_cpus: CpuSet,
    /// The memory each VM's QEMU process needs beside the guest's, kept
    /// free on the VM's first node (a planning margin like the reserve).
    pub overhead: Overhead,
    /// Kinds of memory beside DRAM a VM whose request names none may use
    /// (the host profile's `memory_kinds`); empty: DRAM only, so HBM, CXL
    /// or GPU memory nodes hold a VM's memory only when its request asks.
    pub memory_kinds: Vec<numaplace_topo::MemoryKind>,
}

/// How a placement made elsewhere (a plan document, an older plan) uses
/// CPUs the host's reservations keep from it. Recording a placement
/// ([`HostState::place`]) does not check this (a state written before a
/// reservation was declared still loads); a command about to carry a plan
/// out does ([`Reservations::conflict`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReservationConflict {
    /// A vCPU pinned to (or a shared VM floating over) a CPU reserved for
    /// the host.
    #[error("{} on CPU {cpu}, which the host reserves for itself", vcpu.map_or_else(|| "floats".to_string(), |v| format!("pins vCPU {v}")))]
    ReservedCpu {
        /// The vCPU (`None`: a shared VM's floating set).
        vcpu: Option<u32>,
        /// The CPU.
        cpu: u32,
    },
    /// A dedicated vCPU pinned into the host's shared pool.
    #[error("pins dedicated vCPU {vcpu} on CPU {cpu}, which is in the host's shared pool")]
    SharedPool {
        /// The vCPU.
        vcpu: u32,
        /// The CPU.
        cpu: u32,
    },
}

impl Reservations {
    /// The first use of a CPU these reservations keep from the placement,
    /// if any: a dedicated vCPU on a reserved CPU or in the shared pool,
    /// a shared VM floating over a reserved CPU. A mixed VM's floating
    /// vCPUs belong in the pool; only their CPUs' reservation is checked.
    pub fn conflict(&self, p: &Placement) -> Option<ReservationConflict> {
        if p.cpu_mode == CpuMode::Shared {
            let cpu = p.cpuset.intersection(&self.cpus).iter().next()?;
            return Some(ReservationConflict::ReservedCpu { vcpu: None, cpu });
        }
        let floats = |v: u32| p.floating.iter().any(|f| f.vcpus.contains(v));
        for pin in &p.vcpus {
            if self.cpus.contains(pin.pu) {
                return Some(ReservationConflict::ReservedCpu { vcpu: Some(pin.vcpu), cpu: pin.pu });
            }
            if !floats(pin.vcpu) && self.shared_cpus.contains(pin.pu) {
                return Some(ReservationConflict::SharedPool { vcpu: pin.vcpu, cpu: pin.pu });
            }
        }
        None
    }
}

/// Why an existing placement cannot be recorded in a host state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The placement names a node the host does not have.
    #[error("{0} does not exist on this host")]
    UnknownNode(NodeId),
    /// A PU the host does not have, or one that is offline.
    #[error("CPU {0} does not exist or is offline on this host")]
    UnknownPu(u32),
    /// A mixed VM's floating vCPU, or a CPU it floats over, outside the
    /// host's shared pool.
    #[error("VM {vm} floats vCPUs over CPU {cpu}, which is not in the host's shared pool")]
    FloatOutsidePool {
        /// The VM.
        vm: String,
        /// The CPU.
        cpu: u32,
    },
    /// A CPU declared both reserved for the host and in the shared pool.
    #[error("CPU {0} is both reserved for the host and in the shared pool")]
    ReservedAndShared(u32),
    /// A vCPU pin names a node other than its PU's.
    #[error("vCPU {vcpu} is pinned to CPU {pu}, which is on {actual}, not {claimed}")]
    PuNodeMismatch {
        /// The vCPU.
        vcpu: u32,
        /// Its PU.
        pu: u32,
        /// The node the placement says.
        claimed: NodeId,
        /// The PU's real node.
        actual: NodeId,
    },
    /// A PU already given to a dedicated VM (or, for a dedicated VM, one
    /// that shared VMs already run on).
    #[error("CPU {pu} of VM {vm} is already taken")]
    PuTaken {
        /// The VM being recorded.
        vm: String,
        /// The contested PU.
        pu: u32,
    },
    /// A PCI device already passed through to another VM on this host.
    #[error("device {device} of VM {vm} is already passed through to {holder}")]
    DeviceTaken {
        /// The VM being recorded.
        vm: String,
        /// The device.
        device: String,
        /// The VM that has it.
        holder: String,
    },
    /// Two vCPUs of one dedicated VM pinned to the same PU.
    #[error("VM {vm} pins two vCPUs to CPU {pu}")]
    PuPinnedTwice {
        /// The VM.
        vm: String,
        /// The PU.
        pu: u32,
    },
    /// More memory on a node than it has free.
    #[error("VM {vm} needs {needed} bytes on {node}, which has {free} free")]
    MemoryExceeded {
        /// The VM.
        vm: String,
        /// The node.
        node: NodeId,
        /// Bytes asked.
        needed: u64,
        /// Bytes free.
        free: u64,
    },
    /// More huge pages on a node than its pool has free.
    #[error("VM {vm} needs {needed} huge pages of {size} bytes on {node}, which has {free} free")]
    HugePagesExceeded {
        /// The VM.
        vm: String,
        /// The node.
        node: NodeId,
        /// Page size, bytes.
        size: u64,
        /// Pages asked.
        needed: u64,
        /// Pages free.
        free: u64,
    },
    /// Memory on a node that is not a whole number of huge pages.
    #[error("VM {vm} puts {bytes} bytes on {node}, not a multiple of its {size}-byte huge pages")]
    NotWholePages {
        /// The VM.
        vm: String,
        /// The node.
        node: NodeId,
        /// Bytes on the node.
        bytes: u64,
        /// Page size.
        size: u64,
    },
    /// A VM of that name is already placed.
    #[error("a VM named {0} is already placed")]
    DuplicateVm(String),
    /// No VM of that name is placed (to remove).
    #[error("no VM named {0} is placed")]
    UnknownVm(String),
}

/// A VM and the host CPUs it holds ([`HostState::cpu_holders`], a
/// summary of the [`CpuMap`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The VM.
    pub vm: String,
    /// The CPUs it holds.
    pub cpus: CpuSet,
}

/// The distance planning assumes between a memory-only node and the CPU
/// nodes its source says it is local to, when the source has no distance
/// matrix (halfway between local, 10, and the assumed remote, 20).
pub(crate) const NEAR_MEMORY_DISTANCE: u32 = 15;

/// Topology facts about one node, fixed for the life of a state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    pub(crate) id: NodeId,
    /// Online PUs of each core on this node, cores by lowest PU, threads
    /// ascending.
    pub(crate) cores: Vec<Vec<u32>>,
    /// Memory usable for ordinary (non huge page) allocations.
    pub(crate) memory_bytes: u64,
    /// Huge page pools: (page size, pages available to numaplace).
    pub(crate) pools: Vec<(u64, u64)>,
    /// The distinct distances from this node to any node, ascending (10,
    /// its own, first).
    pub(crate) tiers: Vec<u32>,
    /// The package of the node's first core, when packages are known.
    pub(crate) package: Option<u32>,
    /// GPUs, NICs and NVMe drives local to the node: what VMs ask to
    /// have passed through.
    pub(crate) passthrough: u32,
    /// The kind of memory the node holds.
    pub(crate) kind: numaplace_topo::MemoryKind,
    /// The last-level cache group (an L3, a CCX) of each core, by index
    /// into the topology's caches; empty when the source lists none or
    /// the node's cores all share one, so pinning keeps core order.
    pub(crate) l3: Vec<u32>,
    /// The positions of the cores of each of the node's L3 groups, groups
    /// in order of their first core, cores ascending; and the group (a
    /// position in that list) of each core. Both empty with `l3`: worked
    /// out once so pinning ranks groups without grouping the cores again
    /// for every VM.
    pub(crate) l3_groups: Vec<Vec<usize>>,
    pub(crate) l3_slot: Vec<usize>,
}

/// One node as the planner counts it (see [`HostState::nodes`]).
#[derive(Clone, Copy, Debug)]
pub struct NodeSpec<'a> {
    /// Node id.
    pub id: NodeId,
    /// Online PUs of each core, cores by lowest PU, threads ascending (a
    /// core split over two nodes by firmware counts once on each).
    pub cores: &'a [Vec<u32>],
    /// Memory for VMs: the node's memory less its huge page pools, bytes.
    pub memory_bytes: u64,
}

/// What one node can give VMs, the one definition the planner, the
/// fleet's per-node summaries, the simulator and lint all read
/// ([`HostState::capacity`], [`node_capacity`]):
/// - CPUs: its online threads a dedicated vCPU may take, that is neither
///   reserved for the host ([`Reservations::cpus`]) nor in the shared
///   pool ([`Reservations::shared_cpus`]), and the cores holding one;
/// - memory: its memory less its huge page pools (pages are not ordinary
///   memory; a VM asking for them takes pages) and less the host's
///   per-node reserve ([`Reservations::memory_per_node`]);
/// - huge pages: each pool's pages available (its free count when the
///   source gives one, else its total).
///
/// Each VM then also keeps QEMU's overhead free beside its memory
/// ([`Reservations::overhead`]), on its first node: a cost per VM, not a
/// part of the node, so it is not taken off here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCapacity {
    /// The node.
    pub id: NodeId,
    /// Cores with a thread a dedicated vCPU may take.
    pub cores: u32,
    /// Threads a dedicated vCPU may take.
    pub threads: u32,
    /// Ordinary memory for VMs, bytes.
    pub memory: u64,
    /// Huge page pools: (page size in bytes, pages).
    pub hugepages: Vec<(u64, u64)>,
}

/// The capacity of every node of a host with these reservations, in node
/// order (see [`NodeCapacity`]); for callers that hold no host state.
/// Reserved CPUs the host lacks are ignored here (a state refuses them:
/// [`HostState::with_reservations`]).
pub fn node_capacity(topology: &Topology, reservations: &Reservations) -> Vec<NodeCapacity> {
    HostState::build(topology, reservations.clone()).capacity()
}

/// What the placed VMs take from one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeUse {
    /// Cores whose PUs are all unused.
    pub(crate) free_cores: u32,
    /// Free cores with at least two threads (sibling pairs).
    pub(crate) free_smt_cores: u32,
    /// PUs neither dedicated nor carrying shared vCPUs.
    pub(crate) free_pus: u32,
    /// PUs not dedicated (shared VMs may float over them).
    pub(crate) open_pus: u32,
    /// Shared vCPUs counted against this node.
    pub(crate) shared_load: u64,
    /// Ordinary memory used, bytes.
    pub(crate) memory_used: u64,
    /// QEMU overhead of the VMs whose first memory node this is, bytes
    /// ([`Reservations::overhead`]; a planning margin, not checked by `place`).
    pub(crate) overhead: u64,
    /// Huge pages used, per pool (same order as `NodeFacts::pools`).
    pub(crate) pages_used: Vec<u64>,
    /// Of the node's passthrough devices, those a VM holds.
    pub(crate) devices_held: u32,
    /// Large dedicated VMs (more than `nodeset::SMALL_VM_VCPUS` vCPUs,
    /// guest not told pairs) with a vCPU pinned here: only on such a node
    /// can a VM short of whole cores take a large VM's idle sibling, so
    /// only there does the node-set search ask the pinning which it would.
    pub(crate) large_vms: u32,
}

/// One core's contribution to [`NodeUse`]'s CPU counters.
#[derive(Clone, Copy, Default)]
struct CoreCounts {
    free_cores: u32,
    free_smt: u32,
    free_pus: u32,
    open: u32,
}

impl CoreCounts {
    fn add(&mut self, o: CoreCounts) {
        self.free_cores += o.free_cores;
        self.free_smt += o.free_smt;
        self.free_pus += o.free_pus;
        self.open += o.open;
    }
}

/// What is already used on a host: PUs, memory and huge pages per node,
/// by the VMs placed so far.
///
/// Two states compare equal when they were built for the same topology and
/// record the same VMs with the same use of every node and PU: placing a
/// VM and removing it again gives back a state equal to the one before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostState {
    /// The node facts, distances and PU tables below are fixed for the
    /// life of a state and the same for every host of one topology, so
    /// copies of a state share them ([`HostState::share_layout`] makes two
    /// states built apart share them too): a fleet of 100,000 hosts keeps
    /// one set per kind of host, not one per host.
    pub(crate) facts: Arc<Vec<NodeFacts>>,
    pub(crate) uses: Vec<NodeUse>,
    /// Distance rows by node position.
    pub(crate) distances: Arc<Vec<Vec<u32>>>,
    /// PU number -> node position, for online PUs in a node.
    pub(crate) pu_node: Arc<Vec<Option<usize>>>,
    /// PU number -> position of its core in its node's `cores` (u32::MAX:
    /// none), so a PU's siblings are found without a search.
    pu_core: Arc<Vec<u32>>,
    /// PU number -> dedicated to (or reserved by) some VM.
    pub(crate) taken: Vec<bool>,
    /// PU number -> 1 + the position in `placed` of the dedicated VM
    /// whose vCPU is pinned there (0: none). A VM placed on the idle
    /// siblings of other VMs' cores names them from here rather than by
    /// looking through every placement (which made a batch quadratic).
    owner: Vec<u32>,
    /// PU number -> shared vCPUs counted against it.
    pub(crate) load: Vec<u32>,
    /// PU number -> reserved for the host (no vCPU is planned there).
    pub(crate) host_cpu: Vec<bool>,
    /// PU number -> in the shared pool (only when the host declares one).
    pub(crate) pool: Vec<bool>,
    /// What the host keeps for itself.
    reservations: Reservations,
    /// Whether some core has two or more threads.
    pub(crate) smt: bool,
    /// Whether a guest here may be shown several dies per socket: QEMU
    /// (7.2) takes `-smp dies=` on its x86 PC machines only.
    pub(crate) dies: bool,
    /// Guest NUMA cells are whole multiples of this many bytes (the
    /// memory block guest kernels check node ranges against: 128 MiB;
    /// QEMU's pseries machine refuses a node not a multiple of 256 MiB).
    pub(crate) block: u64,
    /// Passthrough devices (GPU, NIC, NVMe) with a known node: (address,
    /// node position), by address.
    devices: Vec<(String, usize)>,
    placed: Vec<Arc<Placement>>,
    /// For each of `placed`: a shared VM's floating and emulator sets as
    /// it was recorded, before later dedicated VMs shrank them, so that
    /// removing one of those dedicated VMs gives the CPUs back exactly.
    /// `None` for dedicated VMs.
    floating: Vec<Option<Box<(CpuSet, CpuSet)>>>,
    /// How many of `placed` are shared (most hosts have none, and then
    /// nothing needs to look for them).
    shared_vms: usize,
    /// (hash of the VM name, position in `placed`), sorted: a name lookup
    /// is a binary search over integers plus a string compare on a hash
    /// match, and recording a VM copies no string.
    names: Vec<(u64, usize)>,
    /// Buffers `place` reuses from call to call, so recording a placement
    /// allocates nothing but the stored copy.
    scratch: Scratch,
    /// What pinning on each node would do, kept until the node changes
    /// (`state/probes.rs`); no part of the state's equality.
    pub(crate) probes: probes::ProbeCache,
    /// The node-set search's ranking of one-node sets, carried from one
    /// decision to the next (`state/carried.rs`); no part of the state's
    /// equality.
    pub(crate) ranks: carried::Carried,
}

/// Guest NUMA node sizes are multiples of this (the memory hotplug block
/// size guest kernels check node ranges against); the last cell may hold
/// a partial block.
pub(crate) const BLOCK: u64 = 128 << 20;

/// QEMU's pseries machine refuses guest memory, or a guest NUMA node, that
/// is not a whole number of 256 MiB blocks.
pub(crate) const PSERIES_BLOCK: u64 = 256 << 20;

/// Reusable working memory of [`HostState::place`]; always left empty
/// (the bitmap all zeros) between calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Scratch {
    /// The cores (node position, core index) whose PUs a VM takes.
    cores: Vec<(usize, u32)>,
    /// (node position, bytes), one entry per node.
    per_node: Vec<(usize, u64)>,
    /// One bit per PU number below `taken.len()`: the PUs a dedicated VM
    /// takes.
    bits: Vec<u64>,
}
