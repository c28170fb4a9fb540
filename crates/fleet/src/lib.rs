//! The fleet: every host's topology and host state, and the choice of a
//! host for a VM made in the same step as the choice of its nodes, CPUs
//! and guest topology (issue 17). Pure: the service loads hosts from its
//! store, asks [`Fleet::select`], claims the answer in the store and then
//! records it here; nothing in this crate reads a file, a clock or a
//! socket.
//!
//! Selection follows the scheduler frameworks' steps, each separately
//! testable:
//! 1. **filter**: drained hosts, hosts the request's constraints exclude
//!    (names, labels, anti-affinity group), and hosts whose per-node
//!    summary shows they cannot hold the VM ([`prefilter`]: a necessary
//!    condition, so the planner never runs on a host that is obviously
//!    full, and never skips one it could use);
//! 2. **score**: hosts in the fleet's [`Ranking`] order (by default free
//!    cores, then free threads, then free memory: the order XAPI's planner
//!    wished for, so one big-memory VM cannot pile CPU load on one host);
//! 3. **plan**: the planner runs on hosts in that order (each host's
//!    [`FleetHost::session`], a `numaplace_plan::Session` that can only
//!    decide); under the default [`Ranking::Cost`] the first
//!    [`COST_TIES`] that take the VM are compared and the one where the
//!    planner's cost is lowest wins (a plan that costs nothing at once),
//!    under [`Ranking::CoresFirst`] the first that takes it (the cost
//!    deciding only between hosts equal in rank). The decision carries the
//!    nodes, PUs and guest topology. A claimed VM is recorded with
//!    [`Fleet::record`] (or [`Fleet::place`]) through the host's session
//!    too.
//!
//! The service then reserves (commits with the host's generation) and
//! binds (the agent applies it). The simulator (`numaplace simulate`)
//! runs the same loop ([`Fleet::select_with`], with its policy's decision
//! on each host) over a `Fleet` of its own and records each choice at
//! once, so a replay measures what the service does.
//!
//! A request no host takes gets a [`FleetRejection`]: how many hosts fell
//! out at each step and why, and the nearest host with the planner's own
//! reason, never a bare "no valid host".

mod evaluate;
mod index;
mod rank;
mod reject;
mod summary;

pub use evaluate::{scores, Evaluation, HostVerdict, Verdict};
pub use rank::{Free, RankKey, Ranking, STRANDED_PROBE};
pub use reject::{FleetRejection, HostSkip, SkipCount};
pub use summary::{prefilter, NodeSummary, Short, Summary};

use numaplace_plan::{
    cost_of, Cost, Decision, HostConstraints, HostState, Placement, PlacementRecord, Rejection, Request, Session,
    SessionError, StateError,
};
use numaplace_topo::Topology;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Most hosts whose plans are compared by cost: under [`Ranking::Cost`]
/// the first that take the VM, otherwise hosts equal in rank key; a
/// bound, so a fleet of identical empty hosts costs a few plans, not
/// thousands.
pub const COST_TIES: usize = 4;

/// Most distinct host layouts (node facts, distances, PU tables) a fleet
/// keeps for its hosts to share; a fleet with more kinds than this keeps
/// the rest per host.
const LAYOUTS: usize = 64;

/// One host of the fleet.
#[derive(Clone, Debug)]
pub struct FleetHost {
    /// Unique name.
    pub name: String,
    /// Its topology (hosts of one kind share one).
    pub topology: Arc<Topology>,
    /// Labels for request constraints.
    pub labels: BTreeMap<String, String>,
    /// A drained host takes no new VMs.
    pub drained: bool,
    /// The store's generation this state was read at.
    pub generation: i64,
    /// What its VMs take.
    pub state: HostState,
    /// Anti-affinity groups of its VMs, by VM.
    pub groups: BTreeMap<String, String>,
    /// Free capacity per node, kept with the state.
    pub summary: Summary,
}

impl FleetHost {
    /// A host with its state; the summary is computed here.
    pub fn new(
        name: impl Into<String>,
        topology: Arc<Topology>,
        state: HostState,
        labels: BTreeMap<String, String>,
        generation: i64,
    ) -> FleetHost {
        let summary = Summary::of(&topology, &state);
        FleetHost {
            name: name.into(),
            topology,
            labels,
            drained: false,
            generation,
            state,
            groups: BTreeMap::new(),
            summary,
        }
    }

