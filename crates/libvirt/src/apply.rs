//! Applying a plan to a libvirt domain: [`prepare`] works out, without
//! changing anything, the definition to write and the live changes a
//! running domain takes; [`carry_out`] makes them in order and, when one
//! fails, undoes those already made, so each domain ends either as it was
//! or as planned.
//!
//! What changes how:
//! - a new VM is defined from the domain XML numaplace emits, or from an
//!   operator's base domain (disks, NICs) with only numaplace's NUMA
//!   elements spliced in ([`crate::domain::merge`]), numaplace's mark added to
//!   `<metadata>` and the plan's passthrough devices added when missing;
//!   every other byte of the base is kept;
//! - an existing domain gets the same splice in its persistent
//!   definition (it takes effect at the next start);
//! - a running domain is also re-pinned now: each vCPU and the emulator
//!   threads (`virsh vcpupin/emulatorpin --live`), and its memory nodes
//!   when its binding is `restrictive` (libvirt refuses a live change of a
//!   strict binding). What only a restart changes (guest cells, CPU
//!   topology, huge pages, strict memory nodes, devices) is reported.

use crate::domain::{child, domain_xml, Definition, DomainError, DomainFileError, LibvirtOptions};
use crate::Held;
use crate::{Libvirt, VirtError};
use numaplace_plan::Placement;
use numaplace_topo::{CpuSet, Topology};
use std::fmt;

mod narrow;
pub use narrow::{narrow_xml, narrowed_xml, prepare_narrowing};

/// How to apply.
#[derive(Clone, Debug)]
pub struct ApplyOptions<'a> {
    /// The host the plan was made for.
    pub topology: &'a Topology,
    /// How a new domain is written when no base is given (KVM or TCG).
    pub emit: LibvirtOptions,
    /// An operator's domain XML to build a new VM on.
    pub base: Option<&'a str>,
}

/// Why a plan cannot be applied to a domain (nothing was changed).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// libvirt failed while the domain was read.
    #[error(transparent)]
    Libvirt(#[from] VirtError),
    /// A definition does not read.
    #[error(transparent)]
    Xml(#[from] DomainFileError),
    /// The check against the live host refused the plan
    /// ([`crate::check::decide`]): it names the VM and the domain holding
    /// what it needs.
    #[error("{0}")]
    Refused(crate::check::Refusal),
    /// The plan puts a vCPU where this host's reservations (its profile,
    /// the plan's own, or the flags) say no VM goes.
    #[error("the plan {0}; plan it again with this host's reservations")]
    Reserved(numaplace_plan::ReservationConflict),
    /// A base domain was given for a VM that is already defined.
    #[error("domain {0} is already defined: a base builds a new domain, and an existing one keeps its own definition (apply without --base)")]
    BaseForExisting(String),
    /// The domain (or base) has other sizes than the plan's VM: applying
    /// would resize it.
    #[error(
        "{what} has {} and {memory} bytes of memory; the plan's VM {vm} has {plan_vcpus} and {plan_memory}: plan it with the domain's sizes (or edit the domain) first",
        numaplace_emit::text::plural(*.vcpus, "vCPU")
    )]
    Sizes {
        /// `domain NAME` or `the base domain`.
        what: String,
        /// The plan's VM.
        vm: String,
        /// Its vCPUs.
        vcpus: u32,
        /// Its memory, bytes.
        memory: u64,
        /// The plan's vCPUs.
        plan_vcpus: u32,
        /// The plan's memory, bytes.
        plan_memory: u64,
    },
}

/// One change to a domain, with what was there before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Define the domain (its persistent definition); `before` is `None`
    /// for a new domain.
    Define {
        /// The definition before.
        before: Option<String>,
        /// The definition after.
        after: String,
    },
    /// Re-pin one vCPU of the running domain.
    PinVcpu {
        /// The vCPU.
        vcpu: u32,
        /// CPUs it may use now.
        before: CpuSet,
        /// CPUs it will use.
        after: CpuSet,
    },
    /// Re-pin the running domain's emulator threads.
    PinEmulator {
        /// CPUs now.
        before: CpuSet,
        /// CPUs after.
        after: CpuSet,
    },
    /// Re-pin one I/O thread of the running domain.
    PinIothread {
        /// The I/O thread's id.
        iothread: u32,
        /// CPUs now.
        before: CpuSet,
        /// CPUs after.
        after: CpuSet,
    },
    /// Move the running domain's memory binding (restrictive mode).
    Numatune {
        /// Nodes now.
        before: CpuSet,
        /// Nodes after.
        after: CpuSet,
    },
}

