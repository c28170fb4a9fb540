//! Property tests: random host shapes (up to 64 nodes, uneven memory,
//! memory-less and CPU-less nodes, huge page pools) and random request
//! streams. Whatever is asked, a plan never double-books a PU, never puts
//! more memory or huge pages on a node than it has, keeps every vCPU in
//! its cell's host node, and is the same every time. Since issue 39:
//! cells are even when a set of nodes allows it, no guest has more dies
//! than the host nodes it spans unless its cells could not be even, and a
//! VM short of whole cores takes small VMs' idle siblings before a large
//! VM's.

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
        // cells hold whole 128 MiB blocks where the nodes allow, else
        // whole 2 MiB units (issue 48: a VM that fits the free bytes is
        // placed).
        let overhead = numaplace_plan::vm_overhead_bytes(r.memory_bytes);
        let allowed = |i: usize| any_kind || topo.memory_kind(i) == numaplace_topo::MemoryKind::Dram;
        let memory: u64 = topo.nodes().iter().enumerate().filter(|&(i, _)| allowed(i)).map(|(_, n)| {
            let free = n.memory_bytes.saturating_sub(n.hugepages.iter().map(|h| h.size_bytes * h.total).sum::<u64>())
                .saturating_sub(overhead);
            free / (2 << 20) * (2 << 20)
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

    /// Issue 39: on an empty host, a dedicated VM's cells are even when
    /// some set of nodes within its `max_nodes`, at least as many as it
    /// runs on, gives each an equal share of three or more vCPUs on whole
    /// cores with its memory; and a guest has more dies than the host
    /// nodes it runs on only when its cells are uneven.
    #[test]
    fn cells_are_even_when_they_can_be(shape in shapes(), vcpus in 2u32..=96, blocks in 1u64..=2048,
                                       max_nodes in prop::option::of(1u32..=8), smt_aware in any::<bool>()) {
        let topo = shape.build();
        let state = HostState::new(&topo);
        let mut r = Request::new("even", vcpus, blocks * MIB128);
        r.max_nodes = max_nodes;
        r.policy = if smt_aware { Policy::SmtAware } else { Policy::Balanced };
        let Ok(d) = plan(&topo, &state, &r) else { return Ok(()) };
        check_placement(&topo, &r, &d.placement);
        let g = &d.placement.guest;
        let sizes: Vec<usize> = g.cells.iter().map(|c| c.vcpus.len()).filter(|&n| n > 0).collect();
        let even = sizes.windows(2).all(|w| w[0] == w[1]);
        if even {
            prop_assert!(g.sockets * g.dies <= sizes.len() as u32, "{g:?}");
            return Ok(());
        }
        // Uneven: no node set of k nodes (k from the cells used to the
        // limit) takes an equal share of >= 3 vCPUs on whole cores each,
        // with its share of the memory besides QEMU's overhead.
        let overhead = numaplace_plan::vm_overhead_bytes(r.memory_bytes);
        let k_max = max_nodes.map_or(topo.nodes().len(), |m| (m as usize).min(topo.nodes().len()));
        for k in sizes.len()..=k_max {
            let share = u64::from(vcpus) / k as u64;
            if !u64::from(vcpus).is_multiple_of(k as u64) || share < 3 {
                continue;
            }
            let memory_share = (r.memory_bytes / k as u64).div_ceil(MIB128) * MIB128;
            let fit = (0..topo.nodes().len())
                .filter(|&i| {
                    let node = &topo.nodes()[i];
                    let pages: u64 = node.hugepages.iter().map(|h| h.size_bytes * h.total).sum();
                    let free = node.memory_bytes.saturating_sub(pages).saturating_sub(overhead);
                    topo.cores_of_node(i).count() as u64 >= share && free >= memory_share + MIB128
                })
                .count();
            prop_assert!(fit < k, "cells {sizes:?} uneven, but {fit} nodes take {share} vCPUs each (k = {k}): {g:?}");
        }
    }

    /// Issue 39, item 4: a prefer-cores VM that takes the idle sibling of
    /// a dedicated VM leaves no free thread on that node beside a smaller
    /// VM's vCPU (or a VM whose guest was told pairs): the siblings of
    /// small VMs go first, a large VM's last.
    #[test]
    fn large_vms_siblings_go_last(shape in shapes(), reqs in requests()) {
        let topo = shape.build();
        let mut state = HostState::new(&topo);
        for r in &reqs {
            let Ok(d) = plan(&topo, &state, r) else { continue };
            let p = d.placement.clone();
            state.place(&p).expect("a planned placement records");
            if p.cpu_mode != CpuMode::Dedicated || r.smt != SmtPolicy::PreferCores {
                continue;
            }
            // Weight of a core for this VM: the vCPUs of the largest other
            // dedicated VM on it (0 for a guest told pairs).
            let weight = |core: &CpuSet| -> u32 {
                core.iter()
                    .filter_map(|pu| {
                        state.placements().iter().find(|o| {
                            o.vm != p.vm && o.cpu_mode == CpuMode::Dedicated && o.vcpus.iter().any(|v| v.pu == pu)
                        })
                    })
                    .map(|o| if o.guest.threads > 1 { 0 } else { o.vcpus.len() as u32 })
                    .max()
                    .unwrap_or(0)
            };
            let free = |pu: u32| !state.pu_taken(pu) && state.pu_shared_load(pu) == 0
                && !state.pu_reserved(pu) && !state.pu_shared_pool(pu);
            for pin in &p.vcpus {
                let Some(ci) = topo.pu(pin.pu).and_then(|x| x.core) else { continue };
                let taken = weight(&topo.cores()[ci].cpus);
                if taken == 0 {
                    continue;
                }
                let node = topo.pu(pin.pu).and_then(|x| x.node).expect("a node");
                for other in topo.cores_of_node(node) {
                    let cpus = &topo.cores()[other].cpus;
                    let w = weight(cpus);
                    let held = cpus.iter().any(|pu| !free(pu));
                    prop_assert!(!(held && w < taken && cpus.iter().any(free)),
                        "{} took a sibling of a {taken}-vCPU VM while core {other} (next to {w} vCPUs) has a free thread", p.vm);
                }
            }
        }
    }
}

/// Dedicated VMs of at most this many vCPUs are small (the planner's
/// `SMALL_VM_VCPUS`, docs/plan.md § Whose idle siblings go first).
const SMALL: u32 = 8;

/// The real hosts the host-wide sibling property runs on: EPYC corona (8
/// nodes of two CCX), a two-socket Xeon, the 24-node Xeon (the grown
/// search) and POWER9 lassen (four threads per core).
fn fixture_hosts() -> &'static [numaplace_topo::Topology] {
    static HOSTS: std::sync::OnceLock<Vec<numaplace_topo::Topology>> = std::sync::OnceLock::new();
    HOSTS.get_or_init(|| {
        [
            "mpibind/epyc-corona.xml",
            "hwloc/xml/32em64t-2n8c2t-pci-normalio.xml",
            "hwloc/xml/192em64t-24n8c2t.xml",
            "mpibind/coral-lassen.xml",
        ]
        .iter()
        .map(|rel| {
            let path = format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).expect("fixture");
            numaplace_read::hwloc::parse(&text).expect("reads")
        })
        .collect()
    })
}