    /// A host whose state keeps `reservations` and holds `records` (the
    /// service's stored VMs), each recorded through a session with its
    /// group; a record that does not fit (an agent's report racing a
    /// claim) is left out and returned with why, for the caller to warn
    /// of, rather than making the host unusable. Fails only when the
    /// reservations do not fit the host.
    pub fn from_records(
        name: impl Into<String>,
        topology: Arc<Topology>,
        reservations: numaplace_plan::Reservations,
        records: &[PlacementRecord],
        labels: BTreeMap<String, String>,
        generation: i64,
    ) -> Result<(FleetHost, Vec<(String, StateError)>), StateError> {
        let mut state = HostState::with_reservations(&topology, reservations)?;
        let mut groups = BTreeMap::new();
        let mut left_out = Vec::new();
        let mut session = Session::new(&topology, &mut state);
        for r in records {
            match session.record(r) {
                Ok(()) => {
                    if let Some(g) = &r.group {
                        groups.insert(r.vm().to_string(), g.clone());
                    }
                }
                Err(e) => left_out.push((r.vm().to_string(), e)),
            }
        }
        let mut host = FleetHost::new(name, topology, state, labels, generation);
        host.groups = groups;
        Ok((host, left_out))
    }

    /// The host's kind: its shape, so capacity can be reported per kind.
    pub fn kind(&self) -> String {
        kind_of(&self.topology)
    }

    /// A session over the host's state that can only decide: what the
    /// host would do with a request, changing nothing.
    pub fn session(&self) -> Session<'_, &HostState> {
        Session::new(&self.topology, &self.state)
    }

    /// What the host has free, as rankings and stranded capacity count it.
    pub fn free(&self) -> Free {
        self.summary.free()
    }

    fn rank(&self, ranking: Ranking) -> Place {
        (ranking.key(self.free()), self.name.clone())
    }
}

/// A topology's shape as people name it: "2 packages x 8 nodes x 96
/// threads, 256 GiB".
pub fn kind_of(t: &Topology) -> String {
    let gib = t.total_memory() >> 30;
    format!("{}p/{}n/{}c/{}t/{}GiB", t.package_count(), t.nodes().len(), t.core_count(), t.pu_count(), gib)
}

/// A host's place in the fleet's ranking: its key, then its name.
type Place = (RankKey, String);

/// Which hosts a request may go to, besides capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Constraints {
    /// Only these hosts (empty: any).
    pub hosts: Vec<String>,
    /// Only hosts carrying every one of these labels with these values.
    pub labels: BTreeMap<String, String>,
    /// Anti-affinity: no host that already runs a VM of this group.
    pub group: Option<String>,
    /// Hosts to leave out (a move's source).
    pub avoid: Vec<String>,
}

impl Constraints {
    /// The fleet's constraints for a request's (or a stored VM's), no host
    /// avoided.
    pub fn of(c: &HostConstraints) -> Constraints {
        Constraints {
            hosts: c.hosts.clone(),
            labels: c.labels.clone(),
            group: c.anti_affinity.clone(),
            avoid: Vec::new(),
        }
    }
}

/// The chosen host and the plan for it.
#[derive(Clone, Debug)]
pub struct Choice {
    /// The host.
    pub host: String,
    /// The generation the decision was made against (the claim must find
    /// it unchanged).
    pub generation: i64,
    /// The planner's decision on that host.
    pub decision: Decision,
    /// Its expected cost on that host.
    pub cost: Cost,
    /// How many hosts the planner ran on.
    pub planned: usize,
}

/// Why a request could not even be considered: the request is wrong
/// whatever the host.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectError {
    /// No host could take the VM.
    NoHost(Box<FleetRejection>),
    /// The request itself is wrong (the planner's reason, on the first
    /// host that was asked).
    BadRequest(Rejection),
}

/// Every host, in rank order on demand.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    hosts: BTreeMap<String, FleetHost>,
    ranking: Ranking,
    rank: BTreeSet<Place>,
    vms: BTreeMap<String, String>,
    /// One state per distinct layout seen, whose fixed facts every host of
    /// that layout shares (see [`HostState::share_layout`]).
    layouts: Vec<HostState>,
    /// Hosts by free threads and memory, beside the rank order.
    index: index::Index,
}