/// What a running domain takes only at its next start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Its guest NUMA cells change.
    Cells,
    /// Its guest CPU topology (sockets, dies, cores, threads) changes.
    CpuTopology,
    /// Its huge page size changes.
    HugePages,
    /// Its memory moves to other nodes under a strict binding.
    MemoryNodes {
        /// Nodes now.
        before: CpuSet,
        /// Nodes after.
        after: CpuSet,
    },
    /// Its passthrough devices change.
    Devices,
}

impl fmt::Display for Restart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Restart::Cells => f.write_str("guest NUMA cells change: they take effect at the next start"),
            Restart::CpuTopology => f.write_str("guest CPU topology changes: it takes effect at the next start"),
            Restart::HugePages => f.write_str("huge page backing changes: it takes effect at the next start"),
            Restart::MemoryNodes { before, after } => write!(
                f,
                "memory nodes {before} -> {after}: libvirt changes a running domain's strict binding only at the next start (`numaplace balance` can move the pages now)"
            ),
            Restart::Devices => f.write_str("passthrough devices change: they take effect at the next start"),
        }
    }
}

impl Step {
    /// The action, for programs: `define`, `vcpupin`, `emulatorpin`,
    /// `numatune`.
    pub fn action(&self) -> &'static str {
        match self {
            Step::Define { .. } => "define",
            Step::PinVcpu { .. } => "vcpupin",
            Step::PinEmulator { .. } => "emulatorpin",
            Step::PinIothread { .. } => "iothreadpin",
            Step::Numatune { .. } => "numatune",
        }
    }
}

/// A placement in one line, for the log: each vCPU's CPUs, the emulator's,
/// memory per node and the guest cells.
pub fn summary(p: &Placement, vcpu_cpus: &[CpuSet]) -> String {
    let pins: Vec<String> = vcpu_cpus.iter().enumerate().map(|(v, c)| format!("{v}->{c}")).collect();
    let memory: Vec<String> =
        p.memory.iter().map(|(n, b)| format!("{n} {}", numaplace_topo::format_size(*b))).collect();
    let cells: Vec<String> = p.guest.cells.iter().map(|c| format!("cell{}@{}", c.id, c.host_node)).collect();
    let mut out = format!("vCPUs {}; memory {}", pins.join(" "), memory.join(", "));
    if !p.emulator.is_empty() {
        out.push_str(&format!("; emulator {}", p.emulator));
    }
    if !cells.is_empty() {
        out.push_str(&format!("; {}", cells.join(" ")));
    }
    out
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Define { before: None, .. } => f.write_str("define the new domain"),
            Step::Define { before: Some(_), .. } => f.write_str("define the domain's NUMA elements (persistent)"),
            Step::PinVcpu { vcpu, before, after } => write!(f, "vcpupin --live vCPU {vcpu}: CPUs {before} -> {after}"),
            Step::PinEmulator { before, after } => write!(f, "emulatorpin --live: CPUs {before} -> {after}"),
            Step::PinIothread { iothread, before, after } => {
                write!(f, "iothreadpin --live I/O thread {iothread}: CPUs {before} -> {after}")
            }
            Step::Numatune { before, after } => write!(f, "numatune --live: nodes {before} -> {after}"),
        }
    }
}

/// What applying one VM takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The VM (domain name).
    pub vm: String,
    /// The domain runs.
    pub running: bool,
    /// The changes, in the order they are made.
    pub steps: Vec<Step>,
    /// What waits for the next start.
    pub restart: Vec<Restart>,
    /// The domain's placement before (`None`: a new domain), summarised
    /// from its persistent definition (for the log).
    pub before: Option<String>,
    /// After.
    pub after: String,
}

/// How applying ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every step was made.
    Applied,
    /// Nothing to change: the domain is as planned.
    Unchanged,
    /// `--dry-run`: nothing was made.
    DryRun,
    /// A step failed; those made before it were undone.
    RolledBack {
        /// The failed step, by position.
        step: usize,
        /// Why.
        error: VirtError,
    },
    /// A step failed and undoing failed too: the domain is neither as it
    /// was nor as planned.
    Broken {
        /// The failed step.
        step: usize,
        /// Why.
        error: VirtError,
        /// Why the undo failed.
        undo: VirtError,
    },
}

