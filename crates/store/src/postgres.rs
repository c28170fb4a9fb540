//! The PostgreSQL backend, for several `serve` replicas sharing a fleet.
//!
//! Transactions run at READ COMMITTED, PostgreSQL's default, and that is
//! enough: writers serialise per host only. `UPDATE hosts ... WHERE
//! generation = $3` waits for a concurrent update of the row and re-checks
//! the condition against the committed row, matching nothing when the
//! generation moved; writes that read a host before writing it (a guarded
//! put, a removal) lock its row first (`FOR UPDATE`). A commit takes its
//! hosts' rows in name order, so two writers cannot deadlock over hosts.
//! Writes to different hosts never wait for each other: there is no row
//! every writer takes (the change counter SQLite bumps is not used here).
//!
//! The change feed: each write stamps the rows of the hosts it changes
//! (`hosts.changed`) with its own transaction id, and a reader takes as
//! its watermark the oldest transaction id still running when it looked
//! (the snapshot's `xmin`): every transaction below it has ended, so a
//! cache that next asks for the hosts stamped at or above it misses no
//! commit, even one that took its id before a commit it already saw.
//! Hosts stamped by transactions still running may be reported twice;
//! caches skip a host already held at its generation.
//!
//! Over 800 lines on purpose: the pool, the transaction wrapper that finds
//! out what became of an unanswered COMMIT, and every statement of the
//! `Store` they serve are read together when a write's guarantees are
//! checked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ::postgres::error::SqlState;
use ::postgres::types::ToSql;
use ::postgres::{Client, Config, NoTls, Row, SimpleQueryMessage, Statement};

use crate::schema::{self, pus_from_text, pus_to_text};
use crate::{Answer, Changes, Expect, HostChange, HostRow, PlacementRow, Removed, Store, StoreError};

/// Connections open at once, busy and idle, per store.
const MAX_CONNECTIONS: usize = 8;
/// How long a call waits for a connection when all are busy (less when
/// its request's deadline is nearer): longer means requests pile up behind
/// a stalled database instead of answering 503.
const POOL_WAIT: Duration = Duration::from_secs(5);
/// The server cancels a statement that runs longer (a transaction's
/// statements get the request's remaining deadline instead, when it is
/// shorter): the backstop for calls made without a deadline.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a statement waits for a row lock (another replica's
/// transaction on the same host, say) before it fails.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a claim waits for a host row another transaction holds
/// before it gives the host up as a conflict (and the service remakes the
/// decision elsewhere). A claim holds its rows for a millisecond or two;
/// a transaction holding popular rows for seconds (an operator's, or a
/// stalled client's) made every claim choosing them wait its whole
/// deadline: 28 placements/s instead of about 1,000 (issue 46).
const CLAIM_LOCK_WAIT: Duration = Duration::from_millis(200);
/// TCP keepalives: a connection whose peer vanished (host down, network
/// cut) is noticed after about idle + interval x retries, instead of the
/// kernel's two hours, and fails as unavailable.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;
/// Unless the URL says otherwise: how long connecting may take before the
/// database counts as unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Serialises migrations between replicas starting together (any constant
/// other applications on the database are unlikely to pick).
const MIGRATION_LOCK: i64 = 0x6e75_6d61_706c_6163; // "numaplac"

/// The write's stamp: its 64-bit transaction id (which never wraps), taken
/// at BEGIN. Taking it assigns the id at once, so it is below the
/// watermark of any reader that looks after this transaction ends.
const TRANSACTION_ID: &str = "SELECT pg_current_xact_id()::text::bigint";
/// The change feed in one round trip: the reader's watermark (one less
/// than the oldest transaction id still running, so `changed > watermark`
/// next time reads every host stamped by a transaction that may commit
/// later), and the hosts stamped after `$1`, both from the statement's one
/// snapshot: a transaction below its `xmin` has ended and its rows are in
/// it; one at or above it that is still running is read next time. One
/// row with NULL host columns when no host changed.
const CHANGED_HOSTS_AND_WATERMARK: &str = "SELECT w.mark, h.name, h.removed, h.generation
    FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1 AS mark) w
    LEFT JOIN hosts h ON h.changed > $1";
