//! What a node can give VMs is defined once (`HostState::capacity`,
//! `node_capacity`), and the planner places exactly up to it: on a real
//! host with huge page pools and with a reserve of CPUs and memory.

#![allow(clippy::unwrap_used)]

use numaplace_plan::{node_capacity, plan, HostState, Request, Reservations};
use numaplace_topo::{CpuSet, Topology};

const MIB: u64 = 1 << 20;

/// An AWS g4dn.metal: 2 nodes of 24 cores x 2 threads, each with a pool of
/// about 5,280 2 MiB huge pages.
fn g4dn() -> Topology {
    let p = format!("{}/../../fixtures/topologies/mpibind/g4dnmetal.xml", env!("CARGO_MANIFEST_DIR"));
    numaplace_read::read_source(&p).unwrap()
}

fn reserve(t: &Topology) -> Reservations {
    // Two threads of node 0 (one core) and 2 GiB on every node.
    let first: CpuSet = t.node_online_cpus(0).iter().take(1).collect();
    let sibling =
        t.pus().find(|p| p.id != first.first().unwrap() && p.core == t.pu(first.first().unwrap()).unwrap().core);
    let cpus: CpuSet = first.iter().chain(sibling.map(|p| p.id)).collect();
    Reservations { cpus, memory_per_node: 2 << 30, ..Reservations::default() }
}

#[test]
fn capacity_leaves_out_pools_reserve_and_reserved_cpus() {
    let t = g4dn();
    let r = reserve(&t);
    let caps = node_capacity(&t, &r);
    assert_eq!(caps, HostState::with_reservations(&t, r.clone()).unwrap().capacity(), "one definition");
    assert_eq!(caps.len(), t.nodes().len());
    for (i, (cap, node)) in caps.iter().zip(t.nodes()).enumerate() {
        let pools: u64 = node.hugepages.iter().map(|h| h.size_bytes * h.total).sum();
        assert!(pools > 0, "the fixture's node {i} has a huge page pool");
        assert_eq!(cap.memory, node.memory_bytes - pools - (2 << 30), "node {i}");
        let online = t.node_online_cpus(i).len() as u32;
        let kept = t.node_online_cpus(i).iter().filter(|c| r.cpus.contains(*c)).count() as u32;
        assert_eq!(cap.threads, online - kept, "node {i}");
        assert_eq!(cap.cores, t.cores_of_node(i).count() as u32 - u32::from(kept > 0), "node {i}");
        assert!(cap.hugepages.iter().any(|&(size, pages)| size == 2 * MIB && pages > 5000));
    }
}

#[test]
fn the_planner_fills_a_node_exactly_to_its_capacity() {
    let t = g4dn();
    let r = reserve(&t);
    let state = HostState::with_reservations(&t, r.clone()).unwrap();
    let cap = node_capacity(&t, &r)[1].memory;
    // The largest VM (whole MiB) whose memory and QEMU overhead fit.
    let fits = |m: u64| m + r.overhead.bytes(m) <= cap;
    let (mut lo, mut hi) = (1u64, cap / MIB);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid * MIB) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let request = |m: u64| {
        let mut q = Request::new("vm", 2, m);
        q.max_nodes = Some(1);
        q
    };
    assert!(plan(&t, &state, &request(lo * MIB)).is_ok(), "{} MiB fits a node of {} MiB", lo, cap / MIB);
    assert!(plan(&t, &state, &request((lo + 1) * MIB)).is_err(), "one MiB more does not");
}
