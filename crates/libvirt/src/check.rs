//! apply's check against the live host: the pure decision between what
//! the host holds now and what a plan writes. [`decide`] takes every
//! domain libvirt has now ([`Holder`]), the VMs the plan writes
//! ([`Wanted`]), what the plan assumed about the host ([`Assumed`]) and
//! the host's own facts ([`HostFacts`]), and gives either the writes to
//! make (the plan's VMs, and every floating domain narrowed off the
//! dedicated and reserved CPUs) or every reason to write nothing
//! ([`Refusal`]). It reads nothing and changes nothing: `apply` reads
//! libvirt, calls it, and only then asks libvirt to change anything; a
//! plan made an hour ago, by another operator, or for another machine is
//! judged here against the host as it is now, as a Placement claim is
//! checked against generations.
//!
//! What an accepted decision guarantees, once its writes are made: no
//! CPU is held by two dedicated VMs, no floating vCPU (nor a floating
//! domain's emulator or I/O threads) may run on a held CPU, no vCPU may
//! run on a reserved CPU, and no pin names a CPU, node or device this
//! host lacks. A dedicated VM holds its vCPUs pinned 1:1 and the CPUs it
//! keeps beyond them (its emulator's own CPU, its idle siblings): who
//! holds what is the one map of CPU holders ([`CpuMap`], [`cpu_map`]),
//! built here from the domains by the rule a host state uses. A host that already breaks one of these where the plan
//! cannot mend it by narrowing (two domains pinned to one CPU, a
//! dedicated domain on a reserved CPU) is refused too: the operator sees
//! the holders named and fixes the host first.
//!
//! Over 800 lines only with its unit tests (about 150 lines), which pin
//! each refusal beside the check that makes it.

use crate::held::floating_of;
use crate::Held;
use numaplace_plan::{CpuMap, CpuMode, Placement, VmCpus};
use numaplace_topo::CpuSet;
use std::fmt;

/// A domain's CPUs as the check reads them, as it runs now ([`Holder`])
/// or as a plan writes it ([`Wanted`]): the one shape both take, and the
/// input of the one map of CPU holders ([`CpuMap`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainCpus {
    /// The CPUs each vCPU may use.
    pub vcpus: Vec<CpuSet>,
    /// Every vCPU pinned to a CPU of its own (for a mixed VM of
    /// numaplace's: those pinned 1:1 are dedicated, the rest float).
    pub pinned: bool,
    /// The CPUs a dedicated VM keeps beyond its vCPUs' (its emulator's
    /// own CPU, the siblings it keeps idle): it holds them as it holds
    /// its pins.
    pub kept: CpuSet,
    /// `<emulatorpin>`, when there is one.
    pub emulator: Option<CpuSet>,
}

impl DomainCpus {
    /// The CPUs it holds as a dedicated VM: its vCPUs pinned 1:1 and the
    /// CPUs it keeps.
    pub fn dedicated(&self) -> CpuSet {
        self.holds().held()
    }

    /// The CPUs its floating vCPUs may use.
    pub fn floating(&self) -> CpuSet {
        floating_of(self.pinned, &self.vcpus)
    }

    /// Its holds, as [`CpuMap::add_vm`] takes them (a floating vCPU is
    /// counted against no CPU here: it holds none).
    pub fn holds(&self) -> VmCpus {
        let pinned = self
            .vcpus
            .iter()
            .enumerate()
            .filter(|(_, s)| self.pinned && s.len() == 1)
            .filter_map(|(v, s)| Some((v as u32, s.first()?)))
            .collect();
        let emulator = self.emulator.clone().unwrap_or_default();
        VmCpus { pinned, floating: Vec::new(), kept: self.kept.clone(), emulator }
    }
}

/// A domain the host has now, as the check needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its name.
    pub vm: String,
    /// It runs (its live definition is what holds CPUs now).
    pub running: bool,
    /// Its vCPUs', kept CPUs and emulator threads' CPUs.
    pub cpus: DomainCpus,
    /// Each I/O thread by id and its `<iothreadpin>`, when pinned.
    pub iothreads: Vec<(u32, Option<CpuSet>)>,
    /// Memory counted on each node, bytes.
    pub memory: Vec<(u32, u64)>,
    /// Passthrough devices (PCI addresses).
    pub devices: Vec<String>,
}

impl Holder {
    /// A domain read by [`crate::held`], with its I/O threads from its
    /// definition text.
    pub fn of(held: &Held, running: bool, iothreads: Vec<(u32, Option<CpuSet>)>) -> Holder {
        let p = &held.placement;
        // The CPUs a dedicated VM keeps beyond its pins, as `held` read
        // them into its set.
        let kept = held.held_cpus().difference(&held.dedicated_cpus());
        Holder {
            vm: p.vm.clone(),
            running,
            cpus: DomainCpus {
                vcpus: held.vcpu_cpus.clone(),
                pinned: held.pinned,
                kept,
                emulator: held.emulatorpin.clone(),
            },
            iothreads,
            memory: charged(p),
            devices: p.devices.clone(),
        }
    }

