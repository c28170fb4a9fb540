//! Rules about vCPU pinning (ZStack's preconditions for a guest topology
//! that mirrors the host) and about pins shared between VMs.

use super::{allowed_cpus, finding, plural, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{SourceFormat, Vm};
use numaplace_topo::CpuSet;

/// Cost of pinning that breaks the mirrored topology (background § Pinning and a mirrored guest topology).
pub const PIN_IMPACT: &str = "docs/background.md § Pinning and a mirrored guest topology [003] (ZStack): a guest \
topology mirrors the host only when every vCPU is pinned and no vCPU is pinned to CPUs of two nodes; with that done \
automatically, MySQL (HammerDB, 24 vCPU / 80 GB) gained +15% TPM on average and +18% under high load";

/// Cost of two VMs on the same CPUs.
pub const OVERLAP_IMPACT: &str = "two VMs that each count on a CPU time-share it, each getting at most half of it; \
sharing only a core's sibling thread already cost 40-75% (docs/background.md § Hyperthread siblings [004]: \
OpenSSL, POV-Ray, OpenVINO)";

/// A vCPU pinned to CPUs of more than one host node.
#[derive(Clone, Copy, Debug, Default)]
pub struct VcpuSpansNodes;

impl Rule for VcpuSpansNodes {
    fn id(&self) -> &'static str {
        "vcpu-spans-nodes"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a vCPU pinned to CPUs of more than one host node (its node is undefined)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let spanning: Vec<_> = vm.pins.iter().filter(|p| cx.host.nodes_of(&p.cpus).len() > 1).collect();
        let Some(first) = spanning.first() else { return Vec::new() };
        let message = format!(
            "{} pinned to CPUs of several host nodes (vCPU {} to CPUs {} on nodes {}): its home node is undefined",
            if spanning.len() == 1 { "1 vCPU is".to_string() } else { format!("{} vCPUs are", spanning.len()) },
            first.vcpu,
            first.cpus,
            cx.host.ids(&cx.host.nodes_of(&first.cpus))
        );
        let fix =
            "pin each vCPU to CPUs of one node (1:1 pinning from numaplace lint --fix or numaplace plan)".to_string();
        vec![finding(self, vm, message, spanning.iter().map(|p| vm.ev(p.at)), PIN_IMPACT, fix)]
    }
}

/// Some vCPUs unpinned while a guest NUMA topology is declared.
#[derive(Clone, Copy, Debug, Default)]
pub struct PartialPinning;

impl Rule for PartialPinning {
    fn id(&self) -> &'static str {
        "partial-pinning"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "some vCPUs unpinned while a guest NUMA topology is declared"
    }

    fn check(&self, vm: &Vm, _cx: &Context<'_>) -> Vec<Finding> {
        // Derived cells (ESXi) are the hypervisor's to keep in place.
        if vm.cells_derived || vm.cells.len() < 2 || vm.fully_pinned() {
            return Vec::new();
        }
        let unpinned: CpuSet = (0..vm.vcpus).filter(|&v| vm.pin(v).is_none()).collect();
        let message = format!(
            "the guest sees {} but {} of {} vCPUs ({unpinned}) are not pinned: the guest's nodes need not match where its vCPUs run",
            plural(vm.cells.len() as u64, "NUMA node"),
            unpinned.len(),
            vm.vcpus
        );
        let fix = "pin every vCPU to CPUs of the host node its guest cell mirrors, and bind each cell's memory there (numaplace lint --fix)".to_string();
        let ev = vm.cells.iter().map(|c| vm.ev(c.at)).chain([vm.ev(vm.vcpus_at)]);
        vec![finding(self, vm, message, ev, PIN_IMPACT, fix)]
    }
}

