//! The SQLite backend: one file, one writing connection, one writer at a
//! time; claims that arrive while a commit runs are committed together
//! (group commit, see [`SqliteStore::commit`]).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::deadline::Deadline;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row, TransactionBehavior};

use crate::schema::{self, pus_from_text, pus_to_text};
use crate::{Answer, Changes, Expect, HostChange, HostRow, PlacementRow, Removed, Store, StoreError};

/// How long a write waits for another process's transaction to finish
/// before the store reports [`StoreError::Unavailable`].
const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// A store in a SQLite file. Threads share its one writing connection in
/// turn, and a second one for reads (a file's WAL lets reads go on while a
/// commit runs; an in-memory database reads through the one connection);
/// other processes may open the same file, and then writers wait for
/// each other up to a busy timeout.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    reader: Option<Mutex<Connection>>,
    // Claims waiting for the next group commit (see `commit`).
    queue: Mutex<Vec<Arc<Claim>>>,
    // Tells the checkpointer thread to stop when the store is dropped.
    stop: Arc<AtomicBool>,
    // When this store last pruned the idempotency keys (ms since the epoch).
    pruned: AtomicI64,
}

/// One caller's commit, queued for the next group commit.
struct Claim {
    changes: Vec<HostChange>,
    // The answer kept under the request's key with the changes, if any.
    answer: Option<Answer>,
    // When the claim was queued, as the key's `created`.
    now: i64,
    // The caller's request deadline: the writer, on another thread,
    // settles the commit-or-503 race with it as the caller would.
    deadline: Option<Deadline>,
    outcome: Mutex<Option<Result<(), StoreError>>>,
    done: Condvar,
}

impl Claim {
    fn answer(&self, outcome: Result<(), StoreError>) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        self.done.notify_all();
    }

    fn answered(&self) -> bool {
        self.outcome.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    fn take(&self) -> Result<(), StoreError> {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        while outcome.is_none() {
            outcome = self.done.wait(outcome).unwrap_or_else(PoisonError::into_inner);
        }
        outcome.take().unwrap_or(Ok(()))
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Opens a connection to `path` as the store uses it: WAL, NORMAL sync
/// (see `SqliteStore::open`), foreign keys, a 2 MiB page cache.
fn connect(path: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| err(&e))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| err(&e))?;
    // Reports the mode now in force ("memory" for an in-memory database,
    // which cannot have a WAL and needs none).
    conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)).map_err(|e| err(&e))?;
    // In WAL mode NORMAL syncs at checkpoints, not at every commit: a
    // commit survives the process being killed (the WAL is in the OS's
    // page cache), only an OS crash or power loss can lose the last
    // ones, and then whole transactions from the newest back, never a
    // part of one (docs/serve.md says what that means for a fleet). One
    // fsync per commit (FULL) would cap a server at the disk's fsync
    // rate, a few hundred commits a second on the machines measured.
    conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;").map_err(|e| err(&e))?;
    // 2 MiB (SQLite's default) on purpose: a B-tree rebalance numbers a
    // page past the 1 GiB lock byte for a moment, and COMMIT then walks
    // the whole page-cache hash to drop it (`pcache1TruncateUnsafe`, 13%
    // of a server's CPU with 64 MiB: docs/performance.md, issue 50).
    conn.execute_batch("PRAGMA cache_size = -2048; PRAGMA wal_autocheckpoint = 8192;").map_err(|e| err(&e))?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Copies the WAL back into the database from a thread of its own, a
