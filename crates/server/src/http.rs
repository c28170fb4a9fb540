//! The HTTP API (docs/serve.md, `/openapi.json`): routes, the token
//! check on writes, body limits, and errors as JSON with a status per
//! kind. Every handler hands its work to [`Service`] on a blocking thread:
//! the store's clients are synchronous.
//!
//! Layers, outermost first: the access log and request id
//! (`logging::access`), the `Host` and origin checks (`edge::guard`);
//! then, on the routes, the token check (`edge::auth`), the content type,
//! body cap and body timeout (`edge::body`), the request's deadline
//! ([`deadline`]), the handlers.

use crate::edge::{self, P, Q};
use crate::service::{ApiError, HostFilter, HostUpload, Service};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use numaplace_emit::qemu;
use numaplace_libvirt::domain as libvirt;
use numaplace_store::deadline::Deadline;
use numaplace_wire::fleet::{
    ErrorDoc, GetQuery, HostListQuery, HostPageDoc, HostPatchDoc, HostQuery, PageQuery, PlaceQuery, PlacementPageDoc,
    RemoveHostQuery,
};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

pub use crate::edge::{MAX_HOST_BODY, MAX_REPORT_BODY, MAX_REQUEST_BODY};

/// Default and largest page of hosts or placements.
const PAGE: usize = 500;
const MAX_PAGE: usize = 10_000;

/// The OpenAPI document, kept beside the code it describes (a test checks
/// that every route is in it).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The service.
    pub service: Arc<Service>,
    /// The token writes must carry, when one is set.
    pub token: Option<Arc<str>>,
    /// How long a request may take before it is answered 503.
    pub request_timeout: Duration,
    /// Requests being answered now (the drain at stop reports them).
    pub in_flight: Arc<AtomicUsize>,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// Names besides IP addresses and `localhost` that the `Host` header
    /// may carry (`--allowed-host`).
    pub allowed_hosts: Arc<[String]>,
}

impl AppState {
    /// The state of a server over `service`, with `token` and the
    /// default deadline.
    pub fn new(service: Arc<Service>, token: Option<Arc<str>>) -> AppState {
        AppState {
            service,
            token,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            in_flight: Arc::default(),
            body_timeout: edge::DEFAULT_BODY_TIMEOUT,
            allowed_hosts: Arc::from(Vec::new()),
        }
    }
}

/// A request's deadline unless `--request-timeout` says otherwise. A
/// placement takes milliseconds, so this is only ever reached when the
/// database stalls; it is shorter than the usual client and proxy
/// timeouts (10 s and more), so the client hears 503 and retries instead
/// of giving up on a request that might still commit.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The API's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(crate::web::fleet))
        .route("/hosts/{name}", get(crate::web::host))
        .route("/vms/{name}", get(crate::web::vm))
        .route("/ui/place", post(crate::web::place))
        .route("/ui/vms/{name}/delete", post(crate::web::delete_vm))
        .route("/ui/vms/{name}/move", post(crate::web::move_vm))
        .route("/ui/hosts/{name}/{action}", post(crate::web::drain))
        .route("/static/{file}", get(crate::web::asset))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }))
        .route("/metrics", get(metrics))
        .route("/v1/hosts", get(list_hosts))
        .route("/v1/hosts/{name}", put(put_host).patch(patch_host).get(get_host).delete(delete_host))
        .route("/v1/hosts/{name}/drain", post(drain).delete(undrain))
        .route("/v1/hosts/{name}/domains", put(report_domains))
        .route("/v1/placements", post(place).get(list_placements))
        .route("/v1/placements/{vm}", get(get_placement).delete(delete_placement))
        .route("/v1/placements/{vm}/move", post(move_vm))
        // Innermost first: the body is read (after the token check) before
        // the deadline starts, so a slow upload is the body timeout's
        // business, not a 503. `edge::body` caps every route's body.
        .route_layer(middleware::from_fn_with_state(state.clone(), deadline))
        .route_layer(middleware::from_fn_with_state(state.clone(), edge::body))
        .route_layer(middleware::from_fn_with_state(state.clone(), edge::auth))
        // Outermost of the route layers: names the matched route for the
        // request counters, whatever the layers inside answer.
        .route_layer(middleware::from_fn(crate::metrics::matched))
        .layer(DefaultBodyLimit::max(MAX_HOST_BODY))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not-found", "no such route (see /openapi.json)") })
        .method_not_allowed_fallback(|| async {
            error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "the route takes other methods (see /openapi.json)",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), edge::guard))
        .layer(middleware::from_fn_with_state(state.clone(), crate::metrics::count))
        .layer(middleware::from_fn_with_state(state.clone(), crate::logging::access))
        .with_state(state)
}

