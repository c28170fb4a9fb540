//! The plan JSON (`numaplace plan --format json`), version 2, and the VM
//! requests it starts from (the [`request`] module).
//!
//! A plan document is both an output and an input: `--state FILE` reads it
//! back as the VMs already on the host, so plans chain. Everything a
//! [`Placement`] holds is therefore written out and read back exactly;
//! the alternatives, notes and the request are for people and for replay
//! (`docs/formats/plan-json.md`).

mod figures;
pub mod request;
mod view;
mod write;

use numaplace_plan::{
    Alternative, CpuMode, Decision, Floating, GuestCell, GuestTopology, MemoryMode, NodeFree, Note, Placement,
    RejectReason, Rejection, Reservations, VcpuPin,
};
use numaplace_topo::{CpuSet, NodeId, MAX_CPU, MAX_NODE, MAX_SETS_BYTES};
use serde::{Deserialize, Serialize};
use std::fmt;

pub use crate::topology::ReservedDoc;
pub use request::{RequestDoc, RequestError};
pub use view::PlacementView;

/// The value of the `format` field.
pub const FORMAT: &str = "numaplace-plan";
/// The version written. Version 2 writes each VM's pinning as one list
/// (`pins`, the PU of each vCPU in order) where version 1 wrote an object
/// per vCPU, and gives alternatives a `code`.
pub const VERSION: u32 = 2;
/// The oldest version read (`--state` reads plans of earlier releases).
pub const OLDEST_VERSION: u32 = 1;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanDoc {
    /// Always `numaplace-plan`.
    pub format: String,
    /// Format version: 2 is written, 1 and 2 are read.
    pub version: u32,
    /// The host's name, when the topology has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The host the plan was made for, as `apply` checks it against the
    /// host it runs on (absent in plans of earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_topology: Option<HostTopologyDoc>,
    /// What the host keeps for itself (absent: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedDoc>,
    /// The guest type the plan was made with (`--accel`: `kvm` or `tcg`),
    /// which `apply` writes new domains for; absent when none was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accel: Option<String>,
    /// Every VM on the host after this plan: those read from `--state`
    /// first, then those placed now.
    pub placements: Vec<PlacementDoc>,
    /// VMs that could not be placed.
    #[serde(default)]
    pub rejected: Vec<RejectionDoc>,
    /// The domains a libvirt host (or a directory of their XML) already
    /// had, as they were counted: never read back as state (read the host
    /// again). What the plan assumed of the host: `apply` refuses the plan
    /// when one of them holds other CPUs or devices now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldDoc>,
}

/// The host a plan was made for: enough to tell, before anything is
/// applied, that another host's CPU numbers would be pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostTopologyDoc {
    /// The plan read the machine it ran on (`/sys`), whose name is then its
    /// hostname; false for a topology file.
    pub live: bool,
    /// Each NUMA node and its online CPUs.
    pub nodes: Vec<HostNodeDoc>,
}

/// One node of [`HostTopologyDoc`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostNodeDoc {
    /// The node's id.
    pub node: u32,
    /// Its online CPUs.
    pub cpus: Vec<u32>,
}

impl HostTopologyDoc {
    /// A topology's nodes and their online CPUs; `live`: read from the
    /// machine the plan runs on.
    pub fn new(topology: &numaplace_topo::Topology, live: bool) -> HostTopologyDoc {
        let nodes = topology
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| HostNodeDoc { node: n.id.0, cpus: list(&topology.node_online_cpus(i)) })
            .collect();
        HostTopologyDoc { live, nodes }
    }

    /// Each node's id and CPUs, as sets.
    pub fn node_cpus(&self) -> Vec<(u32, CpuSet)> {
        self.nodes.iter().map(|n| (n.node, set(&n.cpus))).collect()
    }
}

/// A domain already on a libvirt host, as the plan counted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldDoc {
    /// Domain name.
    pub vm: String,
    /// Where it was read (`libvirt:qemu:///system`, or a directory).
    pub source: String,
    /// numaplace planned it (its XML carries numaplace's mark).
    pub managed: bool,
    /// It runs.
    pub running: bool,
    /// `dedicated` (every vCPU pinned to a CPU of its own), `mixed`
    /// (numaplace's mixed VM: some pinned, some floating in the shared
    /// pool) or `floating`.
    pub cpu_mode: String,
    /// The CPUs its vCPUs may use.
    pub cpus: Vec<u32>,
    /// The CPU each vCPU is counted against, in vCPU order.
    pub pins: Vec<u32>,
    /// Emulator and I/O threads' CPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emulator: Vec<u32>,
    /// Memory counted on each node.
    pub memory: Vec<MemoryDoc>,
    /// Passthrough devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// The CPUs its vCPUs may use once the plan is applied, when the plan
    /// narrows them (a floating domain whose CPUs a dedicated VM of this
    /// plan takes); `apply` makes the change. Empty: left as it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus_after: Vec<u32>,
}

