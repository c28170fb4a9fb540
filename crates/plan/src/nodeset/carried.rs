//! The ranking of one-node sets carried from one decision to the next.
//!
//! Most VMs fit one node, and on a host the exact search covers (up to
//! [`EXACT_LIMIT`] nodes) their ranking is then a sort of the feasible
//! nodes by [`Search::compare_one`], each node's rank read from its
//! [`Search::score_one`]. Between two decisions of the same shape only
//! the nodes the last recorded VM changed score differently, so the
//! state keeps the sorted nodes (`state/carried.rs`) and a search scores
//! again only the nodes whose inputs differ from those kept.
//!
//! Invariant: what a search answers from the kept ranking is what the
//! full search answers. It holds because a node's place in the ranking
//! reads only the search's shape ([`Key`]: the policy, what the VM needs,
//! its memory, the preferred nodes, devices avoided, dedicated), the
//! host's distances (fixed for a state) and the node's [`Inputs`] (its
//! capacity for this pass, its free devices and floating shared vCPUs
//! as the search counts them), and every one of those is compared with
//! what was kept, node by node, on every use. Debug builds compare every
//! answer with the full search's, and
//! `nodeset::carried::tests::a_carried_ranking_answers_as_a_fresh_search`
//! holds it over random place and remove sequences and capacity changes.

use super::*;

/// The search's shape: a kept ranking answers only a search of the same.
#[derive(Clone, Debug, PartialEq)]
struct Key {
    policy: Policy,
    need: (u64, u64, u64),
    memory_bytes: u64,
    preferred: Vec<usize>,
    avoid_devices: bool,
    dedicated: bool,
}

/// What one node's rank is computed from, beyond the search's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Inputs {
    cap: NodeCap,
    devices: u32,
    floating: u64,
}

/// The kept ranking.
struct Ranking {
    key: Key,
    /// Per node position: the inputs its score was computed from (`None`
    /// before its first), and that score (its node list set) when the
    /// node is feasible.
    nodes: Vec<(Option<Inputs>, Option<Candidate>)>,
    /// The feasible node positions, best first.
    order: Vec<usize>,
}

