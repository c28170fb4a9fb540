//! The topology JSON (`numaplace topology --format json`), version 1.
//!
//! Top-level counts (`packages`, `cores`, `pus`) are for scripts that only
//! want sizes; the lists under them carry everything needed to rebuild the
//! topology exactly, so the JSON is also an input (`--from topo.json`).

use numaplace_topo::{
    Arch, Cache, Core, CpuSet, Device, DeviceKind, HugePages, Node, NodeId, Package, Parts, Topology, Warning, MAX_CPU,
    MAX_NODE, MAX_NODE_BYTES, MAX_SETS_BYTES,
};
use serde::{Deserialize, Serialize};

mod kind;
pub use kind::EvidenceDoc;

/// The value of the `format` field.
pub const FORMAT: &str = "numaplace-topology";
/// The current version.
pub const VERSION: u32 = 1;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyDoc {
    /// Always `numaplace-topology`.
    pub format: String,
    /// Format version, 1.
    pub version: u32,
    /// Machine name, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// CPU model, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// CPU architecture (`ppc64le`, `aarch64`); left out for x86-64, and
    /// read as x86-64 when absent (documents written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Number of packages (sockets).
    pub packages: usize,
    /// Number of dies (0 when the source does not distinguish dies).
    #[serde(default)]
    pub dies: usize,
    /// Number of physical cores.
    pub cores: usize,
    /// Number of online hardware threads.
    pub pus: usize,
    /// Offline CPUs.
    #[serde(default)]
    pub offline_cpus: Vec<u32>,
    /// Whether `distances` came from the source (false: 10/20 defaults).
    #[serde(default = "yes")]
    pub distances_known: bool,
    /// NUMA nodes by id.
    pub nodes: Vec<NodeDoc>,
    /// Packages by id.
    #[serde(default)]
    pub package_list: Vec<PackageDoc>,
    /// Cores by lowest CPU.
    #[serde(default)]
    pub core_list: Vec<CoreDoc>,
    /// Last-level caches.
    #[serde(default)]
    pub caches: Vec<CacheDoc>,
    /// PCI devices.
    #[serde(default)]
    pub devices: Vec<DeviceDoc>,
    /// Quirks that affect placement.
    #[serde(default)]
    pub warnings: Vec<WarningDoc>,
    /// What the host keeps for itself and its shared pool, as a plan
    /// document's `reserved` (read by `plan --host`; flags and a
    /// `--state` document's own take precedence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedDoc>,
}

fn yes() -> bool {
    true
}

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDoc {
    /// OS node number.
    pub id: u32,
    /// PU numbers.
    pub cpus: Vec<u32>,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// Free memory, bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// Huge page pools.
    #[serde(default)]
    pub hugepages: Vec<HugePagesDoc>,
    /// One distance per node, in the order of `nodes`.
    pub distances: Vec<u32>,
    /// Memory kind (`HBM`, `MCDRAM`, ...), absent for DRAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// For a node without CPUs, the CPU nodes its source says it is local
    /// to (hwloc's group, HMAT initiators); absent when the source does
    /// not say (then the nearest by distance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local_to: Vec<u32>,
}

/// One huge page pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HugePagesDoc {
    /// Page size in bytes.
    pub size_bytes: u64,
    /// Pages in the pool.
    pub total: u64,
    /// Free pages, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
}

/// One package.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageDoc {
    /// Package id.
    pub id: u32,
    /// PU numbers.
    pub cpus: Vec<u32>,
    /// Dies in the package (0: not distinguished).
    #[serde(default)]
    pub dies: u32,
}

/// One core.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreDoc {
    /// Package id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<u32>,
    /// Die id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub die: Option<u32>,
    /// OS core id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_id: Option<u32>,
    /// Hardware threads.
    pub cpus: Vec<u32>,
}

/// One cache group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheDoc {
    /// Level.
    pub level: u8,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// PUs sharing it.
    pub cpus: Vec<u32>,
}

/// One device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceDoc {
    /// PCI address.
    pub address: String,
    /// `gpu`, `nic`, `nvme`, `storage` or `other`.
    pub kind: String,
    /// Name, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// PCI vendor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<u16>,
    /// PCI device id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<u16>,
    /// Local node, absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
}

/// One warning: a stable code, a sentence, and the data it is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarningDoc {
    /// Stable code (`memoryless-node`, ...).
    pub code: String,
    /// The sentence shown to people.
    pub message: String,
    /// The node it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// The CPUs it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<u32>>,
    /// The path it concerns (skipped files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The reason (skipped files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The memory kind found (`*-found`: `hbm`, `cxl`, `nvm`, `other`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What said so (`*-found`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceDoc>,
}

fn list(set: &CpuSet) -> Vec<u32> {
    set.iter().collect()
}

fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().copied().collect()
}

