//! The planner's decisions as typed values: why a VM was rejected
//! ([`RejectReason`], with the figures that decided) and what the
//! operator should know about an accepted plan ([`Note`]). Programs read
//! the variant and its numbers (`code()` is stable); people read the
//! sentence, which is made here and nowhere else.
//!
//! Over 800 lines on purpose: this is the one place the planner's words
//! live, each reason's typed fields (documented, half the file) beside
//! its sentence, so a change to a figure and to its wording is one edit
//! in one file. The sentences are split by family (`fmt_request`,
//! `fmt_device`, `fmt_shortage`, `fmt_cells`, `fmt_mixed`).

use crate::cost::Cost;
use crate::state::StateError;
use numaplace_topo::{format_size, CpuSet, MemoryKind, NodeId};
use std::fmt;

/// A resource a VM can be short of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// Cores whose threads are all free.
    FreeCores,
    /// Free cores with two threads, counted in pairs.
    SiblingPairs,
    /// Free CPU threads.
    FreeThreads,
    /// Shared vCPU slots (threads times the overcommit ratio, less load).
    SharedSlots,
}

impl Resource {
    /// Stable name for programs.
    pub fn code(self) -> &'static str {
        match self {
            Resource::FreeCores => "free-cores",
            Resource::SiblingPairs => "sibling-pairs",
            Resource::FreeThreads => "free-threads",
            Resource::SharedSlots => "shared-slots",
        }
    }

    /// The noun for `n` of it: `1 free core`, `2 free cores`.
    pub fn noun(self, n: u64) -> &'static str {
        if n != 1 {
            return self.plural();
        }
        match self {
            Resource::FreeCores => "free core",
            Resource::SiblingPairs => "free core with a sibling pair",
            Resource::FreeThreads => "free CPU thread",
            Resource::SharedSlots => "shared vCPU slot",
        }
    }

    /// Plural noun for sentences.
    pub fn plural(self) -> &'static str {
        match self {
            Resource::FreeCores => "free cores",
            Resource::SiblingPairs => "free cores with sibling pairs",
            Resource::FreeThreads => "free CPU threads",
            Resource::SharedSlots => "shared vCPU slots",
        }
    }
}

/// What a required device's node could not give its VM
/// ([`RejectReason::DeviceNodeFull`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lacks {
    /// No free CPU for one of its vCPUs.
    Vcpus,
    /// No room for one unit of its memory.
    Memory,
    /// Room for some of each, but no node set that holds the VM ran
    /// vCPUs and kept memory there.
    Split,
}

/// One node's free amount, in a rejection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeFree {
    /// The node.
    pub node: NodeId,
    /// What it has free: units of the resource (cores, pairs, threads,
    /// slots), or bytes.
    pub free: u64,
    /// Bytes of memory free, where both CPU and memory are reported.
    pub memory: u64,
}

