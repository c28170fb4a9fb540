//! Rules about the vCPU count: counts that do not split over the nodes a
//! wide VM spans, and more vCPUs than physical cores where they may run.

use super::{allowed_cpus, finding, is_wide, plural, resize_only, span, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{SourceFormat, Vm};

/// Cost of an odd count on a wide VM (background § Guest NUMA topology).
pub const ODD_IMPACT: &str = "docs/background.md § Guest NUMA topology [000]: odd vCPU counts are not optimal; \
on a 2 x 12-core host 25 vCPUs (25x1) ran AIDA64 PhotoWorxx at 23900 vs 53000 for 24 vCPUs (24x1)";

/// Cost of sibling contention (background § Hyperthread siblings).
pub const SMT_IMPACT: &str = "docs/background.md § Hyperthread siblings [004] (XAPI): a 32-vCPU VM confined to \
one node of 16 cores x 2 threads lost 40-75% (OpenSSL, POV-Ray, OpenVINO) to hyperthread sibling contention, \
against about 20% memory latency gained by locality";

/// The vCPU count a fix proposes: the nearest multiple of the node count,
/// upwards unless that passes the host's cores.
pub fn even_vcpus(vcpus: u32, nodes: u32, total_cores: u32) -> u32 {
    let k = nodes.max(1);
    let up = vcpus.div_ceil(k) * k;
    let down = vcpus / k * k;
    if up <= total_cores.max(k) || down == 0 {
        up
    } else {
        down
    }
}

/// A wide VM whose vCPU count does not divide by the nodes it spans.
#[derive(Clone, Copy, Debug, Default)]
pub struct OddVcpusWide;

impl Rule for OddVcpusWide {
    fn id(&self) -> &'static str {
        "odd-vcpus-wide"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a VM wider than a node whose vCPU count does not split evenly over its nodes (odd counts)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let (k, _) = span(vm, cx.host);
        if !is_wide(vm, cx.host) || k < 2 || vm.vcpus.is_multiple_of(k) {
            return Vec::new();
        }
        let mirrored = cells_mirror_nodes(vm, cx);
        let better = even_vcpus(vm.vcpus, k, cx.host.total_cores());
        let message = format!(
            "{} vCPUs on a VM wider than a node ({} cores) do not split evenly over {}",
            vm.vcpus,
            cx.host.node_cores(),
            plural(k, "host node")
        );
        let fix = match vm.format {
            SourceFormat::Vmx => format!("set numvcpus = \"{better}\" (a multiple of {k})"),
            SourceFormat::Libvirt => {
                format!("use {better} vCPUs (a multiple of {k}), split evenly over the guest cells")
            }
            SourceFormat::Request => format!("ask for {better} vCPUs (a multiple of {k})"),
        };
        let mut f = resize_only(finding(self, vm, message, [vm.ev(vm.vcpus_at)], ODD_IMPACT, fix.clone()));
        if mirrored {
            // The guest is shown its uneven cells as they are (each pinned
            // to its own host node): it schedules knowing them, unlike the
            // even virtual nodes the measurements in docs/background.md.
            super::as_info(&mut f, "; the guest's cells mirror them unevenly, as pinned (deliberate)", &fix);
        }
        vec![f]
    }
}

/// Whether the VM has written guest cells, each with its vCPUs pinned
/// inside one host node, no two cells on the same node.
fn cells_mirror_nodes(vm: &Vm, cx: &Context<'_>) -> bool {
    if vm.cells_derived || vm.cells.len() < 2 {
        return false;
    }
    let mut seen = std::collections::BTreeSet::new();
    for cell in vm.cells.iter().filter(|c| !c.vcpus.is_empty()) {
        let mut nodes = std::collections::BTreeSet::new();
        for v in cell.vcpus.iter() {
            let Some(pin) = vm.pin(v) else { return false };
            nodes.extend(cx.host.nodes_of(&pin.cpus));
        }
        if nodes.len() != 1 || !seen.insert(nodes.into_iter().next()) {
            return false;
        }
    }
    true
}

/// More vCPUs than physical cores on the CPUs the VM may use.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmtContention;

