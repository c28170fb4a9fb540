//! The web view (issue 18): server-rendered HTML with inline SVG, no
//! build step and nothing fetched from elsewhere. Pages at `/` (the
//! fleet), `/hosts/{name}` and `/vms/{name}`, each bookmarkable; actions
//! are plain HTML forms posting to `/ui/...`, checked against the same
//! token as the API (a form field, since a form cannot set headers).
//!
//! Readable without colour: every bar carries its figures as text, every
//! thread its VM's name, each VM a hatch pattern besides its colour, and
//! reserved CPUs a cross-hatch and the word "host". Keyboard: every VM and
//! host is a link, and focusing one highlights its threads as hovering
//! does.

use crate::edge::{P, Q};
use crate::http::AppState;
use crate::service::{ApiError, Service};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use numaplace_emit::text::{noun, plural};
use numaplace_fleet::FleetHost;
use numaplace_libvirt::domain::escape;
use numaplace_plan::Placement;
use numaplace_topo::{format_size, Topology};
use numaplace_wire::fleet::{path_escape, FleetPageQuery, LocalitySampleDoc, PlaceForm, TokenForm};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Hosts per page of the fleet view: a 10,000-host fleet is shown a page
/// at a time, with totals over all of it.
pub const HOSTS_PER_PAGE: usize = 100;

/// The pages' Content-Security-Policy: everything from this server only,
/// no inline script or style (the style and script are [`CSS`] and
/// [`JS`]), no plugins, no framing, forms posting only here. An injected
/// `<script>` or `style=` would not run even if escaping failed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A file the pages load, compiled into the binary and served under a
/// name that holds a hash of its content (`/static/web.HASH.css`): a
/// browser may keep it for a year, and a new build's pages name a new
/// file.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    /// The name's stem and extension, `web` and `css`.
    pub stem: &'static str,
    /// The extension.
    pub ext: &'static str,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The content.
    pub body: &'static str,
}

/// The pages' style.
pub const CSS: Asset =
    Asset { stem: "web", ext: "css", content_type: "text/css; charset=utf-8", body: include_str!("../assets/web.css") };
/// The pages' script (highlighting a VM's threads, copy buttons).
pub const JS: Asset = Asset {
    stem: "web",
    ext: "js",
    content_type: "text/javascript; charset=utf-8",
    body: include_str!("../assets/web.js"),
};

/// The host picture's style: the one the CLI's SVG carries inline.
pub const PICTURE_CSS: Asset =
    Asset { stem: "picture", ext: "css", content_type: "text/css; charset=utf-8", body: numaplace_emit::svg::STYLE };

/// FNV-1a, 64 bits: enough to tell two builds' files apart, computed at
/// compile time.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

impl Asset {
    /// The hash of its content, as the name and the `ETag` carry it.
    pub fn hash(&self) -> String {
        format!("{:016x}", fnv1a(self.body.as_bytes()))
    }

    /// Its file name, `web.HASH.css`.
    pub fn file(&self) -> String {
        format!("{}.{}.{}", self.stem, self.hash(), self.ext)
    }

    /// The address pages load it from.
    pub fn url(&self) -> String {
        format!("/static/{}", self.file())
    }
}

/// `GET /static/{file}`: [`CSS`] or [`JS`] under its current name, cached
/// for a year (the name changes with the content), with an `ETag` so a
/// revalidation is answered 304; any other name is 404 (an old build's
/// name is not served the new content under an immutable promise).
pub async fn asset(headers: HeaderMap, P(file): P<String>) -> Response {
    let Some(a) = [CSS, PICTURE_CSS, JS].into_iter().find(|a| a.file() == file) else {
        return error_page(&ApiError::NotFound(format!("no file {file}")));
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

/// What every form of a page carries: the token field when the service
/// has one, and the session's CSRF token (`edge::session`).
#[derive(Clone, Debug)]
struct Forms {
    token_needed: bool,
    csrf: String,
}

impl Forms {
    /// The hidden CSRF field, then the token field when needed.
    fn fields(&self) -> String {
        let token = if self.token_needed {
            "<label>Token <input name=\"token\" type=\"password\" required autocomplete=\"current-password\"></label> "
        } else {
            ""
        };
        format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">{token}", escape(&self.csrf))
    }
}

/// The forms of a page answering a request with `headers`, and the
/// session cookie to set when the request had none.
fn forms(st: &AppState, headers: &HeaderMap) -> (Forms, Option<HeaderValue>) {
    let (csrf, set) = crate::edge::session(headers);
    (Forms { token_needed: st.token.is_some(), csrf }, set)
}

/// A page with the session cookie set when it is new.
fn html_with(status: StatusCode, text: String, cookie: Option<HeaderValue>) -> Response {
    let mut resp = html(status, text);
    if let Some(c) = cookie {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} - numaplace</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><link rel=\"stylesheet\" href=\"{css}\"><link rel=\"stylesheet\" href=\"{picture}\"></head>\
         <body><nav><a href=\"/\">Fleet</a> · <a href=\"/openapi.json\">API</a> · <a href=\"/metrics\">metrics</a></nav>\
         <main>{body}</main><script src=\"{js}\"></script></body></html>\n",
        t = escape(title),
        css = CSS.url(),
        picture = PICTURE_CSS.url(),
        js = JS.url(),
    )
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
    let status = crate::http::status(e);
    let body = format!("<h1>{}</h1><p class=\"err\" role=\"alert\">{}</p>", status, escape(&e.to_string()));
    html(status, page("Error", &body))
}

