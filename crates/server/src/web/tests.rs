//! Each page rendered with hostile names (quotes, markup, a bidi
//! override, 250 characters) has exactly the markup it has with plain
//! names: every name is text, never tags or attributes.
use super::assets::*;
use super::html;
use super::pages::*;
use crate::command::FleetView;
use crate::command::{Place, Register, Reserve};
use crate::service::Service;
use axum::http::{header, StatusCode};
use numaplace_fleet::FleetHost;
use numaplace_plan::HostState;
use numaplace_wire::fleet::LocalitySampleDoc;
use numaplace_wire::fleet::{FleetPageQuery, PlaceForm};
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
    std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"))).unwrap()
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

/// The memory table names each node's kind of memory.
#[test]
fn the_host_pages_memory_table_names_each_nodes_kind() {
    let page = host_named(&service(), "plain");
    assert!(page.contains("<th>Node</th><th>Kind</th>"), "{page}");
    assert!(page.contains("<tr><td>node7</td><td>dram</td>"), "{page}");
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
        let q = FleetPageQuery { label: Some(label.to_string()), kind: Some(label.to_string()), ..Default::default() };
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
