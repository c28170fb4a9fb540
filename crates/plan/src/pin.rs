//! The pinning accumulator: which PUs of a node a VM's vCPUs get.
//!
//! One `take` per node, in numbered steps like a CPU manager: whole free
//! cores first, then single threads. Chosen PUs come back in (core,
//! thread) order, so vCPU numbers follow node, then core, then thread, and
//! the siblings of one core get consecutive vCPUs in one guest cell.

use crate::few::Few;
use crate::state::HostState;

/// How a dedicated VM uses the threads of a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinMode {
    /// One vCPU on the first thread of each free whole core; siblings
    /// stay free for others (prefer-cores, first pass).
    Cores,
    /// A whole core per vCPU, siblings reserved and idle (isolate).
    Isolate,
    /// A free whole core per vCPU when the node has enough; else the
    /// fewest threads per free whole core that hold them (sibling pairs on
    /// two-thread cores), then the idle siblings of other VMs' cores
    /// (prefer-cores when cores run out, and compact).
    CoresThenThreads,
    /// Both threads of free SMT cores; an odd last vCPU takes a core alone
    /// and reserves its sibling.
    Pairs,
    /// Any free PU, packing siblings (SMT policy `any`).
    Packed,
}

/// PUs taken on one node.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// PUs the vCPUs run on, in vCPU order.
    pub(crate) pinned: Vec<u32>,
    /// PUs reserved for the VM but running no vCPU (isolate's siblings).
    pub(crate) reserved: Vec<u32>,
}

/// Takes `count` PUs on node position `node` for a dedicated VM. `None`
/// if the node cannot supply them (the search's counters said it could,
/// so this only happens if a caller mixed up states).
pub(crate) fn take(state: &HostState, node: usize, count: usize, mode: PinMode) -> Option<Taken> {
    let facts = state.facts.get(node)?;
    let mut out = Taken::default();
    if count == 0 {
        return Some(out);
    }
    if mode != PinMode::CoresThenThreads {
        return take_in_order(state, node, count, mode);
    }
    let whole = |core: &Vec<u32>| core.iter().all(|&pu| state.pu_free(pu));
    // (core position, thread position, pu) for sorting back into order.
    // (On the stack for the few vCPUs most VMs have.)
    let mut chosen: Few<(usize, usize, u32)> = Few::new(count);
    // The state keeps this count per node (its "all PUs free" is `whole`),
    // so a node with none, the usual case here, skips a walk of its cores.
    let free_whole = state.uses.get(node).map_or(0, |u| u.free_cores as usize);
    debug_assert_eq!(free_whole, facts.cores.iter().filter(|c| whole(c)).count());
    if free_whole >= count {
        // A core per vCPU, within one L3 group where one has room.
        let one = |c: &Vec<u32>| usize::from(whole(c));
        let order = l3_order(state, node, count, one);
        for ci in walk(&order, facts.cores.len()).filter(|&ci| whole(&facts.cores[ci])).take(count) {
            chosen.push((ci, 0, facts.cores[ci][0]));
        }
    } else {
        // Not enough whole cores: the same number of threads on each of
        // as many whole cores as that takes (the guest is told it has
        // threads), leaving the other whole cores whole, and only then the
        // idle sibling of a core another VM (or the host) uses: that VM
        // was given whole cores so that its siblings stay quiet. The
        // fewest threads per core that fit: two where two do, so on a
        // host of four or eight threads per core a VM is not packed onto
        // a quarter of the cores it could have (24 vCPUs on 12 cores of
        // 4 threads, not on 6).
        if free_whole > 0 {
            let per_core = threads_per_core(state, node, count, free_whole);
            let room = |c: &Vec<u32>| if whole(c) { c.len().min(per_core) } else { 0 };
            let order = l3_order(state, node, count, room);
            'groups: for ci in walk(&order, facts.cores.len()).filter(|&ci| whole(&facts.cores[ci])) {
                let core = &facts.cores[ci];
                for (ti, &pu) in core.iter().enumerate().take(per_core) {
                    if chosen.len() == count {
                        break 'groups;
                    }
                    chosen.push((ci, ti, pu));
                }
            }
        }
        // Other VMs' idle siblings, those that hurt least first: of VMs
        // whose guests were told pairs (they already share their cores)
        // or of the host, then of the smallest VMs, and the siblings of a
        // large dedicated VM last (issue 39: 40 small VMs fit beside a
        // 64-vCPU database without touching its cores); among equals,
        // within one L3 where one has them.
        if chosen.len() < count {
            let room = |c: &Vec<u32>| if whole(c) { 0 } else { c.iter().filter(|&&pu| state.pu_free(pu)).count() };
            let order = l3_order(state, node, count - chosen.len(), room);
            let mut foreign: Few<(u32, usize, usize), 16> = Few::new(facts.cores.len());
            for (rank, ci) in walk(&order, facts.cores.len()).enumerate() {
                let c = &facts.cores[ci];
                if !whole(c) && c.iter().any(|&pu| state.pu_free(pu)) {
                    foreign.push((sibling_weight(state, c), rank, ci));
                }
            }
            let foreign = foreign.as_mut_slice();
            foreign.sort_unstable();
            'foreign: for &(_, _, ci) in foreign.iter() {
                for (ti, &pu) in facts.cores[ci].iter().enumerate() {
                    if chosen.len() == count {
                        break 'foreign;
                    }
                    if state.pu_free(pu) {
                        chosen.push((ci, ti, pu));
                    }
                }
            }
        }
    }
    let chosen = chosen.as_mut_slice();
    chosen.sort_unstable();
    if chosen.len() < count {
        return None;
    }
    out.pinned = chosen.iter().map(|&(_, _, pu)| pu).collect();
    Some(out)
}

