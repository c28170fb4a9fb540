//! The replay: arrivals in trace order, departures from a heap, each VM
//! placed by the fleet engine `numaplace serve` runs, and the fleet's
//! numbers integrated over time between events.
//!
//! The hosts are a [`numaplace_fleet::Fleet`], the service's inventory:
//! each host's planner state, its per-node summary and its place in the
//! fleet's ranking. A VM goes where [`numaplace_fleet::Fleet::select_with`]
//! says, the service's selection loop (rank order, the prefilter on the
//! per-node summaries, the plan of each candidate until one takes it, the
//! planner's cost among hosts equal in rank), with the policy's decision
//! on each candidate; the choice is recorded in the fleet as the service
//! records a claimed one. Totals are kept as the sum of per-host
//! summaries, updated by the difference when one host changes.

use crate::fleet::HostMix;
use crate::host::{float, vm_name, Host, KindFacts, Scoring, Summary, MICRO, VARIANTS};
use crate::model::Model;
use crate::policy::SimPolicy;
use crate::trace::{Trace, Vm};
use numaplace_fleet::{Constraints, FleetHost, Spread};
use numaplace_plan::{CpuMode, PlacementRecord, Request};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

/// How hosts are ranked for a VM: the fleet's own rankings
/// ([`numaplace_fleet::Ranking`]), so a replay walks hosts in the order
/// `numaplace serve` does (`cost`, its default) or in one it could be
/// given.
pub use numaplace_fleet::Ranking as HostOrder;

/// Replay settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The performance model.
    pub model: Model,
    /// Host ranking.
    pub host_order: HostOrder,
    /// Seconds between samples of the fleet for the charts.
    pub sample_every_s: u64,
    /// Also follow the predicted performance under every parameter of
    /// [`crate::model::RANGES`] at both ends of its range (placements do
    /// not depend on the model, so one replay serves them all).
    pub sensitivity: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config { model: Model::default(), host_order: HostOrder::default(), sample_every_s: 3600, sensitivity: false }
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
    /// Decisions the fleet's state of their host did not take (the fleet
    /// and the decision disagree); expected 0.
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

struct Engine {
    policy: SimPolicy,
    facts: Vec<KindFacts>,
    /// The inventory and selection `serve` runs.
    fleet: numaplace_fleet::Fleet,
    /// Host id -> its name in the fleet.
    names: Vec<String>,
    /// Host id -> what the metrics keep beside the fleet's state.
    hosts: Vec<Host>,
    /// Whether some kind overcommits CPUs (its VMs' vCPUs are shared).
    any_shared: bool,
    totals: Summary,
    scoring: Scoring,
    result: PolicyResult,
    clock: u64,
    start: u64,
    next_sample: u64,
    sample_step: u64,
}

/// A host's name in the fleet: its id, zero-padded so the fleet's ties
/// (broken by name) go to the lowest id.
fn host_name(h: usize) -> String {
    format!("h{h:07}")
}

/// The host id a fleet name stands for.
fn host_id(name: &str) -> Option<usize> {
    name.get(1..)?.parse().ok()
}

impl Engine {
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

    /// Summarises host `h` again from the fleet's state of it, keeping
    /// the totals in step.
    fn refresh(&mut self, h: usize) {
        let Some(fh) = self.fleet.host(&self.names[h]) else { return };
        let host = &mut self.hosts[h];
        let old = host.summary;
        let new = host.summarise(&self.facts[host.kind], &fh.state, fh.free(), &self.scoring);
        host.summary = new;
        if new != old {
            self.totals.sub(&old);
            self.totals.add(&new);
        }
    }

