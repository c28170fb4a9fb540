//! The service's logic without HTTP: a cache of the fleet kept in step
//! with the store, decisions made on the cache and claimed in the store
//! under each host's generation, retried on conflict.
//!
//! Why a cache: ranking 10,000 hosts must not read 10,000 rows per
//! request. Why it is safe: the cache only proposes; the store accepts a
//! claim only if the host's generation is the one the decision saw, so a
//! stale cache costs a retry, never a double booking (OpenStack
//! Placement's resource-provider generations). Before each decision the
//! cache reads which hosts changed since it last looked (one indexed
//! query), so replicas sharing a PostgreSQL database see each other's
//! claims before deciding, not only after a conflict.

pub use crate::command::HostFilter;
use crate::command::{Delete, Drain, IdempotencyKey, Move, Patch, Place, Register, RemoveHost, Report, Reserve};
pub use crate::error::{ApiError, Change, Conflict, CpuRole, Missing, Unavailable, NOT_PLACED_HERE, PINNED_CPU};
use crate::logging::audit;
use crate::metrics::Metrics;
use numaplace_emit::text::plural;
use numaplace_fleet::{Choice, Constraints, Fleet, FleetHost, SelectError, Spread};
use numaplace_plan::{
    state_of, CpuMode, GuestTopology, HostState, MemoryMode, Placement, Request, Reservations, StateError, VcpuPin,
};
use numaplace_store::{Answer, Expect, HostChange, HostRow, Origin, PlacementRow, Store, StoreError};
use numaplace_topo::Topology;
use numaplace_topo::{CpuSet, NodeId};
use numaplace_wire::fleet::{
    ConstraintsDoc, DomainsAnswerDoc, HostDetailDoc, HostDoc, LinksDoc, LocalitySampleDoc, PlacedDoc, SkipDoc,
};
use numaplace_wire::plan::{PlacementDoc, ReservedDoc};
use numaplace_wire::profile::{Document, Given, Overrides};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Decisions remade after conflicts before the request gives up (503):
/// enough for heavy contention between replicas, bounded so a client
/// always gets an answer.
pub const MAX_ATTEMPTS: usize = 16;

/// How long a change answered `outcome-unknown` is asked after, in the
/// background, before the server gives up on writing its audit line: a
/// database back within this time tells.
pub const RESOLVE_LATER_FOR: Duration = Duration::from_secs(600);

/// The result of a placement call.
#[derive(Clone, Debug)]
pub struct Placed {
    /// The document answered.
    pub doc: PlacedDoc,
    /// The answer kept under the request's `Idempotency-Key`, given again
    /// (nothing was done this time).
    pub replayed: bool,
}

/// The fleet service.
pub struct Service {
    store: Arc<dyn Store>,
    fleet: RwLock<Fleet>,
    seen: Mutex<i64>,
    // Hosts of one kind share one parsed topology: 10,000 hosts of three
    // kinds hold three topologies, keyed by their JSON.
    kinds: Mutex<BTreeMap<String, Arc<Topology>>>,
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
    // commits only after they committed (`InFlight::settle`): its
    // generation was predicted from theirs, and without the chain a claim
    // that failed could let one made on top of it match another writer's
    // generation.
    in_flight: Mutex<BTreeMap<String, Arc<Ticket>>>,
    // The `Idempotency-Key`s of requests running in this process: a retry
    // sent while its first is still running waits for it, then is
    // answered what it was (see `Service::keyed`).
    keys: Mutex<std::collections::BTreeSet<String>>,
    keys_freed: Condvar,
    // Hosts dropped from the cache because a failed claim's host could not
    // be read again; `sync` reads them first.
    unread: Mutex<std::collections::BTreeSet<String>>,
    // How many servers share the database (see `spread_k`), and the state
    // of the generator that picks among the best hosts.
    replicas: usize,
    rng: AtomicU64,
    // The last rejections, worded, for the web view; and each host's last
    // agent report, summarised.
    recent: Mutex<std::collections::VecDeque<String>>,
    reports: Mutex<BTreeMap<String, String>>,
    locality: Mutex<BTreeMap<String, std::collections::VecDeque<LocalitySampleDoc>>>,
    /// Counters and histograms for `/metrics`.
    pub metrics: Metrics,
}

/// Rejections the web view lists.
const RECENT: usize = 20;
/// Locality samples kept per VM (two hours of 30 s agent rounds).
const SAMPLES: usize = 240;

impl Service {
    /// A service over a store, with its cache loaded. `replicas`: how many
    /// servers share the database (1: this one alone, which always takes
    /// the best host; more: each decision picks at random among the best
    /// [`spread_k`] hosts, or replicas would all choose the same host at
    /// once and conflict); `seed` varies the pick between replicas.
    pub fn new(store: Box<dyn Store>, replicas: usize, seed: u64) -> Result<Service, ApiError> {
        let svc = Service {
            store: Arc::from(store),
            keys: Mutex::new(std::collections::BTreeSet::new()),
            keys_freed: Condvar::new(),
            fleet: RwLock::new(Fleet::new()),
            seen: Mutex::new(0),
            kinds: Mutex::new(BTreeMap::new()),
            claim: Mutex::new(()),
            in_flight: Mutex::new(BTreeMap::new()),
            unread: Mutex::new(std::collections::BTreeSet::new()),
            replicas: replicas.max(1),
            rng: AtomicU64::new(seed | 1),
            recent: Mutex::new(std::collections::VecDeque::new()),
            reports: Mutex::new(BTreeMap::new()),
            locality: Mutex::new(BTreeMap::new()),
            metrics: Metrics::default(),
        };
        svc.sync()?;
        Ok(svc)
    }

    /// Brings the cache up to the store: every host changed since the last
    /// look is read again (or dropped when removed).
    pub fn sync(&self) -> Result<(), ApiError> {
        let unread: Vec<String> = lock(&self.unread).iter().cloned().collect();
        for name in unread {
            self.reload(&name)?;
            lock(&self.unread).remove(&name);
        }
        let since = *lock(&self.seen);
        let (now, changed) = self.store.changed_since(since)?;
        for (name, generation) in changed {
            match generation {
                // This process's own commits are in the cache already.
                Some(g) if read(&self.fleet).host(&name).is_some_and(|h| h.generation == g) => {}
                // The cache is ahead of the store there, by claims not yet
                // committed; if another writer changed the host meanwhile,
                // they fail and the host is read again then.
                Some(_) if lock(&self.in_flight).contains_key(&name) => {}
                Some(_) => self.reload(&name)?,
                None => {
                    write(&self.fleet).remove(&name);
                }
            }
        }
        let mut seen = lock(&self.seen);
        *seen = (*seen).max(now);
        Ok(())
    }

    /// Reads one host and its placements from the store into the cache.
    fn reload(&self, name: &str) -> Result<(), ApiError> {
        let Some(row) = self.store.host(name)? else {
            write(&self.fleet).remove(name);
            return Ok(());
        };
        let placements = self.store.placements(Some(name))?;
        let host = self.build(&row, &placements)?;
        write(&self.fleet).insert(host);
        Ok(())
    }

