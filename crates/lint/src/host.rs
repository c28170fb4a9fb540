//! The host facts rules ask about, computed once from a [`Topology`]:
//! per-node cores, PUs, memory and huge pages, and the node and core of
//! every CPU.

use numaplace_plan::Reservations;
use numaplace_topo::{CpuSet, NodeId, Topology};
use std::collections::BTreeSet;

/// One NUMA node, in the units rules use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// Node id.
    pub id: NodeId,
    /// Online PUs.
    pub pus: CpuSet,
    /// Physical cores with an online PU on the node.
    pub cores: u32,
    /// Memory in bytes a VM may have: the node's, less its huge page pools
    /// and what the host keeps free on every node
    /// (`Reservations::memory_per_node`): the planner's
    /// [`numaplace_plan::NodeCapacity::memory`].
    pub memory_bytes: u64,
    /// Huge page pools.
    pub hugepages: Vec<HugePool>,
}

/// One node's pool of one huge page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugePool {
    /// Page size in bytes.
    pub size_bytes: u64,
    /// Pages reserved (`nr_hugepages`).
    pub total: u64,
    /// Pages available (the free count when the source has one).
    pub free: u64,
}

impl NodeFacts {
    /// This node's pool of a page size, if the host lists one.
    pub fn pool(&self, size_bytes: u64) -> Option<HugePool> {
        self.hugepages.iter().copied().find(|p| p.size_bytes == size_bytes)
    }
}

/// A host as the rules see it.
#[derive(Clone, Debug)]
pub struct HostView<'t> {
    /// The topology.
    pub topology: &'t Topology,
    /// Nodes in topology order.
    pub nodes: Vec<NodeFacts>,
    /// What the host keeps for itself (the planner's reservations), so
    /// that lint and its fixes count free CPUs and memory as `plan` does.
    pub reservations: Reservations,
}

impl<'t> HostView<'t> {
    /// Derives the facts, for a host that reserves nothing.
    pub fn new(topology: &'t Topology) -> HostView<'t> {
        HostView::reserved(topology, &Reservations::default())
    }

    /// Derives the facts for a host with reservations.
    pub fn reserved(topology: &'t Topology, reservations: &Reservations) -> HostView<'t> {
        // A node's memory for VMs is the planner's one definition (less its
        // huge page pools and the host's reserve), so lint never accepts
        // memory `plan` would not give.
        let capacity = numaplace_plan::node_capacity(topology, reservations);
        let nodes = topology
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| NodeFacts {
                id: n.id,
                pus: topology.node_online_cpus(i),
                cores: topology.cores_of_node(i).count() as u32,
                memory_bytes: capacity.iter().find(|c| c.id == n.id).map_or(0, |c| c.memory),
                hugepages: n
                    .hugepages
                    .iter()
                    .map(|h| HugePool { size_bytes: h.size_bytes, total: h.total, free: h.free.unwrap_or(h.total) })
                    .collect(),
            })
            .collect();
        HostView { topology, nodes, reservations: reservations.clone() }
    }

    /// Memory QEMU needs beside a VM's own: the host's rule
    /// ([`Reservations::overhead`], the planner's), so that what `plan`
    /// places, `lint` accepts. An assumption, not a measured figure; the
    /// sources (docs/background.md § Memory larger than a node) only say
    /// that memory plus overhead must fit the node.
    pub fn overhead(&self, memory_bytes: u64) -> u64 {
        self.reservations.overhead.bytes(memory_bytes)
    }

    /// CPUs no VM of the linted kind may be planned on: the host's
    /// reserved CPUs and, when it declares one, its shared pool (a
    /// dedicated VM never goes there).
    pub fn kept_cpus(&self) -> CpuSet {
        self.reservations.cpus.union(&self.reservations.shared_cpus)
    }

    /// Nodes that have CPUs (memory-only nodes run no vCPU).
    pub fn cpu_nodes(&self) -> impl Iterator<Item = (usize, &NodeFacts)> {
        self.nodes.iter().enumerate().filter(|(_, n)| !n.pus.is_empty())
    }

    /// Cores of the largest node with CPUs: the width of "one node".
    pub fn node_cores(&self) -> u32 {
        self.cpu_nodes().map(|(_, n)| n.cores).max().unwrap_or(0)
    }

    /// PUs of the largest node with CPUs.
    pub fn node_pus(&self) -> u32 {
        self.cpu_nodes().map(|(_, n)| n.pus.len() as u32).max().unwrap_or(0)
    }

    /// Memory of the largest node with CPUs.
    pub fn node_memory(&self) -> u64 {
        self.cpu_nodes().map(|(_, n)| n.memory_bytes).max().unwrap_or(0)
    }

    /// Number of nodes with CPUs.
    pub fn cpu_node_count(&self) -> u32 {
        self.cpu_nodes().count() as u32
    }

    /// Physical cores over all nodes.
    pub fn total_cores(&self) -> u32 {
        self.cpu_nodes().map(|(_, n)| n.cores).sum()
    }

    /// Position of a node id.
    pub fn node_pos(&self, id: u32) -> Option<usize> {
        self.topology.node_index(NodeId(id))
    }

    /// Node position of a CPU.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<usize> {
        self.topology.pu(cpu).and_then(|p| p.node)
    }

