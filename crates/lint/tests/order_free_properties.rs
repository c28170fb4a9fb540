//! Issue 47's acceptance property: over random sets of domains and .vmx files on real
//! fixture hosts (dedicated, floating, shared, some that cannot be fixed:
//! 1 GiB pages the host lacks, more memory than the whole host), with and
//! without reserved CPUs and a shared pool, `lint --fix`
//! - gives byte-identical outputs (each file's text, notes and reason
//!   left, and the set's trade) in every order of the files;
//! - never adds an error (per file, VM and rule), and never leaves the
//!   set's cost-weighted findings above the input's: fewer errors, or as
//!   many and a cost-weighted sum of warnings no higher.

use numaplace_lint::{fix_all_reserved, lint_reserved, parse_file, rule_cost, Finding, FixOptions, Severity, VmFile};
use numaplace_plan::Reservations;
use numaplace_topo::{CpuSet, Topology};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Small fixture hosts (4 to 32 CPUs, CPUs on every node), read once.
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
            if (4..=32).contains(&cpus) && topo.nodes().iter().all(|n| !n.cpus.is_empty()) {
                out.push((rel.to_string(), topo));
            }
        }
        assert!(out.len() >= 3, "too few fixture hosts: {}", out.len());
        out
    })
}

#[derive(Clone, Debug)]
enum Kind {
    Dedicated { start: usize },
    Floating,
    Wide { start: usize, len: usize },
    Shared { start: usize, len: usize },
}

#[derive(Clone, Debug)]
struct Vm {
    kind: Kind,
    vcpus: u32,
    memory_gib: u64,
    /// 1 GiB pages (most fixture hosts reserve none).
    huge: bool,
    /// Memory far beyond any of the hosts: a VM that cannot exist there.
    giant: bool,
    /// An ESXi `.vmx` (with CPU hot-add on) instead of a domain: fixed in
    /// a host state of its own.
    vmx: bool,
}

fn vm() -> impl Strategy<Value = Vm> {
    let kind = prop_oneof![
        3 => (0usize..64).prop_map(|start| Kind::Dedicated { start }),
        1 => Just(Kind::Floating),
        1 => (0usize..64, 2usize..16).prop_map(|(start, len)| Kind::Wide { start, len }),
        1 => (0usize..64, 2usize..8).prop_map(|(start, len)| Kind::Shared { start, len }),
    ];
    (kind, 1u32..6, 1u64..8, prop::bool::weighted(0.15), prop::bool::weighted(0.1), prop::bool::weighted(0.2))
        .prop_map(|(kind, vcpus, memory_gib, huge, giant, vmx)| Vm { kind, vcpus, memory_gib, huge, giant, vmx })
}

fn domain(i: usize, vm: &Vm, cpus: &[u32]) -> String {
    if vm.vmx {
        let memory = if vm.giant { 4096 } else { vm.memory_gib } * 1024;
        let affinity = match vm.kind {
            Kind::Wide { start, len } | Kind::Shared { start, len } => format!(
                "sched.cpu.affinity = \"{}\"\n",
                (0..len).map(|k| cpus[(start + k) % cpus.len()]).collect::<CpuSet>().to_list()
            ),
            _ => String::new(),
        };
        return format!(
            "displayName = \"vm{i}\"\nnumvcpus = \"{}\"\nmemSize = \"{memory}\"\nvcpu.hotadd = \"TRUE\"\n{affinity}",
            vm.vcpus
        );
    }
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
    let memory = if vm.giant { 4096 } else { vm.memory_gib };
    format!(
        "<domain type='kvm'>\n  <name>vm{i}</name>\n  <memory unit='GiB'>{memory}</memory>\n  <vcpu placement='static'{vcpu}>{}</vcpu>\n{tune}{huge}  <os>\n    <type arch='x86_64' machine='pc-q35-6.2'>hvm</type>\n  </os>\n</domain>\n",
        vm.vcpus
    )
}

