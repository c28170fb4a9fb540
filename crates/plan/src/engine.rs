//! The planner's entry points: one VM (`plan`) or a batch in order
//! (`plan_batch`), against a host state that records what is taken.
//!
//! A plan runs in passes; each pass counts node capacity one way (free
//! whole cores, free threads, sibling pairs, shared slots) and asks the
//! node-set search for the best set. `prefer-cores` tries whole cores on
//! up to the node limit before it allows siblings, which is how "widen to
//! more nodes before doubling up on siblings" falls out. The chosen set is
//! then split (vCPUs evenly, memory in proportion), pinned, and turned
//! into the guest topology.
//!
//! The steps live in child modules: `check` (the request validated into
//! [`Checked`]), `capacity` (a pass's per-node slots), `passes` (one
//! search pass), `cells` (requests that give guest cells), `costed`
//! (cost-chosen and mixed plans), `costing` (a placement's cost and the
//! alternatives) and `assemble` (a node set turned into a placement).

use crate::cost::Cost;
use crate::guest::{self, CellPlan};
use crate::nodeset::{Candidate, Need, NodeCap, Search};
use crate::pin::{self, PinMode};
use crate::placement::{CpuMode, GuestTopology, MemoryMode, Placement, VcpuPin};
use crate::reason::{self, SlotNoun, Verdict};
use crate::request::{CellWish, EmulatorPlacement, MemoryTiers, Policy, Request, SmtPolicy};
use crate::split;
use crate::why::{Lacks, NodeFree, Note, RejectReason, Resource};
use numaplace_topo::{CpuSet, NodeId, Topology};
use std::fmt;
use std::sync::Arc;

pub use crate::state::{
    node_capacity, vm_overhead_bytes, HostState, NodeCapacity, NodeSpec, Overhead, ReservationConflict, Reservations,
    StateError,
};

mod assemble;
mod capacity;
mod cells;
mod check;
mod costed;
mod costing;
mod passes;

use assemble::*;
use capacity::*;
use cells::*;
use check::*;
use costed::*;
pub use costing::cost_of;
use costing::*;
use passes::*;

/// Alternatives listed in a decision, at most.
const MAX_ALTERNATIVES: usize = 3;
/// Largest shared-mode overcommit ratio accepted (vCPUs per PU).
const MAX_OVERCOMMIT: f64 = 1000.0;
/// Largest huge page size accepted (16 GiB pages exist on POWER).
const MAX_HUGEPAGE: u64 = 16 << 30;
/// Guest cells given by the request are whole multiples of this (or of
/// the huge page size): QEMU backs each with its own memory object, and
/// 2 MiB keeps them whole transparent huge pages.
const CELL_ALIGN: u64 = 2 << 20;

/// One node set the planner considered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alternative {
    /// Host nodes of the candidate.
    pub nodes: Vec<NodeId>,
    /// Why it lost.
    pub verdict: Verdict,
}

/// An accepted plan for one VM, with the reasoning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Where the VM goes. Shared with the host state that records it
    /// ([`plan_batch`]): a batch keeps one copy of each placement, not
    /// two. Change it with `Arc::make_mut`.
    pub placement: Arc<Placement>,
    /// Candidates considered and why they lost.
    pub alternatives: Vec<Alternative>,
    /// Remarks for the operator (e.g. siblings shared, device remote).
    pub notes: Vec<Note>,
}

/// A VM that cannot be placed, with the shortfall.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// VM name.
    pub vm: String,
    /// Why, with the figures that decided (worded by its `Display`, e.g.
    /// `needs 32 free cores on <= 2 nodes; node0 has 12, node1 has 16`).
    pub reason: RejectReason,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.vm, self.reason)
    }
}

impl std::error::Error for Rejection {}

/// One way of counting capacity.
#[derive(Clone, Copy, Debug)]
enum Pass {
    Dedicated(PinMode),
    Shared,
    /// Shared vCPUs counted against a node's cores rather than its
    /// threads (`smt-aware`'s first pass for a shared VM: XAPI requests
    /// as many physical cores as vCPUs, shared or not).
    SharedCores,
}

/// The request after validation, in the units the search uses.
struct Checked<'r> {
    req: &'r Request,
    /// The VM's vCPUs.
    vcpus: u64,
    /// CPUs pinned beyond the vCPUs: 1 for an emulator thread CPU of its
    /// own (`emulator: isolate`), on the node of guest cell 0.
    extra: u64,
    /// Guest cells the request gives (empty: derived from the pinning).
    cells: Vec<CellWish>,
    required: Vec<usize>,
    /// Each required device with its node's position (its PCI address;
    /// `None` for a wish that names only a node), to word a refusal.
    required_by: Vec<(usize, Option<String>)>,
    preferred: Vec<usize>,
    /// PCI devices the host has and no other VM holds: passed through.
    passed: Vec<String>,
    notes: Vec<Note>,
    k_max: usize,
    /// Memory split unit and how many whole units / leftover bytes.
    unit: u64,
    blocks: u64,
    rem: u64,
    /// Split granularity in vCPUs (2 for sibling pairs).
    gran: u64,
    /// Capacity passes, tried in order (`None` = unused slot).
    passes: [Option<Pass>; 2],
    /// Guest bytes per 1000 bytes charged (1000: memory not overcommitted).
    mem_milli: u64,
    /// Node positions the VM may not use (a mixed VM's pinned part keeps
    /// to nodes whose shared pool holds its floating vCPUs); empty: none.
    excluded: Vec<bool>,
}

