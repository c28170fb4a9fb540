//! Property tests: random host shapes (up to 64 nodes, uneven memory,
//! memory-less and CPU-less nodes, huge page pools) and random request
//! streams. Whatever is asked, a plan never double-books a PU, never puts
//! more memory or huge pages on a node than it has, keeps every vCPU in
//! its cell's host node, and is the same every time.

mod common;

use common::{check_placement, checked_batch, Shape, GIB};
use numaplace_plan::{plan, plan_batch, CpuMode, DeviceWish, HostState, Policy, Request, Reservations, SmtPolicy};
use numaplace_topo::{CpuSet, NodeId};
use proptest::prelude::*;

const MIB128: u64 = 128 << 20;

fn shapes() -> impl Strategy<Value = Shape> {
    let small =
        (1u32..=2, 1u32..=4, 1u32..=12, 1u32..=4, prop::collection::vec(0u64..=64, 1..=8), 0usize..=2, any::<bool>())
            .prop_map(|(s, n, c, t, mem, extra, pages)| {
                let mut shape = Shape::new(s, n, c, t, 0);
                shape.memory = mem.into_iter().map(|g| g * GIB).collect();
                shape.memory_nodes = vec![32 * GIB; extra];
                if pages {
                    shape.hugepages = Some((2 << 20, 4096));
                }
                shape
            });
    prop_oneof![
        4 => small,
        1 => Just(Shape::new(2, 4, 8, 2, 64 * GIB)),
        1 => Just(Shape::new(4, 6, 4, 2, 32 * GIB)),
        1 => Just(Shape::new(8, 8, 2, 2, 16 * GIB)),
    ]
}