    /// Node positions a CPU set touches.
    pub fn nodes_of(&self, cpus: &CpuSet) -> BTreeSet<usize> {
        cpus.iter().filter_map(|c| self.node_of_cpu(c)).collect()
    }

    /// Distinct physical cores a CPU set touches.
    pub fn cores_in(&self, cpus: &CpuSet) -> usize {
        cpus.iter().filter_map(|c| self.topology.pu(c).and_then(|p| p.core)).collect::<BTreeSet<_>>().len()
    }

    /// The CPUs of a set of node ids (ids the host lacks are skipped).
    pub fn cpus_of_node_ids(&self, ids: &CpuSet) -> CpuSet {
        ids.iter()
            .filter_map(|id| self.node_pos(id))
            .filter_map(|p| self.nodes.get(p))
            .fold(CpuSet::new(), |acc, n| acc.union(&n.pus))
    }

    /// Node ids of positions, as a set in list syntax order.
    pub fn ids(&self, positions: &BTreeSet<usize>) -> CpuSet {
        positions.iter().filter_map(|&p| self.nodes.get(p)).map(|n| n.id.0).collect()
    }

    /// Whether the host lists huge page pools at all, and none of this
    /// size: a size it does not support (rather than one not reserved).
    pub fn lacks_page_size(&self, size_bytes: u64) -> bool {
        let listed = self.nodes.iter().any(|n| !n.hugepages.is_empty());
        listed && self.nodes.iter().all(|n| n.pool(size_bytes).is_none())
    }

    /// Whether some package holds more than one node (SNC, EPYC NPS), so
    /// a guest socket spanning cells can mirror the host.
    pub fn nodes_share_packages(&self) -> bool {
        let mut seen = BTreeSet::new();
        self.cpu_nodes().filter_map(|(i, _)| self.topology.package_of_node(i)).any(|pkg| !seen.insert(pkg))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn node_memory_is_the_planners_capacity() {
        // A real host with huge page pools on both nodes, 2 GiB reserved
        // per node: lint's memory per node is what the planner can give,
        // pools and reserve left out.
        let p = format!("{}/../../fixtures/topologies/mpibind/g4dnmetal.xml", env!("CARGO_MANIFEST_DIR"));
        let t = numaplace_read::read_source(&p).unwrap();
        let r = Reservations { memory_per_node: 2 << 30, ..Reservations::default() };
        let view = HostView::reserved(&t, &r);
        let caps = numaplace_plan::node_capacity(&t, &r);
        for (n, cap) in view.nodes.iter().zip(&caps) {
            assert_eq!((n.id, n.memory_bytes), (cap.id, cap.memory));
            assert!(n.hugepages.iter().any(|h| h.total > 0), "the fixture has pools");
        }
    }
}