impl HeldDoc {
    /// A held domain as recorded in a host state.
    pub fn new(p: &Placement, source: &str, managed: bool, running: bool) -> HeldDoc {
        HeldDoc {
            vm: p.vm.clone(),
            source: source.to_string(),
            managed,
            running,
            cpu_mode: match p.cpu_mode {
                numaplace_plan::CpuMode::Dedicated if p.is_mixed() => "mixed",
                numaplace_plan::CpuMode::Dedicated => "dedicated",
                numaplace_plan::CpuMode::Shared => "floating",
            }
            .to_string(),
            cpus: list(&p.cpuset),
            pins: p.vcpus.iter().map(|v| v.pu).collect(),
            emulator: list(&p.emulator),
            memory: p.charged_memory().iter().map(|&(n, bytes)| MemoryDoc { node: n.0, bytes }).collect(),
            devices: p.devices.clone(),
            cpus_after: Vec::new(),
        }
    }

    /// The entry with the CPUs the plan leaves it (`now`, as the host
    /// state has it after the plan), recorded when they differ from those
    /// it was read with.
    pub fn narrowed_to(mut self, now: &CpuSet) -> HeldDoc {
        if !now.iter().eq(self.cpus.iter().copied()) {
            self.cpus_after = list(now);
        }
        self
    }
}

impl ReservedDoc {
    /// The document's form of a host's reservations (`None` when it
    /// reserves nothing).
    pub fn new(r: &Reservations) -> Option<ReservedDoc> {
        // The overhead rule is the host profile's, not the document's.
        let none = r.cpus.is_empty() && r.memory_per_node == 0 && r.shared_cpus.is_empty();
        (!none).then(|| ReservedDoc {
            cpus: r.cpus.iter().collect(),
            memory_per_node: r.memory_per_node,
            shared_cpus: r.shared_cpus.iter().collect(),
        })
    }

    /// The reservations, bounded like every CPU list of the document.
    pub fn to_reservations(&self) -> Result<Reservations, PlanDocError> {
        for (field, list) in [("reserved.cpus", &self.cpus), ("reserved.shared_cpus", &self.shared_cpus)] {
            if let Some(c) = list.iter().find(|&&c| c >= MAX_CPU) {
                return Err(PlanDocError::BadValue {
                    field: field.into(),
                    expected: "a number below 65536",
                    found: c.to_string(),
                });
            }
        }
        Ok(Reservations {
            cpus: set(&self.cpus),
            memory_per_node: self.memory_per_node,
            shared_cpus: set(&self.shared_cpus),
            overhead: numaplace_plan::Overhead::default(),
            memory_kinds: Vec::new(),
        })
    }
}

/// One placed VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementDoc {
    /// VM name.
    pub vm: String,
    /// Whether this run placed it (false: carried over from `--state`).
    #[serde(default)]
    pub new: bool,
    /// Host node ids used.
    pub nodes: Vec<u32>,
    /// `dedicated` or `shared`.
    pub cpu_mode: String,
    /// The PU of each vCPU, in vCPU order (version 2). The PU's node is
    /// the host node of the guest cell holding the vCPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<u32>,
    /// With CPU hot-add, how many vCPUs (the first ones) are online at
    /// boot; `pins` then lists every vCPU the VM may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online_vcpus: Option<u32>,
    /// vCPU to PU pinning, an object per vCPU (version 1; read, not
    /// written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vcpus: Vec<VcpuDoc>,
    /// PUs the VM may run on.
    pub cpuset: Vec<u32>,
    /// PUs for the emulator threads.
    pub emulator: Vec<u32>,
    /// Memory per host node.
    pub memory: Vec<MemoryDoc>,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// `strict` or `interleave`.
    pub memory_mode: String,
    /// Huge page size, bytes, when huge pages back the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepage_bytes: Option<u64>,
    /// The guest's CPU and NUMA topology.
    pub guest: GuestDoc,
    /// PCI devices passed through (`0000:3b:00.0`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// A mixed VM's floating vCPUs, per host node, and the shared-pool
    /// CPUs they float over (`cpu_mode` is then `mixed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub floating: Vec<FloatingDoc>,
    /// Memory charged per host node when the request overcommits memory
    /// (a shared VM's `memory_overcommit`); absent: as `memory`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charged: Vec<MemoryDoc>,
    /// Node sets considered and why they lost.
    #[serde(default)]
    pub alternatives: Vec<AlternativeDoc>,
    /// Remarks for the operator: a stable code and the sentence (a bare
    /// sentence is read too, as earlier documents wrote them).
    #[serde(default)]
    pub notes: Vec<NoteDoc>,
    /// The request the VM was planned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestDoc>,
}

/// A mixed VM's floating vCPUs on one host node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloatingDoc {
    /// Host node id.
    pub node: u32,
    /// The vCPUs that float there.
    pub vcpus: Vec<u32>,
    /// The CPUs they float over.
    pub cpus: Vec<u32>,
}

/// One vCPU's place, as version 1 wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VcpuDoc {
    /// vCPU number.
    pub vcpu: u32,
    /// Host PU.
    pub pu: u32,
    /// Host node of the PU.
    pub node: u32,
}

