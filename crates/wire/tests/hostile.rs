//! Plan (`--state`) and request JSON holding numbers no real host has. A
//! CPU set is a bitmap up to its highest number, so one CPU numbered
//! 4000000000 would take 500 MB: every such number is refused with the
//! field that holds it, before anything is built from it, and arbitrary
//! integers in any numeric field never panic and never build a set past
//! the bounds.

use numaplace_plan::{CpuMode, GuestCell, GuestTopology, HostState, MemoryMode, Placement, Policy, Request, VcpuPin};
use numaplace_topo::{Core, CpuSet, HugePages, Node, NodeId, Package, Parts, Topology, MAX_CPU, MAX_NODE};
use numaplace_wire::plan::request::requests_from_json;
use numaplace_wire::plan::{PlacementDoc, PlanDoc, RequestDoc};
use proptest::prelude::*;
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// Two nodes of eight single-thread cores, 16 GiB and four 1 GiB pages
/// each: the host the state documents are recorded on.
fn host() -> Topology {
    let node = |id: u32, cpus: &str| Node {
        id: NodeId(id),
        cpus: cpus.parse().expect("list"),
        memory_bytes: 16 * GIB,
        free_bytes: None,
        hugepages: vec![HugePages { size_bytes: GIB, total: 4, free: Some(4) }],
        kind: None,
    };
    let parts = Parts {
        packages: vec![
            Package { id: 0, cpus: "0-7".parse().expect("list") },
            Package { id: 1, cpus: "8-15".parse().expect("list") },
        ],
        nodes: vec![node(0, "0-7"), node(1, "8-15")],
        cores: (0..16u32)
            .map(|c| Core { package: Some(c / 8), die: None, core_id: Some(c % 8), cpus: [c].into_iter().collect() })
            .collect(),
        distances: Some(vec![vec![10, 21], vec![21, 10]]),
        ..Parts::default()
    };
    Topology::from_parts(parts).expect("valid host")
}

/// A plan document with one dedicated VM over both nodes of [`host`], its
/// request recorded: every kind of numeric field the format has.
fn template() -> Value {
    let set = |s: &str| -> CpuSet { s.parse().expect("list") };
    let placement = Placement {
        vm: "db1".into(),
        nodes: vec![NodeId(0), NodeId(1)],
        cpu_mode: CpuMode::Dedicated,
        vcpus: (0..4).map(|v| VcpuPin { vcpu: v, pu: v * 4, node: NodeId(v / 2) }).collect(),
        cpuset: set("0,4,8,12"),
        emulator: set("0,8"),
        memory: vec![(NodeId(0), GIB), (NodeId(1), GIB)],
        memory_bytes: 2 * GIB,
        memory_mode: MemoryMode::Strict,
        hugepage_bytes: Some(GIB),
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 2,
            dies: 1,
            cores: 2,
            threads: 1,
            cells: (0..2)
                .map(|c| GuestCell {
                    id: c,
                    vcpus: CpuSet::range(c * 2, c * 2 + 1),
                    memory_bytes: GIB,
                    host_node: NodeId(c),
                    distances: if c == 0 { vec![10, 21] } else { vec![21, 10] },
                    memory_nodes: Vec::new(),
                })
                .collect(),
        },
    };
    let mut request = Request::new("db1", 4, 2 * GIB);
    request.hugepage_bytes = Some(GIB);
    request.max_nodes = Some(2);
    let mut doc = PlanDoc::new(Some("box".into()));
    doc.placements.push(PlacementDoc { request: Some(RequestDoc::from(&request)), ..PlacementDoc::from(&placement) });
    serde_json::to_value(&doc).expect("serialise")
}

/// Replaces the numeric leaves of `v`, numbered in document order, for
/// which `pick` gives a value; returns how many leaves there are.
fn replace_numbers(v: &mut Value, pick: &mut dyn FnMut(usize) -> Option<u64>, next: &mut usize) {
    match v {
        Value::Number(_) => {
            if let Some(n) = pick(*next) {
                *v = Value::from(n);
            }
            *next += 1;
        }
        Value::Array(items) => items.iter_mut().for_each(|i| replace_numbers(i, pick, next)),
        Value::Object(map) => map.values_mut().for_each(|i| replace_numbers(i, pick, next)),
        _ => {}
    }
}

fn with(edit: impl FnOnce(&mut Value)) -> String {
    let mut v = template();
    edit(&mut v);
    v.to_string()
}

