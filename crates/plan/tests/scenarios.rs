//! The field notes' scenarios (XAPI's 32-vCPU VM, ESXi's wide VMs and
//! vNUMA shapes, CPU hot-add, ZStack's pinning) as planner tests on
//! literal hosts.

mod common;

use common::{xapi_host, Shape, GIB};
use numaplace_plan::{
    plan, plan_batch, CpuMode, DeviceWish, EmulatorPlacement, HostState, MemoryMode, NodeFree, Note, Policy,
    RejectReason, Request, Resource, SmtPolicy,
};
use numaplace_topo::{CpuSet, NodeId, Topology};

fn req(name: &str, vcpus: u32, gib: u64) -> Request {
    Request::new(name, vcpus, gib * GIB)
}

fn with_policy(mut r: Request, policy: Policy) -> Request {
    r.policy = policy;
    r
}

fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().map(|&i| NodeId(i)).collect()
}

fn plan_one(topo: &Topology, r: &Request) -> numaplace_plan::Decision {
    let state = HostState::new(topo);
    plan(topo, &state, r).unwrap_or_else(|e| panic!("{e}"))
}

/// XAPI's host at its SLIT 21 (background.md § Hyperthread siblings).
fn xapi_host_21() -> Topology {
    xapi_host_at(21)
}

/// XAPI's shape with another distance between its two nodes.
fn xapi_host_at(remote: u32) -> Topology {
    Shape::new(2, 1, 16, 2, 64 * GIB).build_with(|_, _, d| if d == 32 { remote } else { d })
}

#[test]
fn xapi_32_vcpus_get_two_nodes_unless_compact() {
    // At SLIT 21, as measured: until issue 39 the test host was at 32,
    // where the VM's own pairs on one node (0.250) now cost less than
    // half its memory at 32 (0.400); see the test after this one.
    let topo = xapi_host_21();
    for policy in [Policy::SmtAware, Policy::Balanced] {
        let d = plan_one(&topo, &with_policy(req("big", 32, 32), policy));
        assert_eq!(d.placement.nodes, nodes(&[0, 1]), "{policy:?}");
        // One vCPU per physical core: no two vCPUs share a core.
        let cores: std::collections::BTreeSet<u32> = d.placement.vcpus.iter().map(|p| p.pu % 32).collect();
        assert_eq!(cores.len(), 32);
        assert_eq!(d.placement.guest.cells.len(), 2);
        assert_eq!((d.placement.guest.sockets, d.placement.guest.cores, d.placement.guest.threads), (2, 16, 1));
        assert!(d.alternatives.iter().any(|a| a.verdict.to_string().contains("too small")), "{:?}", d.alternatives);
    }
    let d = plan_one(&topo, &with_policy(req("big", 32, 32), Policy::Compact));
    assert_eq!(d.placement.nodes, nodes(&[0]));
    assert!(d.notes.iter().any(|n| matches!(n, Note::SharedCores { vcpus } if *vcpus > 0)), "{:?}", d.notes);
}

/// Issue 48: a VM's own sibling pairs, its guest told `threads=2`, cost
/// 0.359 (the model's sibling loss times its own-pair share); two nodes
/// cost what the guest's cross-cell accesses pay, 0.039 at SLIT 32 and
/// 0.020 at 21. So XAPI's VM takes two nodes' whole cores at either
/// distance (issue 39 had it take one node's pairs at 32, pricing remote
/// memory as if the guest spread its accesses evenly: 0.400), and says
/// what the pairs would have cost.
#[test]
fn whole_cores_of_far_nodes_before_own_pairs() {
    for topo in [xapi_host_at(32), xapi_host_21()] {
        let d = plan_one(&topo, &req("big", 32, 32));
        assert_eq!(d.placement.nodes, nodes(&[0, 1]));
        assert_eq!(d.placement.guest.threads, 1);
        assert!(!d.notes.iter().any(|n| matches!(n, Note::SiblingsCheaper { .. })), "{:?}", d.notes);
        let alt = d.alternatives.first().expect("runner-up");
        assert_eq!(alt.verdict.code(), "costlier");
        assert!(alt.verdict.to_string().contains("own pairs 0.359"), "{}", alt.verdict);
    }
    let d = plan_one(&xapi_host_at(32), &req("big", 32, 32));
    assert_eq!(numaplace_plan::cost_of(&numaplace_plan::HostState::new(&xapi_host_at(32)), &d.placement).total(), 39);
}

