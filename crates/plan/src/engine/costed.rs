//! Cost-chosen plans (`balanced` dedicated VMs that prefer cores) and
//! mixed VMs (a pinned part plus floating shared vCPUs).

use super::*;

/// Sets of more nodes than the fewest that hold the VM on threads, tried
/// by the cost comparison (each is one search and one build).
pub(super) const WIDER_TRIES: usize = 3;

/// `balanced` with `prefer-cores`: the fewest nodes with whole cores, and
/// the fewest nodes (and a few sizes between) on threads, compared by
/// their expected cost ([`crate::cost`]). A VM that fits whole cores of
/// one node costs nothing and is placed at once.
pub(super) fn plan_costed(state: &HostState, c: &Checked<'_>) -> Result<Decision, RejectReason> {
    // Whole cores, then threads: one or two options for most VMs (kept
    // boxed as each pass built them: a placement moved is a copy).
    let mut options: Vec<Box<Built>> = Vec::with_capacity(2);
    let mut failure: Option<(Shortfall, Pass)> = None;
    let mut last_reason = RejectReason::NotBuildable;
    let mut note = |ran: Ran, pass: Pass, options: &mut Vec<Box<Built>>| -> Result<(), RejectReason> {
        match ran {
            Ran::Built(b) => options.push(b),
            Ran::Short(kind) => {
                if options.is_empty() {
                    failure = Some((kind, pass));
                }
            }
            Ran::Unbuilt(r) => last_reason = r,
            // CPU hot-add on a VM wider than one node's cores is refused
            // (docs/background.md § CPU hot-add), even if sibling threads would fit one node.
            Ran::Final(r) => return Err(r),
        }
        Ok(())
    };
    let cores = Pass::Dedicated(PinMode::Cores);
    let threads = Pass::Dedicated(PinMode::CoresThenThreads);
    note(run_pass(state, c, cores, None), cores, &mut options)?;
    if options.first().is_some_and(|b| b.cost.total() == 0) {
        let b = options.swap_remove(0);
        return Ok(b.decision(c));
    }
    let whole_k = options.first().map_or(usize::MAX, |b| b.k);
    note(run_pass(state, c, threads, None), threads, &mut options)?;
    // Wider sets can only lower the sibling cost with free whole cores to
    // spread onto; on a host without any (a full host), the fewest nodes
    // on threads is the answer and the extra searches are skipped.
    let whole_cores_left = state.uses.iter().any(|u| u.free_cores > 0);
    let fewest = options.iter().filter(|b| b.pass_no == 1 && b.cost.shared_cores() > 0).map(|b| b.k).next();
    if let Some(fewest) = fewest.filter(|_| whole_cores_left) {
        let upto = whole_k.min(c.k_max + 1).min(fewest + 1 + WIDER_TRIES);
        for k in fewest + 1..upto {
            note(run_pass(state, c, threads, Some(k)), threads, &mut options)?;
        }
    }
    if options.is_empty() {
        let reason = failure.map_or(last_reason, |(kind, pass)| shortfall(state, c, kind, pass));
        return Err(reason);
    }
    // Even cells come before remote memory: a wider try of the threads
    // pass may split unevenly where another option spans nodes equally
    // (docs/plan.md § Even cells); one-node options stay. But not before
    // what the model prices higher: an uneven option is set aside only
    // for an even one with no more vCPUs on shared cores, in small cells
    // or away from the VM's devices. Before issue 48 any even option won,
    // so an 8-vCPU VM on EPYC's 6-core nodes took its own pairs as 4+4
    // (0.359) or cells of 2 (0.134) rather than whole cores as 2+3+3
    // (0.05), the largest part of `balanced`'s gap to `smt-aware` on the
    // Azure trace (docs/simulate.md § Issue 48, VM by VM).
    let even: Vec<Cost> = options.iter().filter(|b| b.k > 1 && even_cells(&b.placement)).map(|b| b.cost).collect();
    let dominated = |c: &Cost| {
        even.iter()
            .any(|e| e.shared_cores() <= c.shared_cores() && e.small_cells <= c.small_cells && e.device <= c.device)
    };
    options.retain(|b| b.k <= 1 || even_cells(&b.placement) || !dominated(&b.cost));
    // Cheapest; on a tie the one nearer the VM's devices (a device VM
    // keeps to its device's node: pairs there against whole cores a
    // socket away at SLIT 20 are 0.400 each), then fewer vCPUs on shared
    // cores (the VM's own pairs included), fewer nodes, and the order
    // tried (whole cores first).
    // A device VM never takes another VM's idle siblings to stay near its
    // device while a placement without them exists: the device term
    // weighs the VM's own pairs against distance, not a neighbour's loss.
    let any_clean = options.iter().any(|b| b.foreign == 0);
    let key = |i: usize| {
        let o = &options[i];
        (any_clean && o.foreign > 0, o.cost.total(), o.cost.device, o.cost.shared_cores(), o.k, i)
    };
    let best = (0..options.len()).min_by_key(|&i| key(i)).unwrap_or(0);
    let runner_up = (0..options.len())
        .filter(|&i| {
            i != best
                && (options[i].placement.nodes != options[best].placement.nodes
                    || options[i].cost != options[best].cost)
                // A cheaper one set aside for another VM's siblings is not
                // "costlier"; it goes unlisted.
                && options[i].cost.total() >= options[best].cost.total()
        })
        .min_by_key(|&i| (options[i].cost.total(), options[i].cost.shared_cores(), options[i].k, i));
    let other = runner_up.map(|i| (options[i].placement.nodes.clone(), options[i].cost));
    let whole_cost = options.iter().find(|b| b.pass_no == 0).map(|b| b.cost);
    let mut b = options.swap_remove(best);
    if b.pass_no == 1 {
        let note = match whole_cost {
            Some(spread) => Note::SiblingsCheaper { chosen: Box::new(b.cost), spread: Box::new(spread) },
            None => Note::SiblingThreads { vcpus: u64::from(c.req.vcpus), max_nodes: c.k_max },
        };
        b.notes.insert(0, note);
    }
    let chosen_cost = b.cost;
    let mut d = b.decision(c);
    if let Some((nodes, cost)) = other {
        d.alternatives.insert(0, Alternative { nodes, verdict: Verdict::costlier(cost, chosen_cost) });
        d.alternatives.truncate(MAX_ALTERNATIVES);
    }
    Ok(d)
}

