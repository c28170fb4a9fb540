//! The report's charts are well-formed SVG with one series per policy,
//! and the JSON document has the fields scripts rely on.

#![allow(clippy::unwrap_used)]

use numaplace_plan::Policy;
use numaplace_sim::trace::synthetic::{generate, Spec};
use numaplace_sim::{report, Config, HostMix, SimPolicy};
use numaplace_topo::{Core, CpuSet, Node, NodeId, Parts, Topology};

fn host() -> Topology {
    let mut parts = Parts::default();
    for n in 0..2u32 {
        let cpus: CpuSet = (n * 8..n * 8 + 8).collect();
        for c in 0..4 {
            let first = n * 8 + c * 2;
            parts.cores.push(Core {
                package: Some(n),
                die: None,
                core_id: Some(c),
                cpus: (first..first + 2).collect(),
            });
        }
        parts.nodes.push(Node {
            id: NodeId(n),
            cpus,
            memory_bytes: 32 << 30,
            free_bytes: None,
            hugepages: vec![],
            kind: None,
        });
    }
    Topology::from_parts(parts).unwrap()
}

fn simulate() -> numaplace_wire::sim::SimulationDoc {
    let fleet = HostMix::uniform("2 nodes x 4 cores x 2 threads", host(), 5, 1.0);
    let trace = generate(&Spec { vms: 400, mean_interarrival_s: 30.0, mean_lifetime_s: 3600.0, ..Spec::default() }, 3);
    let policies = [SimPolicy::Planner(Policy::Balanced), SimPolicy::Planner(Policy::Compact), SimPolicy::NoNuma];
    let cfg = Config { sample_every_s: 300, ..Config::default() };
    let results = numaplace_sim::run(&fleet, &trace, &policies, &cfg, 2, &mut |_| {});
    report::document(&trace, &fleet, 3, &cfg.model, &results)
}

#[test]
fn charts_have_a_series_per_policy() {
    let doc = simulate();
    let charts = report::charts(&doc);
    assert!(charts.len() >= 9);
    for (file, title, svg) in &charts {
        let xml = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{file}: {e}"));
        let series: Vec<&str> = xml
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .filter_map(|n| n.attribute("data-policy"))
            .collect();
        assert_eq!(series, vec!["balanced", "compact", "no-numa"], "{file}");
        assert!(xml.descendants().any(|n| n.text() == Some(title.as_str())), "{file} has its title");
        if file.starts_with("node-") {
            let bars = xml
                .descendants()
                .filter(|n| n.has_tag_name("rect") && n.parent().and_then(|p| p.attribute("data-policy")).is_some())
                .count();
            assert_eq!(bars, 30, "{file}: 10 buckets x 3 policies");
        } else {
            for line in xml.descendants().filter(|n| n.has_tag_name("polyline")) {
                let points = line.attribute("points").unwrap_or("").split_whitespace().count();
                // Each policy's line has a point per sample of its own run
                // (policies that reject more have fewer busy samples).
                let name = line.ancestors().find_map(|n| n.attribute("data-policy")).unwrap_or("");
                let run = doc.policies.iter().find(|p| p.policy == name).unwrap_or(&doc.policies[0]);
                let samples = &run.samples;
                let busy = samples.iter().filter(|s| s.running_vms > 0).count();
                let expected =
                    if file.starts_with("running") || file.starts_with("rejected") { samples.len() } else { busy };
                assert_eq!(points, expected, "{file}: a point per sample");
            }
        }
    }
    let html = report::index_html(&doc, &charts);
    assert!(charts.iter().all(|(file, _, _)| html.contains(&format!("src=\"{file}\""))));
}

#[test]
fn json_has_the_documented_fields() {
    let doc = simulate();
    let v = serde_json::to_value(&doc).unwrap();
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 3);
    for p in policies {
        for field in [
            "policy",
            "accepted",
            "rejected",
            "single_node_share",
            "memory_locality",
            "smt_shared_vcpu_share",
            "predicted_performance",
        ] {
            assert!(p.get(field).is_some(), "{field}");
        }
        assert_eq!(p["accepted"].as_u64().unwrap() + p["rejected"].as_u64().unwrap(), 400);
    }
    let back: numaplace_wire::sim::SimulationDoc = serde_json::from_value(v).unwrap();
    assert_eq!(back, doc);
    assert!(report::text(&doc).contains("no-numa"));
}
