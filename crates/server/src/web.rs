//! The web view (issue 18): server-rendered HTML with inline SVG, nothing
//! fetched from elsewhere. Each page is a typed view-model built from the
//! fleet ([`FleetPage`], [`HostPage`], [`VmPage`], [`MessagePage`]) and
//! rendered by an askama template (`templates/`), checked when the crate
//! is built and escaping every value; the style and script are static
//! files ([`CSS`], [`PICTURE_CSS`], [`JS`]) under a strict
//! Content-Security-Policy. Pages at `/` (the
//! fleet), `/hosts/{name}` and `/vms/{name}`, each bookmarkable; actions
//! are plain HTML forms posting to `/ui/...`, checked against the same
//! token as the API (a form field, since a form cannot set headers).
//!
//! Readable without colour: every bar carries its figures as text, every
//! thread its VM's name, each VM a hatch pattern besides its colour, and
//! reserved CPUs a cross-hatch and the word "host". Keyboard: every VM and
//! host is a link, and focusing one highlights its threads as hovering
//! does.

use crate::state::AppState;
use crate::command::{Delete, Drain, FleetView, HostCondition, HostFilter, Move, Place};
use crate::credentials::{Principal, Role};
use crate::edge::{P, Q};
use crate::error::Missing;
use crate::error::ApiError;
use crate::service::Service;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use numaplace_emit::text::{noun, plural};
use numaplace_fleet::FleetHost;
use numaplace_plan::Placement;
use numaplace_topo::{format_size, Topology};
use numaplace_wire::fleet::{path_escape, FleetPageQuery, LocalitySampleDoc, PlaceForm, TokenForm};

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

/// What every form of a page carries: the token field when the service
/// has one, and the session's CSRF token (`edge::session`).
#[derive(Clone, Debug)]
pub struct Forms {
    /// Whether the forms ask for the service's token.
    pub token_needed: bool,
    /// The session's CSRF token, the value of each form's `csrf` field.
    pub csrf: String,
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

/// The files every page loads ([`CSS`], [`PICTURE_CSS`], [`JS`]).
#[derive(Clone, Debug)]
pub struct Assets {
    /// The pages' style.
    pub css: String,
    /// The host picture's style.
    pub picture: String,
    /// The pages' script.
    pub js: String,
}

impl Default for Assets {
    fn default() -> Assets {
        Assets { css: CSS.url(), picture: PICTURE_CSS.url(), js: JS.url() }
    }
}

/// Renders a page's view-model; the templates are checked when the crate
/// is built, so only a writer's failure is left, answered as a 500.
fn render(page: &impl Template) -> String {
    page.render().unwrap_or_else(|e| {
        tracing::error!(code = "internal", "rendering a page: {e}");
        String::from("<!DOCTYPE html>\n<title>Error - numaplace</title><p>The page could not be rendered.</p>\n")
    })
}

/// A page that says one thing: an error, a refused form.
#[derive(Template)]
#[template(path = "message.html")]
pub struct MessagePage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its title.
    pub title: String,
    /// Its heading, when any.
    pub heading: Option<String>,
    /// What it says.
    pub message: String,
}

