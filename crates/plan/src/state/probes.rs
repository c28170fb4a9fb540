//! What pinning a VM on a node would do (`pin::probe`: whether
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
//! exercises; `pin::tests::probe_cache_matches_a_fresh_probe` holds it over random
//! place and remove sequences.
//!
//! An entry is one atomic word, so a state shared between threads (the
//! fleet's hosts) stays `Sync`, and the memo is allocated on a host's
//! first probe that pins: a host of one L3 group per node with no large VM
//! never probes and keeps no memo.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Entries per node: one per pin mode a probe is asked for (the pinning
/// numbers them, `pin::mode_slot`; this module knows no pinning, so the
/// two do not import each other).
pub(crate) const MODES: usize = 5;

/// An entry: bit 63 set when filled, bits 32-62 the vCPU count asked,
/// bit 31 whether the vCPUs would span two L3 groups, bits 0-30 the
/// vCPUs of the largest VM whose idle sibling they would take.
const FILLED: u64 = 1 << 63;
const SPANS: u64 = 1 << 31;
const LOW: u64 = (1 << 31) - 1;

/// The memo: `MODES` entries per node position, in node order; each
/// holds the last count asked of that node in that mode.
#[derive(Default)]
pub(crate) struct ProbeCache {
    slots: OnceLock<Box<[AtomicU64]>>,
}

/// What a probe found: its vCPUs would span two L3 groups, and the
/// vCPUs of the largest VM whose idle sibling it would take.
pub(crate) type Found = (bool, u32);

/// The entry for `count` and `found`, or `None` when either is too large
/// for its bits (such a probe is then computed every time).
fn pack(count: usize, (spans, siblings): Found) -> Option<u64> {
    let count = u64::try_from(count).ok().filter(|&c| c <= LOW)?;
    let siblings = u64::from(siblings);
    if siblings > LOW {
        return None;
    }
    Some(FILLED | count << 32 | if spans { SPANS } else { 0 } | siblings)
}

impl ProbeCache {
    /// What was kept for `count` vCPUs on node position `node` in the pin
    /// mode numbered `mode` (below [`MODES`]), if anything is.
    pub(crate) fn get(&self, node: usize, mode: usize, count: usize) -> Option<Found> {
        let word = self.slots.get()?.get(node * MODES + mode)?.load(Ordering::Relaxed);
        if mode >= MODES || word & FILLED == 0 || (word >> 32) & LOW != count as u64 {
            return None;
        }
        Some((word & SPANS != 0, (word & LOW) as u32))
    }

    /// Keeps `found` for `count` vCPUs on node position `node` in the pin
    /// mode numbered `mode` (in place of what that slot held); `nodes` is
    /// the host's node count.
    pub(crate) fn put(&self, nodes: usize, node: usize, mode: usize, count: usize, found: Found) {
        let Some(word) = pack(count, found) else { return };
        if mode >= MODES {
            return;
        }
        let slots = self.slots.get_or_init(|| (0..nodes * MODES).map(|_| AtomicU64::new(0)).collect());
        if let Some(slot) = slots.get(node * MODES + mode) {
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
    fn an_entry_gives_back_what_was_found_for_its_count_only() {
        let mut c = ProbeCache::default();
        assert_eq!(c.get(1, 0, 2), None, "nothing kept before the first probe");
        let p = (true, 7);
        c.put(4, 1, 0, 2, p);
        assert_eq!(c.get(1, 0, 2), Some(p));
        assert_eq!(c.get(1, 0, 3), None, "another count");
        assert_eq!(c.get(1, 4, 2), None, "another mode");
        assert_eq!(c.get(0, 0, 2), None, "another node");
        assert_eq!(c.clone().get(1, 0, 2), Some(p), "a copy keeps it");
        c.forget(0);
        assert_eq!(c.get(1, 0, 2), Some(p), "forgetting another node keeps it");
        c.forget(1);
        assert_eq!(c.get(1, 0, 2), None);
        c.put(4, 1, 0, 1 << 31, p);
        assert_eq!(c.get(1, 0, 1 << 31), None, "a count too large for the entry is not kept");
        c.put(4, 3, 1, 0, (false, 0));
        assert_eq!(c.get(3, 1, 0), Some((false, 0)), "an all-clear probe of no vCPUs is an entry too");
        c.put(4, 3, MODES, 2, p);
        assert_eq!(c.get(3, MODES, 2), None, "no slot past the modes");
    }
}
