//! Literal test hosts: `S sockets x N nodes/socket x C cores x T threads`
//! with Linux x86 numbering (CPU i and i + total cores are siblings), as
//! `lscpu` shows on the machines the field notes describe.

#![allow(dead_code)]

use numaplace_plan::{CpuMode, Decision, HostState, Placement, RejectReason, Rejection, Request, VerdictFigures};
use numaplace_topo::{Core, CpuSet, HugePages, Node, NodeId, Package, Parts, Topology};
use std::collections::BTreeMap;

/// GiB in bytes.
pub const GIB: u64 = 1 << 30;

/// A host shape.
#[derive(Clone, Debug)]
pub struct Shape {
    pub sockets: u32,
    pub nodes_per_socket: u32,
    pub cores_per_node: u32,
    pub threads: u32,
    /// Memory of each CPU node, bytes (one value for all, or per node).
    pub memory: Vec<u64>,
    /// Memory-only nodes appended after the CPU nodes, bytes each.
    pub memory_nodes: Vec<u64>,
    /// Huge page pool on every node: (size, pages).
    pub hugepages: Option<(u64, u64)>,
}

impl Shape {
    pub fn new(sockets: u32, nodes_per_socket: u32, cores_per_node: u32, threads: u32, memory: u64) -> Shape {
        Shape {
            sockets,
            nodes_per_socket,
            cores_per_node,
            threads,
            memory: vec![memory],
            memory_nodes: Vec::new(),
            hugepages: None,
        }
    }

    pub fn cpu_nodes(&self) -> u32 {
        self.sockets * self.nodes_per_socket
    }

    /// Builds the topology: distances 10 local, 12 within a socket, 32
    /// across sockets, 30 to memory-only nodes.
    pub fn build(&self) -> Topology {
        self.build_with(|_, _, d| d)
    }

    /// Builds the topology with each distance (from, to, usual) changed by
    /// `edit` (firmware quirks such as 255, unreachable).
    pub fn build_with(&self, edit: impl Fn(u32, u32, u32) -> u32) -> Topology {
        let nodes = self.cpu_nodes();
        let total_cores = nodes * self.cores_per_node;
        let mut parts = Parts { name: Some(format!("{self:?}")), ..Parts::default() };
        let mut node_cpus = vec![CpuSet::new(); nodes as usize];
        let mut pkg_cpus = vec![CpuSet::new(); self.sockets as usize];
        for core in 0..total_cores {
            let node = core / self.cores_per_node;
            let pkg = node / self.nodes_per_socket;
            let cpus: CpuSet = (0..self.threads).map(|t| core + t * total_cores).collect();
            for cpu in cpus.iter() {
                node_cpus[node as usize].insert(cpu);
                pkg_cpus[pkg as usize].insert(cpu);
            }
            parts.cores.push(Core {
                package: Some(pkg),
                die: None,
                core_id: Some(core % (self.cores_per_node * self.nodes_per_socket)),
                cpus,
            });
        }
        for (i, cpus) in pkg_cpus.into_iter().enumerate() {
            parts.packages.push(Package { id: i as u32, cpus });
        }
        // A pool is carved out of its node's memory (the model refuses one
        // larger than the node), so small nodes get as many pages as fit.
        let pools = |memory: u64| match self.hugepages {
            Some((size, total)) => {
                let total = total.min(memory / size.max(1));
                vec![HugePages { size_bytes: size, total, free: Some(total) }]
            }
            None => Vec::new(),
        };
        for (i, cpus) in node_cpus.into_iter().enumerate() {
            let memory = self.memory.get(i).or(self.memory.last()).copied().unwrap_or(0);
            parts.nodes.push(Node {
                id: NodeId(i as u32),
                cpus,
                memory_bytes: memory,
                free_bytes: None,
                hugepages: pools(memory),
                kind: None,
            });
        }
        for (j, &memory) in self.memory_nodes.iter().enumerate() {
            parts.nodes.push(Node {
                id: NodeId(nodes + j as u32),
                cpus: CpuSet::new(),
                memory_bytes: memory,
                free_bytes: None,
                hugepages: pools(memory),
                kind: Some("HBM".into()),
            });
        }
        let all = parts.nodes.len() as u32;
        let dist = |a: u32, b: u32| {
            if a == b {
                10
            } else if a >= nodes || b >= nodes {
                30
            } else if a / self.nodes_per_socket == b / self.nodes_per_socket {
                12
            } else {
                32
            }
        };
        parts.distances = Some((0..all).map(|a| (0..all).map(|b| edit(a, b, dist(a, b))).collect()).collect());
        Topology::from_parts(parts).expect("test shapes are valid")
    }
}

/// `2 nodes x 16 cores x 2 threads, 64 GiB per node`, the XAPI host.
pub fn xapi_host() -> Topology {
    Shape::new(2, 1, 16, 2, 64 * GIB).build()
}

/// Records placements into a fresh state.
pub fn state_with(topology: &Topology, placements: &[Placement]) -> HostState {
    let mut state = HostState::new(topology);
    for p in placements {
        state.place(p).expect("placement fits");
    }
    state
}

