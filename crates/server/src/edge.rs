//! The checks a request passes before any handler sees it, for a server
//! reachable by browsers and by strangers (docs/serve.md, "Hardening"):
//!
//! - [`guard`]: the `Host` header names this server (DNS rebinding), and a
//!   browser's state-changing request comes from the server's own pages
//!   (`Sec-Fetch-Site`, `Origin`);
//! - [`auth`]: the token, decided from the headers alone; an
//!   unauthenticated body is never read into memory;
//! - [`body`]: the route's content type and body cap, and the time the
//!   body may take to arrive, before the body is handed on whole;
//! - [`Q`]: query strings read strictly (an unknown parameter is refused),
//!   their errors in the API's error shape;
//! - the web forms' CSRF token ([`session`], [`csrf_matches`]).
//!
//! Every refusal here answers `{"error": {"code", "message"}}` with a
//! status of its own.

use crate::app::AppState;
use crate::service::ApiError;
use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use numaplace_wire::fleet::ErrorDoc;
use std::time::Duration;

/// Largest topology upload: an hwloc XML export of a 24-node host is a
/// few hundred KiB, a sysfs tarball a few MiB.
pub const MAX_HOST_BODY: usize = 16 << 20;
/// Largest agent report of its domains (a few KiB per domain).
pub const MAX_REPORT_BODY: usize = 4 << 20;
/// Largest VM request, move or host patch: a request is a few hundred
/// bytes; a long host list in its constraints stays far below this.
pub const MAX_REQUEST_BODY: usize = 256 << 10;
/// Largest web form.
pub const MAX_FORM_BODY: usize = 16 << 10;
/// Largest body of a route that takes none (a GET, a DELETE).
pub const MAX_OTHER_BODY: usize = 4 << 10;

/// How long a request's body may take to arrive unless `--body-timeout`
/// says otherwise: a 16 MiB topology over a slow management link fits,
/// a client trickling a byte a second does not hold a connection longer.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(20);

/// The name of the web view's session cookie, whose value the forms
/// carry as their CSRF token.
pub const SESSION_COOKIE: &str = "numaplace_session";

/// An error answer in the API's shape.
pub(crate) fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(ErrorDoc::new(code, message))).into_response()
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether `host` (a `Host` header's value) is one this server answers
/// to: an IP address (a DNS rebinding attack needs a name), `localhost`,
/// or a name the operator listed (`--allowed-host NAME` for any port,
/// `NAME:PORT` for one).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let (name, port) = split_host(host);
    if name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    allowed.iter().any(|a| {
        let (an, ap) = split_host(a);
        an.eq_ignore_ascii_case(name) && (ap.is_none() || ap == port)
    })
}

/// `name[:port]` or `[v6][:port]` into the name (brackets dropped) and
/// the port.
fn split_host(host: &str) -> (&str, Option<&str>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((ip, tail)) => (ip, tail.strip_prefix(':')),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((n, p)) if !n.contains(':') => (n, Some(p)),
        _ => (host, None),
    }
}

/// The `Host` check for every request, and for requests that change
/// state the browser's word on where they come from: a page of another
/// origin may submit a form or send a `text/plain` fetch without any
/// preflight, and must be refused before anything is read.
pub(crate) async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if host.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "host-not-allowed", "the request has no Host header");
    }
    if !host_allowed(host, &st.allowed_hosts) {
        let shown: String = host.chars().take(100).collect();
        return refuse(
            StatusCode::BAD_REQUEST,
            "host-not-allowed",
            &format!(
                "Host `{shown}` is not a name this server answers to (IP addresses and localhost are; name others \
                 with serve --allowed-host)"
            ),
        );
    }
    if changes_state(req.method()) {
        if let Some(why) = cross_origin(req.headers(), host) {
            return refuse(StatusCode::FORBIDDEN, "cross-origin", &why);
        }
    }
    next.run(req).await
}

/// Why a state-changing request is refused as coming from another
/// origin, when it is. A request without `Sec-Fetch-Site` or `Origin` is
/// not a browser's (curl, the agent) and passes: the token guards it.
fn cross_origin(headers: &HeaderMap, host: &str) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return Some(format!(
                "a browser sent this from a page of another site (Sec-Fetch-Site: {site}); changes are taken only \
                 from this server's own pages"
            ));
        }
    }
    if let Some(origin) = header("origin") {
        let own = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if own.is_none_or(|o| !o.eq_ignore_ascii_case(host)) {
            let shown: String = origin.chars().take(100).collect();
            return Some(format!(
                "a browser sent this from a page of {shown}, not of this server; changes are taken only from this \
                 server's own pages"
            ));
        }
    }
    None
}

