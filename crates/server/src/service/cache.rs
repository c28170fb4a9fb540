//! The fleet cache and its change feed: every read of the store's rows
//! goes through here, and this is the only module that decodes them
//! (placement rows by `rows::decode`, through wire's record codec; host
//! rows' topology and reservations here). Hosts are built from the
//! records by the fleet (`FleetHost::from_records`).
//!
//! Why a cache: ranking 10,000 hosts must not read 10,000 rows per
//! request. Why it is safe: the cache only proposes; the store accepts a
//! claim only if the host's generation is the one the decision saw, so a
//! stale cache costs a retry, never a double booking (OpenStack
//! Placement's resource-provider generations). Before each decision the
//! cache reads which hosts changed since it last looked (one indexed
//! query, [`Cache::sync`]), so replicas sharing a PostgreSQL database see
//! each other's claims before deciding, not only after a conflict.

use super::locks::{lock, read, write};
use super::rows::{self, Record};
use crate::error::{ApiError, Missing};
use numaplace_fleet::{Fleet, FleetHost};
use numaplace_plan::{PlacementRecord, Reservations};
use numaplace_store::{HostRow, PlacementRow, Store};
use numaplace_topo::Topology;
use numaplace_wire::fleet::HostRulesDoc;
use numaplace_wire::plan::ReservedDoc;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};

/// The fleet as this server last read it, and where the change feed is.
pub struct Cache {
    store: Arc<dyn Store>,
    fleet: RwLock<Fleet>,
    seen: Mutex<i64>,
    // Hosts of one kind share one parsed topology: 10,000 hosts of three
    // kinds hold three topologies, keyed by their JSON.
    kinds: Mutex<BTreeMap<String, Arc<Topology>>>,
    // Hosts dropped from the cache because a failed claim's host could not
    // be read again; `sync` reads them first.
    unread: Mutex<BTreeSet<String>>,
}

impl Cache {
    /// An empty cache over `store` (`sync` fills it).
    pub fn new(store: Arc<dyn Store>) -> Cache {
        Cache {
            store,
            fleet: RwLock::new(Fleet::new()),
            seen: Mutex::new(0),
            kinds: Mutex::new(BTreeMap::new()),
            unread: Mutex::new(BTreeSet::new()),
        }
    }

    /// The store, for writes and for what the cache does not hold (kept
    /// answers, outcomes).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The fleet, read.
    pub fn fleet(&self) -> std::sync::RwLockReadGuard<'_, Fleet> {
        read(&self.fleet)
    }

    /// The fleet, to change (a claim recorded before it commits).
    pub fn fleet_mut(&self) -> std::sync::RwLockWriteGuard<'_, Fleet> {
        write(&self.fleet)
    }

    /// Brings the cache up to the store: every host changed since the last
    /// look is read again (or dropped when removed). `in_flight` tells
    /// the hosts this server has claims on not yet committed.
    pub fn sync(&self, in_flight: &dyn Fn(&str) -> bool) -> Result<(), ApiError> {
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
                Some(_) if in_flight(&name) => {}
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
    pub fn reload(&self, name: &str) -> Result<(), ApiError> {
        let Some(row) = self.store.host(name)? else {
            write(&self.fleet).remove(name);
            return Ok(());
        };
        let records = self.records(Some(name))?;
        let host = self.build(&row, records.iter())?;
        write(&self.fleet).insert(host);
        Ok(())
    }

    /// Takes a host out of the cache until `sync` reads it again (its
    /// store could not be read, and the cache must not keep a claim that
    /// failed).
    pub fn forget(&self, name: &str) {
        write(&self.fleet).remove(name);
        lock(&self.unread).insert(name.to_string());
    }

    /// A host's stored row.
    pub fn host_row(&self, name: &str) -> Result<Option<HostRow>, ApiError> {
        Ok(self.store.host(name)?)
    }

    /// A host's stored row, or 404 naming it.
    pub fn existing_host(&self, name: &str) -> Result<HostRow, ApiError> {
        self.host_row(name)?.ok_or_else(|| ApiError::NotFound(Missing::Host(name.to_string())))
    }

    /// Where a VM is stored and who put it there, its text left unread
    /// (a delete, or a report's check for a VM placed elsewhere, needs no
    /// more).
    pub fn row(&self, vm: &str) -> Result<Option<PlacementRow>, ApiError> {
        Ok(self.store.placement(vm)?)
    }

    /// One VM's stored placement, read.
    pub fn record(&self, vm: &str) -> Result<Option<Record>, ApiError> {
        self.store.placement(vm)?.map(rows::decode).transpose()
    }

    /// The stored placements, all or one host's, read, by VM name.
    pub fn records(&self, host: Option<&str>) -> Result<Vec<Record>, ApiError> {
        self.store.placements(host)?.into_iter().map(rows::decode).collect()
    }

    /// A stored topology, parsed once per kind.
    pub fn topology(&self, json: &str, host: &str) -> Result<Arc<Topology>, ApiError> {
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

    /// A fleet host from its stored row and placements, built by the
    /// fleet from the records. Placements that no longer fit (an agent's
    /// report racing a claim) are left out with a warning rather than
    /// making the host unusable.
    pub fn build<'r>(&self, row: &HostRow, records: impl Iterator<Item = &'r Record>) -> Result<FleetHost, ApiError> {
        let topology = self.topology(&row.topology, &row.name)?;
        let reservations = match stored_reserved(row)? {
            Some(d) => d
                .to_reservations()
                .map_err(|e| ApiError::Internal(format!("stored reservations of host {}: {e}", row.name)))?,
            None => Reservations::default(),
        };
        let mut reservations = reservations;
        if let Some(rules) = stored_rules(row)? {
            rules
                .apply(&mut reservations)
                .map_err(|e| ApiError::Internal(format!("stored rules of host {}: {e}", row.name)))?;
        }
        let records: Vec<PlacementRecord> = records.map(|r| r.record().clone()).collect();
        let (mut host, left_out) = FleetHost::from_records(
            row.name.clone(),
            topology,
            reservations,
            &records,
            row.labels.clone(),
            row.generation,
        )
        .map_err(|e| ApiError::Internal(format!("host {}: {e}", row.name)))?;
        for (vm, e) in left_out {
            tracing::warn!(host = %row.name, vm = %vm, "VM {vm} left out of the cache of host {}: {e}", row.name);
        }
        host.drained = row.drained;
        Ok(host)
    }
}

/// A host row's stored planning rules, read (`None`: the defaults).
pub fn stored_rules(row: &HostRow) -> Result<Option<HostRulesDoc>, ApiError> {
    row.rules
        .as_deref()
        .map(|json| {
            serde_json::from_str::<HostRulesDoc>(json)
                .map_err(|e| ApiError::Internal(format!("stored rules of host {}: {e}", row.name)))
        })
        .transpose()
}

/// A host row's stored reservations, read (`None`: it has none).
pub fn stored_reserved(row: &HostRow) -> Result<Option<ReservedDoc>, ApiError> {
    row.reserved
        .as_deref()
        .map(|json| {
            serde_json::from_str::<ReservedDoc>(json)
                .map_err(|e| ApiError::Internal(format!("stored reservations of host {}: {e}", row.name)))
        })
        .transpose()
}