/// A mixed VM (Nova's `hw:cpu_policy=mixed`): some vCPUs float in the
/// host's shared pool, the others are pinned. The pinned vCPUs are planned
/// as a dedicated VM of that many vCPUs (with the request's cells, if it
/// gives them, counting only their pinned vCPUs); its guest cells then
/// take the floating vCPUs too ([`mix`]), each floating over its cell's
/// host node's share of the pool, so every guest cell still mirrors one
/// host node. The pool's CPUs are never dedicated, so the floating sets
/// stay as planned.
pub(super) fn plan_mixed(topology: &Topology, state: &HostState, request: &Request) -> Result<Decision, Rejection> {
    let reject = |reason: RejectReason| Rejection { vm: request.name.clone(), reason };
    let floating = &request.shared_vcpus;
    if request.cpu_mode == CpuMode::Shared {
        return Err(reject(RejectReason::MixedNotDedicated));
    }
    if request.max_vcpus.is_some() {
        return Err(reject(RejectReason::MixedHotAdd));
    }
    if let Some(vcpu) = floating.iter().find(|&v| v >= request.vcpus) {
        return Err(reject(RejectReason::MixedVcpuMissing { vcpu, vcpus: u64::from(request.vcpus) }));
    }
    let pinned = request.vcpus - floating.len() as u32;
    if pinned == 0 {
        return Err(reject(RejectReason::MixedAllShared));
    }
    if state.reservations().shared_cpus.is_empty() {
        return Err(reject(RejectReason::MixedNeedsPool));
    }
    let mut whole = request.clone();
    whole.shared_vcpus = CpuSet::new();
    // The whole VM passes every check a dedicated one does.
    let cells = check(topology, state, &whole).map_err(reject)?.cells;
    let mut sub = whole;
    sub.vcpus = pinned;
    // The guest cell of each vCPU when the request gives cells (listed,
    // or runs in guest order); empty otherwise.
    let mut cell_of: Vec<usize> = Vec::new();
    if !cells.is_empty() {
        cell_of = vec![0; request.vcpus as usize];
        let mut start = 0;
        for (i, cell) in cells.iter().enumerate() {
            match &cell.listed {
                Some(list) => list.iter().for_each(|v| cell_of[v as usize] = i),
                None => cell_of[start as usize..(start + cell.vcpus) as usize].fill(i),
            }
            start += cell.vcpus;
        }
        sub.guest_nodes = None;
        sub.cells = Vec::with_capacity(cells.len());
        for (i, cell) in cells.iter().enumerate() {
            let pins = (0..request.vcpus).filter(|&v| cell_of[v as usize] == i && !floating.contains(v)).count() as u32;
            if pins == 0 {
                return Err(reject(RejectReason::MixedCellUnpinned { cell: i }));
            }
            sub.cells.push(CellWish::new(pins, cell.memory_bytes));
        }
    }
    // Nodes whose shared pool has no room are left out; should the
    // floating vCPUs still not fit (several on one node), the pinned part
    // keeps to nodes whose pool holds them all.
    let floats = floating.len() as u64;
    let slots: Vec<u64> = (0..state.node_count()).map(|i| shared_slots(state, i, request.overcommit)).collect();
    for least in [1, floats] {
        let excluded = slots.iter().map(|&n| n < least).collect();
        let Ok(mut decision) = plan_except(topology, state, &sub, excluded) else {
            // Refused with the nodes short of pool room left out: if the
            // pinned part fits elsewhere (the first time, its own reason
            // otherwise), say where the pool has room.
            if least == 1 {
                let mut all = plan_all(topology, state, &sub)?;
                // With cells, only the cells holding floating vCPUs need
                // the pool: a cell of pinned vCPUs alone may go to a node
                // without one (issue 48: two cells were refused when the
                // pool was on one node).
                if !cell_of.is_empty() && mix(state, request, &cell_of, &mut all).is_ok() {
                    return Ok(all);
                }
            }
            let pool = (0..state.node_count()).map(|i| (state.facts[i].id, slots[i])).filter(|&(_, n)| n > 0).collect();
            return Err(reject(RejectReason::MixedPoolNodes { floating: floats, pool }));
        };
        match mix(state, request, &cell_of, &mut decision) {
            Ok(()) => return Ok(decision),
            Err(RejectReason::MixedPoolShort { .. }) if least < floats => continue,
            Err(r) => return Err(reject(r)),
        }
    }
    Err(reject(RejectReason::NotBuildable))
}

