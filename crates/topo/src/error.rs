//! Contradictions in a reader's findings: data no real machine can have.
//! Each variant carries the offending values so tests and users see exactly
//! what clashed.

use crate::cpuset::{CpuSet, MAX_CPU};
use crate::format_size;
use crate::ids::{NodeId, MAX_NODE, MAX_NODE_BYTES};

/// A topology that contradicts itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Two nodes with the same number.
    #[error("{0} is listed twice")]
    DuplicateNode(NodeId),
    /// Two packages with the same number.
    #[error("package {0} is listed twice")]
    DuplicatePackage(u32),
    /// A CPU listed by two nodes.
    #[error("CPU {cpu} is in both {first} and {second}")]
    CpuInTwoNodes {
        /// The CPU.
        cpu: u32,
        /// One node claiming it.
        first: NodeId,
        /// The other.
        second: NodeId,
    },
    /// A CPU listed by two cores.
    #[error("CPU {cpu} belongs to two cores (threads {first} and {second})")]
    CpuInTwoCores {
        /// The CPU.
        cpu: u32,
        /// One core's threads.
        first: CpuSet,
        /// The other core's threads.
        second: CpuSet,
    },
    /// A CPU listed by two packages.
    #[error("CPU {cpu} belongs to two packages")]
    CpuInTwoPackages {
        /// The CPU.
        cpu: u32,
    },
    /// A core without threads.
    #[error("core {core_id:?} of package {package:?} has no CPUs")]
    EmptyCore {
        /// Its core id.
        core_id: Option<u32>,
        /// Its package.
        package: Option<u32>,
    },
    /// An offline CPU that is also listed in a core.
    #[error("CPU {0} is marked offline but also listed in a core")]
    OfflineCpuInCore(u32),
    /// A node lists a CPU that no core or offline list knows.
    #[error("{node} lists CPU {cpu}, which no core holds")]
    UnknownCpuInNode {
        /// The CPU.
        cpu: u32,
        /// The node.
        node: NodeId,
    },
    /// The distance matrix has the wrong number of rows.
    #[error("distance matrix has {rows} rows for {nodes} nodes")]
    DistanceRowCount {
        /// Rows given.
        rows: usize,
        /// Nodes known.
        nodes: usize,
    },
    /// A distance row of the wrong length.
    #[error("distance row of {node} has {len} values, expected {expected} (one per node)")]
    DistanceRowLength {
        /// The node whose row it is.
        node: NodeId,
        /// Values given.
        len: usize,
        /// Nodes known.
        expected: usize,
    },
    /// A node's distance to itself is not 10.
    #[error("distance of {node} to itself is {value}, expected 10")]
    SelfDistance {
        /// The node.
        node: NodeId,
        /// The value found.
        value: u32,
    },
    /// A remote distance not above the local one.
    #[error("distance from {from} to {to} is {value}; remote distances must be above 10")]
    RemoteTooClose {
        /// Row node.
        from: NodeId,
        /// Column node.
        to: NodeId,
        /// The value found.
        value: u32,
    },
    /// A CPU number from [`MAX_CPU`] up.
    #[error("{place} lists CPU {cpu}, beyond the largest supported CPU number, {}", MAX_CPU - 1)]
    CpuTooLarge {
        /// The CPU.
        cpu: u32,
        /// What lists it (`node3`, `package 1`, `a core`, ...).
        place: String,
    },
    /// A node number from [`MAX_NODE`] up.
    #[error("{0}: node numbers must be below {MAX_NODE}")]
    NodeIdTooLarge(NodeId),
    /// A memory size beyond [`MAX_NODE_BYTES`].
    #[error("{node} has {bytes} bytes of {what}, beyond the supported {} per node", format_size(MAX_NODE_BYTES))]
    MemoryTooLarge {
        /// The node.
        node: NodeId,
        /// `memory` or `free memory`.
        what: &'static str,
        /// The size found.
        bytes: u64,
    },
    /// A huge page pool larger than its node's memory, which the kernel
    /// carves every pool page out of.
    #[error("{}", pool_beyond_memory(*node, *size_bytes, *pages, *memory_bytes))]
    HugePagesBeyondMemory {
        /// The node.
        node: NodeId,
        /// Page size, bytes.
        size_bytes: u64,
        /// Pages in the pool.
        pages: u64,
        /// The node's memory; `None` when the source gave no memory sizes
        /// (the pool is then held to [`MAX_NODE_BYTES`]).
        memory_bytes: Option<u64>,
    },
    /// More free huge pages than the pool holds.
    #[error("{node} has {free} free {} huge pages in a pool of {total}", format_size(*size_bytes))]
    FreeHugePagesAboveTotal {
        /// The node.
        node: NodeId,
        /// Page size, bytes.
        size_bytes: u64,
        /// Free pages claimed.
        free: u64,
        /// Pages in the pool.
        total: u64,
    },
    /// A memory-only node said to be local to a node that does not exist
    /// or that has no CPUs.
    #[error("{node} is said to be local to {to}, which is not a node with CPUs")]
    LocalToUnknownNode {
        /// The memory-only node.
        node: NodeId,
        /// The node named.
        to: NodeId,
    },
    /// A device said to be local to a node that does not exist.
    #[error("device {device} is on {node}, which does not exist")]
    DeviceOnUnknownNode {
        /// PCI address.
        device: String,
        /// The missing node.
        node: NodeId,
    },
}

fn pool_beyond_memory(node: NodeId, size: u64, pages: u64, memory: Option<u64>) -> String {
    // u128: pages x size can exceed 16 EiB in a hostile file.
    let total = u128::from(pages) * u128::from(size);
    let total = u64::try_from(total).map_or_else(|_| format!("{total} bytes"), format_size);
    let pool = format!("{node} has a pool of {pages} x {} huge pages ({total})", format_size(size));
    match memory {
        Some(m) => format!("{pool}, more than the node's {} of memory", format_size(m)),
        None => format!("{pool}, beyond the supported {} per node", format_size(MAX_NODE_BYTES)),
    }
}
