//! `Topology::from_parts` accepts the quirks real firmware has (with a
//! warning) and rejects contradictions (with the offending values).

use numaplace_topo::{Core, CpuSet, ModelError, Node, NodeId, Parts, Topology, Warning};
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
