//! Words for the operator: why a request does not fit (naming the
//! shortfall and what the best nodes have), and why each losing candidate
//! lost to the chosen one.
//!
//! Over 800 lines only with its tests (about 260 lines), which pin each
//! verdict's sentence beside the code that words it.

use crate::cost::Cost;
use crate::nodeset::{Candidate, NodeCap, Search};
use crate::request::Policy;
use crate::state::HostState;
use crate::why::{show_pieces, NodeFree, Pieces, RejectReason, Resource, Sentence};
use numaplace_topo::format_size;

/// Nodes listed by name in a shortfall message before summing the rest.
const LISTED: usize = 4;

/// What the search counts vCPU capacity in, for messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotNoun {
    /// What is counted.
    pub(crate) resource: Resource,
    /// Plural noun, e.g. `free cores`.
    pub(crate) plural: &'static str,
    /// Slots per counted thing (2 when a free SMT core holds a pair).
    pub(crate) per: u64,
}

fn nodes_by<F: Fn(usize) -> u64>(state: &HostState, value: F) -> Vec<(usize, u64)> {
    let mut v: Vec<(usize, u64)> = (0..state.node_count()).map(|i| (i, value(i))).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// The most the best `k` nodes offer, without allocating when `k` covers
/// every node (the common case: no node limit).
fn best_k_sum(state: &HostState, k: usize, value: impl Fn(usize) -> u64) -> u64 {
    let n = state.node_count();
    if k >= n {
        return (0..n).map(value).fold(0, u64::saturating_add);
    }
    nodes_by(state, value).iter().take(k).map(|&(_, v)| v).fold(0, u64::saturating_add)
}

/// The most the best `k` nodes offer, and the best of them (at most
/// [`LISTED`], by node id) with what each has.
fn best_k(state: &HostState, k: usize, value: impl Fn(usize) -> u64) -> (u64, Vec<NodeFree>) {
    let ranked = nodes_by(state, value);
    let k = k.min(ranked.len());
    let sum: u64 = ranked.iter().take(k).map(|&(_, v)| v).fold(0, u64::saturating_add);
    let mut shown: Vec<(usize, u64)> = ranked.iter().take(k.min(LISTED)).copied().collect();
    shown.sort_by_key(|&(i, _)| i);
    let listed = shown
        .iter()
        .filter_map(|&(i, v)| state.facts.get(i).map(|f| NodeFree { node: f.id, free: v, memory: 0 }))
        .collect();
    (sum, listed)
}

/// Whether the best `k` nodes together have the CPU capacity (`slots`:
/// what node `i` offers, as [`NodeCap::slots`]).
pub(crate) fn cpu_fits(state: &HostState, slots: impl Fn(usize) -> u64, vcpus: u64, k: usize, noun: SlotNoun) -> bool {
    let per = noun.per.max(1);
    best_k_sum(state, k, |i| slots(i) / per) >= vcpus.div_ceil(per)
}

/// Whether the best `k` nodes together have the memory units.
pub(crate) fn memory_fits(state: &HostState, caps: &[NodeCap], units_needed: u64, k: usize) -> bool {
    best_k_sum(state, k, |i| caps.get(i).map_or(0, |c| c.units)) >= units_needed
}

/// A CPU shortfall: what is needed, and what the best nodes have.
pub(crate) fn cpu_shortfall(state: &HostState, caps: &[NodeCap], vcpus: u64, k: usize, noun: SlotNoun) -> RejectReason {
    let per = noun.per.max(1);
    let (best_total, best) = best_k(state, k, |i| caps.get(i).map_or(0, |c| c.slots / per));
    RejectReason::CpuShort { resource: noun.resource, needed: vcpus.div_ceil(per), max_nodes: k, best, best_total }
}

/// A memory shortfall: what is needed, and the most the best nodes can
/// offer.
pub(crate) fn memory_shortfall(
    state: &HostState,
    caps: &[NodeCap],
    memory: u64,
    hugepage: Option<u64>,
    k: usize,
) -> RejectReason {
    let best_total = best_k_sum(state, k, |i| caps.get(i).map_or(0, |c| c.mem_bytes));
    let overhead = state.reservations().overhead.bytes(memory);
    // Huge pages: the capacities count a node's pages only when it also
    // has QEMU's ordinary memory free; when the pages alone would have
    // held the VM, that memory is what is missing, not the pool.
    if let Some(size) = hugepage {
        let pages = best_k_sum(state, k, |i| state.free_pages(i, size).saturating_mul(size));
        if best_total < memory && pages >= memory {
            let best_free = (0..state.node_count())
                .filter(|&i| state.free_pages(i, size) > 0)
                .map(|i| state.free_memory(i))
                .max()
                .unwrap_or(0);
            return RejectReason::QemuMemoryShort { hugepage: size, overhead, best_free };
        }
    }
    RejectReason::MemoryShort { needed: memory, hugepage, max_nodes: k, best_total, overhead }
}

/// When the CPU and memory each fit somewhere but no one set of at most
/// `k` nodes was found with both.
pub(crate) fn joint_shortfall(
    state: &HostState,
    caps: &[NodeCap],
    vcpus: u64,
    memory: u64,
    k: usize,
    noun: SlotNoun,
) -> RejectReason {
    let per = noun.per.max(1);
    let best = most_slots_with_memory(state, caps, per);
    RejectReason::NoJointFit { resource: noun.resource, needed: vcpus.div_ceil(per), memory, max_nodes: k, best }
}

/// Node pairs at SLIT distance 255 ("unreachable") among the nodes with
/// room for some of the request (at most [`LISTED`]), in node order.
pub(crate) fn unreachable_pairs(
    state: &HostState,
    caps: &[NodeCap],
) -> Vec<(numaplace_topo::NodeId, numaplace_topo::NodeId)> {
    let usable: Vec<usize> =
        (0..state.node_count()).filter(|&i| caps.get(i).is_some_and(|c| c.slots > 0 || c.units > 0)).collect();
    let mut pairs = Vec::new();
    for (x, &i) in usable.iter().enumerate() {
        for &j in &usable[x + 1..] {
            if !state.reaches(j, &[i]) && pairs.len() < LISTED {
                pairs.push((state.facts[i].id, state.facts[j].id));
            }
        }
    }
    pairs
}

/// The refusal for a request whose CPU and memory each fit the best
/// nodes but that no node set of nodes reaching each other holds:
/// `unreachable` when the nodes with room include pairs at distance 255
/// (a set with them was never a candidate), else a joint shortfall.
pub(crate) fn joint_or_unreachable(
    state: &HostState,
    caps: &[NodeCap],
    vcpus: u64,
    memory: u64,
    k: usize,
    noun: SlotNoun,
) -> RejectReason {
    let pairs = unreachable_pairs(state, caps);
    if pairs.is_empty() || k < 2 {
        return joint_shortfall(state, caps, vcpus, memory, k, noun);
    }
    RejectReason::Unreachable { resource: noun.resource, needed: vcpus.div_ceil(noun.per.max(1)), memory, pairs }
}

/// The nodes with the most CPU capacity (at most [`LISTED`]), each with
/// its free units of `per` slots and its free memory.
fn most_slots_with_memory(state: &HostState, caps: &[NodeCap], per: u64) -> Vec<NodeFree> {
    nodes_by(state, |i| caps.get(i).map_or(0, |c| c.slots))
        .iter()
        .take(LISTED)
        .filter_map(|&(i, slots)| {
            let mem = caps.get(i).map_or(0, |c| c.mem_bytes);
            state.facts.get(i).map(|f| NodeFree { node: f.id, free: slots / per, memory: mem })
        })
        .collect()
}

/// Guest cells given by the request that no assignment fits: what each
/// cell needs, and what the best nodes have.
pub(crate) fn cells_shortfall(
    state: &HostState,
    caps: &[NodeCap],
    need: &[(u64, u64)],
    shared: bool,
    noun: SlotNoun,
) -> RejectReason {
    let per = noun.per.max(1);
    let best = most_slots_with_memory(state, caps, per);
    let cells = need.iter().map(|&(slots, bytes)| (slots.div_ceil(per), bytes)).collect();
    RejectReason::CellsNoFit { resource: noun.resource, cells, shared, best }
}

/// Why a candidate node set lost to the chosen one. It is kept as the
/// figures that decided and worded only when shown: most decisions (a
/// batch, a simulated fleet) are never printed, and formatting three
/// sentences was a sizeable share of a plan's cost.
#[derive(Clone, Debug)]
pub struct Verdict(Why);

#[derive(Clone, Debug)]
enum Why {
    MoreNodes {
        alt: usize,
        chosen: usize,
    },
    FartherFromDevice,
    FewerSlots {
        plural: &'static str,
        alt: u64,
        chosen: u64,
    },
    LessMemory {
        alt: u64,
        chosen: u64,
    },
    /// `pack`: the set has more free capacity than the chosen one.
    Emptier {
        plural: &'static str,
        alt: u64,
        chosen: u64,
    },
    /// `pack`: as many free slots, more free memory.
    MoreMemory {
        alt: u64,
        chosen: u64,
    },
    FartherMax {
        alt: u32,
        chosen: u32,
    },
    /// Mean distances, in tenths.
    FartherMean {
        alt: u64,
        chosen: u64,
    },
    Strands,
    /// Holds more free passthrough devices, on a tie otherwise.
    HoldsDevices {
        alt: u32,
        chosen: u32,
    },
    Tie,
    NotBuilt,
    /// Its nodes spread unequally over host packages (issue 39).
    Lopsided,
    /// Shared VMs float on its nodes (so many vCPUs, against the chosen
    /// set's), which a dedicated VM would push off their cores.
    SharedFloat {
        alt: u64,
        chosen: u64,
    },
    /// The VM alone on its node would take the idle siblings of a large
    /// dedicated VM (of `vcpus`), where the chosen node gives only small
    /// VMs' or none (issue 39).
    LargeSiblings {
        vcpus: u32,
    },
    /// The VM alone on its node would run under two L3 caches (an EPYC
    /// CCX), where the chosen node keeps it under one (issue 39).
    SplitsL3,
    /// Its cells could not all hold as many vCPUs (`vcpus` over `alt`
    /// nodes), where `chosen` nodes take equal cells (issue 39).
    Uneven {
        vcpus: u64,
        alt: usize,
        chosen: usize,
    },
    TooFewSlots {
        plural: &'static str,
        have: u64,
        need: u64,
    },
    TooLittleMemory {
        have: u64,
        need: u64,
    },
    /// Cost more by the cost model (`balanced`). Boxed: two costs are
    /// twice any other verdict's figures, and every alternative of every
    /// decision is kept until the plan is written (docs/performance.md).
    Costlier(Box<[Cost; 2]>),
    /// Read back from a plan document.
    Text(String),
}

impl Verdict {
    /// The verdict of a set ranked above the chosen one that could not be
    /// turned into a plan.
    pub(crate) fn not_built() -> Verdict {
        Verdict(Why::NotBuilt)
    }

    /// The verdict of a set of `alt` nodes whose cells would be uneven,
    /// against the `chosen` nodes that split `vcpus` evenly.
    pub(crate) fn uneven(vcpus: u64, alt: usize, chosen: usize) -> Verdict {
        Verdict(Why::Uneven { vcpus, alt, chosen })
    }

    /// The verdict of a placement the cost model ranked lower.
    pub(crate) fn costlier(alt: Cost, chosen: Cost) -> Verdict {
        Verdict(Why::Costlier(Box::new([alt, chosen])))
    }
}

impl Verdict {
    /// A stable code for the criterion that decided, for programs (the
    /// sentence may be reworded): `more-nodes`, `farther-from-device`,
    /// `fewer-slots`, `less-memory`, `emptier`, `more-memory` (`pack`),
    /// `farther-max`, `farther-mean`,
    /// `strands`, `tie`, `not-built`, `uneven`, `lopsided`, `shared-float`,
    /// `large-siblings`, `splits-l3`,
    /// `too-few-slots`, `too-little-memory`,
    /// or `text` for a verdict read back from a document.
    pub fn code(&self) -> &'static str {
        match &self.0 {
            Why::MoreNodes { .. } => "more-nodes",
            Why::FartherFromDevice => "farther-from-device",
            Why::FewerSlots { .. } => "fewer-slots",
            Why::LessMemory { .. } => "less-memory",
            Why::Emptier { .. } => "emptier",
            Why::MoreMemory { .. } => "more-memory",
            Why::FartherMax { .. } => "farther-max",
            Why::FartherMean { .. } => "farther-mean",
            Why::Strands => "strands",
            Why::HoldsDevices { .. } => "holds-devices",
            Why::Tie => "tie",
            Why::NotBuilt => "not-built",
            Why::Uneven { .. } => "uneven",
            Why::Lopsided => "lopsided",
            Why::SharedFloat { .. } => "shared-float",
            Why::LargeSiblings { .. } => "large-siblings",
            Why::SplitsL3 => "splits-l3",
            Why::TooFewSlots { .. } => "too-few-slots",
            Why::TooLittleMemory { .. } => "too-little-memory",
            Why::Costlier(_) => "costlier",
            Why::Text(_) => "text",
        }
    }
}

