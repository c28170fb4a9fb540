//! The rules: one type each, with a stable id, a default severity and a
//! `check` that reads a [`Vm`] and the host. `docs/lint.md` has one
//! section per rule; the impact texts here quote docs/background.md's measured
//! figures with their section.

mod cells;
mod host_fit;
mod hotadd;
pub(crate) mod layout;
mod memory;
mod pinning;
mod pools;
mod refs;
mod vcpus;

use crate::finding::{Finding, Severity};
use crate::host::HostView;
use crate::vm::{Evidence, Source, Vm};
use numaplace_libvirt::Held;
use numaplace_topo::CpuSet;
use std::collections::BTreeSet;

pub use cells::{GuestCellsCpuless, GuestCellsMissing, GuestCellsUneven, ManyCellsPerNode, SocketSpansCells};
pub(crate) use host_fit::cannot_exist;
pub use host_fit::{Beyond, VmExceedsHost};
pub use hotadd::CpuHotaddWide;
pub use memory::DEFAULT_HUGEPAGE;
pub use memory::{AffinityTooNarrow, DeviceRemote, HugepagesMissing, MemoryBindingRemote, MemoryExceedsNode};
pub use pinning::{FloatingOnDedicated, PartialPinning, PinningOverlap, ReservedCpus, SiblingsShared, VcpuSpansNodes};
pub use pools::{DedicatedInSharedPool, FloatingOverReserved};
pub use refs::UnknownReference;
pub use vcpus::{even_vcpus, OddVcpusWide, SmtContention};

/// What a rule may look at besides its VM.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The host.
    pub host: &'a HostView<'a>,
    /// Every VM being linted (for rules across VMs), the checked one
    /// included.
    pub vms: &'a [Vm],
    /// Each of `vms`, in the same order, as a host state counts it
    /// (`numaplace_libvirt::held`, which `plan --state` uses): whether
    /// it is dedicated, and where its floating load may go.
    pub held: &'a [Held],
    /// How many of `vms`, from the first, are already on the host (`lint
    /// --state`): a collision between one of them and a FILE is the
    /// FILE's.
    pub incumbents: usize,
}

impl Context<'_> {
    /// The position of a VM in `vms`.
    pub(crate) fn position(&self, vm: &Vm) -> Option<usize> {
        self.vms.iter().position(|o| std::ptr::eq(o, vm) || (o.file == vm.file && o.name == vm.name))
    }
}

/// The VMs as a host state counts them, for [`Context::held`]: any
/// file's VM goes through the libvirt edge's `held`, as `plan --state`
/// counts a domain, so lint and the planner agree on what floats.
pub(crate) fn counted(vms: &[Vm], host: &HostView<'_>) -> Vec<Held> {
    vms.iter().map(|vm| numaplace_libvirt::held(&vm.def, &vm.file, host.topology).0).collect()
}

/// One lint rule.
pub trait Rule {
    /// Stable id (`cpu-hotadd-wide`).
    fn id(&self) -> &'static str;
    /// Default severity of its findings.
    fn severity(&self) -> Severity;
    /// One line saying what it checks.
    fn summary(&self) -> &'static str;
    /// Findings for one VM.
    fn check(&self, vm: &Vm, cx: &Context<'_>) -> Vec<Finding>;
}

/// Every rule, in documentation order.
pub fn all() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(UnknownReference),
        Box::new(VmExceedsHost),
        Box::new(CpuHotaddWide),
        Box::new(GuestCellsUneven),
        Box::new(GuestCellsMissing),
        Box::new(ManyCellsPerNode),
        Box::new(GuestCellsCpuless),
        Box::new(SocketSpansCells),
        Box::new(OddVcpusWide),
        Box::new(MemoryExceedsNode),
        Box::new(AffinityTooNarrow),
        Box::new(SmtContention),
        Box::new(VcpuSpansNodes),
        Box::new(PartialPinning),
        Box::new(MemoryBindingRemote),
        Box::new(HugepagesMissing),
        Box::new(DeviceRemote),
        Box::new(PinningOverlap),
        Box::new(FloatingOnDedicated),
        Box::new(SiblingsShared),
        Box::new(ReservedCpus),
        Box::new(DedicatedInSharedPool),
        Box::new(FloatingOverReserved),
    ]
}

