//! apply's check against the live host, as a property: for random live
//! hosts and random plans (stale ones on CPUs others hold now, foreign
//! ones pinning CPUs this host lacks, as `--force-host` would carry them,
//! ones onto reserved CPUs), the check either refuses (apply writes
//! nothing) or its writes leave a host where no two dedicated vCPUs share
//! a CPU, no floating thread may run on a dedicated CPU, and no vCPU may
//! run on a reserved CPU or a CPU the host lacks.

use numaplace_libvirt::check::{decide, Assumed, DomainCpus, Holder, HostFacts, Refusal, Wanted, Write};
use numaplace_topo::CpuSet;
use proptest::prelude::*;

fn set_of(bits: u32, n: u32) -> CpuSet {
    (0..n).filter(|c| bits & (1 << c) != 0).collect()
}

/// Which CPUs a dedicated VM keeps beyond its pins (its emulator's own
/// CPU, or an idle sibling): none, mostly, else one.
fn kept_bits() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(0u32), 1 => (0u32..6).prop_map(|c| 1 << c)]
}

/// A dedicated VM pinned 1:1 to `pins`, keeping the CPUs of `kept` (of
/// `n`) beyond them, its emulator on the first of those.
fn dedicated_cpus(pins: &[u32], kept: u32, n: u32) -> DomainCpus {
    let pinned: CpuSet = pins.iter().copied().collect();
    let kept = set_of(kept, n).difference(&pinned);
    DomainCpus {
        vcpus: pins.iter().map(|&c| std::iter::once(c).collect()).collect(),
        pinned: true,
        emulator: kept.first().map(|c| std::iter::once(c).collect()),
        kept,
    }
}

/// A live domain: dedicated on distinct CPUs of the host (keeping some
/// beyond them, as an `isolate` VM keeps its idle siblings), or floating
/// over a set (with or without an emulator pin and I/O threads).
fn holder(n: u32, i: usize) -> impl Strategy<Value = Holder> {
    let pins = proptest::sample::subsequence((0..n).collect::<Vec<u32>>(), 1..=(n as usize).min(3));
    let dedicated = (pins, kept_bits()).prop_map(move |(cpus, kept)| Holder {
        vm: format!("live{i}"),
        running: true,
        cpus: dedicated_cpus(&cpus, kept, n),
        iothreads: Vec::new(),
        memory: vec![(0, 64 << 20)],
        devices: Vec::new(),
    });
    let floating = (1u32..(1 << n), 1usize..=3, proptest::option::of(1u32..(1 << n)), 0usize..=2, any::<bool>())
        .prop_map(move |(bits, vcpus, emulator, iothreads, pin_io)| Holder {
            vm: format!("live{i}"),
            running: true,
            cpus: DomainCpus {
                vcpus: vec![set_of(bits, n); vcpus],
                pinned: false,
                kept: CpuSet::new(),
                emulator: emulator.map(|e| set_of(e, n)),
            },
            iothreads: (1..=iothreads as u32).map(|id| (id, pin_io.then(|| set_of(bits, n)))).collect(),
            memory: vec![(0, 64 << 20)],
            devices: Vec::new(),
        });
    prop_oneof![dedicated, floating]
}

/// A VM of the plan: dedicated pins (up to two CPUs beyond the host: a
/// foreign plan), or shared over a set.
fn wanted(n: u32, i: usize) -> impl Strategy<Value = Wanted> {
    let pins = proptest::sample::subsequence((0..n + 2).collect::<Vec<u32>>(), 1..=3);
    let dedicated = (pins, kept_bits()).prop_map(move |(cpus, kept)| Wanted {
        vm: format!("plan{i}"),
        cpus: dedicated_cpus(&cpus, kept, n),
        memory: vec![(0, 64 << 20)],
        devices: Vec::new(),
    });
    let shared = (1u32..(1 << n), 1usize..=2).prop_map(move |(bits, vcpus)| Wanted {
        vm: format!("plan{i}"),
        cpus: DomainCpus { vcpus: vec![set_of(bits, n); vcpus], pinned: false, ..DomainCpus::default() },
        memory: vec![(0, 64 << 20)],
        devices: Vec::new(),
    });
    prop_oneof![2 => dedicated, 1 => shared]
}

#[derive(Debug, Clone)]
struct Case {
    host: HostFacts,
    live: Vec<Holder>,
    plan: Vec<Wanted>,
    assumed: Option<Vec<Assumed>>,
}

fn case() -> impl Strategy<Value = Case> {
    (2u32..=6)
        .prop_flat_map(|n| {
            let live = (0usize..=4).prop_flat_map(move |k| (0..k).map(|i| holder(n, i)).collect::<Vec<_>>());
            let plan = (1usize..=3).prop_flat_map(move |k| (0..k).map(|i| wanted(n, i)).collect::<Vec<_>>());
            (Just(n), 0u32..(1 << n), live, plan, any::<bool>(), any::<u8>())
        })
        .prop_map(|(n, reserved, live, plan, record, stale)| {
            // Reserving every CPU leaves nothing to plan; keep one.
            let reserved = set_of(reserved, n).difference(&std::iter::once(n - 1).collect());
            // What the plan assumed: the live domains as they are, or (a
            // stale plan) one of them as it was on other CPUs.
            let assumed = record.then(|| {
                live.iter()
                    .enumerate()
                    .map(|(i, h)| {
                        let mut a = h.assumed();
                        if usize::from(stale) % (live.len() + 1) == i {
                            a.cpus = a.cpus.difference(&std::iter::once(0).collect());
                        }
                        a
                    })
                    .collect()
            });
            let host = HostFacts { cpus: (0..n).collect(), reserved, memory: vec![(0, 16 << 30)], devices: Vec::new() };
            Case { host, live, plan, assumed }
        })
}

