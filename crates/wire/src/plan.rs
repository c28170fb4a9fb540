//! The plan JSON (`numaplace plan --format json`), version 2, and the VM
//! requests it starts from (the [`request`] module).
//!
//! A plan document is both an output and an input: `--state FILE` reads it
//! back as the VMs already on the host, so plans chain. Everything a
//! [`Placement`] holds is therefore written out and read back exactly;
//! the alternatives, notes and the request are for people and for replay
//! (`docs/formats/plan-json.md`).
//!
//! The document types are here; the conversions between them and the
//! planner's values (placement, rejection, whole plan) are in `convert`.

mod convert;
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

use convert::*;

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

/// A VM and the host CPUs it holds: the document's form of
/// [`numaplace_plan::Holder`], one VM's line of the one map of CPU
/// holders ([`numaplace_plan::CpuMap::holders`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderDoc {
    /// The VM.
    pub vm: String,
    /// Its CPUs.
    pub cpus: Vec<u32>,
}

impl From<&numaplace_plan::Holder> for HolderDoc {
    fn from(h: &numaplace_plan::Holder) -> HolderDoc {
        HolderDoc { vm: h.vm.clone(), cpus: h.cpus.iter().collect() }
    }
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

/// serde default: 1.
fn one() -> u32 {
    1
}

/// Whether a count is 1 (left out of documents).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_one(n: &u32) -> bool {
    *n == 1
}
