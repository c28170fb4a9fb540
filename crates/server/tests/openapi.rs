//! The OpenAPI document against the router itself: every route of the
//! router (the API, the pages, the forms, the static files) is an
//! operation of the document and no other method is routed on its path;
//! every status a route was made to send, by driving its failure paths
//! through the real router, edge and service (bad Host, another origin, no
//! token, an unknown query parameter, a wrong content type, a body over
//! the cap, a body that never arrives, a name that does not exist, a bad
//! body, a conflict, a request no host could take), is one the document
//! lists for that operation; and every status it lists was seen, so the
//! list stays true both ways. The router's own list of paths is read from
//! it, so a route added without documentation fails. The 503s come from a
//! real PostgreSQL stopped with SIGSTOP, every route that needs the store
//! passing its deadline.
#![allow(clippy::unwrap_used)]

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use numaplace_server::app::{router, AppState};
use numaplace_server::Service;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::ServiceExt;

const HOST: &str = "127.0.0.1:7478";
const TOKEN: &str = "t0ken";
/// The web view's session every call carries (its forms' CSRF token).
const SESSION: &str = "0123456789abcdef0123456789abcdef";

fn corona() -> Vec<u8> {
    std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A body that never sends a byte: the body timeout's case.
struct Stalled;

impl axum::body::HttpBody for Stalled {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        Poll::Pending
    }
}

/// One request: method, path and query, headers, body.
struct Call<'a> {
    method: &'a str,
    uri: String,
    headers: Vec<(&'a str, String)>,
    body: Body,
}

