//! A host's planning rules (the profile's `memory_kinds` and
//! `[qemu_overhead]`, registered as query parameters by the agent) and
//! each node's memory kind, through the real router: what a registration
//! sets, keeps and resets, what `GET /v1/hosts/NAME` shows, what a bad
//! value gets, and that the service plans with them.
#![allow(clippy::unwrap_used)]

mod common;

use axum::http::StatusCode;
use numaplace_server::app::{router, AppState};
use numaplace_server::Service;
use serde_json::{json, Value};
use std::sync::Arc;

fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn app() -> axum::Router {
    let store = numaplace_store::open("sqlite::memory:").unwrap();
    router(AppState::new(Arc::new(Service::new(store, 1, 1).unwrap()), None))
}

async fn send(app: &axum::Router, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let (status, bytes) = common::send_bytes(app, method, uri, body).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn rules(app: &axum::Router) -> Value {
    let (status, host) = send(app, "GET", "/v1/hosts/h1", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{host}");
    host["rules"].clone()
}

#[tokio::test]
async fn a_registration_sets_keeps_and_resets_the_hosts_rules() {
    let app = app();
    let corona = fixture("mpibind/epyc-corona.xml");
    let (status, host) = send(&app, "PUT", "/v1/hosts/h1", corona.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{host}");
    assert_eq!(host["rules"], Value::Null, "the defaults are not shown");
    let uri = "/v1/hosts/h1?memory_kinds=hbm,dram&qemu_overhead_fixed=4GiB&qemu_overhead_per_gib=0";
    let (status, host) = send(&app, "PUT", uri, corona.clone()).await;
    assert_eq!(status, StatusCode::OK, "{host}");
    let set = json!({"memory_kinds": ["hbm"], "qemu_overhead": {"fixed_bytes": 4u64 << 30, "per_gib_bytes": 0}});
    assert_eq!(host["rules"], set);
    assert_eq!(rules(&app).await, set);
    // An agent told nothing (no profile, no flag) keeps them.
    send(&app, "PUT", "/v1/hosts/h1", corona.clone()).await;
    assert_eq!(rules(&app).await, set);
    // One given alone: the others at their defaults.
    send(&app, "PUT", "/v1/hosts/h1?memory_kinds=cxl", corona.clone()).await;
    assert_eq!(rules(&app).await, json!({"memory_kinds": ["cxl"]}));
    // Reservations without rules: an agent whose profile has none.
    send(&app, "PUT", "/v1/hosts/h1?reserved_cpus=0", corona.clone()).await;
    assert_eq!(rules(&app).await, Value::Null);
    for (query, field) in [("memory_kinds=fast", "memory_kinds"), ("qemu_overhead_fixed=-1MiB", "qemu_overhead_fixed")]
    {
        let (status, e) = send(&app, "PUT", &format!("/v1/hosts/h1?{query}"), corona.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().starts_with(&format!("{field}: expected")), "{e}");
    }
}

/// With 4 GiB of QEMU overhead, a VM of 30 GiB fits no 32 GiB node alone:
/// the service spreads it (with the default overhead it took one node).
#[tokio::test]
async fn the_service_plans_with_the_registered_overhead() {
    let app = app();
    let corona = fixture("mpibind/epyc-corona.xml");
    let place = json!({"name": "big", "vcpus": 4, "memory": "30GiB"}).to_string().into_bytes();
    send(&app, "PUT", "/v1/hosts/h1", corona.clone()).await;
    let (status, vm) = send(&app, "POST", "/v1/placements?dry_run=true", place.clone()).await;
    assert_eq!(status, StatusCode::OK, "{vm}");
    assert_eq!(vm["placement"]["memory"].as_array().unwrap().len(), 1, "{vm}");
    send(&app, "PUT", "/v1/hosts/h1?qemu_overhead_fixed=4GiB", corona).await;
    let (status, vm) = send(&app, "POST", "/v1/placements?dry_run=true", place).await;
    assert_eq!(status, StatusCode::OK, "{vm}");
    assert!(vm["placement"]["memory"].as_array().unwrap().len() > 1, "{vm}");
}

/// Each node of the host document says its memory kind, as the
/// registered topology has it (the Xeon Max's HBM nodes, flat mode).
#[tokio::test]
async fn the_host_document_shows_each_nodes_memory_kind() {
    let app = app();
    let (status, host) = send(&app, "PUT", "/v1/hosts/h1", fixture("psmgmt/topo.dp-intelmax01-flat.xml")).await;
    assert_eq!(status, StatusCode::CREATED, "{host}");
    let kinds: Vec<(u64, &str)> = host["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["node"].as_u64().unwrap(), n["memory_kind"].as_str().unwrap()))
        .collect();
    assert!(kinds.iter().any(|(_, k)| *k == "hbm") && kinds.iter().any(|(_, k)| *k == "dram"), "{kinds:?}");
    let (_, detail) = send(&app, "GET", "/v1/hosts/h1", Vec::new()).await;
    assert_eq!(detail["nodes"], host["nodes"]);
}