    fn topology(&self, json: &str, host: &str) -> Result<Arc<Topology>, ApiError> {
        let mut kinds = lock(&self.kinds);
        if let Some(t) = kinds.get(json) {
            return Ok(t.clone());
        }
        let t = numaplace_read::json::parse(json)
            .map_err(|e| ApiError::Internal(format!("stored topology of host {host}: {e}")))?;
        let t = Arc::new(t);
        kinds.insert(json.to_string(), t.clone());
        Ok(t)
    }

    /// A fleet host from its stored rows. Placements that no longer fit
    /// (an agent's report racing a claim) are left out of the cache with
    /// a warning rather than making the host unusable.
    fn build(&self, row: &HostRow, placements: &[PlacementRow]) -> Result<FleetHost, ApiError> {
        let topology = self.topology(&row.topology, &row.name)?;
        let reservations = match &row.reserved {
            Some(json) => serde_json::from_str::<ReservedDoc>(json)
                .map_err(|e| e.to_string())
                .and_then(|d| d.to_reservations().map_err(|e| e.to_string()))
                .map_err(|e| ApiError::Internal(format!("stored reservations of host {}: {e}", row.name)))?,
            None => Reservations::default(),
        };
        let mut state = HostState::with_reservations(&topology, reservations)
            .map_err(|e| ApiError::Internal(format!("host {}: {e}", row.name)))?;
        let mut groups = BTreeMap::new();
        for p in placements {
            let placement = stored_placement(p)?;
            if let Err(e) = state.place(&placement) {
                tracing::warn!(host = %row.name, vm = %p.vm, "VM {} left out of the cache of host {}: {e}", p.vm, row.name);
                continue;
            }
            if let Some(g) = &p.group {
                groups.insert(p.vm.clone(), g.clone());
            }
        }
        let mut host = FleetHost::new(row.name.clone(), topology, state, row.labels.clone(), row.generation);
        host.drained = row.drained;
        host.groups = groups;
        Ok(host)
    }

    /// Registers or replaces a host. Returns its document and whether it
    /// is new. What the registration does not give (labels; reservations,
    /// when neither the query nor the upload's `reserved` has any) keeps
    /// its stored value: an agent that restarts re-registers its topology
    /// without wiping what an operator set through the API.
    pub fn put_host(&self, cmd: Register) -> Result<(HostDoc, bool), ApiError> {
        let Register { host: name, topology, reserved: document, overrides, labels } = cmd;
        let given = overrides.any() || document.is_some();
        // The query's values over the upload's `reserved`, by the same
        // resolution as the CLI's flags over a document (no host profile:
        // an agent sends its profile's values in the query).
        let reserved = if given {
            let document = document.as_ref().map(|reserved| Document { name: &name, reserved });
            Some(
                numaplace_wire::profile::resolve(&topology, None, document, &overrides_of(&overrides))
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            )
        } else {
            None
        };
        // A reservation over a CPU a VM is pinned on is recorded anyway (no
        // new VM gets the CPU; the VM keeps what it holds): a host profile
        // written before its VMs are moved must not stop the host's agent
        // from registering, reporting and applying. Each VM in the way is
        // reported by the agent's next round (`reserved-cpus`).
        self.write_host(&name, Some(&topology), labels, false, &|_, _| Ok(reserved.clone()))
    }

    /// Changes some of a host's settings (`PATCH`): the labels and
    /// reservations given replace the stored ones, the rest is kept; the
    /// topology stays. A reservation given alone is resolved over the
    /// stored ones, as a flag over a document.
    pub fn patch_host(&self, cmd: Patch) -> Result<HostDoc, ApiError> {
        let Patch { host: name, labels, reserve: given } = cmd;
        let reserve = |topology: &Topology, stored: Option<&ReservedDoc>| -> Result<Option<Reservations>, ApiError> {
            if !given.any() {
                return Ok(None);
            }
            let document = stored.map(|reserved| Document { name: &name, reserved });
            numaplace_wire::profile::resolve(topology, None, document, &overrides_of(&given))
                .map(Some)
                .map_err(|e| ApiError::BadRequest(e.to_string()))
        };
        // An operator's change through the API is answered at once: a
        // reservation over a pinned CPU is refused naming the VM.
        self.write_host(&name, None, labels, true, &reserve).map(|(doc, _)| doc)
    }

