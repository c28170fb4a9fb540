//! numaplace's fleet service (issue 17): the workspace's HTTP server.
//! `numaplace serve` runs [`serve`]; `numaplace exporter` runs
//! [`exporter::serve`] on the same stack. The host agent, a client of the
//! API, is its own crate (`numaplace-agent`).
//!
//! Code map, from the top down (each module imports only those below it;
//! no import circle):
//! - `app`: the one route table and the order of its layers;
//! - `http`: the API's handlers; `web`: the pages and their forms;
//!   `adapters`: `/v1/evaluate` and the Kubernetes scheduler extender;
//! - `layers`: the access line, the request counters, the request's
//!   deadline; `edge`: the checks before any handler (Host, origin,
//!   credential, body, strict query and JSON);
//! - `state`: what handlers share, and service calls on a blocking
//!   thread; `answer`: errors mapped to statuses and the one error shape;
//! - `service`: the logic without HTTP, on typed commands only, split
//!   along a placement record's life: the stored rows' one decoder, the
//!   cache and its change feed, the claims (tickets, speculation,
//!   settling, retries, keys, outcome unknown), and thin commands;
//! - `command`: the typed commands the edge reads bodies, forms and
//!   queries into (`Place`, `Move`, `Register`, `Patch`, `Report`, ...);
//! - `metrics`: counters and `/metrics` in Prometheus' text format;
//!   `logging`: log setup and the access line's parts; `audit`: the audit
//!   lines;
//! - `error`: `ApiError`, whose variants carry their data;
//!   `credentials`: who may do what (operator and per-host agent
//!   credentials, hashed) and the one authorization decision;
//! - `exporter`: the exporter's `/metrics` server.
//!
//! Public: what `numaplace` (the CLI) and the tests use; the rest is
//! crate-private.

mod adapters;
mod answer;
pub mod app;
mod audit;
pub mod command;
pub mod credentials;
mod edge;
pub mod error;
pub mod exporter;
mod http;
mod k8s;
pub mod kube;
mod layers;
mod logging;
pub mod metrics;
pub mod service;
mod state;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use error::ApiError;
pub use http::OPENAPI;
pub use logging::LogFormat;
pub use service::Service;
pub use web::CSS;

/// How `numaplace serve` runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// `sqlite:PATH`, a path, or `postgres://...`.
    pub db: String,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The single token of `--token-file`: an operator-write credential
    /// named `token` (kept for compatibility).
    pub token: Option<String>,
    /// The credentials file (`--credentials`), read again on SIGHUP.
    pub credentials: Option<String>,
    /// Whether reads need no credential (`--anonymous-reads`).
    pub anonymous_reads: bool,
    /// Proxies whose `X-Forwarded-For` is believed and logged.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Connections one address may hold at once (trusted proxies
    /// excepted) ([`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`]).
    pub max_connections_per_address: usize,
    /// Bytes of request bodies held at once ([`app::DEFAULT_BODY_MEMORY`]).
    pub max_body_memory: usize,
    /// How long a request may take before it is answered 503
    /// ([`app::DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// How long a stop waits for the requests in flight
    /// ([`DEFAULT_DRAIN_TIMEOUT`]).
    pub drain_timeout: Duration,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// A `RUST_LOG`-style filter; `None`: `RUST_LOG`, else `info`.
    pub log_level: Option<String>,
    /// How long a connection may take to send a request's headers, and
    /// stay idle between requests ([`DEFAULT_HEADER_TIMEOUT`]).
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive
    /// ([`edge::DEFAULT_BODY_TIMEOUT`]).
    pub body_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog
    /// ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Names the `Host` header may carry besides IP addresses and
    /// `localhost` (`NAME` for any port, `NAME:PORT` for one).
    pub allowed_hosts: Vec<String>,
    /// How many servers share the database, for the spread of decisions
    /// ([`service::spread_k`]); `None`: 1 on SQLite, [`DEFAULT_PG_REPLICAS`]
    /// on PostgreSQL.
    pub replicas: Option<usize>,
    /// The Kubernetes API the scheduler extender reads VMIs from and
    /// binds pods through (`--kube-api`); `None`: pods are read from their
    /// resources and `bind` is refused.
    pub kube: Option<kube::KubeConfig>,
}

/// The replicas assumed to share a PostgreSQL database when `--replicas`
/// is not given: more than are running spreads a little more than needed,
/// fewer lets conflicts rise.
pub const DEFAULT_PG_REPLICAS: usize = 3;

impl Config {
    /// A configuration with the defaults for everything but the database
    /// and the address.
    pub fn new(db: String, listen: SocketAddr) -> Config {
        Config {
            db,
            listen,
            token: None,
            credentials: None,
            anonymous_reads: true,
            trusted_proxies: Vec::new(),
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_body_memory: app::DEFAULT_BODY_MEMORY,
            request_timeout: app::DEFAULT_REQUEST_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            log_format: LogFormat::Text,
            log_level: None,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: edge::DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allowed_hosts: Vec::new(),
            replicas: None,
            kube: None,
        }
    }
}

