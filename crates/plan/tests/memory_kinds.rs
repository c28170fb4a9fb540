//! Memory-only nodes and memory kinds (issue 39, item 6) on real hosts
//! with HBM beside DRAM: a KNL in SNC4 flat mode (four 4 GiB MCDRAM nodes,
//! each under one quadrant's group) and a KNL-like hwloc 2 export with
//! `DRAM`/`HBM` subtypes. Neither file has distances, so only the source's
//! groups say which HBM node is beside which CPUs.

mod common;

use common::{check_placement, GIB};
use numaplace_plan::{plan, plan_batch, HostState, MemoryTiers, RejectReason, Request, Reservations};
use numaplace_topo::{MemoryKind, NodeId, Topology};

fn fixture(rel: &str) -> Topology {
    let path = format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"));
    numaplace_read::hwloc::parse(&std::fs::read_to_string(&path).expect("fixture")).expect("parses")
}

fn hetero() -> Topology {
    fixture("hwloc/xml/64intel64-heteromem.xml")
}

fn kinds(k: &[MemoryKind]) -> Option<Vec<MemoryKind>> {
    Some(k.to_vec())
}

/// By default a VM's memory stays on DRAM: a VM larger than one DRAM node
/// spans two DRAM nodes rather than spilling onto HBM (the old plan put
/// the rest on HBM as overflow), and no guest cell is memory-only.
#[test]
fn memory_stays_on_dram_by_default() {
    let topo = hetero();
    let r = Request::new("plain", 4, 1536 << 20);
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits on DRAM");
    check_placement(&topo, &r, &d.placement);
    for (node, _) in &d.placement.memory {
        let i = topo.node_index(*node).expect("node");
        assert_eq!(topo.memory_kind(i), MemoryKind::Dram, "{node} holds memory");
    }
    assert!(d.placement.guest.cells.iter().all(|c| !c.vcpus.is_empty()), "{:?}", d.placement.guest.cells);
}

/// `memory_kind: hbm` puts all the memory on the HBM node local to the
/// VM's CPU node (node7 is node0's, by hwloc's group), and with
/// `memory_tiers: visible` the guest sees the tier as the host has it: a
/// CPU cell without memory and a memory-only cell.
#[test]
fn asking_for_hbm_takes_the_hbm_beside_the_vcpus() {
    let topo = hetero();
    let mut r = Request::new("hpc", 4, GIB);
    r.memory_kinds = kinds(&[MemoryKind::Hbm]);
    r.memory_tiers = MemoryTiers::Visible;
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    assert_eq!(d.placement.memory, vec![(NodeId(7), GIB)]);
    assert!(d.placement.vcpus.iter().all(|v| v.node == NodeId(0)));
    let cells = &d.placement.guest.cells;
    assert_eq!((cells[0].host_node, cells[0].memory_bytes, cells[0].vcpus.len()), (NodeId(0), 0, 4));
    assert_eq!((cells[1].host_node, cells[1].memory_bytes, cells[1].vcpus.len()), (NodeId(7), GIB, 0));
    // On the KNL each quadrant's MCDRAM likewise: fill quadrant 0's CPUs,
    // and the next HBM VM goes to quadrant 1 with node 5, its MCDRAM.
    let knl = fixture("mpibind/knl-snc4-flat-hwloc1.xml");
    let mut state = HostState::new(&knl);
    let mut fill = Request::new("fill", 72, GIB);
    fill.smt = numaplace_plan::SmtPolicy::Any;
    fill.max_nodes = Some(1);
    let mut hbm = Request::new("hbm", 8, 2 * GIB);
    hbm.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let out = plan_batch(&knl, &mut state, &[fill, hbm]);
    let d = out[1].as_ref().expect("hbm fits");
    let cpu_node = d.placement.vcpus[0].node;
    let i = knl.node_index(cpu_node).expect("node");
    let (local, _) = knl.local_cpu_nodes(knl.node_index(d.placement.memory[0].0).expect("hbm node"));
    assert_eq!(local, vec![i], "the MCDRAM is the one of the vCPUs' quadrant: {:?}", d.placement.memory);
}