/// Why a VM cannot be placed.
#[derive(Clone, Debug, PartialEq)]
pub enum RejectReason {
    /// The host state was built for another topology.
    WrongState,
    /// The host has no NUMA nodes.
    NoNodes,
    /// The request asks for 0 vCPUs.
    NoVcpus,
    /// The request asks for 0 bytes.
    NoMemory,
    /// A VM of the same name is already on the host.
    AlreadyPlaced,
    /// `max_nodes` is 0.
    ZeroMaxNodes,
    /// A shared VM's overcommit ratio is not in (0, max].
    BadOvercommit {
        /// The ratio asked.
        ratio: f64,
        /// The largest accepted.
        max: f64,
    },
    /// A huge page size that is not a power of two in 4 KiB..=16 GiB.
    BadHugePageSize {
        /// Bytes.
        size: u64,
    },
    /// Memory that is not a whole number of huge pages.
    NotWholePages {
        /// Memory asked, bytes.
        memory: u64,
        /// Page size, bytes.
        page: u64,
    },
    /// Memory that is not a whole number of the guest memory blocks the
    /// host's guests need (256 MiB on POWER: QEMU's pseries machine
    /// refuses anything else).
    NotWholeBlocks {
        /// Memory asked, bytes.
        memory: u64,
        /// Block size, bytes.
        block: u64,
    },
    /// No node has huge pages of that size reserved (a pool the kernel
    /// lists with no pages counts as none).
    NoHugePagePool {
        /// Page size, bytes.
        size: u64,
    },
    /// A device wish names a node the host lacks.
    DeviceOnMissingNode {
        /// The device (PCI address) or `device`.
        device: String,
        /// The node named.
        node: NodeId,
    },
    /// A required device whose node is not known.
    DeviceNodeUnknown {
        /// The device.
        device: String,
    },
    /// A required device the host does not list.
    DeviceMissing {
        /// The device (PCI address).
        device: String,
    },
    /// A required device another VM on the host already has.
    DeviceTaken {
        /// The device (PCI address).
        device: String,
        /// The VM holding it.
        holder: String,
    },
    /// A required device's node cannot run any of the VM's vCPUs or hold
    /// any of its memory, so the VM could only run away from its device
    /// (a preferred device only gets a note then).
    DeviceNodeFull {
        /// The device's PCI address; `None` for a wish naming only a node.
        device: Option<String>,
        /// What `at.free` counts.
        resource: Resource,
        /// What the node could not give the VM.
        lacks: Lacks,
        /// The device's node, its free `resource` and its free memory
        /// (bytes the VM may use there, QEMU's overhead kept).
        at: NodeFree,
    },
    /// Required devices on more nodes than the VM may span.
    DevicesOnTooManyNodes {
        /// Nodes the required devices sit on.
        nodes: usize,
        /// The most the VM may span.
        max_nodes: usize,
    },
    /// The housekeeping CPU set for emulator threads is empty.
    HousekeepingEmpty,
    /// A housekeeping CPU the host does not have online.
    HousekeepingCpuMissing {
        /// The CPU.
        cpu: u32,
    },
    /// Not enough CPU capacity on any allowed node set.
    CpuShort {
        /// What is counted.
        resource: Resource,
        /// How many are needed.
        needed: u64,
        /// The most nodes the VM may span.
        max_nodes: usize,
        /// The best nodes (at most four, by node id) and what each has.
        best: Vec<NodeFree>,
        /// The sum over the best `max_nodes` nodes.
        best_total: u64,
    },
    /// Not enough memory (or huge pages) on any allowed node set.
    MemoryShort {
        /// Bytes needed.
        needed: u64,
        /// Page size when huge pages are asked.
        hugepage: Option<u64>,
        /// The most nodes the VM may span.
        max_nodes: usize,
        /// The most the best `max_nodes` nodes offer, bytes.
        best_total: u64,
        /// Bytes kept free beside it for QEMU (the host's overhead rule,
        /// `Reservations::overhead`).
        overhead: u64,
    },
    /// Huge pages enough on some allowed node set, but not the ordinary
    /// memory QEMU needs beside them on any node that has the pages
    /// (issue 48: the pool was blamed).
    QemuMemoryShort {
        /// The huge page size asked.
        hugepage: u64,
        /// Ordinary memory QEMU needs, bytes.
        overhead: u64,
        /// The most ordinary memory free on a node with enough pages.
        best_free: u64,
    },
    /// Not enough memory of the kinds the VM may use, while nodes of
    /// other kinds (HBM, CXL, ...) have room the request did not allow.
    MemoryKindShort {
        /// Bytes needed.
        needed: u64,
        /// The kinds the VM may use.
        kinds: Vec<MemoryKind>,
        /// The most the best allowed nodes offer, bytes.
        best_total: u64,
        /// Free memory of each other kind over the host, bytes.
        other: Vec<(MemoryKind, u64)>,
    },
    /// The request names memory kinds no node of the host has.
    NoMemoryKind {
        /// The kinds asked.
        kinds: Vec<MemoryKind>,
    },
    /// CPU and memory each fit somewhere, but never in one node set.
    NoJointFit {
        /// What CPU capacity is counted in.
        resource: Resource,
        /// Units needed.
        needed: u64,
        /// Bytes needed.
        memory: u64,
        /// The most nodes the VM may span.
        max_nodes: usize,
        /// The nodes with the most CPU capacity (at most four).
        best: Vec<NodeFree>,
    },
    /// The VM fits only nodes that cannot reach each other together:
    /// their SLIT distance is 255, firmware's "unreachable", so they are
    /// never in one VM (one memory access between them would fault).
    Unreachable {
        /// What CPU capacity is counted in.
        resource: Resource,
        /// Units needed.
        needed: u64,
        /// Bytes needed.
        memory: u64,
        /// Node pairs at distance 255 among the nodes with room (at most
        /// four).
        pairs: Vec<(NodeId, NodeId)>,
    },
    /// CPU hot-add on a VM that needs several nodes.
    HotAddWide {
        /// The nodes it would span.
        nodes: Vec<NodeId>,
    },
    /// `smt: require` on a host whose cores have one thread each.
    NoSmt,
    /// The guest cells' vCPUs do not add up to the VM's.
    CellsVcpus {
        /// Sum over the cells.
        cells: u64,
        /// The VM's vCPUs (with hot-add, the most it may grow to).
        vcpus: u64,
    },
    /// The guest cells' memory does not add up to the VM's.
    CellsMemory {
        /// Sum over the cells, bytes.
        cells: u64,
        /// The VM's memory, bytes.
        memory: u64,
    },
    /// A guest cell without vCPUs or without memory.
    CellEmpty {
        /// The guest cell.
        cell: usize,
    },
    /// A vCPU two guest cells list (Nova refuses it too: a vCPU runs in
    /// one guest node).
    CellVcpusOverlap {
        /// The guest cell that lists it second.
        cell: usize,
        /// The guest cell that listed it first.
        other: usize,
        /// The vCPU.
        vcpu: u32,
    },
    /// A vCPU a guest cell lists that the VM does not have.
    CellVcpuOutOfRange {
        /// The guest cell.
        cell: usize,
        /// The vCPU it lists.
        vcpu: u32,
        /// The VM's vCPUs (with hot-add, `max_vcpus`).
        vcpus: u64,
    },
    /// A vCPU no guest cell lists, when the cells list theirs: every
    /// vCPU runs in some guest node.
    CellVcpusGap {
        /// The lowest vCPU left out.
        vcpu: u32,
    },
    /// A guest cell's memory that is not a multiple of the alignment.
    CellUnaligned {
        /// The guest cell.
        cell: usize,
        /// Its memory, bytes.
        memory: u64,
        /// The alignment, bytes (2 MiB, 256 MiB for POWER guests, or the
        /// huge page size).
        align: u64,
    },
    /// More equal guest cells asked than the VM has vCPUs.
    GuestNodesTooMany {
        /// Cells asked.
        guest_nodes: u32,
        /// The VM's vCPUs.
        vcpus: u64,
    },
    /// `guest_nodes` that cannot give equal cells: the vCPUs, or the
    /// memory in whole multiples of the cell alignment, do not divide by
    /// it (Nova refuses such a flavor too: its cells are equal or given).
    GuestNodesUneven {
        /// Cells asked.
        guest_nodes: u32,
        /// The VM's vCPUs.
        vcpus: u64,
        /// The VM's memory, bytes.
        memory: u64,
        /// The alignment each cell's memory must be a multiple of, bytes.
        align: u64,
    },
    /// More guest cells than host nodes the VM may use, one each.
    CellsOverNodes {
        /// Guest cells.
        cells: usize,
        /// Host nodes the VM may use.
        max_nodes: usize,
    },
    /// No assignment of the guest cells to host nodes fits.
    CellsNoFit {
        /// What CPU capacity is counted in.
        resource: Resource,
        /// Per guest cell: (units of the resource, bytes) needed.
        cells: Vec<(u64, u64)>,
        /// Whether cells may share a node.
        shared: bool,
        /// The nodes with the most CPU capacity (at most four), with
        /// their free memory.
        best: Vec<NodeFree>,
    },
    /// `emulator: housekeeping` on a host that reserves no CPUs.
    NoHostCpus,
    /// `emulator: isolate` asked for a shared VM.
    EmulatorIsolateShared,
    /// A `pairs` VM with `emulator: isolate` whose sibling pairs fit, but
    /// whose cell 0's node has no free thread left beside them for the
    /// emulator (every candidate set tried).
    EmulatorCpuShort {
        /// The node of guest cell 0 in the last set tried.
        node: NodeId,
    },
    /// `shared_vcpus` on a shared VM (every vCPU floats already).
    MixedNotDedicated,
    /// `shared_vcpus` names a vCPU the VM does not have.
    MixedVcpuMissing {
        /// The vCPU named.
        vcpu: u32,
        /// The VM's vCPUs.
        vcpus: u64,
    },
    /// Every vCPU is in `shared_vcpus`.
    MixedAllShared,
    /// A mixed VM with CPU hot-add.
    MixedHotAdd,
    /// A mixed VM on a host that declares no shared pool.
    MixedNeedsPool,
    /// A guest cell of a mixed VM with floating vCPUs only.
    MixedCellUnpinned {
        /// The guest cell.
        cell: usize,
    },
    /// The shared pool on a mixed VM's node has no room for the vCPUs
    /// that float there.
    MixedPoolShort {
        /// The host node.
        node: NodeId,
        /// Floating vCPUs to place there.
        needed: u64,
        /// Shared slots free there (pool CPUs x overcommit, less load).
        free: u64,
    },
    /// A mixed VM whose pinned vCPUs fit only nodes without room in the
    /// shared pool for its floating ones.
    MixedPoolNodes {
        /// Floating vCPUs.
        floating: u64,
        /// Nodes with room in the shared pool, and how many vCPUs.
        pool: Vec<(NodeId, u64)>,
    },
    /// `memory_overcommit` out of range, or asked for a dedicated or
    /// huge page VM.
    BadMemoryOvercommit {
        /// The ratio asked.
        ratio: f64,
        /// Why it cannot apply: `None` when out of range.
        because: Option<&'static str>,
    },
    /// A node set's counters and its PUs disagreed (every set tried).
    NotBuildable,
    /// The plan did not fit the state it was made for: a planner bug.
    Internal(StateError),
}