/// Memory on one host node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryDoc {
    /// Host node id.
    pub node: u32,
    /// Bytes.
    pub bytes: u64,
}

/// The guest topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestDoc {
    /// Sockets.
    pub sockets: u32,
    /// Dies per socket (written only when more than 1; documents from
    /// before dies read as 1, their `cores` being per socket and per die
    /// alike).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub dies: u32,
    /// Cores per die.
    pub cores: u32,
    /// Threads per core.
    pub threads: u32,
    /// Guest NUMA cells.
    pub cells: Vec<CellDoc>,
}

/// One guest NUMA cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellDoc {
    /// Guest node number.
    pub id: u32,
    /// vCPUs in the cell.
    pub vcpus: Vec<u32>,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// The host node it mirrors.
    pub host_node: u32,
    /// Distances to every cell, in cell order.
    pub distances: Vec<u32>,
    /// The host nodes holding the cell's memory, when not `host_node`
    /// alone (HBM or CXL backing a CPU cell, the tier hidden from the
    /// guest); absent: all on `host_node`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_nodes: Vec<MemoryDoc>,
}

/// A node set the planner considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlternativeDoc {
    /// Host node ids.
    pub nodes: Vec<u32>,
    /// The criterion that decided, for programs
    /// ([`numaplace_plan::Verdict::code`]; absent in version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it lost, in words.
    pub verdict: String,
    /// The alternative's figure for the criterion that decided, in its
    /// unit (nodes, slots, bytes, distance or devices; a mean distance
    /// has one decimal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt: Option<serde_json::Number>,
    /// The chosen set's figure for that criterion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<serde_json::Number>,
    /// What the set has free, for `too-few-slots` (slots) and
    /// `too-little-memory` (bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub have: Option<u64>,
    /// What the VM needs there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub need: Option<u64>,
    /// The alternative's expected cost, for `costlier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt_cost: Option<CostDoc>,
    /// The chosen placement's expected cost, for `costlier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_cost: Option<CostDoc>,
}

impl AlternativeDoc {
    /// An alternative with its nodes, code and sentence and no figures.
    pub fn new(nodes: Vec<u32>, code: Option<String>, verdict: String) -> AlternativeDoc {
        AlternativeDoc {
            nodes,
            code,
            verdict,
            alt: None,
            chosen: None,
            have: None,
            need: None,
            alt_cost: None,
            chosen_cost: None,
        }
    }
}

/// An expected cost ([`numaplace_plan::Cost`]), in thousandths of the
/// VM's throughput: the total and its causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostDoc {
    /// The sum of the causes.
    pub total: u64,
    /// vCPUs on cores another VM's busy thread uses.
    pub siblings: u64,
    /// vCPUs on their own VM's sibling pairs, the guest told its threads
    /// (issue 39); absent when none, and in documents written before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pairs: u64,
    /// Memory remote from the vCPUs, weighted by distance.
    pub remote: u64,
    /// vCPUs in guest cells of one or two.
    pub small_cells: u64,
    /// vCPUs away from the node of a device the VM asked for; written only
    /// when not zero, so documents of VMs without devices are as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub device: u64,
}

impl From<numaplace_plan::Cost> for CostDoc {
    fn from(c: numaplace_plan::Cost) -> CostDoc {
        CostDoc {
            total: c.total(),
            siblings: c.siblings,
            pairs: c.pairs,
            remote: c.remote,
            small_cells: c.small_cells,
            device: c.device,
        }
    }
}

/// A remark on a placed VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NoteDoc {
    /// `{"code": "siblings-taken-by", "text": "...", "vm": "vm64", "vcpus": 2}`.
    /// Boxed: most of its figures are absent, and a state of thousands
    /// of VMs keeps every note it read.
    Coded(Box<CodedNoteDoc>),
    /// A sentence alone, as version 1 documents wrote notes.
    Text(String),
}

/// A note with its code, its sentence and the figures it is made of
/// (which figures depends on the code: docs/formats/plan-json.md). The
/// figures are written in this order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CodedNoteDoc {
    /// Stable code ([`numaplace_plan::Note::code`]).
    pub code: String,
    /// The sentence.
    pub text: String,
    /// A PCI device (`0000:3b:00.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The other VM concerned: the holder of a device, the shared VM that
    /// loses CPUs, the later VM on this VM's siblings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The VMs whose cores this VM's vCPUs share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vms: Option<Vec<String>>,
    /// A number of vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u64>,
    /// A number of host CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
    /// A number of guest cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells: Option<u64>,
    /// vCPUs of each guest cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell_vcpus: Option<Vec<usize>>,
    /// The most nodes the VM may span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u64>,
    /// A host node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// A host CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// A mixed VM's floating vCPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floating: Option<Vec<u32>>,
    /// The shared-pool CPUs they float over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Vec<u32>>,
    /// How many of its vCPUs are pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<u64>,
    /// CPUs a shared VM loses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<Vec<u32>>,
    /// Its floating set after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<Vec<u32>>,
    /// vCPUs per CPU at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overcommit: Option<f64>,
    /// Bytes charged to the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged_bytes: Option<u64>,
    /// Guest memory, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Guest memory per byte charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The chosen placement's expected cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostDoc>,
    /// The expected cost of the fewest nodes with whole cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_cost: Option<CostDoc>,
}

