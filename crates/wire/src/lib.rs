//! numaplace's JSON wire formats. This crate owns every JSON shape that
//! numaplace reads or writes, so the model crates carry no serialisation
//! attributes and a format change is visible in one place
//! (`docs/formats/topology-json.md` documents this one).

#[cfg(feature = "fleet")]
pub mod fleet;
#[cfg(feature = "fleet")]
pub mod k8s;
#[cfg(feature = "plan")]
mod layout;
pub mod libvirt;
pub mod lint;
#[cfg(feature = "observe")]
pub mod observe;
#[cfg(feature = "plan")]
pub mod plan;
#[cfg(feature = "plan")]
pub mod profile;
#[cfg(feature = "plan")]
pub mod record;
pub mod sim;
pub mod topology;
pub mod verify;