tokio::task_local! {
    /// The deadline of the request this task answers: [`blocking`] hands
    /// it to the store's calls.
    static DEADLINE: Deadline;
}

/// Gives every request its deadline and answers 503 (`deadline-exceeded`,
/// with `Retry-After`) when it passes, unless the request's commit is
/// already under way: then its outcome is the answer, so a 503 never
/// stands for a change that was made (see `numaplace_store::deadline`).
async fn deadline(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let d = Deadline::after(st.request_timeout);
    let at = tokio::time::Instant::from_std(d.at());
    let run = DEADLINE.scope(d.clone(), next.run(req));
    tokio::pin!(run);
    tokio::select! {
        resp = &mut run => resp,
        () = tokio::time::sleep_until(at) => {
            if d.expire() {
                ApiError::DeadlineExceeded.into_response()
            } else {
                run.await
            }
        }
    }
}

/// `/readyz`: the store answers within the request's deadline (else the
/// deadline's 503, or the store's own).
async fn readyz(State(st): State<AppState>) -> Result<&'static str, ApiError> {
    blocking(&st, |s| s.ready()).await?;
    Ok("ready\n")
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

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(ErrorDoc::new(code, message))).into_response()
}

/// The status each kind of error answers with: the one place, for the
/// API's JSON and the web view's pages alike. Errors that are the
/// server's or the database's, not the client's, are logged here.
pub(crate) fn status(e: &ApiError) -> StatusCode {
    match e {
        ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
        ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        ApiError::Conflict { .. } | ApiError::NoHost(_) => StatusCode::CONFLICT,
        ApiError::Unplaceable(_) => StatusCode::UNPROCESSABLE_ENTITY,
        ApiError::Unavailable(m) => {
            tracing::warn!(code = "unavailable", "store unavailable or conflicts did not settle: {m}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        ApiError::DeadlineExceeded => {
            tracing::warn!(code = "deadline-exceeded", "{e}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        ApiError::Internal(m) => {
            tracing::error!(code = "internal", "{m}");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status(&self);
        let doc = match &self {
            ApiError::BadRequest(m) => ErrorDoc::new("bad-request", m.clone()),
            ApiError::NotFound(m) => ErrorDoc::new("not-found", m.clone()),
            ApiError::Conflict { code, message } => ErrorDoc::new(*code, message.clone()),
            ApiError::NoHost(r) => ErrorDoc::no_host(r),
            ApiError::Unplaceable(r) => ErrorDoc::new(r.reason.code(), r.to_string()),
            ApiError::Unavailable(m) => ErrorDoc::new("unavailable", m.clone()),
            ApiError::DeadlineExceeded => ErrorDoc::new("deadline-exceeded", self.to_string()),
            ApiError::Internal(m) => ErrorDoc::new("internal", m.clone()),
        };
        let mut resp = (status, axum::Json(doc)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        if matches!(self, ApiError::DeadlineExceeded) {
            resp.extensions_mut().insert(crate::metrics::DeadlineExceeded);
        }
        resp
    }
}

/// Runs a service call on a blocking thread (the pages' forms too), in
/// the request's span and under its deadline.
pub(crate) async fn blocking<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let svc = st.service.clone();
    let deadline = DEADLINE.try_with(Deadline::clone).ok();
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        span.in_scope(|| match deadline {
            Some(d) => numaplace_store::deadline::scope(d, || f(&svc)),
            None => f(&svc),
        })
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::Internal(format!("the request's worker failed: {e}"))))
}

fn json<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    (status, axum::Json(v)).into_response()
}

/// `/metrics`: the figures of the fleet as the store has it; when the
/// store refuses, those of the cache, with `numaplace_store_up 0` (so a
/// scrape still says what is wrong).
async fn metrics(State(st): State<AppState>) -> Response {
    let text = blocking(&st, |s| {
        let up = s.sync().is_ok();
        s.metrics.set_store_up(up);
        Ok(s.with_fleet(|f| s.metrics.render(f)))
    })
    .await;
    match text {
        Ok(t) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], t).into_response(),
        Err(e) => e.into_response(),
    }
}

fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(PAGE),
        Some(n @ 1..=MAX_PAGE) => Ok(n),
        Some(n) => Err(ApiError::BadRequest(format!("limit: expected 1 to {MAX_PAGE}, found {n}"))),
    }
}

async fn list_hosts(State(st): State<AppState>, Q(q): Q<HostListQuery>) -> Result<Response, ApiError> {
    let n = limit(q.limit)?;
    let filter = HostFilter { kind: q.kind, label: q.label, min_free_threads: None };
    let (hosts, next) = blocking(&st, move |s| s.hosts(q.after.as_deref(), n, &filter)).await?;
    Ok(json(StatusCode::OK, &HostPageDoc { hosts, next }))
}

