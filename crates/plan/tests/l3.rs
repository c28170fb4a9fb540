//! L3 (CCX) awareness (issue 39 item 3) on the EPYC hosts among the
//! fixtures: each NUMA node holds two L3 groups (corona's EPYC 7401: two
//! CCX of 3 cores; inti6000's EPYC 7551: two of 4). A small VM keeps to
//! one L3 where one has room; a wide one splits on L3 boundaries.

mod common;

use common::check_placement;
use numaplace_plan::{plan, HostState, Placement, Request};
use numaplace_topo::Topology;

const GIB: u64 = 1 << 30;

fn fixture(rel: &str) -> Topology {
    let path = format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    numaplace_read::hwloc::parse(&text).expect("reads")
}

/// The L3 groups (cache positions) a placement's vCPUs run under.
fn l3_groups(topo: &Topology, p: &Placement) -> Vec<usize> {
    let mut groups: Vec<usize> =
        p.vcpus.iter().filter_map(|v| topo.caches().iter().position(|c| c.cpus.contains(v.pu))).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// Fills a host with small dedicated VMs of the given sizes (cycling)
/// until one is refused; returns (VMs placed, VMs on two or more L3s that
/// one L3 of the host could hold).
fn fill(topo: &Topology, sizes: &[u32]) -> (usize, usize) {
    let mut state = HostState::new(topo);
    let l3_cores = topo.caches().iter().map(|c| c.cpus.len() / 2).min().unwrap_or(0);
    let (mut placed, mut straddle) = (0, 0);
    for (i, &vcpus) in sizes.iter().cycle().enumerate().take(400) {
        let r = Request::new(format!("vm{i}"), vcpus, GIB);
        let Ok(d) = plan(topo, &state, &r) else { break };
        check_placement(topo, &r, &d.placement);
        if l3_groups(topo, &d.placement).len() > 1 && (vcpus as usize) <= l3_cores {
            straddle += 1;
        }
        state.place(&d.placement).expect("places");
        placed += 1;
    }
    (placed, straddle)
}

const SMALL: [u32; 6] = [2, 1, 3, 2, 1, 2];

#[test]
fn small_vms_on_corona_keep_to_one_l3() {
    let topo = fixture("mpibind/epyc-corona.xml");
    assert_eq!(topo.caches().len(), 16, "two L3 groups per node");
    // A 3-vCPU VM on an empty node takes one CCX's three cores.
    let d = plan(&topo, &HostState::new(&topo), &Request::new("c3", 3, GIB)).expect("plans");
    assert_eq!(l3_groups(&topo, &d.placement).len(), 1, "{:?}", d.placement.vcpus);
    // A run of small VMs (2, 1, 3, 2, 1, 2 vCPUs) until the host is full:
    // in core order 10 of the 52 crossed two L3s (2 vCPUs on cores 2 and
    // 3). With L3 groups alone that was 4; with issue 39's own pairs, even
    // cells and sibling order as well, the host fills in another order and
    // 9 do, each when no L3 of its node had two whole cores left (9 without
    // L3 groups in that order too: docs/plan.md, an open question).
    let (placed, straddle) = fill(&topo, &SMALL);
    assert_eq!((placed, straddle), (52, 9));
}

#[test]
fn small_vms_on_the_epyc_7551_keep_to_one_l3() {
    let topo = fixture("mpibind/epyc-dual-sock-hwloc1.xml");
    assert_eq!(topo.caches().len(), 16);
    // In core order 8 of 69; with L3 groups alone 1. With the rest of
    // issue 39 the fill order changed: 8 with L3 groups, 12 without.
    let (placed, straddle) = fill(&topo, &SMALL);
    assert_eq!((placed, straddle), (69, 8));
}

/// One node of two L3 groups of 3 cores, its core 0 taken by a 1-vCPU VM:
/// the first group has 2 free cores, the second 3.
fn ccx_host_with_one_core_taken() -> (Topology, HostState) {
    let topo =
        numaplace_read::synthetic::parse("1 socket x 2 l3 x 3 cores x 2 threads, 16GiB per node").expect("shape");
    let mut state = HostState::new(&topo);
    let one = plan(&topo, &state, &Request::new("one", 1, GIB)).expect("plans");
    assert_eq!(l3_groups(&topo, &one.placement), vec![0]);
    state.place(&one.placement).expect("places");
    (topo, state)
}

#[test]
fn a_vm_that_fits_an_l3_takes_the_one_with_room() {
    let (topo, state) = ccx_host_with_one_core_taken();
    // In core order it would take cores 1, 2 and 3, over both caches.
    let d = plan(&topo, &state, &Request::new("three", 3, GIB)).expect("plans");
    assert_eq!(l3_groups(&topo, &d.placement), vec![1]);
    let pus: Vec<u32> = d.placement.vcpus.iter().map(|v| v.pu).collect();
    assert_eq!(pus, vec![3, 4, 5]);
    // Two vCPUs take the group they fill (best fit), keeping the other whole.
    let d = plan(&topo, &state, &Request::new("two", 2, GIB)).expect("plans");
    let pus: Vec<u32> = d.placement.vcpus.iter().map(|v| v.pu).collect();
    assert_eq!(pus, vec![1, 2]);
}

#[test]
fn a_vm_wider_than_an_l3_splits_on_its_boundary() {
    let (topo, state) = ccx_host_with_one_core_taken();
    // 4 vCPUs must span both caches: the whole second group and one core
    // of the first (3 + 1), not cores 1-4 (2 + 2).
    let d = plan(&topo, &state, &Request::new("four", 4, GIB)).expect("plans");
    let pus: Vec<u32> = d.placement.vcpus.iter().map(|v| v.pu).collect();
    assert_eq!(pus, vec![1, 3, 4, 5], "vCPU numbers follow core order");
}
