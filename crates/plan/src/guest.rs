//! The guest topology, derived from the pinning (ZStack's "topology
//! consistency"): one guest cell per host node used, vCPUs numbered
//! contiguously per cell, cell distances copied from the host matrix, and
//! a sockets x cores x threads shape in which no socket or core crosses a
//! cell boundary.

use crate::placement::{GuestCell, GuestTopology};
use crate::split::gcd;
use crate::state::HostState;
use numaplace_topo::CpuSet;

/// What one host node of the plan holds.
#[derive(Clone, Debug)]
pub(crate) struct CellPlan {
    /// Host node position.
    pub(crate) node: usize,
    /// PUs of its vCPUs, in vCPU order.
    pub(crate) pus: Vec<u32>,
    /// Memory on the node, bytes.
    pub(crate) memory: u64,
}

/// Builds the guest topology for cells in host node order. `threads` is 2
/// only when the vCPUs really are sibling pairs (then every cell's count is
/// even).
///
/// Cores per socket is the largest number that divides every cell's core
/// count, so each cell holds whole sockets: equal cells of c vCPUs give one
/// socket per cell with c / threads cores; uneven cells (12 and 20) give
/// more, smaller sockets (8 sockets of 4) rather than a socket split
/// between two cells.
pub(crate) fn derive(state: &HostState, cells: &[CellPlan], threads: u32) -> GuestTopology {
    let threads = threads.max(1);
    let mut per_socket = 0u64;
    let mut vcpus = 0u64;
    for cell in cells {
        let n = cell.pus.len() as u64;
        vcpus += n;
        if n > 0 {
            per_socket = gcd(per_socket, n / u64::from(threads));
        }
    }
    let cores = per_socket.max(1);
    let sockets = (vcpus / (cores * u64::from(threads))).max(1);
    let mut next = 0u32;
    let guest_cells = cells
        .iter()
        .enumerate()
        .map(|(id, cell)| {
            let count = cell.pus.len() as u32;
            let set: CpuSet = if count == 0 { CpuSet::new() } else { CpuSet::range(next, next + count - 1) };
            next += count;
            let row = state.distances.get(cell.node);
            GuestCell {
                id: id as u32,
                vcpus: set,
                memory_bytes: cell.memory,
                host_node: state.facts.get(cell.node).map(|f| f.id).unwrap_or(numaplace_topo::NodeId(0)),
                distances: cells
                    .iter()
                    .map(|other| row.and_then(|r| r.get(other.node)).copied().unwrap_or(20))
                    .collect(),
            }
        })
        .collect();
    GuestTopology { sockets: sockets as u32, cores: cores as u32, threads, cells: guest_cells }
}
