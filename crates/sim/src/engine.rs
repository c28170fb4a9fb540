//! The replay: arrivals in trace order, departures from a heap, each VM
//! offered to the best few hosts that could take it, and the fleet's
//! numbers integrated over time between events.
//!
//! Host selection keeps every host in a `BTreeSet` ordered by the fleet
//! crate's ranking key (by default: free whole cores, then free vCPU
//! slots, then free memory; then lowest id), so the best host is found
//! without scanning the fleet; only hosts whose free capacity could hold
//! the VM ([`numaplace_fleet::Free::fits`]) are offered to the planner, and
//! at most [`Config::tries`] of them. Totals are kept as the sum of per-host
//! summaries, updated by the difference when one host changes.

use crate::fleet::Fleet;
use crate::host::{Host, KindFacts, Scoring, Summary, MICRO, VARIANTS};
use crate::model::Model;
use crate::policy::SimPolicy;
use crate::trace::{Trace, Vm};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// How hosts are ranked for a VM: the fleet's own rankings
/// ([`numaplace_fleet::Ranking`]), so a replay walks hosts in the order
/// `numaplace serve` does (`cores-first`, its default) or in one it could
/// be given.
pub use numaplace_fleet::Ranking as HostOrder;

/// Replay settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The performance model.
    pub model: Model,
    /// Host ranking.
    pub host_order: HostOrder,
    /// Hosts offered to the placement policy per VM before it is refused.
    pub tries: usize,
    /// Seconds between samples of the fleet for the charts.
    pub sample_every_s: u64,
    /// Also follow the predicted performance under every parameter of
    /// [`crate::model::RANGES`] at both ends of its range (placements do
    /// not depend on the model, so one replay serves them all).
    pub sensitivity: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            model: Model::default(),
            host_order: HostOrder::CoresFirst,
            tries: 3,
            sample_every_s: 3600,
            sensitivity: false,
        }
    }
}

/// Most samples one replay takes: far more than a chart can show, and a
/// bound on memory however long a trace's clock runs.
pub const MAX_SAMPLES: u64 = 100_000;

impl Config {
    /// Seconds between samples over a replay of `span_s` seconds:
    /// [`Config::sample_every_s`], widened when that would take more than
    /// [`MAX_SAMPLES`] samples.
    pub fn sample_step(&self, span_s: u64) -> u64 {
        self.sample_every_s.max(1).max(span_s.div_ceil(MAX_SAMPLES))
    }
}

/// How far a replay has got, for progress bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Position of the policy being replayed.
    pub policy: usize,
    /// Policies in the run.
    pub policies: usize,
    /// VMs of the trace handled so far.
    pub vms_done: usize,
    /// VMs in the trace.
    pub vms_total: usize,
}

/// The fleet at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since the trace's start.
    pub t_s: u64,
    /// VMs running.
    pub running_vms: u64,
    /// VMs placed so far.
    pub accepted: u64,
    /// VMs refused so far.
    pub rejected: u64,
    /// Share of vCPU slots in use.
    pub cpu_utilisation: f64,
    /// Share of memory in use.
    pub memory_utilisation: f64,
    /// Share of running vCPUs whose core runs another busy vCPU.
    pub smt_shared_vcpu_share: f64,
    /// Share of running vCPUs' memory accesses that are remote.
    pub remote_share: f64,
    /// Share of running vCPUs on nodes over their memory bandwidth.
    pub congested_share: f64,
    /// Mean predicted throughput per running vCPU (1.0 when none runs).
    pub predicted_performance: f64,
    /// Mean max-min node CPU use over busy multi-node hosts.
    pub cpu_imbalance: f64,
    /// The same for memory.
    pub memory_imbalance: f64,
}

/// Time integrals of the fleet totals (value x seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Integrals {
    /// Seconds replayed.
    pub seconds: u128,
    /// Running vCPUs.
    pub vcpus: u128,
    /// vCPUs sharing a core.
    pub shared_vcpus: u128,
    /// Predicted throughput summed over vCPUs, millionths.
    pub perf_micro: u128,
    /// The same under each sensitivity variant.
    pub perf_variants: [u128; VARIANTS],
    /// Remote share of accesses summed over vCPUs, millionths.
    pub remote_micro: u128,
    /// vCPUs on nodes over their memory bandwidth.
    pub congested_vcpus: u128,
    /// Busy multi-node hosts.
    pub imbalance_hosts: u128,
    /// Their CPU imbalance, millionths.
    pub cpu_imbalance_micro: u128,
    /// Their memory imbalance, millionths.
    pub mem_imbalance_micro: u128,
    /// Stranded vCPU slots.
    pub stranded_slots: u128,
    /// Stranded memory, bytes.
    pub stranded_memory: u128,
}

