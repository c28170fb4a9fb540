//! The plan's text view: the choice, the alternatives, the notes, the
//! rejections, and the host map with every vCPU on its PU.

mod common;

use common::*;
use numaplace_emit::plan_text::{pin_runs, render};
use numaplace_plan::{Alternative, Decision, HostState, Note, Placement, RejectReason, Rejection};
use numaplace_topo::NodeId;

#[test]
fn batch_view_shows_choice_alternatives_rejections_and_map() {
    let host = host_2n4c2t_hugepages();
    let db = Decision {
        placement: wide_dedicated("db1").into(),
        alternatives: vec![
            Alternative { nodes: vec![NodeId(0)], verdict: "lost: 4 free cores for 8 vCPUs".into() },
            Alternative { nodes: vec![NodeId(0), NodeId(1)], verdict: "chosen".into() },
        ],
        notes: vec![Note::Spans { cells: vec![2, 2] }],
    };
    // hp takes node1's two cores that db1 leaves free.
    let mut hp = Decision { placement: pairs_hugepages("hp").into(), alternatives: Vec::new(), notes: Vec::new() };
    for (v, pu) in std::sync::Arc::make_mut(&mut hp.placement).vcpus.iter_mut().zip([6, 14, 7, 15]) {
        v.pu = pu;
    }
    std::sync::Arc::make_mut(&mut hp.placement).cpuset = "6-7,14-15".parse().expect("list");
    let mut db = db;
    shrink_to_two_cores_per_node(std::sync::Arc::make_mut(&mut db.placement));
    let rej = Rejection {
        vm: "big".into(),
        reason: RejectReason::MemoryShort {
            needed: 64 << 30,
            hugepage: None,
            max_nodes: 2,
            best_total: 12 << 30,
            overhead: numaplace_plan::vm_overhead_bytes(64 << 30),
        },
    };
    let state = state_with(&host, &[&db.placement, &hp.placement]);
    let text = render(&host, &[Ok(db), Err(rej), Ok(hp)], &state);

    assert!(text.starts_with("Plan for lab-2n4c2t: 2 of 3 VMs placed\n"), "{text}");
    assert!(text.contains("db1: 4 vCPUs, 8 GiB on node0,node1 (dedicated)"), "{text}");
    assert!(text.contains("vCPU->PU  v0-1 -> 0-1 (node0), v2-3 -> 4-5 (node1)"), "{text}");
    assert!(text.contains("memory    node0 4 GiB, node1 4 GiB (strict)"), "{text}");
    assert!(text.contains("guest     2 sockets x 2 cores x 1 thread, 2 cells"), "{text}");
    assert!(text.contains("cell1: vCPUs 2-3, 4 GiB, on host node1, distances [21 10]"), "{text}");
    assert!(text.contains("    node0        lost: 4 free cores for 8 vCPUs\n"), "{text}");
    assert!(text.contains("    node0,node1  chosen\n"), "{text}");
    assert!(text.contains("note: spans 2 host nodes: the guest sees 2 NUMA cells of 2 + 2 vCPUs"), "{text}");
    assert!(text.contains("big: REJECTED\n  reason: needs 64 GiB; the most any 2 nodes can offer is 12 GiB, keeping 576 MiB free for QEMU"), "{text}");
    assert!(text.contains("1 GiB huge pages"), "{text}");
    // The map: db1 has one thread of two cores per node; hp both
    // threads of node1's other two cores.
    assert!(
        text.contains("node0: 4 cores (2 free), 2 of 8 PUs used; memory 16 GiB, 7.9 GiB free; 1 GiB pages 4 of 4 free"),
        "{text}"
    );
    assert!(text.contains("c0: [0=db1:v0 | 8=-]"), "{text}");
    assert!(text.contains("c2: [2=- | 10=-]"), "{text}");
    // hp's 2 GiB come from the 1 GiB page pool (4 pages), not ordinary
    // memory, which the pool's 4 GiB are already set apart from.
    assert!(
        text.contains("node1: 4 cores (0 free), 6 of 8 PUs used; memory 16 GiB, 7.9 GiB free; 1 GiB pages 2 of 4 free"),
        "{text}"
    );
    assert!(text.contains("c1: [5=db1:v3 | 13=-]"), "{text}");
    assert!(text.contains("c2: [6=hp:v0 | 14=hp:v1]"), "{text}");
    // Rejections come in request order, between the placed VMs.
    assert!(text.find("db1:") < text.find("big: REJECTED"));
    assert!(text.find("big: REJECTED") < text.find("hp: 4 vCPUs"));
}