/// Evidence lines kept per finding.
const MAX_EVIDENCE: usize = 8;

/// Builds a finding of a rule's default severity.
pub(crate) fn finding(
    rule: &dyn Rule,
    vm: &Vm,
    message: String,
    evidence: impl IntoIterator<Item = Source>,
    impact: &str,
    fix: String,
) -> Finding {
    let mut ev: Vec<Evidence> = Vec::new();
    for e in evidence.into_iter().flatten() {
        if !ev.contains(&e) {
            ev.push(e);
        }
    }
    ev.sort_by_key(|e| e.line);
    // A 64-vCPU VM has 64 pin lines; the first few make the point.
    ev.truncate(MAX_EVIDENCE);
    Finding {
        rule: rule.id(),
        severity: rule.severity(),
        vm: vm.name.clone(),
        file: vm.file.clone(),
        message,
        evidence: ev,
        impact: impact.to_string(),
        fix,
        resize: false,
        layout: None,
    }
}

/// Marks a finding whose only fix changes the VM's size, and says so in
/// its fix.
/// Turns a finding into an info: a choice made on purpose (`why`, added
/// to the message) or the best the host allows. `lint --fix` leaves infos
/// alone, so the fix says nothing is needed and, in `otherwise`, what to
/// change by hand if the choice was not meant, without promising `--fix`.
pub(crate) fn as_info(f: &mut Finding, why: &str, otherwise: &str) {
    f.severity = Severity::Info;
    f.message.push_str(why);
    f.fix = format!("none needed (lint --fix leaves an info alone); if it was not meant, {otherwise}");
}

pub(crate) fn resize_only(mut f: Finding) -> Finding {
    f.resize = true;
    f.fix.push_str(
        "; a resize: numaplace lint --fix makes it only with --allow-resize, and leaves the file alone otherwise",
    );
    f
}

/// The host CPUs a VM may run on, and the lines that restrict them:
/// its pins when every vCPU has one, else `<vcpu cpuset>` /
/// `sched.cpu.affinity`, else the nodes of `numa.nodeAffinity`. `None`
/// when the VM may run anywhere.
pub(crate) fn allowed_cpus(vm: &Vm, host: &HostView<'_>) -> Option<(CpuSet, Vec<Source>)> {
    if vm.fully_pinned() {
        let set = vm.pins.iter().fold(CpuSet::new(), |acc, p| acc.union(&p.cpus));
        return Some((set, vm.pins.iter().map(|p| vm.ev(p.at)).collect()));
    }
    if let Some((set, at)) = &vm.cpuset {
        return Some((set.clone(), vec![vm.ev(*at)]));
    }
    if let Some((ids, at)) = &vm.node_affinity {
        return Some((host.cpus_of_node_ids(ids), vec![vm.ev(*at)]));
    }
    None
}

/// Nodes a VM needs at least: enough cores for its vCPUs and enough
/// memory for its memory plus overhead, within the node count of the host.
pub(crate) fn nodes_needed(vm: &Vm, host: &HostView<'_>) -> u32 {
    let cores = host.node_cores().max(1);
    let by_cpu = vm.vcpus.div_ceil(cores);
    let mem = vm.memory_bytes.saturating_add(host.overhead(vm.memory_bytes));
    let by_mem = u32::try_from(mem.div_ceil(host.node_memory().max(1))).unwrap_or(u32::MAX);
    by_cpu.max(by_mem).clamp(1, host.cpu_node_count().max(1))
}

