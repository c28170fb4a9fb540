//! The sysfs/procfs reader: builds a [`Topology`] from
//! `/sys/devices/system/{cpu,node}`, `/sys/bus/pci/devices`,
//! `/sys/kernel/mm/hugepages`, `/proc/meminfo` and `/proc/cpuinfo` of a
//! [`Tree`]: the live host, a copied directory, or a
//! `hwloc-gather-topology` tarball loaded into memory.
//!
//! [`read_tree`] is a pure function of the tree, so the tests run it on
//! captured real machines. It groups CPUs the way hwloc's Linux backend
//! does (cores from `thread_siblings`/`core_cpus`, packages from
//! `core_siblings`/`package_cpus`, offline CPUs left out), which is why its
//! counts agree with `lstopo` on the same files.
//!
//! What the kernel gets wrong on real machines (buggy sibling lists,
//! memory-less or CPU-less nodes, offline CPUs, no distance file) is read
//! with a [`Warning`]; what cannot be true (a CPU in two nodes, a distance
//! row of the wrong length, a self-distance other than 10, a number that
//! does not parse in a CPU or node file) is an error naming the file inside
//! the tree. Caches, devices and the CPU model are extras: trouble there is
//! a [`Warning::Skipped`], never a failure.

mod cpu;
mod memory;
mod node;
mod pci;
mod tarball;
mod tree;

pub use tree::{DirTree, MemTree, Tree, MAX_FILE_BYTES};

use crate::ParseError;
use numaplace_topo::{Arch, CpuSet, Figure, ModelError, NodeId, Parts, Topology, Warning};
use std::str::FromStr;

const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

/// Reads a topology from a tree (see the module documentation).
pub fn read_tree(tree: &dyn Tree) -> Result<Topology, ParseError> {
    let mut warnings = Vec::new();
    let info = read_cpuinfo(tree, &mut warnings);
    let cpus = cpu::read(tree, info.amd_compute_units, &mut warnings)?;
    let known = cpus.pus.union(&cpus.offline);
    let mut nodes = node::read(tree, &known, &mut warnings)?;
    // Kinds sysfs never names: from the kernel's HMAT figures, memory
    // tiers and DAX devices, else from the CPU model (issue 48).
    let ids: Vec<NodeId> = nodes.nodes.iter().map(|n| n.id).collect();
    let source = memory::figure_source(tree, &ids);
    let figure = |n: NodeId, f: Figure| memory::figure(tree, source, n, f);
    let tiers = memory::tiers(tree, &mut warnings);
    let dax = memory::dax(tree);
    let near = memory::near(&nodes.nodes, &nodes.local_to, nodes.distances.as_deref());
    let evidence = crate::kinds::Evidence {
        cpu_model: info.model.as_deref(),
        cpu_model_number: info.model_number,
        local_to: &near,
        figure: &figure,
        figure_source: source,
        tiers: &tiers,
        dax: &dax,
    };
    crate::kinds::find(&mut nodes.nodes, &evidence, &mut warnings);
    let devices = pci::read(tree, &nodes.nodes, &mut warnings);
    let parts = Parts {
        name: None,
        cpu_model: info.model,
        arch: info.arch,
        packages: cpus.packages,
        dies: cpus.dies,
        nodes: nodes.nodes,
        cores: cpus.cores,
        caches: cpus.caches,
        offline: cpus.offline,
        distances: nodes.distances,
        devices,
        local_to: nodes.local_to,
        warnings,
    };
    Topology::from_parts(parts).map_err(locate)
}

/// Names the file a contradiction found by the model came from, where one
/// file is to blame.
fn locate(error: ModelError) -> ParseError {
    let node_file = |node: NodeId, file: &str| format!("{NODE_DIR}/node{}/{file}", node.0);
    let path = match &error {
        ModelError::CpuInTwoNodes { second, .. } => node_file(*second, "cpulist"),
        ModelError::UnknownCpuInNode { node, .. } => node_file(*node, "cpulist"),
        ModelError::DistanceRowLength { node, .. } | ModelError::SelfDistance { node, .. } => {
            node_file(*node, "distance")
        }
        ModelError::RemoteTooClose { from, .. } => node_file(*from, "distance"),
        ModelError::DuplicateNode(node) => format!("{NODE_DIR}/node{}", node.0),
        ModelError::CpuInTwoCores { cpu, .. } => {
            format!("{CPU_DIR}/cpu{cpu}/topology/thread_siblings")
        }
        ModelError::CpuInTwoPackages { cpu } => {
            format!("{CPU_DIR}/cpu{cpu}/topology/core_siblings")
        }
        ModelError::DeviceOnUnknownNode { device, .. } => {
            format!("/sys/bus/pci/devices/{device}/numa_node")
        }
        _ => return ParseError::Model(error),
    };
    ParseError::Contradiction { path, source: error }
}

/// A file's text up to its first NUL: hwloc's tarballs pad some sysfs
/// files with NULs, which no attribute legitimately holds.
fn text(tree: &dyn Tree, path: &str) -> Result<Option<String>, ParseError> {
    Ok(tree.read(path)?.map(|mut t| {
        if let Some(i) = t.find('\0') {
            t.truncate(i);
        }
        t
    }))
}