fn state_with(host: &numaplace_topo::Topology, placed: &[&Placement]) -> HostState {
    let mut state = HostState::new(host);
    for p in placed {
        state.place(p).unwrap_or_else(|e| panic!("{}: {e}", p.vm));
    }
    state
}

/// db1 as 4 vCPUs: two per node, on the first thread of cores 0 and 1.
fn shrink_to_two_cores_per_node(p: &mut numaplace_plan::Placement) {
    p.vcpus = [(0, 0, 0), (1, 1, 0), (2, 4, 1), (3, 5, 1)]
        .into_iter()
        .map(|(vcpu, pu, node)| numaplace_plan::VcpuPin { vcpu, pu, node: NodeId(node) })
        .collect();
    p.cpuset = "0-1,4-5".parse().expect("list");
    p.guest.cores = 2;
    p.guest.cells[0].vcpus = "0-1".parse().expect("list");
    p.guest.cells[1].vcpus = "2-3".parse().expect("list");
}

#[test]
fn pins_compress_into_runs() {
    assert_eq!(pin_runs(&wide_dedicated("a")), "v0-3 -> 0-3 (node0), v4-7 -> 4-7 (node1)");
    assert_eq!(pin_runs(&pairs_hugepages("b")), "v0-1 -> 4,12 (node1), v2-3 -> 5,13 (node1)");
    let mut p = wide_dedicated("c");
    for (i, v) in p.vcpus.iter_mut().enumerate() {
        v.pu = 2 * i as u32;
    }
    assert!(pin_runs(&p).starts_with("v0-3 -> 0-6 step 2 (node0)"), "{}", pin_runs(&p));
}

#[test]
fn shared_vm_says_it_floats() {
    let host = host_2n4c2t();
    let d = Decision { placement: shared_small("web").into(), alternatives: Vec::new(), notes: Vec::new() };
    let state = state_with(&host, &[&d.placement]);
    let text = render(&host, &[Ok(d.clone())], &state);
    assert!(text.contains("vCPUs float over PUs 0-3,8-11"), "{text}");
    assert!(text.contains("768 MiB"), "{text}");
}

#[test]
fn isolated_siblings_show_as_taken() {
    let host = host_2n4c2t();
    let mut p = wide_dedicated("iso");
    // As `isolate` plans it: the vCPU's core sibling kept idle.
    p.cpuset = "0-7,8-15".parse().expect("list");
    let d = Decision { placement: p.into(), alternatives: Vec::new(), notes: Vec::new() };
    let state = state_with(&host, &[&d.placement]);
    let text = render(&host, &[Ok(d)], &state);
    assert!(text.contains("c0: [0=iso:v0 | 8=iso:idle]"), "{text}");
}

#[test]
fn memory_only_cell_says_it_has_no_vcpus() {
    let host = host_2n4c2t();
    let mut p = wide_dedicated("mem");
    // All 8 vCPUs in cell0; cell1 holds memory alone, 1.96 GiB of it,
    // which rounds to 2 GiB (not down to 1.9).
    p.guest.cells[0].vcpus = "0-7".parse().expect("list");
    p.guest.cells[1].vcpus = numaplace_topo::CpuSet::new();
    p.guest.cells[1].memory_bytes = (196 << 30) / 100;
    let d = Decision { placement: p.into(), alternatives: Vec::new(), notes: Vec::new() };
    let state = state_with(&host, &[&d.placement]);
    let text = render(&host, &[Ok(d)], &state);
    assert!(text.contains("cell0: vCPUs 0-7, 4 GiB, on host node0"), "{text}");
    assert!(text.contains("cell1: no vCPUs, 2 GiB, on host node1, distances [21 10]"), "{text}");
    assert!(!text.contains("vCPUs ,"), "{text}");
}

#[test]
fn a_one_vcpu_vm_is_counted_in_the_singular() {
    let host = host_2n4c2t();
    let mut state = HostState::new(&host);
    let results = numaplace_plan::plan_batch(&host, &mut state, &[numaplace_plan::Request::new("one", 1, 1 << 30)]);
    let text = render(&host, &results, &state);
    assert!(text.contains("one: 1 vCPU, 1 GiB on node0 (dedicated)"), "{text}");
}