impl NoteDoc {
    /// The note's code, sentence and figures.
    pub fn from_note(n: &Note) -> NoteDoc {
        let mut doc = CodedNoteDoc { code: n.code().to_string(), text: sentence(n), ..CodedNoteDoc::default() };
        figures::note(n, &mut |key, fig| doc.set(key, fig));
        NoteDoc::Coded(Box::new(doc))
    }

    /// The sentence.
    pub fn text(&self) -> &str {
        match self {
            NoteDoc::Coded(note) => &note.text,
            NoteDoc::Text(text) => text,
        }
    }
}

/// One node's free capacity in a rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFreeDoc {
    /// Node id.
    pub node: u32,
    /// Free units of the resource (cores, pairs, threads or slots).
    pub free: u64,
    /// Free memory, bytes, where the rejection weighs both.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub memory_bytes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A VM that could not be placed: a stable `code`, the figures that
/// decided (which depend on the code) and the sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectionDoc {
    /// VM name.
    pub vm: String,
    /// Stable code ([`numaplace_plan::RejectReason::code`]).
    #[serde(default)]
    pub code: String,
    /// The sentence.
    pub reason: String,
    /// What CPU capacity is counted in (`free-cores`, `sibling-pairs`,
    /// `free-threads`, `shared-slots`), for CPU shortfalls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// How many units (or bytes, for memory) are needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed: Option<u64>,
    /// Bytes of memory needed, where both CPU and memory are weighed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Huge page size asked, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepage_bytes: Option<u64>,
    /// The most nodes the VM may span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<usize>,
    /// The most the best `max_nodes` nodes offer together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_total: Option<u64>,
    /// The best nodes and what each has free.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeFreeDoc>,
    /// For a CPU shortfall, the VMs holding the host's CPUs (numaplace's
    /// or, read from libvirt, any other), most CPUs first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<HolderDoc>,
    /// The request, for replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestDoc>,
}

/// A VM and the host CPUs it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderDoc {
    /// The VM.
    pub vm: String,
    /// Its CPUs.
    pub cpus: Vec<u32>,
}

/// Why a plan document cannot be used as host state. `field` is a path
/// into the document (`placements[1].cpu_mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanDocError {
    /// The text is not JSON of this shape.
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's message.
        message: String,
    },
    /// `format` is not `numaplace-plan`.
    WrongFormat(String),
    /// A version this build does not know.
    UnsupportedVersion(u32),
    /// A value of the wrong form.
    BadValue {
        /// Path to the value.
        field: String,
        /// What a valid value looks like.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// A stored request that does not check.
    Request(RequestError),
}

impl fmt::Display for PlanDocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanDocError::Json { line, column, message } => {
                write!(f, "malformed plan JSON at line {line}, column {column}: {message}")
            }
            PlanDocError::WrongFormat(s) => write!(f, "format: expected \"{FORMAT}\", found \"{s}\""),
            PlanDocError::UnsupportedVersion(v) => {
                write!(f, "version: expected {OLDEST_VERSION} to {VERSION}, found {v}")
            }
            PlanDocError::BadValue { field, expected, found } => {
                write!(f, "{field}: expected {expected}, found {found}")
            }
            PlanDocError::Request(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PlanDocError {}

fn list(set: &CpuSet) -> Vec<u32> {
    // Sized first: collecting the set's iterator grows the list 4, 8, 16.
    let mut v = Vec::with_capacity(set.len());
    v.extend(set.iter());
    v
}

/// A decision's sentence, in a string sized for one: formatting into an
/// empty string grows it four or five times.
fn sentence(words: &(impl fmt::Display + ?Sized)) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(128);
    // Writing into a string cannot fail.
    let _ = write!(s, "{words}");
    s
}

fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().copied().collect()
}

fn memory_mode_name(mode: MemoryMode) -> &'static str {
    match mode {
        MemoryMode::Strict => "strict",
        MemoryMode::Interleave => "interleave",
    }
}

impl From<&Placement> for PlacementDoc {
    fn from(p: &Placement) -> Self {
        PlacementView::of_placement(p).to_doc()
    }
}

impl PlacementDoc {
    /// A placed VM with the planner's reasoning; `request` is what it was
    /// planned from.
    pub fn from_decision(d: &Decision, request: Option<&numaplace_plan::Request>) -> PlacementDoc {
        PlacementView::of_decision(d, request).to_doc()
    }