/// How much taking a free thread of `core` would hurt the VMs on its other
/// threads: the vCPUs of the largest dedicated VM there, 0 for one whose
/// guest was told it has threads (it already shares its cores) or for the
/// host's CPUs.
fn sibling_weight(state: &HostState, core: &[u32]) -> u32 {
    core.iter()
        .filter_map(|&pu| state.pu_owner(pu))
        .map(|p| if p.guest.threads > 1 { 0 } else { p.vcpus.len() as u32 })
        .max()
        .unwrap_or(0)
}

/// The fewest threads per free whole core of node `node` that hold
/// `count` vCPUs, each core giving at most its own threads; every thread
/// when even that is not enough (the rest then go to other VMs' idle
/// siblings).
fn threads_per_core(state: &HostState, node: usize, count: usize, free_whole: usize) -> usize {
    let Some(facts) = state.facts.get(node) else { return 1 };
    let whole = || facts.cores.iter().filter(|c| c.iter().all(|&pu| state.pu_free(pu)));
    let widest = whole().map(Vec::len).max().unwrap_or(1);
    let mut per_core = count.div_ceil(free_whole.max(1)).max(1);
    // Cores of fewer threads (a hybrid CPU's) give less than `per_core`.
    while per_core < widest && whole().map(|c| c.len().min(per_core)).sum::<usize>() < count {
        per_core += 1;
    }
    per_core.min(widest)
}

/// One more CPU on node `node` beside PUs already `taken` there, for the
/// emulator threads of a `pairs` VM (`emulator: isolate`): a lone free
/// thread of a core another VM uses first, as Nova's answer places it
/// (the emulator is no vCPU, so it breaks no pair), else the first thread
/// of a free whole core with its siblings reserved idle. Returns the PU
/// and the siblings to reserve.
pub(crate) fn take_emulator(state: &HostState, node: usize, taken: &[u32]) -> Option<(u32, Vec<u32>)> {
    let facts = state.facts.get(node)?;
    let free = |pu: u32| state.pu_free(pu) && !taken.contains(&pu);
    let whole = |core: &Vec<u32>| core.iter().all(|&pu| free(pu));
    let lone = facts.cores.iter().filter(|c| !whole(c)).flat_map(|c| c.iter().copied()).find(|&pu| free(pu));
    if let Some(pu) = lone {
        return Some((pu, Vec::new()));
    }
    let core = facts.cores.iter().find(|c| whole(c))?;
    let (first, rest) = core.split_first()?;
    Some((*first, rest.to_vec()))
}