impl From<&Warning> for WarningDoc {
    fn from(w: &Warning) -> Self {
        let mut doc = WarningDoc {
            code: w.code().to_string(),
            message: w.to_string(),
            node: None,
            cpus: None,
            path: None,
            reason: None,
            kind: None,
            evidence: None,
        };
        match w {
            Warning::MemorylessNode(n) | Warning::CpulessNode(n) => doc.node = Some(n.0),
            Warning::OfflineCpus(c)
            | Warning::CpusWithoutNode(c)
            | Warning::CoreSpansNodes(c)
            | Warning::InconsistentSiblings(c) => doc.cpus = Some(list(c)),
            Warning::Skipped { path, reason } => {
                doc.path = Some(path.clone());
                doc.reason = Some(reason.clone());
            }
            Warning::KindFound { node, kind, evidence } => {
                doc.node = Some(node.0);
                doc.kind = Some(kind.as_str().to_string());
                doc.evidence = Some(EvidenceDoc::from(evidence));
            }
            Warning::NoDistances | Warning::NoNumaInfo | Warning::NoCoreInfo | Warning::NoMemoryInfo => {}
        }
        doc
    }
}

impl WarningDoc {
    /// The model warning, or `None` for a code this version does not know
    /// (a newer writer's warning is dropped rather than refused).
    pub fn to_warning(&self) -> Option<Warning> {
        let node = || self.node.map(NodeId);
        let cpus = || self.cpus.as_deref().map(set);
        Some(match self.code.as_str() {
            "memoryless-node" => Warning::MemorylessNode(node()?),
            "cpuless-node" => Warning::CpulessNode(node()?),
            "offline-cpus" => Warning::OfflineCpus(cpus()?),
            "no-distances" => Warning::NoDistances,
            "cpus-without-node" => Warning::CpusWithoutNode(cpus()?),
            "core-spans-nodes" => Warning::CoreSpansNodes(cpus()?),
            "no-numa-info" => Warning::NoNumaInfo,
            "no-core-info" => Warning::NoCoreInfo,
            "no-memory-info" => Warning::NoMemoryInfo,
            "inconsistent-siblings" => Warning::InconsistentSiblings(cpus()?),
            "skipped" => Warning::Skipped { path: self.path.clone()?, reason: self.reason.clone()? },
            "hbm-found" | "cxl-found" | "memory-kind-found" => Warning::KindFound {
                node: node()?,
                kind: numaplace_topo::MemoryKind::from_name(self.kind.as_deref()?)?,
                evidence: self.evidence.as_ref()?.to_evidence()?,
            },
            _ => return None,
        })
    }
}

impl From<&Topology> for TopologyDoc {
    fn from(t: &Topology) -> Self {
        let parts = t.parts();
        let dies_of = |pkg: u32| parts.dies.iter().find(|d| d.0 == pkg).map_or(0, |d| d.1);
        TopologyDoc {
            reserved: None,
            format: FORMAT.to_string(),
            version: VERSION,
            name: parts.name.clone(),
            cpu_model: parts.cpu_model.clone(),
            arch: (*t.arch() != Arch::X86_64).then(|| t.arch().name().to_string()),
            packages: t.package_count(),
            dies: t.die_count(),
            cores: t.core_count(),
            pus: t.pu_count(),
            offline_cpus: list(t.offline_cpus()),
            distances_known: t.distances_known(),
            nodes: t
                .nodes()
                .iter()
                .zip(t.distance_rows())
                .map(|(n, row)| NodeDoc {
                    id: n.id.0,
                    cpus: list(&n.cpus),
                    memory_bytes: n.memory_bytes,
                    free_bytes: n.free_bytes,
                    hugepages: n
                        .hugepages
                        .iter()
                        .map(|h| HugePagesDoc { size_bytes: h.size_bytes, total: h.total, free: h.free })
                        .collect(),
                    distances: row.clone(),
                    kind: n.kind.clone(),
                    local_to: parts
                        .local_to
                        .iter()
                        .find(|(id, _)| *id == n.id)
                        .map(|(_, to)| to.iter().map(|t| t.0).collect())
                        .unwrap_or_default(),
                })
                .collect(),
            package_list: t
                .packages()
                .iter()
                .map(|p| PackageDoc { id: p.id, cpus: list(&p.cpus), dies: dies_of(p.id) })
                .collect(),
            core_list: t
                .cores()
                .iter()
                .map(|c| CoreDoc { package: c.package, die: c.die, core_id: c.core_id, cpus: list(&c.cpus) })
                .collect(),
            caches: t
                .caches()
                .iter()
                .map(|c| CacheDoc { level: c.level, size_bytes: c.size_bytes, cpus: list(&c.cpus) })
                .collect(),
            devices: t
                .devices()
                .iter()
                .map(|d| DeviceDoc {
                    address: d.address.clone(),
                    kind: d.kind.as_str().to_string(),
                    name: d.name.clone(),
                    vendor_id: d.vendor_device.map(|v| v.0),
                    device_id: d.vendor_device.map(|v| v.1),
                    node: d.node.map(|n| n.0),
                })
                .collect(),
            warnings: t.warnings().iter().map(WarningDoc::from).collect(),
        }
    }
}

