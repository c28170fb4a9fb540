//! The fleet service under load, measured from outside: `numaplace serve`
//! started (one, or several sharing PostgreSQL, each told how many with
//! `--replicas`), a fleet registered over HTTP with the real topologies
//! of a bundled fleet file (`fixtures/traces/fleet-2000.json`'s mix of
//! 8-node EPYC, 2-node Xeon with SMT and 2-node Xeon without, repeated to
//! the number of hosts asked), then concurrent clients placing dedicated
//! VMs of 2 to 32 vCPUs over loopback, each deleting its oldest VM as a
//! share of its requests (`--deletes`), until the fleet is 90% full (in
//! vCPUs placed against free threads at the start). Reports placements per
//! second, their latency percentiles, the share of claims that conflicted
//! (from the servers' `/metrics`), the servers' resident memory per host,
//! the CPU use of the whole machine and of the servers over the run
//! (clients, servers and PostgreSQL share the machine), and the machine's
//! load average before and after (other work on it shows there).
//!
//! In the same run, after the service, the same clients load the bare
//! stack it stands on (the `bare` module: axum, serde_json and the same
//! database with the same durability settings, one row and one generation
//! bump per request, as many servers as the service had), and both are
//! reported side by side as CPU time per placement request, read from
//! /proc: the servers' processes and, separately, PostgreSQL's (its
//! postmaster and every child, reaped ones included), beside placements
//! per second (issue 50). `--no-bare` leaves the bare stack out.
//!
//! `cargo bench -p numaplace --bench serve -- [--hosts 10000] [--clients 16]
//!   [--postgres] [--servers 3] [--deletes 0.2] [--requests N] [--no-bare]`
//! (`--requests N`: stop after N placement requests instead of at 90%;
//! `--deletes S`: the share S of requests that are deletes, 0.2 by
//! default, one delete per four placements; `--no-deletes` is `--deletes
//! 0`.) The lines starting with `|` are rows of docs/performance.md's tables:
//! the run's own row, then the service and the bare stack side by side.
//! Under `cargo test` (no `--bench`) it runs on 12 hosts, so CI checks
//! that it works without spending minutes.

mod bare;
mod server;

use numaplace_agent::Client;
use numaplace_store::testing::Postgres;
use server::{arg, fleet_kinds, percentile, start, start_bare, status_kib, topology_json, Server};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The fleet whose mix of real topologies the bench registers.
/// The share of requests that are deletes unless `--deletes` says.
const DELETES: f64 = 0.2;
const SIZES: [u32; 5] = [2, 4, 8, 16, 32];

/// A process's CPU time in jiffies (1/100 s) from /proc/PID/stat: user +
/// system, and with `reaped` also that of its children it has waited for
/// (PostgreSQL's postmaster reaps its backends as connections close).
fn jiffies(pid: u32, reaped: bool) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces).
    let after = s.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<u64> = after.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // utime, stime, cutime, cstime are fields 14 to 17; `after` starts at
    // field 3 (the state, which is not a number, so f[0] is field 4).
    let own = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    let children = f.get(12).copied().unwrap_or(0) + f.get(13).copied().unwrap_or(0);
    own + if reaped { children } else { 0 }
}

/// CPU time used so far: the machine's (busy, total) jiffies from
/// /proc/stat, the given processes' (user + system) jiffies, and the
/// PostgreSQL server's (every process of it, reaped backends included).
fn cpu_now(pids: &[u32], pg: Option<&Postgres>) -> (u64, u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    let servers = pids.iter().map(|&pid| jiffies(pid, false)).sum();
    let database = pg.map_or(0, |pg| {
        let pids = pg.pids();
        pids.iter().enumerate().map(|(i, &pid)| jiffies(pid, i == 0)).sum()
    });
    (total - idle, total, servers, database)
}

/// A process's resident memory in bytes (`VmRSS` of /proc/PID/status).
fn rss(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:") * 1024
}

/// The machine's 1-minute load average.
fn load() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

/// A counter from a server's `/metrics`.
fn metric(url: &str, name: &str) -> u64 {
    metric_f64(url, name) as u64
}