impl<'a> Call<'a> {
    /// A request as a well-behaved client sends it: this server's Host,
    /// the token, and for a body its route's type.
    fn new(method: &'a str, uri: impl Into<String>) -> Call<'a> {
        Call {
            method,
            uri: uri.into(),
            headers: vec![
                ("host", HOST.into()),
                ("authorization", format!("Bearer {TOKEN}")),
                ("cookie", format!("numaplace_session={SESSION}")),
            ],
            body: Body::empty(),
        }
    }

    fn header(mut self, name: &'a str, value: impl Into<String>) -> Call<'a> {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    fn without(mut self, name: &str) -> Call<'a> {
        self.headers.retain(|(n, _)| *n != name);
        self
    }

    fn body(mut self, content_type: &str, body: impl Into<Vec<u8>>) -> Call<'a> {
        let body = body.into();
        self = self.header("content-type", content_type).header("content-length", body.len().to_string());
        self.body = Body::from(body);
        self
    }
}

async fn send(app: &axum::Router, call: Call<'_>) -> (StatusCode, String) {
    let mut req = Request::builder().method(Method::from_bytes(call.method.as_bytes()).unwrap()).uri(&call.uri);
    for (n, v) in &call.headers {
        req = req.header(*n, v);
    }
    let resp = app.clone().oneshot(req.body(call.body).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

fn state(timeout: Duration) -> (AppState, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let store = numaplace_store::open(&format!("sqlite:{}", dir.0.join("f.db").display())).unwrap();
    let svc = Arc::new(Service::new(store, 1, 1).unwrap());
    let mut st = AppState::new(svc, None);
    st.set_credentials(credentials());
    st.request_timeout = timeout;
    st.body_timeout = Duration::from_millis(100);
    (st, dir)
}

/// The token of an agent bound to a host the probes do not name.
const OTHER_AGENT: &str = "agent-of-elsewhere";

/// The operator's token (as `--token-file`'s) and another host's agent.
fn credentials() -> numaplace_server::credentials::Credentials {
    let file = format!(
        "[[credential]]\nrole = \"agent\"\nhost = \"elsewhere\"\nsha256 = \"{}\"\n",
        numaplace_server::credentials::digest_hex(OTHER_AGENT)
    );
    numaplace_server::credentials::Credentials::parse("test", &file).unwrap().with_token(TOKEN)
}

mod tempdir {
    /// A directory removed at the end of the test.
    pub struct Dir(pub std::path::PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let d = std::env::temp_dir().join(format!("numaplace-openapi-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The route's path with its parameters filled in by `names` (`name`
/// is a VM's on the VM routes, a host's elsewhere).
fn fill(pattern: &str, names: &BTreeMap<&str, &str>) -> String {
    let mut out = pattern.to_string();
    if pattern.starts_with("/vms/") || pattern.starts_with("/ui/vms/") {
        out = out.replace("{name}", names.get("vm").copied().unwrap_or("vm1"));
    }
    for (k, v) in names {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// What a route takes as its body, as a well-behaved client sends it.
fn good_body(method: &str, route: &str) -> Option<(&'static str, Vec<u8>)> {
    match (method, route) {
        ("PUT", "/v1/hosts/{name}") => Some(("application/xml", corona())),
        ("PUT", "/v1/hosts/{name}/domains") => Some(("application/json", br#"{"domains": []}"#.to_vec())),
        ("PATCH", "/v1/hosts/{name}") => Some(("application/json", br#"{"labels": {"rack": "r1"}}"#.to_vec())),
        ("POST", "/v1/placements") => {
            Some(("application/json", br#"{"name": "fresh", "vcpus": 2, "memory": "2GiB"}"#.to_vec()))
        }
        ("POST", "/v1/placements/{vm}/move") => Some(("application/json", Vec::new())),
        ("POST", "/v1/evaluate") => Some((
            "application/json",
            br#"{"vm": {"name": "e", "vcpus": 2, "memory": "2GiB"}, "hosts": ["h1", "h2"]}"#.to_vec(),
        )),
        ("POST", "/v1/k8s/filter" | "/v1/k8s/prioritize") => Some((
            "application/json",
            br#"{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "2", "memory": "2Gi"}}}]}}, "NodeNames": ["h1", "h2"]}"#.to_vec(),
        )),
        ("POST", "/v1/k8s/bind") => Some((
            "application/json",
            br#"{"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "h1"}"#.to_vec(),
        )),
        ("POST", "/ui/place") => Some((
            "application/x-www-form-urlencoded",
            format!("csrf={SESSION}&token={TOKEN}&name=w9&vcpus=2&memory=2GiB").into_bytes(),
        )),
        ("POST", r) if r.starts_with("/ui/") => {
            Some(("application/x-www-form-urlencoded", format!("csrf={SESSION}&token={TOKEN}").into_bytes()))
        }
        _ => None,
    }
}

/// Makes a placement under an `Idempotency-Key` (kept; its answer is not
/// the probed route's), and returns `reuse` under the same key: refused,
/// 422.
async fn key_reused(app: &axum::Router, tag: &str, reuse: Call<'static>) -> Call<'static> {
    static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let key = format!("key-{n}-of-{}", tag.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    let name = format!("keyed{n}");
    let first = Call::new("POST", "/v1/placements")
        .header("idempotency-key", key.clone())
        .body("application/json", format!(r#"{{"name": "{name}", "vcpus": 2, "memory": "2GiB"}}"#));
    let (s, b) = send(app, first).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    reuse.header("idempotency-key", key)
}

/// The fleet every probe starts from: host `h1`, a VM `vm1` the service
/// placed, a VM `agentvm` the host's agent reported.
async fn seed(app: &axum::Router) {
    for host in ["h1", "h2"] {
        let (s, b) = send(app, Call::new("PUT", format!("/v1/hosts/{host}")).body("application/xml", corona())).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    let place = |name: &str, dry: bool| {
        Call::new("POST", if dry { "/v1/placements?dry_run=true" } else { "/v1/placements" }).body(
            "application/json",
            if dry {
                format!(r#"{{"name": "{name}", "vcpus": 4, "memory": "8GiB", "constraints": {{"hosts": ["h1"]}}}}"#)
            } else {
                format!(r#"{{"name": "{name}", "vcpus": 4, "memory": "8GiB"}}"#)
            },
        )
    };
    let (s, b) = send(app, place("vm1", false)).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = send(app, place("agentvm", true)).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let dry: Value = serde_json::from_str(&b).unwrap();
    let report = json!({"domains": [dry["placement"]]}).to_string();
    let (s, b) = send(app, Call::new("PUT", "/v1/hosts/h1/domains").body("application/json", report)).await;
    assert_eq!(s, StatusCode::OK, "{b}");
}

/// Every failure path of one operation, each answer's status recorded.
async fn probe(app: &axum::Router, method: &'static str, route: &str, seen: &mut BTreeSet<u16>) {
    let asset = numaplace_server::CSS.file();
    let names: BTreeMap<&str, &str> =
        [("name", "h1"), ("vm", "vm1"), ("file", asset.as_str()), ("action", "drain")].into();
    let path = fill(route, &names);
    // A CPU `vm1` is pinned on, for the reservations that must refuse it.
    let (_, doc) = send(app, Call::new("GET", "/v1/placements/vm1")).await;
    let pinned = serde_json::from_str::<Value>(&doc).unwrap()["placement"]["pins"][0].as_u64().unwrap();
    let with_body = |c: Call<'static>| match good_body(method, route) {
        Some((t, b)) => c.body(t, b),
        None => c,
    };
    let mut calls: Vec<Call<'static>> = vec![
        // As a well-behaved client sends it.
        with_body(Call::new(method, path.clone())),
        // A Host that is not this server's (DNS rebinding).
        with_body(Call::new(method, path.clone())).header("host", "rebind.test:7478"),
        // From a page of another origin.
        with_body(Call::new(method, path.clone()))
            .header("origin", "http://evil.test")
            .header("sec-fetch-site", "cross-site"),
        // Without the token.
        with_body(Call::new(method, path.clone())).without("authorization"),
        // With a token the server does not know.
        with_body(Call::new(method, path.clone())).header("authorization", "Bearer not-a-credential"),
        // With another host's agent credential.
        with_body(Call::new(method, path.clone())).header("authorization", format!("Bearer {OTHER_AGENT}")),
        // An unknown query parameter.
        with_body(Call::new(method, format!("{path}?bogus=1"))),
        // A body of the wrong type.
        Call::new(method, path.clone()).body("text/plain", "x"),
        // A body over any route's cap, announced.
        with_body(Call::new(method, path.clone())).header("content-length", (64u64 << 20).to_string()),
        // A body that never arrives.
        {
            let mut c = Call::new(method, path.clone()).header("transfer-encoding", "chunked");
            if let Some((t, _)) = good_body(method, route) {
                c = c.header("content-type", t);
            }
            c.body = Body::new(Stalled);
            c
        },
        // A body that is not what the route reads.
        match good_body(method, route) {
            Some((t, _)) => Call::new(method, path.clone()).body(t, "{"),
            None => Call::new(method, path.clone()).body("application/json", "{"),
        },
        // A form field the page does not have.
        Call::new(method, path.clone()).body("application/x-www-form-urlencoded", "evil=1"),
    ];
    // Names that do not exist, and names that are not names.
    for bad in ["nope", "..", "%E2%80%AEbidi"] {
        let names: BTreeMap<&str, &str> = [("name", bad), ("vm", bad), ("file", bad), ("action", bad)].into();
        calls.push(with_body(Call::new(method, fill(route, &names))));
    }
    // Each route's own refusals.
    match (method, route) {
        ("GET", "/v1/hosts") | ("GET", "/v1/placements") => calls.push(Call::new(method, format!("{path}?limit=0"))),
        ("GET", "/v1/placements/{vm}") => {
            for q in ["format=yaml", "accel=xen", "format=libvirt", "format=qemu&accel=tcg"] {
                calls.push(Call::new(method, format!("{path}?{q}")));
            }
        }
        ("GET", "/") => calls.push(Call::new(method, "/?page=2&label=rack%3Dr1&min_free_threads=x")),
        ("POST", "/v1/placements") => {
            let dry = Call::new(method, format!("{path}?dry_run=true"));
            calls.push(dry.body("application/json", r#"{"name": "dry", "vcpus": 2, "memory": "2GiB"}"#));
            for body in [
                r#"{"name": "vm1", "vcpus": 2, "memory": "2GiB"}"#,
                r#"{"name": "huge", "vcpus": 1000, "memory": "2GiB"}"#,
                r#"{"name": "odd", "vcpus": 4, "memory": "8GiB", "guest_nodes": 5}"#,
                r#"{"name": "x", "vcpus": 2, "memory": "2GiB", "constraints": {"hosts": ["nope"]}}"#,
            ] {
                calls.push(Call::new(method, path.clone()).body("application/json", body));
            }
            let other = Call::new(method, path.clone())
                .body("application/json", r#"{"name": "k2", "vcpus": 2, "memory": "2GiB"}"#);
            calls.push(key_reused(app, &format!("{method} {route}"), other).await);
            calls.push(
                Call::new(method, path.clone())
                    .header("idempotency-key", "")
                    .body("application/json", r#"{"name": "k3", "vcpus": 2, "memory": "2GiB"}"#),
            );
        }
        ("POST", "/v1/placements/{vm}/move") => {
            calls.push(Call::new(method, "/v1/placements/agentvm/move").body("application/json", ""));
            let reuse = Call::new(method, path.clone()).body("application/json", "");
            calls.push(key_reused(app, &format!("{method} {route}"), reuse).await);
            calls.push(Call::new(method, path.clone()).body("application/json", r#"{"hosts": ["nope"]}"#));
        }
        ("DELETE", "/v1/placements/{vm}") => {
            calls.push(Call::new(method, "/v1/placements/agentvm"));
            calls.push(key_reused(app, &format!("{method} {route}"), Call::new(method, path.clone())).await);
        }
        ("POST", "/v1/evaluate") => {
            // A request wrong whatever the host: the planner's 422.
            let odd = r#"{"vm": {"name": "odd", "vcpus": 4, "memory": "8GiB", "guest_nodes": 5}, "hosts": ["h1"]}"#;
            calls.push(Call::new(method, path.clone()).body("application/json", odd));
        }
        ("POST", "/ui/vms/{name}/delete" | "/ui/vms/{name}/move") => {
            let c = Call::new(method, route.replace("{name}", "agentvm"));
            calls.push(c.body("application/x-www-form-urlencoded", format!("csrf={SESSION}&token={TOKEN}")));
        }
        ("GET", "/static/{file}") => {
            let etag = format!("\"{}\"", numaplace_server::CSS.hash());
            calls.push(Call::new(method, path.clone()).header("if-none-match", etag));
        }
        ("DELETE", "/v1/hosts/{name}") => {
            calls.push(Call::new(method, format!("{path}?force=maybe")));
            calls.push(Call::new(method, "/v1/hosts/h2"));
        }
        ("PUT", "/v1/hosts/{name}") => {
            calls.push(Call::new(method, "/v1/hosts/h2").body("application/json", "not a topology"));
            // A replacement too small for the VMs there (a reservation
            // over a pinned CPU is recorded by a registration: the agent
            // reports the VM in the way).
            let small = std::fs::read_to_string(format!(
                "{}/../../fixtures/topologies/derived/2n8c2t-memoryless-node1.json",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
            .replace("34330173440", "1073741824");
            calls.push(Call::new(method, "/v1/hosts/h1").body("application/json", small));
        }
        ("PATCH", "/v1/hosts/{name}") => {
            let body = format!(r#"{{"reserved_cpus": "{pinned}"}}"#);
            calls.push(Call::new(method, path.clone()).body("application/json", body));
        }
        ("PUT", "/v1/hosts/{name}/domains") => {
            calls.push(Call::new(method, path.clone()).body("application/json", r#"{"domains": [], "x": 1}"#));
        }
        ("POST", "/ui/place") => {
            for form in ["name=w&vcpus=2&memory=2GiB", "name=w&vcpus=2&memory=2GiB&csrf=abc&token=t0ken"] {
                calls.push(Call::new(method, path.clone()).body("application/x-www-form-urlencoded", form));
            }
            // A session that does not match its form.
            calls.push(
                Call::new(method, path.clone())
                    .without("cookie")
                    .body("application/x-www-form-urlencoded", format!("csrf={SESSION}")),
            );
        }
        _ => {}
    }
    for c in calls {
        let what = format!("{} {}", c.method, c.uri);
        let (s, b) = send(app, c).await;
        // `OPENAPI_DEBUG=1` shows every probe and its answer.
        if std::env::var_os("OPENAPI_DEBUG").is_some() {
            eprintln!("{what}: {s} {}", &b[..b.len().min(300)]);
        }
        seen.insert(s.as_u16());
    }
    // The forms with a session's CSRF token: right, and without the token.
    if route.starts_with("/ui/") {
        let session = SESSION;
        for form in [
            format!("csrf={session}&token={TOKEN}"),
            format!("csrf={session}"),
            format!("csrf={session}&token={TOKEN}&name=w2&vcpus=2&memory=2GiB"),
            format!("csrf={session}&token={TOKEN}&name=w3&vcpus=2&memory=2GiB&dry_run=true"),
            format!("csrf={session}&token={TOKEN}&name=w3&vcpus=2000&memory=2GiB"),
        ] {
            let c = Call::new(method, path.clone()).body("application/x-www-form-urlencoded", form);
            seen.insert(send(app, c).await.0.as_u16());
        }
    }
}

/// The operations the document lists: (path, method) → statuses.
fn documented() -> BTreeMap<(String, String), BTreeSet<u16>> {
    let doc: Value = serde_json::from_str(numaplace_server::OPENAPI).unwrap();
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            let statuses = op["responses"].as_object().unwrap().keys().map(|k| k.parse().unwrap()).collect();
            out.insert((path.clone(), method.to_uppercase()), statuses);
        }
    }
    out
}

/// Routes that answer without the store (so never past a deadline).
/// `bind` here: without `--kube-api` (these tests' servers) it answers
/// before it would claim (its store path: tests/k8s_bind.rs).
fn storeless(route: &str) -> bool {
    matches!(route, "/healthz" | "/openapi.json" | "/static/{file}" | "/v1/k8s/bind")
}

/// The router's own list of route patterns. axum has no API that lists
/// them; its `Debug` shows its path router's patterns (`paths: {RouteId(0):
/// "/", ...}`), read here. If a new axum writes them otherwise, the count
/// check below fails rather than the test passing on nothing.
fn routed_paths(app: &axum::Router) -> BTreeSet<String> {
    let debug = format!("{app:?}");
    let start = debug.find("path_router").expect("axum's Debug names the path router");
    let end = debug[start..].find("fallback_router").map_or(debug.len(), |e| start + e);
    let section = &debug[start..end];
    let paths = section.find("paths: {").expect("axum's Debug lists the paths");
    let map = &section[paths + "paths: {".len()..];
    // The map ends at the first `}` outside a quoted pattern.
    let mut quoted = false;
    let end = map
        .char_indices()
        .find(|&(_, c)| {
            quoted ^= c == '"';
            c == '}' && !quoted
        })
        .map_or(map.len(), |(i, _)| i);
    let map = &map[..end];
    map.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_documented_with_every_status_it_sends() {
    let documented = documented();
    let mut problems = Vec::new();
    // Every path of the router is documented and every documented path
    // is routed, for its methods and for no other.
    let (st, _dir) = state(Duration::from_secs(5));
    let app = router(st);
    let paths: BTreeSet<&String> = documented.keys().map(|(p, _)| p).collect();
    let routed = routed_paths(&app);
    assert!(routed.len() >= 15 && routed.contains("/v1/placements/{vm}"), "the router's paths, read: {routed:?}");
    for p in &routed {
        if !paths.contains(p) {
            problems.push(format!("{p} is routed but not in the document"));
        }
    }
    for p in &paths {
        if !routed.contains(*p) {
            problems.push(format!("{p} is documented but not routed"));
        }
    }
    for path in &paths {
        let names: BTreeMap<&str, &str> = [("name", "h1"), ("vm", "vm1"), ("file", "x"), ("action", "drain")].into();
        for method in ["GET", "PUT", "POST", "PATCH", "DELETE"] {
            let (s, body) = send(&app, Call::new(method, fill(path, &names))).await;
            let listed = documented.contains_key(&(path.to_string(), method.to_string()));
            if listed && (s == StatusCode::METHOD_NOT_ALLOWED || body.contains("no such route")) {
                problems.push(format!("{method} {path} is documented but not routed ({s})"));
            }
            if !listed && s != StatusCode::METHOD_NOT_ALLOWED {
                problems.push(format!("{method} {path} is routed ({s}) but not documented"));
            }
        }
    }
    // Every operation's failure paths, each on a fresh fleet.
    for ((route, method), listed) in &documented {
        let method: &'static str = Box::leak(method.clone().into_boxed_str());
        let mut seen = BTreeSet::new();
        {
            let (st, _dir) = state(Duration::from_secs(5));
            let app = router(st);
            seed(&app).await;
            probe(&app, method, route, &mut seen).await;
        }
        for s in seen.difference(listed) {
            problems.push(format!("{method} {route} sends {s}, which the document does not list"));
        }
        // 503 is the stalled store's, seen by the test below; 414 is
        // hyper's, answered before the router (crates/cli/tests/serve.rs).
        for s in listed.difference(&seen).filter(|s| **s != 503 && **s != 414) {
            problems.push(format!("{method} {route} is documented with {s}, which no probe saw"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every route that needs the store answers 503 when the store stalls
/// (a real PostgreSQL stopped with SIGSTOP) and its deadline passes, and
/// the document lists that 503; the routes that never touch the store
/// still answer.
#[test]
fn a_stalled_store_gives_the_documented_503_on_every_route_that_needs_it() {
    let Some(pg) = numaplace_store::testing::Postgres::start() else { return };
    let db = pg.fresh_database();
    let svc = Arc::new(Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap());
    let st = AppState::new(svc, Some(Arc::from(TOKEN)));
    let documented = documented();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let problems = runtime.block_on(async {
        seed(&router(st.clone())).await;
        let mut late = st.clone();
        late.request_timeout = Duration::from_millis(300);
        let app = router(late);
        let names: BTreeMap<&str, &str> = [("name", "h1"), ("vm", "vm1"), ("action", "drain")].into();
        let mut problems = Vec::new();
        pg.pause();
        for ((route, method), listed) in &documented {
            let mut c = Call::new(method, fill(route, &names));
            if let Some((t, b)) = good_body(method, route) {
                c = c.body(t, b);
            }
            if route == "/static/{file}" {
                c = Call::new(method, fill(route, &[("file", numaplace_server::CSS.file().as_str())].into()));
            }
            let (status, body) = send(&app, c).await;
            let status = status.as_u16();
            if storeless(route) {
                if status == 503 {
                    problems.push(format!("{method} {route} needs no store but answered 503: {body}"));
                }
            } else if status != 503 {
                problems.push(format!("{method} {route} answered {status} while the store stalled: {body}"));
            } else if !listed.contains(&503) {
                problems.push(format!("{method} {route} sends 503, which the document does not list"));
            }
        }
        pg.resume();
        problems
    });
    // The workers that waited on the store finish once it answers; the
    // service (and its PostgreSQL client) is dropped here, outside the
    // runtime, as `serve` does.
    runtime.shutdown_timeout(Duration::from_secs(10));
    drop(st);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
