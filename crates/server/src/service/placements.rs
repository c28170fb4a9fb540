//! The placement commands: place, delete, move. Each decides on the
//! cache, hands the change to the claims, and once the store answered
//! counts it and writes its audit line.

use super::claims::{Attempt, Commit, Step};
use super::rows::{self, replay_placed, to_json, Placed};
use super::Service;
use crate::audit::line as audit;
use crate::command::{Delete, IdempotencyKey, Move, Place};
use crate::error::{ApiError, Change, Conflict, Missing};
use numaplace_fleet::{Choice, Constraints, SelectError};
use numaplace_plan::PlacementRecord;
use numaplace_store::{Answer, HostChange, Origin};
use numaplace_wire::record::to_body;
use std::time::Instant;

impl Service {
    /// Places one VM. With `dry_run`, nothing is claimed.
    pub fn place(&self, cmd: &Place) -> Result<Placed, ApiError> {
        self.place_keyed(cmd, None)
    }

    /// [`Service::place`] under the client's `Idempotency-Key`: a retry
    /// is answered the first answer (201) and places nothing. A dry run
    /// claims nothing, so keeps no answer.
    pub fn place_keyed(&self, cmd: &Place, key: Option<&IdempotencyKey>) -> Result<Placed, ApiError> {
        let key = key.filter(|_| !cmd.dry_run);
        self.claims.keyed(key, replay_placed, |key| self.place_once(cmd, key, None))
    }

    /// [`Service::place`] for `owner` (the Kubernetes extender's bind: the
    /// pod's UID), kept with the claim and moved with it, so that a pod
    /// recreated under the same name is told from the one it was made for.
    pub fn place_for(&self, cmd: &Place, owner: &str) -> Result<Placed, ApiError> {
        self.place_once(cmd, None, Some(owner))
    }

    /// Where a new VM goes: the fleet's choice on the cache, under the
    /// decision lock (held by the caller). A rejection is counted and
    /// remembered for the web view.
    fn decide_place(&self, cmd: &Place, attempt: &Attempt) -> Result<Choice, ApiError> {
        let request = &cmd.request;
        let started = Instant::now();
        let choice = {
            let fleet = self.cache.fleet();
            if let Some(host) = fleet.host_of(&request.name) {
                return Err(ApiError::Conflict(Conflict::AlreadyPlaced {
                    vm: request.name.clone(),
                    host: Some(host.to_string()),
                }));
            }
            self.claims.select(&fleet, request, &cmd.selection(), attempt)
        };
        self.metrics.decision(started.elapsed());
        match choice {
            Ok(c) => Ok(c),
            Err(SelectError::NoHost(r)) => {
                self.metrics.rejected(&r);
                self.remember(r.to_string());
                Err(ApiError::NoHost(r))
            }
            Err(SelectError::BadRequest(r)) => {
                self.metrics.rejected_code(r.reason.code());
                self.remember(r.to_string());
                Err(ApiError::Unplaceable(r))
            }
        }
    }

