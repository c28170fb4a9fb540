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

impl Checked<'_> {
    /// The emulator's own CPU as counted in a pass's slots: none in the
    /// `pairs` pass, where it is any free thread of cell 0's node rather
    /// than half of a sibling pair ([`pin::take_emulator`]).
    fn slot_extra(&self, pass: Pass) -> u64 {
        if matches!(pass, Pass::Dedicated(PinMode::Pairs)) {
            0
        } else {
            self.extra
        }
    }

    /// Whether the VM asked for a device on a known node (required or
    /// preferred).
    fn has_device_nodes(&self) -> bool {
        !self.required.is_empty() || !self.preferred.is_empty()
    }

    /// Whether the placement is chosen by cost: `balanced` dedicated VMs
    /// that prefer cores (the default), whose passes are whole cores, then
    /// threads.
    fn costed(&self) -> bool {
        self.req.policy == Policy::Balanced
            && self.req.cpu_mode == CpuMode::Dedicated
            && self.req.smt == SmtPolicy::PreferCores
    }
}

fn check<'r>(topology: &Topology, state: &HostState, req: &'r Request) -> Result<Checked<'r>, RejectReason> {
    check_basics(topology, state, req)?;
    // A POWER guest's memory and cells are whole 256 MiB blocks or QEMU
    // refuses to start it; elsewhere the last cell may hold a part.
    let strict = state.block > crate::state::BLOCK;
    if strict && !req.memory_bytes.is_multiple_of(state.block) {
        return Err(RejectReason::NotWholeBlocks { memory: req.memory_bytes, block: state.block });
    }
    // In thousandths, so charges and capacities are exact integers.
    let mem_milli = (req.memory_overcommit * 1000.0).round() as u64;
    let (unit, blocks, rem) = memory_units(state, req)?;
    let n = state.node_count();
    let k_max = req.max_nodes.map_or(n, |m| (m as usize).min(n));
    let mut notes = Vec::new();
    let Devices { required, required_by, preferred, passed } = devices(topology, state, req, k_max, &mut notes)?;
    check_emulator(topology, state, req)?;
    let extra = u64::from(req.emulator == EmulatorPlacement::Isolate);
    let cells = wanted_cells(req, if strict { state.block } else { CELL_ALIGN })?;
    let (passes, gran) = passes_for(state, req, &mut notes)?;
    let checked = Checked {
        req,
        vcpus: u64::from(req.vcpus),
        extra,
        cells,
        required,
        required_by,
        preferred,
        passed,
        notes,
        k_max,
        unit,
        blocks,
        rem,
        gran,
        passes,
        excluded: Vec::new(),
        mem_milli,
    };
    if let Some(reason) = checked.required_without_room(state) {
        return Err(reason);
    }
    Ok(checked)
}

/// The request's own checks, before any host capacity is looked at
/// (and the state's: it must be of this topology).
fn check_basics(topology: &Topology, state: &HostState, req: &Request) -> Result<(), RejectReason> {
    let nodes = topology.nodes();
    if nodes.len() != state.node_count() || nodes.iter().zip(state.facts.iter()).any(|(n, f)| n.id != f.id) {
        return Err(RejectReason::WrongState);
    }
    if nodes.is_empty() {
        return Err(RejectReason::NoNodes);
    }
    if req.vcpus == 0 {
        return Err(RejectReason::NoVcpus);
    }
    if req.memory_bytes == 0 {
        return Err(RejectReason::NoMemory);
    }
    if state.has_vm(&req.name) {
        return Err(RejectReason::AlreadyPlaced);
    }
    if req.max_nodes == Some(0) {
        return Err(RejectReason::ZeroMaxNodes);
    }
    if req.cpu_mode == CpuMode::Shared && !(req.overcommit > 0.0 && req.overcommit <= MAX_OVERCOMMIT) {
        return Err(RejectReason::BadOvercommit { ratio: req.overcommit, max: MAX_OVERCOMMIT });
    }
    let ratio = req.memory_overcommit;
    if !(1.0..=crate::why::MAX_MEMORY_OVERCOMMIT).contains(&ratio) {
        return Err(RejectReason::BadMemoryOvercommit { ratio, because: None });
    }
    if ratio > 1.0 && req.cpu_mode == CpuMode::Dedicated {
        return Err(RejectReason::BadMemoryOvercommit { ratio, because: Some("is dedicated") });
    }
    if ratio > 1.0 && req.hugepage_bytes.is_some() {
        return Err(RejectReason::BadMemoryOvercommit { ratio, because: Some("has huge pages") });
    }
    Ok(())
}

/// The unit guest memory is split in (a huge page, or a memory block),
/// how many whole units the VM has and the bytes left over.
fn memory_units(state: &HostState, req: &Request) -> Result<(u64, u64, u64), RejectReason> {
    Ok(match req.hugepage_bytes {
        Some(size) => {
            if !size.is_power_of_two() || !(4096..=MAX_HUGEPAGE).contains(&size) {
                return Err(RejectReason::BadHugePageSize { size });
            }
            if !req.memory_bytes.is_multiple_of(size) {
                return Err(RejectReason::NotWholePages { memory: req.memory_bytes, page: size });
            }
            // A pool of no pages (the kernel lists every supported size)
            // is none: the operator has to reserve some first.
            if !(0..state.node_count()).any(|i| state.facts[i].pools.iter().any(|&(s, n)| s == size && n > 0)) {
                return Err(RejectReason::NoHugePagePool { size });
            }
            // Guest cells stay in whole memory blocks (128 MiB; 256 MiB
            // for POWER guests: HostState::block) when the pages allow.
            let big = size.max(state.block);
            let unit = if req.memory_bytes.is_multiple_of(big) { big } else { size };
            (unit, req.memory_bytes / unit, 0)
        }
        None => (state.block, req.memory_bytes / state.block, req.memory_bytes % state.block),
    })
}

/// The nodes of the devices a request names (required and preferred, by
/// node position) and the devices passed through.
struct Devices {
    required: Vec<usize>,
    required_by: Vec<(usize, Option<String>)>,
    preferred: Vec<usize>,
    passed: Vec<String>,
}

/// Reads the request's device wishes against the host: a required one
/// missing, held by another VM, on no known node or over `k_max` nodes
/// refuses it; a preferred one so is a note.
fn devices(
    topology: &Topology,
    state: &HostState,
    req: &Request,
    k_max: usize,
    notes: &mut Vec<Note>,
) -> Result<Devices, RejectReason> {
    let (mut required, mut preferred) = (Vec::new(), Vec::new());
    let mut required_by = Vec::new();
    let mut passed = Vec::new();
    for wish in &req.devices {
        if let Some(addr) = wish.address.as_deref() {
            // A device is passed through only if the host has it and no
            // other VM holds it: libvirt would refuse to start the VM.
            let device = addr.to_string();
            if !topology.devices().iter().any(|d| d.address.eq_ignore_ascii_case(addr)) {
                if wish.required {
                    return Err(RejectReason::DeviceMissing { device });
                }
                notes.push(Note::DeviceMissing { device });
                continue;
            }
            if let Some(holder) = state.device_holder(addr) {
                let holder = holder.to_string();
                if wish.required {
                    return Err(RejectReason::DeviceTaken { device, holder });
                }
                notes.push(Note::DeviceTaken { device: device.into(), holder: holder.into() });
                continue;
            }
            if !passed.contains(&device) {
                passed.push(device);
            }
        }
        let node = wish.node.or_else(|| {
            let addr = wish.address.as_deref()?;
            topology.devices().iter().find(|d| d.address.eq_ignore_ascii_case(addr))?.node
        });
        let label = wish.address.clone().unwrap_or_else(|| "device".into());
        match node {
            Some(id) => {
                let pos = state
                    .node_pos(id)
                    .ok_or_else(|| RejectReason::DeviceOnMissingNode { device: label.clone(), node: id })?;
                if wish.required {
                    required.push(pos);
                    required_by.push((pos, wish.address.clone()));
                } else {
                    preferred.push(pos)
                }
            }
            None if wish.required => return Err(RejectReason::DeviceNodeUnknown { device: label }),
            None => notes.push(Note::DeviceNodeUnknown { device: label }),
        }
    }
    required.sort_unstable();
    required.dedup();
    preferred.sort_unstable();
    preferred.dedup();
    if required.len() > k_max {
        return Err(RejectReason::DevicesOnTooManyNodes { nodes: required.len(), max_nodes: k_max });
    }
    Ok(Devices { required, required_by, preferred, passed })
}