fn state(text: &str) -> Result<Vec<Placement>, String> {
    PlanDoc::parse(text).and_then(|d| d.to_placements()).map_err(|e| e.to_string())
}

/// Every number of a placement that sizes something is within the bounds.
fn within_bounds(p: &Placement) -> bool {
    let cpus_ok = |s: &CpuSet| s.last().is_none_or(|c| c < MAX_CPU);
    let shape = [p.guest.sockets, p.guest.dies, p.guest.cores, p.guest.threads]
        .iter()
        .fold(1u64, |a, &n| a.saturating_mul(u64::from(n.max(1))));
    cpus_ok(&p.cpuset)
        && cpus_ok(&p.emulator)
        && p.nodes.iter().all(|n| n.0 < MAX_NODE)
        && p.vcpus.iter().all(|v| v.vcpu < MAX_CPU && v.pu < MAX_CPU && v.node.0 < MAX_NODE)
        && p.guest.cells.iter().all(|c| cpus_ok(&c.vcpus) && c.host_node.0 < MAX_NODE && c.id < MAX_NODE)
        && shape <= u64::from(MAX_CPU)
}

#[test]
fn the_template_is_a_valid_state() {
    let placements = state(&template().to_string()).expect("valid");
    let mut host_state = HostState::new(&host());
    host_state.place(&placements[0]).expect("fits the host");
}

#[test]
fn a_cpu_numbered_4000000000_is_refused_by_its_field() {
    let text = with(|v| v["placements"][0]["cpuset"] = serde_json::json!([0, 4000000000u64]));
    assert_eq!(
        state(&text).expect_err("refused"),
        "placements[0].cpuset: expected a number below 65536, found 4000000000"
    );
}

#[test]
fn every_bounded_field_names_itself() {
    let cases: [(&str, &str, Value, &str); 6] = [
        ("emulator", "", serde_json::json!([65536]), "placements[0].emulator: expected a number below 65536"),
        ("pins", "", serde_json::json!([0, 65536]), "placements[0].pins: expected a number below 65536"),
        ("nodes", "", serde_json::json!([0, 4096]), "placements[0].nodes[1]: expected a node number below 4096"),
        ("memory", "node", serde_json::json!(70000), "placements[0].memory[0].node: expected a node number"),
        (
            "guest",
            "cores",
            serde_json::json!(65536),
            "placements[0].guest: expected sockets x dies x cores x threads of",
        ),
        (
            "guest",
            "cells",
            serde_json::json!([{"id": 0, "vcpus": [0, 99999], "memory_bytes": 1, "host_node": 0,
            "distances": [10]}]),
            "placements[0].guest.cells[0].vcpus: expected a number below 65536",
        ),
    ];
    for (field, inner, value, want) in cases {
        let text = with(|v| {
            let slot = &mut v["placements"][0][field];
            match (inner, slot) {
                ("", slot) => *slot = value,
                (key, Value::Array(items)) => items[0][key] = value,
                (key, slot) => slot[key] = value,
            }
        });
        let err = state(&text).expect_err(want);
        assert!(err.starts_with(want), "{field}.{inner}: {err}");
    }
}

#[test]
fn version_1_pinning_is_bounded_too() {
    // Version 1 wrote an object per vCPU; `--state` still reads it.
    let v1 = |field: &str, value: Value| {
        with(|v| {
            v["version"] = Value::from(1);
            let p = &mut v["placements"][0];
            let pins: Vec<u64> = p["pins"].as_array().expect("pins").iter().filter_map(Value::as_u64).collect();
            let mut vcpus: Vec<Value> = pins
                .iter()
                .enumerate()
                .map(|(i, &pu)| serde_json::json!({"vcpu": i, "pu": pu, "node": i / 2}))
                .collect();
            vcpus[0][field] = value;
            p["vcpus"] = Value::Array(vcpus);
            p.as_object_mut().expect("object").remove("pins");
        })
    };
    assert!(state(&v1("pu", Value::from(0))).is_ok(), "a version 1 state reads");
    let cases = [
        ("pu", Value::from(65536), "placements[0].vcpus[0].pu: expected a number below 65536"),
        ("vcpu", Value::from(4294967295u32), "placements[0].vcpus[0].vcpu: expected a number"),
        ("node", Value::from(4096), "placements[0].vcpus[0].node: expected a node number below 4096"),
    ];
    for (field, value, want) in cases {
        let err = state(&v1(field, value)).expect_err(want);
        assert!(err.starts_with(want), "{field}: {err}");
    }
}