/// Why a collision between two VMs is reported on `vm` rather than on
/// `other` (the intruder: the one that breaks the host's rules), as a
/// clause for the message; `None` when it is `other`'s to carry.
///
/// A VM that is not pinned 1:1 is the intruder over a dedicated one
/// (unpinned over pinned). Between two dedicated VMs: a FILE over a
/// domain already on the host (`--state`), else the one pinned on CPUs
/// the host keeps (reserved, or its shared pool: a dedicated VM does not
/// go there), else
/// the smaller (fewer vCPUs: less to move, and the larger one is most
/// often the incumbent whose CPUs the other was put on), else, when
/// nothing else decides, the later of the two in the canonical order
/// (the host's domains first, then by VM name: `lint` sees the VMs in
/// that order), never the order the files were named in.
pub(crate) fn intruder_why(vm: &Vm, other: &Vm, cx: &Context<'_>) -> Option<String> {
    if !vm.dedicated() {
        return Some(String::new());
    }
    let kept = cx.host.kept_cpus();
    let rank = |v: &Vm| {
        // A VM too large for the host is not ranked apart: the fix leaves
        // it as it is and it keeps its CPUs, so the other one must move.
        let at = cx.position(v).unwrap_or(usize::MAX);
        let on_kept = v.pins.iter().any(|p| !p.cpus.is_disjoint(&kept));
        (at >= cx.incumbents, on_kept, std::cmp::Reverse(v.vcpus), at)
    };
    let (mine, theirs) = (rank(vm), rank(other));
    if mine < theirs {
        return None;
    }
    Some(if mine.0 && !theirs.0 {
        format!(
            "; reported on this VM, not on {}: {} is already on the host, this VM is new to it",
            other.name, other.name
        )
    } else if mine.1 && !theirs.1 {
        format!(
            "; reported on this VM, not on {}: this VM is pinned on CPUs the host keeps (reserved or its shared pool)",
            other.name
        )
    } else if mine.2 != theirs.2 {
        format!(
            "; reported on this VM, not on {}: both are pinned 1:1 and this one is the smaller ({} against {}), \
             the one with less to move",
            other.name,
            plural(u64::from(vm.vcpus), "vCPU"),
            other.vcpus
        )
    } else {
        format!(
            "; reported on this VM, not on {}: both are pinned 1:1 and nothing else decides, so the later of the two \
             in name order (a domain already on the host comes first) is the one reported and moved",
            other.name
        )
    })
}

/// The dedicated VMs of the run a rule checks `vm` against, each with
/// the clause saying why the collision is `vm`'s ([`intruder_why`]). Two
/// dedicated VMs that collide do so both ways: the pair is reported once,
/// on the intruder, which is the one `--fix` moves.
fn dedicated_others<'a>(vm: &'a Vm, cx: &'a Context<'a>) -> impl Iterator<Item = (&'a Vm, String)> + 'a {
    let same = move |o: &Vm| std::ptr::eq(o, vm) || (o.file == vm.file && o.name == vm.name);
    cx.vms
        .iter()
        .filter(move |other| !same(other) && other.dedicated())
        .filter_map(move |other| intruder_why(vm, other, cx).map(|why| (other, why)))
}

/// Pins that overlap another VM's dedicated CPUs.
#[derive(Clone, Copy, Debug, Default)]
pub struct PinningOverlap;

impl Rule for PinningOverlap {
    fn id(&self) -> &'static str {
        "pinning-overlap"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "pinning that overlaps another VM's dedicated CPUs (several files)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        // A VM the host state counts as floating load (no 1:1 pins) on a
        // dedicated VM's CPUs is floating-on-dedicated's finding: it
        // contends there only when the scheduler puts it there.
        if cx.position(vm).and_then(|i| cx.held.get(i)).is_some_and(|h| !h.pinned) {
            return Vec::new();
        }
        let Some((mine, _)) = allowed_cpus(vm, cx.host) else { return Vec::new() };
        let mut out = Vec::new();
        for (other, why) in dedicated_others(vm, cx) {
            let theirs = other.pins.iter().fold(CpuSet::new(), |acc, p| acc.union(&p.cpus));
            let shared = mine.intersection(&theirs);
            if shared.is_empty() {
                continue;
            }
            let ev: Vec<_> = vm
                .pins
                .iter()
                .filter(|p| !p.cpus.is_disjoint(&shared))
                .map(|p| vm.ev(p.at))
                .chain(vm.cpuset.as_ref().map(|(_, at)| vm.ev(*at)))
                .chain(other.pins.iter().filter(|p| !p.cpus.is_disjoint(&shared)).map(|p| other.ev(p.at)))
                .collect();
            let message = format!(
                "CPUs {shared} are dedicated to VM {} ({}) and also used by this VM{why}",
                other.name, other.file
            );
            let fix = format!(
                "pin this VM to CPUs no dedicated VM holds (numaplace lint --fix with both files plans around {}'s CPUs)",
                other.name
            );
            out.push(finding(self, vm, message, ev, OVERLAP_IMPACT, fix));
        }
        out
    }
}

/// Cost of a floating VM on CPUs a dedicated VM holds.
pub const FLOATING_IMPACT: &str = "the host scheduler may run the floating VM's vCPUs on the dedicated VM's CPUs at \
any time, so the dedicated VM time-shares the CPUs its pins were meant to keep to itself, each getting part of the \
CPU whenever both are busy; sharing only a core's sibling thread already cost 40-75% (docs/background.md § \
Hyperthread siblings [004]: OpenSSL, POV-Ray, OpenVINO)";

