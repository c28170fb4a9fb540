//! Filling order (issue 39 item 4): when whole cores run out, a new VM
//! takes the idle siblings of VMs told pairs or of small VMs before those
//! of a large dedicated VM, inside a node (`pin`) and between nodes (the
//! node-set search), so a database given whole cores keeps them while
//! small VMs' siblings are free anywhere they would fit.

mod common;

use common::{check_placement, checked_batch};
use numaplace_plan::{plan, plan_batch, HostState, Note, Request, VerdictFigures};
use numaplace_topo::{NodeId, Topology};

const GIB: u64 = 1 << 30;

fn host(description: &str) -> Topology {
    numaplace_read::synthetic::parse(description).expect("a valid description")
}

/// The physical cores (topology positions) a VM's vCPUs run on.
fn cores_of(topo: &Topology, state: &HostState, vm: &str) -> Vec<usize> {
    let p = state.placement(vm).expect("placed");
    p.vcpus.iter().filter_map(|v| topo.pu(v.pu).and_then(|x| x.core)).collect()
}

/// The case: a 64-vCPU database on whole cores of a node, then 40
/// small `prefer-cores` VMs (1 and 2 vCPUs, 64 in all) on the same node.
/// The small VMs take whole cores while there are any, then each other's
/// idle siblings, and every one of them fits without a vCPU on a core of
/// the database; only the next VM, with nothing else free, takes the
/// database's siblings, and says so.
#[test]
fn forty_small_vms_fit_beside_a_64_vcpu_database() {
    let topo = host("1 socket x 1 node x 96 cores x 2 threads, 512GiB per node");
    let mut state = HostState::new(&topo);
    let db = plan(&topo, &state, &Request::new("db", 64, 128 * GIB)).expect("fits");
    assert_eq!(db.placement.guest.threads, 1, "whole cores");
    state.place(&db.placement).expect("places");
    let small: Vec<Request> = (0..40).map(|i| Request::new(format!("s{i}"), [2, 1, 2, 1, 2][i % 5], GIB)).collect();
    assert_eq!(small.iter().map(|r| r.vcpus).sum::<u32>(), 64, "the 32 cores and 32 siblings the db leaves");
    let out = plan_batch(&topo, &mut state, &small);
    let placed = checked_batch(&topo, &small, &out, "96-core node");
    assert_eq!(placed.len(), 40, "all 40 placed");
    let db_cores = cores_of(&topo, &state, "db");
    for r in &small {
        let mine = cores_of(&topo, &state, &r.name);
        assert!(mine.iter().all(|c| !db_cores.contains(c)), "{} on a core of db: {mine:?}", r.name);
    }
    assert_eq!(state.free_pus(NodeId(0)), Some(64), "the database's 64 siblings, and nothing else");
    // One more: only the database's siblings are left.
    let late = Request::new("late", 2, GIB);
    let d = plan(&topo, &state, &late).expect("fits");
    check_placement(&topo, &late, &d.placement);
    let Some(Note::SiblingsOf { vms, vcpus }) = d.notes.iter().find(|n| matches!(n, Note::SiblingsOf { .. })) else {
        panic!("{:?}", d.notes)
    };
    assert_eq!((vms.as_slice(), *vcpus), (["db".to_string()].as_slice(), 2));
}

/// Between nodes: both nodes out of whole cores, node0's free threads the
/// siblings of a 16-vCPU database, node1's those of eight 2-vCPU VMs. A
/// new VM goes to node1 (before issue 39's node choice it took node0, the
/// lower number on a tie of free threads, and the database's siblings).
#[test]
fn a_vm_short_of_cores_goes_where_small_vms_siblings_are() {
    let topo = host("1 socket x 2 nodes x 16 cores x 2 threads, 64GiB per node, distances 10/12");
    let mut state = HostState::new(&topo);
    let mut reqs = vec![Request::new("db", 16, 8 * GIB)];
    reqs.extend((0..8).map(|i| Request::new(format!("s{i}"), 2, GIB)));
    let out = plan_batch(&topo, &mut state, &reqs);
    checked_batch(&topo, &reqs, &out, "two nodes");
    assert_eq!(state.placement("db").expect("db").nodes, vec![NodeId(0)]);
    assert!((0..8).all(|i| state.placement(&format!("s{i}")).expect("small").nodes == vec![NodeId(1)]));
    assert_eq!((state.free_cores(NodeId(0)), state.free_cores(NodeId(1))), (Some(0), Some(0)));
    assert_eq!((state.free_pus(NodeId(0)), state.free_pus(NodeId(1))), (Some(16), Some(16)));

    let late = Request::new("late", 2, GIB);
    let d = plan(&topo, &state, &late).expect("fits");
    check_placement(&topo, &late, &d.placement);
    assert_eq!(d.placement.nodes, vec![NodeId(1)]);
    let alt = d.alternatives.iter().find(|a| a.nodes == vec![NodeId(0)]).expect("node0 considered");
    assert_eq!(alt.verdict.code(), "large-siblings");
    assert_eq!(alt.verdict.figures(), VerdictFigures::Counts { alt: 16, chosen: 8 });
    assert_eq!(
        alt.verdict.to_string(),
        "would take idle siblings of a 16-vCPU VM's cores; the chosen node gives only those of VMs of 8 vCPUs or fewer"
    );
}
