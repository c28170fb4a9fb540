//! The guest topology, derived from the pinning (ZStack's "topology
//! consistency"): one guest cell per host node used (cells with vCPUs
//! first, memory-only cells last), vCPUs numbered contiguously per cell
//! (or as the request lists them), cell distances copied from the host matrix, and
//! a sockets x cores x threads shape in which no socket or core crosses a
//! cell boundary.

use crate::placement::{GuestCell, GuestTopology};
use crate::split::gcd;
use crate::state::HostState;
use numaplace_topo::{CpuSet, MemoryKind};

/// What one host node of the plan holds.
#[derive(Clone, Debug)]
pub(crate) struct CellPlan {
    /// Host node position.
    pub(crate) node: usize,
    /// PUs of its vCPUs, in vCPU order.
    pub(crate) pus: Vec<u32>,
    /// Memory on the node, bytes.
    pub(crate) memory: u64,
    /// Memory on other host nodes (positions) backing the cell, bytes:
    /// HBM or CXL folded into a CPU cell when the tier is hidden
    /// ([`hide_tiers`]). Empty for most cells.
    pub(crate) backing: Vec<(usize, u64)>,
}

impl CellPlan {
    /// A cell of `pus` and `memory` on host node position `node`.
    pub(crate) fn new(node: usize, pus: Vec<u32>, memory: u64) -> CellPlan {
        CellPlan { node, pus, memory, backing: Vec::new() }
    }
}

/// Hides the memory tiers (`memory_tiers: hidden`): each memory-only cell
/// on a node of another kind than DRAM (HBM, CXL) becomes memory of the
/// CPU cell nearest it (by the state's distances, where a memory-only
/// node's own CPU node is nearest: hwloc's group, HMAT initiators or the
/// SLIT), ties to the first cell. The memory per host node is unchanged;
/// only the guest's view is. Memory-only cells on DRAM (another CPU
/// node's memory, for a VM its own nodes cannot hold) stay cells: they
/// are the host's ordinary remote memory, not a tier. Does nothing for a
/// VM without a CPU cell.
pub(crate) fn hide_tiers(state: &HostState, cells: &mut Vec<CellPlan>) {
    let tier = |c: &CellPlan| {
        c.pus.is_empty() && c.memory > 0 && state.facts.get(c.node).is_some_and(|f| f.kind != MemoryKind::Dram)
    };
    if !cells.iter().any(tier) || !cells.iter().any(|c| !c.pus.is_empty()) {
        return;
    }
    let (folded, kept): (Vec<CellPlan>, Vec<CellPlan>) = std::mem::take(cells).into_iter().partition(tier);
    *cells = kept;
    for f in folded {
        let distance =
            |c: &CellPlan| state.distances.get(f.node).and_then(|row| row.get(c.node)).copied().unwrap_or(u32::MAX);
        let Some(at) = (0..cells.len()).filter(|&i| !cells[i].pus.is_empty()).min_by_key(|&i| (distance(&cells[i]), i))
        else {
            continue;
        };
        match cells[at].backing.iter_mut().find(|b| b.0 == f.node) {
            Some(b) => b.1 += f.memory,
            None => cells[at].backing.push((f.node, f.memory)),
        }
    }
}

