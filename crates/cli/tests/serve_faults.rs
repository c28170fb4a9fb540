//! `numaplace serve` on PostgreSQL while its database sessions are killed
//! mid-burst (issue 46): placements, deletes and moves in flight through
//! two servers while the sessions are terminated (`pg_terminate_backend`,
//! some of them while their COMMIT waits for its answer) and the database
//! is stopped (`pg_ctl -m fast`) and started. Then the audits: every
//! answer matches what is stored, every stored change has its audit line
//! (the lines of every server, ordered by host generation, replay to the
//! database), no CPU is claimed twice; and with `Idempotency-Key` retries
//! of every 503, every change is made exactly once.
#![allow(clippy::unwrap_used)]

use numaplace_plan::{Placement, Reservations};
use numaplace_store::testing::{Postgres, Session};
use numaplace_store::Store;
use numaplace_wire::plan::{PlacementDoc, ReservedDoc};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CORONA: &str = "mpibind/epyc-corona.xml";

fn fixture(path: &str) -> String {
    format!("{}/../../fixtures/topologies/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// A `numaplace serve` process logging JSON; killed on drop.
struct Server {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(db: &str, replicas: usize) -> Server {
        Server::start_with(db, replicas, &[])
    }

    fn start_with(db: &str, replicas: usize, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_numaplace"))
            .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
            .args(["serve", "--db", db, "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(["--replicas", &replicas.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().unwrap_or_else(|| panic!("serve exited: {:?}", child.try_wait())).unwrap();
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.trim().to_string();
            }
        };
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Server { child, url, log }
    }

    /// Its audit lines so far.
    fn audit_lines(&self) -> Vec<Value> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["target"] == "numaplace::audit")
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a connection of its own: status, headers (names in
/// lower case) and JSON body (`Null` when empty).
fn exchange(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, BTreeMap<String, String>, Value) {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse().ok()).unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// [`exchange`] without the headers.
fn http(url: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let (status, _, v) = exchange(url, method, path, headers, body);
    (status, v)
}

fn register(url: &str, hosts: usize) {
    let body = std::fs::read(fixture(CORONA)).unwrap();
    for i in 0..hosts {
        let (s, e) = http(url, "PUT", &format!("/v1/hosts/h{i}"), &[], &body);
        assert_eq!(s, 201, "{e}");
    }
}

/// The database's placements, checked: no PU in two placements of a host,
/// every host's placements fit together, and the claims table holds
/// exactly the placements' PUs. VM -> host.
fn audit(store: &dyn Store) -> BTreeMap<String, String> {
    let mut where_ = BTreeMap::new();
    let mut expected_claims = Vec::new();
    for host in store.hosts().unwrap() {
        let topology = numaplace_read::json::parse(&host.topology).unwrap();
        let reserved = match &host.reserved {
            Some(j) => serde_json::from_str::<ReservedDoc>(j).unwrap().to_reservations().unwrap(),
            None => Reservations::default(),
        };
        let rows = store.placements(Some(&host.name)).unwrap();
        let placements: Vec<Placement> = rows
            .iter()
            .map(|r| serde_json::from_str::<PlacementDoc>(&r.doc).unwrap().to_placement(&r.vm).unwrap())
            .collect();
        let mut pus = BTreeSet::new();
        for (r, p) in rows.iter().zip(&placements) {
            for v in &p.vcpus {
                assert!(pus.insert(v.pu), "host {}: CPU {} claimed twice (second: {})", host.name, v.pu, r.vm);
            }
            expected_claims.extend(r.pus.iter().map(|&pu| (host.name.clone(), pu, r.vm.clone())));
            where_.insert(r.vm.clone(), host.name.clone());
        }
        numaplace_plan::Session::open(&topology, reserved, &placements)
            .map(|_| ())
            .unwrap_or_else(|(i, e)| panic!("host {}: placements do not fit together at {i:?}: {e}", host.name));
    }
    expected_claims.sort_unstable();
    assert_eq!(store.claims().unwrap(), expected_claims, "the claims table matches the placements");
    where_
}

/// Replays audit lines gathered from any number of servers in the order
/// their host generations give (a line goes once, for each host it
/// names, every line of a lower generation of that host went), and
/// returns VM -> host. Panics when a line does not follow from the ones
/// before it, or when two lines claim one generation of a host.
fn replay(lines: &[Value]) -> BTreeMap<String, String> {
    let hosts_of = |l: &Value| -> Vec<(String, i64)> {
        let mut hosts = Vec::new();
        for (host, generation) in [
            ("host", "host_generation"),
            ("before_host", "before_host_generation"),
            ("after_host", "after_host_generation"),
        ] {
            if let Some(h) = l[host].as_str() {
                let g = l[generation].as_i64().unwrap_or_else(|| panic!("{generation} in {l}"));
                hosts.push((h.to_owned(), g));
            }
        }
        hosts
    };
    let mut queues: BTreeMap<String, Vec<(i64, usize)>> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        for (h, g) in hosts_of(l) {
            queues.entry(h).or_default().push((g, i));
        }
    }
    for (h, q) in &mut queues {
        q.sort_unstable();
        for w in q.windows(2) {
            assert!(w[0].0 != w[1].0, "two lines claim generation {} of host {h}", w[0].0);
        }
    }
    let mut next: BTreeMap<String, usize> = queues.keys().map(|h| (h.clone(), 0)).collect();
    let mut vms: BTreeMap<String, String> = BTreeMap::new();
    let mut done = 0;
    while done < lines.len() {
        let ready = queues.iter().find_map(|(h, q)| {
            let &(_, i) = q.get(next[h])?;
            hosts_of(&lines[i])
                .iter()
                .all(|(h2, g2)| queues[h2].get(next[h2]).is_some_and(|&(g, _)| g == *g2))
                .then_some(i)
        });
        let i = ready.unwrap_or_else(|| panic!("the audit lines cannot be ordered by host generation"));
        let l = &lines[i];
        for (h, _) in hosts_of(l) {
            *next.get_mut(&h).unwrap() += 1;
        }
        done += 1;
        let s = |k: &str| l[k].as_str().unwrap_or_else(|| panic!("{k} in {l}")).to_owned();
        match l["action"].as_str().unwrap() {
            "placed" => assert_eq!(vms.insert(s("vm"), s("after_host")), None, "placed twice: {l}"),
            "deleted" => assert_eq!(vms.remove(&s("vm")), Some(s("before_host")), "deleted from elsewhere: {l}"),
            "moved" => {
                assert_eq!(vms.insert(s("vm"), s("after_host")), Some(s("before_host")), "moved from elsewhere: {l}")
            }
            "host-registered" | "host-replaced" | "drained" => {}
            other => panic!("unexpected audit action {other}: {l}"),
        }
    }
    vms
}

/// What a client knows of one of its VMs from the answers it got.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Known {
    /// Placed on this host.
    At(String),
    /// Not placed (never, or deleted).
    Gone,
    /// Answered `outcome-unknown`: either.
    Unknown,
}

/// The answers of a burst.
#[derive(Default)]
struct Ledger {
    vms: BTreeMap<String, Known>,
    /// Answers by operation, status and code.
    answers: BTreeMap<String, usize>,
    /// Moves answered 200, per VM.
    moves: BTreeMap<String, usize>,
    /// Deletes answered 204, per VM.
    deletes: BTreeMap<String, usize>,
}

/// Sends a change; with `keyed`, under a fresh `Idempotency-Key`, and
/// every 503 sent again with it (through the next server) until another
/// answer comes. The answer, its error code, and how many 503s came first.
fn change(
    urls: &[String],
    first: usize,
    keyed: Option<&str>,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String, Value, usize) {
    let mut retried = 0;
    loop {
        let headers: Vec<(&str, &str)> = keyed.map(|k| ("Idempotency-Key", k)).into_iter().collect();
        let (status, v) = http(&urls[(first + retried) % urls.len()], method, path, &headers, body);
        let code = v["error"]["code"].as_str().unwrap_or("").to_owned();
        if status == 503 && keyed.is_some() {
            retried += 1;
            assert!(retried < 200, "{method} {path} answered 503 {retried} times");
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        return (status, code, v, retried);
    }
}

/// `clients` threads place, move and delete VMs of their own through the
/// servers, in turn, for `run_for`; each records what every answer says
/// of its VM. With `keyed`, every change carries a key and every 503 is
/// retried with it.
fn burst(urls: &[String], clients: usize, run_for: Duration, keyed: bool) -> Ledger {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let urls = urls.to_vec();
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                let mut mine: Vec<(String, String)> = Vec::new();
                let mut i = 0usize;
                while start.elapsed() < run_for {
                    i += 1;
                    let key = format!("k-{t}-{i}-{}", std::process::id());
                    let key = keyed.then_some(key.as_str());
                    let note = |op: &str, status: u16, code: &str, retried: usize| {
                        let mut l = ledger.lock().unwrap();
                        *l.answers.entry(format!("{op} {status} {code}")).or_default() += 1;
                        if retried > 0 {
                            *l.answers.entry(format!("{op} retried-503")).or_default() += retried;
                        }
                    };
                    let set = |vm: &str, k: Known| {
                        ledger.lock().unwrap().vms.insert(vm.to_owned(), k);
                    };
                    match i % 4 {
                        // Move one of its VMs.
                        2 if !mine.is_empty() => {
                            let (vm, from) = mine[i % mine.len()].clone();
                            let path = format!("/v1/placements/{vm}/move");
                            let (s, code, v, retried) = change(&urls, t + i, key, "POST", &path, b"");
                            note("move", s, &code, retried);
                            match (s, code.as_str()) {
                                (200, _) => {
                                    let to = v["host"].as_str().unwrap().to_owned();
                                    assert_ne!(to, from, "{v}");
                                    *ledger.lock().unwrap().moves.entry(vm.clone()).or_default() += 1;
                                    set(&vm, Known::At(to.clone()));
                                    let at = mine.iter().position(|(m, _)| *m == vm).unwrap();
                                    mine[at].1 = to;
                                }
                                (409, "no-host") | (503, "unavailable" | "deadline-exceeded") => {}
                                (503, "outcome-unknown") => {
                                    set(&vm, Known::Unknown);
                                    mine.retain(|(m, _)| *m != vm);
                                }
                                _ => panic!("move {vm}: {s} {v}"),
                            }
                        }
                        // Delete its oldest VM.
                        3 if mine.len() > 3 => {
                            let (vm, _) = mine[0].clone();
                            let path = format!("/v1/placements/{vm}");
                            let (s, code, v, retried) = change(&urls, t + i, key, "DELETE", &path, b"");
                            note("delete", s, &code, retried);
                            match (s, code.as_str()) {
                                (204, _) => {
                                    *ledger.lock().unwrap().deletes.entry(vm.clone()).or_default() += 1;
                                    set(&vm, Known::Gone);
                                    mine.remove(0);
                                }
                                (503, "unavailable" | "deadline-exceeded") => {}
                                (503, "outcome-unknown") => {
                                    set(&vm, Known::Unknown);
                                    mine.remove(0);
                                }
                                _ => panic!("delete {vm}: {s} {v}"),
                            }
                        }
                        _ => {
                            let vm = format!("c{t}-{i}");
                            let body = json!({"name": vm, "vcpus": 2 + 2 * (i % 2), "memory": "2GiB"}).to_string();
                            let (s, code, v, retried) =
                                change(&urls, t + i, key, "POST", "/v1/placements", body.as_bytes());
                            note("place", s, &code, retried);
                            match (s, code.as_str()) {
                                (201, _) => {
                                    let host = v["host"].as_str().unwrap().to_owned();
                                    set(&vm, Known::At(host.clone()));
                                    mine.push((vm, host));
                                }
                                (409, "no-host") | (503, "unavailable" | "deadline-exceeded") => set(&vm, Known::Gone),
                                (503, "outcome-unknown") => set(&vm, Known::Unknown),
                                _ => panic!("place {vm}: {s} {v}"),
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap()
}

/// Makes every COMMIT wait, once written, for a standby that does not
/// exist (or stops that): the window where a connection lost leaves the
/// client without the answer of a commit that was made.
fn hold_commits(admin: &mut Session, hold: bool) {
    if hold {
        admin.run("ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
    } else {
        admin.run("ALTER SYSTEM RESET synchronous_standby_names");
    }
    admin.run("SELECT pg_reload_conf()");
}

/// Terminates the servers' sessions until `until`: every one of them now
/// and then; the ones whose COMMIT is held, most of the time; and once,
/// at `stop_at`, stops PostgreSQL (fast) with commits held, and starts
/// it again. Returns how many sessions were terminated in their COMMIT.
fn kill_sessions(pg: &Postgres, until: Instant, stop_at: Instant) -> i64 {
    let mut admin = Session::connect(&pg.url());
    let mut cut = 0;
    let mut stopped = false;
    let mut round = 0;
    while Instant::now() < until {
        round += 1;
        std::thread::sleep(Duration::from_millis(250));
        if !stopped && Instant::now() >= stop_at {
            stopped = true;
            hold_commits(&mut admin, true);
            std::thread::sleep(Duration::from_millis(300));
            drop(admin);
            pg.stop();
            std::thread::sleep(Duration::from_millis(500));
            pg.start_again();
            admin = Session::connect(&pg.url());
            hold_commits(&mut admin, false);
            continue;
        }
        if round % 3 == 0 {
            admin.run(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = 'numaplace' AND pid <> pg_backend_pid()",
            );
            continue;
        }
        hold_commits(&mut admin, true);
        std::thread::sleep(Duration::from_millis(200));
        cut += admin.int(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'numaplace' AND wait_event = 'SyncRep') t",
        );
        hold_commits(&mut admin, false);
    }
    cut
}

/// Two servers on one PostgreSQL, 8 clients, the sessions killed as
/// [`kill_sessions`] does for 12 s; then the audits.
fn sessions_killed_mid_burst(keyed: bool) {
    let Some(pg) = Postgres::start() else { return };
    let db = pg.fresh_database();
    let servers: Vec<Server> = (0..2).map(|_| Server::start(&db, 2)).collect();
    register(&servers[0].url, 4);
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let run_for = Duration::from_secs(12);
    let start = Instant::now();
    let load = std::thread::spawn(move || burst(&urls, 8, run_for, keyed));
    let cut = kill_sessions(&pg, start + run_for, start + run_for / 2);
    let ledger = load.join().unwrap();
    // A change answered outcome-unknown gets its audit line once its
    // server finds out (it asks every second).
    std::thread::sleep(Duration::from_secs(4));

    let summary = format!("{cut} sessions cut in their COMMIT; answers: {:?}", ledger.answers);
    eprintln!("{summary}");
    assert!(cut > 0, "no COMMIT was cut: {summary}");
    let unavailable: usize =
        ledger.answers.iter().filter(|(k, _)| k.contains(" 503 ") || k.ends_with("retried-503")).map(|(_, n)| n).sum();
    assert!(unavailable > 0, "the kills were noticed: {summary}");
    let store = numaplace_store::open(&db).unwrap();
    // No CPU claimed twice.
    let stored = audit(store.as_ref());
    // Every answer matches what is stored: a 201 or 200 where it said, a
    // 204 gone, and every 503 but outcome-unknown changed nothing.
    for (vm, known) in &ledger.vms {
        match known {
            Known::At(host) => assert_eq!(stored.get(vm), Some(host), "{vm} was answered on {host}; {summary}"),
            Known::Gone => assert_eq!(stored.get(vm), None, "{vm} was answered not placed; {summary}"),
            Known::Unknown => assert!(!keyed, "a keyed retry always gets an answer"),
        }
    }
    // Every stored change has its audit line: the lines of both servers,
    // in host-generation order, rebuild the database's placements.
    let lines: Vec<Value> = servers.iter().flat_map(Server::audit_lines).collect();
    assert_eq!(replay(&lines), stored, "the audit lines replay to the database; {summary}");
    if keyed {
        // Exactly once: one placed line per VM stored or answered, one
        // moved line per move answered 200, one deleted per 204.
        let count = |action: &str, vm: &str| lines.iter().filter(|l| l["action"] == action && l["vm"] == vm).count();
        for (vm, known) in &ledger.vms {
            let placed = usize::from(*known != Known::Gone || ledger.deletes.contains_key(vm));
            assert_eq!(count("placed", vm), placed, "{vm} placed once; {summary}");
            assert_eq!(count("moved", vm), ledger.moves.get(vm).copied().unwrap_or(0), "{vm}: {summary}");
            assert_eq!(count("deleted", vm), ledger.deletes.get(vm).copied().unwrap_or(0), "{vm}: {summary}");
        }
        assert!(ledger.answers.keys().any(|k| k.ends_with("retried-503")), "some 503 was retried: {summary}");
    }
}

#[test]
fn killed_sessions_leave_every_answer_true_and_every_change_audited() {
    sessions_killed_mid_burst(false);
}

#[test]
fn idempotency_key_retries_of_every_503_make_each_change_once() {
    sessions_killed_mid_burst(true);
}

/// Three servers race on two hosts, placing, moving and deleting: their
/// audit lines, gathered and ordered by host generation (not by time),
/// replay to the database's final placements.
#[test]
fn a_three_replica_race_replays_by_host_generation() {
    let Some(pg) = Postgres::shared() else { return };
    let db = pg.fresh_database();
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&db, 3)).collect();
    register(&servers[0].url, 2);
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let ledger = burst(&urls, 12, Duration::from_secs(8), false);
    std::thread::sleep(Duration::from_millis(500));
    let stored = audit(numaplace_store::open(&db).unwrap().as_ref());
    let moves: usize = ledger.moves.values().sum();
    assert!(moves > 10 && ledger.deletes.len() > 10, "{:?}", ledger.answers);
    let lines: Vec<Value> = servers.iter().flat_map(Server::audit_lines).collect();
    assert_eq!(replay(&lines), stored, "answers: {:?}", ledger.answers);
    for (vm, known) in &ledger.vms {
        if let Known::At(host) = known {
            assert_eq!(stored.get(vm), Some(host), "{vm}");
        }
    }
}

/// The `Idempotency-Key` contract on SQLite, as on PostgreSQL: a retry is
/// answered the first answer (marked replayed) and changes nothing; the
/// key with another request is refused; a dry run keeps nothing; a bad key
/// is a 400 naming the header.
#[test]
fn an_idempotency_key_is_answered_its_first_answer_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("numaplace-serve-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = format!("sqlite:{}", dir.join("fleet.db").display());
    let server = Server::start(&db, 1);
    let url = server.url.as_str();
    register(url, 2);
    let place = |name: &str| json!({"name": name, "vcpus": 4, "memory": "4GiB"}).to_string();
    let key = |k: &'static str| [("Idempotency-Key", k)];

    // A dry run under a key keeps nothing.
    let (s, _) = http(url, "POST", "/v1/placements?dry_run=true", &key("p1"), place("a").as_bytes());
    assert_eq!(s, 200);
    let (s, h, first) = exchange(url, "POST", "/v1/placements", &key("p1"), place("a").as_bytes());
    assert_eq!(s, 201, "{first}");
    assert_eq!(h.get("idempotent-replayed"), None);
    let (s, h, again) = exchange(url, "POST", "/v1/placements", &key("p1"), place("a").as_bytes());
    assert_eq!((s, h.get("idempotent-replayed").map(String::as_str)), (201, Some("true")), "{again}");
    assert_eq!(again, first, "the first answer, not 409 already-placed");
    // The key with another request: refused, and b is not placed.
    let (s, v) = http(url, "POST", "/v1/placements", &key("p1"), place("b").as_bytes());
    assert_eq!((s, v["error"]["code"].as_str()), (422, Some("idempotency-key-reused")), "{v}");
    assert_eq!(http(url, "GET", "/v1/placements/b", &[], b"").0, 404);

    // A move retried: the same destination, moved once.
    let (s, moved) = http(url, "POST", "/v1/placements/a/move", &key("m1"), b"");
    assert_eq!(s, 200, "{moved}");
    assert_ne!(moved["host"], first["host"]);
    let (s, h, again) = exchange(url, "POST", "/v1/placements/a/move", &key("m1"), b"");
    assert_eq!((s, h.get("idempotent-replayed").map(String::as_str)), (200, Some("true")));
    assert_eq!(again, moved);
    assert_eq!(http(url, "GET", "/v1/placements/a", &[], b"").1["host"], moved["host"], "not moved back");

    // A delete retried: 204, and a VM placed under the name since stays.
    assert_eq!(http(url, "DELETE", "/v1/placements/a", &key("d1"), b"").0, 204);
    assert_eq!(http(url, "POST", "/v1/placements", &[], place("a").as_bytes()).0, 201);
    let (s, h, _) = exchange(url, "DELETE", "/v1/placements/a", &key("d1"), b"");
    assert_eq!((s, h.get("idempotent-replayed").map(String::as_str)), (204, Some("true")));
    assert_eq!(http(url, "GET", "/v1/placements/a", &[], b"").0, 200, "the new a was not deleted");

    // A bad key names the header.
    let (s, v) = http(url, "POST", "/v1/placements", &[("Idempotency-Key", "")], place("c").as_bytes());
    assert_eq!(s, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("Idempotency-Key"), "{v}");
    let long = "k".repeat(256);
    let (s, _) = http(url, "POST", "/v1/placements", &[("Idempotency-Key", long.as_str())], place("c").as_bytes());
    assert_eq!(s, 400);

    // One audit line per change made: placed twice (a, then a again),
    // moved once, deleted once.
    std::thread::sleep(Duration::from_millis(200));
    let lines = server.audit_lines();
    let count = |action: &str| lines.iter().filter(|l| l["action"] == action).count();
    assert_eq!((count("placed"), count("moved"), count("deleted")), (2, 1, 1));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A placement whose COMMIT is made while PostgreSQL stops, and which stays
/// down past the request's deadline: the answer is 503 outcome-unknown
/// (never "unavailable, nothing changed"); once PostgreSQL is back, the
/// server writes the placement's audit line by itself, and a retry with
/// the key is answered the 201 the placement had.
#[test]
fn an_outcome_unknown_is_audited_once_known_and_its_key_answers_the_first_answer() {
    let Some(pg) = Postgres::start() else { return };
    let db = pg.fresh_database();
    let server = Server::start_with(&db, 1, &["--request-timeout", "1s"]);
    register(&server.url, 1);
    let mut admin = Session::connect(&pg.url());
    hold_commits(&mut admin, true);
    let url = server.url.clone();
    let body = json!({"name": "late", "vcpus": 2, "memory": "2GiB"}).to_string();
    let first = {
        let body = body.clone();
        std::thread::spawn(move || {
            http(&url, "POST", "/v1/placements", &[("Idempotency-Key", "late-1")], body.as_bytes())
        })
    };
    let start = Instant::now();
    while admin.int("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "the COMMIT was never held");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(admin);
    pg.stop();
    let (s, v) = first.join().unwrap();
    assert_eq!((s, v["error"]["code"].as_str()), (503, Some("outcome-unknown")), "{v}");
    assert!(server.audit_lines().iter().all(|l| l["vm"] != "late"), "no line while unknown");
    pg.start_again();
    let mut admin = Session::connect(&pg.url());
    hold_commits(&mut admin, false);
    // The server asks every second.
    let start = Instant::now();
    while !server.audit_lines().iter().any(|l| l["action"] == "placed" && l["vm"] == "late") {
        assert!(start.elapsed() < Duration::from_secs(20), "no audit line for the placement once it was known");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, h, again) =
        exchange(&server.url, "POST", "/v1/placements", &[("Idempotency-Key", "late-1")], body.as_bytes());
    assert_eq!((s, h.get("idempotent-replayed").map(String::as_str)), (201, Some("true")), "{again}");
    let stored = audit(numaplace_store::open(&db).unwrap().as_ref());
    assert_eq!(stored.get("late"), again["host"].as_str().map(str::to_owned).as_ref());
    assert_eq!(replay(&server.audit_lines()), stored);
}
