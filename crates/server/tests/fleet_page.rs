//! The web view's fleet page through the real router and a SQLite store,
//! as it must hold for a zone of many hosts: a summary of hosts by state
//! over the whole fleet, one page of rows, and filters read from the query
//! string, a bad value refused with 400 naming the parameter.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use numaplace_server::app::{router, AppState};
use numaplace_server::Service;
use std::sync::Arc;
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:7479";

fn intel() -> Vec<u8> {
    let p =
        format!("{}/../../fixtures/topologies/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(p).unwrap()
}

async fn call(app: &axum::Router, method: &str, uri: &str, body: Vec<u8>, kind: &str) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(uri).header("host", HOST);
    if !body.is_empty() {
        req = req.header("content-type", kind).header("content-length", body.len());
    }
    let resp = app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn page(app: &axum::Router, query: &str) -> (StatusCode, String) {
    call(app, "GET", &format!("/{query}"), Vec::new(), "").await
}

/// The hosts a page lists, in order.
fn rows(html: &str) -> Vec<String> {
    html.split("<tr data-host=\"").skip(1).map(|r| r.split('"').next().unwrap().to_string()).collect()
}

/// The count the summary gives for a state.
fn count(html: &str, state: &str) -> u64 {
    let at = html.find(&format!("data-state=\"{state}\"")).unwrap();
    let text = &html[at..];
    let text = &text[text.find('>').unwrap() + 1..];
    text.split_whitespace().next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_page_sums_every_host_shows_one_page_and_filters_by_state() {
    let dir = std::env::temp_dir().join(format!("numaplace-fleet-page-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = numaplace_store::open(&format!("sqlite:{}", dir.join("f.db").display())).unwrap();
    let svc = Arc::new(Service::new(store, 1, 1).unwrap());
    let app = router(AppState::new(svc, None));

    for i in 0..7 {
        let (status, body) = call(&app, "PUT", &format!("/v1/hosts/h{i}"), intel(), "application/xml").await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // h5 drained; every thread of h6 taken (stranded); h0-h4: one with a
    // VM, four empty... whichever host the service picks for the small VM.
    assert_eq!(call(&app, "POST", "/v1/hosts/h5/drain", Vec::new(), "").await.0, StatusCode::OK);
    let full = br#"{"name": "full", "vcpus": 32, "memory": "4GiB", "constraints": {"hosts": ["h6"]}}"#.to_vec();
    let (status, body) = call(&app, "POST", "/v1/placements", full, "application/json").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let small = br#"{"name": "small", "vcpus": 2, "memory": "2GiB", "constraints": {"hosts": ["h1"]}}"#.to_vec();
    assert_eq!(call(&app, "POST", "/v1/placements", small, "application/json").await.0, StatusCode::CREATED);

    // Two hosts a page: the summary counts every host, the page lists two.
    let (status, html) = page(&app, "?per_page=2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rows(&html), ["h0", "h1"]);
    assert!(html.contains("page 1 of 4, 2 a page"), "{html}");
    assert_eq!(
        ["in-service", "empty", "stranded", "drained"].map(|s| count(&html, s)),
        [6, 4, 1, 1],
        "in service (of which empty, stranded) and drained"
    );
    assert!(html.contains("rel=\"next\""));

    // The last page, and a page past it shows the last.
    assert_eq!(rows(&page(&app, "?per_page=2&page=4").await.1), ["h6"]);
    assert_eq!(rows(&page(&app, "?per_page=2&page=99").await.1), ["h6"]);

    // Filters by state, each with the hosts it names.
    for (state, want) in [
        ("drained", vec!["h5"]),
        ("stranded", vec!["h6"]),
        ("empty", vec!["h0", "h2", "h3", "h4"]),
        ("in-service", vec!["h0", "h1", "h2", "h3", "h4", "h6"]),
    ] {
        let (status, html) = page(&app, &format!("?state={state}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(rows(&html), want, "state={state}");
    }
    let (_, html) = page(&app, "?state=in-service&min_free_threads=31").await;
    assert_eq!(rows(&html), ["h0", "h2", "h3", "h4"], "filters combine");

    // Bad values: 400, the parameter named, the error page's shape.
    for (query, words) in [
        ("?page=0", "page"),
        ("?page=x", "page"),
        ("?per_page=0", "per_page"),
        ("?per_page=100000", "per_page"),
        ("?state=busy", "state"),
        ("?min_free_threads=-1", "min_free_threads"),
        ("?sort=name", "sort"),
    ] {
        let (status, html) = page(&app, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {html}");
        assert!(html.contains(words), "{query}: {html}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
