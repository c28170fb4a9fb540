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

use crate::placement::{CpuMode, Placement};
use numaplace_topo::{Arch, CpuSet, DeviceKind, NodeId, Topology};
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// A VM and the host CPUs it holds ([`HostState::cpu_holders`]).
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
}

/// Guest NUMA node sizes are multiples of this (the memory hotplug block
/// size guest kernels check node ranges against); the last cell may hold
/// a partial block.
pub(crate) const BLOCK: u64 = 128 << 20;

/// QEMU's pseries machine refuses guest memory, or a guest NUMA node, that
/// is not a whole number of 256 MiB blocks.
pub(crate) const PSERIES_BLOCK: u64 = 256 << 20;

/// The last-level cache group of each of `cores` (by the cache holding the
/// core's first PU), or nothing when fewer than two groups are among them:
/// a node within one L3 (most Intel nodes) pins as it always did.
fn l3_groups(topology: &Topology, cores: &[Vec<u32>]) -> Vec<u32> {
    let caches = topology.caches();
    let group = |core: &Vec<u32>| -> u32 {
        let Some(&first) = core.first() else { return u32::MAX };
        caches.iter().position(|c| c.cpus.contains(first)).map_or(u32::MAX, |g| g as u32)
    };
    let groups: Vec<u32> = cores.iter().map(group).collect();
    if groups.iter().all(|&g| g == groups[0]) {
        return Vec::new();
    }
    groups
}

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

impl HostState {
    /// An empty host that reserves nothing.
    pub fn new(topology: &Topology) -> HostState {
        HostState::build(topology, Reservations::default())
    }

    /// An empty host that keeps `reservations` for itself. Fails on a
    /// reserved CPU the host does not have (or has offline).
    pub fn with_reservations(topology: &Topology, reservations: Reservations) -> Result<HostState, StateError> {
        let cpus = reservations.cpus.iter().chain(reservations.shared_cpus.iter());
        if let Some(bad) = cpus.into_iter().find(|&c| !topology.pu(c).is_some_and(|p| p.online)) {
            return Err(StateError::UnknownPu(bad));
        }
        if let Some(both) = reservations.cpus.intersection(&reservations.shared_cpus).iter().next() {
            return Err(StateError::ReservedAndShared(both));
        }
        Ok(HostState::build(topology, reservations))
    }

    /// What the host keeps for itself.
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    /// Makes this state share `other`'s fixed facts (nodes, distances, PU
    /// tables) when they are equal, so that states built one by one for
    /// hosts of one kind (as a service builds them from its store) keep
    /// one copy; what VMs use is never shared. Whether they are now shared.
    pub fn share_layout(&mut self, other: &HostState) -> bool {
        if Arc::ptr_eq(&self.facts, &other.facts) {
            return true;
        }
        let same = self.facts == other.facts
            && self.distances == other.distances
            && self.pu_node == other.pu_node
            && self.pu_core == other.pu_core;
        if same {
            self.facts = Arc::clone(&other.facts);
            self.distances = Arc::clone(&other.distances);
            self.pu_node = Arc::clone(&other.pu_node);
            self.pu_core = Arc::clone(&other.pu_core);
        }
        same
    }

    fn build(topology: &Topology, reservations: Reservations) -> HostState {
        let n = topology.nodes().len();
        let distances = planning_distances(topology);
        let pu_node = online_pu_nodes(topology);
        let max_pu = pu_node.len();
        let devices = passthrough_devices(topology);
        let facts = node_facts(topology, &pu_node, &distances, &devices);
        let uses = facts.iter().map(|f| NodeUse { pages_used: vec![0; f.pools.len()], ..NodeUse::default() }).collect();
        let mut pu_core = vec![u32::MAX; max_pu];
        for f in &facts {
            for (ci, core) in f.cores.iter().enumerate() {
                for &pu in core {
                    if let Some(slot) = pu_core.get_mut(pu as usize) {
                        *slot = u32::try_from(ci).unwrap_or(u32::MAX);
                    }
                }
            }
        }
        let smt = facts.iter().any(|f| f.cores.iter().any(|c| c.len() >= 2));
        let host_cpu = pu_flags(max_pu, &reservations.cpus);
        let pool = pu_flags(max_pu, &reservations.shared_cpus);
        let mut state = HostState {
            facts: Arc::new(facts),
            uses,
            distances: Arc::new(distances),
            pu_node: Arc::new(pu_node),
            pu_core: Arc::new(pu_core),
            taken: vec![false; max_pu],
            owner: vec![0; max_pu],
            load: vec![0; max_pu],
            host_cpu,
            pool,
            reservations,
            smt,
            dies: *topology.arch() == Arch::X86_64,
            block: if matches!(topology.arch(), Arch::Ppc64le | Arch::Ppc64) { PSERIES_BLOCK } else { BLOCK },
            devices,
            placed: Vec::new(),
            floating: Vec::new(),
            shared_vms: 0,
            names: Vec::new(),
            scratch: Scratch { bits: vec![0; max_pu.div_ceil(64)], ..Scratch::default() },
        };
        for i in 0..n {
            state.recount(i);
        }
        state
    }

    /// Recomputes the CPU counters of one node from the PU tables.
    fn recount(&mut self, node: usize) {
        let Some(facts) = self.facts.get(node) else { return };
        let mut sum = CoreCounts::default();
        for core in &facts.cores {
            sum.add(self.core_counts(core));
        }
        if let Some(use_) = self.uses.get_mut(node) {
            use_.free_cores = sum.free_cores;
            use_.free_smt_cores = sum.free_smt;
            use_.free_pus = sum.free_pus;
            use_.open_pus = sum.open;
        }
    }

