//! What a move may do to a VM on this host. The balancer's scorer says
//! which node a VM should live on; this module says which CPUs of that
//! node it may be pinned to, from the planner's view of the host: the
//! host's reservations and the VMs it runs (on a libvirt host, its
//! running domains read by `numaplace_libvirt::state`), both passed in.
//!
//! The rules, per VM or process:
//! - a domain the state holds pinned 1:1 (dedicated) moves only when the
//!   planner places it again, 1:1, on the new node alone, against the
//!   state without it and with the same guest threads per core; its vCPUs
//!   then get their new CPUs one by one. On its own node it keeps its pins.
//! - a mixed domain (some vCPUs pinned, others floating) and a dedicated
//!   one over several guest cells are not moved: a move would change what
//!   their guest was told at boot.
//! - everything else floats: onto the new node's CPUs that are neither
//!   reserved for the host nor held by a dedicated VM, and within the
//!   shared pool when the host declares one.
//! - except a process the state does not hold whose threads are each
//!   pinned to a single CPU (of a node that has more than one): someone
//!   pinned it 1:1 without telling
//!   libvirt (or balance runs with `--no-libvirt`), so numaplace cannot
//!   re-plan it, and floating it would unpin it. It stays.
//!
//! Pure apart from reading the threads' CPU masks through the sampler's
//! [`Source`]; the planner's state is never changed (a re-plan is tried
//! on a copy).

use crate::procfs;
use crate::sample::ProcInfo;
use crate::source::Source;
use numaplace_plan::{
    CpuMode, DeviceWish, EmulatorPlacement, HostState, Placement, RejectReason, Request, Session, SessionError,
    SmtPolicy,
};
use numaplace_topo::{CpuSet, MemoryKind, NodeId, Topology};
use std::fmt;

/// Where a VM's threads may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pins {
    /// Every thread (vCPUs and emulator) anywhere in this set.
    Floating(CpuSet),
    /// Each vCPU on its own CPU, the emulator threads on `emulator`.
    Dedicated {
        /// (vCPU, host CPU), by vCPU.
        vcpus: Vec<(u32, u32)>,
        /// The emulator threads' CPUs.
        emulator: CpuSet,
    },
}

impl Pins {
    /// Every CPU some thread may run on.
    pub fn cpus(&self) -> CpuSet {
        match self {
            Pins::Floating(cpus) => cpus.clone(),
            Pins::Dedicated { vcpus, emulator } => vcpus.iter().fold(emulator.clone(), |mut all, (_, pu)| {
                all.insert(*pu);
                all
            }),
        }
    }

    /// The pins a placement records: 1:1 for a dedicated VM, its CPU set
    /// for a shared one.
    pub fn of(p: &Placement) -> Pins {
        match p.cpu_mode {
            CpuMode::Dedicated if !p.is_mixed() => Pins::Dedicated {
                vcpus: p.vcpus.iter().map(|v| (v.vcpu, v.pu)).collect(),
                emulator: p.emulator.clone(),
            },
            _ => Pins::Floating(p.run_cpus()),
        }
    }
}

impl fmt::Display for Pins {
    /// `floating over 8-15`, or `vCPUs 0->9, 1->10, emulator on 0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pins::Floating(cpus) => write!(f, "floating over {}", list(cpus)),
            Pins::Dedicated { vcpus, emulator } => {
                f.write_str("vCPUs ")?;
                for (i, (vcpu, pu)) in vcpus.iter().enumerate() {
                    write!(f, "{}{vcpu}->{pu}", if i == 0 { "" } else { ", " })?;
                }
                write!(f, ", emulator on {}", list(emulator))
            }
        }
    }
}

fn list(cpus: &CpuSet) -> String {
    if cpus.is_empty() {
        "no CPU".into()
    } else {
        cpus.to_list()
    }
}

/// A move's CPUs: where the VM's threads may run now, and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Before the move (what a failed move puts back).
    pub before: Pins,
    /// After the move.
    pub after: Pins,
}

