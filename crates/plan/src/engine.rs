//! The planner's entry points: one VM (`plan`) or a batch in order
//! (`plan_batch`), against a host state that records what is taken.

use crate::placement::Placement;
use crate::request::Request;
use numaplace_topo::{NodeId, Topology};
use std::fmt;

/// What is already used on a host: PUs, memory and huge pages per node,
/// by the VMs placed so far.
#[derive(Clone, Debug)]
pub struct HostState {
    placed: Vec<Placement>,
}

/// Why an existing placement cannot be recorded in a host state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    /// The placement names a node the host does not have.
    UnknownNode(NodeId),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::UnknownNode(n) => write!(f, "{n} does not exist on this host"),
        }
    }
}

impl HostState {
    /// An empty host.
    pub fn new(_topology: &Topology) -> HostState {
        HostState { placed: Vec::new() }
    }

    /// Records a placement (from an earlier plan) as taken.
    pub fn place(&mut self, placement: &Placement) -> Result<(), StateError> {
        self.placed.push(placement.clone());
        Ok(())
    }

    /// The placements recorded so far, in order.
    pub fn placements(&self) -> &[Placement] {
        &self.placed
    }
}

/// One node set the planner considered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alternative {
    /// Host nodes of the candidate.
    pub nodes: Vec<NodeId>,
    /// Why it lost (or `chosen`).
    pub verdict: String,
}

/// An accepted plan for one VM, with the reasoning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Where the VM goes.
    pub placement: Placement,
    /// Candidates considered and why they lost.
    pub alternatives: Vec<Alternative>,
    /// Remarks for the operator (e.g. siblings shared, device remote).
    pub notes: Vec<String>,
}

/// A VM that cannot be placed, with the shortfall.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// VM name.
    pub vm: String,
    /// Why, naming the shortfall (e.g. `needs 32 free cores on <= 2
    /// nodes; node0 has 12, node1 has 16`).
    pub reason: String,
}

/// Plans one VM against a host state (the state is not changed).
pub fn plan(_topology: &Topology, _state: &HostState, request: &Request) -> Result<Decision, Rejection> {
    Err(Rejection { vm: request.name.clone(), reason: "the planner is not implemented yet".into() })
}

/// Plans VMs in order, recording each accepted one in `state`.
pub fn plan_batch(
    topology: &Topology,
    state: &mut HostState,
    requests: &[Request],
) -> Vec<Result<Decision, Rejection>> {
    requests
        .iter()
        .map(|r| {
            let d = plan(topology, state, r)?;
            // A placement just planned against this state always fits it.
            let _ = state.place(&d.placement);
            Ok(d)
        })
        .collect()
}