    /// One core's share of its node's CPU counters.
    fn core_counts(&self, core: &[u32]) -> CoreCounts {
        let pools = !self.reservations.shared_cpus.is_empty();
        let mut c = CoreCounts::default();
        let mut all_free = true;
        for &pu in core {
            let i = pu as usize;
            let (Some(&taken), Some(&host_cpu), Some(&load), Some(&shared)) =
                (self.taken.get(i), self.host_cpu.get(i), self.load.get(i), self.pool.get(i))
            else {
                // Not a PU of this host: never free.
                all_free = false;
                continue;
            };
            let taken = taken || host_cpu;
            // With pools, shared VMs float only over the shared pool and
            // dedicated vCPUs never go there.
            if !taken && (!pools || shared) {
                c.open += 1;
            }
            if !taken && load == 0 && !shared {
                c.free_pus += 1;
            } else {
                all_free = false;
            }
        }
        if all_free {
            c.free_cores = 1;
            c.free_smt = u32::from(core.len() >= 2);
        }
        c
    }

    /// A PU's core, by its index on the PU's node (`u32::MAX`, which
    /// names no core, for a PU outside the tables).
    fn core_at(&self, pu: u32) -> u32 {
        self.pu_core.get(pu as usize).copied().unwrap_or(u32::MAX)
    }

    /// A PU's node position and core index on it.
    pub(crate) fn core_index(&self, pu: u32) -> Option<(usize, u32)> {
        Some((self.pu_node.get(pu as usize).copied().flatten()?, self.core_at(pu)))
    }

    /// Takes the shares of `cores` (node position, core index) out of
    /// their nodes' counters (`back` false), or puts them back: taken out
    /// before their PUs change and put back after, they keep the counters
    /// what a recount of the whole node would make them, at the cost of a
    /// VM's own cores rather than its nodes' (checked against the recount
    /// in debug builds).
    fn count_cores(&mut self, cores: &[(usize, u32)], back: bool) {
        for &(node, ci) in cores {
            let Some(core) = self.facts.get(node).and_then(|f| f.cores.get(ci as usize)) else { continue };
            let c = self.core_counts(core);
            let Some(use_) = self.uses.get_mut(node) else { continue };
            let apply = |x: &mut u32, d: u32| *x = if back { x.wrapping_add(d) } else { x.wrapping_sub(d) };
            apply(&mut use_.free_cores, c.free_cores);
            apply(&mut use_.free_smt_cores, c.free_smt);
            apply(&mut use_.free_pus, c.free_pus);
            apply(&mut use_.open_pus, c.open);
        }
        #[cfg(debug_assertions)]
        if back {
            for &(node, _) in cores {
                let kept = self.uses[node].clone();
                self.recount(node);
                debug_assert_eq!(kept, self.uses[node], "counters of node position {node} kept in step");
            }
        }
    }

    /// Position of a node id.
    pub(crate) fn node_pos(&self, id: NodeId) -> Option<usize> {
        self.facts.binary_search_by_key(&id, |f| f.id).ok()
    }

    /// Number of nodes.
    pub(crate) fn node_count(&self) -> usize {
        self.facts.len()
    }

