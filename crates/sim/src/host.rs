//! One host during a replay: the planner's own state of the host (what
//! its VMs take, by PU and node), plus what the metrics need beside it
//! (how many vCPUs run on each thread and their memory factors, and the
//! VMs the no-NUMA baseline floats over the whole host), summarised after
//! every change in O(threads + nodes).
//!
//! The per-node facts (cores, memory for VMs) are the planner's: a kind's
//! empty `HostState` is built once and every host starts from a copy, so
//! the simulator never works them out a second way. Placing and removing
//! go through `HostState::place` and `HostState::remove`, which undo each
//! other exactly.

use crate::fleet::HostKind;
use crate::model::Model;
use crate::trace::Vm;
use numaplace_plan::{plan, CpuMode, HostState, MemoryMode, Placement, Policy, Request};
use numaplace_topo::{NodeId, Topology};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Fixed-point scale for factors summed over many vCPUs: integers keep
/// sums exact when VMs come and go, so runs are bit-for-bit repeatable.
pub(crate) const MICRO: u64 = 1_000_000;

/// Per-node facts of a host kind.
#[derive(Clone, Debug)]
pub(crate) struct NodeFacts {
    pub(crate) id: NodeId,
    /// Online CPU threads.
    pub(crate) pus: u32,
    /// vCPU slots: threads times the overcommit ratio, rounded down.
    pub(crate) slots: u32,
    /// Memory for VMs (huge page pools excluded, as the planner does).
    pub(crate) memory: u64,
    /// Positions of its cores in `KindFacts::cores`.
    pub(crate) cores: std::ops::Range<usize>,
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
        for spec in template.nodes() {
            let start = cores.len();
            let pus: u32 = spec.cores.iter().map(|c| c.len() as u32).sum();
            cores.extend(spec.cores.iter().cloned());
            nodes.push(NodeFacts {
                id: spec.id,
                pus,
                slots: (f64::from(pus) * oc).floor() as u32,
                memory: spec.memory_bytes,
                cores: start..cores.len(),
            });
        }
        let pu_node = (0..template.pu_limit()).map(|pu| template.pu_node(pu as u32)).collect();
        KindFacts {
            topology: Arc::clone(t),
            overcommit: oc,
            shared: oc > 1.0,
            total_pus: nodes.iter().map(|x| x.pus).sum(),
            total_slots: nodes.iter().map(|x| x.slots).sum(),
            total_memory: nodes.iter().map(|x| x.memory).sum(),
            cpu_nodes: nodes.iter().filter(|x| x.pus > 0).count(),
            nodes,
            cores,
            pu_node,
            template,
        }
    }

    fn node_pos(&self, id: NodeId) -> Option<usize> {
        self.nodes.binary_search_by_key(&id, |n| n.id).ok()
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
    /// 1 when the host has VMs and two or more nodes to compare.
    pub(crate) imbalance_hosts: u64,
    /// max-min node CPU use, millionths (0 unless `imbalance_hosts`).
    pub(crate) cpu_imbalance_micro: u64,
    /// The same for memory.
    pub(crate) mem_imbalance_micro: u64,
    /// Free vCPU slots on nodes without memory for the smallest VM.
    pub(crate) stranded_slots: u64,
    /// Free memory on nodes without a free vCPU slot.
    pub(crate) stranded_memory: u64,
    /// vCPU slots in use (dedicated threads count whole).
    pub(crate) used_slots: u64,
    pub(crate) used_memory: u64,
    /// Cores with no thread in use.
    pub(crate) free_cores: u32,
    pub(crate) free_slots: u32,
    pub(crate) free_memory: u64,
}

impl Summary {
    pub(crate) fn add(&mut self, o: &Summary) {
        self.vms += o.vms;
        self.vcpus += o.vcpus;
        self.shared_vcpus += o.shared_vcpus;
        self.perf_micro += o.perf_micro;
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
        self.imbalance_hosts -= o.imbalance_hosts;
        self.cpu_imbalance_micro -= o.cpu_imbalance_micro;
        self.mem_imbalance_micro -= o.mem_imbalance_micro;
        self.stranded_slots -= o.stranded_slots;
        self.stranded_memory -= o.stranded_memory;
        self.used_slots -= o.used_slots;
        self.used_memory -= o.used_memory;
    }
}