/// Largest memory overcommit ratio accepted.
pub const MAX_MEMORY_OVERCOMMIT: f64 = 16.0;

/// Nodes listed in a sentence before the rest are summed.
const LISTED: usize = 4;

impl RejectReason {
    /// A stable code for programs.
    pub fn code(&self) -> &'static str {
        match self {
            RejectReason::WrongState => "wrong-state",
            RejectReason::NoNodes => "no-nodes",
            RejectReason::NoVcpus => "no-vcpus",
            RejectReason::NoMemory => "no-memory",
            RejectReason::AlreadyPlaced => "already-placed",
            RejectReason::ZeroMaxNodes => "zero-max-nodes",
            RejectReason::BadOvercommit { .. } => "bad-overcommit",
            RejectReason::BadHugePageSize { .. } => "bad-hugepage-size",
            RejectReason::NotWholePages { .. } => "not-whole-pages",
            RejectReason::NotWholeBlocks { .. } => "not-whole-blocks",
            RejectReason::NoHugePagePool { .. } => "no-hugepage-pool",
            RejectReason::DeviceOnMissingNode { .. } => "device-on-missing-node",
            RejectReason::DeviceNodeUnknown { .. } => "device-node-unknown",
            RejectReason::DeviceMissing { .. } => "device-missing",
            RejectReason::DeviceTaken { .. } => "device-taken",
            RejectReason::DevicesOnTooManyNodes { .. } => "devices-on-too-many-nodes",
            RejectReason::DeviceNodeFull { .. } => "device-node-full",
            RejectReason::HousekeepingEmpty => "housekeeping-empty",
            RejectReason::HousekeepingCpuMissing { .. } => "housekeeping-cpu-missing",
            RejectReason::CpuShort { .. } => "cpu-short",
            RejectReason::MemoryShort { .. } => "memory-short",
            RejectReason::MemoryKindShort { .. } => "memory-kind-short",
            RejectReason::QemuMemoryShort { .. } => "qemu-memory-short",
            RejectReason::NoMemoryKind { .. } => "no-memory-kind",
            RejectReason::NoJointFit { .. } => "no-joint-fit",
            RejectReason::Unreachable { .. } => "unreachable",
            RejectReason::HotAddWide { .. } => "hotadd-wide",
            RejectReason::NoSmt => "no-smt",
            RejectReason::CellsVcpus { .. } => "cells-vcpus",
            RejectReason::CellsMemory { .. } => "cells-memory",
            RejectReason::CellEmpty { .. } => "cell-empty",
            RejectReason::CellUnaligned { .. } => "cell-unaligned",
            RejectReason::CellVcpusOverlap { .. } => "cell-vcpus-overlap",
            RejectReason::CellVcpuOutOfRange { .. } => "cell-vcpu-out-of-range",
            RejectReason::CellVcpusGap { .. } => "cell-vcpus-gap",
            RejectReason::GuestNodesTooMany { .. } => "guest-nodes-too-many",
            RejectReason::GuestNodesUneven { .. } => "guest-nodes-uneven",
            RejectReason::CellsOverNodes { .. } => "cells-over-nodes",
            RejectReason::CellsNoFit { .. } => "cells-no-fit",
            RejectReason::NoHostCpus => "no-host-cpus",
            RejectReason::EmulatorIsolateShared => "emulator-isolate-shared",
            RejectReason::EmulatorCpuShort { .. } => "emulator-cpu-short",
            RejectReason::MixedNotDedicated => "mixed-not-dedicated",
            RejectReason::MixedVcpuMissing { .. } => "mixed-vcpu-missing",
            RejectReason::MixedAllShared => "mixed-all-shared",
            RejectReason::MixedHotAdd => "mixed-hotadd",
            RejectReason::MixedNeedsPool => "mixed-needs-pool",
            RejectReason::MixedCellUnpinned { .. } => "mixed-cell-unpinned",
            RejectReason::MixedPoolShort { .. } => "mixed-pool-short",
            RejectReason::MixedPoolNodes { .. } => "mixed-pool-nodes",
            RejectReason::BadMemoryOvercommit { .. } => "bad-memory-overcommit",
            RejectReason::NotBuildable => "not-buildable",
            RejectReason::Internal(_) => "internal-error",
        }
    }

    /// Whether the host lacks CPUs for the request (the VMs holding them
    /// are worth naming: [`held_by`]).
    pub fn is_cpu_short(&self) -> bool {
        matches!(
            self,
            RejectReason::CpuShort { .. }
                | RejectReason::NoJointFit { .. }
                | RejectReason::CellsNoFit { .. }
                | RejectReason::MixedPoolShort { .. }
                | RejectReason::EmulatorCpuShort { .. }
        )
    }

    /// Whether the request itself is wrong (no host could take it), as
    /// against a host that is too full.
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            RejectReason::NoVcpus
                | RejectReason::NoMemory
                | RejectReason::ZeroMaxNodes
                | RejectReason::BadOvercommit { .. }
                | RejectReason::BadHugePageSize { .. }
                | RejectReason::NotWholePages { .. }
                | RejectReason::HousekeepingEmpty
                | RejectReason::CellsVcpus { .. }
                | RejectReason::CellsMemory { .. }
                | RejectReason::CellEmpty { .. }
                | RejectReason::CellUnaligned { .. }
                | RejectReason::CellVcpusOverlap { .. }
                | RejectReason::CellVcpuOutOfRange { .. }
                | RejectReason::CellVcpusGap { .. }
                | RejectReason::GuestNodesTooMany { .. }
                | RejectReason::GuestNodesUneven { .. }
                | RejectReason::EmulatorIsolateShared
                | RejectReason::MixedNotDedicated
                | RejectReason::MixedVcpuMissing { .. }
                | RejectReason::MixedAllShared
                | RejectReason::MixedHotAdd
                | RejectReason::MixedCellUnpinned { .. }
                | RejectReason::BadMemoryOvercommit { .. }
        )
    }
}

/// Exact sizes where a rounded one would be false (a reason that says
/// "1 GiB is not a whole number of 2 MiB pages" about 1025 MiB).
fn exact_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {name}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

/// `dram`, `dram or hbm`.
fn kind_names(kinds: &[MemoryKind]) -> String {
    kinds.iter().map(MemoryKind::as_str).collect::<Vec<_>>().join(" or ")
}