    /// What each node can give VMs, in node order ([`NodeCapacity`]: the
    /// one definition of it).
    pub fn capacity(&self) -> Vec<NodeCapacity> {
        self.facts
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut cores = 0;
                let mut threads = 0;
                for core in &f.cores {
                    let usable = core.iter().filter(|&&pu| !self.pu_reserved(pu) && !self.pu_shared_pool(pu)).count();
                    threads += usable as u32;
                    cores += u32::from(usable > 0);
                }
                NodeCapacity { id: f.id, cores, threads, memory: self.node_capacity(i), hugepages: f.pools.clone() }
            })
            .collect()
    }

    /// The memory of a node VMs may use when no VM is placed on it: its
    /// total less its huge page pools and the host's per-node reserve.
    pub(crate) fn node_capacity(&self, node: usize) -> u64 {
        self.facts.get(node).map_or(0, |f| f.memory_bytes.saturating_sub(self.reservations.memory_per_node))
    }

    /// Ordinary memory still free on a node for planning: less the
    /// node's reserve and the overhead of the VMs there.
    pub(crate) fn free_memory(&self, node: usize) -> u64 {
        match self.uses.get(node) {
            Some(u) => {
                self.physical_free(node).saturating_sub(u.overhead).saturating_sub(self.reservations.memory_per_node)
            }
            None => 0,
        }
    }

    /// Ordinary memory no placement uses, whatever the margins.
    fn physical_free(&self, node: usize) -> u64 {
        match (self.facts.get(node), self.uses.get(node)) {
            (Some(f), Some(u)) => f.memory_bytes.saturating_sub(u.memory_used),
            _ => 0,
        }
    }

    /// Free pages of one huge page size on a node (0 without such a pool).
    pub(crate) fn free_pages(&self, node: usize, size: u64) -> u64 {
        let (Some(f), Some(u)) = (self.facts.get(node), self.uses.get(node)) else {
            return 0;
        };
        f.pools
            .iter()
            .zip(&u.pages_used)
            .find(|((s, _), _)| *s == size)
            .map_or(0, |((_, avail), used)| avail.saturating_sub(*used))
    }

    /// Whether a PU is free for a new dedicated vCPU (not the host's, not
    /// in the shared pool).
    pub(crate) fn pu_free(&self, pu: u32) -> bool {
        self.pu_unused(pu) && !self.pu_reserved(pu) && !self.pu_shared_pool(pu)
    }

    /// Whether a PU is in the host's shared pool.
    pub fn pu_shared_pool(&self, pu: u32) -> bool {
        self.pool.get(pu as usize).copied().unwrap_or(false)
    }

    /// Whether a PU runs something: a dedicated or shared vCPU.
    pub(crate) fn pu_busy(&self, pu: u32) -> bool {
        !self.pu_unused(pu) && !self.pu_reserved(pu)
    }

    /// Whether a PU carries nothing (reserved for the host or not).
    fn pu_unused(&self, pu: u32) -> bool {
        !self.taken.get(pu as usize).copied().unwrap_or(true) && self.load.get(pu as usize).copied().unwrap_or(1) == 0
    }

    /// Whether a new shared VM may float over a PU: not dedicated, not the
    /// host's.
    pub(crate) fn pu_open(&self, pu: u32) -> bool {
        !self.taken.get(pu as usize).copied().unwrap_or(true)
            && !self.pu_reserved(pu)
            && (self.reservations.shared_cpus.is_empty() || self.pu_shared_pool(pu))
    }

    /// Whether a PU is reserved for the host.
    pub fn pu_reserved(&self, pu: u32) -> bool {
        self.host_cpu.get(pu as usize).copied().unwrap_or(false)
    }

    /// Whether a VM of that name is placed.
    pub(crate) fn has_vm(&self, name: &str) -> bool {
        self.name_slot(name).is_ok()
    }

    /// Where `name` is (`Ok`) or would go (`Err`) in `names`.
    fn name_slot(&self, name: &str) -> Result<usize, usize> {
        let h = name_hash(name);
        let first = self.names.partition_point(|&(x, _)| x < h);
        let same = self.names.get(first..).unwrap_or(&[]).iter().take_while(|&&(x, _)| x == h);
        for (n, &(_, i)) in same.enumerate() {
            if self.placed.get(i).is_some_and(|p| p.vm == name) {
                return Ok(first + n);
            }
        }
        Err(first)
    }

    /// Where a VM is in [`HostState::placements`].
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        let slot = self.name_slot(name).ok()?;
        self.names.get(slot).map(|&(_, i)| i)
    }

    /// Records a placement (from an earlier plan) as taken. The placement
    /// is checked whole before anything is recorded, so a refused one
    /// leaves the state unchanged.
    ///
    /// A dedicated VM takes its pinned PUs and the rest of its `cpuset`
    /// (under `isolate` that holds the idle siblings it keeps to itself);
    /// a shared VM adds one unit of load to the PU each vCPU is counted
    /// against. The PUs a dedicated VM takes leave the floating sets of
    /// the shared VMs placed before it ([`HostState::placements`] shows
    /// the sets as they are now).
    pub fn place(&mut self, placement: &Placement) -> Result<(), StateError> {
        self.place_shared(Arc::new(placement.clone()))
    }

    /// [`HostState::place`], keeping the placement it is given rather than
    /// a copy: a batch's decision and its state share one.
    pub fn place_shared(&mut self, placement: Arc<Placement>) -> Result<(), StateError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.place_with(placement, &mut scratch);
        // Leave the buffers empty for the next call, whatever failed.
        scratch.cores.clear();
        scratch.per_node.clear();
        scratch.bits.iter_mut().for_each(|w| *w = 0);
        self.scratch = scratch;
        result
    }

    fn place_with(&mut self, kept: Arc<Placement>, scratch: &mut Scratch) -> Result<(), StateError> {
        let placement = &*kept;
        let vm = &placement.vm;
        let name_at = match self.name_slot(vm) {
            Ok(_) => return Err(StateError::DuplicateVm(vm.clone())),
            Err(at) => at,
        };
        for id in &placement.nodes {
            self.node_pos(*id).ok_or(StateError::UnknownNode(*id))?;
        }
        for device in &placement.devices {
            if let Some(holder) = self.device_holder(device) {
                return Err(StateError::DeviceTaken {
                    vm: vm.clone(),
                    device: device.clone(),
                    holder: holder.to_string(),
                });
            }
        }
        self.check_cpus(placement, scratch)?;
        self.check_memory(placement, &mut scratch.per_node)?;
        self.record_checked(kept, name_at, scratch);
        Ok(())
    }

    /// [`HostState::place`]'s check of a placement's CPUs: each pin on the
    /// node it names, a dedicated VM's PUs free and pinned once, a shared
    /// vCPU's PU not dedicated, a floating vCPU in the shared pool. Leaves
    /// the PUs to take marked in `scratch.bits` and the cores they change
    /// in `scratch.cores`.
    fn check_cpus(&self, placement: &Placement, scratch: &mut Scratch) -> Result<(), StateError> {
        let vm = &placement.vm;
        let dedicated = placement.cpu_mode == CpuMode::Dedicated;
        let cores = &mut scratch.cores;
        // A dedicated VM's PUs (pins, then the rest of its cpuset) are
        // marked in a bitmap sized to the host's PU numbers, which is both
        // the duplicate check and, read back, the ascending order in which
        // they are checked and recorded.
        let bits = &mut scratch.bits;
        for pin in &placement.vcpus {
            let node = self.pu_node.get(pin.pu as usize).copied().flatten().ok_or(StateError::UnknownPu(pin.pu))?;
            let actual = self.facts[node].id;
            if actual != pin.node {
                return Err(StateError::PuNodeMismatch { vcpu: pin.vcpu, pu: pin.pu, claimed: pin.node, actual });
            }
            if dedicated && placement.floats(pin.vcpu).is_none() {
                // `pu_node` has an entry, so the PU has a bit.
                if mark_bit(bits, pin.pu) {
                    return Err(StateError::PuPinnedTwice { vm: vm.clone(), pu: pin.pu });
                }
            } else if self.taken.get(pin.pu as usize).copied().unwrap_or(true) {
                return Err(StateError::PuTaken { vm: vm.clone(), pu: pin.pu });
            }
            cores.push((node, self.core_at(pin.pu)));
        }
        // PUs past the bitmap do not exist on this host; the first one is
        // reported after every lower PU was checked, as an ascending walk
        // over the whole set would.
        let mut beyond: Option<u32> = None;
        if dedicated {
            for pu in placement.cpuset.iter() {
                if (pu as usize) < self.taken.len() {
                    mark_bit(bits, pu);
                } else {
                    beyond = beyond.or(Some(pu));
                }
            }
        }
        for (w, &word) in bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let pu = (w * 64) as u32 + rest.trailing_zeros();
                rest &= rest - 1;
                let node = self.pu_node.get(pu as usize).copied().flatten().ok_or(StateError::UnknownPu(pu))?;
                if !self.pu_unused(pu) {
                    return Err(StateError::PuTaken { vm: vm.clone(), pu });
                }
                cores.push((node, self.core_at(pu)));
            }
        }
        if let Some(pu) = beyond {
            return Err(StateError::UnknownPu(pu));
        }
        // A mixed VM's floating vCPUs run in the shared pool, whose CPUs
        // are never dedicated: their sets then never shrink.
        for f in &placement.floating {
            let counted = placement.vcpus.iter().filter(|v| f.vcpus.contains(v.vcpu)).map(|v| v.pu);
            if let Some(cpu) = f.cpus.iter().chain(counted).find(|&pu| !self.pu_shared_pool(pu)) {
                return Err(StateError::FloatOutsidePool { vm: vm.clone(), cpu });
            }
        }
        Ok(())
    }

    /// [`HostState::place`]'s check of a placement's memory: what it
    /// charges each node (summed in `per_node`) fits the node's free
    /// memory, or its free huge pages in whole pages.
    fn check_memory(&self, placement: &Placement, per_node: &mut Vec<(usize, u64)>) -> Result<(), StateError> {
        let vm = &placement.vm;
        for (id, bytes) in placement.charged_memory() {
            let pos = self.node_pos(*id).ok_or(StateError::UnknownNode(*id))?;
            match per_node.iter_mut().find(|(p, _)| *p == pos) {
                Some(entry) => entry.1 = entry.1.saturating_add(*bytes),
                None => per_node.push((pos, *bytes)),
            }
        }
        for &(pos, bytes) in per_node.iter() {
            let node = self.facts[pos].id;
            match placement.hugepage_bytes {
                Some(size) if size > 0 => {
                    if bytes % size != 0 {
                        return Err(StateError::NotWholePages { vm: vm.clone(), node, bytes, size });
                    }
                    let free = self.free_pages(pos, size);
                    if bytes / size > free {
                        return Err(StateError::HugePagesExceeded {
                            vm: vm.clone(),
                            node,
                            size,
                            needed: bytes / size,
                            free,
                        });
                    }
                }
                _ => {
                    let free = self.physical_free(pos);
                    if bytes > free {
                        return Err(StateError::MemoryExceeded { vm: vm.clone(), node, needed: bytes, free });
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a placement [`HostState::place_with`] has checked: its PUs
    /// taken or loaded, memory and pages used, overhead, devices, and the
    /// counters of the cores it changes.
    fn record_checked(&mut self, kept: Arc<Placement>, name_at: usize, scratch: &mut Scratch) {
        let placement = &*kept;
        let vm = &placement.vm;
        let dedicated = placement.cpu_mode == CpuMode::Dedicated;
        let (cores, bits, per_node) = (&mut scratch.cores, &scratch.bits, &scratch.per_node);
        // Checked: now record. The counters of the cores whose PUs change
        // are taken out here and put back once they have changed.
        cores.sort_unstable();
        cores.dedup();
        self.count_cores(cores, false);
        for (w, &word) in bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let pu = w * 64 + rest.trailing_zeros() as usize;
                rest &= rest - 1;
                if let Some(t) = self.taken.get_mut(pu) {
                    *t = true;
                }
            }
        }
        if dedicated {
            let me = u32::try_from(self.placed.len() + 1).unwrap_or(u32::MAX);
            for pin in placement.vcpus.iter().filter(|v| placement.floats(v.vcpu).is_none()) {
                if let Some(o) = self.owner.get_mut(pin.pu as usize) {
                    *o = me;
                }
            }
        }
        // Shared vCPUs, and a mixed VM's floating ones, load their PUs.
        for pin in placement.vcpus.iter().filter(|v| !dedicated || placement.floats(v.vcpu).is_some()) {
            if let Some(l) = self.load.get_mut(pin.pu as usize) {
                *l = l.saturating_add(1);
            }
            if let Some(node) = self.pu_node.get(pin.pu as usize).copied().flatten() {
                self.uses[node].shared_load += 1;
            }
        }
        for &(pos, bytes) in per_node.iter() {
            let use_ = &mut self.uses[pos];
            match placement.hugepage_bytes {
                Some(size) if size > 0 => {
                    if let Some(i) = self.facts[pos].pools.iter().position(|(s, _)| *s == size) {
                        use_.pages_used[i] = use_.pages_used[i].saturating_add(bytes / size);
                    }
                }
                _ => use_.memory_used = use_.memory_used.saturating_add(bytes),
            }
        }
        if let Some(pos) = self.overhead_node(placement) {
            let use_ = &mut self.uses[pos];
            use_.overhead = use_.overhead.saturating_add(self.reservations.overhead.bytes(placement.memory_bytes));
        }
        self.hold_devices(&placement.devices, true);
        self.count_large(placement, true);
        self.count_cores(cores, true);
        if dedicated {
            self.shrink_shared(&placement.cpuset);
        } else {
            self.shared_vms += 1;
        }
        self.names.insert(name_at, (name_hash(vm), self.placed.len()));
        self.floating.push((!dedicated).then(|| Box::new((placement.cpuset.clone(), placement.emulator.clone()))));
        self.placed.push(kept);
    }

    /// Forgets a VM: its PUs, load, memory and huge pages are free again,
    /// and the shared VMs placed before it get back the CPUs it took from
    /// their floating sets. Returns the placement as it was recorded last
    /// (for a migration: remove here, place in another state). The state
    /// after `place(p)` then `remove(&p.vm)` equals the state before.
    pub fn remove(&mut self, name: &str) -> Result<Placement, StateError> {
        let slot = self.name_slot(name).map_err(|_| StateError::UnknownVm(name.to_string()))?;
        let (_, at) = self.names.remove(slot);
        let placement = Arc::unwrap_or_clone(self.placed.remove(at));
        self.floating.remove(at);
        for entry in &mut self.names {
            if entry.1 > at {
                entry.1 -= 1;
            }
        }
        let gone = u32::try_from(at + 1).unwrap_or(u32::MAX);
        for o in self.owner.iter_mut().filter(|o| **o > gone) {
            *o -= 1;
        }
        let dedicated = placement.cpu_mode == CpuMode::Dedicated;
        // The counters of the cores whose PUs change, taken out before and
        // put back after.
        let mut cores: Vec<(usize, u32)> = placement.vcpus.iter().filter_map(|pin| self.core_index(pin.pu)).collect();
        if dedicated {
            cores.extend(placement.cpuset.iter().filter_map(|pu| self.core_index(pu)));
        }
        cores.sort_unstable();
        cores.dedup();
        self.count_cores(&cores, false);
        let node_of = |pu: u32| self.pu_node.get(pu as usize).copied().flatten();
        for pin in &placement.vcpus {
            if dedicated && placement.floats(pin.vcpu).is_none() {
                if let Some(t) = self.taken.get_mut(pin.pu as usize) {
                    *t = false;
                }
                if let Some(o) = self.owner.get_mut(pin.pu as usize) {
                    *o = 0;
                }
            } else {
                if let Some(l) = self.load.get_mut(pin.pu as usize) {
                    *l = l.saturating_sub(1);
                }
                if let Some(node) = node_of(pin.pu) {
                    self.uses[node].shared_load = self.uses[node].shared_load.saturating_sub(1);
                }
            }
        }
        if dedicated {
            for pu in placement.cpuset.iter() {
                if let Some(t) = self.taken.get_mut(pu as usize) {
                    *t = false;
                }
            }
        } else {
            self.shared_vms = self.shared_vms.saturating_sub(1);
        }
        for (id, bytes) in placement.charged_memory() {
            let Some(pos) = self.node_pos(*id) else { continue };
            let use_ = &mut self.uses[pos];
            match placement.hugepage_bytes {
                Some(size) if size > 0 => {
                    if let Some(i) = self.facts[pos].pools.iter().position(|(s, _)| *s == size) {
                        use_.pages_used[i] = use_.pages_used[i].saturating_sub(bytes / size);
                    }
                }
                _ => use_.memory_used = use_.memory_used.saturating_sub(*bytes),
            }
        }
        if let Some(pos) = self.overhead_node(&placement) {
            let use_ = &mut self.uses[pos];
            use_.overhead = use_.overhead.saturating_sub(self.reservations.overhead.bytes(placement.memory_bytes));
        }
        self.hold_devices(&placement.devices, false);
        self.count_large(&placement, false);
        self.count_cores(&cores, true);
        if placement.cpu_mode == CpuMode::Dedicated && self.shared_vms > 0 {
            self.regrow_shared(at, &placement.cpuset);
        }
        Ok(placement)
    }

    /// Whether node position `j` reaches every node of `set` (no SLIT
    /// distance of 255, firmware's "unreachable", between them).
    pub(crate) fn reaches(&self, j: usize, set: &[usize]) -> bool {
        let row = self.distances.get(j);
        set.iter().all(|&i| row.and_then(|r| r.get(i)).is_none_or(|&d| d < crate::limits::UNREACHABLE))
    }

    /// Whether the nodes of `set` all reach each other.
    pub(crate) fn all_reach(&self, set: &[usize]) -> bool {
        (1..set.len()).all(|x| self.reaches(set[x], &set[..x]))
    }

    /// Counts a large dedicated VM on the nodes of its pinned vCPUs
    /// ([`NodeUse::large_vms`]), or no longer.
    fn count_large(&mut self, p: &Placement, take: bool) {
        let large = p.cpu_mode == CpuMode::Dedicated
            && p.guest.threads <= 1
            && p.vcpus.len() > crate::limits::SMALL_VM_VCPUS as usize;
        if !large {
            return;
        }
        let mut seen: Vec<usize> = Vec::with_capacity(p.nodes.len());
        for pin in p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()) {
            let Some(node) = self.pu_node.get(pin.pu as usize).copied().flatten() else { continue };
            if seen.contains(&node) {
                continue;
            }
            seen.push(node);
            if let Some(u) = self.uses.get_mut(node) {
                u.large_vms = if take { u.large_vms.saturating_add(1) } else { u.large_vms.saturating_sub(1) };
            }
        }
    }

    /// Counts passthrough devices as held (or free again) on their nodes.
    fn hold_devices(&mut self, held: &[String], take: bool) {
        for address in held {
            let lower = address.to_ascii_lowercase();
            let Ok(at) = self.devices.binary_search_by(|d| d.0.as_str().cmp(lower.as_str())) else { continue };
            let node = self.devices[at].1;
            if let Some(u) = self.uses.get_mut(node) {
                u.devices_held = if take { u.devices_held.saturating_add(1) } else { u.devices_held.saturating_sub(1) };
            }
        }
    }

    /// Whether the host lists any passthrough device with a known node.
    pub(crate) fn has_passthrough(&self) -> bool {
        !self.devices.is_empty()
    }

    /// Passthrough devices (GPU, NIC, NVMe) on a node that no VM holds.
    pub(crate) fn free_devices(&self, node: usize) -> u32 {
        match (self.facts.get(node), self.uses.get(node)) {
            (Some(f), Some(u)) => f.passthrough.saturating_sub(u.devices_held),
            _ => 0,
        }
    }

    /// After a dedicated VM that was at position `at` is gone: the shared
    /// VMs placed before it whose recorded floating set met its CPUs have
    /// their sets worked out again from the recorded ones, shrunk by the
    /// dedicated VMs still placed after them, in order, exactly as
    /// [`HostState::shrink_shared`] did when those were placed.
    fn regrow_shared(&mut self, at: usize, freed: &CpuSet) {
        for i in 0..at.min(self.placed.len()) {
            let Some(Some(origin)) = self.floating.get(i) else { continue };
            let (mut cpuset, mut emulator) = (origin.0.clone(), origin.1.clone());
            if cpuset.is_disjoint(freed) {
                continue;
            }
            for later in self.placed.iter().skip(i + 1) {
                if later.cpu_mode != CpuMode::Dedicated || cpuset.is_disjoint(&later.cpuset) {
                    continue;
                }
                let was = std::mem::take(&mut cpuset);
                cpuset = was.difference(&later.cpuset);
                if emulator == was {
                    emulator = cpuset.clone();
                }
            }
            if let Some(p) = self.placed.get_mut(i) {
                // A copy only if a decision still shares it: the decision
                // keeps the sets it was planned with.
                let p = Arc::make_mut(p);
                p.cpuset = cpuset;
                p.emulator = emulator;
            }
        }
    }

    /// Takes newly dedicated PUs out of the floating sets of the shared
    /// VMs placed before, as Kubernetes' CPU manager shrinks its shared
    /// pool: otherwise a shared VM's vCPUs could still run on CPUs a
    /// dedicated VM was promised. The PUs shared vCPUs are counted against
    /// are never dedicated, so no floating set becomes empty. An emulator
    /// set that was the floating set follows it; a housekeeping set is the
    /// operator's and stays.
    fn shrink_shared(&mut self, taken: &CpuSet) {
        if self.shared_vms == 0 {
            return;
        }
        for p in &mut self.placed {
            if p.cpu_mode != CpuMode::Shared || p.cpuset.is_disjoint(taken) {
                continue;
            }
            // A copy only if a decision still shares it: the decision
            // keeps the sets it was planned with.
            let p = Arc::make_mut(p);
            let was = std::mem::take(&mut p.cpuset);
            p.cpuset = was.difference(taken);
            if p.emulator == was {
                p.emulator = p.cpuset.clone();
            }
        }
    }

    /// The node QEMU's own memory is counted on: the VM's first memory
    /// node (its first node when it lists no memory).
    fn overhead_node(&self, placement: &Placement) -> Option<usize> {
        let id = placement.memory.first().map(|m| m.0).or_else(|| placement.nodes.first().copied())?;
        self.node_pos(id)
    }

    /// Room for `more` placements: a batch's lists are sized once instead
    /// of regrown, each regrowth touching fresh memory (a large share of a
    /// VM's cost, docs/performance.md).
    pub fn reserve(&mut self, more: usize) {
        self.placed.reserve(more);
        self.floating.reserve(more);
        self.names.reserve(more);
    }

    /// The placements recorded so far, in order (as they are now: a
    /// shared VM's floating set shrinks as dedicated VMs take CPUs).
    pub fn placements(&self) -> &[Arc<Placement>] {
        &self.placed
    }

    /// The VM a PCI device is passed through to, if any.
    pub fn device_holder(&self, device: &str) -> Option<&str> {
        self.placed.iter().find(|p| p.devices.iter().any(|d| d == device)).map(|p| p.vm.as_str())
    }

    /// The placement of the VM of that name, as it is now.
    pub fn placement(&self, name: &str) -> Option<&Placement> {
        let at = self.name_slot(name).ok()?;
        self.names.get(at).and_then(|&(_, i)| self.placed.get(i)).map(|p| &**p)
    }

    /// The shared placements recorded so far, in order.
    pub(crate) fn shared_placements(&self) -> impl Iterator<Item = &Placement> {
        let upto = if self.shared_vms > 0 { self.placed.len() } else { 0 };
        self.placed.get(..upto).unwrap_or(&[]).iter().map(|p| &**p).filter(|p| p.cpu_mode == CpuMode::Shared)
    }

    /// Free whole cores on a node (all threads unused), by node id.
    pub fn free_cores(&self, node: NodeId) -> Option<u32> {
        self.node_pos(node).map(|i| self.uses[i].free_cores)
    }

    /// Free PUs on a node (not dedicated, no shared load), by node id.
    pub fn free_pus(&self, node: NodeId) -> Option<u32> {
        self.node_pos(node).map(|i| self.uses[i].free_pus)
    }

    /// Ordinary memory free on a node for numaplace's VMs, bytes.
    pub fn free_memory_bytes(&self, node: NodeId) -> Option<u64> {
        self.node_pos(node).map(|i| self.free_memory(i))
    }

    /// Free huge pages of `size` bytes on a node.
    pub fn free_hugepages(&self, node: NodeId, size: u64) -> Option<u64> {
        self.node_pos(node).map(|i| self.free_pages(i, size))
    }

    /// Shared vCPUs counted against a node.
    pub fn shared_load(&self, node: NodeId) -> Option<u64> {
        self.node_pos(node).map(|i| self.uses[i].shared_load)
    }

    /// The host's nodes as the planner counts them, in node order: the
    /// facts every user of a state (the simulator's metrics, a service's
    /// per-node summaries) reads from here rather than working them out
    /// again from the topology.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeSpec<'_>> {
        self.facts.iter().map(|f| NodeSpec { id: f.id, cores: &f.cores, memory_bytes: f.memory_bytes })
    }

    /// Position (in [`HostState::nodes`]) of the node of an online PU.
    pub fn pu_node(&self, pu: u32) -> Option<usize> {
        self.pu_node.get(pu as usize).copied().flatten()
    }

    /// The PUs of a PU's core (itself and its siblings).
    pub(crate) fn core_of(&self, pu: u32) -> Option<&[u32]> {
        self.pu_node(pu).and_then(|node| self.core_on(node, pu))
    }

    /// [`HostState::core_of`] when the PU is on the node at `node`.
    pub(crate) fn core_on(&self, node: usize, pu: u32) -> Option<&[u32]> {
        if self.pu_node(pu) != Some(node) {
            return None;
        }
        let ci = *self.pu_core.get(pu as usize)?;
        self.facts.get(node)?.cores.get(ci as usize).map(Vec::as_slice)
    }

    /// One past the highest PU number the host has.
    pub fn pu_limit(&self) -> usize {
        self.pu_node.len()
    }

    /// Whether a PU is dedicated to (or reserved by) a placed VM.
    pub fn pu_taken(&self, pu: u32) -> bool {
        self.taken.get(pu as usize).copied().unwrap_or(false)
    }

    /// The dedicated VM with a vCPU pinned to `pu`, if any.
    pub(crate) fn pu_owner(&self, pu: u32) -> Option<&Placement> {
        let at = self.owner.get(pu as usize).copied().unwrap_or(0).checked_sub(1)?;
        self.placed.get(at as usize).map(|p| &**p)
    }

    /// Positions (in [`HostState::placements`]) of the dedicated VMs with
    /// a vCPU pinned to one of `pus`, ascending.
    pub(crate) fn owners_of(&self, pus: &CpuSet) -> Vec<usize> {
        let mut at: Vec<usize> = pus
            .iter()
            .filter_map(|pu| self.owner.get(pu as usize).copied().unwrap_or(0).checked_sub(1))
            .map(|i| i as usize)
            .collect();
        at.sort_unstable();
        at.dedup();
        at
    }

    /// Shared vCPUs counted against a PU.
    pub fn pu_shared_load(&self, pu: u32) -> u32 {
        self.load.get(pu as usize).copied().unwrap_or(0)
    }

    /// Ordinary memory placed VMs use on the node at a position, bytes
    /// (their guest memory; [`HostState::overhead_used`] is QEMU's).
    pub fn memory_used(&self, node: usize) -> u64 {
        self.uses.get(node).map_or(0, |u| u.memory_used)
    }

    /// QEMU overhead counted on the node at a position, bytes.
    pub fn overhead_used(&self, node: usize) -> u64 {
        self.uses.get(node).map_or(0, |u| u.overhead)
    }

    /// The VMs holding host CPUs, most CPUs first, then by name: a
    /// dedicated VM's pinned CPUs and the idle siblings it keeps, a mixed
    /// VM's pinned CPUs, a shared VM's CPUs its vCPUs are counted against.
    /// A CPU shortfall names them (`held by db1 (CPUs 0-7), ...`), so an
    /// operator sees which VMs, numaplace's or not, fill the host.
    pub fn cpu_holders(&self) -> Vec<Holder> {
        let mut out: Vec<Holder> = self
            .placed
            .iter()
            .map(|p| {
                let cpus = match p.cpu_mode {
                    CpuMode::Dedicated => p.cpuset.clone(),
                    CpuMode::Shared => p.vcpus.iter().map(|v| v.pu).collect(),
                };
                Holder { vm: p.vm.clone(), cpus }
            })
            .filter(|h| !h.cpus.is_empty())
            .collect();
        out.sort_by(|a, b| b.cpus.len().cmp(&a.cpus.len()).then_with(|| a.vm.cmp(&b.vm)));
        out
    }

    /// PUs dedicated to (or reserved by) placed VMs.
    pub fn taken_pus(&self) -> CpuSet {
        self.taken.iter().enumerate().filter(|(_, t)| **t).map(|(i, _)| i as u32).collect()
    }
}

