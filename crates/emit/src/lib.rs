//! Views of numaplace data: text for people, SVG pictures, and (with the
//! planner) libvirt XML and QEMU arguments. Pure functions from model to
//! text; nothing here reads a file or the host.

pub mod svg;
pub mod text;
pub mod libvirt;
pub mod plan_text;
pub mod qemu;
