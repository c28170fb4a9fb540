//! Issue 13's acceptance property: on every real host of the fixtures,
//! random streams of mixed requests (dedicated, shared, sibling pairs,
//! huge pages, devices, CPU hot-add) against random host reservations give
//! plans an expert would sign:
//! - `lint` of all the emitted domains together (so pins shared between
//!   VMs count) has no warning and no error, but for `device-remote` on
//!   VMs that asked for a device and `smt-contention` where the plan says
//!   no whole core was left (see `check_stream`);
//! - no vCPU sits on a reserved CPU, no node's memory drops below its
//!   reserve;
//! - no VM spans more nodes than it needs plus one, unless its explanation
//!   names what made it so (a cheaper cost, or the smaller sets too full).

use numaplace_libvirt::domain::{domain_xml, LibvirtOptions};
use numaplace_lint::{lint, parse_file, Severity};
use numaplace_plan::{
    plan_batch, vm_overhead_bytes, CpuMode, Decision, DeviceWish, HostState, Note, Policy, Request, Reservations,
    SmtPolicy,
};
use numaplace_topo::{CpuSet, Topology};
use numaplace_wire::plan::{PlacementView, PlanDoc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::sync::OnceLock;

const MIB: u64 = 1 << 20;

/// Every fixture host numaplace reads, with its path (read once).
fn hosts() -> &'static [(String, Topology)] {
    static HOSTS: OnceLock<Vec<(String, Topology)>> = OnceLock::new();
    HOSTS.get_or_init(|| {
        let root = format!("{}/../../fixtures/topologies", env!("CARGO_MANIFEST_DIR"));
        let index = std::fs::read_to_string(format!("{root}/INDEX.csv")).expect("fixtures index");
        let mut out = Vec::new();
        for line in index.lines().skip(1) {
            let rel = line.split(',').next().unwrap_or("");
            // Every host is read: one that no longer reads is a bug the
            // reader tests report; here it would only shrink the sample.
            let Ok(topo) = numaplace_read::read_source(&format!("{root}/{rel}")) else { continue };
            if topo.nodes().iter().any(|n| !n.cpus.is_empty()) {
                out.push((rel.to_string(), topo));
            }
        }
        out
    })
}

/// The plan document written straight from the decisions (as `plan
/// --format json` writes it) is byte for byte the one built from owned
/// document entries, pretty and compact, whatever the VMs asked for.
fn same_document_both_ways(
    requests: &[Request],
    results: &[Result<Decision, numaplace_plan::Rejection>],
    state: &HostState,
) -> Result<(), TestCaseError> {
    let mut owned = PlanDoc::new(Some("host".into()));
    let mut views = Vec::new();
    for (r, d) in requests.iter().zip(results).filter_map(|(r, d)| d.as_ref().ok().map(|d| (r, d))) {
        let now = state.placement(&r.name).unwrap_or(&d.placement);
        let view = PlacementView::of_decision(d, Some(r)).with_cpus_of(now);
        owned.placements.push(view.to_doc());
        views.push(view);
    }
    for compact in [false, true] {
        let (mut direct, mut built) = (Vec::new(), Vec::new());
        PlanDoc::new(Some("host".into()))
            .write_json_with(views.iter().cloned(), &mut direct, compact)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        owned.write_json(&mut built, compact).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(String::from_utf8_lossy(&direct), String::from_utf8_lossy(&built));
    }
    Ok(())
}

/// One request's random choices, sized later to the host.
#[derive(Clone, Debug)]
struct Ask {
    vcpus: u32,
    memory_mib: u64,
    shared: Option<f64>,
    smt: SmtPolicy,
    policy: Policy,
    hugepages: bool,
    device: Option<(usize, bool)>,
    hot_add: Option<(u32, bool)>,
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        1u32..=16,
        256u64..=24 * 1024,
        prop_oneof![3 => Just(None), 1 => (1u32..=4).prop_map(|r| Some(f64::from(r)))],
        // Not `smt=any`: it asks for sibling contention, which lint
        // rightly reports.
        prop_oneof![Just(SmtPolicy::PreferCores), Just(SmtPolicy::Pairs), Just(SmtPolicy::Isolate)],
        prop_oneof![Just(Policy::Balanced), Just(Policy::Compact), Just(Policy::SmtAware)],
        prop::bool::weighted(0.2),
        prop::option::weighted(0.2, (0usize..64, any::<bool>())),
        prop::option::weighted(0.2, (1u32..=8, any::<bool>())),
    )
        .prop_map(|(vcpus, memory_mib, shared, smt, policy, hugepages, device, hot_add)| Ask {
            vcpus,
            memory_mib,
            shared,
            smt,
            policy,
            hugepages,
            device,
            hot_add,
        })
}