/// Dedicated `balanced` VMs, mostly small `prefer-cores` ones, some told
/// pairs (`smt: pairs`) and some large (16-64 vCPUs), with little memory,
/// so CPUs run out first.
fn dedicated_streams() -> impl Strategy<Value = Vec<Request>> {
    let one = (prop_oneof![6 => 1u32..=4, 1 => 16u32..=64], 1u64..=8, 0u8..6).prop_map(|(vcpus, blocks, kind)| {
        let mut r = Request::new("vm", vcpus, blocks * MIB128);
        if kind == 0 {
            r.smt = SmtPolicy::Pairs;
        }
        r
    });
    prop::collection::vec(one, 20..120).prop_map(|mut v| {
        for (i, r) in v.iter_mut().enumerate() {
            r.name = format!("vm{i}");
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Issue 39's acceptance, host-wide: no vCPU of a large dedicated VM
    /// (more than 8 vCPUs) shares a core with another VM while a small
    /// VM's sibling is free. A `prefer-cores` VM placed on one node that
    /// took the idle sibling of a large VM leaves no other node where it
    /// would have fitted (its memory, and as many free threads as vCPUs on
    /// cores of small VMs, VMs told pairs or none). Inside a node the
    /// stricter order holds (`large_vms_siblings_go_last`).
    #[test]
    fn a_large_vms_siblings_wait_for_every_smaller_ones_on_the_host(host in 0usize..4, reqs in dedicated_streams()) {
        let topo = &fixture_hosts()[host];
        let mut state = HostState::new(topo);
        for r in &reqs {
            let Ok(d) = plan(topo, &state, r) else { continue };
            let p = d.placement.clone();
            // Weight of a core: the vCPUs of the largest dedicated VM on it
            // (0 for a guest told pairs, or none).
            let weight = |core: &CpuSet| -> u32 {
                core.iter()
                    .filter_map(|pu| state.placements().iter().find(|o| o.vcpus.iter().any(|v| v.pu == pu)))
                    .map(|o| if o.guest.threads > 1 { 0 } else { o.vcpus.len() as u32 })
                    .max()
                    .unwrap_or(0)
            };
            let free = |pu: u32| !state.pu_taken(pu);
            let core_of = |pu: u32| topo.pu(pu).and_then(|x| x.core);
            let taken = p.vcpus.iter().filter_map(|v| core_of(v.pu)).map(|c| weight(&topo.cores()[c].cpus)).max();
            let w = taken.unwrap_or(0);
            if r.smt == SmtPolicy::PreferCores && p.nodes.len() == 1 && w > SMALL {
                let overhead = numaplace_plan::vm_overhead_bytes(r.memory_bytes);
                for (i, node) in topo.nodes().iter().enumerate().filter(|(_, n)| n.id != p.nodes[0]) {
                    let memory = state.free_memory_bytes(node.id).unwrap_or(0);
                    if memory < r.memory_bytes + overhead + MIB128 {
                        continue;
                    }
                    let lighter: usize = topo
                        .cores_of_node(i)
                        .map(|c| &topo.cores()[c].cpus)
                        .filter(|cpus| weight(cpus) <= SMALL)
                        .map(|cpus| cpus.iter().filter(|&pu| free(pu)).count())
                        .sum();
                    prop_assert!(lighter < r.vcpus as usize,
                        "{} ({} vCPUs) took a sibling of a {w}-vCPU VM on node{} while node{} has {lighter} free threads beside small VMs",
                        p.vm, r.vcpus, p.nodes[0].0, node.id.0);
                }
            }
            state.place(&p).expect("a planned placement records");
        }
    }
}
