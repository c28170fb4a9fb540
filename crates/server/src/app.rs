//! The server's application: the one route table (the API's routes in
//! `http`, the pages' in `web`, the adapters' in `adapters`) and the
//! order of the layers every request passes. The top of the server's
//! modules: nothing imports this one but `lib.rs`. The state handlers
//! share is `state`'s, the mapping from [`crate::ApiError`] to a status
//! `answer`'s.
//!
//! Layers, outermost first: the access log and request id
//! (`layers::access`), the request counters (`layers::count`), the `Host`
//! and origin checks (`edge::guard`); then, on the routes, the matched
//! route (`layers::matched`), the token check (`edge::auth`), the content
//! type, body cap and body timeout (`edge::body`), the request's deadline
//! (`layers::deadline`), the handlers.

use crate::edge::{self, MAX_HOST_BODY};
use crate::layers;
pub use crate::state::{AppState, DEFAULT_BODY_MEMORY, DEFAULT_REQUEST_TIMEOUT};
use crate::{adapters, http, k8s, web};
use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post, put};
use axum::Router;

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
        .route("/v1/evaluate", post(adapters::evaluate))
        .route("/v1/k8s/filter", post(k8s::k8s_filter))
        .route("/v1/k8s/prioritize", post(k8s::k8s_prioritize))
        .route("/v1/k8s/bind", post(k8s::k8s_bind))
        // Innermost first: the body is read (after the token check) before
        // the deadline starts, so a slow upload is the body timeout's
        // business, not a 503. `edge::body` caps every route's body.
        .route_layer(middleware::from_fn_with_state(state.clone(), layers::deadline))
        .route_layer(middleware::from_fn_with_state(state.clone(), edge::body))
        .route_layer(middleware::from_fn_with_state(state.clone(), edge::auth))
        // Outermost of the route layers: names the matched route for the
        // request counters, whatever the layers inside answer.
        .route_layer(middleware::from_fn(layers::matched))
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
        .layer(middleware::from_fn_with_state(state.clone(), layers::count))
        .layer(middleware::from_fn_with_state(state.clone(), layers::access))
        .with_state(state)
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    edge::refuse(status, code, message)
}