/// Builds the guest topology for cells in host node order (guest cells:
/// those with vCPUs first, then memory-only ones).
///
/// `threads=t` exactly when the VM holds its cores' threads in groups of
/// `t` (two on most hosts): every cell's vCPUs come `t` by `t` on one core
/// (consecutive vCPUs), so the guest scheduler knows which of its CPUs
/// share a core; otherwise 1. `pairs_hint` is false when the pinning holds
/// no real groups (a shared VM floats).
///
/// Sockets follow the host packages the vCPUs use, as an operator would
/// draw them (per-socket licences and guests limited to two sockets count
/// them), and the guest cells inside a socket are its dies: QEMU reports
/// the last-level cache per die, and an x86 guest kernel builds wrong
/// scheduling domains (and warns) when a cache spans two NUMA nodes, but
/// accepts several nodes in one package. Cores per die is the largest
/// number dividing every cell's core count, so each cell holds whole dies:
/// equal cells give one die per cell; uneven ones (12 and 20 vCPUs) give
/// more, smaller dies (3 and 5 of 4 cores). When the packages hold
/// unequal numbers of dies no uniform socket mirrors them, and the guest
/// gets one socket with all the dies (its NUMA distances still tell it
/// where the packages are), never a socket per vCPU.
///
/// `lists` are the cells' vCPUs when the request lists them (one per
/// cell with vCPUs, in guest order; empty: each cell takes the next run).
/// Lists that are those runs change nothing; any others (`0,2,4,6` and
/// `1,3,5,7`) get [`scattered`]'s shape.
pub(crate) fn derive(state: &HostState, cells: &[CellPlan], pairs_hint: bool, lists: &[CpuSet]) -> GuestTopology {
    let vcpus: u64 = cells.iter().map(|c| c.pus.len() as u64).sum();
    let lists = if in_runs(lists) { &[] } else { lists };
    if !lists.is_empty() {
        return scattered(state, cells, lists, vcpus);
    }
    let threads: u64 = if pairs_hint && vcpus > 0 { thread_groups(state, cells) } else { 1 };
    let mut per_die = 0u64;
    for cell in cells {
        let n = cell.pus.len() as u64;
        if n > 0 {
            per_die = gcd(per_die, n / threads);
        }
    }
    let cores = per_die.max(1);
    let dies_total = (vcpus / (cores * threads)).max(1);
    // Dies per host package, packages in order of first use; a node of
    // unknown package counts as a package of its own.
    // A socket is a run of consecutive vCPUs, so a package whose cells are
    // not adjacent in node order (firmware numbering nodes across
    // packages) cannot be one socket either.
    let mut packages: crate::few::Few<(Option<u32>, u64)> = crate::few::Few::new(cells.len());
    let mut grouped = true;
    for cell in cells.iter().filter(|c| !c.pus.is_empty()) {
        let pkg = state.facts.get(cell.node).and_then(|f| f.package);
        let dies = cell.pus.len() as u64 / (cores * threads);
        match packages.as_mut_slice().last_mut() {
            Some(last) if pkg.is_some() && last.0 == pkg => last.1 += dies,
            _ => {
                grouped &= pkg.is_none() || packages.as_slice().iter().all(|p| p.0 != pkg);
                packages.push((pkg, dies));
            }
        }
    }
    let packages = packages.as_slice();
    let uniform = grouped && packages.windows(2).all(|w| w[0].1 == w[1].1);
    let mut sockets = if uniform && !packages.is_empty() { packages.len() as u64 } else { 1 };
    let mut dies = (dies_total / sockets).max(1);
    // Where QEMU has no dies (POWER's pseries, ARM's virt), each die is
    // a socket of its own: a socket still never crosses a guest cell, and
    // the cells' distances still say which sockets share a package.
    if !state.dies && dies > 1 {
        sockets *= dies;
        dies = 1;
    }
    GuestTopology {
        sockets: sockets as u32,
        dies: dies as u32,
        cores: cores as u32,
        threads: threads as u32,
        cells: guest_cells(state, cells, &[]),
    }
}

