//! NUMA nodes: CPUs, memory, huge pages and distances from
//! `/sys/devices/system/node/nodeN`, or one node for the whole machine from
//! `/proc/meminfo` and `/sys/kernel/mm/hugepages` when the kernel has no
//! node directories.
//!
//! Memory is `MemTotal`, as hwloc's `local_memory`. NUMA nodes that only
//! hold an NVIDIA GPU's memory (POWER9 + V100, Grace + Hopper), named by
//! `/proc/driver/nvidia/gpus/*/numa_status`, are left out as hwloc does by
//! default: guest RAM never belongs there.

use super::{cpu_set, number, numbered, text, value, NODE_DIR};
use crate::ParseError;
use numaplace_topo::{CpuSet, HugePages, ModelError, Node, NodeId, Warning, LOCAL_DISTANCE, MAX_NODE};
use std::collections::BTreeMap;

/// What the node directories say.
pub(super) struct Nodes {
    pub nodes: Vec<Node>,
    /// Rows in the order of `nodes`, when every node has a distance file.
    pub distances: Option<Vec<Vec<u32>>>,
    /// For each kept node without CPUs, the kept CPU nodes its HMAT
    /// initiators name (`nodeN/access0/initiators/nodeK`, else `access1`).
    pub local_to: Vec<(NodeId, Vec<NodeId>)>,
}

/// One node directory, before cross-checks.
struct RawNode {
    node: Node,
    cpus_path: String,
    /// The distance row (at most one value per node directory), how many
    /// values the file had, and the file.
    distance: Option<(Vec<u32>, usize, String)>,
}

pub(super) fn read(tree: &dyn super::Tree, known: &CpuSet, warnings: &mut Vec<Warning>) -> Result<Nodes, ParseError> {
    let ids = numbered(tree, NODE_DIR, "node", MAX_NODE, "a node number below 4096")?;
    if ids.is_empty() {
        return whole_machine(tree, known, warnings);
    }
    let mut raws = Vec::with_capacity(ids.len());
    for &id in &ids {
        raws.push(read_node(tree, id, ids.len())?);
    }
    let mut keep = vec![true; raws.len()];

    // Firmware that reports one node many times (every node listing every
    // CPU, as on an SGI Altix XE) describes one node: hwloc keeps the
    // first. Any other CPU claimed twice is a contradiction, checked on the
    // files as written so the error names what the user can see.
    let mut owner: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, raw) in raws.iter().enumerate() {
        let twin = (0..i).find(|&j| keep[j] && !raw.node.cpus.is_empty() && raws[j].node.cpus == raw.node.cpus);
        if let Some(j) = twin {
            warnings.push(Warning::Skipped {
                path: format!("{NODE_DIR}/node{}", raw.node.id.0),
                reason: format!(
                    "lists the same CPUs as node{} (firmware bug); left out with its memory",
                    raws[j].node.id.0
                ),
            });
            keep[i] = false;
            continue;
        }
        for cpu in raw.node.cpus.iter() {
            if let Some(&first) = owner.get(&cpu) {
                return Err(ParseError::Contradiction {
                    path: raw.cpus_path.clone(),
                    source: ModelError::CpuInTwoNodes { cpu, first: raws[first].node.id, second: raw.node.id },
                });
            }
            owner.insert(cpu, i);
        }
    }

    let gpu_memory = nvidia_gpu_nodes(tree);
    for (raw, k) in raws.iter().zip(keep.iter_mut()) {
        if let (Some(pci), true, true) = (gpu_memory.get(&raw.node.id.0), raw.node.cpus.is_empty(), *k) {
            warnings.push(Warning::Skipped {
                path: format!("{NODE_DIR}/node{}", raw.node.id.0),
                reason: format!("memory of NVIDIA GPU {pci}, not usable by guests"),
            });
            *k = false;
        }
    }

    let distances = distances(&raws, &ids, &keep, warnings)?;
    let local_to = initiators(tree, &raws, &keep);
    let nodes = raws
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(mut r, _)| {
            // Node masks may name CPUs the tree has no directory for
            // (trimmed captures, CPUs beyond `possible`).
            r.node.cpus = r.node.cpus.intersection(known);
            r.node
        })
        .collect();
    Ok(Nodes { nodes, distances, local_to })
}

