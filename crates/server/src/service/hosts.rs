//! The host commands: register, patch, drain, remove. Each writes the
//! host's row under its generation (retried by the claims on conflict),
//! writes its audit line, and reads the change back into the cache.

use super::cache::{stored_reserved, stored_rules};
use super::claims::Step;
use super::Service;
use crate::audit::line as audit;
use crate::command::{Drain, Patch, Register, RemoveHost, Reserve};
use crate::error::{ApiError, Change, Conflict, CpuRole, Missing};
use numaplace_plan::{CpuMode, Placement, Reservations, Session};
use numaplace_store::{Expect, HostRow, StoreError};
use numaplace_topo::Topology;
use numaplace_wire::fleet::{HostDoc, HostRulesDoc};
use numaplace_wire::plan::ReservedDoc;
use numaplace_wire::profile::{Document, Given as GivenValue, Overrides};
use std::collections::BTreeMap;

/// What a host write makes of the topology and the stored reservations:
/// the reservations to keep (`None`: the stored ones).
type ReserveFn<'a> = &'a dyn Fn(&Topology, Option<&ReservedDoc>) -> Result<Option<Reservations>, ApiError>;

impl Service {
    /// Registers or replaces a host. Returns its document and whether it
    /// is new. What the registration does not give (labels; reservations,
    /// when neither the query nor the upload's `reserved` has any) keeps
    /// its stored value: an agent that restarts re-registers its topology
    /// without wiping what an operator set through the API.
    pub fn put_host(&self, cmd: Register) -> Result<(HostDoc, bool), ApiError> {
        let Register { host: name, topology, reserved: document, overrides, labels, rules } = cmd;
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
        // The rules given, else (reservations given: the registrant spoke
        // for its profile, which declares none) the defaults, else (an
        // agent told nothing) the stored ones.
        let rules = rules.or_else(|| given.then(HostRulesDoc::default));
        self.write_host(&name, Some(&topology), labels, rules.as_ref(), false, &|_, _| Ok(reserved.clone()))
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
        self.write_host(&name, None, labels, None, true, &reserve).map(|(doc, _)| doc)
    }

    /// Drains or undrains a host.
    pub fn drain(&self, cmd: &Drain) -> Result<HostDoc, ApiError> {
        let (name, drained) = (cmd.host.as_str(), cmd.drained);
        let store = self.cache.store();
        let before = self.cache.host_row(name)?.map(|h| h.drained);
        let generation = store.set_drained(name, drained)?;
        audit::drained(name, generation, before.unwrap_or(drained), drained);
        self.sync()?;
        self.host_doc(name)
    }

    /// Removes a host (with `force`, its placements too).
    pub fn remove_host(&self, cmd: &RemoveHost) -> Result<(), ApiError> {
        let (name, force) = (cmd.host.as_str(), cmd.force);
        let removed = self.cache.store().remove_host(name, force)?;
        audit::host_removed(name, removed.generation, &removed.vms);
        self.sync()
    }