/// FNV-1a: a few instructions per byte of a short VM name, and the same
/// on every run, so the index order (and any plan) does not vary.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The distances the planner plans with: the source's, except that
/// without distances from the source every pair is the assumed 20, and a
/// memory-only node would be as near to every CPU node as to the one its
/// group or HMAT initiators name. Planning takes it as halfway to local
/// (15) from those, so a VM's HBM or CXL memory is the one beside its
/// vCPUs (and its guest is told so).
fn planning_distances(topology: &Topology) -> Vec<Vec<u32>> {
    let n = topology.nodes().len();
    let mut distances: Vec<Vec<u32>> = topology.distance_rows().to_vec();
    if !topology.distances_known() {
        for i in 0..n {
            if let (local, numaplace_topo::Locality::Source) = topology.local_cpu_nodes(i) {
                for j in local.into_iter().filter(|&j| j != i) {
                    for (a, b) in [(i, j), (j, i)] {
                        if let Some(d) = distances.get_mut(a).and_then(|r| r.get_mut(b)) {
                            *d = NEAR_MEMORY_DISTANCE;
                        }
                    }
                }
            }
        }
    }
    distances
}

/// Each CPU number's node position, for online PUs; one slot per number up
/// to the highest PU.
fn online_pu_nodes(topology: &Topology) -> Vec<Option<usize>> {
    let max_pu = topology.pus().map(|p| p.id as usize + 1).max().unwrap_or(0);
    let mut pu_node = vec![None; max_pu];
    for pu in topology.pus() {
        if pu.online {
            if let Some(slot) = pu_node.get_mut(pu.id as usize) {
                *slot = pu.node;
            }
        }
    }
    pu_node
}