/// The figures a verdict compares, for programs: what the alternative
/// has against the chosen set, in the unit of the verdict's criterion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictFigures {
    /// The criterion has no figures (`tie`, `strands`, `not-built`,
    /// `farther-from-device`, or a verdict read back as text).
    None,
    /// Whole numbers: nodes (`more-nodes`), slots (`fewer-slots`,
    /// `emptier`), bytes (`less-memory`, `more-memory`), a SLIT distance
    /// (`farther-max`) or free devices (`holds-devices`).
    Counts {
        /// The alternative's.
        alt: u64,
        /// The chosen set's.
        chosen: u64,
    },
    /// Mean SLIT distances in tenths (`farther-mean`): 155 is 15.5.
    Tenths {
        /// The alternative's.
        alt: u64,
        /// The chosen set's.
        chosen: u64,
    },
    /// What the set has against what the VM needs: slots
    /// (`too-few-slots`) or bytes (`too-little-memory`).
    Room {
        /// Free on the set.
        have: u64,
        /// Needed.
        need: u64,
    },
    /// Expected costs (`costlier`).
    Costs {
        /// The alternative's.
        alt: Cost,
        /// The chosen placement's.
        chosen: Cost,
    },
}

impl Verdict {
    /// The figures behind the verdict's sentence.
    pub fn figures(&self) -> VerdictFigures {
        match &self.0 {
            Why::MoreNodes { alt, chosen } | Why::Uneven { alt, chosen, .. } => {
                VerdictFigures::Counts { alt: *alt as u64, chosen: *chosen as u64 }
            }
            Why::FewerSlots { alt, chosen, .. }
            | Why::LessMemory { alt, chosen }
            | Why::Emptier { alt, chosen, .. }
            | Why::MoreMemory { alt, chosen }
            | Why::SharedFloat { alt, chosen } => VerdictFigures::Counts { alt: *alt, chosen: *chosen },
            // The large VM's vCPUs, against the most a small VM has.
            Why::LargeSiblings { vcpus } => {
                VerdictFigures::Counts { alt: u64::from(*vcpus), chosen: u64::from(crate::nodeset::SMALL_VM_VCPUS) }
            }
            Why::FartherMax { alt, chosen } | Why::HoldsDevices { alt, chosen } => {
                VerdictFigures::Counts { alt: u64::from(*alt), chosen: u64::from(*chosen) }
            }
            Why::FartherMean { alt, chosen } => VerdictFigures::Tenths { alt: *alt, chosen: *chosen },
            Why::TooFewSlots { have, need, .. } | Why::TooLittleMemory { have, need } => {
                VerdictFigures::Room { have: *have, need: *need }
            }
            Why::Costlier(c) => VerdictFigures::Costs { alt: c[0], chosen: c[1] },
            Why::FartherFromDevice
            | Why::Strands
            | Why::Tie
            | Why::NotBuilt
            | Why::Lopsided
            | Why::SplitsL3
            | Why::Text(_) => VerdictFigures::None,
        }
    }
}