/// `take` for the modes whose picks already come in (core, thread) order:
/// the PUs go straight into the result, with no sort buffer.
fn take_in_order(state: &HostState, node: usize, count: usize, mode: PinMode) -> Option<Taken> {
    let facts = state.facts.get(node)?;
    let mut out = Taken { pinned: Vec::with_capacity(count), reserved: Vec::new() };
    let chosen = &mut out.pinned;
    let whole = |core: &Vec<u32>| core.iter().all(|&pu| state.pu_free(pu));
    // Whole cores are walked L3 group by group (`l3_order`), then the
    // picks are put back into core order so vCPU numbers follow cores.
    let n = facts.cores.len();
    match mode {
        PinMode::Cores | PinMode::Isolate => {
            let one = |c: &Vec<u32>| usize::from(whole(c));
            let order = l3_order(state, node, count, one);
            for core in walk(&order, n).map(|ci| &facts.cores[ci]).filter(|c| whole(c)) {
                if chosen.len() == count {
                    break;
                }
                let (first, rest) = core.split_first()?;
                chosen.push(*first);
                if mode == PinMode::Isolate {
                    out.reserved.extend_from_slice(rest);
                }
            }
        }
        PinMode::Pairs => {
            let pair = |c: &Vec<u32>| if c.len() >= 2 && whole(c) { 2 } else { 0 };
            let order = l3_order(state, node, count, pair);
            for core in walk(&order, n).map(|ci| &facts.cores[ci]).filter(|c| pair(c) > 0) {
                let left = count - chosen.len();
                if left == 0 {
                    break;
                }
                chosen.push(core[0]);
                if left >= 2 {
                    chosen.push(core[1]);
                } else {
                    out.reserved.push(core[1]);
                }
            }
        }
        PinMode::Packed => {
            // Whole free cores, every thread, before other VMs' idle
            // siblings; then back into (core, thread) order. As few whole
            // cores as hold the VM, filled evenly, so the guest can be told
            // its threads: 6 vCPUs on four-thread cores go 3 and 3, not 4
            // and 2 (two-thread cores fill as they always did).
            let widths = || facts.cores.iter().filter(|c| whole(c)).map(Vec::len);
            let widest = widths().max().unwrap_or(1);
            let even = count.div_ceil(count.div_ceil(widest));
            // Too few whole cores for the even fill: fill them whole first,
            // as before, and the rest goes to other cores' free threads.
            let per_core = if widths().map(|w| w.min(even)).sum::<usize>() >= count { even } else { widest };
            for foreign in [false, true] {
                'outer: for core in &facts.cores {
                    if whole(core) == foreign {
                        continue;
                    }
                    let limit = if foreign { core.len() } else { per_core };
                    for &pu in core.iter().take(limit) {
                        if chosen.len() == count {
                            break 'outer;
                        }
                        if state.pu_free(pu) {
                            chosen.push(pu);
                        }
                    }
                }
            }
            chosen.sort_unstable_by_key(|&pu| facts.cores.iter().position(|c| c.contains(&pu)));
        }
        // Needs the sort buffer: handled by `take`.
        PinMode::CoresThenThreads => return None,
    }
    if out.pinned.len() < count {
        return None;
    }
    if !facts.l3.is_empty() {
        out.pinned.sort_by_key(|&pu| state.core_index(pu));
    }
    Some(out)
}