/// What one policy did over the whole replay.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyResult {
    /// The policy.
    pub policy: SimPolicy,
    /// How hosts were ranked.
    pub hosts: HostOrder,
    /// Whether `integrals.perf_variants` were followed.
    pub sensitivity: bool,
    /// VMs placed.
    pub accepted: u64,
    /// VMs refused.
    pub rejected: u64,
    /// Placed VMs on one node.
    pub single_node: u64,
    /// Sum over placed VMs of their memory locality.
    pub locality_sum: f64,
    /// Time integrals.
    pub integrals: Integrals,
    /// Most VMs running at once.
    pub peak_running_vms: u64,
    /// Planner calls.
    pub planner_calls: u64,
    /// Planner calls that could not be made because the host's occupation
    /// did not load into the planner's state; expected 0.
    pub planner_faults: u64,
    /// Nodes per tenth of CPU use at the end.
    pub final_cpu_histogram: [u64; 10],
    /// Nodes per tenth of memory use at the end.
    pub final_memory_histogram: [u64; 10],
    /// Samples over time.
    pub samples: Vec<Sample>,
    /// vCPU slots of the fleet.
    pub fleet_slots: u64,
    /// Memory of the fleet, bytes.
    pub fleet_memory: u64,
    /// Arrivals and departures handled.
    pub events: u64,
}

fn ratio(a: u128, b: u128) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

// The per-VM and per-vCPU figures are `None` when there is nothing to
// average (no VM placed, no vCPU ever ran): a locality of 100% or a
// performance of 1.0 over no VM would read as a perfect result.
impl PolicyResult {
    /// Share of placed VMs whose vCPUs and memory sit on one node; `None`
    /// when no VM was placed.
    pub fn single_node_share(&self) -> Option<f64> {
        (self.accepted > 0).then(|| ratio(u128::from(self.single_node), u128::from(self.accepted)))
    }
    /// Mean memory locality of placed VMs; `None` when none was placed.
    pub fn memory_locality(&self) -> Option<f64> {
        (self.accepted > 0).then(|| self.locality_sum / self.accepted as f64)
    }
    /// Time-averaged share of running vCPUs sharing a core; `None` when no
    /// vCPU ever ran.
    pub fn smt_shared_vcpu_share(&self) -> Option<f64> {
        (self.integrals.vcpus > 0).then(|| ratio(self.integrals.shared_vcpus, self.integrals.vcpus))
    }
    /// Time-averaged predicted throughput per running vCPU; `None` when no
    /// vCPU ever ran.
    pub fn predicted_performance(&self) -> Option<f64> {
        (self.integrals.vcpus > 0).then(|| ratio(self.integrals.perf_micro, self.integrals.vcpus) / MICRO as f64)
    }
    /// Time-averaged share of running vCPUs' memory accesses that are
    /// remote; `None` when no vCPU ever ran.
    pub fn remote_share(&self) -> Option<f64> {
        (self.integrals.vcpus > 0).then(|| ratio(self.integrals.remote_micro, self.integrals.vcpus) / MICRO as f64)
    }
    /// Time-averaged share of running vCPUs on nodes whose memory is
    /// asked for more than its bandwidth; `None` when no vCPU ever ran.
    pub fn congested_share(&self) -> Option<f64> {
        (self.integrals.vcpus > 0).then(|| ratio(self.integrals.congested_vcpus, self.integrals.vcpus))
    }
    /// Predicted performance under each sensitivity variant (in
    /// [`crate::model::RANGES`] order, low then high); empty unless the
    /// replay followed them.
    pub fn performance_variants(&self) -> Vec<f64> {
        if !self.sensitivity || self.integrals.vcpus == 0 {
            return Vec::new();
        }
        self.integrals.perf_variants.iter().map(|&p| ratio(p, self.integrals.vcpus) / MICRO as f64).collect()
    }
    /// Time-averaged CPU imbalance of busy multi-node hosts.
    pub fn cpu_imbalance(&self) -> f64 {
        ratio(self.integrals.cpu_imbalance_micro, self.integrals.imbalance_hosts) / MICRO as f64
    }
    /// Time-averaged memory imbalance of busy multi-node hosts.
    pub fn memory_imbalance(&self) -> f64 {
        ratio(self.integrals.mem_imbalance_micro, self.integrals.imbalance_hosts) / MICRO as f64
    }
    /// Time-averaged share of the fleet's vCPU slots that are stranded.
    pub fn stranded_cpu_share(&self) -> f64 {
        ratio(self.integrals.stranded_slots, self.integrals.seconds * u128::from(self.fleet_slots))
    }
    /// Time-averaged share of the fleet's memory that is stranded.
    pub fn stranded_memory_share(&self) -> f64 {
        ratio(self.integrals.stranded_memory, self.integrals.seconds * u128::from(self.fleet_memory))
    }
}

