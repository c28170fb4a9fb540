//! Counting each node's capacity for one pass: the slots the node-set
//! search reads, and the pin probe behind them.

use super::*;

pub(super) fn noun(pass: Pass) -> SlotNoun {
    let (resource, per) = match pass {
        Pass::Dedicated(PinMode::Cores | PinMode::Isolate) => (Resource::FreeCores, 1),
        Pass::Dedicated(PinMode::Pairs) => (Resource::SiblingPairs, 2),
        Pass::Dedicated(PinMode::CoresThenThreads | PinMode::Packed) => (Resource::FreeThreads, 1),
        Pass::Shared | Pass::SharedCores => (Resource::SharedSlots, 1),
    };
    SlotNoun { plural: resource.plural(), resource, per }
}

/// Each node's capacity for one pass, in node order (on the stack for
/// hosts of up to 16 nodes: every pass of every decision counts them).
pub(super) fn capacities(state: &HostState, c: &Checked<'_>, pass: Pass) -> Caps {
    // Every node the VM may use keeps room for QEMU's own memory, which
    // is counted on the first of them.
    let overhead = state.reservations().overhead.bytes(c.req.memory_bytes);
    let host_kinds = &state.reservations().memory_kinds;
    let mut caps = Caps::new(state.node_count());
    for i in 0..state.node_count() {
        caps.push(node_cap(state, c, pass, i, overhead, host_kinds));
    }
    caps
}

/// Node capacities of one pass ([`capacities`]).
pub(super) type Caps = crate::few::Few<NodeCap, 16>;

/// [`capacities`] of node position `i`.
fn node_cap(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    i: usize,
    overhead: u64,
    host_kinds: &[numaplace_topo::MemoryKind],
) -> NodeCap {
    if c.excluded.get(i).copied().unwrap_or(false) {
        return NodeCap::default();
    }
    let slots = pass_slots(state, c, pass, i);
    // A node of a kind the VM may not use (HBM, CXL, GPU memory
    // unless asked or allowed by the host) holds none of its
    // memory; its CPUs, if any, still run vCPUs.
    let kind_ok = state.facts.get(i).is_some_and(|f| c.req.allows_memory(f.kind, host_kinds));
    let mem_bytes = match c.req.hugepage_bytes {
        _ if !kind_ok => 0,
        Some(_) if state.free_memory(i) < overhead => 0,
        Some(size) => state.free_pages(i, size).saturating_mul(size),
        // Overcommitted memory: each byte free holds the ratio's
        // worth of guest memory (QEMU's overhead is real).
        // Never more than the node could hold empty, though: a
        // guest cell larger than its host node (a 1.8 GiB cell on a
        // 1 GiB node at ratio 2) must page out as soon as it is
        // used, which is why Nova refuses it whatever the ratio.
        None if c.mem_milli > 1000 => {
            let free = u128::from(state.free_memory(i).saturating_sub(overhead));
            let charged = u64::try_from(free * u128::from(c.mem_milli) / 1000).unwrap_or(u64::MAX);
            charged.min(state.node_capacity(i).saturating_sub(overhead))
        }
        None => state.free_memory(i).saturating_sub(overhead),
    };
    // The last, partial unit of the request fits wherever a node's
    // leftover past its whole units holds it: counting it as one
    // more unit there keeps the search's sums exact for one node
    // (a VM of 900 MiB fits a node with 929 MiB free), while the
    // split still hands out only whole units.
    let whole = mem_bytes / c.unit;
    let part = u64::from(c.rem > 0 && mem_bytes % c.unit >= c.rem);
    let probe = probe(state, c, pass, i, slots);
    NodeCap { slots, units: whole + part, mem_bytes, whole, l3_split: probe.spans_l3, siblings: probe.siblings }
}

/// The vCPU slots node `i` offers a pass ([`NodeCap::slots`]), from the
/// state's counters alone.
#[inline]
pub(super) fn pass_slots(state: &HostState, c: &Checked<'_>, pass: Pass, i: usize) -> u64 {
    if c.excluded.get(i).copied().unwrap_or(false) {
        return 0;
    }
    let Some(u) = state.uses.get(i) else { return 0 };
    let slots = match pass {
        Pass::Dedicated(PinMode::Cores | PinMode::Isolate) => u64::from(u.free_cores),
        Pass::Dedicated(PinMode::Pairs) => 2 * u64::from(u.free_smt_cores),
        Pass::Dedicated(PinMode::CoresThenThreads | PinMode::Packed) => u64::from(u.free_pus),
        Pass::Shared => shared_slots(state, i, c.req.overcommit),
        Pass::SharedCores => shared_core_slots(state, i, c.req.overcommit),
    };
    slots / c.gran * c.gran
}

/// What pinning the whole VM on node `i` in this pass would do
/// ([`pin::probe`]: [`NodeCap::l3_split`], [`NodeCap::siblings`]); only
/// asked of a node that could hold every vCPU.
pub(super) fn probe(state: &HostState, c: &Checked<'_>, pass: Pass, i: usize, slots: u64) -> pin::Probe {
    let Pass::Dedicated(mode) = pass else { return pin::Probe::default() };
    let count = c.vcpus + c.slot_extra(pass);
    if slots < count {
        return pin::Probe::default();
    }
    pin::probe(state, i, count as usize, mode)
}

/// Shared vCPUs a node can still take: the CPUs shared vCPUs may float
/// over, times the overcommit ratio, less those already counted there.
pub(super) fn shared_slots(state: &HostState, node: usize, overcommit: f64) -> u64 {
    let u = &state.uses[node];
    let total = (f64::from(u.open_pus) * overcommit).floor();
    let total = if total.is_finite() && total > 0.0 { total as u64 } else { 0 };
    total.saturating_sub(u.shared_load)
}

/// [`shared_slots`] counting the node's open CPUs as cores: its open
/// threads times its cores over its threads.
pub(super) fn shared_core_slots(state: &HostState, node: usize, overcommit: f64) -> u64 {
    let u = &state.uses[node];
    let Some(f) = state.facts.get(node) else { return 0 };
    let pus: usize = f.cores.iter().map(Vec::len).sum();
    let cores = (u64::from(u.open_pus) * f.cores.len() as u64).checked_div(pus as u64).unwrap_or(0);
    let total = (cores as f64 * overcommit).floor();
    let total = if total.is_finite() && total > 0.0 { total as u64 } else { 0 };
    total.saturating_sub(u.shared_load)
}
