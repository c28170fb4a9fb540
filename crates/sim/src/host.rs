//! One host during a replay: what the metrics need beside the fleet's
//! own state of the host (how many vCPUs run on each thread, where each
//! VM's vCPUs and memory are, and the VMs the no-NUMA baseline floats
//! over the whole host), summarised after every change.
//!
//! What a host's VMs take (PUs, shared load, memory per node) is the
//! planner's `HostState`, held by the fleet crate's inventory
//! ([`numaplace_fleet::Fleet`]) as the service holds it: the replay places
//! and removes VMs there, and these metrics read it. The per-node facts
//! (cores, memory for VMs) are the planner's capacity
//! ([`numaplace_plan::node_capacity`]), never worked out a second way.
//!
//! The predicted throughput of a VM depends on its neighbours (they share
//! cores and each node's memory bandwidth), so a summary recomputes every
//! VM's factor: O(threads + VMs x nodes it touches) per change.
//!
//! The no-NUMA baseline's placement (`float`) is in the `baseline` child
//! module; the unit tests are in `tests`.

use crate::fleet::HostKind;
use crate::model::{Access, GuestView, Model, RANGES};
use numaplace_fleet::Free;
use numaplace_plan::{
    CpuMode, Decision, GuestTopology, HostState, MemoryMode, Placement, RejectReason, Rejection, Request, Resource,
    VcpuPin,
};
use numaplace_topo::{NodeId, Topology};
use std::collections::BTreeMap;
use std::sync::Arc;

mod baseline;

pub(crate) use baseline::float;
use baseline::*;

/// Fixed-point scale for factors summed over many vCPUs: integers keep
/// sums exact when VMs come and go, so runs are bit-for-bit repeatable.
pub(crate) const MICRO: u64 = 1_000_000;

/// Model variants a sensitivity study follows beside the base model: each
/// parameter of [`RANGES`] at its low and at its high end.
pub(crate) const VARIANTS: usize = 2 * RANGES.len();

/// What the replay scores placements with: the model, the variants of a
/// sensitivity study (none unless asked), and the trace's common VM sizes
/// for stranded capacity.
#[derive(Clone, Debug)]
pub(crate) struct Scoring {
    pub(crate) model: Model,
    /// Empty, or exactly [`VARIANTS`] models in [`RANGES`] order, low
    /// then high.
    pub(crate) variants: Vec<Model>,
    /// (vCPUs, memory) of the trace's common sizes, smallest first.
    pub(crate) sizes: Vec<(u32, u64)>,
}

impl Scoring {
    pub(crate) fn new(model: Model, sensitivity: bool, sizes: Vec<(u32, u64)>) -> Scoring {
        let variants = if sensitivity {
            RANGES.iter().flat_map(|r| [r.apply(&model, r.low), r.apply(&model, r.high)]).collect()
        } else {
            Vec::new()
        };
        Scoring { model, variants, sizes }
    }
}

/// Per-node facts of a host kind.
#[derive(Clone, Debug)]
pub(crate) struct NodeFacts {
    pub(crate) id: NodeId,
    /// CPU threads for VMs ([`numaplace_plan::NodeCapacity::threads`]).
    pub(crate) pus: u32,
    /// vCPU slots: threads times the overcommit ratio, rounded down.
    pub(crate) slots: u32,
    /// Memory for VMs ([`numaplace_plan::NodeCapacity::memory`]).
    pub(crate) memory: u64,
    /// Positions of its cores in `KindFacts::cores`.
    pub(crate) cores: std::ops::Range<usize>,
    /// Cores whose memory bandwidth the node's budget counts: its own, or
    /// for a node with memory and no CPUs the mean of the CPU nodes'.
    budget_cores: u32,
}

