//! Turning a chosen node set into a placement: the split over nodes,
//! the pins, the emulator CPUs, memory per node and the notes.

use super::*;

/// Splits vCPUs (evenly, within each node's slots) and memory (in
/// proportion, in whole units, within each node's free memory) over a set.
pub(super) fn split_over(
    c: &Checked<'_>,
    set_caps: &[NodeCap],
    vcpus: u64,
    devices: &[bool],
    far: &dyn Fn(&[u64]) -> Vec<u32>,
) -> Option<(Vec<u64>, Vec<u64>)> {
    // The water-fill gives its leftovers to the last of equal nodes: the
    // nodes of the VM's devices are put last, so when fewer vCPUs than
    // nodes leave some cells without vCPUs, the devices keep theirs.
    let mut order: Vec<usize> = (0..set_caps.len()).filter(|&j| !devices.get(j).copied().unwrap_or(false)).collect();
    order.extend((0..set_caps.len()).filter(|&j| devices.get(j).copied().unwrap_or(false)));
    let slot_caps: Vec<u64> = order.iter().map(|&j| set_caps[j].slots / c.gran).collect();
    let filled = split::water_fill(vcpus.div_ceil(c.gran), &slot_caps)?;
    let mut counts = vec![0u64; set_caps.len()];
    for (k, &j) in order.iter().enumerate() {
        counts[j] = filled[k] * c.gran;
    }
    if vcpus.is_multiple_of(c.gran) {
        counts = split::coarsen(vcpus, c.gran, &counts, &set_caps.iter().map(|x| x.slots).collect::<Vec<_>>());
    }
    if c.gran == 2 && vcpus % 2 == 1 {
        if let Some(last) = counts.iter_mut().rev().find(|x| **x > 0) {
            *last -= 1;
        }
    }
    let weights: Vec<u64> = if c.req.policy == Policy::Spread {
        set_caps.iter().map(|x| u64::from(x.units > 0)).collect()
    } else {
        counts.clone()
    };
    let unit_caps: Vec<u64> = set_caps.iter().map(|x| x.whole).collect();
    let units = split::split_memory(c.blocks, &weights, &unit_caps, &far(&counts))?;
    let mut memory: Vec<u64> = units.iter().map(|u| u * c.unit).collect();
    if c.rem > 0 {
        let room = |j: usize| set_caps[j].mem_bytes.saturating_sub(memory[j]) >= c.rem;
        let spot = (0..set_caps.len())
            .rev()
            .find(|&j| counts[j] > 0 && room(j))
            .or_else(|| (0..set_caps.len()).rev().find(|&j| room(j)))?;
        memory[spot] += c.rem;
    }
    Some((counts, memory))
}

