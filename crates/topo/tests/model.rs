//! `Topology::from_parts` accepts the quirks real firmware has (with a
//! warning) and rejects contradictions (with the offending values).

use numaplace_topo::{Core, CpuSet, CpuSetError, HugePages, ModelError, Node, NodeId, Parts, Topology, Warning};
use proptest::prelude::*;

fn set(s: &str) -> CpuSet {
    s.parse().expect("valid list")
}

fn node(id: u32, cpus: &str, gib: u64) -> Node {
    Node { id: NodeId(id), cpus: set(cpus), memory_bytes: gib << 30, free_bytes: None, hugepages: vec![], kind: None }
}

fn core(cpus: &str) -> Core {
    Core { package: Some(0), die: None, core_id: None, cpus: set(cpus) }
}

/// Two nodes of two single-thread cores each.
fn parts() -> Parts {
    Parts {
        nodes: vec![node(0, "0-1", 8), node(1, "2-3", 8)],
        cores: vec![core("0"), core("1"), core("2"), core("3")],
        distances: Some(vec![vec![10, 20], vec![20, 10]]),
        ..Parts::default()
    }
}

#[test]
fn a_cpu_in_two_nodes_is_refused() {
    let mut p = parts();
    p.nodes[1].cpus = set("1-3");
    assert_eq!(Topology::from_parts(p), Err(ModelError::CpuInTwoNodes { cpu: 1, first: NodeId(0), second: NodeId(1) }));
}

#[test]
fn distance_rows_of_the_wrong_length_are_refused() {
    let mut p = parts();
    p.distances = Some(vec![vec![10, 20, 30], vec![20, 10]]);
    assert_eq!(Topology::from_parts(p), Err(ModelError::DistanceRowLength { node: NodeId(0), len: 3, expected: 2 }));
}

#[test]
fn self_distance_must_be_ten() {
    let mut p = parts();
    p.distances = Some(vec![vec![10, 20], vec![20, 11]]);
    assert_eq!(Topology::from_parts(p), Err(ModelError::SelfDistance { node: NodeId(1), value: 11 }));
}

#[test]
fn a_cpu_in_two_cores_is_refused() {
    let mut p = parts();
    p.cores[1] = core("0-1");
    assert!(matches!(Topology::from_parts(p), Err(ModelError::CpuInTwoCores { cpu: 0, .. })));
}

#[test]
fn quirks_are_read_with_warnings() {
    let mut p = parts();
    p.nodes[0].memory_bytes = 0;
    p.nodes.push(node(2, "", 16));
    p.offline = set("4-5");
    p.nodes[1].cpus = set("2-5");
    p.distances = None;
    let t = Topology::from_parts(p).expect("quirks are not errors");
    assert_eq!(
        t.warnings(),
        &[
            Warning::MemorylessNode(NodeId(0)),
            Warning::CpulessNode(NodeId(2)),
            Warning::OfflineCpus(set("4-5")),
            Warning::NoDistances,
        ]
    );
    assert_eq!(t.pu_count(), 4);
    assert_eq!(t.node_online_cpus(1), set("2-3"));
    assert_eq!(t.distance(0, 2), 20, "missing distances default to the kernel's 20");
}

#[test]
fn nodes_are_sorted_and_distances_follow_them() {
    let mut p = parts();
    p.nodes.swap(0, 1);
    // Rows given in the order node1, node0; node1 -> node0 is 21 and
    // node0 -> node1 is 31 (asymmetric on purpose).
    p.distances = Some(vec![vec![10, 21], vec![31, 10]]);
    let t = Topology::from_parts(p).expect("valid");
    assert_eq!(t.nodes()[0].id, NodeId(0));
    assert_eq!(t.distance_rows(), &[vec![10, 31], vec![21, 10]]);
    assert_eq!(Topology::from_parts(t.to_parts()).expect("round trip"), t);
}

// The model is the last line of defence: whatever a reader (or a library
// user) hands it, numbers that would size its indexes are refused before
// any is built. (CPU 65536 stands for CPU 4000000000 here: the set itself
// would take 500 MB before the model sees it.)

#[test]
fn cpu_numbers_stop_at_65535() {
    let mut p = parts();
    // Built by insertion: the list parser itself stops at 65535.
    p.nodes[1].cpus = [2, 3, 65536].into_iter().collect();
    let err = Topology::from_parts(p).expect_err("CPU 65536");
    assert_eq!(err, ModelError::CpuTooLarge { cpu: 65536, place: "node1".into() });
    assert_eq!(err.to_string(), "node1 lists CPU 65536, beyond the largest supported CPU number, 65535");
    let mut p = parts();
    p.offline = [70000].into_iter().collect();
    assert!(matches!(Topology::from_parts(p), Err(ModelError::CpuTooLarge { cpu: 70000, .. })));
    let mut p = parts();
    p.cores.push(core("65535"));
    p.nodes[1].cpus = set("2-3,65535");
    assert_eq!(Topology::from_parts(p).expect("the last CPU number").pu(65535).map(|pu| pu.node), Some(Some(1)));
}

#[test]
fn node_numbers_stop_at_4095_before_the_distance_matrix() {
    // 5000 nodes without distances would get a 5000 x 5000 default matrix.
    let mut p = parts();
    p.distances = None;
    p.nodes.extend((2..5000).map(|id| node(id, "", 0)));
    assert_eq!(Topology::from_parts(p), Err(ModelError::NodeIdTooLarge(NodeId(4096))));
}

