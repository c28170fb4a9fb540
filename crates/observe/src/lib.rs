//! Watches running VMs (and optionally any process) on a NUMA host: how
//! much memory each has on every node, where its vCPU threads run, how
//! local its memory is; exports the figures for Prometheus, and moves
//! processes whose memory stays remote.
//!
//! Layers, from pure to effectful: `numa_maps` and `procfs` parse kernel
//! text; `sample` turns a `source::Source` (a live or recorded tree) into
//! esxtop-like figures; `text` and `prom` render them; `balance` decides
//! moves; `act` carries them out through `sys`, the crate's only unsafe
//! code; `http` serves `/metrics`.

pub mod act;
pub mod balance;
pub mod error;
pub mod http;
pub mod numa_maps;
pub mod procfs;
pub mod prom;
pub mod sample;
pub mod source;
pub mod sys;
pub mod text;
pub mod units;

pub use error::{ParseError, ReadError};
pub use sample::{Options, Sampler, Snapshot};
pub use source::{FsSource, Source};
