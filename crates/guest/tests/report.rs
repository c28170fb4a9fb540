//! Parsing a real guest's serial output (QEMU 7.2 TCG, Debian 6.1 kernel:
//! 2 sockets x 2 cores x 2 threads, cells of 512/384/128 MiB, the last
//! memory-only, asymmetric distances) and comparing it with plans.

use numaplace_guest::check::compare;
use numaplace_guest::report::{parse, ReportError};
use numaplace_plan::{GuestCell, GuestTopology};
use numaplace_topo::{CpuSet, NodeId};

const SERIAL: &str = include_str!("data/three-cells-smt-memonly.serial");

fn planned() -> GuestTopology {
    let cell = |id: u32, cpus: &str, mib: u64, distances: Vec<u32>| GuestCell {
        id,
        vcpus: cpus.parse::<CpuSet>().expect("list"),
        memory_bytes: mib << 20,
        host_node: NodeId(id),
        distances,
        memory_nodes: Vec::new(),
    };
    GuestTopology {
        sockets: 2,
        dies: 1,
        cores: 2,
        threads: 2,
        cells: vec![
            cell(0, "0-3", 512, vec![10, 21, 17]),
            cell(1, "4-7", 384, vec![31, 10, 28]),
            cell(2, "", 128, vec![17, 28, 10]),
        ],
    }
}

#[test]
fn a_real_report_parses() {
    let report = parse(SERIAL).expect("report");
    assert_eq!(report.block_size, 128 << 20);
    assert_eq!(report.nodes.len(), 3);
    assert_eq!(report.node_memory(1), Some(384 << 20));
    assert!(report.nodes[&2].cpus.is_empty(), "memory-only node");
    assert_eq!(report.nodes[&1].distances, vec![31, 10, 28]);
    assert_eq!(report.cpus[&5].siblings.to_string(), "4-5");
}

#[test]
fn the_matching_plan_passes() {
    let verdict = compare(&planned(), None, &parse(SERIAL).expect("report"));
    let bad: Vec<_> = verdict.mismatches().collect();
    assert!(verdict.passed(), "{bad:?}");
}

#[test]
fn a_wrong_plan_names_the_mismatch() {
    let mut plan = planned();
    plan.cells[1].memory_bytes = 512 << 20;
    plan.cells[0].distances = vec![10, 20, 17];
    let verdict = compare(&plan, None, &parse(SERIAL).expect("report"));
    let bad: Vec<String> =
        verdict.mismatches().map(|c| format!("{:?} {}: {} vs {}", c.cell, c.what, c.expected, c.found)).collect();
    assert_eq!(bad, vec!["Some(0) distances: 10 20 17 vs 10 21 17", "Some(1) memory: 512 MiB vs 384 MiB"]);
}

#[test]
fn threads_split_over_cells_are_caught() {
    // A plan claiming threads=2 where the guest saw one thread per core.
    let mut plan = planned();
    plan.threads = 1;
    plan.cores = 4;
    let verdict = compare(&plan, None, &parse(SERIAL).expect("report"));
    assert!(verdict.mismatches().any(|c| c.what == "thread siblings of cpu 0"));
}

#[test]
fn no_report_is_an_error_with_the_last_output() {
    let err = parse("SeaBIOS\nBooting from ROM..\nKernel panic - not syncing").expect_err("no report");
    assert!(matches!(err, ReportError::NoReport { ref tail } if tail.contains("Kernel panic")));
    assert_eq!(parse("x NUMAPLACE-BEGIN\nnode 0 cpus 0-1\n"), Err(ReportError::Truncated));
}
