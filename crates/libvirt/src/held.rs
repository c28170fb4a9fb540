//! VMs already on a host, read from their libvirt domain XML, as a host
//! state holds them: what `plan --state libvirt` and `--state DIR` plan
//! around, and what `apply` and `drift` compare with.
//!
//! A domain becomes a [`Placement`]:
//! - every vCPU pinned to a CPU of its own: a dedicated VM on those CPUs
//!   (and, for one numaplace planned, the CPUs beyond them its
//!   `<vcpu cpuset>` keeps: its emulator's own CPU, its idle siblings);
//! - anything else (no pins, pins to several CPUs, two vCPUs on one CPU, a
//!   `<vcpu cpuset>`): floating load. Each vCPU is counted against one CPU
//!   it may run on, the least loaded one that no dedicated VM holds, so it
//!   weighs on the node it is likely to run on without making any CPU
//!   unusable by itself;
//! - memory: each guest cell's share of the current memory on the nodes
//!   its `<memnode>` (else the whole-VM `<numatune>`) names; with no
//!   binding, spread evenly by the kernel over the nodes of the CPUs the
//!   vCPUs may use (first-touch allocation follows the threads); a
//!   `preferred` binding puts it all on its first node; huge-page-backed
//!   memory counts whole pages, from the node pools;
//! - emulator and I/O thread pins, passthrough devices, CPU hot-add and
//!   the guest cells and CPU topology as declared.
//!
//! [`host_state`] records them in a state. It never fails on what a live
//! host does (two domains pinned to one CPU, memory overcommitted, one
//! device in two definitions): the later VM is counted as well as it can
//! be and a [`HeldWarning`] says how.

use crate::domain::{BindMode, Definition};
use numaplace_plan::{
    CpuMode, Floating, GuestCell, GuestTopology, HostState, MemoryMode, Placement, Reservations, Session, StateError,
    VcpuPin,
};
use numaplace_topo::{CpuSet, NodeId, Topology};
use std::collections::BTreeMap;
use std::fmt;

/// Huge page size libvirt uses when `<hugepages/>` names none (x86-64).
const DEFAULT_HUGEPAGE: u64 = 2 << 20;

/// A VM already on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// Where it stands, as a host state records it.
    pub placement: Placement,
    /// numaplace planned it (its definition carries numaplace's mark);
    /// others are never moved unless an operator asks.
    pub managed: bool,
    /// Every vCPU is pinned to a CPU of its own (a dedicated VM).
    pub pinned: bool,
    /// The CPUs each vCPU may use, by vCPU, as the definition says.
    pub vcpu_cpus: Vec<CpuSet>,
    /// The emulator threads' CPUs (`<emulatorpin>`), when pinned.
    pub emulatorpin: Option<CpuSet>,
    /// The whole-VM memory binding (`<numatune><memory>`): its nodes,
    /// and whether it is strict (the mode libvirt changes live).
    pub numatune: Option<(CpuSet, bool)>,
    /// Where it was read from (a file name, or `libvirt:NAME`).
    pub source: String,
    /// The CPU numaplace's mark says each vCPU is counted against (a
    /// shared VM's, or a mixed VM's); empty for others. A floating vCPU
    /// is counted there while no dedicated VM holds it, so a VM read
    /// back weighs where it was planned.
    pub planned_pus: Vec<u32>,
}

/// The one rule for which of a domain's CPUs its vCPUs hold as a
/// dedicated VM: a pinned (or mixed) VM's vCPUs pinned to one CPU each;
/// none for a floating VM. (The CPUs it keeps beyond them are in its
/// placement's set; `check` counts both through the one map of holders,
/// [`numaplace_plan::CpuMap`].)
pub fn dedicated_of(pinned: bool, vcpus: &[CpuSet]) -> CpuSet {
    if !pinned {
        return CpuSet::new();
    }
    vcpus.iter().filter(|s| s.len() == 1).fold(CpuSet::new(), |u, s| u.union(s))
}

