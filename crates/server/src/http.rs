//! The HTTP API's handlers (docs/serve.md, `/openapi.json`): each reads
//! its path, query and body into a typed command (`crate::command`), hands
//! it to the service on a blocking thread (the store's clients are
//! synchronous) and answers its typed result as JSON; errors answer in the
//! one shape `crate::app` maps them to. The routes, the state and the
//! layers are `crate::app`'s.

use crate::command::{
    Delete, Drain, HostFilter, IdempotencyKey, Move, Patch, Place, Register, RemoveHost, Report, Reserve,
};
use crate::credentials::Forbidden;
use crate::edge::{OnlyHost, P, Q};
use crate::error::ApiError;
use crate::state::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use numaplace_emit::qemu;
use numaplace_libvirt::domain as libvirt;
use numaplace_wire::fleet::{
    GetQuery, HostListQuery, HostPageDoc, HostQuery, PageQuery, PlaceQuery, PlacementPageDoc, RemoveHostQuery,
};

/// Default and largest page of hosts or placements.
const PAGE: usize = 500;
const MAX_PAGE: usize = 10_000;

/// The OpenAPI document, kept beside the code it describes (a test checks
/// that every route is in it).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// `/readyz`: the store answers within the request's deadline (else the
/// deadline's 503, or the store's own).
pub(crate) async fn readyz(State(st): State<AppState>) -> Result<&'static str, ApiError> {
    blocking(&st, |s| s.ready()).await?;
    Ok("ready\n")
}

/// The header a client sends to make a placement, move or delete safe to
/// retry (docs/serve.md, "Retries").
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// Set on an answer given again under its `Idempotency-Key`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The request's `Idempotency-Key`, if it sent one (400 when it is not
/// 1 to 255 visible ASCII characters).
fn idempotency_key(
    headers: &HeaderMap,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else { return Ok(None) };
    let text = value.to_str().map_err(|_| {
        ApiError::BadRequest("Idempotency-Key: expected visible ASCII characters (a UUID, say)".to_owned())
    })?;
    IdempotencyKey::new(text, method, path, body).map(Some)
}

fn replayed(mut resp: Response, replayed: bool) -> Response {
    if replayed {
        resp.headers_mut().insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    resp
}

fn json<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    (status, axum::Json(v)).into_response()
}

/// `/metrics`: the figures of the fleet as the store has it; when the
/// store refuses, those of the cache, with `numaplace_store_up 0` (so a
/// scrape still says what is wrong).
pub(crate) async fn metrics(State(st): State<AppState>) -> Response {
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

pub(crate) async fn list_hosts(State(st): State<AppState>, Q(q): Q<HostListQuery>) -> Result<Response, ApiError> {
    let n = limit(q.limit)?;
    let filter = HostFilter { kind: q.kind, label: q.label, ..HostFilter::default() };
    let (hosts, next) = blocking(&st, move |s| s.hosts(q.after.as_deref(), n, &filter)).await?;
    Ok(json(StatusCode::OK, &HostPageDoc { hosts, next }))
}

pub(crate) async fn patch_host(
    State(st): State<AppState>,
    P(name): P<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let patch = Patch::from_json(name, &body)?;
    let doc = blocking(&st, move |s| s.patch_host(patch)).await?;
    Ok(json(StatusCode::OK, &doc))
}

pub(crate) async fn put_host(
    State(st): State<AppState>,
    P(name): P<String>,
    Q(q): Q<HostQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let reserve =
        Reserve { reserved_cpus: q.reserved_cpus, shared_cpus: q.shared_cpus, reserved_memory: q.reserved_memory };
    // Reading the upload (up to 16 MiB of XML or a tarball) is CPU work:
    // on a blocking thread, as the service's calls are.
    let (doc, created) = blocking(&st, move |s| {
        // The body's own buffer when it is the only holder (it is): no
        // second copy of a 16 MiB upload.
        let rules = crate::command::rules_of(
            q.memory_kinds.as_deref(),
            q.qemu_overhead_fixed.as_deref(),
            q.qemu_overhead_per_gib.as_deref(),
        )?;
        let register =
            Register { rules, ..Register::from_upload(name, Vec::from(body), reserve, q.labels.as_deref())? };
        s.put_host(register)
    })
    .await?;
    Ok(json(if created { StatusCode::CREATED } else { StatusCode::OK }, &doc))
}

pub(crate) async fn get_host(State(st): State<AppState>, P(name): P<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.host(&name)).await?;
    Ok(json(StatusCode::OK, &doc))
}

