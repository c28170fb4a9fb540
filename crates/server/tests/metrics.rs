//! `/metrics` as an operator reads it, through the real router and a
//! SQLite store: requests and errors counted under the route's pattern
//! (never the VM's name), the method and the status class; answers given
//! before routing under `unrouted`; a passed deadline counted; the store
//! gauge following what the last request that needed the store saw.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use numaplace_server::app::{router, AppState};
use numaplace_server::metrics::{StatusClass, StoreUp};
use numaplace_server::Service;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

fn corona() -> Vec<u8> {
    std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

async fn send(app: &axum::Router, method: &str, uri: &str, host: &str, body: Vec<u8>) -> StatusCode {
    let mut req = Request::builder().method(method).uri(uri).header("host", host);
    if !body.is_empty() {
        let kind = if uri.starts_with("/v1/hosts") { "application/xml" } else { "application/json" };
        req = req.header("content-type", kind).header("content-length", body.len());
    }
    app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap().status()
}

async fn metrics(app: &axum::Router) -> String {
    let req = Request::builder().uri("/metrics").header("host", "127.0.0.1").body(Body::empty()).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    String::from_utf8(axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap().to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_errors_deadlines_and_the_store_are_counted_by_route() {
    let dir = std::env::temp_dir().join(format!("numaplace-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = numaplace_store::open(&format!("sqlite:{}", dir.join("f.db").display())).unwrap();
    let svc = Arc::new(Service::new(store, 1, 1).unwrap());
    let st = AppState::new(svc.clone(), None);
    let app = router(st.clone());
    let h = "127.0.0.1:7478";
    assert_eq!(svc.metrics.store_up(), StoreUp::Unknown, "no request has needed the store yet");

    assert_eq!(send(&app, "PUT", "/v1/hosts/h1", h, corona()).await, StatusCode::CREATED);
    let vm = br#"{"name": "vm1", "vcpus": 2, "memory": "2GiB"}"#.to_vec();
    assert_eq!(send(&app, "POST", "/v1/placements", h, vm).await, StatusCode::CREATED);
    for name in ["vm1", "nope1", "nope2"] {
        send(&app, "GET", &format!("/v1/placements/{name}"), h, Vec::new()).await;
    }
    // Refused before routing, and routed nowhere.
    assert_eq!(send(&app, "GET", "/v1/placements/vm1", "rebind.test", Vec::new()).await, StatusCode::BAD_REQUEST);
    assert_eq!(send(&app, "GET", "/no/such/route", h, Vec::new()).await, StatusCode::NOT_FOUND);

    let m = svc.metrics.requests("/v1/placements/{vm}", "GET", StatusClass::ClientError);
    assert_eq!(m, 2, "two unknown VMs, counted under the route's pattern");
    let text = metrics(&app).await;
    for line in [
        "numaplace_http_requests_total{route=\"/v1/placements/{vm}\",method=\"GET\",status=\"2xx\"} 1",
        "numaplace_http_requests_total{route=\"/v1/placements/{vm}\",method=\"GET\",status=\"4xx\"} 2",
        "numaplace_http_errors_total{route=\"/v1/placements/{vm}\",method=\"GET\",status=\"4xx\"} 2",
        "numaplace_http_requests_total{route=\"/v1/placements\",method=\"POST\",status=\"2xx\"} 1",
        "numaplace_http_requests_total{route=\"unrouted\",method=\"GET\",status=\"4xx\"} 2",
        "numaplace_deadline_exceeded_total 0",
        "numaplace_store_up 1",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    assert!(!text.contains("nope1"), "a VM's name never becomes a label");
    assert!(!text.contains("errors_total{route=\"/v1/placements/{vm}\",method=\"GET\",status=\"2xx\""), "{text}");

    // A deadline that passes before the store answers: counted, and the
    // store shown down until a request finds it answering again.
    let mut late = st.clone();
    late.request_timeout = Duration::ZERO;
    let late = router(late);
    let mut got = StatusCode::OK;
    for _ in 0..5000 {
        got = send(&late, "GET", "/v1/hosts", h, Vec::new()).await;
        if got == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
    }
    assert_eq!(got, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(svc.metrics.deadlines_exceeded(), 1);
    assert_eq!(svc.metrics.store_up(), StoreUp::Down);
    let text = metrics(&app).await;
    assert!(text.contains("numaplace_deadline_exceeded_total 1"), "{text}");
    assert!(
        text.contains("numaplace_http_errors_total{route=\"/v1/hosts\",method=\"GET\",status=\"5xx\"} 1"),
        "{text}"
    );
    // `/metrics` read the store itself just now, and found it answering.
    assert!(text.contains("numaplace_store_up 1"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