/// quarter second at a time. SQLite otherwise checkpoints inside the commit
/// that crosses 1,000 pages, and that commit (and every request queued
/// behind it) waits tens of milliseconds: the tail of the service's
/// latency. A passive checkpoint never blocks writers. The automatic
/// checkpoint stays as a backstop, at a larger size.
fn checkpointer(path: &str, stop: Arc<AtomicBool>) -> Result<(), StoreError> {
    let conn = Connection::open(path).map_err(|e| err(&e))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| err(&e))?;
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        })
        .map_err(|e| StoreError::Database(format!("cannot start the checkpoint thread: {e}")))?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating it and its directory if missing) the database at
    /// `path`, or a private in-memory one for `:memory:`, and brings its
    /// schema up to date.
    pub fn open(path: &str) -> Result<SqliteStore, StoreError> {
        if path != ":memory:" {
            if let Some(parent) = std::path::Path::new(path).parent() {
                if !parent.as_os_str().is_empty() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| StoreError::Database(format!("cannot create {}: {e}", parent.display())))?;
                }
            }
        }
        let mut conn = connect(path)?;
        migrate(&mut conn)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut reader = None;
        if path != ":memory:" {
            checkpointer(path, stop.clone())?;
            // Each commit of the writer empties the reader's page cache
            // (SQLite's rule for a connection that sees another's commit),
            // at a cost that grows with the pages it holds; its reads are
            // a few indexed rows, so `connect`'s small cache serves them.
            reader = Some(Mutex::new(connect(path)?));
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            reader,
            queue: Mutex::new(Vec::new()),
            stop,
            pruned: AtomicI64::new(0),
        })
    }

    /// A connection to read with, for a call whose request's deadline has
    /// not passed: the reading one when there is one (it sees every commit
    /// made before the read began, and never waits for a commit).
    fn read(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        let Some(reader) = &self.reader else { return self.lock() };
        crate::deadline::check()?;
        let conn = reader.lock().unwrap_or_else(PoisonError::into_inner);
        crate::deadline::check()?;
        Ok(conn)
    }

    /// Commits the claims queued, the caller's among them, in one
    /// transaction on `conn` (held by the caller: the one writer). Each
    /// claim runs in a savepoint of its own and is checked as if alone: a
    /// claim that conflicts (or whose deadline passed) is rolled back and
    /// answered alone, the others go on. Every claim is answered once the
    /// transaction's fate is known, so a success is never answered before
    /// its commit is in the WAL.
    fn group_commit(&self, conn: &mut Connection) {
        let batch = std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner));
        if batch.is_empty() {
            return;
        }
        // Another process's write lock is waited for up to the busy
        // timeout, or what is left of the nearest deadline when less.
        let wait = batch
            .iter()
            .filter_map(|c| c.deadline.as_ref().map(Deadline::remaining))
            .fold(BUSY_TIMEOUT, Duration::min)
            .max(Duration::from_millis(1));
        let fail_all = |e: StoreError, claims: &[Arc<Claim>]| {
            for c in claims {
                c.answer(Err(copy(&e)));
            }
        };
        if let Err(e) = conn.busy_timeout(wait) {
            return fail_all(err(&e), &batch);
        }
        let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(e) => return fail_all(err(&e), &batch),
        };
        let changed = match bump_counter(&tx) {
            Ok(c) => c,
            Err(e) => return fail_all(e, &batch),
        };
        // A claim alone in its transaction needs no savepoint (the
        // transaction's rollback undoes it); the savepoint's statements are
        // parsed afresh each time, and most transactions hold one claim.
        let alone = batch.len() == 1;
        let savepoint = |sql: &str| if alone { Ok(()) } else { tx.execute_batch(sql) };
        let mut written = Vec::with_capacity(batch.len());
        for (i, claim) in batch.iter().enumerate() {
            if claim.deadline.as_ref().is_some_and(|d| !d.open()) {
                claim.answer(Err(StoreError::DeadlineExceeded));
                continue;
            }
            if let Err(e) = savepoint("SAVEPOINT claim") {
                fail_all(err(&e), &batch[i..]);
                return fail_all(err(&e), &written);
            }
            let applied = apply(&tx, &claim.changes, claim.answer.as_ref(), claim.now, changed);
            // The last moment to give up on this claim (see `deadline`):
            // once it may commit, the request waits for this transaction.
            let outcome = match applied {
                Ok(()) if claim.deadline.as_ref().is_none_or(Deadline::begin_commit) => Ok(()),
                Ok(()) => Err(StoreError::DeadlineExceeded),
                Err(e) => Err(e),
            };
            let end = if outcome.is_ok() { "RELEASE claim" } else { "ROLLBACK TO claim; RELEASE claim" };
            if let Err(e) = savepoint(end) {
                // SQLite rolled the whole transaction back (a full disk,
                // an I/O error): nothing of the batch is written.
                fail_all(err(&e), &batch[i..]);
                return fail_all(err(&e), &written);
            }
            match outcome {
                Ok(()) => written.push(claim.clone()),
                Err(e) => claim.answer(Err(e)),
            }
        }
        if written.is_empty() {
            // Nothing to write: the counter's bump goes with the rollback.
            return;
        }
        match tx.commit() {
            Ok(()) => {
                for c in &written {
                    c.answer(Ok(()));
                }
            }
            Err(e) => fail_all(err(&e), &written),
        }
    }

    /// The connection, for a call whose request's deadline has not
    /// passed (waiting for another call of this process is waiting too).
    fn lock(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        crate::deadline::check()?;
        // A thread that panicked mid-call left no transaction open (the
        // transaction's drop rolled it back), so the connection is sound.
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        crate::deadline::check()?;
        Ok(conn)
    }

    /// Runs `f` in an immediate transaction, with the change counter's new
    /// value. Immediate: it takes the write lock at BEGIN, so two processes
    /// never both read and then both fail to upgrade.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, i64) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock()?;
        // Another process's write lock is waited for up to the busy
        // timeout, or what is left of the request's deadline when less.
        conn.busy_timeout(crate::deadline::bounded(BUSY_TIMEOUT)).map_err(|e| err(&e))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| err(&e))?;
        let changed = bump_counter(&tx)?;
        let out = f(&tx, changed)?;
        // The last moment to give up (see `deadline`); the transaction's
        // drop rolls back.
        if !crate::deadline::may_commit() {
            return Err(StoreError::DeadlineExceeded);
        }
        tx.commit().map_err(|e| err(&e))?;
        Ok(out)
    }
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| err(&e))?;
    tx.execute(schema::SCHEMA_VERSION_TABLE, []).map_err(|e| err(&e))?;
    let version: Option<i64> =
        tx.query_row(schema::SCHEMA_VERSION_GET, [], |r| r.get(0)).optional().map_err(|e| err(&e))?;
    let version = match version {
        Some(v) => v,
        None => {
            tx.execute(schema::SCHEMA_VERSION_INSERT, []).map_err(|e| err(&e))?;
            0
        }
    };
    let pending = schema::pending_migrations(version)?;
    for migration in pending {
        tx.execute_batch(migration).map_err(|e| err(&e))?;
    }
    if !pending.is_empty() {
        tx.execute(schema::SCHEMA_VERSION_SET, params![schema::MIGRATIONS.len() as i64]).map_err(|e| err(&e))?;
    }
    tx.commit().map_err(|e| err(&e))
}