/// `memory_kind: dram` forbids other kinds even where the host profile
/// allows them; the profile's `memory_kinds` lets a VM that names no kind
/// use HBM; a VM asking for a kind the host lacks is refused with its own
/// code; a VM short of DRAM is told how much HBM its request left out.
#[test]
fn the_host_profile_allows_kinds_and_the_request_can_forbid_them() {
    let topo = hetero();
    let allow = Reservations { memory_kinds: vec![MemoryKind::Hbm], ..Reservations::default() };
    let state = HostState::with_reservations(&topo, allow).expect("state");
    // 4 GiB of DRAM in all, less QEMU's overhead: 5 GiB needs HBM.
    let r = Request::new("big", 4, 5 * GIB);
    let d = plan(&topo, &state, &r).expect("DRAM and HBM");
    let hbm: u64 = d
        .placement
        .memory
        .iter()
        .filter(|(n, _)| topo.memory_kind(topo.node_index(*n).expect("node")) == MemoryKind::Hbm)
        .map(|m| m.1)
        .sum();
    assert!(hbm > 0, "{:?}", d.placement.memory);
    let mut dram = r.clone();
    dram.memory_kinds = kinds(&[MemoryKind::Dram]);
    let err = plan(&topo, &state, &dram).expect_err("4 GiB of DRAM");
    let RejectReason::MemoryKindShort { needed, kinds: k, other, .. } = &err.reason else { panic!("{:?}", err.reason) };
    assert_eq!((*needed, k.as_slice()), (5 * GIB, &[MemoryKind::Dram][..]));
    assert_eq!(other, &vec![(MemoryKind::Hbm, 8 * GIB)]);
    assert_eq!(err.reason.code(), "memory-kind-short");
    // The default host (no profile) refuses it the same way.
    let err = plan(&topo, &HostState::new(&topo), &r).expect_err("DRAM only by default");
    assert_eq!(err.reason.code(), "memory-kind-short", "{}", err.reason);
    // A kind the host does not have.
    let mut cxl = Request::new("cxl", 2, GIB);
    cxl.memory_kinds = kinds(&[MemoryKind::Cxl]);
    let err = plan(&topo, &state, &cxl).expect_err("no CXL");
    assert_eq!(err.reason, RejectReason::NoMemoryKind { kinds: vec![MemoryKind::Cxl] });
    assert!(!err.reason.is_bad_request(), "another host may have it");
}

/// The tier hidden (the default, issue 39 item 6): the HBM backs the CPU
/// cell itself. The guest gets one cell of 4 vCPUs and 1 GiB mirroring
/// node0, recorded as backed by node7 (node0's HBM); the plan's memory per
/// host node is the same as with the tier visible.
#[test]
fn a_hidden_tier_backs_the_cpu_cell_with_the_hbm_beside_it() {
    let topo = hetero();
    let mut r = Request::new("hpc", 4, GIB);
    r.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    assert_eq!(d.placement.memory, vec![(NodeId(7), GIB)]);
    let cells = &d.placement.guest.cells;
    assert_eq!(cells.len(), 1, "{cells:?}");
    assert_eq!((cells[0].host_node, cells[0].memory_bytes, cells[0].vcpus.len()), (NodeId(0), GIB, 4));
    assert_eq!(cells[0].memory_nodes, vec![(NodeId(7), GIB)]);
    assert_eq!(cells[0].backing(), vec![(NodeId(7), GIB)]);
    assert!(d.placement.nodes.contains(&NodeId(7)));
    // More than one HBM node holds (3 GiB over 2 GiB nodes): both back
    // the one cell, node0's own HBM first.
    let mut big = Request::new("big", 4, 3 * GIB);
    big.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let d = plan(&topo, &HostState::new(&topo), &big).expect("fits");
    check_placement(&topo, &big, &d.placement);
    let cells = &d.placement.guest.cells;
    assert_eq!(cells.len(), 1, "{cells:?}");
    assert_eq!(cells[0].memory_bytes, 3 * GIB);
    let backing: u64 = cells[0].memory_nodes.iter().map(|m| m.1).sum();
    assert_eq!(backing, 3 * GIB, "{cells:?}");
    assert_eq!(cells[0].memory_nodes.len(), 2, "{cells:?}");
    assert!(cells[0]
        .memory_nodes
        .iter()
        .all(|m| topo.memory_kind(topo.node_index(m.0).expect("node")) == MemoryKind::Hbm));
    // The same request with the tier visible: the same memory per node,
    // shown as memory-only cells.
    big.memory_tiers = MemoryTiers::Visible;
    let seen = plan(&topo, &HostState::new(&topo), &big).expect("fits");
    assert_eq!(seen.placement.memory, d.placement.memory);
    assert!(
        seen.placement.guest.cells.len() > 1 && seen.placement.guest.cells.iter().all(|c| c.memory_nodes.is_empty())
    );
}