/// The emulator placement and memory kinds asked must be ones the host
/// can give.
fn check_emulator(topology: &Topology, state: &HostState, req: &Request) -> Result<(), RejectReason> {
    match &req.emulator {
        EmulatorPlacement::Housekeeping(set) => {
            if set.is_empty() {
                return Err(RejectReason::HousekeepingEmpty);
            }
            if let Some(bad) = set.iter().find(|&c| !topology.pu(c).is_some_and(|p| p.online)) {
                return Err(RejectReason::HousekeepingCpuMissing { cpu: bad });
            }
        }
        EmulatorPlacement::Isolate if req.cpu_mode == CpuMode::Shared => {
            return Err(RejectReason::EmulatorIsolateShared)
        }
        EmulatorPlacement::HostReserved if state.reservations().cpus.is_empty() => {
            return Err(RejectReason::NoHostCpus)
        }
        _ => {}
    }
    if let Some(kinds) = &req.memory_kinds {
        if !state.facts.iter().any(|f| kinds.contains(&f.kind)) {
            return Err(RejectReason::NoMemoryKind { kinds: kinds.clone() });
        }
    }
    Ok(())
}

/// The capacity passes for the request's CPU mode and SMT policy, and
/// the split granularity in vCPUs.
fn passes_for(
    state: &HostState,
    req: &Request,
    notes: &mut Vec<Note>,
) -> Result<([Option<Pass>; 2], u64), RejectReason> {
    let mut gran = 1;
    let passes = match (req.cpu_mode, req.smt) {
        // smt-aware counts cores for shared VMs too (XAPI's C2: a 32-vCPU
        // shared VM took the 32 threads of one 16-core node), then threads
        // with the sibling-threads note (issue 48).
        (CpuMode::Shared, _) if req.policy == Policy::SmtAware && state.smt => {
            [Some(Pass::SharedCores), Some(Pass::Shared)]
        }
        (CpuMode::Shared, _) => [Some(Pass::Shared), None],
        (CpuMode::Dedicated, SmtPolicy::PreferCores) if req.policy == Policy::Compact => {
            [Some(Pass::Dedicated(PinMode::CoresThenThreads)), None]
        }
        (CpuMode::Dedicated, SmtPolicy::PreferCores) => {
            [Some(Pass::Dedicated(PinMode::Cores)), Some(Pass::Dedicated(PinMode::CoresThenThreads))]
        }
        (CpuMode::Dedicated, SmtPolicy::Pairs | SmtPolicy::Require) if state.smt => {
            gran = 2;
            [Some(Pass::Dedicated(PinMode::Pairs)), None]
        }
        (CpuMode::Dedicated, SmtPolicy::Pairs) => {
            notes.push(Note::NoSmtForPairs);
            [Some(Pass::Dedicated(PinMode::Cores)), None]
        }
        (CpuMode::Dedicated, SmtPolicy::Require) => return Err(RejectReason::NoSmt),
        (CpuMode::Dedicated, SmtPolicy::Isolate) => [Some(Pass::Dedicated(PinMode::Isolate)), None],
        (CpuMode::Dedicated, SmtPolicy::Any) => [Some(Pass::Dedicated(PinMode::Packed)), None],
    };
    if req.cpu_mode == CpuMode::Shared && req.smt != SmtPolicy::PreferCores {
        notes.push(Note::SmtIgnoredForShared);
    }
    Ok((passes, gran))
}

impl Checked<'_> {
    /// A required device's node that cannot run one of the VM's vCPUs in
    /// any pass, or hold one unit of its memory: refused before any
    /// search, since every set holding the node would leave it a memory
    /// cell or an empty member, i.e. the device away from the VM (Nova's
    /// `required` PCI NUMA policy: the device's node must be one of the
    /// instance's NUMA nodes, which hold both CPUs and memory).
    fn required_without_room(&self, state: &HostState) -> Option<RejectReason> {
        let last = self.passes.iter().flatten().last().copied()?;
        for (pos, device) in &self.required_by {
            let slots =
                self.passes.iter().flatten().map(|&pass| pass_slots(state, self, pass, *pos)).max().unwrap_or(0);
            let cap = capacities(state, self, last).get(*pos).copied().unwrap_or_default();
            let lacks = if slots == 0 { Lacks::Vcpus } else { Lacks::Memory };
            if slots == 0 || cap.units == 0 {
                return Some(self.device_away(state, *pos, device.clone(), last, cap, lacks));
            }
        }
        None
    }

    /// The refusal for a required device whose node `pos` holds none of
    /// the VM's vCPUs or memory, with what the node has free.
    fn device_away(
        &self,
        state: &HostState,
        pos: usize,
        device: Option<String>,
        pass: Pass,
        cap: NodeCap,
        lacks: Lacks,
    ) -> RejectReason {
        let noun = noun(pass);
        let slots = self.passes.iter().flatten().map(|&p| pass_slots(state, self, p, pos)).max().unwrap_or(cap.slots);
        RejectReason::DeviceNodeFull {
            device,
            resource: noun.resource,
            lacks,
            at: NodeFree { node: state.facts[pos].id, free: slots / noun.per.max(1), memory: cap.mem_bytes },
        }
    }
}

/// The guest cells a request gives, checked: its `cells`, or
/// `guest_nodes` equal ones (refused when the vCPUs or the memory, in
/// whole multiples of the cell alignment, do not divide evenly).
fn wanted_cells(req: &Request, cell_align: u64) -> Result<Vec<CellWish>, RejectReason> {
    let vcpus = u64::from(req.vcpus);
    if !req.cells.is_empty() {
        let align = req.hugepage_bytes.unwrap_or(0).max(cell_align);
        for (i, cell) in req.cells.iter().enumerate() {
            if cell.vcpus == 0 || cell.memory_bytes == 0 {
                return Err(RejectReason::CellEmpty { cell: i });
            }
            if !cell.memory_bytes.is_multiple_of(align) {
                return Err(RejectReason::CellUnaligned { cell: i, memory: cell.memory_bytes, align });
            }
        }
        // Counts follow the lists from here (a list is its own count).
        let cells = check_lists(&req.cells, vcpus)?;
        let sum: u64 = cells.iter().map(|c| u64::from(c.vcpus)).sum();
        if sum != vcpus {
            return Err(RejectReason::CellsVcpus { cells: sum, vcpus });
        }
        let memory = req.cells.iter().fold(0u64, |a, c| a.saturating_add(c.memory_bytes));
        if memory != req.memory_bytes {
            return Err(RejectReason::CellsMemory { cells: memory, memory: req.memory_bytes });
        }
        return Ok(cells);
    }
    let Some(n) = req.guest_nodes else { return Ok(Vec::new()) };
    let n64 = u64::from(n);
    if n == 0 || n64 > vcpus {
        return Err(RejectReason::GuestNodesTooMany { guest_nodes: n, vcpus });
    }
    // Equal cells or none (Nova's rule: a flavor whose vCPUs or memory do
    // not divide by `hw:numa_nodes` is refused, never split 3+3+2): a
    // guest told of equal nodes runs equal thread pools on them.
    let align = req.hugepage_bytes.unwrap_or(0).max(cell_align);
    let per_cell = req.memory_bytes / n64;
    if !vcpus.is_multiple_of(n64) || !req.memory_bytes.is_multiple_of(n64) || !per_cell.is_multiple_of(align) {
        return Err(RejectReason::GuestNodesUneven { guest_nodes: n, vcpus, memory: req.memory_bytes, align });
    }
    Ok((0..n64).map(|_| CellWish::new((vcpus / n64) as u32, per_cell)).collect())
}

/// Listed vCPUs (Nova's `hw:numa_cpus.N`): any disjoint sets covering
/// every vCPU exactly once (`0,2,4,6` and `1,3,5,7`). A cell given as a
/// count beside listed ones takes the run its place gives (cell 0 from
/// vCPU 0, each next after the last), as before lists could scatter.
/// Each refusal names the cell. Returns the cells with every list
/// written out when some are listed.
fn check_lists(cells: &[CellWish], vcpus: u64) -> Result<Vec<CellWish>, RejectReason> {
    if cells.iter().all(|c| c.listed.is_none()) {
        return Ok(cells.to_vec());
    }
    let mut start = 0u64;
    let mut out = Vec::with_capacity(cells.len());
    for (cell, wish) in cells.iter().enumerate() {
        let list = match &wish.listed {
            Some(list) if list.is_empty() => return Err(RejectReason::CellEmpty { cell }),
            Some(list) => list.clone(),
            None => {
                let end = start + u64::from(wish.vcpus);
                if end > vcpus {
                    let vcpu = (end - 1).min(u64::from(u32::MAX)) as u32;
                    return Err(RejectReason::CellVcpuOutOfRange { cell, vcpu, vcpus });
                }
                CpuSet::range(start as u32, (end - 1) as u32)
            }
        };
        start += u64::from(wish.vcpus);
        out.push(CellWish::listed(list, wish.memory_bytes));
    }
    // The cell of each vCPU seen so far (vCPUs are checked against the
    // VM's count before the table is indexed).
    let mut owner: Vec<Option<usize>> = vec![None; vcpus as usize];
    for (cell, wish) in out.iter().enumerate() {
        for vcpu in wish.listed.iter().flat_map(|set| set.iter()) {
            let Some(slot) = owner.get_mut(vcpu as usize) else {
                return Err(RejectReason::CellVcpuOutOfRange { cell, vcpu, vcpus });
            };
            if let Some(other) = *slot {
                return Err(RejectReason::CellVcpusOverlap { cell, other, vcpu });
            }
            *slot = Some(cell);
        }
    }
    match owner.iter().position(Option::is_none) {
        Some(vcpu) => Err(RejectReason::CellVcpusGap { vcpu: vcpu as u32 }),
        None => Ok(out),
    }
}

