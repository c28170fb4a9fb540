//! Memory kinds found from what the host says (issue 48 item 3): a real
//! Xeon Max 9462 in SNC4 flat mode, whose hwloc export names no kind
//! (ParaStation/psmgmt's dp-intelmax01), the same machine in cache mode,
//! hwloc's fake heterogeneous-memory capture (HMAT `access1` figures and
//! DAX devices), and small sysfs trees for `access0` figures, memory tiers
//! and CXL. Each kind found comes with a typed warning naming its evidence.

use numaplace_read::read_source;
use numaplace_read::sysfs::{read_tree, MemTree};
use numaplace_topo::{DaxBacking, Figure, FigureSource, KindEvidence, MemoryKind, NodeId, Topology, Warning};
use proptest::prelude::*;

fn fixture(rel: &str) -> String {
    format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// Each node found, with its kind and evidence, in node order.
fn found(topo: &Topology) -> Vec<(NodeId, MemoryKind, KindEvidence)> {
    topo.warnings()
        .iter()
        .filter_map(|w| match w {
            Warning::KindFound { node, kind, evidence } => Some((*node, *kind, evidence.clone())),
            _ => None,
        })
        .collect()
}

fn kind(topo: &Topology, node: u32) -> MemoryKind {
    topo.memory_kind(topo.node_index(NodeId(node)).expect("node"))
}

/// The acceptance line: the real export reads its eight 16 GiB CPU-less
/// nodes as HBM without editing, each beside its own SNC domain, with the
/// CPU model as the evidence (the export has no memory attributes).
#[test]
fn a_real_xeon_max_in_flat_mode_reads_its_hbm_as_hbm() {
    let topo = read_source(&fixture("psmgmt/topo.dp-intelmax01-flat.xml")).expect("reads");
    let hbm = found(&topo);
    assert_eq!(hbm.len(), 8, "{hbm:?}");
    for (i, (node, kind, evidence)) in hbm.iter().enumerate() {
        let i = u32::try_from(i).expect("small");
        assert_eq!((*node, *kind), (NodeId(8 + i), MemoryKind::Hbm));
        assert_eq!(
            evidence,
            &KindEvidence::CpuModel {
                model: "Intel(R) Xeon(R) CPU Max 9462".into(),
                domain: NodeId(i),
                nodes: 8,
                size_bytes: 16 << 30
            }
        );
    }
    for n in 0..8 {
        assert_eq!(kind(&topo, n), MemoryKind::Dram, "node{n}");
        assert_eq!(kind(&topo, n + 8), MemoryKind::Hbm, "node{}", n + 8);
    }
    let w = topo.warnings().iter().find(|w| w.code() == "hbm-found").expect("warned");
    assert!(w.to_string().contains("the CPU, Intel(R) Xeon(R) CPU Max 9462, carries HBM"), "{w}");
    // Cache mode, the same machine: HBM is a memory-side cache, no node
    // to find, and nothing is said.
    let cache = read_source(&fixture("psmgmt/topo.dp-intelmax01.xml")).expect("reads");
    assert!(found(&cache).is_empty());
    assert!((0..8).all(|n| kind(&cache, n) == MemoryKind::Dram));
}

/// hwloc's fake heterogeneous-memory host, read as hwloc reads it: node4
/// is HBM by its HMAT bandwidth (10000 against its CPUs' node's 1000, in
/// `access1`: the capture has no `access0`), nodes 6, 8 and 9 are NVM by
/// the NVDIMM regions behind their DAX devices.
#[test]
fn hmat_figures_and_dax_devices_of_a_sysfs_capture_name_the_kinds() {
    let topo = read_source(&fixture("hwloc/linux/fakeheteromemtiers.tar.bz2")).expect("reads");
    let kinds = found(&topo);
    let hbm = KindEvidence::Hmat {
        source: FigureSource::SysfsAccess1,
        figure: Figure::Bandwidth,
        value: 10_000,
        local: NodeId(1),
        local_value: 1_000,
    };
    let nvm = |device: &str| KindEvidence::Dax { device: device.into(), backing: DaxBacking::Nvdimm };
    assert_eq!(
        kinds,
        vec![
            (NodeId(4), MemoryKind::Hbm, hbm),
            (NodeId(6), MemoryKind::Nvm, nvm("dax5.0")),
            (NodeId(8), MemoryKind::Nvm, nvm("dax7.0")),
            (NodeId(9), MemoryKind::Nvm, nvm("dax8.0")),
        ]
    );
    // The initiators say which CPU node each is local to.
    assert_eq!(topo.local_cpu_nodes(topo.node_index(NodeId(9)).expect("node")).0, vec![2]);
}

/// CPUs 0-3 of one package, one thread per core.
fn four_cpus(t: &mut MemTree) {
    for cpu in 0..4u32 {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
        t.insert_file(&format!("{dir}/physical_package_id"), "0\n");
        t.insert_file(&format!("{dir}/core_id"), format!("{cpu}\n"));
        t.insert_file(&format!("{dir}/thread_siblings_list"), format!("{cpu}\n"));
        t.insert_file(&format!("{dir}/core_siblings_list"), "0-3\n");
    }
    t.insert_file("/sys/devices/system/cpu/online", "0-3\n");
}

/// Two CPU nodes and a CPU-less node2 beside node1 (by its `access0`
/// initiator).
fn with_memory_node() -> MemTree {
    let mut t = MemTree::new();
    four_cpus(&mut t);
    for (node, cpus, gib, row) in [(0, "0-1", 8, "10 12 14"), (1, "2-3", 8, "12 10 13"), (2, "", 4, "14 13 10")] {
        let dir = format!("/sys/devices/system/node/node{node}");
        t.insert_file(&format!("{dir}/cpulist"), format!("{cpus}\n"));
        t.insert_file(&format!("{dir}/meminfo"), format!("Node {node} MemTotal:  {} kB\n", gib << 20));
        t.insert_file(&format!("{dir}/distance"), format!("{row}\n"));
    }
    t.insert_file("/sys/devices/system/node/node2/access0/initiators/node1", "");
    t
}

fn figures(t: &mut MemTree, node: u32, bandwidth: u64, latency: u64) {
    let dir = format!("/sys/devices/system/node/node{node}/access0/initiators");
    t.insert_file(&format!("{dir}/read_bandwidth"), format!("{bandwidth}\n"));
    t.insert_file(&format!("{dir}/read_latency"), format!("{latency}\n"));
}

#[test]
fn access0_figures_say_hbm_or_slower_memory() {
    let mut t = with_memory_node();
    figures(&mut t, 1, 100_000, 110);
    figures(&mut t, 2, 400_000, 130);
    let topo = read_tree(&t).expect("reads");
    assert_eq!(kind(&topo, 2), MemoryKind::Hbm);
    let hmat = |value, local_value, figure| KindEvidence::Hmat {
        source: FigureSource::SysfsAccess0,
        figure,
        value,
        local: NodeId(1),
        local_value,
    };
    assert_eq!(found(&topo), vec![(NodeId(2), MemoryKind::Hbm, hmat(400_000, 100_000, Figure::Bandwidth))]);
    // A third of the bandwidth: slower memory, kept off like any kind.
    figures(&mut t, 2, 30_000, 300);
    let topo = read_tree(&t).expect("reads");
    assert_eq!(found(&topo), vec![(NodeId(2), MemoryKind::Other, hmat(30_000, 100_000, Figure::Bandwidth))]);
    assert_eq!(topo.nodes()[2].kind.as_deref(), Some("slower-memory"));
    // Bandwidths not given: latency twice the CPUs' node's says slower.
    t.insert_file("/sys/devices/system/node/node2/access0/initiators/read_bandwidth", "0\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(found(&topo), vec![(NodeId(2), MemoryKind::Other, hmat(300, 110, Figure::Latency))]);
    // Figures like DRAM's: DRAM, and nothing said.
    figures(&mut t, 2, 90_000, 120);
    let topo = read_tree(&t).expect("reads");
    assert!(found(&topo).is_empty());
    assert_eq!(kind(&topo, 2), MemoryKind::Dram);
}

#[test]
fn a_memory_tier_below_the_cpus_and_a_cxl_dax_device_say_what_they_say() {
    let mut t = with_memory_node();
    let tiers = "/sys/devices/virtual/memory_tiering";
    t.insert_file(&format!("{tiers}/memory_tier4/nodelist"), "0-1\n");
    t.insert_file(&format!("{tiers}/memory_tier22/nodelist"), "2\n");
    let topo = read_tree(&t).expect("reads");
    assert_eq!(found(&topo), vec![(NodeId(2), MemoryKind::Other, KindEvidence::Tier { tier: 22, cpu_tier: 4 })]);
    // A DAX device under a CXL region onlined as node2 names it CXL,
    // before the tier.
    let place = "/sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0";
    t.insert_file(&format!("{place}/target_node"), "2\n");
    t.insert_link(
        "/sys/bus/dax/devices/dax0.0",
        "../../../devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0",
    );
    let topo = read_tree(&t).expect("reads");
    let cxl = KindEvidence::Dax { device: "dax0.0".into(), backing: DaxBacking::Cxl };
    assert_eq!(found(&topo), vec![(NodeId(2), MemoryKind::Cxl, cxl)]);
    assert_eq!(topo.warnings().iter().find(|w| w.code() == "cxl-found").map(|w| w.to_string()).as_deref(),
        Some("node2 read as cxl memory although the source names no kind: DAX device dax0.0, onlined as this node, is backed by a CXL region"));
}

/// A soft-reserved (`hmem`) DAX device says only "specific purpose": on a
/// Xeon Max it is the HBM of its SNC domain by the CPU model; elsewhere
/// nothing is said.
#[test]
fn soft_reserved_memory_is_hbm_only_by_the_cpu_model() {
    let mut t = with_memory_node();
    t.insert_file("/sys/devices/platform/hmem.0/dax0.0/target_node", "2\n");
    t.insert_link("/sys/bus/dax/devices/dax0.0", "../../../devices/platform/hmem.0/dax0.0");
    let topo = read_tree(&t).expect("reads");
    assert!(found(&topo).is_empty());
    t.insert_file("/proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) CPU Max 9480\n");
    let topo = read_tree(&t).expect("reads");
    assert!(
        matches!(
            found(&topo).as_slice(),
            [(NodeId(2), MemoryKind::Hbm, KindEvidence::CpuModel { domain: NodeId(1), nodes: 1, .. })]
        ),
        "{:?}",
        found(&topo)
    );
    // Sapphire Rapids without HBM has the same model number: the name
    // decides; a Xeon Max name with another model number is not believed.
    t.insert_file("/proc/cpuinfo", "model\t\t: 106\nmodel name\t: Intel(R) Xeon(R) CPU Max 9480\n");
    assert!(found(&read_tree(&t).expect("reads")).is_empty());
}

/// A Xeon Max's sysfs without HMAT tables (no initiators, no figures):
/// each CPU-less node is paired with the SNC domain nearest it by
/// distance (13 against 14, as on the real dp-intelmax01) and read as HBM
/// by the CPU model; with two domains equally near, nothing is guessed.
#[test]
fn without_hmat_a_xeon_maxs_hbm_is_paired_by_distance() {
    let mut t = MemTree::new();
    four_cpus(&mut t);
    t.insert_file("/proc/cpuinfo", "model\t\t: 143\nmodel name\t: Intel(R) Xeon(R) CPU Max 9462\n");
    let rows = ["10 12 13 14", "12 10 14 13", "13 14 10 14", "14 13 14 10"];
    for (node, (cpus, gib)) in [("0-1", 126), ("2-3", 126), ("", 16), ("", 16)].into_iter().enumerate() {
        let dir = format!("/sys/devices/system/node/node{node}");
        t.insert_file(&format!("{dir}/cpulist"), format!("{cpus}\n"));
        t.insert_file(&format!("{dir}/meminfo"), format!("Node {node} MemTotal:  {} kB\n", gib << 20));
        t.insert_file(&format!("{dir}/distance"), format!("{}\n", rows[node]));
    }
    let topo = read_tree(&t).expect("reads");
    let domains: Vec<(NodeId, MemoryKind, Option<NodeId>)> = found(&topo)
        .into_iter()
        .map(|(n, k, e)| (n, k, if let KindEvidence::CpuModel { domain, .. } = e { Some(domain) } else { None }))
        .collect();
    assert_eq!(
        domains,
        vec![(NodeId(2), MemoryKind::Hbm, Some(NodeId(0))), (NodeId(3), MemoryKind::Hbm, Some(NodeId(1)))]
    );
    t.insert_file("/sys/devices/system/node/node3/distance", "14 14 14 10\n");
    t.insert_file("/sys/devices/system/node/node0/distance", "10 12 13 14\n");
    t.insert_file("/sys/devices/system/node/node1/distance", "12 10 14 14\n");
    let topo = read_tree(&t).expect("reads");
    assert!(found(&topo).iter().all(|f| f.0 != NodeId(3)), "{:?}", found(&topo));
}

proptest! {
    /// Whatever the HMAT figures, tiers and DAX files hold, the reader
    /// never panics, and a kind is only ever found for a node without CPUs.
    #[test]
    fn arbitrary_memory_evidence_never_panics(
        bw in proptest::collection::vec(any::<u64>(), 3),
        lat in proptest::collection::vec(any::<u64>(), 3),
        tier in "[0-9a-z ,-]{0,12}",
        target in "[0-9a-z-]{0,6}",
        link in "[./a-zA-Z0-9:]{0,40}",
    ) {
        let mut t = with_memory_node();
        for node in 0..3u32 {
            figures(&mut t, node, bw[node as usize], lat[node as usize]);
        }
        t.insert_file("/sys/devices/virtual/memory_tiering/memory_tier9/nodelist", tier);
        t.insert_file("/sys/devices/platform/hmem.0/dax0.0/target_node", target);
        t.insert_link("/sys/bus/dax/devices/dax0.0", &link);
        if let Ok(topo) = read_tree(&t) {
            for (node, _, _) in found(&topo) {
                prop_assert!(topo.nodes().iter().any(|n| n.id == node && n.cpus.is_empty()));
            }
        }
    }
}
