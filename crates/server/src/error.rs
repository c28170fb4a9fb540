//! What a service call fails with, as values that carry their data (the
//! VM, the host, the planner's [`StateError`], the fleet's rejection),
//! worded here once. The HTTP layer maps each to a status and the one
//! error shape (`app::status`); tests match on the values.

use numaplace_fleet::FleetRejection;
use numaplace_plan::{Rejection, StateError};
use numaplace_store::StoreError;
use std::fmt;

/// What a call can fail with; the HTTP layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The input is wrong (400): the parser's sentence, naming the field.
    #[error("{0}")]
    BadRequest(String),
    /// The credential may not do this (403): a read-only credential's
    /// change, an agent's request about another host.
    #[error("{0}")]
    Forbidden(crate::credentials::Forbidden),
    /// No such host or VM (404).
    #[error("{0}")]
    NotFound(Missing),
    /// The request conflicts with what is stored (409): a name already
    /// placed, a host still in use, a VM the agent reported, a pinned CPU.
    #[error("{0}")]
    Conflict(Conflict),
    /// No host can take the VM (409), summarised over the fleet.
    #[error("{0}")]
    NoHost(Box<FleetRejection>),
    /// The request itself can never be placed (422): the planner's reason.
    #[error("{0}")]
    Unplaceable(Rejection),
    /// The database cannot be reached, or conflicts did not settle (503).
    #[error("{0}")]
    Unavailable(Unavailable),
    /// The request passed its deadline (503); nothing was written.
    #[error("no answer within the request's deadline (the database is slow or stalled); nothing was changed")]
    DeadlineExceeded,
    /// The connection to the database was lost after the change's COMMIT
    /// was sent, and whether it committed could not be found out within
    /// the deadline (503): it may have. The change's audit line is
    /// written once the server finds out.
    #[error(
        "the database connection was lost while the change committed, and whether it did could not be found out in time; \
         read the current state before retrying, or retry with the same Idempotency-Key"
    )]
    OutcomeUnknown,
    /// An `Idempotency-Key` sent again with another request (422): the
    /// key's first request is answered only to itself.
    #[error("Idempotency-Key {key:?} was already used for {first}, not this request")]
    KeyReused {
        /// The key.
        key: String,
        /// The request it was first used for (method and path).
        first: String,
    },
    /// A bug or a corrupt store (500): what was being read, and why.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The stable code of the error shape (`{"error": {"code", ...}}`).
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad-request",
            ApiError::Forbidden(f) => f.code(),
            ApiError::NotFound(_) => "not-found",
            ApiError::Conflict(c) => c.code(),
            ApiError::NoHost(_) => "no-host",
            ApiError::Unplaceable(r) => r.reason.code(),
            ApiError::Unavailable(_) => "unavailable",
            ApiError::DeadlineExceeded => "deadline-exceeded",
            ApiError::OutcomeUnknown => OUTCOME_UNKNOWN,
            ApiError::KeyReused { .. } => KEY_REUSED,
            ApiError::Internal(_) => "internal",
        }
    }
}

impl ApiError {
    /// The VM the error is about, when it names one (the access line of a
    /// refusal carries it).
    pub fn vm(&self) -> Option<&str> {
        match self {
            ApiError::Forbidden(f) => f.vm(),
            ApiError::NotFound(Missing::Vm(vm)) => Some(vm),
            ApiError::Conflict(
                Conflict::AlreadyPlaced { vm, .. }
                | Conflict::DoesNotFit { vm, .. }
                | Conflict::NotPlacedHere { vm, .. }
                | Conflict::PinnedCpu { vm, .. },
            ) => Some(vm),
            ApiError::NoHost(r) => Some(&r.vm),
            ApiError::Unplaceable(r) => Some(&r.vm),
            ApiError::Unavailable(Unavailable::Contended {
                change: Change::Place(vm) | Change::Delete(vm) | Change::Move(vm),
                ..
            }) => Some(vm),
            _ => None,
        }
    }
}

/// What a 404 did not find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// No host of this name.
    Host(String),
    /// No VM of this name is placed.
    Vm(String),
    /// No such action on a page (`/ui/hosts/{name}/{action}`).
    Action(String),
    /// A row the store found gone in the middle of a change (its words).
    Row(String),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Host(h) => write!(f, "no host {h}"),
            Missing::Vm(vm) => write!(f, "no VM {vm}"),
            Missing::Action(a) => write!(f, "no action {a}"),
            Missing::Row(what) => write!(f, "no {what}"),
        }
    }
}

