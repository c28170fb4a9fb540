use super::*;
use numaplace_plan::{GuestTopology, VcpuPin};
use numaplace_topo::{Core, CpuSet, Node, Parts};

/// 2 nodes x 2 cores x 2 threads (node0: 0-3, node1: 4-7), 4 GiB each.
fn facts() -> KindFacts {
    grid(2, 2, 2, None)
}

/// `nodes` nodes of `cores` cores of `threads` threads, CPUs numbered
/// in order, 4 GiB per node; with `per_package`, that many nodes per
/// package and SLIT 12 inside a package, 32 across (as an EPYC).
fn grid(nodes: u32, cores: u32, threads: u32, per_package: Option<u32>) -> KindFacts {
    let mut parts = Parts::default();
    let per_node = cores * threads;
    for n in 0..nodes {
        for c in 0..cores {
            let first = n * per_node + c * threads;
            parts.cores.push(Core {
                package: Some(per_package.map_or(n, |k| n / k)),
                die: None,
                core_id: Some(c),
                cpus: (first..first + threads).collect(),
            });
        }
        parts.nodes.push(Node {
            id: NodeId(n),
            cpus: (n * per_node..(n + 1) * per_node).collect(),
            memory_bytes: 4 << 30,
            free_bytes: None,
            hugepages: vec![],
            kind: None,
        });
    }
    if let Some(k) = per_package {
        let slit = |a: u32, b: u32| {
            if a == b {
                10
            } else if a / k == b / k {
                12
            } else {
                32
            }
        };
        parts.distances = Some((0..nodes).map(|a| (0..nodes).map(|b| slit(a, b)).collect()).collect());
    }
    let t = Topology::from_parts(parts).unwrap();
    KindFacts::new(&HostKind { source: "t".into(), topology: Arc::new(t), cpu_overcommit: 1.0 })
}

/// A host and the state the fleet would hold for it.
struct Held {
    host: Host,
    state: HostState,
}

impl Held {
    fn new(f: &KindFacts, sc: &Scoring) -> Held {
        let mut held = Held { host: Host::new(0, f), state: f.template.clone() };
        held.summarise(f, sc);
        held
    }

    fn summarise(&mut self, f: &KindFacts, sc: &Scoring) {
        let free = numaplace_fleet::Summary::of(&f.topology, &self.state).free();
        self.host.summary = self.host.summarise(f, &self.state, free, sc);
    }

    /// Places in the state, then records in the metrics, as the engine does.
    fn record(&mut self, f: &KindFacts, id: u32, p: &Placement, sc: &Scoring) -> PlacedVm {
        self.state.place(p).unwrap();
        let placed = self.host.record(f, id, p, false, sc);
        self.summarise(f, sc);
        placed
    }

    fn remove(&mut self, f: &KindFacts, id: u32, sc: &Scoring) -> bool {
        let Some(name) = self.host.remove(id) else { return false };
        self.state.remove(&name).unwrap();
        self.summarise(f, sc);
        true
    }
}

fn placement(vm: &str, pus: &[(u32, u32)], memory: &[(u32, u64)]) -> Placement {
    Placement {
        vm: vm.into(),
        nodes: memory.iter().map(|&(n, _)| NodeId(n)).collect(),
        cpu_mode: CpuMode::Dedicated,
        vcpus: pus.iter().enumerate().map(|(i, &(pu, n))| VcpuPin { vcpu: i as u32, pu, node: NodeId(n) }).collect(),
        cpuset: pus.iter().map(|&(pu, _)| pu).collect(),
        emulator: CpuSet::new(),
        memory: memory.iter().map(|&(n, b)| (NodeId(n), b)).collect(),
        memory_bytes: memory.iter().map(|&(_, b)| b).sum(),
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology { sockets: 1, dies: 1, cores: 1, threads: 1, cells: vec![] },
    }
}