/// Splits, pins and derives the guest for one node set.
pub(super) fn build(
    state: &HostState,
    c: &Checked<'_>,
    caps: &[NodeCap],
    pass: Pass,
    cand: &Candidate,
) -> Result<(Placement, Vec<Note>), BuildError> {
    let req = c.req;
    let set = &cand.nodes;
    let lost = || BuildError::Retry(RejectReason::NotBuildable);
    // One node takes everything (the search checked that it can): the
    // common case, kept free of the split's allocations.
    let one = ([c.vcpus + c.extra], [req.memory_bytes]);
    let split;
    let (counts, memory): (&[u64], &[u64]) = if set.len() == 1 {
        (&one.0, &one.1)
    } else {
        let mut set_caps: Vec<NodeCap> = set.iter().map(|&i| caps.get(i).copied().unwrap_or_default()).collect();
        // The emulator's own CPU goes with guest cell 0: the vCPUs are
        // split evenly over what the first node has left after it.
        if c.slot_extra(pass) > 0 {
            if let Some(first) = set_caps.first_mut() {
                first.slots = first.slots.saturating_sub(c.extra) / c.gran * c.gran;
            }
        }
        let devices: Vec<bool> = set.iter().map(|i| c.required.contains(i) || c.preferred.contains(i)).collect();
        // Each member's distance from the nearest member running vCPUs,
        // so memory that spills to memory-only nodes fills the nearest
        // (the vCPUs' own HBM before another quadrant's).
        let far = |counts: &[u64]| -> Vec<u32> {
            set.iter()
                .map(|&j| {
                    set.iter()
                        .zip(counts)
                        .filter(|(_, &n)| n > 0)
                        .filter_map(|(&i, _)| state.distances.get(i).and_then(|r| r.get(j)).copied())
                        .min()
                        .unwrap_or(0)
                })
                .collect()
        };
        let (mut counts, memory) = split_over(c, &set_caps, c.vcpus, &devices, &far).ok_or_else(lost)?;
        let first = counts.iter().position(|&n| n > 0).ok_or_else(lost)?;
        counts[first] += c.extra;
        split = (counts, memory);
        (&split.0, &split.1)
    };
    let mut cells: Vec<CellPlan> = Vec::with_capacity(set.len());
    let mut reserved = CpuSet::new();
    let emu_at = counts.iter().position(|&n| n > 0).filter(|_| c.extra > 0);
    for (j, &node) in set.iter().enumerate() {
        if counts[j] == 0 && memory[j] == 0 {
            continue;
        }
        let emu = emu_at == Some(j);
        let pus = take_pus(state, pass, node, counts[j] as usize, emu, &mut reserved).ok_or_else(|| {
            // Pairs fit (the search counted them) but no thread is left
            // beside them for the emulator: another set may have one.
            if emu && matches!(pass, Pass::Dedicated(PinMode::Pairs)) {
                BuildError::Retry(RejectReason::EmulatorCpuShort { node: state.facts[node].id })
            } else {
                lost()
            }
        })?;
        cells.push(CellPlan::new(node, pus, memory[j]));
    }
    assemble(state, c, pass, cells, reserved)
}

/// PUs for `count` vCPUs on one node; a dedicated VM's PUs held but not
/// pinned (isolate's siblings) go to `reserved`. `emu`: the last of the
/// `count` is the emulator's own CPU (`emulator: isolate`), which a
/// `pairs` VM takes as any free thread rather than as half a pair.
pub(super) fn take_pus(
    state: &HostState,
    pass: Pass,
    node: usize,
    count: usize,
    emu: bool,
    reserved: &mut CpuSet,
) -> Option<Vec<u32>> {
    match pass {
        Pass::Dedicated(PinMode::Pairs) if emu && count > 0 => {
            let taken = pin::take(state, node, count - 1, PinMode::Pairs)?;
            let busy: Vec<u32> = taken.pinned.iter().chain(&taken.reserved).copied().collect();
            let (pu, siblings) = pin::take_emulator(state, node, &busy)?;
            for pu in taken.reserved.into_iter().chain(siblings) {
                reserved.insert(pu);
            }
            let mut pus = taken.pinned;
            pus.push(pu);
            Some(pus)
        }
        Pass::Dedicated(mode) => {
            let taken = pin::take(state, node, count, mode)?;
            for pu in taken.reserved {
                reserved.insert(pu);
            }
            Some(taken.pinned)
        }
        Pass::Shared | Pass::SharedCores => pin::take_shared(state, node, count),
    }
}

