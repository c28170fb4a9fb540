//! The one schema and the statements both backends run. Every statement
//! here is valid SQLite and valid PostgreSQL: parameters are written `$N`,
//! which PostgreSQL reads by number and SQLite reads as named parameters
//! numbered in order of first appearance, so each statement must mention
//! `$1`, `$2`, ... in that order (a test in `sqlite.rs` checks it).
//!
//! Neither backend sorts: PostgreSQL's `ORDER BY` follows the database's
//! collation, SQLite's compares bytes, and listings must not depend on
//! which one holds the fleet. The backends sort in Rust instead.

/// Created before anything else, outside the migrations: it says which
/// migrations have run.
pub(crate) const SCHEMA_VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)";
pub(crate) const SCHEMA_VERSION_GET: &str = "SELECT version FROM schema_version";
pub(crate) const SCHEMA_VERSION_INSERT: &str = "INSERT INTO schema_version (version) VALUES (0)";
pub(crate) const SCHEMA_VERSION_SET: &str = "UPDATE schema_version SET version = $1";

/// Migration N (from 1) takes the schema from version N-1 to N. Append
/// only: a database records how many of these it has run, so editing one
/// that has shipped changes nothing on databases that already ran it.
pub(crate) const MIGRATIONS: &[&str] = &[
    // Hosts are soft-deleted (`removed`) so that `changed_since` can tell
    // caches about removals; the row keeps its generation, so a host
    // removed and put back never matches a decision made before.
    "CREATE TABLE hosts (
        name TEXT PRIMARY KEY,
        topology TEXT NOT NULL,
        reserved TEXT NULL,
        labels TEXT NOT NULL,
        drained BOOLEAN NOT NULL,
        removed BOOLEAN NOT NULL,
        generation BIGINT NOT NULL,
        changed BIGINT NOT NULL
    );
    CREATE INDEX hosts_changed ON hosts (changed);
    CREATE TABLE placements (
        vm TEXT PRIMARY KEY,
        host TEXT NOT NULL REFERENCES hosts (name),
        doc TEXT NOT NULL,
        request TEXT NULL,
        grp TEXT NULL,
        origin TEXT NOT NULL,
        pus TEXT NOT NULL
    );
    CREATE INDEX placements_host ON placements (host);
    CREATE TABLE claims (
        host TEXT NOT NULL,
        pu BIGINT NOT NULL,
        vm TEXT NOT NULL REFERENCES placements (vm) ON DELETE CASCADE,
        PRIMARY KEY (host, pu)
    );
    CREATE INDEX claims_vm ON claims (vm);
    CREATE TABLE counter (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        changed BIGINT NOT NULL
    );
    INSERT INTO counter (id, changed) VALUES (1, 0);",
    // Issue 46: the answers kept under clients' `Idempotency-Key`s, each
    // written in the transaction of the change it answered. `created` is
    // the writer's clock in milliseconds since the epoch (pruning and
    // expiry only: nothing orders by it).
    "CREATE TABLE idempotency (
        idem_key TEXT PRIMARY KEY,
        request TEXT NOT NULL,
        status BIGINT NOT NULL,
        answer TEXT NOT NULL,
        created BIGINT NOT NULL
    );
    CREATE INDEX idempotency_created ON idempotency (created);",
    // Issue 50: the change feed (`CHANGED_HOSTS`, read before every
    // decision) answered from the index alone. `removed` and `generation`
    // come after the topology in a host's row, and on SQLite a topology
    // of several KiB lies in overflow pages that a read walks page by
    // page to reach them: with the columns in the index a decision's read
    // of the feed touches a few index pages instead.
    "DROP INDEX hosts_changed;
    CREATE INDEX hosts_changed ON hosts (changed, name, removed, generation);",
    // The pod (its Kubernetes UID) a claim was made for, so that a pod
    // recreated under the same name is not taken for the one the claim
    // was kept for (docs/adapters.md). NULL for every other placement,
    // and for rows written before this column. And a host's planning
    // rules from its profile beside the reservations (`memory_kinds`,
    // `[qemu_overhead]`, as the agent registers them): NULL is the
    // defaults, as for every host registered before.
    "ALTER TABLE placements ADD COLUMN owner TEXT NULL;
    ALTER TABLE hosts ADD COLUMN rules TEXT NULL;",
];

/// The migrations a database at schema `version` has yet to run, or why
/// this numaplace cannot use it.
pub(crate) fn pending_migrations(version: i64) -> Result<&'static [&'static str], crate::StoreError> {
    usize::try_from(version).ok().and_then(|v| MIGRATIONS.get(v..)).ok_or_else(|| {
        crate::StoreError::Corrupt(format!(
            "schema version {version}, but this numaplace knows versions up to {}",
            MIGRATIONS.len()
        ))
    })
}

