//! A fleet of real topologies (hwloc XML from the fixtures, read by
//! numaplace-read) replaying the start of the Azure V1 test split.

#![allow(clippy::unwrap_used)]

use numaplace_sim::load::{load_fleet, load_trace};
use numaplace_sim::{report, Config, SimPolicy};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/traces").join(rel)
}

#[test]
fn small_real_fleet_replays_azure() {
    let fleet = load_fleet(&fixture("fleet-small.json"), |s| numaplace_read::read_source(s).map_err(|e| e.to_string()))
        .unwrap();
    let summary = report::fleet_summary(&fleet);
    // 4 x EPYC 7401 (8 nodes, 96 threads) + 8 x E5-2650 (2 nodes, 32).
    assert_eq!((summary.hosts, summary.nodes, summary.pus), (12, 48, 640));
    let mut trace = load_trace(fixture("azure-v1/v1.test.txt").to_str().unwrap(), 0).unwrap();
    trace.truncate(1500);
    let policies = SimPolicy::ALL;
    let results = numaplace_sim::run(&fleet, &trace, &policies, &Config::default(), 2, &mut |_| {});
    assert_eq!(results.len(), 5);
    for r in &results {
        assert_eq!(r.accepted + r.rejected, 1500, "{}", r.policy);
        assert_eq!(r.planner_faults, 0, "{}", r.policy);
        assert!(r.accepted > 500, "{}: {}", r.policy, r.accepted);
        assert!((0.0..=1.0).contains(&r.predicted_performance().unwrap()));
    }
    let by = |name: &str| results.iter().find(|r| r.policy.name() == name).unwrap();
    // Pinned, NUMA-aware placement keeps memory beside the vCPUs; a VM
    // floating over 2 or 8 nodes cannot.
    assert!(by("balanced").memory_locality().unwrap() > 0.9);
    assert!(by("no-numa").memory_locality().unwrap() < 0.6);
    assert!(by("balanced").predicted_performance().unwrap() > by("no-numa").predicted_performance().unwrap());
    // Spread uses every node that has room left: a handful of VMs arrive
    // when all but one node of their host are full.
    assert!(by("spread").single_node_share().unwrap() < 0.01, "spread uses every node with room");
}