/// Busy after the busy timeout means another process holds the database:
/// a retry later may succeed, as with a PostgreSQL that is down.
fn err(e: &rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Database(e.to_string()),
    }
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => {
            f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
        }
        _ => false,
    }
}

fn bump_counter(tx: &Connection) -> Result<i64, StoreError> {
    let mut st = tx.prepare_cached(schema::COUNTER_BUMP).map_err(|e| err(&e))?;
    st.query_row([], |r| r.get(0)).map_err(|e| err(&e))
}

/// Reads a row in [`schema::HOST_GET`]'s column order. Errors from
/// decoding the labels come out as the outer `Result`'s error.
fn host_from_row(row: &Row<'_>) -> rusqlite::Result<Result<HostRow, StoreError>> {
    let name: String = row.get(0)?;
    let labels: String = row.get(3)?;
    let labels = match schema::labels_from_text(&name, &labels) {
        Ok(l) => l,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(HostRow {
        topology: row.get(1)?,
        reserved: row.get(2)?,
        labels,
        drained: row.get(4)?,
        generation: row.get(5)?,
        changed: row.get(6)?,
        rules: row.get(7)?,
        name,
    }))
}

/// Reads a row in [`schema::PLACEMENT_GET`]'s column order.
fn placement_from_row(row: &Row<'_>) -> rusqlite::Result<Result<PlacementRow, StoreError>> {
    let vm: String = row.get(0)?;
    let origin: String = row.get(5)?;
    let pus: String = row.get(6)?;
    let origin = match schema::origin_from_text(&vm, &origin) {
        Ok(o) => o,
        Err(e) => return Ok(Err(e)),
    };
    let pus = match pus_from_text(&vm, &pus) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(PlacementRow {
        host: row.get(1)?,
        doc: row.get(2)?,
        request: row.get(3)?,
        group: row.get(4)?,
        origin,
        pus,
        owner: row.get(7)?,
        vm,
    }))
}