    /// What a plan records of it to check later ([`Assumed`]).
    pub fn assumed(&self) -> Assumed {
        let c = &self.cpus;
        let dedicated = c.pinned && c.vcpus.iter().all(|s| s.len() == 1);
        // As a plan document's `held[].cpus` records them: a pinned (or
        // mixed) VM's 1:1 and kept CPUs, a floating VM's every CPU.
        let cpus = if c.pinned { c.dedicated() } else { c.floating() };
        Assumed { vm: self.vm.clone(), dedicated, cpus, devices: self.devices.clone(), after: None }
    }
}

/// The memory a placement counts on each node: what it is charged when
/// it overcommits, else what it has.
fn charged(p: &Placement) -> Vec<(u32, u64)> {
    let list = if p.charged.is_empty() { &p.memory } else { &p.charged };
    list.iter().map(|(n, b)| (n.0, *b)).collect()
}

/// The I/O threads a definition text declares (`<iothreads>N`, or
/// `<iothreadids>`), each with its `<iothreadpin>` when it has one.
pub fn iothreads_of(xml: &str) -> Vec<(u32, Option<CpuSet>)> {
    let opts = roxmltree::ParsingOptions { allow_dtd: false, ..Default::default() };
    let Ok(doc) = roxmltree::Document::parse_with_options(xml, opts) else { return Vec::new() };
    let root = doc.root_element();
    let mut ids: Vec<u32> = crate::domain::child(root, "iothreadids")
        .map(|ids| {
            ids.children()
                .filter(|c| c.has_tag_name("iothread"))
                .filter_map(|c| c.attribute("id")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() {
        // `<iothreads>N</iothreads>` alone numbers them 1..=N; a count
        // beyond any real domain's is not a domain's and is left unread.
        let n: u32 = crate::domain::child(root, "iothreads").and_then(|n| n.text()?.trim().parse().ok()).unwrap_or(0);
        ids = (1..=n.min(1024)).collect();
    }
    let pins: Vec<(u32, CpuSet)> = crate::domain::child(root, "cputune")
        .map(|t| {
            t.children()
                .filter(|c| c.has_tag_name("iothreadpin"))
                .filter_map(|c| Some((c.attribute("iothread")?.parse().ok()?, c.attribute("cpuset")?.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default();
    ids.into_iter().map(|id| (id, pins.iter().find(|p| p.0 == id).map(|p| p.1.clone()))).collect()
}

/// A VM the plan writes: one it places, or one whose floating CPUs it
/// sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The domain.
    pub vm: String,
    /// Its vCPUs', kept CPUs and emulator threads' CPUs, as written.
    pub cpus: DomainCpus,
    /// Memory on each node, bytes.
    pub memory: Vec<(u32, u64)>,
    /// Passthrough devices.
    pub devices: Vec<String>,
}

impl Wanted {
    /// A placement as the domain numaplace writes for it runs: a
    /// dedicated VM's vCPUs each on its CPU (a mixed VM's floating ones
    /// over their pool) and the rest of its set kept, a shared VM's every
    /// vCPU over its set.
    pub fn of(p: &Placement) -> Wanted {
        let pinned = p.cpu_mode == CpuMode::Dedicated;
        let held = VmCpus::of(p);
        let vcpus = p
            .vcpus
            .iter()
            .map(|pin| {
                if !pinned {
                    return p.cpuset.clone();
                }
                match p.floating.iter().find(|f| f.vcpus.contains(pin.vcpu)) {
                    Some(f) => f.cpus.clone(),
                    None => std::iter::once(pin.pu).collect(),
                }
            })
            .collect();
        let emulator = (!p.emulator.is_empty()).then(|| p.emulator.clone());
        Wanted {
            vm: p.vm.clone(),
            cpus: DomainCpus { vcpus, pinned, kept: held.kept, emulator },
            memory: charged(p),
            devices: p.devices.clone(),
        }
    }

    fn all_cpus(&self) -> CpuSet {
        let c = &self.cpus;
        c.vcpus.iter().fold(c.emulator.clone().unwrap_or_default().union(&c.kept), |u, s| u.union(s))
    }
}

/// A domain the plan planned around, as its document records it
/// (`held`): what it held then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumed {
    /// The domain.
    pub vm: String,
    /// It was dedicated (every vCPU on a CPU of its own).
    pub dedicated: bool,
    /// The CPUs its vCPUs might use.
    pub cpus: CpuSet,
    /// Its passthrough devices.
    pub devices: Vec<String>,
    /// The CPUs the plan narrows it to, when it does: a domain already
    /// narrowed so (this plan applied before) still holds what the plan
    /// assumed.
    pub after: Option<CpuSet>,
}

/// The host apply writes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// Its online CPUs.
    pub cpus: CpuSet,
    /// The CPUs it keeps for itself (profile, plan, flags).
    pub reserved: CpuSet,
    /// Each node and the memory VMs may use on it, bytes.
    pub memory: Vec<(u32, u64)>,
    /// The PCI devices it has.
    pub devices: Vec<String>,
}

/// What the plan names that this host lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// CPUs.
    Cpus,
    /// NUMA nodes.
    Nodes,
}

/// Why apply writes nothing. Each names the VM of the plan and, where
/// one is at fault, the domain that holds what it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The plan pins to CPUs or binds to nodes this host does not have
    /// (a plan for another machine; `--force-host` does not change this:
    /// nothing is ever widened to other CPUs instead).
    NotOnHost {
        /// The plan's VM.
        vm: String,
        /// CPUs or nodes.
        what: Missing,
        /// The ones missing.
        ids: CpuSet,
    },
    /// The plan passes through a device this host does not have.
    NoDevice {
        /// The plan's VM.
        vm: String,
        /// The device.
        device: String,
    },
    /// The plan puts vCPUs on CPUs the host reserves.
    Reserved {
        /// The plan's VM.
        vm: String,
        /// The reserved CPUs it would use.
        cpus: CpuSet,
    },
    /// Another domain holds, dedicated, CPUs the plan gives its VM (or
    /// lets it float over).
    Held {
        /// The plan's VM.
        vm: String,
        /// The domain holding them now.
        holder: String,
        /// The CPUs.
        cpus: CpuSet,
    },
    /// Another domain passes the device through.
    DeviceHeld {
        /// The plan's VM.
        vm: String,
        /// The domain that has it.
        holder: String,
        /// The device.
        device: String,
    },
    /// The plan's memory on a node does not fit beside what the host's
    /// domains have there now.
    Memory {
        /// The plan's VM.
        vm: String,
        /// The node.
        node: u32,
        /// Bytes all would need there (the plan's and the holders').
        needed: u64,
        /// Bytes VMs may use there.
        usable: u64,
        /// The domains with memory there now, largest first.
        holders: Vec<String>,
    },
    /// A domain the plan planned around holds other CPUs or devices now
    /// than the plan recorded: the plan is stale.
    Changed {
        /// The domain.
        holder: String,
        /// The CPUs it might use when the plan was made.
        planned: CpuSet,
        /// Now.
        now: CpuSet,
    },
    /// Two domains are pinned to the same CPUs (before or after the
    /// plan): a double booking the plan would make or keep.
    Overlap {
        /// One domain.
        vm: String,
        /// The other.
        other: String,
        /// The CPUs both hold.
        cpus: CpuSet,
    },
    /// A dedicated domain already sits on CPUs the host reserves.
    HolderOnReserved {
        /// The domain.
        holder: String,
        /// The reserved CPUs it holds.
        cpus: CpuSet,
    },
    /// A domain changed (defined, undefined, re-pinned) between the check
    /// and the commit: another operator's apply or a hand change came
    /// first ([`recheck`]).
    Moved {
        /// The domain.
        holder: String,
    },
    /// A floating domain would be left no CPU to run on once the
    /// dedicated and reserved CPUs are taken out of its set.
    NoCpuLeft {
        /// The floating domain.
        holder: String,
        /// The CPUs it may use now.
        cpus: CpuSet,
    },
}

impl Refusal {
    /// A stable code for programs.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotOnHost { .. } => "not-on-host",
            Refusal::NoDevice { .. } => "no-device",
            Refusal::Reserved { .. } => "reserved",
            Refusal::Held { .. } => "held",
            Refusal::DeviceHeld { .. } => "device-held",
            Refusal::Memory { .. } => "memory",
            Refusal::Changed { .. } => "changed",
            Refusal::Overlap { .. } => "overlap",
            Refusal::HolderOnReserved { .. } => "holder-on-reserved",
            Refusal::NoCpuLeft { .. } => "no-cpu-left",
            Refusal::Moved { .. } => "moved",
        }
    }

    /// The plan's VM it is about (`None`: a domain of the host is at
    /// fault).
    pub fn vm(&self) -> Option<&str> {
        match self {
            Refusal::NotOnHost { vm, .. }
            | Refusal::NoDevice { vm, .. }
            | Refusal::Reserved { vm, .. }
            | Refusal::Held { vm, .. }
            | Refusal::DeviceHeld { vm, .. }
            | Refusal::Memory { vm, .. } => Some(vm),
            Refusal::Overlap { .. }
            | Refusal::Changed { .. }
            | Refusal::HolderOnReserved { .. }
            | Refusal::Moved { .. }
            | Refusal::NoCpuLeft { .. } => None,
        }
    }

    /// The domain of the host at fault, if one is.
    pub fn holder(&self) -> Option<&str> {
        match self {
            Refusal::Held { holder, .. }
            | Refusal::DeviceHeld { holder, .. }
            | Refusal::Changed { holder, .. }
            | Refusal::HolderOnReserved { holder, .. }
            | Refusal::Moved { holder }
            | Refusal::NoCpuLeft { holder, .. } => Some(holder),
            Refusal::Overlap { other, .. } => Some(other),
            Refusal::Memory { holders, .. } => holders.first().map(String::as_str),
            _ => None,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotOnHost { vm, what: Missing::Cpus, ids } => write!(
                f,
                "{vm} is planned on CPUs {ids}, which this host does not have (a plan for another machine; --force-host \
                 never moves a VM to other CPUs): plan it on this host"
            ),
            Refusal::NotOnHost { vm, what: Missing::Nodes, ids } => write!(
                f,
                "{vm} binds memory to nodes {ids}, which this host does not have (a plan for another machine): plan it \
                 on this host"
            ),
            Refusal::NoDevice { vm, device } => {
                write!(f, "{vm} passes through {device}, which this host does not have: plan it on this host")
            }
            Refusal::Reserved { vm, cpus } => write!(
                f,
                "{vm} would run on CPUs {cpus}, which this host reserves for itself: plan it again with this host's \
                 reservations"
            ),
            Refusal::Held { vm, holder, cpus } => write!(
                f,
                "{vm} is planned on CPUs {cpus}, which domain {holder} holds now (dedicated): the plan is stale; plan \
                 again with --state libvirt"
            ),
            Refusal::DeviceHeld { vm, holder, device } => write!(
                f,
                "{vm} passes through {device}, which domain {holder} has now: plan again with --state libvirt"
            ),
            Refusal::Memory { vm, node, needed, usable, holders } => write!(
                f,
                "{vm}'s memory does not fit on node{node} beside what {} {} there now ({} needed, {} usable): plan \
                 again with --state libvirt",
                holders.join(", "),
                if holders.len() == 1 { "has" } else { "have" },
                numaplace_topo::format_size(*needed),
                numaplace_topo::format_size(*usable)
            ),
            Refusal::Changed { holder, planned, now } => write!(
                f,
                "domain {holder} may run on CPUs {now} now, and the plan was made when it had {planned}: the plan is \
                 stale; plan again with --state libvirt"
            ),
            Refusal::Overlap { vm, other, cpus } => write!(
                f,
                "{vm} and {other} would both hold CPUs {cpus} (pinned 1:1): a double booking; plan again with --state \
                 libvirt, or re-pin one of them first"
            ),
            Refusal::HolderOnReserved { holder, cpus } => write!(
                f,
                "domain {holder} is pinned to CPUs {cpus}, which this host reserves for itself: move it first \
                 (`numaplace lint --state libvirt` shows it)"
            ),
            Refusal::Moved { holder } => write!(
                f,
                "domain {holder} changed (defined, undefined or re-pinned) while apply checked the host: nothing was \
                 written; run apply again (another operator's apply, or a hand change, came first)"
            ),
            Refusal::NoCpuLeft { holder, cpus } => write!(
                f,
                "domain {holder} floats over CPUs {cpus} only, all of which would be dedicated or reserved: it would \
                 have no CPU left; move it or plan fewer dedicated CPUs"
            ),
        }
    }
}

/// One write the check allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Narrow a floating domain off the dedicated and reserved CPUs: its
    /// vCPUs, emulator threads and I/O threads from now on, live and in
    /// its definition.
    Narrow {
        /// The domain.
        vm: String,
        /// Each vCPU's CPUs after.
        vcpus: Vec<CpuSet>,
        /// The emulator threads' CPUs after (written where there was no
        /// `<emulatorpin>`).
        emulator: CpuSet,
        /// Each I/O thread's CPUs after.
        iothreads: Vec<(u32, CpuSet)>,
        /// The CPUs taken out.
        taken: CpuSet,
    },
    /// Write the plan's VM as planned.
    Place {
        /// The VM.
        vm: String,
    },
}

