//! The node-set search: which host nodes a VM goes to.
//!
//! All three set-choosing policies want the fewest nodes first, so the
//! search finds the smallest feasible size and ranks only the sets of that
//! size. Hosts with up to [`EXACT_LIMIT`] nodes are enumerated exactly
//! (255 subsets at most, by increasing size, stopping at the first size
//! that has a feasible set); larger
//! hosts take one candidate per seed node, grown by distance from the seed
//! (ties: lowest position), adding only nodes that help with what is still
//! missing. That is O(N^2) steps at worst and O(N) for a VM that fits one
//! node, so a 64-node host never sees an exponential search, and a request
//! that fits nowhere fails after the same bounded walk.

use crate::request::Policy;
use crate::state::HostState;
use std::cmp::Ordering;

mod carried;

/// What a node would strand if it took an even share (`cpu_share` slots,
/// `mem_share` bytes) of a VM: its memory when the share fills its CPUs,
/// then its CPUs when the share fills its memory.
fn stranded_on(cap: NodeCap, cpu_share: u64, mem_share: u64) -> (u64, u64) {
    let memory = if cap.slots <= cpu_share { cap.mem_bytes.saturating_sub(mem_share) } else { 0 };
    let cpus = if cap.mem_bytes <= mem_share { cap.slots.saturating_sub(cpu_share) } else { 0 };
    (memory, cpus)
}

// Defined below the host state, which counts by them too, so the state
// never imports the search that reads it.
pub(crate) use crate::limits::SMALL_VM_VCPUS;

/// Hosts with at most this many nodes are searched exhaustively.
pub(crate) const EXACT_LIMIT: usize = 8;

/// What one node can give this request, in the request's own units.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct NodeCap {
    /// vCPUs the node can take (a multiple of the split granularity).
    pub(crate) slots: u64,
    /// Whole memory units the node can take.
    pub(crate) units: u64,
    /// Free memory for this request's kind of memory, bytes.
    pub(crate) mem_bytes: u64,
    /// Whole memory units the node can take (`units` may count one more
    /// where the request's partial last unit fits past them).
    pub(crate) whole: u64,
    /// The VM alone on this node would run under two L3 groups (an EPYC
    /// node's CCX), where another node may keep it under one.
    pub(crate) l3_split: bool,
    /// The VM alone on this node would take the idle siblings of a
    /// dedicated VM of this many vCPUs (0: none, or only of VMs told
    /// pairs).
    pub(crate) siblings: u32,
}

/// A candidate's node positions. Sets of up to [`EXACT_LIMIT`] nodes (all
/// sets on hosts the exact search covers, and most grown ones) are kept
/// inline: ranking copies a set into every candidate that makes the cut,
/// and a heap allocation each time was a large share of a plan's cost.
#[derive(Clone, Debug)]
pub(crate) enum NodeList {
    /// Up to `EXACT_LIMIT` positions; the first `len` are used.
    Inline { len: usize, items: [usize; EXACT_LIMIT] },
    /// Larger sets.
    Heap(Vec<usize>),
}

impl Default for NodeList {
    fn default() -> Self {
        NodeList::Inline { len: 0, items: [0; EXACT_LIMIT] }
    }
}

impl NodeList {
    pub(crate) fn from_slice(nodes: &[usize]) -> NodeList {
        if nodes.len() <= EXACT_LIMIT {
            let mut items = [0; EXACT_LIMIT];
            items[..nodes.len()].copy_from_slice(nodes);
            NodeList::Inline { len: nodes.len(), items }
        } else {
            NodeList::Heap(nodes.to_vec())
        }
    }
}

impl std::ops::Deref for NodeList {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        match self {
            NodeList::Inline { len, items } => items.get(..*len).unwrap_or(&[]),
            NodeList::Heap(v) => v,
        }
    }
}

/// What the request needs in total.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Need {
    /// vCPU slots (vCPUs rounded up to the granularity).
    pub(crate) slots: u64,
    /// Memory units, counting a partial one as whole.
    pub(crate) units: u64,
    /// Bytes of one memory unit (the VM's memory is split in these).
    pub(crate) unit_bytes: u64,
}