/// What the metrics counted for a placed VM, to take it back; what the
/// VM takes from the host is in the planner's state.
#[derive(Clone, Debug)]
struct Record {
    /// Its name in the planner's state (empty for a floating VM).
    name: String,
    /// Threads each vCPU is counted against (pinned or shared).
    pins: Vec<u32>,
    /// Memory per node position.
    memory: Vec<(usize, u64)>,
    /// The VM's memory factor, millionths.
    factor_micro: u64,
    /// Floating over the whole host (no-numa).
    floating: bool,
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

/// One host's occupation.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub(crate) kind: usize,
    /// The planner's state of this host: PUs taken, shared load, memory.
    state: HostState,
    /// By thread number: vCPUs counted here (pinned or shared).
    load: Vec<u16>,
    /// By thread number: sum of those vCPUs' memory factors, millionths.
    factor: Vec<u64>,
    /// Memory in use per node position, the floating VMs' included (the
    /// planner's state holds only the planned VMs').
    node_memory: Vec<u64>,
    floating_vcpus: u64,
    floating_factor: u64,
    vms: BTreeMap<u32, Record>,
    pub(crate) summary: Summary,
}

/// Why the planner could not be asked (the host's occupation could not be
/// loaded into its state); counted, never expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannerFault;

impl Host {
    pub(crate) fn new(kind: usize, facts: &KindFacts, model: &Model, min_memory: u64) -> Host {
        let n = facts.pu_node.len();
        let mut h = Host {
            kind,
            state: facts.template.clone(),
            load: vec![0; n],
            factor: vec![0; n],
            node_memory: vec![0; facts.nodes.len()],
            floating_vcpus: 0,
            floating_factor: 0,
            vms: BTreeMap::new(),
            summary: Summary::default(),
        };
        h.summary = h.summarise(facts, model, min_memory);
        h
    }

    /// Whether the host has the vCPU slots and memory a VM needs in total
    /// (the planner decides whether they are where it needs them).
    pub(crate) fn may_fit(&self, vm: &Vm) -> bool {
        u64::from(self.summary.free_slots) >= u64::from(vm.vcpus) && self.summary.free_memory >= vm.memory_bytes
    }

    /// Asks the planner to place a VM here with `policy`; `Ok(None)` when
    /// it refuses.
    pub(crate) fn plan(
        &mut self,
        facts: &KindFacts,
        id: u32,
        vm: &Vm,
        policy: Policy,
        model: &Model,
        min_memory: u64,
    ) -> Result<Option<PlacedVm>, PlannerFault> {
        let mut req = Request::new(vm_name(id), vm.vcpus, vm.memory_bytes);
        req.policy = policy;
        if facts.shared {
            req.cpu_mode = CpuMode::Shared;
            req.overcommit = facts.overcommit;
        }
        let Ok(decision) = plan(&facts.topology, &self.state, &req) else { return Ok(None) };
        self.record(facts, id, &decision.placement, model, min_memory).map(Some)
    }

    /// Records a placement (the planner's, or one built by hand in tests)
    /// in the planner's state and the metrics.
    pub(crate) fn record(
        &mut self,
        facts: &KindFacts,
        id: u32,
        p: &Placement,
        model: &Model,
        min_memory: u64,
    ) -> Result<PlacedVm, PlannerFault> {
        self.state.place(p).map_err(|_| PlannerFault)?;
        // Where the vCPUs and memory went, by node position.
        let n = facts.nodes.len();
        let mut vcpus_on = vec![0u64; n];
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
        let total_mem: u64 = memory.iter().map(|(_, b)| b).sum();
        let total_vcpus: u64 = vcpus_on.iter().sum();
        let locality = if total_mem == 0 || total_vcpus == 0 {
            1.0
        } else if p.memory_mode == MemoryMode::Interleave {
            // Interleaved pages: each vCPU finds its node's share local.
            memory.iter().map(|&(i, b)| (vcpus_on[i] as f64 / total_vcpus as f64) * (b as f64 / total_mem as f64)).sum()
        } else {
            // Strict cells mirrored to the guest: memory beside vCPUs is
            // what the guest's own NUMA policy keeps local.
            memory.iter().filter(|(i, _)| vcpus_on[*i] > 0).map(|(_, b)| *b).sum::<u64>() as f64 / total_mem as f64
        };
        let used_nodes = (0..n).filter(|&i| vcpus_on[i] > 0 || memory.iter().any(|&(j, b)| j == i && b > 0)).count();
        let factor_micro = (model.memory_factor(locality, false) * MICRO as f64).round() as u64;
        for &pu in &pins {
            let i = pu as usize;
            if let (Some(l), Some(f)) = (self.load.get_mut(i), self.factor.get_mut(i)) {
                *l = l.saturating_add(1);
                *f += factor_micro;
            }
        }
        for &(i, b) in &memory {
            self.node_memory[i] += b;
        }
        self.vms.insert(
            id,
            Record { name: p.vm.clone(), pins, memory, factor_micro, floating: false, vcpus: p.vcpus.len() as u32 },
        );
        self.summary = self.summarise(facts, model, min_memory);
        Ok(PlacedVm { single_node: used_nodes == 1, locality })
    }