impl Write {
    /// The domain written.
    pub fn vm(&self) -> &str {
        match self {
            Write::Narrow { vm, .. } | Write::Place { vm } => vm,
        }
    }
}

/// The check: the writes that carry the plan out on the host as it is
/// now (floating domains narrowed first, then the plan's VMs), or every
/// reason to write nothing.
pub fn decide(
    live: &[Holder],
    wanted: &[Wanted],
    assumed: Option<&[Assumed]>,
    host: &HostFacts,
) -> Result<Vec<Write>, Vec<Refusal>> {
    let mut out = Vec::new();
    let ours = |vm: &str| wanted.iter().any(|w| w.vm == vm);
    let others: Vec<&Holder> = live.iter().filter(|h| !ours(&h.vm)).collect();
    on_host(live, wanted, host, &mut out);
    host_as_is(&others, host, &mut out);
    against_holders(wanted, &others, &mut out);
    memory_room(wanted, &others, host, &mut out);
    assumptions_kept(assumed.unwrap_or_default().iter().filter(|a| !ours(&a.vm)), &others, &mut out);

    // Every floating domain off the dedicated and reserved CPUs.
    let taken = taken(live, wanted, host);
    let mut writes = Vec::new();
    for h in &others {
        match narrowing(h, &taken) {
            Ok(Some(w)) => writes.push(w),
            Ok(None) => {}
            Err(r) => out.push(r),
        }
    }
    if !out.is_empty() {
        out.dedup();
        return Err(out);
    }
    writes.extend(wanted.iter().map(|w| Write::Place { vm: w.vm.clone() }));
    Ok(writes)
}