/// Writes need the token when one is set; reads never do (they reveal
/// placements, not secrets, and the web view reads them). Decided from
/// the headers alone: a refused body is discarded as it arrives (bounded
/// in size and time), never held, so the 401 goes out at once and
/// clients still read it rather than a broken pipe.
pub(crate) async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    // The web view's forms cannot set headers: they carry the token in a
    // field, which their handlers check.
    let write = changes_state(req.method()) && !req.uri().path().starts_with("/ui/") && !asks_only(req.uri().path());
    if let (true, Some(token)) = (write, &st.token) {
        if !bearer_matches(req.headers(), token) {
            let timeout = st.body_timeout;
            tokio::spawn(discard(req.into_body(), MAX_HOST_BODY, timeout));
            return refuse(StatusCode::UNAUTHORIZED, "unauthorized", "writes need `Authorization: Bearer <token>`");
        }
    }
    next.run(req).await
}

/// The POST routes that change nothing (an evaluation, Kubernetes'
/// filter and prioritize): reads, whatever their method. Kubernetes'
/// extender configuration cannot send a bearer token, and these answer
/// only what `GET /v1/hosts` already shows.
pub(crate) fn asks_only(path: &str) -> bool {
    matches!(path, "/v1/evaluate" | "/v1/k8s/filter" | "/v1/k8s/prioritize")
}

/// Whether the request carries `Authorization: Bearer TOKEN`.
pub(crate) fn bearer_matches(headers: &header::HeaderMap, token: &str) -> bool {
    let given =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

/// Compares without stopping at the first difference, so the time taken
/// does not tell how much of a guessed token was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads and drops a body, at most `cap` bytes for at most `timeout`.
async fn discard(body: Body, cap: usize, timeout: Duration) {
    let mut body = body;
    let mut seen = 0usize;
    let _ = tokio::time::timeout(timeout, async {
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > cap {
                break;
            }
        }
    })
    .await;
}

/// What a route takes as its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON document: `Content-Type: application/json` only.
    Json,
    /// A topology in any format the readers take (sniffed).
    Topology,
    /// A web form.
    Form,
    /// No body expected.
    None,
}

/// The body a route (its pattern, as matched) takes, and its cap.
pub fn body_of(method: &Method, route: &str) -> (BodyKind, usize) {
    match (method.as_str(), route) {
        ("PUT", "/v1/hosts/{name}") => (BodyKind::Topology, MAX_HOST_BODY),
        ("PUT", "/v1/hosts/{name}/domains") => (BodyKind::Json, MAX_REPORT_BODY),
        // A host list, or Kubernetes' whole node objects (docs/adapters.md
        // recommends `nodeCacheCapable`, which sends names only).
        ("POST", "/v1/evaluate" | "/v1/k8s/filter" | "/v1/k8s/prioritize") => (BodyKind::Json, MAX_REPORT_BODY),
        ("PATCH", "/v1/hosts/{name}") | ("POST", "/v1/placements") | ("POST", "/v1/placements/{vm}/move") => {
            (BodyKind::Json, MAX_REQUEST_BODY)
        }
        (_, r) if r.starts_with("/ui/") => (BodyKind::Form, MAX_FORM_BODY),
        _ => (BodyKind::None, MAX_OTHER_BODY),
    }
}

/// Whether a route (its pattern, as matched) reads query parameters;
/// each that does reads them strictly ([`Q`]).
pub fn takes_query(method: &Method, route: &str) -> bool {
    matches!(
        (method.as_str(), route),
        ("GET", "/")
            | ("GET", "/v1/hosts")
            | ("PUT" | "DELETE", "/v1/hosts/{name}")
            | ("GET" | "POST", "/v1/placements")
            | ("GET", "/v1/placements/{vm}")
            | ("POST", "/v1/placements/{vm}/move")
    )
}