/// `node0 has 3 and 8 GiB, node1 has 1 and 8 GiB`.
fn write_free_with_memory(f: &mut fmt::Formatter<'_>, best: &[NodeFree]) -> fmt::Result {
    for (n, b) in best.iter().enumerate() {
        if n > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{} has {} and {}", b.node, b.free, format_size(b.memory))?;
    }
    Ok(())
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One sentence per reason, worded by its family below.
        match self {
            RejectReason::WrongState
            | RejectReason::NoNodes
            | RejectReason::NoVcpus
            | RejectReason::NoMemory
            | RejectReason::AlreadyPlaced
            | RejectReason::ZeroMaxNodes
            | RejectReason::BadOvercommit { .. }
            | RejectReason::BadHugePageSize { .. }
            | RejectReason::NotWholePages { .. }
            | RejectReason::NotWholeBlocks { .. }
            | RejectReason::NoHugePagePool { .. }
            | RejectReason::HousekeepingEmpty
            | RejectReason::HousekeepingCpuMissing { .. }
            | RejectReason::HotAddWide { .. }
            | RejectReason::NoSmt
            | RejectReason::NoHostCpus
            | RejectReason::EmulatorIsolateShared
            | RejectReason::EmulatorCpuShort { .. }
            | RejectReason::BadMemoryOvercommit { .. }
            | RejectReason::NotBuildable
            | RejectReason::Internal(_) => self.fmt_request(f),
            RejectReason::DeviceOnMissingNode { .. }
            | RejectReason::DeviceNodeUnknown { .. }
            | RejectReason::DeviceMissing { .. }
            | RejectReason::DeviceTaken { .. }
            | RejectReason::DevicesOnTooManyNodes { .. }
            | RejectReason::DeviceNodeFull { .. } => self.fmt_device(f),
            RejectReason::CpuShort { .. }
            | RejectReason::MemoryShort { .. }
            | RejectReason::QemuMemoryShort { .. }
            | RejectReason::MemoryKindShort { .. }
            | RejectReason::NoMemoryKind { .. }
            | RejectReason::NoJointFit { .. }
            | RejectReason::Unreachable { .. } => self.fmt_shortage(f),
            RejectReason::CellsVcpus { .. }
            | RejectReason::CellsMemory { .. }
            | RejectReason::CellEmpty { .. }
            | RejectReason::CellUnaligned { .. }
            | RejectReason::CellVcpusOverlap { .. }
            | RejectReason::CellVcpuOutOfRange { .. }
            | RejectReason::CellVcpusGap { .. }
            | RejectReason::GuestNodesTooMany { .. }
            | RejectReason::GuestNodesUneven { .. }
            | RejectReason::CellsOverNodes { .. }
            | RejectReason::CellsNoFit { .. } => self.fmt_cells(f),
            RejectReason::MixedNotDedicated
            | RejectReason::MixedVcpuMissing { .. }
            | RejectReason::MixedAllShared
            | RejectReason::MixedHotAdd
            | RejectReason::MixedNeedsPool
            | RejectReason::MixedCellUnpinned { .. }
            | RejectReason::MixedPoolShort { .. }
            | RejectReason::MixedPoolNodes { .. } => self.fmt_mixed(f),
        }
    }
}