/// A host's place in the selection index: its ranking key, then its id
/// (ties go to the lowest).
type Key = (numaplace_fleet::RankKey, u64);

struct Engine<'a> {
    policy: SimPolicy,
    cfg: &'a Config,
    facts: Vec<KindFacts>,
    hosts: Vec<Host>,
    hosts_order: HostOrder,
    index: BTreeSet<Key>,
    totals: Summary,
    scoring: Scoring,
    result: PolicyResult,
    clock: u64,
    start: u64,
    next_sample: u64,
    sample_step: u64,
}

impl Engine<'_> {
    fn key(&self, h: usize) -> Key {
        (self.hosts_order.key(self.hosts[h].free()), h as u64)
    }

    /// Moves the clock to `t`, integrating and sampling on the way.
    fn advance(&mut self, t: u64) {
        if t <= self.clock {
            return;
        }
        while self.next_sample < t {
            let s = self.sample(self.next_sample);
            self.result.samples.push(s);
            self.next_sample = self.next_sample.saturating_add(self.sample_step);
        }
        let dt = u128::from(t - self.clock);
        let tot = &self.totals;
        let i = &mut self.result.integrals;
        i.seconds += dt;
        i.vcpus += dt * u128::from(tot.vcpus);
        i.shared_vcpus += dt * u128::from(tot.shared_vcpus);
        i.perf_micro += dt * u128::from(tot.perf_micro);
        for (a, b) in i.perf_variants.iter_mut().zip(&tot.perf_variants) {
            *a += dt * u128::from(*b);
        }
        i.remote_micro += dt * u128::from(tot.remote_micro);
        i.congested_vcpus += dt * u128::from(tot.congested_vcpus);
        i.imbalance_hosts += dt * u128::from(tot.imbalance_hosts);
        i.cpu_imbalance_micro += dt * u128::from(tot.cpu_imbalance_micro);
        i.mem_imbalance_micro += dt * u128::from(tot.mem_imbalance_micro);
        i.stranded_slots += dt * u128::from(tot.stranded_slots);
        i.stranded_memory += dt * u128::from(tot.stranded_memory);
        self.clock = t;
    }

    fn sample(&self, t: u64) -> Sample {
        let tot = &self.totals;
        let r = |a: u64, b: u64| ratio(u128::from(a), u128::from(b));
        Sample {
            t_s: t - self.start,
            running_vms: tot.vms,
            accepted: self.result.accepted,
            rejected: self.result.rejected,
            cpu_utilisation: r(tot.used_slots, self.result.fleet_slots),
            memory_utilisation: r(tot.used_memory, self.result.fleet_memory),
            smt_shared_vcpu_share: r(tot.shared_vcpus, tot.vcpus),
            remote_share: r(tot.remote_micro, tot.vcpus) / MICRO as f64,
            congested_share: r(tot.congested_vcpus, tot.vcpus),
            predicted_performance: if tot.vcpus == 0 { 1.0 } else { r(tot.perf_micro, tot.vcpus) / MICRO as f64 },
            cpu_imbalance: r(tot.cpu_imbalance_micro, tot.imbalance_hosts) / MICRO as f64,
            memory_imbalance: r(tot.mem_imbalance_micro, tot.imbalance_hosts) / MICRO as f64,
        }
    }

    /// Applies a change to one host, keeping totals and index in step.
    fn update<R>(&mut self, h: usize, change: impl FnOnce(&mut Host, &KindFacts, &Scoring) -> R) -> R {
        let old_key = self.key(h);
        let old = self.hosts[h].summary;
        let host = &mut self.hosts[h];
        let k = host.kind;
        let r = change(host, &self.facts[k], &self.scoring);
        let new = self.hosts[h].summary;
        if new != old {
            self.totals.sub(&old);
            self.totals.add(&new);
            let new_key = self.key(h);
            if new_key != old_key {
                self.index.remove(&old_key);
                self.index.insert(new_key);
            }
        }
        r
    }

    fn candidates(&self, vm: &Vm) -> Vec<usize> {
        let fits = |k: &&Key| -> bool {
            self.hosts.get(k.1 as usize).is_some_and(|host| host.free().fits(vm.vcpus, vm.memory_bytes))
        };
        let tries = self.cfg.tries.max(1);
        // Under packing the hosts before the first with enough free slots
        // are skipped without a look.
        let start = (self.hosts_order.first_key_with(vm.vcpus), 0);
        self.index.range(start..).filter(fits).take(tries).map(|k| k.1 as usize).collect()
    }

    /// Offers a VM to the best hosts; the host that took it, if any.
    fn arrive(&mut self, id: u32, vm: &Vm) -> Option<usize> {
        let policy = self.policy;
        let candidates = self.candidates(vm);
        if self.hosts_order.compares_cost() {
            if let Some(planner) = policy.planner() {
                return self.arrive_cheapest(id, vm, planner, policy.hides_topology(), &candidates);
            }
        }
        for h in candidates {
            let outcome = self.update(h, |host, facts, scoring| match policy.planner() {
                Some(p) => match host.decide(facts, id, vm, p) {
                    Some(d) => host.record(facts, id, &d.placement, policy.hides_topology(), scoring).map(Some),
                    None => Ok(None),
                },
                None => Ok(host.float(facts, id, vm, scoring)),
            });
            if policy.planner().is_some() {
                self.result.planner_calls += 1;
            }
            if let Some(h) = self.count(outcome, h) {
                return Some(h);
            }
        }
        self.result.rejected += 1;
        None
    }

    /// Asks the planner on every candidate and places the VM where its
    /// cost is lowest (the first candidate on ties).
    fn arrive_cheapest(
        &mut self,
        id: u32,
        vm: &Vm,
        planner: numaplace_plan::Policy,
        hide: bool,
        candidates: &[usize],
    ) -> Option<usize> {
        let mut best: Option<(u64, usize, numaplace_plan::Decision)> = None;
        for &h in candidates {
            let host = &self.hosts[h];
            self.result.planner_calls += 1;
            if let Some(d) = host.decide(&self.facts[host.kind], id, vm, planner) {
                let cost = host.cost(&d.placement);
                if best.as_ref().is_none_or(|(c, _, _)| cost < *c) {
                    best = Some((cost, h, d));
                }
            }
        }
        if let Some((_, h, d)) = best {
            let outcome = self.update(h, |host, facts, scoring| host.record(facts, id, &d.placement, hide, scoring));
            if let Some(h) = self.count(outcome.map(Some), h) {
                return Some(h);
            }
        }
        self.result.rejected += 1;
        None
    }

    /// Counts one placement attempt's outcome; the host when it took the VM.
    fn count(
        &mut self,
        outcome: Result<Option<crate::host::PlacedVm>, crate::host::PlannerFault>,
        h: usize,
    ) -> Option<usize> {
        {
            match outcome {
                Ok(Some(placed)) => {
                    self.result.accepted += 1;
                    self.result.single_node += u64::from(placed.single_node);
                    self.result.locality_sum += placed.locality;
                    self.result.peak_running_vms = self.result.peak_running_vms.max(self.totals.vms);
                    return Some(h);
                }
                Ok(None) => {}
                Err(_) => self.result.planner_faults += 1,
            }
        }
        None
    }

    fn depart(&mut self, id: u32, h: usize) {
        self.update(h, |host, facts, scoring| host.remove(facts, id, scoring));
    }
}