/// Turns pinned cells (guest cell order) into a placement: the
/// emulator's CPUs, the guest topology and the notes.
pub(super) fn assemble(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    mut cells: Vec<CellPlan>,
    mut reserved: CpuSet,
) -> Result<(Placement, Vec<Note>), BuildError> {
    let req = c.req;
    let vcpus = c.vcpus;
    let lost = || BuildError::Retry(RejectReason::NotBuildable);
    // Room for the usual notes (a typical VM has one to three), and for
    // the one plan_costed puts first; the list is kept with the decision.
    let mut notes = Vec::with_capacity(4);
    // `emulator: isolate`: the last CPU taken for guest cell 0 (the first
    // cell with vCPUs) runs the emulator threads alone.
    let mut isolated = None;
    if c.extra > 0 {
        let cell = cells.iter_mut().find(|x| !x.pus.is_empty()).ok_or_else(lost)?;
        let pu = cell.pus.pop().ok_or_else(lost)?;
        reserved.insert(pu);
        isolated = Some((pu, state.facts[cell.node].id));
    }
    // The host nodes of the cells, each once; a one-cell VM (most VMs)
    // needs no list for that.
    let distinct: Vec<usize> = if cells.len() > 1 {
        let mut d: Vec<usize> = cells.iter().map(|x| x.node).collect();
        d.sort_unstable();
        d.dedup();
        d
    } else {
        Vec::new()
    };
    let distinct_len = if cells.len() > 1 { distinct.len() } else { cells.len() };
    if distinct_len > 1 && req.max_vcpus.is_some() && !req.force {
        let nodes = distinct.iter().map(|&i| state.facts[i].id).collect();
        return Err(BuildError::Final(RejectReason::HotAddWide { nodes }));
    }
    if matches!(pass, Pass::Dedicated(PinMode::Pairs)) && vcpus % 2 == 1 {
        notes.push(Note::OddPairs { vcpus });
    }
    // HBM or CXL the VM's memory is on backs its CPU cells unless the
    // request asks to see the tier (docs/plan.md § Memory kinds).
    if req.memory_tiers == MemoryTiers::Hidden {
        guest::hide_tiers(state, &mut cells);
    }
    // The request's own vCPU lists (Nova's `hw:numa_cpus.N`), one per
    // cell in guest order; empty when it gives counts or no cells.
    let lists: Vec<CpuSet> = c.cells.iter().filter_map(|w| w.listed.clone()).collect();
    let guest = guest::derive(state, &cells, matches!(pass, Pass::Dedicated(_)), &lists);

    let (pins, pinned) = pins_of(state, &cells, &lists, req.vcpus);
    let (cpu_mode, cpuset) = match pass {
        Pass::Dedicated(_) => (CpuMode::Dedicated, pinned.union(&reserved)),
        Pass::Shared | Pass::SharedCores => {
            // Its nodes' CPUs that no dedicated VM's core uses, node by
            // node, where a node has such CPUs; else all its open CPUs.
            let open: CpuSet =
                cells.iter().filter(|x| !x.pus.is_empty()).flat_map(|x| pin::float_pus(state, x.node)).collect();
            notes.push(Note::SharedFloat { vcpus, cpus: open.len(), overcommit: req.overcommit });
            (CpuMode::Shared, open)
        }
    };
    if cpu_mode == CpuMode::Dedicated {
        for other in state.shared_placements() {
            let lost = other.cpuset.intersection(&cpuset);
            if !lost.is_empty() {
                let now = other.cpuset.difference(&lost);
                notes.push(Note::ShrinksShared {
                    vm: other.vm.as_str().into(),
                    lost: Box::new(lost),
                    now: Box::new(now),
                });
            }
        }
    }
    let emulator = emulator_cpus(state, req, &cells, isolated, (cpu_mode, &cpuset), (pinned, reserved), &mut notes);
    shape_notes(state, c, pass, &cells, &guest, distinct_len, &mut notes);
    devices_near(state, c, pass, &cells, &mut notes)?;
    let (memory, nodes) = memory_of(state, &cells);
    let charged = charged_memory(c, &memory, &mut notes);
    let placement = Placement {
        vm: req.name.clone(),
        nodes,
        cpu_mode,
        vcpus: pins,
        cpuset,
        emulator,
        memory,
        memory_bytes: req.memory_bytes,
        memory_mode: if req.policy == Policy::Spread { MemoryMode::Interleave } else { MemoryMode::Strict },
        hugepage_bytes: req.hugepage_bytes,
        guest,
        online_vcpus: None,
        devices: c.passed.clone(),
        floating: Vec::new(),
        charged,
    };
    Ok((placement, notes))
}