async fn run<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, Response> {
    crate::http::blocking(st, f).await.map_err(|e| error_page(&e))
}

/// A small bar: `used` of `total`, with the figures as text beside it and
/// as its accessible name.
fn bar(label: &str, free: u64, total: u64, text: &str) -> String {
    let w = 40.0;
    let used = if total == 0 { 0.0 } else { (total.saturating_sub(free)) as f64 / total as f64 * w };
    format!(
        "<svg width=\"44\" height=\"12\" role=\"img\" aria-label=\"{l}: {t}\"><title>{l}: {t}</title>\
         <rect x=\"1\" y=\"1\" width=\"{w}\" height=\"10\" fill=\"#fff\" stroke=\"#888\"/>\
         <rect x=\"1\" y=\"1\" width=\"{used:.1}\" height=\"10\" fill=\"url(#used)\"/></svg>",
        l = escape(label),
        t = escape(text)
    )
}

const USED_PATTERN: &str = "<svg width=\"0\" height=\"0\" class=\"defs\" aria-hidden=\"true\"><defs>\
<pattern id=\"used\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
<rect width=\"4\" height=\"4\" fill=\"#7a9cc6\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"4\" stroke=\"#234\" stroke-width=\"1.5\"/></pattern></defs></svg>";

fn matches_filters(h: &FleetHost, q: &FleetPageQuery) -> bool {
    crate::service::HostFilter { kind: q.kind.clone(), label: q.label.clone(), min_free_threads: q.min_free_threads }
        .matches(h)
}

/// `GET /`: the fleet, a page at a time, with totals over all of it.
pub async fn fleet(State(st): State<AppState>, headers: HeaderMap, q: Result<Q<FleetPageQuery>, ApiError>) -> Response {
    let q = match q {
        Ok(Q(q)) => q,
        Err(e) => return error_page(&e),
    };
    let (f, cookie) = forms(&st, &headers);
    match run(&st, move |s| {
        s.sync()?;
        Ok(fleet_page(s, &q, &f))
    })
    .await
    {
        Ok(text) => html_with(StatusCode::OK, text, cookie),
        Err(r) => r,
    }
}