/// The guest cells: those with vCPUs first (each its list, or the next
/// run of vCPUs), then the memory-only ones, each group in host node order.
fn guest_cells(state: &HostState, cells: &[CellPlan], lists: &[CpuSet]) -> Vec<GuestCell> {
    // Cells with vCPUs first, then the memory-only ones, each group in
    // host node order: a guest kernel numbers its nodes that way (x86
    // Linux takes proximity domains from QEMU's SRAT, whose CPU entries
    // come before its memory entries), so cell N of the plan is node N in
    // the guest. A memory-only cell holds no vCPU, so moving it after the
    // others leaves the vCPU numbering (and the pins) as they are.
    let mut order: crate::few::Few<usize> = crate::few::Few::new(cells.len());
    for i in (0..cells.len()).filter(|&i| !cells[i].pus.is_empty()) {
        order.push(i);
    }
    for i in (0..cells.len()).filter(|&i| cells[i].pus.is_empty()) {
        order.push(i);
    }
    let order = order.as_slice();
    let mut next = 0u32;
    order
        .iter()
        .enumerate()
        .map(|(id, &at)| {
            let cell = &cells[at];
            let count = cell.pus.len() as u32;
            let set: CpuSet = match lists.get(id) {
                Some(list) if count > 0 => list.clone(),
                _ if count == 0 => CpuSet::new(),
                _ => CpuSet::range(next, next + count - 1),
            };
            next += count;
            let row = state.distances.get(cell.node);
            let id_of = |n: usize| state.facts.get(n).map(|f| f.id).unwrap_or(numaplace_topo::NodeId(0));
            // The cell's own node's share first, then the nodes backing it.
            let memory_nodes: Vec<(numaplace_topo::NodeId, u64)> = if cell.backing.is_empty() {
                Vec::new()
            } else {
                let own = (cell.memory > 0).then(|| (id_of(cell.node), cell.memory));
                own.into_iter().chain(cell.backing.iter().map(|&(n, b)| (id_of(n), b))).collect()
            };
            GuestCell {
                id: id as u32,
                vcpus: set,
                memory_bytes: cell.memory + cell.backing.iter().map(|b| b.1).sum::<u64>(),
                memory_nodes,
                host_node: state.facts.get(cell.node).map(|f| f.id).unwrap_or(numaplace_topo::NodeId(0)),
                // Two cells on one host node (allowed only when asked) are
                // still two guest nodes: the nearest remote distance.
                distances: order
                    .iter()
                    .map(|&o| match row.and_then(|r| r.get(cells[o].node)).copied().unwrap_or(20) {
                        10 if o != at => 11,
                        d => d,
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Whether listed vCPUs are the runs the cells' places give (cell 0 from
/// vCPU 0, each next one after the last): the numbering the guest shape
/// assumes anyway. No lists count as runs.
fn in_runs(lists: &[CpuSet]) -> bool {
    let mut next = 0u32;
    lists.iter().all(|list| {
        let run = !list.is_empty()
            && list.first() == Some(next)
            && list.last() == Some(next.saturating_add(list.len() as u32 - 1));
        next += list.len() as u32;
        run
    })
}

/// The guest shape for cells whose listed vCPUs are not consecutive runs
/// (Nova's `hw:numa_cpus.N` with `0,2,4,6` and `1,3,5,7`). QEMU numbers
/// sockets, dies, cores and threads by vCPU, consecutive vCPUs sharing a
/// core, die and socket; a die gets its own last-level cache, and a guest
/// kernel shown a core or cache spanning two NUMA nodes warns and drops
/// that part of its topology. So each die is the largest block of
/// consecutive vCPUs, the same size throughout, that stays in one cell
/// (one vCPU for interleaved lists, four for cells of `4-7` and `0-3`);
/// threads are 1 (siblings pinned to one host core hold vCPUs that are
/// not consecutive, so the guest cannot be told they pair); and the dies
/// are one socket, since sockets would follow host packages only where
/// each package's dies came in one run. The guest's NUMA cells still say
/// which vCPUs share a node; it is told no more than is true.
fn scattered(state: &HostState, cells: &[CellPlan], lists: &[CpuSet], vcpus: u64) -> GuestTopology {
    let n = vcpus as usize;
    let mut cell_of = vec![0usize; n];
    for (i, list) in lists.iter().enumerate() {
        for v in list.iter().filter(|&v| (v as usize) < n) {
            cell_of[v as usize] = i;
        }
    }
    let block = (1..=n)
        .rev()
        .filter(|d| n.is_multiple_of(*d))
        .find(|&d| cell_of.chunks(d).all(|c| c.iter().all(|&x| x == c[0])))
        .unwrap_or(1) as u64;
    let dies_total = (vcpus / block).max(1);
    let (sockets, dies) = if state.dies { (1, dies_total) } else { (dies_total, 1) };
    GuestTopology {
        sockets: sockets as u32,
        dies: dies as u32,
        cores: block as u32,
        threads: 1,
        cells: guest_cells(state, cells, lists),
    }
}

/// The threads per core the guest is told: `t` when every cell's vCPUs
/// come `t` by `t` (consecutive vCPUs) on one core each, and no core holds
/// vCPUs of two groups; otherwise 1. Two on a host of two threads per
/// core; on one of four (POWER, Xeon Phi) a VM holding all four threads
/// of its cores is told four, not shown pairs that share a core with
/// another pair.
fn thread_groups(state: &HostState, cells: &[CellPlan]) -> u64 {
    let mut size = 0usize;
    for cell in cells {
        let mut rest = cell.pus.as_slice();
        while let Some(&first) = rest.first() {
            let Some(core) = state.core_on(cell.node, first) else { return 1 };
            let run = rest.iter().take_while(|pu| core.contains(pu)).count();
            // The run must be all of the VM's PUs on that core (two cells
            // may share a node when the request asks).
            let on_core = || cells.iter().filter(|c| c.node == cell.node).flat_map(|c| &c.pus);
            if run > 1 && on_core().filter(|pu| core.contains(pu)).count() != run {
                return 1;
            }
            match size {
                0 => size = run,
                s if s != run => return 1,
                _ => {}
            }
            rest = rest.get(run..).unwrap_or(&[]);
        }
    }
    size.max(1) as u64
}