    fn place_once(&self, cmd: &Place, key: Option<&IdempotencyKey>, owner: Option<&str>) -> Result<Placed, ApiError> {
        let request = &cmd.request;
        let group = cmd.group.clone();
        self.claims.with_retries(Change::Place(request.name.clone()), |attempt| {
            let claim = self.claims.decide();
            self.sync()?;
            let choice = self.decide_place(cmd, attempt)?;
            // The constraints are kept so a move decides under them.
            let record = PlacementRecord::planned(&choice.decision, request).under(cmd.host_constraints());
            if cmd.dry_run {
                let doc = to_body(&record, &choice.host, true, Some(&choice.decision));
                return Ok(Step::Done(Placed { doc, replayed: false }));
            }
            let answered = to_body(&record, &choice.host, false, Some(&choice.decision));
            let answer = key.map(|k| k.answer(201, to_json(&answered)?)).transpose()?;
            let placement = &choice.decision.placement;
            let mut row = rows::encode(&choice.host, &record, Some(&choice.decision));
            row.owner = owner.map(str::to_string);
            let pus = row.pus.clone();
            let change =
                HostChange { host: choice.host.clone(), generation: choice.generation, remove: vec![], add: vec![row] };
            // In the cache now, so the next decision counts it; committed
            // after the lock is released.
            let flight = self.claims.speculate(&self.cache, &choice.host, choice.generation, |fleet| {
                fleet.place(&choice.host, choice.generation + 1, placement, group.as_deref()).is_ok()
            });
            drop(claim);
            let generation = choice.generation + 1;
            match self.claims.settle(&self.cache, flight, std::slice::from_ref(&change), answer.as_ref())? {
                Commit::Done => {}
                Commit::Lost(host) => return Ok(Step::Stale(Some(host))),
                Commit::Unknown(transaction) => {
                    let (vm, host) = (request.name.clone(), choice.host.clone());
                    self.claims.resolve_later(transaction, move || audit::placed(&vm, &host, generation, &pus));
                    return Err(ApiError::OutcomeUnknown);
                }
            }
            self.metrics.placed();
            audit::placed(&request.name, &choice.host, generation, &pus);
            Ok(Step::Done(Placed { doc: answered, replayed: false }))
        })
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
        self.claims.keyed(key, replay, |key| self.delete_once(cmd, key, None).map(|_| false))
    }

    /// Frees a VM's placement only while it is still held for `owner` (a
    /// claim kept for a Kubernetes pod that is gone): read and freed in
    /// one generation-checked write, so a claim made or moved since (for
    /// another pod) is never freed by it; a conflict is decided again.
    /// True when freed; false when it is no longer held for `owner`
    /// (freed, or another's since), nothing done.
    pub fn release_owned(&self, vm: &str, owner: &str) -> Result<bool, ApiError> {
        match self.delete_once(&Delete { vm: vm.to_string() }, None, Some(owner)) {
            Err(ApiError::NotFound(Missing::Vm(_))) => Ok(false),
            other => other,
        }
    }