impl MessagePage {
    fn new(title: &str, heading: Option<String>, message: impl Into<String>) -> MessagePage {
        MessagePage { assets: Assets::default(), title: title.into(), heading, message: message.into() }
    }
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

/// A small bar: `used` of `total`, with the figures as text beside it and
/// as its accessible name.
#[derive(Clone, Debug)]
pub struct Bar {
    /// What it measures (`node0 threads`).
    pub label: String,
    /// Its figures as words.
    pub text: String,
    /// The used part's width, of 40.
    pub used: String,
}

impl Bar {
    fn new(label: String, free: u64, total: u64, text: String) -> Bar {
        let used = if total == 0 { 0.0 } else { total.saturating_sub(free) as f64 / total as f64 * 40.0 };
        Bar { label, text, used: format!("{used:.1}") }
    }
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

/// Hosts in one condition, on the fleet page's summary.
#[derive(Clone, Debug)]
pub struct ConditionCount {
    /// The condition's name, as the filter takes it.
    pub name: &'static str,
    /// Its hosts.
    pub hosts: u64,
    /// The filter's address for it.
    pub link: String,
    /// Whether the filter asks for it.
    pub selected: bool,
}

/// A host kind in the fleet page's filter.
#[derive(Clone, Debug)]
pub struct KindOption {
    /// The kind.
    pub name: String,
    /// Its hosts.
    pub hosts: u64,
    /// Whether the filter asks for it.
    pub selected: bool,
}

/// A host's row on the fleet page.
#[derive(Clone, Debug)]
pub struct HostRow {
    /// Its name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Whether it is drained.
    pub drained: bool,
    /// Its kind.
    pub kind: String,
    /// Free cores.
    pub free_cores: u32,
    /// Free threads.
    pub free_threads: u32,
    /// Free memory, in words.
    pub free_memory: String,
    /// Each node's threads.
    pub threads: Vec<Bar>,
    /// Each node's memory.
    pub memory: Vec<Bar>,
    /// Free huge pages per node, in words, or `-`.
    pub hugepages: String,
    /// VMs on it.
    pub vms: usize,
}

/// The place form's fields.
#[derive(Clone, Debug, Default)]
pub struct PlaceFormView {
    /// The form's heading.
    pub heading: &'static str,
    /// Field values, as given.
    pub name: String,
    /// vCPUs.
    pub vcpus: String,
    /// Memory.
    pub memory: String,
    /// Whether `shared` is chosen.
    pub shared: bool,
    /// Max nodes.
    pub max_nodes: String,
    /// Hosts.
    pub hosts: String,
    /// Anti-affinity group.
    pub group: String,
    /// Whether the dry run box is ticked.
    pub dry: bool,
}

impl PlaceFormView {
    fn of(heading: &'static str, f: &PlaceForm) -> PlaceFormView {
        let v = |o: &Option<String>| o.clone().unwrap_or_default();
        PlaceFormView {
            heading,
            name: v(&f.name),
            vcpus: v(&f.vcpus),
            memory: v(&f.memory),
            shared: f.cpu.as_deref() == Some("shared"),
            max_nodes: v(&f.max_nodes),
            hosts: v(&f.hosts),
            group: v(&f.anti_affinity),
            dry: f.dry_run.as_deref() == Some("true"),
        }
    }
}

/// The fleet page (`/`).
#[derive(Template)]
#[template(path = "fleet.html")]
pub struct FleetPage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its forms' fields.
    pub forms: Forms,
    /// The fleet's capacity (`metrics::capacity`, as `/metrics` shows it).
    pub total: crate::metrics::Capacity,
    /// Free memory, in words.
    pub free_memory: String,
    /// Memory, in words.
    pub memory: String,
    /// What free capacity is stranded below.
    pub stranded_below: &'static str,
    /// The kinds to filter by.
    pub kinds: Vec<KindOption>,
    /// Hosts per condition, each a link to the hosts in it.
    pub conditions: Vec<ConditionCount>,
    /// The address of every host matching the other filters.
    pub all_hosts: String,
    /// The label filter, as given.
    pub label: String,
    /// The free threads filter, as given.
    pub min_free_threads: String,
    /// Hosts the filters match.
    pub matched: usize,
    /// This page's number, from 1.
    pub page_no: usize,
    /// Pages.
    pub pages: usize,
    /// Hosts per page.
    pub per_page: usize,
    /// This page's hosts.
    pub hosts: Vec<HostRow>,
    /// The previous page's address.
    pub prev: Option<String>,
    /// The next page's address.
    pub next: Option<String>,
    /// Recent rejections, newest first.
    pub rejections: Vec<String>,
    /// The place form.
    pub place: PlaceFormView,
}

fn fleet_page(s: &Service, q: &FleetPageQuery, view: &FleetView, f: &Forms) -> FleetPage {
    let mut page = s.with_fleet(|fleet| {
        // The one computation of free and stranded capacity, as
        // `/metrics` shows it per kind.
        let (by_kind, total) = crate::metrics::capacity(fleet);
        let kinds = by_kind
            .iter()
            .map(|(k, c)| KindOption { name: k.clone(), hosts: c.hosts, selected: q.kind.as_deref() == Some(k) })
            .collect();
        // One pass over the hosts, keeping references only: a zone of
        // 100,000 hosts renders one page of rows, never every host. The
        // kind filter compares each host's kind worded once per topology.
        let kind = q.kind.as_deref().filter(|k| !k.is_empty());
        let filter = HostFilter { kind: None, ..view.filter.clone() };
        let mut names = crate::metrics::KindNames::default();
        let shown: Vec<&FleetHost> =
            fleet.hosts().filter(|h| kind.is_none_or(|k| names.of(h) == k) && filter.matches(h)).collect();
        let per_page = view.per_page;
        let pages = shown.len().div_ceil(per_page).max(1);
        let page_no = view.page.min(pages);
        let hosts = shown.iter().skip((page_no - 1) * per_page).take(per_page).map(|h| host_row(h)).collect();
        let link = |p: usize, state: Option<HostCondition>| {
            let mut l = format!(
                "/?page={p}&kind={}&label={}&min_free_threads={}&state={}",
                path_escape(q.kind.as_deref().unwrap_or("")),
                path_escape(q.label.as_deref().unwrap_or("")),
                view.filter.min_free_threads.map(|m| m.to_string()).unwrap_or_default(),
                state.map_or("", HostCondition::name),
            );
            if per_page != HOSTS_PER_PAGE {
                l.push_str(&format!("&per_page={per_page}"));
            }
            l
        };
        let in_service = total.hosts - total.drained;
        let conditions = HostCondition::ALL
            .into_iter()
            .map(|c| ConditionCount {
                name: c.name(),
                hosts: match c {
                    HostCondition::InService => in_service,
                    HostCondition::Empty => total.empty_hosts,
                    HostCondition::Stranded => total.stranded_hosts,
                    HostCondition::Drained => total.drained,
                },
                link: link(1, Some(c)),
                selected: view.filter.state == Some(c),
            })
            .collect();
        FleetPage {
            assets: Assets::default(),
            forms: f.clone(),
            total,
            free_memory: format_size(total.free_memory),
            memory: format_size(total.memory),
            stranded_below: crate::metrics::STRANDED_BELOW,
            kinds,
            conditions,
            all_hosts: link(1, None),
            label: q.label.clone().unwrap_or_default(),
            min_free_threads: view.filter.min_free_threads.map(|m| m.to_string()).unwrap_or_default(),
            matched: shown.len(),
            page_no,
            pages,
            per_page,
            hosts,
            prev: (page_no > 1).then(|| link(page_no - 1, view.filter.state)),
            next: (page_no < pages).then(|| link(page_no + 1, view.filter.state)),
            rejections: Vec::new(),
            place: PlaceFormView::of("Place a VM", &PlaceForm::default()),
        }
    });
    page.rejections = s.recent_rejections().into_iter().rev().collect();
    page
}

fn host_row(h: &FleetHost) -> HostRow {
    let mut threads = Vec::new();
    let mut memory = Vec::new();
    let mut hp = Vec::new();
    for n in &h.summary.nodes {
        threads.push(Bar::new(
            format!("node{} threads", n.id.0),
            u64::from(n.free_threads),
            u64::from(n.threads),
            format!("{} of {} free", n.free_threads, n.threads),
        ));
        memory.push(Bar::new(
            format!("node{} memory", n.id.0),
            n.free_memory,
            n.memory,
            format!("{} of {} free", format_size(n.free_memory), format_size(n.memory)),
        ));
        for (size, free) in n.hugepages.iter().filter(|(_, f)| *f > 0) {
            hp.push(format!("node{}: {free} x {}", n.id.0, format_size(*size)));
        }
    }
    HostRow {
        name: h.name.clone(),
        link: path_escape(&h.name),
        drained: h.drained,
        kind: h.kind(),
        free_cores: h.summary.free_cores,
        free_threads: h.summary.free_threads,
        free_memory: format_size(h.summary.free_memory),
        threads,
        memory,
        hugepages: if hp.is_empty() { "-".to_string() } else { hp.join(", ") },
        vms: h.state.placements().len(),
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

/// A VM in a host page's list.
#[derive(Clone, Debug)]
pub struct VmItem {
    /// Its name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Its pattern in the picture (`#vmN`).
    pub style: usize,
    /// Its colour.
    pub colour: &'static str,
    /// What it takes, in words.
    pub line: String,
}

/// A node's row in a host page's memory table.
#[derive(Clone, Debug)]
pub struct NodeRow {
    /// The node's number.
    pub id: u32,
    /// Memory, in words.
    pub memory: String,
    /// Free memory, in words.
    pub free: String,
    /// Free threads.
    pub free_threads: u32,
    /// Threads.
    pub threads: u32,
    /// Free huge pages, in words, or `-`.
    pub hugepages: String,
}

/// A device in a host page's list.
#[derive(Clone, Debug)]
pub struct DeviceItem {
    /// The VM holding it, when any.
    pub holder: Option<String>,
    /// What it is, in words.
    pub text: String,
}

/// A host's page (`/hosts/{name}`).
#[derive(Template)]
#[template(path = "host.html")]
pub struct HostPage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its forms' fields.
    pub forms: Forms,
    /// The host's name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Its kind.
    pub kind: String,
    /// The store's generation.
    pub generation: i64,
    /// Whether it is drained.
    pub drained: bool,
    /// Its labels, in words.
    pub labels: String,
    /// Its reserved CPUs, in words.
    pub reserved: String,
    /// Its VMs in name order.
    pub vms: Vec<VmItem>,
    /// The picture of its threads (`numaplace_emit::svg::host`, which
    /// escapes every name it draws).
    pub picture: String,
    /// Its nodes.
    pub nodes: Vec<NodeRow>,
    /// Distances, node by node, when known.
    pub distances: Vec<(u32, Vec<u32>)>,
    /// Its devices.
    pub devices: Vec<DeviceItem>,
    /// The agent's last report, in words.
    pub report: Option<String>,
    /// The action offered: `drain` or `undrain`.
    pub action: &'static str,
    /// Its button's words.
    pub action_label: &'static str,
}

fn host_page(h: &FleetHost, report: Option<&str>, f: &Forms) -> HostPage {
    let t = &h.topology;
    let styles = numaplace_emit::svg::vm_styles(&h.state);
    let mut placements: Vec<&Placement> = h.state.placements().iter().map(|p| &**p).collect();
    placements.sort_by(|a, b| a.vm.cmp(&b.vm));
    let vms = placements
        .into_iter()
        .map(|p| {
            let style = styles.get(&p.vm).copied();
            VmItem {
                name: p.vm.clone(),
                link: path_escape(&p.vm),
                style: style.map_or(0, |s| s.index),
                colour: style.map_or("#000", |s| s.colour),
                line: format!(
                    "{} {} on {} {}, CPUs {}, {}{}",
                    plural(p.vcpus.len(), "vCPU"),
                    numaplace_wire::plan::request::cpu_mode_name(p.cpu_mode),
                    noun(p.nodes.len(), "node"),
                    p.nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
                    p.cpuset.to_list(),
                    format_size(p.memory_bytes),
                    if p.devices.is_empty() { String::new() } else { format!(", devices {}", p.devices.join(" ")) },
                ),
            }
        })
        .collect();
    let nodes = h
        .summary
        .nodes
        .iter()
        .map(|n| {
            let hp: Vec<String> = n.hugepages.iter().map(|(s, f)| format!("{f} x {}", format_size(*s))).collect();
            NodeRow {
                id: n.id.0,
                memory: format_size(n.memory),
                free: format_size(n.free_memory),
                free_threads: n.free_threads,
                threads: n.threads,
                hugepages: if hp.is_empty() { "-".into() } else { hp.join(", ") },
            }
        })
        .collect();
    let distances = if t.distances_known() {
        t.nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.0, (0..t.nodes().len()).map(|j| t.distance(i, j)).collect()))
            .collect()
    } else {
        Vec::new()
    };
    let devices = t
        .devices()
        .iter()
        .map(|d| {
            let holder = h.state.device_holder(&d.address).map(str::to_string);
            DeviceItem {
                text: format!(
                    "{} {}{} on {}{}",
                    d.address,
                    d.kind.as_str(),
                    d.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default(),
                    d.node.map_or("an unknown node".to_string(), |n| format!("node{}", n.0)),
                    holder.as_deref().map(|v| format!(", held by {v}")).unwrap_or_default(),
                ),
                holder,
            }
        })
        .collect();
    let (action, action_label) = if h.drained { ("undrain", "Undrain") } else { ("drain", "Drain (no new VMs)") };
    HostPage {
        assets: Assets::default(),
        forms: f.clone(),
        name: h.name.clone(),
        link: path_escape(&h.name),
        kind: h.kind(),
        generation: h.generation,
        drained: h.drained,
        labels: if h.labels.is_empty() {
            "none".to_string()
        } else {
            h.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
        },
        reserved: if h.state.reservations().cpus.is_empty() {
            "none".to_string()
        } else {
            h.state.reservations().cpus.to_list()
        },
        vms,
        // The CLI's renderer (`topology --format svg`), with the VMs drawn on.
        picture: numaplace_emit::svg::host(t, &h.state),
        nodes,
        distances,
        devices,
        report: report.map(str::to_string),
        action,
        action_label,
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

/// A guest cell on a VM's page.
#[derive(Clone, Debug)]
pub struct CellRow {
    /// The guest node.
    pub id: u32,
    /// The host node under it.
    pub host_node: u32,
    /// Its vCPUs, as a list.
    pub vcpus: String,
    /// Its memory, in words.
    pub memory: String,
}

/// esxtop's NUMA view over time on a VM's page: N%L (memory on the VM's
/// own nodes) as a line, and the latest memory per node, from the
/// agent's reports.
#[derive(Clone, Debug, Default)]
pub struct LocalityView {
    /// N%L now, when the agent has reported the VM.
    pub now: Option<u32>,
    /// The VM's own nodes, in words.
    pub home: String,
    /// How many reports, in words.
    pub reports: String,
    /// How many reports.
    pub count: usize,
    /// The line's points.
    pub points: String,
    /// The latest memory per node.
    pub nodes: Vec<(u32, String)>,
}

impl LocalityView {
    fn of(p: &Placement, samples: &[LocalitySampleDoc]) -> LocalityView {
        let Some(last) = samples.last() else { return LocalityView::default() };
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
        LocalityView {
            now: Some(last.local_percent),
            home: format!("{} {}", noun(home.len(), "node"), home.join(",")),
            reports: plural(samples.len(), "report"),
            count: samples.len(),
            points: points.join(" "),
            nodes: last.nodes.iter().map(|m| (m.node, format_size(m.bytes))).collect(),
        }
    }
}

/// A VM's page (`/vms/{name}`), or a dry run's.
#[derive(Template)]
#[template(path = "vm.html")]
pub struct VmPage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its forms' fields.
    pub forms: Forms,
    /// Whether this is a dry run's plan, nothing claimed.
    pub dry_run: bool,
    /// The VM's name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Its host.
    pub host: String,
    /// Its host as a path segment.
    pub host_link: String,
    /// Who placed it, in words.
    pub origin: &'static str,
    /// Its anti-affinity group.
    pub group: Option<String>,
    /// Its size and shape, in words.
    pub summary: String,
    /// Its guest cells.
    pub cells: Vec<CellRow>,
    /// vCPU, where it runs, host node.
    pub vcpus: Vec<(u32, String, u32)>,
    /// Memory per host node.
    pub memory: Vec<(u32, String)>,
    /// Why here: the alternatives' verdicts and the planner's notes.
    pub why: Vec<String>,
    /// Its locality (not on a dry run).
    pub locality: Option<LocalityView>,
    /// Its libvirt domain XML.
    pub xml: String,
    /// Its QEMU arguments.
    pub qemu: String,
    /// A dry run's form to place it for real.
    pub place: Option<PlaceFormView>,
    /// Whether move and delete are offered (a VM the service placed).
    pub actions: bool,
}

fn vm_page(
    doc: &numaplace_wire::fleet::PlacedDoc,
    p: &Placement,
    topology: &Topology,
    forms: &Forms,
    dry_run: Option<&PlaceForm>,
    samples: &[LocalitySampleDoc],
) -> VmPage {
    let g = &p.guest;
    let summary = format!(
        "{n}, {mode}; {mem}, memory {mm}; the guest sees {s} x {d} x {c} x {t} in {cells}.",
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
    let mut why: Vec<String> = doc
        .placement
        .alternatives
        .iter()
        .map(|a| {
            let nodes: Vec<String> = a.nodes.iter().map(|n| n.to_string()).collect();
            format!("nodes {}: {}", nodes.join(","), a.verdict)
        })
        .collect();
    why.extend(doc.placement.notes.iter().map(|n| format!("note: {}", n.text())));
    let xml = numaplace_libvirt::domain::domain_xml(
        p,
        &numaplace_libvirt::domain::LibvirtOptions::default().for_host(topology),
    );
    let qemu_opts = numaplace_emit::qemu::QemuOptions::default();
    let qemu_opts = qemu_opts.clone().for_arch(topology.arch()).unwrap_or(qemu_opts);
    let place = dry_run.map(|form| {
        let mut claim = form.clone();
        claim.dry_run = None;
        claim.token = None;
        claim.csrf = None;
        PlaceFormView::of("Place it for real", &claim)
    });
    VmPage {
        assets: Assets::default(),
        forms: forms.clone(),
        dry_run: dry_run.is_some(),
        name: p.vm.clone(),
        link: path_escape(&p.vm),
        host: doc.host.clone(),
        host_link: path_escape(&doc.host),
        origin: if doc.origin == "agent" { "host's agent: the service did not place it" } else { "service" },
        group: doc.group.clone(),
        summary,
        cells: g
            .cells
            .iter()
            .map(|c| CellRow {
                id: c.id,
                host_node: c.host_node.0,
                vcpus: c.vcpus.to_list(),
                memory: format_size(c.memory_bytes),
            })
            .collect(),
        vcpus: p
            .vcpus
            .iter()
            .map(|v| {
                let runs = match p.floats(v.vcpu) {
                    Some(set) => format!("floats over {}", set.to_list()),
                    None => v.pu.to_string(),
                };
                (v.vcpu, runs, v.node.0)
            })
            .collect(),
        memory: p.memory.iter().map(|(n, b)| (n.0, format_size(*b))).collect(),
        why,
        locality: dry_run.is_none().then(|| LocalityView::of(p, samples)),
        xml,
        qemu: numaplace_emit::qemu::command_line(p, &qemu_opts),
        place,
        actions: dry_run.is_none() && doc.origin == "service",
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
    let place = match form.to_request_value().map_err(ApiError::BadRequest).and_then(|v| Place::from_value(v, dry)) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Each page rendered with hostile names (quotes, markup, a bidi
    //! override, 250 characters) has exactly the markup it has with plain
    //! names: every name is text, never tags or attributes.
    use super::*;
    use crate::command::{Place, Register, Reserve};
    use numaplace_plan::HostState;
    use std::collections::BTreeMap;
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
        // Escaped by the templates (numeric entities) or by emit's
        // picture (named ones).
        assert!(evil.contains("&#60;script&#62;alert(1)&#60;/script&#62;"), "the name is shown, escaped: {evil}");
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
        svc.put_host(Register::from_upload("h1".into(), corona(), Reserve::default(), None).unwrap()).unwrap();
        let place = Place::from_json(
            br#"{"name": "vm1", "vcpus": 4, "memory": "8GiB", "constraints": {"anti_affinity": "g1"}}"#,
            false,
        )
        .unwrap();
        svc.place(&place).unwrap();
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
        render(&host_page(&h, Some(&format!("recorded {name}")), &forms()))
    }

    #[test]
    fn the_host_page_shows_hostile_names_as_text() {
        let svc = service();
        let plain = host_named(&svc, "plain");
        let evil = host_named(&svc, &hostile());
        assert_inert(&plain, &evil);
        assert!(evil.contains("data-vm=\"&quot;&#39;&gt;&lt;script&gt;"), "the picture's attribute is escaped");
        assert!(evil.contains("data-vm=\"&#34;&#39;&#62;&#60;script&#62;"), "the list's attribute is escaped");
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
        render(&vm_page(&doc, &p, &topology, &forms(), dry.then_some(&form), &samples))
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
            render(&fleet_page(&svc, &q, &FleetView::from_query(&q, HOSTS_PER_PAGE).unwrap(), &forms()))
        };
        let plain = page_for("plain");
        let evil = page_for(&hostile());
        assert_eq!(shape(&plain), shape(&evil), "{evil}");
        assert!(!evil.contains("<script>alert"), "{evil}");
    }

    #[test]
    fn pages_load_only_their_own_files_and_set_a_strict_policy() {
        let svc = service();
        let q = FleetPageQuery::default();
        let text = render(&fleet_page(&svc, &q, &FleetView::from_query(&q, HOSTS_PER_PAGE).unwrap(), &forms()));
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
