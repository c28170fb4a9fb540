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

use crate::credentials::{always_open, authorize, Asked, Decision, Forbidden, Principal};
use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use numaplace_wire::fleet::ErrorDoc;
use std::time::Duration;

pub use crate::state::{DEFAULT_BODY_TIMEOUT, MAX_HOST_BODY};
/// Largest agent report of its domains (a few KiB per domain).
pub const MAX_REPORT_BODY: usize = 4 << 20;
/// Largest VM request, move or host patch: a request is a few hundred
/// bytes; a long host list in its constraints stays far below this.
pub const MAX_REQUEST_BODY: usize = 256 << 10;
/// Largest web form.
pub const MAX_FORM_BODY: usize = 16 << 10;
/// Largest body of a route that takes none (a GET, a DELETE).
pub const MAX_OTHER_BODY: usize = 4 << 10;

/// The name of the web view's session cookie, whose value the forms
/// carry as their CSRF token.
pub const SESSION_COOKIE: &str = "numaplace_session";

/// An error answer in the API's shape.
pub(crate) fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    let mut resp = (status, axum::Json(ErrorDoc::new(code, message))).into_response();
    resp.extensions_mut().insert(crate::logging::Outcome { code: code.to_string(), vm: None });
    resp
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
    // The probes answer whatever the Host: a load balancer's HTTP/1.0
    // check sends none, or the balancer's own address, and they reveal
    // nothing a rebound page could use.
    if matches!(*req.method(), Method::GET | Method::HEAD) && matches!(req.uri().path(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
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

/// Every request's credential against what it asks ([`authorize`]):
/// a change without a credential, or any request with one the server does
/// not know, is 401; a credential asking beyond its role is 403 with a
/// typed code (`read-only-credential`, `other-host`, `not-for-agents`).
/// Decided from the headers, the route and its host alone: a refused
/// body is discarded as it arrives (bounded in size and time), never
/// held, so the answer goes out at once and clients still read it rather
/// than a broken pipe.
pub(crate) async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let credentials = st.credentials();
    let route = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string()).unwrap_or_default();
    // The web view's forms cannot set headers: they carry the credential
    // in a field, which their handlers check.
    if credentials.is_empty() || (changes_state(req.method()) && route.starts_with("/ui/")) {
        return next.run(req).await;
    }
    let who = req.extensions().get::<Principal>().cloned().unwrap_or(Principal::Anonymous);
    let unknown = req.extensions().get::<crate::logging::UnknownCredential>().is_some();
    let (mut parts, body) = req.into_parts();
    let params = match axum::extract::RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(p) => p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>(),
        Err(_) => Vec::new(),
    };
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let host_query = match (parts.method.as_str(), route.as_str()) {
        ("GET", "/v1/placements") => {
            serde_urlencoded::from_str::<Vec<(String, String)>>(parts.uri.query().unwrap_or(""))
                .ok()
                .and_then(|q| q.into_iter().find(|(k, _)| k == "host").map(|(_, v)| v))
        }
        _ => None,
    };
    let asked =
        Asked { method: parts.method.as_str(), route: &route, host: param("name"), host_query: host_query.as_deref() };
    let decision = if unknown && !always_open(&route) {
        Decision::Unauthenticated
    } else {
        authorize(&who, &asked, true, st.anonymous_reads)
    };
    let vm = param("vm").map(str::to_string);
    match decision {
        Decision::Allow => next.run(Request::from_parts(parts, body)).await,
        Decision::AllowOnHost(host) => {
            parts.extensions.insert(OnlyHost(host));
            next.run(Request::from_parts(parts, body)).await
        }
        Decision::Unauthenticated => {
            let timeout = st.body_timeout;
            tokio::spawn(discard(body, MAX_HOST_BODY, timeout));
            let why = if unknown {
                "the credential is not one this server knows (Authorization: Bearer <token>)"
            } else if changes_state(&parts.method) {
                "writes need a credential: Authorization: Bearer <token>"
            } else {
                "reads need a credential on this server (serve --anonymous-reads false): Authorization: Bearer <token>"
            };
            let mut resp = refuse(StatusCode::UNAUTHORIZED, "unauthorized", why);
            resp.extensions_mut().insert(crate::logging::Outcome { code: "unauthorized".into(), vm });
            resp
        }
        Decision::Forbidden(f) => {
            let timeout = st.body_timeout;
            tokio::spawn(discard(body, MAX_HOST_BODY, timeout));
            let f = match (f, vm.clone()) {
                (Forbidden::OtherHost { own, asked, vm: None }, Some(vm)) => {
                    Forbidden::OtherHost { own, asked, vm: Some(vm) }
                }
                (f, _) => f,
            };
            let mut resp = ApiError::Forbidden(f).into_response();
            // The access line names the VM of the path, whatever the code.
            if let (Some(o), Some(vm)) = (resp.extensions_mut().get_mut::<crate::logging::Outcome>(), vm) {
                o.vm.get_or_insert(vm);
            }
            resp
        }
    }
}

/// An agent's read of a placement: the answer must be about a VM on this
/// host (the handler checks, since only the placement says where it is).
#[derive(Clone, Debug)]
pub struct OnlyHost(pub String);

