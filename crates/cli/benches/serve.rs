//! The fleet service under load, measured from outside: `numaplace serve`
//! started, a fleet registered over HTTP from the fixtures' real
//! topologies (8-node EPYC, 2-socket Intel, 24-node Xeon, in turn), then
//! concurrent clients placing dedicated VMs of 2 to 32 vCPUs over
//! loopback until the fleet is 90% full (in vCPUs placed against free
//! threads at the start). Reports placements per second, latency
//! percentiles and the conflict retries the servers counted.
//!
//! `cargo bench -p numaplace --bench serve -- [--hosts 10000] [--clients 16]
//!   [--postgres] [--servers 3]`
//! Under `cargo test` (no `--bench`) it runs on 12 hosts, so CI checks
//! that it works without spending minutes.

use numaplace_agent::Client;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const KINDS: [&str; 3] =
    ["mpibind/epyc-corona.xml", "hwloc/linux/32intel64-2p8co2t+8ve.tar.bz2", "hwloc/xml/192em64t-24n8c2t.xml"];
const SIZES: [u32; 5] = [2, 4, 8, 16, 32];

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(db: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .args(["serve", "--db", db, "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("numaplace serve starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = loop {
        let line = lines.next().expect("serve prints its address").expect("stderr line");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.trim().to_string();
        }
    };
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
    Server(child, url)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn topology_json(path: &str) -> Vec<u8> {
    let full = format!("{}/../../fixtures/topologies/{path}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .args(["topology", "--from", &full, "--format", "json"])
        .output()
        .expect("numaplace topology");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn conflicts(url: &str) -> u64 {
    let (_, text) = Client::new(url, None).call("GET", "/metrics", None).expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("numaplace_claim_conflicts_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The web view's fleet page (totals over every host, one page of rows),
/// fetched as a browser would: the median of 5, in milliseconds.
fn fleet_page_ms(c: &Client) -> f64 {
    let mut ms: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let (status, html) = c.call("GET", "/", None).expect("fleet page");
            assert_eq!(status, 200);
            assert!(html.contains("<table id=\"hosts\">"));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let hosts: usize = arg(&args, "--hosts").and_then(|v| v.parse().ok()).unwrap_or(if bench { 10_000 } else { 12 });
    let clients: usize = arg(&args, "--clients").and_then(|v| v.parse().ok()).unwrap_or(16);
    let servers: usize = arg(&args, "--servers").and_then(|v| v.parse().ok()).unwrap_or(1);
    let dir = std::env::temp_dir().join(format!("numaplace-bench-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pg = if args.iter().any(|a| a == "--postgres") { numaplace_store::testing::Postgres::start() } else { None };
    let db = match &pg {
        Some(pg) => pg.fresh_database(),
        None => format!("sqlite:{}", dir.join("fleet.db").display()),
    };
    let servers: Vec<Server> = (0..servers).map(|_| start(&db)).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.1.clone()).collect();

    // Register the fleet.
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(KINDS.iter().map(|k| topology_json(k)).collect());
    let t = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (bodies, next, url) = (bodies.clone(), next.clone(), urls[i % urls.len()].clone());
            std::thread::spawn(move || {
                let c = Client::new(&url, None);
                loop {
                    let h = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if h >= hosts {
                        break;
                    }
                    c.ok("PUT", &format!("/v1/hosts/host{h:05}"), Some(&bodies[h % bodies.len()])).expect("register");
                }
            })
        })
        .collect();
    for th in threads {
        th.join().expect("register thread");
    }
    let register_s = t.elapsed().as_secs_f64();
    // Free threads at the start, over the fleet.
    let c = Client::new(&urls[0], None);
    let (mut free, mut after) = (0u64, String::new());
    loop {
        let text = c.ok("GET", &format!("/v1/hosts?limit=10000{after}"), None).expect("list");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        free +=
            v["hosts"].as_array().expect("hosts").iter().map(|h| h["free_threads"].as_u64().unwrap_or(0)).sum::<u64>();
        match v["next"].as_str() {
            Some(n) => after = format!("&after={n}"),
            None => break,
        }
    }
    let target = free * 9 / 10;

    eprintln!("bench serve: {hosts} hosts registered in {register_s:.1} s; {free} free threads, filling {target}");
    eprintln!("bench serve: the fleet page, empty fleet: {:.1} ms (median of 5)", fleet_page_ms(&c));

    // Fill to 90%.
    let placed_vcpus = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let rejected = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let url = urls[i % urls.len()].clone();
            let (placed_vcpus, stop, latencies, rejected) =
                (placed_vcpus.clone(), stop.clone(), latencies.clone(), rejected.clone());
            std::thread::spawn(move || {
                let c = Client::new(&url, None);
                let mut mine = Vec::new();
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let vcpus = SIZES[(i + n) % SIZES.len()];
                    let body = format!(
                        "{{\"name\":\"c{i}-{n}\",\"vcpus\":{vcpus},\"memory\":\"{}GiB\"}}",
                        u64::from(vcpus) * 2
                    );
                    n += 1;
                    let t = Instant::now();
                    let (status, _) = c.call("POST", "/v1/placements", Some(body.as_bytes())).expect("POST");
                    mine.push(t.elapsed().as_secs_f64());
                    match status {
                        201 => {
                            if placed_vcpus.fetch_add(u64::from(vcpus), Ordering::Relaxed) + u64::from(vcpus) >= target
                            {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        409 => {
                            if rejected.fetch_add(1, Ordering::Relaxed) > 1000 {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        other => panic!("POST answered {other}"),
                    }
                }
                latencies.lock().expect("latencies").extend(mine);
            })
        })
        .collect();
    for th in threads {
        th.join().expect("client thread");
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!("bench serve: the fleet page, 90% full: {:.1} ms (median of 5)", fleet_page_ms(&c));
    let mut l = latencies.lock().expect("latencies").clone();
    l.sort_by(f64::total_cmp);
    let requests = l.len();
    let retries: u64 = urls.iter().map(|u| conflicts(u)).sum();
    println!(
        "serve {} x{}: {hosts} hosts, {clients} clients: {requests} requests in {secs:.1} s = {:.0}/s; \
         p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; {} rejected; {retries} conflict retries ({:.2}% of requests); \
         {:.0}% of free threads placed",
        if pg.is_some() { "postgres" } else { "sqlite" },
        urls.len(),
        requests as f64 / secs,
        percentile(&l, 0.5) * 1e3,
        percentile(&l, 0.99) * 1e3,
        percentile(&l, 1.0) * 1e3,
        rejected.load(Ordering::Relaxed),
        retries as f64 * 100.0 / requests.max(1) as f64,
        placed_vcpus.load(Ordering::Relaxed) as f64 * 100.0 / free.max(1) as f64,
    );
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}