/// How long a write whose COMMIT got no answer keeps asking what became
/// of it, at least, when its request's deadline is nearer: a session
/// terminated or a server restarted fast answers within it.
const RESOLVE_AT_LEAST: Duration = Duration::from_secs(1);
/// The same for a call made without a request deadline.
const RESOLVE_WITHOUT_DEADLINE: Duration = Duration::from_secs(5);
/// Between two questions about such a transaction.
const RESOLVE_PAUSE: Duration = Duration::from_millis(100);
/// Serialises the pruning of idempotency keys between replicas (a
/// replica that finds it taken leaves the pruning to the other).
const PRUNE_LOCK: i64 = 0x6e75_6d61_6b65_7973; // "numakeys"
const PRUNE_TRY_LOCK: &str = "SELECT 1 WHERE pg_try_advisory_xact_lock($1)";

/// As [`schema::HOST_REMOVED_GENERATION`], holding the host's row until the
/// transaction ends, so what was checked is what is written over.
const HOST_REMOVED_GENERATION_LOCKED: &str = "SELECT removed, generation FROM hosts WHERE name = $1 FOR UPDATE";
/// As [`schema::HOST_REMOVED`], holding the host's row.
const HOST_REMOVED_LOCKED: &str = "SELECT removed FROM hosts WHERE name = $1 FOR UPDATE";

/// A store in a PostgreSQL database, with a small pool of connections
/// shared by the threads that use it. A connection lost (PostgreSQL
/// restarted, say) is dropped and replaced on a later call.
pub struct PgStore {
    config: Config,
    pool: Mutex<Pool>,
    freed: Condvar,
    // When this store last pruned the idempotency keys (ms since the epoch).
    pruned: AtomicI64,
}

struct Pool {
    idle: Vec<Conn>,
    /// Idle and leased connections.
    open: usize,
}

/// A connection and the statements prepared on it.
struct Conn {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    /// The statement for `sql`, prepared once per connection: each call
    /// then costs one round trip instead of two.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(sql).map_err(err)?;
        self.statements.insert(sql, st.clone());
        Ok(st)
    }

    fn query(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        let st = self.statement(sql)?;
        self.client.query(&st, params).map_err(err)
    }

    fn query_opt(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>, StoreError> {
        let st = self.statement(sql)?;
        self.client.query_opt(&st, params).map_err(err)
    }

    fn query_one(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, StoreError> {
        let st = self.statement(sql)?;
        self.client.query_one(&st, params).map_err(err)
    }

    fn execute(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        let st = self.statement(sql)?;
        self.client.execute(&st, params).map_err(err)
    }
}

/// A connection taken from the pool; goes back on drop unless it failed.
struct Lease<'a> {
    store: &'a PgStore,
    conn: Option<Conn>,
    /// Taken idle from the pool rather than opened for this call: it may
    /// have died while it sat there.
    reused: bool,
    /// Set when the connection failed: it must not be handed out again.
    broken: bool,
}

