//! The TLS set-up docs/serve.md documents, really run: nginx terminating
//! TLS in front of `numaplace serve`, with `--trusted-proxy`. A client
//! speaks HTTPS to the proxy only; the server's access lines name the
//! client's address (`forwarded_for`) beside the proxy's (`peer`), and its
//! principal; the credentials are checked as without a proxy. The proxy
//! connects from 127.0.0.2 (`proxy_bind`), the client from 127.0.0.1, so
//! the two are told apart as on two machines.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `tool` runs; under CI (`NUMAPLACE_REQUIRE_TOOLS`) a missing
/// one fails the test, naming it.
fn have(tool: &str, arg: &str) -> bool {
    let ok = Command::new(tool).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok && std::env::var_os("NUMAPLACE_REQUIRE_TOOLS").is_some() {
        panic!("{tool} is required (NUMAPLACE_REQUIRE_TOOLS is set) but does not run");
    }
    ok
}

fn nginx() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> Option<String>) -> String {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{what} did not come");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sha256_hex(s: &str) -> String {
    numaplace_server::credentials::digest_hex(s)
}

fn curl(args: &[&str]) -> (String, String) {
    let o = Command::new("curl").args(["-sS", "--max-time", "20"]).args(args).output().unwrap();
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn nginx_terminating_tls_in_front_of_serve_passes_the_client_and_its_credential() {
    let Some(nginx) = nginx() else {
        assert!(std::env::var_os("NUMAPLACE_REQUIRE_TOOLS").is_none(), "nginx is required but not installed");
        return;
    };
    if !have("openssl", "version") || !have("curl", "--version") {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tls-proxy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    // A self-signed certificate for localhost.
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-keyout", &p("key.pem"), "-out", &p("cert.pem")])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let operator = "tls-operator-0123456789abcdef0123456789abcdef";
    std::fs::write(
        dir.join("credentials.toml"),
        format!("[[credential]]\nname = \"alice\"\nrole = \"operator-write\"\nsha256 = \"{}\"\n", sha256_hex(operator)),
    )
    .unwrap();
    let log = dir.join("serve.log");
    let serve = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .args(["serve", "--db", &format!("sqlite:{}", p("fleet.db")), "--listen", "127.0.0.1:0"])
        .args(["--credentials", &p("credentials.toml"), "--trusted-proxy", "127.0.0.2"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _serve = Killed(serve);
    let upstream = wait_for("serve's address", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.split("listening on http://").nth(1).map(|r| r.split_whitespace().next().unwrap_or("").to_string())
    });
    let port = free_port();
    std::fs::write(
        dir.join("nginx.conf"),
        format!(
            "daemon off;\nmaster_process off;\npid {pid};\nerror_log {err} info;\nevents {{}}\nhttp {{\n  access_log off;\n  \
             client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  server {{\n    listen 127.0.0.1:{port} ssl;\n    \
             server_name localhost;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
             client_max_body_size 16m;\n    location / {{\n      proxy_pass http://{upstream};\n      proxy_bind 127.0.0.2;\n      \
             proxy_set_header Host $host;\n      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n      \
             proxy_read_timeout 30s;\n    }}\n  }}\n}}\n",
            pid = p("nginx.pid"),
            err = p("nginx.err"),
            d = dir.display(),
            cert = p("cert.pem"),
            key = p("key.pem"),
        ),
    )
    .unwrap();
    let proxy = Command::new(&nginx)
        .args(["-p", &p(""), "-c", &p("nginx.conf"), "-e", &p("nginx.err")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _proxy = Killed(proxy);
    let url = format!("https://localhost:{port}");
    let cacert = p("cert.pem");
    let ready = wait_for("the proxy", || {
        let (out, _) = curl(&["--cacert", &cacert, &format!("{url}/healthz")]);
        (out.trim() == "ok").then_some(out)
    });
    assert_eq!(ready.trim(), "ok");

    // A write through TLS with the operator's credential: registered.
    let corona = format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"));
    let auth = format!("Authorization: Bearer {operator}");
    let (out, err) = curl(&[
        "--cacert",
        &cacert,
        "-X",
        "PUT",
        "-H",
        &auth,
        "-H",
        "Content-Type: application/xml",
        "--data-binary",
        &format!("@{corona}"),
        "-w",
        "\n%{http_code}",
        &format!("{url}/v1/hosts/h1"),
    ]);
    assert!(out.ends_with("201"), "{out}{err}");
    // Without it, refused as without a proxy.
    let (out, _) = curl(&["--cacert", &cacert, "-X", "DELETE", "-w", "\n%{http_code}", &format!("{url}/v1/hosts/h1")]);
    assert!(out.ends_with("401"), "{out}");
    // The certificate is checked: a client that does not trust it fails.
    let (out, err) = curl(&[&format!("{url}/healthz")]);
    assert!(out.is_empty() && !err.is_empty(), "{out}{err}");

    // The server's access lines: the proxy as the peer, the client it
    // forwarded for, and who it was.
    let line = wait_for("the access line of the PUT", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines().find(|l| l.contains("numaplace::access") && l.contains("status=201")).map(str::to_string)
    });
    assert!(line.contains("forwarded_for=\"127.0.0.1\""), "{line}");
    assert!(line.contains("principal=\"alice\""), "{line}");
    assert!(line.contains("peer=127.0.0.2:"), "{line}");
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