/// Most hosts the index may leave for a selection to sort and walk; with
/// more that may fit, the walk in rank order meets one sooner. Sorting is
/// the index's cost per selection (names compared): at 2,048 it was most
/// of the simulator's replay (34 s against 5 s for `balanced`), and each
/// of the service's decisions paid it too.
const INDEXED: usize = 64;

/// How a selection walks the fleet: [`Walk::Indexed`] is what
/// [`Fleet::select_spread`] does; [`Walk::Full`], every host in rank
/// order, is kept so tests can hold the two to the same answers.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// Through the index where it applies.
    Indexed,
    /// Every host in rank order.
    Full,
}

impl Fleet {
    /// An empty fleet ranking hosts cores first (the service's default).
    pub fn new() -> Fleet {
        Fleet::default()
    }

    /// An empty fleet ranking hosts by `ranking`.
    pub fn with_ranking(ranking: Ranking) -> Fleet {
        Fleet { ranking, ..Fleet::default() }
    }

    /// How the fleet ranks its hosts.
    pub fn ranking(&self) -> Ranking {
        self.ranking
    }

    /// Adds or replaces a host (its VMs with it). Its state's fixed facts
    /// are shared with those of earlier hosts of the same layout, so a
    /// zone of many hosts of a few kinds keeps a few copies of them.
    pub fn insert(&mut self, mut host: FleetHost) {
        self.remove(&host.name.clone());
        if !self.layouts.iter().any(|l| host.state.share_layout(l)) && self.layouts.len() < LAYOUTS {
            self.layouts.push(host.state.clone());
        }
        self.rank.insert(host.rank(self.ranking));
        self.index.add(host.rank(self.ranking), &host.summary, host.drained);
        for p in host.state.placements() {
            self.vms.insert(p.vm.clone(), host.name.clone());
        }
        self.hosts.insert(host.name.clone(), host);
    }

    /// Removes a host and forgets its VMs.
    pub fn remove(&mut self, name: &str) -> Option<FleetHost> {
        let host = self.hosts.remove(name)?;
        let place = host.rank(self.ranking);
        self.rank.remove(&place);
        self.index.remove(&place, &host.summary, host.drained);
        for p in host.state.placements() {
            self.vms.remove(&p.vm);
        }
        Some(host)
    }

    /// One host.
    pub fn host(&self, name: &str) -> Option<&FleetHost> {
        self.hosts.get(name)
    }