/// The host after the writes: each narrowed domain as narrowed, each VM
/// of the plan as planned, the rest as they were. (name, its CPUs, the
/// other threads' CPUs of a floating domain.)
fn after(case: &Case, writes: &[Write]) -> Vec<(String, DomainCpus, Vec<CpuSet>)> {
    let ours = |vm: &str| case.plan.iter().any(|w| w.vm == vm);
    let mut out = Vec::new();
    for h in case.live.iter().filter(|h| !ours(&h.vm)) {
        let threads = |h: &Holder| -> Vec<CpuSet> {
            let floating = h.cpus.floating();
            let mut t = vec![h.cpus.emulator.clone().unwrap_or_else(|| floating.clone())];
            t.extend(h.iothreads.iter().map(|(_, p)| p.clone().unwrap_or_else(|| floating.clone())));
            t
        };
        match writes.iter().find(|w| w.vm() == h.vm) {
            Some(Write::Narrow { vcpus, emulator, iothreads, .. }) => {
                let mut t = vec![emulator.clone()];
                t.extend(iothreads.iter().map(|(_, c)| c.clone()));
                out.push((h.vm.clone(), DomainCpus { vcpus: vcpus.clone(), ..h.cpus.clone() }, t));
            }
            _ => {
                let threads = if h.cpus.pinned { Vec::new() } else { threads(h) };
                out.push((h.vm.clone(), h.cpus.clone(), threads))
            }
        }
    }
    for w in &case.plan {
        assert!(writes.contains(&Write::Place { vm: w.vm.clone() }), "{w:?} not written");
        out.push((w.vm.clone(), w.cpus.clone(), Vec::new()));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn apply_leaves_a_sound_host_or_writes_nothing(case in case()) {
        let got = decide(&case.live, &case.plan, case.assumed.as_deref(), &case.host);
        let writes = match got {
            Err(refusals) => {
                prop_assert!(!refusals.is_empty());
                return Ok(());
            }
            Ok(w) => w,
        };
        let host = after(&case, &writes);
        // A dedicated VM holds its pins and the CPUs it keeps (its
        // emulator's own CPU, its idle siblings): no two VMs hold one CPU,
        // no floating thread runs on a held one.
        let mut dedicated = CpuSet::new();
        for (vm, c, _) in &host {
            let held = c.vcpus.iter().filter(|s| c.pinned && s.len() == 1).chain(std::iter::once(&c.kept));
            for s in held {
                prop_assert!(dedicated.intersection(s).is_empty(), "{vm}: two dedicated VMs hold CPU {s}");
                dedicated = dedicated.union(s);
            }
        }
        for (vm, c, threads) in &host {
            for s in &c.vcpus {
                prop_assert!(!s.is_empty(), "{vm}: a vCPU left nowhere");
                prop_assert!(s.difference(&case.host.cpus).is_empty(), "{vm}: CPUs {s} the host lacks");
                prop_assert!(s.intersection(&case.host.reserved).is_empty(), "{vm}: on reserved CPUs {s}");
                if !c.pinned || s.len() > 1 {
                    prop_assert!(s.intersection(&dedicated).is_empty(), "{vm}: floats over dedicated CPUs of {s}");
                }
            }
            for t in threads {
                prop_assert!(t.intersection(&dedicated).is_empty(), "{vm}: a thread floats over dedicated {t}");
            }
        }
    }

    #[test]
    fn a_foreign_pin_is_refused_whatever_else(case in case()) {
        let mut plan = case.plan.clone();
        let beyond = case.host.cpus.last().unwrap_or(0) + 1;
        plan[0].cpus.vcpus[0] = std::iter::once(beyond).collect();
        plan[0].cpus.pinned = true;
        let got = decide(&case.live, &plan, case.assumed.as_deref(), &case.host);
        let refusals = got.expect_err("a foreign pin is refused");
        let named = refusals.iter().any(|r| matches!(r, Refusal::NotOnHost { vm, .. } if *vm == plan[0].vm));
        prop_assert!(named, "{refusals:?}");
    }
}

/// The property is not empty: plans are accepted (and narrow) as well as
/// refused over the same generator.
#[test]
fn the_generator_makes_both_accepted_and_refused_plans() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut narrowed, mut refused) = (0, 0, 0);
    for _ in 0..2000 {
        let c = case().new_tree(&mut runner).expect("case").current();
        match decide(&c.live, &c.plan, c.assumed.as_deref(), &c.host) {
            Ok(w) => {
                accepted += 1;
                narrowed += usize::from(w.iter().any(|w| matches!(w, Write::Narrow { .. })));
            }
            Err(_) => refused += 1,
        }
    }
    assert!(
        accepted > 50 && narrowed > 10 && refused > 50,
        "{accepted} accepted, {narrowed} narrowed, {refused} refused"
    );
}