    /// Places a VM without NUMA awareness: it floats over every thread,
    /// its memory goes to the nodes in proportion to their size (what
    /// first touch by vCPUs spread evenly gives), overflowing to nodes
    /// with room. `None` when the host lacks slots or memory.
    pub(crate) fn float(
        &mut self,
        facts: &KindFacts,
        id: u32,
        vm: &Vm,
        model: &Model,
        min_memory: u64,
    ) -> Option<PlacedVm> {
        if !self.may_fit(vm) {
            return None;
        }
        let n = facts.nodes.len();
        let free: Vec<u64> =
            facts.nodes.iter().zip(&self.node_memory).map(|(f, u)| f.memory.saturating_sub(*u)).collect();
        let mut got = vec![0u64; n];
        let total = facts.total_memory.max(1);
        for i in 0..n {
            let want = (u128::from(vm.memory_bytes) * u128::from(facts.nodes[i].memory) / u128::from(total)) as u64;
            got[i] = want.min(free[i]);
        }
        let mut left = vm.memory_bytes - got.iter().sum::<u64>().min(vm.memory_bytes);
        for i in 0..n {
            let room = free[i] - got[i];
            let take = room.min(left);
            got[i] += take;
            left -= take;
        }
        if left > 0 {
            return None;
        }
        let pus = f64::from(facts.total_pus.max(1));
        let locality: f64 = (0..n)
            .map(|i| (f64::from(facts.nodes[i].pus) / pus) * (got[i] as f64 / vm.memory_bytes.max(1) as f64))
            .sum();
        let hidden = facts.cpu_nodes > 1;
        let factor_micro = (model.memory_factor(locality, hidden) * MICRO as f64).round() as u64;
        let memory: Vec<(usize, u64)> = (0..n).filter(|&i| got[i] > 0).map(|i| (i, got[i])).collect();
        let used_nodes = (0..n).filter(|&i| facts.nodes[i].pus > 0 || got[i] > 0).count();
        for &(i, b) in &memory {
            self.node_memory[i] += b;
        }
        self.floating_vcpus += u64::from(vm.vcpus);
        self.floating_factor += u64::from(vm.vcpus) * factor_micro;
        self.vms.insert(
            id,
            Record { name: String::new(), pins: Vec::new(), memory, factor_micro, floating: true, vcpus: vm.vcpus },
        );
        self.summary = self.summarise(facts, model, min_memory);
        Some(PlacedVm { single_node: used_nodes == 1, locality })
    }

    /// Gives back what a VM held; false when it is not here.
    pub(crate) fn remove(&mut self, facts: &KindFacts, id: u32, model: &Model, min_memory: u64) -> bool {
        let Some(r) = self.vms.remove(&id) else { return false };
        for &(i, b) in &r.memory {
            if let Some(m) = self.node_memory.get_mut(i) {
                *m = m.saturating_sub(b);
            }
        }
        if r.floating {
            self.floating_vcpus -= u64::from(r.vcpus);
            self.floating_factor -= u64::from(r.vcpus) * r.factor_micro;
        } else {
            // Recorded by `record`, so the state holds it.
            let _ = self.state.remove(&r.name);
            for &pu in &r.pins {
                let i = pu as usize;
                if let Some(l) = self.load.get_mut(i) {
                    *l = l.saturating_sub(1);
                }
                if let Some(f) = self.factor.get_mut(i) {
                    *f = f.saturating_sub(r.factor_micro);
                }
            }
        }
        self.summary = self.summarise(facts, model, min_memory);
        true
    }