/// The devices a VM may ask for by address (GPUs, NICs, NVMe), lower-case
/// address and node position, sorted.
fn passthrough_devices(topology: &Topology) -> Vec<(String, usize)> {
    let nodes = topology.nodes();
    let mut devices: Vec<(String, usize)> = topology
        .devices()
        .iter()
        .filter(|d| matches!(d.kind, DeviceKind::Gpu | DeviceKind::Nic | DeviceKind::Nvme))
        .filter_map(|d| {
            let pos = nodes.iter().position(|n| Some(n.id) == d.node)?;
            Some((d.address.to_ascii_lowercase(), pos))
        })
        .collect();
    devices.sort();
    devices
}

/// The fixed facts of each node: its cores (online threads only), memory
/// less its huge page pools, pools, distance tiers, package, devices, kind
/// and L3 groups.
fn node_facts(
    topology: &Topology,
    pu_node: &[Option<usize>],
    distances: &[Vec<u32>],
    devices: &[(String, usize)],
) -> Vec<NodeFacts> {
    let nodes = topology.nodes();
    let n = nodes.len();
    let mut core_lists: Vec<Vec<Vec<u32>>> = vec![Vec::new(); n];
    let mut packages: Vec<Option<u32>> = vec![None; n];
    for core in topology.cores() {
        // A core whose threads sit on two nodes (a firmware bug the
        // model warns about) is split: each node gets its own threads.
        let mut per_node: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for cpu in core.cpus.iter() {
            if let Some(Some(node)) = pu_node.get(cpu as usize) {
                per_node.entry(*node).or_default().push(cpu);
            }
        }
        for (node, pus) in per_node {
            if let Some(list) = core_lists.get_mut(node) {
                list.push(pus);
            }
            if let Some(slot) = packages.get_mut(node) {
                *slot = slot.or(core.package);
            }
        }
    }
    let mut facts: Vec<NodeFacts> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let cores = std::mem::take(&mut core_lists[i]);
            let pools: Vec<(u64, u64)> = node
                .hugepages
                .iter()
                .filter(|p| p.size_bytes > 0)
                .map(|p| (p.size_bytes, p.free.unwrap_or(p.total)))
                .collect();
            let reserved: u64 =
                node.hugepages.iter().map(|p| p.size_bytes.saturating_mul(p.total)).fold(0u64, u64::saturating_add);
            let mut tiers: Vec<u32> = distances.get(i).cloned().unwrap_or_default();
            tiers.sort_unstable();
            tiers.dedup();
            NodeFacts {
                id: node.id,
                cores,
                memory_bytes: node.memory_bytes.saturating_sub(reserved),
                pools,
                tiers,
                package: packages[i],
                passthrough: devices.iter().filter(|d| d.1 == i).count() as u32,
                kind: topology.memory_kind(i),
                l3: Vec::new(),
            }
        })
        .collect();
    for f in &mut facts {
        f.l3 = l3_groups(topology, &f.cores);
    }
    facts
}

/// Sets `pu`'s bit, saying whether it was set already; a PU past the
/// bitmap has no bit (false).
fn mark_bit(bits: &mut [u64], pu: u32) -> bool {
    let (w, b) = ((pu / 64) as usize, pu % 64);
    match bits.get_mut(w) {
        Some(word) => {
            let was = *word & (1 << b) != 0;
            *word |= 1 << b;
            was
        }
        None => false,
    }
}

/// One flag per CPU number below `max_pu`: set for the CPUs of `cpus`.
fn pu_flags(max_pu: usize, cpus: &CpuSet) -> Vec<bool> {
    let mut flags = vec![false; max_pu];
    for pu in cpus.iter() {
        if let Some(slot) = flags.get_mut(pu as usize) {
            *slot = true;
        }
    }
    flags
}