#[test]
fn sixteen_vcpus_stay_on_one_node() {
    let d = plan_one(&xapi_host(), &req("half", 16, 32));
    assert_eq!(d.placement.nodes, nodes(&[0]));
    assert_eq!(d.placement.cpuset.to_string(), "0-15");
    assert_eq!(d.placement.guest.cells.len(), 1);
}

#[test]
fn twenty_four_vcpus_on_2x12_get_two_cells_of_twelve() {
    // At SLIT 21 (at 32 the same since issue 48:
    // whole_cores_of_far_nodes_before_own_pairs).
    let topo = Shape::new(2, 1, 12, 2, 128 * GIB).build_with(|_, _, d| if d == 32 { 21 } else { d });
    let d = plan_one(&topo, &req("sql", 24, 80));
    let g = &d.placement.guest;
    assert_eq!(g.cells.len(), 2);
    assert_eq!(g.cells[0].vcpus.to_string(), "0-11");
    assert_eq!(g.cells[1].vcpus.to_string(), "12-23");
    assert_eq!(g.cells[0].memory_bytes + g.cells[1].memory_bytes, 80 * GIB);
    assert_eq!(g.cells[0].memory_bytes, 40 * GIB);
    assert_eq!(g.cells[0].distances, vec![10, 21]);
    assert_eq!((g.sockets, g.cores, g.threads), (2, 12, 1));
    for pin in &d.placement.vcpus {
        let cell = if pin.vcpu < 12 { 0 } else { 1 };
        assert_eq!(pin.node, g.cells[cell].host_node);
    }
}

#[test]
fn four_small_vms_do_not_all_land_on_one_node() {
    let topo = xapi_host();
    let mut state = HostState::new(&topo);
    let reqs: Vec<Request> = (0..4).map(|i| req(&format!("vm{i}"), 4, 8)).collect();
    let out = plan_batch(&topo, &mut state, &reqs);
    let homes: Vec<NodeId> = out.iter().map(|d| d.as_ref().expect("fits").placement.nodes[0]).collect();
    assert_eq!(homes, nodes(&[0, 1, 0, 1]));
    assert!(out[1].as_ref().expect("fits").alternatives[0].verdict.to_string().contains("more loaded"));
}

#[test]
fn memory_beyond_one_node_spans_nodes() {
    let d = plan_one(&xapi_host(), &req("fat", 8, 100));
    assert_eq!(d.placement.nodes, nodes(&[0, 1]));
    assert_eq!(d.placement.memory, vec![(NodeId(0), 50 * GIB), (NodeId(1), 50 * GIB)]);
    assert_eq!(d.placement.guest.cells[0].vcpus.len(), 4);
}

#[test]
fn memory_split_keeps_128_mib_blocks() {
    let d = plan_one(&xapi_host(), &Request::new("odd", 32, 100 * GIB + (200 << 20)));
    let mem: Vec<u64> = d.placement.memory.iter().map(|m| m.1).collect();
    assert_eq!(mem.iter().sum::<u64>(), 100 * GIB + (200 << 20));
    assert_eq!(mem[0] % (128 << 20), 0);
}

#[test]
fn hot_add_on_a_spanning_vm_is_refused_unless_forced() {
    let topo = xapi_host();
    // 16 vCPUs at boot, up to 40: all 40 are planned, more than one
    // node's 32 threads, so two nodes.
    let mut r = req("hot", 16, 32);
    r.max_vcpus = Some(40);
    let state = HostState::new(&topo);
    let err = plan(&topo, &state, &r).expect_err("refused");
    assert_eq!(err.reason, RejectReason::HotAddWide { nodes: nodes(&[0, 1]) });
    assert!(err.reason.to_string().contains("hot-add"), "{}", err.reason);
    r.force = true;
    let d = plan(&topo, &state, &r).expect("forced");
    assert_eq!(d.placement.nodes.len(), 2);
    assert!(d.notes.contains(&Note::HotAddForced), "{:?}", d.notes);
    // Up to 32 fits one node's threads: one node with sibling threads is
    // planned rather than a refusal (or two nodes when forced).
    r.force = false;
    r.max_vcpus = Some(32);
    let d = plan(&topo, &state, &r).expect("one node");
    assert_eq!((d.placement.nodes.len(), d.placement.vcpus.len()), (1, 32));
    // Fits one node: hot-add does no harm there.
    let mut small = req("hot-small", 4, 16);
    small.max_vcpus = Some(8);
    let d = plan(&topo, &state, &small).expect("fits one node");
    assert_eq!((d.placement.vcpus.len(), d.placement.online_vcpus), (8, Some(4)));
    assert_eq!(d.placement.guest.cells.iter().map(|c| c.vcpus.len()).sum::<usize>(), 8);
}

