//! The no-NUMA baseline on one host: where a VM would float, and the
//! slots and core sharing that floating gives.

use super::*;

/// Slots in use on a node by pinned or shared vCPUs (dedicated threads
/// count whole, even idle reserved siblings).
pub(super) fn node_used_slots(facts: &KindFacts, state: &HostState, node: usize) -> u64 {
    let Some(nf) = facts.nodes.get(node) else { return 0 };
    let mut used = 0u64;
    for core in facts.cores.get(nf.cores.clone()).unwrap_or(&[]) {
        for &pu in core {
            used += if state.pu_taken(pu) { 1 } else { u64::from(state.pu_shared_load(pu)) };
        }
    }
    used
}

/// The no-NUMA baseline's decision on one host, changing nothing: the VM
/// floats over every thread, its memory goes to the nodes in proportion
/// to their size (what first touch by vCPUs spread evenly gives), capped
/// by what each has free and overflowing to nodes with room. As a
/// placement the fleet's state can hold: shared vCPUs, each counted on
/// the least loaded thread of the least loaded core (the scheduler fills
/// idle cores first, so the fleet's free cores and threads read as the
/// baseline's), its memory per node. Refused when the host lacks vCPU
/// slots (threads times the overcommit ratio, less the vCPUs floating)
/// or memory (the fleet's free memory: the nodes' less their reserve and
/// QEMU's overhead).
pub(crate) fn float(
    facts: &KindFacts,
    state: &HostState,
    free: Free,
    request: &Request,
) -> Result<Decision, Rejection> {
    let n = facts.nodes.len();
    let vm = &request.name;
    let refuse = |reason| Err(Rejection { vm: vm.clone(), reason });
    let floating: u64 = facts.nodes.iter().filter_map(|f| state.shared_load(f.id)).sum();
    let slots = u64::from(facts.total_slots).saturating_sub(floating);
    if slots < u64::from(request.vcpus) {
        return refuse(RejectReason::CpuShort {
            resource: Resource::SharedSlots,
            needed: u64::from(request.vcpus),
            max_nodes: n,
            best: Vec::new(),
            best_total: slots,
        });
    }
    let short = |best_total| RejectReason::MemoryShort {
        needed: request.memory_bytes,
        hugepage: None,
        max_nodes: n,
        best_total,
        overhead: state.reservations().overhead.bytes(request.memory_bytes),
    };
    if free.memory < request.memory_bytes {
        return refuse(short(free.memory));
    }
    let room: Vec<u64> = facts.nodes.iter().map(|f| state.free_memory_bytes(f.id).unwrap_or(0)).collect();
    let mut got = vec![0u64; n];
    let total = facts.total_memory.max(1);
    for i in 0..n {
        let want = (u128::from(request.memory_bytes) * u128::from(facts.nodes[i].memory) / u128::from(total)) as u64;
        got[i] = want.min(room[i]);
    }
    let mut left = request.memory_bytes - got.iter().sum::<u64>().min(request.memory_bytes);
    for i in 0..n {
        let take = (room[i] - got[i]).min(left);
        got[i] += take;
        left -= take;
    }
    if left > 0 {
        return refuse(short(room.iter().sum()));
    }
    // Each vCPU on the thread with the least loaded core, then the least
    // loaded itself, then the lowest number, counting this VM's vCPUs as
    // they are put down.
    let mut core_load: Vec<u32> = Vec::with_capacity(facts.cores.len());
    // (its own load, number, core position, node position)
    let mut threads: Vec<(u32, u32, usize, usize)> = Vec::with_capacity(facts.total_pus as usize);
    for (i, node) in facts.nodes.iter().enumerate() {
        for core in facts.cores.get(node.cores.clone()).unwrap_or(&[]) {
            let c = core_load.len();
            core_load.push(core.iter().map(|&pu| state.pu_shared_load(pu)).sum());
            threads.extend(core.iter().map(|&pu| (state.pu_shared_load(pu), pu, c, i)));
        }
    }
    if threads.is_empty() {
        return refuse(RejectReason::NoNodes);
    }
    let mut vcpus = Vec::with_capacity(request.vcpus as usize);
    for v in 0..request.vcpus {
        let Some(t) = (0..threads.len()).min_by_key(|&k| (core_load[threads[k].2], threads[k].0, threads[k].1)) else {
            break;
        };
        let (_, pu, c, i) = threads[t];
        threads[t].0 += 1;
        core_load[c] += 1;
        vcpus.push(VcpuPin { vcpu: v, pu, node: facts.nodes[i].id });
    }
    let placement = Placement {
        vm: vm.clone(),
        nodes: (0..n).filter(|&i| got[i] > 0).map(|i| facts.nodes[i].id).collect(),
        cpu_mode: CpuMode::Shared,
        vcpus,
        cpuset: threads.iter().map(|t| t.1).collect(),
        emulator: numaplace_topo::CpuSet::new(),
        memory: (0..n).filter(|&i| got[i] > 0).map(|i| (facts.nodes[i].id, got[i])).collect(),
        memory_bytes: request.memory_bytes,
        memory_mode: MemoryMode::Interleave,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology { sockets: 1, dies: 1, cores: request.vcpus, threads: 1, cells: vec![] },
    };
    Ok(Decision { placement: Arc::new(placement), alternatives: Vec::new(), notes: Vec::new() })
}

/// Busy vCPUs that share a core when `v` of them float over `cores`
/// cores: the kernel's scheduler puts a runnable task on an idle core
/// first, so none share up to one per core; beyond that each extra vCPU
/// doubles up with one that was alone.
pub(super) fn pool_shared(v: u64, cores: u64) -> u64 {
    if v <= cores {
        0
    } else {
        v.min(2 * (v - cores))
    }
}
