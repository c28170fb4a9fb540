//! Requests operators bring from OpenStack Nova and the Kubernetes CPU
//! manager, in the shape of those projects' own test scenarios (issue 14):
//! what the peer accepts is accepted with the same layout, what it refuses
//! is refused with a reason.

mod common;

use common::{check_placement, Shape, GIB};
use numaplace_plan::{plan, plan_batch, HostState, Policy, RejectReason, Request, SmtPolicy};
use numaplace_topo::NodeId;

fn req(name: &str, vcpus: u32, gib: u64) -> Request {
    Request::new(name, vcpus, gib * GIB)
}

/// Nova's packing weigher and Kubernetes' packed allocation: a 2-vCPU VM
/// goes to the node that already has a VM (the fullest that fits), where
/// `balanced` takes the emptier one.
#[test]
fn pack_fills_the_fullest_node_that_fits() {
    let topo = Shape::new(1, 2, 4, 1, 16 * GIB).build();
    let mut state = HostState::new(&topo);
    let first = plan_batch(&topo, &mut state, &[req("first", 2, 2)]);
    assert_eq!(first[0].as_ref().map(|d| d.placement.nodes.clone()).ok(), Some(vec![NodeId(0)]));
    let balanced = plan(&topo, &state, &req("b", 2, 2)).expect("fits");
    assert_eq!(balanced.placement.nodes, vec![NodeId(1)]);
    let mut packed = req("p", 2, 2);
    packed.policy = Policy::Pack;
    let d = plan(&topo, &state, &packed).expect("fits");
    assert_eq!(d.placement.nodes, vec![NodeId(0)]);
    check_placement(&topo, &packed, &d.placement);
    let alt = d.alternatives.iter().find(|a| a.nodes == vec![NodeId(1)]).expect("node1 was considered");
    assert_eq!(alt.verdict.code(), "emptier", "{}", alt.verdict);
    // The fullest node that does not fit is passed over, never overfilled.
    let mut big = req("big", 3, 2);
    big.policy = Policy::Pack;
    let d = plan(&topo, &state, &big).expect("fits");
    assert_eq!(d.placement.nodes, vec![NodeId(1)]);
}

/// Nova `hw:cpu_thread_policy=require`: sibling pairs or nothing.
#[test]
fn smt_require_takes_pairs_and_refuses_a_host_without_smt() {
    let smt = Shape::new(1, 1, 4, 2, 16 * GIB).build();
    let mut r = req("rt", 4, 2);
    r.smt = SmtPolicy::Require;
    let d = plan(&smt, &HostState::new(&smt), &r).expect("fits");
    assert_eq!(d.placement.guest.threads, 2);
    let pus: Vec<u32> = d.placement.vcpus.iter().map(|p| p.pu).collect();
    assert_eq!(pus, vec![0, 4, 1, 5], "two whole cores, both threads of each");

    let no_smt = Shape::new(1, 1, 4, 1, 16 * GIB).build();
    let err = plan(&no_smt, &HostState::new(&no_smt), &r).expect_err("no SMT");
    assert_eq!(err.reason, RejectReason::NoSmt);
    // `pairs` keeps its fallback, and the plan says so.
    r.smt = SmtPolicy::Pairs;
    let d = plan(&no_smt, &HostState::new(&no_smt), &r).expect("falls back");
    assert!(d.notes.iter().any(|n| n.code() == "no-smt-for-pairs"), "{:?}", d.notes);
}
