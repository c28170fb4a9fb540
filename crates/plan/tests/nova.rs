//! Nova's own NUMA test cases that numaplace answered differently (issue
//! 39, item 7), each asserting the typed answer: a guest cell never
//! larger than its host node, `guest_nodes` equal or refused, `pairs`
//! with an isolated emulator CPU on a lone thread, and nodes at distance
//! 255 refused as unreachable rather than as a shortfall.

mod common;

use common::{check_placement, Shape, GIB};
use numaplace_plan::{
    plan, plan_batch, CellWish, CpuMode, EmulatorPlacement, HostState, RejectReason, Request, SmtPolicy,
};
use numaplace_topo::{CpuSet, NodeId};

const MIB: u64 = 1 << 20;

/// Nova's `ram_allocation_ratio` never lets a guest cell exceed its host
/// cell's memory: 1.8 GiB at ratio 2 on nodes of 1 GiB is charged 0.9 GiB,
/// which one node has free, but its one cell would be larger than the
/// node. The VM is split over both nodes instead, and one cell of it is
/// refused.
#[test]
fn overcommitted_memory_never_makes_a_cell_larger_than_its_node() {
    let topo = Shape::new(1, 2, 4, 1, GIB).build();
    let mut r = Request::new("oc", 2, 1800 * MIB);
    r.cpu_mode = CpuMode::Shared;
    r.memory_overcommit = 2.0;
    let d = plan(&topo, &HostState::new(&topo), &r).expect("fits over two nodes");
    check_placement(&topo, &r, &d.placement);
    assert_eq!(d.placement.nodes, vec![NodeId(0), NodeId(1)]);
    for cell in &d.placement.guest.cells {
        assert!(cell.memory_bytes <= GIB, "cell of {} on a 1 GiB node", cell.memory_bytes);
    }
    // One cell asked: no node is large enough, whatever the ratio.
    r.guest_nodes = Some(1);
    let err = plan(&topo, &HostState::new(&topo), &r).expect_err("one 1.8 GiB cell");
    assert_eq!(err.reason.code(), "cells-no-fit", "{}", err.reason);
    // The ratio still charges less where the cell fits its node.
    let mut small = Request::new("small", 2, 900 * MIB);
    small.cpu_mode = CpuMode::Shared;
    small.memory_overcommit = 2.0;
    let d = plan(&topo, &HostState::new(&topo), &small).expect("fits");
    assert_eq!(d.placement.nodes, vec![NodeId(0)]);
    assert_eq!(d.placement.charged, vec![(NodeId(0), 450 * MIB)]);
}

/// `hw:numa_nodes=3` on an 8-vCPU flavor is refused by Nova: cells are
/// equal or the request gives them. numaplace refused nothing and built
/// 3+3+2; now it is a typed bad request, and 6 vCPUs still give 2+2+2.
#[test]
fn guest_nodes_that_cannot_be_equal_are_refused() {
    let topo = Shape::new(1, 4, 4, 1, 4 * GIB).build();
    let state = HostState::new(&topo);
    let mut r = Request::new("odd", 8, 3 * GIB);
    r.guest_nodes = Some(3);
    let err = plan(&topo, &state, &r).expect_err("8 vCPUs in 3 equal cells");
    assert_eq!(
        err.reason,
        RejectReason::GuestNodesUneven { guest_nodes: 3, vcpus: 8, memory: 3 * GIB, align: 2 * MIB }
    );
    assert_eq!(err.reason.code(), "guest-nodes-uneven");
    assert!(err.reason.is_bad_request());
    // Memory that does not divide either (1 GiB in 3 cells of 2 MiB pages).
    let mut mem = Request::new("mem", 6, GIB);
    mem.guest_nodes = Some(3);
    let err = plan(&topo, &state, &mem).expect_err("1 GiB in 3");
    assert!(matches!(err.reason, RejectReason::GuestNodesUneven { guest_nodes: 3, vcpus: 6, .. }), "{}", err.reason);
    // Equal cells are built as asked.
    let mut even = Request::new("even", 6, 3 * GIB);
    even.guest_nodes = Some(3);
    let d = plan(&topo, &state, &even).expect("2+2+2");
    let sizes: Vec<(usize, u64)> = d.placement.guest.cells.iter().map(|c| (c.vcpus.len(), c.memory_bytes)).collect();
    assert_eq!(sizes, vec![(2, GIB), (2, GIB), (2, GIB)]);
}