/// A VM without 1:1 pins (no `vcpupin`, a wide `cpuset`, `placement='auto'`)
/// that may run on CPUs a dedicated VM of the run holds. Whether a VM
/// floats, and where, is what a host state counts
/// ([`numaplace_libvirt::Held::floating_cpus`]), so lint and `plan
/// --state` see the same load.
#[derive(Clone, Copy, Debug, Default)]
pub struct FloatingOnDedicated;

impl Rule for FloatingOnDedicated {
    fn id(&self) -> &'static str {
        "floating-on-dedicated"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a VM without 1:1 pins may run on CPUs a dedicated VM holds (several files)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        // A request is the planner's to place: it floats nowhere yet.
        if vm.format == SourceFormat::Request {
            return Vec::new();
        }
        let Some(me) = cx.position(vm) else { return Vec::new() };
        let Some(mine) = cx.held.get(me).map(numaplace_libvirt::Held::floating_cpus) else { return Vec::new() };
        if mine.is_empty() {
            return Vec::new();
        }
        let mut shared = CpuSet::new();
        let mut holders: Vec<&Vm> = Vec::new();
        for (j, (other, held)) in cx.vms.iter().zip(cx.held).enumerate() {
            if j == me || other.format == SourceFormat::Request {
                continue;
            }
            // A dedicated VM pinned into the shared pool is the intruder
            // there (dedicated over shared: dedicated-in-shared-pool).
            let on = mine.intersection(&held.held_cpus()).difference(&cx.host.reservations.shared_cpus);
            if !on.is_empty() {
                shared = shared.union(&on);
                holders.push(other);
            }
        }
        let Some(first) = holders.first() else { return Vec::new() };
        // The lines that let it float: its wide pins or cpuset, else the
        // vCPU count (no restriction at all); then the holders' pins.
        let mut ev: Vec<_> = vm.pins.iter().filter(|p| !p.cpus.is_disjoint(&shared)).map(|p| vm.ev(p.at)).collect();
        ev.extend(vm.cpuset.as_ref().map(|(_, at)| vm.ev(*at)));
        if ev.is_empty() {
            ev.push(vm.ev(vm.vcpus_at));
        }
        for other in &holders {
            let pins = ev.len();
            ev.extend(other.pins.iter().filter(|p| !p.cpus.is_disjoint(&shared)).map(|p| other.ev(p.at)));
            // CPUs it keeps beyond its pins (its emulator's own, idle
            // siblings) are named by its `<vcpu cpuset>`.
            if ev.len() == pins {
                ev.extend(other.cpuset.iter().filter(|(c, _)| !c.is_disjoint(&shared)).map(|(_, at)| other.ev(*at)));
            }
        }
        let names: Vec<String> = holders.iter().map(|o| format!("{} ({})", o.name, o.file)).collect();
        let how = if vm.pins.is_empty() && vm.cpuset.is_none() {
            "has no CPU pins, so its vCPUs float over every CPU of the host".to_string()
        } else {
            format!("is not pinned 1:1, so its vCPUs float over CPUs {mine}")
        };
        let message = format!(
            "this VM {how}, including {} {shared}, dedicated to {}",
            if shared.len() == 1 { "CPU" } else { "CPUs" },
            if names.len() == 1 { format!("VM {}", names[0]) } else { format!("VMs {}", names.join(", ")) }
        );
        let fix = format!(
            "keep floating VMs off dedicated CPUs: pin this VM to a shared pool (`<vcpu cpuset>` over CPUs no \
             dedicated VM holds, the host profile's shared_cpus), pin it 1:1 on CPUs of its own, or move one of \
             them to another host (numaplace lint --fix with the files plans it 1:1 around {}'s CPUs)",
            first.name
        );
        vec![finding(self, vm, message, ev, FLOATING_IMPACT, fix)]
    }
}

/// A VM on the idle sibling thread of a core another VM holds dedicated.
#[derive(Clone, Copy, Debug, Default)]
pub struct SiblingsShared;

impl SiblingsShared {
    /// The other threads of the cores `cpus` touch, not in `cpus`.
    fn siblings(cpus: &CpuSet, cx: &Context<'_>) -> CpuSet {
        let topo = cx.host.topology;
        let mut out = CpuSet::new();
        for cpu in cpus.iter() {
            if let Some(core) = topo.pu(cpu).and_then(|p| p.core).and_then(|c| topo.cores().get(c)) {
                out = out.union(&core.cpus);
            }
        }
        out.difference(cpus)
    }

    /// Whole cores no linted VM may run on and the host keeps none of
    /// (a reserved CPU, or one of the shared pool, is no core a
    /// dedicated VM could move to).
    fn free_cores(cx: &Context<'_>) -> usize {
        let used = cx
            .vms
            .iter()
            .filter_map(|v| allowed_cpus(v, cx.host))
            .fold(cx.host.kept_cpus(), |acc, (set, _)| acc.union(&set));
        cx.host.topology.cores().iter().filter(|c| !c.cpus.is_empty() && c.cpus.is_disjoint(&used)).count()
    }
}

