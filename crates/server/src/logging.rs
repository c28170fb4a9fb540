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

use axum::http::{header, HeaderMap, HeaderName};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

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
    pub(crate) static WHO: Arc<OnceLock<Principal>>;
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
pub(crate) fn request_id(headers: &HeaderMap) -> String {
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
pub(crate) fn fresh_id() -> String {
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
pub(crate) fn sample_refusal() -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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