/// SQLite's change stamp: the first statement of each of its write
/// transactions. SQLite has one writer at a time anyway, so numbering
/// writes from one row costs nothing there, and the counter then grows in
/// commit order (a cache asking for the changes after N never misses one).
/// PostgreSQL does not use it: a row every writer locks would put every
/// replica's writes in one line; it stamps hosts with transaction ids
/// instead (see `postgres.rs`).
pub(crate) const COUNTER_BUMP: &str = "UPDATE counter SET changed = changed + 1 WHERE id = 1 RETURNING changed";
pub(crate) const COUNTER_GET: &str = "SELECT changed FROM counter WHERE id = 1";

pub(crate) const HOST_REMOVED: &str = "SELECT removed FROM hosts WHERE name = $1";
pub(crate) const HOST_REMOVED_GENERATION: &str = "SELECT removed, generation FROM hosts WHERE name = $1";
pub(crate) const HOST_UPSERT: &str =
    "INSERT INTO hosts (name, topology, reserved, labels, drained, removed, generation, changed, rules)
    VALUES ($1, $2, $3, $4, $5, FALSE, 1, $6, $7)
    ON CONFLICT (name) DO UPDATE SET
        topology = excluded.topology,
        reserved = excluded.reserved,
        rules = excluded.rules,
        labels = excluded.labels,
        drained = excluded.drained,
        removed = FALSE,
        generation = hosts.generation + 1,
        changed = excluded.changed
    RETURNING generation";
pub(crate) const HOST_SET_DRAINED: &str = "UPDATE hosts SET drained = $1, generation = generation + 1, changed = $2
    WHERE name = $3 AND NOT removed RETURNING generation";
pub(crate) const HOST_MARK_REMOVED: &str =
    "UPDATE hosts SET removed = TRUE, generation = generation + 1, changed = $1 WHERE name = $2 RETURNING generation";
pub(crate) const HOST_PLACEMENT_NAMES: &str = "SELECT vm FROM placements WHERE host = $1 ORDER BY vm";
/// Claims go with their placement (`ON DELETE CASCADE`): one statement,
/// and one round trip to PostgreSQL, per VM removed.
pub(crate) const HOST_DELETE_PLACEMENTS: &str = "DELETE FROM placements WHERE host = $1";

/// Columns in the order `row_to_host` functions read them.
pub(crate) const HOST_GET: &str =
    "SELECT name, topology, reserved, labels, drained, generation, changed, rules FROM hosts WHERE name = $1 AND NOT removed";
pub(crate) const HOSTS_ALL: &str =
    "SELECT name, topology, reserved, labels, drained, generation, changed, rules FROM hosts WHERE NOT removed";

/// Columns in the order `row_to_placement` functions read them.
pub(crate) const CLAIMS_ALL: &str = "SELECT host, pu, vm FROM claims";
pub(crate) const PLACEMENTS_ALL: &str = "SELECT vm, host, doc, request, grp, origin, pus, owner FROM placements";
pub(crate) const PLACEMENTS_OF_HOST: &str =
    "SELECT vm, host, doc, request, grp, origin, pus, owner FROM placements WHERE host = $1";
pub(crate) const PLACEMENT_GET: &str =
    "SELECT vm, host, doc, request, grp, origin, pus, owner FROM placements WHERE vm = $1";

/// The optimistic check: matches no row when the host moved on since the
/// decision, or is gone.
pub(crate) const COMMIT_BUMP: &str =
    "UPDATE hosts SET generation = generation + 1, changed = $1 WHERE name = $2 AND generation = $3 AND NOT removed";
/// As [`COMMIT_BUMP`], for a change that adds VMs: a drained host takes none.
pub(crate) const COMMIT_BUMP_UNDRAINED: &str = "UPDATE hosts SET generation = generation + 1, changed = $1
    WHERE name = $2 AND generation = $3 AND NOT removed AND NOT drained";
pub(crate) const VM_DELETE: &str = "DELETE FROM placements WHERE vm = $1 AND host = $2";
pub(crate) const PLACEMENT_INSERT: &str =
    "INSERT INTO placements (vm, host, doc, request, grp, origin, pus, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
pub(crate) const CLAIM_INSERT: &str = "INSERT INTO claims (host, pu, vm) VALUES ($1, $2, $3)";

pub(crate) const KEY_INSERT: &str =
    "INSERT INTO idempotency (idem_key, request, status, answer, created) VALUES ($1, $2, $3, $4, $5)";
/// A key's answer, unless it is older than `$2` (expired, not yet pruned).
pub(crate) const KEY_GET: &str =
    "SELECT idem_key, request, status, answer FROM idempotency WHERE idem_key = $1 AND created >= $2";
/// Keys past their time.
pub(crate) const KEYS_PRUNE_OLD: &str = "DELETE FROM idempotency WHERE created < $1";
/// Keys beyond the newest `$1`.
pub(crate) const KEYS_PRUNE_MANY: &str = "DELETE FROM idempotency
    WHERE created < (SELECT created FROM idempotency ORDER BY created DESC LIMIT 1 OFFSET $1)";

pub(crate) const CHANGED_HOSTS: &str = "SELECT name, removed, generation FROM hosts WHERE changed > $1";