impl Outcome {
    /// Whether the domain is as planned (or would be, for a dry run).
    pub fn ok(&self) -> bool {
        matches!(self, Outcome::Applied | Outcome::Unchanged | Outcome::DryRun)
    }
}

fn parse(name: &str, xml: &str, topology: &Topology) -> Result<(Held, Definition), DomainFileError> {
    let definition =
        crate::domain::read(name, xml).map_err(|error| DomainFileError { source_name: name.to_string(), error })?;
    let (held, _) = crate::held(&definition, name, topology);
    Ok((held, definition))
}

/// [`parse`] of a definition apply is about to write: one naming CPUs or
/// nodes this host lacks is refused, never read as floating over every
/// CPU (which is how a host state counts another's domain it cannot
/// place, and how a forced plan once widened a dedicated VM).
fn parse_here(name: &str, xml: &str, p: &Placement, topology: &Topology) -> Result<(Held, Definition), ApplyError> {
    let definition =
        crate::domain::read(name, xml).map_err(|error| DomainFileError { source_name: name.to_string(), error })?;
    let (held, warnings) = crate::held(&definition, name, topology);
    for w in warnings {
        if let crate::HeldWarning::Unknown { what, ids, .. } = w {
            let what = if what == "nodes" { crate::check::Missing::Nodes } else { crate::check::Missing::Cpus };
            return Err(ApplyError::Refused(crate::check::Refusal::NotOnHost { vm: p.vm.clone(), what, ids }));
        }
    }
    Ok((held, definition))
}

/// Refuses to apply a plan whose vCPU count or memory differs from the
/// domain's: apply places, it does not resize (libvirt rounds memory to
/// KiB, so sizes are compared in KiB).
fn check_sizes(what: String, size: &Definition, p: &Placement) -> Result<(), ApplyError> {
    let plan_vcpus = p.vcpus.len() as u32;
    if size.vcpus != plan_vcpus || size.memory_bytes.div_ceil(1024) != p.memory_bytes.div_ceil(1024) {
        return Err(ApplyError::Sizes {
            what,
            vm: p.vm.clone(),
            vcpus: size.vcpus,
            memory: size.memory_bytes,
            plan_vcpus,
            plan_memory: p.memory_bytes,
        });
    }
    Ok(())
}

/// Works out how to apply `p` to its domain, reading libvirt only.
pub fn prepare(lv: &dyn Libvirt, p: &Placement, opts: &ApplyOptions<'_>) -> Result<Prepared, ApplyError> {
    let at = format!("{}/{}", lv.describe(), p.vm);
    let Some(domain) = lv.domain(&p.vm)? else {
        let after = match opts.base {
            Some(base) => {
                let (_, size) = parse("the base domain", base, opts.topology)?;
                check_sizes("the base domain".into(), &size, p)?;
                as_new_domain(&merge(base, p, &opts.emit)?, &p.vm)
            }
            None => domain_xml(p, &opts.emit),
        };
        let (placed, _) = parse_here(&at, &after, p, opts.topology)?;
        return Ok(Prepared {
            vm: p.vm.clone(),
            running: false,
            steps: vec![Step::Define { before: None, after }],
            restart: Vec::new(),
            before: None,
            after: summary(&placed.placement, &placed.vcpu_cpus),
        });
    };
    if opts.base.is_some() {
        return Err(ApplyError::BaseForExisting(p.vm.clone()));
    }
    let persistent = lv.persistent_xml(&p.vm)?;
    let (was, size) = parse(&at, &persistent, opts.topology)?;
    check_sizes(format!("domain {}", p.vm), &size, p)?;
    let after = merge(&persistent, p, &opts.emit)?;
    let (will, _) = parse_here(&at, &after, p, opts.topology)?;
    let mut steps = Vec::new();
    // libvirt rewrites what it stores (quotes, defaults), so the texts
    // differ even when nothing would change: compare what they say.
    if was != will {
        steps.push(Step::Define { before: Some(persistent), after: after.clone() });
    }
    let mut restart = Vec::new();
    // What runs now, for the log: a running domain's live pins (a hand
    // `virsh vcpupin --live` shows here), else its persistent definition.
    let mut before = summary(&was.placement, &was.vcpu_cpus);
    if domain.running {
        let (live, _) = parse(&at, &domain.xml, opts.topology)?;
        let affinity = live_steps(lv, &p.vm, &will, &mut steps)?;
        before = summary(&live.placement, &affinity.unwrap_or_else(|| live.vcpu_cpus.clone()));
        let nodes = |h: &Held| -> CpuSet { h.placement.memory.iter().map(|m| m.0 .0).collect() };
        let (now_nodes, new_nodes) = (nodes(&live), nodes(&will));
        if now_nodes != new_nodes {
            // libvirt moves a running domain's memory nodes only in
            // restrictive mode.
            let restrictive = domain.xml.contains("mode='restrictive'") || domain.xml.contains("mode=\"restrictive\"");
            match (&live.numatune, &will.numatune) {
                (Some((before, _)), Some((after, _))) if restrictive && live.placement.guest.cells.is_empty() => {
                    steps.push(Step::Numatune { before: before.clone(), after: after.clone() })
                }
                _ => restart.push(Restart::MemoryNodes { before: now_nodes, after: new_nodes }),
            }
        }
        let cells = |h: &Held| -> Vec<(u32, CpuSet, u64)> {
            h.placement.guest.cells.iter().map(|c| (c.id, c.vcpus.clone(), c.memory_bytes)).collect()
        };
        if cells(&live) != cells(&will) {
            restart.push(Restart::Cells);
        }
        let shape = |h: &Held| {
            let g = &h.placement.guest;
            (g.sockets, g.dies, g.cores, g.threads)
        };
        if shape(&live) != shape(&will) {
            restart.push(Restart::CpuTopology);
        }
        if live.placement.hugepage_bytes != will.placement.hugepage_bytes {
            restart.push(Restart::HugePages);
        }
        if live.placement.devices != will.placement.devices {
            restart.push(Restart::Devices);
        }
    }
    Ok(Prepared {
        vm: p.vm.clone(),
        running: domain.running,
        steps,
        restart,
        before: Some(before),
        after: summary(&will.placement, &will.vcpu_cpus),
    })
}