fn request(topo: &Topology, i: usize, a: &Ask) -> Request {
    let pus = topo.pus().count() as u32;
    let vcpus = a.vcpus.min((pus / 2).max(1));
    // At least 512 MiB per vCPU, as real VMs have: a VM of 7 vCPUs and
    // 256 MiB over four 2-core nodes has fewer 128 MiB memory blocks than
    // cells, and cells without memory are then remote by construction.
    let mut r = Request::new(format!("vm{i}"), vcpus, a.memory_mib.max(512 * u64::from(vcpus)) * MIB);
    r.policy = a.policy;
    r.smt = a.smt;
    if let Some(ratio) = a.shared {
        r.cpu_mode = CpuMode::Shared;
        r.overcommit = ratio;
    }
    if a.hugepages {
        // 2 MiB pages, the size hosts most often have pools of; the
        // memory is rounded to whole pages.
        r.hugepage_bytes = Some(2 * MIB);
        r.memory_bytes = r.memory_bytes.div_ceil(2 * MIB) * 2 * MIB;
    }
    let devices = topo.devices();
    if let Some((pick, required)) = a.device {
        if !devices.is_empty() {
            let d = &devices[pick % devices.len()];
            r.devices.push(DeviceWish { address: Some(d.address.clone()), node: d.node, required });
        }
    }
    if let Some((more, force)) = a.hot_add {
        r.max_vcpus = Some(vcpus + more);
        r.force = force;
    }
    r
}

/// The fewest nodes with CPUs that could hold the VM in the state as it
/// was when the VM was planned (free PUs and free memory per node).
fn needed_nodes(topo: &Topology, state: &HostState, r: &Request) -> usize {
    let cpu_nodes: Vec<_> = topo.nodes().iter().filter(|n| !n.cpus.is_empty()).collect();
    let mut pus: Vec<u64> = cpu_nodes.iter().map(|n| u64::from(state.free_pus(n.id).unwrap_or(0))).collect();
    pus.sort_unstable_by(|a, b| b.cmp(a));
    let mut mem: Vec<u64> = topo.nodes().iter().map(|n| state.free_memory_bytes(n.id).unwrap_or(0)).collect();
    mem.sort_unstable_by(|a, b| b.cmp(a));
    let fewest = |sizes: &[u64], want: u64| {
        let mut sum = 0u64;
        sizes.iter().position(|&s| {
            sum += s;
            sum >= want
        })
    };
    let want_pus = match r.cpu_mode {
        CpuMode::Shared => u64::from(r.planned_vcpus()).div_ceil(r.overcommit.max(1.0) as u64),
        CpuMode::Dedicated => u64::from(r.planned_vcpus()),
    };
    let k_cpu = fewest(&pus, want_pus).map_or(pus.len(), |i| i + 1);
    let k_mem = fewest(&mem, r.memory_bytes + vm_overhead_bytes(r.memory_bytes)).map_or(mem.len(), |i| i + 1);
    k_cpu.max(k_mem)
}

/// Whether the decision says why it took more nodes than needed: a node
/// set of fewer nodes lost on cost or on free capacity, or sibling threads
/// were weighed against more nodes.
fn explains_width(d: &Decision, cpu_nodes: usize) -> bool {
    d.notes.iter().any(|n| matches!(n, Note::SiblingsCheaper { .. }))
        || d.alternatives.iter().any(|a| {
            a.nodes.len() < cpu_nodes
                && matches!(
                    a.verdict.code(),
                    "costlier" | "too-few-slots" | "too-little-memory" | "fewer-slots" | "less-memory"
                    // Since issue 39: fewer nodes would have given uneven
                    // cells, and more nodes split the VM equally.
                    | "uneven"
                )
        })
}