/// The sentences of [`RejectReason`], one method per family of reasons,
/// so each reads beside its kin; `fmt` hands every reason to its family.
impl RejectReason {
    /// The request's own faults and what the host lacks for any VM of its kind.
    fn fmt_request(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::WrongState => f.write_str("the host state was built for a different topology"),
            RejectReason::NoNodes => f.write_str("the host has no NUMA nodes"),
            RejectReason::NoVcpus => f.write_str("needs at least 1 vCPU"),
            RejectReason::NoMemory => f.write_str("needs some memory (0 bytes asked)"),
            RejectReason::AlreadyPlaced => f.write_str("a VM of this name is already placed on this host"),
            RejectReason::ZeroMaxNodes => f.write_str("max guest nodes is 0"),
            RejectReason::BadOvercommit { ratio, max } => {
                write!(f, "overcommit ratio {ratio} is not between 0 and {max}")
            }
            RejectReason::BadHugePageSize { size } => {
                write!(f, "huge page size {size} bytes is not a power of two between 4 KiB and 16 GiB")
            }
            RejectReason::NotWholePages { memory, page } => {
                write!(f, "memory {} is not a whole number of {} huge pages", exact_size(*memory), exact_size(*page))
            }
            RejectReason::NotWholeBlocks { memory, block } => write!(
                f,
                "memory {} is not a whole number of {} blocks, which this host's guests need (QEMU's pseries machine)",
                exact_size(*memory),
                exact_size(*block)
            ),
            RejectReason::NoHugePagePool { size } => {
                write!(f, "no node has {} huge pages reserved", format_size(*size))
            }
            RejectReason::HousekeepingEmpty => f.write_str("the housekeeping CPU set for emulator threads is empty"),
            RejectReason::HousekeepingCpuMissing { cpu } => {
                write!(f, "housekeeping CPU {cpu} does not exist or is offline")
            }
            RejectReason::HotAddWide { nodes } => {
                let names: Vec<String> = nodes.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "CPU hot-add would hide the guest NUMA topology, and this VM needs {} nodes ({}); \
                     turn hot-add off, shrink the VM to one node, or force",
                    nodes.len(),
                    names.join(", ")
                )
            }
            RejectReason::NoSmt => f.write_str(
                "smt require needs sibling threads, and this host's cores have one thread each \
                 (smt pairs would fall back to one vCPU per core)",
            ),
            RejectReason::NoHostCpus => f.write_str(
                "emulator threads on housekeeping CPUs need CPUs reserved for the host, and it reserves none \
                 (--reserved-cpus)",
            ),
            RejectReason::EmulatorIsolateShared => {
                f.write_str("emulator isolate gives a dedicated VM one more pinned CPU; this VM is shared")
            }
            RejectReason::EmulatorCpuShort { node } => write!(
                f,
                "emulator isolate needs one more free CPU beside the VM's sibling pairs on guest cell 0's node, \
                 and {node} has none left"
            ),
            RejectReason::BadMemoryOvercommit { ratio, because: None } => {
                write!(f, "memory overcommit {ratio} is out of range (from 1 to {MAX_MEMORY_OVERCOMMIT})")
            }
            RejectReason::BadMemoryOvercommit { ratio, because: Some(why) } => write!(
                f,
                "memory overcommit {ratio} is for shared VMs without huge pages; this VM {why}, and its memory \
                 must all be there"
            ),
            RejectReason::NotBuildable => f.write_str("the node set's counters and its PUs disagree"),
            RejectReason::Internal(e) => {
                write!(f, "internal error: the plan does not fit the state it was made for ({e})")
            }
            other => unreachable!("`{}` is worded by another family", other.code()),
        }
    }

    /// A required device: where it is, who holds it, what its node lacks.
    fn fmt_device(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::DeviceOnMissingNode { device, node } => {
                write!(f, "{device} is on {node}, which this host does not have")
            }
            RejectReason::DeviceNodeUnknown { device } => write!(f, "{device} has no known NUMA node to require"),
            RejectReason::DeviceMissing { device } => {
                write!(f, "required device {device} is not on this host (not in its topology's device list)")
            }
            RejectReason::DeviceTaken { device, holder } => {
                write!(f, "required device {device} is already passed through to {holder}")
            }
            RejectReason::DevicesOnTooManyNodes { nodes, max_nodes } => {
                write!(f, "required devices sit on {nodes} nodes but at most {max_nodes} are allowed")
            }
            RejectReason::DeviceNodeFull { device, resource, lacks, at } => {
                match device {
                    Some(device) => write!(f, "required device {device} is on {}", at.node)?,
                    None => write!(f, "the required device node is {}", at.node)?,
                }
                match lacks {
                    Lacks::Vcpus => write!(f, ", where none of the VM's vCPUs can run (0 {})", resource.plural())?,
                    Lacks::Memory => {
                        write!(f, ", which has no room for any of the VM's memory ({} free)", format_size(at.memory))?
                    }
                    Lacks::Split => write!(
                        f,
                        ", and no node set holding the VM ran vCPUs with memory there ({} {}, {} free)",
                        at.free,
                        resource.noun(at.free),
                        format_size(at.memory)
                    )?,
                }
                f.write_str("; a required device's node must run some of the VM's vCPUs and hold some of its memory")
            }
            other => unreachable!("`{}` is worded by another family", other.code()),
        }
    }

    /// The host too full: the CPUs or memory the VM needs and the most any node set offers.
    fn fmt_shortage(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::CpuShort { resource, needed, max_nodes, best, best_total } => {
                write!(f, "needs {needed} {} on {}; ", resource.noun(*needed), OnNodes(*max_nodes))?;
                for (n, b) in best.iter().enumerate() {
                    if n > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} has {}", b.node, b.free)?;
                }
                if *max_nodes > LISTED {
                    write!(f, "; the most any {max_nodes} nodes offer is {best_total}")?;
                }
                Ok(())
            }
            RejectReason::MemoryShort { needed, hugepage, max_nodes, best_total, overhead } => {
                let kind = match hugepage {
                    Some(size) => format!(" in {} huge pages", format_size(*size)),
                    None => String::new(),
                };
                let nodes = if *max_nodes == 1 { "1 node".to_string() } else { format!("{max_nodes} nodes") };
                // Exact where rounding would make the sentence contradict
                // itself ("needs 900 MiB; ... can offer 1000 MiB" is fine,
                // "needs 1 GiB; can offer 1 GiB" is not).
                let (need, have) = (format_size(*needed), format_size(*best_total));
                let (need, have) =
                    if need == have { (exact_size(*needed), exact_size(*best_total)) } else { (need, have) };
                write!(
                    f,
                    "needs {need}{kind}; the most any {nodes} can offer is {have}, keeping {} free for QEMU",
                    format_size(*overhead)
                )
            }
            RejectReason::QemuMemoryShort { hugepage, overhead, best_free } => write!(
                f,
                "its {} huge pages fit, but QEMU's own {} of ordinary memory does not beside them: the most a node with the pages has free is {}",
                format_size(*hugepage),
                format_size(*overhead),
                format_size(*best_free)
            ),
            RejectReason::MemoryKindShort { needed, kinds, best_total, other } => {
                write!(
                    f,
                    "needs {} of {}; its nodes can offer {}, and ",
                    format_size(*needed),
                    kind_names(kinds),
                    format_size(*best_total)
                )?;
                for (i, (kind, bytes)) in other.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} of {}", format_size(*bytes), kind.as_str())?;
                }
                f.write_str(
                    " is left out (name the kind in memory_kind, or allow it in the host profile's memory_kinds)",
                )
            }
            RejectReason::NoMemoryKind { kinds } => {
                write!(
                    f,
                    "memory_kind asks for {}, and no node of this host has memory of that kind",
                    kind_names(kinds)
                )
            }
            RejectReason::NoJointFit { resource, needed, memory, max_nodes, best } => {
                write!(
                    f,
                    "no {} has both {needed} {} and {} free; ",
                    if *max_nodes == 1 { "node".to_string() } else { format!("set of <= {max_nodes} nodes") },
                    resource.noun(*needed),
                    format_size(*memory)
                )?;
                write_free_with_memory(f, best)
            }
            RejectReason::Unreachable { resource, needed, memory, pairs } => {
                write!(
                    f,
                    "{needed} {} and {} fit only on nodes that cannot reach each other (SLIT distance 255: ",
                    resource.noun(*needed),
                    format_size(*memory)
                )?;
                for (i, (a, b)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}-{b}")?;
                }
                f.write_str("); no set of nodes that reach each other holds the VM")
            }
            other => unreachable!("`{}` is worded by another family", other.code()),
        }
    }

    /// The guest cells asked for, and whether they fit the host's nodes.
    fn fmt_cells(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::CellsVcpus { cells, vcpus } => {
                write!(f, "the guest cells hold {cells} vCPUs but the VM has {vcpus}")
            }
            RejectReason::CellsMemory { cells, memory } => write!(
                f,
                "the guest cells hold {} of memory but the VM has {}",
                exact_size(*cells),
                exact_size(*memory)
            ),
            RejectReason::CellEmpty { cell } => write!(f, "guest cell {cell} needs at least 1 vCPU and some memory"),
            RejectReason::CellUnaligned { cell, memory, align } => write!(
                f,
                "guest cell {cell} has {} of memory, not a multiple of {}",
                exact_size(*memory),
                exact_size(*align)
            ),
            RejectReason::CellVcpusOverlap { cell, other, vcpu } => write!(
                f,
                "guest cell {cell} lists vCPU {vcpu}, which guest cell {other} lists too: a vCPU runs in one guest node"
            ),
            RejectReason::CellVcpuOutOfRange { cell, vcpu, vcpus } => write!(
                f,
                "guest cell {cell} lists vCPU {vcpu}, but the VM has {vcpus} vCPUs (0 to {})",
                vcpus.saturating_sub(1)
            ),
            RejectReason::CellVcpusGap { vcpu } => {
                write!(f, "no guest cell lists vCPU {vcpu}: listed cells must hold every vCPU of the VM exactly once")
            }
            RejectReason::GuestNodesTooMany { guest_nodes, vcpus } => {
                write!(f, "{guest_nodes} guest nodes need at least {guest_nodes} vCPUs; the VM has {vcpus}")
            }
            RejectReason::GuestNodesUneven { guest_nodes, vcpus, memory, align } => {
                let n = u64::from(*guest_nodes);
                write!(f, "{guest_nodes} equal guest cells need ")?;
                if vcpus % n != 0 {
                    write!(f, "the vCPUs to divide by {guest_nodes}; the VM has {vcpus}")?;
                } else {
                    write!(
                        f,
                        "memory that divides into {guest_nodes} multiples of {}; the VM has {}",
                        exact_size(*align),
                        exact_size(*memory)
                    )?;
                }
                f.write_str(" (give the cells' sizes with cells instead)")
            }
            RejectReason::CellsOverNodes { cells, max_nodes } => write!(
                f,
                "{cells} guest cells need {cells} host nodes, one each, but at most {max_nodes} can be used \
                 (allow cells to share a node with cells_share_nodes)"
            ),
            RejectReason::CellsNoFit { resource, cells, shared, best } => {
                let how = if *shared { "host nodes" } else { "distinct host nodes, one each" };
                write!(f, "the guest cells do not fit {how}: ")?;
                for (i, (units, bytes)) in cells.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "cell {i} needs {units} {} and {}", resource.noun(*units), format_size(*bytes))?;
                }
                f.write_str("; ")?;
                write_free_with_memory(f, best)
            }
            other => unreachable!("`{}` is worded by another family", other.code()),
        }
    }

    /// A mixed VM (shared_vcpus) and its floating vCPUs in the shared pool.
    fn fmt_mixed(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::MixedNotDedicated => f.write_str(
                "shared_vcpus pins the other vCPUs of a dedicated VM; this VM is shared, so every vCPU floats already",
            ),
            RejectReason::MixedVcpuMissing { vcpu, vcpus } => {
                write!(
                    f,
                    "shared_vcpus names vCPU {vcpu}, but the VM has {vcpus} (vCPUs 0-{})",
                    vcpus.saturating_sub(1)
                )
            }
            RejectReason::MixedAllShared => {
                f.write_str("shared_vcpus names every vCPU: plan the VM with cpu=shared instead")
            }
            RejectReason::MixedHotAdd => {
                f.write_str("a mixed VM (shared_vcpus) cannot have CPU hot-add: plan one or the other")
            }
            RejectReason::MixedNeedsPool => f.write_str(
                "floating vCPUs (shared_vcpus) run in the host's shared pool, and it declares none \
                 (--shared-cpus, or reserved.shared_cpus in the state)",
            ),
            RejectReason::MixedCellUnpinned { cell } => write!(
                f,
                "guest cell {cell} holds only floating vCPUs: each cell of a mixed VM needs a pinned vCPU, \
                 which ties it to its host node"
            ),
            RejectReason::MixedPoolShort { node, needed, free } => write!(
                f,
                "{needed} floating vCPUs go to {node} with the pinned ones of their guest cell, and its shared pool \
                 has room for {free} more (its CPUs times the overcommit, less the load)"
            ),
            RejectReason::MixedPoolNodes { floating, pool } => {
                write!(
                    f,
                    "the {floating} floating vCPUs run in the shared pool of their guest cell's node, and the pinned \
                     vCPUs fit no node whose pool has room; "
                )?;
                if pool.is_empty() {
                    return f.write_str("no node's pool has room");
                }
                f.write_str("the pool has room on ")?;
                for (i, (node, n)) in pool.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{node} ({n} vCPUs)")?;
                }
                f.write_str(" (spread --shared-cpus over the nodes)")
            }
            other => unreachable!("`{}` is worded by another family", other.code()),
        }
    }
}

