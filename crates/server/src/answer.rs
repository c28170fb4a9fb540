//! The one mapping from [`ApiError`] to a status and the error shape, for
//! the API's JSON and the web view's pages alike.

use crate::error::ApiError;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use numaplace_wire::fleet::ErrorDoc;

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
