//! Issue 39: decisions on today's servers, where sub-NUMA clustering
//! (Intel SNC) and NPS (AMD) split each package into several nodes. A
//! VM's own sibling pairs are not contention, a wide VM's cells are even
//! and its guest mirrors the packages, and a VM short of whole cores takes
//! the siblings of small VMs before a large one's. Typed values on the
//! issue's synthetic hosts and on real fixtures (EPYC corona, the 24-node
//! Xeon).

mod common;

use common::check_placement;
use numaplace_plan::{plan, plan_batch, CpuMode, HostState, Note, Request, VerdictFigures};
use numaplace_topo::{NodeId, Topology};

const GIB: u64 = 1 << 30;

fn host(description: &str) -> Topology {
    numaplace_read::synthetic::parse(description).expect("a valid description")
}

fn fixture(rel: &str) -> Topology {
    let path = format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"));
    numaplace_read::hwloc::parse(&std::fs::read_to_string(&path).expect("fixture")).expect("reads")
}

fn req(name: &str, vcpus: u32, gib: u64) -> Request {
    Request::new(name, vcpus, gib * GIB)
}

fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().map(|&i| NodeId(i)).collect()
}

/// Vcpus of each guest cell that runs some.
fn cells(d: &numaplace_plan::Decision) -> Vec<usize> {
    d.placement.guest.cells.iter().map(|c| c.vcpus.len()).filter(|&n| n > 0).collect()
}

/// (sockets, dies, cores, threads) of the guest.
fn shape(d: &numaplace_plan::Decision) -> (u32, u32, u32, u32) {
    let g = &d.placement.guest;
    (g.sockets, g.dies, g.cores, g.threads)
}

/// The first case of issue 39: with one free core per node, a 2-vCPU VM
/// took one core's two threads (its guest told threads=2) rather than
/// becoming two NUMA nodes of one vCPU. Since issue 48 the planner prices
/// both by the simulator's model: its own pair loses 0.359 of the sibling
/// loss, two 1-vCPU cells at SLIT 12 the small cells' floor on memory
/// time (ESXi's 0.733 of memory-bound throughput, 0.154), so it takes the
/// whole cores and names the pair as the costlier alternative.
#[test]
fn a_two_vcpu_vm_takes_whole_cores_of_two_nodes_before_its_own_pair() {
    let topo = host("1 socket x 2 nodes x 2 cores x 2 threads, 16GiB per node, distances 10/12");
    let mut state = HostState::new(&topo);
    let reqs = [req("a", 1, 1), req("b", 1, 1), req("c", 2, 2)];
    let out = plan_batch(&topo, &mut state, &reqs);
    let c = out[2].as_ref().expect("c fits");
    check_placement(&topo, &reqs[2], &c.placement);
    assert_eq!(c.placement.nodes, nodes(&[0, 1]));
    assert_eq!(cells(c), [1, 1]);
    assert_eq!(shape(c).3, 1, "no threads: every vCPU has its core");
    assert!(c.notes.iter().all(|n| !matches!(n, Note::SiblingsCheaper { .. })), "{:?}", c.notes);
    assert_eq!(c.alternatives[0].verdict.code(), "costlier");
    assert_eq!(c.alternatives[0].nodes, nodes(&[0]));
    assert!(
        c.alternatives[0].verdict.to_string().ends_with("against 0.154 (remote memory 0.004, small cells 0.150)"),
        "{}",
        c.alternatives[0].verdict
    );
}

/// The same on a real EPYC 7401 (NPS4: 4 nodes of 6 cores per package,
/// SLIT 16 within it): with one whole core free per node, a 2-vCPU VM
/// takes the whole cores of two nodes of one package (issue 39 had it on
/// one core's pair: issue 48 prices the pair at 0.359).
#[test]
fn corona_gives_a_two_vcpu_vm_whole_cores_of_one_package() {
    let topo = fixture("mpibind/epyc-corona.xml");
    let mut state = HostState::new(&topo);
    // Five whole cores taken on each of the eight nodes.
    let fill: Vec<Request> = (0..8).map(|i| req(&format!("f{i}"), 5, 4)).collect();
    for d in plan_batch(&topo, &mut state, &fill) {
        assert_eq!(d.expect("fits").placement.nodes.len(), 1);
    }
    assert!((0..8).all(|n| state.free_cores(NodeId(n)) == Some(1)));
    let d = plan(&topo, &state, &req("small", 2, 2)).expect("fits");
    assert_eq!(d.placement.nodes.len(), 2, "{:?}", d.placement.vcpus);
    let pkg = |n: &NodeId| topo.package_of_node(topo.nodes().iter().position(|x| x.id == *n).expect("node"));
    assert_eq!(pkg(&d.placement.nodes[0]), pkg(&d.placement.nodes[1]));
    let core = |pu: u32| topo.pu(pu).and_then(|p| p.core);
    assert_ne!(core(d.placement.vcpus[0].pu), core(d.placement.vcpus[1].pu));
}