/// Collects `(rusqlite result, decoding result)` rows.
fn collect<T>(rows: impl Iterator<Item = rusqlite::Result<Result<T, StoreError>>>) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(|e| err(&e))??);
    }
    Ok(out)
}

/// Applies one claim's changes inside a transaction, or fails with why
/// (the caller rolls back what it did).
fn apply(
    tx: &Connection,
    changes: &[HostChange],
    answer: Option<&Answer>,
    now: i64,
    changed: i64,
) -> Result<(), StoreError> {
    let order = schema::commit_order(changes)?;
    if let Some(a) = answer {
        tx.prepare_cached(schema::KEY_INSERT)
            .and_then(|mut st| st.execute(params![a.key, a.request, i64::from(a.status), a.body, now]))
            .map_err(|e| if is_unique_violation(&e) { StoreError::KeyUsed { key: a.key.clone() } } else { err(&e) })?;
    }
    for change in &order {
        let sql = if change.add.is_empty() { schema::COMMIT_BUMP } else { schema::COMMIT_BUMP_UNDRAINED };
        let n = tx
            .prepare_cached(sql)
            .and_then(|mut st| st.execute(params![changed, change.host, change.generation]))
            .map_err(|e| err(&e))?;
        if n == 0 {
            return Err(StoreError::Conflict { host: change.host.clone() });
        }
    }
    // Every removal before any addition: a VM moving between hosts,
    // or a PU passing from one VM to another, is one commit.
    for change in &order {
        for vm in &change.remove {
            let n = tx
                .prepare_cached(schema::VM_DELETE)
                .and_then(|mut st| st.execute(params![vm, change.host]))
                .map_err(|e| err(&e))?;
            if n == 0 {
                return Err(StoreError::NotFound(format!("VM {vm} on host {}", change.host)));
            }
        }
    }
    for change in &order {
        for p in &change.add {
            let pus = pus_to_text(&p.pus);
            tx.prepare_cached(schema::PLACEMENT_INSERT)
                .and_then(|mut st| {
                    st.execute(params![p.vm, change.host, p.doc, p.request, p.group, p.origin.as_str(), pus, p.owner])
                })
                .map_err(
                    |e| {
                        if is_unique_violation(&e) {
                            StoreError::Duplicate { vm: p.vm.clone() }
                        } else {
                            err(&e)
                        }
                    },
                )?;
            let mut st = tx.prepare_cached(schema::CLAIM_INSERT).map_err(|e| err(&e))?;
            for &pu in &p.pus {
                st.execute(params![change.host, i64::from(pu), p.vm]).map_err(|e| {
                    if is_unique_violation(&e) {
                        StoreError::Claimed { host: change.host.clone(), pu }
                    } else {
                        err(&e)
                    }
                })?;
            }
        }
    }
    Ok(())
}

/// The same error again, for each claim of a batch that failed as one.
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        StoreError::TimedOut(m) => StoreError::TimedOut(m.clone()),
        StoreError::DeadlineExceeded => StoreError::DeadlineExceeded,
        other => StoreError::Database(other.to_string()),
    }
}

