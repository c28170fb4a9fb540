//! One change to a host, as every caller makes it: the CLI's `plan
//! --state --remove`, lint's fixer, the simulator and the fleet service all
//! go through [`apply_change`], so "take these VMs out, then place these
//! requests in order" means the same thing everywhere.

use crate::engine::{plan_batch, Decision, Rejection};
use crate::placement::Placement;
use crate::request::Request;
use crate::state::{HostState, Reservations, StateError};
use numaplace_topo::Topology;

/// What to do to a host: VMs to take out (by name), then requests to
/// place, in order.
#[derive(Clone, Debug, Default)]
pub struct Change<'a> {
    /// Names of placed VMs that are gone (deleted, or migrating away).
    pub remove: &'a [String],
    /// VMs to place, in order, after the removals.
    pub place: &'a [Request],
}

/// Why a change was refused as a whole (nothing was changed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// A VM to remove is not placed.
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
}

/// A host state that keeps `reservations` and holds `placements`,
/// recorded in order; the error names the position of the first one that
/// does not fit (`None`: a reserved CPU the host does not have).
pub fn state_of(
    topology: &Topology,
    reservations: Reservations,
    placements: &[Placement],
) -> Result<HostState, (Option<usize>, StateError)> {
    let mut state = HostState::with_reservations(topology, reservations).map_err(|e| (None, e))?;
    for (i, p) in placements.iter().enumerate() {
        state.place(p).map_err(|e| (Some(i), e))?;
    }
    Ok(state)
}

/// Applies a change to a host state: every name is checked first (an
/// unknown VM to remove, a name requested twice, or a name that stays
/// placed refuses the whole change and leaves the state as it was), then
/// the removals, then each request is planned against the state as the
/// earlier ones left it. A rejected request changes nothing and does not
/// stop the ones after it.
pub fn apply_change(topology: &Topology, state: &mut HostState, change: &Change<'_>) -> Result<Outcome, ChangeError> {
    for (i, name) in change.remove.iter().enumerate() {
        if state.placement(name).is_none() || change.remove[..i].contains(name) {
            return Err(ChangeError::UnknownVm(name.clone()));
        }
    }
    // A set, not a scan of the earlier requests: batches run to thousands.
    let mut seen = std::collections::HashSet::with_capacity(change.place.len());
    for req in change.place {
        if !seen.insert(req.name.as_str()) {
            return Err(ChangeError::RequestedTwice(req.name.clone()));
        }
        if state.placement(&req.name).is_some() && !change.remove.contains(&req.name) {
            return Err(ChangeError::AlreadyPlaced(req.name.clone()));
        }
    }
    let mut removed = Vec::with_capacity(change.remove.len());
    for name in change.remove {
        // Checked above: every name is placed, once.
        removed.push(state.remove(name).map_err(|_| ChangeError::UnknownVm(name.clone()))?);
    }
    let results = plan_batch(topology, state, change.place);
    Ok(Outcome { removed, results })
}