#[test]
fn node_facts_are_the_planners_capacity() {
    // A real host with huge page pools on both nodes.
    let p = format!("{}/../../fixtures/topologies/mpibind/g4dnmetal.xml", env!("CARGO_MANIFEST_DIR"));
    let t = numaplace_read::read_source(&p).unwrap();
    let caps = numaplace_plan::node_capacity(&t, &numaplace_plan::Reservations::default());
    let f = KindFacts::new(&HostKind { source: "g4dn".into(), topology: Arc::new(t), cpu_overcommit: 1.0 });
    for (n, cap) in f.nodes.iter().zip(&caps) {
        assert_eq!((n.id, n.pus, n.memory), (cap.id, cap.threads, cap.memory));
        assert!(!cap.hugepages.is_empty());
    }
    assert_eq!(f.total_memory, caps.iter().map(|c| c.memory).sum::<u64>());
}

#[test]
fn a_floating_vm_takes_idle_cores_first_in_the_fleets_state() {
    // The no-NUMA baseline's VM of 3 vCPUs on 4 cores x 2 threads: one
    // thread of each of 3 cores, so the fleet counts 1 free core and 5
    // free threads, and its memory split by node size.
    let f = facts();
    let state = f.template.clone();
    let free = numaplace_fleet::Summary::of(&f.topology, &state).free();
    let d = float(&f, &state, free, &Request::new("vm1", 3, 2 << 30)).unwrap();
    let mut st = state.clone();
    st.place(&d.placement).unwrap();
    let after = numaplace_fleet::Summary::of(&f.topology, &st).free();
    assert_eq!((after.cores, after.slots), (1, 5));
    assert_eq!(d.placement.memory, vec![(NodeId(0), 1 << 30), (NodeId(1), 1 << 30)]);
    // 6 more vCPUs: only 5 slots are left.
    let refused = float(&f, &st, after, &Request::new("vm2", 6, 1 << 30)).unwrap_err();
    assert!(matches!(refused.reason, RejectReason::CpuShort { needed: 6, best_total: 5, .. }), "{refused:?}");
}

#[test]
fn hand_built_placements_are_counted() {
    let f = facts();
    let m = Model::default();
    let sc = Scoring::new(m, false, vec![(1, 1 << 30)]);
    let mut h = Held::new(&f, &sc);
    let free = h.host.summary.free();
    assert_eq!((free.cores, free.slots, free.memory), (4, 8, 8 << 30));
    // Two sibling threads of node0's first core, memory split 1+1 GiB:
    // half the memory is beside the vCPUs, both vCPUs share a core.
    let p = placement("a", &[(0, 0), (1, 0)], &[(0, 1 << 30), (1, 1 << 30)]);
    let placed = h.record(&f, 1, &p, &sc);
    assert!(!placed.single_node);
    assert_eq!(placed.locality, 0.5);
    let s = h.host.summary;
    assert_eq!((s.vcpus, s.shared_vcpus, s.free.cores, s.free.slots), (2, 2, 3, 6));
    let per_vcpu = m.memory_factor(0.5, 20, GuestView::Mirrors) * m.smt_factor(true);
    assert!((s.perf_micro as f64 / 2e6 - per_vcpu).abs() < 1e-5);
    // node0: 2 of 4 threads, 1 of 4 GiB; node1: 0 threads, 1 GiB.
    assert_eq!(s.cpu_imbalance_micro, 500_000);
    assert_eq!(s.mem_imbalance_micro, 0);
    // A VM alone on node1's first core: one node, local, not shared.
    let q = placement("b", &[(4, 1)], &[(1, 1 << 30)]);
    let placed = h.record(&f, 2, &q, &sc);
    assert!(placed.single_node);
    assert_eq!(placed.locality, 1.0);
    assert_eq!((h.host.summary.vcpus, h.host.summary.shared_vcpus), (3, 2));
    // The planner's state holds both VMs.
    let st = &h.state;
    assert_eq!(st.free_pus(NodeId(0)), Some(2));
    assert_eq!(st.free_pus(NodeId(1)), Some(3));
    assert_eq!(st.free_cores(NodeId(1)), Some(1));
    // What is free for the next VM: less b's QEMU overhead.
    assert_eq!(st.free_memory_bytes(NodeId(1)), Some((2 << 30) - numaplace_plan::vm_overhead_bytes(1 << 30)));
    // Departures give everything back.
    assert!(h.remove(&f, 1, &sc));
    assert!(h.remove(&f, 2, &sc));
    assert!(!h.remove(&f, 2, &sc));
    assert_eq!(h.host.summary, Held::new(&f, &sc).host.summary);
    assert_eq!(h.state, f.template, "the planner's state is empty again");
}

