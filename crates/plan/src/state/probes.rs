//! What pinning a VM on a node would do ([`crate::pin::probe`]: whether
//! its vCPUs would span two L3 groups, whose idle siblings it would take),
//! kept with the state per node and pin mode, so the node-set search asks
//! the pinning once per node state instead of once per candidate node of
//! every pass, wider try and decision (issue 48 item 5: on a host of 32 L3
//! groups that pinning was a third of a decision).
//!
//! A probe reads only its own node: the node's PUs (taken, loaded,
//! reserved, in the pool), who owns them, and its counters. Every change
//! to those goes through [`HostState::count_cores`] (the counters of the
//! cores whose PUs change) or [`HostState::count_large`], which forget the
//! node's entries; the other nodes' entries stay good. Debug builds check
//! every entry found against a fresh probe, which every test then
//! exercises; `probe_cache_matches_a_fresh_probe` holds it over random
//! place and remove sequences.
//!
//! An entry is one atomic word, so a state shared between threads (the
//! fleet's hosts) stays `Sync`, and the memo is allocated on a host's
//! first probe that pins: a host of one L3 group per node with no large VM
//! never probes and keeps no memo.

use crate::pin::{PinMode, Probe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Pin modes a probe is asked for (the slots of one node).
const MODES: usize = 5;

/// An entry: bit 63 set when filled, bits 32-62 the vCPU count asked,
/// bit 31 [`Probe::spans_l3`], bits 0-30 [`Probe::siblings`].
const FILLED: u64 = 1 << 63;
const SPANS: u64 = 1 << 31;
const LOW: u64 = (1 << 31) - 1;

/// The memo: `MODES` entries per node position, in node order; each
/// holds the last count asked of that node in that mode.
#[derive(Default)]
pub(crate) struct ProbeCache {
    slots: OnceLock<Box<[AtomicU64]>>,
}

fn mode_index(mode: PinMode) -> usize {
    match mode {
        PinMode::Cores => 0,
        PinMode::Isolate => 1,
        PinMode::CoresThenThreads => 2,
        PinMode::Pairs => 3,
        PinMode::Packed => 4,
    }
}

/// The entry for `count` and `probe`, or `None` when either is too large
/// for its bits (such a probe is then computed every time).
fn pack(count: usize, probe: Probe) -> Option<u64> {
    let count = u64::try_from(count).ok().filter(|&c| c <= LOW)?;
    let siblings = u64::from(probe.siblings);
    if siblings > LOW {
        return None;
    }
    Some(FILLED | count << 32 | if probe.spans_l3 { SPANS } else { 0 } | siblings)
}

impl ProbeCache {
    /// The probe kept for `count` vCPUs on node position `node` in
    /// `mode`, if one is.
    pub(crate) fn get(&self, node: usize, mode: PinMode, count: usize) -> Option<Probe> {
        let word = self.slots.get()?.get(node * MODES + mode_index(mode))?.load(Ordering::Relaxed);
        if word & FILLED == 0 || (word >> 32) & LOW != count as u64 {
            return None;
        }
        Some(Probe { spans_l3: word & SPANS != 0, siblings: (word & LOW) as u32 })
    }

    /// Keeps `probe` for `count` vCPUs on node position `node` in `mode`
    /// (in place of what that slot held); `nodes` is the host's node count.
    pub(crate) fn put(&self, nodes: usize, node: usize, mode: PinMode, count: usize, probe: Probe) {
        let Some(word) = pack(count, probe) else { return };
        let slots = self.slots.get_or_init(|| (0..nodes * MODES).map(|_| AtomicU64::new(0)).collect());
        if let Some(slot) = slots.get(node * MODES + mode_index(mode)) {
            slot.store(word, Ordering::Relaxed);
        }
    }

    /// Forgets node position `node`'s entries: its PUs or counters are
    /// about to change or have changed.
    pub(crate) fn forget(&mut self, node: usize) {
        if let Some(slots) = self.slots.get_mut() {
            for slot in slots.iter_mut().skip(node * MODES).take(MODES) {
                *slot.get_mut() = 0;
            }
        }
    }
}

/// A copy of a state has the same PUs, so the same probes.
impl Clone for ProbeCache {
    fn clone(&self) -> ProbeCache {
        let copy = ProbeCache::default();
        if let Some(slots) = self.slots.get() {
            let _ = copy.slots.set(slots.iter().map(|s| AtomicU64::new(s.load(Ordering::Relaxed))).collect());
        }
        copy
    }
}

/// A memo is no part of what a state records: two states that record the
/// same VMs are equal whatever each has been asked.
impl PartialEq for ProbeCache {
    fn eq(&self, _: &ProbeCache) -> bool {
        true
    }
}

impl Eq for ProbeCache {}

impl std::fmt::Debug for ProbeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let filled = self.slots.get().map_or(0, |s| s.iter().filter(|w| w.load(Ordering::Relaxed) != 0).count());
        f.debug_struct("ProbeCache").field("filled", &filled).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_gives_back_its_probe_for_its_count_only() {
        let mut c = ProbeCache::default();
        assert_eq!(c.get(1, PinMode::Cores, 2), None, "nothing kept before the first probe");
        let p = Probe { spans_l3: true, siblings: 7 };
        c.put(4, 1, PinMode::Cores, 2, p);
        assert_eq!(c.get(1, PinMode::Cores, 2), Some(p));
        assert_eq!(c.get(1, PinMode::Cores, 3), None, "another count");
        assert_eq!(c.get(1, PinMode::Packed, 2), None, "another mode");
        assert_eq!(c.get(0, PinMode::Cores, 2), None, "another node");
        assert_eq!(c.clone().get(1, PinMode::Cores, 2), Some(p), "a copy keeps it");
        c.forget(0);
        assert_eq!(c.get(1, PinMode::Cores, 2), Some(p), "forgetting another node keeps it");
        c.forget(1);
        assert_eq!(c.get(1, PinMode::Cores, 2), None);
        c.put(4, 1, PinMode::Cores, 1 << 31, p);
        assert_eq!(c.get(1, PinMode::Cores, 1 << 31), None, "a count too large for the entry is not kept");
        let zero = Probe::default();
        c.put(4, 3, PinMode::Isolate, 0, zero);
        assert_eq!(c.get(3, PinMode::Isolate, 0), Some(zero), "an all-clear probe of no vCPUs is an entry too");
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

    const ALL_MODES: [PinMode; MODES] =
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
                            if let Some(kept) = state.probes.get(node, mode, count) {
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