/// The nodes of the devices a request names (required and preferred, by
/// node position) and the devices passed through.
struct Devices {
    required: Vec<usize>,
    required_by: Vec<(usize, Option<String>)>,
    preferred: Vec<usize>,
    passed: Vec<String>,
}

/// Plans one VM against a host state (the state is not changed).
pub fn plan(topology: &Topology, state: &HostState, request: &Request) -> Result<Decision, Rejection> {
    if !request.shared_vcpus.is_empty() {
        return plan_mixed(topology, state, request);
    }
    if request.cpu_hotadd() {
        // Every vCPU the VM may grow to is planned now, so one added later
        // lands on its pinned CPU in its guest cell; it boots with
        // `vcpus` of them online.
        let mut full = request.clone();
        full.vcpus = request.planned_vcpus();
        // A hot-add VM over several nodes is refused unless forced, so one
        // node, even with sibling threads, beats whole cores on two.
        if !request.force && request.max_nodes != Some(1) {
            let mut one = full.clone();
            one.max_nodes = Some(1);
            if let Ok(mut d) = plan_all(topology, state, &one) {
                Arc::make_mut(&mut d.placement).online_vcpus = Some(request.vcpus);
                return Ok(d);
            }
        }
        let mut d = plan_all(topology, state, &full)?;
        Arc::make_mut(&mut d.placement).online_vcpus = Some(request.vcpus);
        return Ok(d);
    }
    plan_all(topology, state, request)
}

/// [`plan`] for a request whose every vCPU is online.
fn plan_all(topology: &Topology, state: &HostState, request: &Request) -> Result<Decision, Rejection> {
    plan_except(topology, state, request, Vec::new())
}

/// [`plan_all`] on every node but the `excluded` positions.
fn plan_except(
    topology: &Topology,
    state: &HostState,
    request: &Request,
    excluded: Vec<bool>,
) -> Result<Decision, Rejection> {
    let reject = |reason: RejectReason| Rejection { vm: request.name.clone(), reason };
    let mut c = check(topology, state, request).map_err(reject)?;
    c.excluded = excluded;
    let first = plan_checked(state, &c);
    // Memory is split in whole 128 MiB blocks so guest cells stay whole
    // blocks; a VM that fits the nodes' free bytes but not their blocks
    // (1842 MiB on two 1 GiB nodes that keep QEMU's 78 MiB: 945 MiB each,
    // 7 blocks and 49 MiB, where the request needs 14 blocks and 50 MiB)
    // is split in 2 MiB units instead, as cells the request gives are
    // (issue 48): refusing it while the reason names 1891 MiB on offer
    // contradicted itself.
    let short = |r: &RejectReason| {
        matches!(r, RejectReason::MemoryShort { .. } | RejectReason::NoJointFit { .. } | RejectReason::NotBuildable)
    };
    match first {
        Err(ref r)
            if short(r)
                && c.cells.is_empty()
                && c.req.hugepage_bytes.is_none()
                && c.unit == state.block
                && state.block == crate::state::BLOCK =>
        {
            c.unit = CELL_ALIGN;
            c.blocks = c.req.memory_bytes / CELL_ALIGN;
            c.rem = c.req.memory_bytes % CELL_ALIGN;
            plan_checked(state, &c).or(first).map_err(reject)
        }
        other => other.map_err(reject),
    }
}

/// [`plan_except`] once the request is checked.
fn plan_checked(state: &HostState, c: &Checked<'_>) -> Result<Decision, RejectReason> {
    let request = c.req;
    if !c.cells.is_empty() {
        return plan_cells(state, c);
    }
    if c.costed() {
        return plan_costed(state, c);
    }
    let mut failure: Option<(Shortfall, Pass)> = None;
    let mut last_reason = RejectReason::NotBuildable;
    for (pass_no, pass) in c.passes.iter().enumerate() {
        let Some(pass) = *pass else { continue };
        match run_pass(state, c, pass, None) {
            Ran::Built(mut b) => {
                if pass_no > 0 {
                    b.notes.insert(0, Note::SiblingThreads { vcpus: u64::from(request.vcpus), max_nodes: c.k_max });
                }
                return Ok(b.decision(c));
            }
            Ran::Short(kind) => failure = Some((kind, pass)),
            Ran::Unbuilt(r) => {
                failure = None;
                last_reason = r;
            }
            Ran::Final(r) => return Err(r),
        }
    }
    Err(failure.map_or(last_reason, |(kind, pass)| shortfall(state, c, kind, pass)))
}

