//! The web view (issue 18): server-rendered HTML with inline SVG, nothing
//! fetched from elsewhere. Each page is a typed view-model built from the
//! fleet (`pages`: `FleetPage`, `HostPage`, `VmPage`; `assets`: `MessagePage`) and
//! rendered by an askama template (`templates/`), checked when the crate
//! is built and escaping every value; the style and script are static
//! files ([`CSS`], [`PICTURE_CSS`], [`JS`]) under a strict
//! Content-Security-Policy. Pages at `/` (the
//! fleet), `/hosts/{name}` and `/vms/{name}`, each bookmarkable; actions
//! are plain HTML forms posting to `/ui/...`, checked against the same
//! token as the API (a form field, since a form cannot set headers).
//!
//! This file holds the handlers (pages and forms); `assets` what every
//! page is made of; `pages` the view-models.
//!
//! Readable without colour: every bar carries its figures as text, every
//! thread its VM's name, each VM a hatch pattern besides its colour, and
//! reserved CPUs a cross-hatch and the word "host". Keyboard: every VM and
//! host is a link, and focusing one highlights its threads as hovering
//! does.

mod assets;
mod pages;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use assets::{render, Forms, MessagePage};
pub use assets::{CONTENT_SECURITY_POLICY, CSS, JS, PICTURE_CSS};
pub use pages::HOSTS_PER_PAGE;
use pages::{fleet_page, host_page, vm_page};

use crate::command::{Delete, Drain, FleetView, Move, Place};
use crate::credentials::{Principal, Role};
use crate::edge::{P, Q};
use crate::error::ApiError;
use crate::error::Missing;
use crate::service::Service;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use numaplace_wire::fleet::{path_escape, FleetPageQuery, PlaceForm, TokenForm};

