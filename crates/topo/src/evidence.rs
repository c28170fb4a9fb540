//! What told a reader a node's memory kind when the source names none
//! (issue 48): a typed value, so tests assert which evidence decided and
//! the JSON document carries it field by field; [`fmt::Display`] words it
//! once for the warning.

use crate::ids::NodeId;
use std::fmt;

/// Where an HMAT figure came from. Each source keeps one unit for all its
/// nodes, so a node is only ever compared with figures of its own source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FigureSource {
    /// hwloc's `Bandwidth`/`Latency` memory attributes (MiB/s, ns), which
    /// hwloc fills from the kernel's HMAT files or the firmware.
    HwlocMemattr,
    /// sysfs `nodeN/access0/initiators/*` (MB/s, ns): the best initiator
    /// of any kind.
    SysfsAccess0,
    /// sysfs `nodeN/access1/initiators/*`: the best CPU initiator (read
    /// where a kernel or capture has no `access0`).
    SysfsAccess1,
}

impl FigureSource {
    /// The stable name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            FigureSource::HwlocMemattr => "hwloc-memattr",
            FigureSource::SysfsAccess0 => "sysfs-access0",
            FigureSource::SysfsAccess1 => "sysfs-access1",
        }
    }

    /// The source a name of [`FigureSource::name`] stands for.
    pub fn from_name(name: &str) -> Option<FigureSource> {
        [FigureSource::HwlocMemattr, FigureSource::SysfsAccess0, FigureSource::SysfsAccess1]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// Which HMAT figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Figure {
    /// Read bandwidth (higher is faster).
    Bandwidth,
    /// Read latency (lower is faster).
    Latency,
}

impl Figure {
    /// The stable name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Figure::Bandwidth => "bandwidth",
            Figure::Latency => "latency",
        }
    }

    /// The figure a name of [`Figure::name`] stands for.
    pub fn from_name(name: &str) -> Option<Figure> {
        [Figure::Bandwidth, Figure::Latency].into_iter().find(|f| f.name() == name)
    }
}

/// What backs a DAX device the kernel onlined as a node (its parent in
/// sysfs says).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DaxBacking {
    /// An NVDIMM region (`ndbus*/region*`): persistent memory used as RAM.
    Nvdimm,
    /// A CXL region (under the CXL root `ACPI0017`, or a `decoder*`).
    Cxl,
    /// `hmem.N`: memory the firmware marks specific-purpose
    /// (EFI_MEMORY_SP), which is HBM or CXL; this alone does not say which.
    SoftReserved,
}

impl DaxBacking {
    /// The stable name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            DaxBacking::Nvdimm => "nvdimm",
            DaxBacking::Cxl => "cxl",
            DaxBacking::SoftReserved => "soft-reserved",
        }
    }

    /// The backing a name of [`DaxBacking::name`] stands for.
    pub fn from_name(name: &str) -> Option<DaxBacking> {
        [DaxBacking::Nvdimm, DaxBacking::Cxl, DaxBacking::SoftReserved].into_iter().find(|b| b.name() == name)
    }
}

/// The evidence a node's kind was found from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KindEvidence {
    /// An HMAT figure against that of the CPU node the memory is local to.
    Hmat {
        /// Where the figures came from.
        source: FigureSource,
        /// Which figure.
        figure: Figure,
        /// The node's own figure.
        value: u64,
        /// The CPU node it is local to.
        local: NodeId,
        /// That node's figure.
        local_value: u64,
    },
    /// The kernel's memory tiers (`memory_tiering/memory_tierN`): the node
    /// sits in a tier no CPU node is in.
    Tier {
        /// Its tier's number.
        tier: u32,
        /// The tier of the CPU nodes (the lowest, if several).
        cpu_tier: u32,
    },
    /// A DAX device the kernel onlined as this node (`target_node`).
    Dax {
        /// The device (`dax1.0`).
        device: String,
        /// What backs it.
        backing: DaxBacking,
    },
    /// No figure says: a CPU-less node beside each sub-NUMA domain, all of
    /// one size, on a CPU model that carries HBM on its package.
    CpuModel {
        /// The CPU model string.
        model: String,
        /// The CPU node (sub-NUMA domain) it is beside.
        domain: NodeId,
        /// How many such nodes the host has, each of the same size.
        nodes: u32,
        /// Their size in bytes.
        size_bytes: u64,
    },
}

impl KindEvidence {
    /// A stable name of the kind of evidence, for JSON and filtering.
    pub fn code(&self) -> &'static str {
        match self {
            KindEvidence::Hmat { .. } => "hmat",
            KindEvidence::Tier { .. } => "memory-tier",
            KindEvidence::Dax { .. } => "dax",
            KindEvidence::CpuModel { .. } => "cpu-model",
        }
    }
}

impl fmt::Display for KindEvidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindEvidence::Hmat { source, figure, value, local, local_value } => {
                let (what, unit) = match (source, figure) {
                    (FigureSource::HwlocMemattr, Figure::Bandwidth) => ("hwloc's Bandwidth memory attribute", "MiB/s"),
                    (FigureSource::HwlocMemattr, Figure::Latency) => ("hwloc's Latency memory attribute", "ns"),
                    (FigureSource::SysfsAccess0, Figure::Bandwidth) => {
                        ("sysfs access0/initiators/read_bandwidth", "MB/s")
                    }
                    (FigureSource::SysfsAccess0, Figure::Latency) => ("sysfs access0/initiators/read_latency", "ns"),
                    (FigureSource::SysfsAccess1, Figure::Bandwidth) => {
                        ("sysfs access1/initiators/read_bandwidth", "MB/s")
                    }
                    (FigureSource::SysfsAccess1, Figure::Latency) => ("sysfs access1/initiators/read_latency", "ns"),
                };
                write!(f, "{what} gives it {value} {unit} against {local_value} {unit} for {local}, the CPUs' own node")
            }
            KindEvidence::Tier { tier, cpu_tier } => {
                let side = if tier > cpu_tier { "below" } else { "above" };
                write!(
                    f,
                    "the kernel ranks it in memory_tier{tier}, {side} the CPU nodes' memory_tier{cpu_tier} \
                     (sysfs memory_tiering; the tier does not say which kind)"
                )
            }
            KindEvidence::Dax { device, backing } => {
                let what = match backing {
                    DaxBacking::Nvdimm => "an NVDIMM region (persistent memory)",
                    DaxBacking::Cxl => "a CXL region",
                    DaxBacking::SoftReserved => "memory the firmware marks specific-purpose (hmem)",
                };
                write!(f, "DAX device {device}, onlined as this node, is backed by {what}")
            }
            KindEvidence::CpuModel { model, domain, nodes, size_bytes } => write!(
                f,
                "no CPUs, beside {domain}'s sub-NUMA domain, one of {nodes} such nodes of {} MiB each, and no HMAT \
                 figures; the CPU, {model}, carries HBM",
                size_bytes >> 20
            ),
        }
    }
}
