//! What a placement costs and the alternatives a decision lists.

use super::*;

/// The expected cost of a dedicated placement on this state (the state
/// before it is placed): its vCPUs on cores another VM's busy thread uses,
/// on its own sibling pairs, how far apart its nodes are, and its guest cells'
/// sizes. The fleet service ranks hosts of equal free capacity by it.
pub fn cost_of(state: &HostState, p: &Placement) -> Cost {
    if p.cpu_mode != CpuMode::Dedicated {
        return Cost::default();
    }
    // A small VM's own PUs are looked up in its pins; a set is built only
    // for a large one.
    let small = p.vcpus.len() <= 16;
    let set: CpuSet = if small { CpuSet::new() } else { p.vcpus.iter().map(|v| v.pu).collect() };
    let mine = |pu: u32| if small { p.vcpus.iter().any(|v| v.pu == pu) } else { set.contains(pu) };
    // A sibling running another VM's thread is contention whatever this
    // VM does; one running this VM's own vCPU is a pair its guest knows
    // of when told `threads` > 1, and costs less (cost.rs).
    let told = p.guest.threads > 1;
    let (mut doubled, mut paired) = (0u64, 0u64);
    for pin in &p.vcpus {
        let Some(core) = state.core_of(pin.pu) else { continue };
        let others = || core.iter().filter(|&&o| o != pin.pu);
        if others().any(|&o| !mine(o) && state.pu_busy(o)) || (!told && others().any(|&o| mine(o))) {
            doubled += 1;
        } else if others().any(|&o| mine(o)) {
            paired += 1;
        }
    }
    // Each cell with vCPUs by node position, and the memory by node
    // position: the model's shape of the VM.
    // (Kept on the stack for the few cells most VMs have: this runs for
    // every option a decision weighs.)
    let mut cells: crate::few::Few<(usize, usize)> = crate::few::Few::new(p.guest.cells.len());
    for x in p.guest.cells.iter().filter(|x| !x.vcpus.is_empty()) {
        if let Some(i) = state.node_pos(x.host_node) {
            cells.push((i, x.vcpus.len()));
        }
    }
    let mut memory: crate::few::Few<(usize, u64)> = crate::few::Few::new(p.memory.len());
    for &(id, bytes) in &p.memory {
        if let Some(i) = state.node_pos(id) {
            memory.push((i, bytes));
        }
    }
    let distance = |i: usize, j: usize| state.distances.get(i).and_then(|r| r.get(j)).copied().unwrap_or(20);
    let shape = crate::cost::Shape { cells: cells.as_slice(), memory: memory.as_slice(), distance };
    Cost::of(p.vcpus.len() as u64, doubled, paired, &shape)
}

/// The vCPUs of a dedicated placement on cores whose other threads
/// another VM (or the host) uses, on this state (before it is placed).
pub(super) fn foreign_vcpus(state: &HostState, p: &Placement) -> u64 {
    let mine = |pu: u32| p.vcpus.iter().any(|v| v.pu == pu);
    let mut n = 0;
    for pin in &p.vcpus {
        let Some(core) = state.core_of(pin.pu) else { continue };
        if core.iter().any(|&o| o != pin.pu && !mine(o) && state.pu_busy(o)) {
            n += 1;
        }
    }
    n
}

/// The device term of a placement's cost ([`Cost::device_away`]): how far
/// its vCPUs are from the nodes of the devices it asked for (required or
/// preferred), averaged over those nodes; 0 without devices.
pub(super) fn device_cost(state: &HostState, c: &Checked<'_>, p: &Placement) -> u64 {
    let mut nodes: Vec<usize> = c.required.iter().chain(&c.preferred).copied().collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.is_empty() || p.cpu_mode != CpuMode::Dedicated {
        return 0;
    }
    let mut excess = 0u64;
    for &dn in &nodes {
        let row = state.distances.get(dn);
        for pin in &p.vcpus {
            let Some((at, _)) = state.core_index(pin.pu) else { continue };
            let d = row.and_then(|r| r.get(at)).copied().unwrap_or(20);
            excess += u64::from(d.saturating_sub(10));
        }
    }
    Cost::device_away(p.vcpus.len() as u64, excess / nodes.len() as u64)
}

/// Spread's candidates: every usable node, or the best sets of the
/// allowed size.
pub(super) fn spread_sets(search: &Search<'_>, state: &HostState, caps: &[NodeCap], k_max: usize) -> Vec<Candidate> {
    let usable: Vec<usize> =
        (0..state.node_count()).filter(|&i| caps.get(i).is_some_and(|c| c.slots > 0 || c.units > 0)).collect();
    if !state.all_reach(&usable) {
        // Nodes that cannot reach each other are never combined: spread
        // over the best set that holds the VM instead.
        return search.run(None, MAX_ALTERNATIVES + 1).ranked;
    }
    if usable.len() <= k_max {
        let cand = search.candidate(usable);
        let fits = cand.slots >= search.need.slots
            && cand.nodes.iter().map(|&i| caps[i].units).sum::<u64>() >= search.need.units;
        return if fits { vec![cand] } else { Vec::new() };
    }
    search.run(Some(k_max), MAX_ALTERNATIVES + 1).ranked
}

pub(super) fn alternatives(
    search: &Search<'_>,
    ranked: &[Candidate],
    chosen: usize,
    caps: &[NodeCap],
    vcpus: u64,
    noun: SlotNoun,
) -> Vec<Alternative> {
    let Some(best) = ranked.get(chosen) else { return Vec::new() };
    let ids = |nodes: &[usize]| -> Vec<NodeId> {
        nodes.iter().filter_map(|&i| search.state.facts.get(i).map(|f| f.id)).collect()
    };
    // Sized once: kept with the decision, and a list grown from empty
    // would hold room for four.
    let mut out: Vec<Alternative> = Vec::with_capacity(MAX_ALTERNATIVES);
    out.extend(ranked.iter().enumerate().filter(|&(i, _)| i != chosen).take(MAX_ALTERNATIVES).map(|(i, alt)| {
        Alternative {
            nodes: ids(&alt.nodes),
            verdict: if i < chosen { Verdict::not_built() } else { reason::verdict(search, best, alt, noun) },
        }
    }));
    // Show the best smaller set too: it is the one an operator expects,
    // and the reason it failed is the point of the decision. It takes the
    // last place when the list is full (since issue 39, whose even cells
    // widen more VMs past the fewest nodes their threads would fill).
    let k = best.nodes.len();
    if k > 1 && search.policy != Policy::Spread {
        let mut by_slots: Vec<usize> = (0..search.state.node_count()).collect();
        by_slots.sort_by(|&a, &b| caps[b].slots.cmp(&caps[a].slots).then(a.cmp(&b)));
        by_slots.truncate(k - 1);
        by_slots.sort_unstable();
        let units = by_slots.iter().map(|&i| caps[i].units).fold(0u64, u64::saturating_add);
        let small = search.candidate(by_slots);
        if let Some(verdict) = reason::too_small(search, &small, units, vcpus, noun) {
            out.truncate(MAX_ALTERNATIVES - 1);
            out.push(Alternative { nodes: ids(&small.nodes), verdict });
        }
    }
    out
}