fn fleet_page(s: &Service, q: &FleetPageQuery, f: &Forms) -> String {
    let mut body = String::new();
    let page_no = q.page.unwrap_or(1).max(1);
    s.with_fleet(|fleet| {
        // The one computation of free and stranded capacity, as
        // `/metrics` shows it per kind.
        let (by_kind, total) = crate::metrics::capacity(fleet);
        let kinds: BTreeMap<String, u64> = by_kind.iter().map(|(k, c)| (k.clone(), c.hosts)).collect();
        let shown: Vec<&FleetHost> = fleet.hosts().filter(|h| matches_filters(h, q)).collect();
        let _ = write!(
            body,
            "<h1>Fleet</h1><p id=\"totals\">{hosts} hosts ({drained} drained), {vms} VMs; \
             <strong>{free_threads}</strong> of {threads} CPU threads free, {} of {} memory free; \
             <strong>{stranded_threads}</strong> free threads stranded (on hosts that cannot take {below}, or drained).</p>",
            format_size(total.free_memory),
            format_size(total.memory),
            hosts = total.hosts,
            drained = total.drained,
            vms = total.vms,
            free_threads = total.free_threads,
            threads = total.threads,
            stranded_threads = total.stranded_threads,
            below = crate::metrics::STRANDED_BELOW,
        );
        body.push_str(USED_PATTERN);
        // Filters.
        let _ = write!(
            body,
            "<form method=\"get\" action=\"/\" aria-label=\"Filter hosts\"><fieldset><legend>Filter</legend>\
             <label>Kind <select name=\"kind\"><option value=\"\">any</option>"
        );
        for (kind, n) in &kinds {
            let sel = if q.kind.as_deref() == Some(kind.as_str()) { " selected" } else { "" };
            let _ = write!(body, "<option value=\"{k}\"{sel}>{k} ({n})</option>", k = escape(kind));
        }
        let _ = write!(
            body,
            "</select></label> <label>Label <input name=\"label\" placeholder=\"rack=r7\" value=\"{}\"></label> \
             <label>Free threads at least <input name=\"min_free_threads\" type=\"number\" min=\"0\" value=\"{}\"></label> \
             <button type=\"submit\">Show</button></fieldset></form>",
            escape(q.label.as_deref().unwrap_or("")),
            q.min_free_threads.map(|m| m.to_string()).unwrap_or_default()
        );
        let pages = shown.len().div_ceil(HOSTS_PER_PAGE).max(1);
        let page_no = page_no.min(pages);
        let _ = write!(
            body,
            "<h2>Hosts</h2><p class=\"muted\">{} match; page {page_no} of {pages}. Bars: each node's threads and memory, \
             the hatched part used.</p>",
            shown.len()
        );
        body.push_str(
            "<table id=\"hosts\"><thead><tr><th>Host</th><th>Kind</th><th class=\"num\">Free cores</th>\
             <th class=\"num\">Free threads</th><th class=\"num\">Free memory</th><th>Threads per node, from node 0</th>\
             <th>Memory per node, from node 0</th><th>Huge pages free</th><th class=\"num\">VMs</th></tr></thead><tbody>",
        );
        for h in shown.iter().skip((page_no - 1) * HOSTS_PER_PAGE).take(HOSTS_PER_PAGE) {
            let name = escape(&h.name);
            let mut tb = String::new();
            let mut mb = String::new();
            let mut hp = Vec::new();
            for n in &h.summary.nodes {
                tb.push_str(&bar(
                    &format!("node{} threads", n.id.0),
                    u64::from(n.free_threads),
                    u64::from(n.threads),
                    &format!("{} of {} free", n.free_threads, n.threads),
                ));
                mb.push_str(&bar(
                    &format!("node{} memory", n.id.0),
                    n.free_memory,
                    n.memory,
                    &format!("{} of {} free", format_size(n.free_memory), format_size(n.memory)),
                ));
                for (size, free) in n.hugepages.iter().filter(|(_, f)| *f > 0) {
                    hp.push(format!("node{}: {free} x {}", n.id.0, format_size(*size)));
                }
            }
            let _ = write!(
                body,
                "<tr data-host=\"{name}\"><td><a href=\"/hosts/{link}\">{name}</a>{d}</td><td>{kind}</td>\
                 <td class=\"num\">{fc}</td><td class=\"num\">{ft}</td><td class=\"num\">{fm}</td>\
                 <td class=\"bars\">{tb}</td><td class=\"bars\">{mb}</td><td>{hp}</td><td class=\"num\">{v}</td></tr>",
                link = path_escape(&h.name),
                d = if h.drained { " <strong>(drained)</strong>" } else { "" },
                kind = escape(&h.kind()),
                fc = h.summary.free_cores,
                ft = h.summary.free_threads,
                fm = format_size(h.summary.free_memory),
                hp = if hp.is_empty() { "-".to_string() } else { escape(&hp.join(", ")) },
                v = h.state.placements().len(),
            );
        }
        body.push_str("</tbody></table>");
        let link = |p: usize| {
            format!(
                "/?page={p}&kind={}&label={}&min_free_threads={}",
                path_escape(q.kind.as_deref().unwrap_or("")),
                path_escape(q.label.as_deref().unwrap_or("")),
                q.min_free_threads.map(|m| m.to_string()).unwrap_or_default()
            )
        };
        body.push_str("<nav aria-label=\"Pages\"><p>");
        if page_no > 1 {
            let _ = write!(body, "<a href=\"{}\" rel=\"prev\">Previous page</a> ", escape(&link(page_no - 1)));
        }
        if page_no < pages {
            let _ = write!(body, "<a href=\"{}\" rel=\"next\">Next page</a>", escape(&link(page_no + 1)));
        }
        body.push_str("</p></nav>");
    });
    body.push_str("<h2>Recent rejections</h2>");
    let recent = s.recent_rejections();
    if recent.is_empty() {
        body.push_str("<p class=\"muted\">None.</p>");
    } else {
        body.push_str("<ul id=\"rejections\">");
        for r in recent.iter().rev() {
            let _ = write!(body, "<li>{}</li>", escape(r));
        }
        body.push_str("</ul>");
    }
    body.push_str(&place_form(f, &PlaceForm::default()));
    page("Fleet", &body)
}