/// The vCPU pins of the cells, in vCPU order (a listed cell's PUs go to
/// its listed vCPUs in ascending order), and the set of pinned PUs.
pub(super) fn pins_of(state: &HostState, cells: &[CellPlan], lists: &[CpuSet], vcpus: u32) -> (Vec<VcpuPin>, CpuSet) {
    let mut pins = Vec::with_capacity(vcpus as usize);
    let mut pinned = CpuSet::new();
    // Inserting the highest PU first sizes the bitmap once.
    if let Some(top) = cells.iter().flat_map(|x| x.pus.iter().copied()).max() {
        pinned.insert(top);
    }
    for (i, cell) in cells.iter().enumerate() {
        let id = state.facts[cell.node].id;
        // A listed cell's PUs go to its vCPUs in ascending order, so each
        // listed vCPU runs on its cell's host node.
        let mut listed = lists.get(i).map(|l| l.iter());
        for &pu in &cell.pus {
            let vcpu = listed.as_mut().and_then(Iterator::next).unwrap_or(pins.len() as u32);
            pins.push(VcpuPin { vcpu, pu, node: id });
            pinned.insert(pu);
        }
    }
    if !lists.is_empty() {
        pins.sort_unstable_by_key(|p| p.vcpu);
    }
    (pins, pinned)
}

/// Where the emulator threads run, with the note that says so when it is
/// not the obvious place: an isolated CPU, the housekeeping CPUs asked
/// for, the host's reserved CPUs on the VM's nodes, a shared VM's own
/// CPUs, the idle siblings it holds, or its vCPUs' CPUs.
pub(super) fn emulator_cpus(
    state: &HostState,
    req: &Request,
    cells: &[CellPlan],
    isolated: Option<(u32, NodeId)>,
    (cpu_mode, cpuset): (CpuMode, &CpuSet),
    // (Given, not lent: most VMs' emulator threads run on their pinned
    // CPUs, which are then moved here rather than copied.)
    (pinned, reserved): (CpuSet, CpuSet),
    notes: &mut Vec<Note>,
) -> CpuSet {
    // The host's reserved CPUs on the VM's nodes (empty, at no cost, on a
    // host that reserves none).
    let near = host_cpus_of(state, cells);
    match (&req.emulator, isolated) {
        (_, Some((cpu, node))) => {
            notes.push(Note::EmulatorIsolated { cpu, node });
            std::iter::once(cpu).collect()
        }
        (EmulatorPlacement::Housekeeping(set), _) => set.clone(),
        (EmulatorPlacement::HostReserved, _) if near.is_empty() => state.reservations().cpus.clone(),
        (EmulatorPlacement::HostReserved, _) => near,
        // The host's reserved CPUs on the VM's nodes, when it has some:
        // housekeeping is what they are for.
        _ if !near.is_empty() => near,
        _ if cpu_mode == CpuMode::Shared => cpuset.clone(),
        // The idle siblings an isolate (or odd pairs) VM holds: they run
        // nothing else, and there the emulator never preempts a vCPU.
        _ if !reserved.is_empty() => {
            notes.push(Note::EmulatorOnIdleSiblings);
            reserved
        }
        _ => {
            if req.vcpus > 1 {
                notes.push(Note::EmulatorOnVcpus);
            }
            pinned
        }
    }
}

