//! numaplace's own libvirt output, planned on real hosts and linted
//! against the same host, has no finding about pinning or memory binding:
//! the planner, the emitter and the rules agree on what a well-placed VM
//! looks like. Shared VMs spanning nodes are the case that once disagreed
//! (each vCPU must float over its own cell's host node).

use numaplace_libvirt::domain::{domain_xml, LibvirtOptions};
use numaplace_lint::{lint, parse_file};
use numaplace_plan::{plan_batch, CpuMode, HostState, Request, SmtPolicy};
use numaplace_topo::Topology;

const GIB: u64 = 1 << 30;

fn host(rel: &str) -> Topology {
    let path = format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"));
    numaplace_read::read_source(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Requests sized to the host: the wide ones need two or more nodes.
fn requests(topo: &Topology) -> Vec<Request> {
    let node = topo.nodes().iter().map(|n| n.memory_bytes).max().unwrap_or(0) / GIB * GIB;
    let shared = |name: &str, vcpus, mem, ratio| {
        let mut r = Request::new(name, vcpus, mem);
        r.cpu_mode = CpuMode::Shared;
        r.overcommit = ratio;
        r
    };
    let mut pairs = Request::new("pairs", 8, 4 * GIB);
    pairs.smt = SmtPolicy::Pairs;
    vec![
        Request::new("small", 4, 2 * GIB),
        // More vCPUs than a node has cores.
        Request::new("wide", 12, node / 4),
        pairs,
        shared("shared-one-node", 4, 2 * GIB, 2.0),
        // More memory than one node has: spans nodes.
        shared("shared-wide", 8, node + node / 8, 2.0),
    ]
}

/// Rules a placement numaplace made must never trip (the others, such as
/// SMT contention of an overcommitted shared VM, describe a choice the
/// request made, not a fault of the output).
const PLACEMENT_RULES: &[&str] = &[
    "partial-pinning",
    "vcpu-spans-nodes",
    "memory-binding-remote",
    "guest-cells-per-node",
    "guest-cells-uneven",
    "socket-spans-cells",
    "hugepages-missing",
    "cpu-hotadd-wide",
    "pinning-overlap",
    "floating-on-dedicated",
];

#[test]
fn planned_domains_lint_clean_of_placement_faults() {
    for rel in ["mpibind/epyc-corona.xml", "hwloc/xml/32em64t-2n8c2t-pci-wholeio.xml"] {
        let topo = host(rel);
        let mut state = HostState::new(&topo);
        let opts = LibvirtOptions::default().for_host(&topo);
        let results = plan_batch(&topo, &mut state, &requests(&topo));
        let placed: Vec<&str> = results.iter().flatten().map(|d| d.placement.vm.as_str()).collect();
        assert!(placed.contains(&"shared-wide"), "{rel}: placed only {placed:?}");
        for result in &results {
            let Ok(decision) = result else { continue };
            let p = &decision.placement;
            let xml = domain_xml(p, &opts);
            let file = parse_file(&format!("{}.xml", p.vm), xml.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            let findings = lint(&[file], &topo);
            let faults: Vec<String> = findings
                .iter()
                .filter(|f| PLACEMENT_RULES.contains(&f.rule))
                .map(|f| format!("{}: {}", f.rule, f.message))
                .collect();
            assert!(
                faults.is_empty(),
                "{rel}: {} ({:?} on {:?}):\n{}\n{xml}",
                p.vm,
                p.cpu_mode,
                p.nodes,
                faults.join("\n")
            );
        }
    }
}

#[test]
fn without_the_host_map_a_wide_shared_vm_is_flagged() {
    // The same plan written without the host's CPUs per node: the vCPUs
    // float over every node, and lint says the guest's cells are not real.
    let topo = host("mpibind/epyc-corona.xml");
    let mut state = HostState::new(&topo);
    let reqs: Vec<Request> = requests(&topo).into_iter().filter(|r| r.name == "shared-wide").collect();
    let decision = plan_batch(&topo, &mut state, &reqs).remove(0).unwrap_or_else(|r| panic!("{r}"));
    assert!(decision.placement.nodes.len() > 1, "the VM spans nodes");
    let xml = domain_xml(&decision.placement, &LibvirtOptions::default());
    let file = parse_file("shared-wide.xml", xml.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let rules: Vec<&str> = lint(&[file], &topo).iter().map(|f| f.rule).collect();
    assert!(rules.contains(&"partial-pinning"), "{rules:?}");
}

/// The domain numaplace writes for a placement, and its findings above
/// info, each as `rule: message`.
fn loud_findings(p: &numaplace_plan::Placement, topo: &Topology, opts: &LibvirtOptions) -> (Vec<String>, String) {
    let xml = domain_xml(p, opts);
    let file = parse_file(&format!("{}.xml", p.vm), xml.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let loud = lint(&[file], topo)
        .iter()
        .filter(|f| f.severity != numaplace_lint::Severity::Info)
        .map(|f| format!("{}: {}", f.rule, f.message))
        .collect();
    (loud, xml)
}

/// Dedicated VMs numaplace plans lint with no warning or error at all: a
/// deliberate choice (sibling pairs the guest is told about) is an info.
#[test]
fn planned_dedicated_domains_have_no_warnings() {
    for rel in ["mpibind/epyc-corona.xml", "hwloc/xml/32em64t-2n8c2t-pci-wholeio.xml"] {
        let topo = host(rel);
        let mut state = HostState::new(&topo);
        let opts = LibvirtOptions::default().for_host(&topo);
        let reqs: Vec<Request> = requests(&topo).into_iter().filter(|r| r.cpu_mode == CpuMode::Dedicated).collect();
        let mut linted = 0;
        for result in plan_batch(&topo, &mut state, &reqs) {
            // The 16-core host has no whole core left for `pairs` after
            // `small` and `wide`.
            let Ok(decision) = result else { continue };
            let p = decision.placement;
            linted += 1;
            let (loud, xml) = loud_findings(&p, &topo, &opts);
            assert!(loud.is_empty(), "{rel}: {}:\n{}\n{xml}", p.vm, loud.join("\n"));
        }
        assert!(linted >= 2, "{rel}: {linted} placed");
    }
}

/// Mixed VMs (some vCPUs floating in the host's shared pool) lint with no
/// warning or error: each floating vCPU is pinned to its own cell's node's
/// share of the pool, so no rule sees a vCPU outside its cell.
#[test]
fn planned_mixed_domains_have_no_warnings() {
    let topo = host("mpibind/epyc-corona.xml");
    // One core (both threads) of every node forms the pool.
    let pool: numaplace_topo::CpuSet = (0..topo.nodes().len())
        .filter_map(|i| topo.cores_of_node(i).next())
        .flat_map(|c| topo.cores()[c].cpus.iter())
        .collect();
    let reservations = numaplace_plan::Reservations { shared_cpus: pool, ..Default::default() };
    let mut state = HostState::with_reservations(&topo, reservations).expect("pool");
    let opts = LibvirtOptions::default().for_host(&topo);
    let mixed = |name: &str, vcpus, floating: &str, cells: Option<u32>| {
        let mut r = Request::new(name, vcpus, 4 * GIB);
        r.shared_vcpus = floating.parse().expect("set");
        r.guest_nodes = cells;
        r
    };
    let reqs = [mixed("nfv", 8, "0-1", None), mixed("wide", 12, "0", Some(2)), mixed("tail", 6, "4-5", None)];
    let results = plan_batch(&topo, &mut state, &reqs);
    for result in &results {
        let decision = result.as_ref().unwrap_or_else(|r| panic!("{r}"));
        let p = &decision.placement;
        assert!(p.is_mixed(), "{}", p.vm);
        let (loud, xml) = loud_findings(p, &topo, &opts);
        assert!(loud.is_empty(), "{}:\n{}\n{xml}", p.vm, loud.join("\n"));
    }
}

/// A device left away from the VM's vCPUs (its node's CPUs all kept for
/// the host) is a deliberate choice: the plan notes it, the domain marks
/// it, and lint reports it as info; the same domain without numaplace's
/// mark is a warning.
#[test]
fn a_device_planned_away_from_its_node_is_info_not_warning() {
    let topo = host("hwloc/history/28intel64-2p2g7c-CoDgroups.v1.xml");
    let reservations = numaplace_plan::Reservations { cpus: (0..7).collect(), ..Default::default() };
    let mut state = HostState::with_reservations(&topo, reservations).expect("reserve node0's CPUs");
    let opts = LibvirtOptions::default().for_host(&topo);
    let mut r = Request::new("a", 2, 2 * GIB);
    r.devices.push(numaplace_plan::DeviceWish { address: Some("0000:0c:00.0".into()), node: None, required: false });
    let d = plan_batch(&topo, &mut state, &[r]).remove(0).expect("placed on node1");
    assert!(d.notes.iter().any(|n| matches!(n, numaplace_plan::Note::DeviceOutside { node } if node.0 == 0)));
    let (loud, xml) = loud_findings(&d.placement, &topo, &opts);
    assert!(loud.is_empty(), "{}\n{xml}", loud.join("\n"));
    assert!(xml.contains("remote-devices='0000:0c:00.0'"), "{xml}");
    let unmarked = xml.replace(" remote-devices='0000:0c:00.0'", "");
    let file = numaplace_lint::parse_file("a.xml", unmarked.as_bytes()).expect("parses");
    let findings = numaplace_lint::lint(&[file], &topo);
    assert!(
        findings.iter().any(|f| f.rule == "device-remote" && f.severity == numaplace_lint::Severity::Warning),
        "{findings:?}"
    );
}

/// When a VM has fewer vCPUs than the nodes its memory needs, its vCPUs
/// go to its device's node rather than to a memory cell's.
#[test]
fn vcpus_go_to_the_device_node_when_memory_spans_more_nodes() {
    let topo = host("hwloc/history/28intel64-2p2g7c-CoDgroups.v1.xml");
    let mut state = HostState::new(&topo);
    // 1 vCPU and more memory than node0 has: two nodes, one of them
    // without vCPUs.
    let mut r = Request::new("a", 1, 16194 << 20);
    r.devices.push(numaplace_plan::DeviceWish { address: Some("0000:0c:00.0".into()), node: None, required: false });
    let d = plan_batch(&topo, &mut state, &[r]).remove(0).expect("placed");
    assert_eq!(d.placement.vcpus[0].node.0, 0, "{:?}", d.placement);
    assert!(!d.notes.iter().any(|n| matches!(n, numaplace_plan::Note::DeviceOutside { .. })), "{:?}", d.notes);
}

/// An odd `compact` VM pairs vCPUs on siblings the guest cannot be shown
/// as threads: the mark counts them and lint reports info; after a hand
/// edit that moves a pin the count no longer matches and it warns again.
#[test]
fn planned_sibling_pairs_are_info_until_the_pins_change() {
    // One node of 7 cores, 5 of them with two threads, CPU 0 kept for
    // the host.
    let topo = host("hwloc/linux/16em64t-4s2c2t-offlines-xml.xml");
    let reservations = numaplace_plan::Reservations { cpus: [0].into_iter().collect(), ..Default::default() };
    let mut state = HostState::with_reservations(&topo, reservations).expect("reserve CPU 0");
    let opts = LibvirtOptions::default().for_host(&topo);
    let mut r = Request::new("odd", 7, 2 * GIB);
    r.policy = numaplace_plan::Policy::Compact;
    let d = plan_batch(&topo, &mut state, &[r]).remove(0).expect("placed");
    let paired = numaplace_libvirt::domain::sibling_vcpus(&d.placement, &opts.siblings);
    assert_eq!(paired, 6, "{:?}", d.placement.vcpus);
    let (loud, xml) = loud_findings(&d.placement, &topo, &opts);
    assert!(loud.is_empty(), "{}\n{xml}", loud.join("\n"));
    assert!(xml.contains("sibling-vcpus='6'"), "{xml}");
    // Pin the lone vCPU onto a thread of a pair's core by hand.
    let lone = d.placement.vcpus[6].pu;
    let taken = d.placement.vcpus[0].pu;
    let edited =
        xml.replace(&format!("<vcpupin vcpu='6' cpuset='{lone}'/>"), &format!("<vcpupin vcpu='6' cpuset='{taken}'/>"));
    assert_ne!(edited, xml);
    let file = numaplace_lint::parse_file("odd.xml", edited.as_bytes()).expect("parses");
    let findings = numaplace_lint::lint(&[file], &topo);
    assert!(
        findings.iter().any(|f| f.rule == "smt-contention" && f.severity == numaplace_lint::Severity::Warning),
        "{findings:?}"
    );
}

/// On four threads per core (POWER9 lassen), a VM that holds two or four
/// threads of each core it uses is told so (`threads=2`, `threads=4`), and
/// lint takes that as deliberate; the packed one told pairs (what
/// numaplace once wrote: vCPUs 0-1 and 2-3 on one core) is a warning.
#[test]
fn guests_told_their_threads_on_four_thread_cores_are_deliberate() {
    let topo = host("mpibind/coral-lassen.xml");
    let mut state = HostState::new(&topo);
    let opts = LibvirtOptions::default().for_host(&topo);
    let mut wide = Request::new("wide", 24, 32 * GIB);
    wide.max_nodes = Some(1);
    let mut packed = Request::new("packed", 8, 8 * GIB);
    packed.smt = SmtPolicy::Any;
    let results = plan_batch(&topo, &mut state, &[wide, packed]);
    for (result, threads) in results.iter().zip([2, 4]) {
        let p = &result.as_ref().unwrap_or_else(|r| panic!("{r}")).placement;
        assert_eq!(p.guest.threads, threads, "{}: {:?}", p.vm, p.guest);
        let (loud, xml) = loud_findings(p, &topo, &opts);
        assert!(loud.is_empty(), "{}:\n{}\n{xml}", p.vm, loud.join("\n"));
        let xml = domain_xml(p, &opts);
        let file = parse_file("vm.xml", xml.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let smt = lint(&[file], &topo).into_iter().find(|f| f.rule == "smt-contention").expect("an smt finding");
        assert!(smt.message.contains("(deliberate)"), "{}", smt.message);
        // --fix leaves an info alone, and its fix says so.
        assert!(
            smt.fix.starts_with("none needed (lint --fix leaves an info alone); if it was not meant, "),
            "{}",
            smt.fix
        );
        if threads == 4 {
            assert!(smt.message.contains("in groups of 4 the guest sees as threads of one core"), "{}", smt.message);
            let told_pairs = xml.replace("threads='4'", "threads='2'").replace("cores='2'", "cores='4'");
            assert_ne!(told_pairs, xml, "the topology line was rewritten");
            let file = parse_file("vm.xml", told_pairs.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            let smt = lint(&[file], &topo).into_iter().find(|f| f.rule == "smt-contention").expect("an smt finding");
            assert_ne!(smt.severity, numaplace_lint::Severity::Info, "{}", smt.message);
        }
    }
}