/// Why a change conflicts with what is stored (409).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// A VM of that name is placed already (on `host`, when known).
    AlreadyPlaced {
        /// The VM.
        vm: String,
        /// Where it is.
        host: Option<String>,
    },
    /// The host still holds VMs (a removal without `force`).
    HostInUse {
        /// The host.
        host: String,
        /// How many VMs.
        vms: usize,
    },
    /// A VM on the host would not fit its new description.
    DoesNotFit {
        /// The host.
        host: String,
        /// The VM.
        vm: String,
        /// Why, as the planner's host state says.
        error: StateError,
    },
    /// A delete or move of a VM the host's agent reported.
    NotPlacedHere {
        /// The VM.
        vm: String,
        /// Its host.
        host: String,
    },
    /// A reservation (or shared pool) over a CPU a VM is pinned on.
    PinnedCpu {
        /// The host.
        host: String,
        /// The CPU.
        cpu: u32,
        /// What the CPU was to become.
        role: CpuRole,
        /// The VM pinned there.
        vm: String,
        /// Its vCPU.
        vcpu: u32,
    },
}

/// What a CPU a reservation names was to become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuRole {
    /// Reserved for the host.
    Reserved,
    /// In the shared pool (refused under a dedicated vCPU).
    Shared,
}

/// The code of a delete or move refused because the host's agent
/// reported the VM.
pub const NOT_PLACED_HERE: &str = "not-placed-here";
/// The code of a 503 after which a change may or may not have been made.
pub const OUTCOME_UNKNOWN: &str = "outcome-unknown";
/// The code of an `Idempotency-Key` sent with another request.
pub const KEY_REUSED: &str = "idempotency-key-reused";
/// The code of a reservation (or shared pool) refused over a pinned CPU.
pub const PINNED_CPU: &str = "pinned-cpu";

impl Conflict {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Conflict::AlreadyPlaced { .. } => "already-placed",
            Conflict::HostInUse { .. } | Conflict::DoesNotFit { .. } => "host-in-use",
            Conflict::NotPlacedHere { .. } => NOT_PLACED_HERE,
            Conflict::PinnedCpu { .. } => PINNED_CPU,
        }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::AlreadyPlaced { vm, host: Some(h) } => write!(f, "a VM named {vm} is already placed on host {h}"),
            Conflict::AlreadyPlaced { vm, host: None } => write!(f, "a VM named {vm} is already placed"),
            Conflict::HostInUse { host, vms } => {
                write!(f, "host {host} still holds {}", numaplace_emit::text::plural(*vms, "VM"))
            }
            Conflict::DoesNotFit { host, vm, error } => {
                write!(f, "VM {vm} on host {host} does not fit the new description: {error}")
            }
            Conflict::NotPlacedHere { vm, host } => write!(
                f,
                "VM {vm} was reported by host {host}'s agent (the service did not place it): it holds its CPUs \
                 until the agent reports the domain gone"
            ),
            Conflict::PinnedCpu { host, cpu, role, vm, vcpu } => write!(
                f,
                "CPU {cpu} of host {host} cannot be {}: VM {vm} has vCPU {vcpu} pinned there",
                match role {
                    CpuRole::Reserved => "reserved for the host",
                    CpuRole::Shared => "in the shared pool",
                }
            ),
        }
    }
}

/// Why the service cannot answer now (503, with `Retry-After`).
#[derive(Debug)]
pub enum Unavailable {
    /// The database is unreachable or timed out.
    Store(StoreError),
    /// Every attempt of a change lost its race with another writer.
    Contended {
        /// The change.
        change: Change,
        /// How many attempts were made.
        attempts: usize,
    },
}

/// A change that is decided, then committed under the hosts'
/// generations, and decided again when another writer got there first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Placing a VM.
    Place(String),
    /// Freeing a VM's placement.
    Delete(String),
    /// Moving a VM.
    Move(String),
    /// Registering, replacing or patching a host.
    Host(String),
    /// An agent's report of a host's domains.
    Report(String),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Store(e) => write!(f, "{e}"),
            Unavailable::Contended { change, attempts } => {
                let what = match change {
                    Change::Place(vm) => format!("placing VM {vm}"),
                    Change::Delete(vm) => format!("deleting VM {vm}"),
                    Change::Move(vm) => format!("moving VM {vm}"),
                    Change::Host(h) => format!("changing host {h}"),
                    Change::Report(h) => format!("the report of host {h}"),
                };
                write!(f, "{what} conflicted with other writers {attempts} times; try again")
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Unavailable(_) | StoreError::TimedOut(_) => ApiError::Unavailable(Unavailable::Store(e)),
            StoreError::DeadlineExceeded => ApiError::DeadlineExceeded,
            StoreError::OutcomeUnknown { .. } => ApiError::OutcomeUnknown,
            StoreError::NotFound(what) => ApiError::NotFound(Missing::Row(what)),
            StoreError::Duplicate { vm } => ApiError::Conflict(Conflict::AlreadyPlaced { vm, host: None }),
            StoreError::InUse { host, count } => ApiError::Conflict(Conflict::HostInUse { host, vms: count }),
            other => ApiError::Internal(other.to_string()),
        }
    }
}