/// The positions of node `node`'s cores in the order a VM that needs
/// `need` PUs should take them, `room` saying how many of a core's PUs it
/// may take: on a node of several L3 groups (an EPYC CCX, a chiplet), the
/// group with the least room that still holds `need` comes first, so a small VM keeps one
/// cache and leaves the roomier groups whole for the next; a VM no group
/// holds takes the groups with the most room first, so it spans as few
/// caches as it can and splits on their boundaries. Every other core
/// follows in core order. A node of one group keeps core order.
/// `None` is core order, given without building it: a node of one group
/// (most hosts) pins with no allocation for the order.
fn l3_order(state: &HostState, node: usize, need: usize, room: impl Fn(&Vec<u32>) -> usize) -> Option<Order> {
    let facts = state.facts.get(node)?;
    if facts.l3.is_empty() {
        return None;
    }
    // The PUs each group has for the VM, groups in order of their first
    // core (`NodeFacts::l3_groups`, worked out with the state). (Lists on
    // the stack: pinning on a host of L3 groups runs for the node a VM
    // lands on and for the node the last one changed, every decision.)
    let groups = &facts.l3_groups;
    let mut rooms: Few<usize, 16> = Few::new(groups.len());
    for cores in groups {
        rooms.push(cores.iter().filter_map(|&ci| facts.cores.get(ci)).map(&room).sum());
    }
    let rooms = rooms.as_slice();
    let mut picked: Few<bool, 16> = Few::new(groups.len());
    (0..groups.len()).for_each(|_| picked.push(false));
    let picked = picked.as_mut_slice();
    let mut order: Order = Few::new(facts.cores.len());
    let mut left = need;
    while left > 0 {
        let open = || (0..groups.len()).filter(|&g| rooms[g] > 0 && !picked[g]);
        // The group with the least room that holds what is left (the
        // first of equals), else the one with the most (the first of
        // equals).
        let fit = open().filter(|&g| rooms[g] >= left).min_by_key(|&g| rooms[g]);
        let widest = open().rev().max_by_key(|&g| rooms[g]);
        let Some(g) = fit.or(widest) else { break };
        picked[g] = true;
        groups[g].iter().for_each(|&ci| order.push(ci));
        left = left.saturating_sub(rooms[g]);
    }
    for ci in (0..facts.cores.len()).filter(|&ci| !facts.l3_slot.get(ci).is_some_and(|&g| picked[g])) {
        order.push(ci);
    }
    Some(order)
}

/// Core positions in the order pinning walks them ([`l3_order`]).
type Order = Few<usize, 64>;

/// What pinning a VM on one node would do to it and to its neighbours,
/// for the node-set search to rank nodes by (docs/plan.md § L3 groups,
/// § whose idle siblings go first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Probe {
    /// Its vCPUs would run under two or more L3 groups.
    pub(crate) spans_l3: bool,
    /// The vCPUs of the largest dedicated VM whose idle sibling it would
    /// take ([`sibling_weight`]; 0 when it takes none, or only those of
    /// VMs told pairs and of the host). Asked only on a node that holds a
    /// large VM (`NodeUse::large_vms`): elsewhere it is at most
    /// `SMALL_VM_VCPUS` and left 0.
    pub(crate) siblings: u32,
}

/// [`Probe`] for `count` vCPUs pinned on node `node` in `mode`: the
/// pinning itself is asked, since which threads it takes (best fit,
/// other VMs' siblings smallest VM first) decides both, not the free room
/// alone. Pins nothing where it cannot change the answer: a node of one
/// L3 group (most hosts) that holds no large VM, whose whole free cores
/// hold a core per vCPU, or a mode that takes whole cores only. (Pinning
/// every node of a 64-node host for every VM short of whole cores took
/// its fill bench from 1.7 to 3.0 ms.)
pub(crate) fn probe(state: &HostState, node: usize, count: usize, mode: PinMode) -> Probe {
    let Some(facts) = state.facts.get(node) else { return Probe::default() };
    if facts.l3.is_empty() && !takes_foreign(state, node, count, mode) {
        return Probe::default();
    }
    // Asked once per node state: the search asks every node of every pass
    // (and each wider try and decision), and only the nodes a VM is placed
    // on or removed from change (`state/probes.rs`).
    if let Some((spans_l3, siblings)) = state.probes.get(node, mode_slot(mode), count) {
        let kept = Probe { spans_l3, siblings };
        debug_assert_eq!(kept, fresh_probe(state, node, count, mode), "probe of node position {node} kept");
        return kept;
    }
    let fresh = fresh_probe(state, node, count, mode);
    state.probes.put(state.facts.len(), node, mode_slot(mode), count, (fresh.spans_l3, fresh.siblings));
    fresh
}