fn place_form(forms: &Forms, f: &PlaceForm) -> String {
    let v = |o: &Option<String>| escape(o.as_deref().unwrap_or(""));
    let token = forms.fields();
    format!(
        "<h2 id=\"place\">Place a VM</h2><form method=\"post\" action=\"/ui/place\" aria-labelledby=\"place\"><fieldset>\
         <label>Name <input name=\"name\" required value=\"{name}\"></label> \
         <label>vCPUs <input name=\"vcpus\" type=\"number\" min=\"1\" required value=\"{vcpus}\"></label> \
         <label>Memory <input name=\"memory\" placeholder=\"16GiB\" required value=\"{memory}\"></label> \
         <label>CPU <select name=\"cpu\"><option value=\"dedicated\">dedicated</option><option value=\"shared\"{shared}>shared</option></select></label> \
         <label>Max nodes <input name=\"max_nodes\" type=\"number\" min=\"1\" value=\"{max_nodes}\"></label> \
         <label>Hosts <input name=\"hosts\" placeholder=\"h1,h2\" value=\"{hosts}\"></label> \
         <label>Anti-affinity group <input name=\"anti_affinity\" value=\"{group}\"></label> \
         <label><input name=\"dry_run\" type=\"checkbox\" value=\"true\"{dry}> Dry run (show the plan, claim nothing)</label> \
         {token} <button type=\"submit\">Place</button></fieldset></form>",
        name = v(&f.name),
        vcpus = v(&f.vcpus),
        memory = v(&f.memory),
        shared = if f.cpu.as_deref() == Some("shared") { " selected" } else { "" },
        max_nodes = v(&f.max_nodes),
        hosts = v(&f.hosts),
        group = v(&f.anti_affinity),
        dry = if f.dry_run.as_deref() == Some("true") { " checked" } else { "" },
    )
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
                .map(|h| host_page(h, report.as_deref(), &f))
                .ok_or_else(|| ApiError::NotFound(format!("no host {name}")))
        })
    })
    .await
    {
        Ok(text) => html_with(StatusCode::OK, text, cookie),
        Err(r) => r,
    }
}