/// The notes on the VM's shape: cells over several nodes or sharing one,
/// uneven or indivisible splits, memory-only or memoryless cells, and
/// vCPUs on sibling threads (its own, or next to other VMs').
pub(super) fn shape_notes(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    cells: &[CellPlan],
    guest: &GuestTopology,
    distinct_len: usize,
    notes: &mut Vec<Note>,
) {
    let (req, vcpus) = (c.req, c.vcpus);
    if distinct_len > 1 {
        // (A hidden tier's node backs a cell rather than being one.)
        if guest.cells.len() > 1 {
            notes.push(Note::Spans { cells: guest.cells.iter().map(|x| x.vcpus.len()).collect() });
        }
        if req.max_vcpus.is_some() {
            notes.push(Note::HotAddForced);
        }
    }
    if distinct_len < cells.len() {
        for w in cells.windows(2).filter(|w| w[0].node == w[1].node) {
            let node = state.facts[w[0].node].id;
            if !notes.contains(&Note::CellsShareNode { node }) {
                notes.push(Note::CellsShareNode { node });
            }
        }
    }
    let cpu_cells = cells.iter().filter(|x| !x.pus.is_empty()).count();
    let mut sizes = cells.iter().map(|x| x.pus.len()).filter(|&n| n > 0);
    let first = sizes.next();
    if c.cells.is_empty() && sizes.any(|n| Some(n) != first) {
        notes.push(if vcpus.is_multiple_of(cpu_cells as u64) {
            Note::UnevenSplit
        } else {
            Note::Indivisible { vcpus, cells: cpu_cells }
        });
    }
    if cells.iter().any(|x| x.pus.is_empty()) {
        notes.push(Note::MemoryOnlyCells);
    }
    if cells.iter().any(|x| !x.pus.is_empty() && x.memory == 0 && x.backing.is_empty()) {
        notes.push(Note::MemorylessCells);
    }
    if matches!(pass, Pass::Dedicated(PinMode::CoresThenThreads)) {
        let (doubled, theirs) = shared_cores(state, cells);
        if doubled.total > 0 {
            notes.push(Note::SharedCores { vcpus: doubled.total });
        }
        if doubled.with_others > 0 {
            let placed = state.placements();
            let vms: Vec<String> =
                state.owners_of(&theirs).into_iter().filter_map(|i| placed.get(i)).map(|p| p.vm.clone()).collect();
            if !vms.is_empty() {
                notes.push(Note::SiblingsOf { vms, vcpus: doubled.with_others });
            }
        }
    }
}

/// A required device's node must run vCPUs and hold memory: a set that
/// left it out of either is not this VM's (another set may be). A
/// preferred device whose node runs none of the VM's vCPUs gets a note.
pub(super) fn devices_near(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    cells: &[CellPlan],
    notes: &mut Vec<Note>,
) -> Result<(), BuildError> {
    // A preferred device whose node runs none of the VM's vCPUs (its node
    // could not hold them): the emitted domain marks it, and lint reports
    // it as this choice. A required one is never away (above).
    // (Nodes that run vCPUs, not memory-only cells.)
    let runs_vcpus = |node: usize| cells.iter().any(|x| x.node == node && !x.pus.is_empty());
    let holds_memory = |node: usize| cells.iter().any(|x| x.node == node && x.memory > 0);
    // A required device's node must run vCPUs and hold memory: a set that
    // left it out of either is not this VM's (another set may be).
    if let Some((pos, device)) = c.required_by.iter().find(|(p, _)| !runs_vcpus(*p) || !holds_memory(*p)) {
        let cap = capacities(state, c, pass).get(*pos).copied().unwrap_or_default();
        return Err(BuildError::Retry(c.device_away(state, *pos, device.clone(), pass, cap, Lacks::Split)));
    }
    let mut away: Vec<usize> = c.preferred.iter().copied().filter(|&p| !runs_vcpus(p)).collect();
    away.sort_unstable();
    away.dedup();
    for p in away {
        notes.push(Note::DeviceOutside { node: state.facts[p].id });
    }
    Ok(())
}