/// The state's probe memo slot of each pin mode (`state/probes.rs`, which
/// keeps `MODES` = 5 per node).
fn mode_slot(mode: PinMode) -> usize {
    match mode {
        PinMode::Cores => 0,
        PinMode::Isolate => 1,
        PinMode::CoresThenThreads => 2,
        PinMode::Pairs => 3,
        PinMode::Packed => 4,
    }
}

/// Whether `count` vCPUs pinned on node `node` in `mode` could take the
/// idle sibling of a large VM there (then [`Probe::siblings`] is asked).
fn takes_foreign(state: &HostState, node: usize, count: usize, mode: PinMode) -> bool {
    let Some(u) = state.uses.get(node) else { return false };
    matches!(mode, PinMode::CoresThenThreads | PinMode::Packed) && count > u.free_cores as usize && u.large_vms > 0
}

/// [`probe`] worked out from the pinning itself, with nothing kept.
pub(crate) fn fresh_probe(state: &HostState, node: usize, count: usize, mode: PinMode) -> Probe {
    let Some(facts) = state.facts.get(node) else { return Probe::default() };
    let foreign = takes_foreign(state, node, count, mode);
    if facts.l3.is_empty() && !foreign {
        return Probe::default();
    }
    let Some(taken) = take(state, node, count, mode) else { return Probe::default() };
    let mut out = Probe::default();
    if !facts.l3.is_empty() {
        let group = |pu: u32| state.core_index(pu).and_then(|(_, ci)| facts.l3.get(ci as usize).copied());
        let first = taken.pinned.first().and_then(|&pu| group(pu));
        out.spans_l3 = taken.pinned.iter().any(|&pu| group(pu) != first);
    }
    if foreign {
        out.siblings = taken
            .pinned
            .iter()
            .filter_map(|&pu| state.core_on(node, pu))
            .map(|core| sibling_weight(state, core))
            .max()
            .unwrap_or(0);
    }
    out
}

/// The core positions `0..n` in `order` ([`l3_order`]), or in core order.
fn walk(order: &Option<Order>, n: usize) -> impl Iterator<Item = usize> + '_ {
    let order = order.as_ref().map(Few::as_slice);
    (0..n).map(move |i| order.and_then(|o| o.get(i).copied()).unwrap_or(i))
}

/// Spreads `count` shared vCPUs over the node's non-dedicated PUs, each to
/// the least loaded one (ties: core order), and returns the PU each is
/// counted against, in vCPU order.
pub(crate) fn take_shared(state: &HostState, node: usize, count: usize) -> Option<Vec<u32>> {
    let facts = state.facts.get(node)?;
    // (load including this VM's vCPUs so far, pu), in core order: the
    // CPUs of cores no dedicated VM uses when there are any, so shared
    // vCPUs do not land on a pinned VM's idle siblings.
    let clean = clean_pus(state, node);
    let mut pool: Vec<(u32, u32)> = facts
        .cores
        .iter()
        .flatten()
        .filter(|&&pu| state.pu_open(pu) && (clean.is_empty() || clean.contains(&pu)))
        .map(|&pu| (state.load.get(pu as usize).copied().unwrap_or(0), pu))
        .collect();
    if pool.is_empty() && count > 0 {
        return None;
    }
    let mut picked: Vec<(usize, u32)> = Vec::with_capacity(count);
    for _ in 0..count {
        // Linear scan: pools are one node's threads, and a min-heap costs
        // more than it saves at that size.
        let (at, _) = pool.iter().enumerate().min_by_key(|&(i, &(load, _))| (load, i))?;
        let slot = pool.get_mut(at)?;
        slot.0 += 1;
        picked.push((at, slot.1));
    }
    picked.sort_unstable();
    Some(picked.into_iter().map(|(_, pu)| pu).collect())
}

/// The PUs shared vCPUs float over on a node: the open PUs of cores no
/// dedicated VM uses when there are any, else every open PU.
pub(crate) fn float_pus(state: &HostState, node: usize) -> Vec<u32> {
    let clean = clean_pus(state, node);
    if !clean.is_empty() {
        return clean;
    }
    let Some(facts) = state.facts.get(node) else { return Vec::new() };
    facts.cores.iter().flatten().copied().filter(|&pu| state.pu_open(pu)).collect()
}