/// Seconds from the trace's start to the end of its replay (its end, or
/// its last arrival when a trace built by hand ends before it).
pub fn replay_span(trace: &Trace) -> u64 {
    let last = trace.vms.iter().map(|v| v.arrival_s).max().unwrap_or(0);
    trace.end_s.max(last).saturating_sub(trace.start_s)
}

/// Most common sizes stranded capacity is judged against.
pub const COMMON_SIZES: usize = 8;

/// The trace's common VM sizes, (vCPUs, memory) smallest first: the most
/// frequent shapes until they cover 90% of the VMs, at most
/// [`COMMON_SIZES`]. Free capacity no common size fits is stranded.
pub fn common_sizes(trace: &Trace) -> Vec<(u32, u64)> {
    let mut counts: std::collections::BTreeMap<(u32, u64), u64> = std::collections::BTreeMap::new();
    for v in &trace.vms {
        *counts.entry((v.vcpus, v.memory_bytes)).or_default() += 1;
    }
    let mut by_count: Vec<((u32, u64), u64)> = counts.into_iter().collect();
    // Most frequent first; equal counts smallest first (deterministic).
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let total = trace.vms.len() as u64;
    let mut out = Vec::new();
    let mut covered = 0u64;
    for (size, n) in by_count {
        if out.len() == COMMON_SIZES || covered * 10 >= total * 9 {
            break;
        }
        out.push(size);
        covered += n;
    }
    out.sort_unstable();
    out
}