fn requests() -> impl Strategy<Value = Vec<Request>> {
    let one = (
        1u32..=40,
        1u64..=200,
        0usize..4,
        0usize..4,
        any::<bool>(),
        1u32..=4,
        prop::option::of(1u32..=4),
        any::<bool>(),
        prop::option::of((0u32..6, any::<bool>())),
    )
        .prop_map(|(vcpus, blocks, smt, policy, shared, ratio, max_nodes, pages, device)| {
            let mut r = Request::new("vm", vcpus, blocks * MIB128 + if pages { 0 } else { blocks % 3 * 4096 });
            r.smt = [SmtPolicy::PreferCores, SmtPolicy::Pairs, SmtPolicy::Isolate, SmtPolicy::Any][smt];
            r.policy = [Policy::Compact, Policy::SmtAware, Policy::Balanced, Policy::Spread][policy];
            if shared {
                r.cpu_mode = CpuMode::Shared;
                r.overcommit = f64::from(ratio);
            }
            r.max_nodes = max_nodes;
            if pages {
                r.hugepage_bytes = Some(2 << 20);
            }
            // A device on a node (which may not exist), required or not:
            // a required one's node must run vCPUs and hold memory
            // (check_placement), or the VM is refused.
            if let Some((node, required)) = device {
                r.devices.push(DeviceWish { address: None, node: Some(NodeId(node)), required });
            }
            r
        });
    prop::collection::vec(one, 1..25).prop_map(|mut v| {
        for (i, r) in v.iter_mut().enumerate() {
            r.name = format!("vm{i}");
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn batches_never_overbook(shape in shapes(), reqs in requests()) {
        let topo = shape.build();
        let mut state = HostState::new(&topo);
        let out = plan_batch(&topo, &mut state, &reqs);
        let placed = checked_batch(&topo, &reqs, &out, "random host");
        // The state read back from the placements equals the one built.
        let mut again = HostState::new(&topo);
        for p in &placed {
            again.place(p).expect("a planned placement records");
        }
        prop_assert_eq!(again.taken_pus(), state.taken_pus());
        prop_assert_eq!(again.placements(), state.placements());
        // No shared VM may float onto a CPU a dedicated VM holds, even
        // one dedicated after it.
        let taken = state.taken_pus();
        for p in state.placements().iter().filter(|p| p.cpu_mode == CpuMode::Shared) {
            prop_assert!(p.cpuset.is_disjoint(&taken), "{} floats over dedicated {}", p.vm, p.cpuset.intersection(&taken));
            prop_assert!(p.vcpus.iter().all(|v| p.cpuset.contains(v.pu)), "{} lost its own PUs", p.vm);
        }
        // Same input, same output.
        let mut state2 = HostState::new(&topo);
        prop_assert_eq!(plan_batch(&topo, &mut state2, &reqs), out);
    }

    /// A host with a shared pool (the first `per_node` CPUs of each node)
    /// and a stream of dedicated, shared (some overcommitting memory) and
    /// mixed VMs: no dedicated CPU in the pool, no shared or floating vCPU
    /// outside it, the state rebuilt from the placements is the same, and
    /// removing every VM gives back the empty host.
    #[test]
    fn pools_hold_with_mixed_and_overcommitted_vms(shape in shapes(), reqs in requests(), per_node in 1usize..=3,
                                                   kinds in prop::collection::vec(0u8..3, 25)) {
        let topo = shape.build();
        let pool: CpuSet = topo.nodes().iter().flat_map(|n| n.cpus.iter().take(per_node)).collect();
        let reservations = Reservations { shared_cpus: pool.clone(), ..Reservations::default() };
        let mut state = HostState::with_reservations(&topo, reservations).expect("pool");
        let empty = state.clone();
        let reqs: Vec<Request> = reqs.into_iter().zip(kinds).map(|(mut r, kind)| {
            match kind {
                // Mixed VMs small enough to fit often: 2-9 vCPUs, a third
                // of them floating, at most 4 GiB.
                1 if r.cpu_mode == CpuMode::Dedicated => {
                    r.vcpus = r.vcpus % 8 + 2;
                    r.memory_bytes = (r.memory_bytes % (4 * GIB)).max(MIB128) / MIB128 * MIB128;
                    r.hugepage_bytes = None;
                    r.shared_vcpus = CpuSet::range(0, (r.vcpus / 3).max(1) - 1);
                }
                2 if r.cpu_mode == CpuMode::Shared && r.hugepage_bytes.is_none() => r.memory_overcommit = 1.5,
                _ => {}
            }
            r
        }).collect();
        let out = plan_batch(&topo, &mut state, &reqs);
        let placed = checked_batch(&topo, &reqs, &out, "pooled host");
        for p in &placed {
            if p.cpu_mode == CpuMode::Dedicated {
                prop_assert!(p.cpuset.is_disjoint(&pool), "{} holds {} of the pool", p.vm, p.cpuset.intersection(&pool));
            }
            let none = CpuSet::new();
            let floating = p.run_cpus().difference(if p.cpu_mode == CpuMode::Dedicated { &p.cpuset } else { &none });
            prop_assert!(floating.is_subset(&pool), "{} floats over {} outside the pool", p.vm, floating.difference(&pool));
        }
        let mut again = HostState::with_reservations(&topo, state.reservations().clone()).expect("pool");
        for p in &placed {
            again.place(p).expect("a planned placement records");
        }
        prop_assert_eq!(&again, &state);
        for p in &placed {
            state.remove(&p.vm).expect("placed");
        }
        prop_assert_eq!(state, empty);
    }

    #[test]
    fn what_fits_an_empty_host_is_placed(shape in shapes(), vcpus in 1u32..=128, blocks in 1u64..=4096,
                                         any_smt in any::<bool>(), any_kind in any::<bool>()) {
        let topo = shape.build();
        let state = HostState::new(&topo);
        let mut r = Request::new("fit", vcpus, blocks * MIB128);
        r.smt = if any_smt { SmtPolicy::Any } else { SmtPolicy::PreferCores };
        // Memory of another kind (the shapes' memory-only nodes are HBM)
        // counts only for a request that allows it.
        if any_kind {
            r.memory_kinds = Some(numaplace_topo::MemoryKind::ALL.to_vec());
        }
        let pus = topo.pu_count() as u64;
        // Every node the VM uses keeps room for QEMU's overhead, and guest
        // cells hold whole 128 MiB blocks (the memory is a whole number of
        // them here).
        let overhead = numaplace_plan::vm_overhead_bytes(r.memory_bytes);
        let allowed = |i: usize| any_kind || topo.memory_kind(i) == numaplace_topo::MemoryKind::Dram;
        let memory: u64 = topo.nodes().iter().enumerate().filter(|&(i, _)| allowed(i)).map(|(_, n)| {
            let free = n.memory_bytes.saturating_sub(n.hugepages.iter().map(|h| h.size_bytes * h.total).sum::<u64>())
                .saturating_sub(overhead);
            free / MIB128 * MIB128
        }).sum();
        let fits = u64::from(vcpus) <= pus && r.memory_bytes <= memory;
        let got = plan(&topo, &state, &r);
        if fits {
            let d = got.map_err(|e| TestCaseError::fail(e.reason.to_string()))?;
            check_placement(&topo, &r, &d.placement);
        } else {
            prop_assert!(got.is_err());
        }
    }
}