/// A value from a server's `/metrics` (a histogram's `_sum` is seconds).
fn metric_f64(url: &str, name: &str) -> f64 {
    let (_, text) = Client::new(url, None).call("GET", "/metrics", None).expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The servers' decision and commit histograms, summed: (decision
/// seconds, decisions, commit seconds, commits).
fn times(urls: &[String]) -> [f64; 4] {
    let names = [
        "numaplace_decision_seconds_sum",
        "numaplace_decision_seconds_count",
        "numaplace_commit_seconds_sum",
        "numaplace_commit_seconds_count",
    ];
    names.map(|n| urls.iter().map(|u| metric_f64(u, n)).sum())
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

/// What the clients' run gives: its wall time, each placement request's
/// latency (sorted), requests rejected, deletes made, vCPUs held at the end.
struct Outcome {
    secs: f64,
    latencies: Vec<f64>,
    rejected: u64,
    /// Requests answered 503 (the service out of time or of database):
    /// counted, not fatal, since a machine loaded by other work makes some.
    unavailable: u64,
    deleted: u64,
    placed_vcpus: u64,
}

/// The load, the same for the service and the bare stack: `clients`
/// keep-alive clients, spread over `urls`, placing VMs of [`SIZES`] vCPUs
/// in turn, each deleting its oldest VM `per_placement` times a placement,
/// until `limit` placement requests are sent or `target` vCPUs are held.
fn drive(urls: &[String], clients: usize, limit: u64, target: u64, per_placement: f64) -> Outcome {
    let sent = Arc::new(AtomicU64::new(0));
    let placed_vcpus = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let rejected = Arc::new(AtomicU64::new(0));
    let unavailable = Arc::new(AtomicU64::new(0));
    let deleted = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let url = urls[i % urls.len()].clone();
            let unavailable = unavailable.clone();
            let (placed_vcpus, stop, latencies, rejected, deleted, sent) = (
                placed_vcpus.clone(),
                stop.clone(),
                latencies.clone(),
                rejected.clone(),
                deleted.clone(),
                sent.clone(),
            );
            std::thread::spawn(move || {
                let c = Client::new(&url, None);
                let mut mine = Vec::new();
                let mut held: std::collections::VecDeque<(String, u32)> = Default::default();
                let mut n = 0usize;
                // Deletes owed: each placement adds the share per placement.
                let mut owed = 0.0f64;
                while !stop.load(Ordering::Relaxed) {
                    if sent.fetch_add(1, Ordering::Relaxed) >= limit {
                        break;
                    }
                    let vcpus = SIZES[(i + n) % SIZES.len()];
                    let name = format!("c{i}-{n}");
                    let body =
                        format!("{{\"name\":\"{name}\",\"vcpus\":{vcpus},\"memory\":\"{}GiB\"}}", u64::from(vcpus) * 2);
                    n += 1;
                    let t = Instant::now();
                    let (status, _) = c.call("POST", "/v1/placements", Some(body.as_bytes())).expect("POST");
                    mine.push(t.elapsed().as_secs_f64());
                    match status {
                        201 => {
                            held.push_back((name, vcpus));
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
                        503 => {
                            unavailable.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("POST answered {other}"),
                    }
                    // Its oldest VMs end: the fleet churns as it fills.
                    owed += per_placement;
                    while owed >= 1.0 {
                        owed -= 1.0;
                        if let Some((vm, vcpus)) = held.pop_front() {
                            let (status, _) = c.call("DELETE", &format!("/v1/placements/{vm}"), None).expect("DELETE");
                            if status == 503 {
                                // Tried again at its next turn.
                                unavailable.fetch_add(1, Ordering::Relaxed);
                                held.push_front((vm, vcpus));
                                owed += 1.0;
                                break;
                            }
                            assert_eq!(status, 204, "DELETE {vm}");
                            placed_vcpus.fetch_sub(u64::from(vcpus), Ordering::Relaxed);
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
    let mut latencies = latencies.lock().expect("latencies").clone();
    latencies.sort_by(f64::total_cmp);
    Outcome {
        secs,
        latencies,
        rejected: rejected.load(Ordering::Relaxed),
        unavailable: unavailable.load(Ordering::Relaxed),
        deleted: deleted.load(Ordering::Relaxed),
        placed_vcpus: placed_vcpus.load(Ordering::Relaxed),
    }
}

/// Registers `hosts` hosts over HTTP from 4 threads spread over `urls`:
/// the fleet file's kinds in its proportions, interleaved (host h takes
/// the kind of the file's h-th host, modulo its size, with the kinds dealt
/// in turn). Returns the seconds it took.
fn register(urls: &[String], hosts: usize) -> f64 {
    let kinds = fleet_kinds();
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(kinds.iter().map(|(k, _)| topology_json(k)).collect());
    let mut deal: Vec<usize> = Vec::new();
    let mut left: Vec<usize> = kinds.iter().map(|(_, n)| *n).collect();
    while left.iter().any(|&n| n > 0) {
        for (k, n) in left.iter_mut().enumerate() {
            if *n > 0 {
                *n -= 1;
                deal.push(k);
            }
        }
    }
    let deal = Arc::new(deal);
    let t = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (bodies, next, url, deal) = (bodies.clone(), next.clone(), urls[i % urls.len()].clone(), deal.clone());
            std::thread::spawn(move || {
                let c = Client::new(&url, None);
                loop {
                    let h = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if h >= hosts {
                        break;
                    }
                    c.ok("PUT", &format!("/v1/hosts/host{h:05}"), Some(&bodies[deal[h % deal.len()]]))
                        .expect("register");
                }
            })
        })
        .collect();
    for th in threads {
        th.join().expect("register thread");
    }
    t.elapsed().as_secs_f64()
}

/// Free threads over the fleet, summed from the host listing's pages.
fn free_threads(c: &Client) -> u64 {
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
    free
}

/// The bare stack (the `bare` module) under the same load as the service:
/// as many servers on a fresh database of the same kind, the same clients.
/// Returns its row of the side-by-side table.
#[allow(clippy::too_many_arguments)]
fn bare_run(
    dir: &std::path::Path,
    pg: Option<&Postgres>,
    n_servers: usize,
    hosts: usize,
    clients: usize,
    limit: u64,
    target: u64,
    per_placement: f64,
) -> String {
    // The service's backends end as its servers go: let PostgreSQL reap
    // them before the bare stack's window opens.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let database = if pg.is_some() { "PostgreSQL" } else { "SQLite" };
    let bare_db = match pg {
        Some(pg) => pg.fresh_database(),
        None => format!("sqlite:{}", dir.join("bare.db").display()),
    };
    let bare: Vec<Server> = (0..n_servers).map(|i| start_bare(&bare_db, hosts, i == 0)).collect();
    let bare_urls: Vec<String> = bare.iter().map(|s| s.1.clone()).collect();
    let bare_pids: Vec<u32> = bare.iter().map(|s| s.0.id()).collect();
    let load_before = load();
    let before = cpu_now(&bare_pids, pg);
    let run = drive(&bare_urls, clients, limit, target, per_placement);
    let after = cpu_now(&bare_pids, pg);
    let side = Side {
        database,
        servers: bare_urls.len(),
        clients,
        requests: run.latencies.len(),
        secs: run.secs,
        machine_cpu: (after.0 - before.0) as f64 * 100.0 / (after.1 - before.1).max(1) as f64,
        load_before,
        load_after: load(),
    };
    drop(bare);
    println!(
        "bench serve: the bare stack: {} placement requests and {} deletes in {:.1} s; p50 {:.2} ms, p99 {:.2} ms",
        side.requests,
        run.deleted,
        run.secs,
        percentile(&run.latencies, 0.5) * 1e3,
        percentile(&run.latencies, 0.99) * 1e3
    );
    side.row("bare stack", after.2 - before.2, after.3 - before.3, None)
}

/// Deletes per placement, for the share of all requests `--deletes` asks
/// (`--no-deletes`: none).
fn deletes_per_placement(args: &[String]) -> f64 {
    let deletes: f64 = if args.iter().any(|a| a == "--no-deletes") {
        0.0
    } else {
        arg(args, "--deletes").map_or(DELETES, |v| v.parse().expect("--deletes: a share from 0 to below 1"))
    };
    assert!((0.0..1.0).contains(&deletes), "--deletes: a share from 0 to below 1, not {deletes}");
    deletes / (1.0 - deletes)
}

/// When this binary was started again as the bare-stack server
/// (`--bare-serve DB HOSTS first|more`): serves until killed, and true.
fn bare_child(args: &[String]) -> bool {
    let Some(db) = arg(args, "--bare-serve") else { return false };
    let hosts = args.iter().position(|a| a == "--bare-serve").and_then(|i| args.get(i + 2)?.parse().ok());
    let first = args.iter().any(|a| a == "first");
    bare::serve(&db, hosts.expect("--bare-serve DB HOSTS first|more"), first);
    true
}

/// The servers' own means over the run (decision, commit, from their
/// histograms) and, on SQLite, the claims per group commit (`transactions`:
/// the change counter before and after).
fn print_server_figures(urls: &[String], times_before: [f64; 4], claims: u64, transactions: Option<(i64, i64)>) {
    let t = times(urls);
    let mean_us =
        |sum: usize, count: usize| (t[sum] - times_before[sum]) * 1e6 / (t[count] - times_before[count]).max(1.0);
    println!(
        "bench serve: in the servers, a decision (filter, rank, plan) {:.0} µs, a commit {:.0} µs (means over the run)",
        mean_us(0, 1),
        mean_us(2, 3)
    );
    if let Some((before, after)) = transactions {
        let n = (after - before).max(1) as f64;
        println!(
            "bench serve: {claims} claims in {n:.0} SQLite transactions: {:.2} claims per group commit",
            claims as f64 / n
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if bare_child(&args) {
        return;
    }
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
    let per_placement = deletes_per_placement(&args);
    let limit: u64 = arg(&args, "--requests").and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
    let n_servers = servers;
    let servers: Vec<Server> = (0..servers).map(|_| start(&db, n_servers).0).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.1.clone()).collect();
    let pids: Vec<u32> = servers.iter().map(|s| s.0.id()).collect();
    let rss_empty: u64 = pids.iter().map(|&p| rss(p)).sum();
    let register_s = register(&urls, hosts);
    let rss_registered: u64 = pids.iter().map(|&p| rss(p)).sum();
    let c = Client::new(&urls[0], None);
    let free = free_threads(&c);
    let target = free * 9 / 10;
    eprintln!("bench serve: {hosts} hosts registered in {register_s:.1} s; {free} free threads, filling {target}");
    let per_host =
        |total: u64| (total.saturating_sub(rss_empty) / pids.len() as u64) as f64 / hosts.max(1) as f64 / 1024.0;
    eprintln!(
        "bench serve: servers' resident memory {:.0} MiB empty, {:.0} MiB with the hosts: {:.1} KiB per host per server",
        rss_empty as f64 / 1048576.0,
        rss_registered as f64 / 1048576.0,
        per_host(rss_registered)
    );
    eprintln!("bench serve: the fleet page, empty fleet: {:.1} ms (median of 5)", fleet_page_ms(&c));

    // Fill to 90%, deleting as we go.
    let conflicts_before: u64 = urls.iter().map(|u| metric(u, "numaplace_claim_conflicts_total")).sum();
    let claims_before: u64 = urls.iter().map(|u| metric(u, "numaplace_claims_total")).sum();
    // SQLite stamps each write transaction with the next value of one
    // counter: its growth over the run counts the transactions, and claims
    // per transaction is the group commit's batch.
    let transactions =
        || pg.is_none().then(|| numaplace_store::open(&db).ok()?.changed_since(0).ok().map(|(n, _)| n)).flatten();
    let transactions_before = transactions();
    let times_before = times(&urls);
    let load_before = load();
    let cpu_before = cpu_now(&pids, pg.as_ref());
    let run = drive(&urls, clients, limit, target, per_placement);
    let secs = run.secs;
    let cpu_after = cpu_now(&pids, pg.as_ref());
    let load_after = load();
    let rss_end: u64 = pids.iter().map(|&p| rss(p)).sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let machine_cpu = (cpu_after.0 - cpu_before.0) as f64 * 100.0 / (cpu_after.1 - cpu_before.1).max(1) as f64;
    // Jiffies are 1/100 s on Linux: the servers' share of the machine.
    let servers_cpu = (cpu_after.2 - cpu_before.2) as f64 / 100.0 / secs / cores * 100.0;
    eprintln!("bench serve: the fleet page, 90% full: {:.1} ms (median of 5)", fleet_page_ms(&c));
    let l = &run.latencies;
    let requests = l.len();
    let conflicts: u64 =
        urls.iter().map(|u| metric(u, "numaplace_claim_conflicts_total")).sum::<u64>() - conflicts_before;
    let claims: u64 = urls.iter().map(|u| metric(u, "numaplace_claims_total")).sum::<u64>() - claims_before;
    let deleted = run.deleted;
    print_server_figures(&urls, times_before, claims, transactions_before.zip(transactions()));
    let p50 = percentile(l, 0.5) * 1e3;
    let p99 = percentile(l, 0.99) * 1e3;
    println!(
        "serve {} x{}: {hosts} hosts, {clients} clients: {requests} placement requests ({:.0}/s) and {deleted} deletes in \
         {secs:.1} s; placements p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; {} rejected; {conflicts} conflicts \
         ({:.2}% of claims, {:.2}% of placements); CPU: machine {machine_cpu:.0}%, servers {servers_cpu:.0}% of \
         {cores} cores; {:.0}% of free threads held at the end",
        if pg.is_some() { "postgres" } else { "sqlite" },
        urls.len(),
        requests as f64 / secs,
        p50,
        p99,
        percentile(l, 1.0) * 1e3,
        run.rejected,
        conflicts as f64 * 100.0 / claims.max(1) as f64,
        conflicts as f64 * 100.0 / requests.max(1) as f64,
        run.placed_vcpus as f64 * 100.0 / free.max(1) as f64,
    );
    println!(
        "bench serve: resident {:.1} KiB per host per server at the end; load average {load_before:.1} before, \
         {load_after:.1} after; {deleted} deletes ({:.0}% of requests); {} requests answered 503",
        per_host(rss_end),
        deleted as f64 * 100.0 / (requests as u64 + deleted).max(1) as f64,
        run.unavailable
    );
    // A row of docs/performance.md's table.
    println!(
        "| {} | {} | {hosts} | {clients} | {:.0}% | {requests} | {:.0} | {p50:.2} ms | {p99:.2} ms | {:.2}% / {:.2}% \
         | {machine_cpu:.0}% / {servers_cpu:.0}% | {:.1} KiB | {load_before:.1}-{load_after:.1} |",
        if pg.is_some() { "PostgreSQL" } else { "SQLite" },
        urls.len(),
        deleted as f64 * 100.0 / (requests as u64 + deleted).max(1) as f64,
        requests as f64 / secs,
        conflicts as f64 * 100.0 / claims.max(1) as f64,
        conflicts as f64 * 100.0 / requests.max(1) as f64,
        per_host(rss_end),
    );
    let database = if pg.is_some() { "PostgreSQL" } else { "SQLite" };
    let side = Side { database, servers: urls.len(), clients, requests, secs, machine_cpu, load_before, load_after };
    let service_row = side.row("service", cpu_after.2 - cpu_before.2, cpu_after.3 - cpu_before.3, Some(conflicts));
    drop(servers);
    if args.iter().any(|a| a == "--no-bare") {
        println!("{service_row}");
    } else {
        let bare_row = bare_run(&dir, pg.as_ref(), n_servers, hosts, clients, limit, target, per_placement);
        // Rows of docs/performance.md's side-by-side table.
        println!("{service_row}");
        println!("{bare_row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One stack's run, for a row of the side-by-side table.
struct Side {
    database: &'static str,
    servers: usize,
    clients: usize,
    requests: usize,
    secs: f64,
    machine_cpu: f64,
    load_before: f64,
    load_after: f64,
}

impl Side {
    /// `| stack | database | servers | clients | requests | placements/s |
    /// server CPU per placement | database CPU per placement | together |
    /// conflicts (of placements) | machine CPU | load |`: CPU in µs per
    /// placement request from the processes' jiffies (deletes included in
    /// the work, the same share for both stacks).
    fn row(&self, stack: &str, server_jiffies: u64, database_jiffies: u64, conflicts: Option<u64>) -> String {
        let per = |j: u64| j as f64 * 10_000.0 / self.requests.max(1) as f64;
        let database = if self.database == "SQLite" {
            "(in the server)".to_owned()
        } else {
            format!("{:.0} µs", per(database_jiffies))
        };
        let conflicts =
            conflicts.map_or("".to_owned(), |c| format!("{:.2}%", c as f64 * 100.0 / self.requests.max(1) as f64));
        format!(
            "| {stack} | {} | {} | {} | {} | {:.0} | {:.0} µs | {database} | {:.0} µs | {conflicts} | {:.0}% | {:.1}-{:.1} |",
            self.database,
            self.servers,
            self.clients,
            self.requests,
            self.requests as f64 / self.secs,
            per(server_jiffies),
            per(server_jiffies + database_jiffies),
            self.machine_cpu,
            self.load_before,
            self.load_after,
        )
    }
}
