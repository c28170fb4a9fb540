//! The HTTP server of `numaplace exporter` (docs/exporter.md): `GET
//! /metrics` answered with what a sampler renders, on the same stack as
//! `numaplace serve` (axum on hyper, the same accept loop with its header
//! timeout and connection cap), so the workspace has one HTTP server and
//! `numaplace-observe` none. The binary links this stack for `serve`
//! already, so the exporter adds no crate to it.
//!
//! Scrapes are few (one every 15 s or so) and each samples `/proc`, so
//! the sampler is called on a blocking thread, one scrape at a time.

use crate::{accept_loop, Limits};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest request head: scrapers send a few hundred bytes; a larger head
/// is answered 431 (hyper's smallest read buffer).
pub const MAX_HEAD: usize = 8192;

/// Connections served at once: a scraper or two, and a person with curl.
const MAX_CONNECTIONS: usize = 16;

/// How long a client may take to send its request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the sampler answers for one scrape: the metrics' text, or why
/// not (a 500 with that sentence).
pub type Scrape = Result<String, String>;

/// Serves `GET /metrics` on `listener` until the process ends: each
/// scrape calls `metrics` once, its text sent as `content_type`. `GET /` says where the metrics are;
/// other paths are 404, other methods 405. Every connection closes after
/// its answer (scrapers open one per scrape).
pub fn serve(
    listener: std::net::TcpListener,
    content_type: &'static str,
    metrics: impl FnMut() -> Scrape + Send + 'static,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let metrics: Arc<Mutex<dyn FnMut() -> Scrape + Send>> = Arc::new(Mutex::new(metrics));
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move { scrape(metrics, content_type).await }
            }),
        )
        .route("/", get(|| async { text(StatusCode::OK, "numaplace exporter: metrics at /metrics\n") }))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "not found: try /metrics\n") })
        .method_not_allowed_fallback(|| async { text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n") });
    let limits = Limits {
        header_timeout: HEADER_TIMEOUT,
        max_connections: MAX_CONNECTIONS,
        max_head: Some(MAX_HEAD),
        keep_alive: false,
        // Prometheus scrapes from one address; the cap alone bounds it.
        per_address: MAX_CONNECTIONS,
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        // Never stopped from inside: the process ends on its signal.
        let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        accept_loop(listener, app, limits, std::sync::Arc::from(Vec::new()), stop_rx).await;
        Ok(())
    })
}

async fn scrape(metrics: Arc<Mutex<dyn FnMut() -> Scrape + Send>>, content_type: &'static str) -> Response {
    let answer = tokio::task::spawn_blocking(move || {
        // A scrape that panicked left the sampler as it was: use it.
        let mut f = metrics.lock().unwrap_or_else(|e| e.into_inner());
        f()
    })
    .await
    .unwrap_or_else(|e| Err(format!("the scrape failed: {e}")));
    match answer {
        Ok(body) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(why) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{why}\n")),
    }
}

fn text(status: StatusCode, body: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body.to_string()).into_response()
}