/// The second case: 64 vCPUs and 512 GiB on 2 packages of 4 SNC
/// nodes (14 cores, 128 GiB each). Memory needs five nodes, which split
/// 12+12+12+14+14 as one socket of 32 dies; eight nodes of eight are even
/// and the guest mirrors the host: 2 sockets x 4 dies x 8 cores.
#[test]
fn a_wide_vm_on_snc4_takes_even_cells_over_whole_packages() {
    let topo = host("2 sockets x 4 nodes x 14 cores x 2 threads, 128GiB per node, distances 10/12/21");
    let r = req("db64", 64, 512);
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    assert_eq!(d.placement.nodes, nodes(&[0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(cells(&d), [8; 8]);
    assert_eq!(shape(&d), (2, 4, 8, 1));
    let uneven = d.alternatives.iter().find(|a| a.verdict.code() == "uneven").expect("the uneven set");
    assert_eq!(uneven.verdict.code(), "uneven");
    assert_eq!(uneven.nodes.len(), 5);
    assert_eq!(uneven.verdict.figures(), VerdictFigures::Counts { alt: 5, chosen: 8 });
    assert!(!d.notes.iter().any(|n| matches!(n, Note::UnevenSplit | Note::Indivisible { .. })), "{:?}", d.notes);
}

/// NPS4 (4 nodes of 8 cores per package, 32 between packages): 48 vCPUs
/// need six nodes; 4+2 over the packages gives no guest socket shape,
/// 3+3 gives 2 sockets x 3 dies.
#[test]
fn nps4_prefers_equal_halves_of_two_packages() {
    let topo = host("2 sockets x 4 nodes x 8 cores x 2 threads, 64GiB per node, distances 10/12/32");
    let mut r = req("wide", 48, 96);
    // Whole cores only: the VM's own pairs on fewer nodes are another
    // question (cost.rs); here the node set is.
    r.policy = numaplace_plan::Policy::SmtAware;
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    assert_eq!(cells(&d), [8; 6]);
    let per_package = |pkg: u32| d.placement.nodes.iter().filter(|n| (n.0 / 4) == pkg).count();
    assert_eq!((per_package(0), per_package(1)), (3, 3), "{:?}", d.placement.nodes);
    assert_eq!(shape(&d), (2, 3, 8, 1));
}

/// The 24-node Xeon (E5-4640, one node of 8 cores per package): 20 vCPUs
/// fit three nodes as 6+7+7; four nodes of five are even, one socket each.
#[test]
fn the_24_node_xeon_splits_evenly() {
    let topo = fixture("hwloc/xml/192em64t-24n8c2t.xml");
    let mut r = req("vm20", 20, 16);
    r.policy = numaplace_plan::Policy::SmtAware;
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    assert_eq!(cells(&d), [5; 4]);
    assert_eq!(shape(&d), (4, 1, 5, 1));
    assert_eq!(d.alternatives[0].verdict.code(), "uneven");
}

/// Item 4: whole cores gone, a new VM takes the idle siblings of the small
/// VMs, not those of the large dedicated one (before issue 39 it took the
/// first cores in order, the database's).
#[test]
fn siblings_of_small_vms_go_before_a_large_vms() {
    let topo = host("1 socket x 1 node x 16 cores x 2 threads, 64GiB per node");
    let mut state = HostState::new(&topo);
    let reqs = [req("db", 10, 16), req("s1", 2, 2), req("s2", 2, 2), req("s3", 2, 2)];
    for d in plan_batch(&topo, &mut state, &reqs) {
        assert_eq!(d.expect("fits").placement.guest.threads, 1);
    }
    assert_eq!(state.free_cores(NodeId(0)), Some(0));
    let d = plan(&topo, &state, &req("late", 4, 4)).expect("fits");
    let db = state.placement("db").expect("placed");
    let core = |pu: u32| topo.pu(pu).and_then(|p| p.core);
    let db_cores: Vec<_> = db.vcpus.iter().map(|v| core(v.pu)).collect();
    for v in &d.placement.vcpus {
        assert!(!db_cores.contains(&core(v.pu)), "late:v{} on a core of db: {:?}", v.vcpu, d.placement.vcpus);
    }
    let Some(Note::SiblingsOf { vms, vcpus }) = d.notes.iter().find(|n| matches!(n, Note::SiblingsOf { .. })) else {
        panic!("{:?}", d.notes)
    };
    assert_eq!((vms.as_slice(), *vcpus), (["s1".to_string(), "s2".to_string()].as_slice(), 4));
}

/// Item 4, second half: a dedicated VM avoids the node where a shared VM
/// floats when another node holds it at the same distance.
#[test]
fn a_dedicated_vm_keeps_off_the_node_where_shared_vms_float() {
    let topo = host("1 socket x 2 nodes x 4 cores x 2 threads, 16GiB per node, distances 10/12");
    let mut state = HostState::new(&topo);
    let mut shared = req("float", 2, 1);
    shared.memory_bytes = GIB / 8;
    shared.cpu_mode = CpuMode::Shared;
    // A dedicated VM on node0 first, so the shared one goes to node1 (more
    // free memory) and node1 keeps the most free cores.
    let out = plan_batch(&topo, &mut state, &[req("x", 1, 2), shared]);
    assert_eq!(out[0].as_ref().expect("x").placement.nodes, nodes(&[0]));
    assert_eq!(out[1].as_ref().expect("float").placement.nodes, nodes(&[1]));
    let d = plan(&topo, &state, &req("pinned", 2, 2)).expect("fits");
    assert_eq!(d.placement.nodes, nodes(&[0]));
    assert!(!d.notes.iter().any(|n| matches!(n, Note::ShrinksShared { .. })), "{:?}", d.notes);
    let alt = d.alternatives.iter().find(|a| a.nodes == nodes(&[1])).expect("node1 considered");
    assert_eq!(alt.verdict.code(), "shared-float");
    assert_eq!(alt.verdict.figures(), VerdictFigures::Counts { alt: 2, chosen: 0 });
}