/// What the plan names must be this host's: CPUs, nodes, devices, and no
/// vCPU on a reserved CPU.
fn on_host(live: &[Holder], wanted: &[Wanted], host: &HostFacts, out: &mut Vec<Refusal>) {
    let nodes: CpuSet = host.memory.iter().map(|m| m.0).collect();
    for w in wanted {
        let missing = w.all_cpus().difference(&host.cpus);
        if !missing.is_empty() {
            out.push(Refusal::NotOnHost { vm: w.vm.clone(), what: Missing::Cpus, ids: missing });
        }
        let bound: CpuSet = w.memory.iter().map(|m| m.0).collect();
        let missing = bound.difference(&nodes);
        if !missing.is_empty() {
            out.push(Refusal::NotOnHost { vm: w.vm.clone(), what: Missing::Nodes, ids: missing });
        }
        // A device the domain already has is its own, whatever this
        // host's listing says.
        let has = |d: &String| live.iter().any(|h| h.vm == w.vm && h.devices.contains(d));
        for d in w.devices.iter().filter(|d| !host.devices.contains(d) && !has(d)) {
            out.push(Refusal::NoDevice { vm: w.vm.clone(), device: d.clone() });
        }
        let on = w.cpus.vcpus.iter().fold(CpuSet::new(), |u, s| u.union(s)).intersection(&host.reserved);
        if !on.is_empty() {
            out.push(Refusal::Reserved { vm: w.vm.clone(), cpus: on });
        }
    }
}