/// The live re-pinning a running domain takes to run as `will` says:
/// each vCPU whose CPUs differ, and the emulator threads when `will` pins
/// them. Gives each vCPU's CPUs now, as libvirt reports them (`None` when
/// the domain stopped meanwhile and has no live pins).
fn live_steps(
    lv: &dyn Libvirt,
    name: &str,
    will: &Held,
    steps: &mut Vec<Step>,
) -> Result<Option<Vec<CpuSet>>, ApplyError> {
    let info = lv.vcpu_info(name)?;
    for v in &info {
        let Some(target) = will.vcpu_cpus.get(v.vcpu as usize) else { continue };
        if *target != v.affinity {
            steps.push(Step::PinVcpu { vcpu: v.vcpu, before: v.affinity.clone(), after: target.clone() });
        }
    }
    if let Some(target) = &will.emulatorpin {
        let now = lv.emulator_affinity(name)?;
        if *target != now {
            steps.push(Step::PinEmulator { before: now, after: target.clone() });
        }
    }
    Ok(Some(info.into_iter().map(|v| v.affinity).collect()))
}

/// The host a plan was made for, as its document records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedHost {
    /// Its name (`host`): a hostname when `live`, else a file's name.
    pub name: Option<String>,
    /// The plan read the machine it ran on.
    pub live: bool,
    /// Each node's id and online CPUs (`None`: a plan of an earlier
    /// release, which did not record them).
    pub nodes: Option<Vec<(u32, CpuSet)>>,
}

/// Why a plan is not this host's: its pins would name other CPUs, or it
/// was made on another machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostMismatch {
    /// A node's CPUs differ (or the node is on one host only).
    Node {
        /// The node.
        node: u32,
        /// Its CPUs where the plan was made (`None`: no such node there).
        planned: Option<CpuSet>,
        /// Its CPUs here (`None`: no such node here).
        here: Option<CpuSet>,
    },
    /// Both were read live, on machines of other names.
    Name {
        /// The plan's host.
        planned: String,
        /// This one.
        here: String,
    },
    /// The plan records neither its host's nodes nor its name.
    Unrecorded,
}