/// Host nodes the VM spans: those of its pins when fully pinned; else the
/// count it needs (capped by the nodes it is restricted to). Positions are
/// given only when known from pins.
pub(crate) fn span(vm: &Vm, host: &HostView<'_>) -> (u32, Option<BTreeSet<usize>>) {
    if vm.fully_pinned() {
        let set = vm.pins.iter().fold(CpuSet::new(), |acc, p| acc.union(&p.cpus));
        let nodes = host.nodes_of(&set);
        if !nodes.is_empty() {
            return (nodes.len() as u32, Some(nodes));
        }
    }
    let need = nodes_needed(vm, host);
    match allowed_cpus(vm, host) {
        Some((set, _)) => {
            let limit = host.nodes_of(&set).len() as u32;
            (need.min(limit.max(1)), None)
        }
        None => (need, None),
    }
}

/// Whether the VM has more vCPUs than one node has cores.
pub(crate) fn is_wide(vm: &Vm, host: &HostView<'_>) -> bool {
    vm.vcpus > host.node_cores()
}

/// `n` with its unit: `1 node`, `3 nodes` (emit's one rule).
pub(crate) use numaplace_emit::text::plural;

/// Bytes as GiB with one decimal when needed.
pub(crate) fn gib(bytes: u64) -> String {
    numaplace_topo::format_size(bytes)
}

/// Node memory as a message gives it: the bytes a VM may have there, and
/// when the host keeps a reserve on every node, that it is left out.
pub(crate) fn usable(host: &HostView<'_>, bytes: u64) -> String {
    match host.reservations.memory_per_node {
        0 => gib(bytes),
        keep => format!("{} beside the {} per node the host keeps", gib(bytes), gib(keep)),
    }
}

#[cfg(test)]
mod tests {
    /// Every cost a finding quotes, in one list for the citation check.
    fn impacts() -> Vec<(&'static str, &'static str)> {
        vec![
            ("hotadd", super::hotadd::IMPACT),
            ("one-node", super::cells::ONE_NODE_IMPACT),
            ("fit", super::memory::FIT_IMPACT),
            ("remote", super::memory::REMOTE_IMPACT),
            ("huge", super::memory::HUGE_IMPACT),
            ("device", super::memory::DEVICE_IMPACT),
            ("pin", super::pinning::PIN_IMPACT),
            ("overlap", super::pinning::OVERLAP_IMPACT),
            ("floating", super::pinning::FLOATING_IMPACT),
            ("reserved", super::pinning::RESERVED_IMPACT),
            ("odd", super::vcpus::ODD_IMPACT),
            ("smt", super::vcpus::SMT_IMPACT),
            ("uneven", super::cells::UNEVEN_IMPACT),
            ("many", super::cells::MANY_IMPACT),
            ("socket", super::cells::SOCKET_IMPACT),
            ("refs", super::refs::IMPACT),
            ("host-fit", super::host_fit::HOST_FIT_IMPACT),
            ("pools", super::pools::POOL_IMPACT),
        ]
    }

    /// A user can check every figure a finding quotes: each cites a
    /// section of docs/background.md (which ships with numaplace) that
    /// exists, and every number it quotes is written on that page.
    #[test]
    fn every_impact_cites_a_background_section_holding_its_figures() {
        let page = include_str!("../../../../docs/background.md");
        let headings: Vec<&str> = page.lines().filter_map(|l| l.strip_prefix("## ")).collect();
        for (name, impact) in impacts() {
            assert!(!impact.contains("field notes"), "{name}: cites a document that does not ship: {impact}");
            let cited: Vec<&str> = impact
                .split("§ ")
                .skip(1)
                .map(|rest| headings.iter().copied().find(|h| rest.starts_with(h)).unwrap_or(""))
                .collect();
            // A cost without a measured figure (a VM that will not start)
            // needs no source.
            let measured = impact.chars().any(|c| c.is_ascii_digit());
            assert!(!measured || !cited.is_empty(), "{name}: quotes figures without a section: {impact}");
            assert!(cited.iter().all(|h| !h.is_empty()), "{name}: cites a section that does not exist: {impact}");
            for token in impact.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
                let token = token.trim_matches('.');
                if token.chars().any(|c| c.is_ascii_digit()) && !["1", "2", "3", "4", "5", "6"].contains(&token) {
                    assert!(page.contains(token), "{name}: figure {token} is not in docs/background.md");
                }
            }
        }
    }
}