fn host_page(h: &FleetHost, report: Option<&str>, f: &Forms) -> String {
    let t = &h.topology;
    let name = escape(&h.name);
    let mut body = format!(
        "<h1>Host {name}</h1><p>{kind}; generation {g}{d}; labels: {labels}; reserved CPUs: {resv}.</p>",
        kind = escape(&h.kind()),
        g = h.generation,
        d = if h.drained { "; <strong>drained</strong> (takes no new VMs)" } else { "" },
        labels = if h.labels.is_empty() {
            "none".to_string()
        } else {
            escape(&h.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "))
        },
        resv = if h.state.reservations().cpus.is_empty() {
            "none".to_string()
        } else {
            h.state.reservations().cpus.to_list()
        },
    );
    let styles = numaplace_emit::svg::vm_styles(&h.state);
    body.push_str("<h2>VMs</h2>");
    if styles.is_empty() {
        body.push_str("<p class=\"muted\">None.</p>");
    } else {
        body.push_str("<ul id=\"vms\">");
        let mut placements: Vec<&Placement> = h.state.placements().iter().map(|p| &**p).collect();
        placements.sort_by(|a, b| a.vm.cmp(&b.vm));
        for p in placements {
            let numaplace_emit::svg::VmStyle { index: i, colour, .. } = styles[&p.vm];
            let _ = write!(
                body,
                "<li data-vm=\"{vm}\"><svg width=\"14\" height=\"14\" aria-hidden=\"true\"><rect width=\"14\" height=\"14\" fill=\"url(#vm{i})\" stroke=\"{colour}\"/></svg> \
                 <a href=\"/vms/{link}\">{vm}</a>: {n} {mode} on {on} {nodes}, CPUs {cpus}, {mem}{dev}</li>",
                vm = escape(&p.vm),
                link = path_escape(&p.vm),
                n = plural(p.vcpus.len(), "vCPU"),
                on = noun(p.nodes.len(), "node"),
                mode = numaplace_wire::plan::request::cpu_mode_name(p.cpu_mode),
                nodes = p.nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
                cpus = p.cpuset.to_list(),
                mem = format_size(p.memory_bytes),
                dev = if p.devices.is_empty() { String::new() } else { format!(", devices {}", escape(&p.devices.join(" "))) },
            );
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Threads</h2>");
    // The CLI's renderer (`topology --format svg`), with the VMs drawn on.
    body.push_str(&numaplace_emit::svg::host(t, &h.state));
    body.push_str(
        "<h2>Memory per node</h2><table id=\"memory\"><thead><tr><th>Node</th><th class=\"num\">Memory</th>\
         <th class=\"num\">Free</th><th class=\"num\">Free threads</th><th>Huge pages free</th></tr></thead><tbody>",
    );
    for n in &h.summary.nodes {
        let hp: Vec<String> = n.hugepages.iter().map(|(s, f)| format!("{f} x {}", format_size(*s))).collect();
        let _ = write!(
            body,
            "<tr><td>node{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} of {}</td><td>{}</td></tr>",
            n.id.0,
            format_size(n.memory),
            format_size(n.free_memory),
            n.free_threads,
            n.threads,
            if hp.is_empty() { "-".into() } else { hp.join(", ") }
        );
    }
    body.push_str("</tbody></table>");
    if t.distances_known() {
        body.push_str("<h2>Distances</h2><table id=\"distances\"><thead><tr><th></th>");
        for n in t.nodes() {
            let _ = write!(body, "<th class=\"num\">node{}</th>", n.id.0);
        }
        body.push_str("</tr></thead><tbody>");
        for (i, n) in t.nodes().iter().enumerate() {
            let _ = write!(body, "<tr><th>node{}</th>", n.id.0);
            for j in 0..t.nodes().len() {
                let _ = write!(body, "<td class=\"num\">{}</td>", t.distance(i, j));
            }
            body.push_str("</tr>");
        }
        body.push_str("</tbody></table>");
    }
    if !t.devices().is_empty() {
        body.push_str("<h2>Devices</h2><ul id=\"devices\">");
        for d in t.devices() {
            let holder = h.state.device_holder(&d.address);
            let _ = write!(
                body,
                "<li{attr}>{addr} {kind}{name} on {node}{held}</li>",
                attr = holder.map(|v| format!(" data-vm=\"{}\"", escape(v))).unwrap_or_default(),
                addr = escape(&d.address),
                kind = d.kind.as_str(),
                name = d.name.as_deref().map(|n| format!(" ({})", escape(n))).unwrap_or_default(),
                node = d.node.map_or("an unknown node".to_string(), |n| format!("node{}", n.0)),
                held = holder.map(|v| format!(", held by {}", escape(v))).unwrap_or_default(),
            );
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Agent</h2>");
    match report {
        Some(r) => {
            let _ = write!(body, "<p id=\"agent\">Last report: {}</p>", escape(r));
        }
        None => body.push_str("<p id=\"agent\" class=\"muted\">No agent has reported since this server started.</p>"),
    }
    let token = f.fields();
    let (action, label) = if h.drained { ("undrain", "Undrain") } else { ("drain", "Drain (no new VMs)") };
    let _ = write!(
        body,
        "<h2>Actions</h2><form class=\"inline\" method=\"post\" action=\"/ui/hosts/{link}/{action}\">{token}<button type=\"submit\">{label}</button></form>",
        link = path_escape(&h.name)
    );
    page(&format!("Host {}", h.name), &body)
}

/// `GET /vms/{name}`.
pub async fn vm(State(st): State<AppState>, headers: HeaderMap, P(name): P<String>) -> Response {
    let (f, cookie) = forms(&st, &headers);
    match run(&st, move |s| {
        let (doc, placement, topology) = s.placement(&name)?;
        let samples = s.locality(&name);
        Ok(vm_page(&doc, &placement, &topology, &f, None, &samples))
    })
    .await
    {
        Ok(text) => html_with(StatusCode::OK, text, cookie),
        Err(r) => r,
    }
}

fn vm_page(
    doc: &numaplace_wire::fleet::PlacedDoc,
    p: &Placement,
    topology: &Topology,
    forms: &Forms,
    dry_run: Option<&PlaceForm>,
    samples: &[LocalitySampleDoc],
) -> String {
    let vm = escape(&p.vm);
    let host = escape(&doc.host);
    let mut body = match dry_run {
        Some(_) => format!(
            "<h1>Dry run: {vm}</h1><p class=\"ok\" role=\"status\">Would go on host <a href=\"/hosts/{hl}\">{host}</a>; nothing is claimed yet.</p>",
            hl = path_escape(&doc.host)
        ),
        None => format!(
            "<h1>VM {vm}</h1><p>On host <a href=\"/hosts/{hl}\">{host}</a> (placed by the {origin}){group}.</p>",
            hl = path_escape(&doc.host),
            origin = if doc.origin == "agent" { "host's agent: the service did not place it" } else { "service" },
            group = doc.group.as_deref().map(|g| format!(", anti-affinity group {}", escape(g))).unwrap_or_default(),
        ),
    };
    let g = &p.guest;
    let _ = write!(
        body,
        "<p>{n}, {mode}; {mem}, memory {mm}; the guest sees {s} x {d} x {c} x {t} in {cells}.</p>",
        n = plural(p.vcpus.len(), "vCPU"),
        mode = numaplace_wire::plan::request::cpu_mode_name(p.cpu_mode),
        mem = format_size(p.memory_bytes),
        mm = match p.memory_mode {
            numaplace_plan::MemoryMode::Strict => "bound strictly",
            numaplace_plan::MemoryMode::Interleave => "interleaved",
        },
        s = plural(g.sockets, "socket"),
        d = plural(g.dies, "die"),
        c = plural(g.cores, "core"),
        t = plural(g.threads, "thread"),
        cells = plural(g.cells.len(), "NUMA node"),
    );
    body.push_str(
        "<h2>Guest nodes on host nodes</h2><table id=\"cells\"><thead><tr><th>Guest node</th><th>Host node</th>\
         <th>vCPUs</th><th class=\"num\">Memory</th></tr></thead><tbody>",
    );
    for c in &g.cells {
        let _ = write!(
            body,
            "<tr data-cell=\"{id}\" data-host-node=\"{hn}\"><td>guest node {id}</td><td>host node {hn}</td><td>{v}</td><td class=\"num\">{m}</td></tr>",
            id = c.id,
            hn = c.host_node.0,
            v = c.vcpus.to_list(),
            m = format_size(c.memory_bytes),
        );
    }
    body.push_str("</tbody></table><h2>vCPU to CPU</h2><table id=\"vcpus\"><thead><tr><th>vCPU</th><th>Host CPU</th><th>Host node</th></tr></thead><tbody>");
    for v in &p.vcpus {
        let runs = match p.floats(v.vcpu) {
            Some(set) => format!("floats over {}", set.to_list()),
            None => v.pu.to_string(),
        };
        let _ = write!(body, "<tr><td>{}</td><td>{runs}</td><td>{}</td></tr>", v.vcpu, v.node.0);
    }
    body.push_str("</tbody></table><h2>Memory per host node</h2><table id=\"memnodes\"><tbody>");
    for (n, b) in &p.memory {
        let _ = write!(body, "<tr><td>node{}</td><td class=\"num\">{}</td></tr>", n.0, format_size(*b));
    }
    body.push_str("</tbody></table>");
    if !doc.placement.alternatives.is_empty() || !doc.placement.notes.is_empty() {
        body.push_str("<h2>Why here</h2><ul id=\"alternatives\">");
        for a in &doc.placement.alternatives {
            let nodes: Vec<String> = a.nodes.iter().map(|n| n.to_string()).collect();
            let _ = write!(body, "<li>nodes {}: {}</li>", nodes.join(","), escape(&a.verdict));
        }
        for n in &doc.placement.notes {
            let _ = write!(body, "<li>note: {}</li>", escape(n.text()));
        }
        body.push_str("</ul>");
    }
    if dry_run.is_none() {
        body.push_str(&locality_view(p, samples));
    }
    let xml = numaplace_libvirt::domain::domain_xml(
        p,
        &numaplace_libvirt::domain::LibvirtOptions::default().for_host(topology),
    );
    let qemu_opts = numaplace_emit::qemu::QemuOptions::default();
    let qemu_opts = qemu_opts.clone().for_arch(topology.arch()).unwrap_or(qemu_opts);
    let qemu = numaplace_emit::qemu::command_line(p, &qemu_opts);
    let _ = write!(
        body,
        "<h2>libvirt domain XML <button type=\"button\" data-copy=\"xml\">Copy</button></h2><pre id=\"xml\">{}</pre>\
         <h2>QEMU arguments <button type=\"button\" data-copy=\"qemu\">Copy</button></h2><pre id=\"qemu\">{}</pre>",
        escape(&xml),
        escape(&qemu)
    );
    let token = forms.fields();
    match dry_run {
        Some(form) => {
            let mut claim = form.clone();
            claim.dry_run = None;
            claim.token = None;
            claim.csrf = None;
            body.push_str(&place_form(forms, &claim).replace("Place a VM", "Place it for real"));
        }
        None if doc.origin == "service" => {
            let link = path_escape(&p.vm);
            let _ = write!(
                body,
                "<h2>Actions</h2><form class=\"inline\" method=\"post\" action=\"/ui/vms/{link}/move\">{token}<button type=\"submit\">Move to another host</button></form> \
                 <form class=\"inline\" method=\"post\" action=\"/ui/vms/{link}/delete\">{token}<button type=\"submit\">Delete</button></form>"
            );
        }
        None => {}
    }
    page(&format!("VM {}", p.vm), &body)
}

/// `None` when the form's token is right (or none is needed), else the
/// page that says so.
/// esxtop's NUMA view over time: N%L (memory on the VM's own nodes) as a
/// line, and the latest memory per node, from the agent's reports.
fn locality_view(p: &Placement, samples: &[LocalitySampleDoc]) -> String {
    let mut out = String::from("<h2>Memory locality</h2>");
    let Some(last) = samples.last() else {
        out.push_str("<p id=\"locality\" class=\"muted\">No agent has reported this VM's memory since this server started (the agent reads it from the running QEMU process).</p>");
        return out;
    };
    let (w, h) = (480.0, 80.0);
    let n = samples.len().max(2) as f64 - 1.0;
    let points: Vec<String> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{:.1},{:.1}",
                30.0 + i as f64 / n * (w - 40.0),
                10.0 + (100 - s.local_percent.min(100)) as f64 / 100.0 * (h - 20.0)
            )
        })
        .collect();
    let home: Vec<String> = p.nodes.iter().map(|n| n.0.to_string()).collect();
    let _ = write!(
        out,
        "<p id=\"locality\">N%L now <strong>{}%</strong> (memory on {} {} where its vCPUs run), over the last {}:</p>\
         <svg width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"N%L over the last {} reports, now {}%\">\
         <line x1=\"30\" y1=\"10\" x2=\"{x2}\" y2=\"10\" stroke=\"#ccc\"/><text x=\"0\" y=\"14\" font-size=\"10\">100%</text>\
         <line x1=\"30\" y1=\"{y0}\" x2=\"{x2}\" y2=\"{y0}\" stroke=\"#ccc\"/><text x=\"8\" y=\"{y0}\" font-size=\"10\">0%</text>\
         <polyline fill=\"none\" stroke=\"#1a4f8b\" stroke-width=\"2\" points=\"{}\"/></svg>",
        last.local_percent,
        noun(home.len(), "node"),
        home.join(","),
        plural(samples.len(), "report"),
        samples.len(),
        last.local_percent,
        points.join(" "),
        x2 = w - 10.0,
        y0 = h - 10.0,
    );
    out.push_str("<table id=\"memnow\"><thead><tr><th>Node</th><th class=\"num\">Memory now</th></tr></thead><tbody>");
    for m in &last.nodes {
        let _ = write!(out, "<tr><td>node{}</td><td class=\"num\">{}</td></tr>", m.node, format_size(m.bytes));
    }
    out.push_str("</tbody></table>");
    out
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
            page(
                "Form expired",
                "<p class=\"err\" role=\"alert\">This form did not come from this server's page in this browser \
                 session (or the session expired): open the page again and resubmit.</p>",
            ),
        ));
    }
    check_token(st, token)
}