impl fmt::Display for HostMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMismatch::Node { node, planned: Some(p), here: Some(h) } => write!(
                f,
                "its node{node} has CPUs {p}, and this host's node{node} has CPUs {h}: its pins would name other CPUs"
            ),
            HostMismatch::Node { node, planned: Some(p), here: None } => {
                write!(f, "its node{node} has CPUs {p}, and this host has no node{node}")
            }
            HostMismatch::Node { node, planned: None, here } => write!(
                f,
                "this host's node{node} (CPUs {}) is not one of its nodes",
                here.as_ref().map_or_else(String::new, CpuSet::to_list)
            ),
            HostMismatch::Name { planned, here } => {
                write!(f, "it was made on the machine `{planned}`, and this one is `{here}`")
            }
            HostMismatch::Unrecorded => f.write_str(
                "it records neither its host's nodes nor its name (an earlier release's plan), so it cannot be checked",
            ),
        }
    }
}

/// Checks that a plan was made for `here` (`here_live`: the machine
/// apply runs on): the same nodes with the same CPUs, and, when both were
/// read live, the same machine name. A plan of an earlier release, which
/// recorded only a name, is checked by name.
pub fn check_host(planned: &PlannedHost, here: &Topology, here_live: bool) -> Result<(), HostMismatch> {
    let names = (planned.name.as_deref(), here.name());
    let Some(nodes) = &planned.nodes else {
        return match names {
            (Some(p), Some(h)) if p != h => Err(HostMismatch::Name { planned: p.to_string(), here: h.to_string() }),
            (Some(_), _) => Ok(()),
            (None, _) => Err(HostMismatch::Unrecorded),
        };
    };
    let ours: Vec<(u32, CpuSet)> =
        here.nodes().iter().enumerate().map(|(i, n)| (n.id.0, here.node_online_cpus(i))).collect();
    let find = |list: &[(u32, CpuSet)], node: u32| list.iter().find(|n| n.0 == node).map(|n| n.1.clone());
    let mut ids: Vec<u32> = nodes.iter().chain(&ours).map(|n| n.0).collect();
    ids.sort_unstable();
    ids.dedup();
    for node in ids {
        let (p, h) = (find(nodes, node), find(&ours, node));
        if p != h {
            return Err(HostMismatch::Node { node, planned: p, here: h });
        }
    }
    match names {
        (Some(p), Some(h)) if planned.live && here_live && p != h => {
            Err(HostMismatch::Name { planned: p.to_string(), here: h.to_string() })
        }
        _ => Ok(()),
    }
}

/// Makes the steps in order; when one fails, undoes the ones made, last
/// first (a live pin goes back to the CPUs it had, a definition to the
/// text it had), so the domain is as it was. A new domain is defined in
/// one step, which libvirt makes whole or not at all.
pub fn carry_out(lv: &mut dyn Libvirt, prepared: &Prepared, dry_run: bool) -> Outcome {
    if prepared.steps.is_empty() {
        return Outcome::Unchanged;
    }
    if dry_run {
        return Outcome::DryRun;
    }
    let name = prepared.vm.as_str();
    for (i, step) in prepared.steps.iter().enumerate() {
        if let Err(error) = make(lv, name, step, false) {
            for done in prepared.steps[..i].iter().rev() {
                if let Err(undo) = make(lv, name, done, true) {
                    return Outcome::Broken { step: i, error, undo };
                }
            }
            return Outcome::RolledBack { step: i, error };
        }
    }
    Outcome::Applied
}

/// Undoes every step of a VM applied whole, last first (a new domain is
/// undefined): a later VM of the same transaction failed, so this one
/// goes back to how it was. `Err`: an undo failed too.
pub fn undo(lv: &mut dyn Libvirt, prepared: &Prepared) -> Result<(), VirtError> {
    for step in prepared.steps.iter().rev() {
        match step {
            Step::Define { before: None, .. } => lv.undefine(&prepared.vm)?,
            _ => make(lv, &prepared.vm, step, true)?,
        }
    }
    Ok(())
}

/// Makes a step, or (`undo`) its reverse.
fn make(lv: &mut dyn Libvirt, name: &str, step: &Step, undo: bool) -> Result<(), VirtError> {
    let pick = |before: &CpuSet, after: &CpuSet| if undo { before.clone() } else { after.clone() };
    match step {
        Step::Define { before, after } => match (undo, before) {
            (false, _) => lv.define(after),
            (true, Some(before)) => lv.define(before),
            // A new domain's definition is the only step: never undone.
            (true, None) => Ok(()),
        },
        Step::PinVcpu { vcpu, before, after } => lv.pin_vcpu_live(name, *vcpu, &pick(before, after)),
        Step::PinEmulator { before, after } => lv.pin_emulator_live(name, &pick(before, after)),
        Step::PinIothread { iothread, before, after } => lv.pin_iothread_live(name, *iothread, &pick(before, after)),
        Step::Numatune { before, after } => lv.numatune_live(name, &pick(before, after)),
    }
}