impl Rule for SiblingsShared {
    fn id(&self) -> &'static str {
        "siblings-shared"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "a VM runs on the sibling threads of cores another VM holds dedicated (several files)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let Some((mine, my_at)) = allowed_cpus(vm, cx.host) else { return Vec::new() };
        let mut out = Vec::new();
        for (other, why) in dedicated_others(vm, cx) {
            let theirs = other.pins.iter().fold(CpuSet::new(), |acc, p| acc.union(&p.cpus));
            let shared = mine.intersection(&Self::siblings(&theirs, cx)).difference(&theirs);
            if shared.is_empty() {
                continue;
            }
            let cores = cx.host.cores_in(&shared);
            let held = theirs.intersection(&Self::siblings(&shared, cx));
            let free = Self::free_cores(cx);
            let mut ev: Vec<_> = if vm.fully_pinned() {
                vm.pins.iter().filter(|p| !p.cpus.is_disjoint(&shared)).map(|p| vm.ev(p.at)).collect()
            } else {
                my_at.clone()
            };
            ev.extend(other.pins.iter().filter(|p| !p.cpus.is_disjoint(&held)).map(|p| other.ev(p.at)));
            let message = format!(
                "CPUs {shared} are the sibling threads of CPUs {held}, dedicated to VM {} ({}): the two VMs share {}{why}",
                other.name,
                other.file,
                plural(cores as u64, "physical core")
            );
            let fix = format!(
                "pin this VM to whole cores no other VM uses (numaplace lint --fix with both files keeps {}'s cores and their siblings free)",
                other.name
            );
            let mut f = finding(self, vm, message, ev, OVERLAP_IMPACT, fix);
            if vm.planned_shared && !vm.dedicated() {
                // numaplace planned it to float over the shared CPUs at
                // the overcommit asked for: it time-shares by choice.
                super::as_info(
                    &mut f,
                    ", as the shared VM it was planned to be (deliberate)",
                    "plan it again as a dedicated VM (cpu=dedicated) for cores of its own",
                );
            } else if free < cores {
                // Nowhere better to go: the host is full of VMs.
                let room = match free {
                    0 => "no whole core of the host is free".to_string(),
                    1 => "only 1 whole core of the host is free".to_string(),
                    n => format!("only {n} whole cores of the host are free"),
                };
                super::as_info(
                    &mut f,
                    &format!("; {room}, so this is the best the host allows"),
                    "free whole cores (move or shrink another VM) and run numaplace lint --fix again",
                );
            }
            out.push(f);
        }
        out
    }
}

/// Cost of vCPUs on the CPUs the host keeps for itself.
pub const RESERVED_IMPACT: &str = "the host's own threads on its reserved CPUs (interrupts, its daemons, the VMs' \
emulator threads, which numaplace puts there) time-share them with the vCPUs, each getting part of the CPU; sharing \
only a core's sibling thread already cost 40-75% (docs/background.md § Hyperthread siblings [004]: OpenSSL, POV-Ray, \
OpenVINO)";

/// A VM whose vCPUs may run on CPUs the host reserves for itself (host
/// profile's `reserved_cpus`, `--reserved-cpus`). Checked only when the
/// host reserves CPUs; a VM without any CPU restriction floats over the
/// whole host and is not reported.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReservedCpus;

impl Rule for ReservedCpus {
    fn id(&self) -> &'static str {
        "reserved-cpus"
    }

    fn severity(&self) -> Severity {
        Severity::Warning
    }

    fn summary(&self) -> &'static str {
        "vCPUs pinned to CPUs the host reserves for itself (host profile, --reserved-cpus)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let reserved = &cx.host.reservations.cpus;
        if reserved.is_empty() {
            return Vec::new();
        }
        let Some((mine, at)) = allowed_cpus(vm, cx.host) else { return Vec::new() };
        let on = mine.intersection(reserved);
        if on.is_empty() {
            return Vec::new();
        }
        let ev: Vec<_> = if vm.fully_pinned() {
            vm.pins.iter().filter(|p| !p.cpus.is_disjoint(&on)).map(|p| vm.ev(p.at)).collect()
        } else {
            at
        };
        let message = format!(
            "vCPUs may run on {} {on}, which the host reserves for itself (reserved CPUs {reserved})",
            if on.len() == 1 { "CPU" } else { "CPUs" }
        );
        let fix = "pin this VM to CPUs the host does not reserve (numaplace lint --fix with the same host profile or --reserved-cpus plans around them)".to_string();
        vec![finding(self, vm, message, ev, RESERVED_IMPACT, fix)]
    }
}