    /// Every host, by name.
    pub fn hosts(&self) -> impl ExactSizeIterator<Item = &FleetHost> {
        self.hosts.values()
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the fleet has no host.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The host a VM is on.
    pub fn host_of(&self, vm: &str) -> Option<&str> {
        self.vms.get(vm).map(String::as_str)
    }

    /// Records a claimed placement on a host at its new generation. The
    /// placement must fit (it was planned on this state): an error means
    /// the cache and the store disagree, and the caller reloads the host.
    pub fn place(
        &mut self,
        host: &str,
        generation: i64,
        placement: &Placement,
        group: Option<&str>,
    ) -> Result<(), StateError> {
        self.update(host, |h| {
            Session::new(&h.topology, &mut h.state).record_placement(placement)?;
            if let Some(g) = group {
                h.groups.insert(placement.vm.clone(), g.to_string());
            }
            h.generation = generation;
            Ok(())
        })?;
        self.vms.insert(placement.vm.clone(), host.to_string());
        Ok(())
    }

    /// Records a VM on a host at its new generation, as [`Fleet::place`]
    /// does, its group the record's; the placement is shared with the
    /// record, not copied.
    pub fn record(&mut self, host: &str, generation: i64, record: &PlacementRecord) -> Result<(), StateError> {
        self.update(host, |h| {
            Session::new(&h.topology, &mut h.state).record(record)?;
            if let Some(g) = &record.group {
                h.groups.insert(record.vm().to_string(), g.clone());
            }
            h.generation = generation;
            Ok(())
        })?;
        self.vms.insert(record.vm().to_string(), host.to_string());
        Ok(())
    }

    /// Forgets a VM on a host at its new generation.
    pub fn unplace(&mut self, host: &str, generation: i64, vm: &str) -> Result<Placement, StateError> {
        let p = self.update(host, |h| {
            let mut gone = Session::new(&h.topology, &mut h.state).remove(&[vm.to_string()]).map_err(|e| match e {
                SessionError::UnknownVm(vm) | SessionError::RequestedTwice(vm) | SessionError::AlreadyPlaced(vm) => {
                    StateError::UnknownVm(vm)
                }
            })?;
            h.groups.remove(vm);
            h.generation = generation;
            Ok(gone.remove(0))
        })?;
        self.vms.remove(vm);
        Ok(p)
    }

    /// Sets a host's drained flag at its new generation.
    pub fn set_drained(&mut self, host: &str, generation: i64, drained: bool) -> bool {
        self.update(host, |h| {
            h.drained = drained;
            h.generation = generation;
            Ok(())
        })
        .is_ok()
    }

    fn update<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut FleetHost) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        let Some(host) = self.hosts.get_mut(name) else {
            return Err(StateError::UnknownVm(name.to_string()));
        };
        let before = host.rank(self.ranking);
        self.index.remove(&before, &host.summary, host.drained);
        let out = f(host);
        host.summary.refresh(&host.state);
        let after = host.rank(self.ranking);
        self.index.add(after.clone(), &host.summary, host.drained);
        if before != after {
            self.rank.remove(&before);
            self.rank.insert(after);
        }
        out
    }

    /// Whether the index kept beside the hosts is the one they would give
    /// if built afresh (for tests).
    #[doc(hidden)]
    pub fn index_is_consistent(&self) -> bool {
        let mut fresh = index::Index::default();
        for h in self.hosts.values() {
            fresh.add(h.rank(self.ranking), &h.summary, h.drained);
        }
        fresh == self.index
    }

    /// Hosts in the order requests try them: by the fleet's [`Ranking`]
    /// (by default most free cores first, then most free threads, then
    /// most free memory), then by name.
    pub fn ranked(&self) -> impl Iterator<Item = &FleetHost> {
        self.rank.iter().filter_map(|(_, name)| self.hosts.get(name))
    }

    /// Chooses a host for `request`: filter, rank, plan (see the crate
    /// documentation). The fleet is not changed: the caller claims the
    /// choice, then records it with [`Fleet::place`].
    pub fn select(&self, request: &Request, constraints: &Constraints) -> Result<Choice, SelectError> {
        self.select_spread(request, constraints, Spread::default())
    }

    /// As [`Fleet::select`], but starting from the `spread.pick`-th of the
    /// first `spread.among` hosts that pass the filters, in rank order (the
    /// ones passed over are tried last). Scheduler replicas sharing one
    /// database would otherwise all pick the same best host at the same
    /// moment and all but one conflict, again and again.
    pub fn select_spread(
        &self,
        request: &Request,
        constraints: &Constraints,
        spread: Spread,
    ) -> Result<Choice, SelectError> {
        self.select_walk(request, constraints, spread, Walk::Indexed)
    }

    /// As [`Fleet::select_spread`], walking as `walk` says.
    ///
    /// Through the index, a request whose only constraint is hosts to
    /// avoid, under a ranking by free cores (the service's), visits only
    /// the hosts whose free threads and memory may hold it (when at most
    /// [`INDEXED`] may), in rank order; the rest are counted for a
    /// rejection cell by cell, as the prefilter would have counted them.
    /// Named hosts, labels and groups are per-host constraints the index
    /// does not know: those requests walk every host.
    #[doc(hidden)]
    pub fn select_walk(
        &self,
        request: &Request,
        constraints: &Constraints,
        spread: Spread,
        walk: Walk,
    ) -> Result<Choice, SelectError> {
        let mut planner = |host: &FleetHost, request: &Request| host.session().decide(request);
        self.select_inner(request, constraints, spread, walk, &mut planner)
    }

    /// The selection loop itself, shared by the service and the simulator:
    /// the filters, the rank order (with `spread`), the [`prefilter`] on
    /// each host's per-node summary (through the index where it applies),
    /// then `decide` on each candidate in that order until one takes the
    /// request (and among up to [`COST_TIES`] hosts equal in rank key, or
    /// the first few under [`Ranking::Cost`], the lowest cost).
    ///
    /// `decide` says what one host would do with the request, without
    /// changing it: the service passes the planner ([`Fleet::select_spread`]);
    /// the simulator passes the planner with the request made for that
    /// host's kind (shared vCPUs on a host that overcommits), or its
    /// no-NUMA baseline, which floats the VM. The caller records the
    /// choice with [`Fleet::place`], so every host's state, summary and
    /// rank stay the fleet's.
    pub fn select_with(
        &self,
        request: &Request,
        constraints: &Constraints,
        spread: Spread,
        decide: &mut Decide<'_>,
    ) -> Result<Choice, SelectError> {
        self.select_inner(request, constraints, spread, Walk::Indexed, decide)
    }

    fn select_inner(
        &self,
        request: &Request,
        constraints: &Constraints,
        spread: Spread,
        walk: Walk,
        decide: &mut Decide<'_>,
    ) -> Result<Choice, SelectError> {
        let mut search = Search { ranking: self.ranking, ..Search::default() };
        search.skips.ranking = self.ranking;
        let pass_over = if spread.among > 1 { spread.pick % spread.among } else { 0 };
        let indexable = walk == Walk::Indexed
            && matches!(self.ranking, Ranking::CoresFirst | Ranking::Cost)
            && constraints.hosts.is_empty()
            && constraints.labels.is_empty()
            && constraints.group.is_none();
        let query = if indexable { self.index.query(&summary::Needs::of(request), INDEXED) } else { None };
        match query {
            Some(q) => {
                let mut maybe = q.maybe;
                // Avoided hosts are walked, so they are counted as avoided.
                let avoided: Vec<Place> = constraints
                    .avoid
                    .iter()
                    .filter_map(|n| self.hosts.get(n))
                    .filter(|h| !h.drained)
                    .map(|h| h.rank(self.ranking))
                    .collect();
                maybe.extend(avoided.iter().filter(|p| !maybe.contains(p)).collect::<Vec<_>>());
                maybe.sort_unstable();
                let hosts = maybe.into_iter().filter_map(|(_, name)| self.hosts.get(name));
                self.walk(hosts, request, constraints, pass_over, &mut search, decide)?;
                if search.best.is_none() {
                    if let Some(first) = q.drained.first() {
                        search.skips.add_many(q.drained.len(), first, HostSkip::Drained, None);
                    }
                    for (cell, short_threads) in q.short {
                        let mut rest = cell.iter().filter(|p| !avoided.contains(p));
                        let Some(first) = rest.next() else { continue };
                        let Some(host) = self.hosts.get(&first.1) else { continue };
                        let skip = match prefilter(request, &host.summary) {
                            Err(short) => HostSkip::Short(short),
                            // The index and the prefilter read one
                            // `Needs`: a host of a ruled-out cell fails it.
                            Ok(()) => continue,
                        };
                        debug_assert_eq!(matches!(skip, HostSkip::Short(Short::Threads { .. })), short_threads);
                        let count = cell.len() - cell.iter().filter(|p| avoided.contains(p)).count();
                        // Under cores-first the first in rank order is the
                        // one with the most free.
                        search.skips.add_many(count, first, skip, Some(first.clone()));
                    }
                }
            }
            None => self.walk(self.ranked(), request, constraints, pass_over, &mut search, decide)?,
        }
        match search.best {
            Some((mut choice, _)) => {
                choice.planned = search.planned;
                Ok(choice)
            }
            None => Err(SelectError::NoHost(Box::new(search.skips.finish(self, request, decide)))),
        }
    }

    /// Tries `hosts`, in rank order, until the best and its ties are
    /// found; the first `pass_over` hosts that pass the filters are tried
    /// last.
    fn walk<'a>(
        &'a self,
        hosts: impl Iterator<Item = &'a FleetHost>,
        request: &Request,
        constraints: &Constraints,
        pass_over: usize,
        search: &mut Search,
        decide: &mut Decide<'_>,
    ) -> Result<(), SelectError> {
        let mut passed_over: Vec<&FleetHost> = Vec::new();
        // Every host is walked (a packing ranking's fullest hosts fail the
        // prefilter), so a rejection counts each host under its reason.
        let compares_cost = self.ranking.compares_cost();
        for host in hosts {
            if let Some((best, key)) = &search.best {
                let tied = compares_cost || *key == self.ranking.key(host.free());
                // A plan that costs nothing cannot be beaten (a later host
                // replaces it only when strictly cheaper): planning the
                // rest would change no answer.
                if !tied || search.ties >= COST_TIES || best.cost.total() == 0 {
                    break;
                }
            }
            if let Some(skip) = excluded(host, constraints) {
                search.skips.add(host, skip);
                continue;
            }
            if passed_over.len() < pass_over && prefilter(request, &host.summary).is_ok() {
                passed_over.push(host);
                continue;
            }
            search.try_host(host, request, decide)?;
        }
        for host in passed_over {
            if search.best.is_some() {
                break;
            }
            search.try_host(host, request, decide)?;
        }
        Ok(())
    }
}

