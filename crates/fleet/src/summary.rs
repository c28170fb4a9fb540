//! Per-node free capacity, kept beside each host's state, and the
//! prefilter that reads it: a few comparisons that rule out a full host
//! before the planner runs on it.

use numaplace_plan::{CpuMode, HostState, OnNodes, Request};
use numaplace_topo::{format_size, NodeId, Topology};
use std::fmt;

/// One node's capacity and what is free of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSummary {
    /// The node.
    pub id: NodeId,
    /// Cores whose threads are all free.
    pub free_cores: u32,
    /// Threads (PUs) free: not dedicated, no shared load, not reserved.
    pub free_threads: u32,
    /// Ordinary memory free for VMs, bytes (less the host's reserve and
    /// the QEMU overhead of the VMs there).
    pub free_memory: u64,
    /// Per huge page size: (size in bytes, free pages).
    pub hugepages: Vec<(u64, u64)>,
    /// Cores on the node a dedicated vCPU may use (the planner's
    /// [`numaplace_plan::NodeCapacity`]).
    pub cores: u32,
    /// Online threads on the node a dedicated vCPU may use: not reserved
    /// for the host, not in the shared pool.
    pub threads: u32,
    /// Memory for VMs on the node, bytes: less its huge page pools and the
    /// host's per-node reserve.
    pub memory: u64,
}

/// A host's free capacity, per node and in total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Per node, in node order.
    pub nodes: Vec<NodeSummary>,
    /// Sum of the nodes' free cores.
    pub free_cores: u32,
    /// Sum of the nodes' free threads.
    pub free_threads: u32,
    /// Sum of the nodes' free memory, bytes.
    pub free_memory: u64,
}

impl Summary {
    /// What the host has free, as rankings and stranded capacity count
    /// it: free cores, free threads (the service pins every vCPU of a
    /// dedicated VM, so a thread is a slot), free memory.
    pub fn free(&self) -> crate::Free {
        crate::Free { cores: self.free_cores, slots: self.free_threads, memory: self.free_memory }
    }

    /// The summary of a host state. Each node's capacity is the planner's
    /// one definition ([`numaplace_plan::NodeCapacity`]: reserved and
    /// shared-pool CPUs left out, memory less its huge page pools and the
    /// host's reserve), so "free of" reads against what VMs can have. The
    /// topology is not read: the state carries its facts.
    pub fn of(_topology: &Topology, state: &HostState) -> Summary {
        let mut out = Summary::default();
        for cap in state.capacity() {
            let node = NodeSummary {
                id: cap.id,
                free_cores: state.free_cores(cap.id).unwrap_or(0),
                free_threads: state.free_pus(cap.id).unwrap_or(0),
                free_memory: state.free_memory_bytes(cap.id).unwrap_or(0),
                hugepages: cap
                    .hugepages
                    .iter()
                    .map(|&(size, _)| (size, state.free_hugepages(cap.id, size).unwrap_or(0)))
                    .collect(),
                cores: cap.cores,
                threads: cap.threads,
                memory: cap.memory,
            };
            out.free_cores += node.free_cores;
            out.free_threads += node.free_threads;
            out.free_memory = out.free_memory.saturating_add(node.free_memory);
            out.nodes.push(node);
        }
        out
    }

    /// Brings the free figures up to `state` after a change of its VMs;
    /// the capacity figures stay (they change only with the host's
    /// topology or reservations, which make a new state and a new
    /// summary), so a claim or a release costs no capacity computation.
    pub fn refresh(&mut self, state: &HostState) {
        self.free_cores = 0;
        self.free_threads = 0;
        self.free_memory = 0;
        for node in &mut self.nodes {
            node.free_cores = state.free_cores(node.id).unwrap_or(0);
            node.free_threads = state.free_pus(node.id).unwrap_or(0);
            node.free_memory = state.free_memory_bytes(node.id).unwrap_or(0);
            for (size, free) in &mut node.hugepages {
                *free = state.free_hugepages(node.id, *size).unwrap_or(0);
            }
            self.free_cores += node.free_cores;
            self.free_threads += node.free_threads;
            self.free_memory = self.free_memory.saturating_add(node.free_memory);
        }
    }
}

/// What the prefilter found short on a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Short {
    /// Fewer free threads on the whole host than dedicated vCPUs.
    Threads {
        /// Dedicated vCPUs asked.
        needed: u64,
        /// Free threads on the host.
        free: u64,
    },
    /// Less free memory on the best `max_nodes` nodes than asked.
    Memory {
        /// Bytes charged.
        needed: u64,
        /// The most the best `max_nodes` nodes offer.
        best: u64,
        /// The most nodes the VM may span.
        max_nodes: usize,
    },
    /// Fewer free huge pages on the best `max_nodes` nodes than asked.
    HugePages {
        /// Page size, bytes.
        size: u64,
        /// Pages needed.
        needed: u64,
        /// The most the best `max_nodes` nodes offer.
        best: u64,
        /// The most nodes the VM may span.
        max_nodes: usize,
    },
}

