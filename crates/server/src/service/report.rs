//! An agent's report of the domains on its host: the command
//! ([`Service::report_domains`]) and the pure reconciliation it commits
//! ([`reconcile`]): which of the service's placements the host lacks,
//! which run pinned otherwise than placed (and the CPUs held for them
//! meanwhile), which domains the service did not place are recorded as
//! taken, and which VMs sit on CPUs the host reserves.

use super::claims::{Commit, Step};
use super::locks::lock;
use super::rows::{self, claimed_pus, Record, HOLD_SUFFIX};
use super::{Service, REPINNED};
use crate::audit::line as audit;
use crate::command::Report;
use crate::error::{ApiError, Change};
use numaplace_emit::text::plural;
use numaplace_plan::{CpuMode, GuestTopology, HostState, MemoryMode, Placement, PlacementRecord, StateError, VcpuPin};
use numaplace_store::{HostChange, PlacementRow};
use numaplace_topo::{CpuSet, NodeId, Topology};
use numaplace_wire::fleet::{DomainsAnswerDoc, SkipDoc};
use std::collections::BTreeMap;

/// What a report makes of a host: the answer, the agent's rows to store
/// in place of the last report's, and the host's state with them.
struct Reconciled {
    answer: DomainsAnswerDoc,
    add: Vec<PlacementRow>,
    state: HostState,
}

impl Service {
    /// An agent's report of the domains on its host: domains the service
    /// did not place are recorded as taken (replacing the last report);
    /// the service's placements the host lacks are listed for the agent
    /// to apply.
    pub fn report_domains(&self, report: &Report) -> Result<DomainsAnswerDoc, ApiError> {
        let name = report.host.as_str();
        self.claims.with_retries(Change::Report(name.to_string()), |_| {
            let _claim = self.claims.decide();
            self.sync()?;
            let host = self.cache.existing_host(name)?;
            let records = self.cache.records(Some(name))?;
            // The service's placements stand; the agent's are rebuilt.
            let (ours, agents): (Vec<Record>, Vec<Record>) = records.into_iter().partition(Record::is_service);
            let old: Vec<String> = agents.iter().map(|r| r.vm().to_string()).collect();
            let fleet_host = self.cache.build(&host, ours.iter())?;
            let topology = fleet_host.topology.clone();
            let elsewhere = |vm: &str| -> Result<Option<String>, ApiError> {
                Ok(self.cache.row(vm)?.map(|r| r.host).filter(|h| h != name))
            };
            let done = reconcile(report, &ours, fleet_host.state, &topology, &elsewhere)?;
            let after: Vec<String> = done.add.iter().map(|p| p.vm.clone()).collect();
            let change =
                HostChange { host: name.to_string(), generation: host.generation, remove: old.clone(), add: done.add };
            match self.claims.commit(&[change], None)? {
                Commit::Done => {}
                Commit::Lost(host) => return Ok(Step::Stale(Some(host))),
                Commit::Unknown(_) => return Err(ApiError::OutcomeUnknown),
            }
            if old != after {
                audit::agent_report(name, host.generation + 1, &old, &after);
            }
            self.sync()?;
            lock(&self.reports).insert(name.to_string(), summary(&done.answer));
            self.record_locality(&report.memory, &done.state);
            Ok(Step::Done(done.answer))
        })
    }
}

/// The last report of a host, in words (the web view's host page).
fn summary(answer: &DomainsAnswerDoc) -> String {
    format!(
        "{} the service did not place recorded as taken ({}); placements to apply: {}; conflicts: {}",
        plural(answer.recorded.len(), "domain"),
        answer.recorded.join(", "),
        if answer.to_apply.is_empty() { "none".to_string() } else { answer.to_apply.join(", ") },
        if answer.conflicts.is_empty() {
            "none".to_string()
        } else {
            answer.conflicts.iter().map(|c| c.message.as_str()).collect::<Vec<_>>().join("; ")
        },
    )
}