/// Something the operator should know about an accepted plan. Kept to
/// 40 bytes (a test holds it there): a decision keeps room for four notes
/// until the plan is written, and every byte of that is memory the batch
/// first touches (docs/performance.md), so the rare notes with sets,
/// costs or two names box them.
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// `pairs` on a host without SMT.
    NoSmtForPairs,
    /// An SMT policy given for a shared VM.
    SmtIgnoredForShared,
    /// A preferred device whose node is unknown.
    DeviceNodeUnknown {
        /// The device.
        device: String,
    },
    /// A device that is not required and that the host does not list:
    /// not passed through.
    DeviceMissing {
        /// The device (PCI address).
        device: String,
    },
    /// A device that is not required and that another VM holds: not
    /// passed through.
    DeviceTaken {
        /// The device (PCI address).
        device: Box<str>,
        /// The VM holding it.
        holder: Box<str>,
    },
    /// Whole cores ran out: some vCPUs are on sibling threads.
    SiblingThreads {
        /// The VM's vCPUs.
        vcpus: u64,
        /// The most nodes the VM may span.
        max_nodes: usize,
    },
    /// Sibling threads cost this VM less than spreading over whole cores
    /// of more nodes would.
    SiblingsCheaper {
        /// The chosen placement's cost.
        chosen: Box<Cost>,
        /// The cost of the fewest nodes with whole cores.
        spread: Box<Cost>,
    },
    /// An odd number of vCPUs under `pairs`.
    OddPairs {
        /// The VM's vCPUs.
        vcpus: u64,
    },
    /// A shared VM's floating set.
    SharedFloat {
        /// The VM's vCPUs.
        vcpus: u64,
        /// CPUs it floats over.
        cpus: usize,
        /// vCPUs per CPU at most.
        overcommit: f64,
    },
    /// This dedicated VM takes CPUs out of a shared VM's floating set.
    ShrinksShared {
        /// The shared VM.
        vm: Box<str>,
        /// The CPUs it loses.
        lost: Box<CpuSet>,
        /// Its floating set now.
        now: Box<CpuSet>,
    },
    /// Emulator threads run on the vCPUs' CPUs.
    EmulatorOnVcpus,
    /// Emulator threads run on the idle siblings an `isolate` (or odd
    /// `pairs`) VM keeps to itself.
    EmulatorOnIdleSiblings,
    /// Emulator threads have a dedicated CPU of their own.
    EmulatorIsolated {
        /// The CPU.
        cpu: u32,
        /// Its node.
        node: NodeId,
    },
    /// A mixed VM: some vCPUs float in the shared pool.
    Mixed {
        /// The floating vCPUs.
        floating: Box<CpuSet>,
        /// The shared-pool CPUs they float over.
        cpus: Box<CpuSet>,
        /// How many vCPUs are pinned.
        pinned: usize,
    },
    /// A shared VM whose memory is overcommitted: charged less than it has.
    MemoryOvercommitted {
        /// Bytes charged to the host.
        charged: u64,
        /// Guest memory, bytes.
        memory: u64,
        /// The ratio.
        ratio: f64,
    },
    /// A mixed VM's emulator threads run in the shared pool.
    EmulatorInPool,
    /// Several guest cells on one host node (allowed by the request).
    CellsShareNode {
        /// The host node.
        node: NodeId,
    },
    /// The VM spans several host nodes.
    Spans {
        /// vCPUs per cell.
        cells: Vec<usize>,
    },
    /// CPU hot-add forced on a VM spanning nodes.
    HotAddForced,
    /// The split is uneven because of free capacity.
    UnevenSplit,
    /// The vCPUs do not divide evenly over the cells.
    Indivisible {
        /// The VM's vCPUs.
        vcpus: u64,
        /// Cells with vCPUs.
        cells: usize,
    },
    /// Some guest cells hold memory only.
    MemoryOnlyCells,
    /// Some guest cells have vCPUs and no memory.
    MemorylessCells,
    /// Some of this VM's vCPUs run on idle sibling threads of cores that
    /// other dedicated VMs hold (no whole core was left): both contend.
    SiblingsOf {
        /// The VMs whose cores are shared, by name.
        vms: Vec<String>,
        /// How many of this VM's vCPUs sit on such siblings.
        vcpus: usize,
    },
    /// A later VM was given idle sibling threads of this VM's cores.
    SiblingsTakenBy {
        /// The later VM.
        vm: String,
        /// How many of its vCPUs sit on this VM's cores.
        vcpus: usize,
    },
    /// vCPUs share a physical core with another vCPU.
    SharedCores {
        /// How many vCPUs.
        vcpus: usize,
    },
    /// A preferred device's node runs none of the VM's vCPUs (its node
    /// could not hold them; a required device is refused instead:
    /// [`RejectReason::DeviceNodeFull`]).
    DeviceOutside {
        /// The device's node.
        node: NodeId,
    },
    /// A note read back from a document, as it was worded.
    Text(String),
}

