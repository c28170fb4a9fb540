//! The server's logs (docs/serve.md, "Logs"): `tracing` events written by
//! `tracing-subscriber` to stderr as text or JSON lines.
//!
//! - one access line per request (target `numaplace::access`): method,
//!   path, status, latency, the principal, the request id;
//! - one audit line per state change (target `numaplace::audit`): the
//!   [`Action`], what it changed, before and after, inside the request's
//!   span (request id and principal);
//! - store failures and conflicts that did not settle, where errors become
//!   statuses (`http`).
//!
//! Every request runs in a span `request{id, principal}`; the service's
//! work on blocking threads enters the same span, so an audit line carries
//! the request that caused it.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tracing::Instrument;

use crate::app::AppState;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `key=value` text, one event a line (for people and journald).
    #[default]
    Text,
    /// One JSON object a line (for log shippers): the event's fields at
    /// the top level, the request's under `span`.
    Json,
}

/// Installs the process's subscriber: `level` (a `RUST_LOG`-style filter
/// such as `info` or `numaplace::access=warn,info`) or else `RUST_LOG`,
/// else `info`. An error names the setting and what was expected.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::try_new(l)
            .map_err(|e| format!("--log-level `{l}`: expected a level (error, warn, info, debug, trace) or a filter such as numaplace::access=off,info: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).map_err(|e| {
                format!("RUST_LOG `{v}`: expected a level (error, warn, info, debug, trace) or a filter such as numaplace::access=off,info: {e}")
            })?,
            _ => EnvFilter::new("info"),
        },
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false);
    // A second server in one process (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init(),
    };
    Ok(())
}

/// Who made a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Principal {
    /// No credentials, or none that were checked.
    Anonymous,
    /// The service's bearer token (in the header, or a web form's field).
    Token,
}

impl Principal {
    /// The word logged.
    pub fn as_str(self) -> &'static str {
        match self {
            Principal::Anonymous => "anonymous",
            Principal::Token => "token",
        }
    }
}

tokio::task_local! {
    static WHO: Arc<OnceLock<Principal>>;
}

/// Records that the request running now proved it holds the token (the
/// web forms check theirs in the handler): its access line and its span,
/// hence its audit lines, name it.
pub(crate) fn authenticated() {
    let _ = WHO.try_with(|w| w.set(Principal::Token));
    tracing::Span::current().record("principal", Principal::Token.as_str());
}

/// The request id header, taken from the client when it sends one and
/// echoed in every answer.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest request id taken from a client.
const MAX_REQUEST_ID: usize = 128;

/// The client's `X-Request-Id` when it is 1 to 128 letters, digits or
/// `-._:`; else a fresh one (a log line must not carry what a client
/// chose to inject).
fn request_id(headers: &HeaderMap) -> String {
    let given = headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()).filter(|v| {
        !v.is_empty()
            && v.len() <= MAX_REQUEST_ID
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
    });
    match given {
        Some(id) => id.to_owned(),
        None => fresh_id(),
    }
}

/// 16 hex digits, unique in the process and unlikely to repeat between
/// processes (a per-process seed from the clock and the pid, then a
/// counter mixed by splitmix64).
fn fresh_id() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        t ^ (u64::from(std::process::id()) << 32)
    });
    let mut z = seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{:016x}", z ^ (z >> 31))
}

/// The outermost layer: gives the request its id and span, decides the
/// principal from the `Authorization` header, counts it in flight, and
/// writes its access line once answered.
pub(crate) async fn access(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(req.headers());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let who = Arc::new(OnceLock::new());
    let span = tracing::info_span!("request", id = %id, principal = tracing::field::Empty);
    if st.token.as_deref().is_some_and(|t| crate::edge::bearer_matches(req.headers(), t)) {
        let _ = who.set(Principal::Token);
        span.record("principal", Principal::Token.as_str());
    } else if st.token.is_none() || !path.starts_with("/ui/") {
        // Only the web forms can still prove the token, in their handler.
        span.record("principal", Principal::Anonymous.as_str());
    }
    st.in_flight.fetch_add(1, Ordering::AcqRel);
    let mut resp = WHO.scope(who.clone(), next.run(req).instrument(span.clone())).await;
    st.in_flight.fetch_sub(1, Ordering::AcqRel);
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    let principal = who.get().copied().unwrap_or(Principal::Anonymous);
    let status = resp.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let _in = span.enter();
    tracing::info!(
        target: "numaplace::access",
        method = %method,
        path = %path,
        status,
        latency_ms = (latency_ms * 1000.0).round() / 1000.0,
        principal = principal.as_str(),
        request_id = %id,
        "answered"
    );
    resp
}

/// A state change, as its audit line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A VM placed (`vm`, `after_host`, `after_pins`).
    Placed,
    /// A VM freed (`vm`, `before_host`).
    Deleted,
    /// A VM moved (`vm`, `before_host`, `after_host`, `after_pins`).
    Moved,
    /// A host registered (`host`, `after_labels`, `after_reserved`).
    HostRegistered,
    /// A host's description replaced (`host`, labels and reservations
    /// before and after, `topology_changed`).
    HostReplaced,
    /// A host drained or undrained (`host`, `before_drained`,
    /// `after_drained`).
    Drained,
    /// A host removed (`host`, `before_vms`: the VMs removed with it).
    HostRemoved,
    /// An agent's report changed the VMs it holds (`host`, `before_vms`,
    /// `after_vms`: the agent's, not the service's).
    AgentReport,
}