    /// The placement this entry describes; `at` is its path in the
    /// document, for errors (`placements[0]`).
    pub fn to_placement(&self, at: &str) -> Result<Placement, PlanDocError> {
        let bad = |field: &str, expected: &'static str, found: &str| PlanDocError::BadValue {
            field: format!("{at}.{field}"),
            expected,
            found: format!("\"{found}\""),
        };
        let cpu_mode = match (self.cpu_mode.as_str(), self.floating.is_empty()) {
            ("dedicated", true) | ("mixed", false) => CpuMode::Dedicated,
            ("shared", true) => CpuMode::Shared,
            ("mixed", true) => return Err(bad("floating", "the floating vCPUs of a mixed VM", "none")),
            (_, false) => {
                return Err(bad("cpu_mode", "mixed, for a VM with floating vCPUs", &self.cpu_mode));
            }
            (other, true) => return Err(bad("cpu_mode", "dedicated, shared or mixed", other)),
        };
        let memory_mode = match self.memory_mode.as_str() {
            "strict" => MemoryMode::Strict,
            "interleave" => MemoryMode::Interleave,
            other => return Err(bad("memory_mode", "strict or interleave", other)),
        };
        if self.vm.is_empty() {
            return Err(bad("vm", "a VM name", ""));
        }
        self.check_bounds(at)?;
        let vcpus = self.vcpu_pins(at)?;
        Ok(Placement {
            vm: self.vm.clone(),
            nodes: self.nodes.iter().copied().map(NodeId).collect(),
            cpu_mode,
            vcpus,
            cpuset: set(&self.cpuset),
            emulator: set(&self.emulator),
            memory: self.memory.iter().map(|m| (NodeId(m.node), m.bytes)).collect(),
            memory_bytes: self.memory_bytes,
            memory_mode,
            hugepage_bytes: self.hugepage_bytes,
            guest: GuestTopology {
                sockets: self.guest.sockets,
                dies: self.guest.dies.max(1),
                cores: self.guest.cores,
                threads: self.guest.threads,
                cells: self
                    .guest
                    .cells
                    .iter()
                    .map(|c| GuestCell {
                        id: c.id,
                        vcpus: set(&c.vcpus),
                        memory_bytes: c.memory_bytes,
                        host_node: NodeId(c.host_node),
                        distances: c.distances.clone(),
                        memory_nodes: c.memory_nodes.iter().map(|m| (NodeId(m.node), m.bytes)).collect(),
                    })
                    .collect(),
            },
            online_vcpus: self.online_vcpus,
            devices: self.devices.clone(),
            floating: self
                .floating
                .iter()
                .map(|f| Floating { node: NodeId(f.node), vcpus: set(&f.vcpus), cpus: set(&f.cpus) })
                .collect(),
            charged: self.charged.iter().map(|m| (NodeId(m.node), m.bytes)).collect(),
        })
    }

    /// The entry in the form this version writes: a version 1 entry's
    /// `vcpus` become `pins`. Call it on entries [`PlacementDoc::to_placement`]
    /// accepted, which checked that nothing is lost.
    pub fn into_current(mut self) -> PlacementDoc {
        // Only when the cells name every vCPU's node: a domain pinned by
        // hand (no cells, or cells on other nodes) keeps `vcpus`, the one
        // form that says its nodes.
        let cells_say_nodes = self.vcpus.iter().all(|v| {
            self.guest.cells.iter().find(|c| c.vcpus.contains(&v.vcpu)).is_some_and(|c| c.host_node == v.node)
        });
        if self.pins.is_empty() && !self.vcpus.is_empty() && cells_say_nodes {
            self.pins = self.vcpus.iter().map(|v| v.pu).collect();
            self.vcpus.clear();
        }
        self
    }

    /// Each vCPU's PU and node: from `pins` (version 2), the node being
    /// that of the guest cell holding the vCPU, or from `vcpus` (version 1).
    fn vcpu_pins(&self, at: &str) -> Result<Vec<VcpuPin>, PlanDocError> {
        if self.pins.is_empty() {
            // Version 1, or a domain pinned by hand: vCPUs in order, each
            // naming its node. A vCPU may sit on another node than its
            // guest cell's (a numaplace domain re-pinned by hand across
            // nodes, as an agent reports it); the host state checks each
            // node against its CPU, and `into_current` keeps such an entry
            // in this form.
            for (j, v) in self.vcpus.iter().enumerate() {
                if v.vcpu as usize != j {
                    return Err(PlanDocError::BadValue {
                        field: format!("{at}.vcpus[{j}].vcpu"),
                        expected: "the vCPUs in order from 0",
                        found: v.vcpu.to_string(),
                    });
                }
            }
            return Ok(self.vcpus.iter().map(|v| VcpuPin { vcpu: v.vcpu, pu: v.pu, node: NodeId(v.node) }).collect());
        }
        if !self.vcpus.is_empty() {
            // Both, as the fleet service answers a placement whose guest
            // cells do not name its host nodes (a domain pinned by hand):
            // `pins` for every reader, `vcpus` for the nodes. They must
            // name the same PUs; the nodes then come from `vcpus`.
            let agree =
                self.pins.len() == self.vcpus.len() && self.pins.iter().zip(&self.vcpus).all(|(p, v)| *p == v.pu);
            if !agree {
                return Err(PlanDocError::BadValue {
                    field: format!("{at}.vcpus"),
                    expected: "pins or vcpus, or both naming the same PUs in order",
                    found: "both, naming other PUs".to_string(),
                });
            }
            let mut alone = self.clone();
            alone.pins.clear();
            return alone.vcpu_pins(at);
        }
        self.pins
            .iter()
            .enumerate()
            .map(|(i, &pu)| {
                let vcpu = i as u32;
                let cell = self.guest.cells.iter().find(|c| c.vcpus.contains(&vcpu)).ok_or_else(|| {
                    PlanDocError::BadValue {
                        field: format!("{at}.guest.cells"),
                        expected: "a cell for every pinned vCPU",
                        found: format!("none holding vCPU {vcpu}"),
                    }
                })?;
                Ok(VcpuPin { vcpu, pu, node: NodeId(cell.host_node) })
            })
            .collect()
    }

    /// Refuses numbers that would size what [`PlacementDoc::to_placement`]
    /// builds, before it builds anything: CPU and vCPU numbers (a set is a
    /// bitmap up to its highest number), node numbers, list lengths, and a
    /// guest shape of more vCPUs than any host has CPU numbers (the guest
    /// check walks every one).
    fn check_bounds(&self, at: &str) -> Result<(), PlanDocError> {
        let out = |field: String, expected: &'static str, found: String| {
            Err(PlanDocError::BadValue { field: format!("{at}.{field}"), expected, found })
        };
        let count = |field: &str, len: usize, max: u32, expected: &'static str| {
            if len > max as usize {
                return out(field.to_string(), expected, format!("{len} entries"));
            }
            Ok(())
        };
        const CPU: &str = "a number below 65536";
        const NODE: &str = "a node number below 4096";
        count("nodes", self.nodes.len(), MAX_NODE, "at most 4096 nodes")?;
        count("vcpus", self.vcpus.len(), MAX_CPU, "at most 65536 vCPUs")?;
        count("pins", self.pins.len(), MAX_CPU, "at most 65536 vCPUs")?;
        count("memory", self.memory.len(), MAX_NODE, "one entry per node, at most 4096")?;
        count("guest.cells", self.guest.cells.len(), MAX_NODE, "at most 4096 cells")?;
        if let Some((j, &n)) = self.nodes.iter().enumerate().find(|(_, &n)| n >= MAX_NODE) {
            return out(format!("nodes[{j}]"), NODE, n.to_string());
        }
        for (j, v) in self.vcpus.iter().enumerate() {
            for (name, value, limit, expected) in
                [("vcpu", v.vcpu, MAX_CPU, CPU), ("pu", v.pu, MAX_CPU, CPU), ("node", v.node, MAX_NODE, NODE)]
            {
                if value >= limit {
                    return out(format!("vcpus[{j}].{name}"), expected, value.to_string());
                }
            }
        }
        if let Some((j, m)) = self.memory.iter().enumerate().find(|(_, m)| m.node >= MAX_NODE) {
            return out(format!("memory[{j}].node"), NODE, m.node.to_string());
        }
        count("charged", self.charged.len(), MAX_NODE, "one entry per node, at most 4096")?;
        if let Some((j, m)) = self.charged.iter().enumerate().find(|(_, m)| m.node >= MAX_NODE) {
            return out(format!("charged[{j}].node"), NODE, m.node.to_string());
        }
        let mut lists: Vec<(String, &[u32])> =
            vec![("pins".into(), &self.pins), ("cpuset".into(), &self.cpuset), ("emulator".into(), &self.emulator)];
        count("floating", self.floating.len(), MAX_NODE, "one entry per node, at most 4096")?;
        for (j, f) in self.floating.iter().enumerate() {
            if f.node >= MAX_NODE {
                return out(format!("floating[{j}].node"), NODE, f.node.to_string());
            }
            lists.push((format!("floating[{j}].vcpus"), &f.vcpus));
            lists.push((format!("floating[{j}].cpus"), &f.cpus));
        }
        for (j, c) in self.guest.cells.iter().enumerate() {
            for (name, value) in [("id", c.id), ("host_node", c.host_node)] {
                if value >= MAX_NODE {
                    return out(format!("guest.cells[{j}].{name}"), NODE, value.to_string());
                }
            }
            count(&format!("guest.cells[{j}].distances"), c.distances.len(), MAX_NODE, "one distance per cell")?;
            count(&format!("guest.cells[{j}].memory_nodes"), c.memory_nodes.len(), MAX_NODE, "one entry per node")?;
            if let Some((k, m)) = c.memory_nodes.iter().enumerate().find(|(_, m)| m.node >= MAX_NODE) {
                return out(format!("guest.cells[{j}].memory_nodes[{k}].node"), NODE, m.node.to_string());
            }
            lists.push((format!("guest.cells[{j}].vcpus"), &c.vcpus));
        }
        for (field, cpus) in lists {
            if let Some(c) = cpus.iter().find(|&&c| c >= MAX_CPU) {
                return out(field, CPU, c.to_string());
            }
        }
        let planned = self.pins.len().max(self.vcpus.len());
        if let Some(online) = self.online_vcpus {
            if online == 0 || online as usize >= planned {
                return out("online_vcpus".into(), "from 1 to one less than the vCPUs pinned", online.to_string());
            }
        }
        count("devices", self.devices.len(), 4096, "at most 4096 devices")?;
        if let Some((j, d)) = self.devices.iter().enumerate().find(|(_, d)| !request::is_pci_address(d)) {
            let found: String = d.chars().take(80).collect();
            return out(format!("devices[{j}]"), "a PCI address such as 0000:3b:00.0", format!("\"{found}\""));
        }
        let g = &self.guest;
        // Four u32 factors can pass u64: saturate rather than overflow.
        let shape =
            [g.sockets, g.dies, g.cores, g.threads].iter().fold(1u64, |a, &n| a.saturating_mul(u64::from(n.max(1))));
        if shape > u64::from(MAX_CPU) {
            let found = format!("{} x {} x {} x {}", g.sockets, g.dies, g.cores, g.threads);
            return out("guest".into(), "sockets x dies x cores x threads of at most 65536 vCPUs", found);
        }
        Ok(())
    }

    /// The planner's decision this entry records (placement, alternatives
    /// and notes).
    pub fn to_decision(&self, at: &str) -> Result<Decision, PlanDocError> {
        Ok(Decision {
            placement: self.to_placement(at)?.into(),
            alternatives: self
                .alternatives
                .iter()
                .map(|a| Alternative {
                    nodes: a.nodes.iter().copied().map(NodeId).collect(),
                    verdict: a.verdict.as_str().into(),
                })
                .collect(),
            notes: self.notes.iter().map(|n| Note::Text(n.text().to_string())).collect(),
        })
    }
}