    /// Decides and commits a change, deciding again each time its commit
    /// loses a race with another writer (a host's generation moved, a PU
    /// claimed meanwhile), at most [`MAX_ATTEMPTS`] times; then the
    /// request is answered 503. `attempt` gets the attempt's number and
    /// the hosts whose claims conflicted in the earlier attempts (a
    /// decision leaves them out: see `select_avoiding`), and answers
    /// [`Step::Stale`] for a lost race: the one retry loop of the service.
    /// (The 503 is logged where it becomes a status.)
    fn with_retries<T>(
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
    fn commit(&self, changes: &[HostChange], answer: Option<&Answer>) -> Result<Commit, ApiError> {
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
    /// [`RESOLVE_LATER_FOR`]), and writes its audit line (`audit`, in the
    /// request's span) if it did, so every change the database holds has
    /// its line, however late.
    fn resolve_later(&self, transaction: i64, audit: impl FnOnce() + Send + 'static) {
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
    fn keyed<T>(
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
        Ok(KeyHeld { svc: self, key: key.to_string() })
    }

    /// Writes a host's row under its generation, retried on conflict:
    /// `topology` (`None`: the stored one; the host must then exist),
    /// `labels` (`None`: the stored ones), and the reservations `reserve`
    /// makes of the topology and the stored reservations (`None`: keep
    /// them). The VMs there must fit the result, and (`refuse_pinned`) no
    /// CPU a VM is pinned on may become reserved or shared.
    #[allow(clippy::type_complexity)]
    fn write_host(
        &self,
        name: &str,
        topology: Option<&Topology>,
        labels: Option<BTreeMap<String, String>>,
        refuse_pinned: bool,
        reserve: &dyn Fn(&Topology, Option<&ReservedDoc>) -> Result<Option<Reservations>, ApiError>,
    ) -> Result<(HostDoc, bool), ApiError> {
        self.with_retries(Change::Host(name.to_string()), |_| {
            let existing = self.store.host(name)?;
            let stored_topology = match (&existing, topology) {
                (_, Some(_)) => None,
                (Some(row), None) => Some(self.topology(&row.topology, name)?),
                (None, None) => return Err(ApiError::NotFound(Missing::Host(name.to_string()))),
            };
            let topology: &Topology = match (topology, &stored_topology) {
                (Some(t), _) => t,
                (None, Some(t)) => t,
                (None, None) => return Err(ApiError::Internal(format!("host {name}: no topology"))),
            };
            let stored_reserved = match existing.as_ref().and_then(|h| h.reserved.as_deref()) {
                Some(json) => Some(
                    serde_json::from_str::<ReservedDoc>(json)
                        .map_err(|e| ApiError::Internal(format!("stored reservations of host {name}: {e}")))?,
                ),
                None => None,
            };
            let reserved = match reserve(topology, stored_reserved.as_ref())? {
                Some(r) => r,
                None => match &stored_reserved {
                    Some(d) => d.to_reservations().map_err(|e| ApiError::Internal(format!("host {name}: {e}")))?,
                    None => Reservations::default(),
                },
            };
            // The VMs already there must fit the new description.
            let placements = match &existing {
                Some(_) => self.store.placements(Some(name))?,
                None => Vec::new(),
            };
            let kept: Vec<Placement> = placements.iter().map(stored_placement).collect::<Result<_, _>>()?;
            if refuse_pinned {
                check_pins_free(name, &kept, &reserved)?;
            }
            state_of(topology, reserved.clone(), &kept).map_err(|(i, error)| match i {
                Some(i) => {
                    ApiError::Conflict(Conflict::DoesNotFit { host: name.to_string(), vm: kept[i].vm.clone(), error })
                }
                None => ApiError::BadRequest(format!("reserved: {error}")),
            })?;
            let reserved_json = ReservedDoc::new(&reserved).map(|d| to_json(&d)).transpose()?;
            let row = HostRow {
                name: name.to_string(),
                topology: match &existing {
                    Some(h) if stored_topology.is_some() => h.topology.clone(),
                    _ => numaplace_read::json::to_string(topology),
                },
                reserved: reserved_json,
                labels: match (&labels, &existing) {
                    (Some(l), _) => l.clone(),
                    (None, Some(h)) => h.labels.clone(),
                    (None, None) => BTreeMap::new(),
                },
                drained: existing.as_ref().is_some_and(|h| h.drained),
                generation: 0,
                changed: 0,
            };
            // Written only if no placement (or other write) reached the
            // host since its VMs were checked above; else check again.
            let expect = existing.as_ref().map_or(Expect::Absent, |h| Expect::Generation(h.generation));
            match self.store.put_host_if(&row, expect) {
                Ok(generation) => {
                    audit::host_put(existing.as_ref(), &row, generation);
                    self.sync()?;
                    let doc = self.host_doc(name)?;
                    Ok(Step::Done((doc, existing.is_none())))
                }
                Err(StoreError::Conflict { .. }) => Ok(Step::Stale(None)),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn host_doc(&self, name: &str) -> Result<HostDoc, ApiError> {
        read(&self.fleet)
            .host(name)
            .map(HostDoc::new)
            .ok_or_else(|| ApiError::NotFound(Missing::Host(name.to_string())))
    }

    /// Hosts by name, `limit` of them after `after`.
    pub fn hosts(
        &self,
        after: Option<&str>,
        limit: usize,
        filter: &HostFilter,
    ) -> Result<(Vec<HostDoc>, Option<String>), ApiError> {
        self.sync()?;
        let fleet = read(&self.fleet);
        let mut out: Vec<HostDoc> = fleet
            .hosts()
            .filter(|h| after.is_none_or(|a| h.name.as_str() > a) && filter.matches(h))
            .take(limit.saturating_add(1))
            .map(HostDoc::new)
            .collect();
        let next = if out.len() > limit {
            out.truncate(limit);
            out.last().map(|h| h.name.clone())
        } else {
            None
        };
        Ok((out, next))
    }

    /// One host with its placements and map.
    pub fn host(&self, name: &str) -> Result<HostDetailDoc, ApiError> {
        self.sync()?;
        let fleet = read(&self.fleet);
        let h = fleet.host(name).ok_or_else(|| ApiError::NotFound(Missing::Host(name.to_string())))?;
        let mut placements: Vec<PlacementDoc> =
            h.state.placements().iter().map(|p| answer_doc(PlacementDoc::from(&**p))).collect();
        placements.sort_by(|a, b| a.vm.cmp(&b.vm));
        Ok(HostDetailDoc {
            host: HostDoc::new(h),
            placements,
            map: numaplace_emit::plan_text::host_map_text(&h.topology, &h.state),
        })
    }

    /// Drains or undrains a host.
    pub fn drain(&self, cmd: &Drain) -> Result<HostDoc, ApiError> {
        let (name, drained) = (cmd.host.as_str(), cmd.drained);
        let before = self.store.host(name)?.map(|h| h.drained);
        let generation = self.store.set_drained(name, drained)?;
        audit::drained(name, generation, before.unwrap_or(drained), drained);
        self.sync()?;
        self.host_doc(name)
    }

    /// Removes a host (with `force`, its placements too).
    pub fn remove_host(&self, cmd: &RemoveHost) -> Result<(), ApiError> {
        let (name, force) = (cmd.host.as_str(), cmd.force);
        let removed = self.store.remove_host(name, force)?;
        audit::host_removed(name, removed.generation, &removed.vms);
        self.sync()
    }

    /// Whether the store answers (`/readyz`).
    /// Ready: the store answers, and this server's cache has caught up
    /// with it (every change other servers committed read in), within the
    /// request's deadline. A replica back from a stall answers 503 here
    /// until it has read what it missed, so a load balancer sends its
    /// traffic to peers meanwhile (issue 46).
    pub fn ready(&self) -> Result<(), ApiError> {
        self.store.ping().map_err(ApiError::from)?;
        self.sync()
    }

    /// Places one VM. With `dry_run`, nothing is claimed.
    pub fn place(&self, cmd: &Place) -> Result<Placed, ApiError> {
        self.place_keyed(cmd, None)
    }

    /// [`Service::place`] under the client's `Idempotency-Key`: a retry
    /// is answered the first answer (201) and places nothing. A dry run
    /// claims nothing, so keeps no answer.
    pub fn place_keyed(&self, cmd: &Place, key: Option<&IdempotencyKey>) -> Result<Placed, ApiError> {
        let key = key.filter(|_| !cmd.dry_run);
        self.keyed(key, replay_placed, |key| self.place_once(cmd, key))
    }

    fn place_once(&self, cmd: &Place, key: Option<&IdempotencyKey>) -> Result<Placed, ApiError> {
        let request = &cmd.request;
        let constraints = cmd.selection();
        let group = cmd.group.clone();
        self.with_retries(Change::Place(request.name.clone()), |attempt| {
            let claim = lock(&self.claim);
            self.sync()?;
            let started = Instant::now();
            let choice = {
                let fleet = read(&self.fleet);
                if let Some(host) = fleet.host_of(&request.name) {
                    return Err(ApiError::Conflict(Conflict::AlreadyPlaced {
                        vm: request.name.clone(),
                        host: Some(host.to_string()),
                    }));
                }
                let busy = self.busy_hosts();
                select_avoiding(&fleet, request, &constraints, attempt, &busy, self.spread_for(fleet.len(), attempt.n))
            };
            self.metrics.decision(started.elapsed());
            let choice = match choice {
                Ok(c) => c,
                Err(SelectError::NoHost(r)) => {
                    self.metrics.rejected(&r);
                    self.remember(r.to_string());
                    return Err(ApiError::NoHost(r));
                }
                Err(SelectError::BadRequest(r)) => {
                    self.metrics.rejected_code(r.reason.code());
                    self.remember(r.to_string());
                    return Err(ApiError::Unplaceable(r));
                }
            };
            let doc = PlacementDoc::from_decision(&choice.decision, Some(request));
            if cmd.dry_run {
                return Ok(Step::Done(Placed {
                    doc: placed_doc(&choice.host, doc, Origin::Service, group.clone(), true),
                    replayed: false,
                }));
            }
            let answered = placed_doc(&choice.host, doc.clone(), Origin::Service, group.clone(), false);
            let answer = key.map(|k| k.answer(201, to_json(&answered)?)).transpose()?;
            let row = PlacementRow {
                vm: request.name.clone(),
                host: choice.host.clone(),
                doc: to_json(&doc)?,
                // Kept so a move decides under the same constraints.
                request: Some(stored_request(&cmd.constraints_doc())?),
                group: group.clone(),
                origin: Origin::Service,
                pus: claimed_pus(&choice.decision.placement),
            };
            let change =
                HostChange { host: choice.host.clone(), generation: choice.generation, remove: vec![], add: vec![row] };
            // In the cache now, so the next decision counts it; committed
            // after the lock is released.
            let flight = self.speculate(&choice.host, choice.generation, |fleet| {
                fleet.place(&choice.host, choice.generation + 1, &choice.decision.placement, group.as_deref()).is_ok()
            });
            drop(claim);
            let generation = choice.generation + 1;
            match self.settle(flight, std::slice::from_ref(&change), answer.as_ref())? {
                Commit::Done => {}
                Commit::Lost(host) => return Ok(Step::Stale(Some(host))),
                Commit::Unknown(transaction) => {
                    let (vm, host, pus) = (request.name.clone(), choice.host.clone(), change.add[0].pus.clone());
                    self.resolve_later(transaction, move || audit::placed(&vm, &host, generation, &pus));
                    return Err(ApiError::OutcomeUnknown);
                }
            }
            self.metrics.placed();
            audit::placed(&request.name, &choice.host, generation, &change.add[0].pus);
            Ok(Step::Done(Placed { doc: answered, replayed: false }))
        })
    }

    /// The hosts this server has claims in flight on (decided, not yet
    /// committed). A claim decided on top of them must wait for their
    /// commits, so a decision goes elsewhere when another host takes it:
    /// without this, one server filling its best host by cores-first
    /// chained its claims on it one commit after another (PostgreSQL, one
    /// server, 10,000 hosts: 600 placements/s against 1,270/s at 100,000
    /// hosts, where the best hosts were still empty).
    fn busy_hosts(&self) -> Vec<String> {
        lock(&self.in_flight).keys().cloned().collect()
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

    /// Records a claimed choice in the cache at the host's next
    /// generation; if the cache moved meanwhile, reads the host again.
    fn record(&self, choice: &Choice, group: Option<&str>) {
        let mut fleet = write(&self.fleet);
        let current = fleet.host(&choice.host).map(|h| h.generation);
        let ok = current == Some(choice.generation)
            && fleet.place(&choice.host, choice.generation + 1, &choice.decision.placement, group).is_ok();
        drop(fleet);
        if !ok {
            // The store holds the truth; a failure here only leaves the
            // cache stale until the next sync.
            let _ = self.reload(&choice.host);
        }
    }

    /// Applies a claim to the cache before it is committed (`update`, when
    /// the cache holds `host` at `generation`, the one the claim expects)
    /// and puts it in flight behind the host's last claim in flight. Called
    /// under the claim lock.
    fn speculate(&self, host: &str, generation: i64, update: impl FnOnce(&mut Fleet) -> bool) -> InFlight {
        let mut fleet = write(&self.fleet);
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
    /// claim lock.
    fn settle(&self, flight: InFlight, changes: &[HostChange], answer: Option<&Answer>) -> Result<Commit, ApiError> {
        let outcome = match &flight.after {
            Some(before) if !before.wait() => Ok(Commit::Lost(flight.host.clone())),
            _ => self.commit(changes, answer),
        };
        let committed = matches!(outcome, Ok(Commit::Done));
        // Answered first: a move waiting for it holds the claim lock.
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
        if numaplace_store::deadline::unbounded(|| self.reload(&flight.host)).is_err() {
            write(&self.fleet).remove(&flight.host);
            lock(&self.unread).insert(flight.host.clone());
        }
        outcome
    }

    /// One placement.
    pub fn placement(&self, vm: &str) -> Result<(PlacedDoc, Placement, Arc<Topology>), ApiError> {
        let row = self.store.placement(vm)?.ok_or_else(|| ApiError::NotFound(Missing::Vm(vm.to_string())))?;
        let doc: PlacementDoc = serde_json::from_str(&row.doc)
            .map_err(|e| ApiError::Internal(format!("stored placement of VM {vm}: {e}")))?;
        let placement = stored_placement(&row)?;
        let host = self.store.host(&row.host)?.ok_or_else(|| ApiError::NotFound(Missing::Host(row.host.clone())))?;
        let topology = self.topology(&host.topology, &host.name)?;
        Ok((placed_doc(&row.host, doc, row.origin, row.group, false), placement, topology))
    }

    /// Placements by VM name, all or one host's, `limit` after `after`.
    pub fn placements(
        &self,
        host: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<PlacedDoc>, Option<String>), ApiError> {
        let rows = self.store.placements(host)?;
        let mut out = Vec::new();
        let mut next = None;
        for row in rows.iter().filter(|r| after.is_none_or(|a| r.vm.as_str() > a)) {
            if out.len() == limit {
                next = out.last().map(|p: &PlacedDoc| p.placement.vm.clone());
                break;
            }
            let doc: PlacementDoc = serde_json::from_str(&row.doc)
                .map_err(|e| ApiError::Internal(format!("stored placement of VM {}: {e}", row.vm)))?;
            out.push(placed_doc(&row.host, doc, row.origin, row.group.clone(), false));
        }
        Ok((out, next))
    }

    /// Frees a VM's placement.
    pub fn delete(&self, cmd: &Delete) -> Result<(), ApiError> {
        self.delete_keyed(cmd, None).map(|_| ())
    }

    /// [`Service::delete`] under the client's `Idempotency-Key`: a retry
    /// is answered 204 again and frees nothing (not even a VM placed
    /// under the same name since). True when the answer was replayed.
    pub fn delete_keyed(&self, cmd: &Delete, key: Option<&IdempotencyKey>) -> Result<bool, ApiError> {
        let replay = |a: &Answer| match a.status {
            204 => Ok(true),
            other => Err(ApiError::Internal(format!("idempotency key {:?} keeps a delete answered {other}", a.key))),
        };
        self.keyed(key, replay, |key| self.delete_once(cmd, key).map(|()| false))
    }

    fn delete_once(&self, cmd: &Delete, key: Option<&IdempotencyKey>) -> Result<(), ApiError> {
        let vm = cmd.vm.as_str();
        let answer = key.map(|k| k.answer(204, String::new())).transpose()?;
        let missing = || ApiError::NotFound(Missing::Vm(vm.to_string()));
        self.with_retries(Change::Delete(vm.to_string()), |_| {
            let claim = lock(&self.claim);
            // Other replicas' changes to the host, so its generation below
            // is current.
            self.sync()?;
            let row = self.store.placement(vm)?.ok_or_else(missing)?;
            // A domain the agent reported runs (or is defined) on its
            // host whatever the service says: forgetting it here would give
            // its CPUs to the next VM under a running domain. Its claim
            // ends when the agent reports it gone.
            if row.origin != Origin::Service {
                return Err(ApiError::Conflict(Conflict::NotPlacedHere { vm: vm.to_string(), host: row.host }));
            }
            // The generation the cache holds the VM at (a placement made
            // since, not yet committed, is then committed first), or the
            // store's when the cache does not hold it there.
            let cached =
                read(&self.fleet).host(&row.host).filter(|h| h.state.placement(vm).is_some()).map(|h| h.generation);
            let generation = match cached {
                Some(g) => g,
                None => {
                    self.store
                        .host(&row.host)?
                        .ok_or_else(|| ApiError::NotFound(Missing::Host(row.host.clone())))?
                        .generation
                }
            };
            let change = HostChange { host: row.host.clone(), generation, remove: vec![vm.to_string()], add: vec![] };
            let flight =
                self.speculate(&row.host, generation, |fleet| fleet.unplace(&row.host, generation + 1, vm).is_ok());
            drop(claim);
            match self.settle(flight, &[change], answer.as_ref()) {
                Ok(Commit::Done) => {}
                Ok(Commit::Lost(host)) => return Ok(Step::Stale(Some(host))),
                Ok(Commit::Unknown(transaction)) => {
                    let (vm, host) = (vm.to_string(), row.host.clone());
                    self.resolve_later(transaction, move || audit::deleted(&vm, &host, generation + 1));
                    return Err(ApiError::OutcomeUnknown);
                }
                // Deleted by someone else between the read and the commit.
                Err(ApiError::NotFound(_)) => return Err(missing()),
                Err(e) => return Err(e),
            }
            self.metrics.deleted();
            audit::deleted(vm, &row.host, generation + 1);
            Ok(Step::Done(()))
        })
    }

    /// Moves a VM to another host chosen as for a new request (with the
    /// given constraints): one transaction claims the destination and
    /// frees the source, so the VM is never unplaced and never twice.
    pub fn move_vm(&self, cmd: &Move) -> Result<Placed, ApiError> {
        self.move_keyed(cmd, None)
    }

    /// [`Service::move_vm`] under the client's `Idempotency-Key`: a retry
    /// is answered the first answer (200, the destination) and moves
    /// nothing. A dry run keeps no answer.
    pub fn move_keyed(&self, cmd: &Move, key: Option<&IdempotencyKey>) -> Result<Placed, ApiError> {
        let key = key.filter(|_| !cmd.dry_run);
        self.keyed(key, replay_placed, |key| self.move_once(cmd, key))
    }

    fn move_once(&self, cmd: &Move, key: Option<&IdempotencyKey>) -> Result<Placed, ApiError> {
        let vm = cmd.vm.as_str();
        self.with_retries(Change::Move(vm.to_string()), |attempt| {
            let _claim = lock(&self.claim);
            self.sync()?;
            let row = self.store.placement(vm)?.ok_or_else(|| ApiError::NotFound(Missing::Vm(vm.to_string())))?;
            if row.origin != Origin::Service {
                return Err(ApiError::Conflict(Conflict::NotPlacedHere { vm: vm.to_string(), host: row.host }));
            }
            let doc: PlacementDoc = serde_json::from_str(&row.doc)
                .map_err(|e| ApiError::Internal(format!("stored placement of VM {vm}: {e}")))?;
            let request = doc
                .request
                .as_ref()
                .ok_or_else(|| ApiError::Internal(format!("stored placement of VM {vm} has no request")))?
                .to_request("request")
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            // The constraints the VM was placed under, each replaced by
            // the move's when it gives one: a move never lands a VM on a
            // host its request ruled out.
            let stored = stored_constraints(&row)?;
            let mut constraints = stored.to_constraints();
            if !cmd.hosts.is_empty() {
                constraints.hosts = cmd.hosts.clone();
            }
            if !cmd.labels.is_empty() {
                constraints.labels = cmd.labels.clone();
            }
            constraints.group = cmd.group.clone().or_else(|| row.group.clone());
            constraints.avoid = vec![row.host.clone()];
            let source_gen = self
                .store
                .host(&row.host)?
                .ok_or_else(|| ApiError::NotFound(Missing::Host(row.host.clone())))?
                .generation;
            let choice = {
                let fleet = read(&self.fleet);
                let busy = self.busy_hosts();
                select_avoiding(&fleet, &request, &constraints, attempt, &busy, self.spread_for(fleet.len(), attempt.n))
            };
            let choice = match choice {
                Ok(c) => c,
                Err(SelectError::NoHost(r)) => return Err(ApiError::NoHost(r)),
                Err(SelectError::BadRequest(r)) => return Err(ApiError::Unplaceable(r)),
            };
            let new_doc = PlacementDoc::from_decision(&choice.decision, Some(&request));
            if cmd.dry_run {
                return Ok(Step::Done(Placed {
                    doc: placed_doc(&choice.host, new_doc, Origin::Service, row.group, true),
                    replayed: false,
                }));
            }
            // The destination's generation may be predicted from claims
            // still in flight: they must commit first. (This lock stops
            // new ones; those in flight finish without it.)
            let before = lock(&self.in_flight).get(&choice.host).cloned();
            if before.is_some_and(|t| !t.wait()) {
                return Ok(Step::Stale(Some(choice.host.clone())));
            }
            let add = PlacementRow {
                vm: vm.to_string(),
                host: choice.host.clone(),
                doc: to_json(&new_doc)?,
                request: row.request.clone(),
                group: row.group.clone(),
                origin: Origin::Service,
                pus: claimed_pus(&choice.decision.placement),
            };
            let changes = [
                HostChange { host: choice.host.clone(), generation: choice.generation, remove: vec![], add: vec![add] },
                HostChange {
                    host: row.host.clone(),
                    generation: source_gen,
                    remove: vec![vm.to_string()],
                    add: vec![],
                },
            ];
            let answered = placed_doc(&choice.host, new_doc, Origin::Service, row.group.clone(), false);
            let answer = key.map(|k| k.answer(200, to_json(&answered)?)).transpose()?;
            let (from, to) = ((row.host.clone(), source_gen + 1), (choice.host.clone(), choice.generation + 1));
            match self.commit(&changes, answer.as_ref())? {
                Commit::Done => {}
                Commit::Lost(host) => return Ok(Step::Stale(Some(host))),
                Commit::Unknown(transaction) => {
                    let (vm, pus) = (vm.to_string(), changes[0].add[0].pus.clone());
                    self.resolve_later(transaction, move || {
                        audit::moved(&vm, (&from.0, from.1), (&to.0, to.1), &pus);
                    });
                    return Err(ApiError::OutcomeUnknown);
                }
            }
            self.metrics.moved();
            audit::moved(vm, (&from.0, from.1), (&to.0, to.1), &changes[0].add[0].pus);
            let _ = self.reload(&row.host);
            self.record(&choice, row.group.as_deref());
            Ok(Step::Done(Placed { doc: answered, replayed: false }))
        })
    }

    /// An agent's report of the domains on its host: domains the service
    /// did not place are recorded as taken (replacing the last report);
    /// the service's placements the host lacks are listed for the agent
    /// to apply.
    pub fn report_domains(&self, report: &Report) -> Result<DomainsAnswerDoc, ApiError> {
        let name = report.host.as_str();
        self.with_retries(Change::Report(name.to_string()), |_| {
            let _claim = lock(&self.claim);
            self.sync()?;
            let host = self.store.host(name)?.ok_or_else(|| ApiError::NotFound(Missing::Host(name.to_string())))?;
            let rows = self.store.placements(Some(name))?;
            let mut answer = DomainsAnswerDoc::default();
            // The service's placements stand; the agent's are rebuilt.
            let ours: Vec<&PlacementRow> = rows.iter().filter(|r| r.origin == Origin::Service).collect();
            let old: Vec<String> = rows.iter().filter(|r| r.origin == Origin::Agent).map(|r| r.vm.clone()).collect();
            for r in &ours {
                if !report.domains.contains_key(&r.vm) {
                    answer.to_apply.push(r.vm.clone());
                }
            }
            let fleet_host = self.build(&host, &ours.iter().map(|r| (*r).clone()).collect::<Vec<_>>())?;
            let topology = fleet_host.topology.clone();
            let mut state = fleet_host.state;
            let mut add = Vec::new();
            // The service's VMs against how their domains really run: one
            // re-pinned by hand (live or in its definition) is a conflict,
            // and the CPUs it runs on beyond its placement are held (an
            // agent row of their own) until the two agree again, so no
            // decision hands them out meanwhile.
            for r in &ours {
                let Some((_, live)) = report.domains.get(&r.vm) else { continue };
                let planned = stored_placement(r)?;
                let seen = [("live", Some(live)), ("defined", report.defined.get(&r.vm))];
                let mut differences = Vec::new();
                let mut runs = CpuSet::new();
                for (how, q) in seen.iter().filter_map(|(how, q)| q.map(|q| (*how, q))) {
                    if let Some(d) = pin_difference(&planned, q) {
                        differences.push(format!("{how}: {d}"));
                        runs = runs.union(&may_run_on(q));
                    }
                }
                if differences.is_empty() {
                    continue;
                }
                answer.to_repin.push(r.vm.clone());
                let extra = runs.difference(&claimed_pus(&planned).into_iter().collect());
                let mut message =
                    format!("domain {} is not pinned as the service placed it ({})", r.vm, differences.join("; "));
                if !extra.is_empty() {
                    let hold = hold_placement(&r.vm, &extra, &topology);
                    match state.place(&hold) {
                        Ok(()) => {
                            message.push_str(&format!(
                                "; the service holds CPUs {extra} as well until they agree (agent --apply pins it back)"
                            ));
                            add.push(PlacementRow {
                                vm: hold.vm.clone(),
                                host: name.to_string(),
                                doc: to_json(&PlacementDoc::from(&hold))?,
                                request: None,
                                group: None,
                                origin: Origin::Agent,
                                pus: claimed_pus(&hold),
                            });
                        }
                        Err(e) => message.push_str(&format!("; {}", fault(&state, &r.vm, &e))),
                    }
                }
                answer.conflicts.push(SkipDoc { code: REPINNED.into(), message });
            }
            for (vm, (doc, p)) in &report.domains {
                if ours.iter().any(|r| &r.vm == vm) {
                    continue;
                }
                let elsewhere = self.store.placement(vm)?.filter(|r| r.host != name);
                if let Some(r) = elsewhere {
                    answer.conflicts.push(SkipDoc {
                        code: "elsewhere".into(),
                        message: format!("domain {vm} is placed on host {} by the service", r.host),
                    });
                    continue;
                }
                // A floating domain is load, counted against a CPU it may
                // use that the agent saw free; the service may hold that
                // one (a placement not yet defined, a hold): counted again
                // on one it does not, so it is never blamed for a CPU it
                // only floats over.
                let (mut doc, mut p) = (doc.clone(), p.clone());
                let mut placed = state.place(&p);
                if matches!(placed, Err(StateError::PuTaken { .. })) && p.cpu_mode == CpuMode::Shared {
                    p = recount(&state, &p);
                    doc = PlacementDoc::from(&p);
                    placed = state.place(&p);
                }
                if let Err(e) = placed {
                    answer.conflicts.push(SkipDoc { code: "does-not-fit".into(), message: fault(&state, vm, &e) });
                    continue;
                }
                answer.recorded.push(vm.clone());
                add.push(PlacementRow {
                    vm: vm.clone(),
                    host: name.to_string(),
                    doc: to_json(&doc)?,
                    request: None,
                    group: None,
                    origin: Origin::Agent,
                    pus: claimed_pus(&p),
                });
            }
            // Every VM on CPUs the host reserves, as lint reports it: the
            // registration kept the reservation, no new VM gets those CPUs,
            // and the operator moves these when convenient.
            answer.conflicts.extend(reservation_findings(&state, &topology));
            let after: Vec<String> = add.iter().map(|p| p.vm.clone()).collect();
            let change = HostChange { host: name.to_string(), generation: host.generation, remove: old.clone(), add };
            match self.commit(&[change], None)? {
                Commit::Done => {}
                Commit::Lost(host) => return Ok(Step::Stale(Some(host))),
                Commit::Unknown(_) => return Err(ApiError::OutcomeUnknown),
            }
            if old != after {
                audit::agent_report(name, host.generation + 1, &old, &after);
            }
            self.sync()?;
            let summary = format!(
                "{} the service did not place recorded as taken ({}); placements to apply: {}; conflicts: {}",
                plural(answer.recorded.len(), "domain"),
                answer.recorded.join(", "),
                if answer.to_apply.is_empty() { "none".to_string() } else { answer.to_apply.join(", ") },
                if answer.conflicts.is_empty() {
                    "none".to_string()
                } else {
                    answer.conflicts.iter().map(|c| c.message.as_str()).collect::<Vec<_>>().join("; ")
                },
            );
            lock(&self.reports).insert(name.to_string(), summary);
            self.record_locality(report, &state);
            Ok(Step::Done(answer))
        })
    }

    fn remember(&self, rejection: String) {
        let mut r = lock(&self.recent);
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back(rejection);
    }

    /// Keeps a locality sample per reported VM: its memory per node and
    /// the share on the nodes its vCPUs run on.
    fn record_locality(&self, report: &Report, state: &HostState) {
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut all = lock(&self.locality);
        for m in &report.memory {
            let Some(p) = state.placement(&m.vm) else { continue };
            let total: u64 = m.nodes.iter().map(|n| n.bytes).sum();
            let local: u64 = m.nodes.iter().filter(|n| p.nodes.iter().any(|h| h.0 == n.node)).map(|n| n.bytes).sum();
            let local_percent = (local.saturating_mul(100)).checked_div(total).unwrap_or(100) as u32;
            let samples = all.entry(m.vm.clone()).or_default();
            if samples.len() == SAMPLES {
                samples.pop_front();
            }
            samples.push_back(LocalitySampleDoc { at, local_percent, nodes: m.nodes.clone() });
        }
    }

    /// A VM's locality samples, oldest first.
    pub fn locality(&self, vm: &str) -> Vec<LocalitySampleDoc> {
        lock(&self.locality).get(vm).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    /// The last rejections, oldest first.
    pub fn recent_rejections(&self) -> Vec<String> {
        lock(&self.recent).iter().cloned().collect()
    }

    /// The last agent report of a host, summarised, when one came since
    /// this server started.
    pub fn last_report(&self, host: &str) -> Option<String> {
        lock(&self.reports).get(host).cloned()
    }

    /// The fleet, for `/metrics` (read under the cache's lock).
    pub fn with_fleet<T>(&self, f: impl FnOnce(&Fleet) -> T) -> T {
        f(&read(&self.fleet))
    }
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
/// conflict says the host changed, not that it is full). Placements and
/// moves both decide through it.
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

/// The dedicated PUs a placement holds alone: its pinned vCPUs (a mixed
/// VM's floating ones and every shared VM's float and claim nothing).
pub fn claimed_pus(p: &Placement) -> Vec<u32> {
    if p.cpu_mode != CpuMode::Dedicated {
        return Vec::new();
    }
    let mut pus: Vec<u32> = p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()).map(|v| v.pu).collect();
    pus.sort_unstable();
    pus.dedup();
    pus
}

fn stored_placement(row: &PlacementRow) -> Result<Placement, ApiError> {
    let doc: PlacementDoc = serde_json::from_str(&row.doc)
        .map_err(|e| ApiError::Internal(format!("stored placement of VM {}: {e}", row.vm)))?;
    doc.to_placement(&row.vm).map_err(|e| ApiError::Internal(format!("stored placement of VM {}: {e}", row.vm)))
}

/// A placement as the API answers it: always with `pins`, whoever
/// placed it. A domain pinned by hand (reported by an agent) has guest
/// cells that do not name its host nodes, so it is stored with `vcpus`
/// (each vCPU's PU and node); its answer carries `pins` as well, the
/// nodes staying in `vcpus`.
pub fn answer_doc(mut doc: PlacementDoc) -> PlacementDoc {
    if doc.pins.is_empty() && !doc.vcpus.is_empty() {
        doc.pins = doc.vcpus.iter().map(|v| v.pu).collect();
    }
    doc
}

fn placed_doc(host: &str, placement: PlacementDoc, origin: Origin, group: Option<String>, dry_run: bool) -> PlacedDoc {
    let placement = answer_doc(placement);
    PlacedDoc {
        host: host.to_string(),
        dry_run,
        origin: origin.as_str().to_string(),
        group,
        links: (!dry_run).then(|| LinksDoc::new(&placement.vm)),
        placement,
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, ApiError> {
    serde_json::to_string(v).map_err(|e| ApiError::Internal(e.to_string()))
}

/// The constraints a stored placement was made under (none for one made
/// before they were kept, or reported by an agent).
fn stored_constraints(row: &PlacementRow) -> Result<ConstraintsDoc, ApiError> {
    let Some(text) = &row.request else { return Ok(ConstraintsDoc::default()) };
    let value: Value =
        serde_json::from_str(text).map_err(|e| ApiError::Internal(format!("stored request of VM {}: {e}", row.vm)))?;
    match value.get("constraints") {
        Some(c) => serde_json::from_value(c.clone())
            .map_err(|e| ApiError::Internal(format!("stored constraints of VM {}: {e}", row.vm))),
        None => Ok(ConstraintsDoc::default()),
    }
}

/// The conflict code of a service VM whose domain is pinned elsewhere
/// than placed.
pub const REPINNED: &str = DomainsAnswerDoc::REPINNED;

/// How the row that holds the CPUs a re-pinned domain runs on beyond its
/// placement is named: the VM's name and this, which no VM name has (the
/// API and libvirt refuse `/` in names), so it never meets a real VM.
pub const HOLD_SUFFIX: &str = "/as-running";

/// The CPUs vCPU `vcpu` of a reported domain may run on: its pin, a
/// mixed VM's floating set, a floating domain's whole set; `None` when
/// it has no such vCPU.
fn vcpu_cpus(q: &Placement, vcpu: u32) -> Option<CpuSet> {
    if q.cpu_mode == CpuMode::Shared {
        return q.vcpus.iter().any(|v| v.vcpu == vcpu).then(|| q.cpuset.clone());
    }
    if let Some(set) = q.floats(vcpu) {
        return Some(set.clone());
    }
    q.vcpus.iter().find(|v| v.vcpu == vcpu).map(|v| std::iter::once(v.pu).collect())
}

/// Every CPU a reported domain's vCPUs may run on.
fn may_run_on(q: &Placement) -> CpuSet {
    q.vcpus.iter().filter_map(|v| vcpu_cpus(q, v.vcpu)).fold(CpuSet::new(), |u, s| u.union(&s))
}

/// How a service VM's domain (`q`, as libvirt has it) is pinned
/// otherwise than its placement, worded; `None` when every pinned vCPU
/// is where it was placed. Only pins are compared: a shared VM's floating
/// set follows the host's dedicated VMs and is not the placement's to keep.
fn pin_difference(planned: &Placement, q: &Placement) -> Option<String> {
    if planned.cpu_mode != CpuMode::Dedicated {
        return None;
    }
    let moved: Vec<String> = planned
        .vcpus
        .iter()
        .filter(|v| planned.floats(v.vcpu).is_none())
        .filter_map(|v| {
            let placed: CpuSet = std::iter::once(v.pu).collect();
            match vcpu_cpus(q, v.vcpu) {
                Some(have) if have == placed => None,
                Some(have) => Some(format!("vCPU {} on CPUs {have}, placed on CPU {}", v.vcpu, v.pu)),
                None => Some(format!("no vCPU {}, placed on CPU {}", v.vcpu, v.pu)),
            }
        })
        .collect();
    (!moved.is_empty()).then(|| moved.join(", "))
}

/// A dedicated placement of no memory holding `cpus` for a re-pinned
/// domain ([`HOLD_SUFFIX`]): decisions treat them as taken.
fn hold_placement(vm: &str, cpus: &CpuSet, topology: &Topology) -> Placement {
    let vcpus: Vec<VcpuPin> = cpus
        .iter()
        .filter_map(|pu| {
            let node = topology.pu(pu).and_then(|p| p.node).and_then(|n| topology.nodes().get(n))?.id;
            Some((pu, node))
        })
        .enumerate()
        .map(|(i, (pu, node))| VcpuPin { vcpu: i as u32, pu, node })
        .collect();
    let mut nodes: Vec<NodeId> = vcpus.iter().map(|v| v.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    Placement {
        vm: format!("{vm}{HOLD_SUFFIX}"),
        nodes,
        cpu_mode: CpuMode::Dedicated,
        cpuset: vcpus.iter().map(|v| v.pu).collect(),
        guest: GuestTopology { sockets: 1, dies: 1, cores: vcpus.len() as u32, threads: 1, cells: Vec::new() },
        vcpus,
        emulator: CpuSet::new(),
        memory: Vec::new(),
        memory_bytes: 0,
        memory_mode: MemoryMode::default(),
        hugepage_bytes: None,
        online_vcpus: None,
        devices: Vec::new(),
        floating: Vec::new(),
        charged: Vec::new(),
    }
}

/// Why domain `vm` could not be recorded, naming the domain at fault and
/// the VM that holds the CPU it wants.
fn fault(state: &HostState, vm: &str, e: &StateError) -> String {
    if let StateError::PuTaken { pu, .. } = e {
        let holder = state.cpu_holders().into_iter().find(|h| h.vm != vm && h.cpus.contains(*pu));
        if let Some(h) = holder {
            let who = match h.vm.strip_suffix(HOLD_SUFFIX) {
                Some(base) => format!("the service holds for {base} (its domain runs there)"),
                None => format!("VM {} holds", h.vm),
            };
            return format!("domain {vm} is pinned on CPU {pu}, which {who}: domain {vm} is the one to move");
        }
    }
    format!("domain {vm}: {e}")
}

/// A floating domain counted again, each vCPU against the least loaded
/// CPU of its set that no dedicated VM holds (as it was counted by the
/// agent, which could not see the service's own holds).
fn recount(state: &HostState, p: &Placement) -> Placement {
    let mut out = p.clone();
    let mut load: BTreeMap<u32, u32> = BTreeMap::new();
    for v in &mut out.vcpus {
        let best = p
            .cpuset
            .iter()
            .filter(|&pu| !state.pu_taken(pu))
            .min_by_key(|&pu| (state.pu_shared_load(pu) + load.get(&pu).copied().unwrap_or(0), pu));
        let node = best.and_then(|pu| state.pu_node(pu)).and_then(|n| state.nodes().nth(n)).map(|n| n.id);
        if let (Some(pu), Some(node)) = (best, node) {
            v.pu = pu;
            v.node = node;
            *load.entry(pu).or_default() += 1;
        }
    }
    out
}

/// The VMs on CPUs the host reserves, each as `lint`'s `reserved-cpus`
/// words it (a floating VM without any CPU restriction is not one), and
/// dedicated vCPUs in the shared pool.
fn reservation_findings(state: &HostState, topology: &Topology) -> Vec<SkipDoc> {
    let r = state.reservations();
    if r.cpus.is_empty() && r.shared_cpus.is_empty() {
        return Vec::new();
    }
    let all = (0..topology.nodes().len()).fold(CpuSet::new(), |u, i| u.union(&topology.node_online_cpus(i)));
    let cpus = |set: &CpuSet| format!("{} {set}", if set.len() == 1 { "CPU" } else { "CPUs" });
    let mut out = Vec::new();
    for p in state.placements().iter().filter(|p| !p.vm.ends_with(HOLD_SUFFIX)) {
        let (mine, pinned) = match p.cpu_mode {
            CpuMode::Shared if p.cpuset == all => continue,
            CpuMode::Shared => (p.cpuset.clone(), CpuSet::new()),
            CpuMode::Dedicated => {
                let pinned: CpuSet = p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()).map(|v| v.pu).collect();
                (may_run_on(p), pinned)
            }
        };
        let on = mine.intersection(&r.cpus);
        if !on.is_empty() {
            out.push(SkipDoc {
                code: "reserved-cpus".into(),
                message: format!(
                    "VM {}: vCPUs may run on {}, which the host reserves for itself (reserved CPUs {})",
                    p.vm,
                    cpus(&on),
                    r.cpus
                ),
            });
            continue;
        }
        let pooled = pinned.intersection(&r.shared_cpus);
        if !pooled.is_empty() {
            out.push(SkipDoc {
                code: "shared-cpus".into(),
                message: format!(
                    "VM {}: dedicated vCPUs pinned on {}, in the host's shared pool (shared CPUs {})",
                    p.vm,
                    cpus(&pooled),
                    r.shared_cpus
                ),
            });
        }
    }
    out
}

/// Refuses reservations that take a CPU a VM is pinned on: the VM would
/// keep running there, on a CPU the host was promised.
fn check_pins_free(host: &str, placements: &[Placement], reserved: &Reservations) -> Result<(), ApiError> {
    for p in placements {
        // A shared VM's vCPUs are only counted against a CPU, not pinned
        // there: it is no VM in the way (blaming it named the wrong VM).
        if p.cpu_mode == CpuMode::Shared {
            continue;
        }
        for v in p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()) {
            let role = if reserved.cpus.contains(v.pu) {
                CpuRole::Reserved
            } else if p.cpu_mode == CpuMode::Dedicated && reserved.shared_cpus.contains(v.pu) {
                CpuRole::Shared
            } else {
                continue;
            };
            return Err(ApiError::Conflict(Conflict::PinnedCpu {
                host: host.to_string(),
                cpu: v.pu,
                role,
                vm: p.vm.clone(),
                vcpu: v.vcpu,
            }));
        }
    }
    Ok(())
}

/// What one attempt of a change ended with (see `Service::with_retries`).
enum Step<T> {
    /// Decided and committed (or nothing to commit): the answer.
    Done(T),
    /// Another writer got there first (on this host, when known): decide
    /// again.
    Stale(Option<String>),
}

/// A claim recorded in the cache and not yet committed (see
/// `Service::speculate`).
struct InFlight {
    host: String,
    ticket: Arc<Ticket>,
    // The claim in flight on the host before this one, if any.
    after: Option<Arc<Ticket>>,
}

/// Whether a claim in flight committed, once the store answered.
#[derive(Default)]
struct Ticket {
    committed: Mutex<Option<bool>>,
    done: std::sync::Condvar,
}

impl Ticket {
    fn finish(&self, committed: bool) {
        *lock(&self.committed) = Some(committed);
        self.done.notify_all();
    }

    /// Waits for the store's answer: whether the claim committed.
    fn wait(&self) -> bool {
        let mut committed = lock(&self.committed);
        loop {
            if let Some(c) = *committed {
                return c;
            }
            committed = self.done.wait(committed).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One attempt of a change, as `Service::with_retries` hands it over.
struct Attempt {
    /// Its number, from 1.
    n: usize,
    /// The hosts whose claims conflicted in the attempts before, in the
    /// order they did.
    conflicted: Vec<String>,
}

/// How a commit ended, when the store did not fail.
enum Commit {
    /// Written.
    Done,
    /// Another writer changed this host since the decision: nothing was
    /// written.
    Lost(String),
    /// The connection was lost after COMMIT was sent, and whether this
    /// transaction committed could not be found out in time.
    Unknown(i64),
}

/// A key marked running in this process; released (and its waiters
/// woken) on drop.
struct KeyHeld<'a> {
    svc: &'a Service,
    key: String,
}

impl Drop for KeyHeld<'_> {
    fn drop(&mut self) {
        lock(&self.svc.keys).remove(&self.key);
        self.svc.keys_freed.notify_all();
    }
}

/// The method and path of a kept request (its body's digest left out),
/// for the refusal of a key sent with another request.
fn key_request(request: &str) -> String {
    request.split(' ').take(2).collect::<Vec<_>>().join(" ")
}

/// A placement's or move's answer, kept under its key, given again.
fn replay_placed(a: &Answer) -> Result<Placed, ApiError> {
    let doc: PlacedDoc = serde_json::from_str(&a.body)
        .map_err(|e| ApiError::Internal(format!("the answer kept under idempotency key {:?}: {e}", a.key)))?;
    Ok(Placed { doc, replayed: true })
}

/// Reservations given as values, as the profile's resolution takes the
/// CLI's flags.
fn overrides_of(r: &Reserve) -> Overrides<'_> {
    Overrides {
        reserved_cpus: Given::of("reserved_cpus", r.reserved_cpus.as_deref()),
        reserved_memory: Given::of("reserved_memory", r.reserved_memory.as_deref()),
        shared_cpus: Given::of("shared_cpus", r.shared_cpus.as_deref()),
    }
}

/// The request text a placement keeps: its constraints, under
/// `constraints` as a request carries them (the request itself is in the
/// placement document).
fn stored_request(constraints: &ConstraintsDoc) -> Result<String, ApiError> {
    let mut obj = serde_json::Map::new();
    obj.insert("constraints".into(), serde_json::to_value(constraints).map_err(|e| ApiError::Internal(e.to_string()))?);
    Ok(Value::Object(obj).to_string())
}

// A poisoned lock means a thread panicked mid-update of the cache; the
// store is the truth, so the cache is used as it is (the next sync
// repairs what changed).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}