/// A base made into a new domain: named as the plan's VM, and without the
/// base's `<uuid>` (libvirt gives the new domain its own; a base copied
/// from `virsh dumpxml` of another domain would otherwise collide with
/// it). Every other byte is kept, MAC addresses included.
fn as_new_domain(text: &str, vm: &str) -> String {
    // The text was parsed by the merge that made it; if it somehow does
    // not parse now, it goes out unchanged and libvirt says what is wrong.
    let Ok(doc) = roxmltree::Document::parse(text) else { return text.to_string() };
    let root = doc.root_element();
    let child = |tag: &str| root.children().find(|n| n.is_element() && n.has_tag_name(tag));
    // Edits from the end of the text backwards, so earlier ranges hold.
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    if let Some(name) = child("name") {
        if name.text().map(str::trim) != Some(vm) {
            edits.push((name.range(), format!("<name>{}</name>", numaplace_topo::text::xml_escape(vm))));
        }
    }
    if let Some(uuid) = child("uuid") {
        let r = uuid.range();
        // The whole line when the element is alone on it.
        let start = text[..r.start].rfind('\n').map_or(0, |i| i + 1);
        let end = text[r.end..].find('\n').map_or(text.len(), |i| r.end + i + 1);
        let alone = text[start..r.start].trim().is_empty() && text[r.end..end].trim().is_empty();
        edits.push((if alone { start..end } else { r }, String::new()));
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0.start));
    let mut out = text.to_string();
    for (range, with) in edits {
        out.replace_range(range, &with);
    }
    out
}

/// A domain's text with the placement merged in by the splicer (the
/// NUMA elements, numaplace's mark, missing passthrough devices).
fn merge(text: &str, p: &Placement, emit: &LibvirtOptions) -> Result<String, ApplyError> {
    crate::domain::merge(text, p, emit)
        .map_err(|error: DomainError| DomainFileError { source_name: "the domain".to_string(), error }.into())
}

#[cfg(test)]
mod tests {
    use super::{as_new_domain, check_host, narrow_xml, narrowed_xml, HostMismatch, PlannedHost};
    use numaplace_topo::CpuSet;

    fn set(s: &str) -> CpuSet {
        s.parse().expect("CPU list")
    }

    #[test]
    fn narrowing_takes_the_dedicated_cpus_out_of_every_floating_set_and_keeps_every_other_byte() {
        let (was, after) = (set("0-3"), set("0-1"));
        let xml = "<domain type='qemu'>\n  <name>s</name>\n  <vcpu placement='static' cpuset='0-3'>2</vcpu>\n  <cputune>\n    \
                   <vcpupin vcpu='1' cpuset=\"1-3\"/>\n    <emulatorpin cpuset='0-3'/>\n  </cputune>\n</domain>\n";
        assert_eq!(
            narrow_xml(xml, &was, &after),
            "<domain type='qemu'>\n  <name>s</name>\n  <vcpu placement='static' cpuset='0-1'>2</vcpu>\n  <cputune>\n    \
             <vcpupin vcpu='1' cpuset=\"1\"/>\n    <emulatorpin cpuset='0-1'/>\n  </cputune>\n</domain>\n"
        );
        // A domain floating over every CPU gets the set it may use now; a
        // housekeeping emulator set is the operator's and stays.
        let free = "<domain><name>s</name><vcpu>2</vcpu><cputune><emulatorpin cpuset='3'/></cputune></domain>";
        assert_eq!(
            narrow_xml(free, &was, &after),
            "<domain><name>s</name><vcpu cpuset='0-1'>2</vcpu><cputune><emulatorpin cpuset='3'/></cputune></domain>"
        );
        // Nothing taken: byte for byte the same.
        assert_eq!(narrow_xml(xml, &was, &was), xml);
    }

