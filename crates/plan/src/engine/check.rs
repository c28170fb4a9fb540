//! Validating a request into the units the search uses ([`Checked`]):
//! vCPUs, memory units, devices, guest cells and the capacity passes.

use super::*;

impl Checked<'_> {
    /// The emulator's own CPU as counted in a pass's slots: none in the
    /// `pairs` pass, where it is any free thread of cell 0's node rather
    /// than half of a sibling pair ([`pin::take_emulator`]).
    pub(super) fn slot_extra(&self, pass: Pass) -> u64 {
        if matches!(pass, Pass::Dedicated(PinMode::Pairs)) {
            0
        } else {
            self.extra
        }
    }

    /// Whether the VM asked for a device on a known node (required or
    /// preferred).
    pub(super) fn has_device_nodes(&self) -> bool {
        !self.required.is_empty() || !self.preferred.is_empty()
    }

    /// Whether the placement is chosen by cost: `balanced` dedicated VMs
    /// that prefer cores (the default), whose passes are whole cores, then
    /// threads.
    pub(super) fn costed(&self) -> bool {
        self.req.policy == Policy::Balanced
            && self.req.cpu_mode == CpuMode::Dedicated
            && self.req.smt == SmtPolicy::PreferCores
    }
}

pub(super) fn check<'r>(topology: &Topology, state: &HostState, req: &'r Request) -> Result<Checked<'r>, RejectReason> {
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
pub(super) fn check_basics(topology: &Topology, state: &HostState, req: &Request) -> Result<(), RejectReason> {
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
pub(super) fn memory_units(state: &HostState, req: &Request) -> Result<(u64, u64, u64), RejectReason> {
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

/// Reads the request's device wishes against the host: a required one
/// missing, held by another VM, on no known node or over `k_max` nodes
/// refuses it; a preferred one so is a note.
pub(super) fn devices(
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
pub(super) fn check_emulator(topology: &Topology, state: &HostState, req: &Request) -> Result<(), RejectReason> {
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
pub(super) fn passes_for(
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
    pub(super) fn required_without_room(&self, state: &HostState) -> Option<RejectReason> {
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
    pub(super) fn device_away(
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
pub(super) fn wanted_cells(req: &Request, cell_align: u64) -> Result<Vec<CellWish>, RejectReason> {
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
pub(super) fn check_lists(cells: &[CellWish], vcpus: u64) -> Result<Vec<CellWish>, RejectReason> {
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