/// Why a document is not a topology this version can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocError {
    /// `format` is not `numaplace-topology`.
    WrongFormat(String),
    /// A version this build does not know.
    UnsupportedVersion(u32),
    /// A device kind that is not one of the known names.
    UnknownDeviceKind(String),
    /// A number or a list beyond what numaplace reads (CPU numbers from
    /// 65536, node numbers from 4096, memory beyond 1 PiB), refused before
    /// anything is built from it.
    OutOfRange {
        /// Path to the value (`nodes[2].cpus`).
        field: String,
        /// What a valid value looks like.
        expected: &'static str,
        /// What was there.
        found: String,
    },
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::WrongFormat(s) => write!(f, "format: expected \"{FORMAT}\", found \"{s}\""),
            DocError::UnsupportedVersion(v) => write!(f, "version: expected {VERSION}, found {v}"),
            DocError::UnknownDeviceKind(k) => {
                write!(f, "devices[].kind: expected gpu, nic, nvme, storage or other, found \"{k}\"")
            }
            DocError::OutOfRange { field, expected, found } => write!(f, "{field}: expected {expected}, found {found}"),
        }
    }
}

/// What a CPU list entry must be.
const CPU_EXPECTED: &str = "CPU numbers below 65536";
/// What a node number must be.
const NODE_EXPECTED: &str = "a node number below 4096";

/// Refuses a CPU number from [`MAX_CPU`] up in `cpus`.
fn check_cpus(field: &dyn Fn() -> String, cpus: &[u32]) -> Result<(), DocError> {
    match cpus.iter().find(|&&c| c >= MAX_CPU) {
        Some(c) => Err(DocError::OutOfRange { field: field(), expected: CPU_EXPECTED, found: c.to_string() }),
        None => Ok(()),
    }
}

fn check_node(field: impl FnOnce() -> String, node: Option<u32>) -> Result<(), DocError> {
    match node.filter(|&n| n >= MAX_NODE) {
        Some(n) => Err(DocError::OutOfRange { field: field(), expected: NODE_EXPECTED, found: n.to_string() }),
        None => Ok(()),
    }
}

fn check_count(field: &str, len: usize, max: u32, expected: &'static str) -> Result<(), DocError> {
    if len > max as usize {
        return Err(DocError::OutOfRange { field: field.to_string(), expected, found: format!("{len} entries") });
    }
    Ok(())
}

/// The host's reservations, as plan and topology documents write them
/// (converted to the planner's by `plan::ReservedDoc::to_reservations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservedDoc {
    /// CPUs no vCPU is planned on.
    #[serde(default)]
    pub cpus: Vec<u32>,
    /// Bytes kept free on every node.
    #[serde(default)]
    pub memory_per_node: u64,
    /// The shared pool: shared VMs float only here, dedicated vCPUs never
    /// come here (absent: no pools).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_cpus: Vec<u32>,
}