// Ratios are validated finite and positive before a note is made.
impl Eq for Note {}
impl Eq for RejectReason {}

impl Note {
    /// A stable code for programs.
    pub fn code(&self) -> &'static str {
        match self {
            Note::NoSmtForPairs => "no-smt-for-pairs",
            Note::SmtIgnoredForShared => "smt-ignored-for-shared",
            Note::DeviceNodeUnknown { .. } => "device-node-unknown",
            Note::DeviceMissing { .. } => "device-missing",
            Note::DeviceTaken { .. } => "device-taken",
            Note::SiblingThreads { .. } => "sibling-threads",
            Note::SiblingsCheaper { .. } => "siblings-cheaper",
            Note::OddPairs { .. } => "odd-pairs",
            Note::SharedFloat { .. } => "shared-float",
            Note::ShrinksShared { .. } => "shrinks-shared",
            Note::EmulatorOnVcpus => "emulator-on-vcpus",
            Note::EmulatorOnIdleSiblings => "emulator-on-idle-siblings",
            Note::EmulatorIsolated { .. } => "emulator-isolated",
            Note::CellsShareNode { .. } => "cells-share-node",
            Note::Mixed { .. } => "mixed",
            Note::EmulatorInPool => "emulator-in-pool",
            Note::MemoryOvercommitted { .. } => "memory-overcommitted",
            Note::Spans { .. } => "spans-nodes",
            Note::HotAddForced => "hotadd-forced",
            Note::UnevenSplit => "uneven-split",
            Note::Indivisible { .. } => "indivisible",
            Note::MemoryOnlyCells => "memory-only-cells",
            Note::MemorylessCells => "memoryless-cells",
            Note::SiblingsOf { .. } => "siblings-of",
            Note::SiblingsTakenBy { .. } => "siblings-taken-by",
            Note::SharedCores { .. } => "shared-cores",
            Note::DeviceOutside { .. } => "device-outside",
            Note::Text(_) => "text",
        }
    }
}

impl From<String> for Note {
    fn from(text: String) -> Note {
        Note::Text(text)
    }
}

/// Where a sentence is written piece by piece, so a writer that keeps its
/// own buffer (the JSON plan writer) words a decision without the
/// formatting machinery, and the words still exist only here: `Display`
/// is built on the same pieces.
pub trait Pieces {
    /// Fixed words: plain text (no quote, backslash or control character).
    fn text(&mut self, s: &'static str);
    /// A name from outside (a VM, a device, a sentence read back): any text.
    fn name(&mut self, s: &str);
    /// A whole number.
    fn num(&mut self, n: u64);
}

/// A decision that can be worded piece by piece.
pub trait Sentence: fmt::Display {
    /// Writes the sentence into `out` and returns true, or returns false,
    /// having written nothing, when it is worded only through `Display`
    /// (rare sentences with sizes, ratios, costs or CPU lists).
    fn pieces(&self, out: &mut dyn Pieces) -> bool;
}

/// [`Pieces`] onto a formatter, for `Display`.
struct Shown<'a, 'b> {
    f: &'a mut fmt::Formatter<'b>,
    result: fmt::Result,
}

impl Pieces for Shown<'_, '_> {
    fn text(&mut self, s: &'static str) {
        self.name(s);
    }
    fn name(&mut self, s: &str) {
        if self.result.is_ok() {
            self.result = self.f.write_str(s);
        }
    }
    fn num(&mut self, n: u64) {
        if self.result.is_ok() {
            self.result = write!(self.f, "{n}");
        }
    }
}

/// Writes `s` through its pieces, if it has them.
pub(crate) fn show_pieces(s: &impl Sentence, f: &mut fmt::Formatter<'_>) -> Option<fmt::Result> {
    let mut shown = Shown { f, result: Ok(()) };
    s.pieces(&mut shown).then_some(shown.result)
}

/// How many nodes a VM may span, in words: `one node`, or `<= 4 nodes`.
/// The one rule for the planner's sentences and the fleet's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnNodes(pub usize);

impl Sentence for OnNodes {
    fn pieces(&self, out: &mut dyn Pieces) -> bool {
        if self.0 == 1 {
            out.text("one node");
        } else {
            out.text("<= ");
            out.num(self.0 as u64);
            out.text(" nodes");
        }
        true
    }
}

impl fmt::Display for OnNodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        show_pieces(self, f).unwrap_or(Ok(()))
    }
}

/// `node3`, as `NodeId` shows it.
fn node(out: &mut dyn Pieces, id: NodeId) {
    out.text("node");
    out.num(u64::from(id.0));
}

/// `fewer than 4 free whole cores on one node: some vCPUs run on sibling
/// threads`.
fn sibling_threads(out: &mut dyn Pieces, vcpus: u64, max_nodes: usize) {
    if vcpus == 1 {
        out.text("no free whole core on ");
    } else {
        out.text("fewer than ");
        out.num(vcpus);
        out.text(" free whole cores on ");
    }
    OnNodes(max_nodes).pieces(out);
    out.text(if vcpus == 1 { ": the vCPU runs on a sibling thread" } else { ": some vCPUs run on sibling threads" });
}

/// `spans 2 host nodes: the guest sees 2 NUMA cells of 4 + 4 vCPUs`.
fn spans(out: &mut dyn Pieces, cells: &[usize]) {
    out.text("spans ");
    out.num(cells.len() as u64);
    out.text(" host nodes: the guest sees ");
    out.num(cells.len() as u64);
    out.text(" NUMA cells of ");
    for (i, &c) in cells.iter().enumerate() {
        if i > 0 {
            out.text(" + ");
        }
        out.num(c as u64);
    }
    out.text(" vCPUs");
}

/// `2 vCPUs run on idle sibling threads of cores a, b hold`.
fn siblings_of(out: &mut dyn Pieces, vms: &[String], vcpus: usize) {
    out.num(vcpus as u64);
    out.text(if vcpus == 1 { " vCPU runs" } else { " vCPUs run" });
    out.text(" on idle sibling threads of cores ");
    for (i, vm) in vms.iter().enumerate() {
        if i > 0 {
            out.text(", ");
        }
        out.name(vm);
    }
    out.text(if vms.len() == 1 { " holds" } else { " hold" });
}

