//! The server's logs (docs/serve.md, "Logs"): `tracing` events written by
//! `tracing-subscriber` to stderr as text or JSON lines.
//!
//! - one access line per request (target `numaplace::access`): method,
//!   path, status, latency, the principal and its role, the peer (and the
//!   client a trusted proxy forwarded for), the request id, and for an
//!   error its code and VM; strangers' refusals sampled;
//! - one audit line per state change (target `numaplace::audit`): the
//!   [`Action`], what it changed, before and after, inside the request's
//!   span (request id and principal);
//! - store failures and conflicts that did not settle, where errors become
//!   statuses (`http`).
//!
//! Every line goes through a bounded queue ([`sink`]): logging never
//! blocks a request.
//!
//! Every request runs in a span `request{id, principal, role, peer}`; the service's
//! work on blocking threads enters the same span, so an audit line carries
//! the request that caused it.

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tracing::Instrument;

use crate::app::AppState;
use crate::credentials::{Credentials, Principal};

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
/// else `info`. An error names the setting and what was expected. Lines
/// go through [`sink`]: never written on the request's path.
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
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(sink::writer).with_ansi(false);
    // A second server in one process (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init(),
    };
    Ok(())
}

/// The log's writer: a bounded queue that a thread of its own empties
/// into stderr. A request's line is put in the queue, never written by
/// the request: when stderr blocks (a pipe nobody reads, a stalled
/// journald), the queue fills and further lines are dropped and counted
/// ([`dropped_lines`], `numaplace_log_lines_dropped_total`), and every
/// request, `/healthz` included, is still answered. (Before, a full pipe
/// stopped the server.) Hand-made rather than `tracing-appender`'s
/// `non_blocking`: fifty lines against a dependency with its own channel
/// crate and clock, for the same queue.
pub mod sink {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
    use std::sync::{Mutex, OnceLock};
    use std::time::{Duration, Instant};

    /// Lines the queue holds: a burst of 8,192 lines (about 2 MiB) waits
    /// for a slow stderr; beyond it lines are dropped.
    pub const QUEUE_LINES: usize = 8192;

    struct Queue {
        tx: Mutex<SyncSender<Vec<u8>>>,
        queued: AtomicUsize,
    }

    static QUEUE: OnceLock<Queue> = OnceLock::new();
    static DROPPED: AtomicU64 = AtomicU64::new(0);

    fn queue() -> &'static Queue {
        QUEUE.get_or_init(|| {
            let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_LINES);
            let spawned = std::thread::Builder::new().name("numaplace-log".into()).spawn(move || {
                let stderr = std::io::stderr();
                for line in rx {
                    let mut out = stderr.lock();
                    let _ = out.write_all(&line);
                    let _ = out.flush();
                    drop(out);
                    if let Some(q) = QUEUE.get() {
                        q.queued.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            });
            if spawned.is_err() {
                // No thread: the queue fills and every line is counted
                // as dropped, never written on a request's path.
            }
            Queue { tx: Mutex::new(tx), queued: AtomicUsize::new(0) }
        })
    }

    /// Lines dropped because the queue was full since the start.
    pub fn dropped_lines() -> u64 {
        DROPPED.load(Ordering::Relaxed)
    }

    /// One event's line, queued whole when the writer is dropped.
    pub struct Line(Vec<u8>);

    /// The subscriber's `MakeWriter`.
    pub fn writer() -> Line {
        Line(Vec::with_capacity(256))
    }