/// Every statement above that takes parameters, for the numbering test.
#[cfg(test)]
pub(crate) const PARAMETERISED: &[&str] = &[
    SCHEMA_VERSION_SET,
    HOST_REMOVED,
    HOST_REMOVED_GENERATION,
    HOST_UPSERT,
    HOST_SET_DRAINED,
    HOST_MARK_REMOVED,
    HOST_PLACEMENT_NAMES,
    HOST_DELETE_PLACEMENTS,
    HOST_GET,
    PLACEMENTS_OF_HOST,
    PLACEMENT_GET,
    COMMIT_BUMP,
    COMMIT_BUMP_UNDRAINED,
    VM_DELETE,
    PLACEMENT_INSERT,
    CLAIM_INSERT,
    KEY_INSERT,
    KEY_GET,
    KEYS_PRUNE_OLD,
    KEYS_PRUNE_MANY,
    CHANGED_HOSTS,
];

/// Now, as `idempotency.created` counts.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The oldest `created` still answered.
pub(crate) fn oldest_answered(now: i64) -> i64 {
    now.saturating_sub(i64::try_from(crate::KEY_TTL.as_millis()).unwrap_or(i64::MAX))
}

/// How often a store prunes the keys (milliseconds): often enough that
/// the table stays near its bounds, rarely enough to cost nothing.
pub(crate) const PRUNE_EVERY_MS: i64 = 60_000;

/// A stored status back as a status.
pub(crate) fn status_from(key: &str, status: i64) -> Result<u16, crate::StoreError> {
    u16::try_from(status)
        .map_err(|_| crate::StoreError::Corrupt(format!("idempotency key {key:?} has status {status}")))
}

/// The PU list as stored in `placements.pus`.
pub(crate) fn pus_to_text(pus: &[u32]) -> String {
    let mut s = String::with_capacity(pus.len() * 3);
    for (i, pu) in pus.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&pu.to_string());
    }
    s
}

/// Reads `placements.pus` back.
pub(crate) fn pus_from_text(vm: &str, text: &str) -> Result<Vec<u32>, crate::StoreError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|p| {
            p.parse::<u32>().map_err(|_| crate::StoreError::Corrupt(format!("placement {vm} has PU list {text:?}")))
        })
        .collect()
}

pub(crate) fn labels_to_text(labels: &std::collections::BTreeMap<String, String>) -> Result<String, crate::StoreError> {
    serde_json::to_string(labels).map_err(|e| crate::StoreError::Database(format!("cannot encode labels: {e}")))
}

pub(crate) fn labels_from_text(
    host: &str,
    text: &str,
) -> Result<std::collections::BTreeMap<String, String>, crate::StoreError> {
    serde_json::from_str(text).map_err(|e| crate::StoreError::Corrupt(format!("host {host} has labels {text:?}: {e}")))
}

pub(crate) fn origin_from_text(vm: &str, text: &str) -> Result<crate::Origin, crate::StoreError> {
    crate::Origin::from_name(text)
        .ok_or_else(|| crate::StoreError::Corrupt(format!("placement {vm} has origin {text:?}")))
}

/// The order `commit` takes hosts in, after checking each appears once
/// (a second change for a host would fail on the generation the first
/// one bumped, which would read as a conflict the caller cannot fix).
pub(crate) fn commit_order(changes: &[crate::HostChange]) -> Result<Vec<&crate::HostChange>, crate::StoreError> {
    let mut order: Vec<&crate::HostChange> = changes.iter().collect();
    order.sort_by(|a, b| a.host.cmp(&b.host));
    for pair in order.windows(2) {
        if pair[0].host == pair[1].host {
            return Err(crate::StoreError::Database(format!("host {} appears twice in one commit", pair[0].host)));
        }
    }
    for change in &order {
        if let Some(p) = change.add.iter().find(|p| p.host != change.host) {
            return Err(crate::StoreError::Database(format!(
                "placement {} names host {} in a change to host {}",
                p.vm, p.host, change.host
            )));
        }
    }
    Ok(order)
}

/// A row of `claims` as read back, its PU checked to be a CPU number.
pub(crate) fn claim(host: String, pu: i64, vm: String) -> Result<(String, u32, String), crate::StoreError> {
    match u32::try_from(pu) {
        Ok(pu) => Ok((host, pu, vm)),
        Err(_) => Err(crate::StoreError::Corrupt(format!("claim of PU {pu} on host {host}"))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// The change feed, read before every decision, is answered from the
    /// `hosts_changed` index alone: on SQLite a host row's `removed` and
    /// `generation` lie past its topology's overflow pages (issue 50).
    #[test]
    fn the_change_feed_reads_only_its_index() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for migration in super::MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", super::CHANGED_HOSTS)).unwrap();
        let plan: Vec<String> = st.query_map([0], |r| r.get(3)).unwrap().map(Result::unwrap).collect();
        assert_eq!(plan, ["SEARCH hosts USING COVERING INDEX hosts_changed (changed>?)"]);
    }
}
