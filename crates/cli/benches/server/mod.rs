//! What the two fleet-service benches (`serve`, `zone_serve`) share: the
//! server started as a process, the fleet file's host kinds, and what they
//! read of a process and of the machine. Each bench uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// The fleet file whose real topologies the benches register.
pub const FLEET: &str = "fleet-2000.json";

/// A `numaplace serve` process and its URL; killed when dropped.
pub struct Server(pub Child, pub String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server (one of `replicas`) and waits until it listens, which it
/// does once its cache is loaded: the seconds returned are the start's,
/// cache load included.
pub fn start(db: &str, replicas: usize) -> (Server, f64) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_numaplace"));
    cmd.args(["serve", "--db", db, "--listen", "127.0.0.1:0", "--replicas", &replicas.to_string()]);
    spawn_listening(cmd)
}

/// Starts the bench's own binary as the bare-stack server (`--bare-serve
/// DB HOSTS FIRST`, see the serve bench's `bare` module) and waits until
/// it listens.
pub fn start_bare(db: &str, hosts: usize, first: bool) -> Server {
    let mut cmd = Command::new(std::env::current_exe().expect("the bench's own path"));
    cmd.args(["--bare-serve", db, &hosts.to_string(), if first { "first" } else { "more" }]);
    spawn_listening(cmd).0
}

/// Spawns `cmd`, a server that prints `listening on URL` on standard error
/// once it accepts connections, and waits for that line.
fn spawn_listening(mut cmd: Command) -> (Server, f64) {
    let t = Instant::now();
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("the server starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines.next().expect("serve prints its address").expect("stderr line");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.trim().to_string();
        }
    };
    let secs = t.elapsed().as_secs_f64();
    // Pass on what the server says after it started (warnings, a panic),
    // but not its access and audit lines: the server still writes them, so
    // their cost is in the figures, as in production.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if !line.contains(" INFO ") {
                eprintln!("serve: {line}");
            }
        }
    });
    (Server(child, url), secs)
}

/// The value after `name` on the command line.
pub fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// The fleet file's kinds, each with its count: (topology path, count).
pub fn fleet_kinds() -> Vec<(String, usize)> {
    let dir = format!("{}/../../fixtures/traces", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(format!("{dir}/{FLEET}")).expect("fleet file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("fleet JSON");
    v["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| {
            let path = format!("{dir}/{}", h["topology"].as_str().expect("topology"));
            (path, h["count"].as_u64().expect("count") as usize)
        })
        .collect()
}

/// A topology file as numaplace's topology JSON, the body of a registration.
pub fn topology_json(full: &str) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .args(["topology", "--from", full, "--format", "json"])
        .output()
        .expect("numaplace topology");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The `p` quantile of sorted figures (0 for none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A figure in kB of a process's `/proc/PID/status` (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}
