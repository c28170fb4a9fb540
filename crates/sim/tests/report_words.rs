//! What the results say when the figures have nothing behind them (no VM
//! placed) or describe a full fleet (most VMs refused), and that a replay
//! over a very long clock stays within its sample budget.

#![allow(clippy::unwrap_used)]

use numaplace_plan::Policy;
use numaplace_sim::engine::MAX_SAMPLES;
use numaplace_sim::trace::csv;
use numaplace_sim::{report, run_policy, Config, HostMix, SimPolicy, Trace};
use numaplace_topo::{Core, CpuSet, Node, NodeId, Parts, Topology};

/// One node of `threads` single-thread cores and `gib` GiB.
fn host(threads: u32, gib: u64) -> Topology {
    let cpus: CpuSet = (0..threads).collect();
    let cores =
        (0..threads).map(|c| Core { package: Some(0), die: None, core_id: Some(c), cpus: [c].into_iter().collect() });
    Topology::from_parts(Parts {
        nodes: vec![Node {
            id: NodeId(0),
            cpus,
            memory_bytes: gib << 30,
            free_bytes: None,
            hugepages: vec![],
            kind: None,
        }],
        cores: cores.collect(),
        ..Parts::default()
    })
    .unwrap()
}

const POLICIES: [SimPolicy; 2] = [SimPolicy::Planner(Policy::Balanced), SimPolicy::NoNuma];

fn simulate(fleet: &HostMix, trace: &Trace) -> numaplace_wire::sim::SimulationDoc {
    let cfg = Config::default();
    let results = numaplace_sim::run(fleet, trace, &POLICIES, &cfg, 1, &mut |_| {});
    report::document(trace, fleet, 0, &cfg.model, &results)
}

#[test]
fn nothing_placed_shows_no_figures() {
    // 8-vCPU VMs on 2-thread hosts: every one is refused.
    let fleet = HostMix::uniform("tiny", host(2, 4), 3, 1.0);
    let trace = csv::parse("t.csv", "a,8,1,0,100\nb,8,1,10,100\n").unwrap();
    let doc = simulate(&fleet, &trace);
    for p in &doc.policies {
        assert_eq!((p.accepted, p.rejected), (0, 2), "{}", p.policy);
        assert_eq!(p.single_node_share, None, "{}", p.policy);
        assert_eq!(p.memory_locality, None, "{}", p.policy);
        assert_eq!(p.smt_shared_vcpu_share, None, "{}", p.policy);
        assert_eq!(p.predicted_performance, None, "{}", p.policy);
    }
    let json: serde_json::Value = serde_json::to_value(&doc).unwrap();
    assert!(json["policies"][0]["memory_locality"].is_null());
    assert!(json["policies"][0]["predicted_performance"].is_null());
    // Everything else keeps its shape: numbers stay numbers.
    assert_eq!(json["policies"][0]["rejected"], 2);
    assert!(json["policies"][0]["stranded_cpu_share"].is_number());

    let text = report::text(&doc);
    let balanced = text.lines().find(|l| l.starts_with("balanced")).unwrap();
    assert!(!balanced.contains("1.000"), "{balanced}");
    assert_eq!(balanced.split_whitespace().filter(|c| *c == "-").count(), 5, "{balanced}");
    // No common size (8 vCPUs) fits any host: all free capacity is
    // stranded, and the table says so rather than showing it as free.
    assert!(balanced.ends_with("100.0%      100.0%"), "{balanced}");
    assert!(
        text.contains(
            "warning: no VM was placed by balanced, no-numa: 1-node, remote, smt-shared, congested and perf have \
             nothing"
        ),
        "{text}"
    );
    // More hosts of the same size would not help: no "bigger fleet" advice.
    assert_eq!(report::warnings(&doc).len(), 1, "{text}");
}

#[test]
fn a_saturated_fleet_is_called_so() {
    // One 4-thread host; ten 2-vCPU VMs at once: 2 fit, 8 (80%) refused.
    let fleet = HostMix::uniform("small", host(4, 64), 1, 1.0);
    let lines: String = (0..10).map(|i| format!("v{i},2,1,0,1000\n")).collect();
    let doc = simulate(&fleet, &csv::parse("t.csv", &lines).unwrap());
    assert_eq!(doc.policies[0].rejected, 8);
    let warnings = report::warnings(&doc);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("the fleet is saturated: refused VMs balanced 80.0%, no-numa 80.0% (warned above 10%)")
    );
    assert!(warnings[0].contains("try a bigger fleet"), "{}", warnings[0]);
    assert!(report::text(&doc).contains("\nwarning: the fleet is saturated"));

    // One VM in ten refused is not above the threshold: no warning.
    let fleet = HostMix::uniform("small", host(18, 64), 1, 1.0);
    let doc = simulate(&fleet, &csv::parse("t.csv", &lines).unwrap());
    assert_eq!(doc.policies[0].rejected, 1);
    assert_eq!(report::warnings(&doc), Vec::<String>::new());
    assert!(!report::text(&doc).contains("warning"));
}

#[test]
fn a_very_long_clock_keeps_to_the_sample_budget() {
    // A VM living 10^10 s sampled every 60 s would be 1.7 x 10^8 samples.
    let fleet = HostMix::uniform("small", host(4, 64), 1, 1.0);
    let trace = csv::parse("t.csv", "a,1,1,0,10000000000\n").unwrap();
    let cfg = Config { sample_every_s: 60, ..Config::default() };
    let r = run_policy(&fleet, &trace, SimPolicy::NoNuma, &cfg, &mut |_| {});
    assert!(r.samples.len() as u64 <= MAX_SAMPLES + 1, "{} samples", r.samples.len());
    assert!(r.samples.len() as u64 >= MAX_SAMPLES / 2, "{} samples", r.samples.len());
    assert_eq!(r.accepted, 1);
    // A short replay keeps the step it was asked for.
    assert_eq!(cfg.sample_step(86_400), 60);
}