/// The host as it is: a double booking or a dedicated domain on a
/// reserved CPU is not the plan's to keep.
fn host_as_is(others: &[&Holder], host: &HostFacts, out: &mut Vec<Refusal>) {
    for (i, a) in others.iter().enumerate() {
        let mine = a.cpus.dedicated();
        let on = mine.intersection(&host.reserved);
        if !on.is_empty() {
            out.push(Refusal::HolderOnReserved { holder: a.vm.clone(), cpus: on });
        }
        for b in &others[i + 1..] {
            let both = mine.intersection(&b.cpus.dedicated());
            if !both.is_empty() {
                out.push(Refusal::Overlap { vm: a.vm.clone(), other: b.vm.clone(), cpus: both });
            }
        }
    }
}

/// What the plan writes against what others hold now, and its VMs
/// against each other.
fn against_holders(wanted: &[Wanted], others: &[&Holder], out: &mut Vec<Refusal>) {
    for (i, w) in wanted.iter().enumerate() {
        let (dedicated, floating) = (w.cpus.dedicated(), w.cpus.floating());
        for h in others {
            let theirs = h.cpus.dedicated();
            let taken = dedicated.union(&floating).intersection(&theirs);
            if !taken.is_empty() {
                out.push(Refusal::Held { vm: w.vm.clone(), holder: h.vm.clone(), cpus: taken });
            }
            for d in w.devices.iter().filter(|d| h.devices.contains(d)) {
                out.push(Refusal::DeviceHeld { vm: w.vm.clone(), holder: h.vm.clone(), device: d.clone() });
            }
        }
        for v in &wanted[i + 1..] {
            let both = dedicated.intersection(&v.cpus.dedicated());
            if !both.is_empty() {
                out.push(Refusal::Overlap { vm: w.vm.clone(), other: v.vm.clone(), cpus: both });
            }
            // A floating VM of the plan over another's dedicated CPUs.
            for (a, b) in [(w, v), (v, w)] {
                let over = a.cpus.floating().intersection(&b.cpus.dedicated());
                if !over.is_empty() {
                    out.push(Refusal::Held { vm: a.vm.clone(), holder: b.vm.clone(), cpus: over });
                }
            }
        }
    }
}

