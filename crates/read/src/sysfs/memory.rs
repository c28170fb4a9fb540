//! What sysfs says of a node's memory beyond its size (issue 48), for
//! [`crate::kinds`]: the kernel's HMAT figures, its memory tiers and the
//! DAX devices it onlined as nodes. Each is an extra: a file that does
//! not read is skipped (with a warning where it exists but is wrong),
//! never a failure.

use super::{value, NODE_DIR};
use numaplace_topo::{CpuSet, DaxBacking, Figure, FigureSource, Node, NodeId, Warning};

const TIERS: &str = "/sys/devices/virtual/memory_tiering";
const DAX: &str = "/sys/bus/dax/devices";

/// Which access class the tree's HMAT figures are read from: `access0`
/// (the best initiators of any kind) where any node has it, else
/// `access1` (the best CPU initiators; some kernels and captures have
/// only that one).
pub(super) fn figure_source(tree: &dyn super::Tree, nodes: &[NodeId]) -> FigureSource {
    let has = |class: u8| nodes.iter().any(|n| !tree.list(&format!("{NODE_DIR}/node{}/access{class}", n.0)).is_empty());
    if !has(0) && has(1) {
        FigureSource::SysfsAccess1
    } else {
        FigureSource::SysfsAccess0
    }
}

/// A node's HMAT figure (`read_bandwidth`, MB/s; `read_latency`, ns) from
/// its initiators in the given class; 0 (the kernel's "unknown") is none.
pub(super) fn figure(tree: &dyn super::Tree, source: FigureSource, node: NodeId, figure: Figure) -> Option<u64> {
    let class = if source == FigureSource::SysfsAccess1 { 1 } else { 0 };
    let file = match figure {
        Figure::Bandwidth => "read_bandwidth",
        Figure::Latency => "read_latency",
    };
    let path = format!("{NODE_DIR}/node{}/access{class}/initiators/{file}", node.0);
    value(tree, &path).ok().flatten().and_then(|t| t.parse::<u64>().ok()).filter(|&v| v > 0)
}

/// The kernel's memory tiers (`memory_tiering/memory_tierN/nodelist`,
/// Linux 6.1 on): each tier's number and the nodes in it. A list that does
/// not read is skipped with a warning.
pub(super) fn tiers(tree: &dyn super::Tree, warnings: &mut Vec<Warning>) -> Vec<(u32, CpuSet)> {
    let mut out = Vec::new();
    for name in tree.list(TIERS) {
        let Some(n) = name.strip_prefix("memory_tier").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let path = format!("{TIERS}/{name}/nodelist");
        match value(tree, &path) {
            Ok(Some(text)) => match CpuSet::parse_list(text.trim()) {
                Ok(nodes) => out.push((n, nodes)),
                Err(_) => warnings.push(Warning::Skipped { path, reason: "not a node list".to_string() }),
            },
            Ok(None) => {}
            Err(e) => warnings.push(Warning::Skipped { path, reason: e.to_string() }),
        }
    }
    out
}

/// DAX devices the kernel onlined as memory (`dax*/target_node`), with
/// what backs each, told by where sysfs puts the device: under an NVDIMM
/// region (`ndbus*`), under the CXL root (`ACPI0017`) or a CXL decoder, or
/// under `hmem.N` (memory the firmware marks specific-purpose). A device
/// whose place says none of these is left out.
pub(super) fn dax(tree: &dyn super::Tree) -> Vec<(String, NodeId, DaxBacking)> {
    let mut out = Vec::new();
    for device in tree.list(DAX) {
        let path = format!("{DAX}/{device}");
        let Some(node) = value(tree, &format!("{path}/target_node")).ok().flatten().and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(place) = tree.canonical(&path) else { continue };
        let parts: Vec<&str> = place.split('/').collect();
        let backing = if parts.iter().any(|p| p.starts_with("ndbus")) {
            DaxBacking::Nvdimm
        } else if parts.iter().any(|p| p.starts_with("ACPI0017") || p.starts_with("decoder")) {
            DaxBacking::Cxl
        } else if parts.iter().any(|p| p.starts_with("hmem.")) {
            DaxBacking::SoftReserved
        } else {
            continue;
        };
        out.push((device, NodeId(node), backing));
    }
    out
}

/// The CPU nodes each CPU-less node is local to, for the kinds: its HMAT
/// initiators where the kernel names them, else the CPU node nearest by
/// distance when one alone is nearest (a Xeon Max's HBM node is 13 from
/// its SNC domain's node and 14 from the others of its socket; a kernel
/// without HMAT tables has no initiators). `rows` follow `nodes`.
pub(super) fn near(
    nodes: &[Node],
    initiators: &[(NodeId, Vec<NodeId>)],
    rows: Option<&[Vec<u32>]>,
) -> Vec<(NodeId, Vec<NodeId>)> {
    let mut out = initiators.to_vec();
    let Some(rows) = rows else { return out };
    for (node, row) in nodes.iter().zip(rows) {
        if !node.cpus.is_empty() || initiators.iter().any(|(n, _)| *n == node.id) {
            continue;
        }
        let cpu = |j: &usize| nodes.get(*j).is_some_and(|n| !n.cpus.is_empty());
        let Some(best) = (0..row.len()).filter(cpu).filter_map(|j| row.get(j)).min() else { continue };
        let nearest: Vec<NodeId> = (0..row.len())
            .filter(cpu)
            .filter(|&j| row.get(j) == Some(best))
            .filter_map(|j| nodes.get(j))
            .map(|n| n.id)
            .collect();
        if let [one] = nearest.as_slice() {
            out.push((node.id, vec![*one]));
        }
    }
    out
}