#[test]
fn a_guest_of_more_vcpus_than_cpu_numbers_is_refused() {
    // 65536 x 65536 x 65536 overflows a u32 product; the guest check would
    // then walk every vCPU of it.
    let text = with(|v| {
        v["placements"][0]["guest"]["sockets"] = Value::from(65536);
        v["placements"][0]["guest"]["cores"] = Value::from(65536);
        v["placements"][0]["guest"]["threads"] = Value::from(65536);
    });
    assert_eq!(
        state(&text).expect_err("refused"),
        "placements[0].guest: expected sockets x dies x cores x threads of at most 65536 vCPUs, found 65536 x 1 x 65536 x 65536"
    );
}

#[test]
fn a_guest_shape_past_u64_is_refused_not_overflowed() {
    // Four u32 factors of 2^32 - 1 multiply past u64 (found by the
    // proptest below in CI).
    let text = with(|v| {
        for key in ["sockets", "dies", "cores", "threads"] {
            v["placements"][0]["guest"][key] = Value::from(u32::MAX);
        }
    });
    assert!(state(&text).expect_err("refused").starts_with("placements[0].guest: expected sockets x dies"));
}

#[test]
fn requests_stop_at_65536_vcpus() {
    let one =
        |n: u64| requests_from_json(&format!(r#"[{{"name": "a", "vcpus": {n}, "memory": "1GiB"}}]"#), Policy::Balanced);
    assert_eq!(one(65536).expect("the largest guest")[0].vcpus, 65536);
    for n in [65537, 4294967295, 4294967296, u64::MAX] {
        let err = one(n).expect_err("refused").to_string();
        assert_eq!(err, format!("vms[0] \"a\": vcpus: expected a whole number from 1 to 65536, found {n}"));
    }
    // The same rule holds for a request recorded in a state document.
    let text = with(|v| v["placements"][0]["request"]["vcpus"] = Value::from(4000000000u64));
    assert!(state(&text).expect_err("refused").starts_with("placements[0].request \"db1\": vcpus: expected"));
}

#[test]
fn many_placements_stop_at_the_set_budget() {
    // Each placement names CPU 65535 three times: 24 KiB of bitmaps from
    // some 40 bytes of text. Six thousand of them pass 128 MiB and are
    // refused on the way, not built.
    let mut v = template();
    let mut p = v["placements"][0].clone();
    p["cpuset"] = serde_json::json!([65535]);
    p["emulator"] = serde_json::json!([65535]);
    p["guest"]["cells"][0]["vcpus"] = serde_json::json!([65535]);
    p["pins"] = serde_json::json!([]);
    p["request"] = Value::Null;
    v["placements"] = Value::Array(vec![p; 6000]);
    let err = state(&v.to_string()).expect_err("over budget");
    assert!(err.starts_with("placements: expected CPU lists that fit in 128 MiB"), "{err}");
}

/// Numbers a hostile or broken file holds: edges of every bound and of
/// every integer type, and anything at all.
fn hostile() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(10),
        Just(4095),
        Just(4096),
        Just(65535),
        Just(65536),
        Just(4_000_000_000),
        Just(u64::from(u32::MAX)),
        Just(1 << 32),
        Just(1 << 50),
        Just((1 << 50) + 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// One to three numeric fields of a valid state take hostile values:
    /// the document is refused, or reads as placements within the bounds
    /// that a host state then records or refuses, never panicking.
    #[test]
    fn hostile_numbers_in_a_few_fields(picks in proptest::collection::vec((any::<prop::sample::Index>(), hostile()), 1..4)) {
        let mut v = template();
        let mut count = 0;
        replace_numbers(&mut v, &mut |_| None, &mut count);
        let picks: Vec<(usize, u64)> = picks.iter().map(|(i, n)| (i.index(count), *n)).collect();
        replace_numbers(&mut v, &mut |at| picks.iter().find(|(i, _)| *i == at).map(|&(_, n)| n), &mut 0);
        if let Ok(placements) = state(&v.to_string()) {
            let mut host_state = HostState::new(&host());
            for p in &placements {
                prop_assert!(within_bounds(p), "{p:?}");
                let _ = host_state.place(p);
            }
        }
    }

    /// Every numeric field hostile at once.
    #[test]
    fn hostile_numbers_everywhere(values in proptest::collection::vec(hostile(), 64)) {
        let mut v = template();
        replace_numbers(&mut v, &mut |at| values.get(at).copied(), &mut 0);
        if let Ok(placements) = state(&v.to_string()) {
            prop_assert!(placements.iter().all(within_bounds));
        }
    }
}
