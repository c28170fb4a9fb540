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

/// Slots in use on a node by pinned or shared vCPUs (dedicated threads
/// count whole, even idle reserved siblings).
fn node_used_slots(facts: &KindFacts, state: &HostState, node: usize) -> u64 {
    let Some(nf) = facts.nodes.get(node) else { return 0 };
    let mut used = 0u64;
    for core in facts.cores.get(nf.cores.clone()).unwrap_or(&[]) {
        for &pu in core {
            used += if state.pu_taken(pu) { 1 } else { u64::from(state.pu_shared_load(pu)) };
        }
    }
    used
}

/// The no-NUMA baseline's decision on one host, changing nothing: the VM
/// floats over every thread, its memory goes to the nodes in proportion
/// to their size (what first touch by vCPUs spread evenly gives), capped
/// by what each has free and overflowing to nodes with room. As a
/// placement the fleet's state can hold: shared vCPUs, each counted on
/// the least loaded thread of the least loaded core (the scheduler fills
/// idle cores first, so the fleet's free cores and threads read as the
/// baseline's), its memory per node. Refused when the host lacks vCPU
/// slots (threads times the overcommit ratio, less the vCPUs floating)
/// or memory (the fleet's free memory: the nodes' less their reserve and
/// QEMU's overhead).
pub(crate) fn float(
    facts: &KindFacts,
    state: &HostState,
    free: Free,
    request: &Request,
) -> Result<Decision, Rejection> {
    let n = facts.nodes.len();
    let vm = &request.name;
    let refuse = |reason| Err(Rejection { vm: vm.clone(), reason });
    let floating: u64 = facts.nodes.iter().filter_map(|f| state.shared_load(f.id)).sum();
    let slots = u64::from(facts.total_slots).saturating_sub(floating);
    if slots < u64::from(request.vcpus) {
        return refuse(RejectReason::CpuShort {
            resource: Resource::SharedSlots,
            needed: u64::from(request.vcpus),
            max_nodes: n,
            best: Vec::new(),
            best_total: slots,
        });
    }
    let short = |best_total| RejectReason::MemoryShort {
        needed: request.memory_bytes,
        hugepage: None,
        max_nodes: n,
        best_total,
        overhead: state.reservations().overhead.bytes(request.memory_bytes),
    };
    if free.memory < request.memory_bytes {
        return refuse(short(free.memory));
    }
    let room: Vec<u64> = facts.nodes.iter().map(|f| state.free_memory_bytes(f.id).unwrap_or(0)).collect();
    let mut got = vec![0u64; n];
    let total = facts.total_memory.max(1);
    for i in 0..n {
        let want = (u128::from(request.memory_bytes) * u128::from(facts.nodes[i].memory) / u128::from(total)) as u64;
        got[i] = want.min(room[i]);
    }
    let mut left = request.memory_bytes - got.iter().sum::<u64>().min(request.memory_bytes);
    for i in 0..n {
        let take = (room[i] - got[i]).min(left);
        got[i] += take;
        left -= take;
    }
    if left > 0 {
        return refuse(short(room.iter().sum()));
    }
    // Each vCPU on the thread with the least loaded core, then the least
    // loaded itself, then the lowest number, counting this VM's vCPUs as
    // they are put down.
    let mut core_load: Vec<u32> = Vec::with_capacity(facts.cores.len());
    // (its own load, number, core position, node position)
    let mut threads: Vec<(u32, u32, usize, usize)> = Vec::with_capacity(facts.total_pus as usize);
    for (i, node) in facts.nodes.iter().enumerate() {
        for core in facts.cores.get(node.cores.clone()).unwrap_or(&[]) {
            let c = core_load.len();
            core_load.push(core.iter().map(|&pu| state.pu_shared_load(pu)).sum());
            threads.extend(core.iter().map(|&pu| (state.pu_shared_load(pu), pu, c, i)));
        }
    }
    if threads.is_empty() {
        return refuse(RejectReason::NoNodes);
    }
    let mut vcpus = Vec::with_capacity(request.vcpus as usize);
    for v in 0..request.vcpus {
        let Some(t) = (0..threads.len()).min_by_key(|&k| (core_load[threads[k].2], threads[k].0, threads[k].1)) else {
            break;
        };
        let (_, pu, c, i) = threads[t];
        threads[t].0 += 1;
        core_load[c] += 1;
        vcpus.push(VcpuPin { vcpu: v, pu, node: facts.nodes[i].id });
    }
    let placement = Placement {
        vm: vm.clone(),
        nodes: (0..n).filter(|&i| got[i] > 0).map(|i| facts.nodes[i].id).collect(),
        cpu_mode: CpuMode::Shared,
        vcpus,
        cpuset: threads.iter().map(|t| t.1).collect(),
        emulator: numaplace_topo::CpuSet::new(),
        memory: (0..n).filter(|&i| got[i] > 0).map(|i| (facts.nodes[i].id, got[i])).collect(),
        memory_bytes: request.memory_bytes,
        memory_mode: MemoryMode::Interleave,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology { sockets: 1, dies: 1, cores: request.vcpus, threads: 1, cells: vec![] },
    };
    Ok(Decision { placement: Arc::new(placement), alternatives: Vec::new(), notes: Vec::new() })
}