/// Adds a mixed VM's floating vCPUs to the dedicated plan of its pinned
/// ones. `given` is the guest cell of every vCPU when the request gives
/// its cells; else each cell keeps its pinned count, and a floating vCPU
/// joins the cell of the pinned vCPU before it (cell 0 before any).
pub(super) fn mix(state: &HostState, req: &Request, given: &[usize], d: &mut Decision) -> Result<(), RejectReason> {
    let floating = &req.shared_vcpus;
    let p = Arc::make_mut(&mut d.placement);
    let pinned_per_cell: Vec<usize> = p.guest.cells.iter().map(|c| c.vcpus.len()).collect();
    // The guest cell of every vCPU.
    let mut cell_of: Vec<usize> = Vec::with_capacity(req.vcpus as usize);
    if given.is_empty() {
        let with_cpus: Vec<usize> = (0..pinned_per_cell.len()).filter(|&i| pinned_per_cell[i] > 0).collect();
        let (mut at, mut used) = (0usize, 0usize);
        for v in 0..req.vcpus {
            if !floating.contains(v) {
                while at + 1 < with_cpus.len() && used == pinned_per_cell[with_cpus[at]] {
                    at += 1;
                    used = 0;
                }
                used += 1;
            }
            cell_of.push(with_cpus.get(at).copied().unwrap_or(0));
        }
    } else {
        cell_of.extend_from_slice(given);
    }
    // Floating vCPUs per host node position, with room checked.
    let cell_node: Vec<usize> = p.guest.cells.iter().map(|c| state.node_pos(c.host_node).unwrap_or(0)).collect();
    let mut per_node: Vec<(usize, Vec<u32>)> = Vec::new();
    for v in floating.iter() {
        let node = cell_node[cell_of[v as usize]];
        match per_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, list)) => list.push(v),
            None => per_node.push((node, vec![v])),
        }
    }
    let mut counted: Vec<(u32, u32)> = Vec::with_capacity(floating.len());
    let mut sets: Vec<crate::placement::Floating> = Vec::new();
    for (node, list) in &per_node {
        let id = state.facts[*node].id;
        let free = shared_slots(state, *node, req.overcommit);
        let needed = list.len() as u64;
        let pus = pin::take_shared(state, *node, list.len()).filter(|_| needed <= free);
        let pus = pus.ok_or(RejectReason::MixedPoolShort { node: id, needed, free })?;
        counted.extend(list.iter().copied().zip(pus));
        sets.push(crate::placement::Floating {
            node: id,
            vcpus: list.iter().copied().collect(),
            cpus: pin::float_pus(state, *node).into_iter().collect(),
        });
    }
    sets.sort_by_key(|f| f.node);
    // Pins in vCPU order: each cell's pinned vCPUs take the dedicated
    // plan's PUs of that cell, in order; the floating ones the counted
    // pool PU.
    let per_cell: Vec<Vec<u32>> = p
        .guest
        .cells
        .iter()
        .map(|c| c.vcpus.iter().filter_map(|v| p.vcpus.get(v as usize)).map(|x| x.pu).collect())
        .collect();
    let mut dedicated: Vec<_> = per_cell.iter().map(|pus| pus.iter()).collect();
    let mut pins = Vec::with_capacity(req.vcpus as usize);
    let mut cells: Vec<CellPlan> = p
        .guest
        .cells
        .iter()
        .zip(&cell_node)
        .map(|(c, &node)| {
            // A cell backed by other nodes (a hidden tier) keeps them.
            let backing: Vec<(usize, u64)> = c
                .memory_nodes
                .iter()
                .filter(|m| m.0 != c.host_node)
                .filter_map(|m| Some((state.node_pos(m.0)?, m.1)))
                .collect();
            let memory = c.memory_bytes - backing.iter().map(|b| b.1).sum::<u64>();
            CellPlan { node, pus: Vec::new(), memory, backing }
        })
        .collect();
    for v in 0..req.vcpus {
        let pu = match counted.iter().find(|(f, _)| *f == v) {
            Some(&(_, pu)) => pu,
            None => {
                let pu = dedicated.get_mut(cell_of[v as usize]).and_then(Iterator::next);
                *pu.ok_or(RejectReason::NotBuildable)?
            }
        };
        let cell = cell_of[v as usize];
        cells[cell].pus.push(pu);
        pins.push(VcpuPin { vcpu: v, pu, node: state.facts[cell_node[cell]].id });
    }
    // Floating vCPUs are no sibling of anything: the guest sees threads=1.
    let lists: Vec<CpuSet> = (0..cells.len())
        .filter(|&i| !cells[i].pus.is_empty())
        .map(|i| (0..req.vcpus).filter(|&v| cell_of[v as usize] == i).collect())
        .collect();
    p.guest = guest::derive(state, &cells, false, &lists);
    p.vcpus = pins;
    let pool: CpuSet = sets.iter().fold(CpuSet::new(), |all, f| all.union(&f.cpus));
    // Emulator threads left on the VM's own dedicated CPUs move to the
    // pool (not those on the host's reserved CPUs, or where asked).
    let moved = req.emulator == EmulatorPlacement::VmNodes && p.emulator.is_subset(&p.cpuset);
    if moved {
        d.notes.retain(|n| !matches!(n, Note::EmulatorOnVcpus | Note::EmulatorOnIdleSiblings));
    }
    for note in &mut d.notes {
        if let Note::Spans { cells } = note {
            *cells = p.guest.cells.iter().map(|c| c.vcpus.len()).filter(|&n| n > 0).collect();
        }
    }
    d.notes.push(Note::Mixed {
        floating: Box::new(floating.clone()),
        cpus: Box::new(pool.clone()),
        pinned: req.vcpus as usize - floating.len(),
    });
    if moved {
        // The pool is where housekeeping work belongs on such a host.
        p.emulator = pool;
        d.notes.push(Note::EmulatorInPool);
    }
    p.floating = sets;
    Ok(())
}
