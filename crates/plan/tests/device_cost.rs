//! Devices as part of the cost (issue 39 item 5): a VM that asks for a
//! device keeps to the device's node with sibling pairs rather than take
//! whole cores on the other socket, and so leaves another node's cores to
//! the device VM that needs them.

mod common;

use common::check_placement;
use numaplace_plan::{plan, DeviceWish, HostState, Request};
use numaplace_topo::{NodeId, Topology};

const GIB: u64 = 1 << 30;

fn fixture(rel: &str) -> Topology {
    let path = format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    numaplace_read::hwloc::parse(&text).expect("reads")
}

fn near(name: &str, vcpus: u32, node: u32) -> Request {
    let mut r = Request::new(name, vcpus, 4 * GIB);
    r.devices.push(DeviceWish { address: None, node: Some(NodeId(node)), required: false });
    r
}

fn nodes_of(topo: &Topology, r: &Request, state: &HostState) -> (Vec<NodeId>, numaplace_plan::Cost, HostState) {
    let d = plan(topo, state, r).expect("plans");
    check_placement(topo, r, &d.placement);
    let cost = numaplace_plan::cost_of(state, &d.placement);
    let mut next = state.clone();
    next.place(&d.placement).expect("places");
    (d.placement.nodes.clone(), cost, next)
}

#[test]
fn a_device_vm_keeps_to_its_node_with_pairs_on_a_two_socket_host() {
    // 2 nodes x 8 cores x 2 threads at SLIT 20.
    let topo = fixture("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml");
    let state = HostState::new(&topo);
    // A first device VM takes 6 of node0's 8 cores.
    let (nodes, _, state) = nodes_of(&topo, &near("gpu1", 6, 0), &state);
    assert_eq!(nodes, vec![NodeId(0)]);
    // A second wants node0's device too: 4 vCPUs as two sibling pairs of
    // node0's last two cores (its own pairs, its guest told threads:
    // 0.359), not whole cores a socket away (0.575 for the device, the
    // model's sibling loss at SLIT 20), which node1's device VM needs.
    let (nodes, cost, state) = nodes_of(&topo, &near("gpu2", 4, 0), &state);
    assert_eq!(nodes, vec![NodeId(0)]);
    assert_eq!((cost.pairs, cost.siblings, cost.device), (359, 0, 0), "{cost:?}");
    // node1's device VM still has all 8 of its whole cores.
    let (nodes, cost, _) = nodes_of(&topo, &near("nic", 8, 1), &state);
    assert_eq!(nodes, vec![NodeId(1)]);
    assert_eq!(cost.total(), 0);
}

#[test]
fn a_device_vm_on_epyc_takes_pairs_before_the_other_socket_and_cores_of_its_package_before_pairs() {
    // corona: 2 packages x 4 nodes x 6 cores x 2 threads, SLIT 16 within a
    // package, 32 between.
    let topo = fixture("mpibind/epyc-corona.xml");
    let state = HostState::new(&topo);
    let (_, _, state) = nodes_of(&topo, &near("fill", 4, 5), &state);
    // node5 has 2 whole cores left. Its device VM of 4 vCPUs would cost
    // 1.265 on whole cores of the other socket, 0.359 as its own pairs on
    // node5 and 0.345 on whole cores of node4, 6 or 7 (same package): it takes
    // those, never the other socket.
    let d = plan(&topo, &state, &near("gpu", 4, 5)).expect("plans");
    let pkg = |n: &NodeId| topo.package_of_node(topo.nodes().iter().position(|x| x.id == *n).expect("node"));
    assert!(d.placement.nodes.iter().all(|n| pkg(n) == Some(1)), "{:?}", d.placement.nodes);
}
