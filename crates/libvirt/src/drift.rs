//! Drift: what runs against what was planned. The plan is a placement
//! (from a plan document, read through the domain XML numaplace emits
//! for it) or, without one, the domain's own persistent definition; what
//! runs is libvirt's live view of each vCPU and the emulator threads
//! (`virsh vcpuinfo`, `emulatorpin`) and the memory of the QEMU process per
//! node (`/proc/PID/numa_maps`, as `top` reads it).

use crate::Held;
use crate::{Libvirt, VcpuInfo, VirtError};
use numaplace_observe::{numa_maps, procfs, Source};
use numaplace_topo::{format_size, CpuSet};
use std::collections::BTreeMap;
use std::fmt::{self, Write};

/// Memory found outside the planned nodes is drift above this many
/// bytes or this share of the process's memory, whichever is larger:
/// QEMU's own allocations before libvirt binds it, and page cache of its
/// files, land anywhere and are no drift.
pub const OFF_PLAN_BYTES: u64 = 16 << 20;
/// The share (1/20) of the process's memory, as a divisor.
pub const OFF_PLAN_SHARE: u64 = 20;

/// What runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The domain is defined.
    pub defined: bool,
    /// It runs.
    pub running: bool,
    /// Each vCPU: where it ran last and may run.
    pub vcpus: Vec<VcpuInfo>,
    /// The emulator threads' CPUs.
    pub emulator: Option<CpuSet>,
    /// The QEMU process's memory per node, bytes, when readable.
    pub memory: Option<BTreeMap<u32, u64>>,
}

/// One difference between plan and what runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// No domain of that name is defined.
    NotDefined,
    /// The domain is defined but does not run.
    NotRunning,
    /// It runs another number of vCPUs.
    VcpuCount {
        /// Planned.
        planned: u32,
        /// Running.
        running: u32,
    },
    /// A vCPU may run on other CPUs than planned.
    Vcpu {
        /// The vCPU.
        vcpu: u32,
        /// Planned CPUs.
        planned: CpuSet,
        /// CPUs it may use now.
        actual: CpuSet,
    },
    /// The emulator threads may run on other CPUs than planned.
    Emulator {
        /// Planned.
        planned: CpuSet,
        /// Now.
        actual: CpuSet,
    },
    /// The plan names CPUs or nodes this host does not have: nothing can
    /// run as planned (a plan for another machine).
    NotOnHost {
        /// `CPUs` or `nodes`.
        what: &'static str,
        /// The missing ones.
        ids: CpuSet,
    },
    /// A thread of a floating domain may run on CPUs the plan dedicates
    /// (apply narrows every floating domain off them).
    OnDedicated {
        /// `vCPU N`, `emulator threads` or `I/O thread N`.
        thread: String,
        /// The dedicated CPUs it may use.
        cpus: CpuSet,
    },
    /// Memory sits on nodes the plan binds none to.
    MemoryOffPlan {
        /// Nodes planned.
        planned: CpuSet,
        /// Bytes on each other node.
        found: Vec<(u32, u64)>,
    },
}

impl Difference {
    /// A stable code for programs.
    pub fn code(&self) -> &'static str {
        match self {
            Difference::NotDefined => "not-defined",
            Difference::NotRunning => "not-running",
            Difference::VcpuCount { .. } => "vcpu-count",
            Difference::Vcpu { .. } => "vcpu",
            Difference::Emulator { .. } => "emulator",
            Difference::MemoryOffPlan { .. } => "memory-off-plan",
            Difference::NotOnHost { .. } => "not-on-host",
            Difference::OnDedicated { .. } => "on-dedicated",
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::NotDefined => f.write_str("no domain of that name is defined"),
            Difference::NotRunning => f.write_str("the domain is defined but not running"),
            Difference::VcpuCount { planned, running } => {
                let verb = if *running == 1 { "runs" } else { "run" };
                write!(f, "{} {verb}, {planned} planned", numaplace_emit::text::plural(*running, "vCPU"))
            }
            Difference::Vcpu { vcpu, planned, actual } => {
                write!(f, "vCPU {vcpu} may run on CPUs {actual}, planned {planned}")
            }
            Difference::Emulator { planned, actual } => {
                write!(f, "emulator threads may run on CPUs {actual}, planned {planned}")
            }
            Difference::NotOnHost { what, ids } => {
                write!(f, "the plan names {what} {ids}, which this host does not have: nothing can run as planned")
            }
            Difference::OnDedicated { thread, cpus } => {
                write!(f, "{thread} may run on CPUs {cpus}, which the plan dedicates (apply narrows it off them)")
            }
            Difference::MemoryOffPlan { planned, found } => {
                let list: Vec<String> = found.iter().map(|(n, b)| format!("{} on node{n}", format_size(*b))).collect();
                write!(f, "memory {} outside the planned nodes {planned}", list.join(", "))
            }
        }
    }
}