#[test]
fn memory_stops_at_1_pib_per_node() {
    let mut p = parts();
    p.nodes[0].memory_bytes = u64::MAX;
    p.nodes[1].memory_bytes = u64::MAX;
    assert_eq!(
        Topology::from_parts(p),
        Err(ModelError::MemoryTooLarge { node: NodeId(0), what: "memory", bytes: u64::MAX })
    );
    let mut p = parts();
    p.nodes[1].free_bytes = Some((1 << 50) + 1);
    assert!(matches!(Topology::from_parts(p), Err(ModelError::MemoryTooLarge { what: "free memory", .. })));
}

#[test]
fn pools_larger_than_their_node_are_refused() {
    let pool = |size_bytes: u64, total: u64, free: Option<u64>| HugePages { size_bytes, total, free };
    // The case: 6144 x 1 GiB on a node of 1 GiB.
    let mut p = parts();
    p.nodes[0].memory_bytes = 1 << 30;
    p.nodes[0].hugepages = vec![pool(1 << 30, 6144, None)];
    let err = Topology::from_parts(p).expect_err("6 TiB on 1 GiB");
    assert_eq!(
        err,
        ModelError::HugePagesBeyondMemory {
            node: NodeId(0),
            size_bytes: 1 << 30,
            pages: 6144,
            memory_bytes: Some(1 << 30)
        }
    );
    assert_eq!(
        err.to_string(),
        "node0 has a pool of 6144 x 1 GiB huge pages (6 TiB), more than the node's 1 GiB of memory"
    );
    // pages x size beyond 2^64 is counted, not wrapped.
    let mut p = parts();
    p.nodes[1].hugepages = vec![pool(u64::MAX, u64::MAX, None)];
    let err = Topology::from_parts(p).expect_err("overflowing pool");
    assert!(err.to_string().starts_with("node1 has a pool of 18446744073709551615 x "), "{err}");
    // Exactly the node's memory is the most a pool can be.
    let mut p = parts();
    p.nodes[1].hugepages = vec![pool(2 << 20, 4096, Some(4096))];
    assert!(Topology::from_parts(p).is_ok());
    // More free pages than the pool holds.
    let mut p = parts();
    p.nodes[1].hugepages = vec![pool(2 << 20, 16, Some(17))];
    assert_eq!(
        Topology::from_parts(p),
        Err(ModelError::FreeHugePagesAboveTotal { node: NodeId(1), size_bytes: 2 << 20, free: 17, total: 16 })
    );
    // Without memory sizes, pools are held to 1 PiB only.
    let mut p = parts();
    p.warnings.push(Warning::NoMemoryInfo);
    p.nodes[0].memory_bytes = 0;
    p.nodes[0].hugepages = vec![pool(1 << 30, 6144, None)];
    assert!(Topology::from_parts(p.clone()).is_ok());
    p.nodes[0].hugepages = vec![pool(1 << 30, (1 << 20) + 1, None)];
    let err = Topology::from_parts(p).expect_err("beyond 1 PiB");
    assert!(err.to_string().ends_with("beyond the supported 1024 TiB per node"), "{err}");
}

#[test]
fn warnings_given_are_not_repeated() {
    // A reader's (or a JSON file's) warnings are kept once; the model does
    // not add one it already has, however many came with the parts.
    let mut p = parts();
    p.nodes.push(node(2, "", 16));
    p.distances = None;
    p.warnings = vec![Warning::NoDistances; 1000];
    p.warnings.push(Warning::CpulessNode(NodeId(2)));
    let t = Topology::from_parts(p).expect("valid");
    assert_eq!(t.warnings().len(), 1001);
    assert_eq!(t.warnings().iter().filter(|w| **w == Warning::CpulessNode(NodeId(2))).count(), 1);
}

#[test]
fn sets_from_untrusted_numbers_are_checked_first() {
    assert_eq!(CpuSet::try_from_cpus([0u32, 4_000_000_000]), Err(CpuSetError::TooLarge(4_000_000_000)));
    assert_eq!(CpuSet::try_from_cpus([3u32, 65535]).expect("in range").to_string(), "3,65535");
    assert_eq!(CpuSet::bytes_for(Some(65535)), 8192);
    assert_eq!(CpuSet::bytes_for(None), 0);
}

proptest! {
    #[test]
    fn cpu_lists_never_panic(s in "\\PC{0,40}") {
        let _ = CpuSet::parse_list(&s);
        let _ = CpuSet::parse_mask(&s);
    }

    #[test]
    fn cpu_lists_round_trip(cpus in proptest::collection::btree_set(0u32..2000, 0..200)) {
        let set: CpuSet = cpus.iter().copied().collect();
        let back: CpuSet = set.to_string().parse().expect("own output parses");
        prop_assert_eq!(&back, &set);
        prop_assert_eq!(back.iter().collect::<Vec<_>>(), cpus.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn set_algebra_agrees_with_btreeset(
        a in proptest::collection::btree_set(0u32..300, 0..60),
        b in proptest::collection::btree_set(0u32..300, 0..60),
    ) {
        let (sa, sb): (CpuSet, CpuSet) = (a.iter().copied().collect(), b.iter().copied().collect());
        prop_assert_eq!(sa.union(&sb).iter().collect::<Vec<_>>(), a.union(&b).copied().collect::<Vec<_>>());
        prop_assert_eq!(sa.intersection(&sb).iter().collect::<Vec<_>>(), a.intersection(&b).copied().collect::<Vec<_>>());
        prop_assert_eq!(sa.difference(&sb).iter().collect::<Vec<_>>(), a.difference(&b).copied().collect::<Vec<_>>());
        prop_assert_eq!(sa.is_subset(&sb), a.is_subset(&b));
        prop_assert_eq!(sa.len(), a.len());
    }
}
