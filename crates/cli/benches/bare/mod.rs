//! The bare stack the fleet service stands on, as a server of its own for
//! the serve bench to load beside the service (issue 50): axum on tokio's
//! multi-threaded runtime, the same serde_json, and the same database with
//! the same durability settings (SQLite in WAL mode with
//! `synchronous=NORMAL`; PostgreSQL with `fsync` and `synchronous_commit`
//! on, which are the server's settings, started by the bench as for the
//! service). Each placement request is parsed into a typed body, answered
//! with a placement-sized JSON document, and costs one transaction: one
//! row inserted (the document as text, as the service stores it) and one
//! host's generation bumped; each delete, one row deleted and one
//! generation bumped. No decision, no cache, no claims, no log lines:
//! what is left is the floor a service on this stack cannot go under.
//!
//! The serve bench runs it as a child process of its own binary
//! (`--bare-serve DB HOSTS`), so its CPU time is read from its own
//! `/proc/PID/stat`, like the service's.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// A placement request as the bench's clients send it.
#[derive(Deserialize)]
struct Request {
    name: String,
    vcpus: u32,
    memory: String,
}

/// An answer about the size of the service's placement document: the
/// host, its node, the CPUs and the guest's shape.
#[derive(Serialize)]
struct Placement<'a> {
    vm: &'a str,
    host: String,
    nodes: [u32; 1],
    cpus: Vec<u32>,
    memory: &'a str,
    memory_per_node: [&'a str; 1],
    guest: Guest,
    policy: &'static str,
}

#[derive(Serialize)]
struct Guest {
    sockets: u32,
    cores: u32,
    threads: u32,
}

enum Db {
    Sqlite(Mutex<rusqlite::Connection>),
    /// A pool of connections, each with its statements prepared once, as
    /// the service's store keeps them.
    Postgres(Mutex<Vec<PgConn>>, std::sync::Condvar),
}

struct PgConn {
    client: postgres::Client,
    insert: postgres::Statement,
    bump: postgres::Statement,
    delete: postgres::Statement,
}

struct Bare {
    db: Db,
    hosts: usize,
}

