//! The placement engine (issue 3): requests, host state, policies, the
//! node-set search, pinning, and the guest NUMA topology derived from it.
//! Pure: no I/O, no clock.

mod placement;

pub use placement::{CpuMode, GuestCell, GuestTopology, MemoryMode, Placement, VcpuPin};
