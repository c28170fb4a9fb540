//! The claims: how a decision made on the cache becomes a committed
//! change. One decision at a time per process ([`Claims::decide`]'s
//! lock), recorded in the cache before it commits ([`Claims::speculate`])
//! and committed behind the claims in flight on its host
//! ([`Claims::settle`]); a lost race decided again ([`Claims::with_retries`],
//! the one retry loop); a commit whose outcome is unknown asked after in
//! the background ([`Claims::resolve_later`]); requests under one
//! `Idempotency-Key` run one at a time and a kept answer is given again
//! ([`Claims::keyed`]).
//!
//! The counters of this layer (claims, commit latency, conflicts) are
//! counted here; every other metric and every audit line is the
//! commands' (`mod.rs`, `hosts.rs`, `placements.rs`, `report.rs`).

use super::cache::Cache;
use super::locks::lock;
use crate::command::IdempotencyKey;
use crate::error::{ApiError, Change, Unavailable};
use crate::metrics::Metrics;
use numaplace_fleet::{Choice, Constraints, Fleet, SelectError, Spread};
use numaplace_plan::Request;
use numaplace_store::{Answer, HostChange, Store, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Decisions remade after conflicts before the request gives up (503):
/// enough for heavy contention between replicas, bounded so a client
/// always gets an answer.
pub const MAX_ATTEMPTS: usize = 16;

/// How long a change answered `outcome-unknown` is asked after, in the
/// background, before the server gives up on writing its audit line: a
/// database back within this time tells.
pub const RESOLVE_LATER_FOR: Duration = Duration::from_secs(600);

/// The claims of this process.
pub struct Claims {
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    // Decisions of this process are made one at a time, each recorded in
    // the cache before the next is made: they would otherwise all pick the
    // same best host and conflict with each other. A placement's or a
    // delete's commit runs after the lock is released, so claims decided
    // one after another are committed together (SQLite's group commit);
    // see `in_flight`. This is per process, not global: replicas sharing
    // PostgreSQL claim in parallel (the store serialises writes per host
    // only), and generations guard against each other's claims.
    claim: Mutex<()>,
    // Per host, the last claim recorded in the cache and not yet answered
    // by the store. A decision made on a cache holding uncommitted claims
    // commits only after they committed (`settle`): its generation was
    // predicted from theirs, and without the chain a claim that failed
    // could let one made on top of it match another writer's generation.
    in_flight: Mutex<BTreeMap<String, Arc<Ticket>>>,
    // The `Idempotency-Key`s of requests running in this process: a retry
    // sent while its first is still running waits for it, then is
    // answered what it was (see `keyed`).
    keys: Mutex<BTreeSet<String>>,
    keys_freed: Condvar,
    // How many servers share the database (see `spread_k`), and the state
    // of the generator that picks among the best hosts.
    replicas: usize,
    rng: AtomicU64,
}

/// What one attempt of a change ended with (see [`Claims::with_retries`]).
pub enum Step<T> {
    /// Decided and committed (or nothing to commit): the answer.
    Done(T),
    /// Another writer got there first (on this host, when known): decide
    /// again.
    Stale(Option<String>),
}

/// One attempt of a change, as [`Claims::with_retries`] hands it over.
pub struct Attempt {
    /// Its number, from 1.
    pub n: usize,
    /// The hosts whose claims conflicted in the attempts before, in the
    /// order they did.
    pub conflicted: Vec<String>,
}

/// How a commit ended, when the store did not fail.
pub enum Commit {
    /// Written.
    Done,
    /// Another writer changed this host since the decision: nothing was
    /// written.
    Lost(String),
    /// The connection was lost after COMMIT was sent, and whether this
    /// transaction committed could not be found out in time.
    Unknown(i64),
}

/// A claim recorded in the cache and not yet committed (see
/// [`Claims::speculate`]).
pub struct InFlight {
    host: String,
    ticket: Arc<Ticket>,
    // The claim in flight on the host before this one, if any.
    after: Option<Arc<Ticket>>,
}

/// Whether a claim in flight committed, once the store answered.
#[derive(Default)]
pub struct Ticket {
    committed: Mutex<Option<bool>>,
    done: Condvar,
}

impl Ticket {
    fn finish(&self, committed: bool) {
        *lock(&self.committed) = Some(committed);
        self.done.notify_all();
    }

    /// Waits for the store's answer: whether the claim committed.
    pub fn wait(&self) -> bool {
        let mut committed = lock(&self.committed);
        loop {
            if let Some(c) = *committed {
                return c;
            }
            committed = self.done.wait(committed).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A key marked running in this process; released (and its waiters
/// woken) on drop.
pub struct KeyHeld<'a> {
    claims: &'a Claims,
    key: String,
}

impl Drop for KeyHeld<'_> {
    fn drop(&mut self) {
        lock(&self.claims.keys).remove(&self.key);
        self.claims.keys_freed.notify_all();
    }
}

impl Claims {
    /// The claims of a server sharing `store` with `replicas - 1` others;
    /// `seed` varies the pick among the best hosts between replicas.
    pub fn new(store: Arc<dyn Store>, metrics: Arc<Metrics>, replicas: usize, seed: u64) -> Claims {
        Claims {
            store,
            metrics,
            claim: Mutex::new(()),
            in_flight: Mutex::new(BTreeMap::new()),
            keys: Mutex::new(BTreeSet::new()),
            keys_freed: Condvar::new(),
            replicas: replicas.max(1),
            rng: AtomicU64::new(seed | 1),
        }
    }

    /// The lock under which this process decides, one decision at a time.
    pub fn decide(&self) -> MutexGuard<'_, ()> {
        lock(&self.claim)
    }

    /// Whether this server has a claim in flight on `host`.
    pub fn in_flight_on(&self, host: &str) -> bool {
        lock(&self.in_flight).contains_key(host)
    }

    /// The claim in flight on `host`, if any.
    pub fn last_on(&self, host: &str) -> Option<Arc<Ticket>> {
        lock(&self.in_flight).get(host).cloned()
    }

    /// Decides and commits a change, deciding again each time its commit
    /// loses a race with another writer (a host's generation moved, a PU
    /// claimed meanwhile), at most [`MAX_ATTEMPTS`] times; then the
    /// request is answered 503. `attempt` gets the attempt's number and
    /// the hosts whose claims conflicted in the earlier attempts (a
    /// decision leaves them out: see [`Claims::select`]), and answers
    /// [`Step::Stale`] for a lost race: the one retry loop of the service.
    /// (The 503 is logged where it becomes a status.)
    pub fn with_retries<T>(
        &self,
        change: Change,
        mut attempt: impl FnMut(&Attempt) -> Result<Step<T>, ApiError>,
    ) -> Result<T, ApiError> {
        let mut now = Attempt { n: 1, conflicted: Vec::new() };
        while now.n <= MAX_ATTEMPTS {
            match attempt(&now)? {
                Step::Done(t) => return Ok(t),
                Step::Stale(host) => {
                    self.metrics.conflict();
                    if let Some(host) = host {
                        if !now.conflicted.contains(&host) {
                            now.conflicted.push(host);
                        }
                    }
                }
            }
            now.n += 1;
        }
        Err(ApiError::Unavailable(Unavailable::Contended { change, attempts: MAX_ATTEMPTS }))
    }

    /// Commits `changes` in one transaction, with the answer kept under
    /// the request's key if any: [`Commit::Lost`] naming the host when
    /// another writer got there first (decide again), [`Commit::Unknown`]
    /// when whether it committed could not be found out, a store failure
    /// otherwise.
    pub fn commit(&self, changes: &[HostChange], answer: Option<&Answer>) -> Result<Commit, ApiError> {
        let started = Instant::now();
        self.metrics.claim();
        let committed = self.store.commit_answered(changes, answer);
        self.metrics.commit(started.elapsed());
        match committed {
            Ok(()) => Ok(Commit::Done),
            Err(StoreError::Conflict { host } | StoreError::Claimed { host, .. }) => Ok(Commit::Lost(host)),
            Err(StoreError::OutcomeUnknown { transaction }) => Ok(Commit::Unknown(transaction)),
            Err(e) => Err(e.into()),
        }
    }

    /// After a change answered `outcome-unknown`: asks the store, in the
    /// background, whether its transaction committed (for at most
    /// [`RESOLVE_LATER_FOR`]), and runs `audit` (in the request's span) if
    /// it did, so every change the database holds has its line, however
    /// late.
    pub fn resolve_later(&self, transaction: i64, audit: impl FnOnce() + Send + 'static) {
        let store = self.store.clone();
        let span = tracing::Span::current();
        let resolving = std::thread::Builder::new().name("outcome".into()).spawn(move || {
            let _in = span.enter();
            let start = Instant::now();
            while start.elapsed() < RESOLVE_LATER_FOR {
                match store.outcome(transaction) {
                    Ok(Some(true)) => return audit(),
                    Ok(Some(false)) => {
                        tracing::info!(transaction, "the change answered outcome-unknown was not made");
                        return;
                    }
                    _ => std::thread::sleep(Duration::from_secs(1)),
                }
            }
            tracing::error!(
                transaction,
                "whether the change answered outcome-unknown was made is still unknown after {} s; no audit line",
                RESOLVE_LATER_FOR.as_secs()
            );
        });
        if let Err(e) = resolving {
            tracing::error!(transaction, "cannot ask after the change answered outcome-unknown: {e}");
        }
    }

    /// Runs a change under the client's `Idempotency-Key` (`run` gets the
    /// key to keep its answer under, in its commit's transaction): a key
    /// already kept is answered what it was (`replay`), and nothing is
    /// done; one kept for another request is refused (422). A request
    /// refused while another with its key committed (through another
    /// replica) is answered that one's answer. Requests with one key run
    /// one at a time in this process.
    pub fn keyed<T>(
        &self,
        key: Option<&IdempotencyKey>,
        replay: impl Fn(&Answer) -> Result<T, ApiError>,
        run: impl FnOnce(Option<&IdempotencyKey>) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let Some(key) = key else { return run(None) };
        let _held = self.hold_key(&key.key)?;
        let kept = |key: &IdempotencyKey| -> Result<Option<T>, ApiError> {
            match self.store.answer(&key.key)? {
                Some(a) if a.request == key.request => replay(&a).map(Some),
                Some(a) => Err(ApiError::KeyReused { key: key.key.clone(), first: key_request(&a.request) }),
                None => Ok(None),
            }
        };
        if let Some(t) = kept(key)? {
            return Ok(t);
        }
        match run(Some(key)) {
            Ok(t) => Ok(t),
            // Nothing written by this one; maybe the first one's answer is
            // there now.
            Err(e @ (ApiError::Conflict(_) | ApiError::NotFound(_) | ApiError::NoHost(_) | ApiError::Internal(_))) => {
                match kept(key) {
                    Ok(Some(t)) => Ok(t),
                    Ok(None) | Err(_) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Marks `key` running in this process, once no other request holds it
    /// (waiting at most until the request's deadline).
    fn hold_key(&self, key: &str) -> Result<KeyHeld<'_>, ApiError> {
        let mut held = lock(&self.keys);
        while held.contains(key) {
            let wait = numaplace_store::deadline::current().map_or(Duration::from_secs(5), |d| d.remaining());
            if wait.is_zero() {
                return Err(ApiError::DeadlineExceeded);
            }
            held = self.keys_freed.wait_timeout(held, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
        held.insert(key.to_string());
        Ok(KeyHeld { claims: self, key: key.to_string() })
    }

    /// Decides where `request` goes for the `attempt`-th time: the fleet's
    /// choice spread among the best hosts ([`Claims::spread_for`]), away
    /// from the hosts that conflicted and those with this server's claims
    /// in flight ([`select_avoiding`]). Placements and moves both decide
    /// through it.
    pub fn select(
        &self,
        fleet: &Fleet,
        request: &Request,
        constraints: &Constraints,
        attempt: &Attempt,
    ) -> Result<Choice, SelectError> {
        // The hosts this server has claims in flight on (decided, not yet
        // committed). A claim decided on top of them must wait for their
        // commits, so a decision goes elsewhere when another host takes
        // it: without this, one server filling its best host by
        // cores-first chained its claims on it one commit after another
        // (PostgreSQL, one server, 10,000 hosts: 600 placements/s against
        // 1,270/s at 100,000 hosts, where the best hosts were still empty).
        let busy: Vec<String> = lock(&self.in_flight).keys().cloned().collect();
        let spread = self.spread_for(fleet.len(), attempt.n);
        select_avoiding(fleet, request, constraints, attempt, &busy, spread)
    }

    /// Where the `attempt`-th decision of a request starts, in a fleet of
    /// `hosts`: at random among the best [`spread_among`] hosts (given
    /// this server's claims in flight), each retry among twice as many (up
    /// to 4 times), so replicas that keep colliding move apart.
    fn spread_for(&self, hosts: usize, attempt: usize) -> Spread {
        let in_flight = lock(&self.in_flight).len();
        let among = spread_among(hosts, self.replicas, in_flight) << (attempt.saturating_sub(1)).min(2);
        if among <= 1 {
            return Spread::default();
        }
        // xorshift64: enough to keep replicas apart, no dependency.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        Spread::among(among, x)
    }

    /// Applies a claim to the cache before it is committed (`update`, when
    /// the cache holds `host` at `generation`, the one the claim expects)
    /// and puts it in flight behind the host's last claim in flight. Called
    /// under the decision lock.
    pub fn speculate(
        &self,
        cache: &Cache,
        host: &str,
        generation: i64,
        update: impl FnOnce(&mut Fleet) -> bool,
    ) -> InFlight {
        let mut fleet = cache.fleet_mut();
        if fleet.host(host).map(|h| h.generation) == Some(generation) {
            // Not applied (the cache moved meanwhile): the claim then
            // conflicts, and the cache is read again.
            update(&mut fleet);
        }
        drop(fleet);
        let ticket = Arc::new(Ticket::default());
        let after = lock(&self.in_flight).insert(host.to_string(), ticket.clone());
        InFlight { host: host.to_string(), ticket, after }
    }

    /// Commits a claim put in flight by `speculate`, after the claim before
    /// it on the host committed (if that one failed, this one was decided
    /// on a cache that will not be: it is lost without a commit). A claim
    /// that is not committed takes itself, and any decided on top of it,
    /// out of the cache by reading the host again. Called without the
    /// decision lock.
    pub fn settle(
        &self,
        cache: &Cache,
        flight: InFlight,
        changes: &[HostChange],
        answer: Option<&Answer>,
    ) -> Result<Commit, ApiError> {
        let outcome = match &flight.after {
            Some(before) if !before.wait() => Ok(Commit::Lost(flight.host.clone())),
            _ => self.commit(changes, answer),
        };
        let committed = matches!(outcome, Ok(Commit::Done));
        // Answered first: a move waiting for it holds the decision lock.
        flight.ticket.finish(committed);
        if committed {
            let mut in_flight = lock(&self.in_flight);
            if in_flight.get(&flight.host).is_some_and(|t| Arc::ptr_eq(t, &flight.ticket)) {
                in_flight.remove(&flight.host);
            }
            return outcome;
        }
        let _claim = lock(&self.claim);
        lock(&self.in_flight).remove(&flight.host);
        // The cache must lose the claim whatever the request's deadline;
        // when the store cannot be read, the host leaves the cache until
        // `sync` reads it.
        if numaplace_store::deadline::unbounded(|| cache.reload(&flight.host)).is_err() {
            cache.forget(&flight.host);
        }
        outcome
    }

    /// Records a claimed choice in the cache at the host's next
    /// generation; if the cache moved meanwhile, reads the host again.
    pub fn record(&self, cache: &Cache, choice: &Choice, group: Option<&str>) {
        let mut fleet = cache.fleet_mut();
        let current = fleet.host(&choice.host).map(|h| h.generation);
        let ok = current == Some(choice.generation)
            && fleet.place(&choice.host, choice.generation + 1, &choice.decision.placement, group).is_ok();
        drop(fleet);
        if !ok {
            // The store holds the truth; a failure here only leaves the
            // cache stale until the next sync.
            let _ = cache.reload(&choice.host);
        }
    }
}

/// The method and path of a kept request (its body's digest left out),
/// for the refusal of a key sent with another request.
fn key_request(request: &str) -> String {
    request.split(' ').take(2).collect::<Vec<_>>().join(" ")
}

/// Among how many of the best hosts (in rank order, after the filters)
/// each replica picks one at random, for a fleet of `hosts` shared by
/// `replicas` servers.
///
/// Each server decides one request at a time, so while it claims, at most
/// `replicas - 1` other decisions are in flight; if each picks uniformly
/// among the same `k` hosts, the chance that one of them picked the same
/// host is about `(replicas - 1) / k`. `k = 20 x (replicas - 1)` keeps it
/// near 5% when every server is busy, and below it otherwise (3 replicas:
/// 40 hosts; 5: 80). The spread is bounded by a sixteenth of the fleet
/// (and at least `replicas + 1` hosts when the fleet has them), so a small
/// fleet is still filled from its best hosts: what a spread gives up is
/// packing, since the hosts passed over are slightly less full. One server
/// alone always takes the best host.
pub fn spread_k(hosts: usize, replicas: usize) -> usize {
    if replicas <= 1 {
        return 1;
    }
    let bound = (hosts / 16).max(hosts.min(replicas + 1)).max(1);
    (20 * (replicas - 1)).min(bound)
}

/// [`spread_k`] widened for a server with `in_flight` claims not yet
/// committed (on that many hosts): its decisions no longer wait for its
/// commits, so the other replicas have about as many decisions in flight
/// each, and the spread grows with them to keep the chance of a collision
/// where `spread_k` puts it (3 replicas with 4 claims in flight each: 200
/// hosts). Bounded by a sixteenth of the fleet, as `spread_k` is; one
/// server alone still takes the best host (its own claims in flight are
/// in its cache).
pub fn spread_among(hosts: usize, replicas: usize, in_flight: usize) -> usize {
    let k = spread_k(hosts, replicas);
    if k <= 1 {
        return k;
    }
    k.saturating_mul(in_flight + 1).min((hosts / 16).max(k))
}

/// [`Fleet::select_spread`] with the hosts that conflicted this change's
/// earlier claims left out (another replica just took room there, and
/// ranking hosts as this one does, will likely take more), and those with
/// this server's claims in flight (`busy`: a claim there waits for theirs
/// to commit); when only they can take it, chosen again with them (a
/// conflict says the host changed, not that it is full).
fn select_avoiding(
    fleet: &Fleet,
    request: &Request,
    constraints: &Constraints,
    attempt: &Attempt,
    busy: &[String],
    spread: Spread,
) -> Result<Choice, SelectError> {
    if attempt.conflicted.is_empty() && busy.is_empty() {
        return fleet.select_spread(request, constraints, spread);
    }
    let mut avoiding = constraints.clone();
    avoiding.avoid.extend(attempt.conflicted.iter().cloned());
    avoiding.avoid.extend(busy.iter().filter(|h| !attempt.conflicted.contains(h)).cloned());
    match fleet.select_spread(request, &avoiding, spread) {
        Err(SelectError::NoHost(_)) => fleet.select_spread(request, constraints, spread),
        other => other,
    }
}