const SQLITE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS hosts (name TEXT PRIMARY KEY, generation INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS placements (vm TEXT PRIMARY KEY, host TEXT NOT NULL, doc TEXT NOT NULL);";
const PG_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS hosts (name TEXT PRIMARY KEY, generation BIGINT NOT NULL);
    CREATE TABLE IF NOT EXISTS placements (vm TEXT PRIMARY KEY, host TEXT NOT NULL, doc TEXT NOT NULL);";
const INSERT: &str = "INSERT INTO placements (vm, host, doc) VALUES ($1, $2, $3)";
const BUMP: &str = "UPDATE hosts SET generation = generation + 1 WHERE name = $1";
const DELETE: &str = "DELETE FROM placements WHERE vm = $1 RETURNING host";

fn host_name(h: usize) -> String {
    format!("host{h:05}")
}

/// A host for a VM: spread by its name, as a decision would spread them.
fn host_for(name: &str, hosts: usize) -> String {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    host_name((h % hosts as u64) as usize)
}

impl Bare {
    fn open(db: &str, hosts: usize, first: bool) -> Bare {
        let db = if let Some(path) = db.strip_prefix("sqlite:") {
            let conn = rusqlite::Connection::open(path).expect("open SQLite");
            let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).expect("WAL");
            assert_eq!(mode, "wal");
            conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;").expect("pragmas");
            conn.execute_batch(SQLITE_SCHEMA).expect("schema");
            let tx = conn.unchecked_transaction().expect("begin");
            for h in 0..hosts {
                tx.execute("INSERT OR IGNORE INTO hosts (name, generation) VALUES (?1, 0)", [host_name(h)])
                    .expect("host");
            }
            tx.commit().expect("commit");
            Db::Sqlite(Mutex::new(conn))
        } else {
            let connect = || {
                let mut client = postgres::Client::connect(db, postgres::NoTls).expect("connect to PostgreSQL");
                if first {
                    client.batch_execute(PG_SCHEMA).expect("schema");
                }
                let insert = client.prepare(INSERT).expect("prepare");
                let bump = client.prepare(BUMP).expect("prepare");
                let delete = client.prepare(DELETE).expect("prepare");
                PgConn { client, insert, bump, delete }
            };
            let mut pool: Vec<PgConn> = Vec::new();
            let mut one = connect();
            if first {
                let mut tx = one.client.transaction().expect("begin");
                for h in 0..hosts {
                    tx.execute(
                        "INSERT INTO hosts (name, generation) VALUES ($1, 0) ON CONFLICT DO NOTHING",
                        &[&host_name(h)],
                    )
                    .expect("host");
                }
                tx.commit().expect("commit");
            }
            pool.push(one);
            // As many connections as the service's store opens at most.
            pool.extend((1..8).map(|_| connect()));
            Db::Postgres(Mutex::new(pool), std::sync::Condvar::new())
        };
        Bare { db, hosts }
    }

    /// One placement: its row and its host's generation, in one transaction.
    fn place(&self, vm: &str, host: &str, doc: &str) -> Result<(), String> {
        match &self.db {
            Db::Sqlite(conn) => {
                let conn = conn.lock().map_err(|e| e.to_string())?;
                let tx = conn.unchecked_transaction().map_err(|e| e.to_string())?;
                tx.prepare_cached(INSERT).and_then(|mut s| s.execute((vm, host, doc))).map_err(|e| e.to_string())?;
                tx.prepare_cached(BUMP).and_then(|mut s| s.execute([host])).map_err(|e| e.to_string())?;
                tx.commit().map_err(|e| e.to_string())
            }
            Db::Postgres(pool, freed) => self.pg(pool, freed, |c| {
                c.client.batch_execute("BEGIN")?;
                c.client.execute(&c.insert, &[&vm, &host, &doc])?;
                c.client.execute(&c.bump, &[&host])?;
                c.client.batch_execute("COMMIT")
            }),
        }
    }

    /// One delete: the row and its host's generation, in one transaction.
    /// False when there was no such VM.
    fn remove(&self, vm: &str) -> Result<bool, String> {
        match &self.db {
            Db::Sqlite(conn) => {
                let conn = conn.lock().map_err(|e| e.to_string())?;
                let tx = conn.unchecked_transaction().map_err(|e| e.to_string())?;
                let host: Option<String> = tx
                    .prepare_cached(DELETE)
                    .and_then(|mut s| s.query_row([vm], |r| r.get(0)))
                    .map(Some)
                    .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })
                    .map_err(|e| e.to_string())?;
                let Some(host) = host else { return Ok(false) };
                tx.prepare_cached(BUMP).and_then(|mut s| s.execute([host])).map_err(|e| e.to_string())?;
                tx.commit().map_err(|e| e.to_string())?;
                Ok(true)
            }
            Db::Postgres(pool, freed) => {
                let mut found = false;
                self.pg(pool, freed, |c| {
                    c.client.batch_execute("BEGIN")?;
                    if let Some(row) = c.client.query_opt(&c.delete, &[&vm])? {
                        let host: String = row.get(0);
                        c.client.execute(&c.bump, &[&host])?;
                        found = true;
                    }
                    c.client.batch_execute("COMMIT")
                })?;
                Ok(found)
            }
        }
    }

    /// Runs `f` on a pooled connection, waiting for one to be free (the
    /// service's store waits on a condition variable too).
    fn pg(
        &self,
        pool: &Mutex<Vec<PgConn>>,
        freed: &std::sync::Condvar,
        f: impl FnOnce(&mut PgConn) -> Result<(), postgres::Error>,
    ) -> Result<(), String> {
        let mut conn = {
            let mut idle = pool.lock().map_err(|e| e.to_string())?;
            loop {
                if let Some(c) = idle.pop() {
                    break c;
                }
                idle = freed.wait(idle).map_err(|e| e.to_string())?;
            }
        };
        let result = f(&mut conn).map_err(|e| e.to_string());
        if result.is_err() {
            let _ = conn.client.batch_execute("ROLLBACK");
        }
        pool.lock().map_err(|e| e.to_string())?.push(conn);
        freed.notify_one();
        result
    }
}

async fn place(State(bare): State<Arc<Bare>>, body: axum::body::Bytes) -> (StatusCode, Vec<u8>) {
    let Ok(req) = serde_json::from_slice::<Request>(&body) else {
        return (StatusCode::BAD_REQUEST, b"{\"error\":\"bad body\"}".to_vec());
    };
    let host = host_for(&req.name, bare.hosts);
    let answer = tokio::task::spawn_blocking(move || {
        let doc = Placement {
            vm: &req.name,
            host: host.clone(),
            nodes: [0],
            cpus: (0..req.vcpus).collect(),
            memory: &req.memory,
            memory_per_node: [&req.memory],
            guest: Guest { sockets: 1, cores: req.vcpus, threads: 1 },
            policy: "dedicated",
        };
        let text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
        bare.place(&req.name, &host, &text)?;
        Ok::<_, String>(text.into_bytes())
    })
    .await;
    match answer {
        Ok(Ok(body)) => (StatusCode::CREATED, body),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, e.into_bytes()),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string().into_bytes()),
    }
}

async fn remove(State(bare): State<Arc<Bare>>, Path(vm): Path<String>) -> StatusCode {
    match tokio::task::spawn_blocking(move || bare.remove(&vm)).await {
        Ok(Ok(true)) => StatusCode::NO_CONTENT,
        Ok(Ok(false)) => StatusCode::NOT_FOUND,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Runs the bare server on `db` (`sqlite:PATH` or a PostgreSQL URL) with
/// `hosts` host rows (made by the `first` of several servers sharing a
/// database); prints `listening on URL` to standard error as `numaplace
/// serve` does, then serves until killed.
pub fn serve(db: &str, hosts: usize, first: bool) {
    let bare = Arc::new(Bare::open(db, hosts, first));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async move {
        let app = Router::new()
            .route("/v1/placements", post(place))
            .route("/v1/placements/{vm}", delete(remove))
            .with_state(bare);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        eprintln!("listening on http://{}", listener.local_addr().expect("address"));
        axum::serve(listener, app).await.expect("serve");
    });
}