/// Facts shared by every host of one kind.
#[derive(Clone, Debug)]
pub(crate) struct KindFacts {
    pub(crate) topology: Arc<Topology>,
    pub(crate) overcommit: f64,
    /// Shared (floating, overcommitted) vCPUs instead of pinned ones.
    pub(crate) shared: bool,
    pub(crate) nodes: Vec<NodeFacts>,
    /// Online threads of each core, cores grouped by node.
    pub(crate) cores: Vec<Vec<u32>>,
    /// Thread number -> node position.
    pub(crate) pu_node: Vec<Option<usize>>,
    /// Thread number -> core position.
    pu_core: Vec<Option<u32>>,
    /// SLIT distances between node positions.
    distance: Vec<Vec<u32>>,
    pub(crate) total_pus: u32,
    pub(crate) total_slots: u32,
    pub(crate) total_memory: u64,
    /// Nodes that have CPUs.
    pub(crate) cpu_nodes: usize,
    /// The kind's empty planner state, copied for each host.
    pub(crate) template: HostState,
}

impl KindFacts {
    pub(crate) fn new(kind: &HostKind) -> KindFacts {
        let t = &kind.topology;
        let oc = kind.cpu_overcommit;
        let template = HostState::new(t);
        let mut cores = Vec::new();
        let mut nodes = Vec::with_capacity(template.nodes().len());
        // What each node can give VMs is the planner's one definition.
        for (spec, cap) in template.nodes().zip(template.capacity()) {
            let start = cores.len();
            let pus = cap.threads;
            cores.extend(spec.cores.iter().cloned());
            nodes.push(NodeFacts {
                id: spec.id,
                pus,
                slots: (f64::from(pus) * oc).floor() as u32,
                memory: cap.memory,
                cores: start..cores.len(),
                budget_cores: (cores.len() - start) as u32,
            });
        }
        let cpu_nodes: Vec<u32> = nodes.iter().filter(|n| n.pus > 0).map(|n| n.budget_cores).collect();
        let mean_cores = (cpu_nodes.iter().sum::<u32>()).checked_div(cpu_nodes.len() as u32).unwrap_or(1).max(1);
        for n in nodes.iter_mut().filter(|n| n.pus == 0) {
            n.budget_cores = mean_cores;
        }
        let pu_node: Vec<Option<usize>> = (0..template.pu_limit()).map(|pu| template.pu_node(pu as u32)).collect();
        let mut pu_core = vec![None; pu_node.len()];
        for (c, core) in cores.iter().enumerate() {
            for &pu in core {
                if let Some(slot) = pu_core.get_mut(pu as usize) {
                    *slot = Some(c as u32);
                }
            }
        }
        // The planner's node order is by id, as the topology's; positions
        // are looked up rather than assumed.
        let index: Vec<Option<usize>> = nodes.iter().map(|n| t.node_index(n.id)).collect();
        let rows = t.distance_rows();
        let distance = index
            .iter()
            .map(|a| {
                index
                    .iter()
                    .map(|b| match (a, b) {
                        (Some(a), Some(b)) => rows.get(*a).and_then(|r| r.get(*b)).copied().unwrap_or(20),
                        _ => 20,
                    })
                    .collect()
            })
            .collect();
        KindFacts {
            topology: Arc::clone(t),
            overcommit: oc,
            shared: oc > 1.0,
            total_pus: nodes.iter().map(|x| x.pus).sum(),
            total_slots: nodes.iter().map(|x| x.slots).sum(),
            total_memory: nodes.iter().map(|x| x.memory).sum(),
            cpu_nodes: cpu_nodes.len(),
            nodes,
            cores,
            pu_node,
            pu_core,
            distance,
            template,
        }
    }

    fn node_pos(&self, id: NodeId) -> Option<usize> {
        self.nodes.binary_search_by_key(&id, |n| n.id).ok()
    }

    fn distance(&self, i: usize, j: usize) -> u32 {
        self.distance.get(i).and_then(|r| r.get(j)).copied().unwrap_or(10)
    }
}