#[test]
fn pairs_give_threads_two_and_sibling_pairs() {
    let topo = xapi_host();
    let mut r = req("pairs", 8, 16);
    r.smt = SmtPolicy::Pairs;
    let d = plan_one(&topo, &r);
    let g = &d.placement.guest;
    assert_eq!((g.sockets, g.cores, g.threads), (1, 4, 2));
    for k in 0..4 {
        let a = d.placement.vcpus[2 * k].pu;
        let b = d.placement.vcpus[2 * k + 1].pu;
        assert_eq!(b, a + 32, "vCPU {} and {} are siblings", 2 * k, 2 * k + 1);
    }
    assert_eq!(d.placement.cpuset.to_string(), "0-3,32-35");
}

#[test]
fn isolate_leaves_siblings_idle() {
    let topo = xapi_host();
    let mut state = HostState::new(&topo);
    let mut r = req("iso", 4, 8);
    r.smt = SmtPolicy::Isolate;
    let out = plan_batch(&topo, &mut state, &[r, req("next", 30, 8)]);
    let iso = &out[0].as_ref().expect("fits").placement;
    let pinned: CpuSet = iso.vcpus.iter().map(|p| p.pu).collect();
    assert_eq!(pinned.to_string(), "0-3");
    assert_eq!(iso.cpuset.to_string(), "0-3,32-35");
    // The idle siblings host the emulator threads and nobody else.
    assert_eq!(iso.emulator.to_string(), "32-35");
    let next = &out[1].as_ref().expect("fits").placement;
    assert!(next.vcpus.iter().all(|p| !iso.cpuset.contains(p.pu)));
}

#[test]
fn shared_mode_overcommits_over_the_nodes_cpus() {
    let topo = xapi_host();
    let mut state = HostState::new(&topo);
    let mut r = req("web", 48, 8);
    r.cpu_mode = CpuMode::Shared;
    r.overcommit = 2.0;
    let mut r2 = r.clone();
    r2.name = "web2".into();
    let out = plan_batch(&topo, &mut state, &[r.clone(), r2]);
    let p = &out[0].as_ref().expect("fits").placement;
    assert_eq!(p.cpu_mode, CpuMode::Shared);
    assert_eq!(p.nodes, nodes(&[0]));
    assert_eq!(p.cpuset, topo.node_online_cpus(0));
    let p2 = &out[1].as_ref().expect("fits").placement;
    assert_eq!(p2.nodes, nodes(&[1]), "the second goes to the less loaded node");
    // 32 threads x 2.0 = 64 slots per node, 16 left on each: 24 more
    // vCPUs span both nodes, 33 exceed what is left.
    let mut r3 = r;
    r3.name = "web3".into();
    r3.vcpus = 24;
    let d3 = plan(&topo, &state, &r3).expect("fits over two nodes");
    assert_eq!(d3.placement.nodes.len(), 2);
    let mut r4 = r3.clone();
    r4.vcpus = 33;
    r4.name = "web4".into();
    let err = plan(&topo, &state, &r4).expect_err("over the ratio");
    assert!(
        matches!(err.reason, RejectReason::CpuShort { resource: Resource::SharedSlots, needed: 33, .. }),
        "{:?}",
        err.reason
    );
}