/// How long a connection may take to send its request's headers (and
/// may stay idle between requests) unless `--header-timeout` says
/// otherwise: clients send headers at once; a connection that does not
/// is closed rather than held (slowloris).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once unless `--max-connections` says otherwise:
/// below the usual limit of 1024 open files, leaving room for the
/// database's; further connections wait in the kernel's backlog.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Connections one address may hold at once unless
/// `--max-connections-per-address` says otherwise: an eighth of the
/// default cap, so one client trickling headers (512 slow connections
/// once delayed every other client by 8 s) holds at most an eighth of the
/// server; further connections from it are closed at once. Trusted
/// proxies, which carry many clients, are not capped.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 64;

/// How long a stop waits for the requests in flight unless
/// `--drain-timeout` says otherwise: twice the default request deadline,
/// so a request that started just before the signal ends (answered or
/// 503) before the drain gives up, and well inside systemd's 90 s and
/// Kubernetes' 30 s grace before they kill.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the server did not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Listening off loopback without a credential.
    #[error("listening on {0} (not loopback) needs --credentials or --token-file: anyone who can reach it could place and delete VMs")]
    TokenNeeded(SocketAddr),
    /// The credentials (file or token) are not usable.
    #[error("{0}")]
    Credentials(String),
    /// `--db` names a database numaplace does not speak.
    #[error("{0}")]
    Db(String),
    /// A log setting is not understood.
    #[error("{0}")]
    Log(String),
    /// The Kubernetes API settings are not usable (`--kube-*`).
    #[error("{0}")]
    Kube(String),
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

/// Opens the store, loads the fleet and serves until SIGINT or SIGTERM,
/// then drains: stops accepting, lets the requests in flight finish (for
/// at most `drain_timeout`), closes the connections and the store.
/// Prints `listening on http://ADDR` on stderr once it accepts
/// connections (with port 0, the port chosen), as plain text whatever the
/// log format.
pub fn serve(config: Config) -> Result<(), ServeError> {
    let credentials =
        read_credentials(config.credentials.as_deref(), config.token.as_deref()).map_err(ServeError::Credentials)?;
    if !config.listen.ip().is_loopback() && credentials.is_empty() {
        return Err(ServeError::TokenNeeded(config.listen));
    }
    if let Some((scheme, _)) = config.db.split_once("://") {
        if !matches!(scheme, "postgres" | "postgresql") {
            return Err(ServeError::Db(format!(
                "--db {}: expected sqlite:PATH, a path, or postgres://...; `{scheme}` databases are not supported",
                config.db
            )));
        }
    }
    let kube = config.kube.as_ref().map(kube::KubeClient::new).transpose().map_err(ServeError::Kube)?;
    logging::init(config.log_format, config.log_level.as_deref()).map_err(ServeError::Log)?;
    let store = numaplace_store::open(&config.db)?;
    // Replicas share only a PostgreSQL database; one SQLite server takes
    // the best host every time.
    let shared = config.db.starts_with("postgres");
    let replicas = config.replicas.unwrap_or(if shared { DEFAULT_PG_REPLICAS } else { 1 });
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let service = Arc::new(Service::new(store, replicas, seed).map_err(ServeError::Load)?);
    let mut state = app::AppState::new(service.clone(), None);
    state.set_credentials(credentials);
    state.anonymous_reads = config.anonymous_reads;
    state.trusted_proxies = Arc::from(config.trusted_proxies.clone());
    state.set_body_budget(config.max_body_memory);
    state.request_timeout = config.request_timeout;
    state.body_timeout = config.body_timeout;
    state.allowed_hosts = Arc::from(config.allowed_hosts);
    state.kube = kube.map(Arc::new);
    let in_flight = state.in_flight.clone();
    let drain = config.drain_timeout;
    let limits = Limits {
        header_timeout: config.header_timeout,
        max_connections: config.max_connections.max(1),
        max_head: None,
        keep_alive: true,
        per_address: config.max_connections_per_address.max(1),
    };
    let trusted: Arc<[std::net::IpAddr]> = Arc::from(config.trusted_proxies);
    let reload = (state.clone(), config.credentials.clone(), config.token.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served: Result<(), std::io::Error> = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        eprintln!("numaplace serve: listening on http://{}", listener.local_addr()?);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let signal = shutdown().await;
            tracing::info!(signal, "stopping: no new connections; draining the requests in flight");
            let _ = stop_tx.send(true);
        });
        tokio::spawn(reload_on_hangup(reload.0, reload.1, reload.2));
        let server = accept_loop(listener, app::router(state), limits, trusted, stop_rx.clone());
        let mut drain_rx = stop_rx;
        let drained = async move {
            let _ = drain_rx.wait_for(|stop| *stop).await;
            tokio::time::sleep(drain).await;
        };
        tokio::select! {
            () = server => Ok(()),
            () = drained => {
                tracing::warn!(
                    in_flight = in_flight.load(std::sync::atomic::Ordering::Acquire),
                    "drain timed out after {} ms: closing the connections still open",
                    drain.as_millis()
                );
                Ok(())
            }
        }
    });
    // Connections still open are closed here; a worker stuck on the
    // database is left behind (the process ends without it; its
    // transaction is never committed, see `numaplace_store::deadline`).
    runtime.shutdown_timeout(Duration::from_millis(500));
    served?;
    // Dropped here, outside the runtime: the synchronous PostgreSQL
    // client must never be dropped inside one (it panicked there, and
    // every stop of a PostgreSQL-backed server exited 101).
    match Arc::try_unwrap(service) {
        Ok(service) => drop(service),
        Err(_) => tracing::warn!("a request still holds the store; it is closed by the exit"),
    }
    tracing::info!("stopped");
    logging::sink::flush(Duration::from_secs(2));
    Ok(())
}