impl From<String> for Verdict {
    fn from(text: String) -> Verdict {
        Verdict(Why::Text(text))
    }
}

impl From<&str> for Verdict {
    fn from(text: &str) -> Verdict {
        Verdict(Why::Text(text.to_string()))
    }
}

impl Sentence for Verdict {
    fn pieces(&self, out: &mut dyn Pieces) -> bool {
        // `a op c`, in parentheses.
        let pair = |out: &mut dyn Pieces, a: u64, op: &'static str, c: u64| {
            out.text(" (");
            out.num(a);
            out.text(op);
            out.num(c);
            out.text(")");
        };
        let tenths = |out: &mut dyn Pieces, t: u64| {
            out.num(t / 10);
            out.text(".");
            out.num(t % 10);
        };
        match &self.0 {
            Why::FartherFromDevice => out.text("farther from the preferred device"),
            Why::Strands => out.text("would strand more capacity"),
            Why::Lopsided => out.text("spreads unequally over host packages: no guest socket shape mirrors it"),
            Why::SharedFloat { alt, chosen } => {
                out.text("shared VMs float there");
                pair(out, *alt, " > ", *chosen);
                out.text(", which a dedicated VM would push off its cores");
            }
            Why::LargeSiblings { vcpus } => {
                out.text("would take idle siblings of a ");
                out.num(u64::from(*vcpus));
                out.text("-vCPU VM's cores; the chosen node gives only those of VMs of ");
                out.num(u64::from(crate::nodeset::SMALL_VM_VCPUS));
                out.text(" vCPUs or fewer");
            }
            Why::SplitsL3 => out.text("its vCPUs would span two L3 caches there; the chosen node keeps them under one"),
            Why::Tie => out.text("tie on every criterion: lower node numbers win"),
            Why::NotBuilt => out.text("could not be split or pinned as counted"),
            Why::Uneven { vcpus, alt, chosen } => {
                out.text("uneven cells: ");
                out.num(*vcpus);
                out.text(" vCPUs do not split equally over ");
                out.num(*alt as u64);
                out.text(" nodes (");
                out.num(*chosen as u64);
                out.text(" nodes take ");
                out.num(vcpus / (*chosen as u64).max(1));
                out.text(" each)");
            }
            Why::MoreNodes { alt, chosen } => {
                out.text("more nodes");
                pair(out, *alt as u64, " > ", *chosen as u64);
            }
            Why::FewerSlots { plural, alt, chosen } => {
                out.text("more loaded: fewer ");
                out.text(plural);
                pair(out, *alt, " < ", *chosen);
            }
            Why::Emptier { plural, alt, chosen } => {
                out.text("emptier: more ");
                out.text(plural);
                pair(out, *alt, " > ", *chosen);
                out.text("; pack fills the fullest nodes first");
            }
            Why::FartherMax { alt, chosen } => {
                out.text("farther (max distance ");
                out.num(u64::from(*alt));
                out.text(" > ");
                out.num(u64::from(*chosen));
                out.text(")");
            }
            Why::FartherMean { alt, chosen } => {
                out.text("farther (mean distance ");
                tenths(out, *alt);
                out.text(" > ");
                tenths(out, *chosen);
                out.text(")");
            }
            Why::HoldsDevices { alt, chosen } => {
                out.text("has more free GPUs, NICs or NVMe drives");
                pair(out, u64::from(*alt), " > ", u64::from(*chosen));
                out.text(", kept for the VMs that will ask for them");
            }
            Why::TooFewSlots { plural, have, need } => {
                out.text("too small: ");
                out.num(*have);
                out.text(" ");
                out.text(plural);
                out.text(" < ");
                out.num(*need);
            }
            Why::Text(text) => out.name(text),
            // Sizes and costs: through `Display`.
            Why::LessMemory { .. } | Why::MoreMemory { .. } | Why::TooLittleMemory { .. } | Why::Costlier(_) => {
                return false
            }
        }
        true
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(result) = show_pieces(self, f) {
            return result;
        }
        match &self.0 {
            Why::LessMemory { alt, chosen } => {
                let (a, c) = (format_size(*alt), format_size(*chosen));
                if a == c {
                    // Rounded alike ("127 GiB < 127 GiB" reads as a tie).
                    write!(f, "more loaded: {} less free memory", format_size(chosen.saturating_sub(*alt)))
                } else {
                    write!(f, "more loaded: less free memory ({a} < {c})")
                }
            }
            Why::MoreMemory { alt, chosen } => write!(
                f,
                "emptier: more free memory ({} > {}); pack fills the fullest nodes first",
                format_size(*alt),
                format_size(*chosen)
            ),
            Why::TooLittleMemory { have, need } => {
                write!(f, "too small: room for {} of memory < {}", format_size(*have), format_size(*need))
            }
            Why::Costlier(c) => write!(f, "costs more: {} against {}", c[0], c[1]),
            // Worded piece by piece ([`Sentence::pieces`]).
            _ => Ok(()),
        }
    }
}

