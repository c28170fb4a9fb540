//! Fits a plan made for one host onto the machine that verifies it.
//!
//! What the guest sees (cells, their CPUs, memory and distances, sockets,
//! cores and threads) never changes: that is what is being proved. What
//! changes is only the host side, where the verifying machine lacks what
//! the planned host has: host node numbers and pinned CPUs are mapped onto
//! the machine's own, huge pages are dropped, and memory is scaled down
//! when the plan's guest would not fit. Every change is returned as a
//! sentence, so the report says what was verified and what was not.

use numaplace_plan::{Placement, VcpuPin};
use numaplace_topo::{format_size, CpuSet, NodeId, Topology};

/// Memory blocks of the guest kernel: node sizes stay multiples of this
/// so the guest reports them exactly.
pub const BLOCK: u64 = 128 << 20;

/// A plan adapted to this machine, and what was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adapted {
    /// The placement to boot.
    pub placement: Placement,
    /// One sentence per change.
    pub notes: Vec<String>,
    /// Whether the host side (pinning, memory binding) is the plan's own.
    pub host_side_verified: bool,
}

/// Adapts `p` to `local` (the verifying machine), with at most
/// `max_memory` bytes of guest memory.
pub fn adapt(p: &Placement, local: &Topology, max_memory: u64) -> Adapted {
    let mut out = p.clone();
    let mut notes = Vec::new();
    let online = local.online_cpus();
    let local_nodes: Vec<NodeId> = local.nodes().iter().filter(|n| n.memory_bytes > 0).map(|n| n.id).collect();
    let nodes_present = p.nodes.iter().all(|n| local_nodes.contains(n));
    let cpus_present = p.vcpus.iter().all(|v| online.contains(v.pu)) && p.run_cpus().is_subset(&online);
    let host_side_verified = nodes_present && cpus_present && !local_nodes.is_empty();
    if !host_side_verified && !local_nodes.is_empty() {
        let map_node = |n: NodeId| {
            let i = p.nodes.iter().position(|m| *m == n).unwrap_or(0);
            local_nodes[i % local_nodes.len()]
        };
        let cpus: Vec<u32> = online.iter().collect();
        let map_cpu = |i: usize| cpus.get(i % cpus.len().max(1)).copied().unwrap_or(0);
        out.nodes =
            p.nodes.iter().map(|n| map_node(*n)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        out.vcpus = p
            .vcpus
            .iter()
            .enumerate()
            .map(|(i, v)| VcpuPin { vcpu: v.vcpu, pu: map_cpu(i), node: map_node(v.node) })
            .collect();
        out.cpuset = if p.cpuset.is_empty() { CpuSet::new() } else { online.clone() };
        out.emulator = if p.emulator.is_empty() { CpuSet::new() } else { online.clone() };
        // A mixed VM's floating vCPUs float over every CPU here.
        for f in out.floating.iter_mut() {
            f.node = map_node(f.node);
            f.cpus = online.clone();
        }
        for c in out.guest.cells.iter_mut() {
            c.host_node = map_node(c.host_node);
            // The nodes backing a cell (a hidden HBM tier) map the same
            // way; two that land on one node here are one entry.
            let mut backing: Vec<(NodeId, u64)> = Vec::new();
            for (n, b) in c.memory_nodes.drain(..) {
                let m = map_node(n);
                match backing.iter_mut().find(|(k, _)| *k == m) {
                    Some((_, total)) => *total += b,
                    None => backing.push((m, b)),
                }
            }
            c.memory_nodes = if backing.len() == 1 && backing[0].0 == c.host_node { Vec::new() } else { backing };
        }
        let mut merged: Vec<(NodeId, u64)> = Vec::new();
        for (n, b) in &p.memory {
            let m = map_node(*n);
            match merged.iter_mut().find(|(k, _)| *k == m) {
                Some((_, total)) => *total += b,
                None => merged.push((m, *b)),
            }
        }
        out.memory = merged;
        notes.push(format!(
            "this machine lacks the planned host's nodes or CPUs (plan: nodes {}, CPUs {}; here: nodes {}, CPUs {}): \
             the guest side is verified, host pinning and memory binding are mapped onto this machine",
            p.nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
            p.vcpus.iter().map(|v| v.pu).collect::<CpuSet>(),
            local_nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
            online
        ));
    }
    if !out.devices.is_empty() {
        notes.push(format!(
            "PCI devices ({}) are not passed through to the test guest: this machine does not have them",
            out.devices.join(", ")
        ));
        out.devices.clear();
    }
    if let Some(page) = out.hugepage_bytes.take() {
        notes.push(format!(
            "huge pages ({}) are not used for the test guest; the planned huge page counts are checked by the planner, not here",
            format_size(page)
        ));
    }
    let total: u64 = out.guest.cells.iter().map(|c| c.memory_bytes).sum();
    if total > max_memory {
        // Scale every cell by the same factor, keeping whole blocks and at
        // least one block per cell, so proportions survive.
        let factor = total.div_ceil(max_memory);
        for c in out.guest.cells.iter_mut() {
            // A cell without memory (a memory-less node) stays without.
            if c.memory_bytes > 0 {
                c.memory_bytes = ((c.memory_bytes / factor) / BLOCK).max(1) * BLOCK;
            }
            // Nodes backing the cell keep their shares, the last taking
            // what rounding leaves.
            let mut left = c.memory_bytes;
            let n = c.memory_nodes.len();
            for (i, m) in c.memory_nodes.iter_mut().enumerate() {
                m.1 = if i + 1 == n { left } else { (m.1 / factor).min(left) };
                left -= m.1;
            }
        }
        let scaled: u64 = out.guest.cells.iter().map(|c| c.memory_bytes).sum();
        out.memory_bytes = scaled;
        for (node, bytes) in out.memory.iter_mut() {
            *bytes = out.guest.cells.iter().flat_map(|c| c.backing()).filter(|b| b.0 == *node).map(|b| b.1).sum();
        }
        notes.push(format!(
            "guest memory scaled down from {} to {} (1/{factor}, whole {} blocks per cell) to fit this machine; \
             cell sizes are checked at that scale",
            format_size(total),
            format_size(scaled),
            format_size(BLOCK)
        ));
    }
    Adapted { placement: out, notes, host_side_verified }
}
