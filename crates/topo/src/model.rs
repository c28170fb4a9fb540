//! The host topology: packages, NUMA nodes, cores, PUs, caches, memory,
//! huge pages, distances and devices, with the queries the planner needs.
//!
//! The hierarchy machine -> package -> die -> node -> LLC -> core -> PU is
//! kept as flat lists that point at each other rather than as a tree,
//! because real machines break every nesting rule: one node can span four
//! packages (16em64t-4s2c2t), one package can hold two nodes (EPYC, CoD),
//! and memory-only nodes sit beside packages (KNL MCDRAM, POWER9 GPU
//! memory). Readers describe what they found in [`Parts`];
//! [`Topology::from_parts`] checks it for contradictions and derives the
//! cross-references.

use crate::cpuset::{CpuSet, MAX_CPU};
use crate::error::ModelError;
pub use crate::ids::{MemoryKind, NodeId, MAX_NODE, MAX_NODE_BYTES};
use crate::warning::Warning;

/// SLIT distance of a node to itself.
pub const LOCAL_DISTANCE: u32 = 10;
/// Distance assumed between two nodes when the firmware gave none (the
/// kernel's own default, `REMOTE_DISTANCE`).
pub const DEFAULT_REMOTE_DISTANCE: u32 = 20;

/// A physical package (socket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    /// `physical_package_id`.
    pub id: u32,
    /// All PUs of the package that the reader saw.
    pub cpus: CpuSet,
}

/// One size of huge page on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePages {
    /// Page size in bytes (2 MiB, 1 GiB, ...).
    pub size_bytes: u64,
    /// Pages reserved in the pool (`nr_hugepages`).
    pub total: u64,
    /// Pages not yet used (`free_hugepages`); `None` when the source does
    /// not say.
    pub free: Option<u64>,
}

/// A NUMA node: a set of PUs and/or a range of memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The OS node number.
    pub id: NodeId,
    /// PUs attached to the node (online and offline).
    pub cpus: CpuSet,
    /// Total memory in bytes (`MemTotal` of the node).
    pub memory_bytes: u64,
    /// Free memory in bytes, when the source knows it.
    pub free_bytes: Option<u64>,
    /// Huge page pools, by increasing size.
    pub hugepages: Vec<HugePages>,
    /// Memory kind when the source names one (`HBM`, `MCDRAM`, `GPUMemory`,
    /// `NVM`, `CXL-DRAM`); `None` for ordinary DRAM.
    pub kind: Option<String>,
}

/// How a memory-only node's local CPU nodes were found
/// ([`Topology::local_cpu_nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locality {
    /// The source says (hwloc's group or parent, the kernel's HMAT
    /// initiators in `access0/initiators`).
    Source,
    /// The CPU nodes nearest by SLIT distance.
    Distance,
    /// Unknown: no source locality and no distances to go by.
    Unknown,
}

/// A core as a reader found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Core {
    /// The package holding it, if packages are known.
    pub package: Option<u32>,
    /// The die inside the package, if the source has dies.
    pub die: Option<u32>,
    /// The OS core number (`core_id`), unique only within a package.
    pub core_id: Option<u32>,
    /// The core's hardware threads (SMT siblings).
    pub cpus: CpuSet,
}

/// A group of cores sharing a last-level cache (an L3 slice, a CCX).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    /// Cache level (3 for an L3).
    pub level: u8,
    /// Size in bytes, if known.
    pub size_bytes: Option<u64>,
    /// PUs sharing it.
    pub cpus: CpuSet,
}

/// What a PCI device is, as far as placement cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKind {
    /// Display or 3D controller (PCI class 0x03) or accelerator (0x12).
    Gpu,
    /// Network controller (PCI class 0x02), including InfiniBand.
    Nic,
    /// NVMe controller (PCI class 0x0108).
    Nvme,
    /// Other mass storage (PCI class 0x01).
    Storage,
    /// Anything else worth listing.
    Other,
}

impl DeviceKind {
    /// Classifies a PCI class code (`0xCCSSPP` or `0xCCSS`).
    pub fn from_pci_class(class: u32) -> DeviceKind {
        let class16 = if class > 0xffff { class >> 8 } else { class };
        match class16 >> 8 {
            0x03 | 0x12 => DeviceKind::Gpu,
            0x02 => DeviceKind::Nic,
            0x01 if class16 == 0x0108 => DeviceKind::Nvme,
            0x01 => DeviceKind::Storage,
            _ => DeviceKind::Other,
        }
    }