impl Rule for SmtContention {
    fn id(&self) -> &'static str {
        "smt-contention"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "more vCPUs than physical cores in the nodes or CPUs the VM may use (sibling contention)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let restricted = allowed_cpus(vm, cx.host);
        let whole_host = restricted.is_none();
        let (cpus, at) = restricted.unwrap_or_else(|| (cx.host.topology.online_cpus(), vec![]));
        let cores = cx.host.cores_in(&cpus) as u32;
        if cores == 0 || vm.vcpus <= cores {
            return Vec::new();
        }
        let nodes = cx.host.nodes_of(&cpus);
        let message = format!(
            "{} vCPUs may run {} {} ({} physical cores on {}): vCPUs share hyperthread siblings",
            vm.vcpus,
            if whole_host { "on all" } else { "only on" },
            plural(cpus.len() as u64, "CPU"),
            cores,
            plural(nodes.len() as u64, "host node")
        );
        let need = vm.vcpus.div_ceil(cx.host.node_cores().max(1));
        let host_cores = cx.host.total_cores();
        let fix = if vm.vcpus > host_cores {
            let key = if vm.format == SourceFormat::Vmx { "numvcpus" } else { "the vCPU count" };
            format!("reduce {key} to {host_cores} or fewer: the whole host has {host_cores} physical cores")
        } else {
            match vm.format {
                SourceFormat::Vmx => format!(
                "widen numa.nodeAffinity / sched.cpu.affinity to {} with {} free cores, or reduce numvcpus to {cores}",
                plural(need, "node"),
                vm.vcpus
            ),
                _ => format!(
                    "pin the vCPUs to {} distinct cores over {} (numaplace lint --fix), or reduce the vCPUs to {cores}",
                    vm.vcpus,
                    plural(need, "node")
                ),
            }
        };
        let mut ev = at;
        ev.push(vm.ev(vm.vcpus_at));
        let mut f = finding(self, vm, message, ev, SMT_IMPACT, fix);
        if vm.vcpus > host_cores {
            f = resize_only(f);
        }
        // Whole cores instead, when the host has them for this VM: plan it
        // again preferring cores; else the vCPU count is the only lever.
        let cores_instead = if vm.vcpus > host_cores {
            format!("reduce the vCPUs to {host_cores} or fewer (a resize)")
        } else {
            "plan it again with smt=prefer-cores on nodes with whole cores free".to_string()
        };
        if let Some(t) = told_threads(vm, cx) {
            // A deliberate choice (`smt=pairs`, or a host without whole
            // cores to spare): the guest knows its CPUs are threads of
            // shared cores and schedules accordingly.
            let why = if t == 2 {
                ", as sibling pairs the guest sees as threads of one core (deliberate)".to_string()
            } else {
                format!(", in groups of {t} the guest sees as threads of one core (deliberate)")
            };
            super::as_info(&mut f, &why, &cores_instead);
        } else if vm.planned_sibling_vcpus.is_some_and(|n| n as usize == paired_vcpus(vm, cx))
            && vm.shape.as_ref().is_none_or(|s| s.threads <= 1)
        {
            // numaplace paired them on purpose (`compact`, or no whole
            // core was left) and its plan says which; the mark still
            // matches the pins, so nobody moved them since. A guest told
            // threads its cores do not hold (pairs on four-thread cores
            // holding four of its vCPUs) is not what numaplace wrote.
            super::as_info(
                &mut f,
                ", as the sibling pairs numaplace planned (its plan's notes say why)",
                &cores_instead,
            );
        } else if vm.planned_shared {
            // numaplace planned it shared (or mixed): its vCPUs (or the
            // floating ones) share CPUs at the overcommit its request asked
            // for.
            super::as_info(
                &mut f,
                ", as the shared or mixed VM it was planned to be (deliberate)",
                "plan it again as a dedicated VM (cpu=dedicated) for a core per vCPU",
            );
        } else if floats(vm) && vm.vcpus as usize <= cpus.len() {
            // Unpinned vCPUs over at least as many CPUs: the host
            // scheduler fills idle cores before siblings, so threads are
            // shared only while every core is busy (numaplace's shared
            // VMs, overcommitted by choice).
            super::as_info(
                &mut f,
                ", but they float over as many CPUs and the host scheduler uses idle cores first (shared)",
                "pin the vCPUs one per core for a guarantee",
            );
        }
        vec![f]
    }
}

/// Whether some vCPU is not pinned to one CPU.
fn floats(vm: &Vm) -> bool {
    (0..vm.vcpus).any(|v| vm.pin(v).is_none_or(|p| p.cpus.len() > 1))
}

/// How many of a fully pinned VM's vCPUs share a core with another of its
/// vCPUs (0 unless every vCPU is pinned to one CPU).
fn paired_vcpus(vm: &Vm, cx: &Context<'_>) -> usize {
    if !vm.dedicated() {
        return 0;
    }
    let core = |cpu: u32| cx.host.topology.pu(cpu).and_then(|p| p.core);
    let one: Vec<u32> = (0..vm.vcpus).filter_map(|v| vm.pin(v).and_then(|p| p.cpus.first())).collect();
    one.iter()
        .enumerate()
        .filter(|&(i, &a)| {
            core(a).is_some() && one.iter().enumerate().any(|(j, &b)| j != i && b != a && core(b) == core(a))
        })
        .count()
}

/// The guest's threads per core (2, or 4 on a four-thread host) when
/// every group of that many vCPUs (0-1, 2-3, ... for 2) is pinned to
/// threads of one core, one CPU each, and no core holds vCPUs of two
/// groups: the guest then knows which of its CPUs share a core.
fn told_threads(vm: &Vm, cx: &Context<'_>) -> Option<u32> {
    let core = |cpu: u32| cx.host.topology.pu(cpu).and_then(|p| p.core);
    let t = vm.shape.as_ref()?.threads;
    if t < 2 || !vm.vcpus.is_multiple_of(t) || !vm.fully_pinned() {
        return None;
    }
    let one = |v: u32| vm.pin(v).filter(|p| p.cpus.len() == 1).and_then(|p| p.cpus.first());
    let mut cores = Vec::with_capacity((vm.vcpus / t) as usize);
    for group in 0..vm.vcpus / t {
        let cpus: Option<Vec<u32>> = (group * t..(group + 1) * t).map(one).collect();
        let mut cpus = cpus?;
        let first = core(*cpus.first()?)?;
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.len() != t as usize || cpus.iter().any(|&c| core(c) != Some(first)) {
            return None;
        }
        cores.push(first);
    }
    let groups = cores.len();
    cores.sort_unstable();
    cores.dedup();
    (cores.len() == groups).then_some(t)
}
