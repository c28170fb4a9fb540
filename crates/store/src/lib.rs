//! The fleet store: the only crate that knows SQL. Hosts, the placements
//! on them and the dedicated CPUs each placement claims live in SQLite
//! (a file, the default) or PostgreSQL (several `serve` replicas), with
//! one schema and one set of migrations for both.
//!
//! Claims are guarded as OpenStack Placement guards resource providers:
//! every host row carries a `generation`, and [`Store::commit`] applies a
//! set of per-host changes only if every host's generation is still the
//! one the decision was made against, bumping each. A stale decision is a
//! [`StoreError::Conflict`] the caller remakes against fresh state; it is
//! never a double booking. The `claims` table's primary key (host, PU) is
//! a second guard the database itself enforces.
//!
//! The store holds documents as text (topology JSON, placement JSON) and
//! never interprets them: what they mean is the fleet crate's business.

use std::collections::BTreeMap;

pub mod deadline;
mod postgres;
mod schema;
mod sqlite;
pub mod testing;

pub use crate::postgres::PgStore;
pub use crate::sqlite::SqliteStore;

/// A host as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRow {
    /// Unique name.
    pub name: String,
    /// The topology, as numaplace's topology JSON.
    pub topology: String,
    /// The reservations, as the JSON of a topology's `reserved` object.
    pub reserved: Option<String>,
    /// Free-form labels for request constraints.
    pub labels: BTreeMap<String, String>,
    /// Drained hosts take no new VMs.
    pub drained: bool,
    /// Bumped by every change to the host or its placements.
    pub generation: i64,
    /// The stamp of the host's last change, as [`Store::changed_since`]
    /// compares it (SQLite: a store-wide counter; PostgreSQL: the id of
    /// the transaction that wrote it).
    pub changed: i64,
    /// The host's planning rules beside its reservations (the profile's
    /// `memory_kinds` and `[qemu_overhead]`), as the service's JSON;
    /// `None`: the defaults. Stored, never interpreted here.
    pub rules: Option<String>,
}

/// Who put a placement there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Placed by the service.
    Service,
    /// Reported by the host's agent: a VM the service did not place.
    Agent,
}

impl Origin {
    /// The name stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Service => "service",
            Origin::Agent => "agent",
        }
    }

    /// The origin a stored name stands for.
    pub fn from_name(s: &str) -> Option<Origin> {
        match s {
            "service" => Some(Origin::Service),
            "agent" => Some(Origin::Agent),
            _ => None,
        }
    }
}

/// A placement as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementRow {
    /// The VM's name, unique over the fleet.
    pub vm: String,
    /// The host it is on.
    pub host: String,
    /// The placement, as one element of a plan document's `placements`.
    pub doc: String,
    /// The request it was made from (JSON), when the service made it.
    pub request: Option<String>,
    /// Anti-affinity group: no two VMs of a group on one host.
    pub group: Option<String>,
    /// Who put it there.
    pub origin: Origin,
    /// The dedicated PUs it claims (one row each in `claims`).
    pub pus: Vec<u32>,
    /// Whom it was claimed for, when the claimer said (the Kubernetes
    /// extender's bind: the pod's UID). Stored, never interpreted here.
    pub owner: Option<String>,
}

/// One host's part of a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostChange {
    /// The host.
    pub host: String,
    /// The generation the decision was made against.
    pub generation: i64,
    /// VMs (placed on this host) to delete first.
    pub remove: Vec<String>,
    /// Placements to add (each `host` equal to [`HostChange::host`]).
    pub add: Vec<PlacementRow>,
}

/// The answer a change was given, kept under the client's
/// `Idempotency-Key` in the change's own transaction: a retry with the same
/// key is answered this again, and changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The client's key (1 to [`MAX_KEY`] bytes).
    pub key: String,
    /// What the request was (method, path and a digest of its body): a key
    /// sent again with another request is refused, not answered this.
    pub request: String,
    /// The HTTP status answered.
    pub status: u16,
    /// The body answered (empty for a 204).
    pub body: String,
}

