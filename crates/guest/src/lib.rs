//! Proves a plan on a real guest kernel: boots a minimal guest (the
//! distribution's kernel and a busybox initramfs) with exactly the planned
//! guest topology, reads what the guest kernel reports over the serial
//! console, and compares it cell by cell with the plan.
//!
//! `report` and `check` are pure (tested on captured guest output);
//! `prepare` and `boot` are the edges that run programs.

pub mod adapt;
pub mod boot;
pub mod check;
pub mod cpio;
pub mod prepare;
pub mod report;
#[doc(hidden)]
pub mod testing;
pub mod verify;