/// What the metrics need from one host, kept as exact integers so totals
/// can be updated by subtracting a host's old summary and adding its new
/// one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) vms: u64,
    pub(crate) vcpus: u64,
    /// vCPUs whose core runs another busy vCPU.
    pub(crate) shared_vcpus: u64,
    /// Sum over vCPUs of the predicted throughput, millionths.
    pub(crate) perf_micro: u64,
    /// The same under each sensitivity variant (zero when none is asked).
    pub(crate) perf_variants: [u64; VARIANTS],
    /// Sum over vCPUs of their VM's remote share of accesses, millionths.
    pub(crate) remote_micro: u64,
    /// vCPUs whose node's memory is over its bandwidth budget.
    pub(crate) congested_vcpus: u64,
    /// 1 when the host has VMs and two or more nodes to compare.
    pub(crate) imbalance_hosts: u64,
    /// max-min node CPU use, millionths (0 unless `imbalance_hosts`).
    pub(crate) cpu_imbalance_micro: u64,
    /// The same for memory.
    pub(crate) mem_imbalance_micro: u64,
    /// Free vCPU slots of a host no common VM size fits.
    pub(crate) stranded_slots: u64,
    /// Free memory of a host no common VM size fits.
    pub(crate) stranded_memory: u64,
    /// vCPU slots in use (dedicated threads count whole).
    pub(crate) used_slots: u64,
    pub(crate) used_memory: u64,
    /// What the host has free, as the fleet counts it (its summary of the
    /// planner's state): the ranking key and the stranded test read it.
    pub(crate) free: Free,
}

impl Summary {
    /// The host's free cores, slots and memory.
    #[cfg(test)]
    pub(crate) fn free(&self) -> Free {
        self.free
    }

    pub(crate) fn add(&mut self, o: &Summary) {
        self.vms += o.vms;
        self.vcpus += o.vcpus;
        self.shared_vcpus += o.shared_vcpus;
        self.perf_micro += o.perf_micro;
        for (a, b) in self.perf_variants.iter_mut().zip(&o.perf_variants) {
            *a += b;
        }
        self.remote_micro += o.remote_micro;
        self.congested_vcpus += o.congested_vcpus;
        self.imbalance_hosts += o.imbalance_hosts;
        self.cpu_imbalance_micro += o.cpu_imbalance_micro;
        self.mem_imbalance_micro += o.mem_imbalance_micro;
        self.stranded_slots += o.stranded_slots;
        self.stranded_memory += o.stranded_memory;
        self.used_slots += o.used_slots;
        self.used_memory += o.used_memory;
    }

    pub(crate) fn sub(&mut self, o: &Summary) {
        self.vms -= o.vms;
        self.vcpus -= o.vcpus;
        self.shared_vcpus -= o.shared_vcpus;
        self.perf_micro -= o.perf_micro;
        for (a, b) in self.perf_variants.iter_mut().zip(&o.perf_variants) {
            *a -= b;
        }
        self.remote_micro -= o.remote_micro;
        self.congested_vcpus -= o.congested_vcpus;
        self.imbalance_hosts -= o.imbalance_hosts;
        self.cpu_imbalance_micro -= o.cpu_imbalance_micro;
        self.mem_imbalance_micro -= o.mem_imbalance_micro;
        self.stranded_slots -= o.stranded_slots;
        self.stranded_memory -= o.stranded_memory;
        self.used_slots -= o.used_slots;
        self.used_memory -= o.used_memory;
    }
}

/// How a VM's vCPUs reach its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// Guest cells mirror the host nodes: each vCPU's accesses go to its
    /// own cell's memory, but for the model's cross-cell share.
    Cells,
    /// Pages spread over the VM's nodes (interleaved, first touch by
    /// floating vCPUs, or a guest that cannot see its cells): a vCPU's
    /// accesses follow the memory.
    Spread,
}

/// Where a VM's vCPUs run and its memory lies, as the model needs it.
#[derive(Clone, Debug)]
struct Shape {
    /// vCPUs per node position (a floating VM's in proportion to the
    /// nodes' threads).
    vcpu_nodes: Vec<(usize, f64)>,
    /// Memory per node position.
    memory: Vec<(usize, u64)>,
    pattern: Pattern,
    view: GuestView,
}

