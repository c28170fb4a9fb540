//! The HTTP API (docs/serve.md, `/openapi.json`): routes, the token
//! check on writes, body limits, and errors as JSON with a status per
//! kind. Every handler hands its work to [`Service`] on a blocking thread:
//! the store's clients are synchronous.

use crate::service::{ApiError, HostUpload, Service};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use numaplace_emit::qemu;
use numaplace_libvirt::domain as libvirt;
use numaplace_wire::fleet::{ErrorDoc, GetQuery, HostPageDoc, HostQuery, PageQuery, PlaceQuery, PlacementPageDoc};
use std::sync::Arc;

/// Largest topology upload: an hwloc XML export of a 24-node host is a
/// few hundred KiB, a sysfs tarball a few MiB.
pub const MAX_HOST_BODY: usize = 16 << 20;
/// Largest other body (a VM request, an agent's report of its domains).
pub const MAX_BODY: usize = 4 << 20;
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
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    let hosts = Router::new()
        .route("/v1/hosts/{name}", put(put_host).get(get_host).delete(delete_host))
        .layer(DefaultBodyLimit::max(MAX_HOST_BODY));
    Router::new()
        .route("/", get(crate::web::fleet))
        .route("/hosts/{name}", get(crate::web::host))
        .route("/vms/{name}", get(crate::web::vm))
        .route("/ui/place", post(crate::web::place))
        .route("/ui/vms/{name}/delete", post(crate::web::delete_vm))
        .route("/ui/vms/{name}/move", post(crate::web::move_vm))
        .route("/ui/hosts/{name}/{action}", post(crate::web::drain))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/openapi.json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }))
        .route("/metrics", get(metrics))
        .route("/v1/hosts", get(list_hosts))
        .route("/v1/hosts/{name}/drain", post(drain).delete(undrain))
        .route("/v1/hosts/{name}/domains", put(report_domains))
        .route("/v1/placements", post(place).get(list_placements))
        .route("/v1/placements/{vm}", get(get_placement).delete(delete_placement))
        .route("/v1/placements/{vm}/move", post(move_vm))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .merge(hosts)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not-found", "no such route (see /openapi.json)") })
        .with_state(state)
}

/// Writes need the token when one is set; reads never do (they reveal
/// placements, not secrets, and the web view reads them).
async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    // The web view's forms cannot set headers: they carry the token in a
    // field, which their handlers check.
    let write =
        !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) && !req.uri().path().starts_with("/ui/");
    if let (true, Some(token)) = (write, &st.token) {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
            // Read the body the client is sending before answering: a
            // connection closed mid-upload is reported by clients as a
            // broken pipe, not as the 401 that says why.
            let _ = axum::body::to_bytes(req.into_body(), MAX_HOST_BODY).await;
            return error(StatusCode::UNAUTHORIZED, "unauthorized", "writes need `Authorization: Bearer <token>`");
        }
    }
    next.run(req).await
}

/// Compares without stopping at the first difference, so the time taken
/// does not tell how much of a guessed token was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(ErrorDoc::new(code, message))).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, doc) = match &self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, ErrorDoc::new("bad-request", m.clone())),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, ErrorDoc::new("not-found", m.clone())),
            ApiError::Conflict { code, message } => (StatusCode::CONFLICT, ErrorDoc::new(*code, message.clone())),
            ApiError::NoHost(r) => (StatusCode::CONFLICT, ErrorDoc::no_host(r)),
            ApiError::Unplaceable(r) => {
                (StatusCode::UNPROCESSABLE_ENTITY, ErrorDoc::new(r.reason.code(), r.to_string()))
            }
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, ErrorDoc::new("unavailable", m.clone())),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorDoc::new("internal", m.clone())),
        };
        let mut resp = (status, axum::Json(doc)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        resp
    }
}

/// Runs a service call on a blocking thread (the pages' forms too).
pub(crate) async fn blocking<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let svc = st.service.clone();
    tokio::task::spawn_blocking(move || f(&svc))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(format!("the request's worker failed: {e}"))))
}