/// `hw:cpu_thread_policy=require` with `hw:emulator_threads_policy=isolate`
/// where one core is whole and the other has one free thread: Nova puts
/// the vCPUs on the whole core's pair and the emulator on the lone
/// thread. numaplace asked for a second pair; now it does as Nova does,
/// and with nothing beside the pair it names the node.
#[test]
fn pairs_with_an_isolated_emulator_take_a_lone_thread() {
    let topo = Shape::new(1, 1, 2, 2, 8 * GIB).build();
    // Core 0 is PUs 0 and 2, core 1 is PUs 1 and 3.
    let mut state = HostState::new(&topo);
    let mut one = Request::new("one", 1, GIB);
    one.smt = SmtPolicy::Any;
    plan_batch(&topo, &mut state, &[one]).remove(0).expect("PU 0");
    let mut r = Request::new("rt", 2, GIB);
    r.smt = SmtPolicy::Pairs;
    r.emulator = EmulatorPlacement::Isolate;
    let d = plan(&topo, &state, &r).expect("the pair and the lone thread");
    check_placement(&topo, &r, &d.placement);
    let pus: Vec<u32> = d.placement.vcpus.iter().map(|v| v.pu).collect();
    assert_eq!(pus, vec![1, 3], "both threads of the whole core");
    assert_eq!(d.placement.emulator, "2".parse::<CpuSet>().expect("set"), "the lone thread");
    assert_eq!(d.placement.guest.threads, 2);
    // On an empty host nothing changes: the emulator takes a whole core
    // of its own when no lone thread exists.
    let empty = plan(&topo, &HostState::new(&topo), &r).expect("fits");
    assert_eq!(empty.placement.emulator.len(), 1);
    assert_eq!(empty.placement.cpuset.len(), 4);
    // Nothing beside the pair: refused naming the node, not as a pair short.
    let mut state = HostState::new(&topo);
    let mut two = Request::new("two", 2, GIB);
    two.smt = SmtPolicy::Any;
    plan_batch(&topo, &mut state, &[two]).remove(0).expect("core 0");
    let err = plan(&topo, &state, &r).expect_err("no thread left for the emulator");
    assert_eq!(err.reason, RejectReason::EmulatorCpuShort { node: NodeId(0) });
    assert!(err.reason.is_cpu_short());
}

/// Nodes at SLIT distance 255 are never combined; a VM that only they
/// could hold together is refused as `unreachable`, naming the pairs,
/// not as a CPU or memory shortfall the operator would try to free.
#[test]
fn a_vm_only_unreachable_nodes_could_hold_is_refused_as_unreachable() {
    let topo = Shape::new(1, 3, 2, 1, 4 * GIB).build_with(|a, b, d| if a != b && (a == 2 || b == 2) { 255 } else { d });
    let state = HostState::new(&topo);
    let err = plan(&topo, &state, &Request::new("six", 6, GIB)).expect_err("needs all three nodes");
    match &err.reason {
        RejectReason::Unreachable { needed, memory, pairs, .. } => {
            assert_eq!((*needed, *memory), (6, GIB));
            assert_eq!(pairs, &vec![(NodeId(0), NodeId(2)), (NodeId(1), NodeId(2))]);
        }
        other => panic!("expected unreachable, got {other:?}: {other}"),
    }
    assert_eq!(err.reason.code(), "unreachable");
    assert!(!err.reason.is_bad_request());
    // Guest cells likewise.
    let mut cells = Request::new("cells", 3, 3 * GIB);
    cells.guest_nodes = Some(3);
    let err = plan(&topo, &state, &cells).expect_err("three cells need node 2 with the others");
    assert_eq!(err.reason.code(), "unreachable", "{}", err.reason);
    // A VM that is really too big for the host stays a shortfall.
    let err = plan(&topo, &state, &Request::new("big", 8, GIB)).expect_err("6 CPUs in all");
    assert_eq!(err.reason.code(), "cpu-short", "{}", err.reason);
}

fn set(text: &str) -> CpuSet {
    text.parse().expect("cpu list")
}

fn listed(cells: &[(&str, u64)]) -> Vec<CellWish> {
    cells.iter().map(|&(list, gib)| CellWish::listed(set(list), gib * GIB)).collect()
}