impl Shape {
    /// The accesses of a vCPU on node position `i`, into `out`.
    /// The accesses of a vCPU on node position `i`, into `out`, and the
    /// node position of each into `nodes`.
    fn accesses(
        &self,
        facts: &KindFacts,
        model: &Model,
        i: usize,
        congestion: &[f64],
        out: &mut Vec<Access>,
        nodes: &mut Vec<usize>,
    ) {
        out.clear();
        nodes.clear();
        let has_vcpus = |j: usize| self.vcpu_nodes.iter().any(|&(n, v)| n == j && v > 0.0);
        // The planner's model says where the accesses go (one function for
        // both: issue 48); the replay adds each node's congestion.
        model.access_shares(i, self.pattern == Pattern::Cells, &self.memory, has_vcpus, |j, share| {
            out.push(Access {
                share,
                distance: facts.distance(i, j),
                congestion: congestion.get(j).copied().unwrap_or(1.0),
            });
            nodes.push(j);
        });
    }

    /// The speed of a vCPU on node position `i` whose accesses take
    /// `stretch`: the guest view's floor, and a small cell's.
    fn speed(&self, model: &Model, i: usize, stretch: f64) -> f64 {
        let cell = self.vcpu_nodes.iter().find(|v| v.0 == i).map_or(0, |v| v.1.round() as usize);
        let spans = if self.pattern == Pattern::Cells { self.vcpu_nodes.len() } else { 1 };
        model.cell_speed(stretch, self.view, cell, spans)
    }

    /// Share of the VM's accesses that are local.
    fn locality(&self, facts: &KindFacts, model: &Model) -> f64 {
        let all: f64 = self.vcpu_nodes.iter().map(|v| v.1).sum();
        if all <= 0.0 {
            return 1.0;
        }
        let (mut out, mut nodes) = (Vec::new(), Vec::new());
        let mut local = 0.0;
        for &(i, v) in &self.vcpu_nodes {
            self.accesses(facts, model, i, &[], &mut out, &mut nodes);
            local += v / all * out.iter().zip(&nodes).filter(|(_, &j)| j == i).map(|(a, _)| a.share).sum::<f64>();
        }
        local.clamp(0.0, 1.0)
    }
}

/// What the metrics counted for a placed VM, to take it back; what the
/// VM takes from the host is in the planner's state.
#[derive(Clone, Debug)]
struct Record {
    /// Its name in the planner's state.
    name: String,
    /// Threads each vCPU is counted against (pinned or shared).
    pins: Vec<u32>,
    shape: Shape,
    /// Remote share of its accesses, millionths.
    remote_micro: u64,
    /// Floating over the whole host (no-numa).
    floating: bool,
    /// The guest was told its threads (`threads` > 1): its own sibling
    /// pairs cost it the model's own-pair share of the sibling loss.
    told: bool,
    vcpus: u32,
}

/// What the metrics learn about a VM when it is placed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlacedVm {
    /// All its vCPUs and memory on one node.
    pub single_node: bool,
    /// Share of its memory accesses that are local.
    pub locality: f64,
}

/// One host's occupation, beside the fleet's state of it.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub(crate) kind: usize,
    /// By thread number: vCPUs counted here (pinned or shared).
    load: Vec<u16>,
    /// Memory in use per node position, the floating VMs' included (the
    /// state holds the same bytes, plus QEMU's overhead).
    node_memory: Vec<u64>,
    floating_vcpus: u64,
    vms: BTreeMap<u32, Record>,
    pub(crate) summary: Summary,
}

impl Host {
    /// An empty host; `summarise` fills its summary.
    pub(crate) fn new(kind: usize, facts: &KindFacts) -> Host {
        let n = facts.pu_node.len();
        Host {
            kind,
            load: vec![0; n],
            node_memory: vec![0; facts.nodes.len()],
            floating_vcpus: 0,
            vms: BTreeMap::new(),
            summary: Summary::default(),
        }
    }