/// The other half of [`dedicated_of`]: the CPUs a domain's floating
/// vCPUs may use (every vCPU's set of a floating VM, the wider sets of a
/// mixed VM's floating vCPUs).
pub fn floating_of(pinned: bool, vcpus: &[CpuSet]) -> CpuSet {
    vcpus.iter().filter(|s| !pinned || s.len() > 1).fold(CpuSet::new(), |u, s| u.union(s))
}

impl Held {
    /// The CPUs this VM holds as a dedicated VM: a pinned VM's pins, a
    /// mixed VM's pinned vCPUs; none for a floating VM.
    pub fn dedicated_cpus(&self) -> CpuSet {
        dedicated_of(self.pinned, &self.vcpu_cpus)
    }

    /// Every CPU this VM holds as a dedicated VM: its pins and the CPUs
    /// it keeps beyond them (its emulator's own, idle siblings), as
    /// `held` read them into its placement's set; none for a floating
    /// VM. What `apply`'s check counts as taken, and so what lint's
    /// `floating-on-dedicated` must keep floating VMs off.
    pub fn held_cpus(&self) -> CpuSet {
        if self.pinned {
            self.placement.cpuset.union(&self.dedicated_cpus())
        } else {
            CpuSet::new()
        }
    }

    /// The CPUs this VM's floating vCPUs may run on: every CPU of a
    /// floating VM (no 1:1 pins, a wide `cpuset`, or none at all: the
    /// whole host), a mixed VM's floating vCPUs' sets; none for a
    /// dedicated VM. The one answer to "where may this VM's load go",
    /// which a host state counts ([`host_state`]) and lint's
    /// `floating-on-dedicated` checks.
    pub fn floating_cpus(&self) -> CpuSet {
        floating_of(self.pinned, &self.vcpu_cpus)
    }
}

/// How a VM was counted when what the host does could not be recorded
/// as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldWarning {
    /// The definition names CPUs or nodes the host does not have; they
    /// were left out.
    Unknown {
        /// The VM.
        vm: String,
        /// `CPUs` or `nodes`.
        what: &'static str,
        /// The missing ones.
        ids: CpuSet,
    },
    /// A VM pins vCPUs to CPUs another VM holds: it is counted as
    /// floating load over its pins.
    Overlap {
        /// The VM.
        vm: String,
        /// The VM that holds the CPU.
        holder: String,
        /// The CPU.
        cpu: u32,
    },
    /// Every CPU a VM's vCPUs may use is held by dedicated VMs: its vCPUs
    /// are not counted anywhere.
    NoCpu {
        /// The VM.
        vm: String,
    },
    /// A VM's memory does not fit what its nodes have left (the host is
    /// overcommitted): it is counted as what was left.
    Memory {
        /// The VM.
        vm: String,
        /// Why it did not fit.
        why: StateError,
    },
    /// A domain listed but undefined before its definition could be read
    /// (VMs come and go on a live host): it holds nothing and is left out;
    /// the next read sees what is defined then.
    Vanished {
        /// The domain.
        vm: String,
    },
    /// A mixed VM (numaplace's mark) whose floating vCPUs are outside the
    /// host's shared pool as given (`--shared-cpus`): counted as floating
    /// load over all its CPUs.
    MixedWithoutPool {
        /// The VM.
        vm: String,
    },
    /// A device passed through to two VMs (only one can run): the later
    /// one is counted without it.
    Device {
        /// The VM counted without the device.
        vm: String,
        /// The device.
        device: String,
        /// The VM that has it.
        holder: String,
    },
}

impl fmt::Display for HeldWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldWarning::Unknown { vm, what, ids } => {
                write!(f, "{vm} names {what} {ids}, which this host does not have; they are left out")
            }
            HeldWarning::Overlap { vm, holder, cpu } => write!(
                f,
                "{vm} pins a vCPU to CPU {cpu}, which {holder} also holds; {vm} is counted as floating load over its pins"
            ),
            HeldWarning::NoCpu { vm } => write!(
                f,
                "every CPU {vm} may run on is held by dedicated VMs; its vCPUs contend there and are not counted"
            ),
            HeldWarning::Memory { vm, why } => {
                write!(f, "{vm}: {why}; the host's memory is overcommitted and {vm} is counted as what was left")
            }
            HeldWarning::Device { vm, device, holder } => {
                write!(f, "{vm} and {holder} both pass through {device}; {vm} is counted without it")
            }
            HeldWarning::MixedWithoutPool { vm } => write!(
                f,
                "{vm} is a mixed VM whose floating vCPUs are outside the host's shared pool (give it with \
                 --shared-cpus); it is counted as floating load over all its CPUs"
            ),
            HeldWarning::Vanished { vm } => {
                write!(f, "{vm} was undefined while the host was read; it is left out and its resources count as free")
            }
        }
    }
}