/// Why a VM stays where it is on a node the scorer would take.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Kept {
    /// Every CPU of the node is reserved for the host, held by a
    /// dedicated VM, or outside the shared pool.
    #[error("node {node} has no CPU it may float over (each is reserved for the host, held by a dedicated VM or outside the shared pool)")]
    NoFreeCpu {
        /// The node.
        node: u32,
    },
    /// A dedicated VM the planner cannot place 1:1 on the node.
    #[error("dedicated VM {vm}: not re-planned 1:1 on node {node}: {reason}")]
    NotPlanned {
        /// The VM.
        vm: String,
        /// The node.
        node: u32,
        /// The planner's reason, with its figures.
        reason: RejectReason,
    },
    /// The planner placed a dedicated VM, but not on the node alone.
    #[error("dedicated VM {vm}: re-planned on nodes {nodes:?}, not on node {node} alone")]
    NotOnNode {
        /// The VM.
        vm: String,
        /// The node asked.
        node: u32,
        /// The nodes the plan uses.
        nodes: Vec<u32>,
    },
    /// The planner refused the change itself (a name it does not hold).
    #[error("dedicated VM {vm}: {error}")]
    Change {
        /// The VM.
        vm: String,
        /// The planner's refusal.
        error: SessionError,
    },
    /// A re-plan would pin sibling threads to vCPUs the guest was told
    /// are cores (or the reverse).
    #[error("dedicated VM {vm}: re-planned on node {node} it would need {after} thread(s) per core; its guest was told {before}")]
    GuestThreads {
        /// The VM.
        vm: String,
        /// The node.
        node: u32,
        /// Threads per core the guest was told.
        before: u32,
        /// Threads per core the re-plan gives.
        after: u32,
    },
    /// A dedicated VM over several guest cells: one node cannot hold
    /// them without the guest seeing a different NUMA topology.
    #[error("dedicated VM {vm} has {cells} guest cells; moving it onto one node would change the topology its guest was told")]
    SeveralCells {
        /// The VM.
        vm: String,
        /// Its guest cells.
        cells: usize,
    },
    /// A VM whose memory is on a node of another kind than DRAM (HBM,
    /// CXL): the move takes a process's pages to the target node's DRAM,
    /// which would undo what the VM asked for.
    #[error("VM {vm} has its memory on node {node} ({}); a move would take it onto DRAM", .kind.as_str())]
    MemoryTier {
        /// The VM.
        vm: String,
        /// The node of the other kind.
        node: u32,
        /// Its kind.
        kind: MemoryKind,
    },
    /// A mixed VM.
    #[error("mixed VM {vm} (some vCPUs pinned, others floating) is not moved")]
    Mixed {
        /// The VM.
        vm: String,
    },
    /// A process the state does not hold whose threads are each pinned
    /// to a single CPU.
    #[error("its threads are pinned one CPU each outside libvirt; numaplace cannot re-plan it, and floating it would unpin it")]
    PinnedOutside,
    /// The node is not in the host's topology.
    #[error("node {node} is not in the host's topology")]
    UnknownNode {
        /// The node.
        node: u32,
    },
    /// The host's VMs could not be read this round.
    #[error("the host's VMs could not be read ({error}); nothing moves without them")]
    StateUnread {
        /// What failed.
        error: String,
    },
}

impl Kept {
    /// The kind's name, for the JSON lines' `code`.
    pub fn code(&self) -> &'static str {
        match self {
            Kept::NoFreeCpu { .. } => "no_free_cpu",
            Kept::NotPlanned { .. } => "not_planned",
            Kept::NotOnNode { .. } => "not_on_node",
            Kept::Change { .. } => "change_refused",
            Kept::GuestThreads { .. } => "guest_threads",
            Kept::SeveralCells { .. } => "several_cells",
            Kept::MemoryTier { .. } => "memory_tier",
            Kept::Mixed { .. } => "mixed",
            Kept::PinnedOutside => "pinned_outside",
            Kept::UnknownNode { .. } => "unknown_node",
            Kept::StateUnread { .. } => "state_unread",
        }
    }
}