fn json<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    (status, axum::Json(v)).into_response()
}

async fn metrics(State(st): State<AppState>) -> Response {
    let text = blocking(&st, |s| {
        s.sync()?;
        Ok(s.with_fleet(|f| s.metrics.render(f)))
    })
    .await;
    match text {
        Ok(t) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], t).into_response(),
        Err(e) => e.into_response(),
    }
}

fn limit(q: &PageQuery) -> usize {
    q.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE)
}

async fn list_hosts(State(st): State<AppState>, Query(q): Query<PageQuery>) -> Result<Response, ApiError> {
    let n = limit(&q);
    let (hosts, next) = blocking(&st, move |s| s.hosts(q.after.as_deref(), n)).await?;
    Ok(json(StatusCode::OK, &HostPageDoc { hosts, next }))
}

async fn put_host(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<HostQuery>,
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

async fn get_host(State(st): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.host(&name)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn delete_host(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<HostQuery>,
) -> Result<Response, ApiError> {
    let force = q.force.unwrap_or(false);
    blocking(&st, move |s| s.remove_host(&name, force)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn drain(State(st): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.drain(&name, true)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn undrain(State(st): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.drain(&name, false)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn report_domains(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.report_domains(&name, &body)).await?;
    Ok(json(StatusCode::OK, &doc))
}

async fn place(State(st): State<AppState>, Query(q): Query<PlaceQuery>, body: Bytes) -> Result<Response, ApiError> {
    let dry = q.dry_run.unwrap_or(false);
    let placed = blocking(&st, move |s| s.place(&body, dry)).await?;
    let status = if dry { StatusCode::OK } else { StatusCode::CREATED };
    let mut resp = json(status, &placed.doc);
    if !dry {
        if let Ok(v) = header::HeaderValue::from_str(&placed.doc.links.this) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
    }
    Ok(resp)
}

async fn list_placements(State(st): State<AppState>, Query(q): Query<PageQuery>) -> Result<Response, ApiError> {
    let n = limit(&q);
    let (placements, next) = blocking(&st, move |s| s.placements(q.host.as_deref(), q.after.as_deref(), n)).await?;
    Ok(json(StatusCode::OK, &PlacementPageDoc { placements, next }))
}

async fn get_placement(
    State(st): State<AppState>,
    Path(vm): Path<String>,
    Query(q): Query<GetQuery>,
) -> Result<Response, ApiError> {
    let tcg = match q.accel.as_deref() {
        None | Some("kvm") => false,
        Some("tcg") => true,
        Some(other) => return Err(ApiError::BadRequest(format!("accel: expected kvm or tcg, not `{other}`"))),
    };
    let (doc, placement, topology) = blocking(&st, move |s| s.placement(&vm)).await?;
    match q.format.as_deref() {
        None | Some("json") => Ok(json(StatusCode::OK, &doc)),
        Some("libvirt") => {
            let opts = if tcg { libvirt::LibvirtOptions::tcg() } else { libvirt::LibvirtOptions::default() };
            let xml = libvirt::domain_xml(&placement, &opts.for_host(&topology));
            Ok(([(header::CONTENT_TYPE, "application/xml")], xml).into_response())
        }
        Some("qemu") => {
            let opts = if tcg { qemu::QemuOptions::tcg() } else { qemu::QemuOptions::default() };
            let mut line = qemu::command_line(&placement, &opts);
            line.push('\n');
            Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], line).into_response())
        }
        Some(other) => Err(ApiError::BadRequest(format!("format: expected json, libvirt or qemu, not `{other}`"))),
    }
}

async fn delete_placement(State(st): State<AppState>, Path(vm): Path<String>) -> Result<Response, ApiError> {
    blocking(&st, move |s| s.delete(&vm)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn move_vm(
    State(st): State<AppState>,
    Path(vm): Path<String>,
    Query(q): Query<PlaceQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let dry = q.dry_run.unwrap_or(false);
    let placed = blocking(&st, move |s| s.move_vm(&vm, &body, dry)).await?;
    Ok(json(StatusCode::OK, &placed.doc))
}
