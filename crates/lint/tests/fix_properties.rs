//! Issue 38 item 6: `lint --fix` never leaves a set of VMs worse. Over
//! random sets of domains on real fixture hosts (dedicated, floating over
//! the host or a wide cpuset, several vCPUs sharing CPUs, some that only
//! a resize would fix: 1 GiB pages the host has none of), with and
//! without reserved CPUs, the joint fix:
//! - never increases the number of errors of the set, nor, with as many
//!   errors, its cost-weighted sum of warnings (issue 47);
//! - never pins a vCPU (nor narrows a floating one) onto a reserved CPU;
//! - never leaves a VM it rewrote dedicated on a CPU another dedicated VM
//!   holds (two dedicated VMs it did not touch may still share one, as
//!   they did: a fix that cannot be made leaves its file as it was).

use numaplace_lint::{fix_all_reserved, held, lint_reserved, parse_file, FixOptions, Severity, VmFile};
use numaplace_plan::Reservations;
use numaplace_topo::{CpuSet, Topology};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::sync::OnceLock;

/// The fixture hosts of up to 64 CPUs with CPUs on every node (read
/// once), so that a case runs in milliseconds in a debug build.
fn hosts() -> &'static [(String, Topology)] {
    static HOSTS: OnceLock<Vec<(String, Topology)>> = OnceLock::new();
    HOSTS.get_or_init(|| {
        let root = format!("{}/../../fixtures/topologies", env!("CARGO_MANIFEST_DIR"));
        let index = std::fs::read_to_string(format!("{root}/INDEX.csv")).expect("fixtures index");
        let mut out = Vec::new();
        for line in index.lines().skip(1) {
            let rel = line.split(',').next().unwrap_or("");
            let Ok(topo) = numaplace_read::read_source(&format!("{root}/{rel}")) else { continue };
            let cpus = topo.nodes().iter().map(|n| n.cpus.len()).sum::<usize>();
            if (4..=64).contains(&cpus) && topo.nodes().iter().all(|n| !n.cpus.is_empty()) {
                out.push((rel.to_string(), topo));
            }
        }
        assert!(out.len() >= 3, "too few fixture hosts: {}", out.len());
        out
    })
}

/// One domain's random choices, mapped onto the host's CPUs later.
#[derive(Clone, Debug)]
enum Kind {
    /// Every vCPU on a CPU of its own, from `start`.
    Dedicated { start: usize },
    /// No pins at all.
    Floating,
    /// `<vcpu cpuset>` over `len` CPUs from `start`.
    Wide { start: usize, len: usize },
    /// Every vCPU pinned to the same `len` CPUs from `start`.
    Shared { start: usize, len: usize },
}

#[derive(Clone, Debug)]
struct Vm {
    kind: Kind,
    vcpus: u32,
    memory_gib: u64,
    /// 1 GiB pages: only a resize fixes it where the host has none.
    huge: bool,
}

fn vm() -> impl Strategy<Value = Vm> {
    let kind = prop_oneof![
        (0usize..64).prop_map(|start| Kind::Dedicated { start }),
        Just(Kind::Floating),
        (0usize..64, 2usize..16).prop_map(|(start, len)| Kind::Wide { start, len }),
        (0usize..64, 2usize..8).prop_map(|(start, len)| Kind::Shared { start, len }),
    ];
    (kind, 1u32..6, 1u64..8, prop::bool::weighted(0.15)).prop_map(|(kind, vcpus, memory_gib, huge)| Vm {
        kind,
        vcpus,
        memory_gib,
        huge,
    })
}

/// The domain XML of a VM on a host whose CPUs are `cpus`.
fn domain(i: usize, vm: &Vm, cpus: &[u32]) -> String {
    let at = |k: usize| cpus[k % cpus.len()];
    let set = |start: usize, len: usize| (0..len).map(|k| at(start + k)).collect::<CpuSet>().to_list();
    let (vcpu, tune) = match vm.kind {
        Kind::Dedicated { start } => {
            let pins: String = (0..vm.vcpus as usize)
                .map(|v| format!("    <vcpupin vcpu='{v}' cpuset='{}'/>\n", at(start + v)))
                .collect();
            (String::new(), format!("  <cputune>\n{pins}  </cputune>\n"))
        }
        Kind::Floating => (String::new(), String::new()),
        Kind::Wide { start, len } => (format!(" cpuset='{}'", set(start, len)), String::new()),
        Kind::Shared { start, len } => {
            let pins: String =
                (0..vm.vcpus).map(|v| format!("    <vcpupin vcpu='{v}' cpuset='{}'/>\n", set(start, len))).collect();
            (String::new(), format!("  <cputune>\n{pins}  </cputune>\n"))
        }
    };
    let huge = if vm.huge {
        "  <memoryBacking>\n    <hugepages>\n      <page size='1048576' unit='KiB'/>\n    </hugepages>\n  </memoryBacking>\n"
    } else {
        ""
    };
    format!(
        "<domain type='kvm'>\n  <name>vm{i}</name>\n  <memory unit='GiB'>{}</memory>\n  <vcpu placement='static'{vcpu}>{}</vcpu>\n{tune}{huge}  <os>\n    <type arch='x86_64' machine='pc-q35-6.2'>hvm</type>\n  </os>\n</domain>\n",
        vm.memory_gib, vm.vcpus
    )
}