    /// Records in the metrics a placement the fleet's state has just
    /// taken (the planner's, or one built by hand in tests); `hide` shows
    /// the guest one node whatever it spans (a hypervisor without vNUMA).
    /// The caller summarises the host afterwards.
    pub(crate) fn record(
        &mut self,
        facts: &KindFacts,
        id: u32,
        p: &Placement,
        hide: bool,
        scoring: &Scoring,
    ) -> PlacedVm {
        // Where the vCPUs and memory went, by node position.
        let n = facts.nodes.len();
        let mut vcpus_on = vec![0u32; n];
        let mut pins = Vec::with_capacity(p.vcpus.len());
        for pin in &p.vcpus {
            if let Some(i) = facts.pu_node.get(pin.pu as usize).copied().flatten() {
                vcpus_on[i] += 1;
            }
            pins.push(pin.pu);
        }
        let mut memory: Vec<(usize, u64)> = Vec::new();
        for (id, bytes) in &p.memory {
            if let Some(i) = facts.node_pos(*id) {
                memory.push((i, *bytes));
            }
        }
        let used_nodes = (0..n).filter(|&i| vcpus_on[i] > 0 || memory.iter().any(|&(j, b)| j == i && b > 0)).count();
        // What the guest is shown: the planner's cells, each on the host
        // node it names, unless hidden.
        let cells = p.guest.cells.len().max(1) as u32;
        let view = if hide {
            GuestView::of_counts(1, used_nodes as u32)
        } else if p.guest.cells.is_empty() || cells as usize == used_nodes {
            GuestView::Mirrors
        } else {
            GuestView::of_counts(cells, used_nodes as u32)
        };
        let pattern = if p.memory_mode == MemoryMode::Interleave || view != GuestView::Mirrors {
            Pattern::Spread
        } else {
            Pattern::Cells
        };
        let shape = Shape {
            vcpu_nodes: (0..n).filter(|&i| vcpus_on[i] > 0).map(|i| (i, f64::from(vcpus_on[i]))).collect(),
            memory,
            pattern,
            view,
        };
        let locality = shape.locality(facts, &scoring.model);
        for &pu in &pins {
            if let Some(l) = self.load.get_mut(pu as usize) {
                *l = l.saturating_add(1);
            }
        }
        for &(i, b) in &shape.memory {
            self.node_memory[i] += b;
        }
        self.vms.insert(
            id,
            Record {
                name: p.vm.clone(),
                pins,
                remote_micro: ((1.0 - locality) * MICRO as f64).round() as u64,
                shape,
                floating: false,
                told: p.guest.threads > 1,
                vcpus: p.vcpus.len() as u32,
            },
        );
        PlacedVm { single_node: used_nodes == 1, locality }
    }

    /// Records in the metrics a VM the no-NUMA baseline floats (its
    /// placement made by [`float`], taken by the fleet's state): its
    /// vCPUs spread over the nodes in proportion to their threads, its
    /// pages where the placement put them, the guest shown one node.
    pub(crate) fn record_float(&mut self, facts: &KindFacts, id: u32, p: &Placement, scoring: &Scoring) -> PlacedVm {
        let n = facts.nodes.len();
        let mut got = vec![0u64; n];
        for (node, bytes) in &p.memory {
            if let Some(i) = facts.node_pos(*node) {
                got[i] += bytes;
            }
        }
        let pus = f64::from(facts.total_pus.max(1));
        let vcpus = f64::from(p.vcpus.len() as u32);
        let shape = Shape {
            vcpu_nodes: (0..n)
                .filter(|&i| facts.nodes[i].pus > 0)
                .map(|i| (i, vcpus * f64::from(facts.nodes[i].pus) / pus))
                .collect(),
            memory: (0..n).filter(|&i| got[i] > 0).map(|i| (i, got[i])).collect(),
            pattern: Pattern::Spread,
            view: if facts.cpu_nodes > 1 { GuestView::Hidden } else { GuestView::Mirrors },
        };
        let locality = shape.locality(facts, &scoring.model);
        let used_nodes = (0..n).filter(|&i| facts.nodes[i].pus > 0 || got[i] > 0).count();
        for &(i, b) in &shape.memory {
            self.node_memory[i] += b;
        }
        self.floating_vcpus += p.vcpus.len() as u64;
        self.vms.insert(
            id,
            Record {
                name: p.vm.clone(),
                pins: Vec::new(),
                remote_micro: ((1.0 - locality) * MICRO as f64).round() as u64,
                shape,
                floating: true,
                told: false,
                vcpus: p.vcpus.len() as u32,
            },
        );
        PlacedVm { single_node: used_nodes == 1, locality }
    }