/// The CPU nodes the kernel's HMAT tables name as best initiators of each
/// memory-only node (`access0/initiators` holds a `nodeK` link per node):
/// on a Xeon Max in flat mode each HBM node names its SNC domain's node,
/// which distances alone (often equal for several) do not tell.
fn initiators(tree: &dyn super::Tree, raws: &[RawNode], keep: &[bool]) -> Vec<(NodeId, Vec<NodeId>)> {
    let cpu_nodes: Vec<NodeId> =
        raws.iter().zip(keep).filter(|(r, &k)| k && !r.node.cpus.is_empty()).map(|(r, _)| r.node.id).collect();
    let mut out = Vec::new();
    for raw in raws.iter().zip(keep).filter(|(r, &k)| k && r.node.cpus.is_empty()).map(|(r, _)| r) {
        // access1 (the best CPU initiators) where a capture has no access0.
        let dir = |class: u8| format!("{NODE_DIR}/node{}/access{class}/initiators", raw.node.id.0);
        let mut names = tree.list(&dir(0));
        if names.is_empty() {
            names = tree.list(&dir(1));
        }
        let mut to: Vec<NodeId> = names
            .iter()
            .filter_map(|name| name.strip_prefix("node")?.parse::<u32>().ok())
            .map(NodeId)
            .filter(|id| cpu_nodes.contains(id) && *id != raw.node.id)
            .collect();
        to.sort_unstable();
        to.dedup();
        if !to.is_empty() {
            out.push((raw.node.id, to));
        }
    }
    out
}

/// The distance matrix of the kept nodes, when every node has a row.
/// Rows are checked against all node directories (that is what the kernel
/// prints), values only between kept nodes.
fn distances(
    raws: &[RawNode],
    ids: &[u32],
    keep: &[bool],
    warnings: &mut Vec<Warning>,
) -> Result<Option<Vec<Vec<u32>>>, ParseError> {
    let kept = keep.iter().filter(|&&k| k).count();
    // One node has nothing to be distant from: ia64 kernels print `0`
    // there, and hand-trimmed captures leave rows of the nodes they cut.
    if kept < 2 {
        return Ok(None);
    }
    if let Some(raw) = raws.iter().zip(keep).find(|(r, &k)| k && r.distance.is_none()).map(|(r, _)| r) {
        if kept > 1 {
            warnings.push(Warning::Skipped {
                path: format!("{NODE_DIR}/node{}/distance", raw.node.id.0),
                reason: "missing, so no node has distances".to_string(),
            });
        }
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(kept);
    for (raw, _) in raws.iter().zip(keep).filter(|(_, &k)| k) {
        let Some((row, len, path)) = &raw.distance else {
            continue;
        };
        if *len != ids.len() {
            return Err(ParseError::Contradiction {
                path: path.clone(),
                source: ModelError::DistanceRowLength { node: raw.node.id, len: *len, expected: ids.len() },
            });
        }
        rows.push(row.iter().zip(keep).filter(|(_, &k)| k).map(|(&d, _)| d).collect::<Vec<u32>>());
    }
    // An all-zero matrix is firmware without a SLIT.
    if rows.iter().flatten().all(|&d| d == 0) {
        warnings.push(Warning::Skipped {
            path: format!("{NODE_DIR}/node*/distance"),
            reason: "all distances are 0 (no SLIT in the firmware)".to_string(),
        });
        return Ok(None);
    }
    let kept_raws = raws.iter().zip(keep).filter(|(_, &k)| k).map(|(r, _)| r);
    let kept_ids: Vec<NodeId> = kept_raws.clone().map(|r| r.node.id).collect();
    for (pos, (raw, row)) in kept_raws.zip(&rows).enumerate() {
        if let Some((_, _, path)) = &raw.distance {
            check_row(raw.node.id, pos, row, &kept_ids, path)?;
        }
    }
    Ok(Some(rows))
}

fn check_row(node: NodeId, pos: usize, row: &[u32], ids: &[NodeId], path: &str) -> Result<(), ParseError> {
    let fail = |source| Err(ParseError::Contradiction { path: path.to_string(), source });
    for (j, (&d, &to)) in row.iter().zip(ids).enumerate() {
        if j == pos && d != LOCAL_DISTANCE {
            return fail(ModelError::SelfDistance { node, value: d });
        }
        if j != pos && d <= LOCAL_DISTANCE {
            return fail(ModelError::RemoteTooClose { from: node, to, value: d });
        }
    }
    Ok(())
}

/// One node directory; `nodes` is how many there are, which a distance row
/// must not outgrow (a 16 MiB file of numbers would otherwise be kept once
/// per node).
fn read_node(tree: &dyn super::Tree, id: u32, nodes: usize) -> Result<RawNode, ParseError> {
    let dir = format!("{NODE_DIR}/node{id}");
    let (cpus, cpus_path) =
        cpu_set(tree, &dir, &["cpulist", "cpumap"])?.ok_or_else(|| ParseError::Missing(format!("{dir}/cpulist")))?;
    let meminfo_path = format!("{dir}/meminfo");
    let meminfo = text(tree, &meminfo_path)?.ok_or_else(|| ParseError::Missing(meminfo_path.clone()))?;
    let (total, free) = parse_meminfo(&meminfo, &meminfo_path)?;
    let memory_bytes = total.ok_or_else(|| ParseError::Missing(format!("MemTotal in {meminfo_path}")))?;
    let hugepages = read_hugepages(tree, &format!("{dir}/hugepages"))?;
    let distance_path = format!("{dir}/distance");
    let distance = match value(tree, &distance_path)? {
        None => None,
        Some(v) => {
            let mut row = Vec::new();
            let mut len = 0usize;
            for d in v.split_whitespace() {
                let value = d.parse::<u32>().map_err(|_| ParseError::bad(&distance_path, "distances (integers)", d))?;
                // Values past one per node make the row wrong whatever they
                // are; only their count is kept, for the error.
                if len < nodes {
                    row.push(value);
                }
                len += 1;
            }
            Some((row, len, distance_path))
        }
    };
    let node = Node { id: NodeId(id), cpus, memory_bytes, free_bytes: free, hugepages, kind: None };
    Ok(RawNode { node, cpus_path, distance })
}

/// `MemTotal` and `MemFree` in bytes from a meminfo file, with or without
/// the `Node N ` prefix of per-node files.
fn parse_meminfo(text: &str, path: &str) -> Result<(Option<u64>, Option<u64>), ParseError> {
    let (mut total, mut free) = (None, None);
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let key = key.split_whitespace().last().unwrap_or("");
        let slot = match key {
            "MemTotal" => &mut total,
            "MemFree" => &mut free,
            _ => continue,
        };
        let mut words = rest.split_whitespace();
        let kib = words
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|_| matches!(words.next(), None | Some("kB")))
            .and_then(|n| n.checked_mul(1024))
            .ok_or_else(|| ParseError::bad(path, "a size in kB", line.trim()))?;
        *slot = Some(kib);
    }
    Ok((total, free))
}

