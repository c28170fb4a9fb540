//! Views of numaplace data: text for people, SVG pictures, and (with the
//! planner) libvirt XML and QEMU arguments. Pure functions from model to
//! text; nothing here reads a file or the host.

#[path = "../../libvirt/src/domain/write.rs"]
pub mod libvirt;
pub mod plan_text;
pub mod qemu;
pub mod svg;
pub mod text;