impl RejectionDoc {
    /// For a CPU shortfall, names the VMs holding the host's CPUs (from
    /// [`numaplace_plan::HostState::cpu_holders`]), in the fields and the
    /// sentence; any other rejection is returned as it was.
    pub fn with_holders(mut self, r: &Rejection, holders: &[numaplace_plan::Holder]) -> RejectionDoc {
        if r.reason.is_cpu_short() && !holders.is_empty() {
            self.held_by =
                holders.iter().map(|h| HolderDoc { vm: h.vm.clone(), cpus: h.cpus.iter().collect() }).collect();
            self.reason = format!("{}; {}", self.reason, numaplace_plan::held_by(holders));
        }
        self
    }

    /// A rejection, with the request it answered.
    pub fn new(r: &Rejection, request: Option<&numaplace_plan::Request>) -> RejectionDoc {
        let mut doc = RejectionDoc {
            vm: r.vm.clone(),
            code: r.reason.code().to_string(),
            reason: r.reason.to_string(),
            resource: None,
            needed: None,
            memory_bytes: None,
            hugepage_bytes: None,
            max_nodes: None,
            best_total: None,
            nodes: Vec::new(),
            held_by: Vec::new(),
            request: request.map(RequestDoc::from),
        };
        let free = |b: &NodeFree| NodeFreeDoc { node: b.node.0, free: b.free, memory_bytes: b.memory };
        match &r.reason {
            RejectReason::CpuShort { resource, needed, max_nodes, best, best_total } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(*needed);
                doc.max_nodes = Some(*max_nodes);
                doc.best_total = Some(*best_total);
                doc.nodes = best.iter().map(free).collect();
            }
            RejectReason::MemoryShort { needed, hugepage, max_nodes, best_total, .. } => {
                doc.memory_bytes = Some(*needed);
                doc.hugepage_bytes = *hugepage;
                doc.max_nodes = Some(*max_nodes);
                doc.best_total = Some(*best_total);
            }
            RejectReason::NoJointFit { resource, needed, memory, max_nodes, best } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(*needed);
                doc.memory_bytes = Some(*memory);
                doc.max_nodes = Some(*max_nodes);
                doc.nodes = best.iter().map(free).collect();
            }
            RejectReason::MemoryKindShort { needed, best_total, .. } => {
                doc.memory_bytes = Some(*needed);
                doc.best_total = Some(*best_total);
            }
            RejectReason::Unreachable { resource, needed, memory, .. } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(*needed);
                doc.memory_bytes = Some(*memory);
            }
            RejectReason::GuestNodesUneven { guest_nodes, memory, .. } => {
                doc.needed = Some(u64::from(*guest_nodes));
                doc.memory_bytes = Some(*memory);
            }
            RejectReason::NotWholePages { memory, page } => {
                doc.memory_bytes = Some(*memory);
                doc.hugepage_bytes = Some(*page);
            }
            RejectReason::NotWholeBlocks { memory, .. } => doc.memory_bytes = Some(*memory),
            RejectReason::NoHugePagePool { size } | RejectReason::BadHugePageSize { size } => {
                doc.hugepage_bytes = Some(*size);
            }
            RejectReason::DeviceNodeFull { resource, at, .. } => {
                doc.resource = Some(resource.code().to_string());
                doc.nodes = vec![free(at)];
            }
            RejectReason::DevicesOnTooManyNodes { nodes, max_nodes } => {
                doc.needed = Some(*nodes as u64);
                doc.max_nodes = Some(*max_nodes);
            }
            RejectReason::CellsOverNodes { cells, max_nodes } => {
                doc.needed = Some(*cells as u64);
                doc.max_nodes = Some(*max_nodes);
            }
            RejectReason::CellsNoFit { resource, cells, best, .. } => {
                doc.resource = Some(resource.code().to_string());
                doc.needed = Some(cells.iter().map(|c| c.0).sum());
                doc.memory_bytes = Some(cells.iter().map(|c| c.1).sum());
                doc.nodes = best.iter().map(free).collect();
            }
            RejectReason::HotAddWide { nodes } => {
                doc.needed = Some(nodes.len() as u64);
                doc.nodes = nodes.iter().map(|n| NodeFreeDoc { node: n.0, free: 0, memory_bytes: 0 }).collect();
            }
            _ => {}
        }
        doc
    }
}