/// Nova's `hw:numa_cpus.N`: a guest cell may list its vCPUs. Lists in
/// guest order (cell 0 holds 0-3, cell 1 holds 4-5) are built as asked,
/// with the guest shape a run gives; a count beside a list takes the run
/// its place gives, as before lists could scatter.
#[test]
fn cells_may_list_their_vcpus_in_guest_order() {
    let topo = Shape::new(1, 2, 4, 1, 16 * GIB).build();
    let state = HostState::new(&topo);
    let mut r = Request::new("listed", 6, 6 * GIB);
    r.cells = vec![CellWish::listed(set("0-3"), 4 * GIB), CellWish::new(2, 2 * GIB)];
    let d = plan(&topo, &state, &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    let cells = &d.placement.guest.cells;
    assert_eq!(cells[0].vcpus, set("0-3"));
    assert_eq!(cells[1].vcpus, set("4-5"));
    let g = &d.placement.guest;
    assert_eq!((g.sockets, g.dies, g.cores, g.threads), (1, 3, 2, 1));
}

/// Nova's interleaved cells (`hw:numa_cpus.0=0,2,4,6`,
/// `hw:numa_cpus.1=1,3,5,7`): each listed vCPU is pinned on its cell's
/// host node, and the guest is told one die per vCPU, one thread each
/// (QEMU's dies and cores are runs of vCPUs, and no run of two stays in
/// one cell). Cells of `4-7` then `0-3` keep dies of four.
#[test]
fn interleaved_cells_pin_each_listed_vcpu_on_its_cells_node() {
    let topo = Shape::new(1, 2, 4, 2, 16 * GIB).build();
    let state = HostState::new(&topo);
    let mut r = Request::new("nova", 8, 8 * GIB);
    r.cells = listed(&[("0,2,4,6", 4), ("1,3,5,7", 4)]);
    let d = plan(&topo, &state, &r).expect("fits");
    let p = &d.placement;
    check_placement(&topo, &r, p);
    let g = &p.guest;
    assert_eq!(g.cells[0].vcpus, set("0,2,4,6"));
    assert_eq!(g.cells[1].vcpus, set("1,3,5,7"));
    assert_ne!(g.cells[0].host_node, g.cells[1].host_node);
    for pin in &p.vcpus {
        let cell = if pin.vcpu % 2 == 0 { &g.cells[0] } else { &g.cells[1] };
        assert_eq!(pin.node, cell.host_node, "vCPU {}", pin.vcpu);
    }
    assert_eq!((g.sockets, g.dies, g.cores, g.threads), (1, 8, 1, 1));
    // Runs out of guest order: dies of four, each within one cell.
    r.cells = listed(&[("4-7", 4), ("0-3", 4)]);
    let d = plan(&topo, &state, &r).expect("fits");
    check_placement(&topo, &r, &d.placement);
    let g = &d.placement.guest;
    assert_eq!(g.cells[0].vcpus, set("4-7"));
    assert_eq!((g.sockets, g.dies, g.cores, g.threads), (1, 2, 4, 1));
    assert!(d.placement.vcpus[4..].iter().all(|p| p.node == g.cells[0].host_node));
}

/// Lists that overlap, leave a vCPU out or name one the VM lacks are
/// refused with typed reasons naming the cell (bad requests: exit 2).
#[test]
fn cell_lists_that_overlap_leave_gaps_or_overrun_are_refused() {
    let topo = Shape::new(1, 2, 4, 2, 16 * GIB).build();
    let state = HostState::new(&topo);
    let mut r = Request::new("bad", 8, 8 * GIB);
    let refuse = |r: &Request| plan(&topo, &state, r).expect_err("refused").reason;
    r.cells = listed(&[("0,2,4,6", 4), ("1,3,5,6", 4)]);
    let err = refuse(&r);
    assert_eq!(err, RejectReason::CellVcpusOverlap { cell: 1, other: 0, vcpu: 6 });
    assert_eq!(err.code(), "cell-vcpus-overlap");
    assert!(err.is_bad_request());
    r.cells = listed(&[("0,2,4,6", 4), ("1,3,5,8", 4)]);
    let err = refuse(&r);
    assert_eq!(err, RejectReason::CellVcpuOutOfRange { cell: 1, vcpu: 8, vcpus: 8 });
    assert_eq!(err.code(), "cell-vcpu-out-of-range");
    // A count beside a list takes its run: 4-7 here, which cell 0's 6 is in.
    r.cells = vec![CellWish::listed(set("0,2,4,6"), 4 * GIB), CellWish::new(4, 4 * GIB)];
    assert_eq!(refuse(&r), RejectReason::CellVcpusOverlap { cell: 1, other: 0, vcpu: 4 });
    // Seven vCPUs listed, the counts adding up to eight: vCPU 7 is in no cell.
    r.cells = vec![
        CellWish::listed(set("0,2,4,6"), 4 * GIB),
        CellWish { vcpus: 4, ..CellWish::listed(set("1,3,5"), 4 * GIB) },
    ];
    let err = refuse(&r);
    assert_eq!(err, RejectReason::CellVcpusGap { vcpu: 7 });
    assert_eq!(err.code(), "cell-vcpus-gap");
    assert!(err.to_string().contains("no guest cell lists vCPU 7"), "{err}");
    // A list is its own count (a library caller's count that disagrees
    // is not trusted), and an empty list is an empty cell.
    r.cells = vec![
        CellWish::listed(set("0,2,4,6"), 4 * GIB),
        CellWish { vcpus: 2, ..CellWish::listed(set("1,3,5,7"), 4 * GIB) },
    ];
    let d = plan(&topo, &state, &r).expect("the lists decide");
    assert_eq!(d.placement.guest.cells[1].vcpus, set("1,3,5,7"));
    r.cells[1] = CellWish { listed: Some(CpuSet::new()), ..CellWish::new(4, 4 * GIB) };
    assert_eq!(refuse(&r), RejectReason::CellEmpty { cell: 1 });
}

/// A mixed VM with interleaved cells: each cell's floating vCPUs float on
/// its node's share of the pool, its pinned ones run on that node.
#[test]
fn a_mixed_vm_keeps_its_listed_cells() {
    let topo = Shape::new(1, 2, 4, 2, 16 * GIB).build();
    let pool = set("3,7,11,15");
    let state = HostState::with_reservations(
        &topo,
        numaplace_plan::Reservations { shared_cpus: pool.clone(), ..Default::default() },
    )
    .expect("pool");
    let mut r = Request::new("mixed", 8, 8 * GIB);
    r.cells = listed(&[("0,2,4,6", 4), ("1,3,5,7", 4)]);
    r.shared_vcpus = set("6-7");
    let d = plan(&topo, &state, &r).expect("fits");
    let p = &d.placement;
    check_placement(&topo, &r, p);
    for pin in &p.vcpus {
        let cell = p.guest.cells.iter().find(|c| c.vcpus.contains(pin.vcpu)).expect("in a cell");
        assert_eq!(pin.node, cell.host_node, "vCPU {}", pin.vcpu);
    }
    assert_eq!(p.guest.cells[0].vcpus, set("0,2,4,6"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Any disjoint lists covering the vCPUs (each vCPU given a cell at
    /// random) are planned with every listed vCPU on its cell's host node
    /// and every guest die inside one cell (`check_placement`); cells of
    /// at most 4 vCPUs always fit this host's 4-core nodes.
    #[test]
    fn any_listed_cells_pin_each_vcpu_on_its_cells_node(
        cells in 2usize..=4,
        picks in proptest::collection::vec(0usize..4, 4..=16),
    ) {
        let topo = Shape::new(2, 2, 4, 2, 16 * GIB).build();
        let n = picks.len();
        // vCPU v goes to cell picks[v] % cells; the first `cells` vCPUs
        // seed one cell each so none is empty.
        let cell_of: Vec<usize> = (0..n).map(|v| if v < cells { v } else { picks[v] % cells }).collect();
        let lists: Vec<CpuSet> =
            (0..cells).map(|c| (0..n as u32).filter(|&v| cell_of[v as usize] == c).collect()).collect();
        let mut r = Request::new("listed", n as u32, cells as u64 * GIB);
        r.cells = lists.iter().map(|l| CellWish::listed(l.clone(), GIB)).collect();
        let fits = lists.iter().all(|l| l.len() <= 4);
        match plan(&topo, &HostState::new(&topo), &r) {
            Ok(d) => {
                check_placement(&topo, &r, &d.placement);
                for (cell, list) in d.placement.guest.cells.iter().zip(&lists) {
                    proptest::prop_assert_eq!(&cell.vcpus, list);
                }
            }
            Err(e) => proptest::prop_assert!(!fits, "{}", e),
        }
    }
}