/// A one-value file, trimmed.
fn value(tree: &dyn Tree, path: &str) -> Result<Option<String>, ParseError> {
    Ok(text(tree, path)?.map(|t| t.trim().to_string()))
}

/// A one-number file.
fn number<T: FromStr>(tree: &dyn Tree, path: &str, expected: &'static str) -> Result<Option<T>, ParseError> {
    match value(tree, path)? {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| ParseError::bad(path, expected, &v)),
    }
}

/// A CPU set from the first file of `names` (in `dir`) that exists; names
/// ending in `cpus`, `siblings` or `map` hold a hex mask, the others
/// (`cpulist`, `thread_siblings_list`, `online`) the list form.
/// Returns the set and the file it came from.
fn cpu_set(tree: &dyn Tree, dir: &str, names: &[&str]) -> Result<Option<(CpuSet, String)>, ParseError> {
    for name in names {
        let path = format!("{dir}/{name}");
        if let Some(v) = value(tree, &path)? {
            let mask = ["cpus", "siblings", "map"].iter().any(|end| name.ends_with(end));
            let parsed = if mask { CpuSet::parse_mask(&v) } else { CpuSet::parse_list(&v) };
            return parsed
                .map(|set| Some((set, path.clone())))
                .map_err(|source| ParseError::CpuSet { field: path, source });
        }
    }
    Ok(None)
}

/// Numbered entries of a directory (`cpu0`, `node12`), by number. Only
/// plain decimal suffixes count (`cpufreq` and `cpu01` are not CPUs); a
/// number from `limit` up (`cpu4000000000`) is an error naming the entry,
/// as no kernel makes one and sets are sized by the highest number.
fn numbered(
    tree: &dyn Tree,
    dir: &str,
    prefix: &str,
    limit: u32,
    expected: &'static str,
) -> Result<Vec<u32>, ParseError> {
    let mut ids = Vec::new();
    for name in tree.list(dir) {
        let Some(n) = name.strip_prefix(prefix) else { continue };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
            continue;
        }
        match n.parse::<u32>().ok().filter(|&id| id < limit) {
            Some(id) => ids.push(id),
            None => return Err(ParseError::bad(format!("{dir}/{name}"), expected, n)),
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// What `/proc/cpuinfo` adds.
struct CpuInfo {
    model: Option<String>,
    /// The CPU model number (`model`, x86 only), for the HBM rule.
    model_number: Option<u32>,
    /// The architecture `/proc/cpuinfo`'s keys show; x86-64 without one.
    arch: Arch,
    /// AMD family 15h (Bulldozer and its successors) reports the two cores
    /// of a compute unit as thread siblings with their own core ids.
    amd_compute_units: bool,
}

fn read_cpuinfo(tree: &dyn Tree, warnings: &mut Vec<Warning>) -> CpuInfo {
    let path = "/proc/cpuinfo";
    let text = match text(tree, path) {
        Ok(Some(t)) => t,
        Ok(None) => {
            return CpuInfo { model: None, model_number: None, arch: Arch::default(), amd_compute_units: false }
        }
        Err(e) => {
            warnings.push(Warning::Skipped { path: path.to_string(), reason: e.to_string() });
            return CpuInfo { model: None, model_number: None, arch: Arch::default(), amd_compute_units: false };
        }
    };
    let field = |key: &str| {
        text.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string()).filter(|v| !v.is_empty())
        })
    };
    // x86, ia64 and new ARM kernels say `model name`; POWER says `cpu`;
    // old ARM kernels say `Processor`.
    let model = field("model name").or_else(|| field("cpu")).or_else(|| field("Processor"));
    let amd_compute_units =
        field("vendor_id").as_deref() == Some("AuthenticAMD") && field("cpu family").as_deref() == Some("21");
    // sysfs does not name the architecture; each kernel's cpuinfo has
    // keys of its own. POWER writes `cpu : POWER9 ...` and a `timebase`
    // (read as ppc64le: cpuinfo does not give the byte order, and every
    // Linux on POWER still shipped is little-endian); ARM `CPU
    // implementer` with `CPU architecture: 8` for 64-bit; s390 and
    // Itanium name themselves. Anything else (x86's `vendor_id` and
    // `flags`, or no cpuinfo at all) is x86-64.
    let arch = if field("timebase").is_some() || field("cpu").is_some_and(|c| c.starts_with("POWER")) {
        Arch::Ppc64le
    } else if field("CPU implementer").is_some() {
        match field("CPU architecture").as_deref() {
            Some("8") | Some("AArch64") => Arch::Aarch64,
            _ => Arch::Other("arm".to_string()),
        }
    } else if field("vendor_id").is_some_and(|v| v.contains("S390")) {
        Arch::Other("s390x".to_string())
    } else if field("arch").as_deref() == Some("IA-64") {
        Arch::Other("ia64".to_string())
    } else {
        Arch::X86_64
    };
    let model_number = field("model").and_then(|m| m.parse().ok());
    CpuInfo { model, model_number, arch, amd_compute_units }
}
