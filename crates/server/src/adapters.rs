//! The routes outside schedulers call (docs/adapters.md): `POST
//! /v1/evaluate`, which Nova's `NumaplaceFilter` and `NumaplaceWeigher`
//! ask (Kubernetes' extender verbs are in `k8s.rs`, on the helpers
//! here). It asks the fleet what each named host would do with one VM,
//! through the service's own filters, prefilter and planner, and changes
//! nothing: these schedulers choose the host themselves, so a claim is
//! made where the choice is known (see docs/adapters.md), never here.

use crate::command::Place;
use crate::error::ApiError;
use crate::state::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use numaplace_fleet::Evaluation;
use numaplace_wire::fleet::{EvaluateDoc, EvaluationDoc};

/// Most hosts one evaluation may name (a Kubernetes cluster's largest
/// supported size is 5,000 nodes).
pub const MAX_EVALUATED_HOSTS: usize = 10_000;

pub(crate) fn json<T: serde::Serialize>(v: &T) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

pub(crate) fn check_hosts(hosts: &[String], field: &str) -> Result<(), ApiError> {
    if hosts.len() > MAX_EVALUATED_HOSTS {
        return Err(ApiError::BadRequest(format!(
            "{field}: expected at most {MAX_EVALUATED_HOSTS} hosts, found {}",
            hosts.len()
        )));
    }
    Ok(())
}

/// Asks the fleet, on a blocking thread after catching up with the store.
pub(crate) async fn verdicts(st: &AppState, place: Place, hosts: Vec<String>) -> Result<Evaluation, ApiError> {
    blocking(st, move |s| {
        s.sync()?;
        s.with_fleet(|f| f.evaluate(&place.request, &place.selection(), &hosts)).map_err(ApiError::Unplaceable)
    })
    .await
}

/// `POST /v1/evaluate`: `{"vm": <a placement request>, "hosts": [...]}`
/// answered with one verdict per host, in the order asked.
pub(crate) async fn evaluate(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let doc: EvaluateDoc =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("request body: {e}")))?;
    check_hosts(&doc.hosts, "hosts")?;
    let place = Place::from_value(doc.vm, true)?;
    let vm = place.request.name.clone();
    let v = verdicts(&st, place, doc.hosts).await?;
    Ok(json(&EvaluationDoc::new(&vm, &v)))
}
