//! The one map of who holds each host CPU thread and as what
//! ([`CpuMap`]): a VM's vCPU, its emulator threads on a CPU it keeps for
//! them, an idle sibling it keeps, or the host. Every reader of "who is
//! on this CPU" reads it: the planner's shortfall wording
//! ([`HostState::cpu_holders`]), emit's host map and picture, lint's
//! fixer, and the libvirt edge's apply check, which builds one from the
//! live host's domains through [`CpuMap::add_vm`] (the same rule as a
//! host state's), so the views cannot disagree on emulator and idle
//! threads again.
//!
//! The rule: a dedicated VM holds its vCPUs' CPUs and every other CPU of
//! its set (`Placement::cpuset`): there, a CPU its emulator threads are
//! pinned to runs them alone (an emulator thread pinned to its own CPU
//! holds it), and the rest are the siblings it keeps idle. A floating
//! vCPU (a shared VM's, a mixed VM's floating ones) holds no CPU: it is
//! counted against one, as load. The host holds its reserved CPUs.

use super::*;
use std::fmt;

/// What a VM has on one CPU thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HeldAs {
    /// vCPU N, pinned to this CPU alone: the CPU is the VM's.
    Vcpu(u32),
    /// vCPU N floats and is counted against this CPU: load, not a hold.
    Floating(u32),
    /// The VM's emulator (and I/O) threads, on a CPU it keeps for them.
    Emulator,
    /// A sibling the VM keeps idle (`isolate`, the last core of an odd
    /// `pairs` VM).
    Idle,
}

impl HeldAs {
    /// Whether the CPU is the VM's alone (no other vCPU may run there).
    pub fn holds(self) -> bool {
        !matches!(self, HeldAs::Floating(_))
    }
}

impl fmt::Display for HeldAs {
    /// The short form the host map and picture write: `v3`, `emu`,
    /// `idle`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeldAs::Vcpu(v) | HeldAs::Floating(v) => write!(f, "v{v}"),
            HeldAs::Emulator => f.write_str("emu"),
            HeldAs::Idle => f.write_str("idle"),
        }
    }
}

/// One VM's part of a CPU thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The VM.
    pub vm: String,
    /// What of it.
    pub what: HeldAs,
}

/// A VM's use of host CPUs, as any reader knows it: the input
/// [`CpuMap::add_vm`] turns into holds. A host state gives it from a
/// placement; the libvirt edge from a domain's pins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmCpus {
    /// (vCPU, CPU) of each vCPU pinned to one CPU of its own.
    pub pinned: Vec<(u32, u32)>,
    /// (vCPU, CPU counted against) of each floating vCPU, where a
    /// reader counted it.
    pub floating: Vec<(u32, u32)>,
    /// Every CPU the VM keeps to itself beyond its pins (its emulator's
    /// own CPU, its idle siblings).
    pub kept: CpuSet,
    /// Its emulator threads' CPUs.
    pub emulator: CpuSet,
}

impl VmCpus {
    /// A placement's use of CPUs, by the rule in this module's opening.
    pub fn of(p: &Placement) -> VmCpus {
        let mut out = VmCpus { emulator: p.emulator.clone(), ..VmCpus::default() };
        let dedicated = p.cpu_mode == CpuMode::Dedicated;
        for v in &p.vcpus {
            if dedicated && p.floats(v.vcpu).is_none() {
                out.pinned.push((v.vcpu, v.pu));
            } else {
                out.floating.push((v.vcpu, v.pu));
            }
        }
        if dedicated {
            let pins: CpuSet = out.pinned.iter().map(|&(_, pu)| pu).collect();
            out.kept = p.cpuset.difference(&pins);
        }
        out
    }

    /// The CPUs the VM holds: its pinned vCPUs' and those it keeps.
    pub fn held(&self) -> CpuSet {
        self.pinned.iter().map(|&(_, pu)| pu).collect::<CpuSet>().union(&self.kept)
    }
}