impl Short {
    /// A stable code for programs.
    pub fn code(&self) -> &'static str {
        match self {
            Short::Threads { .. } => "short-threads",
            Short::Memory { .. } => "short-memory",
            Short::HugePages { .. } => "short-hugepages",
        }
    }
}

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Short::Threads { needed, free } => write!(f, "needs {needed} free CPU threads, has {free}"),
            Short::Memory { needed, best, max_nodes } => {
                write!(f, "needs {} on {}, has {}", format_size(*needed), OnNodes(*max_nodes), format_size(*best))
            }
            Short::HugePages { size, needed, best, max_nodes } => {
                write!(
                    f,
                    "needs {needed} free {} huge pages on {}, has {best}",
                    format_size(*size),
                    OnNodes(*max_nodes)
                )
            }
        }
    }
}

/// Whether a host's summary rules the request out. A necessary condition
/// only, and deliberately loose (it ignores QEMU overhead, SMT policy and
/// the shape of guest cells): a host it passes may still be refused by
/// the planner, but a host it refuses could never take the VM, so the
/// prefilter never changes which host is chosen, only how fast.
pub fn prefilter(request: &Request, summary: &Summary) -> Result<(), Short> {
    let needs = Needs::of(request);
    if let Some(needed) = needs.threads {
        let free = u64::from(summary.free_threads);
        if needed > free {
            return Err(Short::Threads { needed, free });
        }
    }
    let max_nodes = request.max_nodes.map_or(summary.nodes.len(), |m| (m as usize).min(summary.nodes.len()));
    match request.hugepage_bytes {
        Some(size) if size > 0 => {
            let needed = request.memory_bytes / size;
            let mut free: Vec<u64> = summary
                .nodes
                .iter()
                .map(|n| n.hugepages.iter().find(|(s, _)| *s == size).map_or(0, |(_, f)| *f))
                .collect();
            free.sort_unstable_by(|a, b| b.cmp(a));
            let best: u64 = free.iter().take(max_nodes).sum();
            if needed > best {
                return Err(Short::HugePages { size, needed, best, max_nodes });
            }
        }
        _ => {
            let needed = needs.memory.unwrap_or(0);
            let mut free: Vec<u64> = summary.nodes.iter().map(|n| n.free_memory).collect();
            free.sort_unstable_by(|a, b| b.cmp(a));
            let best = free.iter().take(max_nodes).fold(0u64, |a, &b| a.saturating_add(b));
            if needed > best {
                return Err(Short::Memory { needed, best, max_nodes });
            }
        }
    }
    Ok(())
}

/// What the prefilter asks of a host's totals: the index and the
/// prefilter read a request through this one function, so the index
/// rules out only hosts the prefilter would refuse.
pub(crate) struct Needs {
    /// Free threads on the whole host, for a dedicated VM.
    pub(crate) threads: Option<u64>,
    /// Ordinary free memory on the whole host, bytes (none for a VM on
    /// huge pages, whose pools the totals do not count).
    pub(crate) memory: Option<u64>,
}

impl Needs {
    pub(crate) fn of(request: &Request) -> Needs {
        let threads = (request.cpu_mode == CpuMode::Dedicated).then(|| {
            let floating = request.shared_vcpus.iter().filter(|&v| v < request.planned_vcpus()).count() as u64;
            u64::from(request.planned_vcpus()).saturating_sub(floating)
        });
        let memory = match request.hugepage_bytes {
            Some(size) if size > 0 => None,
            _ => {
                // A shared VM with memory overcommit is charged less than
                // it asks; the floor keeps the condition necessary.
                let ratio =
                    if request.memory_overcommit.is_finite() { request.memory_overcommit.max(1.0) } else { 1.0 };
                Some((request.memory_bytes as f64 / ratio).floor() as u64)
            }
        };
        Needs { threads, memory }
    }
}

#[cfg(test)]
mod tests {
    use super::Short;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_shortfall_names_one_node_in_words() {
        let one = Short::Memory { needed: 64 * GIB, best: 32 * GIB, max_nodes: 1 };
        assert_eq!(one.to_string(), "needs 64 GiB on one node, has 32 GiB");
        let two = Short::HugePages { size: 2 << 20, needed: 512, best: 100, max_nodes: 2 };
        assert_eq!(two.to_string(), "needs 512 free 2 MiB huge pages on <= 2 nodes, has 100");
    }
}