/// Memory, on each node the plan puts any: what others hold there and
/// the plan's must fit what the node has for VMs.
fn memory_room(wanted: &[Wanted], others: &[&Holder], host: &HostFacts, out: &mut Vec<Refusal>) {
    let mut planned_nodes: Vec<u32> = wanted.iter().flat_map(|w| w.memory.iter().map(|m| m.0)).collect();
    planned_nodes.sort_unstable();
    planned_nodes.dedup();
    for node in planned_nodes {
        let Some(&(_, usable)) = host.memory.iter().find(|m| m.0 == node) else { continue };
        let on = |memory: &[(u32, u64)]| memory.iter().filter(|m| m.0 == node).map(|m| m.1).sum::<u64>();
        let mut holders: Vec<(u64, &str)> =
            others.iter().map(|h| (on(&h.memory), h.vm.as_str())).filter(|h| h.0 > 0).collect();
        let theirs: u64 = holders.iter().map(|h| h.0).sum();
        let plan: u64 = wanted.iter().map(|w| on(&w.memory)).sum();
        let needed = theirs.saturating_add(plan);
        if needed > usable && !holders.is_empty() {
            holders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            let vm = wanted.iter().find(|w| on(&w.memory) > 0).map(|w| w.vm.clone()).unwrap_or_default();
            out.push(Refusal::Memory {
                vm,
                node,
                needed,
                usable,
                holders: holders.iter().map(|h| h.1.to_string()).collect(),
            });
        }
    }
}

/// What the plan assumed of the domains it planned around (not its own)
/// still holds.
fn assumptions_kept<'a>(assumed: impl Iterator<Item = &'a Assumed>, others: &[&Holder], out: &mut Vec<Refusal>) {
    for a in assumed {
        let Some(h) = others.iter().find(|h| h.vm == a.vm) else { continue };
        let now = h.assumed();
        // Narrowed as the plan says (a one-vCPU domain narrowed to one
        // CPU reads as pinned 1:1 once libvirt writes its live pin).
        let same = (now.dedicated == a.dedicated && now.cpus == a.cpus) || a.after.as_ref() == Some(&now.cpus);
        let devices = {
            let (mut x, mut y) = (now.devices.clone(), a.devices.clone());
            x.sort();
            y.sort();
            x == y
        };
        if !same || !devices {
            out.push(Refusal::Changed { holder: a.vm.clone(), planned: a.cpus.clone(), now: now.cpus });
        }
    }
}

/// The commit's check: the host read again just before the first write
/// against the host the decision was made on. The first domain defined,
/// undefined or holding anything else since voids the decision.
pub fn recheck(checked: &[Holder], now: &[Holder]) -> Option<Refusal> {
    let changed = checked
        .iter()
        .find(|b| now.iter().find(|n| n.vm == b.vm) != Some(*b))
        .or_else(|| now.iter().find(|n| !checked.iter().any(|b| b.vm == n.vm)))?;
    Some(Refusal::Moved { holder: changed.vm.clone() })
}

/// Who holds each CPU of the host once the plan is written: the host's
/// other domains as they are, the plan's VMs as it writes them, and the
/// reserved CPUs; the same map a host state gives ([`CpuMap`]).
pub fn cpu_map(live: &[Holder], wanted: &[Wanted], host: &HostFacts) -> CpuMap {
    let ours = |vm: &str| wanted.iter().any(|w| w.vm == vm);
    let mut map = CpuMap::new(host.reserved.clone());
    for (vm, cpus) in live.iter().filter(|h| !ours(&h.vm)).map(|h| (&h.vm, &h.cpus)) {
        map.add_vm(vm, &cpus.holds());
    }
    for w in wanted {
        map.add_vm(&w.vm, &w.cpus.holds());
    }
    map
}

/// The CPUs no floating thread may use once the plan is written: those
/// dedicated VMs hold in [`cpu_map`] (the host's others and the plan's:
/// their pinned vCPUs, their emulators' own CPUs, the siblings they keep
/// idle), and the reserved ones.
pub fn taken(live: &[Holder], wanted: &[Wanted], host: &HostFacts) -> CpuSet {
    let map = cpu_map(live, wanted, host);
    map.held().union(map.host())
}