/// The running state of one selection.
#[derive(Default)]
struct Search {
    ranking: Ranking,
    skips: reject::Tally,
    best: Option<(Choice, RankKey)>,
    ties: usize,
    planned: usize,
}

impl Search {
    /// Prefilters and plans one host, keeping the cheapest plan.
    fn try_host(&mut self, host: &FleetHost, request: &Request, decide: &mut Decide<'_>) -> Result<(), SelectError> {
        if let Err(short) = prefilter(request, &host.summary) {
            self.skips.add(host, HostSkip::Short(short));
            return Ok(());
        }
        self.planned += 1;
        match decide(host, request) {
            Ok(decision) => {
                let cost = cost_of(&host.state, &decision.placement);
                self.ties += 1;
                if self.best.as_ref().is_none_or(|(b, _)| cost.total() < b.cost.total()) {
                    let key = self.ranking.key(host.free());
                    let choice =
                        Choice { host: host.name.clone(), generation: host.generation, decision, cost, planned: 0 };
                    self.best = Some((choice, key));
                }
                Ok(())
            }
            Err(rejection) if rejection.reason.is_bad_request() => Err(SelectError::BadRequest(rejection)),
            Err(rejection) => {
                self.skips.add(host, HostSkip::Planner(rejection.reason));
                Ok(())
            }
        }
    }
}