#[test]
fn spread_uses_all_nodes_with_interleave() {
    let topo = Shape::new(2, 4, 8, 2, 32 * GIB).build();
    let d = plan_one(&topo, &with_policy(req("stream", 16, 64), Policy::Spread));
    assert_eq!(d.placement.nodes.len(), 8);
    assert_eq!(d.placement.memory_mode, MemoryMode::Interleave);
    assert!(d.placement.guest.cells.iter().all(|c| c.vcpus.len() == 2 && c.memory_bytes == 8 * GIB));
    let g = &d.placement.guest;
    assert_eq!(g.sockets * g.dies * g.cores * g.threads, 16);
    // Sockets follow the 2 packages, each holding its 4 cells as dies.
    assert_eq!((g.sockets, g.dies, g.cores), (2, 4, 2));
}

#[test]
fn a_small_spread_vm_says_why_some_cells_hold_memory_only() {
    // Spread interleaves memory over every node: a 2-vCPU VM then has
    // more nodes than vCPUs, and the note says so (not that no node had
    // free CPUs: they all have).
    let topo = Shape::new(2, 4, 8, 2, 32 * GIB).build();
    let d = plan_one(&topo, &with_policy(req("small", 2, 16), Policy::Spread));
    assert_eq!(d.placement.nodes.len(), 8);
    assert_eq!(d.placement.guest.cells.iter().filter(|c| c.vcpus.is_empty()).count(), 6);
    let note = d.notes.iter().find(|n| **n == Note::MemoryOnlyCells).expect("a memory-only note");
    assert_eq!(
        note.to_string(),
        "some guest cells hold memory only: the VM's memory is on more host nodes than its vCPUs"
    );
}

#[test]
fn too_big_requests_name_the_shortfall() {
    let topo = xapi_host();
    let state = HostState::new(&topo);
    let mut r = req("huge", 32, 16);
    r.smt = SmtPolicy::Isolate;
    r.max_nodes = Some(1);
    let err = plan(&topo, &state, &r).expect_err("too big");
    assert_eq!(
        err.reason,
        RejectReason::CpuShort {
            resource: Resource::FreeCores,
            needed: 32,
            max_nodes: 1,
            best: vec![NodeFree { node: NodeId(0), free: 16, memory: 0 }],
            best_total: 16,
        }
    );
    assert_eq!(err.reason.to_string(), "needs 32 free cores on one node; node0 has 16");
    let err = plan(&topo, &state, &req("fat", 8, 200)).expect_err("too big");
    assert_eq!(
        err.reason,
        RejectReason::MemoryShort {
            needed: 200 * GIB,
            hugepage: None,
            max_nodes: 2,
            best_total: 128 * GIB - 2 * numaplace_plan::vm_overhead_bytes(200 * GIB),
            overhead: numaplace_plan::vm_overhead_bytes(200 * GIB),
        }
    );
    // Each node keeps room for QEMU's overhead (64 MiB + 1/128 of 200 GiB).
    assert_eq!(
        err.reason.to_string(),
        "needs 200 GiB; the most any 2 nodes can offer is 125 GiB, keeping 1.6 GiB free for QEMU"
    );
    let err = plan(&topo, &state, &req("wide", 65, 8)).expect_err("too big");
    assert!(
        matches!(err.reason, RejectReason::CpuShort { resource: Resource::FreeThreads, needed: 65, max_nodes: 2, .. }),
        "{:?}",
        err.reason
    );
}

#[test]
fn partly_used_host_names_each_nodes_cores() {
    let topo = xapi_host();
    let mut state = HostState::new(&topo);
    for (name, node) in [("a", 0), ("b", 1)] {
        let mut r = req(name, 4, 4);
        r.devices.push(DeviceWish { address: None, node: Some(NodeId(node)), required: true });
        r.smt = SmtPolicy::Isolate;
        r.name = name.into();
        let d = plan(&topo, &state, &r).expect("fits");
        state.place(&d.placement).expect("records");
    }
    let mut r = req("big", 32, 8);
    r.smt = SmtPolicy::Isolate;
    let err = plan(&topo, &state, &r).expect_err("too big");
    let RejectReason::CpuShort { needed, best, .. } = &err.reason else { panic!("{:?}", err.reason) };
    assert_eq!((*needed, best.iter().map(|b| (b.node.0, b.free)).collect::<Vec<_>>()), (32, vec![(0, 12), (1, 12)]));
    assert_eq!(err.reason.to_string(), "needs 32 free cores on <= 2 nodes; node0 has 12, node1 has 12");
}