fn check_token(st: &AppState, given: Option<&str>) -> Option<Response> {
    match &st.token {
        Some(t) if !given.is_some_and(|g| crate::http::constant_time_eq(g.as_bytes(), t.as_bytes())) => Some(html(
            StatusCode::UNAUTHORIZED,
            page("Token needed", "<p class=\"err\" role=\"alert\">This action needs the service's token.</p>"),
        )),
        Some(_) => {
            // The form's field proved the token: the logs name it.
            crate::logging::authenticated();
            None
        }
        None => None,
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
    let request = match form.to_request_json() {
        Ok(j) => j,
        Err(e) => return error_page(&ApiError::BadRequest(e)),
    };
    let dry = form.dry_run.as_deref() == Some("true");
    let name = form.name.clone().unwrap_or_default();
    let result = run(&st, move |s| {
        let placed = s.place(request.as_bytes(), dry)?;
        if dry {
            let placement =
                placed.doc.placement.to_placement("placement").map_err(|e| ApiError::Internal(e.to_string()))?;
            let topology = s
                .with_fleet(|f| f.host(&placed.doc.host).map(|h| h.topology.clone()))
                .ok_or_else(|| ApiError::NotFound(format!("no host {}", placed.doc.host)))?;
            Ok(Some(vm_page(&placed.doc, &placement, &topology, &f, Some(&form), &[])))
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
    match run(&st, move |s| s.delete(&name)).await {
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
    match run(&st, move |s| s.move_vm(&name, b"", false)).await {
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
        _ => return error_page(&ApiError::NotFound(format!("no action {action}"))),
    };
    let to = name.clone();
    match run(&st, move |s| s.drain(&name, drained)).await {
        Ok(_) => Redirect::to(&format!("/hosts/{}", path_escape(&to))).into_response(),
        Err(r) => r,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Each page rendered with hostile names (quotes, markup, a bidi
    //! override, 250 characters) has exactly the markup it has with plain
    //! names: every name is text, never tags or attributes.
    use super::*;
    use crate::service::HostUpload;
    use numaplace_plan::HostState;
    use std::sync::Arc;

    /// Markup, both quotes, a bidi override, then 250 characters in all.
    fn hostile() -> String {
        let mut s = String::from("\"'><script>alert(1)</script><b x=\"\u{202e}evil");
        while s.chars().count() < 250 {
            s.push('x');
        }
        s
    }

    /// What shapes a page: its tags and attribute quotes. A name that
    /// escaped its escaping would add some.
    fn shape(html: &str) -> (usize, usize, usize, usize) {
        let n = |c: char| html.matches(c).count();
        (n('<'), n('>'), n('"'), n('\''))
    }

    fn assert_inert(plain: &str, evil: &str) {
        if shape(plain) != shape(evil) {
            let (mut a, mut b) = (plain.split('"'), evil.split('"'));
            let first = loop {
                match (a.next(), b.next()) {
                    (Some(x), Some(y)) if x == y || !(x.contains('<') || y.contains('<')) => continue,
                    (x, y) => break format!("{x:?}\n{y:?}"),
                }
            };
            panic!(
                "a hostile name changed the page's markup: {:?} {:?}; first difference:\n{first}",
                shape(plain),
                shape(evil)
            );
        }
        assert!(!evil.contains("<script>alert"), "{evil}");
        assert!(evil.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "the name is shown, escaped: {evil}");
        assert!(evil.contains(&"x".repeat(200)), "a long name is shown whole");
    }

    fn forms() -> Forms {
        Forms { token_needed: true, csrf: "0123456789abcdef0123456789abcdef".into() }
    }

    fn corona() -> Vec<u8> {
        std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
    }

    /// A service with host `h1` and the VM `vm1` placed on it.
    fn service() -> Service {
        let svc = Service::new(numaplace_store::open("sqlite::memory:").unwrap(), 1, 1).unwrap();
        svc.put_host("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
        svc.place(br#"{"name": "vm1", "vcpus": 4, "memory": "8GiB", "constraints": {"anti_affinity": "g1"}}"#, false)
            .unwrap();
        svc
    }

    /// The host page of `h1` with its host, label, VM and report named
    /// `name`.
    fn host_named(svc: &Service, name: &str) -> String {
        let mut h = svc.with_fleet(|f| f.host("h1").unwrap().clone());
        let topology = h.topology.clone();
        let (_, placement, _) = svc.placement("vm1").unwrap();
        let mut p = placement.clone();
        p.vm = name.to_string();
        let mut state = HostState::new(&topology);
        state.place(&p).unwrap();
        let mut labels = BTreeMap::new();
        labels.insert(name.to_string(), name.to_string());
        let mut renamed = FleetHost::new(name, Arc::clone(&topology), state, labels, h.generation);
        renamed.drained = true;
        h = renamed;
        host_page(&h, Some(&format!("recorded {name}")), &forms())
    }

    #[test]
    fn the_host_page_shows_hostile_names_as_text() {
        let svc = service();
        let plain = host_named(&svc, "plain");
        let evil = host_named(&svc, &hostile());
        assert_inert(&plain, &evil);
        assert!(evil.contains("data-vm=\"&quot;&apos;&gt;&lt;script&gt;"), "the picture's attribute is escaped");
    }

    fn vm_named(svc: &Service, name: &str, dry: bool) -> String {
        let (mut doc, placement, topology) = svc.placement("vm1").unwrap();
        let mut p = placement.clone();
        p.vm = name.to_string();
        doc.host = name.to_string();
        doc.group = Some(name.to_string());
        doc.placement.vm = name.to_string();
        let form = PlaceForm { name: Some(name.to_string()), hosts: Some(name.to_string()), ..Default::default() };
        let samples = [LocalitySampleDoc::default()];
        vm_page(&doc, &p, &topology, &forms(), dry.then_some(&form), &samples)
    }

    #[test]
    fn the_vm_page_shows_hostile_names_as_text() {
        let svc = service();
        for dry in [false, true] {
            let plain = vm_named(&svc, "plain", dry);
            let evil = vm_named(&svc, &hostile(), dry);
            // The domain XML and QEMU arguments quote the name too, each
            // in its own syntax, then escaped for the page: compare the
            // page without them.
            let cut = |s: &str| s.split("<h2>libvirt domain XML").next().unwrap().to_string();
            assert_inert(&cut(&plain), &cut(&evil));
            assert!(!evil.contains("<script>alert"), "{evil}");
        }
    }

    #[test]
    fn the_fleet_page_shows_hostile_filters_as_text() {
        let svc = service();
        let page_for = |label: &str| {
            let q =
                FleetPageQuery { label: Some(label.to_string()), kind: Some(label.to_string()), ..Default::default() };
            fleet_page(&svc, &q, &forms())
        };
        let plain = page_for("plain");
        let evil = page_for(&hostile());
        assert_eq!(shape(&plain), shape(&evil), "{evil}");
        assert!(!evil.contains("<script>alert"), "{evil}");
    }

    #[test]
    fn pages_load_only_their_own_files_and_set_a_strict_policy() {
        let svc = service();
        let text = fleet_page(&svc, &FleetPageQuery::default(), &forms());
        assert!(!text.contains("<style") && !text.contains("style=\""), "no inline style");
        assert!(!text.contains("<script>"), "no inline script");
        assert!(text.contains(&format!("<script src=\"{}\"></script>", JS.url())));
        assert!(text.contains(&CSS.url()) && text.contains(&PICTURE_CSS.url()));
        let resp = html(StatusCode::OK, text);
        let csp = resp.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("default-src 'self'") && csp.contains("script-src 'self';"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        // The asset's name changes with its content.
        assert_ne!(CSS.file(), JS.file());
        assert!(CSS.file().starts_with("web.") && CSS.file().ends_with(".css"));
    }
}