/// On the KNL in SNC4 flat mode, an HBM VM in one quadrant is one guest
/// cell backed by that quadrant's MCDRAM when the tier is hidden, and two
/// cells (CPUs, then the MCDRAM) when visible.
#[test]
fn a_knl_quadrant_vm_is_backed_by_its_own_mcdram() {
    let knl = fixture("mpibind/knl-snc4-flat-hwloc1.xml");
    let mut r = Request::new("hbm", 8, 2 * GIB);
    r.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let d = plan(&knl, &HostState::new(&knl), &r).expect("fits");
    check_placement(&knl, &r, &d.placement);
    let cells = &d.placement.guest.cells;
    assert_eq!(cells.len(), 1, "{cells:?}");
    let mcdram = cells[0].memory_nodes[0].0;
    assert_eq!(cells[0].memory_nodes, vec![(mcdram, 2 * GIB)]);
    let (local, _) = knl.local_cpu_nodes(knl.node_index(mcdram).expect("node"));
    assert_eq!(local, vec![knl.node_index(cells[0].host_node).expect("node")], "{cells:?}");
    r.memory_tiers = MemoryTiers::Visible;
    let d = plan(&knl, &HostState::new(&knl), &r).expect("fits");
    let cells = &d.placement.guest.cells;
    assert_eq!(
        cells.iter().map(|c| (c.vcpus.len(), c.memory_bytes, c.host_node)).collect::<Vec<_>>(),
        vec![(8, 0, cells[0].host_node), (0, 2 * GIB, mcdram)]
    );
}

/// DRAM first, then HBM, the tier hidden: the one guest cell is backed by
/// its own node's DRAM and the HBM beside it (node0, then node7), which
/// the domain binds together.
#[test]
fn a_cell_holding_dram_and_hbm_records_both() {
    let topo = hetero();
    let mut r = Request::new("both", 2, 2 * GIB);
    r.memory_kinds = kinds(&[MemoryKind::Dram, MemoryKind::Hbm]);
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    let cells = &d.placement.guest.cells;
    assert_eq!(cells.len(), 1, "{cells:?}");
    let nodes: Vec<NodeId> = cells[0].memory_nodes.iter().map(|m| m.0).collect();
    assert_eq!(nodes, vec![NodeId(0), NodeId(7)], "{cells:?}");
    assert_eq!(cells[0].memory_nodes.iter().map(|m| m.1).sum::<u64>(), 2 * GIB);
    assert_eq!(d.placement.memory.iter().map(|m| m.1).sum::<u64>(), 2 * GIB);
    // One guest cell: no "spans" note for the node backing it.
    assert!(!d.notes.iter().any(|n| matches!(n, numaplace_plan::Note::Spans { .. })), "{:?}", d.notes);
}

/// A hidden tier over two KNL quadrants: each CPU cell is backed by its
/// own quadrant's MCDRAM (the one its source groups with it), not both by
/// the first.
#[test]
fn each_cpu_cell_is_backed_by_the_mcdram_of_its_own_quadrant() {
    let knl = fixture("mpibind/knl-snc4-flat-hwloc1.xml");
    let mut r = Request::new("wide", 24, 6 * GIB);
    r.smt = numaplace_plan::SmtPolicy::Isolate;
    r.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let d = plan(&knl, &HostState::new(&knl), &r).expect("fits");
    check_placement(&knl, &r, &d.placement);
    let cells = &d.placement.guest.cells;
    assert_eq!(cells.len(), 2, "{cells:?}");
    for cell in cells {
        assert_eq!(cell.memory_nodes.len(), 1, "{cells:?}");
        let hbm = knl.node_index(cell.memory_nodes[0].0).expect("node");
        let (local, _) = knl.local_cpu_nodes(hbm);
        assert_eq!(local, vec![knl.node_index(cell.host_node).expect("node")], "{cells:?}");
    }
}

/// Issue 48: a hidden-tier VM a little larger than one HBM node fills the
/// HBM of its own vCPUs' domain first. On LLNL's KNL in SNC-4 flat mode
/// (a 4 GiB MCDRAM node beside each quadrant: node1's is node5, distance
/// 31 against 41 to another quadrant's), 4.25 GiB of HBM for a VM on node1
/// took 3.9 GiB from node4 and 384 MiB from node5, as the issue saw on a
/// Xeon Max (15.8 GiB from another quadrant's HBM, 256 MiB from its own).
#[test]
fn a_hidden_tier_vm_fills_its_own_domains_hbm_first() {
    let topo = fixture("mpibind/knl-snc4-flat-hwloc1.xml");
    let mut r = Request::new("h", 4, 4352 << 20);
    r.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    let cpu_node = d.placement.vcpus[0].node;
    let pos = |n: NodeId| topo.nodes().iter().position(|x| x.id == n).expect("node");
    // The HBM node local to the vCPUs' node (hwloc's nesting; the file
    // has no distance matrix).
    let own = d
        .placement
        .memory
        .iter()
        .map(|m| m.0)
        .find(|&n| topo.local_cpu_nodes(pos(n)).0 == vec![pos(cpu_node)])
        .expect("the vCPUs' own HBM holds some");
    let on = |n: NodeId| d.placement.memory.iter().find(|m| m.0 == n).map_or(0, |m| m.1);
    // The nearest HBM node is full before any other gets a byte beyond it.
    let others: u64 = d.placement.memory.iter().filter(|m| m.0 != own).map(|m| m.1).sum();
    assert!(on(own) > others, "{:?} (vCPUs on {cpu_node})", d.placement.memory);
    assert!(on(own) >= 3 * GIB, "{:?}", d.placement.memory);
}

