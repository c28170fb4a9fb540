//! numaplace's fleet service (issue 17): the only crate that speaks HTTP.
//! `numaplace serve` runs [`serve`]; `numaplace agent` runs [`agent::run`]
//! on each host.
//!
//! Code map:
//! - `service`: the logic without HTTP: a cache of the fleet kept in step
//!   with the store, decisions made on it and claimed under each host's
//!   generation, retried on conflict;
//! - `http`: routes, the token check, body limits, errors as JSON;
//! - `metrics`: `/metrics` in Prometheus' text format;
//! - `agent`: the host agent, a client of the API.

pub mod agent;
pub mod http;
pub mod metrics;
pub mod service;
pub mod web;

use std::net::SocketAddr;
use std::sync::Arc;

pub use service::{ApiError, Service};

/// How `numaplace serve` runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// `sqlite:PATH`, a path, or `postgres://...`.
    pub db: String,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The token writes must carry (required off loopback).
    pub token: Option<String>,
}

/// Why the server did not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Listening off loopback without a token.
    #[error("listening on {0} (not loopback) needs --token-file: anyone who can reach it could place and delete VMs")]
    TokenNeeded(SocketAddr),
    /// The database could not be opened.
    #[error("--db: {0}")]
    Store(numaplace_store::StoreError),
    /// The cache could not be loaded.
    #[error("loading the fleet: {0}")]
    Load(ApiError),
    /// Binding or serving failed.
    #[error("{0}")]
    Io(std::io::Error),
}

// Not `#[from]`: that would also make the error its source, and the CLI,
// which prints the chain, would say everything twice.
impl From<numaplace_store::StoreError> for ServeError {
    fn from(e: numaplace_store::StoreError) -> ServeError {
        ServeError::Store(e)
    }
}

impl From<std::io::Error> for ServeError {
    fn from(e: std::io::Error) -> ServeError {
        ServeError::Io(e)
    }
}

/// Opens the store, loads the fleet and serves until SIGINT or SIGTERM.
/// Prints `listening on http://ADDR` on stderr once it accepts
/// connections (with port 0, the port chosen).
pub fn serve(config: Config) -> Result<(), ServeError> {
    if !config.listen.ip().is_loopback() && config.token.is_none() {
        return Err(ServeError::TokenNeeded(config.listen));
    }
    let store = numaplace_store::open(&config.db)?;
    // Replicas share only a PostgreSQL database; one SQLite server takes
    // the best host every time.
    let replicas = config.db.starts_with("postgres");
    let spread = if replicas { 4 } else { 1 };
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let service = Service::new(store, spread, seed).map_err(ServeError::Load)?;
    let state = http::AppState { service: Arc::new(service), token: config.token.map(Arc::from) };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        eprintln!("numaplace serve: listening on http://{}", listener.local_addr()?);
        axum::serve(listener, http::router(state)).with_graceful_shutdown(shutdown()).await
    })?;
    Ok(())
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
