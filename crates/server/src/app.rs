//! The server's application: the state every handler shares, the one
//! route table (the API's routes in `http`, the pages' in `web`), the
//! layers every request passes, the request's deadline, the service run
//! on a blocking thread, and the one mapping from [`ApiError`] to a
//! status and the error shape. `http` and `web` depend on this module,
//! never on each other.
//!
//! Layers, outermost first: the access log and request id
//! (`logging::access`), the `Host` and origin checks (`edge::guard`);
//! then, on the routes, the token check (`edge::auth`), the content type,
//! body cap and body timeout (`edge::body`), the request's deadline
//! ([`deadline`]), the handlers.

use crate::credentials::Credentials;
use crate::edge::{self, MAX_HOST_BODY};
use crate::service::{ApiError, Service};
use crate::{http, web};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use numaplace_store::deadline::Deadline;
use numaplace_wire::fleet::ErrorDoc;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The service.
    pub service: Arc<Service>,
    /// The credentials requests are checked against (`--credentials`,
    /// `--token-file`), replaced whole on SIGHUP.
    pub credentials: Arc<RwLock<Arc<Credentials>>>,
    /// Whether reads need no credential (`--anonymous-reads`).
    pub anonymous_reads: bool,
    /// Proxies whose `X-Forwarded-For` is believed (`--trusted-proxy`).
    pub trusted_proxies: Arc<[IpAddr]>,
    /// Bytes of request bodies the server holds at once
    /// (`--max-body-memory`): a body waits for its share before it is
    /// read.
    pub body_budget: Arc<tokio::sync::Semaphore>,
    /// The budget's size, for the error that names it.
    pub body_budget_bytes: usize,
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
    /// The state of a server over `service`, with `token` (an
    /// operator-write credential named `token`) and the default deadline.
    pub fn new(service: Arc<Service>, token: Option<Arc<str>>) -> AppState {
        let credentials = match token {
            Some(t) => Credentials::default().with_token(&t),
            None => Credentials::default(),
        };
        AppState {
            service,
            credentials: Arc::new(RwLock::new(Arc::new(credentials))),
            anonymous_reads: true,
            trusted_proxies: Arc::from(Vec::new()),
            body_budget: Arc::new(tokio::sync::Semaphore::new(DEFAULT_BODY_MEMORY)),
            body_budget_bytes: DEFAULT_BODY_MEMORY,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            in_flight: Arc::default(),
            body_timeout: edge::DEFAULT_BODY_TIMEOUT,
            allowed_hosts: Arc::from(Vec::new()),
        }
    }

    /// The credentials in force now.
    pub fn credentials(&self) -> Arc<Credentials> {
        self.credentials.read().map_or_else(|p| p.into_inner().clone(), |c| c.clone())
    }

    /// Replaces the credentials (a SIGHUP's reload).
    pub fn set_credentials(&self, c: Credentials) {
        let mut slot = self.credentials.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Arc::new(c);
    }

    /// Sets the bytes of bodies held at once.
    pub fn set_body_budget(&mut self, bytes: usize) {
        self.body_budget_bytes = bytes.max(MAX_HOST_BODY);
        self.body_budget = Arc::new(tokio::sync::Semaphore::new(self.body_budget_bytes));
    }
}

/// Bytes of request bodies held at once unless `--max-body-memory` says
/// otherwise: four of the largest (a 16 MiB topology), or 256 requests
/// of 256 KiB. The server's memory for bodies is this figure, whatever
/// the number of clients; a body waits for its share (within
/// `--body-timeout`) rather than pile up.
pub const DEFAULT_BODY_MEMORY: usize = 64 << 20;

/// A request's deadline unless `--request-timeout` says otherwise. A
/// placement takes milliseconds, so this is only ever reached when the
/// database stalls; it is shorter than the usual client and proxy
/// timeouts (10 s and more), so the client hears 503 and retries instead
/// of giving up on a request that might still commit.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The one route table: the pages (`web`), the API (`http`), and the
/// layers every request passes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(web::fleet))
        .route("/hosts/{name}", get(web::host))
        .route("/vms/{name}", get(web::vm))
        .route("/ui/place", post(web::place))
        .route("/ui/vms/{name}/delete", post(web::delete_vm))
        .route("/ui/vms/{name}/move", post(web::move_vm))
        .route("/ui/hosts/{name}/{action}", post(web::drain))
        .route("/static/{file}", get(web::asset))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(http::readyz))
        .route("/openapi.json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], http::OPENAPI) }))
        .route("/metrics", get(http::metrics))
        .route("/v1/hosts", get(http::list_hosts))
        .route(
            "/v1/hosts/{name}",
            put(http::put_host).patch(http::patch_host).get(http::get_host).delete(http::delete_host),
        )
        .route("/v1/hosts/{name}/drain", post(http::drain).delete(http::undrain))
        .route("/v1/hosts/{name}/domains", put(http::report_domains))
        .route("/v1/placements", post(http::place).get(http::list_placements))
        .route("/v1/placements/{vm}", get(http::get_placement).delete(http::delete_placement))
        .route("/v1/placements/{vm}/move", post(http::move_vm))
        .route("/v1/evaluate", post(crate::adapters::evaluate))
        .route("/v1/k8s/filter", post(crate::adapters::k8s_filter))
        .route("/v1/k8s/prioritize", post(crate::adapters::k8s_prioritize))
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

/// The status each kind of error answers with: the one place, for the
/// API's JSON and the web view's pages alike. Errors that are the
/// server's or the database's, not the client's, are logged here.
pub fn status(e: &ApiError) -> StatusCode {
    match e {
        ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
        ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
        ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        ApiError::Conflict(_) | ApiError::NoHost(_) => StatusCode::CONFLICT,
        ApiError::Unplaceable(_) | ApiError::KeyReused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        ApiError::Unavailable(why) => {
            tracing::warn!(code = "unavailable", "store unavailable or conflicts did not settle: {why}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        ApiError::DeadlineExceeded => {
            tracing::warn!(code = "deadline-exceeded", "{e}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        ApiError::OutcomeUnknown => {
            tracing::warn!(code = crate::error::OUTCOME_UNKNOWN, "{e}");
            StatusCode::SERVICE_UNAVAILABLE
        }
        ApiError::Internal(m) => {
            tracing::error!(code = "internal", "{m}");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// The one error shape, `{"error": {"code", "message"}}` (with the
/// fleet's rejection for `no-host`), at the error's status.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status(&self);
        let doc = match &self {
            ApiError::NoHost(r) => ErrorDoc::no_host(r),
            other => ErrorDoc::new(other.code(), other.to_string()),
        };
        let mut resp = (status, axum::Json(doc)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        if matches!(self, ApiError::DeadlineExceeded) {
            resp.extensions_mut().insert(crate::metrics::DeadlineExceeded);
        }
        // The access line names the refusal's code and VM.
        resp.extensions_mut()
            .insert(crate::logging::Outcome { code: self.code().to_string(), vm: self.vm().map(str::to_string) });
        resp
    }
}

/// Runs a service call on a blocking thread (the pages' forms too), in
/// the request's span and under its deadline.
pub async fn blocking<T: Send + 'static>(
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

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    edge::refuse(status, code, message)
}