/// Checks one placement's own consistency.
pub fn check_placement(topo: &Topology, r: &Request, p: &Placement) {
    // With hot-add every vCPU the VM may have is planned.
    let planned = r.planned_vcpus();
    assert_eq!(p.vcpus.len() as u32, planned);
    assert_eq!(p.online_vcpus, r.cpu_hotadd().then_some(r.vcpus));
    let g = &p.guest;
    assert_eq!(g.sockets * g.dies * g.cores * g.threads, planned, "{g:?}");
    // Never a socket (or die) per vCPU on a VM above 4 vCPUs, unless its
    // cells have no common divisor above 1 or list scattered vCPUs.
    let common = g.cells.iter().map(|c| c.vcpus.len() as u32).filter(|&n| n > 0).fold(0, gcd);
    let runs = g
        .cells
        .iter()
        .all(|c| c.vcpus.last().zip(c.vcpus.first()).is_none_or(|(l, f)| (l - f + 1) as usize == c.vcpus.len()));
    if planned > 4 && common > 1 && runs {
        assert!(g.cores * g.threads > 1, "{g:?}");
    }
    assert_eq!(g.cells.iter().map(|c| c.memory_bytes).sum::<u64>(), r.memory_bytes);
    assert_eq!(p.memory.iter().map(|m| m.1).sum::<u64>(), r.memory_bytes);
    // The cells' backing is the plan's memory per host node, exactly (a
    // cell backed by a hidden HBM tier names every node holding its part).
    for &(node, bytes) in &p.memory {
        let backed: u64 = g.cells.iter().flat_map(|c| c.backing()).filter(|b| b.0 == node).map(|b| b.1).sum();
        if p.memory_mode == numaplace_plan::MemoryMode::Strict {
            assert_eq!(backed, bytes, "memory on {node}: {g:?}");
        }
    }
    // QEMU numbers dies by vCPU: each run of cores x threads vCPUs (a
    // guest die, with its own last-level cache) lies in one cell, listed
    // cells included, or the guest kernel drops the topology it was told.
    let per_die = (g.cores * g.threads).max(1);
    let cell_of = |v: u32| g.cells.iter().position(|c| c.vcpus.contains(v));
    for first in (0..planned).step_by(per_die as usize) {
        let cell = cell_of(first);
        assert!((first..(first + per_die).min(planned)).all(|v| cell_of(v) == cell), "a die across cells: {g:?}");
    }
    for c in g.cells.iter().filter(|c| !c.memory_nodes.is_empty()) {
        assert_eq!(c.memory_nodes.iter().map(|m| m.1).sum::<u64>(), c.memory_bytes, "{c:?}");
    }
    assert_eq!(g.cells.iter().map(|c| c.vcpus.len()).sum::<usize>(), planned as usize);
    for (i, pin) in p.vcpus.iter().enumerate() {
        assert_eq!(pin.vcpu, i as u32);
        let pu = topo.pu(pin.pu).expect("pinned PU exists");
        let node = topo.nodes()[pu.node.expect("PU has a node")].id;
        assert_eq!(node, pin.node);
        let cell = g.cells.iter().find(|c| c.vcpus.contains(pin.vcpu)).expect("vCPU in a cell");
        assert_eq!(cell.host_node, node, "vCPU {} runs outside its cell's node", pin.vcpu);
        match p.floats(pin.vcpu) {
            // A mixed VM's floating vCPU: counted on a CPU it floats over,
            // all of them on its cell's node, none of them dedicated.
            Some(set) => {
                assert!(set.contains(pin.pu) && set.is_disjoint(&p.cpuset), "{set} against {}", p.cpuset);
                assert!(set.iter().all(|c| topo.pu(c).and_then(|x| x.node).map(|n| topo.nodes()[n].id) == Some(node)));
            }
            None => assert!(p.cpuset.contains(pin.pu)),
        }
    }
    // Guest cells are numbered as a guest kernel numbers its nodes: those
    // with vCPUs first, then the memory-only ones, each id its position.
    let first_memory_only = g.cells.iter().position(|c| c.vcpus.is_empty()).unwrap_or(g.cells.len());
    assert!(
        g.cells[first_memory_only..].iter().all(|c| c.vcpus.is_empty()),
        "a CPU cell after a memory-only one: {g:?}"
    );
    assert!(g.cells.iter().enumerate().all(|(i, c)| c.id == i as u32), "{g:?}");
    // Every required device's node runs some vCPUs and holds some memory.
    for wish in r.devices.iter().filter(|w| w.required) {
        let node = wish.node.or_else(|| {
            let address = wish.address.as_deref()?;
            topo.devices().iter().find(|d| d.address.eq_ignore_ascii_case(address))?.node
        });
        if let Some(node) = node {
            assert!(p.vcpus.iter().any(|v| v.node == node), "required device node {node} runs no vCPU: {p:?}");
            assert!(p.memory.iter().any(|&(n, b)| n == node && b > 0), "required device node {node} holds no memory");
        }
    }
    for cell in &g.cells {
        assert_eq!(cell.distances.len(), g.cells.len());
        if g.cells.len() > 1 && !cell.vcpus.is_empty() {
            // No guest die crosses a cell: cells hold whole dies.
            assert_eq!(cell.vcpus.len() as u32 % (g.cores * g.threads), 0);
        }
    }
    if g.threads > 1 {
        // The guest is told its cores: each group of `threads` vCPUs on
        // one host core, and no host core holding two groups.
        let core = |pu: u32| topo.pu(pu).and_then(|x| x.core);
        let mut cores = Vec::new();
        for group in p.vcpus.chunks(g.threads as usize) {
            let first = core(group[0].pu);
            for v in group {
                assert_eq!(
                    core(v.pu),
                    first,
                    "threads={} but vCPUs {} and {} are not siblings",
                    g.threads,
                    group[0].vcpu,
                    v.vcpu
                );
            }
            cores.push(first);
        }
        let groups = cores.len();
        cores.sort_unstable();
        cores.dedup();
        assert_eq!(cores.len(), groups, "threads={} but a host core holds two groups of vCPUs", g.threads);
    }
    if let Some(size) = r.hugepage_bytes {
        assert!(p.memory.iter().all(|m| m.1 % size == 0));
    }
}