fn check_stream(topo: &Topology, reserved_cpus: usize, reserved_mib: u64, asks: &[Ask]) -> Result<(), TestCaseError> {
    let cpus: CpuSet = topo.pus().map(|p| p.id).take(reserved_cpus).collect();
    let reservations =
        Reservations { cpus: cpus.clone(), memory_per_node: reserved_mib * MIB, ..Reservations::default() };
    let Ok(mut state) = HostState::with_reservations(topo, reservations) else { return Ok(()) };
    let requests: Vec<Request> = asks.iter().enumerate().map(|(i, a)| request(topo, i, a)).collect();
    // One at a time, to know how many nodes each VM needed when it came.
    let mut results = Vec::new();
    let mut needed = Vec::new();
    for r in &requests {
        needed.push(needed_nodes(topo, &state, r));
        results.extend(plan_batch(topo, &mut state, std::slice::from_ref(r)));
    }
    let opts = LibvirtOptions::default().for_host(topo);
    let mut files = Vec::new();
    for ((r, result), &needed) in requests.iter().zip(&results).zip(&needed) {
        let Ok(d) = result else { continue };
        // The state's copy: a shared VM's floating set may have shrunk.
        let p = state.placement(&r.name).unwrap_or(&d.placement);
        for v in &p.vcpus {
            prop_assert!(
                !cpus.contains(v.pu) || p.cpu_mode == CpuMode::Shared,
                "{}: vCPU {} on reserved CPU {}",
                p.vm,
                v.vcpu,
                v.pu
            );
        }
        prop_assert!(
            p.cpu_mode == CpuMode::Dedicated || p.cpuset.intersection(&cpus).is_empty(),
            "{}: floats over reserved CPUs",
            p.vm
        );
        let cpu_nodes = p.guest.cells.iter().filter(|c| !c.vcpus.is_empty()).count();
        prop_assert!(
            cpu_nodes <= needed + 1 || explains_width(d, cpu_nodes),
            "{}: {cpu_nodes} nodes where {needed} would do, unexplained: {:?} {:?}",
            p.vm,
            d.alternatives.iter().map(|a| (a.nodes.len(), a.verdict.code())).collect::<Vec<_>>(),
            d.notes
        );
        let xml = domain_xml(p, &opts);
        files.push(
            parse_file(&format!("{}.xml", p.vm), xml.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?,
        );
    }
    same_document_both_ways(&requests, &results, &state)?;
    for node in topo.nodes() {
        let ordinary: u64 = state
            .placements()
            .iter()
            .filter(|p| p.hugepage_bytes.is_none())
            .flat_map(|p| p.memory.iter())
            .filter(|m| m.0 == node.id)
            .map(|m| m.1)
            .sum();
        let pools: u64 = node.hugepages.iter().map(|h| h.size_bytes.saturating_mul(h.total)).sum();
        let usable = node.memory_bytes.saturating_sub(pools);
        prop_assert!(
            ordinary == 0 || ordinary + reserved_mib * MIB <= usable,
            "node {}: {ordinary} bytes placed + reserve {reserved_mib} MiB > {usable}",
            node.id.0
        );
    }
    // A device left away from the VM's vCPUs (its node could not hold
    // them) is marked so in the XML, where lint reports it as info; the
    // plan must say why.
    for d in results.iter().flatten() {
        let remote = numaplace_libvirt::domain::remote_devices(&d.placement, &opts.device_nodes);
        prop_assert!(
            remote.is_empty() || d.notes.iter().any(|n| matches!(n, Note::DeviceOutside { .. })),
            "{}: devices {remote:?} away from its vCPUs without a note: {:?}",
            d.placement.vm,
            d.notes
        );
    }
    // vCPUs paired on sibling threads (`compact`, or no whole core left)
    // are marked in the XML, where lint reports them as info; the plan
    // must say so, unless the request asked for pairs.
    for (r, d) in requests.iter().zip(&results).filter_map(|(r, d)| d.as_ref().ok().map(|d| (r, d))) {
        let paired = numaplace_libvirt::domain::sibling_vcpus(&d.placement, &opts.siblings);
        prop_assert!(
            paired == 0
                || r.smt == SmtPolicy::Pairs
                || d.notes.iter().any(|n| matches!(
                    n,
                    Note::SiblingThreads { .. }
                        | Note::SiblingsCheaper { .. }
                        | Note::SharedCores { .. }
                        | Note::OddPairs { .. }
                )),
            "{}: {paired} vCPUs on sibling threads without a note: {:?}",
            d.placement.vm,
            d.notes
        );
    }
    let loud: Vec<String> = lint(&files, topo)
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .map(|f| format!("{} {}: {}", f.rule, f.vm, f.message))
        .collect();
    prop_assert!(loud.is_empty(), "{}", loud.join("\n"));
    Ok(())
}

#[test]
fn plans_on_every_fixture_host_lint_clean_and_keep_reserves() {
    let hosts = hosts();
    assert!(hosts.len() >= 60, "only {} fixture hosts read", hosts.len());
    for (i, (rel, topo)) in hosts.iter().enumerate() {
        // A fixed seed per host: the same streams on every run.
        let mut config = Config::with_cases(6);
        config.failure_persistence = None;
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        let mut runner = TestRunner::new_with_rng(
            config,
            proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &seed),
        );
        let strategy = (0usize..=2, prop_oneof![Just(0u64), Just(512), Just(2048)], prop::collection::vec(ask(), 1..8));
        if let Err(e) = runner.run(&strategy, |(cpus, mib, asks)| check_stream(topo, cpus, mib, &asks)) {
            panic!("{rel}: {e}");
        }
    }
}
