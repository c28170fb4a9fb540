//! numaplace's host topology model: CPU sets, packages, NUMA nodes, cores,
//! PUs, caches, memory and huge pages, distances and devices.
//!
//! This crate knows no file, no path and no format: readers (the
//! `numaplace-read` crate) build a [`Parts`] from whatever they parse, and
//! [`Topology::from_parts`] checks it. Everything here is pure data and
//! pure queries, so the planner can be tested on literal topologies.
//! The one exception is [`text`]: the workspace's XML escaper and
//! Prometheus line writer, format primitives without a model, kept here
//! because every writer depends on this crate.

mod arch;
mod cpuset;
mod error;
mod evidence;
mod model;
mod size;
pub mod text;
mod warning;

pub use arch::{Accel, Arch};
pub use cpuset::{CpuSet, CpuSetError, MAX_CPU, MAX_SETS_BYTES};
pub use error::ModelError;
pub use evidence::{DaxBacking, Figure, FigureSource, KindEvidence};
pub use model::{
    Cache, Core, Device, DeviceKind, HugePages, Locality, MemoryKind, Node, NodeId, Package, Parts, Pu, Topology,
    DEFAULT_REMOTE_DISTANCE, LOCAL_DISTANCE, MAX_NODE, MAX_NODE_BYTES,
};
pub use size::{format_size, libvirt_unit_bytes, parse_kernel_size, parse_size, try_parse_size, SizeError, SIZE_UNITS};
pub use warning::Warning;

// The ids and bounds the model, its errors and its warnings share.
mod ids;