/// The host as a move sees it: its topology, the planner's state (the
/// reservations and the VMs it runs) and where the threads' CPU masks
/// are read.
pub struct Host<'a> {
    topology: &'a Topology,
    state: HostState,
    source: &'a dyn Source,
}

impl fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host").field("reservations", self.state.reservations()).finish_non_exhaustive()
    }
}

impl<'a> Host<'a> {
    /// A host whose VMs and reservations are in `state` (made for
    /// `topology`), reading thread masks from `source`.
    pub fn new(topology: &'a Topology, state: HostState, source: &'a dyn Source) -> Self {
        Host { topology, state, source }
    }

    /// The planner's state.
    pub fn state(&self) -> &HostState {
        &self.state
    }

    /// The CPUs of `node` a floating VM may use: online, not reserved for
    /// the host, not held by a dedicated VM, and in the shared pool when
    /// the host declares one.
    pub fn floating_cpus(&self, node: u32) -> Option<CpuSet> {
        let n = self.topology.nodes().iter().find(|n| n.id == NodeId(node))?;
        let pool = !self.state.reservations().shared_cpus.is_empty();
        Some(
            n.cpus
                .iter()
                .filter(|&c| self.topology.pu(c).is_some_and(|p| p.online))
                .filter(|&c| !self.state.pu_reserved(c) && !self.state.pu_taken(c))
                .filter(|&c| !pool || self.state.pu_shared_pool(c))
                .collect(),
        )
    }

    /// Where `p` may go on `node`, or why it stays where it is.
    pub fn target(&self, p: &ProcInfo, node: u32) -> Result<Target, Kept> {
        let placed = (p.kind == crate::sample::Kind::Vm).then(|| self.state.placement(&p.name)).flatten();
        if let Some(placed) = placed {
            if placed.is_mixed() {
                return Err(Kept::Mixed { vm: placed.vm.clone() });
            }
            if let Some((node, kind)) = self.other_memory(placed) {
                return Err(Kept::MemoryTier { vm: placed.vm.clone(), node, kind });
            }
            if placed.cpu_mode == CpuMode::Dedicated {
                return self.replan(placed, node);
            }
            return Ok(Target { before: Pins::of(placed), after: self.float(node)? });
        }
        let masks = self.thread_masks(p);
        if !masks.is_empty() && masks.iter().all(|m| self.one_of_many(m)) {
            return Err(Kept::PinnedOutside);
        }
        let before = CpuSet::parse_list(&p.cpus_allowed).unwrap_or_default();
        Ok(Target { before: Pins::Floating(before), after: self.float(node)? })
    }

    /// The first node of another kind than DRAM holding some of the VM's
    /// memory, with its kind.
    fn other_memory(&self, placed: &Placement) -> Option<(u32, MemoryKind)> {
        placed.memory.iter().filter(|(_, bytes)| *bytes > 0).find_map(|&(id, _)| {
            let kind = self.topology.memory_kind(self.topology.node_index(id)?);
            (kind != MemoryKind::Dram).then_some((id.0, kind))
        })
    }

    /// Whether `mask` is one CPU of a node that has more: pinned 1:1,
    /// not merely bound to a node of one CPU (where floating over the
    /// node and pinning to its CPU are the same thing).
    fn one_of_many(&self, mask: &CpuSet) -> bool {
        let Some(cpu) = mask.iter().next().filter(|_| mask.len() == 1) else { return false };
        self.topology.nodes().iter().find(|n| n.cpus.contains(cpu)).is_none_or(|n| n.cpus.len() > 1)
    }

    fn float(&self, node: u32) -> Result<Pins, Kept> {
        let cpus = self.floating_cpus(node).ok_or(Kept::UnknownNode { node })?;
        if cpus.is_empty() {
            return Err(Kept::NoFreeCpu { node });
        }
        Ok(Pins::Floating(cpus))
    }