    /// Writes a host's row under its generation, retried on conflict:
    /// `topology` (`None`: the stored one; the host must then exist),
    /// `labels` (`None`: the stored ones), `rules` (`None`: the stored
    /// ones), and the reservations `reserve`
    /// makes of the topology and the stored reservations (`None`: keep
    /// them). The VMs there must fit the result, and (`refuse_pinned`) no
    /// CPU a VM is pinned on may become reserved or shared.
    fn write_host(
        &self,
        name: &str,
        topology: Option<&Topology>,
        labels: Option<BTreeMap<String, String>>,
        rules: Option<&HostRulesDoc>,
        refuse_pinned: bool,
        reserve: ReserveFn<'_>,
    ) -> Result<(HostDoc, bool), ApiError> {
        self.claims.with_retries(Change::Host(name.to_string()), |_| {
            let existing = self.cache.host_row(name)?;
            let given = Given { topology, labels: labels.as_ref(), rules };
            let row = self.host_row_to_write(name, existing.as_ref(), given, refuse_pinned, reserve)?;
            // Written only if no placement (or other write) reached the
            // host since its VMs were checked; else check again.
            let expect = existing.as_ref().map_or(Expect::Absent, |h| Expect::Generation(h.generation));
            match self.cache.store().put_host_if(&row, expect) {
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

    /// The row a host write stores, checked against the VMs on the host
    /// (see [`Service::write_host`]).
    fn host_row_to_write(
        &self,
        name: &str,
        existing: Option<&HostRow>,
        given: Given<'_>,
        refuse_pinned: bool,
        reserve: ReserveFn<'_>,
    ) -> Result<HostRow, ApiError> {
        let Given { topology, labels, rules } = given;
        let stored_topology = match (existing, topology) {
            (_, Some(_)) => None,
            (Some(row), None) => Some(self.cache.topology(&row.topology, name)?),
            (None, None) => return Err(ApiError::NotFound(Missing::Host(name.to_string()))),
        };
        let topology: &Topology = match (topology, &stored_topology) {
            (Some(t), _) => t,
            (None, Some(t)) => t,
            (None, None) => return Err(ApiError::Internal(format!("host {name}: no topology"))),
        };
        let stored_reserved = match existing {
            Some(row) => stored_reserved(row)?,
            None => None,
        };
        let reserved = match reserve(topology, stored_reserved.as_ref())? {
            Some(r) => r,
            None => match &stored_reserved {
                Some(d) => d.to_reservations().map_err(|e| ApiError::Internal(format!("host {name}: {e}")))?,
                None => Reservations::default(),
            },
        };
        let rules = match (rules, existing) {
            (Some(r), _) => r.clone(),
            (None, Some(row)) => stored_rules(row)?.unwrap_or_default(),
            (None, None) => HostRulesDoc::default(),
        };
        let mut reserved = reserved;
        rules.apply(&mut reserved).map_err(|e| ApiError::BadRequest(format!("rules: {e}")))?;
        // The VMs already there must fit the new description.
        let kept: Vec<Placement> = match existing {
            Some(_) => self.cache.records(Some(name))?.iter().map(|r| r.placement().clone()).collect(),
            None => Vec::new(),
        };
        if refuse_pinned {
            check_pins_free(name, &kept, &reserved)?;
        }
        Session::open(topology, reserved.clone(), &kept).map_err(|(i, error)| match i {
            Some(i) => {
                ApiError::Conflict(Conflict::DoesNotFit { host: name.to_string(), vm: kept[i].vm.clone(), error })
            }
            None => ApiError::BadRequest(format!("reserved: {error}")),
        })?;
        let reserved_json = ReservedDoc::new(&reserved).map(|d| super::rows::to_json(&d)).transpose()?;
        let rules_json = HostRulesDoc::new(&reserved).map(|d| super::rows::to_json(&d)).transpose()?;
        Ok(HostRow {
            name: name.to_string(),
            topology: match existing {
                Some(h) if stored_topology.is_some() => h.topology.clone(),
                _ => numaplace_read::json::to_string(topology),
            },
            reserved: reserved_json,
            labels: match (labels, existing) {
                (Some(l), _) => l.clone(),
                (None, Some(h)) => h.labels.clone(),
                (None, None) => BTreeMap::new(),
            },
            drained: existing.is_some_and(|h| h.drained),
            generation: 0,
            changed: 0,
            rules: rules_json,
        })
    }
}

/// What a host write gives beside the reservations, each `None` to keep
/// the stored value.
struct Given<'a> {
    topology: Option<&'a Topology>,
    labels: Option<&'a BTreeMap<String, String>>,
    rules: Option<&'a HostRulesDoc>,
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

/// Reservations given as values, as the profile's resolution takes the
/// CLI's flags.
fn overrides_of(r: &Reserve) -> Overrides<'_> {
    Overrides {
        reserved_cpus: GivenValue::of("reserved_cpus", r.reserved_cpus.as_deref()),
        reserved_memory: GivenValue::of("reserved_memory", r.reserved_memory.as_deref()),
        shared_cpus: GivenValue::of("shared_cpus", r.shared_cpus.as_deref()),
    }
}
