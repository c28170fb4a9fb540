//! The layers every request passes that read the shared state (the route
//! table in `app` puts them in order): the access line and request span
//! ([`access`]), the request counters ([`count`], [`matched`]) and the
//! request's deadline ([`deadline`]). The `Host`, origin, token and body
//! checks are `edge`'s.

use crate::credentials::Principal;
use crate::error::ApiError;
use crate::logging::{
    forwarded_for, principal_of, request_id, sample_refusal, Outcome, Peer, UnknownCredential, REQUEST_ID, WHO,
};
use crate::metrics::{DeadlineExceeded, StatusClass, UNROUTED};
use crate::state::{AppState, DEADLINE};
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use numaplace_store::deadline::Deadline;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tracing::Instrument;

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

/// The route a request matched, filled in by [`matched`] once the router
/// has routed it and read by [`count`] once it is answered.
#[derive(Clone, Default)]
struct RouteSlot(Arc<OnceLock<String>>);

/// The outer layer (beside the access log): counts every answer under
/// its matched route (or [`UNROUTED`]), method and status class, a
/// passed deadline, and whether the store answered.
pub(crate) async fn count(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let slot = RouteSlot::default();
    req.extensions_mut().insert(slot.clone());
    let method = req.method().as_str().to_string();
    let resp = next.run(req).await;
    let route = slot.0.get().map_or(UNROUTED, String::as_str);
    let m = &st.service.metrics;
    let status = resp.status().as_u16();
    m.request(route, &method, status);
    if resp.extensions().get::<DeadlineExceeded>().is_some() {
        m.deadline_exceeded();
    }
    // 503 is only ever the store's (unavailable, or a deadline passed
    // waiting on it); a success of a route that reads the store shows it
    // answered. `/healthz` and the static routes never touch it.
    if status == 503 {
        m.set_store_up(false);
    } else if StatusClass::of(status) == StatusClass::Success && touches_store(route) {
        m.set_store_up(true);
    }
    resp
}

/// Whether answering `route` needs the store.
fn touches_store(route: &str) -> bool {
    // `/metrics` sets the gauge itself: it answers 200 from the cache
    // when the store refuses.
    !matches!(route, UNROUTED | "/healthz" | "/openapi.json" | "/metrics") && !route.starts_with("/static/")
}

/// The route layer that tells [`count`] which route matched.
pub(crate) async fn matched(req: Request, next: Next) -> Response {
    if let (Some(slot), Some(path)) = (req.extensions().get::<RouteSlot>(), req.extensions().get::<MatchedPath>()) {
        let _ = slot.0.set(path.as_str().to_string());
    }
    next.run(req).await
}

/// Gives every request its deadline and answers 503 (`deadline-exceeded`,
/// with `Retry-After`) when it passes, unless the request's commit is
/// already under way: then its outcome is the answer, so a 503 never
/// stands for a change that was made (see `numaplace_store::deadline`).
pub(crate) async fn deadline(State(st): State<AppState>, req: Request, next: Next) -> Response {
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