fn noun(pass: Pass) -> SlotNoun {
    let (resource, per) = match pass {
        Pass::Dedicated(PinMode::Cores | PinMode::Isolate) => (Resource::FreeCores, 1),
        Pass::Dedicated(PinMode::Pairs) => (Resource::SiblingPairs, 2),
        Pass::Dedicated(PinMode::CoresThenThreads | PinMode::Packed) => (Resource::FreeThreads, 1),
        Pass::Shared | Pass::SharedCores => (Resource::SharedSlots, 1),
    };
    SlotNoun { plural: resource.plural(), resource, per }
}

fn capacities(state: &HostState, c: &Checked<'_>, pass: Pass) -> Vec<NodeCap> {
    (0..state.node_count())
        .map(|i| {
            if c.excluded.get(i).copied().unwrap_or(false) {
                return NodeCap::default();
            }
            let slots = pass_slots(state, c, pass, i);
            // Every node the VM may use keeps room for QEMU's own memory,
            // which is counted on the first of them.
            let overhead = state.reservations().overhead.bytes(c.req.memory_bytes);
            // A node of a kind the VM may not use (HBM, CXL, GPU memory
            // unless asked or allowed by the host) holds none of its
            // memory; its CPUs, if any, still run vCPUs.
            let kind_ok =
                state.facts.get(i).is_some_and(|f| c.req.allows_memory(f.kind, &state.reservations().memory_kinds));
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
        })
        .collect()
}

