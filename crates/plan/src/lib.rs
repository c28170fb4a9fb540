//! The placement engine (issue 3): requests, host state, policies, the
//! node-set search, pinning, and the guest NUMA topology derived from it.
//! Pure: no I/O, no clock.

mod placement;
mod request;

pub use placement::{CpuMode, GuestCell, GuestTopology, MemoryMode, Placement, VcpuPin};
pub use request::{DeviceWish, EmulatorPlacement, Policy, Request, SmtPolicy};
