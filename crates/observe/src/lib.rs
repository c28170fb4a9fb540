//! Watches running VMs (and optionally any process) on a NUMA host: how
//! much memory each has on every node, where its vCPU threads run, how
//! local its memory is; exports the figures for Prometheus, and moves
//! processes whose memory stays remote.
//!
//! Layers, from pure to effectful: [`numa_maps`] and [`procfs`] parse
//! kernel text; [`sample`] turns a [`Source`] (a live or recorded tree)
//! into esxtop-like figures; [`text`] and [`prom`] render them; [`balance`]
//! decides moves, keeping to the CPUs [`host`] allows (the planner's
//! reservations and dedicated VMs); [`act`] carries them out, thread by
//! thread through the crate's only unsafe code (a private `sys` module),
//! with the process's own cgroup v2 cpuset first ([`act::Cgroup`]), or
//! through any other [`act::Pin`] (libvirt's, `numaplace_libvirt::LivePin`,
//! lives at that edge); [`units`] reads the commands' sizes, rates and durations.
//!
//! `numaplace exporter` serves [`prom`]'s text over the server crate's
//! HTTP stack (`numaplace_server::exporter`); this crate has no server.
//!
//! Public API: the modules above, [`Source`] with [`FsSource`], and the
//! errors [`ParseError`] and [`ReadError`]; everything else is private.

pub mod act;
pub mod balance;
mod error;
pub mod host;
pub mod numa_maps;
pub mod procfs;
pub mod prom;
pub mod sample;
mod source;
mod sys;
pub mod text;
pub mod units;

pub use error::{ParseError, ReadError};
pub use source::{FsSource, Source};