/// What a VM's comparison says, for people and for the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It runs as planned.
    AsPlanned,
    /// It is defined and does not run: nothing runs to compare, and a
    /// stopped VM is an operator's choice, not drift (unless asked).
    Stopped,
    /// It differs from the plan (or a planned VM is not defined).
    Drift,
}

impl Verdict {
    /// A stable code for programs: `as-planned`, `stopped`, `drift`.
    pub fn code(self) -> &'static str {
        match self {
            Verdict::AsPlanned => "as-planned",
            Verdict::Stopped => "stopped",
            Verdict::Drift => "drift",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::AsPlanned => "as planned",
            Verdict::Stopped => "stopped (not drift)",
            Verdict::Drift => "DRIFT",
        })
    }
}

/// One VM's comparison.
#[derive(Clone, Debug)]
pub struct Report {
    /// The VM.
    pub vm: String,
    /// What was planned, as its definition says.
    pub planned: Held,
    /// What runs.
    pub observed: Observed,
    /// The differences (empty: no drift).
    pub differences: Vec<Difference>,
}

impl Report {
    /// The verdict: a stopped domain is [`Verdict::Stopped`], or drift
    /// when `stopped_is_drift` (a check that every planned VM runs).
    pub fn verdict(&self, stopped_is_drift: bool) -> Verdict {
        match self.differences.as_slice() {
            [] => Verdict::AsPlanned,
            [Difference::NotRunning] if !stopped_is_drift => Verdict::Stopped,
            _ => Verdict::Drift,
        }
    }
}

/// The differences between a plan and what runs.
pub fn compare(planned: &Held, observed: &Observed) -> Vec<Difference> {
    if !observed.defined {
        return vec![Difference::NotDefined];
    }
    if !observed.running {
        return vec![Difference::NotRunning];
    }
    let mut out = Vec::new();
    let want = planned.vcpu_cpus.len() as u32;
    if observed.vcpus.len() as u32 != want && planned.placement.online_vcpus.is_none() {
        out.push(Difference::VcpuCount { planned: want, running: observed.vcpus.len() as u32 });
    }
    for v in &observed.vcpus {
        if let Some(p) = planned.vcpu_cpus.get(v.vcpu as usize) {
            if *p != v.affinity {
                out.push(Difference::Vcpu { vcpu: v.vcpu, planned: p.clone(), actual: v.affinity.clone() });
            }
        }
    }
    if let (Some(p), Some(a)) = (&planned.emulatorpin, &observed.emulator) {
        if p != a {
            out.push(Difference::Emulator { planned: p.clone(), actual: a.clone() });
        }
    }
    // Memory is checked where the plan binds it.
    if let (Some(_), Some(memory)) = (&planned.numatune, &observed.memory) {
        let nodes: CpuSet = planned.placement.memory.iter().map(|m| m.0 .0).collect();
        let total: u64 = memory.values().sum();
        let limit = OFF_PLAN_BYTES.max(total / OFF_PLAN_SHARE);
        let found: Vec<(u32, u64)> =
            memory.iter().filter(|(n, _)| !nodes.contains(**n)).map(|(&n, &b)| (n, b)).collect();
        if found.iter().map(|f| f.1).sum::<u64>() > limit {
            out.push(Difference::MemoryOffPlan { planned: nodes, found });
        }
    }
    out
}