/// The longest `Idempotency-Key` kept.
pub const MAX_KEY: usize = 255;
/// How long a key's answer is kept: a client retries within seconds or
/// minutes; an hour covers a client that was itself restarted.
pub const KEY_TTL: std::time::Duration = std::time::Duration::from_secs(3600);
/// At most this many keys are kept (the oldest go first): with answers of
/// a few KiB, a bounded table of some hundreds of MiB at most, whatever
/// the rate of keyed requests.
pub const MAX_KEYS: i64 = 100_000;

/// What a host removal removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The VMs removed with it, by name, as the transaction saw them.
    pub vms: Vec<String>,
    /// The generation the removal gave the host's row.
    pub generation: i64,
}

/// What a guarded write expects of the host it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Anything: write whatever is there.
    Any,
    /// No live host of that name (never registered, or removed).
    Absent,
    /// A live host at this generation.
    Generation(i64),
}

impl Expect {
    /// Whether a host found as `(removed, generation)` (or not found)
    /// is what was expected; [`StoreError::Conflict`] when not.
    pub(crate) fn check(self, name: &str, found: Option<(bool, i64)>) -> Result<(), StoreError> {
        let live = found.filter(|(removed, _)| !removed).map(|(_, g)| g);
        let ok = match self {
            Expect::Any => true,
            Expect::Absent => live.is_none(),
            Expect::Generation(g) => live == Some(g),
        };
        if ok {
            Ok(())
        } else {
            Err(StoreError::Conflict { host: name.to_string() })
        }
    }
}

/// What the store refuses, or fails at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A host's generation moved since the decision (or the host is
    /// gone, or drained while adding): remake the decision.
    #[error("host {host} changed since the decision was made")]
    Conflict {
        /// The host.
        host: String,
    },
    /// A VM of that name is already placed.
    #[error("a VM named {vm} is already placed")]
    Duplicate {
        /// The VM.
        vm: String,
    },
    /// A PU claimed twice (the database refused it).
    #[error("CPU {pu} of host {host} is already claimed")]
    Claimed {
        /// The host.
        host: String,
        /// The PU.
        pu: u32,
    },
    /// No such host or VM.
    #[error("no {0}")]
    NotFound(String),
    /// The host still has placements.
    #[error("host {host} still holds {count} {}", if *.count == 1 { "VM" } else { "VMs" })]
    InUse {
        /// The host.
        host: String,
        /// How many placements.
        count: usize,
    },
    /// The database cannot be reached (try again later: HTTP 503).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database did not answer within a statement or lock timeout
    /// (try again later: HTTP 503).
    #[error("database timed out: {0}")]
    TimedOut(String),
    /// The connection was lost after COMMIT was sent, and whether the
    /// transaction committed could not be found out within the request's
    /// deadline: it may or may not have. [`Store::outcome`] asks again.
    #[error(
        "the connection to the database was lost while transaction {transaction} committed, and whether it did could not be found out in time"
    )]
    OutcomeUnknown {
        /// The transaction, as [`Store::outcome`] takes it.
        transaction: i64,
    },
    /// An `Idempotency-Key` already kept (by a request that committed
    /// while this one ran): nothing of this commit was written; the
    /// answer kept is under [`Store::answer`].
    #[error("the idempotency key {key:?} is already used")]
    KeyUsed {
        /// The key.
        key: String,
    },
    /// The request's deadline ([`deadline::scope`]) passed before the
    /// call could be done, or before its commit: nothing was written.
    #[error("the request's deadline passed before the database answered; nothing was written")]
    DeadlineExceeded,
    /// A stored value is not what this version writes.
    #[error("database holds an unexpected value: {0}")]
    Corrupt(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(String),
}

/// A watermark to ask from next time, and the hosts changed after the
/// one asked about, each with its generation (`None`: removed).
pub type Changes = (i64, Vec<(String, Option<i64>)>);