/// Verdicts are equal when they read the same, whether worded now or read
/// back from a document.
impl PartialEq for Verdict {
    fn eq(&self, other: &Verdict) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Verdict {}

/// Why `alt` lost to `chosen`: the first ranking criterion where it is
/// worse.
pub(crate) fn verdict(search: &Search<'_>, chosen: &Candidate, alt: &Candidate, noun: SlotNoun) -> Verdict {
    let per = noun.per.max(1);
    if alt.nodes.len() != chosen.nodes.len() {
        return Verdict(Why::MoreNodes { alt: alt.nodes.len(), chosen: chosen.nodes.len() });
    }
    if alt.pref_missing > chosen.pref_missing {
        return Verdict(Why::FartherFromDevice);
    }
    let slots = || {
        (alt.slots < chosen.slots).then(|| Why::FewerSlots {
            plural: noun.plural,
            alt: alt.slots / per,
            chosen: chosen.slots / per,
        })
    };
    let memory = || {
        (alt.mem_bytes < chosen.mem_bytes).then_some(Why::LessMemory { alt: alt.mem_bytes, chosen: chosen.mem_bytes })
    };
    let farther = || {
        if alt.max_dist > chosen.max_dist {
            Some(Why::FartherMax { alt: alt.max_dist, chosen: chosen.max_dist })
        } else if alt.sum_dist > chosen.sum_dist {
            // Rounded down, but the alternative's never to the chosen
            // set's figure: on sets of dozens of nodes the means can differ
            // by less than a tenth, and the figures must still show the
            // alternative farther, as it is.
            let chosen = chosen.mean_dist_tenths();
            Some(Why::FartherMean { alt: alt.mean_dist_tenths().max(chosen + 1), chosen })
        } else {
            None
        }
    };
    let l3 = || (alt.l3_split && !chosen.l3_split).then_some(Why::SplitsL3);
    let large =
        || (alt.large_siblings() && !chosen.large_siblings()).then_some(Why::LargeSiblings { vcpus: alt.siblings });
    let found = match search.policy {
        Policy::Pack => farther()
            .or_else(large)
            .or_else(l3)
            .or_else(|| {
                (alt.slots > chosen.slots).then(|| Why::Emptier {
                    plural: noun.plural,
                    alt: alt.slots / per,
                    chosen: chosen.slots / per,
                })
            })
            .or_else(|| {
                (alt.mem_bytes > chosen.mem_bytes)
                    .then_some(Why::MoreMemory { alt: alt.mem_bytes, chosen: chosen.mem_bytes })
            }),
        Policy::Compact => memory().or_else(slots),
        Policy::SmtAware => (alt.lopsided && !chosen.lopsided).then_some(Why::Lopsided).or_else(memory).or_else(slots),
        Policy::Balanced | Policy::Spread => {
            let max = (alt.max_dist > chosen.max_dist)
                .then_some(Why::FartherMax { alt: alt.max_dist, chosen: chosen.max_dist });
            max.or_else(|| (alt.lopsided && !chosen.lopsided).then_some(Why::Lopsided))
                .or_else(farther)
                .or_else(|| {
                    (alt.floating > chosen.floating)
                        .then_some(Why::SharedFloat { alt: alt.floating, chosen: chosen.floating })
                })
                .or_else(large)
                .or_else(l3)
                .or_else(|| {
                    slots().or_else(memory).or_else(|| (alt.stranded > chosen.stranded).then_some(Why::Strands))
                })
        }
    };
    let found = found.or_else(|| {
        (alt.devices > chosen.devices).then_some(Why::HoldsDevices { alt: alt.devices, chosen: chosen.devices })
    });
    Verdict(found.unwrap_or(Why::Tie))
}

/// Why a set smaller than the chosen one could not hold the VM (`units`:
/// the memory units its nodes can take); `None` if it could: it then lost
/// on something else (a pass asked for more nodes, to compare their cost),
/// and is not called too small.
pub(crate) fn too_small(
    search: &Search<'_>,
    alt: &Candidate,
    units: u64,
    vcpus: u64,
    noun: SlotNoun,
) -> Option<Verdict> {
    let per = noun.per.max(1);
    if alt.slots < search.need.slots {
        Some(Verdict(Why::TooFewSlots { plural: noun.plural, have: alt.slots / per, need: vcpus.div_ceil(per) }))
    } else if units < search.need.units {
        // What its nodes can take of this VM's memory, which is split in
        // whole units: free bytes the units leave over on each node do not
        // count (a set may hold more bytes free than the VM has, and still
        // too few units).
        let have = alt.mem_bytes.min(units.saturating_mul(search.need.unit_bytes));
        Some(Verdict(Why::TooLittleMemory { have, need: search.memory_bytes }))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{Verdict, Why};

    const GIB: u64 = 1 << 30;

    /// A decision keeps its notes and alternatives until the plan is
    /// written: their size is memory every VM of a batch first touches
    /// (docs/performance.md). A variant with larger figures boxes them.
    #[test]
    fn notes_and_verdicts_stay_small() {
        assert!(std::mem::size_of::<crate::Note>() <= 40, "{}", std::mem::size_of::<crate::Note>());
        assert!(std::mem::size_of::<Verdict>() <= 40, "{}", std::mem::size_of::<Verdict>());
    }

    #[test]
    fn memory_verdicts_that_round_alike_name_the_difference() {
        let close = Verdict(Why::LessMemory { alt: 127 * GIB + (10 << 20), chosen: 127 * GIB + (120 << 20) });
        assert_eq!(close.to_string(), "more loaded: 110 MiB less free memory");
        let apart = Verdict(Why::LessMemory { alt: 56 * GIB, chosen: 64 * GIB });
        assert_eq!(apart.to_string(), "more loaded: less free memory (56 GiB < 64 GiB)");
        let small = Verdict(Why::TooLittleMemory { have: 12 * GIB, need: 14 * GIB });
        assert_eq!(small.to_string(), "too small: room for 12 GiB of memory < 14 GiB");
    }

    /// A writer's pieces joined, names marked apart from fixed words.
    #[derive(Default)]
    struct Joined {
        text: String,
        names: Vec<String>,
    }

    impl crate::why::Pieces for Joined {
        fn text(&mut self, s: &'static str) {
            assert!(!s.contains(['"', '\\']) && !s.chars().any(char::is_control), "{s}");
            self.text.push_str(s);
        }
        fn name(&mut self, s: &str) {
            self.text.push_str(s);
            self.names.push(s.to_string());
        }
        fn num(&mut self, n: u64) {
            self.text.push_str(&n.to_string());
        }
    }

    /// `s` in pieces joins into `want`, the sentence `Display` gives, with
    /// `names` as its names.
    fn check_pieces(s: &dyn crate::why::Sentence, want: &str, names: &[&str]) {
        let mut j = Joined::default();
        assert!(s.pieces(&mut j), "{want}");
        assert_eq!(j.text, want);
        assert_eq!(s.to_string(), want);
        assert_eq!(j.names, names, "{want}");
    }

    /// The verdicts worded piece by piece read as they did when they were
    /// format strings, and a writer's pieces join into the sentence
    /// `Display` gives.
    #[test]
    fn verdicts_in_pieces_read_as_before() {
        let verdicts = [
            (Why::MoreNodes { alt: 3, chosen: 2 }, "more nodes (3 > 2)"),
            (
                Why::Uneven { vcpus: 64, alt: 5, chosen: 8 },
                "uneven cells: 64 vCPUs do not split equally over 5 nodes (8 nodes take 8 each)",
            ),
            (Why::FewerSlots { plural: "free cores", alt: 4, chosen: 16 }, "more loaded: fewer free cores (4 < 16)"),
            (
                Why::Emptier { plural: "free CPU threads", alt: 12, chosen: 3 },
                "emptier: more free CPU threads (12 > 3); pack fills the fullest nodes first",
            ),
            (Why::FartherMax { alt: 32, chosen: 12 }, "farther (max distance 32 > 12)"),
            (Why::FartherMean { alt: 215, chosen: 120 }, "farther (mean distance 21.5 > 12.0)"),
            (
                Why::HoldsDevices { alt: 2, chosen: 0 },
                "has more free GPUs, NICs or NVMe drives (2 > 0), kept for the VMs that will ask for them",
            ),
            (Why::TooFewSlots { plural: "free cores", have: 6, need: 8 }, "too small: 6 free cores < 8"),
            (Why::Tie, "tie on every criterion: lower node numbers win"),
        ];
        for (why, want) in verdicts {
            check_pieces(&Verdict(why), want, &[]);
        }
        check_pieces(&Verdict::from("read \"back\""), "read \"back\"", &["read \"back\""]);
    }

    /// The notes worded piece by piece read as they did when they were
    /// format strings (one vCPU now reads in the singular), names marked
    /// apart from fixed words.
    #[test]
    fn notes_in_pieces_read_as_before() {
        use crate::why::Note;
        use numaplace_topo::NodeId;
        let contend = " (no whole core was free): both VMs contend there";
        let notes = [
            (Note::DeviceNodeUnknown { device: "0000:3b:00.0".into() }, "0000:3b:00.0 has no known NUMA node; its preference is ignored".to_string(), vec!["0000:3b:00.0"]),
            (
                Note::DeviceMissing { device: "0000:3b:00.0".into() },
                "0000:3b:00.0 is not on this host; it is not passed through (mark it required to refuse instead)".into(),
                vec!["0000:3b:00.0"],
            ),
            (
                Note::DeviceTaken { device: "0000:3b:00.0".into(), holder: "gpu1".into() },
                "0000:3b:00.0 is already passed through to gpu1; it is not passed through (mark it required to refuse instead)".into(),
                vec!["0000:3b:00.0", "gpu1"],
            ),
            (
                Note::SiblingThreads { vcpus: 2, max_nodes: 8 },
                "fewer than 2 free whole cores on <= 8 nodes: some vCPUs run on sibling threads".into(),
                vec![],
            ),
            (Note::OddPairs { vcpus: 5 }, "5 vCPUs is odd: the guest sees threads=1 and the last vCPU has a core alone".into(), vec![]),
            (
                Note::OddPairs { vcpus: 1 },
                "1 vCPU makes no pair: the guest sees threads=1 and the vCPU has a core alone".into(),
                vec![],
            ),
            (
                Note::EmulatorIsolated { cpu: 9, node: NodeId(1) },
                "emulator threads have CPU 9 on node1 to themselves (one CPU beyond the vCPUs)".into(),
                vec![],
            ),
            (
                Note::CellsShareNode { node: NodeId(2) },
                "several guest cells share node2: the guest expects more memory bandwidth than it gets".into(),
                vec![],
            ),
            (
                Note::Spans { cells: vec![4, 6, 6] },
                "spans 3 host nodes: the guest sees 3 NUMA cells of 4 + 6 + 6 vCPUs".into(),
                vec![],
            ),
            (Note::Indivisible { vcpus: 30, cells: 7 }, "30 vCPUs do not divide evenly over the 7 nodes that run them".into(), vec![]),
            (
                Note::SiblingsOf { vms: vec!["a".into(), "b".into()], vcpus: 2 },
                format!("2 vCPUs run on idle sibling threads of cores a, b hold{contend}"),
                vec!["a", "b"],
            ),
            (
                Note::SiblingsOf { vms: vec!["vm36".into()], vcpus: 1 },
                format!("1 vCPU runs on idle sibling threads of cores vm36 holds{contend}"),
                vec!["vm36"],
            ),
            (
                Note::SiblingsTakenBy { vm: "vm64".into(), vcpus: 2 },
                format!("vm64 was given the idle sibling threads of 2 of this VM's cores{contend}"),
                vec!["vm64"],
            ),
            (Note::SharedCores { vcpus: 2 }, "2 vCPUs share their physical core with another vCPU".into(), vec![]),
            (Note::SharedCores { vcpus: 1 }, "1 vCPU shares its physical core with another vCPU".into(), vec![]),
            (
                Note::SiblingThreads { vcpus: 1, max_nodes: 2 },
                "no free whole core on <= 2 nodes: the vCPU runs on a sibling thread".into(),
                vec![],
            ),
            (
                Note::SiblingThreads { vcpus: 4, max_nodes: 1 },
                "fewer than 4 free whole cores on one node: some vCPUs run on sibling threads".into(),
                vec![],
            ),
            (
                Note::DeviceOutside { node: NodeId(3) },
                "a device is on node3, where none of the VM's vCPUs run: that node could not hold them".into(),
                vec![],
            ),
            (
                Note::EmulatorOnVcpus,
                "emulator threads share the vCPUs' CPUs; name a housekeeping set to keep them apart".into(),
                vec![],
            ),
        ];
        for (note, want, names) in &notes {
            check_pieces(note, want, names);
        }
    }

    #[test]
    fn display_only_sentences_give_no_pieces() {
        use crate::why::{Note, Sentence};
        // Sizes, ratios, costs and CPU lists are worded only by `Display`,
        // and a writer that asks for pieces gets nothing.
        let mut j = Joined::default();
        assert!(!Verdict(Why::LessMemory { alt: GIB, chosen: 2 * GIB }).pieces(&mut j));
        assert!(!Note::SharedFloat { vcpus: 4, cpus: 8, overcommit: 2.0 }.pieces(&mut j));
        assert!(j.text.is_empty());
    }

    /// A shortfall of one unit, or on a VM held to one node, reads as an
    /// operator would say it.
    #[test]
    fn shortfalls_of_one_read_in_the_singular() {
        use crate::why::{NodeFree, RejectReason, Resource};
        use numaplace_topo::NodeId;
        let best = vec![NodeFree { node: NodeId(0), free: 0, memory: GIB }];
        let short = |resource, needed, max_nodes| {
            RejectReason::CpuShort { resource, needed, max_nodes, best: best.clone(), best_total: 0 }.to_string()
        };
        assert_eq!(short(Resource::FreeThreads, 1, 1), "needs 1 free CPU thread on one node; node0 has 0");
        assert_eq!(short(Resource::FreeCores, 2, 2), "needs 2 free cores on <= 2 nodes; node0 has 0");
        assert_eq!(
            short(Resource::SiblingPairs, 1, 1),
            "needs 1 free core with a sibling pair on one node; node0 has 0"
        );
        let joint = RejectReason::NoJointFit {
            resource: Resource::SharedSlots,
            needed: 1,
            memory: 4 * GIB,
            max_nodes: 1,
            best: best.clone(),
        };
        assert!(joint.to_string().starts_with("no node has both 1 shared vCPU slot and 4 GiB free; "), "{joint}");
    }

    /// Writers copy a sentence's fixed words without escaping them: every
    /// `text` piece is plain, the sentences without values among them.
    #[test]
    fn fixed_words_are_plain_text() {
        use crate::why::{Note, Pieces, Sentence};
        struct Plain(usize);
        impl Pieces for Plain {
            fn text(&mut self, s: &'static str) {
                assert!(!s.contains(['"', '\\']) && !s.chars().any(char::is_control), "{s}");
                self.0 += 1;
            }
            fn name(&mut self, s: &str) {
                panic!("a sentence without values names {s}");
            }
            fn num(&mut self, n: u64) {
                panic!("a sentence without values gives {n}");
            }
        }
        let verdicts =
            [Why::FartherFromDevice, Why::Strands, Why::Tie, Why::NotBuilt, Why::Lopsided, Why::SplitsL3].map(Verdict);
        let notes = [
            Note::NoSmtForPairs,
            Note::SmtIgnoredForShared,
            Note::EmulatorOnVcpus,
            Note::EmulatorOnIdleSiblings,
            Note::EmulatorInPool,
            Note::HotAddForced,
            Note::UnevenSplit,
            Note::MemoryOnlyCells,
            Note::MemorylessCells,
        ];
        let sentences: Vec<&dyn Sentence> =
            verdicts.iter().map(|v| v as &dyn Sentence).chain(notes.iter().map(|n| n as &dyn Sentence)).collect();
        assert_eq!(sentences.len(), 15);
        for s in sentences {
            let mut plain = Plain(0);
            assert!(s.pieces(&mut plain), "{s}");
            assert_eq!(plain.0, 1, "one fixed piece: {s}");
        }
    }

    #[test]
    fn a_verdict_read_back_equals_the_one_worded() {
        let worded = Verdict(Why::FartherMax { alt: 32, chosen: 16 });
        assert_eq!(Verdict::from(worded.to_string()), worded);
        assert_ne!(Verdict::from("farther (max distance 32 > 12)"), worded);
    }
}