/// Compares without stopping at the first difference, so the time taken
/// does not tell how much of a guessed value was right.
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
        ("PATCH", "/v1/hosts/{name}") | ("POST", "/v1/placements" | "/v1/placements/{vm}/move" | "/v1/k8s/bind") => {
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
    // The body's share of `--max-body-memory`, held until the request is
    // answered: the bodies held at once never exceed it, whatever the
    // number of clients (50 uploads of 14 MiB once held 720 MiB). A body
    // that cannot have its share within the body timeout is 503.
    let share = length.map_or(cap, |l| l as usize).min(cap).max(1);
    let started = tokio::time::Instant::now();
    let permit = match tokio::time::timeout(
        st.body_timeout,
        st.body_budget.clone().acquire_many_owned(u32::try_from(share).unwrap_or(u32::MAX)),
    )
    .await
    {
        Ok(Ok(p)) => p,
        _ => {
            let timeout = st.body_timeout;
            tokio::spawn(discard(req.into_body(), cap, timeout));
            let mut resp = refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                &format!(
                    "the server holds {} bytes of request bodies already (serve --max-body-memory); try again",
                    st.body_budget_bytes
                ),
            );
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
    };
    let left = st.body_timeout.saturating_sub(started.elapsed());
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(left, collect(body, share, cap)).await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(None)) => return too_large(&route, cap),
        Ok(Err(Some(e))) => {
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
    if kind == BodyKind::Json {
        if let Err(why) = strict_json_object(&bytes, &format!("the body of {} {route}", parts.method)) {
            return refuse(StatusCode::BAD_REQUEST, "bad-request", &why);
        }
    }
    let resp = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    drop(permit);
    resp
}

/// A body read whole into one buffer of the announced size (`expected`),
/// so the server holds it once: collecting its chunks and then joining
/// them held it twice. `Err(None)`: over `cap`; `Err(Some)`: the
/// connection failed.
async fn collect(mut body: Body, expected: usize, cap: usize) -> Result<axum::body::Bytes, Option<axum::Error>> {
    let mut buf: Vec<u8> = Vec::with_capacity(expected.min(cap));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Some)?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > cap {
                return Err(None);
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(axum::body::Bytes::from(buf))
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
        serde_urlencoded::from_str(query).map(Q).map_err(|e| ApiError::BadRequest(query_error::<T>(query, &e)))
    }
}

/// A query's error naming the parameter: serde's words for a bad value
/// (`invalid digit found in string`) name none, so the parameters are
/// read one at a time to find the one at fault.
fn query_error<T: serde::de::DeserializeOwned>(query: &str, e: &serde_urlencoded::de::Error) -> String {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split('=').next().unwrap_or("");
        if let Err(one) = serde_urlencoded::from_str::<T>(pair) {
            let key: String = serde_urlencoded::from_str::<Vec<(String, String)>>(pair)
                .ok()
                .and_then(|v| v.into_iter().next().map(|(k, _)| k))
                .unwrap_or_else(|| key.to_string());
            let one = one.to_string();
            // An unknown parameter's error names it already.
            if one.contains(&format!("`{key}`")) {
                return format!("query: {one}");
            }
            let shown: String = key.chars().take(100).collect();
            return format!("query: {shown}: {one}");
        }
    }
    format!("query: {e}")
}

/// A JSON value read only to check it, `.0` its path for errors
/// (`strict_json_object`): every object's keys unique.
struct Strict<'p>(&'p str);

impl<'de> serde::de::DeserializeSeed<'de> for Strict<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Strict<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let path = format!("{}[{i}]", self.0);
            if seq.next_element_seed(Strict(&path))?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.0.is_empty() { key.clone() } else { format!("{}.{key}", self.0) };
            if !seen.insert(key) {
                return Err(serde::de::Error::custom(format!("`{path}` is given twice")));
            }
            map.next_value_seed(Strict(&path))?;
        }
        Ok(())
    }
}

/// A JSON body read strictly before any handler: the document is an
/// object (`[]` once passed for an empty one: a move went through, a
/// PATCH bumped a generation), and no object in it names a key twice
/// (which of the two a parser keeps is its own choice). `what` names the
/// body in the error.
pub fn strict_json_object(body: &[u8], what: &str) -> Result<(), String> {
    use serde::de::DeserializeSeed;
    let first = body.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first != Some(b'{') {
        let found = match first {
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b'n') => "null",
            Some(b't' | b'f') => "a boolean",
            Some(_) => "a number or something else",
            None => "nothing",
        };
        return Err(format!("{what}: expected a JSON object, found {found}"));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    Strict("").deserialize(&mut de).and_then(|()| de.end()).map_err(|e| format!("{what}: {e}"))
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
    fn json_bodies_are_objects_without_a_key_given_twice() {
        assert!(strict_json_object(br#" {"a": [1, {"b": 2}], "c": {"b": 3}} "#, "body").is_ok());
        let e = strict_json_object(b"[]", "the body of PATCH /v1/hosts/{name}").unwrap_err();
        assert_eq!(e, "the body of PATCH /v1/hosts/{name}: expected a JSON object, found an array");
        let e = strict_json_object(br#"{"a": {"b": 1, "b": 2}}"#, "body").unwrap_err();
        assert!(e.starts_with("body: `a.b` is given twice"), "{e}");
        let e = strict_json_object(br#"{"a": [{"x": 1}, {"x": 1, "x": 2}]}"#, "body").unwrap_err();
        assert!(e.starts_with("body: `a[1].x` is given twice"), "{e}");
        assert!(strict_json_object(b"{} {}", "body").is_err(), "trailing data");
        assert!(strict_json_object(b"null", "body").unwrap_err().ends_with("found null"));
    }

    #[test]
    fn a_bad_query_value_names_its_parameter() {
        type Page = numaplace_wire::fleet::PageQuery;
        let q = "after=x&limit=ten";
        let e = serde_urlencoded::from_str::<Page>(q).unwrap_err();
        assert_eq!(query_error::<Page>(q, &e), "query: limit: invalid digit found in string");
        let q = "colour=red";
        let e = serde_urlencoded::from_str::<Page>(q).unwrap_err();
        let m = query_error::<Page>(q, &e);
        assert!(m.starts_with("query: unknown field `colour`"), "{m}");
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