    #[test]
    fn a_narrowed_domain_gets_an_emulatorpin_and_iothreadpins_where_it_had_none() {
        let xml = "<domain type='qemu'>\n  <name>h</name>\n  <vcpu placement='static'>2</vcpu>\n  \
                   <iothreads>1</iothreads>\n</domain>\n";
        let got = narrowed_xml(xml, &[set("0"), set("0")], &set("0"), &[(1, set("0"))]);
        assert_eq!(
            got,
            "<domain type='qemu'>\n  <name>h</name>\n  <vcpu placement='static' cpuset='0'>2</vcpu>\n  <cputune>\n    \
             <emulatorpin cpuset='0'/>\n    <iothreadpin iothread='1' cpuset='0'/>\n  </cputune>\n  \
             <iothreads>1</iothreads>\n</domain>\n"
        );
        // Pins already there are rewritten in place, a missing one added
        // inside the existing <cputune>.
        let tuned = "<domain>\n  <name>h</name>\n  <vcpu cpuset='0-3'>2</vcpu>\n  <cputune>\n    \
                     <vcpupin vcpu='1' cpuset='1-3'/>\n  </cputune>\n</domain>";
        let got = narrowed_xml(tuned, &[set("0-1"), set("1")], &set("0-1"), &[]);
        assert_eq!(
            got,
            "<domain>\n  <name>h</name>\n  <vcpu cpuset='0-1'>2</vcpu>\n  <cputune>\n    \
             <vcpupin vcpu='1' cpuset='1'/>\n    <emulatorpin cpuset='0-1'/>\n  </cputune>\n</domain>"
        );
    }

    #[test]
    fn a_plan_for_another_host_is_told_apart() {
        let two = numaplace_read::read_source("1 socket x 2 cores x 1 thread, 4GiB per node").expect("host");
        let here: Vec<(u32, CpuSet)> = vec![(0, set("0-1"))];
        let planned = |name: &str, live, nodes: Option<Vec<(u32, CpuSet)>>| PlannedHost {
            name: Some(name.to_string()),
            live,
            nodes,
        };
        let own = two.name().expect("named").to_string();
        assert_eq!(check_host(&planned(&own, false, Some(here.clone())), &two, false), Ok(()));
        // A file of the same host's topology under another name is this host.
        assert_eq!(check_host(&planned("dump.tar", false, Some(here.clone())), &two, true), Ok(()));
        assert_eq!(
            check_host(&planned("corona", false, Some(vec![(0, set("0-47"))])), &two, true),
            Err(HostMismatch::Node { node: 0, planned: Some(set("0-47")), here: Some(set("0-1")) })
        );
        let more = Some(vec![(0, set("0-1")), (1, set("2-3"))]);
        assert_eq!(
            check_host(&planned("x", false, more), &two, true),
            Err(HostMismatch::Node { node: 1, planned: Some(set("2-3")), here: None })
        );
        // Two machines read live, alike but not the same one.
        assert_eq!(
            check_host(&planned("db7", true, Some(here)), &two, true),
            Err(HostMismatch::Name { planned: "db7".into(), here: own.clone() })
        );
        // An earlier release's plan: by name only.
        assert_eq!(check_host(&planned(&own, true, None), &two, true), Ok(()));
        assert!(check_host(&planned("other", true, None), &two, true).is_err());
        let none = PlannedHost { name: None, live: false, nodes: None };
        assert_eq!(check_host(&none, &two, true), Err(HostMismatch::Unrecorded));
    }

    #[test]
    fn a_base_becomes_a_new_domain_of_the_plans_name_without_its_uuid() {
        let base = "<domain type='kvm'>\n  <name>golden</name>\n  <uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>\n  \
                    <memory unit='KiB'>65536</memory>\n  <devices>\n    <interface type='network'><mac address='52:54:00:12:34:56'/></interface>\n  </devices>\n</domain>\n";
        let out = as_new_domain(base, "db<2>");
        assert_eq!(
            out,
            "<domain type='kvm'>\n  <name>db&lt;2&gt;</name>\n  <memory unit='KiB'>65536</memory>\n  <devices>\n    \
             <interface type='network'><mac address='52:54:00:12:34:56'/></interface>\n  </devices>\n</domain>\n"
        );
        // Already named so and without a uuid: byte for byte the same.
        let plain = "<domain type='kvm'><name>db</name><memory unit='KiB'>65536</memory></domain>";
        assert_eq!(as_new_domain(plain, "db"), plain);
        // A uuid sharing its line with another element goes alone.
        let inline = "<domain><name>db</name><uuid>x</uuid><memory>1</memory></domain>";
        assert_eq!(as_new_domain(inline, "db"), "<domain><name>db</name><memory>1</memory></domain>");
    }
}
