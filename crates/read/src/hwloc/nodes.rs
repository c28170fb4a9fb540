//! NUMA nodes: which CPUs each owns, its memory, huge pages and kind.
//!
//! In v1 files a NUMA node sits in the normal hierarchy and owns the PUs
//! below it. In v2 it is a memory child of the normal object whose CPUs
//! are local to it, so several nodes can share one parent (KNL DDR and
//! MCDRAM, POWER9 DRAM and GPU memory). The OS gives each CPU to exactly
//! one node; here the deepest locality claims CPUs first, and among
//! siblings an ordinary DRAM node comes before HBM or GPU memory, so the
//! others come out CPU-less as they are on the real machine.

use super::tree::{attr_bitmap, attr_u64, field, info, Kind, Tree};
use crate::ParseError;
use numaplace_topo::{CpuSet, HugePages, Node, NodeId, MAX_NODE};
use roxmltree::Node as XmlNode;
use std::cmp::Reverse;

/// The largest size taken as the base page (64 KiB on POWER and some
/// arm64 kernels, 4 KiB elsewhere); hwloc lists the base page first.
const MAX_BASE_PAGE: u64 = 64 << 10;

/// The nodes, in document order, with the arena index of each NUMA object.
pub(super) struct Found {
    pub nodes: Vec<Node>,
    pub objs: Vec<usize>,
    /// Whether any node carried a memory size.
    pub memory_known: bool,
    /// For each node left without CPUs, the CPU nodes whose CPUs are
    /// those of its nearest normal ancestor below the machine (the SNC
    /// or quadrant group a KNL MCDRAM or Xeon Max HBM node hangs off).
    pub local_to: Vec<(NodeId, Vec<NodeId>)>,
}

/// One NUMA object before CPUs are shared out.
struct Candidate {
    obj: usize,
    /// CPUs local to it (its own subtree, or its normal parent's).
    local: CpuSet,
    /// Depth of the object that defines `local`: deeper claims first.
    depth: u32,
    ordinary: bool,
}

/// Reads every NUMA object of the tree; `offline` holds CPUs the machine
/// has but no PU object shows, which go to the node whose complete set
/// lists them.
pub(super) fn collect(tree: &Tree<'_, '_>, offline: &CpuSet) -> Result<Found, ParseError> {
    let mut nodes = Vec::new();
    let mut objs = Vec::new();
    let mut candidates = Vec::new();
    let mut memory_known = false;
    // CPUs of each node's nearest normal ancestor below the machine, to
    // find the CPU nodes a memory-only node is local to.
    let mut near: Vec<CpuSet> = Vec::new();
    for (i, obj) in tree.objs.iter().enumerate() {
        if obj.kind != Kind::Numa {
            continue;
        }
        let el = obj.el;
        let id = obj.os_index.ok_or_else(|| ParseError::Missing(field(el, "os_index")))?;
        if id >= MAX_NODE {
            return Err(ParseError::bad(field(el, "os_index"), "a node number below 4096", &id.to_string()));
        }
        let (memory, known) = memory_of(el, tree.v1)?;
        memory_known |= known;
        let kind = kind_of(el, tree.v1);
        let own = tree.pus.get(i).cloned().unwrap_or_default();
        let (local, depth) = if !own.is_empty() || tree.v1 {
            (own, obj.depth)
        } else {
            match tree.normal_ancestor(i) {
                Some(a) => (tree.pus.get(a).cloned().unwrap_or_default(), tree.objs.get(a).map_or(0, |o| o.depth)),
                None => (CpuSet::new(), 0),
            }
        };
        let ancestor = tree.normal_ancestor(i).filter(|&a| tree.objs.get(a).is_some_and(|o| o.kind != Kind::Machine));
        near.push(ancestor.and_then(|a| tree.pus.get(a).cloned()).unwrap_or_default());
        candidates.push(Candidate { obj: nodes.len(), local, depth, ordinary: kind.is_none() });
        nodes.push(Node {
            id: NodeId(id),
            cpus: CpuSet::new(),
            memory_bytes: memory,
            free_bytes: None,
            hugepages: hugepages(el)?,
            kind,
        });
        objs.push(i);
    }
    candidates.sort_by_key(|c| (Reverse(c.depth), !c.ordinary, c.obj));
    let mut claimed = CpuSet::new();
    let mut claimed_offline = CpuSet::new();
    for c in &candidates {
        let (Some(node), Some(&obj)) = (nodes.get_mut(c.obj), objs.get(c.obj)) else {
            continue;
        };
        let online = c.local.difference(&claimed);
        claimed = claimed.union(&online);
        let el = tree.objs.get(obj).map(|o| o.el);
        let complete = match el {
            Some(el) => attr_bitmap(el, "complete_cpuset")?.unwrap_or_default(),
            None => CpuSet::new(),
        };
        let down = complete.intersection(offline).difference(&claimed_offline);
        claimed_offline = claimed_offline.union(&down);
        node.cpus = online.union(&down);
    }
    let mut local_to = Vec::new();
    for (j, node) in nodes.iter().enumerate() {
        let Some(near) = near.get(j).filter(|n| !n.is_empty()) else { continue };
        if !node.cpus.is_empty() {
            continue;
        }
        let to: Vec<NodeId> = nodes
            .iter()
            .filter(|other| !other.cpus.is_empty() && !other.cpus.is_disjoint(near))
            .map(|o| o.id)
            .collect();
        if !to.is_empty() {
            local_to.push((node.id, to));
        }
    }
    Ok(Found { nodes, objs, memory_known, local_to })
}

/// The node's memory in bytes and whether the file said (hwloc omits
/// `local_memory` when it is 0; hwloc 0.9 wrote `memory_kB`).
pub(super) fn memory_of(el: XmlNode<'_, '_>, v1: bool) -> Result<(u64, bool), ParseError> {
    if let Some(bytes) = attr_u64(el, "local_memory")? {
        return Ok((bytes, true));
    }
    if v1 {
        if let Some(kb) = attr_u64(el, "memory_kB")? {
            let bytes = kb
                .checked_mul(1024)
                .ok_or_else(|| ParseError::bad(field(el, "memory_kB"), "a size below 2^64 bytes", &kb.to_string()))?;
            return Ok((bytes, true));
        }
    }
    Ok((0, false))
}

/// The memory kind: v2's `subtype`, v1's `Type` info; plain DRAM is none.
fn kind_of(el: XmlNode<'_, '_>, v1: bool) -> Option<String> {
    let raw = el.attribute("subtype").or_else(|| if v1 { info(el, "Type") } else { None })?;
    let kind = raw.trim();
    (!kind.is_empty() && !kind.eq_ignore_ascii_case("DRAM")).then(|| kind.chars().take(64).collect())
}

/// Huge page pools from `<page_type size count>`, without the base page.
pub(super) fn hugepages(el: XmlNode<'_, '_>) -> Result<Vec<HugePages>, ParseError> {
    let mut pages = Vec::new();
    for p in el.children().filter(|c| c.has_tag_name("page_type")) {
        let size = attr_u64(p, "size")?.unwrap_or(0);
        let count = attr_u64(p, "count")?.unwrap_or(0);
        if size > 0 {
            pages.push(HugePages { size_bytes: size, total: count, free: None });
        }
    }
    let smallest = pages.iter().map(|p| p.size_bytes).min();
    if let Some(base) = smallest.filter(|&s| s <= MAX_BASE_PAGE) {
        pages.retain(|p| p.size_bytes > base);
    }
    pages.sort_by_key(|p| p.size_bytes);
    pages.dedup_by_key(|p| p.size_bytes);
    Ok(pages)
}
