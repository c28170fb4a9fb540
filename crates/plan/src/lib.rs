//! The placement engine (issue 3): requests, host state, policies, the
//! node-set search, pinning, and the guest NUMA topology derived from it.
//! Pure: no I/O, no clock, no hash-ordered containers, so the same input
//! always gives the same plan.
//!
//! Code map:
//! - `request`, `placement`: the plain data going in and out;
//! - `record`: [`PlacementRecord`], one VM as everything keeps it (its
//!   placement, request, constraints, origin and group);
//! - `session`: [`Session`], the one way to plan against a host state
//!   ("remove these VMs, then place these requests", "this VM is here")
//!   that every caller uses;
//! - `state`: [`HostState`], per-node counters of what placed VMs take
//!   (free memory is the node's total minus its huge page pools minus
//!   placements, never a reader's momentary `free_bytes`);
//! - `engine`: [`plan`] and [`plan_batch`]; validation, capacity passes
//!   (whole cores before sibling threads for `prefer-cores`), and building
//!   the chosen set into a [`Placement`];
//! - `nodeset`: the node-set search and the policies' total orders;
//! - `model`: the performance model: one set of figures the planner ranks
//!   with (`cost`) and the simulator predicts with;
//! - `split`: even vCPU and proportional memory splits over a set;
//! - `pin`: the pinning accumulator (cores, pairs, isolate, packed, shared);
//! - `guest`: the guest NUMA topology derived from the pinning;
//! - `reason`: the figures behind rejections and why alternatives lost;
//! - `why`: rejections and notes as typed values, worded in one place.
//!
//! A shared VM floats over the non-dedicated PUs of its nodes; its load is
//! counted on one PU per vCPU, which later dedicated VMs avoid. A later
//! dedicated VM may take other PUs of the floating set: the host state
//! then takes them out of the shared VM's set (the decision says so, since
//! the running VM must be re-pinned).

mod cost;
mod engine;
mod few;
mod guest;
mod limits;
pub mod model;
mod nodeset;
mod pin;
mod placement;
mod reason;
mod record;
mod request;
mod session;
mod split;
mod state;
mod why;

pub use cost::Cost;
pub use engine::{
    cost_of, neighbour_notes, node_capacity, plan, plan_batch, vm_overhead_bytes, Alternative, Decision, HostState,
    NodeCapacity, NodeSpec, Overhead, Rejection, ReservationConflict, Reservations, StateError,
};
pub use placement::{CpuMode, Floating, GuestCell, GuestTopology, MemoryMode, Placement, VcpuPin};
pub use reason::{Verdict, VerdictFigures};
pub use record::{HostConstraints, Origin, PlacementRecord};
pub use request::{CellWish, DeviceWish, EmulatorPlacement, MemoryTiers, Policy, Request, SmtPolicy};
pub use session::{OpenError, Outcome, Session, SessionError};
pub use state::{CpuMap, HeldAs, Hold, Holder, VmCpus};
pub use why::{
    held_by, Lacks, NodeFree, Note, OnNodes, Pieces, RejectReason, Resource, Sentence, MAX_MEMORY_OVERCOMMIT,
};