impl PlanDoc {
    /// An empty plan for a host.
    pub fn new(host: Option<String>) -> PlanDoc {
        PlanDoc {
            format: FORMAT.to_string(),
            version: VERSION,
            host,
            host_topology: None,
            reserved: None,
            accel: None,
            placements: Vec::new(),
            rejected: Vec::new(),
            held: Vec::new(),
        }
    }

    /// Parses a plan document and checks its header.
    pub fn parse(text: &str) -> Result<PlanDoc, PlanDocError> {
        let doc: PlanDoc = serde_json::from_str(text).map_err(|e| PlanDocError::Json {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if doc.format != FORMAT {
            return Err(PlanDocError::WrongFormat(doc.format));
        }
        if !(OLDEST_VERSION..=VERSION).contains(&doc.version) {
            return Err(PlanDocError::UnsupportedVersion(doc.version));
        }
        // Each version has its own form of the pinning; a document mixing
        // them was edited by hand or by a tool that misread the format.
        let (field, expected) = if doc.version == 1 {
            ("pins", "vcpus (version 1 has no pins)")
        } else {
            ("vcpus", "pins (version 2 writes the pinning as pins)")
        };
        let wrong =
            doc.placements.iter().position(|p| if doc.version == 1 { !p.pins.is_empty() } else { !p.vcpus.is_empty() });
        if let Some(i) = wrong {
            return Err(PlanDocError::BadValue {
                field: format!("placements[{i}].{field}"),
                expected,
                found: format!("{field} in a version {} document", doc.version),
            });
        }
        Ok(doc)
    }

    /// The document as people read it: the outer levels one member per
    /// line, each placement's fields on a line each, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        // Writing plain data with string keys into memory cannot fail.
        let _ = self.write_json(&mut out, false);
        String::from_utf8(out).unwrap_or_default()
    }

    /// Writes the document to `out`: laid out for people (as
    /// [`PlanDoc::to_json`]), or `compact` on one line for programs; a
    /// newline ends both. Stream it into a buffered writer: a plan of
    /// thousands of VMs is never held as one string.
    pub fn write_json<W: std::io::Write>(&self, out: W, compact: bool) -> std::io::Result<()> {
        self.write_json_with([], out, compact)
    }

    /// [`PlanDoc::write_json`] with `placed` written after the document's
    /// own placements, straight from the values they borrow: a plan's
    /// fresh decisions are never copied into document entries first, and
    /// each view is made as its entry is written.
    pub fn write_json_with<'p, W: std::io::Write>(
        &self,
        placed: impl IntoIterator<Item = PlacementView<'p>>,
        mut out: W,
        compact: bool,
    ) -> std::io::Result<()> {
        // Levels 1-3 (the document, its lists of VMs, and each VM) one
        // member per line; written by hand, as serde would lay them out.
        write::plan_doc(&mut out, self, placed, compact)?;
        out.write_all(b"\n")
    }

