//! The one way to plan against a host: a [`Session`] over its
//! [`HostState`]. The CLI's `plan` (with `--state` and `--remove`), lint's
//! fixer, balance's re-plan, the fleet's per-host decision and recording,
//! the simulator and the libvirt edge's reading of a host all go through
//! it, so "take these VMs out, then place these requests in order" and
//! "this VM is already here" mean the same thing everywhere.
//!
//! A session borrows or owns its state: over a `&HostState` it can only
//! [`Session::decide`] (the fleet asks each host without changing it);
//! over a `&mut HostState` or an owned one it can also change it, each
//! change all or nothing.

use crate::engine::{plan, plan_batch, Decision, Rejection};
use crate::placement::Placement;
use crate::record::PlacementRecord;
use crate::request::Request;
use crate::state::{HostState, Reservations, StateError};
use numaplace_topo::Topology;
use std::borrow::{Borrow, BorrowMut};
use std::sync::Arc;

/// Why a change was refused as a whole (nothing was changed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// A VM to remove is not placed (or is named twice).
    #[error("cannot remove {0}: no VM of that name is placed")]
    UnknownVm(String),
    /// Two requests of one change have the same name.
    #[error("VM name `{0}` is requested twice")]
    RequestedTwice(String),
    /// A request names a VM that stays placed.
    #[error("VM name `{0}` is already placed")]
    AlreadyPlaced(String),
}

/// What a change did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The removed VMs' placements, in the order asked.
    pub removed: Vec<Placement>,
    /// One result per request, in order; accepted ones are recorded in
    /// the state.
    pub results: Vec<Result<Decision, Rejection>>,
}

impl Outcome {
    /// Whether every request was placed.
    pub fn all_placed(&self) -> bool {
        self.results.iter().all(Result::is_ok)
    }

    /// The records of the VMs placed, each with the request it answered
    /// (`requests` as given to the change), in request order.
    pub fn records<'a>(&'a self, requests: &'a [Request]) -> impl Iterator<Item = PlacementRecord> + 'a {
        self.results.iter().zip(requests).filter_map(|(r, req)| Some(PlacementRecord::planned(r.as_ref().ok()?, req)))
    }
}

/// Where a host state did not take a VM it was given as already there:
/// its position in the list (`None`: a reserved CPU the host does not
/// have) and why.
pub type OpenError = (Option<usize>, StateError);

/// Planning against one host's state.
#[derive(Debug)]
pub struct Session<'t, S> {
    topology: &'t Topology,
    state: S,
}

impl<'t, S: Borrow<HostState>> Session<'t, S> {
    /// A session over `state`, a state of `topology`.
    pub fn new(topology: &'t Topology, state: S) -> Session<'t, S> {
        Session { topology, state }
    }

    /// The host's topology.
    pub fn topology(&self) -> &'t Topology {
        self.topology
    }

    /// The state as the session has left it.
    pub fn state(&self) -> &HostState {
        self.state.borrow()
    }

    /// The state, ending the session.
    pub fn into_state(self) -> S {
        self.state
    }

    /// What the host would do with `request`, changing nothing: the
    /// planner's decision, or its rejection.
    pub fn decide(&self, request: &Request) -> Result<Decision, Rejection> {
        plan(self.topology, self.state.borrow(), request)
    }
}

impl<'t, S: BorrowMut<HostState>> Session<'t, S> {
    /// Takes the VMs named in `remove` out, then places `place` in order.
    /// Every name is checked first: an unknown VM to remove (or one named
    /// twice), a name requested twice, or a name that stays placed refuses
    /// the whole change and leaves the state as it was. Each request is
    /// then planned against the state as the earlier ones left it; a
    /// rejected request changes nothing and does not stop the ones after
    /// it.
    pub fn change(&mut self, remove: &[String], place: &[Request]) -> Result<Outcome, SessionError> {
        let state = self.state.borrow_mut();
        check_removals(state, remove)?;
        // A set, not a scan of the earlier requests: batches run to thousands.
        let mut seen = std::collections::HashSet::with_capacity(place.len());
        for req in place {
            if !seen.insert(req.name.as_str()) {
                return Err(SessionError::RequestedTwice(req.name.clone()));
            }
            if state.placement(&req.name).is_some() && !remove.contains(&req.name) {
                return Err(SessionError::AlreadyPlaced(req.name.clone()));
            }
        }
        let removed = take_out(state, remove)?;
        let results = plan_batch(self.topology, state, place);
        Ok(Outcome { removed, results })
    }

    /// Places `requests` in order (a change with no removals).
    pub fn place(&mut self, requests: &[Request]) -> Result<Outcome, SessionError> {
        self.change(&[], requests)
    }

    /// Takes the VMs named out, all or none: an unknown name (or one
    /// named twice) leaves the state as it was.
    pub fn remove(&mut self, names: &[String]) -> Result<Vec<Placement>, SessionError> {
        let state = self.state.borrow_mut();
        check_removals(state, names)?;
        take_out(state, names)
    }

    /// Records a VM that is already on the host (read back from a
    /// document, a store or libvirt): it must fit what the state holds;
    /// an error changes nothing.
    pub fn record(&mut self, record: &PlacementRecord) -> Result<(), StateError> {
        self.state.borrow_mut().place_shared(Arc::clone(&record.placement))
    }

    /// As [`Session::record`], for a caller holding only the placement.
    pub fn record_placement(&mut self, placement: &Placement) -> Result<(), StateError> {
        self.state.borrow_mut().place(placement)
    }
}

impl<'t> Session<'t, HostState> {
    /// A session over a fresh state of `topology` that keeps
    /// `reservations` and holds `placements`, recorded in order; the
    /// error names the position of the first one that does not fit.
    pub fn open<'p>(
        topology: &'t Topology,
        reservations: Reservations,
        placements: impl IntoIterator<Item = &'p Placement>,
    ) -> Result<Session<'t, HostState>, OpenError> {
        let mut state = HostState::with_reservations(topology, reservations).map_err(|e| (None, e))?;
        for (i, p) in placements.into_iter().enumerate() {
            state.place(p).map_err(|e| (Some(i), e))?;
        }
        Ok(Session { topology, state })
    }
}

fn check_removals(state: &HostState, remove: &[String]) -> Result<(), SessionError> {
    for (i, name) in remove.iter().enumerate() {
        if state.placement(name).is_none() || remove[..i].contains(name) {
            return Err(SessionError::UnknownVm(name.clone()));
        }
    }
    Ok(())
}

fn take_out(state: &mut HostState, remove: &[String]) -> Result<Vec<Placement>, SessionError> {
    // Checked by the caller: every name is placed, once.
    remove.iter().map(|name| state.remove(name).map_err(|_| SessionError::UnknownVm(name.clone()))).collect()
}