/// `GET /static/{file}`: [`CSS`] or [`JS`] under its current name, cached
/// for a year (the name changes with the content), with an `ETag` so a
/// revalidation is answered 304; any other name is 404 (an old build's
/// name is not served the new content under an immutable promise).
pub async fn asset(headers: HeaderMap, P(file): P<String>) -> Response {
    let Some(a) = [CSS, PICTURE_CSS, JS].into_iter().find(|a| a.file() == file) else {
        return error_page(&ApiError::NotFound(Missing::Row(format!("file {file}"))));
    };
    let etag = format!("\"{}\"", a.hash());
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let status = if cached { StatusCode::NOT_MODIFIED } else { StatusCode::OK };
    let mut resp = if cached { status.into_response() } else { (status, a.body).into_response() };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// The forms of a page answering a request with `headers`, and the
/// session cookie to set when the request had none.
fn forms(st: &AppState, headers: &HeaderMap) -> (Forms, Option<HeaderValue>) {
    let (csrf, set) = crate::edge::session(headers);
    (Forms { token_needed: !st.credentials().is_empty(), csrf }, set)
}

/// A page with the session cookie set when it is new.
fn html_with(status: StatusCode, text: String, cookie: Option<HeaderValue>) -> Response {
    let mut resp = html(status, text);
    if let Some(c) = cookie {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// A page, with the Content-Security-Policy every page carries.
fn html(status: StatusCode, text: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response()
}

fn error_page(e: &ApiError) -> Response {
    let status = crate::answer::status(e);
    html(status, render(&MessagePage::new("Error", Some(status.to_string()), e.to_string())))
}

async fn run<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, Response> {
    crate::state::blocking(st, f).await.map_err(|e| error_page(&e))
}

/// `GET /`: the fleet, a page at a time, with totals over all of it.
pub async fn fleet(State(st): State<AppState>, headers: HeaderMap, q: Result<Q<FleetPageQuery>, ApiError>) -> Response {
    let view = match q.and_then(|Q(q)| Ok((FleetView::from_query(&q, HOSTS_PER_PAGE)?, q))) {
        Ok(v) => v,
        Err(e) => return error_page(&e),
    };
    let (f, cookie) = forms(&st, &headers);
    match run(&st, move |s| {
        s.sync()?;
        Ok(render(&fleet_page(s, &view.1, &view.0, &f)))
    })
    .await
    {
        Ok(text) => html_with(StatusCode::OK, text, cookie),
        Err(r) => r,
    }
}

/// `GET /hosts/{name}`.
pub async fn host(State(st): State<AppState>, headers: HeaderMap, P(name): P<String>) -> Response {
    let (f, cookie) = forms(&st, &headers);
    match run(&st, move |s| {
        s.sync()?;
        let report = s.last_report(&name);
        s.with_fleet(|fleet| {
            fleet
                .host(&name)
                .map(|h| render(&host_page(h, report.as_deref(), &f)))
                .ok_or_else(|| ApiError::NotFound(Missing::Host(name.clone())))
        })
    })
    .await
    {
        Ok(text) => html_with(StatusCode::OK, text, cookie),
        Err(r) => r,
    }
}

/// `GET /vms/{name}`.
pub async fn vm(State(st): State<AppState>, headers: HeaderMap, P(name): P<String>) -> Response {
    let (f, cookie) = forms(&st, &headers);
    match run(&st, move |s| {
        let (doc, placement, topology) = s.placement(&name)?;
        let samples = s.locality(&name);
        Ok(render(&vm_page(&doc, &placement, &topology, &f, None, &samples)))
    })
    .await
    {
        Ok(text) => html_with(StatusCode::OK, text, cookie),
        Err(r) => r,
    }
}

/// A form's body read strictly (an unknown field is refused).
fn read_form<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_urlencoded::from_bytes(body).map_err(|e| ApiError::BadRequest(format!("form: {e}")))
}

/// `None` when the form came from this server's page for this session
/// (its CSRF field is the session cookie's value) and carries the token
/// when one is needed; else the page that says which is missing.
fn check_form(st: &AppState, headers: &HeaderMap, csrf: Option<&str>, token: Option<&str>) -> Option<Response> {
    if !crate::edge::csrf_matches(headers, csrf) {
        return Some(html(
            StatusCode::FORBIDDEN,
            render(&MessagePage::new(
                "Form expired",
                None,
                "This form did not come from this server's page in this browser session (or the session expired): \
                 open the page again and resubmit.",
            )),
        ));
    }
    check_token(st, token)
}

fn check_token(st: &AppState, given: Option<&str>) -> Option<Response> {
    let credentials = st.credentials();
    if credentials.is_empty() {
        return None;
    }
    // A form changes the fleet: only an operator-write credential may.
    match given.and_then(|g| credentials.lookup(g.trim())) {
        Some(who @ Principal::Credential { role: Role::OperatorWrite, .. }) => {
            // The form's field proved the credential: the logs name it.
            crate::logging::authenticated(who);
            None
        }
        _ => Some(html(
            StatusCode::UNAUTHORIZED,
            render(&MessagePage::new(
                "Token needed",
                None,
                "This action needs the service's token (an operator-write credential).",
            )),
        )),
    }
}

/// `POST /ui/place`: the form's request, placed (or only planned).
pub async fn place(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let form: PlaceForm = match read_form(&body) {
        Ok(f) => f,
        Err(e) => return error_page(&e),
    };
    if let Some(r) = check_form(&st, &headers, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let (f, _) = forms(&st, &headers);
    let dry = form.dry_run.as_deref() == Some("true");
    let place = match Place::from_form(&form, dry) {
        Ok(p) => p,
        Err(e) => return error_page(&e),
    };
    let name = form.name.clone().unwrap_or_default();
    let result = run(&st, move |s| {
        let placed = s.place(&place)?;
        if dry {
            let placement =
                placed.doc.placement.to_placement("placement").map_err(|e| ApiError::Internal(e.to_string()))?;
            let topology = s
                .with_fleet(|f| f.host(&placed.doc.host).map(|h| h.topology.clone()))
                .ok_or_else(|| ApiError::NotFound(Missing::Host(placed.doc.host.clone())))?;
            Ok(Some(render(&vm_page(&placed.doc, &placement, &topology, &f, Some(&form), &[]))))
        } else {
            Ok(None)
        }
    })
    .await;
    match result {
        Ok(Some(page)) => html(StatusCode::OK, page),
        Ok(None) => Redirect::to(&format!("/vms/{}", path_escape(&name))).into_response(),
        Err(r) => r,
    }
}

/// `POST /ui/vms/{name}/delete`.
pub async fn delete_vm(State(st): State<AppState>, headers: HeaderMap, P(name): P<String>, body: Bytes) -> Response {
    let form: TokenForm = match read_form(&body) {
        Ok(f) => f,
        Err(e) => return error_page(&e),
    };
    if let Some(r) = check_form(&st, &headers, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    match run(&st, move |s| s.delete(&Delete { vm: name })).await {
        Ok(()) => Redirect::to("/").into_response(),
        Err(r) => r,
    }
}

/// `POST /ui/vms/{name}/move`.
pub async fn move_vm(State(st): State<AppState>, headers: HeaderMap, P(name): P<String>, body: Bytes) -> Response {
    let form: TokenForm = match read_form(&body) {
        Ok(f) => f,
        Err(e) => return error_page(&e),
    };
    if let Some(r) = check_form(&st, &headers, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let to = name.clone();
    let cmd = Move { vm: name, ..Move::default() };
    match run(&st, move |s| s.move_vm(&cmd)).await {
        Ok(_) => Redirect::to(&format!("/vms/{}", path_escape(&to))).into_response(),
        Err(r) => r,
    }
}

/// `POST /ui/hosts/{name}/drain` and `.../undrain`.
pub async fn drain(
    State(st): State<AppState>,
    headers: HeaderMap,
    P((name, action)): P<(String, String)>,
    body: Bytes,
) -> Response {
    let form: TokenForm = match read_form(&body) {
        Ok(f) => f,
        Err(e) => return error_page(&e),
    };
    if let Some(r) = check_form(&st, &headers, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let drained = match action.as_str() {
        "drain" => true,
        "undrain" => false,
        _ => return error_page(&ApiError::NotFound(Missing::Action(action))),
    };
    let to = name.clone();
    match run(&st, move |s| s.drain(&Drain { host: name, drained })).await {
        Ok(_) => Redirect::to(&format!("/hosts/{}", path_escape(&to))).into_response(),
        Err(r) => r,
    }
}