/// A candidate set and the values it is ranked by.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    /// Node positions, ascending (empty while the set is only scored).
    pub(crate) nodes: NodeList,
    /// Number of nodes.
    pub(crate) k: usize,
    /// Preferred device nodes the set misses.
    pub(crate) pref_missing: u32,
    /// How far the set is from the preferred device nodes it misses: the
    /// sum over them of the distance to the set's nearest node, less 10.
    /// Among sets that miss a device's node, the nearest (a node of the
    /// device's package rather than of the other socket) ranks first.
    pub(crate) pref_dist: u32,
    /// Largest distance between two of its nodes (10 for one node).
    pub(crate) max_dist: u32,
    /// Sum of distances over its node pairs.
    pub(crate) sum_dist: u64,
    /// Free vCPU slots over the set.
    pub(crate) slots: u64,
    /// Free memory over the set, bytes.
    pub(crate) mem_bytes: u64,
    /// Capacity the placement would leave unusable: memory on nodes whose
    /// CPUs it would fill, in bytes, then CPUs on nodes whose memory it
    /// would fill.
    pub(crate) stranded: (u64, u64),
    /// Free passthrough devices (GPU, NIC, NVMe) on its nodes, counted
    /// for VMs that ask for none.
    pub(crate) devices: u32,
    /// Its nodes are spread unequally over the host packages it touches
    /// (3 nodes of one package and 1 of another): no guest socket can
    /// mirror it, so a set of whole packages or equal halves ranks first.
    pub(crate) lopsided: bool,
    /// Shared vCPUs floating on its nodes, counted for a dedicated VM,
    /// which would push them off the cores it takes.
    pub(crate) floating: u64,
    /// A one-node set where the VM's pinning would span two L3 groups
    /// (issue 39 item 3): a node where one group holds it ranks first
    /// among nodes otherwise as near, as evenly spread, as free of shared
    /// VMs and giving no large VM's siblings, before free slots decide.
    pub(crate) l3_split: bool,
    /// A one-node set where the VM would take the idle siblings of a
    /// dedicated VM of this many vCPUs, when above [`SMALL_VM_VCPUS`]
    /// (issue 39 item 4; 0 otherwise): such a node ranks after the others
    /// before L3 groups count, so a large VM's siblings wait for every
    /// small one's on the host.
    pub(crate) siblings: u32,
}

impl Candidate {
    /// The VM would take a large VM's idle siblings here.
    pub(crate) fn large_siblings(&self) -> bool {
        self.siblings > SMALL_VM_VCPUS
    }

    /// Mean pairwise distance, in tenths (for messages).
    pub(crate) fn mean_dist_tenths(&self) -> u64 {
        let k = self.k as u64;
        let pairs = k * k.saturating_sub(1) / 2;
        (self.sum_dist * 10).checked_div(pairs).unwrap_or(100)
    }
}

/// The search's inputs.
pub(crate) struct Search<'a> {
    pub(crate) state: &'a HostState,
    pub(crate) caps: &'a [NodeCap],
    pub(crate) need: Need,
    /// Memory wanted, bytes (for the stranded estimate).
    pub(crate) memory_bytes: u64,
    pub(crate) policy: Policy,
    /// Node positions that must be in the set.
    pub(crate) required: &'a [usize],
    /// Node positions the set should contain.
    pub(crate) preferred: &'a [usize],
    /// Largest set allowed.
    pub(crate) k_max: usize,
    /// The VM asks for no device: on a tie, it leaves the nodes with
    /// passthrough devices to the VMs that will (Nova's PCI weigher).
    pub(crate) avoid_devices: bool,
    /// The VM is dedicated: on a tie of distances, it keeps off the nodes
    /// where shared VMs float (issue 39).
    pub(crate) dedicated: bool,
}

/// The ranked sets of the smallest feasible size, best first.
pub(crate) struct Found {
    pub(crate) ranked: Vec<Candidate>,
}

/// A bounded ranking: the best `keep` sets offered so far, best first.
pub(crate) struct Top {
    ranked: Vec<Candidate>,
    keep: usize,
}

