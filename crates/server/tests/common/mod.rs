//! What several router tests share: one request through the real router,
//! as a client on the loopback address would send it.
#![allow(clippy::unwrap_used, dead_code)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

/// Sends `body` to `uri` and returns the status and the body's bytes.
pub async fn send_bytes(app: &axum::Router, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("Host", "127.0.0.1:7478")
        .header("Content-Type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    (status, axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap().to_vec())
}