/// A floating domain's narrowing off `taken` (the dedicated and reserved
/// CPUs), if it needs one: its floating vCPUs, its emulator threads and
/// its I/O threads each lose the CPUs taken; threads without a pin are
/// pinned where its floating vCPUs are left. A dedicated domain (every
/// vCPU on a CPU of its own) is never narrowed.
pub fn narrowing(h: &Holder, taken: &CpuSet) -> Result<Option<Write>, Refusal> {
    let floating = h.cpus.floating();
    if floating.is_empty() {
        return Ok(None);
    }
    let floats = |s: &CpuSet| !h.cpus.pinned || s.len() > 1;
    let vcpus: Vec<CpuSet> =
        h.cpus.vcpus.iter().map(|s| if floats(s) { s.difference(taken) } else { s.clone() }).collect();
    if vcpus.iter().any(CpuSet::is_empty) {
        return Err(Refusal::NoCpuLeft { holder: h.vm.clone(), cpus: floating });
    }
    let left = vcpus.iter().filter(|s| floats(s)).fold(CpuSet::new(), |u, s| u.union(s));
    // Threads with no pin run where the domain's vCPUs may (libvirt's
    // default is the `<vcpu cpuset>`, else every CPU).
    let keep = |s: &CpuSet| {
        let kept = s.difference(taken);
        if kept.is_empty() {
            left.clone()
        } else {
            kept
        }
    };
    let emulator_now = h.cpus.emulator.clone().unwrap_or_else(|| floating.clone());
    let emulator = keep(&emulator_now);
    let iothreads: Vec<(u32, CpuSet)> =
        h.iothreads.iter().map(|(id, pin)| (*id, keep(pin.as_ref().unwrap_or(&floating)))).collect();
    let threads = h.iothreads.iter().map(|(_, pin)| pin.clone().unwrap_or_else(|| floating.clone()));
    let touched = floating.union(&emulator_now).union(&threads.fold(CpuSet::new(), |u, s| u.union(&s)));
    let taken_here = touched.intersection(taken);
    Ok((!taken_here.is_empty()).then(|| Write::Narrow {
        vm: h.vm.clone(),
        vcpus,
        emulator,
        iothreads,
        taken: taken_here,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaplace_plan::HeldAs;

    fn set(s: &str) -> CpuSet {
        s.parse().expect("CPU list")
    }

    fn host(cpus: &str, reserved: &str) -> HostFacts {
        HostFacts { cpus: set(cpus), reserved: set(reserved), memory: vec![(0, 8 << 30)], devices: Vec::new() }
    }

    fn pinned(vm: &str, cpus: &[u32]) -> Holder {
        Holder {
            vm: vm.into(),
            running: true,
            cpus: DomainCpus {
                vcpus: cpus.iter().map(|&c| std::iter::once(c).collect()).collect(),
                pinned: true,
                ..DomainCpus::default()
            },
            iothreads: Vec::new(),
            memory: vec![(0, 64 << 20)],
            devices: Vec::new(),
        }
    }

    fn floating(vm: &str, vcpus: usize, cpus: &str) -> Holder {
        Holder {
            cpus: DomainCpus { vcpus: vec![set(cpus); vcpus], pinned: false, ..DomainCpus::default() },
            ..pinned(vm, &[])
        }
    }

    fn want(vm: &str, cpus: &[u32]) -> Wanted {
        Wanted {
            vm: vm.into(),
            cpus: DomainCpus {
                vcpus: cpus.iter().map(|&c| std::iter::once(c).collect()).collect(),
                pinned: true,
                ..DomainCpus::default()
            },
            memory: vec![(0, 64 << 20)],
            devices: Vec::new(),
        }
    }

    #[test]
    fn a_stale_plan_on_a_cpu_a_running_domain_holds_is_refused_naming_it() {
        // The case: dA planned onto CPU 1, which dR holds 1:1.
        let live = [floating("dS", 1, "0-1"), pinned("dR", &[1])];
        let got = decide(&live, &[want("dA", &[1])], None, &host("0-1", "0"));
        let refusals = got.expect_err("refused");
        assert!(refusals.contains(&Refusal::Held { vm: "dA".into(), holder: "dR".into(), cpus: set("1") }));
        assert_eq!(refusals[0].code(), "held");
        assert_eq!(refusals[0].holder(), Some("dR"));
    }

    #[test]
    fn pins_this_host_lacks_are_refused_never_widened() {
        let got = decide(&[], &[want("x", &[2])], None, &host("0-1", ""));
        assert_eq!(got, Err(vec![Refusal::NotOnHost { vm: "x".into(), what: Missing::Cpus, ids: set("2") }]));
    }

    #[test]
    fn every_floating_domain_is_narrowed_vcpus_emulator_and_iothreads() {
        let mut hand = floating("hand", 2, "0-3");
        hand.iothreads = vec![(1, None), (2, Some(set("2-3")))];
        let live = [hand, floating("far", 1, "0")];
        let got = decide(&live, &[want("db", &[2, 3])], None, &host("0-3", "")).expect("accepted");
        assert_eq!(
            got,
            vec![
                Write::Narrow {
                    vm: "hand".into(),
                    vcpus: vec![set("0-1"); 2],
                    emulator: set("0-1"),
                    iothreads: vec![(1, set("0-1")), (2, set("0-1"))],
                    taken: set("2-3"),
                },
                Write::Place { vm: "db".into() },
            ]
        );
    }

    #[test]
    fn a_holder_that_changed_since_the_plan_makes_it_stale() {
        let live = [pinned("inc", &[3])];
        let assumed = [Assumed { vm: "inc".into(), dedicated: true, cpus: set("2"), devices: Vec::new(), after: None }];
        let got = decide(&live, &[want("db", &[1])], Some(&assumed), &host("0-3", ""));
        assert_eq!(got, Err(vec![Refusal::Changed { holder: "inc".into(), planned: set("2"), now: set("3") }]));
        // Narrowed as the plan recorded: not stale, even pinned 1:1 now.
        let narrowed = [Assumed { after: Some(set("3")), dedicated: false, cpus: set("2-3"), ..assumed[0].clone() }];
        assert!(decide(&live, &[want("db", &[1])], Some(&narrowed), &host("0-3", "")).is_ok());
        // Gone since: it holds nothing, the plan still holds.
        assert!(decide(&[], &[want("db", &[1])], Some(&assumed), &host("0-3", "")).is_ok());
    }

    #[test]
    fn a_domain_changed_between_check_and_commit_voids_the_decision() {
        let checked = [pinned("a", &[1]), floating("b", 1, "0-3")];
        assert_eq!(recheck(&checked, &checked), None);
        let moved = Some(Refusal::Moved { holder: "a".into() });
        assert_eq!(recheck(&checked, &[pinned("a", &[2]), floating("b", 1, "0-3")]), moved);
        assert_eq!(recheck(&checked, &checked[1..]), moved);
        let more = [checked[0].clone(), checked[1].clone(), pinned("c", &[3])];
        assert_eq!(recheck(&checked, &more), Some(Refusal::Moved { holder: "c".into() }));
    }

    #[test]
    fn memory_and_devices_another_domain_holds_now_are_refusals_naming_it() {
        let mut big = pinned("big", &[0]);
        big.memory = vec![(0, 7 << 30)];
        big.devices = vec!["0000:3b:00.0".into()];
        let mut db = want("db", &[1]);
        db.memory = vec![(0, 2 << 30)];
        db.devices = vec!["0000:3b:00.0".into()];
        let mut facts = host("0-3", "");
        facts.devices = vec!["0000:3b:00.0".into()];
        let got = decide(&[big], &[db.clone()], None, &facts).expect_err("refused");
        assert_eq!(
            got,
            vec![
                Refusal::DeviceHeld { vm: "db".into(), holder: "big".into(), device: "0000:3b:00.0".into() },
                Refusal::Memory {
                    vm: "db".into(),
                    node: 0,
                    needed: 9 << 30,
                    usable: 8 << 30,
                    holders: vec!["big".into()]
                },
            ]
        );
        // A device this host does not list is refused whatever else.
        let got = decide(&[], &[db], None, &host("0-3", "")).expect_err("refused");
        assert_eq!(got, vec![Refusal::NoDevice { vm: "db".into(), device: "0000:3b:00.0".into() }]);
    }

    /// The CPUs a dedicated VM keeps beyond its pins (its emulator's own
    /// CPU, an idle sibling) are held as its pins are: floating domains
    /// are narrowed off them and no other VM is pinned there.
    #[test]
    fn the_cpus_a_dedicated_vm_keeps_are_held_as_its_pins() {
        let mut rt = want("rt", &[1]);
        rt.cpus.kept = set("2-3");
        rt.cpus.emulator = Some(set("2"));
        let map = cpu_map(&[], std::slice::from_ref(&rt), &host("0-5", "0"));
        let what = |pu: u32| map.on(pu).iter().map(|h| h.what).collect::<Vec<_>>();
        assert_eq!((what(1), what(2), what(3)), (vec![HeldAs::Vcpu(0)], vec![HeldAs::Emulator], vec![HeldAs::Idle]));
        let got = decide(&[floating("f", 1, "0-5")], std::slice::from_ref(&rt), None, &host("0-5", "0"));
        let narrowed = got.expect("accepted");
        assert!(
            matches!(&narrowed[0], Write::Narrow { vm, taken, .. } if vm == "f" && *taken == set("0-3")),
            "{narrowed:?}"
        );
        let mut live = pinned("live", &[1]);
        live.cpus.kept = set("3");
        let got = decide(&[live], &[want("db", &[3])], None, &host("0-5", ""));
        assert_eq!(got, Err(vec![Refusal::Held { vm: "db".into(), holder: "live".into(), cpus: set("3") }]));
    }

    #[test]
    fn a_floating_domain_left_no_cpu_is_a_refusal() {
        let live = [floating("f", 1, "1")];
        let got = decide(&live, &[want("db", &[1])], None, &host("0-1", ""));
        assert_eq!(got, Err(vec![Refusal::NoCpuLeft { holder: "f".into(), cpus: set("1") }]));
    }
}