/// The credentials of `--credentials` and `--token-file` together; a
/// short token is refused.
fn read_credentials(file: Option<&str>, token: Option<&str>) -> Result<credentials::Credentials, String> {
    let mut c = match file {
        Some(path) => credentials::Credentials::load(path).map_err(|e| format!("--credentials {e}"))?,
        None => credentials::Credentials::default(),
    };
    if let Some(t) = token {
        credentials::check_token("--token-file", t)?;
        c = c.with_token(t);
    }
    Ok(c)
}

/// Reads the credentials again on each SIGHUP; a file that does not read
/// keeps the credentials in force, and says why.
async fn reload_on_hangup(state: app::AppState, file: Option<String>, token: Option<String>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    while hup.recv().await.is_some() {
        match read_credentials(file.as_deref(), token.as_deref()) {
            Ok(c) => {
                let n = c.len();
                state.set_credentials(c);
                tracing::info!(credentials = n, "SIGHUP: credentials reloaded");
            }
            Err(e) => tracing::error!("SIGHUP: credentials not reloaded, the ones in force are kept: {e}"),
        }
    }
}

/// The limits the accept loop holds every connection to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// How long a request's headers may take (and a connection idle).
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Largest request head; a larger one is answered 431 (`None`:
    /// hyper's default, about 400 KiB).
    pub max_head: Option<usize>,
    /// Whether a connection serves more than one request.
    pub keep_alive: bool,
    /// Connections one address may hold (trusted proxies excepted).
    pub per_address: usize,
}

/// Accepts connections (at most `max_connections` served at once) and
/// serves each over HTTP/1.1 with a header timeout, until `stop`; then
/// stops accepting, asks every connection to close once its request in
/// flight is answered (idle ones close at once), and returns when all
/// have. axum's own `serve` sets no header timeout and no cap.
pub(crate) async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: Limits,
    trusted: Arc<[std::net::IpAddr]>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let per_address: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>> = Arc::default();
    let mut over_cap_warned = std::time::Instant::now() - Duration::from_secs(60);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let mut conns = tokio::task::JoinSet::new();
    let mut stopping = stop.clone();
    loop {
        while conns.try_join_next().is_some() {}
        if slots.available_permits() == 0 {
            tracing::warn!(
                max_connections = limits.max_connections,
                "connection cap reached: new connections wait in the backlog"
            );
        }
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
            _ = stopping.wait_for(|s| *s) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors or a connection reset
                    // before it was accepted: wait a little, go on.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopping.wait_for(|s| *s) => break,
        };
        // One address may hold only so many connections: a client that
        // opens hundreds and trickles their headers must not take every
        // slot. Over its share, the connection is closed at once.
        let ip = peer.ip();
        let held = if trusted.contains(&ip) {
            None
        } else {
            let mut map = per_address.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = map.entry(ip).or_insert(0);
            if *n >= limits.per_address {
                drop(map);
                drop(stream);
                metrics::CONNECTIONS_OVER_ADDRESS_CAP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if over_cap_warned.elapsed() >= Duration::from_secs(1) {
                    over_cap_warned = std::time::Instant::now();
                    tracing::warn!(
                        peer = %ip,
                        max_connections_per_address = limits.per_address,
                        "an address over its connection cap: its new connections are closed"
                    );
                }
                continue;
            }
            *n += 1;
            Some(AddressSlot { ip, map: per_address.clone() })
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            // The peer, for the access line (`logging::access`).
            req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            tower::ServiceExt::oneshot(app.clone(), req.map(axum::body::Body::new))
        });
        let mut stop = stop.clone();
        conns.spawn(async move {
            let _slot = slot;
            let _held = held;
            let _ = stream.set_nodelay(true);
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(limits.keep_alive);
            if let Some(max) = limits.max_head {
                builder.max_buf_size(max);
            }
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// A connection counted against its address; uncounted when dropped.
struct AddressSlot {
    ip: std::net::IpAddr,
    map: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Waits for SIGINT or SIGTERM; returns its name.
async fn shutdown() -> &'static str {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        () = term => "SIGTERM",
    }
}