/// What one host would do with a request, changing nothing: the planner's
/// decision there, or its rejection (see [`Fleet::select_with`]).
pub type Decide<'a> = dyn FnMut(&FleetHost, &Request) -> Result<Decision, Rejection> + 'a;

/// How far from the best host a replica starts (see
/// [`Fleet::select_spread`]); the default, one host, is the best.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    /// Among how many of the first hosts that pass the filters.
    pub among: usize,
    /// Which one, modulo `among`.
    pub pick: usize,
}

impl Spread {
    /// The `random`-th of `among` hosts (modulo `among`): the caller draws
    /// the number (the service from its generator, seeded per replica), so
    /// the loop stays pure and a seeded run repeats itself.
    pub fn among(among: usize, random: u64) -> Spread {
        let among = among.max(1);
        Spread { among, pick: (random % among as u64) as usize }
    }
}

impl Default for Spread {
    fn default() -> Spread {
        Spread { among: 1, pick: 0 }
    }
}

/// Whether a host is out for reasons other than capacity.
fn excluded(host: &FleetHost, c: &Constraints) -> Option<HostSkip> {
    if host.drained {
        return Some(HostSkip::Drained);
    }
    if !c.hosts.is_empty() && !c.hosts.contains(&host.name) {
        return Some(HostSkip::NotNamed);
    }
    if c.avoid.contains(&host.name) {
        return Some(HostSkip::Avoided);
    }
    if let Some((key, want)) = c.labels.iter().find(|(k, v)| host.labels.get(*k) != Some(*v)) {
        return Some(HostSkip::Label { key: key.clone(), value: want.clone() });
    }
    if let Some(group) = &c.group {
        if let Some((vm, _)) = host.groups.iter().find(|(_, g)| *g == group) {
            return Some(HostSkip::AntiAffinity { group: group.clone(), vm: vm.clone() });
        }
    }
    None
}