    /// Per node: (CPU use, memory use) as shares, `None` where the node
    /// has no CPUs or no memory.
    pub(crate) fn node_use(&self, facts: &KindFacts) -> Vec<(Option<f64>, Option<f64>)> {
        let float_share = self.floating_vcpus as f64 / f64::from(facts.total_slots.max(1));
        facts
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let cpu = (node.pus > 0).then(|| {
                    let used = self.node_used_slots(facts, i);
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

    /// Slots in use on a node by pinned or shared vCPUs (dedicated
    /// threads count whole, even idle reserved siblings).
    fn node_used_slots(&self, facts: &KindFacts, node: usize) -> u64 {
        let Some(nf) = facts.nodes.get(node) else { return 0 };
        let mut used = 0u64;
        for core in facts.cores.get(nf.cores.clone()).unwrap_or(&[]) {
            for &pu in core {
                used += if self.state.pu_taken(pu) { 1 } else { u64::from(self.state.pu_shared_load(pu)) };
            }
        }
        used
    }

    fn summarise(&self, facts: &KindFacts, model: &Model, min_memory: u64) -> Summary {
        let mut s = Summary { vms: self.vms.len() as u64, ..Summary::default() };
        let smt_micro = (model.smt_factor(true) * MICRO as f64).round() as u64;
        let (mut cpu_min, mut cpu_max, mut mem_min, mut mem_max) = (u64::MAX, 0u64, u64::MAX, 0u64);
        let (mut cpu_nodes, mut mem_nodes) = (0, 0);
        let float_util = self.floating_vcpus * MICRO / u64::from(facts.total_slots.max(1));
        for (i, node) in facts.nodes.iter().enumerate() {
            let mut used = 0u64;
            let mut free_slots = 0u64;
            // Shared vCPUs float over their nodes' threads: pooled per node.
            let (mut pool_vcpus, mut pool_factor) = (0u64, 0u64);
            let node_cores = facts.cores.get(node.cores.clone()).unwrap_or(&[]);
            for core in node_cores {
                let mut load = 0u64;
                let mut factor = 0u64;
                let mut busy = false;
                for &pu in core {
                    let p = pu as usize;
                    let taken = self.state.pu_taken(pu);
                    let l = u64::from(self.load.get(p).copied().unwrap_or(0));
                    let sl = u64::from(self.state.pu_shared_load(pu));
                    load += l;
                    factor += self.factor.get(p).copied().unwrap_or(0);
                    busy |= taken || l > 0;
                    if taken {
                        used += 1;
                    } else {
                        used += sl;
                        if !facts.shared && l == 0 {
                            free_slots += 1;
                        }
                    }
                }
                s.vcpus += load;
                if facts.shared {
                    pool_vcpus += load;
                    pool_factor += factor;
                } else if load >= 2 {
                    s.shared_vcpus += load;
                    s.perf_micro += factor * smt_micro / MICRO;
                } else {
                    s.perf_micro += factor;
                }
                if !busy && self.floating_vcpus == 0 {
                    s.free_cores += 1;
                }
            }
            if facts.shared {
                free_slots = u64::from(node.slots).saturating_sub(used);
                let shared = pool_shared(pool_vcpus, node_cores.len() as u64);
                s.shared_vcpus += shared;
                s.perf_micro += pool_perf(pool_factor, pool_vcpus, shared, smt_micro);
            }
            let free_mem = node.memory.saturating_sub(self.node_memory[i]);
            s.used_memory += self.node_memory[i];
            if self.floating_vcpus == 0 {
                s.used_slots += used;
                s.free_slots += free_slots as u32;
                if free_mem < min_memory {
                    s.stranded_slots += free_slots;
                }
                if free_slots == 0 {
                    s.stranded_memory += free_mem;
                }
            }
            s.free_memory += free_mem;
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
        if self.floating_vcpus > 0 {
            // Floating vCPUs: the host is one pool; the kernel's scheduler
            // puts a busy vCPU on an idle core first, so siblings are
            // shared only beyond one vCPU per core.
            let v = self.floating_vcpus;
            let c = facts.cores.len() as u64;
            let shared = pool_shared(v, c);
            s.vcpus += v;
            s.shared_vcpus += shared;
            s.perf_micro += pool_perf(self.floating_factor, v, shared, smt_micro);
            s.free_cores = c.saturating_sub(v) as u32;
            let free_slots = u64::from(facts.total_slots).saturating_sub(v);
            s.used_slots += v;
            s.free_slots = free_slots as u32;
            if s.free_memory < min_memory {
                s.stranded_slots += free_slots;
            }
            if free_slots == 0 {
                s.stranded_memory += s.free_memory;
            }
        }
        if s.vms > 0 && cpu_nodes >= 2 {
            s.cpu_imbalance_micro = cpu_max - cpu_min;
        }
        if s.vms > 0 && mem_nodes >= 2 {
            s.mem_imbalance_micro = mem_max - mem_min;
        }
        s.imbalance_hosts = u64::from(s.vms > 0 && (cpu_nodes >= 2 || mem_nodes >= 2));
        s
    }
}

/// The name a trace VM has in a host's planner state.
fn vm_name(id: u32) -> String {
    format!("vm{id}")
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

/// Predicted throughput of a pool of floating vCPUs (millionths): the sum
/// of their memory factors, with the sharing ones losing the sibling share.
fn pool_perf(factor_sum: u64, v: u64, shared: u64, smt_micro: u64) -> u64 {
    if v == 0 {
        return 0;
    }
    let loss = MICRO - smt_micro;
    (u128::from(factor_sum) * u128::from(v * MICRO - shared * loss) / u128::from(v * MICRO)) as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use numaplace_plan::{GuestTopology, VcpuPin};
    use numaplace_topo::{Core, CpuSet, Node, Parts};

    /// 2 nodes x 2 cores x 2 threads (node0: 0-3, node1: 4-7), 4 GiB each.
    fn facts() -> KindFacts {
        let mut parts = Parts::default();
        for n in 0..2u32 {
            for c in 0..2u32 {
                let first = n * 4 + c * 2;
                parts.cores.push(Core {
                    package: Some(n),
                    die: None,
                    core_id: Some(c),
                    cpus: (first..first + 2).collect(),
                });
            }
            parts.nodes.push(Node {
                id: NodeId(n),
                cpus: (n * 4..n * 4 + 4).collect(),
                memory_bytes: 4 << 30,
                free_bytes: None,
                hugepages: vec![],
                kind: None,
            });
        }
        let t = Topology::from_parts(parts).unwrap();
        KindFacts::new(&HostKind { source: "t".into(), topology: Arc::new(t), cpu_overcommit: 1.0 })
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
    fn hand_built_placements_are_counted() {
        let f = facts();
        let m = Model::default();
        let mut h = Host::new(0, &f, &m, 1 << 30);
        assert_eq!((h.summary.free_cores, h.summary.free_slots, h.summary.free_memory), (4, 8, 8 << 30));
        // Two sibling threads of node0's first core, memory split 1+1 GiB:
        // half the memory is beside the vCPUs, both vCPUs share a core.
        let p = placement("a", &[(0, 0), (1, 0)], &[(0, 1 << 30), (1, 1 << 30)]);
        let placed = h.record(&f, 1, &p, &m, 1 << 30).unwrap();
        assert!(!placed.single_node);
        assert_eq!(placed.locality, 0.5);
        let s = h.summary;
        assert_eq!((s.vcpus, s.shared_vcpus, s.free_cores, s.free_slots), (2, 2, 3, 6));
        let per_vcpu = m.memory_factor(0.5, false) * m.smt_factor(true);
        assert!((s.perf_micro as f64 / 2e6 - per_vcpu).abs() < 1e-5);
        // node0: 2 of 4 threads, 1 of 4 GiB; node1: 0 threads, 1 GiB.
        assert_eq!(s.cpu_imbalance_micro, 500_000);
        assert_eq!(s.mem_imbalance_micro, 0);
        // A VM alone on node1's first core: one node, local, not shared.
        let q = placement("b", &[(4, 1)], &[(1, 1 << 30)]);
        let placed = h.record(&f, 2, &q, &m, 1 << 30).unwrap();
        assert!(placed.single_node);
        assert_eq!(placed.locality, 1.0);
        assert_eq!((h.summary.vcpus, h.summary.shared_vcpus), (3, 2));
        // The planner's state holds both VMs.
        let st = &h.state;
        assert_eq!(st.free_pus(NodeId(0)), Some(2));
        assert_eq!(st.free_pus(NodeId(1)), Some(3));
        assert_eq!(st.free_cores(NodeId(1)), Some(1));
        // What is free for the next VM: less b's QEMU overhead.
        assert_eq!(st.free_memory_bytes(NodeId(1)), Some((2 << 30) - numaplace_plan::vm_overhead_bytes(1 << 30)));
        // Departures give everything back.
        assert!(h.remove(&f, 1, &m, 1 << 30));
        assert!(h.remove(&f, 2, &m, 1 << 30));
        assert!(!h.remove(&f, 2, &m, 1 << 30));
        assert_eq!(h.summary, Host::new(0, &f, &m, 1 << 30).summary);
        assert_eq!(h.state, f.template, "the planner's state is empty again");
    }
}