/// The route's content type and body cap, then the body itself, read
/// within `--body-timeout` and handed on whole: a handler never waits on
/// a slow client, and the request's deadline counts the server's work
/// only. Runs after [`auth`].
pub(crate) async fn body(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string()).unwrap_or_default();
    // A route that reads no query refuses one too: `?force=true` on a
    // route that has no such parameter must not pass for done.
    if req.uri().query().is_some_and(|q| !q.is_empty()) && !takes_query(req.method(), &route) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "bad-request",
            &format!("query: {} {route} takes no query parameters", req.method()),
        );
    }
    let (kind, cap) = body_of(req.method(), &route);
    let length =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let empty = length == Some(0) || (length.is_none() && !req.headers().contains_key(header::TRANSFER_ENCODING));
    let media = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let wanted = match kind {
        BodyKind::Json => Some("application/json"),
        BodyKind::Form => Some("application/x-www-form-urlencoded"),
        BodyKind::Topology | BodyKind::None => None,
    };
    // An empty body may come without a type (a move without
    // constraints); a typed one must be the route's.
    if let Some(w) = wanted {
        let ok = match &media {
            Some(m) => m == w,
            None => empty,
        };
        if !ok {
            let timeout = st.body_timeout;
            tokio::spawn(discard(req.into_body(), cap, timeout));
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                &format!(
                    "{route} takes Content-Type: {w}, not {}",
                    media.as_deref().map_or("none".to_string(), |m| m.chars().take(100).collect())
                ),
            );
        }
    }
    if length.is_some_and(|l| l > cap as u64) {
        let timeout = st.body_timeout;
        tokio::spawn(discard(req.into_body(), 0, timeout));
        return too_large(&route, cap);
    }
    if empty {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(st.body_timeout, axum::body::to_bytes(body, cap)).await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            // `to_bytes` fails on the cap or on a broken connection.
            if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
                return too_large(&route, cap);
            }
            return refuse(StatusCode::BAD_REQUEST, "bad-request", &format!("reading the body: {e}"));
        }
        Err(_) => {
            let mut resp = refuse(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                &format!("the body did not arrive within {} ms (serve --body-timeout)", st.body_timeout.as_millis()),
            );
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return resp;
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn too_large(route: &str, cap: usize) -> Response {
    let mut resp =
        refuse(StatusCode::PAYLOAD_TOO_LARGE, "too-large", &format!("{route} takes a body of at most {cap} bytes"));
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A query string read into `T` strictly: an unknown parameter or a bad
/// value is a 400 in the API's error shape naming it (a misspelt
/// `label=` for `labels=` must not pass as "no labels").
pub struct Q<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(query).map(Q).map_err(|e| ApiError::BadRequest(format!("query: {e}")))
    }
}

/// A path's parameters read into `T`, a bad one (a segment that is not
/// UTF-8 once decoded) a 400 in the API's error shape rather than the
/// framework's plain text.
pub struct P<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for P<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(t)) => Ok(P(t)),
            Err(e) => Err(ApiError::BadRequest(format!("path: {}", e.body_text()))),
        }
    }
}

/// The web view's session: the value of its cookie (the CSRF token its
/// forms carry), and the `Set-Cookie` to send when the request had none.
pub fn session(headers: &HeaderMap) -> (String, Option<HeaderValue>) {
    if let Some(v) =
        cookie(headers, SESSION_COOKIE).filter(|v| v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return (v.to_string(), None);
    }
    let token = random_hex();
    // SameSite=Strict: a page of another site never sends it, so its
    // forms cannot carry the matching token; HttpOnly: no script reads it.
    let set = HeaderValue::from_str(&format!("{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")).ok();
    (token, set)
}

/// Whether a form's `csrf` field is its session cookie's value.
pub fn csrf_matches(headers: &HeaderMap, given: Option<&str>) -> bool {
    match (cookie(headers, SESSION_COOKIE), given) {
        (Some(c), Some(g)) => !c.is_empty() && constant_time_eq(c.as_bytes(), g.as_bytes()),
        _ => false,
    }
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// 128 random bits as hex, from the kernel.
fn random_hex() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // No /dev/urandom: time and address bits, still unguessable
        // enough to tie a form to its page (the cookie is never sent to
        // another site).
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let x = t ^ ((&bytes as *const _ as usize as u128) << 64) ^ u128::from(std::process::id());
        bytes = x.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_ip_addresses_localhost_and_listed_names_are_hosts() {
        let allowed = vec!["fleet.example".to_string(), "other.example:8080".to_string()];
        for ok in
            ["127.0.0.1:7478", "[::1]:7478", "10.0.0.5", "localhost:7478", "fleet.example:1", "other.example:8080"]
        {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in ["evil.test:7478", "other.example:9090", "127.0.0.1.nip.io:7478", "localhost.evil:1"] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn browsers_sending_from_other_origins_are_refused() {
        let mut h = HeaderMap::new();
        assert!(cross_origin(&h, "127.0.0.1:7478").is_none(), "curl sends neither header");
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:7478"));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(cross_origin(&h, "127.0.0.1:7478").is_none());
        h.insert("sec-fetch-site", HeaderValue::from_static("same-site"));
        assert!(cross_origin(&h, "127.0.0.1:7478").is_some(), "another port is another origin");
        h.remove("sec-fetch-site");
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:9999"));
        assert!(cross_origin(&h, "127.0.0.1:7478").is_some());
        h.insert("origin", HeaderValue::from_static("null"));
        assert!(cross_origin(&h, "127.0.0.1:7478").is_some());
    }

    #[test]
    fn a_form_matches_only_its_own_session() {
        let (token, set) = session(&HeaderMap::new());
        assert!(set.is_some());
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(&format!("a=b; {SESSION_COOKIE}={token}")).unwrap());
        assert_eq!(session(&h), (token.clone(), None));
        assert!(csrf_matches(&h, Some(&token)));
        assert!(!csrf_matches(&h, Some("0123")));
        assert!(!csrf_matches(&h, None));
        assert!(!csrf_matches(&HeaderMap::new(), Some(&token)));
    }
}
