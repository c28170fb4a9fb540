//! The host's settings the planner carries in its reservations (issue 37):
//! the QEMU overhead rule, a host profile setting, is what every planner
//! call keeps free, and a placement made elsewhere is checked against the
//! reserved CPUs and the shared pool before it is carried out.

use numaplace_plan::{
    plan, vm_overhead_bytes, CpuMode, Floating, HostState, Overhead, RejectReason, Request, ReservationConflict,
    Reservations,
};
use numaplace_topo::{NodeId, Topology};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn host() -> Topology {
    numaplace_read::read_source("1 socket x 4 cores x 2 threads, 8GiB per node").expect("host")
}

#[test]
fn the_default_rule_is_64_mib_and_one_128th() {
    for m in [0, 1, 512 * MIB, 7 * GIB + 3, 1 << 50] {
        assert_eq!(Overhead::default().bytes(m), (64 * MIB) + m / 128, "{m}");
        assert_eq!(vm_overhead_bytes(m), Overhead::default().bytes(m));
    }
    assert_eq!(Overhead { fixed_bytes: 0, per_gib_bytes: 16 * MIB }.bytes(4 * GIB), 64 * MIB);
    assert_eq!(Overhead { fixed_bytes: u64::MAX, per_gib_bytes: u64::MAX }.bytes(u64::MAX), u64::MAX);
}

/// A host whose QEMU needs 1 GiB beside each VM: a 7.5 GiB VM no longer
/// fits its 8 GiB node, and the reason says what was kept for QEMU; a
/// smaller VM is placed and its overhead counted on its node, and given
/// back when it is removed.
#[test]
fn the_hosts_overhead_rule_is_kept_free_and_given_back() {
    let topo = host();
    let default = HostState::new(&topo);
    plan(&topo, &default, &Request::new("big", 2, 7680 * MIB)).expect("fits with the default rule");
    let rule = Overhead { fixed_bytes: GIB, per_gib_bytes: 0 };
    let mut state =
        HostState::with_reservations(&topo, Reservations { overhead: rule, ..Reservations::default() }).expect("state");
    let err = plan(&topo, &state, &Request::new("big", 2, 7680 * MIB)).expect_err("not with 1 GiB for QEMU");
    assert!(matches!(err.reason, RejectReason::MemoryShort { overhead, .. } if overhead == GIB), "{:?}", err.reason);
    assert!(err.reason.to_string().ends_with("keeping 1 GiB free for QEMU"), "{}", err.reason);
    let before = state.clone();
    let d = plan(&topo, &state, &Request::new("small", 2, 4 * GIB)).expect("fits");
    state.place(&d.placement).expect("place");
    assert_eq!(state.overhead_used(0), GIB);
    assert_eq!(state.free_memory_bytes(NodeId(0)), Some(8 * GIB - 4 * GIB - GIB));
    state.remove("small").expect("remove");
    assert_eq!(state, before, "removing gives the overhead back");
}

#[test]
fn a_placement_on_reserved_or_pool_cpus_is_a_conflict() {
    let topo = host();
    let d = plan(&topo, &HostState::new(&topo), &Request::new("v", 2, GIB)).expect("placed");
    let p: &numaplace_plan::Placement = &d.placement;
    let first = p.vcpus[0].pu;
    let reserved = Reservations { cpus: [first].into_iter().collect(), ..Reservations::default() };
    assert_eq!(reserved.conflict(p), Some(ReservationConflict::ReservedCpu { vcpu: Some(0), cpu: first }));
    assert_eq!(
        reserved.conflict(p).map(|c| c.to_string()).as_deref(),
        Some(format!("pins vCPU 0 on CPU {first}, which the host reserves for itself").as_str())
    );
    let pool = Reservations { shared_cpus: [p.vcpus[1].pu].into_iter().collect(), ..Reservations::default() };
    assert_eq!(pool.conflict(p), Some(ReservationConflict::SharedPool { vcpu: 1, cpu: p.vcpus[1].pu }));
    assert_eq!(Reservations::default().conflict(p), None);
    // A mixed VM's floating vCPU belongs in the pool.
    let mut mixed = numaplace_plan::Placement::clone(p);
    mixed.floating = vec![Floating {
        node: NodeId(0),
        vcpus: [1].into_iter().collect(),
        cpus: [p.vcpus[1].pu].into_iter().collect(),
    }];
    assert_eq!(pool.conflict(&mixed), None);
    // A shared VM floating over a reserved CPU.
    let mut floating = numaplace_plan::Placement::clone(p);
    floating.cpu_mode = CpuMode::Shared;
    floating.cpuset = (0..8).collect();
    let r = Reservations { cpus: [7].into_iter().collect(), ..Reservations::default() };
    assert_eq!(r.conflict(&floating), Some(ReservationConflict::ReservedCpu { vcpu: None, cpu: 7 }));
}