impl TopologyDoc {
    /// Checks every number that sizes what [`TopologyDoc::to_parts`]
    /// builds, naming the field: CPU numbers (a set is a bitmap up to its
    /// highest number), node numbers and counts (the distance matrix is
    /// nodes x nodes), list lengths, and the bitmap all the lists would
    /// take together ([`MAX_SETS_BYTES`]). Memory sizes are bounded here
    /// too so the message names the field; the model checks the same.
    fn check_bounds(&self) -> Result<(), DocError> {
        check_count("nodes", self.nodes.len(), MAX_NODE, "at most 4096 nodes")?;
        // Every package, core and cache holds CPUs of its own, so none can
        // outnumber the CPU numbers; warnings come one per node or core.
        check_count("package_list", self.package_list.len(), MAX_CPU, "at most 65536 packages")?;
        check_count("core_list", self.core_list.len(), MAX_CPU, "at most 65536 cores")?;
        check_count("caches", self.caches.len(), MAX_CPU, "at most 65536 caches")?;
        check_count("warnings", self.warnings.len(), MAX_CPU, "at most 65536 warnings")?;
        // Each CPU list becomes a set: its numbers are checked and its
        // bitmap counted (the field is only written out when it fails).
        let mut bytes = 0usize;
        let mut list = |field: &dyn Fn() -> String, cpus: &[u32]| {
            check_cpus(field, cpus)?;
            bytes += CpuSet::bytes_for(cpus.iter().copied().max());
            Ok::<(), DocError>(())
        };
        list(&|| "offline_cpus".to_string(), &self.offline_cpus)?;
        for (i, n) in self.nodes.iter().enumerate() {
            check_node(|| format!("nodes[{i}].id"), Some(n.id))?;
            for (name, bytes) in [("memory_bytes", Some(n.memory_bytes)), ("free_bytes", n.free_bytes)] {
                if let Some(b) = bytes.filter(|&b| b > MAX_NODE_BYTES) {
                    return Err(DocError::OutOfRange {
                        field: format!("nodes[{i}].{name}"),
                        expected: "at most 1 PiB (1125899906842624 bytes)",
                        found: b.to_string(),
                    });
                }
            }
            list(&|| format!("nodes[{i}].cpus"), &n.cpus)?;
            check_count(&format!("nodes[{i}].local_to"), n.local_to.len(), MAX_NODE, "at most 4096 nodes")?;
            for (j, &to) in n.local_to.iter().enumerate() {
                check_node(|| format!("nodes[{i}].local_to[{j}]"), Some(to))?;
            }
        }
        for (i, p) in self.package_list.iter().enumerate() {
            list(&|| format!("package_list[{i}].cpus"), &p.cpus)?;
        }
        for (i, c) in self.core_list.iter().enumerate() {
            list(&|| format!("core_list[{i}].cpus"), &c.cpus)?;
        }
        for (i, c) in self.caches.iter().enumerate() {
            list(&|| format!("caches[{i}].cpus"), &c.cpus)?;
        }
        for (i, w) in self.warnings.iter().enumerate() {
            check_node(|| format!("warnings[{i}].node"), w.node)?;
            if let Some(cpus) = &w.cpus {
                list(&|| format!("warnings[{i}].cpus"), cpus)?;
            }
        }
        for (i, d) in self.devices.iter().enumerate() {
            check_node(|| format!("devices[{i}].node"), d.node)?;
        }
        if bytes > MAX_SETS_BYTES {
            return Err(DocError::OutOfRange {
                field: "cpus".to_string(),
                expected: "CPU lists that fit in 128 MiB of bitmaps (one bit per number up to each list's highest)",
                found: format!("{} MiB", bytes >> 20),
            });
        }
        Ok(())
    }

    /// The model parts this document describes (to be checked by
    /// [`Topology::from_parts`]).
    pub fn to_parts(&self) -> Result<Parts, DocError> {
        if self.format != FORMAT {
            return Err(DocError::WrongFormat(self.format.clone()));
        }
        if self.version != VERSION {
            return Err(DocError::UnsupportedVersion(self.version));
        }
        self.check_bounds()?;
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let kind = match d.kind.as_str() {
                    "gpu" => DeviceKind::Gpu,
                    "nic" => DeviceKind::Nic,
                    "nvme" => DeviceKind::Nvme,
                    "storage" => DeviceKind::Storage,
                    "other" => DeviceKind::Other,
                    k => return Err(DocError::UnknownDeviceKind(k.to_string())),
                };
                Ok(Device {
                    address: d.address.clone(),
                    kind,
                    name: d.name.clone(),
                    vendor_device: d.vendor_id.zip(d.device_id),
                    node: d.node.map(NodeId),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Parts {
            name: self.name.clone(),
            cpu_model: self.cpu_model.clone(),
            arch: self.arch.as_deref().map(Arch::from_name).unwrap_or_default(),
            packages: self.package_list.iter().map(|p| Package { id: p.id, cpus: set(&p.cpus) }).collect(),
            dies: self.package_list.iter().filter(|p| p.dies > 0).map(|p| (p.id, p.dies)).collect(),
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    id: NodeId(n.id),
                    cpus: set(&n.cpus),
                    memory_bytes: n.memory_bytes,
                    free_bytes: n.free_bytes,
                    hugepages: n
                        .hugepages
                        .iter()
                        .map(|h| HugePages { size_bytes: h.size_bytes, total: h.total, free: h.free })
                        .collect(),
                    kind: n.kind.clone(),
                })
                .collect(),
            cores: self
                .core_list
                .iter()
                .map(|c| Core { package: c.package, die: c.die, core_id: c.core_id, cpus: set(&c.cpus) })
                .collect(),
            caches: self
                .caches
                .iter()
                .map(|c| Cache { level: c.level, size_bytes: c.size_bytes, cpus: set(&c.cpus) })
                .collect(),
            offline: set(&self.offline_cpus),
            distances: self.distances_known.then(|| self.nodes.iter().map(|n| n.distances.clone()).collect()),
            devices,
            local_to: self
                .nodes
                .iter()
                .filter(|n| !n.local_to.is_empty())
                .map(|n| (NodeId(n.id), n.local_to.iter().map(|&t| NodeId(t)).collect()))
                .collect(),
            warnings: self.warnings.iter().filter_map(WarningDoc::to_warning).collect(),
        })
    }
}