    impl Write for Line {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Drop for Line {
        fn drop(&mut self) {
            if self.0.is_empty() {
                return;
            }
            let q = queue();
            let line = std::mem::take(&mut self.0);
            q.queued.fetch_add(1, Ordering::AcqRel);
            let sent = match q.tx.lock() {
                Ok(tx) => tx.try_send(line),
                Err(p) => p.into_inner().try_send(line),
            };
            if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = sent {
                q.queued.fetch_sub(1, Ordering::AcqRel);
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits (at most `within`) for the queued lines to be written: a
    /// stop's last lines reach stderr unless stderr is blocked.
    pub fn flush(within: Duration) {
        let Some(q) = QUEUE.get() else { return };
        let until = Instant::now() + within;
        while q.queued.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

tokio::task_local! {
    static WHO: Arc<OnceLock<Principal>>;
}

/// Records that the request running now proved a credential in a web
/// form's field (the forms check theirs in the handler): its access line
/// and its span, hence its audit lines, name it.
pub(crate) fn authenticated(who: &Principal) {
    let _ = WHO.try_with(|w| w.set(who.clone()));
    let span = tracing::Span::current();
    span.record("principal", who.name());
    span.record("role", who.role());
}

/// What an error answer was, for its access line: its code and the VM it
/// names (inserted in the response's extensions where errors become
/// answers).
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The error shape's code.
    pub code: String,
    /// The VM, when known.
    pub vm: Option<String>,
}

/// Where a request came from: the peer (the TCP connection's other end)
/// and, when the peer is a trusted proxy, the client it forwarded for.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The connection's peer address (`-` in-process).
    pub peer: String,
    /// `X-Forwarded-For`'s client, from a trusted proxy only.
    pub forwarded: Option<String>,
}

/// The client a trusted proxy forwarded for: the rightmost address of
/// `X-Forwarded-For` that is not itself a trusted proxy (a client may
/// put anything at the left; the proxy appends the address it saw).
/// `None` when the peer is not a trusted proxy (the header is the
/// client's own word then) or the header is absent.
pub fn forwarded_for(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpAddr]) -> Option<String> {
    let peer = peer?;
    if !trusted.contains(&peer) {
        return None;
    }
    let mut hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    while let Some(last) = hops.pop() {
        match last.parse::<IpAddr>() {
            Ok(ip) if trusted.contains(&ip) => continue,
            Ok(ip) => return Some(ip.to_string()),
            Err(_) => return Some("invalid".to_string()),
        }
    }
    None
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

/// The access lines of refused unauthenticated requests written per
/// second; the rest are counted (`numaplace_access_lines_sampled_out_total`)
/// and not written, so a flood of strangers cannot fill the disk (before,
/// 30 MB in 10 s) nor bury the lines that matter.
pub const REFUSED_LINES_PER_SECOND: u64 = 10;

/// Whether this refused unauthenticated request's line is written: the
/// first [`REFUSED_LINES_PER_SECOND`] of each second.
fn sample_refusal() -> bool {
    static SECOND: AtomicU64 = AtomicU64::new(0);
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    if SECOND.swap(now, Ordering::AcqRel) != now {
        COUNT.store(0, Ordering::Release);
    }
    COUNT.fetch_add(1, Ordering::AcqRel) < REFUSED_LINES_PER_SECOND
}

/// The principal the request's `Authorization: Bearer` names, and
/// whether it presented one the server does not know.
pub(crate) fn principal_of(headers: &HeaderMap, credentials: &Credentials) -> (Principal, bool) {
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => (Principal::Anonymous, false),
        Some(_) if credentials.is_empty() => (Principal::Anonymous, false),
        Some(t) => match credentials.lookup(t.trim()) {
            Some(p) => (p.clone(), false),
            None => (Principal::Anonymous, true),
        },
    }
}

/// A credential the request presented that the server does not know
/// (the request extension `edge::auth` answers 401 for).
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnknownCredential;

/// The outermost layer: gives the request its id and span, decides the
/// principal from the `Authorization` header and where it came from,
/// counts it in flight, and writes its access line once answered.
pub(crate) async fn access(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(req.headers());
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let from = Peer {
        peer: peer.map_or_else(|| "-".to_string(), |p| p.to_string()),
        forwarded: forwarded_for(peer.map(|p| p.ip()), req.headers(), &st.trusted_proxies),
    };
    let (principal, unknown) = principal_of(req.headers(), &st.credentials());
    let who = Arc::new(OnceLock::new());
    let span = tracing::info_span!(
        "request",
        id = %id,
        principal = tracing::field::Empty,
        role = tracing::field::Empty,
        peer = %from.peer,
        forwarded_for = tracing::field::Empty,
    );
    if let Some(f) = &from.forwarded {
        span.record("forwarded_for", f.as_str());
    }
    if principal != Principal::Anonymous {
        let _ = who.set(principal.clone());
        span.record("principal", principal.name());
        span.record("role", principal.role());
    } else if st.credentials().is_empty() || !path.starts_with("/ui/") {
        // Only the web forms can still prove a credential, in their handler.
        span.record("principal", principal.name());
        span.record("role", principal.role());
    }
    req.extensions_mut().insert(principal);
    if unknown {
        req.extensions_mut().insert(UnknownCredential);
    }
    st.in_flight.fetch_add(1, Ordering::AcqRel);
    let mut resp = WHO.scope(who.clone(), next.run(req).instrument(span.clone())).await;
    st.in_flight.fetch_sub(1, Ordering::AcqRel);
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    let principal = who.get().cloned().unwrap_or(Principal::Anonymous);
    let status = resp.status().as_u16();
    let outcome = resp.extensions().get::<Outcome>().cloned().unwrap_or_default();
    // A stranger's refusal (no or a wrong credential, a Host or origin
    // refused) is sampled: counted always, written a few a second.
    let stranger = status == 401
        || (principal == Principal::Anonymous && matches!(outcome.code.as_str(), "host-not-allowed" | "cross-origin"));
    if stranger {
        st.service.metrics.refused_unauthenticated();
        if !sample_refusal() {
            st.service.metrics.access_line_sampled_out();
            return resp;
        }
    }
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let _in = span.enter();
    let code = (!outcome.code.is_empty()).then_some(outcome.code.as_str());
    tracing::info!(
        target: "numaplace::access",
        method = %method,
        path = %path,
        status,
        latency_ms = (latency_ms * 1000.0).round() / 1000.0,
        principal = principal.name(),
        role = principal.role(),
        peer = %from.peer,
        forwarded_for = from.forwarded.as_deref(),
        request_id = %id,
        code,
        vm = outcome.vm.as_deref(),
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
    fn a_forwarded_client_is_believed_only_from_a_trusted_proxy() {
        let proxy: IpAddr = "10.0.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let inner: IpAddr = "10.0.0.2".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("6.6.6.6, 203.0.113.9, 10.0.0.2"));
        let trusted = [proxy, inner];
        assert_eq!(forwarded_for(Some(proxy), &h, &trusted).as_deref(), Some("203.0.113.9"), "the rightmost untrusted");
        assert_eq!(forwarded_for(Some("192.0.2.1".parse().unwrap_or(proxy)), &h, &trusted), None, "a client's claim");
        assert_eq!(forwarded_for(Some(proxy), &HeaderMap::new(), &trusted), None);
        h.insert("x-forwarded-for", HeaderValue::from_static("<script>"));
        assert_eq!(forwarded_for(Some(proxy), &h, &trusted).as_deref(), Some("invalid"), "never logged as given");
    }

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
