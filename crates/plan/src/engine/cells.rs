//! Plans for requests that give their guest cells: each cell matched to
//! a host node that holds it.

use super::*;

/// Candidate node sets ranked for a request with its own guest cells,
/// before the first whose nodes the cells can be assigned to.
pub(super) const CELL_SETS: usize = 16;

/// A request that gives its guest cells: each cell goes whole to one host
/// node (a different node for each, unless the request allows sharing),
/// in the passes any request of its kind makes (whole cores before
/// sibling threads). The node sets are the policy's best sets of that
/// many nodes, and the first one the cells can be matched to wins; if
/// none of those can, any matching over all nodes does, so a layout that
/// fits somewhere is never refused.
pub(super) fn plan_cells(state: &HostState, c: &Checked<'_>) -> Result<Decision, RejectReason> {
    let k = c.cells.len();
    let share = c.req.cells_share_nodes;
    if !share && k > c.k_max {
        return Err(RejectReason::CellsOverNodes { cells: k, max_nodes: c.k_max });
    }
    // CPUs each cell pins: its vCPUs, and cell 0 the emulator's own.
    let pinned: Vec<usize> = c
        .cells
        .iter()
        .enumerate()
        .map(|(i, cell)| cell.vcpus as usize + if i == 0 { c.extra as usize } else { 0 })
        .collect();
    let mut failure: Option<RejectReason> = None;
    for (pass_no, pass) in c.passes.iter().flatten().copied().enumerate() {
        let caps = capacities(state, c, pass);
        let slot = |i: usize| u64::from(c.cells[i].vcpus) + if i == 0 { c.slot_extra(pass) } else { 0 };
        let need: Vec<(u64, u64)> =
            (0..k).map(|i| (slot(i).div_ceil(c.gran) * c.gran, c.cells[i].memory_bytes)).collect();
        let search = search(state, c, &caps, need.iter().map(|x| x.0).sum());
        let ranked = search.run(if share { None } else { Some(k) }, CELL_SETS).ranked;
        let fit =
            |nodes: &[usize]| if share { pack_cells(&need, nodes, &caps) } else { match_cells(&need, nodes, &caps) };
        let mut found = ranked.iter().enumerate().find_map(|(i, cand)| fit(&cand.nodes).map(|a| (a, Some(i))));
        if found.is_none() && c.required.is_empty() {
            // Policy order over every node: by free slots, then position.
            let mut all: Vec<usize> = (0..state.node_count()).collect();
            all.sort_by_key(|&i| (std::cmp::Reverse(caps[i].slots), i));
            let any = fit(&all);
            found = any.clone().filter(|a| state.all_reach(a)).map(|a| (a, None));
            if found.is_none() && any.is_some() {
                // Only nodes at distance 255 from each other hold the
                // cells: say so rather than call it a shortfall.
                let (slots, memory) = need.iter().fold((0, 0), |a, x| (a.0 + x.0, a.1 + x.1));
                let noun = noun(pass);
                let pairs = reason::unreachable_pairs(state, &caps);
                let needed = slots.div_ceil(noun.per.max(1));
                failure = Some(RejectReason::Unreachable { resource: noun.resource, needed, memory, pairs });
                continue;
            }
        }
        let Some((assignment, chosen)) = found else {
            failure = Some(reason::cells_shortfall(state, &caps, &need, share, noun(pass)));
            continue;
        };
        // Each node's PUs are taken once for all its cells, then handed
        // out to them in guest cell order.
        let mut reserved = CpuSet::new();
        let mut slots: Vec<Option<CellPlan>> = vec![None; k];
        let mut built = true;
        for (i, &node) in assignment.iter().enumerate() {
            if assignment[..i].contains(&node) {
                continue;
            }
            let mine: Vec<usize> = (i..k).filter(|&j| assignment[j] == node).collect();
            let count = mine.iter().map(|&j| pinned[j]).sum();
            let emu = mine.first() == Some(&0) && c.extra > 0;
            let Some(mut pus) = take_pus(state, pass, node, count, emu, &mut reserved) else {
                built = false;
                break;
            };
            // A pairs VM's emulator CPU comes back last: it belongs at the
            // end of cell 0's CPUs, before the next cell's on this node.
            if emu && matches!(pass, Pass::Dedicated(PinMode::Pairs)) {
                if let Some(pu) = pus.pop() {
                    pus.insert((pinned[0] - 1).min(pus.len()), pu);
                }
            }
            let mut rest = pus.into_iter();
            for &j in &mine {
                let pus = rest.by_ref().take(pinned[j]).collect();
                slots[j] = Some(CellPlan::new(node, pus, c.cells[j].memory_bytes));
            }
        }
        if !built {
            failure = Some(RejectReason::NotBuildable);
            continue;
        }
        let cells: Vec<CellPlan> = slots.into_iter().flatten().collect();
        match assemble(state, c, pass, cells, reserved) {
            Ok((placement, mut notes)) => {
                if pass_no > 0 {
                    notes.insert(0, Note::SiblingThreads { vcpus: c.vcpus, max_nodes: c.k_max });
                }
                let alternatives = chosen
                    .map(|i| {
                        ranked
                            .iter()
                            .enumerate()
                            .filter(|&(j, _)| j > i)
                            .take(MAX_ALTERNATIVES)
                            .map(|(_, alt)| Alternative {
                                nodes: alt.nodes.iter().map(|&n| state.facts[n].id).collect(),
                                verdict: reason::verdict(&search, &ranked[i], alt, noun(pass)),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let mut all = c.notes.clone();
                all.extend(notes);
                return Ok(Decision { placement: Arc::new(placement), alternatives, notes: all });
            }
            Err(BuildError::Final(r)) => return Err(r),
            Err(BuildError::Retry(r)) => failure = Some(r),
        }
    }
    Err(failure.unwrap_or(RejectReason::NotBuildable))
}

/// Whether a node has room for a cell's (slots, bytes).
pub(super) fn cell_fits(cap: &NodeCap, need: (u64, u64)) -> bool {
    cap.slots >= need.0 && cap.mem_bytes >= need.1
}

/// A host node for each guest cell, all different, from `nodes` (tried in
/// order): a bipartite matching (augmenting paths), so 2+2 cells are
/// refused where only 3+1 fits and accepted wherever any assignment
/// fits, in polynomial time whatever the number of cells.
pub(super) fn match_cells(need: &[(u64, u64)], nodes: &[usize], caps: &[NodeCap]) -> Option<Vec<usize>> {
    pub(super) fn augment(
        cell: usize,
        need: &[(u64, u64)],
        nodes: &[usize],
        caps: &[NodeCap],
        owner: &mut [Option<usize>],
        seen: &mut [bool],
    ) -> bool {
        let fits = |j: usize| caps.get(nodes[j]).is_some_and(|cap| cell_fits(cap, need[cell]));
        // A free node first, in order: cells keep the nodes the policy
        // ranks first, and only a cell with no free node moves another.
        if let Some(j) = (0..nodes.len()).find(|&j| owner[j].is_none() && fits(j)) {
            owner[j] = Some(cell);
            return true;
        }
        for j in 0..nodes.len() {
            if seen[j] || !fits(j) {
                continue;
            }
            seen[j] = true;
            let free = match owner[j] {
                None => true,
                Some(other) => augment(other, need, nodes, caps, owner, seen),
            };
            if free {
                owner[j] = Some(cell);
                return true;
            }
        }
        false
    }
    if need.len() > nodes.len() {
        return None;
    }
    let mut owner: Vec<Option<usize>> = vec![None; nodes.len()];
    for cell in 0..need.len() {
        let mut seen = vec![false; nodes.len()];
        if !augment(cell, need, nodes, caps, &mut owner, &mut seen) {
            return None;
        }
    }
    let mut out = vec![0; need.len()];
    for (j, o) in owner.iter().enumerate() {
        if let Some(cell) = o {
            out[*cell] = nodes[j];
        }
    }
    Some(out)
}

/// Guest cells that may share host nodes: the largest cell first, each to
/// the first node of `nodes` with room left (first fit decreasing).
pub(super) fn pack_cells(need: &[(u64, u64)], nodes: &[usize], caps: &[NodeCap]) -> Option<Vec<usize>> {
    let mut left: Vec<NodeCap> = nodes.iter().map(|&i| caps.get(i).copied().unwrap_or_default()).collect();
    let mut order: Vec<usize> = (0..need.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(need[i]), i));
    let mut out = vec![0; need.len()];
    for i in order {
        let j = left.iter().position(|cap| cell_fits(cap, need[i]))?;
        left[j].slots -= need[i].0;
        left[j].mem_bytes -= need[i].1;
        out[i] = nodes[j];
    }
    Some(out)
}
