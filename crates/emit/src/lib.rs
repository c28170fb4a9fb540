//! Views of numaplace data: text for people, SVG pictures, the plan's
//! text and (with the planner) QEMU arguments. Pure functions from model
//! to text; nothing here reads a file or the host. The libvirt domain
//! format is written by `numaplace-libvirt`, which owns it.

pub mod arch;
pub mod pcie;
pub mod plan_text;
pub mod qemu;
pub mod svg;
pub mod text;