/// Busy vCPUs that share a core when `v` of them float over `cores`
/// cores: the kernel's scheduler puts a runnable task on an idle core
/// first, so none share up to one per core; beyond that each extra vCPU
/// doubles up with one that was alone.
fn pool_shared(v: u64, cores: u64) -> u64 {
    if v <= cores {
        0
    } else {
        v.min(2 * (v - cores))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use numaplace_plan::{GuestTopology, VcpuPin};
    use numaplace_topo::{Core, CpuSet, Node, Parts};

    /// 2 nodes x 2 cores x 2 threads (node0: 0-3, node1: 4-7), 4 GiB each.
    fn facts() -> KindFacts {
        grid(2, 2, 2, None)
    }

    /// `nodes` nodes of `cores` cores of `threads` threads, CPUs numbered
    /// in order, 4 GiB per node; with `per_package`, that many nodes per
    /// package and SLIT 12 inside a package, 32 across (as an EPYC).
    fn grid(nodes: u32, cores: u32, threads: u32, per_package: Option<u32>) -> KindFacts {
        let mut parts = Parts::default();
        let per_node = cores * threads;
        for n in 0..nodes {
            for c in 0..cores {
                let first = n * per_node + c * threads;
                parts.cores.push(Core {
                    package: Some(per_package.map_or(n, |k| n / k)),
                    die: None,
                    core_id: Some(c),
                    cpus: (first..first + threads).collect(),
                });
            }
            parts.nodes.push(Node {
                id: NodeId(n),
                cpus: (n * per_node..(n + 1) * per_node).collect(),
                memory_bytes: 4 << 30,
                free_bytes: None,
                hugepages: vec![],
                kind: None,
            });
        }
        if let Some(k) = per_package {
            let slit = |a: u32, b: u32| {
                if a == b {
                    10
                } else if a / k == b / k {
                    12
                } else {
                    32
                }
            };
            parts.distances = Some((0..nodes).map(|a| (0..nodes).map(|b| slit(a, b)).collect()).collect());
        }
        let t = Topology::from_parts(parts).unwrap();
        KindFacts::new(&HostKind { source: "t".into(), topology: Arc::new(t), cpu_overcommit: 1.0 })
    }

    /// A host and the state the fleet would hold for it.
    struct Held {
        host: Host,
        state: HostState,
    }

    impl Held {
        fn new(f: &KindFacts, sc: &Scoring) -> Held {
            let mut held = Held { host: Host::new(0, f), state: f.template.clone() };
            held.summarise(f, sc);
            held
        }

        fn summarise(&mut self, f: &KindFacts, sc: &Scoring) {
            let free = numaplace_fleet::Summary::of(&f.topology, &self.state).free();
            self.host.summary = self.host.summarise(f, &self.state, free, sc);
        }

        /// Places in the state, then records in the metrics, as the engine does.
        fn record(&mut self, f: &KindFacts, id: u32, p: &Placement, sc: &Scoring) -> PlacedVm {
            self.state.place(p).unwrap();
            let placed = self.host.record(f, id, p, false, sc);
            self.summarise(f, sc);
            placed
        }

        fn remove(&mut self, f: &KindFacts, id: u32, sc: &Scoring) -> bool {
            let Some(name) = self.host.remove(id) else { return false };
            self.state.remove(&name).unwrap();
            self.summarise(f, sc);
            true
        }
    }

    fn placement(vm: &str, pus: &[(u32, u32)], memory: &[(u32, u64)]) -> Placement {
        Placement {
            vm: vm.into(),
            nodes: memory.iter().map(|&(n, _)| NodeId(n)).collect(),
            cpu_mode: CpuMode::Dedicated,
            vcpus: pus
                .iter()
                .enumerate()
                .map(|(i, &(pu, n))| VcpuPin { vcpu: i as u32, pu, node: NodeId(n) })
                .collect(),
            cpuset: pus.iter().map(|&(pu, _)| pu).collect(),
            emulator: CpuSet::new(),
            memory: memory.iter().map(|&(n, b)| (NodeId(n), b)).collect(),
            memory_bytes: memory.iter().map(|&(_, b)| b).sum(),
            memory_mode: MemoryMode::Strict,
            hugepage_bytes: None,
            online_vcpus: None,
            devices: Vec::new(),
            floating: Vec::new(),
            charged: Vec::new(),
            guest: GuestTopology { sockets: 1, dies: 1, cores: 1, threads: 1, cells: vec![] },
        }
    }

    #[test]
    fn node_facts_are_the_planners_capacity() {
        // A real host with huge page pools on both nodes.
        let p = format!("{}/../../fixtures/topologies/mpibind/g4dnmetal.xml", env!("CARGO_MANIFEST_DIR"));
        let t = numaplace_read::read_source(&p).unwrap();
        let caps = numaplace_plan::node_capacity(&t, &numaplace_plan::Reservations::default());
        let f = KindFacts::new(&HostKind { source: "g4dn".into(), topology: Arc::new(t), cpu_overcommit: 1.0 });
        for (n, cap) in f.nodes.iter().zip(&caps) {
            assert_eq!((n.id, n.pus, n.memory), (cap.id, cap.threads, cap.memory));
            assert!(!cap.hugepages.is_empty());
        }
        assert_eq!(f.total_memory, caps.iter().map(|c| c.memory).sum::<u64>());
    }

    #[test]
    fn a_floating_vm_takes_idle_cores_first_in_the_fleets_state() {
        // The no-NUMA baseline's VM of 3 vCPUs on 4 cores x 2 threads: one
        // thread of each of 3 cores, so the fleet counts 1 free core and 5
        // free threads, and its memory split by node size.
        let f = facts();
        let state = f.template.clone();
        let free = numaplace_fleet::Summary::of(&f.topology, &state).free();
        let d = float(&f, &state, free, &Request::new("vm1", 3, 2 << 30)).unwrap();
        let mut st = state.clone();
        st.place(&d.placement).unwrap();
        let after = numaplace_fleet::Summary::of(&f.topology, &st).free();
        assert_eq!((after.cores, after.slots), (1, 5));
        assert_eq!(d.placement.memory, vec![(NodeId(0), 1 << 30), (NodeId(1), 1 << 30)]);
        // 6 more vCPUs: only 5 slots are left.
        let refused = float(&f, &st, after, &Request::new("vm2", 6, 1 << 30)).unwrap_err();
        assert!(matches!(refused.reason, RejectReason::CpuShort { needed: 6, best_total: 5, .. }), "{refused:?}");
    }

    #[test]
    fn hand_built_placements_are_counted() {
        let f = facts();
        let m = Model::default();
        let sc = Scoring::new(m, false, vec![(1, 1 << 30)]);
        let mut h = Held::new(&f, &sc);
        let free = h.host.summary.free();
        assert_eq!((free.cores, free.slots, free.memory), (4, 8, 8 << 30));
        // Two sibling threads of node0's first core, memory split 1+1 GiB:
        // half the memory is beside the vCPUs, both vCPUs share a core.
        let p = placement("a", &[(0, 0), (1, 0)], &[(0, 1 << 30), (1, 1 << 30)]);
        let placed = h.record(&f, 1, &p, &sc);
        assert!(!placed.single_node);
        assert_eq!(placed.locality, 0.5);
        let s = h.host.summary;
        assert_eq!((s.vcpus, s.shared_vcpus, s.free.cores, s.free.slots), (2, 2, 3, 6));
        let per_vcpu = m.memory_factor(0.5, 20, GuestView::Mirrors) * m.smt_factor(true);
        assert!((s.perf_micro as f64 / 2e6 - per_vcpu).abs() < 1e-5);
        // node0: 2 of 4 threads, 1 of 4 GiB; node1: 0 threads, 1 GiB.
        assert_eq!(s.cpu_imbalance_micro, 500_000);
        assert_eq!(s.mem_imbalance_micro, 0);
        // A VM alone on node1's first core: one node, local, not shared.
        let q = placement("b", &[(4, 1)], &[(1, 1 << 30)]);
        let placed = h.record(&f, 2, &q, &sc);
        assert!(placed.single_node);
        assert_eq!(placed.locality, 1.0);
        assert_eq!((h.host.summary.vcpus, h.host.summary.shared_vcpus), (3, 2));
        // The planner's state holds both VMs.
        let st = &h.state;
        assert_eq!(st.free_pus(NodeId(0)), Some(2));
        assert_eq!(st.free_pus(NodeId(1)), Some(3));
        assert_eq!(st.free_cores(NodeId(1)), Some(1));
        // What is free for the next VM: less b's QEMU overhead.
        assert_eq!(st.free_memory_bytes(NodeId(1)), Some((2 << 30) - numaplace_plan::vm_overhead_bytes(1 << 30)));
        // Departures give everything back.
        assert!(h.remove(&f, 1, &sc));
        assert!(h.remove(&f, 2, &sc));
        assert!(!h.remove(&f, 2, &sc));
        assert_eq!(h.host.summary, Held::new(&f, &sc).host.summary);
        assert_eq!(h.state, f.template, "the planner's state is empty again");
    }

    /// One model (issue 48): a VM alone on a host is predicted what the
    /// planner's cost says it loses, for its own told pairs, an untold
    /// pair, and two nodes' whole cores; and a told pair is predicted
    /// better than the same threads untold (the simulator charged both as
    /// contention before).
    #[test]
    fn the_replay_predicts_what_the_planner_costs() {
        // 2 nodes x 2 cores x 2 threads, SLIT 20.
        let f = grid(2, 2, 2, None);
        let sc = Scoring::new(Model::default(), false, vec![]);
        let predict = |pus: &[(u32, u32)], memory: &[(u32, u64)], threads: u32| {
            let mut h = Held::new(&f, &sc);
            let mut p = placement("a", pus, memory);
            p.guest.threads = threads;
            let mut nodes: Vec<u32> = pus.iter().map(|x| x.1).collect();
            nodes.dedup();
            p.guest.cells = nodes
                .iter()
                .enumerate()
                .map(|(k, &n)| numaplace_plan::GuestCell {
                    id: k as u32,
                    vcpus: pus.iter().enumerate().filter(|x| x.1 .1 == n).map(|x| x.0 as u32).collect(),
                    memory_bytes: memory.iter().find(|m| m.0 == n).map_or(0, |m| m.1),
                    host_node: NodeId(n),
                    distances: vec![],
                    memory_nodes: vec![],
                })
                .collect();
            let cost = numaplace_plan::cost_of(&h.state, &p).total() as f64 / 1000.0;
            h.record(&f, 1, &p, &sc);
            (1.0 - h.host.summary.perf_micro as f64 / (pus.len() as f64 * 1e6), cost)
        };
        // One core's two threads (PUs 0 and 1), told and untold.
        let (told, told_cost) = predict(&[(0, 0), (1, 0)], &[(0, 1 << 30)], 2);
        let (untold, untold_cost) = predict(&[(0, 0), (1, 0)], &[(0, 1 << 30)], 1);
        assert!((told - told_cost).abs() < 0.001, "{told} {told_cost}");
        assert!((untold - untold_cost).abs() < 0.001, "{untold} {untold_cost}");
        assert!(told < untold);
        // Whole cores of both nodes, cells of three would be needed to
        // leave out the small cells' floor: cells of two keep it, in both.
        let (two, two_cost) = predict(&[(0, 0), (2, 0), (4, 1), (6, 1)], &[(0, 1 << 30), (1, 1 << 30)], 1);
        assert!((two - two_cost).abs() < 0.002, "{two} {two_cost}");
        assert!(two < told);
    }

    #[test]
    fn spanning_packages_predicts_worse_than_spanning_nodes_of_one_package() {
        // 2 packages x 2 nodes x 3 single-thread cores (cells of three:
        // no small cells' floor).
        let f = grid(4, 3, 1, Some(2));
        let sc = Scoring::new(Model::default(), false, vec![]);
        let perf = |nodes: [u32; 2], interleave: bool| {
            let mut h = Held::new(&f, &sc);
            let pus: Vec<(u32, u32)> =
                nodes.iter().flat_map(|&n| [(n * 3, n), (n * 3 + 1, n), (n * 3 + 2, n)]).collect();
            let mut p = placement("a", &pus, &[(nodes[0], 1 << 30), (nodes[1], 1 << 30)]);
            if interleave {
                p.memory_mode = MemoryMode::Interleave;
            }
            h.record(&f, 1, &p, &sc);
            h.host.summary.perf_micro as f64 / 6e6
        };
        // Mirrored cells: only the cross-cell share goes remote.
        let (near, far) = (perf([0, 1], false), perf([0, 2], false));
        assert!(near < 1.0 && far < near, "near {near}, far {far}");
        // Interleaved pages: half of every vCPU's accesses go remote.
        let (near_i, far_i) = (perf([0, 1], true), perf([0, 2], true));
        assert!(far_i < near_i && near_i < near, "{near_i} {far_i}");
        let m = Model::default();
        let want = m.speed((1.0 + m.remote_cost_at(32)) / 2.0, GuestView::Mirrors);
        assert!((far_i - want).abs() < 1e-4, "{far_i} against {want}");
    }
}