async fn patch_host(State(st): State<AppState>, P(name): P<String>, body: Bytes) -> Result<Response, ApiError> {
    let patch: HostPatchDoc =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("host patch: {e}")))?;
    let doc = blocking(&st, move |s| s.patch_host(&name, &patch)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn put_host(
    State(st): State<AppState>,
    P(name): P<String>,
    Q(q): Q<HostQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let up = HostUpload {
        body: body.to_vec(),
        reserved_cpus: q.reserved_cpus,
        shared_cpus: q.shared_cpus,
        reserved_memory: q.reserved_memory,
        labels: q.labels,
    };
    let (doc, created) = blocking(&st, move |s| s.put_host(&name, up)).await?;
    Ok(json(if created { StatusCode::CREATED } else { StatusCode::OK }, &doc))
}

async fn get_host(State(st): State<AppState>, P(name): P<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.host(&name)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn delete_host(
    State(st): State<AppState>,
    P(name): P<String>,
    Q(q): Q<RemoveHostQuery>,
) -> Result<Response, ApiError> {
    let force = q.force.unwrap_or(false);
    blocking(&st, move |s| s.remove_host(&name, force)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn drain(State(st): State<AppState>, P(name): P<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.drain(&name, true)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn undrain(State(st): State<AppState>, P(name): P<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.drain(&name, false)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn report_domains(State(st): State<AppState>, P(name): P<String>, body: Bytes) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.report_domains(&name, &body)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn place(State(st): State<AppState>, Q(q): Q<PlaceQuery>, body: Bytes) -> Result<Response, ApiError> {
    let dry = q.dry_run.unwrap_or(false);
    let placed = blocking(&st, move |s| s.place(&body, dry)).await?;
    let status = if dry { StatusCode::OK } else { StatusCode::CREATED };
    let mut resp = json(status, &placed.doc);
    if let Some(v) = placed.doc.links.as_ref().and_then(|l| header::HeaderValue::from_str(&l.this).ok()) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

async fn list_placements(State(st): State<AppState>, Q(q): Q<PageQuery>) -> Result<Response, ApiError> {
    let n = limit(q.limit)?;
    let (placements, next) = blocking(&st, move |s| s.placements(q.host.as_deref(), q.after.as_deref(), n)).await?;
    Ok(json(StatusCode::OK, &PlacementPageDoc { placements, next }))
}

async fn get_placement(State(st): State<AppState>, P(vm): P<String>, Q(q): Q<GetQuery>) -> Result<Response, ApiError> {
    let tcg = match q.accel.as_deref() {
        None | Some("kvm") => false,
        Some("tcg") => true,
        Some(other) => return Err(ApiError::BadRequest(format!("accel: expected kvm or tcg, not `{other}`"))),
    };
    let (doc, placement, topology) = blocking(&st, move |s| s.placement(&vm)).await?;
    // A host of an architecture numaplace writes no domain for is refused
    // for both outputs, never given an x86 one.
    if let (Some(format @ ("libvirt" | "qemu")), Err(e)) =
        (q.format.as_deref(), numaplace_emit::arch::target(topology.arch()))
    {
        return Err(ApiError::BadRequest(format!("format={format}: {e}")));
    }
    match q.format.as_deref() {
        None | Some("json") => Ok(json(StatusCode::OK, &doc)),
        Some("libvirt") => {
            let opts = if tcg { libvirt::LibvirtOptions::tcg() } else { libvirt::LibvirtOptions::default() };
            let xml = libvirt::domain_xml(&placement, &opts.for_host(&topology));
            Ok(([(header::CONTENT_TYPE, "application/xml")], xml).into_response())
        }
        Some("qemu") => {
            let opts = if tcg { qemu::QemuOptions::tcg() } else { qemu::QemuOptions::default() };
            let opts = opts.clone().for_arch(topology.arch()).unwrap_or(opts);
            let mut line = qemu::command_line(&placement, &opts);
            line.push('\n');
            Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], line).into_response())
        }
        Some(other) => Err(ApiError::BadRequest(format!("format: expected json, libvirt or qemu, not `{other}`"))),
    }
}

async fn delete_placement(State(st): State<AppState>, P(vm): P<String>) -> Result<Response, ApiError> {
    blocking(&st, move |s| s.delete(&vm)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn move_vm(
    State(st): State<AppState>,
    P(vm): P<String>,
    Q(q): Q<PlaceQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let dry = q.dry_run.unwrap_or(false);
    let placed = blocking(&st, move |s| s.move_vm(&vm, &body, dry)).await?;
    Ok(json(StatusCode::OK, &placed.doc))
}
