//! The performance model separates policies for the reasons it should
//! (issue 19): node memory bandwidth, SLIT distance and what the guest is
//! shown, each on a literal 2-package, 8-node host (4 nodes of 8 cores per
//! package, SLIT 12 inside a package and 32 across, as an EPYC reports).

#![allow(clippy::unwrap_used)]

use numaplace_plan::Policy;
use numaplace_sim::trace::csv;
use numaplace_sim::{run_policy, Config, HostMix, Model, PolicyResult, SimPolicy};
use numaplace_topo::{Core, CpuSet, Node, NodeId, Parts, Topology};

/// 2 packages x 4 nodes x 8 cores, one thread each, 64 GiB per node.
fn epyc_like() -> Topology {
    let mut parts = Parts::default();
    for n in 0..8u32 {
        let cpus: CpuSet = (n * 8..n * 8 + 8).collect();
        for c in 0..8u32 {
            parts.cores.push(Core {
                package: Some(n / 4),
                die: None,
                core_id: Some(c),
                cpus: [n * 8 + c].into_iter().collect(),
            });
        }
        parts.nodes.push(Node {
            id: NodeId(n),
            cpus,
            memory_bytes: 64 << 30,
            free_bytes: None,
            hugepages: vec![],
            kind: None,
        });
    }
    let d = (0..8u32)
        .map(|a| {
            (0..8u32)
                .map(|b| {
                    if a == b {
                        10
                    } else if a / 4 == b / 4 {
                        12
                    } else {
                        32
                    }
                })
                .collect()
        })
        .collect();
    parts.distances = Some(d);
    Topology::from_parts(parts).unwrap()
}

fn replay(csv_text: &str, policy: SimPolicy, model: Model) -> PolicyResult {
    let fleet = HostMix::uniform("epyc-like", epyc_like(), 1, 1.0);
    let trace = csv::parse("t.csv", csv_text).unwrap();
    run_policy(&fleet, &trace, policy, &Config { model, ..Config::default() }, &mut |_| {})
}

/// Memory-bound work (w = 0.8), the field notes' upper end.
fn memory_bound() -> Model {
    Model { memory_bound_share: 0.8, ..Model::default() }
}

#[test]
fn memory_bound_vms_do_better_balanced_over_nodes_than_packed_on_one() {
    // Eight 4-vCPU, 8 GiB VMs arriving together, running a day: each fits
    // one node; two fit one node's 8 cores without sharing a core.
    let vms: String = (0..8).map(|i| format!("v{i},4,8,{i},86400\n")).collect();
    let balanced = replay(&vms, SimPolicy::Planner(Policy::Balanced), memory_bound());
    let packed = replay(&vms, SimPolicy::Planner(Policy::Pack), memory_bound());
    assert_eq!((balanced.accepted, packed.accepted), (8, 8));
    // Neither shares a core and every VM is on one node with its memory:
    // what separates them is the node's memory bandwidth alone.
    assert_eq!(balanced.smt_shared_vcpu_share(), Some(0.0));
    assert_eq!(packed.smt_shared_vcpu_share(), Some(0.0));
    assert_eq!(balanced.single_node_share(), Some(1.0));
    assert_eq!(packed.single_node_share(), Some(1.0));
    assert_eq!(balanced.congested_share(), Some(0.0));
    assert!(packed.congested_share().unwrap() > 0.9, "{:?}", packed.congested_share());
    let (b, p) = (balanced.predicted_performance().unwrap(), packed.predicted_performance().unwrap());
    assert!(b > p + 0.1, "balanced {b} against packed {p}");
    // Demand 8 x 0.8 x 0.5 = 3.2 streaming vCPUs on a budget of
    // 8 x 0.25 = 2: the bandwidth half of memory time stretches 1.6x.
    let m = memory_bound();
    let want = 1.0 / ((1.0 - 0.8) + 0.8 * (1.0 + 1.6) / 2.0);
    assert!((p - want).abs() < 0.02, "packed {p}, expected about {want}");
    // With CPU-bound work (w = 0.2) the same packing costs nothing.
    let light = Model { memory_bound_share: 0.2, ..m };
    let packed_light = replay(&vms, SimPolicy::Planner(Policy::Pack), light);
    assert_eq!(packed_light.congested_share(), Some(0.0));
    assert_eq!(packed_light.predicted_performance(), Some(1.0));
}

#[test]
fn a_guest_shown_one_node_loses_what_esxi_measured() {
    // 16 vCPUs: two nodes' worth. `no-vnuma` pins exactly as `balanced`
    // does but shows the guest one node.
    let vms = "wide,16,32,0,3600\n";
    let m = memory_bound();
    let mirrored = replay(vms, SimPolicy::Planner(Policy::Balanced), m);
    let hidden = replay(vms, SimPolicy::NoVnuma, m);
    assert_eq!(mirrored.single_node_share(), Some(0.0));
    let (a, b) = (mirrored.predicted_performance().unwrap(), hidden.predicted_performance().unwrap());
    // Memory time at least 1 / 0.54: 1 / (0.2 + 0.8 / 0.54) = 0.60.
    assert!((b - 1.0 / (0.2 + 0.8 / 0.54)).abs() < 0.01, "{b}");
    assert!(a > b + 0.2, "mirrored {a} against hidden {b}");
}

#[test]
fn sensitivity_follows_every_parameter_without_changing_the_placements() {
    let vms: String = (0..8).map(|i| format!("v{i},4,8,{i},86400\n")).collect();
    let fleet = HostMix::uniform("epyc-like", epyc_like(), 1, 1.0);
    let trace = csv::parse("t.csv", &vms).unwrap();
    let plain = Config { model: memory_bound(), ..Config::default() };
    let studied = Config { sensitivity: true, ..plain.clone() };
    let a = run_policy(&fleet, &trace, SimPolicy::Planner(Policy::Pack), &plain, &mut |_| {});
    let b = run_policy(&fleet, &trace, SimPolicy::Planner(Policy::Pack), &studied, &mut |_| {});
    assert_eq!(a.predicted_performance(), b.predicted_performance());
    assert!(a.performance_variants().is_empty());
    let v = b.performance_variants();
    assert_eq!(v.len(), 2 * numaplace_sim::RANGES.len());
    // More bandwidth per core (the high end, 1.0) lifts the congestion.
    let k = numaplace_sim::RANGES.iter().position(|r| r.name == "bandwidth_per_core").unwrap();
    assert!(v[2 * k] < v[2 * k + 1]);
    assert!((v[2 * k + 1] - 1.0).abs() < 1e-6, "{}", v[2 * k + 1]);
}