/// A report against the service's placements on the host (`ours`, in
/// `state`): see the module's comment. `elsewhere` tells the host the
/// service placed a VM on, when another.
fn reconcile(
    report: &Report,
    ours: &[Record],
    mut state: HostState,
    topology: &Topology,
    elsewhere: &dyn Fn(&str) -> Result<Option<String>, ApiError>,
) -> Result<Reconciled, ApiError> {
    let mut answer = DomainsAnswerDoc::default();
    for r in ours {
        if !report.domains.contains_key(r.vm()) {
            answer.to_apply.push(r.vm().to_string());
        }
    }
    let mut add = Vec::new();
    for r in ours {
        let Some((_, live)) = report.domains.get(r.vm()) else { continue };
        if let Some((conflict, hold)) = repinned(r, live, report.defined.get(r.vm()), &mut state, topology) {
            answer.to_repin.push(r.vm().to_string());
            answer.conflicts.push(conflict);
            add.extend(hold);
        }
    }
    for (vm, (_, p)) in &report.domains {
        if ours.iter().any(|r| r.vm() == vm) {
            continue;
        }
        if let Some(host) = elsewhere(vm)? {
            answer.conflicts.push(SkipDoc {
                code: "elsewhere".into(),
                message: format!("domain {vm} is placed on host {host} by the service"),
            });
            continue;
        }
        match record_domain(&mut state, p) {
            Ok(p) => {
                answer.recorded.push(vm.clone());
                add.push(rows::encode(&report.host, &PlacementRecord::found(p), None));
            }
            Err(e) => answer.conflicts.push(SkipDoc { code: "does-not-fit".into(), message: fault(&state, vm, &e) }),
        }
    }
    // Every VM on CPUs the host reserves, as lint reports it: the
    // registration kept the reservation, no new VM gets those CPUs, and
    // the operator moves these when convenient.
    answer.conflicts.extend(reservation_findings(&state, topology));
    answer.conflicts.extend(memory_findings(&state));
    Ok(Reconciled { answer, add, state })
}

/// A service VM against how its domain really runs (`live`, and its
/// persistent definition when that differs): one re-pinned by hand is a
/// conflict, and the CPUs it runs on beyond its placement are held (an
/// agent row of their own, returned with it) until the two agree again,
/// so no decision hands them out meanwhile. `None`: pinned as placed.
fn repinned(
    r: &Record,
    live: &Placement,
    defined: Option<&Placement>,
    state: &mut HostState,
    topology: &Topology,
) -> Option<(SkipDoc, Option<PlacementRow>)> {
    let (vm, planned) = (r.vm(), r.placement());
    let mut differences = Vec::new();
    let mut runs = CpuSet::new();
    for (how, q) in [("live", Some(live)), ("defined", defined)].into_iter().filter_map(|(h, q)| q.map(|q| (h, q))) {
        if let Some(d) = pin_difference(planned, q) {
            differences.push(format!("{how}: {d}"));
            runs = runs.union(&may_run_on(q));
        }
    }
    if differences.is_empty() {
        return None;
    }
    let extra = runs.difference(&claimed_pus(planned).into_iter().collect());
    let mut message = format!("domain {vm} is not pinned as the service placed it ({})", differences.join("; "));
    let mut row = None;
    if !extra.is_empty() {
        let hold = hold_placement(vm, &extra, topology);
        match state.place(&hold) {
            Ok(()) => {
                message.push_str(&format!(
                    "; the service holds CPUs {extra} as well until they agree (agent --apply pins it back)"
                ));
                row = Some(rows::encode(&r.host, &PlacementRecord::found(hold), None));
            }
            Err(e) => message.push_str(&format!("; {}", fault(state, vm, &e))),
        }
    }
    Some((SkipDoc { code: REPINNED.into(), message }, row))
}

/// Records a domain the service did not place in `state`. A floating
/// domain is load, counted against a CPU it may use that the agent saw
/// free; the service may hold that one (a placement not yet defined, a
/// hold): counted again on one it does not, so it is never blamed for a
/// CPU it only floats over. Returns the placement recorded.
fn record_domain(state: &mut HostState, p: &Placement) -> Result<Placement, StateError> {
    let mut p = p.clone();
    let mut placed = state.place(&p);
    if matches!(placed, Err(StateError::PuTaken { .. })) && p.cpu_mode == CpuMode::Shared {
        p = recount(state, &p);
        placed = state.place(&p);
    }
    placed.map(|()| p)
}