/// The words for a pass that found no node set, from the capacities the
/// pass saw (computed again: only a request every pass refused gets here).
fn shortfall(state: &HostState, c: &Checked<'_>, kind: Shortfall, pass: Pass) -> RejectReason {
    let caps = &capacities(state, c, pass);
    let noun = noun(pass);
    let vcpus = u64::from(c.req.vcpus);
    match kind {
        Shortfall::Cpu => reason::cpu_shortfall(state, caps, vcpus, c.k_max, noun),
        Shortfall::Memory => {
            // Memory of kinds the VM may not use is named, so the operator
            // sees the HBM or CXL the request left out.
            let host = &state.reservations().memory_kinds;
            let mut other: Vec<(numaplace_topo::MemoryKind, u64)> = Vec::new();
            for (i, f) in state.facts.iter().enumerate() {
                if c.req.allows_memory(f.kind, host) || c.req.hugepage_bytes.is_some() {
                    continue;
                }
                let free = state.free_memory(i);
                match other.iter_mut().find(|o| o.0 == f.kind) {
                    Some(o) => o.1 = o.1.saturating_add(free),
                    None if free > 0 => other.push((f.kind, free)),
                    None => {}
                }
            }
            let short = reason::memory_shortfall(state, caps, c.req.memory_bytes, c.req.hugepage_bytes, c.k_max);
            match short {
                RejectReason::MemoryShort { needed, best_total, .. } if !other.is_empty() => {
                    other.sort();
                    let kinds =
                        numaplace_topo::MemoryKind::ALL.into_iter().filter(|&k| c.req.allows_memory(k, host)).collect();
                    RejectReason::MemoryKindShort { needed, kinds, best_total, other }
                }
                short => short,
            }
        }
        Shortfall::Joint => reason::joint_or_unreachable(state, caps, vcpus, c.req.memory_bytes, c.k_max, noun),
    }
}

/// A placement built from one pass's best set.
struct Built {
    placement: Placement,
    notes: Vec<Note>,
    alternatives: Vec<Alternative>,
    /// 0 for whole cores (or the only pass), 1 for threads.
    pass_no: usize,
    /// Nodes with vCPUs.
    k: usize,
    cost: Cost,
    /// vCPUs on cores another VM (or the host) uses, counted for a VM
    /// that asks for devices only.
    foreign: u64,
}

/// What one pass gave.
enum Ran {
    Built(Box<Built>),
    /// No node set has the capacity.
    Short(Shortfall),
    /// Sets were found but none could be built.
    Unbuilt(RejectReason),
    /// The request is refused whatever the set.
    Final(RejectReason),
}

/// Which requirement no node set met.
#[derive(Clone, Copy)]
enum Shortfall {
    Cpu,
    Memory,
    Joint,
}

/// Why a node set could not be built into a plan.
enum BuildError {
    /// Try the next candidate or pass.
    Retry(RejectReason),
    /// Refuse the request (another set or SMT pass would not help).
    Final(RejectReason),
}

/// vCPUs of a new placement that share their core.
struct Doubled {
    /// With another vCPU, of this VM or any other.
    total: usize,
    /// With a PU a dedicated VM holds.
    with_others: usize,
}

/// The notes a decision gives the VMs it shares cores with, by name:
/// each VM named in a [`Note::SiblingsOf`] learns which VM took its idle
/// siblings. Callers append them to those VMs' plans ([`plan_batch`] does
/// so within a batch; the CLI for VMs carried from a state).
pub fn neighbour_notes(decision: &Decision) -> Vec<(String, Note)> {
    let Some(Note::SiblingsOf { vms, vcpus }) = decision.notes.iter().find(|n| matches!(n, Note::SiblingsOf { .. }))
    else {
        return Vec::new();
    };
    vms.iter()
        .map(|vm| (vm.clone(), Note::SiblingsTakenBy { vm: decision.placement.vm.clone(), vcpus: *vcpus }))
        .collect()
}

/// Plans VMs in order, recording each accepted one in `state`.
pub fn plan_batch(
    topology: &Topology,
    state: &mut HostState,
    requests: &[Request],
) -> Vec<Result<Decision, Rejection>> {
    let mut out: Vec<Result<Decision, Rejection>> = Vec::with_capacity(requests.len());
    state.reserve(requests.len());
    // Where each VM accepted here is in `out`, by its place in the state
    // (from `base` on), for the notes of later ones: the state already
    // finds a VM by name.
    let base = state.placements().len();
    let mut at: Vec<usize> = Vec::with_capacity(requests.len());
    for r in requests {
        let result = plan(topology, state, r).and_then(|d| {
            // A placement just planned against this state always fits it;
            // should it not, report it rather than record half of it.
            state
                .place_shared(Arc::clone(&d.placement))
                .map_err(|e| Rejection { vm: r.name.clone(), reason: RejectReason::Internal(e) })?;
            Ok(d)
        });
        // An earlier VM of the batch whose idle siblings this one took
        // says so in its own plan too.
        if let Ok(d) = &result {
            for (vm, note) in neighbour_notes(d) {
                let i = state.position(&vm).and_then(|p| p.checked_sub(base)).and_then(|p| at.get(p));
                if let Some(Ok(earlier)) = i.and_then(|&i| out.get_mut(i)) {
                    earlier.notes.push(note);
                }
            }
            at.push(out.len());
        }
        out.push(result);
    }
    out
}