impl Sentence for Note {
    fn pieces(&self, out: &mut dyn Pieces) -> bool {
        let contend = " (no whole core was free): both VMs contend there";
        let instead = "; it is not passed through (mark it required to refuse instead)";
        match self {
            Note::NoSmtForPairs => out.text("the host has no SMT: pairs falls back to one vCPU per core"),
            Note::SmtIgnoredForShared => {
                out.text("shared vCPUs float over whole nodes: the SMT policy does not apply");
            }
            Note::EmulatorOnVcpus => {
                out.text("emulator threads share the vCPUs' CPUs; name a housekeeping set to keep them apart");
            }
            Note::EmulatorOnIdleSiblings => out.text(
                "emulator threads run on the idle siblings this VM keeps (never on a vCPU's own CPU); \
                 emulator=isolate gives them a core of their own",
            ),
            Note::EmulatorInPool => out
                .text("emulator threads run in the shared pool with the floating vCPUs, never on a pinned vCPU's CPU"),
            Note::HotAddForced => {
                out.text("CPU hot-add forced on a VM spanning nodes: the guest may see one NUMA node");
            }
            Note::UnevenSplit => out.text("uneven vCPU split: the nodes' free capacity allows no even one"),
            Note::MemoryOnlyCells => {
                out.text("some guest cells hold memory only: the VM's memory is on more host nodes than its vCPUs");
            }
            Note::MemorylessCells => out.text(
                "some guest cells have vCPUs but no memory (their host node has none, or none free): \
                 the guest allocates for them from the nearest cell",
            ),
            Note::DeviceNodeUnknown { device } => {
                out.name(device);
                out.text(" has no known NUMA node; its preference is ignored");
            }
            Note::DeviceMissing { device } => {
                out.name(device);
                out.text(" is not on this host");
                out.text(instead);
            }
            Note::DeviceTaken { device, holder } => {
                out.name(device);
                out.text(" is already passed through to ");
                out.name(holder);
                out.text(instead);
            }
            Note::SiblingThreads { vcpus, max_nodes } => sibling_threads(out, *vcpus, *max_nodes),
            Note::OddPairs { vcpus: 1 } => {
                out.text("1 vCPU makes no pair: the guest sees threads=1 and the vCPU has a core alone");
            }
            Note::OddPairs { vcpus } => {
                out.num(*vcpus);
                out.text(" vCPUs is odd: the guest sees threads=1 and the last vCPU has a core alone");
            }
            Note::EmulatorIsolated { cpu, node: at } => {
                out.text("emulator threads have CPU ");
                out.num(u64::from(*cpu));
                out.text(" on ");
                node(out, *at);
                out.text(" to themselves (one CPU beyond the vCPUs)");
            }
            Note::CellsShareNode { node: at } => {
                out.text("several guest cells share ");
                node(out, *at);
                out.text(": the guest expects more memory bandwidth than it gets");
            }
            Note::Spans { cells } => spans(out, cells),
            Note::Indivisible { vcpus, cells } => {
                out.num(*vcpus);
                // `cells` counts the nodes that run vCPUs; a spread VM's
                // memory-only cells are not among them.
                out.text(" vCPUs do not divide evenly over the ");
                out.num(*cells as u64);
                out.text(" nodes that run them");
            }
            Note::SiblingsOf { vms, vcpus } => {
                siblings_of(out, vms, *vcpus);
                out.text(contend);
            }
            Note::SiblingsTakenBy { vm, vcpus } => {
                out.name(vm);
                out.text(" was given the idle sibling threads of ");
                out.num(*vcpus as u64);
                out.text(" of this VM's cores");
                out.text(contend);
            }
            Note::SharedCores { vcpus } => {
                out.num(*vcpus as u64);
                out.text(if *vcpus == 1 {
                    " vCPU shares its physical core with another vCPU"
                } else {
                    " vCPUs share their physical core with another vCPU"
                });
            }
            Note::DeviceOutside { node: at } => {
                out.text("a device is on ");
                node(out, *at);
                out.text(", where none of the VM's vCPUs run: that node could not hold them");
            }
            Note::Text(text) => out.name(text),
            // Sizes, ratios, costs and CPU lists: through `Display`.
            Note::SiblingsCheaper { .. }
            | Note::SharedFloat { .. }
            | Note::ShrinksShared { .. }
            | Note::Mixed { .. }
            | Note::MemoryOvercommitted { .. } => return false,
        }
        true
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(result) = show_pieces(self, f) {
            return result;
        }
        match self {
            Note::SiblingsCheaper { chosen, spread } => write!(
                f,
                "some vCPUs share sibling threads: expected cost {chosen}, against {spread} on whole cores of more nodes"
            ),
            Note::SharedFloat { vcpus, cpus, overcommit } => {
                write!(f, "shared: {vcpus} vCPUs float over {cpus} CPUs of the VM's nodes at up to {overcommit} vCPUs per CPU")
            }
            Note::ShrinksShared { vm, lost, now } => write!(
                f,
                "CPUs {lost} leave the floating set of shared VM {vm} (now {now}): re-pin it, or its vCPUs may run on them"
            ),
            Note::Mixed { floating, cpus, pinned } => {
                let which = if floating.len() == 1 { "vCPU" } else { "vCPUs" };
                let verb = if floating.len() == 1 { "floats" } else { "float" };
                write!(
                    f,
                    "mixed: {which} {floating} {verb} over the shared pool on {} guest cell's node (PUs {cpus}); \
                     the rest ({pinned}) are pinned",
                    if floating.len() == 1 { "its" } else { "their" }
                )
            }
            Note::MemoryOvercommitted { charged, memory, ratio } => write!(
                f,
                "memory overcommitted {ratio}x: {} of guest memory charged as {} (the guests sharing the node must \
                 not all use all of theirs)",
                format_size(*memory),
                format_size(*charged)
            ),
            // Worded piece by piece ([`Sentence::pieces`]).
            _ => Ok(()),
        }
    }
}

/// VMs named in a CPU shortfall before the rest are counted.
pub const HOLDERS_LISTED: usize = 4;

/// The VMs holding the host's CPUs, worded for a CPU shortfall: `CPUs
/// held by web1 (CPUs 0-7), db (CPU 8) and 3 more VMs`; empty when no VM
/// holds any.
pub fn held_by(holders: &[crate::state::Holder]) -> String {
    if holders.is_empty() {
        return String::new();
    }
    let named: Vec<String> = holders
        .iter()
        .take(HOLDERS_LISTED)
        .map(|h| {
            let noun = if h.cpus.len() == 1 { "CPU" } else { "CPUs" };
            format!("{} ({noun} {})", h.vm, h.cpus)
        })
        .collect();
    let rest = holders.len().saturating_sub(HOLDERS_LISTED);
    let mut out = String::from("CPUs held by ");
    match (named.split_last(), rest) {
        (Some((last, first)), 0) if !first.is_empty() => {
            out.push_str(&first.join(", "));
            out.push_str(" and ");
            out.push_str(last);
        }
        _ => out.push_str(&named.join(", ")),
    }
    if rest > 0 {
        out.push_str(&format!(" and {rest} more VM{}", if rest == 1 { "" } else { "s" }));
    }
    out
}
