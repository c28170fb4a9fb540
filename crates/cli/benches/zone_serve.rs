//! A zone of 100,000 hosts in the whole server, measured from outside
//! (issue 41 item 3): `numaplace serve` started as a process on SQLite (or
//! PostgreSQL), the
//! hosts registered over HTTP one by one (the real topologies of
//! `fixtures/traces/fleet-2000.json`, repeated), the web view's fleet page
//! fetched, placements of 2 to 32 dedicated vCPUs with deletes mixed in
//! from concurrent clients, then the server killed and started again on
//! the same database: how long its cache takes to load. The server's peak
//! resident memory is read from its `/proc/PID/status` (`VmHWM`) after each
//! step. Not a criterion bench: one pass, figures printed.
//!
//! `cargo bench -p numaplace --bench zone_serve -- [--hosts 100000]
//!   [--clients 4] [--requests 20000] [--postgres] [--screenshot FILE.png]`
//! (`--postgres`: a PostgreSQL started for the run instead of SQLite.)
//! (`--screenshot`: the fleet page at that size, taken by headless
//! Chromium after the placements.) Under `cargo test` (no `--bench`) it
//! runs on 12 hosts, so CI checks that it works.

mod server;

use numaplace_agent::Client;
use server::{arg, fleet_kinds, percentile, start, status_kib, topology_json};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const SIZES: [u32; 5] = [2, 4, 8, 16, 32];
/// One delete after this many placements, per client.
const DELETE_EVERY: usize = 4;

/// The fleet file's kinds as topology JSON, dealt in its proportions.
fn kinds() -> (Vec<Vec<u8>>, Vec<usize>) {
    let (bodies, mut left): (Vec<Vec<u8>>, Vec<usize>) =
        fleet_kinds().into_iter().map(|(path, count)| (topology_json(&path), count)).unzip();
    let mut deal = Vec::new();
    while left.iter().any(|&n| n > 0) {
        for (k, n) in left.iter_mut().enumerate() {
            if *n > 0 {
                *n -= 1;
                deal.push(k);
            }
        }
    }
    (bodies, deal)
}

/// A process's peak and current resident memory, MiB (`VmHWM`, `VmRSS`).
fn memory(pid: u32) -> (u64, u64) {
    (status_kib(pid, "VmHWM:") >> 10, status_kib(pid, "VmRSS:") >> 10)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A page fetched 5 times: the median, in milliseconds, and its size.
fn page_ms(c: &Client, path: &str) -> (f64, usize) {
    let mut size = 0;
    let mut ms: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let (status, html) = c.call("GET", path, None).expect("page");
            assert_eq!(status, 200, "{path}");
            size = html.len();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[2], size)
}