#[test]
fn required_and_preferred_devices_steer_the_node() {
    let topo = xapi_host();
    let mut r = req("gpu", 4, 8);
    r.devices.push(DeviceWish { address: None, node: Some(NodeId(1)), required: false });
    assert_eq!(plan_one(&topo, &r).placement.nodes, nodes(&[1]));
    let mut r = req("nic", 20, 8);
    r.devices.push(DeviceWish { address: None, node: Some(NodeId(1)), required: true });
    r.max_nodes = Some(1);
    let d = plan_one(&topo, &r);
    assert_eq!(d.placement.nodes, nodes(&[1]));
}

#[test]
fn emulator_threads_go_to_housekeeping_when_asked() {
    let topo = xapi_host();
    let mut r = req("vm", 4, 8);
    r.emulator = EmulatorPlacement::Housekeeping("0".parse().expect("set"));
    let d = plan_one(&topo, &r);
    assert_eq!(d.placement.emulator.to_string(), "0");
    r.emulator = EmulatorPlacement::Housekeeping("999".parse().expect("set"));
    assert!(plan(&topo, &HostState::new(&topo), &r).is_err());
}

#[test]
fn huge_pages_are_counted_per_node() {
    let mut shape = Shape::new(2, 1, 16, 2, 64 * GIB);
    shape.hugepages = Some((GIB, 20));
    let topo = shape.build();
    let mut r = req("hp", 8, 30);
    r.hugepage_bytes = Some(GIB);
    let d = plan_one(&topo, &r);
    assert_eq!(d.placement.memory, vec![(NodeId(0), 15 * GIB), (NodeId(1), 15 * GIB)]);
    r.memory_bytes = 41 * GIB;
    let err = plan(&topo, &HostState::new(&topo), &r).expect_err("only 40 pages");
    assert!(
        matches!(err.reason, RejectReason::MemoryShort { needed, hugepage: Some(GIB), .. } if needed == 41 * GIB),
        "{:?}",
        err.reason
    );
    r.memory_bytes = GIB + 1;
    assert!(plan(&topo, &HostState::new(&topo), &r).is_err());
}

#[test]
fn invalid_requests_are_rejected() {
    let topo = xapi_host();
    let state = HostState::new(&topo);
    assert!(plan(&topo, &state, &req("zero", 0, 8)).is_err());
    assert!(plan(&topo, &state, &Request::new("nomem", 2, 0)).is_err());
    let mut r = req("hp", 2, 8);
    r.hugepage_bytes = Some(3000);
    assert!(plan(&topo, &state, &r).is_err());
}

#[test]
fn uneven_capacity_gives_an_uneven_split_only_when_forced() {
    let topo = Shape::new(2, 1, 16, 1, 64 * GIB).build();
    let mut state = HostState::new(&topo);
    let mut blocker = req("blocker", 4, 4);
    blocker.devices.push(DeviceWish { address: None, node: Some(NodeId(0)), required: true });
    let out = plan_batch(&topo, &mut state, &[blocker, req("wide", 28, 16)]);
    let wide = &out[1].as_ref().expect("fits").placement;
    let sizes: Vec<usize> = wide.guest.cells.iter().map(|c| c.vcpus.len()).collect();
    assert_eq!(sizes, vec![12, 16]);
    // 3 and 4 dies of 4 cores: the two packages cannot be equal sockets,
    // so one socket holds all 7 dies (never 7 sockets).
    assert_eq!((wide.guest.sockets, wide.guest.dies, wide.guest.cores), (1, 7, 4));
}