/// The real Xeon Max 9462 (SNC4 flat, ParaStation/psmgmt's export), whose
/// HBM the reader finds by the CPU model (issue 48).
fn xeon_max() -> Topology {
    fixture("psmgmt/topo.dp-intelmax01-flat.xml")
}

fn is_hbm(topo: &Topology, n: NodeId) -> bool {
    topo.memory_kind(topo.node_index(n).expect("node")) == MemoryKind::Hbm
}

/// The case on the real host: a hidden-tier VM a little larger
/// than one 16 GiB HBM node (16.25 GiB) took 15.8 GiB from another
/// quadrant's HBM (distance 14) and 256 MiB from its own (13). Its own
/// SNC domain's HBM fills first, to what that node can give, and only
/// the rest comes from the next nearest, in the same socket.
#[test]
fn a_hidden_tier_vm_on_a_real_xeon_max_fills_its_own_domains_hbm_first() {
    let topo = xeon_max();
    let mut r = Request::new("h", 8, 16640 << 20);
    r.memory_kinds = kinds(&[MemoryKind::Hbm]);
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    let cpu_node = d.placement.vcpus[0].node;
    assert!(d.placement.vcpus.iter().all(|v| v.node == cpu_node), "one SNC domain's CPUs");
    let i = topo.node_index(cpu_node).expect("node");
    // The HBM node beside the vCPUs' domain is node id + 8 on this host.
    let own = NodeId(cpu_node.0 + 8);
    assert_eq!(topo.distance(i, topo.node_index(own).expect("node")), 13);
    let on = |n: NodeId| d.placement.memory.iter().find(|m| m.0 == n).map_or(0, |m| m.1);
    let rest: Vec<(NodeId, u64)> = d.placement.memory.iter().copied().filter(|m| m.0 != own).collect();
    assert!(d.placement.memory.iter().all(|m| is_hbm(&topo, m.0)), "{:?}", d.placement.memory);
    assert!(on(own) >= 15 * GIB, "own HBM first: {:?} (vCPUs on {cpu_node})", d.placement.memory);
    assert!(rest.iter().map(|m| m.1).sum::<u64>() <= GIB, "{:?}", d.placement.memory);
    for (n, _) in rest {
        assert_eq!(topo.distance(i, topo.node_index(n).expect("node")), 14, "the next nearest: {n}");
    }
}

/// Ordinary VMs stay off the real host's HBM: filled with VMs that name
/// no kind until one is refused, no byte lands on nodes 8-15; a VM asking
/// for HBM is then still placed there.
#[test]
fn ordinary_vms_stay_off_a_real_xeon_maxs_hbm() {
    let topo = xeon_max();
    let mut state = HostState::new(&topo);
    let mut batch: Vec<Request> = (0..20).map(|k| Request::new(format!("vm{k}"), 4, 60 * GIB)).collect();
    let mut hbm = Request::new("hbm", 4, 8 * GIB);
    hbm.memory_kinds = kinds(&[MemoryKind::Hbm]);
    batch.push(hbm);
    let out = plan_batch(&topo, &mut state, &batch);
    let (mut placed, mut refused) = (0, 0);
    for (r, d) in batch.iter().zip(&out).take(20) {
        match d {
            Ok(d) => {
                placed += 1;
                assert!(d.placement.memory.iter().all(|m| !is_hbm(&topo, m.0)), "{}: {:?}", r.name, d.placement.memory);
            }
            Err(_) => refused += 1,
        }
    }
    assert!(placed >= 14 && refused > 0, "{placed} placed, {refused} refused: DRAM full, HBM left alone");
    let d = out[20].as_ref().expect("HBM is still free");
    assert!(d.placement.memory.iter().all(|m| is_hbm(&topo, m.0)), "{:?}", d.placement.memory);
}