/// Replays a trace over a fleet with one policy.
pub fn run_policy(
    fleet: &Fleet,
    trace: &Trace,
    policy: SimPolicy,
    cfg: &Config,
    progress: &mut dyn FnMut(usize),
) -> PolicyResult {
    let facts: Vec<KindFacts> = fleet.kinds.iter().map(KindFacts::new).collect();
    let scoring = Scoring::new(cfg.model, cfg.sensitivity, common_sizes(trace));
    let hosts: Vec<Host> = fleet.hosts.iter().map(|&k| Host::new(k, &facts[k], &scoring)).collect();
    let fleet_slots = fleet.hosts.iter().map(|&k| u64::from(facts[k].total_slots)).sum();
    let fleet_memory = fleet.hosts.iter().map(|&k| facts[k].total_memory).sum();
    let mut totals = Summary::default();
    for h in &hosts {
        totals.add(&h.summary);
    }
    let mut engine = Engine {
        policy,
        cfg,
        facts,
        hosts,
        hosts_order: cfg.host_order,
        index: BTreeSet::new(),
        totals,
        scoring,
        result: PolicyResult {
            policy,
            hosts: cfg.host_order,
            sensitivity: cfg.sensitivity,
            accepted: 0,
            rejected: 0,
            single_node: 0,
            locality_sum: 0.0,
            integrals: Integrals::default(),
            peak_running_vms: 0,
            planner_calls: 0,
            planner_faults: 0,
            final_cpu_histogram: [0; 10],
            final_memory_histogram: [0; 10],
            samples: Vec::new(),
            fleet_slots,
            fleet_memory,
            events: 0,
        },
        clock: trace.start_s,
        start: trace.start_s,
        next_sample: trace.start_s,
        sample_step: cfg.sample_step(replay_span(trace)),
    };
    for h in 0..engine.hosts.len() {
        let k = engine.key(h);
        engine.index.insert(k);
    }
    let mut placed_on: Vec<u32> = vec![u32::MAX; trace.vms.len()];
    let mut departures: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
    for (i, vm) in trace.vms.iter().enumerate() {
        let id = i as u32;
        while let Some(&Reverse((t, dep))) = departures.peek() {
            if t > vm.arrival_s {
                break;
            }
            departures.pop();
            engine.advance(t);
            if let Some(&h) = placed_on.get(dep as usize) {
                engine.depart(dep, h as usize);
                engine.result.events += 1;
            }
        }
        engine.advance(vm.arrival_s);
        engine.result.events += 1;
        if let Some(h) = engine.arrive(id, vm) {
            placed_on[i] = h as u32;
            if let Some(d) = vm.departure_s() {
                departures.push(Reverse((d, id)));
            }
        }
        if i % 4096 == 0 {
            progress(i);
        }
    }
    let end = trace.end_s.max(engine.clock);
    while let Some(Reverse((t, dep))) = departures.pop() {
        if t > end {
            break;
        }
        engine.advance(t);
        if let Some(&h) = placed_on.get(dep as usize) {
            engine.depart(dep, h as usize);
            engine.result.events += 1;
        }
    }
    engine.advance(end);
    let s = engine.sample(end);
    engine.result.samples.push(s);
    progress(trace.vms.len());
    let mut result = engine.result;
    for host in &engine.hosts {
        for (cpu, mem) in host.node_use(&engine.facts[host.kind]) {
            let bucket = |u: f64| ((u * 10.0).floor().clamp(0.0, 9.0)) as usize;
            if let Some(u) = cpu {
                result.final_cpu_histogram[bucket(u)] += 1;
            }
            if let Some(u) = mem {
                result.final_memory_histogram[bucket(u)] += 1;
            }
        }
    }
    result
}