    fn delete_once(&self, cmd: &Delete, key: Option<&IdempotencyKey>, owner: Option<&str>) -> Result<bool, ApiError> {
        let vm = cmd.vm.as_str();
        let answer = key.map(|k| k.answer(204, String::new())).transpose()?;
        let missing = || ApiError::NotFound(Missing::Vm(vm.to_string()));
        self.claims.with_retries(Change::Delete(vm.to_string()), |_| {
            let claim = self.claims.decide();
            // Other replicas' changes to the host, so its generation below
            // is current.
            self.sync()?;
            let row = self.cache.row(vm)?.ok_or_else(missing)?;
            if owner.is_some() && row.owner.as_deref() != owner {
                return Ok(Step::Done(false));
            }
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
                self.cache.fleet().host(&row.host).filter(|h| h.state.placement(vm).is_some()).map(|h| h.generation);
            let generation = match cached {
                Some(g) => g,
                None => self.cache.existing_host(&row.host)?.generation,
            };
            let change = HostChange { host: row.host.clone(), generation, remove: vec![vm.to_string()], add: vec![] };
            let flight = self.claims.speculate(&self.cache, &row.host, generation, |fleet| {
                fleet.unplace(&row.host, generation + 1, vm).is_ok()
            });
            drop(claim);
            match self.claims.settle(&self.cache, flight, &[change], answer.as_ref()) {
                Ok(Commit::Done) => {}
                Ok(Commit::Lost(host)) => return Ok(Step::Stale(Some(host))),
                Ok(Commit::Unknown(transaction)) => {
                    let (vm, host) = (vm.to_string(), row.host.clone());
                    self.claims.resolve_later(transaction, move || audit::deleted(&vm, &host, generation + 1));
                    return Err(ApiError::OutcomeUnknown);
                }
                // Deleted by someone else between the read and the commit.
                Err(ApiError::NotFound(_)) => return Err(missing()),
                Err(e) => return Err(e),
            }
            self.metrics.deleted();
            audit::deleted(vm, &row.host, generation + 1);
            Ok(Step::Done(true))
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
        self.claims.keyed(key, replay_placed, |key| self.move_once(cmd, key))
    }

    fn move_once(&self, cmd: &Move, key: Option<&IdempotencyKey>) -> Result<Placed, ApiError> {
        let vm = cmd.vm.as_str();
        self.claims.with_retries(Change::Move(vm.to_string()), |attempt| {
            let _claim = self.claims.decide();
            self.sync()?;
            let r = self.cache.record(vm)?.ok_or_else(|| ApiError::NotFound(Missing::Vm(vm.to_string())))?;
            let (stored, source) = (r.record(), &r.host);
            if !r.is_service() {
                return Err(ApiError::Conflict(Conflict::NotPlacedHere { vm: vm.to_string(), host: source.clone() }));
            }
            let request = stored
                .request
                .as_ref()
                .ok_or_else(|| ApiError::Internal(format!("stored placement of VM {vm} has no request")))?;
            // The constraints the VM was placed under, each replaced by
            // the move's when it gives one: a move never lands a VM on a
            // host its request ruled out.
            let mut constraints = Constraints::of(&stored.constraints);
            if !cmd.hosts.is_empty() {
                constraints.hosts = cmd.hosts.clone();
            }
            if !cmd.labels.is_empty() {
                constraints.labels = cmd.labels.clone();
            }
            constraints.group = cmd.group.clone().or_else(|| stored.group.clone());
            constraints.avoid = vec![source.clone()];
            let source_gen = self.cache.existing_host(source)?.generation;
            let choice = self.claims.select(&self.cache.fleet(), request, &constraints, attempt);
            let choice = match choice {
                Ok(c) => c,
                Err(SelectError::NoHost(r)) => return Err(ApiError::NoHost(r)),
                Err(SelectError::BadRequest(r)) => return Err(ApiError::Unplaceable(r)),
            };
            // The VM as it was kept (its constraints and group), where
            // the move puts it.
            let moved = PlacementRecord {
                constraints: stored.constraints.clone(),
                group: stored.group.clone(),
                ..PlacementRecord::planned(&choice.decision, request)
            };
            if cmd.dry_run {
                let doc = to_body(&moved, &choice.host, true, Some(&choice.decision));
                return Ok(Step::Done(Placed { doc, replayed: false }));
            }
            // The destination's generation may be predicted from claims
            // still in flight: they must commit first. (This lock stops
            // new ones; those in flight finish without it.)
            if self.claims.last_on(&choice.host).is_some_and(|t| !t.wait()) {
                return Ok(Step::Stale(Some(choice.host.clone())));
            }
            // The row moves whole: its constraints and group as stored.
            let mut add = rows::encode(&choice.host, &moved, Some(&choice.decision));
            add.owner = r.owner.clone();
            let pus = add.pus.clone();
            let changes = [
                HostChange { host: choice.host.clone(), generation: choice.generation, remove: vec![], add: vec![add] },
                HostChange { host: source.clone(), generation: source_gen, remove: vec![vm.to_string()], add: vec![] },
            ];
            let answered = to_body(&moved, &choice.host, false, Some(&choice.decision));
            let answer = key.map(|k| k.answer(200, to_json(&answered)?)).transpose()?;
            let (from, to) = ((source.clone(), source_gen + 1), (choice.host.clone(), choice.generation + 1));
            match self.claims.commit(&changes, answer.as_ref())? {
                Commit::Done => {}
                Commit::Lost(host) => return Ok(Step::Stale(Some(host))),
                Commit::Unknown(transaction) => {
                    let vm = vm.to_string();
                    self.claims.resolve_later(transaction, move || {
                        audit::moved(&vm, (&from.0, from.1), (&to.0, to.1), &pus);
                    });
                    return Err(ApiError::OutcomeUnknown);
                }
            }
            self.metrics.moved();
            audit::moved(vm, (&from.0, from.1), (&to.0, to.1), &pus);
            let _ = self.cache.reload(source);
            self.claims.record(&self.cache, &choice, stored.group.as_deref());
            Ok(Step::Done(Placed { doc: answered, replayed: false }))
        })
    }
}
