//! The placement engine (issue 3): requests, host state, policies, the
//! node-set search, pinning, and the guest NUMA topology derived from it.
//! Pure: no I/O, no clock.

mod engine;
mod placement;
mod request;

pub use engine::{plan, plan_batch, Alternative, Decision, HostState, Rejection, StateError};
pub use placement::{CpuMode, GuestCell, GuestTopology, MemoryMode, Placement, VcpuPin};
pub use request::{DeviceWish, EmulatorPlacement, Policy, Request, SmtPolicy};