    /// A dedicated VM planned again on `node` alone, through the planner,
    /// against the state without it.
    fn replan(&self, placed: &Placement, node: u32) -> Result<Target, Kept> {
        let vm = placed.vm.clone();
        let before = Pins::of(placed);
        if placed.guest.cells.len() > 1 {
            return Err(Kept::SeveralCells { vm, cells: placed.guest.cells.len() });
        }
        if placed.nodes == [NodeId(node)] && placed.vcpus.iter().all(|v| v.node == NodeId(node)) {
            // Already there: only memory moves; the pins stay as they are.
            return Ok(Target { after: before.clone(), before });
        }
        let request = self.request(placed, node);
        let mut trial = self.state.clone();
        let remove = [vm.clone()];
        let out = Session::new(self.topology, &mut trial)
            .change(&remove, std::slice::from_ref(&request))
            .map_err(|error| Kept::Change { vm: vm.clone(), error })?;
        let decision = match out.results.into_iter().next() {
            Some(Ok(d)) => d,
            Some(Err(r)) => return Err(Kept::NotPlanned { vm, node, reason: r.reason }),
            None => return Err(Kept::NotOnNode { vm, node, nodes: Vec::new() }),
        };
        let new = &decision.placement;
        if new.nodes != [NodeId(node)] || new.vcpus.iter().any(|v| v.node != NodeId(node)) {
            return Err(Kept::NotOnNode { vm, node, nodes: new.nodes.iter().map(|n| n.0).collect() });
        }
        if new.guest.threads != placed.guest.threads {
            return Err(Kept::GuestThreads { vm, node, before: placed.guest.threads, after: new.guest.threads });
        }
        Ok(Target { before, after: Pins::of(new) })
    }

    /// The request that plans `placed` again on `node` alone: its size,
    /// huge pages, devices and threads per core, its emulator kept on the
    /// host's reserved CPUs when it was there.
    fn request(&self, placed: &Placement, node: u32) -> Request {
        let all = placed.vcpus.len() as u32;
        let mut r = Request::new(placed.vm.clone(), placed.online_vcpus.unwrap_or(all), placed.memory_bytes);
        if placed.online_vcpus.is_some() {
            r.max_vcpus = Some(all);
        }
        r.hugepage_bytes = placed.hugepage_bytes;
        r.cpu_mode = CpuMode::Dedicated;
        r.max_nodes = Some(1);
        // Its memory was on DRAM (a VM on another kind is kept): the re-plan
        // keeps it there even where the host's profile allows other kinds.
        r.memory_kinds = Some(vec![MemoryKind::Dram]);
        r.smt = if placed.guest.threads > 1 {
            SmtPolicy::Pairs
        } else if placed.cpuset.len() > placed.vcpus.len() {
            // It kept its cores' siblings idle.
            SmtPolicy::Isolate
        } else {
            SmtPolicy::PreferCores
        };
        r.devices = std::iter::once(DeviceWish { address: None, node: Some(NodeId(node)), required: true })
            .chain(placed.devices.iter().map(|d| DeviceWish { address: Some(d.clone()), node: None, required: false }))
            .collect();
        let reserved = &self.state.reservations().cpus;
        if !placed.emulator.is_empty() && !reserved.is_empty() && placed.emulator.is_subset(reserved) {
            r.emulator = EmulatorPlacement::HostReserved;
        }
        r
    }

    /// The CPU masks of the threads whose placement counts: a QEMU
    /// process's vCPU threads when it names them, else every thread. Empty
    /// when they cannot be read (the process then counts as floating, as
    /// the sampler saw it).
    fn thread_masks(&self, p: &ProcInfo) -> Vec<CpuSet> {
        let Ok(tids) = self.source.tids(p.pid) else { return Vec::new() };
        let mut vcpus = Vec::new();
        let mut all = Vec::new();
        for tid in tids {
            let Ok(raw) = self.source.proc_file(p.pid, &format!("task/{tid}/status")) else { continue };
            let Ok(status) = procfs::parse_status(&String::from_utf8_lossy(&raw)) else { continue };
            if p.kind == crate::sample::Kind::Vm && procfs::is_vcpu_thread(&status.name) {
                vcpus.push(status.cpus_allowed.clone());
            }
            all.push(status.cpus_allowed);
        }
        if vcpus.is_empty() {
            all
        } else {
            vcpus
        }
    }
}