impl Search<'_> {
    fn key(&self) -> Key {
        Key {
            policy: self.policy,
            need: (self.need.slots, self.need.units, self.need.unit_bytes),
            memory_bytes: self.memory_bytes,
            preferred: self.preferred.to_vec(),
            avoid_devices: self.avoid_devices,
            dedicated: self.dedicated,
        }
    }

    fn same_key(&self, k: &Key) -> bool {
        k.policy == self.policy
            && k.need == (self.need.slots, self.need.units, self.need.unit_bytes)
            && k.memory_bytes == self.memory_bytes
            && k.preferred == self.preferred
            && k.avoid_devices == self.avoid_devices
            && k.dedicated == self.dedicated
    }

    fn inputs(&self, i: usize) -> Inputs {
        Inputs {
            cap: self.caps.get(i).copied().unwrap_or_default(),
            devices: if self.avoid_devices { self.state.free_devices(i) } else { 0 },
            floating: self.floating(&[i]),
        }
    }

    /// The best `keep` one-node sets from the kept ranking, brought up to
    /// date, when this search is one it answers (`None`: run the full
    /// search). Of a search for sets of any size, an answer of no
    /// one-node set is `None` too: the full search goes on to larger sets.
    pub(super) fn carried(&self, n: usize, exact_k: Option<usize>, keep: usize) -> Option<Vec<Candidate>> {
        let singles = matches!(exact_k, None | Some(1)) && self.required.is_empty() && self.k_max >= 1;
        if n == 0 || n > EXACT_LIMIT || !singles {
            return None;
        }
        let ranked = self.state.ranks.with(|kept| {
            let fits = kept
                .as_ref()
                .and_then(|b| b.downcast_ref::<Ranking>())
                .is_some_and(|r| r.nodes.len() == n && self.same_key(&r.key));
            if !fits {
                *kept = Some(Box::new(Ranking { key: self.key(), nodes: vec![(None, None); n], order: Vec::new() }));
            }
            let ranking = kept.as_mut()?.downcast_mut::<Ranking>()?;
            self.update(ranking);
            let mut top = Vec::with_capacity(keep.min(ranking.order.len()));
            for &j in ranking.order.iter().take(keep) {
                if let Some(c) = ranking.nodes.get(j).and_then(|n| n.1.as_ref()) {
                    top.push(c.clone());
                }
            }
            Some(top)
        })??;
        if ranked.is_empty() && exact_k.is_none() {
            return None;
        }
        Some(ranked)
    }

    /// Scores again the nodes whose inputs changed and moves them to
    /// their places in the order (every node in the order has its score).
    fn update(&self, ranking: &mut Ranking) {
        let mut changed = 0u32;
        for (i, node) in ranking.nodes.iter_mut().enumerate() {
            let inputs = self.inputs(i);
            if node.0 != Some(inputs) {
                *node = (Some(inputs), None);
                changed |= 1 << i;
            }
        }
        if changed == 0 {
            return;
        }
        ranking.order.retain(|&j| changed & (1 << j) == 0);
        let mut bits = changed;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let cap = self.caps.get(i).copied().unwrap_or_default();
            if !self.feasible(cap.slots, cap.units) {
                continue;
            }
            let mut score = self.score_one(i);
            score.nodes = NodeList::from_slice(&[i]);
            // The order is sorted and no two nodes rank equal (the last
            // criterion is the position): a binary search finds the place.
            let nodes = &ranking.nodes;
            let at = ranking.order.partition_point(|&j| {
                nodes
                    .get(j)
                    .and_then(|n| n.1.as_ref())
                    .is_some_and(|c| self.compare_one(c, j, &score, i) == Ordering::Less)
            });
            ranking.order.insert(at, i);
            if let Some(node) = ranking.nodes.get_mut(i) {
                node.1 = Some(score);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan, CpuMode, Request};

    fn hosts() -> &'static [numaplace_topo::Topology] {
        static HOSTS: std::sync::OnceLock<Vec<numaplace_topo::Topology>> = std::sync::OnceLock::new();
        HOSTS.get_or_init(|| {
            // A host with passthrough devices, so devices avoided count.
            let pci = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/topologies/hwloc/xml/96em64t-4n4d3ca2co-pci.xml");
            let mut out = vec![numaplace_read::read_source(&pci.to_string_lossy()).expect("the pci host reads")];
            for shape in [
                "2 sockets x 4 nodes x 4 cores x 2 threads, 16GiB per node",
                "3 nodes x 4 cores x 2 threads, 16GiB per node",
            ] {
                out.push(numaplace_read::synthetic::parse(shape).expect("shape"));
            }
            out
        })
    }

    #[derive(Clone, Debug)]
    enum Step {
        /// A VM planned and recorded (a shared one floats on its nodes).
        Place { vcpus: u32, shared: bool },
        /// A recorded VM removed.
        Remove(usize),
        /// One node's capacity for the searches changed: (node, slots,
        /// units, L3 split, siblings).
        Cap(usize, u64, u64, bool, u32),
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
        use proptest::prelude::*;
        let place =
            (1u32..=12, proptest::bool::weighted(0.4)).prop_map(|(vcpus, shared)| Step::Place { vcpus, shared });
        let remove = (0usize..64).prop_map(Step::Remove);
        let cap = (0usize..8, 0u64..=6, 0u64..=4, proptest::bool::ANY, 0u32..=40)
            .prop_map(|(node, slots, units, l3, siblings)| Step::Cap(node, slots, units, l3, siblings));
        proptest::collection::vec(prop_oneof![2 => place, 1 => remove, 3 => cap], 1..40)
    }

    /// A search's shape: (policy, slots, units, preferred node, devices
    /// avoided, dedicated, sets kept).
    type Shape = (usize, u64, u64, usize, bool, bool, usize);

    fn shapes() -> impl proptest::strategy::Strategy<Value = Vec<Shape>> {
        let shape = (0usize..5, 1u64..=6, 1u64..=4, 0usize..3, proptest::bool::ANY, proptest::bool::ANY, 1usize..=5);
        proptest::collection::vec(shape, 1..4)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// After every step of a random sequence of placements, removals
        /// and capacity changes, each of a few search shapes (asked in turn,
        /// so the kept ranking is both brought up to date and started
        /// again) answers from the kept ranking exactly as the full search
        /// does; where it declines, the full search found no one-node set.
        #[test]
        fn a_carried_ranking_answers_as_a_fresh_search(host in 0usize..3, steps in steps(), shapes in shapes()) {
            let topology = &hosts()[host];
            let mut state = HostState::new(topology);
            let n = state.node_count();
            let full = NodeCap { slots: 6, units: 4, mem_bytes: 4 << 30, whole: 4, l3_split: false, siblings: 0 };
            let mut caps = vec![full; n];
            let mut names: Vec<String> = Vec::new();
            let policies = [Policy::Compact, Policy::SmtAware, Policy::Pack, Policy::Balanced, Policy::Spread];
            for (s, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Place { vcpus, shared } => {
                        let mut r = Request::new(format!("vm{s}"), vcpus, 1 << 30);
                        if shared {
                            r.cpu_mode = CpuMode::Shared;
                            r.overcommit = 4.0;
                        }
                        if let Ok(d) = plan(topology, &state, &r) {
                            state.place_shared(d.placement.clone()).expect("a fresh plan fits its state");
                            names.push(r.name);
                        }
                    }
                    Step::Remove(x) if !names.is_empty() => {
                        let name = names.remove(x % names.len());
                        state.remove(&name).expect("placed");
                    }
                    Step::Remove(_) => {}
                    Step::Cap(node, slots, units, l3_split, siblings) => {
                        if let Some(c) = caps.get_mut(node % n) {
                            *c = NodeCap { slots, units, mem_bytes: units << 30, whole: units, l3_split, siblings };
                        }
                    }
                }
                for &(p, slots, units, pref, avoid_devices, dedicated, keep) in &shapes {
                    let preferred = match pref { 0 => vec![], 1 => vec![0], _ => vec![n - 1] };
                    let search = Search {
                        state: &state,
                        caps: &caps,
                        need: Need { slots, units, unit_bytes: 1 << 30 },
                        memory_bytes: units << 30,
                        policy: policies[p],
                        required: &[],
                        preferred: &preferred,
                        k_max: n,
                        avoid_devices,
                        dedicated,
                    };
                    let fresh = search.run_fresh(n, None, keep).ranked;
                    match search.carried(n, None, keep) {
                        Some(kept) => proptest::prop_assert_eq!(format!("{kept:?}"), format!("{fresh:?}"), "step {}", s),
                        None => proptest::prop_assert!(fresh.iter().all(|c| c.k > 1), "declined with one-node sets, step {}", s),
                    }
                    let fresh = search.run_fresh(n, Some(1), keep).ranked;
                    let kept = search.carried(n, Some(1), keep);
                    proptest::prop_assert_eq!(format!("{kept:?}"), format!("{:?}", Some(fresh)), "one node, step {}", s);
                }
            }
        }
    }
}
