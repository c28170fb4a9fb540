//! The web view in a real headless Chromium, driven over WebDriver
//! (chromedriver) against a real `numaplace serve` on loopback with
//! SQLite: the fleet page lists the registered fixture hosts, a VM placed
//! through the form (a dry run first, then for real) appears on its host
//! page on the right threads and on its VM page with the right cells, and
//! each page renders to a screenshot of a sensible size.
#![allow(clippy::unwrap_used)]

use numaplace_agent::Client;
use numaplace_guest::testing::require_tool;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(db: &str, token_file: &str) -> (Killed, String) {
    serve_with(db, &["--token-file", token_file])
}

fn serve_with(db: &str, extra: &[&str]) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(["serve", "--db", db, "--listen", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Killed(child), url)
}

/// A WebDriver session on a chromedriver of its own.
struct Browser {
    _driver: Killed,
    client: Client,
    session: String,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    fn start() -> Browser {
        Self::start_with(&[])
    }

    /// A browser with more command-line arguments.
    fn start_with(extra: &[&str]) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Killed(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let client = Client::new(&format!("http://127.0.0.1:{port}"), None);
        let start = Instant::now();
        while client.call("GET", "/status", None).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut args: Vec<&str> =
            vec!["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"];
        args.extend(extra);
        let caps = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": args}}}});
        let v = Self::json(client.ok("POST", "/session", Some(caps.to_string().as_bytes())).unwrap());
        let session = v["value"]["sessionId"].as_str().unwrap().to_string();
        Browser { _driver: driver, client, session }
    }

    fn json(text: String) -> Value {
        serde_json::from_str(&text).unwrap()
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let p = format!("/session/{}{path}", self.session);
        Self::json(self.client.ok("POST", &p, Some(body.to_string().as_bytes())).unwrap())["value"].clone()
    }

    fn go(&self, url: &str) {
        self.post("/url", json!({"url": url}));
    }

    /// Runs a script in the page; returns its result.
    fn eval(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
    }

