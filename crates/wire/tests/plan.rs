//! The plan wire formats: requests as users write them (JSON list and
//! `--vm key=value`), and the plan JSON, which must read back as host
//! state exactly.

use numaplace_plan::{
    Alternative, CpuMode, Decision, DeviceWish, EmulatorPlacement, GuestCell, GuestTopology, MemoryMode, NodeFree,
    Note, Placement, Policy, RejectReason, Rejection, Request, Resource, SmtPolicy, VcpuPin,
};
use numaplace_topo::{CpuSet, NodeId};
use numaplace_wire::plan::request::{request_from_spec, requests_from_json};
use numaplace_wire::plan::{
    PlacementDoc, PlacementView, PlanDoc, PlanDocError, RejectionDoc, RequestDoc, RequestError,
};

const GIB: u64 = 1 << 30;

fn set(text: &str) -> CpuSet {
    text.parse().expect("literal list")
}

fn one(json: &str) -> Result<Request, RequestError> {
    requests_from_json(json, Policy::Balanced).map(|mut v| v.remove(0))
}

fn err(json: &str) -> String {
    requests_from_json(json, Policy::Balanced).expect_err("must be refused").to_string()
}

#[test]
fn minimal_request_takes_the_defaults() {
    let r = one(r#"[{"name": "db1", "vcpus": 32, "memory": "64GiB"}]"#).expect("valid");
    assert_eq!(r, Request::new("db1", 32, 64 * GIB));
    assert_eq!(r.cpu_mode, CpuMode::Dedicated);
    assert_eq!(r.smt, SmtPolicy::PreferCores);
    assert_eq!(r.policy, Policy::Balanced);
}

#[test]
fn every_field_is_read() {
    let r = one(r#"[{"name": "web", "vcpus": 8, "memory": 4294967296, "cpu": "shared", "smt": "pairs",
             "policy": "spread", "hugepages": "1GiB", "overcommit": 4, "max_nodes": 2,
             "devices": [{"address": "3B:00.0", "required": true}, {"node": 1}],
             "cpu_hotadd": true, "max_vcpus": 12, "force": true, "emulator": "0-1,4"}]"#)
    .expect("valid");
    assert_eq!(r.memory_bytes, 4 * GIB);
    assert_eq!(r.cpu_mode, CpuMode::Shared);
    assert_eq!(r.smt, SmtPolicy::Pairs);
    assert_eq!(r.policy, Policy::Spread);
    assert_eq!(r.hugepage_bytes, Some(GIB));
    assert_eq!(r.overcommit, 4.0);
    assert_eq!(r.max_nodes, Some(2));
    assert_eq!(
        r.devices,
        [
            DeviceWish { address: Some("0000:3b:00.0".into()), node: None, required: true },
            DeviceWish { address: None, node: Some(NodeId(1)), required: false },
        ]
    );
    assert!(r.cpu_hotadd() && r.force);
    assert_eq!(r.max_vcpus, Some(12));
    assert_eq!(r.emulator, EmulatorPlacement::Housekeeping(set("0-1,4")));
}