/// A floating domain's threads against the CPUs a plan dedicates: each
/// floating vCPU (one not pinned 1:1 when the domain is `pinned`), the
/// emulator threads and each I/O thread that may run on one of them.
pub fn on_dedicated(
    observed: &Observed,
    iothreads: &[(u32, CpuSet)],
    pinned: bool,
    dedicated: &CpuSet,
) -> Vec<Difference> {
    let mut out = Vec::new();
    for v in observed.vcpus.iter().filter(|v| !pinned || v.affinity.len() > 1) {
        let on = v.affinity.intersection(dedicated);
        if !on.is_empty() {
            out.push(Difference::OnDedicated { thread: format!("vCPU {}", v.vcpu), cpus: on });
        }
    }
    if let Some(e) = &observed.emulator {
        let on = e.intersection(dedicated);
        if !on.is_empty() {
            out.push(Difference::OnDedicated { thread: "emulator threads".into(), cpus: on });
        }
    }
    for (id, cpus) in iothreads {
        let on = cpus.intersection(dedicated);
        if !on.is_empty() {
            out.push(Difference::OnDedicated { thread: format!("I/O thread {id}"), cpus: on });
        }
    }
    out
}

/// The QEMU process running a domain, by the `-name guest=NAME` libvirt
/// gives it.
pub fn qemu_pid(source: &dyn Source, name: &str) -> Option<u32> {
    source.pids().ok()?.into_iter().find(|&pid| {
        source
            .proc_file(pid, "cmdline")
            .ok()
            .and_then(|raw| procfs::qemu_info(&procfs::split_cmdline(&raw)))
            .is_some_and(|q| q.name.as_deref() == Some(name))
    })
}