/// Who holds each CPU thread of a host, and as what (see the module's
/// opening for the rule); one per host state ([`CpuMap::of_state`]) or
/// per live host read by the libvirt edge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuMap {
    /// Each CPU with a VM on it: the VMs, in the order they were added.
    on: BTreeMap<u32, Vec<Hold>>,
    /// The CPUs the host reserves for itself.
    host: CpuSet,
}

impl CpuMap {
    /// An empty map of a host that reserves `host` for itself.
    pub fn new(host: CpuSet) -> CpuMap {
        CpuMap { on: BTreeMap::new(), host }
    }

    /// The map of a host state: its placements in order and its
    /// reserved CPUs.
    pub fn of_state(state: &HostState) -> CpuMap {
        let mut map = CpuMap::new(state.reservations().cpus.clone());
        for p in state.placements() {
            map.add_vm(&p.vm, &VmCpus::of(p));
        }
        map
    }

    /// Adds one VM's holds: each pinned vCPU, each counted floating
    /// vCPU, and each kept CPU as its emulator's (where the emulator is
    /// pinned there) or an idle sibling.
    pub fn add_vm(&mut self, vm: &str, cpus: &VmCpus) {
        let mut put = |pu: u32, what: HeldAs| self.on.entry(pu).or_default().push(Hold { vm: vm.to_string(), what });
        for &(v, pu) in &cpus.pinned {
            put(pu, HeldAs::Vcpu(v));
        }
        for &(v, pu) in &cpus.floating {
            put(pu, HeldAs::Floating(v));
        }
        for pu in cpus.kept.iter() {
            put(pu, if cpus.emulator.contains(pu) { HeldAs::Emulator } else { HeldAs::Idle });
        }
    }

    /// The VMs on a CPU (empty: none).
    pub fn on(&self, pu: u32) -> &[Hold] {
        self.on.get(&pu).map_or(&[], Vec::as_slice)
    }

    /// Every CPU with a VM on it, ascending, with its VMs.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[Hold])> {
        self.on.iter().map(|(pu, h)| (*pu, h.as_slice()))
    }

    /// The CPUs the host reserves for itself.
    pub fn host(&self) -> &CpuSet {
        &self.host
    }

    /// The CPUs VMs hold (pinned vCPUs, emulators' own CPUs, idle
    /// siblings), less those of `except`.
    pub fn held_except(&self, except: impl Fn(&str) -> bool) -> CpuSet {
        self.on.iter().filter(|(_, h)| h.iter().any(|h| h.what.holds() && !except(&h.vm))).map(|(pu, _)| *pu).collect()
    }

    /// The CPUs VMs hold ([`CpuMap::held_except`] with no exception).
    pub fn held(&self) -> CpuSet {
        self.held_except(|_| false)
    }

    /// The CPUs one VM holds.
    pub fn held_by(&self, vm: &str) -> CpuSet {
        self.held_except(|v| v != vm)
    }

    /// The VMs on any CPU, most CPUs first, then by name: each with the
    /// CPUs it holds, or, a VM that holds none (a shared VM), those its
    /// floating vCPUs are counted against.
    pub fn holders(&self) -> Vec<Holder> {
        let mut by_vm: BTreeMap<&str, (CpuSet, CpuSet)> = BTreeMap::new();
        for (pu, holds) in &self.on {
            for h in holds {
                let e = by_vm.entry(h.vm.as_str()).or_default();
                if h.what.holds() {
                    e.0.insert(*pu);
                } else {
                    e.1.insert(*pu);
                }
            }
        }
        let mut out: Vec<Holder> = by_vm
            .into_iter()
            .map(|(vm, (held, counted))| Holder {
                vm: vm.to_string(),
                cpus: if held.is_empty() { counted } else { held },
            })
            .collect();
        out.sort_by(|a, b| b.cpus.len().cmp(&a.cpus.len()).then_with(|| a.vm.cmp(&b.vm)));
        out
    }
}