/// A domain as a host state holds it, and what was left out of it;
/// `source` says where it was read from (a file name, `libvirt:NAME`).
pub fn held(definition: &Definition, source: &str, topology: &Topology) -> (Held, Vec<HeldWarning>) {
    let host = HostView::new(topology);
    let mut warnings = Vec::new();
    let out = held_vm(definition, &host, source, &mut warnings);
    (out, warnings)
}

/// The host facts a domain is counted against: each node's id and
/// online CPUs, and the node of every CPU.
struct HostView<'t> {
    topology: &'t Topology,
    nodes: Vec<NodeFacts>,
}

struct NodeFacts {
    id: NodeId,
    pus: CpuSet,
}

impl<'t> HostView<'t> {
    fn new(topology: &'t Topology) -> HostView<'t> {
        let nodes = (0..topology.nodes().len())
            .map(|i| NodeFacts { id: topology.nodes()[i].id, pus: topology.node_online_cpus(i) })
            .collect();
        HostView { topology, nodes }
    }

    /// The position of a CPU's node.
    fn node_of_cpu(&self, cpu: u32) -> Option<usize> {
        self.topology.pu(cpu).and_then(|p| p.node)
    }
}

/// The host's online CPUs.
fn host_cpus(host: &HostView<'_>) -> CpuSet {
    host.nodes.iter().fold(CpuSet::new(), |all, n| all.union(&n.pus))
}

fn node_id(host: &HostView<'_>, cpu: u32) -> Option<NodeId> {
    host.node_of_cpu(cpu).and_then(|i| host.nodes.get(i)).map(|n| n.id)
}

/// Keeps the ids `have` has; the rest are reported once per VM.
fn known(set: &CpuSet, have: &CpuSet, missing: &mut CpuSet) -> CpuSet {
    *missing = missing.union(&set.difference(have));
    set.intersection(have)
}

fn held_vm(vm: &Definition, host: &HostView<'_>, source: &str, warnings: &mut Vec<HeldWarning>) -> Held {
    let all = host_cpus(host);
    let (mut bad_cpus, mut bad_nodes) = (CpuSet::new(), CpuSet::new());
    let VmCpus { allowed, distinct, pinned, planned_pus, vcpus, floating } = vm_cpus(vm, host, &all, &mut bad_cpus);
    let run_cpus = allowed.iter().fold(CpuSet::new(), |u, s| u.union(s));
    let cpu_nodes: CpuSet = run_cpus.iter().filter_map(|c| node_id(host, c)).map(|n| n.0).collect();
    let page = vm.hugepages.first().map(|h| h.size_bytes.unwrap_or(DEFAULT_HUGEPAGE));
    let (memory, cell_homes) = vm_memory(vm, host, page, (&allowed, &cpu_nodes), &mut bad_nodes);
    if !bad_cpus.is_empty() {
        warnings.push(HeldWarning::Unknown { vm: vm.name.clone(), what: "CPUs", ids: bad_cpus });
    }
    if !bad_nodes.is_empty() {
        warnings.push(HeldWarning::Unknown { vm: vm.name.clone(), what: "nodes", ids: bad_nodes });
    }
    let mut emulator = vm.emulator.as_ref().map(|e| e.intersection(&all)).unwrap_or_default();
    emulator = emulator.union(&vm.iothreads.intersection(&all));
    // An overcommitting shared VM is charged what its mark says, when that
    // names only nodes its memory is on, each at most what is there.
    let charged: Vec<(NodeId, u64)> = if !pinned
        && !vm.planned_charged.is_empty()
        && vm.planned_charged.iter().all(|&(n, b)| memory.iter().any(|m| m.0 .0 == n && b <= m.1))
    {
        vm.planned_charged.iter().map(|&(n, b)| (NodeId(n), b)).collect()
    } else {
        Vec::new()
    };
    let kept = if pinned { kept_cpus(vm, &all, &allowed) } else { CpuSet::new() };
    let mut placement = Placement {
        vm: vm.name.clone(),
        nodes: Vec::new(),
        cpu_mode: if pinned { CpuMode::Dedicated } else { CpuMode::Shared },
        cpuset: if pinned { distinct.union(&kept) } else { run_cpus },
        vcpus,
        emulator,
        memory_bytes: memory.iter().fold(0u64, |t, m| t.saturating_add(m.1)),
        memory,
        memory_mode: match vm.vm_binding().map(|b| b.mode) {
            Some(BindMode::Interleave) => MemoryMode::Interleave,
            _ => MemoryMode::Strict,
        },
        hugepage_bytes: page,
        guest: guest_of(vm, &cell_homes),
        online_vcpus: vm.hotadd.as_ref().and_then(|h| h.current),
        devices: vm.devices.iter().map(|d| d.address.clone()).collect(),
        floating,
        charged,
    };
    set_nodes(&mut placement);
    Held {
        placement,
        managed: vm.managed,
        pinned,
        vcpu_cpus: allowed,
        emulatorpin: vm.emulator.clone(),
        numatune: vm.vm_binding().map(|b| (b.nodes.clone(), b.mode == BindMode::Strict)),
        source: source.to_string(),
        planned_pus,
    }
}

/// The CPUs a dedicated (or mixed) domain numaplace planned keeps beyond
/// its vCPUs' own: its `<vcpu cpuset>` less its pins and its floating
/// vCPUs' sets. numaplace writes a dedicated VM's whole set there (its
/// pins, the siblings it keeps idle, its emulator's own CPU), so the VM
/// read back holds what the plan gave it, as a host state records it
/// ([`numaplace_plan::CpuMap`]). Another tool's `<vcpu cpuset>` says
/// only where unpinned threads may run, and holds nothing.
fn kept_cpus(vm: &Definition, all: &CpuSet, allowed: &[CpuSet]) -> CpuSet {
    let Some((set, _)) = vm.cpuset.as_ref().filter(|_| vm.managed) else { return CpuSet::new() };
    allowed.iter().fold(set.intersection(all), |k, s| k.difference(s))
}

/// Where a domain's vCPUs may run, as [`held_vm`] counts them.
struct VmCpus {
    /// The CPUs each vCPU may use (the whole host when its pins name
    /// none the host has).
    allowed: Vec<CpuSet>,
    /// The CPUs of the vCPUs pinned to one CPU each.
    distinct: CpuSet,
    /// Every vCPU on a CPU of its own (or a mixed VM of numaplace's).
    pinned: bool,
    /// The mark's counted CPUs, when each is one its vCPU may use.
    planned_pus: Vec<u32>,
    /// Each vCPU on the CPU it is counted against.
    vcpus: Vec<VcpuPin>,
    /// A mixed VM's floating vCPUs, by the set they float over.
    floating: Vec<Floating>,
}

/// The vCPUs' CPUs of a definition; CPUs the host lacks go to `bad_cpus`.
fn vm_cpus(vm: &Definition, host: &HostView<'_>, all: &CpuSet, bad_cpus: &mut CpuSet) -> VmCpus {
    let whole = vm.cpuset.as_ref().map(|(set, _)| known(set, all, bad_cpus));
    let allowed: Vec<CpuSet> = (0..vm.vcpus)
        .map(|v| {
            let set = match vm.pin(v) {
                Some(pin) => known(&pin.cpus, all, bad_cpus),
                None => whole.clone().unwrap_or_else(|| all.clone()),
            };
            if set.is_empty() {
                all.clone()
            } else {
                set
            }
        })
        .collect();
    let distinct: CpuSet = allowed.iter().filter(|s| s.len() == 1).filter_map(CpuSet::first).collect();
    let singles = allowed.iter().filter(|s| s.len() == 1).count();
    // A mixed VM numaplace planned: its vCPUs pinned to a CPU of their own
    // are dedicated, the others float over their node's shared pool.
    let mixed = vm.planned_mixed && singles > 0 && singles < allowed.len() && distinct.len() == singles;
    let pinned = mixed
        || (!vm.planned_shared
            && vm.dedicated()
            && allowed.iter().all(|s| s.len() == 1)
            && distinct.len() == allowed.len());
    // The mark's counted CPUs, kept when each is one its vCPU may use.
    let planned_pus: Vec<u32> = if vm.planned_pus.len() == allowed.len()
        && vm.planned_pus.iter().zip(&allowed).all(|(pu, set)| set.contains(*pu))
    {
        vm.planned_pus.clone()
    } else {
        Vec::new()
    };
    let vcpus: Vec<VcpuPin> = allowed
        .iter()
        .enumerate()
        .filter_map(|(v, set)| {
            let pu = planned_pus.get(v).copied().or_else(|| set.first())?;
            Some(VcpuPin { vcpu: v as u32, pu, node: node_id(host, pu)? })
        })
        .collect();
    let mut floating: Vec<Floating> = Vec::new();
    if mixed {
        for (v, set) in allowed.iter().enumerate().filter(|(_, s)| s.len() > 1) {
            match floating.iter_mut().find(|f| f.cpus == *set) {
                Some(f) => f.vcpus.insert(v as u32),
                None => {
                    let Some(node) = set.first().and_then(|c| node_id(host, c)) else { continue };
                    floating.push(Floating { node, vcpus: [v as u32].into_iter().collect(), cpus: set.clone() });
                }
            }
        }
    }
    VmCpus { allowed, distinct, pinned, planned_pus, vcpus, floating }
}

/// A domain's memory on each node, and each guest cell's home node:
/// guest cells' shares (or one share) over the nodes bound, else over the
/// nodes its vCPUs run on. Nodes the host lacks go to `bad_nodes`.
fn vm_memory(
    vm: &Definition,
    host: &HostView<'_>,
    page: Option<u64>,
    (allowed, cpu_nodes): (&[CpuSet], &CpuSet),
    bad_nodes: &mut CpuSet,
) -> (Vec<(NodeId, u64)>, Vec<Option<u32>>) {
    let node_ids: CpuSet = host.nodes.iter().map(|n| n.id.0).collect();
    let total = vm.memory_bytes;
    let current = match page {
        // Huge pages are taken whole when the guest starts.
        Some(_) => total,
        None => vm.current_memory_bytes.unwrap_or(total).min(total),
    };
    let bind_nodes = |cell: Option<u32>| -> Option<(CpuSet, BindMode)> {
        let b = vm.bindings.iter().find(|b| b.cell == cell).or_else(|| cell.and(vm.vm_binding()))?;
        Some((b.nodes.clone(), b.mode))
    };
    let mut chunks: Vec<(u64, CpuSet, Option<BindMode>)> = Vec::new();
    if vm.cells.is_empty() {
        let (nodes, mode) = bind_nodes(None).map_or((cpu_nodes.clone(), None), |(n, m)| (n, Some(m)));
        chunks.push((current, nodes, mode));
    } else {
        let declared: u64 = vm.cells.iter().map(|c| c.memory_bytes).fold(0, u64::saturating_add);
        for c in &vm.cells {
            let share = if declared == 0 {
                0
            } else {
                (u128::from(c.memory_bytes) * u128::from(current.min(declared)) / u128::from(declared)) as u64
            };
            let (nodes, mode) = match bind_nodes(Some(c.id)) {
                Some((n, m)) => (n, Some(m)),
                None => {
                    let cpus = allowed
                        .iter()
                        .enumerate()
                        .filter(|(v, _)| c.vcpus.contains(*v as u32))
                        .fold(CpuSet::new(), |u, (_, s)| u.union(s));
                    (cpus.iter().filter_map(|cpu| node_id(host, cpu)).map(|n| n.0).collect(), None)
                }
            };
            chunks.push((share, nodes, mode));
        }
    }
    let unit = page.unwrap_or(1).max(1);
    let mut memory: BTreeMap<u32, u64> = BTreeMap::new();
    let mut cell_homes = Vec::new();
    for (bytes, nodes, mode) in &chunks {
        let mut nodes = known(nodes, &node_ids, bad_nodes);
        if nodes.is_empty() {
            nodes = if cpu_nodes.is_empty() { node_ids.clone() } else { cpu_nodes.clone() };
        }
        if *mode == Some(BindMode::Preferred) {
            nodes = nodes.first().into_iter().collect();
        }
        cell_homes.push(nodes.first());
        let units = bytes / unit;
        let n = nodes.len().max(1) as u64;
        for (i, node) in nodes.iter().enumerate() {
            let share = (units / n + u64::from((i as u64) < units % n)).saturating_mul(unit);
            let at = memory.entry(node).or_default();
            *at = at.saturating_add(share);
        }
    }
    let memory = memory.into_iter().filter(|m| m.1 > 0).map(|(n, b)| (NodeId(n), b)).collect();
    (memory, cell_homes)
}

/// The guest topology a definition shows, each cell at its home node.
fn guest_of(vm: &Definition, cell_homes: &[Option<u32>]) -> GuestTopology {
    let cells = vm
        .cells
        .iter()
        .zip(cell_homes)
        .map(|(c, home)| GuestCell {
            id: c.id,
            vcpus: c.vcpus.clone(),
            memory_bytes: c.memory_bytes,
            host_node: NodeId(home.unwrap_or(0)),
            distances: Vec::new(),
            memory_nodes: Vec::new(),
        })
        .collect();
    match &vm.shape {
        Some(s) => GuestTopology { sockets: s.sockets, dies: s.dies, cores: s.cores, threads: s.threads, cells },
        None => GuestTopology { sockets: 1, dies: 1, cores: vm.vcpus, threads: 1, cells },
    }
}

/// The nodes a placement uses: those of its vCPUs and of its memory.
fn set_nodes(p: &mut Placement) {
    let mut nodes: Vec<NodeId> = p.vcpus.iter().map(|v| v.node).chain(p.memory.iter().map(|m| m.0)).collect();
    nodes.sort();
    nodes.dedup();
    p.nodes = nodes;
}

/// A host state with its VMs, and how some had to be counted.
#[derive(Clone, Debug)]
pub struct HeldHost {
    /// The state: reservations and every VM.
    pub state: HostState,
    /// The VMs, as recorded (pinned ones first, then floating ones, each
    /// by name).
    pub held: Vec<Held>,
    /// What could not be recorded as the host has it.
    pub warnings: Vec<HeldWarning>,
}

/// Records `held` in a state with `reservations`: pinned VMs first (they
/// hold their CPUs), then floating ones over what is left, each group by
/// name. Fails only when the reservations do not fit the host.
pub fn host_state(
    topology: &Topology,
    reservations: Reservations,
    mut held: Vec<Held>,
) -> Result<HeldHost, StateError> {
    let mut state = HostState::with_reservations(topology, reservations)?;
    held.sort_by(|a, b| b.pinned.cmp(&a.pinned).then_with(|| a.placement.vm.cmp(&b.placement.vm)));
    let mut warnings = Vec::new();
    let host = HostView::new(topology);
    for h in &mut held {
        record(&mut state, &host, h, &mut warnings);
    }
    Ok(HeldHost { state, held, warnings })
}

fn record(state: &mut HostState, host: &HostView<'_>, h: &mut Held, warnings: &mut Vec<HeldWarning>) {
    let vm = h.placement.vm.clone();
    // Each kind of conflict is resolved once; four tries cover them all.
    for _ in 0..4 {
        if h.placement.cpu_mode == CpuMode::Shared {
            count_floating(state, host, h, warnings);
        }
        // Recorded as every reader records a VM already there: through a
        // session over the state.
        match Session::new(host.topology, &mut *state).record_placement(&h.placement) {
            Ok(()) => return,
            Err(StateError::FloatOutsidePool { .. }) if h.placement.is_mixed() => {
                // No pool given, or another one: the whole VM floats.
                warnings.push(HeldWarning::MixedWithoutPool { vm: vm.clone() });
                h.pinned = false;
                h.placement.cpu_mode = CpuMode::Shared;
                h.placement.floating.clear();
            }
            Err(StateError::PuTaken { pu, .. }) if h.pinned => {
                let holder = state
                    .placements()
                    .iter()
                    .find(|p| p.cpuset.contains(pu) || p.vcpus.iter().any(|v| v.pu == pu))
                    .map_or_else(|| "the host's reservation".to_string(), |p| p.vm.clone());
                warnings.push(HeldWarning::Overlap { vm: vm.clone(), holder, cpu: pu });
                h.pinned = false;
                h.placement.cpu_mode = CpuMode::Shared;
                h.placement.floating.clear();
            }
            Err(StateError::DeviceTaken { device, holder, .. }) => {
                warnings.push(HeldWarning::Device { vm: vm.clone(), device: device.clone(), holder });
                h.placement.devices.retain(|d| *d != device);
            }
            Err(
                why @ (StateError::MemoryExceeded { .. }
                | StateError::HugePagesExceeded { .. }
                | StateError::NotWholePages { .. }),
            ) => {
                let first = !h.placement.charged.is_empty();
                warnings.push(HeldWarning::Memory { vm: vm.clone(), why });
                h.placement.charged = h
                    .placement
                    .memory
                    .iter()
                    .map(|&(node, bytes)| {
                        let left = match h.placement.hugepage_bytes {
                            Some(size) => state.free_hugepages(node, size).unwrap_or(0).saturating_mul(size),
                            None => state.free_memory_bytes(node).unwrap_or(0),
                        };
                        // Second time round: nothing at all.
                        (node, if first { 0 } else { bytes.min(left) })
                    })
                    .collect();
                if let Some(size) = h.placement.hugepage_bytes.filter(|&s| s > 0) {
                    for c in &mut h.placement.charged {
                        c.1 -= c.1 % size;
                    }
                }
            }
            Err(_) => {
                // Anything else cannot come from a definition read against
                // this host; count the VM by nothing rather than fail.
                warnings.push(HeldWarning::NoCpu { vm: vm.clone() });
                h.placement.vcpus.clear();
                h.placement.charged = h.placement.memory.iter().map(|&(n, _)| (n, 0)).collect();
                h.placement.devices.clear();
            }
        }
    }
}

/// Counts each floating vCPU against the least loaded CPU it may use that
/// no dedicated VM holds (lowest number on ties).
fn count_floating(state: &HostState, host: &HostView<'_>, h: &mut Held, warnings: &mut Vec<HeldWarning>) {
    let mut load: BTreeMap<u32, u32> = BTreeMap::new();
    let mut vcpus = Vec::with_capacity(h.vcpu_cpus.len());
    let mut lost = false;
    for (v, set) in h.vcpu_cpus.iter().enumerate() {
        // Where numaplace counted it, while that CPU is free to float on.
        let planned = h.planned_pus.get(v).copied().filter(|&cpu| set.contains(cpu) && !state.pu_taken(cpu));
        let best = planned.or_else(|| {
            set.iter()
                .filter(|&cpu| !state.pu_taken(cpu))
                .min_by_key(|&cpu| (state.pu_shared_load(cpu) + load.get(&cpu).copied().unwrap_or(0), cpu))
        });
        match best.and_then(|cpu| Some((cpu, node_id(host, cpu)?))) {
            Some((pu, node)) => {
                *load.entry(pu).or_default() += 1;
                vcpus.push(VcpuPin { vcpu: v as u32, pu, node });
            }
            None => lost = true,
        }
    }
    if lost && !warnings.iter().any(|w| matches!(w, HeldWarning::NoCpu { vm } if *vm == h.placement.vm)) {
        warnings.push(HeldWarning::NoCpu { vm: h.placement.vm.clone() });
    }
    h.placement.vcpus = vcpus;
    h.placement.cpuset = h.floating_cpus();
    set_nodes(&mut h.placement);
}