    /// Places a VM where the fleet engine chooses; the host that took it,
    /// if any.
    fn arrive(&mut self, id: u32, vm: &Vm) -> Option<usize> {
        let policy = self.policy;
        let mut request = Request::new(vm_name(id), vm.vcpus, vm.memory_bytes);
        if let Some(p) = policy.planner() {
            request.policy = p;
        }
        // On a fleet where some kind shares its vCPUs, the prefilter must
        // not ask for free threads (a necessary condition on every host).
        if self.any_shared {
            request.cpu_mode = CpuMode::Shared;
        }
        let mut calls = 0u64;
        let (facts, hosts) = (&self.facts, &self.hosts);
        let mut decide = |host: &FleetHost, request: &Request| {
            let kind = host_id(&host.name).and_then(|h| hosts.get(h)).map_or(0, |h| h.kind);
            let f = &facts[kind];
            if policy.planner().is_none() {
                return float(f, &host.state, host.free(), request);
            }
            calls += 1;
            // The request as this kind of host takes it.
            let mode = if f.shared { CpuMode::Shared } else { CpuMode::Dedicated };
            if request.cpu_mode == mode && !f.shared {
                return host.session().decide(request);
            }
            let mut r = request.clone();
            r.cpu_mode = mode;
            if f.shared {
                r.overcommit = f.overcommit;
            }
            host.session().decide(&r)
        };
        let choice = self.fleet.select_with(&request, &Constraints::default(), Spread::default(), &mut decide);
        self.result.planner_calls += calls;
        let Ok(choice) = choice else {
            self.result.rejected += 1;
            return None;
        };
        let Some(h) = host_id(&choice.host).filter(|&h| h < self.hosts.len()) else {
            self.result.planner_faults += 1;
            self.result.rejected += 1;
            return None;
        };
        // The fleet's host shares the placement with the record.
        let record = PlacementRecord::planned(&choice.decision, &request);
        let placement = Arc::clone(&record.placement);
        if self.fleet.record(&choice.host, choice.generation, &record).is_err() {
            self.result.planner_faults += 1;
            self.result.rejected += 1;
            return None;
        }
        let host = &mut self.hosts[h];
        let facts = &self.facts[host.kind];
        let placed = match policy.planner() {
            Some(_) => host.record(facts, id, &placement, policy.hides_topology(), &self.scoring),
            None => host.record_float(facts, id, &placement, &self.scoring),
        };
        self.refresh(h);
        self.result.accepted += 1;
        self.result.single_node += u64::from(placed.single_node);
        self.result.locality_sum += placed.locality;
        self.result.peak_running_vms = self.result.peak_running_vms.max(self.totals.vms);
        Some(h)
    }

    fn depart(&mut self, id: u32, h: usize) {
        if let Some(name) = self.hosts[h].remove(id) {
            // Recorded by `arrive`, so the fleet holds it.
            let _ = self.fleet.unplace(&self.names[h], 0, &name);
            self.refresh(h);
        }
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
    fleet: &HostMix,
    trace: &Trace,
    policy: SimPolicy,
    cfg: &Config,
    progress: &mut dyn FnMut(usize),
) -> PolicyResult {
    let facts: Vec<KindFacts> = fleet.kinds.iter().map(KindFacts::new).collect();
    let scoring = Scoring::new(cfg.model, cfg.sensitivity, common_sizes(trace));
    let mut inventory = numaplace_fleet::Fleet::with_ranking(cfg.host_order);
    let mut names = Vec::with_capacity(fleet.hosts.len());
    let mut hosts = Vec::with_capacity(fleet.hosts.len());
    for (h, &k) in fleet.hosts.iter().enumerate() {
        let name = host_name(h);
        let f = &facts[k];
        inventory.insert(FleetHost::new(name.clone(), Arc::clone(&f.topology), f.template.clone(), BTreeMap::new(), 0));
        names.push(name);
        let mut host = Host::new(k, f);
        if let Some(fh) = inventory.host(names.last().map_or("", String::as_str)) {
            host.summary = host.summarise(f, &fh.state, fh.free(), &scoring);
        }
        hosts.push(host);
    }
    let fleet_slots = fleet.hosts.iter().map(|&k| u64::from(facts[k].total_slots)).sum();
    let fleet_memory = fleet.hosts.iter().map(|&k| facts[k].total_memory).sum();
    let mut totals = Summary::default();
    for h in &hosts {
        totals.add(&h.summary);
    }
    let any_shared = facts.iter().any(|f| f.shared);
    let mut engine = Engine {
        policy,
        facts,
        fleet: inventory,
        names,
        hosts,
        any_shared,
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
    for (host, name) in engine.hosts.iter().zip(&engine.names) {
        let Some(fh) = engine.fleet.host(name) else { continue };
        for (cpu, mem) in host.node_use(&engine.facts[host.kind], &fh.state) {
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
