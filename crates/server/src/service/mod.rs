//! The service's logic without HTTP, split along a placement record's
//! life:
//!
//! - `rows`: the store's row to and from the placement record, through
//!   wire's record codec (`rows::decode`, the service's one reading of
//!   stored placement text, and `encode`);
//! - `cache`: the fleet as this server last read it and the store's change
//!   feed; every read of stored rows goes through it;
//! - `claims`: tickets, speculation and settling, retries, idempotency
//!   keys, outcome-unknown handling;
//! - the commands (this file's queries, `hosts`, `placements`, `report`):
//!   thin, each a decision on the cache handed to the claims; the audit
//!   lines and the decision and outcome counters are written here only.
//!
//! Dependencies run one way: commands -> claims -> cache -> rows.

mod cache;
mod claims;
mod hosts;
mod locks;
mod placements;
mod report;
mod rows;

pub use crate::command::HostFilter;
pub use crate::error::{ApiError, Change, Conflict, CpuRole, Missing, Unavailable, NOT_PLACED_HERE, PINNED_CPU};
use crate::metrics::Metrics;
use cache::Cache;
use claims::Claims;
pub use claims::{spread_among, spread_k, MAX_ATTEMPTS, RESOLVE_LATER_FOR};
use locks::lock;
use numaplace_fleet::Fleet;
use numaplace_plan::{HostState, Origin, Placement, PlacementRecord};
use numaplace_store::Store;
use numaplace_topo::Topology;
use numaplace_wire::fleet::{DomainsAnswerDoc, HostDetailDoc, HostDoc, LocalitySampleDoc, PlacedDoc};
use numaplace_wire::plan::PlacementDoc;
use numaplace_wire::record::to_answer_entry;
pub use rows::{claimed_pus, Placed, HOLD_SUFFIX};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// The conflict code of a service VM whose domain is pinned elsewhere
/// than placed.
pub const REPINNED: &str = DomainsAnswerDoc::REPINNED;

/// The fleet service.
pub struct Service {
    cache: Cache,
    claims: Claims,
    // The last rejections, worded, for the web view; and each host's last
    // agent report, summarised.
    recent: Mutex<VecDeque<String>>,
    reports: Mutex<BTreeMap<String, String>>,
    locality: Mutex<BTreeMap<String, VecDeque<LocalitySampleDoc>>>,
    /// Counters and histograms for `/metrics`.
    pub metrics: Arc<Metrics>,
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
        let store: Arc<dyn Store> = Arc::from(store);
        let metrics = Arc::new(Metrics::default());
        let svc = Service {
            cache: Cache::new(store.clone()),
            claims: Claims::new(store, metrics.clone(), replicas, seed),
            recent: Mutex::new(VecDeque::new()),
            reports: Mutex::new(BTreeMap::new()),
            locality: Mutex::new(BTreeMap::new()),
            metrics,
        };
        svc.sync()?;
        Ok(svc)
    }

    /// Brings the cache up to the store: every host changed since the last
    /// look is read again (or dropped when removed).
    pub fn sync(&self) -> Result<(), ApiError> {
        self.cache.sync(&|host| self.claims.in_flight_on(host))
    }

    /// Whether the store answers (`/readyz`).
    /// Ready: the store answers, and this server's cache has caught up
    /// with it (every change other servers committed read in), within the
    /// request's deadline. A replica back from a stall answers 503 here
    /// until it has read what it missed, so a load balancer sends its
    /// traffic to peers meanwhile (issue 46).
    pub fn ready(&self) -> Result<(), ApiError> {
        self.cache.store().ping().map_err(ApiError::from)?;
        self.sync()
    }

    fn host_doc(&self, name: &str) -> Result<HostDoc, ApiError> {
        self.cache
            .fleet()
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
        let fleet = self.cache.fleet();
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
        let fleet = self.cache.fleet();
        let h = fleet.host(name).ok_or_else(|| ApiError::NotFound(Missing::Host(name.to_string())))?;
        let mut placements: Vec<PlacementDoc> = h
            .state
            .placements()
            .iter()
            .map(|p| to_answer_entry(&PlacementRecord::new(Arc::clone(p), Origin::Planned)))
            .collect();
        placements.sort_by(|a, b| a.vm.cmp(&b.vm));
        Ok(HostDetailDoc {
            host: HostDoc::new(h),
            placements,
            map: numaplace_emit::plan_text::host_map_text(&h.topology, &h.state),
        })
    }

    /// One placement.
    pub fn placement(&self, vm: &str) -> Result<(PlacedDoc, Placement, Arc<Topology>), ApiError> {
        let r = self.cache.record(vm)?.ok_or_else(|| ApiError::NotFound(Missing::Vm(vm.to_string())))?;
        let host = self.cache.existing_host(&r.host)?;
        let topology = self.cache.topology(&host.topology, &host.name)?;
        Ok((r.body(), r.placement().clone(), topology))
    }

    /// Placements by VM name, all or one host's, `limit` after `after`.
    pub fn placements(
        &self,
        host: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<PlacedDoc>, Option<String>), ApiError> {
        let records = self.cache.records(host)?;
        let mut out = Vec::new();
        let mut next = None;
        for r in records.iter().filter(|r| after.is_none_or(|a| r.vm() > a)) {
            if out.len() == limit {
                next = out.last().map(|p: &PlacedDoc| p.placement.vm.clone());
                break;
            }
            out.push(r.body());
        }
        Ok((out, next))
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
    fn record_locality(&self, memory: &[numaplace_wire::fleet::VmMemoryDoc], state: &HostState) {
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut all = lock(&self.locality);
        for m in memory {
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

    /// Where a VM's placement is held and whom it was claimed for (a
    /// Kubernetes pod's UID, when a bind claimed it), as stored now.
    pub fn holder(&self, vm: &str) -> Result<Option<(String, Option<String>)>, ApiError> {
        Ok(self.cache.row(vm)?.map(|r| (r.host, r.owner)))
    }

    /// The fleet, for `/metrics` (read under the cache's lock).
    pub fn with_fleet<T>(&self, f: impl FnOnce(&Fleet) -> T) -> T {
        f(&self.cache.fleet())
    }
}