    /// The lower-case name used in text and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Nic => "nic",
            DeviceKind::Nvme => "nvme",
            DeviceKind::Storage => "storage",
            DeviceKind::Other => "other",
        }
    }
}

/// A PCI device and the node it hangs off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// PCI address, `dddd:bb:dd.f`.
    pub address: String,
    /// Coarse kind.
    pub kind: DeviceKind,
    /// A human name (OS device name or model) when the source has one.
    pub name: Option<String>,
    /// PCI vendor and device ids, when known.
    pub vendor_device: Option<(u16, u16)>,
    /// The node the device is local to; `None` when the firmware does not
    /// say (`numa_node` = -1).
    pub node: Option<NodeId>,
}

/// Everything a reader found, before cross-checking. Field order follows
/// the OS numbering; `from_parts` sorts whatever order it is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    /// A name for the machine (file name, hostname, synthetic spec).
    pub name: Option<String>,
    /// The CPU model string, if known.
    pub cpu_model: Option<String>,
    /// The CPU architecture (x86-64 when the source does not say).
    pub arch: crate::Arch,
    /// Packages.
    pub packages: Vec<Package>,
    /// Number of dies per package, when the source distinguishes dies.
    pub dies: Vec<(u32, u32)>,
    /// NUMA nodes.
    pub nodes: Vec<Node>,
    /// Cores. Every online PU must be in exactly one core.
    pub cores: Vec<Core>,
    /// Last-level cache groups.
    pub caches: Vec<Cache>,
    /// PUs the OS knows but that are offline (no core information).
    pub offline: CpuSet,
    /// Distance rows, in the order of `nodes` as given; `None` when the
    /// source has no distances.
    pub distances: Option<Vec<Vec<u32>>>,
    /// PCI devices.
    pub devices: Vec<Device>,
    /// For nodes without CPUs, the CPU nodes the source says they are
    /// local to (hwloc's group or parent object, the kernel's HMAT
    /// initiators). A node not listed is local to its nearest CPU nodes
    /// by distance ([`Topology::local_cpu_nodes`]).
    pub local_to: Vec<(NodeId, Vec<NodeId>)>,
    /// Warnings the reader raised about quirks it worked around.
    pub warnings: Vec<Warning>,
}

/// A checked host topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    parts: Parts,
    /// `distances[i][j]` for node positions i, j (always square).
    distances: Vec<Vec<u32>>,
    /// Whether distances came from the source (false: defaults).
    distances_known: bool,
    /// For each CPU number, its PU facts (sparse CPU numbers are `None`).
    pu_index: Vec<Option<Pu>>,
    warnings: Vec<Warning>,
}