fn pages(c: &Client, when: &str) {
    for path in ["/", "/?state=stranded", "/?page=500&per_page=100", "/?min_free_threads=60"] {
        let (ms, size) = page_ms(c, path);
        println!("zone serve: fleet page {path} ({when}): {ms:.1} ms, {} KiB (median of 5)", size >> 10);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let hosts: usize = arg(&args, "--hosts").and_then(|v| v.parse().ok()).unwrap_or(if bench { 100_000 } else { 12 });
    let clients: usize = arg(&args, "--clients").and_then(|v| v.parse().ok()).unwrap_or(4);
    let requests: usize =
        arg(&args, "--requests").and_then(|v| v.parse().ok()).unwrap_or(if bench { 20_000 } else { 40 });
    let dir = std::env::temp_dir().join(format!("numaplace-bench-zone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pg = if args.iter().any(|a| a == "--postgres") { numaplace_store::testing::Postgres::start() } else { None };
    let db = match &pg {
        Some(pg) => pg.fresh_database(),
        None => format!("sqlite:{}", dir.join("zone.db").display()),
    };
    let kind = if pg.is_some() { "PostgreSQL" } else { "SQLite" };
    println!("zone serve: {hosts} hosts, {kind}, load average before: {}", loadavg());

    let (server, _) = start(&db, 1);
    let url = server.1.clone();
    let pid = server.0.id();
    let (bodies, deal) = kinds();
    let (bodies, deal) = (Arc::new(bodies), Arc::new(deal));

    // Registration: four clients, one host per request.
    let t = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let times = Arc::new(Mutex::new(Vec::<f64>::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (bodies, deal, next, url, times) =
                (bodies.clone(), deal.clone(), next.clone(), url.clone(), times.clone());
            std::thread::spawn(move || {
                let c = Client::new(&url, None);
                let mut mine = Vec::new();
                loop {
                    let h = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if h >= hosts {
                        break;
                    }
                    let t = Instant::now();
                    c.ok("PUT", &format!("/v1/hosts/host{h:06}"), Some(&bodies[deal[h % deal.len()]]))
                        .expect("register");
                    mine.push(t.elapsed().as_secs_f64());
                }
                times.lock().expect("times").extend(mine);
            })
        })
        .collect();
    for th in threads {
        th.join().expect("register thread");
    }
    let secs = t.elapsed().as_secs_f64();
    let mut l = times.lock().expect("times").clone();
    l.sort_by(f64::total_cmp);
    let (hwm, rss) = memory(pid);
    println!(
        "zone serve: registered {hosts} hosts over HTTP in {secs:.1} s ({:.0}/s, 4 clients; p50 {:.2} ms, p99 {:.2} ms); \
         server VmHWM {hwm} MiB, VmRSS {rss} MiB ({} KiB per host); load average {}",
        hosts as f64 / secs,
        percentile(&l, 0.5) * 1e3,
        percentile(&l, 0.99) * 1e3,
        (rss << 10) / hosts.max(1) as u64,
        loadavg()
    );
    let c = Client::new(&url, None);
    pages(&c, "empty");

    // Placements with deletes mixed in.
    let sent = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let rejected = Arc::new(AtomicU64::new(0));
    let deleted = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (url, sent, latencies, rejected, deleted) =
                (url.clone(), sent.clone(), latencies.clone(), rejected.clone(), deleted.clone());
            std::thread::spawn(move || {
                let c = Client::new(&url, None);
                let mut mine = Vec::new();
                let mut held = std::collections::VecDeque::new();
                let mut n = 0usize;
                while (sent.fetch_add(1, Ordering::Relaxed) as usize) < requests {
                    let vcpus = SIZES[(i + n) % SIZES.len()];
                    let name = format!("c{i}-{n}");
                    let body =
                        format!("{{\"name\":\"{name}\",\"vcpus\":{vcpus},\"memory\":\"{}GiB\"}}", u64::from(vcpus) * 2);
                    n += 1;
                    let t = Instant::now();
                    let (status, _) = c.call("POST", "/v1/placements", Some(body.as_bytes())).expect("POST");
                    mine.push(t.elapsed().as_secs_f64());
                    match status {
                        201 => held.push_back(name),
                        409 => {
                            rejected.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("POST answered {other}"),
                    }
                    if n.is_multiple_of(DELETE_EVERY) {
                        if let Some(vm) = held.pop_front() {
                            let (status, _) = c.call("DELETE", &format!("/v1/placements/{vm}"), None).expect("DELETE");
                            assert_eq!(status, 204, "DELETE {vm}");
                            deleted.fetch_add(1, Ordering::Relaxed);
                        }
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
    let mut l = latencies.lock().expect("latencies").clone();
    l.sort_by(f64::total_cmp);
    let (hwm, rss) = memory(pid);
    println!(
        "zone serve: {} placement requests ({:.0}/s, {clients} clients) and {} deletes in {secs:.1} s; \
         placements p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; {} rejected; server VmHWM {hwm} MiB, VmRSS {rss} MiB; \
         load average {}",
        l.len(),
        l.len() as f64 / secs,
        deleted.load(Ordering::Relaxed),
        percentile(&l, 0.5) * 1e3,
        percentile(&l, 0.99) * 1e3,
        percentile(&l, 1.0) * 1e3,
        rejected.load(Ordering::Relaxed),
        loadavg()
    );
    pages(&c, "after the placements");
    if let Some(out) = arg(&args, "--screenshot") {
        let status = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2400"])
            .arg(format!("--screenshot={out}"))
            .arg(format!("{url}/"))
            .stderr(Stdio::null())
            .status()
            .expect("chromium");
        assert!(status.success(), "chromium");
        println!("zone serve: the fleet page's screenshot is {out}");
    }

    // A restart: killed, started again on the same database.
    drop(server);
    let (server, secs) = start(&db, 1);
    let (hwm, rss) = memory(server.0.id());
    let c = Client::new(&server.1, None);
    let (status, _) = c.call("GET", "/v1/hosts?limit=1", None).expect("list");
    assert_eq!(status, 200);
    println!(
        "zone serve: restart with {hosts} hosts: listening after {secs:.2} s (the cache loaded); \
         server VmHWM {hwm} MiB, VmRSS {rss} MiB; load average {}",
        loadavg()
    );
    drop(server);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}
