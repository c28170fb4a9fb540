//! Contradictions in a reader's findings: data no real machine can have.
//! Each variant carries the offending values so tests and users see exactly
//! what clashed.

use crate::cpuset::CpuSet;
use crate::model::NodeId;

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
    /// A device said to be local to a node that does not exist.
    #[error("device {device} is on {node}, which does not exist")]
    DeviceOnUnknownNode {
        /// PCI address.
        device: String,
        /// The missing node.
        node: NodeId,
    },
}
