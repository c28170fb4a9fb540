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
use numaplace_fleet::{FleetHost, STRANDED_PROBE};
use numaplace_libvirt::domain::escape;
use numaplace_plan::{CpuMode, HostState, Placement};
use numaplace_topo::{format_size, Topology};
use numaplace_wire::fleet::{path_escape, FleetPageQuery, LocalitySampleDoc, PlaceForm, TokenForm};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Hosts per page of the fleet view: a 10,000-host fleet is shown a page
/// at a time, with totals over all of it.
pub const HOSTS_PER_PAGE: usize = 100;

/// Colours and hatch angles for VMs, assigned in name order on a host.
const COLOURS: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f"];
const ANGLES: [u32; 4] = [45, 135, 0, 90];

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222}
a{color:#1a4f8b} a:focus,button:focus,input:focus,select:focus{outline:3px solid #e8a33d}
table{border-collapse:collapse} td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.num{text-align:right;font-variant-numeric:tabular-nums} .muted{color:#666}
.bars svg{vertical-align:middle;margin-right:2px}
pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:24em}
.err{background:#fde8e8;border-left:4px solid #c33;padding:6px 10px}
.ok{background:#e8f6e8;border-left:4px solid #393;padding:6px 10px}
form.inline{display:inline}
svg .pu text{font:10px monospace;pointer-events:none}
svg .pu.hl rect.fill{stroke:#000;stroke-width:3}
li.hl{background:#ffe9a8}
fieldset{border:1px solid #ccc;margin:.6em 0}
";

/// Highlights every element of the VM under the pointer or the focus.
const SCRIPT: &str = "
function hl(vm,on){document.querySelectorAll('[data-vm]').forEach(function(e){if(e.getAttribute('data-vm')===vm){e.classList.toggle('hl',on);}});}
document.querySelectorAll('[data-vm]').forEach(function(e){var vm=e.getAttribute('data-vm');
['mouseenter','focusin'].forEach(function(t){e.addEventListener(t,function(){hl(vm,true);});});
['mouseleave','focusout'].forEach(function(t){e.addEventListener(t,function(){hl(vm,false);});});});
document.querySelectorAll('button[data-copy]').forEach(function(b){b.addEventListener('click',function(){
var t=document.getElementById(b.getAttribute('data-copy')).textContent;navigator.clipboard.writeText(t).then(function(){b.textContent='Copied';});});});
";

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
         <meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style></head>\
         <body><nav><a href=\"/\">Fleet</a> · <a href=\"/openapi.json\">API</a> · <a href=\"/metrics\">metrics</a></nav>\
         <main>{body}</main><script>{SCRIPT}</script></body></html>\n",
        t = escape(title)
    )
}

fn html(status: StatusCode, text: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], text).into_response()
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

const USED_PATTERN: &str = "<svg width=\"0\" height=\"0\" style=\"position:absolute\" aria-hidden=\"true\"><defs>\
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
        let (mut hosts, mut drained, mut threads, mut free_threads, mut memory, mut free_memory) = (0, 0, 0u64, 0u64, 0u64, 0u64);
        let (mut stranded_threads, mut vms) = (0u64, 0usize);
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        let mut shown: Vec<&FleetHost> = Vec::new();
        for h in fleet.hosts() {
            *kinds.entry(h.kind()).or_default() += 1;
            hosts += 1;
            drained += usize::from(h.drained);
            threads += h.summary.nodes.iter().map(|n| u64::from(n.threads)).sum::<u64>();
            free_threads += u64::from(h.summary.free_threads);
            memory += h.summary.nodes.iter().map(|n| n.memory).sum::<u64>();
            free_memory += h.summary.free_memory;
            vms += h.state.placements().len();
            if h.drained || h.free().stranded(&[STRANDED_PROBE]) {
                stranded_threads += u64::from(h.summary.free_threads);
            }
            if matches_filters(h, q) {
                shown.push(h);
            }
        }
        let _ = write!(
            body,
            "<h1>Fleet</h1><p id=\"totals\">{hosts} hosts ({drained} drained), {vms} VMs; \
             <strong>{free_threads}</strong> of {threads} CPU threads free, {} of {} memory free; \
             <strong>{stranded_threads}</strong> free threads stranded (on hosts that cannot take a 2-vCPU, 4 GiB VM, or drained).</p>",
            format_size(free_memory),
            format_size(memory)
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

/// The VMs on a host in name order, each with its colour and hatch.
fn vm_styles(state: &HostState) -> BTreeMap<String, (usize, &'static str, u32)> {
    let mut names: Vec<&str> = state.placements().iter().map(|p| p.vm.as_str()).collect();
    names.sort_unstable();
    names
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), (i, COLOURS[i % COLOURS.len()], ANGLES[(i / COLOURS.len()) % ANGLES.len()])))
        .collect()
}

/// Who holds each PU: the VM and what of it.
fn holders(state: &HostState) -> BTreeMap<u32, Vec<(String, String)>> {
    let mut on_pu: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    for p in state.placements() {
        for v in &p.vcpus {
            if p.floats(v.vcpu).is_none() || p.cpu_mode == CpuMode::Dedicated {
                on_pu.entry(v.pu).or_default().push((p.vm.clone(), format!("v{}", v.vcpu)));
            }
        }
        if p.cpu_mode == CpuMode::Dedicated {
            for pu in p.cpuset.iter().filter(|pu| !p.vcpus.iter().any(|v| v.pu == *pu)) {
                on_pu.entry(pu).or_default().push((p.vm.clone(), "idle".into()));
            }
        }
    }
    on_pu
}

/// The host picture: packages, nodes, cores and threads, each thread
/// labelled with its PU and the VM there.
pub fn host_svg(topology: &Topology, state: &HostState) -> String {
    let styles = vm_styles(state);
    let on_pu = holders(state);
    let reserved = &state.reservations().cpus;
    let (cw, ch, gap) = (64u32, 30u32, 6u32);
    let per_row = 8usize;
    let mut out = String::new();
    let mut defs = String::from(
        "<pattern id=\"resv\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">\
         <rect width=\"6\" height=\"6\" fill=\"#ddd\"/><path d=\"M0 0L6 6M6 0L0 6\" stroke=\"#777\"/></pattern>",
    );
    for (i, colour, angle) in styles.values() {
        let _ = write!(
            defs,
            "<pattern id=\"vm{i}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate({angle})\">\
             <rect width=\"6\" height=\"6\" fill=\"{colour}\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#fff\" stroke-width=\"1.5\" opacity=\".7\"/></pattern>"
        );
    }
    let mut y = 10u32;
    let mut width = 0u32;
    let threads_max = topology.max_threads_per_core().max(1) as u32;
    for (pi, package) in topology.packages().iter().enumerate() {
        let pkg_top = y;
        y += 22;
        let mut pkg_body = String::new();
        for (ni, node) in topology.nodes().iter().enumerate() {
            if topology.package_of_node(ni) != Some(package.id) && !(topology.package_of_node(ni).is_none() && pi == 0)
            {
                continue;
            }
            let cores: Vec<usize> = topology.cores_of_node(ni).collect();
            let rows = cores.len().div_ceil(per_row).max(1) as u32;
            let node_h = 24 + rows * (threads_max * ch + gap) + gap;
            let node_w = per_row as u32 * (cw + gap) + gap;
            let free = state.free_memory_bytes(node.id).unwrap_or(0);
            let _ = write!(
                pkg_body,
                "<g class=\"node\" data-node=\"{id}\"><rect x=\"20\" y=\"{y}\" width=\"{node_w}\" height=\"{node_h}\" fill=\"#fafafa\" stroke=\"#555\"/>\
                 <text x=\"26\" y=\"{ty}\" font-size=\"12\">node{id}: {mem} memory, {free} free; {cores} cores</text>",
                id = node.id.0,
                ty = y + 15,
                mem = format_size(node.memory_bytes),
                free = format_size(free),
                cores = cores.len(),
            );
            for (k, ci) in cores.iter().enumerate() {
                let Some(core) = topology.cores().get(*ci) else { continue };
                let cx = 20 + gap + (k % per_row) as u32 * (cw + gap);
                let cy = y + 24 + (k / per_row) as u32 * (threads_max * ch + gap);
                for (t, pu) in core.cpus.iter().enumerate() {
                    let ty = cy + t as u32 * ch;
                    let held = on_pu.get(&pu);
                    let (fill, label, vm_attr, title) = match held.and_then(|h| h.first()) {
                        Some((vm, what)) => {
                            let (i, _, _) = styles.get(vm).copied().unwrap_or((0, COLOURS[0], 45));
                            let short: String = vm.chars().take(7).collect();
                            (
                                format!("url(#vm{i})"),
                                short,
                                format!(" data-vm=\"{}\"", escape(vm)),
                                format!("PU {pu}: {vm} {what}"),
                            )
                        }
                        None if reserved.contains(pu) => (
                            "url(#resv)".into(),
                            "host".into(),
                            String::new(),
                            format!("PU {pu}: reserved for the host"),
                        ),
                        None => ("#fff".into(), "-".into(), String::new(), format!("PU {pu}: free")),
                    };
                    let _ = write!(
                        pkg_body,
                        "<g class=\"pu\" data-pu=\"{pu}\"{vm_attr}><title>{title}</title>\
                         <rect class=\"fill\" x=\"{cx}\" y=\"{ty}\" width=\"{cw}\" height=\"{h}\" fill=\"{fill}\" stroke=\"#333\"/>\
                         <rect x=\"{lx}\" y=\"{ly}\" width=\"{lw}\" height=\"12\" fill=\"#fff\" opacity=\".85\"/>\
                         <text x=\"{tx}\" y=\"{tty}\">{pu} {label}</text></g>",
                        title = escape(&title),
                        h = ch - 2,
                        lx = cx + 2,
                        ly = ty + 8,
                        lw = cw - 4,
                        tx = cx + 4,
                        tty = ty + 18,
                        label = escape(&label),
                    );
                }
            }
            y += node_h + gap;
            width = width.max(node_w + 40);
        }
        let _ = write!(
            out,
            "<g class=\"package\"><rect x=\"10\" y=\"{pkg_top}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#999\" stroke-dasharray=\"4 2\"/>\
             <text x=\"16\" y=\"{t}\" font-size=\"13\" font-weight=\"bold\">package {p}</text>{pkg_body}</g>",
            w = width.max(200) - 10,
            h = y - pkg_top,
            t = pkg_top + 15,
            p = package.id,
        );
        y += 12;
    }
    format!(
        "<svg id=\"hostmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{y}\" role=\"img\" \
         aria-label=\"Host map: each thread with its PU number and the VM pinned there\"><defs>{defs}</defs>{out}</svg>",
        w = width.max(200) + 10
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
    let styles = vm_styles(&h.state);
    body.push_str("<h2>VMs</h2>");
    if styles.is_empty() {
        body.push_str("<p class=\"muted\">None.</p>");
    } else {
        body.push_str("<ul id=\"vms\">");
        let mut placements: Vec<&Placement> = h.state.placements().iter().map(|p| &**p).collect();
        placements.sort_by(|a, b| a.vm.cmp(&b.vm));
        for p in placements {
            let (i, colour, _) = styles[&p.vm];
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
    body.push_str(&host_svg(t, &h.state));
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