#[test]
fn memory_only_nodes_become_memory_only_cells() {
    let mut shape = Shape::new(1, 2, 8, 2, 8 * GIB);
    shape.memory_nodes = vec![64 * GIB];
    let topo = shape.build();
    // HBM holds a VM's memory only when the request (or the host
    // profile) allows that kind: DRAM alone is 16 GiB here.
    let err = plan(&topo, &HostState::new(&topo), &req("hbm", 4, 40)).expect_err("DRAM only by default");
    assert_eq!(err.reason.code(), "memory-kind-short", "{}", err.reason);
    let mut r = req("hbm", 4, 40);
    r.memory_kinds = Some(vec![numaplace_topo::MemoryKind::Dram, numaplace_topo::MemoryKind::Hbm]);
    r.memory_tiers = numaplace_plan::MemoryTiers::Visible;
    let d = plan_one(&topo, &r);
    let cells = &d.placement.guest.cells;
    assert!(cells.iter().any(|c| c.vcpus.is_empty() && c.host_node == NodeId(2)), "{cells:?}");
    assert_eq!(cells.iter().map(|c| c.memory_bytes).sum::<u64>(), 40 * GIB);
    assert_eq!(d.placement.guest.sockets * d.placement.guest.cores, 4);
    // Hidden (the default): no memory-only cell for the HBM node; the CPU
    // cells are backed by their DRAM and the HBM, the memory per host
    // node unchanged.
    r.memory_tiers = numaplace_plan::MemoryTiers::Hidden;
    let hidden = plan_one(&topo, &r);
    assert_eq!(hidden.placement.memory, d.placement.memory);
    let cells = &hidden.placement.guest.cells;
    assert!(cells.iter().all(|c| !c.vcpus.is_empty()), "{cells:?}");
    assert_eq!(cells.iter().map(|c| c.memory_bytes).sum::<u64>(), 40 * GIB);
    let backed: Vec<&numaplace_plan::GuestCell> =
        cells.iter().filter(|c| c.memory_nodes.iter().any(|m| m.0 == NodeId(2))).collect();
    assert_eq!(backed.len(), 1, "{cells:?}");
    let own = backed[0].memory_nodes.iter().find(|m| m.0 == backed[0].host_node).map(|m| m.1);
    assert!(own.is_some_and(|b| b > 0), "its own DRAM first, then the HBM: {cells:?}");
    assert_eq!(backed[0].memory_nodes.iter().map(|m| m.1).sum::<u64>(), backed[0].memory_bytes);
}

#[test]
fn wide_vms_on_many_node_hosts_stay_within_a_socket() {
    // 8 sockets x 8 nodes x 8 cores x 2 threads: a 32-vCPU VM needs 4
    // nodes; the closest 4 are in one socket (distance 12, not 32).
    let topo = Shape::new(8, 8, 8, 2, 16 * GIB).build();
    let d = plan_one(&topo, &req("wide", 32, 48));
    assert_eq!(d.placement.nodes, nodes(&[0, 1, 2, 3]));
    assert!(d.placement.guest.cells.iter().all(|c| c.vcpus.len() == 8 && c.memory_bytes == 12 * GIB));
    assert!(d.placement.guest.cells[0].distances.iter().all(|&x| x <= 12));
    // 24 nodes: same rule.
    let topo = Shape::new(4, 6, 4, 2, 32 * GIB).build();
    let d = plan_one(&topo, &req("wide", 24, 48));
    assert_eq!(d.placement.nodes.len(), 6);
    assert!(d.placement.guest.cells[0].distances.iter().all(|&x| x <= 12));
}

#[test]
fn an_eight_cell_guest_on_a_full_16_node_host_is_rejected() {
    let topo = Shape::new(2, 8, 8, 2, 32 * GIB).build();
    let mut state = HostState::new(&topo);
    let fill: Vec<Request> = (0..16).map(|i| req(&format!("fill{i}"), 16, 16)).collect();
    assert!(plan_batch(&topo, &mut state, &fill).iter().all(|d| d.is_ok()));
    let mut r = req("eight", 64, 64);
    r.max_nodes = Some(8);
    let err = plan(&topo, &state, &r).expect_err("full");
    let RejectReason::CpuShort { resource, needed: 64, max_nodes: 8, best, .. } = &err.reason else {
        panic!("{:?}", err.reason)
    };
    assert_eq!(*resource, Resource::FreeThreads);
    assert_eq!(best.first().map(|b| (b.node, b.free)), Some((NodeId(0), 0)));
}