/// Checks a batch's outcome: each accepted placement on its own, every
/// refusal worded and none the planner's own fault, then the whole host.
/// Returns the placements; `at` names the host in messages.
pub fn checked_batch<'a>(
    topo: &Topology,
    reqs: &[Request],
    out: &'a [Result<Decision, Rejection>],
    at: &str,
) -> Vec<&'a Placement> {
    let mut placed = Vec::new();
    for (r, d) in reqs.iter().zip(out) {
        match d {
            Ok(d) => {
                check_placement(topo, r, &d.placement);
                check_verdicts(d, at);
                placed.push(&*d.placement);
            }
            Err(e) => {
                assert!(!e.reason.to_string().is_empty(), "{at}: {} refused without a reason", r.name);
                assert!(!matches!(e.reason, RejectReason::Internal(_)), "{at}: {}", e.reason);
            }
        }
    }
    check_host(topo, &placed);
    placed
}

/// Every alternative's verdict says what its figures show: a set that
/// lost on more nodes has more, one called too small has less than needed,
/// a costlier one costs more.
pub fn check_verdicts(d: &Decision, at: &str) {
    for alt in &d.alternatives {
        let code = alt.verdict.code();
        let ok = match alt.verdict.figures() {
            VerdictFigures::Counts { alt: a, chosen: c } => match code {
                "fewer-slots" | "less-memory" => a < c,
                // Uneven cells over `a` nodes, even ones over `c` (more
                // nodes, as many, or fewer of the same set running vCPUs).
                "uneven" => a > 0 && c > 0,
                _ => a > c,
            },
            VerdictFigures::Tenths { alt: a, chosen: c } => a > c,
            VerdictFigures::Room { have, need } => have < need,
            VerdictFigures::Costs { alt: a, chosen: c } => a.total() >= c.total(),
            VerdictFigures::None => true,
        };
        assert!(ok, "{at}: {}: {:?} {code}: {}", d.placement.vm, alt.nodes, alt.verdict);
    }
}

/// Checks the whole host after a batch.
pub fn check_host(topo: &Topology, placed: &[&Placement]) {
    let mut dedicated: BTreeMap<u32, &str> = BTreeMap::new();
    for p in placed.iter().filter(|p| p.cpu_mode == CpuMode::Dedicated) {
        for pu in p.cpuset.iter() {
            if let Some(other) = dedicated.insert(pu, &p.vm) {
                panic!("CPU {pu} given to both {other} and {}", p.vm);
            }
        }
    }
    for p in placed {
        for pin in p.vcpus.iter().filter(|v| p.cpu_mode == CpuMode::Shared || p.floats(v.vcpu).is_some()) {
            assert!(!dedicated.contains_key(&pin.pu), "shared {} counted on dedicated CPU {}", p.vm, pin.pu);
        }
    }
    let mut mem: BTreeMap<(NodeId, Option<u64>), u64> = BTreeMap::new();
    for p in placed {
        // What the host gives: overcommitted memory is charged less.
        for &(node, bytes) in p.charged_memory() {
            *mem.entry((node, p.hugepage_bytes)).or_default() += bytes;
        }
    }
    for ((node, pages), bytes) in mem {
        let n = topo.nodes().iter().find(|n| n.id == node).expect("node exists");
        let pool: u64 = n.hugepages.iter().map(|h| h.size_bytes * h.total).sum();
        match pages {
            None => assert!(bytes <= n.memory_bytes.saturating_sub(pool), "{node}: {bytes} > {}", n.memory_bytes),
            Some(size) => {
                let free = n.hugepages.iter().find(|h| h.size_bytes == size).map_or(0, |h| h.total);
                assert!(bytes / size <= free, "{node}: {} pages > {free}", bytes / size);
            }
        }
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
