//! Running one capacity pass: the node-set search over the counted
//! capacities, and the even-split retry.

use super::*;

impl Built {
    pub(super) fn decision(self, c: &Checked<'_>) -> Decision {
        // The request's own notes come first; most requests have none.
        let notes = if c.notes.is_empty() {
            self.notes
        } else {
            let mut notes = Vec::with_capacity(c.notes.len() + self.notes.len());
            notes.extend_from_slice(&c.notes);
            notes.extend(self.notes);
            notes
        };
        Decision { placement: Arc::new(self.placement), alternatives: self.alternatives, notes }
    }
}

/// The node-set search for a request over `caps`, needing `slots` vCPU
/// slots and all its memory units.
pub(super) fn search<'a>(state: &'a HostState, c: &'a Checked<'_>, caps: &'a [NodeCap], slots: u64) -> Search<'a> {
    Search {
        state,
        caps,
        need: Need { slots, units: c.blocks + u64::from(c.rem > 0), unit_bytes: c.unit },
        memory_bytes: c.req.memory_bytes,
        policy: c.req.policy,
        required: &c.required,
        preferred: &c.preferred,
        k_max: c.k_max,
        // Hosts that list no passthrough device (most simulated fleets)
        // skip the count in every set scored.
        avoid_devices: c.req.devices.is_empty() && state.has_passthrough(),
        dedicated: c.req.cpu_mode == CpuMode::Dedicated,
    }
}

/// Runs one capacity pass: the best node set (of exactly `exact_k` nodes
/// when given) that can be built into a placement.
pub(super) fn run_pass(state: &HostState, c: &Checked<'_>, pass: Pass, exact_k: Option<usize>) -> Ran {
    let request = c.req;
    let vcpus = c.vcpus + c.slot_extra(pass);
    let noun = noun(pass);
    // Reasons are worded only if every pass fails: a first pass that
    // finds no free whole cores is routine and must stay cheap, so it is
    // refused from the state's counters before any node's memory is
    // looked at.
    if !reason::cpu_fits(state, |i| pass_slots(state, c, pass, i), vcpus, c.k_max, noun) {
        return Ran::Short(Shortfall::Cpu);
    }
    let caps = capacities(state, c, pass);
    let search = search(state, c, &caps, vcpus.div_ceil(c.gran) * c.gran);
    if !reason::memory_fits(state, &caps, search.need.units, c.k_max) {
        return Ran::Short(Shortfall::Memory);
    }
    let ranked = match exact_k {
        Some(k) => search.run(Some(k), MAX_ALTERNATIVES + 1).ranked,
        None if request.policy == Policy::Spread => spread_sets(&search, state, &caps, c.k_max),
        None => search.run(None, MAX_ALTERNATIVES + 1).ranked,
    };
    if ranked.is_empty() {
        return Ran::Short(Shortfall::Joint);
    }
    let mut last = RejectReason::NotBuildable;
    for (i, cand) in ranked.iter().enumerate() {
        match build(state, c, &caps, pass, cand) {
            Ok((placement, notes)) => {
                // Uneven cells when another set of nodes splits the VM
                // equally: that set instead (docs/plan.md § Even cells).
                if request.policy != Policy::Spread && !even_cells(&placement) {
                    if let Some(b) = run_even(state, c, &caps, pass, &placement, exact_k) {
                        return Ran::Built(b);
                    }
                }
                let alternatives = alternatives(&search, &ranked, i, &caps, vcpus, noun);
                let mut cost = cost_of(state, &placement);
                cost.device = device_cost(state, c, &placement);
                let foreign = if c.has_device_nodes() { foreign_vcpus(state, &placement) } else { 0 };
                let k = placement.guest.cells.iter().filter(|x| !x.vcpus.is_empty()).count();
                let pass_no = usize::from(matches!(pass, Pass::Dedicated(PinMode::CoresThenThreads)) && c.costed());
                return Ran::Built(Box::new(Built { placement, notes, alternatives, pass_no, k, cost, foreign }));
            }
            Err(BuildError::Retry(r)) => last = r,
            Err(BuildError::Final(r)) => return Ran::Final(r),
        }
    }
    Ran::Unbuilt(last)
}

/// Whether every guest cell with vCPUs holds as many as the others.
pub(super) fn even_cells(p: &Placement) -> bool {
    let mut sizes = p.guest.cells.iter().map(|x| x.vcpus.len()).filter(|&n| n > 0);
    let first = sizes.next();
    sizes.all(|n| Some(n) == first)
}

/// Cells this small are not worth an even split: the ESXi figures price
/// them ([`crate::cost`]), and 2+3 vCPUs beat five cells of one.
pub(super) const EVEN_MIN_SHARE: u64 = crate::model::SMALL_CELL_VCPUS as u64 + 1;