#[test]
fn plans_chain_through_recorded_placements() {
    let topo = xapi_host();
    let mut first = HostState::new(&topo);
    let out = plan_batch(&topo, &mut first, &[req("a", 12, 24), req("b", 12, 24)]);
    // A new state built from the recorded placements plans the same way.
    let mut again = HostState::new(&topo);
    for d in &out {
        again.place(&d.as_ref().expect("fits").placement).expect("records");
    }
    let next = req("c", 8, 8);
    assert_eq!(plan(&topo, &first, &next), plan(&topo, &again, &next));
    // Recording the same VM twice, or a conflicting one, is refused.
    let a = &out[0].as_ref().expect("fits").placement;
    assert!(matches!(again.place(a), Err(numaplace_plan::StateError::DuplicateVm(_))));
    let mut clash = (**a).clone();
    clash.vm = "clash".into();
    assert!(matches!(again.place(&clash), Err(numaplace_plan::StateError::PuTaken { .. })));
}

#[test]
fn a_dedicated_vm_takes_its_cpus_out_of_an_earlier_shared_vms_floating_set() {
    // One node of 8 cores x 2 threads: the shared VM floats over all 16
    // PUs, then a dedicated VM takes 4 whole cores of them.
    let topo = Shape::new(1, 1, 8, 2, 64 * GIB).build();
    let mut shared = req("web", 2, 4);
    shared.cpu_mode = CpuMode::Shared;
    shared.overcommit = 4.0;
    let mut state = HostState::new(&topo);
    let out = plan_batch(&topo, &mut state, &[shared, req("db", 4, 8)]);
    let web = out[0].as_ref().unwrap_or_else(|e| panic!("{e}"));
    let db = out[1].as_ref().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(web.placement.cpuset.len(), 16, "planned over the whole node");
    let now = &state.placements()[0];
    assert!(now.cpuset.is_disjoint(&db.placement.cpuset), "web {} vs db {}", now.cpuset, db.placement.cpuset);
    assert_eq!(now.cpuset.len(), 16 - db.placement.cpuset.len());
    assert_eq!(now.emulator, now.cpuset, "the emulator set follows the floating set");
    assert!(
        db.notes.iter().any(
            |n| matches!(n, Note::ShrinksShared { vm, lost, .. } if &**vm == "web" && **lost == db.placement.cpuset)
        ),
        "{:?}",
        db.notes
    );
}

#[test]
fn a_size_in_a_reason_is_exact_where_rounding_would_be_false() {
    let topo = xapi_host();
    let mut r = req("odd", 2, 1);
    r.memory_bytes = 1025 << 20;
    r.hugepage_bytes = Some(2 << 20);
    let err = plan(&topo, &HostState::new(&topo), &r).expect_err("not whole pages");
    assert_eq!(err.reason, RejectReason::NotWholePages { memory: 1025 << 20, page: 2 << 20 });
    assert_eq!(err.reason.to_string(), "memory 1025 MiB is not a whole number of 2 MiB huge pages");
    assert!(err.reason.is_bad_request());
}

#[test]
fn both_vms_say_when_one_takes_the_others_idle_siblings() {
    // One node of 4 cores x 2 threads: `a` takes the 4 whole cores, so
    // `b` can only have their idle siblings.
    let topo = Shape::new(1, 1, 4, 2, 16 * GIB).build();
    let mut state = HostState::new(&topo);
    let out = plan_batch(&topo, &mut state, &[req("a", 4, 2), req("b", 2, 2)]);
    let a = out[0].as_ref().expect("a placed");
    let b = out[1].as_ref().expect("b placed");
    assert!(b.notes.contains(&Note::SiblingsOf { vms: vec!["a".to_string()], vcpus: 2 }), "{:?}", b.notes);
    assert!(a.notes.contains(&Note::SiblingsTakenBy { vm: "b".to_string(), vcpus: 2 }), "{:?}", a.notes);
    assert!(a.notes.iter().any(|n| n.to_string().contains("b was given the idle sibling threads")));
    // A VM on whole cores of its own says nothing of the kind.
    let big = Shape::new(1, 1, 8, 2, 16 * GIB).build();
    let mut state = HostState::new(&big);
    let out = plan_batch(&big, &mut state, &[req("a", 4, 2), req("c", 2, 2)]);
    assert_eq!(out.iter().flatten().count(), 2);
    assert!(out.iter().flatten().all(|d| !d.notes.iter().any(|n| matches!(n, Note::SiblingsOf { .. }))));
}