/// The vCPU slots node `i` offers a pass ([`NodeCap::slots`]), from the
/// state's counters alone.
fn pass_slots(state: &HostState, c: &Checked<'_>, pass: Pass, i: usize) -> u64 {
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
fn probe(state: &HostState, c: &Checked<'_>, pass: Pass, i: usize, slots: u64) -> pin::Probe {
    let Pass::Dedicated(mode) = pass else { return pin::Probe::default() };
    let count = c.vcpus + c.slot_extra(pass);
    if slots < count {
        return pin::Probe::default();
    }
    pin::probe(state, i, count as usize, mode)
}

/// Shared vCPUs a node can still take: the CPUs shared vCPUs may float
/// over, times the overcommit ratio, less those already counted there.
fn shared_slots(state: &HostState, node: usize, overcommit: f64) -> u64 {
    let u = &state.uses[node];
    let total = (f64::from(u.open_pus) * overcommit).floor();
    let total = if total.is_finite() && total > 0.0 { total as u64 } else { 0 };
    total.saturating_sub(u.shared_load)
}

/// [`shared_slots`] counting the node's open CPUs as cores: its open
/// threads times its cores over its threads.
fn shared_core_slots(state: &HostState, node: usize, overcommit: f64) -> u64 {
    let u = &state.uses[node];
    let Some(f) = state.facts.get(node) else { return 0 };
    let pus: usize = f.cores.iter().map(Vec::len).sum();
    let cores = (u64::from(u.open_pus) * f.cores.len() as u64).checked_div(pus as u64).unwrap_or(0);
    let total = (cores as f64 * overcommit).floor();
    let total = if total.is_finite() && total > 0.0 { total as u64 } else { 0 };
    total.saturating_sub(u.shared_load)
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

/// Candidate node sets ranked for a request with its own guest cells,
/// before the first whose nodes the cells can be assigned to.
const CELL_SETS: usize = 16;

/// A request that gives its guest cells: each cell goes whole to one host
/// node (a different node for each, unless the request allows sharing),
/// in the passes any request of its kind makes (whole cores before
/// sibling threads). The node sets are the policy's best sets of that
/// many nodes, and the first one the cells can be matched to wins; if
/// none of those can, any matching over all nodes does, so a layout that
/// fits somewhere is never refused.
fn plan_cells(state: &HostState, c: &Checked<'_>) -> Result<Decision, RejectReason> {
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
fn cell_fits(cap: &NodeCap, need: (u64, u64)) -> bool {
    cap.slots >= need.0 && cap.mem_bytes >= need.1
}

/// A host node for each guest cell, all different, from `nodes` (tried in
/// order): a bipartite matching (augmenting paths), so 2+2 cells are
/// refused where only 3+1 fits and accepted wherever any assignment
/// fits, in polynomial time whatever the number of cells.
fn match_cells(need: &[(u64, u64)], nodes: &[usize], caps: &[NodeCap]) -> Option<Vec<usize>> {
    fn augment(
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
fn pack_cells(need: &[(u64, u64)], nodes: &[usize], caps: &[NodeCap]) -> Option<Vec<usize>> {
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

/// Sets of more nodes than the fewest that hold the VM on threads, tried
/// by the cost comparison (each is one search and one build).
const WIDER_TRIES: usize = 3;

/// `balanced` with `prefer-cores`: the fewest nodes with whole cores, and
/// the fewest nodes (and a few sizes between) on threads, compared by
/// their expected cost ([`crate::cost`]). A VM that fits whole cores of
/// one node costs nothing and is placed at once.
fn plan_costed(state: &HostState, c: &Checked<'_>) -> Result<Decision, RejectReason> {
    // Whole cores, then threads: one or two options for most VMs.
    let mut options: Vec<Built> = Vec::with_capacity(2);
    let mut failure: Option<(Shortfall, Pass)> = None;
    let mut last_reason = RejectReason::NotBuildable;
    let mut note = |ran: Ran, pass: Pass, options: &mut Vec<Built>| -> Result<(), RejectReason> {
        match ran {
            Ran::Built(b) => options.push(*b),
            Ran::Short(kind) => {
                if options.is_empty() {
                    failure = Some((kind, pass));
                }
            }
            Ran::Unbuilt(r) => last_reason = r,
            // CPU hot-add on a VM wider than one node's cores is refused
            // (docs/background.md § CPU hot-add), even if sibling threads would fit one node.
            Ran::Final(r) => return Err(r),
        }
        Ok(())
    };
    let cores = Pass::Dedicated(PinMode::Cores);
    let threads = Pass::Dedicated(PinMode::CoresThenThreads);
    note(run_pass(state, c, cores, None), cores, &mut options)?;
    if options.first().is_some_and(|b| b.cost.total() == 0) {
        let b = options.swap_remove(0);
        return Ok(b.decision(c));
    }
    let whole_k = options.first().map_or(usize::MAX, |b| b.k);
    note(run_pass(state, c, threads, None), threads, &mut options)?;
    // Wider sets can only lower the sibling cost with free whole cores to
    // spread onto; on a host without any (a full host), the fewest nodes
    // on threads is the answer and the extra searches are skipped.
    let whole_cores_left = state.uses.iter().any(|u| u.free_cores > 0);
    let fewest = options.iter().filter(|b| b.pass_no == 1 && b.cost.shared_cores() > 0).map(|b| b.k).next();
    if let Some(fewest) = fewest.filter(|_| whole_cores_left) {
        let upto = whole_k.min(c.k_max + 1).min(fewest + 1 + WIDER_TRIES);
        for k in fewest + 1..upto {
            note(run_pass(state, c, threads, Some(k)), threads, &mut options)?;
        }
    }
    if options.is_empty() {
        let reason = failure.map_or(last_reason, |(kind, pass)| shortfall(state, c, kind, pass));
        return Err(reason);
    }
    // Even cells come before cost: a wider try of the threads pass may
    // split unevenly where another option spans nodes equally
    // (docs/plan.md § Even cells); one-node options stay.
    if options.iter().any(|b| b.k > 1 && even_cells(&b.placement)) {
        options.retain(|b| b.k <= 1 || even_cells(&b.placement));
    }
    // Cheapest; on a tie the one nearer the VM's devices (a device VM
    // keeps to its device's node: pairs there against whole cores a
    // socket away at SLIT 20 are 0.400 each), then fewer vCPUs on shared
    // cores (the VM's own pairs included), fewer nodes, and the order
    // tried (whole cores first).
    // A device VM never takes another VM's idle siblings to stay near its
    // device while a placement without them exists: the device term
    // weighs the VM's own pairs against distance, not a neighbour's loss.
    let any_clean = options.iter().any(|b| b.foreign == 0);
    let key = |i: usize| {
        let o = &options[i];
        (any_clean && o.foreign > 0, o.cost.total(), o.cost.device, o.cost.shared_cores(), o.k, i)
    };
    let best = (0..options.len()).min_by_key(|&i| key(i)).unwrap_or(0);
    let runner_up = (0..options.len())
        .filter(|&i| {
            i != best
                && (options[i].placement.nodes != options[best].placement.nodes
                    || options[i].cost != options[best].cost)
                // A cheaper one set aside for another VM's siblings is not
                // "costlier"; it goes unlisted.
                && options[i].cost.total() >= options[best].cost.total()
        })
        .min_by_key(|&i| (options[i].cost.total(), options[i].cost.shared_cores(), options[i].k, i));
    let other = runner_up.map(|i| (options[i].placement.nodes.clone(), options[i].cost));
    let whole_cost = options.iter().find(|b| b.pass_no == 0).map(|b| b.cost);
    let mut b = options.swap_remove(best);
    if b.pass_no == 1 {
        let note = match whole_cost {
            Some(spread) => Note::SiblingsCheaper { chosen: Box::new(b.cost), spread: Box::new(spread) },
            None => Note::SiblingThreads { vcpus: u64::from(c.req.vcpus), max_nodes: c.k_max },
        };
        b.notes.insert(0, note);
    }
    let chosen_cost = b.cost;
    let mut d = b.decision(c);
    if let Some((nodes, cost)) = other {
        d.alternatives.insert(0, Alternative { nodes, verdict: Verdict::costlier(cost, chosen_cost) });
        d.alternatives.truncate(MAX_ALTERNATIVES);
    }
    Ok(d)
}

/// A mixed VM (Nova's `hw:cpu_policy=mixed`): some vCPUs float in the
/// host's shared pool, the others are pinned. The pinned vCPUs are planned
/// as a dedicated VM of that many vCPUs (with the request's cells, if it
/// gives them, counting only their pinned vCPUs); its guest cells then
/// take the floating vCPUs too ([`mix`]), each floating over its cell's
/// host node's share of the pool, so every guest cell still mirrors one
/// host node. The pool's CPUs are never dedicated, so the floating sets
/// stay as planned.
fn plan_mixed(topology: &Topology, state: &HostState, request: &Request) -> Result<Decision, Rejection> {
    let reject = |reason: RejectReason| Rejection { vm: request.name.clone(), reason };
    let floating = &request.shared_vcpus;
    if request.cpu_mode == CpuMode::Shared {
        return Err(reject(RejectReason::MixedNotDedicated));
    }
    if request.max_vcpus.is_some() {
        return Err(reject(RejectReason::MixedHotAdd));
    }
    if let Some(vcpu) = floating.iter().find(|&v| v >= request.vcpus) {
        return Err(reject(RejectReason::MixedVcpuMissing { vcpu, vcpus: u64::from(request.vcpus) }));
    }
    let pinned = request.vcpus - floating.len() as u32;
    if pinned == 0 {
        return Err(reject(RejectReason::MixedAllShared));
    }
    if state.reservations().shared_cpus.is_empty() {
        return Err(reject(RejectReason::MixedNeedsPool));
    }
    let mut whole = request.clone();
    whole.shared_vcpus = CpuSet::new();
    // The whole VM passes every check a dedicated one does.
    let cells = check(topology, state, &whole).map_err(reject)?.cells;
    let mut sub = whole;
    sub.vcpus = pinned;
    // The guest cell of each vCPU when the request gives cells (listed,
    // or runs in guest order); empty otherwise.
    let mut cell_of: Vec<usize> = Vec::new();
    if !cells.is_empty() {
        cell_of = vec![0; request.vcpus as usize];
        let mut start = 0;
        for (i, cell) in cells.iter().enumerate() {
            match &cell.listed {
                Some(list) => list.iter().for_each(|v| cell_of[v as usize] = i),
                None => cell_of[start as usize..(start + cell.vcpus) as usize].fill(i),
            }
            start += cell.vcpus;
        }
        sub.guest_nodes = None;
        sub.cells = Vec::with_capacity(cells.len());
        for (i, cell) in cells.iter().enumerate() {
            let pins = (0..request.vcpus).filter(|&v| cell_of[v as usize] == i && !floating.contains(v)).count() as u32;
            if pins == 0 {
                return Err(reject(RejectReason::MixedCellUnpinned { cell: i }));
            }
            sub.cells.push(CellWish::new(pins, cell.memory_bytes));
        }
    }
    // Nodes whose shared pool has no room are left out; should the
    // floating vCPUs still not fit (several on one node), the pinned part
    // keeps to nodes whose pool holds them all.
    let floats = floating.len() as u64;
    let slots: Vec<u64> = (0..state.node_count()).map(|i| shared_slots(state, i, request.overcommit)).collect();
    for least in [1, floats] {
        let excluded = slots.iter().map(|&n| n < least).collect();
        let Ok(mut decision) = plan_except(topology, state, &sub, excluded) else {
            // Refused with the nodes short of pool room left out: if the
            // pinned part fits elsewhere (the first time, its own reason
            // otherwise), say where the pool has room.
            if least == 1 {
                let mut all = plan_all(topology, state, &sub)?;
                // With cells, only the cells holding floating vCPUs need
                // the pool: a cell of pinned vCPUs alone may go to a node
                // without one (issue 48: two cells were refused when the
                // pool was on one node).
                if !cell_of.is_empty() && mix(state, request, &cell_of, &mut all).is_ok() {
                    return Ok(all);
                }
            }
            let pool = (0..state.node_count()).map(|i| (state.facts[i].id, slots[i])).filter(|&(_, n)| n > 0).collect();
            return Err(reject(RejectReason::MixedPoolNodes { floating: floats, pool }));
        };
        match mix(state, request, &cell_of, &mut decision) {
            Ok(()) => return Ok(decision),
            Err(RejectReason::MixedPoolShort { .. }) if least < floats => continue,
            Err(r) => return Err(reject(r)),
        }
    }
    Err(reject(RejectReason::NotBuildable))
}

/// Adds a mixed VM's floating vCPUs to the dedicated plan of its pinned
/// ones. `given` is the guest cell of every vCPU when the request gives
/// its cells; else each cell keeps its pinned count, and a floating vCPU
/// joins the cell of the pinned vCPU before it (cell 0 before any).
fn mix(state: &HostState, req: &Request, given: &[usize], d: &mut Decision) -> Result<(), RejectReason> {
    let floating = &req.shared_vcpus;
    let p = Arc::make_mut(&mut d.placement);
    let pinned_per_cell: Vec<usize> = p.guest.cells.iter().map(|c| c.vcpus.len()).collect();
    // The guest cell of every vCPU.
    let mut cell_of: Vec<usize> = Vec::with_capacity(req.vcpus as usize);
    if given.is_empty() {
        let with_cpus: Vec<usize> = (0..pinned_per_cell.len()).filter(|&i| pinned_per_cell[i] > 0).collect();
        let (mut at, mut used) = (0usize, 0usize);
        for v in 0..req.vcpus {
            if !floating.contains(v) {
                while at + 1 < with_cpus.len() && used == pinned_per_cell[with_cpus[at]] {
                    at += 1;
                    used = 0;
                }
                used += 1;
            }
            cell_of.push(with_cpus.get(at).copied().unwrap_or(0));
        }
    } else {
        cell_of.extend_from_slice(given);
    }
    // Floating vCPUs per host node position, with room checked.
    let cell_node: Vec<usize> = p.guest.cells.iter().map(|c| state.node_pos(c.host_node).unwrap_or(0)).collect();
    let mut per_node: Vec<(usize, Vec<u32>)> = Vec::new();
    for v in floating.iter() {
        let node = cell_node[cell_of[v as usize]];
        match per_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, list)) => list.push(v),
            None => per_node.push((node, vec![v])),
        }
    }
    let mut counted: Vec<(u32, u32)> = Vec::with_capacity(floating.len());
    let mut sets: Vec<crate::placement::Floating> = Vec::new();
    for (node, list) in &per_node {
        let id = state.facts[*node].id;
        let free = shared_slots(state, *node, req.overcommit);
        let needed = list.len() as u64;
        let pus = pin::take_shared(state, *node, list.len()).filter(|_| needed <= free);
        let pus = pus.ok_or(RejectReason::MixedPoolShort { node: id, needed, free })?;
        counted.extend(list.iter().copied().zip(pus));
        sets.push(crate::placement::Floating {
            node: id,
            vcpus: list.iter().copied().collect(),
            cpus: pin::float_pus(state, *node).into_iter().collect(),
        });
    }
    sets.sort_by_key(|f| f.node);
    // Pins in vCPU order: each cell's pinned vCPUs take the dedicated
    // plan's PUs of that cell, in order; the floating ones the counted
    // pool PU.
    let per_cell: Vec<Vec<u32>> = p
        .guest
        .cells
        .iter()
        .map(|c| c.vcpus.iter().filter_map(|v| p.vcpus.get(v as usize)).map(|x| x.pu).collect())
        .collect();
    let mut dedicated: Vec<_> = per_cell.iter().map(|pus| pus.iter()).collect();
    let mut pins = Vec::with_capacity(req.vcpus as usize);
    let mut cells: Vec<CellPlan> = p
        .guest
        .cells
        .iter()
        .zip(&cell_node)
        .map(|(c, &node)| {
            // A cell backed by other nodes (a hidden tier) keeps them.
            let backing: Vec<(usize, u64)> = c
                .memory_nodes
                .iter()
                .filter(|m| m.0 != c.host_node)
                .filter_map(|m| Some((state.node_pos(m.0)?, m.1)))
                .collect();
            let memory = c.memory_bytes - backing.iter().map(|b| b.1).sum::<u64>();
            CellPlan { node, pus: Vec::new(), memory, backing }
        })
        .collect();
    for v in 0..req.vcpus {
        let pu = match counted.iter().find(|(f, _)| *f == v) {
            Some(&(_, pu)) => pu,
            None => {
                let pu = dedicated.get_mut(cell_of[v as usize]).and_then(Iterator::next);
                *pu.ok_or(RejectReason::NotBuildable)?
            }
        };
        let cell = cell_of[v as usize];
        cells[cell].pus.push(pu);
        pins.push(VcpuPin { vcpu: v, pu, node: state.facts[cell_node[cell]].id });
    }
    // Floating vCPUs are no sibling of anything: the guest sees threads=1.
    let lists: Vec<CpuSet> = (0..cells.len())
        .filter(|&i| !cells[i].pus.is_empty())
        .map(|i| (0..req.vcpus).filter(|&v| cell_of[v as usize] == i).collect())
        .collect();
    p.guest = guest::derive(state, &cells, false, &lists);
    p.vcpus = pins;
    let pool: CpuSet = sets.iter().fold(CpuSet::new(), |all, f| all.union(&f.cpus));
    // Emulator threads left on the VM's own dedicated CPUs move to the
    // pool (not those on the host's reserved CPUs, or where asked).
    let moved = req.emulator == EmulatorPlacement::VmNodes && p.emulator.is_subset(&p.cpuset);
    if moved {
        d.notes.retain(|n| !matches!(n, Note::EmulatorOnVcpus | Note::EmulatorOnIdleSiblings));
    }
    for note in &mut d.notes {
        if let Note::Spans { cells } = note {
            *cells = p.guest.cells.iter().map(|c| c.vcpus.len()).filter(|&n| n > 0).collect();
        }
    }
    d.notes.push(Note::Mixed {
        floating: Box::new(floating.clone()),
        cpus: Box::new(pool.clone()),
        pinned: req.vcpus as usize - floating.len(),
    });
    if moved {
        // The pool is where housekeeping work belongs on such a host.
        p.emulator = pool;
        d.notes.push(Note::EmulatorInPool);
    }
    p.floating = sets;
    Ok(())
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

impl Built {
    fn decision(self, c: &Checked<'_>) -> Decision {
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

/// The node-set search for a request over `caps`, needing `slots` vCPU
/// slots and all its memory units.
fn search<'a>(state: &'a HostState, c: &'a Checked<'_>, caps: &'a [NodeCap], slots: u64) -> Search<'a> {
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
fn run_pass(state: &HostState, c: &Checked<'_>, pass: Pass, exact_k: Option<usize>) -> Ran {
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
fn even_cells(p: &Placement) -> bool {
    let mut sizes = p.guest.cells.iter().map(|x| x.vcpus.len()).filter(|&n| n > 0);
    let first = sizes.next();
    sizes.all(|n| Some(n) == first)
}

/// Cells this small are not worth an even split: the ESXi figures price
/// them ([`crate::cost`]), and 2+3 vCPUs beat five cells of one.
const EVEN_MIN_SHARE: u64 = crate::model::SMALL_CELL_VCPUS as u64 + 1;

/// A VM whose best set gave uneven cells (`uneven`): the fewest nodes,
/// as many as ran its vCPUs there or more up to the VM's limit (exactly `exact_k`
/// when given), that each take an equal share of its vCPUs, with the
/// uneven set as the first alternative; failing that, for a VM whose
/// guest would get a die per vCPU, the same nodes with its vCPUs on fewer
/// of them. QEMU gives every guest die as many cores, so only equal cells
/// are one die each (docs/plan.md § Even cells). `None` when neither
/// holds the VM.
fn run_even(
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

/// The expected cost of a dedicated placement on this state (the state
/// before it is placed): its vCPUs on cores another VM's busy thread uses,
/// on its own sibling pairs, how far apart its nodes are, and its guest cells'
/// sizes. The fleet service ranks hosts of equal free capacity by it.
pub fn cost_of(state: &HostState, p: &Placement) -> Cost {
    if p.cpu_mode != CpuMode::Dedicated {
        return Cost::default();
    }
    // A small VM's own PUs are looked up in its pins; a set is built only
    // for a large one.
    let small = p.vcpus.len() <= 16;
    let set: CpuSet = if small { CpuSet::new() } else { p.vcpus.iter().map(|v| v.pu).collect() };
    let mine = |pu: u32| if small { p.vcpus.iter().any(|v| v.pu == pu) } else { set.contains(pu) };
    // A sibling running another VM's thread is contention whatever this
    // VM does; one running this VM's own vCPU is a pair its guest knows
    // of when told `threads` > 1, and costs less (cost.rs).
    let told = p.guest.threads > 1;
    let (mut doubled, mut paired) = (0u64, 0u64);
    for pin in &p.vcpus {
        let Some(core) = state.core_of(pin.pu) else { continue };
        let others = || core.iter().filter(|&&o| o != pin.pu);
        if others().any(|&o| !mine(o) && state.pu_busy(o)) || (!told && others().any(|&o| mine(o))) {
            doubled += 1;
        } else if others().any(|&o| mine(o)) {
            paired += 1;
        }
    }
    // Each cell with vCPUs by node position, and the memory by node
    // position: the model's shape of the VM.
    let mut cells: Vec<(usize, usize)> = Vec::with_capacity(p.guest.cells.len());
    for x in p.guest.cells.iter().filter(|x| !x.vcpus.is_empty()) {
        if let Some(i) = state.node_pos(x.host_node) {
            cells.push((i, x.vcpus.len()));
        }
    }
    let mut memory: Vec<(usize, u64)> = Vec::with_capacity(p.memory.len());
    for &(id, bytes) in &p.memory {
        if let Some(i) = state.node_pos(id) {
            memory.push((i, bytes));
        }
    }
    let distance = |i: usize, j: usize| state.distances.get(i).and_then(|r| r.get(j)).copied().unwrap_or(20);
    let shape = crate::cost::Shape { cells: &cells, memory: &memory, distance };
    Cost::of(p.vcpus.len() as u64, doubled, paired, &shape)
}

/// The vCPUs of a dedicated placement on cores whose other threads
/// another VM (or the host) uses, on this state (before it is placed).
fn foreign_vcpus(state: &HostState, p: &Placement) -> u64 {
    let mine = |pu: u32| p.vcpus.iter().any(|v| v.pu == pu);
    let mut n = 0;
    for pin in &p.vcpus {
        let Some(core) = state.core_of(pin.pu) else { continue };
        if core.iter().any(|&o| o != pin.pu && !mine(o) && state.pu_busy(o)) {
            n += 1;
        }
    }
    n
}

/// The device term of a placement's cost ([`Cost::device_away`]): how far
/// its vCPUs are from the nodes of the devices it asked for (required or
/// preferred), averaged over those nodes; 0 without devices.
fn device_cost(state: &HostState, c: &Checked<'_>, p: &Placement) -> u64 {
    let mut nodes: Vec<usize> = c.required.iter().chain(&c.preferred).copied().collect();
    nodes.sort_unstable();
    nodes.dedup();
    if nodes.is_empty() || p.cpu_mode != CpuMode::Dedicated {
        return 0;
    }
    let mut excess = 0u64;
    for &dn in &nodes {
        let row = state.distances.get(dn);
        for pin in &p.vcpus {
            let Some((at, _)) = state.core_index(pin.pu) else { continue };
            let d = row.and_then(|r| r.get(at)).copied().unwrap_or(20);
            excess += u64::from(d.saturating_sub(10));
        }
    }
    Cost::device_away(p.vcpus.len() as u64, excess / nodes.len() as u64)
}

/// Which requirement no node set met.
#[derive(Clone, Copy)]
enum Shortfall {
    Cpu,
    Memory,
    Joint,
}

/// Spread's candidates: every usable node, or the best sets of the
/// allowed size.
fn spread_sets(search: &Search<'_>, state: &HostState, caps: &[NodeCap], k_max: usize) -> Vec<Candidate> {
    let usable: Vec<usize> =
        (0..state.node_count()).filter(|&i| caps.get(i).is_some_and(|c| c.slots > 0 || c.units > 0)).collect();
    if !state.all_reach(&usable) {
        // Nodes that cannot reach each other are never combined: spread
        // over the best set that holds the VM instead.
        return search.run(None, MAX_ALTERNATIVES + 1).ranked;
    }
    if usable.len() <= k_max {
        let cand = search.candidate(usable);
        let fits = cand.slots >= search.need.slots
            && cand.nodes.iter().map(|&i| caps[i].units).sum::<u64>() >= search.need.units;
        return if fits { vec![cand] } else { Vec::new() };
    }
    search.run(Some(k_max), MAX_ALTERNATIVES + 1).ranked
}

fn alternatives(
    search: &Search<'_>,
    ranked: &[Candidate],
    chosen: usize,
    caps: &[NodeCap],
    vcpus: u64,
    noun: SlotNoun,
) -> Vec<Alternative> {
    let Some(best) = ranked.get(chosen) else { return Vec::new() };
    let ids = |nodes: &[usize]| -> Vec<NodeId> {
        nodes.iter().filter_map(|&i| search.state.facts.get(i).map(|f| f.id)).collect()
    };
    // Sized once: kept with the decision, and a list grown from empty
    // would hold room for four.
    let mut out: Vec<Alternative> = Vec::with_capacity(MAX_ALTERNATIVES);
    out.extend(ranked.iter().enumerate().filter(|&(i, _)| i != chosen).take(MAX_ALTERNATIVES).map(|(i, alt)| {
        Alternative {
            nodes: ids(&alt.nodes),
            verdict: if i < chosen { Verdict::not_built() } else { reason::verdict(search, best, alt, noun) },
        }
    }));
    // Show the best smaller set too: it is the one an operator expects,
    // and the reason it failed is the point of the decision. It takes the
    // last place when the list is full (since issue 39, whose even cells
    // widen more VMs past the fewest nodes their threads would fill).
    let k = best.nodes.len();
    if k > 1 && search.policy != Policy::Spread {
        let mut by_slots: Vec<usize> = (0..search.state.node_count()).collect();
        by_slots.sort_by(|&a, &b| caps[b].slots.cmp(&caps[a].slots).then(a.cmp(&b)));
        by_slots.truncate(k - 1);
        by_slots.sort_unstable();
        let units = by_slots.iter().map(|&i| caps[i].units).fold(0u64, u64::saturating_add);
        let small = search.candidate(by_slots);
        if let Some(verdict) = reason::too_small(search, &small, units, vcpus, noun) {
            out.truncate(MAX_ALTERNATIVES - 1);
            out.push(Alternative { nodes: ids(&small.nodes), verdict });
        }
    }
    out
}

/// Why a node set could not be built into a plan.
enum BuildError {
    /// Try the next candidate or pass.
    Retry(RejectReason),
    /// Refuse the request (another set or SMT pass would not help).
    Final(RejectReason),
}

/// Splits vCPUs (evenly, within each node's slots) and memory (in
/// proportion, in whole units, within each node's free memory) over a set.
fn split_over(
    c: &Checked<'_>,
    set_caps: &[NodeCap],
    vcpus: u64,
    devices: &[bool],
    far: &dyn Fn(&[u64]) -> Vec<u32>,
) -> Option<(Vec<u64>, Vec<u64>)> {
    // The water-fill gives its leftovers to the last of equal nodes: the
    // nodes of the VM's devices are put last, so when fewer vCPUs than
    // nodes leave some cells without vCPUs, the devices keep theirs.
    let mut order: Vec<usize> = (0..set_caps.len()).filter(|&j| !devices.get(j).copied().unwrap_or(false)).collect();
    order.extend((0..set_caps.len()).filter(|&j| devices.get(j).copied().unwrap_or(false)));
    let slot_caps: Vec<u64> = order.iter().map(|&j| set_caps[j].slots / c.gran).collect();
    let filled = split::water_fill(vcpus.div_ceil(c.gran), &slot_caps)?;
    let mut counts = vec![0u64; set_caps.len()];
    for (k, &j) in order.iter().enumerate() {
        counts[j] = filled[k] * c.gran;
    }
    if vcpus.is_multiple_of(c.gran) {
        counts = split::coarsen(vcpus, c.gran, &counts, &set_caps.iter().map(|x| x.slots).collect::<Vec<_>>());
    }
    if c.gran == 2 && vcpus % 2 == 1 {
        if let Some(last) = counts.iter_mut().rev().find(|x| **x > 0) {
            *last -= 1;
        }
    }
    let weights: Vec<u64> = if c.req.policy == Policy::Spread {
        set_caps.iter().map(|x| u64::from(x.units > 0)).collect()
    } else {
        counts.clone()
    };
    let unit_caps: Vec<u64> = set_caps.iter().map(|x| x.whole).collect();
    let units = split::split_memory(c.blocks, &weights, &unit_caps, &far(&counts))?;
    let mut memory: Vec<u64> = units.iter().map(|u| u * c.unit).collect();
    if c.rem > 0 {
        let room = |j: usize| set_caps[j].mem_bytes.saturating_sub(memory[j]) >= c.rem;
        let spot = (0..set_caps.len())
            .rev()
            .find(|&j| counts[j] > 0 && room(j))
            .or_else(|| (0..set_caps.len()).rev().find(|&j| room(j)))?;
        memory[spot] += c.rem;
    }
    Some((counts, memory))
}

/// Splits, pins and derives the guest for one node set.
fn build(
    state: &HostState,
    c: &Checked<'_>,
    caps: &[NodeCap],
    pass: Pass,
    cand: &Candidate,
) -> Result<(Placement, Vec<Note>), BuildError> {
    let req = c.req;
    let set = &cand.nodes;
    let lost = || BuildError::Retry(RejectReason::NotBuildable);
    // One node takes everything (the search checked that it can): the
    // common case, kept free of the split's allocations.
    let one = ([c.vcpus + c.extra], [req.memory_bytes]);
    let split;
    let (counts, memory): (&[u64], &[u64]) = if set.len() == 1 {
        (&one.0, &one.1)
    } else {
        let mut set_caps: Vec<NodeCap> = set.iter().map(|&i| caps.get(i).copied().unwrap_or_default()).collect();
        // The emulator's own CPU goes with guest cell 0: the vCPUs are
        // split evenly over what the first node has left after it.
        if c.slot_extra(pass) > 0 {
            if let Some(first) = set_caps.first_mut() {
                first.slots = first.slots.saturating_sub(c.extra) / c.gran * c.gran;
            }
        }
        let devices: Vec<bool> = set.iter().map(|i| c.required.contains(i) || c.preferred.contains(i)).collect();
        // Each member's distance from the nearest member running vCPUs,
        // so memory that spills to memory-only nodes fills the nearest
        // (the vCPUs' own HBM before another quadrant's).
        let far = |counts: &[u64]| -> Vec<u32> {
            set.iter()
                .map(|&j| {
                    set.iter()
                        .zip(counts)
                        .filter(|(_, &n)| n > 0)
                        .filter_map(|(&i, _)| state.distances.get(i).and_then(|r| r.get(j)).copied())
                        .min()
                        .unwrap_or(0)
                })
                .collect()
        };
        let (mut counts, memory) = split_over(c, &set_caps, c.vcpus, &devices, &far).ok_or_else(lost)?;
        let first = counts.iter().position(|&n| n > 0).ok_or_else(lost)?;
        counts[first] += c.extra;
        split = (counts, memory);
        (&split.0, &split.1)
    };
    let mut cells: Vec<CellPlan> = Vec::with_capacity(set.len());
    let mut reserved = CpuSet::new();
    let emu_at = counts.iter().position(|&n| n > 0).filter(|_| c.extra > 0);
    for (j, &node) in set.iter().enumerate() {
        if counts[j] == 0 && memory[j] == 0 {
            continue;
        }
        let emu = emu_at == Some(j);
        let pus = take_pus(state, pass, node, counts[j] as usize, emu, &mut reserved).ok_or_else(|| {
            // Pairs fit (the search counted them) but no thread is left
            // beside them for the emulator: another set may have one.
            if emu && matches!(pass, Pass::Dedicated(PinMode::Pairs)) {
                BuildError::Retry(RejectReason::EmulatorCpuShort { node: state.facts[node].id })
            } else {
                lost()
            }
        })?;
        cells.push(CellPlan::new(node, pus, memory[j]));
    }
    assemble(state, c, pass, cells, reserved)
}

/// PUs for `count` vCPUs on one node; a dedicated VM's PUs held but not
/// pinned (isolate's siblings) go to `reserved`. `emu`: the last of the
/// `count` is the emulator's own CPU (`emulator: isolate`), which a
/// `pairs` VM takes as any free thread rather than as half a pair.
fn take_pus(
    state: &HostState,
    pass: Pass,
    node: usize,
    count: usize,
    emu: bool,
    reserved: &mut CpuSet,
) -> Option<Vec<u32>> {
    match pass {
        Pass::Dedicated(PinMode::Pairs) if emu && count > 0 => {
            let taken = pin::take(state, node, count - 1, PinMode::Pairs)?;
            let busy: Vec<u32> = taken.pinned.iter().chain(&taken.reserved).copied().collect();
            let (pu, siblings) = pin::take_emulator(state, node, &busy)?;
            for pu in taken.reserved.into_iter().chain(siblings) {
                reserved.insert(pu);
            }
            let mut pus = taken.pinned;
            pus.push(pu);
            Some(pus)
        }
        Pass::Dedicated(mode) => {
            let taken = pin::take(state, node, count, mode)?;
            for pu in taken.reserved {
                reserved.insert(pu);
            }
            Some(taken.pinned)
        }
        Pass::Shared | Pass::SharedCores => pin::take_shared(state, node, count),
    }
}

/// Turns pinned cells (guest cell order) into a placement: the
/// emulator's CPUs, the guest topology and the notes.
fn assemble(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    mut cells: Vec<CellPlan>,
    mut reserved: CpuSet,
) -> Result<(Placement, Vec<Note>), BuildError> {
    let req = c.req;
    let vcpus = c.vcpus;
    let lost = || BuildError::Retry(RejectReason::NotBuildable);
    // Room for the usual notes (a typical VM has one to three), and for
    // the one plan_costed puts first; the list is kept with the decision.
    let mut notes = Vec::with_capacity(4);
    // `emulator: isolate`: the last CPU taken for guest cell 0 (the first
    // cell with vCPUs) runs the emulator threads alone.
    let mut isolated = None;
    if c.extra > 0 {
        let cell = cells.iter_mut().find(|x| !x.pus.is_empty()).ok_or_else(lost)?;
        let pu = cell.pus.pop().ok_or_else(lost)?;
        reserved.insert(pu);
        isolated = Some((pu, state.facts[cell.node].id));
    }
    // The host nodes of the cells, each once; a one-cell VM (most VMs)
    // needs no list for that.
    let distinct: Vec<usize> = if cells.len() > 1 {
        let mut d: Vec<usize> = cells.iter().map(|x| x.node).collect();
        d.sort_unstable();
        d.dedup();
        d
    } else {
        Vec::new()
    };
    let distinct_len = if cells.len() > 1 { distinct.len() } else { cells.len() };
    if distinct_len > 1 && req.max_vcpus.is_some() && !req.force {
        let nodes = distinct.iter().map(|&i| state.facts[i].id).collect();
        return Err(BuildError::Final(RejectReason::HotAddWide { nodes }));
    }
    if matches!(pass, Pass::Dedicated(PinMode::Pairs)) && vcpus % 2 == 1 {
        notes.push(Note::OddPairs { vcpus });
    }
    // HBM or CXL the VM's memory is on backs its CPU cells unless the
    // request asks to see the tier (docs/plan.md § Memory kinds).
    if req.memory_tiers == MemoryTiers::Hidden {
        guest::hide_tiers(state, &mut cells);
    }
    // The request's own vCPU lists (Nova's `hw:numa_cpus.N`), one per
    // cell in guest order; empty when it gives counts or no cells.
    let lists: Vec<CpuSet> = c.cells.iter().filter_map(|w| w.listed.clone()).collect();
    let guest = guest::derive(state, &cells, matches!(pass, Pass::Dedicated(_)), &lists);

    let (pins, pinned) = pins_of(state, &cells, &lists, req.vcpus);
    let (cpu_mode, cpuset) = match pass {
        Pass::Dedicated(_) => (CpuMode::Dedicated, pinned.union(&reserved)),
        Pass::Shared | Pass::SharedCores => {
            // Its nodes' CPUs that no dedicated VM's core uses, node by
            // node, where a node has such CPUs; else all its open CPUs.
            let open: CpuSet =
                cells.iter().filter(|x| !x.pus.is_empty()).flat_map(|x| pin::float_pus(state, x.node)).collect();
            notes.push(Note::SharedFloat { vcpus, cpus: open.len(), overcommit: req.overcommit });
            (CpuMode::Shared, open)
        }
    };
    if cpu_mode == CpuMode::Dedicated {
        for other in state.shared_placements() {
            let lost = other.cpuset.intersection(&cpuset);
            if !lost.is_empty() {
                let now = other.cpuset.difference(&lost);
                notes.push(Note::ShrinksShared {
                    vm: other.vm.as_str().into(),
                    lost: Box::new(lost),
                    now: Box::new(now),
                });
            }
        }
    }
    let emulator = emulator_cpus(state, req, &cells, isolated, (cpu_mode, &cpuset), (&pinned, &reserved), &mut notes);
    shape_notes(state, c, pass, &cells, &guest, distinct_len, &mut notes);
    devices_near(state, c, pass, &cells, &mut notes)?;
    let (memory, nodes) = memory_of(state, &cells);
    let charged = charged_memory(c, &memory, &mut notes);
    let placement = Placement {
        vm: req.name.clone(),
        nodes,
        cpu_mode,
        vcpus: pins,
        cpuset,
        emulator,
        memory,
        memory_bytes: req.memory_bytes,
        memory_mode: if req.policy == Policy::Spread { MemoryMode::Interleave } else { MemoryMode::Strict },
        hugepage_bytes: req.hugepage_bytes,
        guest,
        online_vcpus: None,
        devices: c.passed.clone(),
        floating: Vec::new(),
        charged,
    };
    Ok((placement, notes))
}

/// The vCPU pins of the cells, in vCPU order (a listed cell's PUs go to
/// its listed vCPUs in ascending order), and the set of pinned PUs.
fn pins_of(state: &HostState, cells: &[CellPlan], lists: &[CpuSet], vcpus: u32) -> (Vec<VcpuPin>, CpuSet) {
    let mut pins = Vec::with_capacity(vcpus as usize);
    let mut pinned = CpuSet::new();
    // Inserting the highest PU first sizes the bitmap once.
    if let Some(top) = cells.iter().flat_map(|x| x.pus.iter().copied()).max() {
        pinned.insert(top);
    }
    for (i, cell) in cells.iter().enumerate() {
        let id = state.facts[cell.node].id;
        // A listed cell's PUs go to its vCPUs in ascending order, so each
        // listed vCPU runs on its cell's host node.
        let mut listed = lists.get(i).map(|l| l.iter());
        for &pu in &cell.pus {
            let vcpu = listed.as_mut().and_then(Iterator::next).unwrap_or(pins.len() as u32);
            pins.push(VcpuPin { vcpu, pu, node: id });
            pinned.insert(pu);
        }
    }
    if !lists.is_empty() {
        pins.sort_unstable_by_key(|p| p.vcpu);
    }
    (pins, pinned)
}

/// Where the emulator threads run, with the note that says so when it is
/// not the obvious place: an isolated CPU, the housekeeping CPUs asked
/// for, the host's reserved CPUs on the VM's nodes, a shared VM's own
/// CPUs, the idle siblings it holds, or its vCPUs' CPUs.
fn emulator_cpus(
    state: &HostState,
    req: &Request,
    cells: &[CellPlan],
    isolated: Option<(u32, NodeId)>,
    (cpu_mode, cpuset): (CpuMode, &CpuSet),
    (pinned, reserved): (&CpuSet, &CpuSet),
    notes: &mut Vec<Note>,
) -> CpuSet {
    // The host's reserved CPUs on the VM's nodes (empty, at no cost, on a
    // host that reserves none).
    let near = host_cpus_of(state, cells);
    match (&req.emulator, isolated) {
        (_, Some((cpu, node))) => {
            notes.push(Note::EmulatorIsolated { cpu, node });
            std::iter::once(cpu).collect()
        }
        (EmulatorPlacement::Housekeeping(set), _) => set.clone(),
        (EmulatorPlacement::HostReserved, _) if near.is_empty() => state.reservations().cpus.clone(),
        (EmulatorPlacement::HostReserved, _) => near,
        // The host's reserved CPUs on the VM's nodes, when it has some:
        // housekeeping is what they are for.
        _ if !near.is_empty() => near,
        _ if cpu_mode == CpuMode::Shared => cpuset.clone(),
        // The idle siblings an isolate (or odd pairs) VM holds: they run
        // nothing else, and there the emulator never preempts a vCPU.
        _ if !reserved.is_empty() => {
            notes.push(Note::EmulatorOnIdleSiblings);
            reserved.clone()
        }
        _ => {
            if req.vcpus > 1 {
                notes.push(Note::EmulatorOnVcpus);
            }
            pinned.clone()
        }
    }
}

/// The notes on the VM's shape: cells over several nodes or sharing one,
/// uneven or indivisible splits, memory-only or memoryless cells, and
/// vCPUs on sibling threads (its own, or next to other VMs').
fn shape_notes(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    cells: &[CellPlan],
    guest: &GuestTopology,
    distinct_len: usize,
    notes: &mut Vec<Note>,
) {
    let (req, vcpus) = (c.req, c.vcpus);
    if distinct_len > 1 {
        // (A hidden tier's node backs a cell rather than being one.)
        if guest.cells.len() > 1 {
            notes.push(Note::Spans { cells: guest.cells.iter().map(|x| x.vcpus.len()).collect() });
        }
        if req.max_vcpus.is_some() {
            notes.push(Note::HotAddForced);
        }
    }
    if distinct_len < cells.len() {
        for w in cells.windows(2).filter(|w| w[0].node == w[1].node) {
            let node = state.facts[w[0].node].id;
            if !notes.contains(&Note::CellsShareNode { node }) {
                notes.push(Note::CellsShareNode { node });
            }
        }
    }
    let cpu_cells = cells.iter().filter(|x| !x.pus.is_empty()).count();
    let mut sizes = cells.iter().map(|x| x.pus.len()).filter(|&n| n > 0);
    let first = sizes.next();
    if c.cells.is_empty() && sizes.any(|n| Some(n) != first) {
        notes.push(if vcpus.is_multiple_of(cpu_cells as u64) {
            Note::UnevenSplit
        } else {
            Note::Indivisible { vcpus, cells: cpu_cells }
        });
    }
    if cells.iter().any(|x| x.pus.is_empty()) {
        notes.push(Note::MemoryOnlyCells);
    }
    if cells.iter().any(|x| !x.pus.is_empty() && x.memory == 0 && x.backing.is_empty()) {
        notes.push(Note::MemorylessCells);
    }
    if matches!(pass, Pass::Dedicated(PinMode::CoresThenThreads)) {
        let (doubled, theirs) = shared_cores(state, cells);
        if doubled.total > 0 {
            notes.push(Note::SharedCores { vcpus: doubled.total });
        }
        if doubled.with_others > 0 {
            let placed = state.placements();
            let vms: Vec<String> =
                state.owners_of(&theirs).into_iter().filter_map(|i| placed.get(i)).map(|p| p.vm.clone()).collect();
            if !vms.is_empty() {
                notes.push(Note::SiblingsOf { vms, vcpus: doubled.with_others });
            }
        }
    }
}

/// A required device's node must run vCPUs and hold memory: a set that
/// left it out of either is not this VM's (another set may be). A
/// preferred device whose node runs none of the VM's vCPUs gets a note.
fn devices_near(
    state: &HostState,
    c: &Checked<'_>,
    pass: Pass,
    cells: &[CellPlan],
    notes: &mut Vec<Note>,
) -> Result<(), BuildError> {
    // A preferred device whose node runs none of the VM's vCPUs (its node
    // could not hold them): the emitted domain marks it, and lint reports
    // it as this choice. A required one is never away (above).
    // (Nodes that run vCPUs, not memory-only cells.)
    let runs_vcpus = |node: usize| cells.iter().any(|x| x.node == node && !x.pus.is_empty());
    let holds_memory = |node: usize| cells.iter().any(|x| x.node == node && x.memory > 0);
    // A required device's node must run vCPUs and hold memory: a set that
    // left it out of either is not this VM's (another set may be).
    if let Some((pos, device)) = c.required_by.iter().find(|(p, _)| !runs_vcpus(*p) || !holds_memory(*p)) {
        let cap = capacities(state, c, pass).get(*pos).copied().unwrap_or_default();
        return Err(BuildError::Retry(c.device_away(state, *pos, device.clone(), pass, cap, Lacks::Split)));
    }
    let mut away: Vec<usize> = c.preferred.iter().copied().filter(|&p| !runs_vcpus(p)).collect();
    away.sort_unstable();
    away.dedup();
    for p in away {
        notes.push(Note::DeviceOutside { node: state.facts[p].id });
    }
    Ok(())
}

/// The VM's memory per host node (a cell's own and its backing), and its
/// host nodes in cell order, each once.
fn memory_of(state: &HostState, cells: &[CellPlan]) -> (Vec<(NodeId, u64)>, Vec<NodeId>) {
    let mut memory: Vec<(NodeId, u64)> = Vec::with_capacity(cells.len());
    for (node, bytes) in cells.iter().flat_map(|x| std::iter::once((x.node, x.memory)).chain(x.backing.iter().copied()))
    {
        if bytes == 0 {
            continue;
        }
        let id = state.facts[node].id;
        match memory.iter_mut().find(|(n, _)| *n == id) {
            Some(entry) => entry.1 += bytes,
            None => memory.push((id, bytes)),
        }
    }
    let mut nodes: Vec<NodeId> = Vec::with_capacity(cells.len());
    for node in cells.iter().flat_map(|x| std::iter::once(x.node).chain(x.backing.iter().map(|b| b.0))) {
        let id = state.facts[node].id;
        if !nodes.contains(&id) {
            nodes.push(id);
        }
    }
    (memory, nodes)
}

/// What an overcommitted shared VM is charged per node: the guest memory
/// over the ratio, rounded up; never above the node's free bytes, since
/// the capacity was their multiple. Empty without memory overcommit.
fn charged_memory(c: &Checked<'_>, memory: &[(NodeId, u64)], notes: &mut Vec<Note>) -> Vec<(NodeId, u64)> {
    let req = c.req;
    let charged: Vec<(NodeId, u64)> = if c.mem_milli > 1000 {
        memory
            .iter()
            .map(|&(n, b)| (n, u64::try_from((u128::from(b) * 1000).div_ceil(u128::from(c.mem_milli))).unwrap_or(b)))
            .collect()
    } else {
        Vec::new()
    };
    if !charged.is_empty() {
        let total = charged.iter().map(|x| x.1).sum();
        notes.push(Note::MemoryOvercommitted {
            charged: total,
            memory: req.memory_bytes,
            ratio: req.memory_overcommit,
        });
    }
    charged
}

/// The host's reserved CPUs on the nodes of a plan's cells.
fn host_cpus_of(state: &HostState, cells: &[CellPlan]) -> CpuSet {
    if state.reservations().cpus.is_empty() {
        return CpuSet::new();
    }
    cells
        .iter()
        .flat_map(|x| state.facts[x.node].cores.iter().flatten().copied())
        .filter(|&pu| state.pu_reserved(pu))
        .collect()
}

/// vCPUs of a new placement that share their core.
struct Doubled {
    /// With another vCPU, of this VM or any other.
    total: usize,
    /// With a PU a dedicated VM holds.
    with_others: usize,
}

/// How many of the placement's vCPUs share their physical core, and the
/// PUs of other dedicated VMs on those cores (one pass over the cores of
/// the placement's nodes).
fn shared_cores(state: &HostState, cells: &[CellPlan]) -> (Doubled, CpuSet) {
    let mut doubled = Doubled { total: 0, with_others: 0 };
    let mut theirs = CpuSet::new();
    for cell in cells {
        let mine: CpuSet = cell.pus.iter().copied().collect();
        // The node's cores that hold some of the cell's vCPUs, each once
        // (known by its first PU), found from the PUs rather than by
        // looking through every core of the node.
        let mut cores: Vec<&[u32]> = Vec::with_capacity(cell.pus.len());
        for &pu in &cell.pus {
            if let Some(core) = state.core_on(cell.node, pu) {
                if !cores.iter().any(|c| c.first() == core.first()) {
                    cores.push(core);
                }
            }
        }
        for core in cores {
            let own = core.iter().filter(|&&pu| mine.contains(pu)).count();
            let busy = core.iter().filter(|&&pu| !mine.contains(pu) && !state.pu_free(pu)).count();
            if own + busy > 1 {
                doubled.total += own;
            }
            let mut taken = false;
            for &pu in core.iter().filter(|&&pu| !mine.contains(pu) && state.pu_taken(pu)) {
                theirs.insert(pu);
                taken = true;
            }
            if taken {
                doubled.with_others += own;
            }
        }
    }
    (doubled, theirs)
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