/// A VM whose best set gave uneven cells (`uneven`): the fewest nodes,
/// as many as ran its vCPUs there or more up to the VM's limit (exactly `exact_k`
/// when given), that each take an equal share of its vCPUs, with the
/// uneven set as the first alternative; failing that, for a VM whose
/// guest would get a die per vCPU, the same nodes with its vCPUs on fewer
/// of them. QEMU gives every guest die as many cores, so only equal cells
/// are one die each (docs/plan.md § Even cells). `None` when neither
/// holds the VM.
pub(super) fn run_even(
    state: &HostState,
    c: &Checked<'_>,
    caps: &[NodeCap],
    pass: Pass,
    uneven: &Placement,
    exact_k: Option<usize>,
) -> Option<Box<Built>> {
    let from = uneven.guest.cells.iter().filter(|x| !x.vcpus.is_empty()).count();
    let (low, high) = match exact_k {
        Some(k) => (k, k),
        None => (from.max(2), c.k_max),
    };
    let noun = noun(pass);
    let vcpus = c.vcpus + c.extra;
    for k in low..=high {
        let step = k as u64 * c.gran;
        if !c.vcpus.is_multiple_of(step) {
            continue;
        }
        let share = c.vcpus / k as u64;
        if share < EVEN_MIN_SHARE {
            // Shares only shrink with more nodes.
            break;
        }
        // Only nodes with room for a whole share (and the emulator's CPU,
        // which goes with the first cell) take part, memory included: a
        // node left out adds nothing, so every member runs a share.
        let even_caps: Vec<NodeCap> =
            caps.iter().map(|cap| if cap.slots >= share + c.extra { *cap } else { NodeCap::default() }).collect();
        let search = search(state, c, &even_caps, vcpus.div_ceil(c.gran) * c.gran);
        let ranked = search.run(Some(k), MAX_ALTERNATIVES + 1).ranked;
        for (i, cand) in ranked.iter().enumerate() {
            match build(state, c, &even_caps, pass, cand) {
                Ok((placement, notes)) if even_cells(&placement) => {
                    let mut alternatives = alternatives(&search, &ranked, i, &even_caps, vcpus, noun);
                    let verdict = Verdict::uneven(c.vcpus, from, k);
                    alternatives.insert(0, Alternative { nodes: uneven.nodes.clone(), verdict });
                    alternatives.truncate(MAX_ALTERNATIVES);
                    let mut cost = cost_of(state, &placement);
                    cost.device = device_cost(state, c, &placement);
                    let foreign = if c.has_device_nodes() { foreign_vcpus(state, &placement) } else { 0 };
                    let pass_no = usize::from(matches!(pass, Pass::Dedicated(PinMode::CoresThenThreads)) && c.costed());
                    return Some(Box::new(Built { placement, notes, alternatives, pass_no, k, cost, foreign }));
                }
                Ok(_) | Err(BuildError::Retry(_)) => {}
                Err(BuildError::Final(_)) => return None,
            }
        }
    }
    // No such set: for a VM above 4 vCPUs whose uneven cells have no
    // common size above one vCPU (a guest die per vCPU), the same nodes
    // with the vCPUs on fewer of them, the others memory-only: 2+2+2 and
    // a memory-only cell rather than 1+2+1+2. Only then: memory-only cells
    // are remote memory to every vCPU, and on the Azure trace doing this
    // for every VM cost more locality than the even cells gave
    // (docs/simulate.md § Issue 39).
    let set: Vec<usize> = uneven.nodes.iter().filter_map(|&id| state.node_pos(id)).collect();
    let sizes = || uneven.guest.cells.iter().map(|x| x.vcpus.len() as u64).filter(|&n| n > 0);
    let per_vcpu_dies = c.vcpus > 4 && sizes().fold(0, crate::split::gcd) == 1;
    for k in (2..from).rev().filter(|_| per_vcpu_dies) {
        // (Cells larger than the uneven ones' mean: no smallest share.)
        if !c.vcpus.is_multiple_of(k as u64 * c.gran) {
            continue;
        }
        let share = c.vcpus / k as u64;
        // The nodes that run vCPUs: the devices' first, then the most
        // free slots, then position.
        let mut room: Vec<usize> = set.iter().copied().filter(|&i| caps[i].slots >= share + c.extra).collect();
        room.sort_by_key(|&i| {
            let device = c.required.contains(&i) || c.preferred.contains(&i);
            (!device, std::cmp::Reverse(caps[i].slots), i)
        });
        if room.len() < k || c.required.iter().any(|r| set.contains(r) && !room[..k].contains(r)) {
            continue;
        }
        let runs = &room[..k];
        let narrow: Vec<NodeCap> = caps
            .iter()
            .enumerate()
            .map(|(i, cap)| if runs.contains(&i) { *cap } else { NodeCap { slots: 0, ..*cap } })
            .collect();
        let search = search(state, c, &narrow, vcpus.div_ceil(c.gran) * c.gran);
        let cand = search.candidate(set.clone());
        if let Ok((placement, notes)) = build(state, c, &narrow, pass, &cand) {
            if even_cells(&placement) {
                let alternatives =
                    vec![Alternative { nodes: uneven.nodes.clone(), verdict: Verdict::uneven(c.vcpus, from, k) }];
                let mut cost = cost_of(state, &placement);
                cost.device = device_cost(state, c, &placement);
                let foreign = if c.has_device_nodes() { foreign_vcpus(state, &placement) } else { 0 };
                let pass_no = usize::from(matches!(pass, Pass::Dedicated(PinMode::CoresThenThreads)) && c.costed());
                return Some(Box::new(Built { placement, notes, alternatives, pass_no, k, cost, foreign }));
            }
        }
    }
    None
}