/// The distance matrix in node-number order, checked (one row per node,
/// each of the node count, 10 to itself, more to any other), and whether
/// the source gave it; without one, 10 and 20. Node numbers are checked to
/// be distinct first, as the rows are paired with the nodes by position.
fn node_distances(parts: &Parts) -> Result<(Vec<Vec<u32>>, bool), ModelError> {
    // Distances are given in the reader's node order; pair them up
    // before sorting nodes so rows and columns follow their nodes.
    let given_order: Vec<NodeId> = parts.nodes.iter().map(|n| n.id).collect();
    let mut seen = std::collections::BTreeSet::new();
    for id in &given_order {
        if !seen.insert(*id) {
            return Err(ModelError::DuplicateNode(*id));
        }
    }
    let n = parts.nodes.len();
    if let Some(rows) = &parts.distances {
        if rows.len() != n {
            return Err(ModelError::DistanceRowCount { rows: rows.len(), nodes: n });
        }
        for (i, row) in rows.iter().enumerate() {
            if row.len() != n {
                return Err(ModelError::DistanceRowLength { node: given_order[i], len: row.len(), expected: n });
            }
            if row[i] != LOCAL_DISTANCE {
                return Err(ModelError::SelfDistance { node: given_order[i], value: row[i] });
            }
            for (j, &d) in row.iter().enumerate() {
                if j != i && d <= LOCAL_DISTANCE {
                    return Err(ModelError::RemoteTooClose { from: given_order[i], to: given_order[j], value: d });
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| given_order[i]);
    Ok(match &parts.distances {
        Some(rows) => (order.iter().map(|&i| order.iter().map(|&j| rows[i][j]).collect()).collect(), true),
        None => (
            (0..n)
                .map(|i| (0..n).map(|j| if i == j { LOCAL_DISTANCE } else { DEFAULT_REMOTE_DISTANCE }).collect())
                .collect(),
            false,
        ),
    })
}

/// Sorts what the reader found into the model's order (nodes, packages,
/// cores and caches by their first CPU, devices by address, huge page
/// pools by size), refusing a package number given twice. The distances
/// were taken out before ([`node_distances`]).
fn sort_parts(parts: &mut Parts) -> Result<(), ModelError> {
    let mut nodes = std::mem::take(&mut parts.nodes);
    nodes.sort_by_key(|node| node.id);
    parts.nodes = nodes;
    parts.distances = None;
    parts.packages.sort_by_key(|p| p.id);
    for pair in parts.packages.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(ModelError::DuplicatePackage(pair[0].id));
        }
    }
    parts.cores.sort_by_key(|c| (c.cpus.first(), c.package, c.die, c.core_id));
    parts.caches.sort_by_key(|c| (c.cpus.first(), c.level));
    parts.devices.sort_by(|a, b| a.address.cmp(&b.address));
    parts.dies.sort();
    for h in parts.nodes.iter_mut() {
        h.hugepages.sort_by_key(|p| p.size_bytes);
    }
    Ok(())
}

/// Each CPU number's PU: its core, its node and whether it is online,
/// refusing a CPU in two cores or two nodes, an offline CPU in a core, an
/// empty core and a node's CPU no core or offline list names.
fn index_pus(parts: &Parts) -> Result<Vec<Option<Pu>>, ModelError> {
    let max_cpu = parts
        .cores
        .iter()
        .filter_map(|c| c.cpus.last())
        .chain(parts.offline.last())
        .chain(parts.nodes.iter().filter_map(|n| n.cpus.last()))
        .max();
    let mut pu_index: Vec<Option<Pu>> = vec![None; max_cpu.map_or(0, |m| m as usize + 1)];

    for (ci, core) in parts.cores.iter().enumerate() {
        if core.cpus.is_empty() {
            return Err(ModelError::EmptyCore { core_id: core.core_id, package: core.package });
        }
        for cpu in core.cpus.iter() {
            let slot = &mut pu_index[cpu as usize];
            if let Some(Pu { core: Some(other), .. }) = slot {
                return Err(ModelError::CpuInTwoCores {
                    cpu,
                    first: parts.cores[*other].cpus.clone(),
                    second: core.cpus.clone(),
                });
            }
            *slot = Some(Pu { id: cpu, core: Some(ci), node: None, online: true });
        }
    }
    for cpu in parts.offline.iter() {
        let slot = &mut pu_index[cpu as usize];
        if slot.is_some() {
            return Err(ModelError::OfflineCpuInCore(cpu));
        }
        *slot = Some(Pu { id: cpu, core: None, node: None, online: false });
    }
    for (ni, node) in parts.nodes.iter().enumerate() {
        for cpu in node.cpus.iter() {
            match &mut pu_index[cpu as usize] {
                Some(pu) => {
                    if let Some(other) = pu.node {
                        return Err(ModelError::CpuInTwoNodes { cpu, first: parts.nodes[other].id, second: node.id });
                    }
                    pu.node = Some(ni);
                }
                None => return Err(ModelError::UnknownCpuInNode { cpu, node: node.id }),
            }
        }
    }
    Ok(pu_index)
}

/// Checks what refers to something else (packages disjoint, devices and
/// huge page pools on known nodes, a memory-only node local to nodes with
/// online CPUs) and puts the `local_to` lists in order.
fn check_references(parts: &mut Parts, pu_index: &[Option<Pu>]) -> Result<(), ModelError> {
    let mut seen_pkg = CpuSet::new();
    for p in &parts.packages {
        if !seen_pkg.is_disjoint(&p.cpus) {
            let cpu = seen_pkg.intersection(&p.cpus).first().unwrap_or(0);
            return Err(ModelError::CpuInTwoPackages { cpu });
        }
        seen_pkg = seen_pkg.union(&p.cpus);
    }
    for d in &parts.devices {
        if let Some(node) = d.node {
            // Nodes are sorted by now: a search, not a scan, so a long
            // device list costs n log n.
            if parts.nodes.binary_search_by_key(&node, |n| n.id).is_err() {
                return Err(ModelError::DeviceOnUnknownNode { device: d.address.clone(), node });
            }
        }
    }
    check_hugepages(parts)?;
    for (node, to) in parts.local_to.iter_mut() {
        to.sort_unstable();
        to.dedup();
        for t in to.iter() {
            let with_cpus =
                parts.nodes.binary_search_by_key(t, |n| n.id).ok().is_some_and(|i| {
                    parts.nodes[i].cpus.iter().any(|c| pu_index[c as usize].is_some_and(|p| p.online))
                });
            if !with_cpus {
                return Err(ModelError::LocalToUnknownNode { node: *node, to: *t });
            }
        }
        if parts.nodes.binary_search_by_key(node, |n| n.id).is_err() {
            return Err(ModelError::LocalToUnknownNode { node: *node, to: *node });
        }
    }
    parts.local_to.retain(|(_, to)| !to.is_empty());
    parts.local_to.sort();
    parts.local_to.dedup_by(|a, b| a.0 == b.0);
    Ok(())
}

/// The reader's warnings and, once each, the quirks the model finds:
/// nodes without online CPUs or without memory, offline CPUs, missing
/// distances, online CPUs in no node, cores across nodes.
fn derived_warnings(parts: &Parts, pu_index: &[Option<Pu>], distances_known: bool) -> Vec<Warning> {
    let n = parts.nodes.len();
    let mut warnings = parts.warnings.clone();
    // A set beside the list: the reader's warnings (a JSON file can
    // carry any number) are looked up once per derived warning.
    let mut known: std::collections::HashSet<Warning> = warnings.iter().cloned().collect();
    let mut push = |w: Warning| {
        if known.insert(w.clone()) {
            warnings.push(w);
        }
    };
    for node in &parts.nodes {
        let has_online = node.cpus.iter().any(|c| pu_index[c as usize].is_some_and(|p| p.online));
        if !has_online {
            push(Warning::CpulessNode(node.id));
        } else if node.memory_bytes == 0 {
            push(Warning::MemorylessNode(node.id));
        }
    }
    if !parts.offline.is_empty() {
        push(Warning::OfflineCpus(parts.offline.clone()));
    }
    if n > 1 && !distances_known {
        push(Warning::NoDistances);
    }
    let homeless: CpuSet = pu_index.iter().flatten().filter(|p| p.online && p.node.is_none()).map(|p| p.id).collect();
    if !homeless.is_empty() && n > 0 {
        push(Warning::CpusWithoutNode(homeless));
    }
    for core in &parts.cores {
        let mut homes = core.cpus.iter().filter_map(|c| pu_index[c as usize].and_then(|p| p.node));
        if let Some(first) = homes.next() {
            if homes.any(|h| h != first) {
                push(Warning::CoreSpansNodes(core.cpus.clone()));
            }
        }
    }
    warnings
}

/// Refuses CPU numbers from [`MAX_CPU`] up, node numbers from [`MAX_NODE`]
/// up and memory beyond [`MAX_NODE_BYTES`] anywhere in the parts.
fn check_bounds(parts: &Parts) -> Result<(), ModelError> {
    // The place is only written out for the set that fails.
    let check = |cpus: &CpuSet, place: &dyn Fn() -> String| match cpus.last().filter(|&c| c >= MAX_CPU) {
        Some(cpu) => Err(ModelError::CpuTooLarge { cpu, place: place() }),
        None => Ok(()),
    };
    for n in &parts.nodes {
        check(&n.cpus, &|| n.id.to_string())?;
    }
    for p in &parts.packages {
        check(&p.cpus, &|| format!("package {}", p.id))?;
    }
    for c in &parts.cores {
        check(&c.cpus, &|| match (c.core_id, c.package) {
            (Some(id), Some(p)) => format!("core {id} of package {p}"),
            _ => "a core".to_string(),
        })?;
    }
    for c in &parts.caches {
        check(&c.cpus, &|| format!("an L{} cache", c.level))?;
    }
    check(&parts.offline, &|| "the offline CPUs".to_string())?;
    for node in &parts.nodes {
        if node.id.0 >= MAX_NODE {
            return Err(ModelError::NodeIdTooLarge(node.id));
        }
        for (what, bytes) in [("memory", Some(node.memory_bytes)), ("free memory", node.free_bytes)] {
            if let Some(bytes) = bytes.filter(|&b| b > MAX_NODE_BYTES) {
                return Err(ModelError::MemoryTooLarge { node: node.id, what, bytes });
            }
        }
    }
    Ok(())
}

/// Refuses huge page pools that the node's memory cannot hold. The kernel
/// carves every pool page out of the node's own memory (boot-time gigantic
/// pages are counted back into `MemTotal` too), so `pages x size <=
/// MemTotal` holds on every real machine, whatever reports it (sysfs
/// `nr_hugepages`, hwloc `page_type`, libvirt `<pages>`); a pool beyond it
/// is made-up data, and planning on it would put VMs on memory that does
/// not exist. When the source gave no memory sizes at all
/// ([`Warning::NoMemoryInfo`]) there is nothing to compare with, and only
/// the [`MAX_NODE_BYTES`] bound applies.
fn check_hugepages(parts: &Parts) -> Result<(), ModelError> {
    let memory_known = !parts.warnings.contains(&Warning::NoMemoryInfo);
    for node in &parts.nodes {
        let memory = memory_known.then_some(node.memory_bytes);
        for pool in &node.hugepages {
            // u128: a count and a size of up to 2^64 each cannot overflow.
            let bytes = u128::from(pool.total) * u128::from(pool.size_bytes);
            if bytes > u128::from(memory.unwrap_or(MAX_NODE_BYTES)) {
                return Err(ModelError::HugePagesBeyondMemory {
                    node: node.id,
                    size_bytes: pool.size_bytes,
                    pages: pool.total,
                    memory_bytes: memory,
                });
            }
            if let Some(free) = pool.free.filter(|&f| f > pool.total) {
                return Err(ModelError::FreeHugePagesAboveTotal {
                    node: node.id,
                    size_bytes: pool.size_bytes,
                    free,
                    total: pool.total,
                });
            }
        }
    }
    Ok(())
}

/// Where one PU sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pu {
    /// The OS CPU number.
    pub id: u32,
    /// Position of its core in [`Topology::cores`]; `None` when offline.
    pub core: Option<usize>,
    /// Position of its node in [`Topology::nodes`].
    pub node: Option<usize>,
    /// Whether the PU is online.
    pub online: bool,
}