/// The VM's memory per host node (a cell's own and its backing), and its
/// host nodes in cell order, each once.
pub(super) fn memory_of(state: &HostState, cells: &[CellPlan]) -> (Vec<(NodeId, u64)>, Vec<NodeId>) {
    let mut memory: Vec<(NodeId, u64)> = Vec::with_capacity(cells.len());
    for (node, bytes) in cells.iter().flat_map(|x| std::iter::once((x.node, x.memory)).chain(x.backing.iter().copied()))
    {
        if bytes == 0 {
            continue;
        }
        let id = state.facts[node].id;
        match memory.iter_mut().find(|(n, _)| *n == id) {
            Some(entry) => entry.1 += bytes,
            None => memory.push((id, bytes)),
        }
    }
    let mut nodes: Vec<NodeId> = Vec::with_capacity(cells.len());
    for node in cells.iter().flat_map(|x| std::iter::once(x.node).chain(x.backing.iter().map(|b| b.0))) {
        let id = state.facts[node].id;
        if !nodes.contains(&id) {
            nodes.push(id);
        }
    }
    (memory, nodes)
}

/// What an overcommitted shared VM is charged per node: the guest memory
/// over the ratio, rounded up; never above the node's free bytes, since
/// the capacity was their multiple. Empty without memory overcommit.
pub(super) fn charged_memory(c: &Checked<'_>, memory: &[(NodeId, u64)], notes: &mut Vec<Note>) -> Vec<(NodeId, u64)> {
    let req = c.req;
    let charged: Vec<(NodeId, u64)> = if c.mem_milli > 1000 {
        memory
            .iter()
            .map(|&(n, b)| (n, u64::try_from((u128::from(b) * 1000).div_ceil(u128::from(c.mem_milli))).unwrap_or(b)))
            .collect()
    } else {
        Vec::new()
    };
    if !charged.is_empty() {
        let total = charged.iter().map(|x| x.1).sum();
        notes.push(Note::MemoryOvercommitted {
            charged: total,
            memory: req.memory_bytes,
            ratio: req.memory_overcommit,
        });
    }
    charged
}

/// The host's reserved CPUs on the nodes of a plan's cells.
pub(super) fn host_cpus_of(state: &HostState, cells: &[CellPlan]) -> CpuSet {
    if state.reservations().cpus.is_empty() {
        return CpuSet::new();
    }
    cells
        .iter()
        .flat_map(|x| state.facts[x.node].cores.iter().flatten().copied())
        .filter(|&pu| state.pu_reserved(pu))
        .collect()
}

/// How many of the placement's vCPUs share their physical core, and the
/// PUs of other dedicated VMs on those cores (one pass over the cores of
/// the placement's nodes).
pub(super) fn shared_cores(state: &HostState, cells: &[CellPlan]) -> (Doubled, CpuSet) {
    let mut doubled = Doubled { total: 0, with_others: 0 };
    let mut theirs = CpuSet::new();
    for cell in cells {
        let mine: CpuSet = cell.pus.iter().copied().collect();
        // The node's cores that hold some of the cell's vCPUs, each once
        // (known by its first PU), found from the PUs rather than by
        // looking through every core of the node.
        let mut cores: Vec<&[u32]> = Vec::with_capacity(cell.pus.len());
        for &pu in &cell.pus {
            if let Some(core) = state.core_on(cell.node, pu) {
                if !cores.iter().any(|c| c.first() == core.first()) {
                    cores.push(core);
                }
            }
        }
        for core in cores {
            let own = core.iter().filter(|&&pu| mine.contains(pu)).count();
            let busy = core.iter().filter(|&&pu| !mine.contains(pu) && !state.pu_free(pu)).count();
            if own + busy > 1 {
                doubled.total += own;
            }
            let mut taken = false;
            for &pu in core.iter().filter(|&&pu| !mine.contains(pu) && state.pu_taken(pu)) {
                theirs.insert(pu);
                taken = true;
            }
            if taken {
                doubled.with_others += own;
            }
        }
    }
    (doubled, theirs)
}