/// Errors, and the cost-weighted sum of warnings (issue 47: the set is
/// written when it is better as a whole).
fn loud(files: &[VmFile], host: &Topology, reserved: &Reservations) -> (usize, u64) {
    let found = lint_reserved(files, host, reserved);
    let errors = found.iter().filter(|f| f.severity == Severity::Error).count();
    let cost = found
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .map(|f| u64::from(numaplace_lint::rule_cost(f.rule)))
        .sum();
    (errors, cost)
}

/// The CPUs a text lets vCPUs run on: every `<vcpupin>` and `<vcpu>`
/// `cpuset` (emulator threads go on the reserved CPUs on purpose).
fn cpusets(text: &str) -> CpuSet {
    text.lines().filter(|l| l.contains("<vcpupin ") || l.contains("<vcpu ")).fold(CpuSet::new(), |all, line| {
        let Some(i) = line.find("cpuset='") else { return all };
        let rest = &line[i + 8..];
        let list = &rest[..rest.find('\'').unwrap_or(0)];
        all.union(&list.parse::<CpuSet>().unwrap_or_default())
    })
}

fn check(host: usize, vms: &[Vm], reserve: Option<(usize, usize)>) -> Result<(), TestCaseError> {
    let (name, topo) = &hosts()[host % hosts().len()];
    // Online CPUs only: a host profile naming an offline CPU is refused
    // before lint runs (and the fixer refuses to plan without it).
    let cpus: Vec<u32> = topo.online_cpus().iter().collect();
    let mut reserved = Reservations::default();
    if let Some((start, len)) = reserve {
        // Never the whole host: a host keeps CPUs for its VMs.
        let len = len.min(cpus.len() / 4).max(1);
        reserved.cpus = (0..len).map(|k| cpus[(start + k) % cpus.len()]).collect();
    }
    let mut files: Vec<VmFile> = vms
        .iter()
        .enumerate()
        .map(|(i, vm)| parse_file(&format!("vm{i}.xml"), domain(i, vm, &cpus).as_bytes()).expect("a domain"))
        .collect();
    let input = files.clone();
    let before = loud(&files, topo, &reserved);
    let report = fix_all_reserved(&mut files, topo, &reserved, FixOptions::default());
    let after = loud(&files, topo, &reserved);
    prop_assert!(
        after.0 < before.0 || (after.0 == before.0 && after.1 <= before.1),
        "{name}: (errors, weighted warnings) {before:?} before the fix, {after:?} after"
    );
    for (i, text) in &report.fixed {
        let on = cpusets(text).intersection(&reserved.cpus);
        prop_assert!(on.is_empty(), "{name}: {} uses reserved CPUs {on}:\n{text}", files[*i].name);
    }
    let touched = |i: usize| report.fixed.iter().any(|f| f.0 == i);
    let counted: Vec<_> = files.iter().map(|f| held(f, topo).expect("a domain").0.remove(0)).collect();
    for a in 0..files.len() {
        for b in a + 1..files.len() {
            let both = counted[a].dedicated_cpus().intersection(&counted[b].dedicated_cpus());
            prop_assert!(
                both.is_empty() || !(touched(a) || touched(b)),
                "{name}: {} and {} both dedicated on CPUs {both} after the fix",
                files[a].name,
                files[b].name
            );
        }
    }
    // Files left alone are as they were.
    for (i, (f, was)) in files.iter().zip(&input).enumerate() {
        prop_assert!(touched(i) || f.text == was.text, "{name}: {} changed without a fix", f.name);
    }
    Ok(())
}

#[test]
fn lint_fix_never_leaves_the_set_worse() {
    let mut runner = TestRunner::new(Config { cases: 48, failure_persistence: None, ..Config::default() });
    let strategy = (0usize..64, prop::collection::vec(vm(), 2..7), prop::option::of((0usize..64, 1usize..4)));
    runner.run(&strategy, |(host, vms, reserve)| check(host, &vms, reserve)).unwrap_or_else(|e| panic!("{e}"));
}