impl Store for SqliteStore {
    fn put_host_if(&self, host: &HostRow, expect: Expect) -> Result<i64, StoreError> {
        let labels = schema::labels_to_text(&host.labels)?;
        self.write(|tx, changed| {
            let found: Option<(bool, i64)> = tx
                .prepare_cached(schema::HOST_REMOVED_GENERATION)
                .and_then(|mut st| st.query_row(params![host.name], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(|e| err(&e))?;
            expect.check(&host.name, found)?;
            if found.is_some_and(|(removed, _)| removed) {
                tx.prepare_cached(schema::HOST_DELETE_PLACEMENTS)
                    .and_then(|mut st| st.execute(params![host.name]))
                    .map_err(|e| err(&e))?;
            }
            let values = params![host.name, host.topology, host.reserved, labels, host.drained, changed, host.rules];
            tx.prepare_cached(schema::HOST_UPSERT)
                .and_then(|mut st| st.query_row(values, |r| r.get(0)))
                .map_err(|e| err(&e))
        })
    }

    fn set_drained(&self, name: &str, drained: bool) -> Result<i64, StoreError> {
        self.write(|tx, changed| {
            let generation: Option<i64> = tx
                .prepare_cached(schema::HOST_SET_DRAINED)
                .and_then(|mut st| st.query_row(params![drained, changed, name], |r| r.get(0)).optional())
                .map_err(|e| err(&e))?;
            generation.ok_or_else(|| StoreError::NotFound(format!("host {name}")))
        })
    }

    fn remove_host(&self, name: &str, force: bool) -> Result<Removed, StoreError> {
        self.write(|tx, changed| {
            let removed: Option<bool> = tx
                .prepare_cached(schema::HOST_REMOVED)
                .and_then(|mut st| st.query_row(params![name], |r| r.get(0)).optional())
                .map_err(|e| err(&e))?;
            if removed != Some(false) {
                return Err(StoreError::NotFound(format!("host {name}")));
            }
            let vms: Vec<String> = tx
                .prepare_cached(schema::HOST_PLACEMENT_NAMES)
                .and_then(|mut st| st.query_map(params![name], |r| r.get(0))?.collect())
                .map_err(|e| err(&e))?;
            if !vms.is_empty() {
                if !force {
                    return Err(StoreError::InUse { host: name.to_owned(), count: vms.len() });
                }
                tx.prepare_cached(schema::HOST_DELETE_PLACEMENTS)
                    .and_then(|mut st| st.execute(params![name]))
                    .map_err(|e| err(&e))?;
            }
            let generation: i64 = tx
                .prepare_cached(schema::HOST_MARK_REMOVED)
                .and_then(|mut st| st.query_row(params![changed, name], |r| r.get(0)))
                .map_err(|e| err(&e))?;
            Ok(Removed { vms, generation })
        })
    }

    fn host(&self, name: &str) -> Result<Option<HostRow>, StoreError> {
        let conn = self.read()?;
        let mut st = conn.prepare_cached(schema::HOST_GET).map_err(|e| err(&e))?;
        let row = st.query_row(params![name], host_from_row).optional().map_err(|e| err(&e))?;
        row.transpose()
    }

    fn hosts(&self) -> Result<Vec<HostRow>, StoreError> {
        let conn = self.read()?;
        let mut st = conn.prepare_cached(schema::HOSTS_ALL).map_err(|e| err(&e))?;
        let mut hosts = collect(st.query_map([], host_from_row).map_err(|e| err(&e))?)?;
        hosts.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(hosts)
    }

    fn placements(&self, host: Option<&str>) -> Result<Vec<PlacementRow>, StoreError> {
        let conn = self.read()?;
        let mut rows = match host {
            Some(host) => {
                let mut st = conn.prepare_cached(schema::PLACEMENTS_OF_HOST).map_err(|e| err(&e))?;
                let rows = collect(st.query_map(params![host], placement_from_row).map_err(|e| err(&e))?)?;
                rows
            }
            None => {
                let mut st = conn.prepare_cached(schema::PLACEMENTS_ALL).map_err(|e| err(&e))?;
                let rows = collect(st.query_map([], placement_from_row).map_err(|e| err(&e))?)?;
                rows
            }
        };
        rows.sort_unstable_by(|a, b| a.vm.cmp(&b.vm));
        Ok(rows)
    }

    fn placement(&self, vm: &str) -> Result<Option<PlacementRow>, StoreError> {
        let conn = self.read()?;
        let mut st = conn.prepare_cached(schema::PLACEMENT_GET).map_err(|e| err(&e))?;
        let row = st.query_row(params![vm], placement_from_row).optional().map_err(|e| err(&e))?;
        row.transpose()
    }

    fn claims(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        let conn = self.read()?;
        let mut st = conn.prepare_cached(schema::CLAIMS_ALL).map_err(|e| err(&e))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))
            .map_err(|e| err(&e))?;
        let mut out = Vec::new();
        for row in rows {
            let (host, pu, vm) = row.map_err(|e| err(&e))?;
            out.push(schema::claim(host, pu, vm)?);
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Group commit: the caller queues its claim and takes the writing
    /// connection; whoever holds it commits every claim queued meanwhile
    /// in one transaction (see `group_commit`), so a caller may find its
    /// claim already answered when its turn comes. One transaction and one
    /// write of the WAL's shared pages serve many claims, and no claim is
    /// answered before its transaction is committed.
    fn commit_answered(&self, changes: &[HostChange], answer: Option<&Answer>) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        schema::commit_order(changes)?;
        crate::deadline::check()?;
        let now = schema::now_ms();
        let claim = Arc::new(Claim {
            changes: changes.to_vec(),
            answer: answer.cloned(),
            now,
            deadline: crate::deadline::current(),
            outcome: Mutex::new(None),
            done: Condvar::new(),
        });
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push(claim.clone());
        // A thread that panicked mid-call left no transaction open (the
        // transaction's drop rolled it back), so the connection is sound.
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if !claim.answered() {
            self.group_commit(&mut conn);
        }
        drop(conn);
        claim.take()?;
        if answer.is_some() && now - self.pruned.load(Ordering::Relaxed) > schema::PRUNE_EVERY_MS {
            self.pruned.store(now, Ordering::Relaxed);
            // Its own transaction, after the claim's: a failure here costs
            // nothing but a later try.
            let _ = self.write(|tx, _| {
                tx.execute(schema::KEYS_PRUNE_OLD, params![schema::oldest_answered(now)]).map_err(|e| err(&e))?;
                tx.execute(schema::KEYS_PRUNE_MANY, params![crate::MAX_KEYS - 1]).map_err(|e| err(&e))?;
                Ok(())
            });
        }
        Ok(())
    }

    fn answer(&self, key: &str) -> Result<Option<Answer>, StoreError> {
        let conn = self.read()?;
        let mut st = conn.prepare_cached(schema::KEY_GET).map_err(|e| err(&e))?;
        let row = st
            .query_row(params![key, schema::oldest_answered(schema::now_ms())], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, String>(3)?))
            })
            .optional()
            .map_err(|e| err(&e))?;
        match row {
            Some((key, request, status, body)) => {
                let status = schema::status_from(&key, status)?;
                Ok(Some(Answer { key, request, status, body }))
            }
            None => Ok(None),
        }
    }

    /// The reader answers, and so does the writer: the write lock is
    /// taken and given back (`BEGIN IMMEDIATE`, rollback) within the
    /// busy timeout or the request's deadline. With another process
    /// holding the lock, every write waits and times out, and reads alone
    /// would still say ready (issue 46).
    fn ping(&self) -> Result<(), StoreError> {
        self.changed_since(i64::MAX)?;
        let mut conn = self.lock()?;
        conn.busy_timeout(crate::deadline::bounded(BUSY_TIMEOUT)).map_err(|e| err(&e))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| err(&e))?;
        tx.rollback().map_err(|e| err(&e))
    }

    fn changed_since(&self, since: i64) -> Result<Changes, StoreError> {
        let conn = self.read()?;
        // The counter before the hosts: a change committed in between (by
        // another process) is then reported twice, never missed.
        let now: i64 = conn
            .prepare_cached(schema::COUNTER_GET)
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(|e| err(&e))?;
        let mut st = conn.prepare_cached(schema::CHANGED_HOSTS).map_err(|e| err(&e))?;
        let rows = st
            .query_map(params![since], |r| {
                Ok((r.get::<_, String>(0)?, (!r.get::<_, bool>(1)?).then_some(r.get::<_, i64>(2)?)))
            })
            .map_err(|e| err(&e))?;
        let mut hosts = Vec::new();
        for row in rows {
            hosts.push(row.map_err(|e| err(&e))?);
        }
        hosts.sort_unstable();
        Ok((now, hosts))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::collections::BTreeMap;

    fn host(name: &str) -> HostRow {
        HostRow {
            name: name.to_owned(),
            topology: "{}".to_owned(),
            reserved: None,
            labels: Default::default(),
            drained: false,
            generation: 0,
            changed: 0,
            rules: None,
        }
    }

    fn claim(vm: &str, host: &str, generation: i64, pus: &[u32]) -> Vec<HostChange> {
        let add = PlacementRow {
            vm: vm.to_owned(),
            host: host.to_owned(),
            doc: "{}".to_owned(),
            request: None,
            group: None,
            origin: crate::Origin::Service,
            pus: pus.to_vec(),
            owner: None,
        };
        vec![HostChange { host: host.to_owned(), generation, remove: vec![], add: vec![add] }]
    }

    /// Claims queued while the writing connection is busy are committed
    /// in one transaction, each checked as if alone: the stale one, the
    /// one whose PU another claim of the batch took first and the one whose
    /// deadline passed fail, alone; the others are written, and answered
    /// only once their transaction committed.
    #[test]
    fn a_batch_commits_together_and_a_conflict_in_it_fails_alone() {
        use crate::deadline::{self, Deadline};
        let dir = std::env::temp_dir().join(format!("numaplace-group-commit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("f.db");
        let store = Arc::new(SqliteStore::open(path.to_str().unwrap()).unwrap());
        for h in ["a", "b", "c", "d"] {
            store.put_host(&host(h)).unwrap();
        }
        let (before, _) = store.changed_since(0).unwrap();
        // The writer is busy: every claim below queues behind it.
        let busy = store.conn.lock().unwrap();
        let claims = [
            ("ok-a", claim("ok-a", "a", 1, &[0, 1]), None),
            ("stale-b", claim("stale-b", "b", 7, &[0]), None),
            ("first-c", claim("first-c", "c", 1, &[4]), None),
            ("ok-d", claim("ok-d", "d", 1, &[4]), None),
            ("late-a", claim("late-a", "a", 2, &[2]), Some(Deadline::after(Duration::from_millis(300)))),
        ];
        let mut threads = Vec::new();
        for (i, (name, changes, deadline)) in claims.into_iter().enumerate() {
            let mine = store.clone();
            threads.push(std::thread::spawn(move || {
                let outcome = match deadline {
                    Some(d) => deadline::scope(d, || mine.commit(&changes)),
                    None => mine.commit(&changes),
                };
                (name, outcome.map_err(|e| e.to_string()))
            }));
            // Queued in this order.
            while store.queue.lock().unwrap().len() < i + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // A claim on c's PU 4 at c's generation, queued after first-c's:
        // it conflicts with first-c inside the batch.
        let second = {
            let mine = store.clone();
            std::thread::spawn(move || mine.commit(&claim("second-c", "c", 1, &[4])).map_err(|e| e.to_string()))
        };
        while store.queue.lock().unwrap().len() < 6 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // late-a's deadline passes while it waits.
        std::thread::sleep(Duration::from_millis(400));
        assert!(threads.iter().all(|t| !t.is_finished()), "nothing is answered before the commit");
        drop(busy);
        let outcomes: BTreeMap<&str, Result<(), String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(outcomes["ok-a"], Ok(()));
        assert_eq!(outcomes["ok-d"], Ok(()));
        assert_eq!(outcomes["first-c"], Ok(()));
        assert_eq!(outcomes["stale-b"], Err("host b changed since the decision was made".to_owned()));
        assert_eq!(outcomes["late-a"], Err(StoreError::DeadlineExceeded.to_string()));
        assert_eq!(second.join().unwrap(), Err("host c changed since the decision was made".to_owned()));
        // One transaction: one stamp for every host it changed.
        let (after, changed) = store.changed_since(before).unwrap();
        assert_eq!(after, before + 1, "one write transaction for the batch");
        assert_eq!(changed, vec![("a".into(), Some(2)), ("c".into(), Some(2)), ("d".into(), Some(2))]);
        let claims = store.claims().unwrap();
        let want = [("a", 0, "ok-a"), ("a", 1, "ok-a"), ("c", 4, "first-c"), ("d", 4, "ok-d")];
        assert_eq!(claims, want.map(|(h, p, v)| (h.to_owned(), p, v.to_owned())));
        // Committed for good: another connection sees the same.
        drop(store);
        let again = SqliteStore::open(path.to_str().unwrap()).unwrap();
        assert_eq!(again.claims().unwrap().len(), 4);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// SQLite numbers `$N` parameters by first appearance, not by N.
    #[test]
    fn shared_statements_number_parameters_in_order() {
        let store = SqliteStore::open(":memory:").unwrap();
        let conn = store.lock().unwrap();
        for sql in schema::PARAMETERISED {
            let st = conn.prepare(sql).unwrap();
            let count = st.parameter_count();
            assert!(count > 0, "{sql}");
            for n in 1..=count {
                assert_eq!(st.parameter_index(&format!("${n}")).unwrap(), Some(n), "{sql}");
            }
        }
    }
}