impl Topology {
    /// Checks the reader's findings and derives the cross-references.
    ///
    /// Contradictions are errors (a CPU in two nodes or two cores, a
    /// distance row of the wrong length, a self-distance other than 10);
    /// quirks real firmware has (memory-less and CPU-less nodes, offline
    /// CPUs, no distances, CPUs in no node) are accepted with a warning.
    pub fn from_parts(mut parts: Parts) -> Result<Topology, ModelError> {
        // Sizes first: the checks and indexes below allocate by the highest
        // CPU number and by the node count, so those are bounded before
        // anything is built from them.
        check_bounds(&parts)?;
        let (distances, distances_known) = node_distances(&parts)?;
        sort_parts(&mut parts)?;
        let pu_index = index_pus(&parts)?;
        check_references(&mut parts, &pu_index)?;
        let warnings = derived_warnings(&parts, &pu_index, distances_known);
        // Keep the combined list in the parts too, so a topology written
        // out and read back (warnings included) compares equal.
        parts.warnings = warnings.clone();
        Ok(Topology { parts, distances, distances_known, pu_index, warnings })
    }

    /// The reader's findings, sorted (the input of [`Topology::from_parts`]
    /// minus the distances, which [`Topology::distance_rows`] gives).
    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    /// Rebuilds the parts, distances included, so a topology can be
    /// written out and read back exactly.
    pub fn to_parts(&self) -> Parts {
        let mut parts = self.parts.clone();
        parts.distances = self.distances_known.then(|| self.distances.clone());
        parts
    }