/// One model (issue 48): a VM alone on a host is predicted what the
/// planner's cost says it loses, for its own told pairs, an untold
/// pair, and two nodes' whole cores; and a told pair is predicted
/// better than the same threads untold (the simulator charged both as
/// contention before).
#[test]
fn the_replay_predicts_what_the_planner_costs() {
    // 2 nodes x 2 cores x 2 threads, SLIT 20.
    let f = grid(2, 2, 2, None);
    let sc = Scoring::new(Model::default(), false, vec![]);
    let predict = |pus: &[(u32, u32)], memory: &[(u32, u64)], threads: u32| {
        let mut h = Held::new(&f, &sc);
        let mut p = placement("a", pus, memory);
        p.guest.threads = threads;
        let mut nodes: Vec<u32> = pus.iter().map(|x| x.1).collect();
        nodes.dedup();
        p.guest.cells = nodes
            .iter()
            .enumerate()
            .map(|(k, &n)| numaplace_plan::GuestCell {
                id: k as u32,
                vcpus: pus.iter().enumerate().filter(|x| x.1 .1 == n).map(|x| x.0 as u32).collect(),
                memory_bytes: memory.iter().find(|m| m.0 == n).map_or(0, |m| m.1),
                host_node: NodeId(n),
                distances: vec![],
                memory_nodes: vec![],
            })
            .collect();
        let cost = numaplace_plan::cost_of(&h.state, &p).total() as f64 / 1000.0;
        h.record(&f, 1, &p, &sc);
        (1.0 - h.host.summary.perf_micro as f64 / (pus.len() as f64 * 1e6), cost)
    };
    // One core's two threads (PUs 0 and 1), told and untold.
    let (told, told_cost) = predict(&[(0, 0), (1, 0)], &[(0, 1 << 30)], 2);
    let (untold, untold_cost) = predict(&[(0, 0), (1, 0)], &[(0, 1 << 30)], 1);
    assert!((told - told_cost).abs() < 0.001, "{told} {told_cost}");
    assert!((untold - untold_cost).abs() < 0.001, "{untold} {untold_cost}");
    assert!(told < untold);
    // Whole cores of both nodes, cells of three would be needed to
    // leave out the small cells' floor: cells of two keep it, in both.
    let (two, two_cost) = predict(&[(0, 0), (2, 0), (4, 1), (6, 1)], &[(0, 1 << 30), (1, 1 << 30)], 1);
    assert!((two - two_cost).abs() < 0.002, "{two} {two_cost}");
    assert!(two < told);
}

#[test]
fn spanning_packages_predicts_worse_than_spanning_nodes_of_one_package() {
    // 2 packages x 2 nodes x 3 single-thread cores (cells of three:
    // no small cells' floor).
    let f = grid(4, 3, 1, Some(2));
    let sc = Scoring::new(Model::default(), false, vec![]);
    let perf = |nodes: [u32; 2], interleave: bool| {
        let mut h = Held::new(&f, &sc);
        let pus: Vec<(u32, u32)> = nodes.iter().flat_map(|&n| [(n * 3, n), (n * 3 + 1, n), (n * 3 + 2, n)]).collect();
        let mut p = placement("a", &pus, &[(nodes[0], 1 << 30), (nodes[1], 1 << 30)]);
        if interleave {
            p.memory_mode = MemoryMode::Interleave;
        }
        h.record(&f, 1, &p, &sc);
        h.host.summary.perf_micro as f64 / 6e6
    };
    // Mirrored cells: only the cross-cell share goes remote.
    let (near, far) = (perf([0, 1], false), perf([0, 2], false));
    assert!(near < 1.0 && far < near, "near {near}, far {far}");
    // Interleaved pages: half of every vCPU's accesses go remote.
    let (near_i, far_i) = (perf([0, 1], true), perf([0, 2], true));
    assert!(far_i < near_i && near_i < near, "{near_i} {far_i}");
    let m = Model::default();
    let want = m.speed((1.0 + m.remote_cost_at(32)) / 2.0, GuestView::Mirrors);
    assert!((far_i - want).abs() < 1e-4, "{far_i} against {want}");
}