impl Lease<'_> {
    fn conn(&mut self) -> Result<&mut Conn, StoreError> {
        self.conn.as_mut().ok_or_else(|| StoreError::Database("connection already returned".to_owned()))
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut pool = self.store.lock();
        match self.conn.take() {
            Some(conn) if !self.broken && !conn.client.is_closed() => pool.idle.push(conn),
            _ => {
                pool.open = pool.open.saturating_sub(1);
                if self.broken {
                    // The server probably went away: the idle connections
                    // are as dead as this one, and would each fail a call.
                    let dropped = pool.idle.len();
                    pool.idle.clear();
                    pool.open = pool.open.saturating_sub(dropped);
                }
            }
        }
        drop(pool);
        self.store.freed.notify_all();
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // The synchronous client runs its own small tokio runtime, and
        // dropping one inside another runtime's context (a server's
        // `block_on`) panics ("Cannot start a runtime from within a
        // runtime"): close the idle connections on a thread of their own,
        // which is outside every runtime wherever the store is dropped.
        let idle = std::mem::take(&mut self.lock().idle);
        if idle.is_empty() {
            return;
        }
        let closing = std::thread::Builder::new().name("pg-close".into()).spawn(move || {
            for conn in idle {
                let _ = conn.client.close();
            }
        });
        if let Ok(thread) = closing {
            let _ = thread.join();
        }
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`,
    /// or any form the `postgres` crate reads) and brings its schema up to
    /// date. An unreachable server is [`StoreError::Unavailable`].
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let mut config: Config = url.parse().map_err(|e| StoreError::Database(format!("bad PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("numaplace");
        }
        config
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE)
            .keepalives_interval(KEEPALIVE_INTERVAL)
            .keepalives_retries(KEEPALIVE_RETRIES);
        // Session defaults, set at connection: options the URL gives come
        // after ours, so an operator's own `statement_timeout` wins.
        let ours = format!(
            "-c statement_timeout={} -c lock_timeout={}",
            STATEMENT_TIMEOUT.as_millis(),
            LOCK_TIMEOUT.as_millis()
        );
        let options = match config.get_options() {
            Some(theirs) => format!("{ours} {theirs}"),
            None => ours,
        };
        config.options(&options);
        let store = PgStore {
            config,
            pool: Mutex::new(Pool { idle: Vec::new(), open: 0 }),
            freed: Condvar::new(),
            pruned: AtomicI64::new(0),
        };
        let mut lease = store.lease()?;
        let result = migrate(&mut lease.conn()?.client);
        lease.broken = matches!(result, Err(StoreError::Unavailable(_)));
        drop(lease);
        result.map(|()| store)
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        // The pool's state is two plain fields, consistent between
        // statements: a panic elsewhere cannot have left it half-changed.
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lease(&self) -> Result<Lease<'_>, StoreError> {
        crate::deadline::check()?;
        let wait = crate::deadline::bounded(POOL_WAIT);
        let mut pool = self.lock();
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(Lease { store: self, conn: Some(conn), reused: true, broken: false });
            }
            if pool.open < MAX_CONNECTIONS {
                pool.open += 1;
                drop(pool);
                return match self.config.connect(NoTls) {
                    Ok(client) => Ok(Lease {
                        store: self,
                        conn: Some(Conn { client, statements: HashMap::new() }),
                        reused: false,
                        broken: false,
                    }),
                    Err(e) => {
                        let mut pool = self.lock();
                        pool.open = pool.open.saturating_sub(1);
                        drop(pool);
                        self.freed.notify_all();
                        Err(connect_err(e))
                    }
                };
            }
            let (guard, timeout) = self.freed.wait_timeout(pool, wait).unwrap_or_else(PoisonError::into_inner);
            pool = guard;
            if timeout.timed_out() && pool.idle.is_empty() && pool.open >= MAX_CONNECTIONS {
                crate::deadline::check()?;
                return Err(StoreError::Unavailable(format!(
                    "all {MAX_CONNECTIONS} connections stayed busy for {} ms",
                    wait.as_millis()
                )));
            }
        }
    }

    /// Runs `f` on a connection outside a transaction (it must be one
    /// statement, or tolerate seeing commits between its statements). Once
    /// retried on a new connection when a pooled one turns out dead: reads
    /// can be repeated.
    fn read<T>(&self, f: impl Fn(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut lease = self.lease()?;
        match f(lease.conn()?) {
            Err(StoreError::Unavailable(_)) if lease.reused => {
                lease.broken = true;
                drop(lease);
                let mut lease = self.lease()?;
                let result = f(lease.conn()?);
                lease.broken = matches!(result, Err(StoreError::Unavailable(_)));
                result
            }
            result => {
                lease.broken = matches!(result, Err(StoreError::Unavailable(_)));
                result
            }
        }
    }

    /// Runs `f` in a transaction, with its transaction id (the stamp of
    /// the hosts it changes, see the module's documentation);
    /// commits if it returns Ok and rolls back otherwise. Retried on a new
    /// connection only when a pooled one fails at BEGIN: nothing can have
    /// been written then.
    ///
    /// A COMMIT sent without an answer coming back (the connection lost,
    /// the session terminated, the server stopping) may have committed or
    /// not: the transaction's status is asked on a fresh connection (see
    /// [`PgStore::resolve`]) and the call answers what happened; only when
    /// that cannot be found out in time is it
    /// [`StoreError::OutcomeUnknown`]. (Before issue 46 such a call failed
    /// as unavailable, "nothing written", and had often committed.)
    fn write<T>(&self, f: impl FnOnce(&mut Conn, i64) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.write_waiting(LOCK_TIMEOUT, f)
    }

    /// As [`PgStore::write`], with the transaction's statements waiting at
    /// most `lock` for a row lock (set at BEGIN, in the same round trip).
    fn write_waiting<T>(
        &self,
        lock: Duration,
        f: impl FnOnce(&mut Conn, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut lease = self.lease()?;
        let mut changed = begin(lease.conn()?, lock);
        if matches!(changed, Err(StoreError::Unavailable(_))) && lease.reused {
            lease.broken = true;
            drop(lease);
            lease = self.lease()?;
            changed = begin(lease.conn()?, lock);
        }
        let transaction = changed.as_ref().ok().copied();
        let conn = lease.conn()?;
        let mut result = changed.and_then(|changed| f(conn, changed));
        // The last moment to give up: once COMMIT is sent its outcome is
        // the answer, however late (see `deadline`).
        if result.is_ok() && !crate::deadline::may_commit() {
            result = Err(StoreError::DeadlineExceeded);
        }
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        match conn.client.batch_execute(end) {
            Ok(()) => {
                lease.broken = matches!(result, Err(StoreError::Unavailable(_)));
                result
            }
            Err(e) => {
                let e = err(e);
                // A connection that cannot even roll back is of no more use,
                // whatever the error was.
                lease.broken = true;
                drop(lease);
                match (result, transaction) {
                    (Ok(value), Some(transaction)) => match self.resolve(transaction) {
                        Some(true) => Ok(value),
                        Some(false) => Err(StoreError::Unavailable(format!(
                            "{e}; transaction {transaction} was rolled back: nothing was written"
                        ))),
                        None => Err(StoreError::OutcomeUnknown { transaction }),
                    },
                    (Ok(_), None) => Err(e),
                    (Err(first), _) => Err(first),
                }
            }
        }
    }

    /// Whether `transaction`, whose COMMIT got no answer, committed: asked
    /// on fresh connections (the pool's are likely as dead as the one that
    /// failed) until the database says, or until the request's deadline
    /// (at least [`RESOLVE_AT_LEAST`] from now; [`RESOLVE_WITHOUT_DEADLINE`]
    /// for a call without one). `None`: not found out.
    fn resolve(&self, transaction: i64) -> Option<bool> {
        let now = Instant::now();
        let until = match crate::deadline::current() {
            Some(d) => d.at().max(now + RESOLVE_AT_LEAST),
            None => now + RESOLVE_WITHOUT_DEADLINE,
        };
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut config = self.config.clone();
            config.connect_timeout(left.min(CONNECT_TIMEOUT).max(Duration::from_millis(10)));
            if let Ok(mut client) = config.connect(NoTls) {
                if let Ok(Some(committed)) = transaction_status(&mut client, transaction) {
                    return Some(committed);
                }
            }
            std::thread::sleep(left.min(RESOLVE_PAUSE));
        }
    }
}

/// BEGIN, the transaction's timeouts, then [`TRANSACTION_ID`]: the
/// statements may take what is left of the request's deadline and no
/// more, so the server itself stops working for a request already
/// answered.
fn begin_sql(statement: Duration, lock: Duration) -> String {
    format!(
        "BEGIN; SET LOCAL statement_timeout = {}; SET LOCAL lock_timeout = {}; {}",
        statement.as_millis().max(1),
        lock.min(statement).as_millis().max(1),
        TRANSACTION_ID
    )
}

/// Opens a transaction whose statements wait at most `lock` for a row
/// lock, and takes its transaction id, in one round trip (the
/// simple-query protocol takes several statements at once); returns the
/// id. On error the caller still rolls back: the BEGIN may have run.
fn begin(conn: &mut Conn, lock: Duration) -> Result<i64, StoreError> {
    let statement = crate::deadline::bounded(STATEMENT_TIMEOUT);
    let sql = begin_sql(statement, lock);
    for message in conn.client.simple_query(&sql).map_err(err)? {
        if let SimpleQueryMessage::Row(row) = message {
            return row
                .get(0)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| StoreError::Corrupt(format!("the transaction id reads {:?}", row.get(0))));
        }
    }
    Err(StoreError::Corrupt("no transaction id came back".to_owned()))
}

/// What PostgreSQL says of a transaction that has ended or is ending:
/// `Some(true)` committed, `Some(false)` rolled back (or never written: a
/// transaction id beyond the server's after a crash), `None` while it is
/// still in progress (a terminated session's backend finishing) or too
/// old to say.
fn transaction_status(client: &mut Client, transaction: i64) -> Result<Option<bool>, StoreError> {
    let sql = format!("SELECT pg_xact_status('{transaction}'::xid8)");
    let messages = match client.simple_query(&sql) {
        Ok(m) => m,
        // "transaction ID ... is in the future": the server came back from
        // a crash without the transaction in its log, so without its commit.
        Err(e) if e.code() == Some(&SqlState::INVALID_PARAMETER_VALUE) => return Ok(Some(false)),
        Err(e) => return Err(err(e)),
    };
    for message in messages {
        if let SimpleQueryMessage::Row(row) = message {
            return Ok(match row.get(0) {
                Some("committed") => Some(true),
                Some("aborted") => Some(false),
                _ => None,
            });
        }
    }
    Ok(None)
}

fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction().map_err(err)?;
    // Held until the transaction ends: replicas starting together migrate
    // one after the other, and the later ones find nothing left to do
    // (CREATE TABLE IF NOT EXISTS alone can still fail when two sessions
    // create the same table at once).
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(err)?;
    tx.batch_execute(schema::SCHEMA_VERSION_TABLE).map_err(err)?;
    let version: i64 = match tx.query_opt(schema::SCHEMA_VERSION_GET, &[]).map_err(err)? {
        Some(row) => row.try_get(0).map_err(err)?,
        None => {
            tx.batch_execute(schema::SCHEMA_VERSION_INSERT).map_err(err)?;
            0
        }
    };
    let pending = schema::pending_migrations(version)?;
    for migration in pending {
        tx.batch_execute(migration).map_err(err)?;
    }
    if !pending.is_empty() {
        tx.execute(schema::SCHEMA_VERSION_SET, &[&(schema::MIGRATIONS.len() as i64)]).map_err(err)?;
    }
    tx.commit().map_err(err)
}

/// Whether `e` says the server is out of reach rather than that it refused
/// what was asked.
fn unavailable(e: &::postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        // Class 08: connection exceptions. 57P01-57P03: the server is
        // shutting down, crashed, or not yet accepting connections. 53300:
        // every connection slot is taken, which passes too.
        return code.code().starts_with("08")
            || *code == SqlState::TOO_MANY_CONNECTIONS
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW;
    }
    // No SQLSTATE: the socket failed (refused, reset, timed out).
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

fn message(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        // The client's own errors say "error connecting to server" and
        // keep the why (connection refused, timed out) in their source.
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

fn err(e: ::postgres::Error) -> StoreError {
    // Our own statement or lock timeout: the database is slow or stalled,
    // the connection itself is fine.
    if e.code().is_some_and(|c| *c == SqlState::QUERY_CANCELED || *c == SqlState::LOCK_NOT_AVAILABLE) {
        return StoreError::TimedOut(message(&e));
    }
    if unavailable(&e) {
        StoreError::Unavailable(message(&e))
    } else {
        StoreError::Database(message(&e))
    }
}

/// As [`err`], but a connection attempt that fails without a SQLSTATE
/// (timed out, say, which the client reports as its own error) also means
/// the server is out of reach. One refused with a SQLSTATE (bad password,
/// no such database) is a configuration error.
fn connect_err(e: ::postgres::Error) -> StoreError {
    match e.code() {
        Some(_) => err(e),
        None => StoreError::Unavailable(message(&e)),
    }
}

/// Adds a placement and its claims in one round trip, where SQLite takes
/// one statement per PU. A PU already claimed (or listed twice) is not
/// inserted, nor is it an error that would hide which PU it was: the
/// caller compares the PUs returned with those asked for. A unique
/// violation can then only be the placement's.
const ADD_PLACEMENT: &str = "WITH p AS (
        INSERT INTO placements (vm, host, doc, request, grp, origin, pus, owner)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $9)
        RETURNING vm, host
    )
    INSERT INTO claims (host, pu, vm) SELECT p.host, unnest($8::BIGINT[]), p.vm FROM p
    ON CONFLICT DO NOTHING
    RETURNING pu";

/// The first of `asked` (in order, counting repeats) that `inserted` lacks.
fn not_inserted(asked: &[u32], inserted: &mut Vec<i64>) -> u32 {
    for &pu in asked {
        match inserted.iter().position(|&i| i == i64::from(pu)) {
            Some(at) => {
                inserted.swap_remove(at);
            }
            None => return pu,
        }
    }
    // Unreachable when fewer came back than were asked for; any PU will do.
    asked.first().copied().unwrap_or_default()
}

/// `on_unique()` for a unique violation (the statement that failed says
/// which key), else as [`err`].
fn unique_or(e: ::postgres::Error, on_unique: impl FnOnce() -> StoreError) -> StoreError {
    if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
        on_unique()
    } else {
        err(e)
    }
}

/// Reads a row in [`schema::HOST_GET`]'s column order.
fn host_from_row(row: &Row) -> Result<HostRow, StoreError> {
    let name: String = row.try_get(0).map_err(err)?;
    let labels: String = row.try_get(3).map_err(err)?;
    Ok(HostRow {
        topology: row.try_get(1).map_err(err)?,
        reserved: row.try_get(2).map_err(err)?,
        labels: schema::labels_from_text(&name, &labels)?,
        drained: row.try_get(4).map_err(err)?,
        generation: row.try_get(5).map_err(err)?,
        changed: row.try_get(6).map_err(err)?,
        rules: row.try_get(7).map_err(err)?,
        name,
    })
}

/// Reads a row in [`schema::PLACEMENT_GET`]'s column order.
fn placement_from_row(row: &Row) -> Result<PlacementRow, StoreError> {
    let vm: String = row.try_get(0).map_err(err)?;
    let origin: String = row.try_get(5).map_err(err)?;
    let pus: String = row.try_get(6).map_err(err)?;
    Ok(PlacementRow {
        host: row.try_get(1).map_err(err)?,
        doc: row.try_get(2).map_err(err)?,
        request: row.try_get(3).map_err(err)?,
        group: row.try_get(4).map_err(err)?,
        origin: schema::origin_from_text(&vm, &origin)?,
        pus: pus_from_text(&vm, &pus)?,
        owner: row.try_get(7).map_err(err)?,
        vm,
    })
}

impl Store for PgStore {
    fn put_host_if(&self, host: &HostRow, expect: Expect) -> Result<i64, StoreError> {
        let labels = schema::labels_to_text(&host.labels)?;
        self.write(|conn, changed| {
            let found: Option<(bool, i64)> = match conn.query_opt(HOST_REMOVED_GENERATION_LOCKED, &[&host.name])? {
                Some(row) => Some((row.try_get(0).map_err(err)?, row.try_get(1).map_err(err)?)),
                None => None,
            };
            expect.check(&host.name, found)?;
            if found.is_some_and(|(removed, _)| removed) {
                conn.execute(schema::HOST_DELETE_PLACEMENTS, &[&host.name])?;
            }
            let row = conn.query_one(
                schema::HOST_UPSERT,
                &[&host.name, &host.topology, &host.reserved, &labels, &host.drained, &changed, &host.rules],
            )?;
            let generation: i64 = row.try_get(0).map_err(err)?;
            // No row to lock: another writer may have inserted the host
            // since it was found absent (the upsert then waited for it and
            // updated its row). A new host starts at generation 1.
            if found.is_none() && generation != 1 && expect != Expect::Any {
                return Err(StoreError::Conflict { host: host.name.clone() });
            }
            Ok(generation)
        })
    }

    fn set_drained(&self, name: &str, drained: bool) -> Result<i64, StoreError> {
        self.write(|conn, changed| match conn.query_opt(schema::HOST_SET_DRAINED, &[&drained, &changed, &name])? {
            Some(row) => row.try_get(0).map_err(err),
            None => Err(StoreError::NotFound(format!("host {name}"))),
        })
    }

    fn remove_host(&self, name: &str, force: bool) -> Result<Removed, StoreError> {
        self.write(|conn, changed| {
            let removed: Option<bool> = match conn.query_opt(HOST_REMOVED_LOCKED, &[&name])? {
                Some(row) => Some(row.try_get(0).map_err(err)?),
                None => None,
            };
            if removed != Some(false) {
                return Err(StoreError::NotFound(format!("host {name}")));
            }
            let vms = conn
                .query(schema::HOST_PLACEMENT_NAMES, &[&name])?
                .iter()
                .map(|row| row.try_get::<_, String>(0).map_err(err))
                .collect::<Result<Vec<_>, _>>()?;
            if !vms.is_empty() {
                if !force {
                    return Err(StoreError::InUse { host: name.to_owned(), count: vms.len() });
                }
                conn.execute(schema::HOST_DELETE_PLACEMENTS, &[&name])?;
            }
            let generation: i64 =
                conn.query_one(schema::HOST_MARK_REMOVED, &[&changed, &name])?.try_get(0).map_err(err)?;
            Ok(Removed { vms, generation })
        })
    }

    fn host(&self, name: &str) -> Result<Option<HostRow>, StoreError> {
        self.read(|conn| conn.query_opt(schema::HOST_GET, &[&name])?.as_ref().map(host_from_row).transpose())
    }

    fn hosts(&self) -> Result<Vec<HostRow>, StoreError> {
        let mut hosts: Vec<HostRow> =
            self.read(|conn| conn.query(schema::HOSTS_ALL, &[])?.iter().map(host_from_row).collect())?;
        hosts.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(hosts)
    }

    fn placements(&self, host: Option<&str>) -> Result<Vec<PlacementRow>, StoreError> {
        let mut rows = self.read(|conn| {
            let rows = match host {
                Some(host) => conn.query(schema::PLACEMENTS_OF_HOST, &[&host])?,
                None => conn.query(schema::PLACEMENTS_ALL, &[])?,
            };
            rows.iter().map(placement_from_row).collect::<Result<Vec<_>, _>>()
        })?;
        rows.sort_unstable_by(|a, b| a.vm.cmp(&b.vm));
        Ok(rows)
    }

    fn placement(&self, vm: &str) -> Result<Option<PlacementRow>, StoreError> {
        self.read(|conn| conn.query_opt(schema::PLACEMENT_GET, &[&vm])?.as_ref().map(placement_from_row).transpose())
    }

    fn claims(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        self.read(|conn| {
            let mut out = Vec::new();
            for row in conn.query(schema::CLAIMS_ALL, &[])? {
                out.push(schema::claim(
                    row.try_get(0).map_err(err)?,
                    row.try_get(1).map_err(err)?,
                    row.try_get(2).map_err(err)?,
                )?);
            }
            out.sort_unstable();
            Ok(out)
        })
    }

    fn commit_answered(&self, changes: &[HostChange], answer: Option<&Answer>) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let order = schema::commit_order(changes)?;
        let now = schema::now_ms();
        // A host row held long by another transaction is a conflict, not a
        // wait: the decision is remade on another host. Without a key to
        // write first, the claim's short wait is set at BEGIN (a round trip
        // less per claim: issue 50); with one, the key may wait as any
        // statement does, and the short wait is set after it.
        let lock = if answer.is_some() { LOCK_TIMEOUT } else { CLAIM_LOCK_WAIT };
        self.write_waiting(lock, |conn, changed| {
            // The key first: a request with the same key committing
            // meanwhile (through another replica) holds it until it ends,
            // and this one then fails whole, before taking any host row.
            if let Some(a) = answer {
                let st = conn.statement(schema::KEY_INSERT)?;
                conn.client
                    .execute(&st, &[&a.key, &a.request, &i64::from(a.status), &a.body, &now])
                    .map_err(|e| unique_or(e, || StoreError::KeyUsed { key: a.key.clone() }))?;
                conn.client
                    .batch_execute(&format!("SET LOCAL lock_timeout = {}", CLAIM_LOCK_WAIT.as_millis()))
                    .map_err(err)?;
            }
            for change in &order {
                let sql = if change.add.is_empty() { schema::COMMIT_BUMP } else { schema::COMMIT_BUMP_UNDRAINED };
                let st = conn.statement(sql)?;
                match conn.client.execute(&st, &[&changed, &change.host, &change.generation]) {
                    Ok(0) => return Err(StoreError::Conflict { host: change.host.clone() }),
                    Ok(_) => {}
                    Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                        return Err(StoreError::Conflict { host: change.host.clone() });
                    }
                    Err(e) => return Err(err(e)),
                }
            }
            // Every removal before any addition: a VM moving between hosts,
            // or a PU passing from one VM to another, is one commit.
            for change in &order {
                for vm in &change.remove {
                    if conn.execute(schema::VM_DELETE, &[vm, &change.host])? == 0 {
                        return Err(StoreError::NotFound(format!("VM {vm} on host {}", change.host)));
                    }
                }
            }
            for change in &order {
                for p in &change.add {
                    let pus = pus_to_text(&p.pus);
                    let claims: Vec<i64> = p.pus.iter().map(|&pu| i64::from(pu)).collect();
                    let st = conn.statement(ADD_PLACEMENT)?;
                    let rows = conn
                        .client
                        .query(
                            &st,
                            &[
                                &p.vm,
                                &change.host,
                                &p.doc,
                                &p.request,
                                &p.group,
                                &p.origin.as_str(),
                                &pus,
                                &claims,
                                &p.owner,
                            ],
                        )
                        .map_err(|e| unique_or(e, || StoreError::Duplicate { vm: p.vm.clone() }))?;
                    if rows.len() != p.pus.len() {
                        let mut inserted =
                            rows.iter().map(|r| r.try_get::<_, i64>(0).map_err(err)).collect::<Result<Vec<_>, _>>()?;
                        return Err(StoreError::Claimed {
                            host: change.host.clone(),
                            pu: not_inserted(&p.pus, &mut inserted),
                        });
                    }
                }
            }
            Ok(())
        })?;
        if answer.is_some() && now - self.pruned.load(Ordering::Relaxed) > schema::PRUNE_EVERY_MS {
            self.pruned.store(now, Ordering::Relaxed);
            // Its own transaction, after the answer is given its commit: a
            // failure here costs nothing but a later try.
            let _ = self.write(|conn, _| {
                if conn.query_opt(PRUNE_TRY_LOCK, &[&PRUNE_LOCK])?.is_some() {
                    conn.execute(schema::KEYS_PRUNE_OLD, &[&schema::oldest_answered(now)])?;
                    conn.execute(schema::KEYS_PRUNE_MANY, &[&(crate::MAX_KEYS - 1)])?;
                }
                Ok(())
            });
        }
        Ok(())
    }

    fn answer(&self, key: &str) -> Result<Option<Answer>, StoreError> {
        let oldest = schema::oldest_answered(schema::now_ms());
        self.read(|conn| match conn.query_opt(schema::KEY_GET, &[&key, &oldest])? {
            Some(row) => Ok(Some(Answer {
                key: row.try_get(0).map_err(err)?,
                request: row.try_get(1).map_err(err)?,
                status: schema::status_from(key, row.try_get(2).map_err(err)?)?,
                body: row.try_get(3).map_err(err)?,
            })),
            None => Ok(None),
        })
    }

    fn outcome(&self, transaction: i64) -> Result<Option<bool>, StoreError> {
        self.read(|conn| transaction_status(&mut conn.client, transaction))
    }

    fn changed_since(&self, since: i64) -> Result<Changes, StoreError> {
        self.read(|conn| {
            let rows = conn.query(CHANGED_HOSTS_AND_WATERMARK, &[&since])?;
            let now: i64 = match rows.first() {
                Some(row) => row.try_get(0).map_err(err)?,
                None => return Err(StoreError::Corrupt("the change feed returned no watermark".to_owned())),
            };
            let mut hosts = Vec::with_capacity(rows.len());
            for row in &rows {
                let Some(name) = row.try_get::<_, Option<String>>(1).map_err(err)? else { continue };
                let removed: bool = row.try_get(2).map_err(err)?;
                let generation: i64 = row.try_get(3).map_err(err)?;
                hosts.push((name, (!removed).then_some(generation)));
            }
            hosts.sort_unstable();
            Ok((now, hosts))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_takes_the_transaction_id_and_no_shared_row() {
        let sql = begin_sql(Duration::from_millis(2500), LOCK_TIMEOUT);
        assert!(sql.starts_with("BEGIN; "));
        assert!(sql.ends_with(TRANSACTION_ID));
        assert!(!sql.contains("counter"), "{sql}");
        assert!(sql.contains("statement_timeout = 2500;") && sql.contains("lock_timeout = 2500;"), "{sql}");
    }

    #[test]
    fn the_pu_not_inserted_is_found() {
        assert_eq!(not_inserted(&[3, 4, 5], &mut vec![5, 3]), 4);
        assert_eq!(not_inserted(&[9, 9], &mut vec![9]), 9);
        assert_eq!(not_inserted(&[1, 2], &mut vec![]), 1);
    }
}