    /// Waits (up to 10 s) until a script returns true: a click that
    /// submits a form returns before the next page has loaded.
    fn wait_for(&self, script: &str) {
        let start = Instant::now();
        while self.eval(script) != json!(true) {
            assert!(start.elapsed() < Duration::from_secs(10), "waited for {script}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn find(&self, css: &str) -> String {
        let v = self.post("/element", json!({"using": "css selector", "value": css}));
        v[ELEMENT].as_str().unwrap_or_else(|| panic!("{css}: {v}")).to_string()
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.post(&format!("/element/{e}/value"), json!({"text": text}));
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.post(&format!("/element/{e}/click"), json!({}));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.client.call("DELETE", &format!("/session/{}", self.session), None);
    }
}

fn screenshot(url: &str, out: &std::path::Path, height: u32) -> u64 {
    let status = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"])
        .arg(format!("--window-size=1400,{height}"))
        .arg(format!("--screenshot={}", out.display()))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::metadata(out).unwrap().len()
}

#[test]
fn a_vm_placed_through_the_form_shows_on_its_threads_and_cells() {
    if !require_tool("chromium") || !require_tool("chromedriver") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("numaplace-web-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "t0ken-0123456789abcdef0123456789abcdef\n").unwrap();
    let (_server, url) = serve(&format!("sqlite:{}", dir.join("f.db").display()), token.to_str().unwrap());
    let api = Client::new(&url, Some("t0ken-0123456789abcdef0123456789abcdef".into()));
    let fixtures = format!("{}/../../fixtures/topologies", env!("CARGO_MANIFEST_DIR"));
    for (name, file, query) in [
        ("corona1", "mpibind/epyc-corona.xml", "?reserved_cpus=0,48&labels=rack=r1"),
        ("intel1", "hwloc/linux/32intel64-2p8co2t+8ve.tar.bz2", ""),
    ] {
        let body = std::fs::read(format!("{fixtures}/{file}")).unwrap();
        api.ok("PUT", &format!("/v1/hosts/{name}{query}"), Some(&body)).unwrap();
    }
    api.ok(
        "POST",
        "/v1/placements",
        Some(br#"{"name":"db1","vcpus":16,"memory":"64GiB","constraints":{"hosts":["corona1"]}}"#),
    )
    .unwrap();

    let b = Browser::start();
    b.go(&format!("{url}/"));
    let hosts = b.eval("return Array.from(document.querySelectorAll('#hosts tr[data-host]')).map(r => r.dataset.host)");
    assert_eq!(hosts, json!(["corona1", "intel1"]));
    let totals = b.eval("return document.getElementById('totals').textContent");
    assert!(totals.as_str().unwrap().contains("2 hosts"), "{totals}");
    // Filters: by label.
    b.go(&format!("{url}/?label=rack%3Dr1"));
    let hosts = b.eval("return Array.from(document.querySelectorAll('#hosts tr[data-host]')).map(r => r.dataset.host)");
    assert_eq!(hosts, json!(["corona1"]));

    // A dry run through the form: the plan is shown, nothing is claimed.
    b.go(&format!("{url}/"));
    b.type_into("form[action='/ui/place'] input[name=name]", "webvm");
    b.type_into("form[action='/ui/place'] input[name=vcpus]", "4");
    b.type_into("form[action='/ui/place'] input[name=memory]", "8GiB");
    b.type_into("form[action='/ui/place'] input[name=hosts]", "corona1");
    b.type_into("form[action='/ui/place'] input[name=token]", "t0ken-0123456789abcdef0123456789abcdef");
    b.click("form[action='/ui/place'] input[name=dry_run]");
    b.click("form[action='/ui/place'] button[type=submit]");
    b.wait_for("return document.readyState === 'complete' && location.pathname === '/ui/place'");
    let h1 = b.eval("return document.querySelector('h1').textContent");
    assert_eq!(h1, "Dry run: webvm");
    assert_eq!(api.call("GET", "/v1/placements/webvm", None).unwrap().0, 404, "a dry run claims nothing");
    // Then for real, from the dry run's page (the fields kept).
    b.type_into("form[action='/ui/place'] input[name=token]", "t0ken-0123456789abcdef0123456789abcdef");
    b.click("form[action='/ui/place'] button[type=submit]");
    b.wait_for("return document.readyState === 'complete' && location.pathname === '/vms/webvm'");
    let placed: Value = serde_json::from_str(&api.ok("GET", "/v1/placements/webvm", None).unwrap()).unwrap();
    assert_eq!(placed["host"], "corona1");
    // The VM page: one row per guest cell, on the planned host nodes.
    let cells = b.eval(
        "return Array.from(document.querySelectorAll('#cells tr[data-cell]')).map(r => [Number(r.dataset.cell), Number(r.dataset.hostNode)])",
    );
    let expected: Vec<Value> = placed["placement"]["guest"]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!([c["id"], c["host_node"]]))
        .collect();
    assert_eq!(cells, Value::Array(expected));
    // The host page: each pinned thread carries the VM's name, and no
    // other thread does.
    b.go(&format!("{url}/hosts/corona1"));
    let threads = b.eval(
        "return Array.from(document.querySelectorAll('#hostmap g.pu[data-vm=\"webvm\"]')).map(g => Number(g.dataset.pu)).sort((a,b)=>a-b)",
    );
    let mut pins: Vec<u64> =
        placed["placement"]["pins"].as_array().unwrap().iter().map(|p| p.as_u64().unwrap()).collect();
    pins.sort_unstable();
    assert_eq!(threads, json!(pins));
    let labels =
        b.eval(&format!("return document.querySelector('#hostmap g.pu[data-pu=\"{}\"] text').textContent", pins[0]));
    assert!(labels.as_str().unwrap().contains("webvm"), "readable without colour: {labels}");
    let reserved = b.eval("return document.querySelector('#hostmap g.pu[data-pu=\"0\"] text').textContent");
    assert!(reserved.as_str().unwrap().contains("host"), "{reserved}");
    // The VM's line counts in words (4 vCPUs on one node).
    let item = b.eval("return document.querySelector('#vms li[data-vm=\"webvm\"]').textContent");
    let on = format!("webvm: 4 vCPUs dedicated on node {}, CPUs", placed["placement"]["nodes"][0]);
    assert!(item.as_str().unwrap().contains(&on), "{item}");
    // Keyboard: every VM is a link, and focusing it highlights its threads.
    b.eval("document.querySelector('#vms li[data-vm=\"webvm\"] a').focus(); return 0");
    let lit = b.eval("return document.querySelectorAll('#hostmap g.pu.hl[data-vm=\"webvm\"]').length");
    assert_eq!(lit, json!(pins.len()));
    // Locality over time, as the agent reports it: all local, then half.
    let home = placed["placement"]["nodes"][0].as_u64().unwrap();
    let away = if home == 7 { 6 } else { 7 };
    for nodes in [
        json!([{"node": home, "bytes": 8u64 << 30}]),
        json!([{"node": home, "bytes": 4u64 << 30}, {"node": away, "bytes": 4u64 << 30}]),
    ] {
        let report = json!({"domains": [], "memory": [{"vm": "webvm", "nodes": nodes}]});
        api.ok("PUT", "/v1/hosts/corona1/domains", Some(report.to_string().as_bytes())).unwrap();
    }
    b.go(&format!("{url}/vms/webvm"));
    let locality = b.eval("return document.getElementById('locality').textContent");
    assert!(locality.as_str().unwrap().contains("N%L now 50%"), "{locality}");
    assert!(locality.as_str().unwrap().contains("last 2 reports"), "{locality}");
    b.go(&format!("{url}/hosts/corona1"));
    let agent = b.eval("return document.getElementById('agent').textContent");
    assert!(agent.as_str().unwrap().contains("placements to apply: db1, webvm"), "drift from the report: {agent}");

    // Drain through the form: the token is checked by the server.
    b.type_into("form[action='/ui/hosts/corona1/drain'] input[name=token]", "wrong");
    b.click("form[action='/ui/hosts/corona1/drain'] button");
    b.wait_for("return document.readyState === 'complete' && location.pathname === '/ui/hosts/corona1/drain'");
    let status = b.eval("return document.querySelector('.err') ? document.querySelector('.err').textContent : ''");
    assert!(status.as_str().unwrap().contains("token"), "{status}");
    b.go(&format!("{url}/hosts/corona1"));
    b.type_into("form[action='/ui/hosts/corona1/drain'] input[name=token]", "t0ken-0123456789abcdef0123456789abcdef");
    b.click("form[action='/ui/hosts/corona1/drain'] button");
    b.wait_for("return document.readyState === 'complete' && location.pathname === '/hosts/corona1' && !!document.querySelector('form[action$=undrain]')");
    let drained: Value = serde_json::from_str(&api.ok("GET", "/v1/hosts/corona1", None).unwrap()).unwrap();
    assert_eq!(drained["drained"], true);
    drop(b);

    // Screenshots of each page, of a sensible size (a blank page is a few
    // kilobytes).
    for (path, file, height) in
        [("/", "fleet.png", 900), ("/hosts/corona1", "host.png", 2300), ("/vms/webvm", "vm.png", 1500)]
    {
        let out = dir.join(file);
        let size = screenshot(&format!("{url}{path}"), &out, height);
        assert!(size > 30_000, "{file}: {size} bytes");
        if let Some(docs) = std::env::var_os("NUMAPLACE_UPDATE_SCREENSHOTS") {
            std::fs::copy(&out, std::path::Path::new(&docs).join(file)).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Serves `html` to every request on a loopback port of its own (another
/// origin than the server's), until the test ends.
fn other_origin(html: String) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(50) {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                html.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(html.as_bytes());
        }
    });
    url
}

/// On the default token-less loopback server, a page of another origin
/// in a real Chromium can neither delete a VM through the web view's form
/// nor place one with a `text/plain` fetch (no preflight); and a page
/// reached through a name that rebinds to the server's address (DNS
/// rebinding, here a resolver rule) cannot read the fleet.
#[test]
fn a_page_of_another_origin_can_neither_change_nor_read_the_fleet() {
    if !require_tool("chromium") || !require_tool("chromedriver") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("numaplace-web-origin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_server, url) = serve_with(&format!("sqlite:{}", dir.join("f.db").display()), &[]);
    let api = Client::new(&url, None);
    let fixtures = format!("{}/../../fixtures/topologies", env!("CARGO_MANIFEST_DIR"));
    let body = std::fs::read(format!("{fixtures}/mpibind/epyc-corona.xml")).unwrap();
    api.ok("PUT", "/v1/hosts/corona1", Some(&body)).unwrap();
    api.ok("POST", "/v1/placements", Some(br#"{"name":"victim","vcpus":4,"memory":"8GiB"}"#)).unwrap();
    let attacker = other_origin(format!(
        "<!DOCTYPE html><html><body><p id=\"s\">start</p>\
         <form id=\"f\" method=\"post\" action=\"{url}/ui/vms/victim/delete\"><input name=\"csrf\" value=\"guess\"></form>\
         <script>fetch('{url}/v1/placements', {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, \
         body: JSON.stringify({{name: 'evil', vcpus: 1, memory: '1GiB'}})}}).catch(function () {{}})\
         .then(function () {{ document.getElementById('s').textContent = 'fetched'; }});</script></body></html>"
    ));
    let port = url.rsplit(':').next().unwrap().to_string();
    let b = Browser::start_with(&["--host-resolver-rules=MAP rebind.test 127.0.0.1"]);
    b.go(&format!("{attacker}/"));
    b.wait_for("return document.getElementById('s').textContent === 'fetched'");
    b.eval("document.getElementById('f').submit(); return 0");
    b.wait_for(&format!("return location.href.indexOf('{url}/ui/') === 0 && document.readyState === 'complete'"));
    let page = b.eval("return document.body.textContent");
    assert!(page.as_str().unwrap().contains("cross-origin"), "{page}");
    assert_eq!(api.call("GET", "/v1/placements/victim", None).unwrap().0, 200, "the form deleted nothing");
    assert_eq!(api.call("GET", "/v1/placements/evil", None).unwrap().0, 404, "the fetch placed nothing");
    // DNS rebinding: the browser takes rebind.test:PORT for a site of its
    // own, so its scripts may read it; the server does not answer to it.
    b.go(&format!("http://rebind.test:{port}/"));
    let page = b.eval("return document.body.textContent");
    assert!(page.as_str().unwrap().contains("host-not-allowed"), "{page}");
    let read = b.eval(
        "var x = new XMLHttpRequest(); x.open('GET', '/v1/placements', false); x.send(); return x.status + ' ' + x.responseText",
    );
    let read = read.as_str().unwrap();
    assert!(read.starts_with("400 ") && !read.contains("victim"), "{read}");
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}