impl Search<'_> {
    fn feasible(&self, slots: u64, units: u64) -> bool {
        slots >= self.need.slots && units >= self.need.units
    }

    /// The policy's total order (less = better) on scores and their node
    /// lists (a set's nodes live outside its candidate while it is only
    /// scored).
    fn compare_sets(&self, a: &Candidate, an: &[usize], b: &Candidate, bn: &[usize]) -> Ordering {
        if let ([x], [y]) = (an, bn) {
            let fast = self.compare_one(a, *x, b, *y);
            debug_assert_eq!(fast, self.compare_any(a, an, b, bn));
            return fast;
        }
        self.compare_any(a, an, b, bn)
    }

    /// [`Search::compare_sets`] of two one-node sets (most of a search's
    /// comparisons): their size, distances and package shape are the
    /// same by construction ([`Search::score_one`]), so only what differs
    /// between nodes is compared, in the same order.
    fn compare_one(&self, a: &Candidate, an: usize, b: &Candidate, bn: usize) -> Ordering {
        let prefs = a.pref_missing.cmp(&b.pref_missing).then_with(|| a.pref_dist.cmp(&b.pref_dist));
        let tail = |o: Ordering| o.then_with(|| a.devices.cmp(&b.devices)).then_with(|| an.cmp(&bn));
        match self.policy {
            Policy::Compact | Policy::SmtAware => {
                tail(prefs.then_with(|| b.mem_bytes.cmp(&a.mem_bytes)).then_with(|| b.slots.cmp(&a.slots)))
            }
            Policy::Pack => tail(
                prefs
                    .then_with(|| a.large_siblings().cmp(&b.large_siblings()))
                    .then_with(|| a.l3_split.cmp(&b.l3_split))
                    .then_with(|| a.slots.cmp(&b.slots))
                    .then_with(|| a.mem_bytes.cmp(&b.mem_bytes)),
            ),
            Policy::Balanced | Policy::Spread => tail(
                prefs
                    .then_with(|| a.floating.cmp(&b.floating))
                    .then_with(|| a.large_siblings().cmp(&b.large_siblings()))
                    .then_with(|| a.l3_split.cmp(&b.l3_split))
                    .then_with(|| b.slots.cmp(&a.slots))
                    .then_with(|| b.mem_bytes.cmp(&a.mem_bytes))
                    .then_with(|| a.stranded.cmp(&b.stranded)),
            ),
        }
    }

    /// [`Search::compare_sets`] for sets of any size.
    fn compare_any(&self, a: &Candidate, an: &[usize], b: &Candidate, bn: &[usize]) -> Ordering {
        let by_size = || {
            a.k.cmp(&b.k).then_with(|| a.pref_missing.cmp(&b.pref_missing)).then_with(|| a.pref_dist.cmp(&b.pref_dist))
        };
        let tail = |o: Ordering| o.then_with(|| a.devices.cmp(&b.devices)).then_with(|| an.cmp(bn));
        match self.policy {
            // The classic memory-only baseline: the node with the most free
            // memory, whatever its CPUs.
            Policy::Compact => {
                tail(by_size().then_with(|| b.mem_bytes.cmp(&a.mem_bytes)).then_with(|| b.slots.cmp(&a.slots)))
            }
            // As compact, but a set whose guest can mirror the packages
            // first (issue 39).
            Policy::SmtAware => tail(
                by_size()
                    .then_with(|| a.lopsided.cmp(&b.lopsided))
                    .then_with(|| b.mem_bytes.cmp(&a.mem_bytes))
                    .then_with(|| b.slots.cmp(&a.slots)),
            ),
            Policy::Pack => tail(
                by_size()
                    .then_with(|| a.max_dist.cmp(&b.max_dist))
                    .then_with(|| a.sum_dist.cmp(&b.sum_dist))
                    .then_with(|| a.large_siblings().cmp(&b.large_siblings()))
                    .then_with(|| a.l3_split.cmp(&b.l3_split))
                    .then_with(|| a.slots.cmp(&b.slots))
                    .then_with(|| a.mem_bytes.cmp(&b.mem_bytes)),
            ),
            Policy::Balanced | Policy::Spread => tail(
                by_size()
                    .then_with(|| a.max_dist.cmp(&b.max_dist))
                    .then_with(|| a.lopsided.cmp(&b.lopsided))
                    .then_with(|| a.sum_dist.cmp(&b.sum_dist))
                    .then_with(|| a.floating.cmp(&b.floating))
                    .then_with(|| a.large_siblings().cmp(&b.large_siblings()))
                    .then_with(|| a.l3_split.cmp(&b.l3_split))
                    .then_with(|| b.slots.cmp(&a.slots))
                    .then_with(|| b.mem_bytes.cmp(&a.mem_bytes))
                    .then_with(|| a.stranded.cmp(&b.stranded)),
            ),
        }
    }

    /// Builds the ranking values of a set (positions ascending).
    pub(crate) fn candidate(&self, nodes: Vec<usize>) -> Candidate {
        let mut c = self.score(&nodes);
        c.nodes = NodeList::from_slice(&nodes);
        c
    }

    /// [`Candidate::pref_dist`] of a set.
    fn pref_dist(&self, nodes: &[usize]) -> u32 {
        let mut sum = 0u32;
        for &p in self.preferred {
            let row = self.state.distances.get(p);
            let near = nodes.iter().map(|&i| row.and_then(|r| r.get(i)).copied().unwrap_or(20)).min().unwrap_or(10);
            sum = sum.saturating_add(near.saturating_sub(10));
        }
        sum
    }

    /// Scores a set without copying its nodes.
    fn score(&self, nodes: &[usize]) -> Candidate {
        if let [i] = *nodes {
            return self.score_one(i);
        }
        let mut max_dist = 10;
        let mut sum_dist = 0u64;
        let (mut slots, mut mem) = (0u64, 0u64);
        for (x, &i) in nodes.iter().enumerate() {
            let cap = self.caps.get(i).copied().unwrap_or_default();
            slots = slots.saturating_add(cap.slots);
            mem = mem.saturating_add(cap.mem_bytes);
            let row = self.state.distances.get(i);
            for &j in &nodes[x + 1..] {
                let d = row.and_then(|r| r.get(j)).copied().unwrap_or(u32::MAX / 2);
                max_dist = max_dist.max(d);
                sum_dist += u64::from(d);
            }
        }
        let pref_missing = self.preferred.iter().filter(|p| !nodes.contains(p)).count() as u32;
        let pref_dist = self.pref_dist(nodes);
        // Even shares are an estimate of the split; exact enough to see
        // which set would leave memory behind CPUs it fills, or the reverse.
        let k = nodes.len().max(1) as u64;
        let cpu_share = self.need.slots.div_ceil(k);
        let mem_share = self.memory_bytes.div_ceil(k);
        let mut stranded = (0u64, 0u64);
        for &i in nodes {
            let (memory, cpus) = stranded_on(self.caps.get(i).copied().unwrap_or_default(), cpu_share, mem_share);
            stranded = (stranded.0.saturating_add(memory), stranded.1.saturating_add(cpus));
        }
        let devices = if self.avoid_devices {
            nodes.iter().map(|&i| self.state.free_devices(i)).fold(0u32, u32::saturating_add)
        } else {
            0
        };
        // Nodes per package, packages in order of first use (a node of
        // no known package is a package of its own).
        let mut per_package: [(Option<u32>, u32); EXACT_LIMIT] = [(None, 0); EXACT_LIMIT];
        let mut used = 0usize;
        let mut lopsided = false;
        for &i in nodes {
            let pkg = self.state.facts.get(i).and_then(|f| f.package);
            match per_package[..used].iter_mut().find(|p| pkg.is_some() && p.0 == pkg) {
                Some(p) => p.1 += 1,
                None if used < EXACT_LIMIT => {
                    per_package[used] = (pkg, 1);
                    used += 1;
                }
                // More packages than a set is ever compared by: no
                // socket shape is expected of it.
                None => {}
            }
        }
        if let Some(first) = per_package[..used].first() {
            lopsided = per_package[..used].iter().any(|p| p.1 != first.1);
        }
        Candidate {
            devices,
            nodes: NodeList::default(),
            k: nodes.len(),
            pref_missing,
            pref_dist,
            max_dist,
            sum_dist,
            slots,
            mem_bytes: mem,
            stranded,
            lopsided,
            floating: self.floating(nodes),
            // A VM over several nodes spans their caches anyway, and its
            // shares are not pinned here.
            l3_split: false,
            siblings: 0,
        }
    }

    /// [`Search::score`] for one node, the set most VMs are placed on:
    /// no pairs to measure and no sums to take.
    fn score_one(&self, i: usize) -> Candidate {
        let cap = self.caps.get(i).copied().unwrap_or_default();
        Candidate {
            devices: if self.avoid_devices { self.state.free_devices(i) } else { 0 },
            nodes: NodeList::default(),
            k: 1,
            pref_missing: self.preferred.iter().filter(|&&p| p != i).count() as u32,
            pref_dist: self.pref_dist(&[i]),
            max_dist: 10,
            sum_dist: 0,
            slots: cap.slots,
            mem_bytes: cap.mem_bytes,
            stranded: stranded_on(cap, self.need.slots, self.memory_bytes),
            lopsided: false,
            floating: self.floating(&[i]),
            l3_split: cap.l3_split,
            siblings: cap.siblings,
        }
    }

    /// Shared vCPUs counted on `nodes`, for a dedicated VM (0 otherwise).
    fn floating(&self, nodes: &[usize]) -> u64 {
        if !self.dedicated {
            return 0;
        }
        nodes.iter().filter_map(|&i| self.state.uses.get(i)).fold(0u64, |a, u| a.saturating_add(u.shared_load))
    }

    /// Finds and ranks the candidate sets, keeping the best `keep`;
    /// `exact_k` asks for sets of exactly that size (spread with a node
    /// limit).
    pub(crate) fn run(&self, exact_k: Option<usize>, keep: usize) -> Found {
        let n = self.state.node_count();
        if let Some(ranked) = self.carried(n, exact_k, keep) {
            debug_assert_eq!(
                format!("{ranked:?}"),
                format!("{:?}", self.run_fresh(n, exact_k, keep).ranked),
                "the carried ranking answers as the full search"
            );
            return Found { ranked };
        }
        self.run_fresh(n, exact_k, keep)
    }

    /// [`Search::run`] without the carried ranking (`nodeset/carried.rs`).
    fn run_fresh(&self, n: usize, exact_k: Option<usize>, keep: usize) -> Found {
        let mut top = Top { ranked: Vec::with_capacity(keep + 1), keep };
        if n <= EXACT_LIMIT {
            self.enumerate(n, exact_k, &mut top);
        } else {
            self.grow(n, exact_k, &mut top);
        }
        let ranked = top.ranked;
        Found { ranked }
    }

    /// Offers the feasible sets of the smallest size.
    fn enumerate(&self, n: usize, exact_k: Option<usize>, top: &mut Top) {
        let required: u32 = self.required.iter().fold(0, |m, &i| m | (1 << i));
        let (low, high) = match exact_k {
            Some(k) => (k, k),
            None => (self.required.len().max(1), self.k_max.min(n)),
        };
        let mut scratch = [0usize; EXACT_LIMIT];
        let mut found = false;
        // k-subsets in increasing k (Gosper's hack), so the search stops at
        // the first size that has a feasible set: a VM that fits one node
        // costs N checks, not 2^N.
        for k in low..=high {
            if k == 0 || k > n {
                continue;
            }
            let mut mask: u32 = (1 << k) - 1;
            while mask < (1 << n) {
                if mask & required == required {
                    let (mut slots, mut units) = (0u64, 0u64);
                    let mut bits = mask;
                    while bits != 0 {
                        let i = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        let cap = self.caps.get(i).copied().unwrap_or_default();
                        slots = slots.saturating_add(cap.slots);
                        units = units.saturating_add(cap.units);
                    }
                    if self.feasible(slots, units) {
                        let mut len = 0;
                        let mut bits = mask;
                        while bits != 0 && len < EXACT_LIMIT {
                            scratch[len] = bits.trailing_zeros() as usize;
                            bits &= bits - 1;
                            len += 1;
                        }
                        let set = &scratch[..len];
                        if self.state.all_reach(set) {
                            found = true;
                            self.offer(top, set);
                        }
                    }
                }
                let c = mask & mask.wrapping_neg();
                let r = mask + c;
                mask = (((r ^ mask) >> 2) / c) | r;
            }
            if found {
                break;
            }
        }
    }

    /// Offers a set (positions ascending) to the bounded ranking; only a
    /// set that makes the cut is copied.
    fn offer(&self, top: &mut Top, nodes: &[usize]) {
        let score = self.score(nodes);
        // Most offers lose to the current worst kept set: check it first.
        if top.ranked.len() >= top.keep {
            if let Some(worst) = top.ranked.last() {
                if self.compare_sets(&score, nodes, worst, &worst.nodes) != Ordering::Less {
                    return;
                }
            }
        }
        let mut at = top.ranked.len();
        for (i, c) in top.ranked.iter().enumerate() {
            match self.compare_sets(&score, nodes, c, &c.nodes) {
                Ordering::Less => {
                    at = i;
                    break;
                }
                Ordering::Equal => return,
                Ordering::Greater => {}
            }
        }
        if at >= top.keep {
            return;
        }
        let mut score = score;
        if top.ranked.len() >= top.keep {
            top.ranked.pop();
        }
        score.nodes = NodeList::from_slice(nodes);
        top.ranked.insert(at.min(top.ranked.len()), score);
    }

    fn grow(&self, n: usize, exact_k: Option<usize>, top: &mut Top) {
        let mut in_set = vec![false; n];
        let mut best_k = exact_k.unwrap_or(self.k_max);
        let mut set: Vec<usize> = Vec::with_capacity(n.min(self.k_max));
        let mut sorted: Vec<usize> = Vec::with_capacity(n.min(self.k_max));
        // Node orders for growing, built only once some seed is too small
        // on its own (never, for a VM that fits one node).
        let mut orders: Option<(Vec<usize>, Vec<usize>)> = None;
        for seed in 0..n {
            if self.caps.get(seed).is_none_or(|c| c.slots == 0) {
                continue;
            }
            set.clear();
            let mut sums = (0u64, 0u64);
            for &r in self.required {
                self.push(r, &mut set, &mut in_set, &mut sums);
            }
            self.push(seed, &mut set, &mut in_set, &mut sums);
            let grown = match exact_k {
                Some(k) => set.len() >= k,
                None => self.feasible(sums.0, sums.1),
            };
            let (by_slots, by_units) = match (&orders, grown) {
                (_, true) => (&[][..], &[][..]),
                (Some((a, b)), false) => (a.as_slice(), b.as_slice()),
                (None, false) => {
                    let (a, b) = orders.insert(self.growth_orders(n));
                    (a.as_slice(), b.as_slice())
                }
            };
            let tiers = self.state.facts.get(seed).map(|f| f.tiers.as_slice()).unwrap_or(&[]);
            let row = self.state.distances.get(seed);
            // Phase 0 adds nodes with free CPUs (they usually bring memory
            // too), phase 1 memory-only help, so a set short of both does
            // not fill up with memory-only neighbours first. Within one
            // distance tier the node with the most to give comes first, so
            // a nearly full node does not cost a set one extra member.
            'phases: for (phase, order) in [(0, by_slots), (1, by_units)] {
                for &tier in tiers {
                    for &j in order {
                        let (slots, units) = sums;
                        let done = match exact_k {
                            Some(k) => set.len() >= k,
                            None => self.feasible(slots, units),
                        };
                        if done || set.len() >= best_k {
                            break 'phases;
                        }
                        if in_set[j] || row.and_then(|r| r.get(j)) != Some(&tier) || !self.state.reaches(j, &set) {
                            continue;
                        }
                        let cap = self.caps.get(j).copied().unwrap_or_default();
                        let helps = match (phase, exact_k) {
                            (0, Some(_)) => cap.slots > 0,
                            (_, Some(_)) => cap.units > 0,
                            (0, None) => slots < self.need.slots && cap.slots > 0,
                            (_, None) => units < self.need.units && cap.units > 0,
                        };
                        if helps {
                            self.push(j, &mut set, &mut in_set, &mut sums);
                        }
                    }
                }
            }
            for &i in &set {
                in_set[i] = false;
            }
            let ok = match exact_k {
                Some(k) => set.len() == k && self.feasible(sums.0, sums.1),
                None => self.feasible(sums.0, sums.1),
            } && self.state.all_reach(&set);
            if !ok || set.len() > best_k {
                continue;
            }
            if set.len() < best_k {
                best_k = set.len();
                top.ranked.clear();
            }
            sorted.clear();
            sorted.extend_from_slice(&set);
            sorted.sort_unstable();
            self.offer(top, &sorted);
        }
    }

    /// Nodes with free CPUs by most slots (then memory, then position),
    /// and nodes with memory by most memory.
    fn growth_orders(&self, n: usize) -> (Vec<usize>, Vec<usize>) {
        let cap = |i: usize| self.caps.get(i).copied().unwrap_or_default();
        let mut by_slots: Vec<usize> = (0..n).filter(|&i| cap(i).slots > 0).collect();
        by_slots.sort_by_key(|&i| (std::cmp::Reverse((cap(i).slots, cap(i).units)), i));
        let mut by_units: Vec<usize> = (0..n).filter(|&i| cap(i).units > 0).collect();
        by_units.sort_by_key(|&i| (std::cmp::Reverse(cap(i).units), i));
        (by_slots, by_units)
    }

    fn push(&self, i: usize, set: &mut Vec<usize>, in_set: &mut [bool], sums: &mut (u64, u64)) {
        if let Some(flag) = in_set.get_mut(i) {
            if !*flag {
                *flag = true;
                set.push(i);
                let cap = self.caps.get(i).copied().unwrap_or_default();
                sums.0 = sums.0.saturating_add(cap.slots);
                sums.1 = sums.1.saturating_add(cap.units);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-node candidate with the fields that differ between nodes
    /// drawn from small ranges (so that ties reach the later criteria),
    /// and the others as `score_one` sets them.
    /// (pref_missing, pref_dist, floating, l3_split, siblings) and
    /// (slots, mem_bytes, stranded, devices).
    type Fields = ((u32, u32, u64, bool, u32), (u64, u64, (u64, u64), u32));

    fn one(i: usize, (f, g): Fields) -> Candidate {
        let (pref_missing, pref_dist, floating, l3_split, siblings) = f;
        let (slots, mem_bytes, stranded, devices) = g;
        Candidate {
            nodes: NodeList::from_slice(&[i]),
            k: 1,
            pref_missing,
            pref_dist,
            max_dist: 10,
            sum_dist: 0,
            slots,
            mem_bytes,
            stranded,
            devices,
            lopsided: false,
            floating,
            l3_split,
            siblings,
        }
    }

    fn fields() -> impl proptest::strategy::Strategy<Value = Fields> {
        ((0u32..2, 0u32..2, 0u64..2, proptest::bool::ANY, 0u32..40), (0u64..3, 0u64..3, (0u64..2, 0u64..2), 0u32..2))
    }

    proptest::proptest! {
        /// Two one-node sets rank the same by the short comparison as by
        /// the general one, under every policy: `compare_one` skips only
        /// what is equal for every one-node set.
        #[test]
        fn one_node_sets_compare_as_the_general_comparison_does(
            a in (0usize..3, fields()),
            b in (0usize..3, fields()),
        ) {
            let topology = numaplace_read::synthetic::parse("3 nodes x 2 cores x 2 threads, 4GiB per node").expect("shape");
            let state = HostState::new(&topology);
            let (x, y) = (one(a.0, a.1), one(b.0, b.1));
            for policy in [Policy::Compact, Policy::SmtAware, Policy::Pack, Policy::Balanced, Policy::Spread] {
                let search = Search {
                    state: &state,
                    caps: &[],
                    need: Need { slots: 2, units: 1, unit_bytes: 1 << 27 },
                    memory_bytes: 1 << 30,
                    policy,
                    required: &[],
                    preferred: &[],
                    k_max: 3,
                    avoid_devices: false,
                    dedicated: true,
                };
                proptest::prop_assert_eq!(
                    search.compare_one(&x, a.0, &y, b.0),
                    search.compare_any(&x, &x.nodes, &y, &y.nodes),
                    "{:?}", policy
                );
            }
        }
    }
}