/// The default huge page pool as `/proc/meminfo` counts it
/// (`HugePages_Total`, `HugePages_Free`, `Hugepagesize`); nothing when a
/// line is missing, malformed or the pool is empty.
fn meminfo_hugepages(text: &str) -> Option<HugePages> {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.split_whitespace().next()?.parse::<u64>().ok()).flatten()
        })
    };
    let total = field("HugePages_Total").filter(|&t| t > 0)?;
    let size_bytes = field("Hugepagesize")?.checked_mul(1024)?;
    Some(HugePages { size_bytes, total, free: field("HugePages_Free") })
}

/// Pools under a `hugepages` directory (`hugepages-2048kB/nr_hugepages`).
fn read_hugepages(tree: &dyn super::Tree, dir: &str) -> Result<Vec<HugePages>, ParseError> {
    let mut pools = Vec::new();
    for name in tree.list(dir) {
        let pool = format!("{dir}/{name}");
        let size_bytes = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|kb| kb.parse::<u64>().ok())
            .and_then(|kb| kb.checked_mul(1024))
            .ok_or_else(|| ParseError::bad(&pool, "a directory named hugepages-<size>kB", &name))?;
        let Some(total) = number::<u64>(tree, &format!("{pool}/nr_hugepages"), "a page count")? else {
            continue;
        };
        let free = number::<u64>(tree, &format!("{pool}/free_hugepages"), "a page count")?;
        pools.push(HugePages { size_bytes, total, free });
    }
    pools.sort_by_key(|p| p.size_bytes);
    Ok(pools)
}

/// A kernel without NUMA: one node 0 with every CPU and the machine's
/// memory.
fn whole_machine(tree: &dyn super::Tree, known: &CpuSet, warnings: &mut Vec<Warning>) -> Result<Nodes, ParseError> {
    warnings.push(Warning::NoNumaInfo);
    let path = "/proc/meminfo";
    let (total, free) = match text(tree, path)? {
        Some(t) => parse_meminfo(&t, path)?,
        None => (None, None),
    };
    if total.is_none() {
        warnings.push(Warning::NoMemoryInfo);
    }
    let mut hugepages = read_hugepages(tree, "/sys/kernel/mm/hugepages")?;
    if hugepages.is_empty() {
        // Kernels before 2.6.27 only count the default size in meminfo.
        if let Some(t) = text(tree, path)? {
            hugepages.extend(meminfo_hugepages(&t));
        }
    }
    let node = Node {
        id: NodeId(0),
        cpus: known.clone(),
        memory_bytes: total.unwrap_or(0),
        free_bytes: free,
        hugepages,
        kind: None,
    };
    Ok(Nodes { nodes: vec![node], distances: None, local_to: Vec::new() })
}

/// Nodes the NVIDIA driver says hold a GPU's memory, with the GPU's PCI
/// address.
fn nvidia_gpu_nodes(tree: &dyn super::Tree) -> BTreeMap<u32, String> {
    let dir = "/proc/driver/nvidia/gpus";
    let mut out = BTreeMap::new();
    for pci in tree.list(dir) {
        let Ok(Some(status)) = text(tree, &format!("{dir}/{pci}/numa_status")) else {
            continue;
        };
        let node = status.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "Node").then(|| v.trim().parse::<u32>().ok()).flatten()
        });
        if let Some(node) = node {
            out.insert(node, pci);
        }
    }
    out
}