/// Errors, and the cost-weighted sum of warnings.
fn score(found: &[Finding]) -> (usize, u64) {
    let errors = found.iter().filter(|f| f.severity == Severity::Error).count();
    let cost = found.iter().filter(|f| f.severity == Severity::Warning).map(|f| u64::from(rule_cost(f.rule))).sum();
    (errors, cost)
}

fn errors_by_key(found: &[Finding]) -> BTreeMap<(String, String, &'static str), usize> {
    let mut out = BTreeMap::new();
    for f in found.iter().filter(|f| f.severity == Severity::Error) {
        *out.entry((f.file.clone(), f.vm.clone(), f.rule)).or_default() += 1;
    }
    out
}

/// Every order of `0..n` (Heap's algorithm).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn go(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut out = Vec::new();
    go(n, &mut (0..n).collect(), &mut out);
    out
}

type Outcome = (Vec<(String, String, Vec<String>, Option<String>)>, Option<String>);

fn check(host: usize, vms: &[Vm], reserve: Option<(usize, usize, bool)>) -> Result<(), TestCaseError> {
    let (name, topo) = &hosts()[host % hosts().len()];
    let cpus: Vec<u32> = topo.online_cpus().iter().collect();
    let mut reserved = Reservations::default();
    if let Some((start, len, pool)) = reserve {
        let len = len.min(cpus.len() / 4).max(1);
        reserved.cpus = (0..len).map(|k| cpus[(start + k) % cpus.len()]).collect();
        if pool {
            // A shared pool of a quarter of the host, beside the reserve.
            reserved.shared_cpus = (len..len + cpus.len() / 4)
                .map(|k| cpus[(start + k) % cpus.len()])
                .collect::<CpuSet>()
                .difference(&reserved.cpus);
        }
    }
    let input: Vec<VmFile> = vms
        .iter()
        .enumerate()
        .map(|(i, vm)| {
            let name = if vm.vmx { format!("vm{i}.vmx") } else { format!("vm{i}.xml") };
            parse_file(&name, domain(i, vm, &cpus).as_bytes()).expect("a VM file")
        })
        .collect();
    let before = lint_reserved(&input, topo, &reserved);
    let mut first: Option<Outcome> = None;
    for order in permutations(input.len()) {
        let mut files: Vec<VmFile> = order.iter().map(|&i| input[i].clone()).collect();
        let report = fix_all_reserved(&mut files, topo, &reserved, FixOptions::default());
        let mut per_file: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let notes = report.notes.iter().filter(|n| n.0 == i).map(|n| n.1.clone()).collect();
                let failed = report.failed.iter().find(|e| e.0 == i).map(|e| e.1.to_string());
                (f.name.clone(), f.text.clone(), notes, failed)
            })
            .collect();
        per_file.sort();
        let got: Outcome = (per_file, report.trade.as_ref().map(ToString::to_string));
        match &first {
            None => {
                // The set as written, against the input.
                let after = lint_reserved(&files, topo, &reserved);
                let (had, now) = (errors_by_key(&before), errors_by_key(&after));
                for (key, n) in &now {
                    prop_assert!(had.get(key).is_some_and(|m| m >= n), "{name}: a new error {key:?}");
                }
                let (b, a) = (score(&before), score(&after));
                prop_assert!(a.0 < b.0 || (a.0 == b.0 && a.1 <= b.1), "{name}: {b:?} before, {a:?} after");
                first = Some(got);
            }
            Some(want) => prop_assert_eq!(&got, want, "{}: order {:?} gives other outputs", name, order),
        }
    }
    Ok(())
}

#[test]
fn every_order_of_the_files_gives_the_same_fix_and_the_set_is_never_worse() {
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    let strategy =
        (0usize..64, prop::collection::vec(vm(), 2..5), prop::option::of((0usize..64, 1usize..3, prop::bool::ANY)));
    runner.run(&strategy, |(host, vms, reserve)| check(host, &vms, reserve)).unwrap_or_else(|e| panic!("{e}"));
}