/// The CPUs vCPU `vcpu` of a reported domain may run on: its pin, a
/// mixed VM's floating set, a floating domain's whole set; `None` when
/// it has no such vCPU.
fn vcpu_cpus(q: &Placement, vcpu: u32) -> Option<CpuSet> {
    if q.cpu_mode == CpuMode::Shared {
        return q.vcpus.iter().any(|v| v.vcpu == vcpu).then(|| q.cpuset.clone());
    }
    if let Some(set) = q.floats(vcpu) {
        return Some(set.clone());
    }
    q.vcpus.iter().find(|v| v.vcpu == vcpu).map(|v| std::iter::once(v.pu).collect())
}

/// Every CPU a reported domain's vCPUs may run on.
fn may_run_on(q: &Placement) -> CpuSet {
    q.vcpus.iter().filter_map(|v| vcpu_cpus(q, v.vcpu)).fold(CpuSet::new(), |u, s| u.union(&s))
}

/// How a service VM's domain (`q`, as libvirt has it) is pinned
/// otherwise than its placement, worded; `None` when every pinned vCPU
/// is where it was placed. Only pins are compared: a shared VM's floating
/// set follows the host's dedicated VMs and is not the placement's to keep.
fn pin_difference(planned: &Placement, q: &Placement) -> Option<String> {
    if planned.cpu_mode != CpuMode::Dedicated {
        return None;
    }
    let moved: Vec<String> = planned
        .vcpus
        .iter()
        .filter(|v| planned.floats(v.vcpu).is_none())
        .filter_map(|v| {
            let placed: CpuSet = std::iter::once(v.pu).collect();
            match vcpu_cpus(q, v.vcpu) {
                Some(have) if have == placed => None,
                Some(have) => Some(format!("vCPU {} on CPUs {have}, placed on CPU {}", v.vcpu, v.pu)),
                None => Some(format!("no vCPU {}, placed on CPU {}", v.vcpu, v.pu)),
            }
        })
        .collect();
    (!moved.is_empty()).then(|| moved.join(", "))
}