/// What the fleet service needs from a database. Every method is one
/// transaction; implementations are shared between threads.
pub trait Store: Send + Sync {
    /// Inserts a host or replaces its topology, reservations and labels
    /// (placements stay; a removed host comes back empty). Bumps its
    /// generation; returns the new one.
    fn put_host(&self, host: &HostRow) -> Result<i64, StoreError> {
        self.put_host_if(host, Expect::Any)
    }
    /// [`Store::put_host`] only while the host is as the caller last saw
    /// it ([`StoreError::Conflict`] otherwise), so a description checked
    /// against the host's placements cannot replace one that gained a
    /// placement in between.
    fn put_host_if(&self, host: &HostRow, expect: Expect) -> Result<i64, StoreError>;
    /// Drains or undrains a host; bumps its generation.
    fn set_drained(&self, name: &str, drained: bool) -> Result<i64, StoreError>;
    /// Removes a host that holds no placements ([`StoreError::InUse`]
    /// otherwise; `force` deletes its placements too). Returns the VMs
    /// removed with it, by name, as the transaction saw them (for the
    /// audit log: a list read before the call could miss one placed in
    /// between), and the host's new generation.
    fn remove_host(&self, name: &str, force: bool) -> Result<Removed, StoreError>;
    /// One host (removed ones are `None`).
    fn host(&self, name: &str) -> Result<Option<HostRow>, StoreError>;
    /// Every host, by name.
    fn hosts(&self) -> Result<Vec<HostRow>, StoreError>;
    /// Placements, by VM name, all or one host's.
    fn placements(&self, host: Option<&str>) -> Result<Vec<PlacementRow>, StoreError>;
    /// One placement.
    fn placement(&self, vm: &str) -> Result<Option<PlacementRow>, StoreError>;
    /// Every claimed PU as (host, PU, VM), sorted: what the database
    /// itself holds, for audits (no PU can appear twice on a host).
    fn claims(&self) -> Result<Vec<(String, u32, String)>, StoreError>;
    /// Applies every change or none: each host's generation must equal
    /// the one given (else [`StoreError::Conflict`]), a host that gets
    /// placements must not be drained, removed VMs must be on their host.
    /// Bumps each host's generation.
    fn commit(&self, changes: &[HostChange]) -> Result<(), StoreError> {
        self.commit_answered(changes, None)
    }
    /// [`Store::commit`], keeping `answer` under its key in the same
    /// transaction: the change and its answer are written together or
    /// not at all. A key already kept is [`StoreError::KeyUsed`], and
    /// nothing is written.
    fn commit_answered(&self, changes: &[HostChange], answer: Option<&Answer>) -> Result<(), StoreError>;
    /// The answer kept under an `Idempotency-Key`, if any (keys older
    /// than [`KEY_TTL`] are not answered, even before they are pruned).
    fn answer(&self, key: &str) -> Result<Option<Answer>, StoreError>;
    /// Whether the transaction of a [`StoreError::OutcomeUnknown`]
    /// committed: `Some(true)` or `Some(false)` once known, `None` while
    /// the database cannot say (unreachable, or the transaction still
    /// ending).
    fn outcome(&self, transaction: i64) -> Result<Option<bool>, StoreError> {
        Err(StoreError::Database(format!("transaction {transaction}: this store never leaves an outcome unknown")))
    }
    /// The change feed: a watermark, and every host changed after `since`
    /// (a watermark this returned before, or 0 for all) with each one's
    /// generation (`None`: removed). Asking again from the watermark
    /// returned misses no change committed since, whichever replica made
    /// it; a host may be reported again at the same generation, so a cache
    /// skips the hosts it already holds at that generation (its own
    /// commits). No write serialises through a shared row to make this
    /// hold on PostgreSQL (see `postgres.rs`).
    fn changed_since(&self, since: i64) -> Result<Changes, StoreError>;
    /// Whether the database answers: one cheap query (for `/readyz`).
    fn ping(&self) -> Result<(), StoreError> {
        self.changed_since(i64::MAX).map(|_| ())
    }
}

/// Opens a store from `sqlite:PATH`, a bare path, or `postgres://...`
/// (also `postgresql://`), creating or migrating the schema.
pub fn open(url: &str) -> Result<Box<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Box::new(PgStore::connect(url)?))
    } else {
        let path = url.strip_prefix("sqlite:").unwrap_or(url);
        Ok(Box::new(SqliteStore::open(path)?))
    }
}