pub(crate) async fn delete_host(
    State(st): State<AppState>,
    P(name): P<String>,
    Q(q): Q<RemoveHostQuery>,
) -> Result<Response, ApiError> {
    let force = q.force.unwrap_or(false);
    blocking(&st, move |s| s.remove_host(&RemoveHost { host: name, force })).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn drain(State(st): State<AppState>, P(name): P<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.drain(&Drain { host: name, drained: true })).await?;
    Ok(json(StatusCode::OK, &doc))
}

pub(crate) async fn undrain(State(st): State<AppState>, P(name): P<String>) -> Result<Response, ApiError> {
    let doc = blocking(&st, move |s| s.drain(&Drain { host: name, drained: false })).await?;
    Ok(json(StatusCode::OK, &doc))
}

pub(crate) async fn report_domains(
    State(st): State<AppState>,
    P(name): P<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    // A report is up to 4 MiB of JSON: read on the blocking thread too.
    let doc = blocking(&st, move |s| s.report_domains(&Report::from_json(name, &body)?)).await?;
    Ok(json(StatusCode::OK, &doc))
}

pub(crate) async fn place(
    State(st): State<AppState>,
    Q(q): Q<PlaceQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let dry = q.dry_run.unwrap_or(false);
    let key = idempotency_key(&headers, "POST", "/v1/placements", &body)?;
    let place = Place::from_json(&body, dry)?;
    let placed = blocking(&st, move |s| s.place_keyed(&place, key.as_ref())).await?;
    let status = if dry { StatusCode::OK } else { StatusCode::CREATED };
    let mut resp = json(status, &placed.doc);
    if let Some(v) = placed.doc.links.as_ref().and_then(|l| header::HeaderValue::from_str(&l.this).ok()) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(replayed(resp, placed.replayed))
}

pub(crate) async fn list_placements(State(st): State<AppState>, Q(q): Q<PageQuery>) -> Result<Response, ApiError> {
    let n = limit(q.limit)?;
    let (placements, next) = blocking(&st, move |s| s.placements(q.host.as_deref(), q.after.as_deref(), n)).await?;
    Ok(json(StatusCode::OK, &PlacementPageDoc { placements, next }))
}

pub(crate) async fn get_placement(
    State(st): State<AppState>,
    only: Option<axum::Extension<OnlyHost>>,
    P(vm): P<String>,
    Q(q): Q<GetQuery>,
) -> Result<Response, ApiError> {
    let tcg = match q.accel.as_deref() {
        None | Some("kvm") => false,
        Some("tcg") => true,
        Some(other) => return Err(ApiError::BadRequest(format!("accel: expected kvm or tcg, not `{other}`"))),
    };
    let (doc, placement, topology) = blocking(&st, move |s| s.placement(&vm)).await?;
    // An agent reads only its own host's placements.
    if let Some(axum::Extension(OnlyHost(own))) = only {
        if doc.host != own {
            return Err(ApiError::Forbidden(Forbidden::OtherHost {
                own,
                asked: doc.host.clone(),
                vm: Some(doc.placement.vm.clone()),
            }));
        }
    }
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
        Some("dra") => {
            let request = q.request.as_deref().unwrap_or("cpu");
            let driver = q.driver.as_deref().unwrap_or(numaplace_wire::k8s::DRA_CPU_DRIVER);
            // A floating VM has no cpuset of its own: like a format the
            // host's architecture has no domain for, refused as asked.
            match numaplace_wire::k8s::dra_cpu_config(&placement, request, driver) {
                Ok(config) => Ok(json(StatusCode::OK, &config)),
                Err(e) => Err(ApiError::BadRequest(format!("format=dra: {e}"))),
            }
        }
        Some(other) => Err(ApiError::BadRequest(format!("format: expected json, libvirt, qemu or dra, not `{other}`"))),
    }
}

pub(crate) async fn delete_placement(
    State(st): State<AppState>,
    P(vm): P<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers, "DELETE", &format!("/v1/placements/{vm}"), b"")?;
    let again = blocking(&st, move |s| s.delete_keyed(&Delete { vm }, key.as_ref())).await?;
    Ok(replayed(StatusCode::NO_CONTENT.into_response(), again))
}

pub(crate) async fn move_vm(
    State(st): State<AppState>,
    P(vm): P<String>,
    Q(q): Q<PlaceQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let dry = q.dry_run.unwrap_or(false);
    let key = idempotency_key(&headers, "POST", &format!("/v1/placements/{vm}/move"), &body)?;
    let cmd = Move::from_json(vm, &body, dry)?;
    let placed = blocking(&st, move |s| s.move_keyed(&cmd, key.as_ref())).await?;
    Ok(replayed(json(StatusCode::OK, &placed.doc), placed.replayed))
}