    /// Gives back what a VM held in the metrics; its name in the fleet's
    /// state (which the caller removes it from), `None` when it is not
    /// here. The caller summarises the host afterwards.
    pub(crate) fn remove(&mut self, id: u32) -> Option<String> {
        let r = self.vms.remove(&id)?;
        for &(i, b) in &r.shape.memory {
            if let Some(m) = self.node_memory.get_mut(i) {
                *m = m.saturating_sub(b);
            }
        }
        if r.floating {
            self.floating_vcpus -= u64::from(r.vcpus);
        } else {
            for &pu in &r.pins {
                if let Some(l) = self.load.get_mut(pu as usize) {
                    *l = l.saturating_sub(1);
                }
            }
        }
        Some(r.name)
    }

    /// Per node: (CPU use, memory use) as shares, `None` where the node
    /// has no CPUs or no memory.
    pub(crate) fn node_use(&self, facts: &KindFacts, state: &HostState) -> Vec<(Option<f64>, Option<f64>)> {
        let float_share = self.floating_vcpus as f64 / f64::from(facts.total_slots.max(1));
        facts
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let cpu = (node.pus > 0).then(|| {
                    let used = node_used_slots(facts, state, i);
                    if self.floating_vcpus > 0 {
                        float_share
                    } else {
                        used as f64 / f64::from(node.slots.max(1))
                    }
                });
                let mem = (node.memory > 0).then(|| self.node_memory[i] as f64 / node.memory as f64);
                (cpu, mem)
            })
            .collect()
    }

    /// The metrics of this host now, from the fleet's state of it and
    /// what the fleet counts free there.
    pub(crate) fn summarise(&self, facts: &KindFacts, state: &HostState, free: Free, scoring: &Scoring) -> Summary {
        let mut s = Summary { vms: self.vms.len() as u64, free, ..Summary::default() };
        let (mut cpu_min, mut cpu_max, mut mem_min, mut mem_max) = (u64::MAX, 0u64, u64::MAX, 0u64);
        let (mut cpu_nodes, mut mem_nodes) = (0, 0);
        let float_util = self.floating_vcpus * MICRO / u64::from(facts.total_slots.max(1));
        // Busy vCPUs per core, and per node the share of its pooled
        // (shared-mode) vCPUs that double up on a core.
        let mut core_load = vec![0u64; facts.cores.len()];
        let mut pool_share = vec![0.0f64; facts.nodes.len()];
        for (i, node) in facts.nodes.iter().enumerate() {
            let mut used = 0u64;
            let mut pool_vcpus = 0u64;
            for c in node.cores.clone() {
                let core = &facts.cores[c];
                let mut load = 0u64;
                for &pu in core {
                    load += u64::from(self.load.get(pu as usize).copied().unwrap_or(0));
                    used += if state.pu_taken(pu) { 1 } else { u64::from(state.pu_shared_load(pu)) };
                }
                core_load[c] = load;
                s.vcpus += load;
                if facts.shared {
                    pool_vcpus += load;
                } else if load >= 2 {
                    s.shared_vcpus += load;
                }
            }
            if facts.shared {
                let shared = pool_shared(pool_vcpus, node.cores.len() as u64);
                s.shared_vcpus += shared;
                if pool_vcpus > 0 {
                    pool_share[i] = shared as f64 / pool_vcpus as f64;
                }
            }
            s.used_memory += self.node_memory[i];
            if self.floating_vcpus == 0 {
                s.used_slots += used;
            }
            if node.pus > 0 {
                let u = if self.floating_vcpus > 0 { float_util } else { used * MICRO / u64::from(node.slots.max(1)) };
                cpu_min = cpu_min.min(u);
                cpu_max = cpu_max.max(u);
                cpu_nodes += 1;
            }
            if let Some(u) = (self.node_memory[i] * MICRO).checked_div(node.memory) {
                mem_min = mem_min.min(u);
                mem_max = mem_max.max(u);
                mem_nodes += 1;
            }
        }
        let mut float_share = 0.0;
        if self.floating_vcpus > 0 {
            // Floating vCPUs: the host is one pool; the kernel's scheduler
            // puts a busy vCPU on an idle core first, so siblings are
            // shared only beyond one vCPU per core.
            let v = self.floating_vcpus;
            let c = facts.cores.len() as u64;
            let shared = pool_shared(v, c);
            float_share = shared as f64 / v as f64;
            s.vcpus += v;
            s.shared_vcpus += shared;
            s.used_slots += v;
        }
        // Stranded: free capacity of a host that no common size fits, by
        // the fleet's one test.
        if free.stranded(&scoring.sizes) {
            s.stranded_slots = u64::from(free.slots);
            s.stranded_memory = free.memory;
        }
        if s.vms > 0 && cpu_nodes >= 2 {
            s.cpu_imbalance_micro = cpu_max - cpu_min;
        }
        if s.vms > 0 && mem_nodes >= 2 {
            s.mem_imbalance_micro = mem_max - mem_min;
        }
        s.imbalance_hosts = u64::from(s.vms > 0 && (cpu_nodes >= 2 || mem_nodes >= 2));
        if self.vms.is_empty() {
            return s;
        }
        // Each VM's vCPUs per node, split into those alone on their core
        // and those doubling up: the same for every model.
        let (split, remote) = self.splits(facts, &core_load, &pool_share, float_share);
        s.remote_micro += remote;
        let mut scratch = Scratch::default();
        let (perf, congested) = self.perf(facts, &scoring.model, &split, &mut scratch);
        s.perf_micro = perf;
        s.congested_vcpus = congested;
        for (k, m) in scoring.variants.iter().enumerate().take(VARIANTS) {
            s.perf_variants[k] = self.perf(facts, m, &split, &mut scratch).0;
        }
        s
    }

    /// Each VM's vCPUs per node, split into those alone on their core,
    /// those doubling up with another VM's, and the VM's own pairs (a
    /// guest told its threads); and the VMs' remote vCPU share summed
    /// over their vCPUs. `core_load` is busy vCPUs per core, `pool_share`
    /// per node the share of pooled vCPUs that double up, `float_share`
    /// the same over the host for floating VMs.
    fn splits(
        &self,
        facts: &KindFacts,
        core_load: &[u64],
        pool_share: &[f64],
        float_share: f64,
    ) -> (Vec<Vec<Split>>, u64) {
        let mut split: Vec<Vec<Split>> = Vec::with_capacity(self.vms.len());
        let mut remote = 0u64;
        let mut own: Vec<(u32, u64)> = Vec::new();
        for r in self.vms.values() {
            let mut per = vec![(0.0, 0.0, 0.0); r.shape.vcpu_nodes.len()];
            if r.floating {
                for (k, &(_, v)) in r.shape.vcpu_nodes.iter().enumerate() {
                    per[k] = (v * (1.0 - float_share), v * float_share, 0.0);
                }
            } else {
                // The VM's own vCPUs per core: a core whose every busy
                // thread is this VM's, the guest told its threads, is an
                // own pair (issue 48), not contention.
                own.clear();
                if r.told {
                    for &pu in &r.pins {
                        let Some(c) = facts.pu_core.get(pu as usize).copied().flatten() else { continue };
                        match own.iter_mut().find(|o| o.0 == c) {
                            Some(o) => o.1 += 1,
                            None => own.push((c, 1)),
                        }
                    }
                }
                for &pu in &r.pins {
                    let Some(i) = facts.pu_node.get(pu as usize).copied().flatten() else { continue };
                    let Some(k) = r.shape.vcpu_nodes.iter().position(|&(n, _)| n == i) else { continue };
                    if facts.shared {
                        let f = pool_share[i];
                        per[k].0 += 1.0 - f;
                        per[k].1 += f;
                    } else {
                        let core = facts.pu_core.get(pu as usize).copied().flatten();
                        let load = core.map_or(0, |c| core_load[c as usize]);
                        if load < 2 {
                            per[k].0 += 1.0;
                        } else if core.is_some_and(|c| own.iter().any(|o| o.0 == c && o.1 == load)) {
                            per[k].2 += 1.0;
                        } else {
                            per[k].1 += 1.0;
                        }
                    }
                }
            }
            remote += u64::from(r.vcpus) * r.remote_micro;
            split.push(per);
        }
        (split, remote)
    }

    /// Predicted throughput summed over the host's vCPUs (millionths)
    /// under one model, and the vCPUs on nodes over their bandwidth.
    fn perf(&self, facts: &KindFacts, model: &Model, split: &[Vec<Split>], sc: &mut Scratch) -> (u64, u64) {
        let n = facts.nodes.len();
        sc.demand.clear();
        sc.demand.resize(n, 0.0);
        sc.congestion.clear();
        sc.congestion.resize(n, 1.0);
        let smt = model.smt_factor(true);
        let pair = model.own_pair_factor(true);
        sc.speeds.clear();
        // Uncongested speeds give each node's demand; a vCPU slowed by a
        // busy sibling asks for less.
        for (r, per) in self.vms.values().zip(split) {
            for (&(i, _), &(alone, doubled, paired)) in r.shape.vcpu_nodes.iter().zip(per) {
                r.shape.accesses(facts, model, i, &[], &mut sc.accesses, &mut sc.nodes);
                let speed = r.shape.speed(model, i, model.memory_stretch(&sc.accesses));
                sc.speeds.push(speed);
                let traffic = (alone + smt * doubled + pair * paired) * model.traffic(speed);
                for (a, &j) in sc.accesses.iter().zip(&sc.nodes) {
                    sc.demand[j] += traffic * a.share;
                }
            }
        }
        for (j, node) in facts.nodes.iter().enumerate() {
            sc.congestion[j] = Model::congestion(sc.demand[j], model.node_budget(node.budget_cores));
        }
        // Only VMs with memory on a congested node run slower than their
        // uncongested speed.
        let (mut perf, mut congested) = (0.0f64, 0.0f64);
        let mut k = 0;
        for (r, per) in self.vms.values().zip(split) {
            let slowed = r.shape.memory.iter().any(|&(j, _)| sc.congestion[j] > 1.0);
            for (&(i, _), &(alone, doubled, paired)) in r.shape.vcpu_nodes.iter().zip(per) {
                let speed = if slowed {
                    r.shape.accesses(facts, model, i, &sc.congestion, &mut sc.accesses, &mut sc.nodes);
                    congested += alone + doubled + paired;
                    r.shape.speed(model, i, model.memory_stretch(&sc.accesses))
                } else {
                    sc.speeds[k]
                };
                k += 1;
                perf += speed * (alone + smt * doubled + pair * paired);
            }
        }
        ((perf * MICRO as f64).round() as u64, congested.round() as u64)
    }
}
/// A VM's vCPUs on one node: alone on their core, sharing it with
/// another VM's (or an untold own) busy thread, and on their own told
/// sibling pairs.
type Split = (f64, f64, f64);

/// Buffers reused while one summary is computed.
#[derive(Default)]
struct Scratch {
    demand: Vec<f64>,
    /// Each VM's uncongested speed per node of its vCPUs, in order.
    speeds: Vec<f64>,
    congestion: Vec<f64>,
    accesses: Vec<Access>,
    nodes: Vec<usize>,
}

/// The name a trace VM has in a host's planner state.
pub(crate) fn vm_name(id: u32) -> String {
    format!("vm{id}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