/// The open PUs of a node's cores that no dedicated VM (and not the host)
/// uses, in core order.
pub(crate) fn clean_pus(state: &HostState, node: usize) -> Vec<u32> {
    let Some(facts) = state.facts.get(node) else { return Vec::new() };
    facts.cores.iter().filter(|core| core.iter().all(|&pu| state.pu_open(pu))).flatten().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An order as a list, to compare.
    fn kept(order: Option<Order>) -> Option<Vec<usize>> {
        order.map(|o| o.as_slice().to_vec())
    }

    /// `l3_order` as it was before the groups were kept with the state
    /// (grouping the cores again on every call): the reference the kept
    /// groups must give the same order as.
    fn l3_order_regrouped(
        state: &HostState,
        node: usize,
        need: usize,
        room: &dyn Fn(&Vec<u32>) -> usize,
    ) -> Option<Vec<usize>> {
        let facts = state.facts.get(node)?;
        let all = 0..facts.cores.len();
        if facts.l3.is_empty() {
            return None;
        }
        let mut groups: Vec<(u32, usize)> = Vec::new();
        for (ci, core) in facts.cores.iter().enumerate() {
            let g = facts.l3.get(ci).copied().unwrap_or(u32::MAX);
            let n = room(core);
            match groups.iter_mut().find(|r| r.0 == g) {
                Some(r) => r.1 += n,
                None => groups.push((g, n)),
            }
        }
        let mut picked: Vec<u32> = Vec::new();
        let mut left = need;
        while left > 0 {
            let open = groups.iter().filter(|r| r.1 > 0 && !picked.contains(&r.0));
            let fit = open.clone().filter(|r| r.1 >= left).min_by_key(|r| r.1);
            let widest = open.rev().max_by_key(|r| r.1);
            let Some(&(g, n)) = fit.or(widest) else { break };
            picked.push(g);
            left = left.saturating_sub(n);
        }
        let group = |ci: usize| facts.l3.get(ci).copied().unwrap_or(u32::MAX);
        let mut order: Vec<usize> = Vec::with_capacity(facts.cores.len());
        for g in &picked {
            order.extend(all.clone().filter(|&ci| group(ci) == *g));
        }
        order.extend(all.filter(|ci| !picked.contains(&group(*ci))));
        Some(order)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

        /// On hosts of several L3 groups per node, filled by random VMs,
        /// the kept groups rank every node's cores as regrouping them did,
        /// for every need and every kind of room pinning asks about.
        #[test]
        fn kept_l3_groups_order_cores_as_regrouping_did(
            host in 0usize..3,
            sizes in proptest::collection::vec(1u32..=12, 1..30),
        ) {
            use crate::{plan, HostState, Request};
            let shape = [
                "2 nodes x 4 l3 x 4 cores x 2 threads, 64GiB per node",
                "2 nodes x 2 l3 x 3 cores x 4 threads, 64GiB per node",
                "1 node x 3 l3 x 2 cores x 2 threads, 64GiB per node",
            ][host];
            let topology = numaplace_read::synthetic::parse(shape).expect("shape");
            let mut state = HostState::new(&topology);
            for (i, vcpus) in sizes.into_iter().enumerate() {
                let r = Request::new(format!("vm{i}"), vcpus, 1 << 30);
                if let Ok(d) = plan(&topology, &state, &r) {
                    state.place_shared(d.placement.clone()).expect("fits");
                }
                for node in 0..state.facts.len() {
                    let whole = |c: &Vec<u32>| c.iter().all(|&pu| state.pu_free(pu));
                    let one = |c: &Vec<u32>| usize::from(whole(c));
                    let two = |c: &Vec<u32>| if whole(c) { c.len().min(2) } else { 0 };
                    let foreign =
                        |c: &Vec<u32>| if whole(c) { 0 } else { c.iter().filter(|&&pu| state.pu_free(pu)).count() };
                    for need in 1..=14 {
                        proptest::prop_assert_eq!(kept(l3_order(&state, node, need, one)), l3_order_regrouped(&state, node, need, &one));
                        proptest::prop_assert_eq!(kept(l3_order(&state, node, need, two)), l3_order_regrouped(&state, node, need, &two));
                        proptest::prop_assert_eq!(
                            kept(l3_order(&state, node, need, foreign)),
                            l3_order_regrouped(&state, node, need, &foreign)
                        );
                    }
                }
            }
        }
    }

    /// Hosts whose nodes hold several L3 groups (and one without, where
    /// only large VMs' siblings are probed), read once.
    fn hosts() -> &'static [numaplace_topo::Topology] {
        static HOSTS: std::sync::OnceLock<Vec<numaplace_topo::Topology>> = std::sync::OnceLock::new();
        HOSTS.get_or_init(|| {
            let corona = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/topologies/mpibind/epyc-corona.xml");
            let mut out = vec![numaplace_read::read_source(&corona.to_string_lossy()).expect("corona reads")];
            for shape in [
                "2 nodes x 4 l3 x 4 cores x 2 threads, 64GiB per node",
                "2 nodes x 2 l3 x 3 cores x 4 threads, 64GiB per node",
                "2 nodes x 8 cores x 2 threads, 64GiB per node",
            ] {
                out.push(numaplace_read::synthetic::parse(shape).expect("shape"));
            }
            out
        })
    }

    const ALL_MODES: [PinMode; 5] =
        [PinMode::Cores, PinMode::Isolate, PinMode::CoresThenThreads, PinMode::Pairs, PinMode::Packed];

    #[derive(Clone, Debug)]
    enum Step {
        Place { vcpus: u32, smt: usize, shared: bool },
        Remove(usize),
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
        use proptest::prelude::*;
        let place = (1u32..=20, 0usize..4, proptest::bool::weighted(0.2))
            .prop_map(|(vcpus, smt, shared)| Step::Place { vcpus, smt, shared });
        let step = prop_oneof![3 => place, 1 => (0usize..64).prop_map(Step::Remove)];
        proptest::collection::vec(step, 1..40)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// Every probe the state keeps, after any sequence of placements
        /// and removals, is what the pinning says on the state as it is:
        /// each step first fills the memo for every node and mode, then
        /// changes the state, then every kept entry is checked.
        #[test]
        fn probe_cache_matches_a_fresh_probe(host in 0usize..4, steps in steps(), asked in 1usize..=12) {
            use crate::{plan, CpuMode, HostState, Request, SmtPolicy};
            let topology = &hosts()[host];
            let mut state = HostState::new(topology);
            let mut names: Vec<String> = Vec::new();
            let nodes = state.facts.len();
            for (i, step) in steps.into_iter().enumerate() {
                for node in 0..nodes {
                    for (m, &mode) in ALL_MODES.iter().enumerate() {
                        crate::pin::probe(&state, node, (asked + i + node + m) % 12 + 1, mode);
                    }
                }
                match step {
                    Step::Place { vcpus, smt, shared } => {
                        let mut r = Request::new(format!("vm{i}"), vcpus, 1 << 30);
                        r.smt = [SmtPolicy::PreferCores, SmtPolicy::Pairs, SmtPolicy::Isolate, SmtPolicy::Any][smt];
                        if shared {
                            r.cpu_mode = CpuMode::Shared;
                            r.overcommit = 4.0;
                        }
                        let Ok(d) = plan(topology, &state, &r) else { continue };
                        state.place_shared(d.placement.clone()).expect("a fresh plan fits its state");
                        names.push(r.name);
                    }
                    Step::Remove(n) if !names.is_empty() => {
                        let name = names.remove(n % names.len());
                        state.remove(&name).expect("placed");
                    }
                    Step::Remove(_) => {}
                }
                for node in 0..nodes {
                    for &mode in &ALL_MODES {
                        for count in 1..=12 {
                            if let Some((spans_l3, siblings)) = state.probes.get(node, mode_slot(mode), count) {
                                let kept = Probe { spans_l3, siblings };
                                let fresh = crate::pin::fresh_probe(&state, node, count, mode);
                                proptest::prop_assert_eq!(kept, fresh, "node {} {:?} count {} after step {}", node, mode, count, i);
                            }
                        }
                    }
                }
            }
        }
    }
}