/// What runs of a domain: libvirt's live pins, and its process's memory
/// per node from `source` (`None` when no process is found or its
/// `numa_maps` does not read).
pub fn observe(lv: &dyn Libvirt, source: &dyn Source, name: &str) -> Result<Observed, VirtError> {
    // A domain starting or stopping while it is read has no live pins
    // for a moment (libvirt: "cpu affinity is not supported"): it is read
    // again, a few times, in whatever state it is then.
    let mut tries = 0;
    loop {
        tries += 1;
        let Some(domain) = lv.domain(name)? else { return Ok(Observed::default()) };
        if !domain.running {
            return Ok(Observed { defined: true, ..Observed::default() });
        }
        let live = lv.vcpu_info(name).and_then(|vcpus| Ok((vcpus, lv.emulator_affinity(name)?)));
        match live {
            Ok((vcpus, emulator)) => {
                let memory = qemu_pid(source, name).and_then(|pid| {
                    let raw = source.proc_file(pid, "numa_maps").ok()?;
                    let maps = numa_maps::parse(&String::from_utf8_lossy(&raw)).ok()?;
                    Some(numa_maps::bytes_per_node(&maps))
                });
                return Ok(Observed { defined: true, running: true, vcpus, emulator: Some(emulator), memory });
            }
            Err(e) if e.is_no_domain() => return Ok(Observed::default()),
            Err(e) if tries >= OBSERVE_TRIES => return Err(e),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
}

/// How often [`observe`] reads a domain whose live pins do not read.
const OBSERVE_TRIES: u32 = 5;

/// The view ZStack shows: which guest cell sits on which host node, and
/// which vCPU on which host CPU, planned and now; then the differences.
/// A stopped domain is drift only with `stopped_is_drift`.
pub fn render_text(reports: &[Report], stopped_is_drift: bool) -> String {
    let mut x = String::new();
    for r in reports {
        let state = match (r.observed.defined, r.observed.running) {
            (false, _) => "not defined",
            (true, false) => "shut off",
            (true, true) => "running",
        };
        let verdict = r.verdict(stopped_is_drift);
        let _ = writeln!(x, "{} ({state}): {verdict}", r.vm);
        let p = &r.planned.placement;
        for c in &p.guest.cells {
            let _ = writeln!(
                x,
                "  guest cell{} -> host node{}: vCPUs {}, {}",
                c.id,
                c.host_node.0,
                c.vcpus,
                format_size(c.memory_bytes)
            );
        }
        if r.observed.running {
            let _ = writeln!(x, "  vCPU  planned CPUs  may run on  ran on");
            for v in &r.observed.vcpus {
                let planned = r.planned.vcpu_cpus.get(v.vcpu as usize).map_or("-".to_string(), |s| s.to_list());
                let ran = v.cpu.map_or("-".to_string(), |c| c.to_string());
                let mark = if planned == v.affinity.to_list() { "" } else { "  <-" };
                let _ = writeln!(x, "  {:<5} {:<13} {:<11} {ran}{mark}", v.vcpu, planned, v.affinity.to_list());
            }
            if let Some(e) = &r.observed.emulator {
                let planned = r.planned.emulatorpin.as_ref().map_or("any".to_string(), |s| s.to_list());
                let _ = writeln!(x, "  emulator: planned CPUs {planned}, may run on {e}");
            }
            match &r.observed.memory {
                Some(m) => {
                    let planned: Vec<String> =
                        p.memory.iter().map(|(n, b)| format!("{n} {}", format_size(*b))).collect();
                    let now: Vec<String> = m.iter().map(|(n, b)| format!("node{n} {}", format_size(*b))).collect();
                    let _ = writeln!(x, "  memory: planned {}; now {}", planned.join(", "), now.join(", "));
                }
                None => {
                    let _ = writeln!(x, "  memory: the QEMU process's numa_maps could not be read");
                }
            }
        }
        if verdict == Verdict::Drift {
            for d in &r.differences {
                let _ = writeln!(x, "  drift: {d}");
            }
        }
        x.push('\n');
    }
    let count = |v: Verdict| reports.iter().filter(|r| r.verdict(stopped_is_drift) == v).count();
    let _ = write!(x, "{} of {} domains drifted from the plan", count(Verdict::Drift), reports.len());
    match count(Verdict::Stopped) {
        0 => x.push('\n'),
        stopped => {
            let _ = writeln!(x, "; {stopped} stopped (not drift; --stopped-is-drift counts them)");
        }
    }
    x
}

/// One VM of a sample beside what its libvirt definition plans.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedRow {
    /// The VM (the domain's and the process's name).
    pub name: String,
    /// Nodes its definition puts memory on.
    pub nodes: CpuSet,
    /// CPUs its vCPUs may use.
    pub cpus: CpuSet,
    /// Every vCPU pinned to a CPU of its own.
    pub pinned: bool,
    /// Where it runs now (the sample's home nodes).
    pub home: CpuSet,
    /// Its home nodes are not all among the planned nodes.
    pub off_plan: bool,
    /// N%L of the sample.
    pub local_percent: Option<f64>,
}

/// `top --state`: each VM of a sample that is a domain of `held`, beside
/// what its definition plans.
pub fn planned_rows(snap: &numaplace_observe::sample::Snapshot, held: &[Held]) -> Vec<PlannedRow> {
    snap.processes
        .iter()
        .filter_map(|p| {
            let h = held.iter().find(|h| h.placement.vm == p.name)?;
            let nodes: CpuSet = h.placement.memory.iter().map(|m| m.0 .0).collect();
            let home: CpuSet = p.home_nodes.iter().copied().collect();
            Some(PlannedRow {
                name: p.name.clone(),
                cpus: h.vcpu_cpus.iter().fold(CpuSet::new(), |u, s| u.union(s)),
                pinned: h.pinned,
                off_plan: !home.is_empty() && !home.difference(&nodes).is_empty(),
                nodes,
                home,
                local_percent: p.local_percent,
            })
        })
        .collect()
}

/// `top --state`'s text: each VM of a sample beside what its libvirt
/// definition plans (memory nodes, CPUs), marked `!` when its home nodes
/// are not among the planned ones.
pub fn render_planned(rows: &[PlannedRow], source: &str) -> String {
    let mut x = format!("\nAs defined in {source} ('!': home node(s) outside the planned nodes):\n");
    let _ = writeln!(x, "  {:<20} {:<14} {:<16} {:<8} N%L", "NAME", "PLANNED NODES", "PLANNED CPUS", "NHN");
    for r in rows {
        let mode = if r.pinned { "" } else { " (floating)" };
        let _ = writeln!(
            x,
            "  {:<20} {:<14} {:<16} {:<8} {}",
            format!("{}{}", r.name, if r.off_plan { " !" } else { "" }),
            r.nodes.to_list(),
            format!("{}{mode}", r.cpus.to_list()),
            r.home.to_list(),
            r.local_percent.map_or("-".to_string(), |l| format!("{l:.0}"))
        );
    }
    if rows.is_empty() {
        let _ = writeln!(x, "  (no VM of this sample is a domain there)");
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaplace_read::read_source;

    fn held(xml: &str) -> Held {
        let topo = read_source("1 socket x 4 cores x 1 thread, 4GiB per node").expect("host");
        let definition = crate::domain::read("d.xml", xml).expect("domain");
        crate::held(&definition, "d.xml", &topo).0
    }

    const DOMAIN: &str = "<domain type='qemu'><name>d</name><memory unit='MiB'>64</memory><vcpu>2</vcpu>\
        <cputune><vcpupin vcpu='0' cpuset='0'/><vcpupin vcpu='1' cpuset='1'/><emulatorpin cpuset='2'/></cputune>\
        <numatune><memory mode='strict' nodeset='0'/></numatune></domain>";

    fn running(aff: &[&str], emulator: &str) -> Observed {
        Observed {
            defined: true,
            running: true,
            vcpus: aff
                .iter()
                .enumerate()
                .map(|(i, a)| VcpuInfo { vcpu: i as u32, cpu: None, affinity: a.parse().expect("list") })
                .collect(),
            emulator: Some(emulator.parse().expect("list")),
            memory: Some(BTreeMap::from([(0, 64 << 20)])),
        }
    }

    #[test]
    fn a_domain_running_as_defined_has_no_drift() {
        assert_eq!(compare(&held(DOMAIN), &running(&["0", "1"], "2")), vec![]);
    }

    #[test]
    fn a_hand_repinned_vcpu_and_emulator_are_reported() {
        let d = compare(&held(DOMAIN), &running(&["0", "0-3"], "0-3"));
        assert_eq!(
            d,
            vec![
                Difference::Vcpu { vcpu: 1, planned: "1".parse().expect("l"), actual: "0-3".parse().expect("l") },
                Difference::Emulator { planned: "2".parse().expect("l"), actual: "0-3".parse().expect("l") },
            ]
        );
        let text = render_text(
            &[Report {
                vm: "d".into(),
                planned: held(DOMAIN),
                observed: running(&["0", "0-3"], "0-3"),
                differences: d,
            }],
            false,
        );
        assert!(text.contains("d (running): DRIFT"), "{text}");
        assert!(text.contains("drift: vCPU 1 may run on CPUs 0-3, planned 1"), "{text}");
    }

    #[test]
    fn a_floating_domain_over_dedicated_cpus_is_drift_thread_by_thread() {
        let dedicated: CpuSet = "1".parse().expect("l");
        let observed = running(&["0-1", "0"], "0-1");
        let got = on_dedicated(&observed, &[(1, "1".parse().expect("l"))], false, &dedicated);
        let threads: Vec<String> = got.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            threads,
            [
                "vCPU 0 may run on CPUs 1, which the plan dedicates (apply narrows it off them)",
                "emulator threads may run on CPUs 1, which the plan dedicates (apply narrows it off them)",
                "I/O thread 1 may run on CPUs 1, which the plan dedicates (apply narrows it off them)",
            ]
        );
        // Narrowed: nothing.
        assert!(on_dedicated(&running(&["0", "0"], "0"), &[], false, &dedicated).is_empty());
    }

    #[test]
    fn a_stopped_or_missing_domain_is_drift_of_its_own_kind() {
        let stopped = Observed { defined: true, ..Observed::default() };
        assert_eq!(compare(&held(DOMAIN), &stopped), vec![Difference::NotRunning]);
        assert_eq!(compare(&held(DOMAIN), &Observed::default()), vec![Difference::NotDefined]);
    }

    #[test]
    fn a_stopped_domain_is_not_drift_unless_asked() {
        let stopped = Observed { defined: true, ..Observed::default() };
        let differences = compare(&held(DOMAIN), &stopped);
        let r = Report { vm: "d".into(), planned: held(DOMAIN), observed: stopped, differences };
        assert_eq!(r.verdict(false), Verdict::Stopped);
        assert_eq!(r.verdict(true), Verdict::Drift);
        let text = render_text(std::slice::from_ref(&r), false);
        assert!(text.contains("d (shut off): stopped (not drift)"), "{text}");
        assert!(text.contains("0 of 1 domains drifted from the plan; 1 stopped"), "{text}");
        assert!(!text.contains("drift: "), "{text}");
        let missing = Report { differences: vec![Difference::NotDefined], observed: Observed::default(), ..r };
        assert_eq!(missing.verdict(false), Verdict::Drift);
    }
}
