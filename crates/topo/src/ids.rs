//! The numbers and kinds the model, its errors and its warnings all
//! name: a node's id and the bounds on nodes, and the kinds of memory a
//! node may hold. Apart from the model so that `error` and `warning` need
//! not import it (the model imports them).

use std::fmt;

/// A NUMA node's number as the OS names it (`nodeN`). Node numbers can be
/// sparse (nodes 0 and 2 only), so an id is never an index into a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

/// Node numbers from this one up are refused by every reader and by
/// [`crate::Topology::from_parts`]. Linux's `MAX_NUMNODES` is at most 1024
/// (`NODES_SHIFT` 10 on every architecture); 4096 leaves room, and because
/// ids are unique it also caps the node count, so the node x node distance
/// matrix has at most 16M entries.
pub const MAX_NODE: u32 = 4096;

/// The most memory (or huge page pool) one node may have: 1 PiB, over 40
/// times the largest node shipped today, and small enough that sums over
/// [`MAX_NODE`] nodes cannot overflow a `u64`.
pub const MAX_NODE_BYTES: u64 = 1 << 50;

/// What memory a node holds, as placement cares: ordinary DRAM (the
/// default, and what a VM's memory stays on unless asked), or a kind a
/// VM uses only when its request or the host profile says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryKind {
    /// Ordinary DRAM (no kind named, or `DRAM`).
    Dram,
    /// High-bandwidth memory: Xeon Max HBM, KNL MCDRAM.
    Hbm,
    /// Memory behind CXL (a memory expander).
    Cxl,
    /// A GPU's memory shown as a node (POWER9 with NVLink GPUs).
    Gpu,
    /// Persistent memory used as RAM (NVDIMM, Optane).
    Nvm,
    /// Any other name a source gives.
    Other,
}

impl MemoryKind {
    /// Every kind, in order.
    pub const ALL: [MemoryKind; 6] =
        [MemoryKind::Dram, MemoryKind::Hbm, MemoryKind::Cxl, MemoryKind::Gpu, MemoryKind::Nvm, MemoryKind::Other];

    /// The kind of a node from the name its source gives ([`crate::Node::kind`]):
    /// hwloc's `subtype` (`HBM`, `MCDRAM`, `GPUMemory`, `NVM`, `CXL-DRAM`)
    /// or a reader's own.
    pub fn of(name: Option<&str>) -> MemoryKind {
        let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else { return MemoryKind::Dram };
        let lower = name.to_ascii_lowercase();
        if lower == "dram" {
            MemoryKind::Dram
        } else if lower.contains("hbm") || lower.contains("mcdram") {
            MemoryKind::Hbm
        } else if lower.contains("cxl") {
            MemoryKind::Cxl
        } else if lower.contains("gpu") {
            MemoryKind::Gpu
        } else if lower.contains("nvm") || lower.contains("pmem") || lower.contains("nvdimm") {
            MemoryKind::Nvm
        } else {
            MemoryKind::Other
        }
    }

    /// The lower-case name used in requests, profiles, text and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            MemoryKind::Dram => "dram",
            MemoryKind::Hbm => "hbm",
            MemoryKind::Cxl => "cxl",
            MemoryKind::Gpu => "gpu",
            MemoryKind::Nvm => "nvm",
            MemoryKind::Other => "other",
        }
    }

    /// The kind a request or profile names (`dram`, `hbm`, `cxl`, `gpu`,
    /// `nvm`, `other`), case-insensitively.
    pub fn from_name(name: &str) -> Option<MemoryKind> {
        MemoryKind::ALL.into_iter().find(|k| k.as_str().eq_ignore_ascii_case(name.trim()))
    }
}