impl Action {
    /// The word logged as `action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Placed => "placed",
            Action::Deleted => "deleted",
            Action::Moved => "moved",
            Action::HostRegistered => "host-registered",
            Action::HostReplaced => "host-replaced",
            Action::Drained => "drained",
            Action::HostRemoved => "host-removed",
            Action::AgentReport => "agent-report",
        }
    }
}

/// The audit lines. Each takes what changed, before and after; fields
/// that do not apply are left out. Each carries the generation its change
/// gave each host it changed (`host_generation`, or
/// `before_host_generation` and `after_host_generation`): one host's
/// changes are numbered in the database's commit order, whichever replica
/// made them, so lines from several replicas sorted by host and
/// generation replay to what the database holds (timestamps do not: two
/// replicas' clocks and log writes disagree).
pub(crate) mod audit {
    use super::Action;
    use std::collections::BTreeMap;

    fn list<T: std::fmt::Display>(items: &[T]) -> String {
        items.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
    }

    fn labels(l: &BTreeMap<String, String>) -> String {
        l.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// A VM placed on `host`, holding `pins` (dedicated PUs; empty when it
    /// floats); `generation`: the host's, as the placement left it.
    pub fn placed(vm: &str, host: &str, generation: i64, pins: &[u32]) {
        let a = Action::Placed.as_str();
        tracing::info!(target: "numaplace::audit", action = a, vm, after_host = host, after_host_generation = generation, after_pins = %list(pins), "{a} {vm} on {host}");
    }

    /// A VM freed from `host`, leaving it at `generation`.
    pub fn deleted(vm: &str, host: &str, generation: i64) {
        let a = Action::Deleted.as_str();
        tracing::info!(target: "numaplace::audit", action = a, vm, before_host = host, before_host_generation = generation, "{a} {vm} from {host}");
    }

    /// A VM moved from `from` to `to`, each host's generation as the move
    /// left it.
    pub fn moved(vm: &str, (from, from_generation): (&str, i64), (to, to_generation): (&str, i64), pins: &[u32]) {
        let a = Action::Moved.as_str();
        tracing::info!(target: "numaplace::audit", action = a, vm, before_host = from, before_host_generation = from_generation, after_host = to, after_host_generation = to_generation, after_pins = %list(pins), "{a} {vm} from {from} to {to}");
    }

    /// A host's row before (`None`: new) and after a registration, which
    /// left it at `generation`.
    pub fn host_put(before: Option<&numaplace_store::HostRow>, after: &numaplace_store::HostRow, generation: i64) {
        let host = after.name.as_str();
        match before {
            None => {
                let a = Action::HostRegistered.as_str();
                tracing::info!(
                    target: "numaplace::audit",
                    action = a,
                    host,
                    host_generation = generation,
                    after_labels = %labels(&after.labels),
                    after_reserved = after.reserved.as_deref().unwrap_or("{}"),
                    "{a} {host}"
                );
            }
            Some(b) => {
                let a = Action::HostReplaced.as_str();
                tracing::info!(
                    target: "numaplace::audit",
                    action = a,
                    host,
                    host_generation = generation,
                    before_labels = %labels(&b.labels),
                    after_labels = %labels(&after.labels),
                    before_reserved = b.reserved.as_deref().unwrap_or("{}"),
                    after_reserved = after.reserved.as_deref().unwrap_or("{}"),
                    topology_changed = b.topology != after.topology,
                    "{a} {host}"
                );
            }
        }
    }

    /// A host drained or undrained, left at `generation`.
    pub fn drained(host: &str, generation: i64, before: bool, after: bool) {
        let a = Action::Drained.as_str();
        tracing::info!(target: "numaplace::audit", action = a, host, host_generation = generation, before_drained = before, after_drained = after, "{a} {host}: {after}");
    }

    /// A host removed (its row left at `generation`), with the VMs removed
    /// with it.
    pub fn host_removed(host: &str, generation: i64, vms: &[String]) {
        let a = Action::HostRemoved.as_str();
        tracing::info!(target: "numaplace::audit", action = a, host, host_generation = generation, before_vms = %list(vms), "{a} {host}");
    }

    /// An agent's report: the VMs it holds on `host` before and after; the
    /// host left at `generation`.
    pub fn agent_report(host: &str, generation: i64, before: &[String], after: &[String]) {
        let a = Action::AgentReport.as_str();
        tracing::info!(target: "numaplace::audit", action = a, host, host_generation = generation, before_vms = %list(before), after_vms = %list(after), "{a} {host}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_request_id_is_kept_only_when_it_is_plain() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, HeaderValue::from_static("abc-123.x:y"));
        assert_eq!(request_id(&h), "abc-123.x:y");
        h.insert(REQUEST_ID, HeaderValue::from_static("a b\"c"));
        let fresh = request_id(&h);
        assert_eq!(fresh.len(), 16);
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(fresh_id(), fresh_id());
    }
}