#[test]
fn hot_add_needs_a_maximum_above_the_boot_count() {
    let one = |extra: &str| {
        let text = format!(r#"[{{"name": "h", "vcpus": 4, "memory": "4GiB"{extra}}}]"#);
        requests_from_json(&text, Policy::Balanced).map(|mut v| v.remove(0))
    };
    let r = one(r#", "max_vcpus": 8"#).expect("max_vcpus alone implies hot-add");
    assert_eq!((r.cpu_hotadd(), r.planned_vcpus()), (true, 8));
    for (extra, field) in [
        (r#", "cpu_hotadd": true"#, "cpu_hotadd"),
        (r#", "cpu_hotadd": false, "max_vcpus": 8"#, "cpu_hotadd"),
        (r#", "max_vcpus": 4"#, "max_vcpus"),
        (r#", "max_vcpus": 99999999999"#, "max_vcpus"),
    ] {
        match one(extra) {
            Err(RequestError::BadValue { field: f, .. }) => assert_eq!(f, field, "{extra}"),
            other => panic!("{extra}: {other:?}"),
        }
    }
}

#[test]
fn default_policy_applies_only_where_none_is_given() {
    let list = requests_from_json(
        r#"[{"name": "a", "vcpus": 1, "memory": "1GiB"}, {"name": "b", "vcpus": 1, "memory": "1GiB", "policy": "compact"}]"#,
        Policy::Spread,
    )
    .expect("valid");
    assert_eq!(list[0].policy, Policy::Spread);
    assert_eq!(list[1].policy, Policy::Compact);
}

#[test]
fn bad_requests_name_the_vm_field_and_expectation() {
    assert_eq!(
        err(r#"[{"name": "db1", "vcpus": 4, "memory": "4GiB", "smt": "pair"}]"#),
        r#"vms[0] "db1": smt: expected prefer-cores, pairs, require, isolate or any, found "pair""#
    );
    assert_eq!(
        err(r#"[{"name": "ok", "vcpus": 1, "memory": "1G"}, {"name": "db2", "vcpus": 0, "memory": "4GiB"}]"#),
        r#"vms[1] "db2": vcpus: expected a whole number from 1 to 65536, found 0"#
    );
    assert_eq!(
        err(r#"[{"name": "db1", "vcpus": 4, "memory": "4 parsecs"}]"#),
        r#"vms[0] "db1": memory: expected a size such as 64GiB, 512MiB or bytes, found "4 parsecs""#
    );
    assert!(err(r#"[{"name": "db1", "vcpus": 4, "memory": "4GiB", "vcpu": 2}]"#)
        .starts_with(r#"vms[0] "db1": unknown field `vcpu` (known fields: name, vcpus, memory,"#));
    assert_eq!(err(r#"[{"name": "db1", "memory": "4GiB"}]"#), r#"vms[0] "db1": `vcpus` is required"#);
    assert_eq!(err(r#"[{"vcpus": 2, "memory": "4GiB"}]"#), "vms[0]: `name` is required");
    assert_eq!(
        err(r#"[{"name": "a/b", "vcpus": 2, "memory": "4GiB"}]"#),
        r#"vms[0]: name: expected a non-empty name without `/` or control characters, found "a/b""#
    );
    assert!(err(r#"[{"name": "h", "vcpus": 2, "memory": "4GiB", "hugepages": "3MiB"}]"#)
        .contains("hugepages: expected a page size"));
    assert!(err(r#"[{"name": "d", "vcpus": 2, "memory": "4GiB", "devices": [{"address": "nope"}]}]"#)
        .contains("devices: expected"));
    assert_eq!(err(r#"{"name": "db1"}"#), "expected a JSON list of VM requests, found an object");
    assert!(err("[{").starts_with("malformed JSON at line 1, column 2"));
}

#[test]
fn vm_spec_accepts_the_same_fields() {
    let r = request_from_spec(
        "name=db1,vcpus=32,memory=64GiB,smt=pairs,max-nodes=2,emulator=0-1,4,cpu_hotadd=yes,max-vcpus=48",
        Policy::Compact,
    )
    .expect("valid");
    let mut want = Request::new("db1", 32, 64 * GIB);
    want.smt = SmtPolicy::Pairs;
    want.policy = Policy::Compact;
    want.max_nodes = Some(2);
    want.emulator = EmulatorPlacement::Housekeeping(set("0-1,4"));
    want.max_vcpus = Some(48);
    assert_eq!(r, want);
    let d = request_from_spec("name=g,vcpus=2,memory=2GiB,device=0000:3b:00.0,required-device=node1", Policy::Balanced)
        .expect("valid");
    assert_eq!(
        d.devices,
        [
            DeviceWish { address: Some("0000:3b:00.0".into()), node: None, required: false },
            DeviceWish { address: None, node: Some(NodeId(1)), required: true },
        ]
    );
}

#[test]
fn vm_spec_errors() {
    let e = |s: &str| request_from_spec(s, Policy::Balanced).expect_err("refused").to_string();
    assert_eq!(e("name=db1,vcpus=4,memory=4GiB,vcpus=8"), r#"--vm "db1": `vcpus` is given twice"#);
    assert_eq!(e("db1,vcpus=4"), "--vm: `db1` is not key=value (e.g. name=db1,vcpus=8,memory=16GiB)");
    assert_eq!(
        e("name=db1,vcpus=four,memory=4GiB"),
        r#"--vm "db1": vcpus: expected a whole number from 1 to 65536, found `four`"#
    );
    assert_eq!(e("name=db1,vcpus=4"), r#"--vm "db1": `memory` is required"#);
    assert!(e("name=db1,vcpus=4,memory=1G,colour=red").contains("unknown field `colour`"));
    assert_eq!(
        e("name=m,vcpus=4,memory=4GiB,shared-vcpus=first"),
        r#"--vm "m": shared_vcpus: expected a list of vCPU numbers such as 0-1 (the vCPUs that float; the rest are pinned), found `first`"#
    );
}

/// A mixed VM's floating vCPUs, in both forms, and back from the plan.
#[test]
fn shared_vcpus_make_a_mixed_request() {
    let spec = request_from_spec("name=m,vcpus=8,memory=8GiB,shared-vcpus=0-1,4", Policy::Balanced).expect("valid");
    assert_eq!(spec.shared_vcpus, set("0-1,4"));
    let json = one(r#"[{"name": "m", "vcpus": 8, "memory": "8GiB", "shared_vcpus": "0-1,4"}]"#).expect("valid");
    assert_eq!(json, spec);
    let doc = RequestDoc::from(&spec);
    assert_eq!(doc.shared_vcpus.as_deref(), Some("0-1,4"));
    assert_eq!(doc.to_request("r").expect("valid"), spec);
    // The placement says `mixed` and lists what floats where.
    let mut p = wide();
    p.vcpus[0].pu = 1;
    p.floating = vec![numaplace_plan::Floating { node: NodeId(0), vcpus: set("0"), cpus: set("1,9") }];
    let entry = PlacementDoc::from(&p);
    assert_eq!(entry.cpu_mode, "mixed");
    let text = serde_json::to_string(&entry).expect("serialise");
    assert!(text.contains(r#""floating":[{"node":0,"vcpus":[0],"cpus":[1,9]}]"#), "{text}");
    let back: PlacementDoc = serde_json::from_str(&text).expect("parse");
    assert_eq!(back.to_placement("p").expect("valid"), p);
}

/// `memory_overcommit` is read in both forms, written back only when not
/// 1, and out-of-range ratios name the field.
#[test]
fn memory_overcommit_is_read_and_written_back() {
    let r = request_from_spec("name=s,vcpus=2,memory=6GiB,cpu=shared,memory-overcommit=1.5", Policy::Balanced)
        .expect("valid");
    assert_eq!(r.memory_overcommit, 1.5);
    let doc = RequestDoc::from(&r);
    assert_eq!(doc.memory_overcommit, Some(1.5));
    assert_eq!(doc.to_request("r").expect("valid"), r);
    assert_eq!(RequestDoc::from(&Request::new("p", 1, GIB)).memory_overcommit, None);
    assert_eq!(
        err(r#"[{"name": "s", "vcpus": 2, "memory": "6GiB", "memory_overcommit": 100}]"#),
        r#"vms[0] "s": memory_overcommit: expected a ratio from 1 to 16 such as 1.5 (shared VMs only), found 100"#
    );
    let mut p = wide();
    p.charged = vec![(NodeId(0), 2 * GIB), (NodeId(2), 2 * GIB)];
    let text = serde_json::to_string(&PlacementDoc::from(&p)).expect("serialise");
    let back: PlacementDoc = serde_json::from_str(&text).expect("parse");
    assert_eq!(back.to_placement("p").expect("valid"), p);
}

#[test]
fn requests_round_trip_through_their_doc() {
    let mut r = Request::new("db1", 6, 3 * GIB + 5);
    r.cpu_mode = CpuMode::Shared;
    r.overcommit = 1.5;
    r.hugepage_bytes = Some(2 << 20);
    r.policy = Policy::SmtAware;
    r.devices = vec![DeviceWish { address: Some("0000:af:00.1".into()), node: None, required: true }];
    r.emulator = EmulatorPlacement::Housekeeping(set("0,2"));
    for req in [r, Request::new("plain", 1, 1)] {
        let doc = RequestDoc::from(&req);
        let text = serde_json::to_string(&doc).expect("serialise");
        let back: RequestDoc = serde_json::from_str(&text).expect("parse");
        assert_eq!(back.to_request("r").expect("valid"), req);
    }
}

fn wide() -> Placement {
    Placement {
        vm: "db1".into(),
        nodes: vec![NodeId(0), NodeId(2)],
        cpu_mode: CpuMode::Dedicated,
        vcpus: (0..4).map(|v| VcpuPin { vcpu: v, pu: v * 8, node: NodeId(if v < 2 { 0 } else { 2 }) }).collect(),
        cpuset: set("0,8,16,24"),
        emulator: set("0,8,16,24"),
        memory: vec![(NodeId(0), 3 * GIB), (NodeId(2), 3 * GIB)],
        memory_bytes: 6 * GIB,
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
            cells: vec![
                GuestCell {
                    id: 0,
                    vcpus: set("0-1"),
                    memory_bytes: 3 * GIB,
                    host_node: NodeId(0),
                    distances: vec![10, 32],
                    memory_nodes: Vec::new(),
                },
                GuestCell {
                    id: 1,
                    vcpus: set("2-3"),
                    memory_bytes: 3 * GIB,
                    host_node: NodeId(2),
                    distances: vec![32, 10],
                    memory_nodes: Vec::new(),
                },
            ],
        },
    }
}

fn shared() -> Placement {
    Placement {
        vm: "web".into(),
        nodes: vec![NodeId(1)],
        cpu_mode: CpuMode::Shared,
        vcpus: (0..3).map(|v| VcpuPin { vcpu: v, pu: 4, node: NodeId(1) }).collect(),
        cpuset: set("4-7,12-15"),
        emulator: set("1"),
        memory: vec![(NodeId(1), 512 << 20)],
        memory_bytes: 512 << 20,
        memory_mode: MemoryMode::Interleave,
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
        guest: GuestTopology {
            sockets: 1,
            dies: 1,
            cores: 3,
            threads: 1,
            cells: vec![GuestCell {
                id: 0,
                vcpus: set("0-2"),
                memory_bytes: 512 << 20,
                host_node: NodeId(1),
                distances: vec![10],
                memory_nodes: Vec::new(),
            }],
        },
    }
}

#[test]
fn plan_json_reads_back_as_the_same_placements() {
    let decision = Decision {
        placement: wide().into(),
        alternatives: vec![
            Alternative { nodes: vec![NodeId(0)], verdict: "lost: 8 free cores for 16 vCPUs".into() },
            Alternative { nodes: vec![NodeId(0), NodeId(2)], verdict: "chosen".into() },
        ],
        notes: vec![Note::Spans { cells: vec![2, 2] }],
    };
    let request = Request::new("db1", 4, 6 * GIB);
    let mut doc = PlanDoc::new(Some("box".into()));
    doc.placements.push(PlacementDoc::from(&shared()));
    doc.placements.push(PlacementDoc::from_decision(&decision, Some(&request)));
    doc.rejected.push(RejectionDoc::new(
        &Rejection {
            vm: "big".into(),
            reason: RejectReason::CpuShort {
                resource: Resource::FreeCores,
                needed: 64,
                max_nodes: 2,
                best: vec![
                    NodeFree { node: NodeId(0), free: 12, memory: 0 },
                    NodeFree { node: NodeId(2), free: 8, memory: 0 },
                ],
                best_total: 20,
            },
        },
        None,
    ));
    let text = doc.to_json();
    let back = PlanDoc::parse(&text).expect("own output parses");
    assert_eq!(back, doc);
    assert_eq!(back.to_placements().expect("valid state"), [shared(), wide()]);
    let again = back.placements[1].to_decision("p").expect("valid");
    assert_eq!((&again.placement, &again.alternatives), (&decision.placement, &decision.alternatives));
    // Notes come back as their sentences.
    let words = |d: &Decision| d.notes.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(words(&again), words(&decision));
    assert_eq!(back.placements[1].request.as_ref().map(|r| r.to_request("r").expect("valid")), Some(request));
    // The documented field names are what scripts see.
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["format"], "numaplace-plan");
    assert_eq!(v["version"], 2);
    assert_eq!(v["placements"][1]["pins"][2], 16);
    assert_eq!(v["placements"][1]["vcpus"], serde_json::Value::Null, "version 2 writes pins only");
    assert_eq!(v["placements"][1]["memory"][1], serde_json::json!({"node": 2, "bytes": 3 * GIB}));
    assert_eq!(v["placements"][1]["guest"]["cells"][1]["host_node"], 2);
    assert_eq!(v["placements"][1]["new"], true);
    assert_eq!(v["placements"][0]["new"], false);
    assert_eq!(v["rejected"][0]["reason"], "needs 64 free cores on <= 2 nodes; node0 has 12, node2 has 8");
    // Programs read the code and the figures, not the sentence.
    assert_eq!(v["rejected"][0]["code"], "cpu-short");
    assert_eq!(v["rejected"][0]["resource"], "free-cores");
    assert_eq!(v["rejected"][0]["needed"], 64);
    assert_eq!(v["rejected"][0]["nodes"][1], serde_json::json!({"node": 2, "free": 8}));
    assert_eq!(v["placements"][1]["notes"][0]["code"], "spans-nodes");
    assert_eq!(
        v["placements"][1]["notes"][0]["text"],
        "spans 2 host nodes: the guest sees 2 NUMA cells of 2 + 2 vCPUs"
    );
}

/// One note of every kind, with figures of every type.
fn every_note() -> Vec<Note> {
    let cost = |siblings, remote| numaplace_plan::Cost { siblings, pairs: 0, remote, small_cells: 0, device: 0 };
    vec![
        Note::NoSmtForPairs,
        Note::SmtIgnoredForShared,
        Note::DeviceNodeUnknown { device: "0000:3b:00.0".into() },
        Note::DeviceMissing { device: "0000:3b:00.1".into() },
        Note::DeviceTaken { device: "0000:3b:00.0".into(), holder: "gpu\"1".into() },
        Note::SiblingThreads { vcpus: 4, max_nodes: 2 },
        Note::SiblingsCheaper { chosen: Box::new(cost(400, 0)), spread: Box::new(cost(0, 500)) },
        Note::OddPairs { vcpus: 3 },
        Note::SharedFloat { vcpus: 3, cpus: 8, overcommit: 2.5 },
        Note::ShrinksShared { vm: "web".into(), lost: Box::new(set("4-5")), now: Box::default() },
        Note::EmulatorOnVcpus,
        Note::EmulatorOnIdleSiblings,
        Note::EmulatorIsolated { cpu: 9, node: NodeId(1) },
        Note::Mixed { floating: Box::new(set("0-1")), cpus: Box::new(set("2-3")), pinned: 2 },
        Note::MemoryOvercommitted { charged: GIB, memory: 2 * GIB, ratio: 2.0 },
        Note::EmulatorInPool,
        Note::CellsShareNode { node: NodeId(3) },
        Note::Spans { cells: vec![16, 16] },
        Note::HotAddForced,
        Note::UnevenSplit,
        Note::Indivisible { vcpus: 5, cells: 2 },
        Note::MemoryOnlyCells,
        Note::MemorylessCells,
        Note::SiblingsOf { vms: vec!["a".into(), "b".into()], vcpus: 2 },
        Note::SiblingsTakenBy { vm: "vm64".into(), vcpus: 2 },
        Note::SharedCores { vcpus: 2 },
        Note::DeviceOutside { node: NodeId(0) },
    ]
}

#[test]
fn notes_carry_their_figures_as_members() {
    let decision = Decision { placement: wide().into(), alternatives: Vec::new(), notes: every_note() };
    let request = Request::new("db1", 4, 6 * GIB);
    // Written from the planner's values, and from the document entry they
    // make: the same bytes, pretty and compact.
    let mut doc = PlanDoc::new(None);
    doc.placements.push(PlacementDoc::from_decision(&decision, Some(&request)));
    for compact in [false, true] {
        let mut direct = Vec::new();
        PlanDoc::new(None)
            .write_json_with([PlacementView::of_decision(&decision, Some(&request))], &mut direct, compact)
            .expect("writes to memory");
        let mut via_doc = Vec::new();
        doc.write_json(&mut via_doc, compact).expect("writes to memory");
        assert_eq!(String::from_utf8_lossy(&direct), String::from_utf8_lossy(&via_doc));
    }
    // And they read back as written.
    let text = doc.to_json();
    assert_eq!(PlanDoc::parse(&text).expect("own output parses"), doc);
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let notes = v["placements"][0]["notes"].as_array().expect("notes").clone();
    let note = |code: &str| notes.iter().find(|n| n["code"] == code).cloned().unwrap_or_else(|| panic!("{code}"));
    assert_eq!(note("siblings-taken-by")["vm"], "vm64");
    assert_eq!(note("siblings-taken-by")["vcpus"], 2);
    assert_eq!(note("device-taken")["vm"], "gpu\"1");
    assert_eq!(note("siblings-of")["vms"], serde_json::json!(["a", "b"]));
    assert_eq!(note("spans-nodes")["cell_vcpus"], serde_json::json!([16, 16]));
    assert_eq!(note("shrinks-shared")["lost"], serde_json::json!([4, 5]));
    assert_eq!(note("shrinks-shared")["now"], serde_json::json!([]), "an empty set is still given");
    assert_eq!(note("shared-float")["overcommit"], 2.5);
    assert_eq!(note("emulator-isolated")["cpu"], 9);
    assert_eq!(note("emulator-isolated")["node"], 1);
    assert_eq!(
        note("siblings-cheaper")["spread_cost"],
        serde_json::json!({"total": 500, "siblings": 0, "remote": 500, "small_cells": 0})
    );
    assert_eq!(note("memory-overcommitted")["charged_bytes"], GIB);
    // A note without figures is its code and sentence.
    assert_eq!(note("emulator-on-vcpus").as_object().map(|o| o.len()), Some(2));
}

#[test]
fn bad_state_documents_are_refused_with_the_field() {
    let mut doc = PlanDoc::new(None);
    doc.placements.push(PlacementDoc::from(&wide()));
    let good = doc.to_json();
    let bad_mode = good.replace("\"cpu_mode\": \"dedicated\"", "\"cpu_mode\": \"pinned\"");
    let e = PlanDoc::parse(&bad_mode).expect("parses").to_placements().expect_err("refused");
    assert_eq!(e.to_string(), r#"placements[0].cpu_mode: expected dedicated, shared or mixed, found "pinned""#);
    let mixed = good.replace("\"cpu_mode\": \"dedicated\"", "\"cpu_mode\": \"mixed\"");
    let e = PlanDoc::parse(&mixed).expect("parses").to_placements().expect_err("refused");
    assert_eq!(e.to_string(), r#"placements[0].floating: expected the floating vCPUs of a mixed VM, found "none""#);
    let wrong = good.replace("numaplace-plan", "numaplace-topology");
    assert_eq!(PlanDoc::parse(&wrong), Err(PlanDocError::WrongFormat("numaplace-topology".into())));
    let extra = good.replacen("\"vm\": \"db1\",", "\"vm\": \"db1\", \"colour\": 1,", 1);
    assert!(PlanDoc::parse(&extra).expect_err("unknown field").to_string().contains("unknown field `colour`"));
}

/// `memory_kind` is read in both forms (one kind, a list, `any`), written
/// back as given, and a name that is not a kind names the field.
#[test]
fn memory_kind_is_read_and_written_back() {
    use numaplace_topo::MemoryKind;
    let r = request_from_spec("name=h,vcpus=4,memory=8GiB,memory_kind=hbm", Policy::Balanced).expect("valid");
    assert_eq!(r.memory_kinds, Some(vec![MemoryKind::Hbm]));
    let r = request_from_spec("name=h,vcpus=4,memory=8GiB,memory_kind=hbm,dram,policy=pack", Policy::Balanced)
        .expect("a list in --vm");
    assert_eq!(r.memory_kinds, Some(vec![MemoryKind::Dram, MemoryKind::Hbm]));
    assert_eq!(r.policy, Policy::Pack);
    let doc = RequestDoc::from(&r);
    assert_eq!(doc.memory_kind.as_deref(), Some("dram,hbm"));
    assert_eq!(doc.to_request("r").expect("valid"), r);
    let any = one(r#"[{"name": "a", "vcpus": 1, "memory": "1GiB", "memory_kind": "any"}]"#).expect("valid");
    assert_eq!(any.memory_kinds, Some(MemoryKind::ALL.to_vec()));
    assert_eq!(RequestDoc::from(&any).memory_kind.as_deref(), Some("any"));
    assert_eq!(RequestDoc::from(&Request::new("p", 1, GIB)).memory_kind, None);
    assert_eq!(
        err(r#"[{"name": "a", "vcpus": 1, "memory": "1GiB", "memory_kind": "fast"}]"#),
        r#"vms[0] "a": memory_kind: expected memory kinds from dram, hbm, cxl, gpu, nvm, other, or any (in --vm: memory_kind=hbm or dram,hbm), found "fast""#
    );
    assert!(err(r#"[{"name": "a", "vcpus": 1, "memory": "1GiB", "memory_kind": ["hbm"]}]"#).contains("memory_kind"));
}

/// A guest cell's vCPUs may be listed (Nova's `hw:numa_cpus.N`): a JSON
/// list in any order, or in `--vm` a range or a comma list before the
/// cell's `:`; a list naming a vCPU twice names the field; the list is
/// written back as given.
#[test]
fn a_cells_vcpus_may_be_listed() {
    let list = |t: &str| Some(t.parse::<numaplace_topo::CpuSet>().expect("list"));
    let r = one(r#"[{"name": "n", "vcpus": 6, "memory": "6GiB", "cells": [{"vcpus": [0, 1, 2, 3], "memory": "4GiB"}, {"vcpus": 2, "memory": "2GiB"}]}]"#)
        .expect("valid");
    assert_eq!((r.cells[0].vcpus, r.cells[0].listed.clone()), (4, list("0-3")));
    assert_eq!((r.cells[1].vcpus, r.cells[1].listed.clone()), (2, None));
    let doc = RequestDoc::from(&r);
    let text = serde_json::to_string(&doc).expect("serialise");
    assert!(text.contains(r#""vcpus":[0,1,2,3]"#), "{text}");
    assert_eq!(doc.to_request("r").expect("valid"), r);
    let spec =
        request_from_spec("name=n,vcpus=6,memory=6GiB,cells=0-3:4GiB,4-5:2GiB", Policy::Balanced).expect("valid");
    assert_eq!((spec.cells[1].vcpus, spec.cells[1].listed.clone()), (2, list("4-5")));
    let spec = request_from_spec("name=n,vcpus=8,memory=8GiB,cells=0,2,4,6:4GiB,1,3,5,7:4GiB", Policy::Balanced)
        .expect("valid");
    assert_eq!(spec.cells.iter().map(|c| c.listed.clone()).collect::<Vec<_>>(), vec![list("0,2,4,6"), list("1,3,5,7")]);
    let r = one(r#"[{"name": "n", "vcpus": 4, "memory": "4GiB", "cells": [{"vcpus": [2, 0], "memory": "2GiB"}, {"vcpus": [1, 3], "memory": "2GiB"}]}]"#)
        .expect("valid");
    assert_eq!(r.cells[0].listed, list("0,2"));
    let e = err(
        r#"[{"name": "n", "vcpus": 4, "memory": "4GiB", "cells": [{"vcpus": [0, 0], "memory": "2GiB"}, {"vcpus": [1, 3], "memory": "2GiB"}]}]"#,
    );
    assert!(e.starts_with(r#"vms[0] "n": cells: expected"#) && e.contains("distinct vCPUs"), "{e}");
    let e = request_from_spec("name=n,vcpus=8,memory=8GiB,cells=0,2:4GiB,1", Policy::Balanced).expect_err("dangling");
    assert!(e.to_string().contains("cells"), "{e}");
}

/// `memory_tiers`: `hidden` (the default, not written back) or `visible`
/// (written back); any other value names the field. A cell backed by a
/// hidden tier writes its `memory_nodes` and reads back exactly; a cell
/// on its own node writes none.
#[test]
fn memory_tiers_and_the_nodes_backing_a_cell_read_back() {
    let r = one(r#"[{"name": "h", "vcpus": 2, "memory": "1GiB", "memory_kind": "hbm"}]"#).expect("valid");
    assert_eq!(r.memory_tiers, numaplace_plan::MemoryTiers::Hidden);
    assert!(!serde_json::to_string(&RequestDoc::from(&r)).expect("json").contains("memory_tiers"));
    let v = one(r#"[{"name": "v", "vcpus": 2, "memory": "1GiB", "memory_tiers": "visible"}]"#).expect("valid");
    assert_eq!(v.memory_tiers, numaplace_plan::MemoryTiers::Visible);
    let doc = RequestDoc::from(&v);
    assert!(serde_json::to_string(&doc).expect("json").contains(r#""memory_tiers":"visible""#));
    assert_eq!(doc.to_request("r").expect("valid"), v);
    let spec = request_from_spec("name=s,vcpus=2,memory=1GiB,memory-tiers=visible", Policy::Balanced).expect("valid");
    assert_eq!(spec.memory_tiers, numaplace_plan::MemoryTiers::Visible);
    let e = err(r#"[{"name": "n", "vcpus": 2, "memory": "1GiB", "memory_tiers": "shown"}]"#);
    assert!(e.contains("memory_tiers: expected hidden or visible"), "{e}");

    let mut p = wide();
    p.nodes.push(NodeId(4));
    p.memory = vec![(NodeId(0), 2 * GIB), (NodeId(4), GIB), (NodeId(2), 3 * GIB)];
    p.guest.cells[0].memory_nodes = vec![(NodeId(0), 2 * GIB), (NodeId(4), GIB)];
    let mut doc = PlanDoc::new(Some("box".into()));
    doc.placements.push(PlacementDoc::from(&p));
    let text = doc.to_json();
    let back = PlanDoc::parse(&text).expect("own output parses");
    assert_eq!(back.to_placements().expect("valid state"), [p]);
    let j: serde_json::Value = serde_json::from_str(&text).expect("json");
    let cells = &j["placements"][0]["guest"]["cells"];
    assert_eq!(cells[0]["memory_nodes"], serde_json::json!([{"node": 0, "bytes": 2 * GIB}, {"node": 4, "bytes": GIB}]));
    assert_eq!(cells[1].get("memory_nodes"), None);
}
