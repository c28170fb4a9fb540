//! What `numaplace apply` refuses about a domain's own CPUs on a host
//! whose profile declares a shared pool (the host profile's
//! `shared_cpus`, as Nova's `cpu_shared_set`): a dedicated vCPU pinned
//! into the pool (`ReservationConflict::SharedPool`), and a VM floating
//! over the CPUs the host reserves for itself
//! (`ReservationConflict::ReservedCpu` of a floating VM). A vCPU pinned
//! on a reserved CPU (the same refusal, of a pinned vCPU) is
//! `reserved-cpus`'s finding.

use super::{allowed_cpus, finding, Context, Rule};
use crate::finding::{Finding, Severity};
use crate::vm::{SourceFormat, Vm};
use numaplace_topo::CpuSet;

/// Cost of a dedicated vCPU in the shared pool, or a floating one on the
/// host's reserved CPUs.
pub const POOL_IMPACT: &str = "the shared pool is where every floating vCPU of the host runs, and the reserved CPUs \
carry the host's interrupts, daemons and emulator threads: a vCPU counted on as dedicated there time-shares its CPU, \
and `numaplace apply` refuses such a placement; sharing only a core's sibling thread already cost 40-75% \
(docs/background.md § Hyperthread siblings [004]: OpenSSL, POV-Ray, OpenVINO)";

/// A vCPU pinned 1:1 on a CPU of the host's shared pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct DedicatedInSharedPool;

impl Rule for DedicatedInSharedPool {
    fn id(&self) -> &'static str {
        "dedicated-in-shared-pool"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "a vCPU pinned 1:1 on a CPU of the host profile's shared pool (apply refuses it)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let pool = &cx.host.reservations.shared_cpus;
        // A shared VM numaplace planned floats over the pool by design.
        if pool.is_empty() || (vm.planned_shared && !vm.planned_mixed) {
            return Vec::new();
        }
        let inside: Vec<_> = vm.pins.iter().filter(|p| p.cpus.len() == 1 && p.cpus.is_subset(pool)).collect();
        let Some(first) = inside.first() else { return Vec::new() };
        let cpus: CpuSet = inside.iter().fold(CpuSet::new(), |u, p| u.union(&p.cpus));
        let message = format!(
            "{} pinned 1:1 on CPUs {cpus} of the host's shared pool ({pool}), where floating vCPUs run \
             (vCPU {} on CPU {}): numaplace apply refuses a dedicated vCPU there",
            if inside.len() == 1 { "1 vCPU is".to_string() } else { format!("{} vCPUs are", inside.len()) },
            first.vcpu,
            first.cpus
        );
        let fix = "pin it 1:1 on CPUs outside the shared pool (numaplace lint --fix with the same host profile or \
                   --shared-cpus plans it there)"
            .to_string();
        vec![finding(self, vm, message, inside.iter().map(|p| vm.ev(p.at)), POOL_IMPACT, fix)]
    }
}

/// A VM with no CPU restriction on a host with a shared pool: it floats
/// over every CPU, the reserved ones included.
#[derive(Clone, Copy, Debug, Default)]
pub struct FloatingOverReserved;

impl Rule for FloatingOverReserved {
    fn id(&self) -> &'static str {
        "floating-over-reserved"
    }

    fn severity(&self) -> Severity {
        Severity::Error
    }

    fn summary(&self) -> &'static str {
        "a VM without CPU pins floats over the reserved CPUs of a host with a shared pool (apply refuses it)"
    }

    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding> {
        let (pool, reserved) = (&cx.host.reservations.shared_cpus, &cx.host.reservations.cpus);
        // A request floats nowhere yet; a restricted VM over reserved
        // CPUs is reserved-cpus's finding.
        if pool.is_empty() || reserved.is_empty() || vm.format == SourceFormat::Request {
            return Vec::new();
        }
        if allowed_cpus(vm, cx.host).is_some() {
            return Vec::new();
        }
        let Some(me) = cx.position(vm) else { return Vec::new() };
        let floats = cx.held.get(me).map(numaplace_libvirt::Held::floating_cpus).unwrap_or_default();
        let on = floats.intersection(reserved);
        if on.is_empty() {
            return Vec::new();
        }
        let message = format!(
            "this VM has no CPU pins, so its vCPUs float over every CPU of the host, the reserved CPUs {on} \
             included; the host declares a shared pool ({pool}) for floating vCPUs (as Nova's cpu_shared_set), \
             and numaplace apply refuses a VM floating over reserved CPUs"
        );
        let fix = format!(
            "confine it to the shared pool: `<vcpu cpuset='{pool}'>` (numaplace lint --fix narrows it into the pool)"
        );
        vec![finding(self, vm, message, [vm.ev(vm.vcpus_at)], POOL_IMPACT, fix)]
    }
}