    /// A name for the machine, if the source gave one.
    pub fn name(&self) -> Option<&str> {
        self.parts.name.as_deref()
    }

    /// The CPU architecture (x86-64 when the source did not say).
    pub fn arch(&self) -> &crate::Arch {
        &self.parts.arch
    }

    /// Packages, by id.
    pub fn packages(&self) -> &[Package] {
        &self.parts.packages
    }

    /// NUMA nodes, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.parts.nodes
    }

    /// Cores, by lowest PU number.
    pub fn cores(&self) -> &[Core] {
        &self.parts.cores
    }

    /// Last-level cache groups.
    pub fn caches(&self) -> &[Cache] {
        &self.parts.caches
    }

    /// PCI devices, by address.
    pub fn devices(&self) -> &[Device] {
        &self.parts.devices
    }

    /// Warnings about quirks that affect placement.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Whether the distance matrix came from the source (not defaults).
    pub fn distances_known(&self) -> bool {
        self.distances_known
    }

    /// Distance rows in node order (square, 10 on the diagonal).
    pub fn distance_rows(&self) -> &[Vec<u32>] {
        &self.distances
    }

    /// Distance between two node positions.
    pub fn distance(&self, from: usize, to: usize) -> u32 {
        self.distances[from][to]
    }

    /// Position of a node id in [`Topology::nodes`].
    pub fn node_index(&self, id: NodeId) -> Option<usize> {
        self.parts.nodes.binary_search_by_key(&id, |n| n.id).ok()
    }

    /// Facts about one CPU number.
    pub fn pu(&self, cpu: u32) -> Option<Pu> {
        self.pu_index.get(cpu as usize).copied().flatten()
    }

    /// Every PU the OS knows, online or not, by number.
    pub fn pus(&self) -> impl Iterator<Item = Pu> + '_ {
        self.pu_index.iter().flatten().copied()
    }

    /// Online PUs.
    pub fn online_cpus(&self) -> CpuSet {
        self.pus().filter(|p| p.online).map(|p| p.id).collect()
    }

    /// Offline PUs.
    pub fn offline_cpus(&self) -> &CpuSet {
        &self.parts.offline
    }

    /// Number of packages.
    pub fn package_count(&self) -> usize {
        self.parts.packages.len()
    }

    /// Number of physical cores (with at least one online PU).
    pub fn core_count(&self) -> usize {
        self.parts.cores.len()
    }

    /// Number of online hardware threads.
    pub fn pu_count(&self) -> usize {
        self.pus().filter(|p| p.online).count()
    }

    /// Threads per core of the widest core (1 without SMT).
    pub fn max_threads_per_core(&self) -> usize {
        self.parts.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(0)
    }

    /// Total memory over all nodes, in bytes.
    pub fn total_memory(&self) -> u64 {
        self.parts.nodes.iter().map(|n| n.memory_bytes).sum()
    }

    /// Positions (in [`Topology::cores`]) of the cores whose PUs are on the
    /// node at `node` position.
    pub fn cores_of_node(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.parts.cores.iter().enumerate().filter_map(move |(i, c)| {
            let first = c.cpus.first()?;
            (self.pu(first)?.node == Some(node)).then_some(i)
        })
    }

    /// Online PUs of the node at `node` position.
    pub fn node_online_cpus(&self, node: usize) -> CpuSet {
        self.parts.nodes[node].cpus.iter().filter(|&c| self.pu(c).is_some_and(|p| p.online)).collect()
    }

    /// The package id a node's CPUs belong to, when they all share one.
    pub fn package_of_node(&self, node: usize) -> Option<u32> {
        let cpus = self.node_online_cpus(node);
        let first = cpus.first()?;
        let pkg = self.parts.packages.iter().find(|p| p.cpus.contains(first))?;
        cpus.is_subset(&pkg.cpus).then_some(pkg.id)
    }

    /// The kind of memory of the node at position `node`.
    pub fn memory_kind(&self, node: usize) -> MemoryKind {
        MemoryKind::of(self.parts.nodes.get(node).and_then(|n| n.kind.as_deref()))
    }

    /// Whether the node at position `node` has online CPUs.
    pub fn has_cpus(&self, node: usize) -> bool {
        self.parts.nodes.get(node).is_some_and(|n| n.cpus.iter().any(|c| self.pu(c).is_some_and(|p| p.online)))
    }

    /// The CPU nodes (positions) the node at `node` is local to, and how
    /// that was found: itself for a node with CPUs; for a memory-only node
    /// what the source says (hwloc's group, HMAT initiators), else the CPU
    /// nodes at the smallest distance from it when the source has
    /// distances, else none ([`Locality::Unknown`]).
    pub fn local_cpu_nodes(&self, node: usize) -> (Vec<usize>, Locality) {
        let Some(n) = self.parts.nodes.get(node) else { return (Vec::new(), Locality::Unknown) };
        if self.has_cpus(node) {
            return (vec![node], Locality::Source);
        }
        if let Some((_, to)) = self.parts.local_to.iter().find(|(id, _)| *id == n.id) {
            return (to.iter().filter_map(|&t| self.node_index(t)).collect(), Locality::Source);
        }
        if !self.distances_known {
            return (Vec::new(), Locality::Unknown);
        }
        let cpu_nodes = || (0..self.parts.nodes.len()).filter(|&j| j != node && self.has_cpus(j));
        let Some(best) = cpu_nodes().map(|j| self.distances[node][j]).min() else {
            return (Vec::new(), Locality::Unknown);
        };
        (cpu_nodes().filter(|&j| self.distances[node][j] == best).collect(), Locality::Distance)
    }

    /// Number of dies over all packages (0 when the source has no dies).
    pub fn die_count(&self) -> usize {
        self.parts.dies.iter().map(|&(_, d)| d as usize).sum()
    }
}