    /// The placements, to be recorded as host state. Stored requests are
    /// checked too, so a hand-edited state fails here rather than later.
    pub fn to_placements(&self) -> Result<Vec<Placement>, PlanDocError> {
        // Each placement's sets are bounded on their own; the document's
        // together are held to the same budget as a topology's, checked as
        // they are built so the overshoot is one placement at most.
        let mut bytes = 0usize;
        self.placements
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let at = format!("placements[{i}]");
                if let Some(r) = &p.request {
                    r.to_request(&format!("{at}.request")).map_err(PlanDocError::Request)?;
                }
                let placement = p.to_placement(&at)?;
                bytes += placement.cpuset.bytes()
                    + placement.emulator.bytes()
                    + placement.guest.cells.iter().map(|c| c.vcpus.bytes()).sum::<usize>();
                if bytes > MAX_SETS_BYTES {
                    return Err(PlanDocError::BadValue {
                        field: "placements".to_string(),
                        expected: "CPU lists that fit in 128 MiB of bitmaps (one bit per number up to each list's \
                                   highest)",
                        found: format!("more, by {at}"),
                    });
                }
                Ok(placement)
            })
            .collect()
    }
}

/// serde default: 1.
fn one() -> u32 {
    1
}

/// Whether a count is 1 (left out of documents).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_one(n: &u32) -> bool {
    *n == 1
}