/// A dedicated placement of no memory holding `cpus` for a re-pinned
/// domain ([`HOLD_SUFFIX`]): decisions treat them as taken.
fn hold_placement(vm: &str, cpus: &CpuSet, topology: &Topology) -> Placement {
    let vcpus: Vec<VcpuPin> = cpus
        .iter()
        .filter_map(|pu| {
            let node = topology.pu(pu).and_then(|p| p.node).and_then(|n| topology.nodes().get(n))?.id;
            Some((pu, node))
        })
        .enumerate()
        .map(|(i, (pu, node))| VcpuPin { vcpu: i as u32, pu, node })
        .collect();
    let mut nodes: Vec<NodeId> = vcpus.iter().map(|v| v.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    Placement {
        vm: format!("{vm}{HOLD_SUFFIX}"),
        nodes,
        cpu_mode: CpuMode::Dedicated,
        cpuset: vcpus.iter().map(|v| v.pu).collect(),
        guest: GuestTopology { sockets: 1, dies: 1, cores: vcpus.len() as u32, threads: 1, cells: Vec::new() },
        vcpus,
        emulator: CpuSet::new(),
        memory: Vec::new(),
        memory_bytes: 0,
        memory_mode: MemoryMode::default(),
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
    }
}

/// Why domain `vm` could not be recorded, naming the domain at fault and
/// the VM that holds the CPU it wants.
fn fault(state: &HostState, vm: &str, e: &StateError) -> String {
    if let StateError::PuTaken { pu, .. } = e {
        let holder = state.cpu_holders().into_iter().find(|h| h.vm != vm && h.cpus.contains(*pu));
        if let Some(h) = holder {
            let who = match h.vm.strip_suffix(HOLD_SUFFIX) {
                Some(base) => format!("the service holds for {base} (its domain runs there)"),
                None => format!("VM {} holds", h.vm),
            };
            return format!("domain {vm} is pinned on CPU {pu}, which {who}: domain {vm} is the one to move");
        }
    }
    format!("domain {vm}: {e}")
}

/// A floating domain counted again, each vCPU against the least loaded
/// CPU of its set that no dedicated VM holds (as it was counted by the
/// agent, which could not see the service's own holds).
fn recount(state: &HostState, p: &Placement) -> Placement {
    let mut out = p.clone();
    let mut load: BTreeMap<u32, u32> = BTreeMap::new();
    for v in &mut out.vcpus {
        let best = p
            .cpuset
            .iter()
            .filter(|&pu| !state.pu_taken(pu))
            .min_by_key(|&pu| (state.pu_shared_load(pu) + load.get(&pu).copied().unwrap_or(0), pu));
        let node = best.and_then(|pu| state.pu_node(pu)).and_then(|n| state.nodes().nth(n)).map(|n| n.id);
        if let (Some(pu), Some(node)) = (best, node) {
            v.pu = pu;
            v.node = node;
            *load.entry(pu).or_default() += 1;
        }
    }
    out
}

/// The nodes whose VMs use more memory than the node now has for VMs: a
/// registration keeps the VMs already there when the host's memory
/// reserve or QEMU overhead grows under them (the host is described as it
/// is; refusing would stop the agent's reports), so the operator hears it
/// here, round after round, until the VMs move. A warning: no new VM gets
/// memory on such a node, so nothing is given twice.
fn memory_findings(state: &HostState) -> Vec<SkipDoc> {
    let mut out = Vec::new();
    for (i, cap) in state.capacity().iter().enumerate() {
        let used = state.memory_used(i) + state.overhead_used(i);
        if used <= cap.memory {
            continue;
        }
        let vms: Vec<&str> = state
            .placements()
            .iter()
            .filter(|p| !p.vm.ends_with(HOLD_SUFFIX) && p.memory.iter().any(|&(n, b)| n == cap.id && b > 0))
            .map(|p| p.vm.as_str())
            .collect();
        out.push(SkipDoc {
            code: DomainsAnswerDoc::RESERVED_MEMORY.into(),
            message: format!(
                "{}: its VMs ({}) use {} with QEMU's overhead, over the {} it now has for VMs by {}: the \
                 host's memory reserve or QEMU overhead grew under them; move one to free the node",
                cap.id,
                vms.join(", "),
                numaplace_topo::format_size(used),
                numaplace_topo::format_size(cap.memory),
                numaplace_topo::format_size(used - cap.memory)
            ),
        });
    }
    out
}

/// The VMs on CPUs the host reserves, each as `lint`'s `reserved-cpus`
/// words it (a floating VM without any CPU restriction is not one), and
/// dedicated vCPUs in the shared pool.
fn reservation_findings(state: &HostState, topology: &Topology) -> Vec<SkipDoc> {
    let r = state.reservations();
    if r.cpus.is_empty() && r.shared_cpus.is_empty() {
        return Vec::new();
    }
    let all = (0..topology.nodes().len()).fold(CpuSet::new(), |u, i| u.union(&topology.node_online_cpus(i)));
    let cpus = |set: &CpuSet| format!("{} {set}", if set.len() == 1 { "CPU" } else { "CPUs" });
    let mut out = Vec::new();
    for p in state.placements().iter().filter(|p| !p.vm.ends_with(HOLD_SUFFIX)) {
        let (mine, pinned) = match p.cpu_mode {
            CpuMode::Shared if p.cpuset == all => continue,
            CpuMode::Shared => (p.cpuset.clone(), CpuSet::new()),
            CpuMode::Dedicated => {
                let pinned: CpuSet = p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()).map(|v| v.pu).collect();
                (may_run_on(p), pinned)
            }
        };
        let on = mine.intersection(&r.cpus);
        if !on.is_empty() {
            out.push(SkipDoc {
                code: "reserved-cpus".into(),
                message: format!(
                    "VM {}: vCPUs may run on {}, which the host reserves for itself (reserved CPUs {})",
                    p.vm,
                    cpus(&on),
                    r.cpus
                ),
            });
            continue;
        }
        let pooled = pinned.intersection(&r.shared_cpus);
        if !pooled.is_empty() {
            out.push(SkipDoc {
                code: "shared-cpus".into(),
                message: format!(
                    "VM {}: dedicated vCPUs pinned on {}, in the host's shared pool (shared CPUs {})",
                    p.vm,
                    cpus(&pooled),
                    r.shared_cpus
                ),
            });
        }
    }
    out
}
