//! Carrying out a move: pin the process's threads where the decision's
//! target says (every thread over the new home's CPUs it may use, or a
//! dedicated VM's vCPUs one by one), then migrate its pages there at a
//! bounded rate. If pinning fails
//! part-way, every thread gets its old CPU mask back and no page moves;
//! if page migration fails, the threads are restored too (pages already
//! moved stay where they are: they are valid memory, merely placed).
//!
//! The system calls sit behind `System`, and the way threads are pinned
//! behind `Pin`: `Affinity` sets each thread's mask with
//! `sched_setaffinity`; `numaplace_libvirt::LivePin` pins a libvirt
//! domain through libvirt and hands any other process to another pinner
//! (libvirt is that crate's edge: this one keeps only the trait). So the
//! pacing and the rollback are tested without a kernel, and `carry_out`
//! is the one call the balancer's command makes per decision.

use crate::balance::Decision;
use crate::host::{Pins, Target};
use crate::numa_maps;
use crate::procfs;
use crate::sample::Snapshot;
use numaplace_topo::CpuSet;
use std::collections::BTreeMap;
use std::time::Duration;

/// The operations a move needs.
pub trait System {
    /// Thread ids of a process.
    fn tids(&mut self, pid: u32) -> std::io::Result<Vec<u32>>;
    /// A thread's CPU mask.
    fn get_affinity(&mut self, tid: u32) -> std::io::Result<CpuSet>;
    /// Sets a thread's CPU mask.
    fn set_affinity(&mut self, tid: u32, cpus: &CpuSet) -> std::io::Result<()>;
    /// `/proc/PID/maps` and `/proc/PID/numa_maps` texts.
    fn maps(&mut self, pid: u32) -> std::io::Result<(String, String)>;
    /// `move_pages`: `node` None queries.
    fn move_pages(&mut self, pid: u32, pages: &[u64], node: Option<u32>) -> std::io::Result<Vec<i32>>;
    /// Time since an arbitrary start.
    fn now(&mut self) -> Duration;
    /// Waits.
    fn sleep(&mut self, d: Duration);
}

/// The running kernel.
#[derive(Debug)]
pub struct Live {
    start: std::time::Instant,
}

impl Default for Live {
    fn default() -> Self {
        Live { start: std::time::Instant::now() }
    }
}

impl System for Live {
    fn tids(&mut self, pid: u32) -> std::io::Result<Vec<u32>> {
        let mut ids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }
    fn get_affinity(&mut self, tid: u32) -> std::io::Result<CpuSet> {
        crate::sys::get_affinity(tid)
    }
    fn set_affinity(&mut self, tid: u32, cpus: &CpuSet) -> std::io::Result<()> {
        crate::sys::set_affinity(tid, cpus)
    }
    fn maps(&mut self, pid: u32) -> std::io::Result<(String, String)> {
        Ok((
            std::fs::read_to_string(format!("/proc/{pid}/maps"))?,
            std::fs::read_to_string(format!("/proc/{pid}/numa_maps"))?,
        ))
    }
    fn move_pages(&mut self, pid: u32, pages: &[u64], node: Option<u32>) -> std::io::Result<Vec<i32>> {
        crate::sys::move_pages(pid, pages, node)
    }
    fn now(&mut self) -> Duration {
        self.start.elapsed()
    }
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// Which way a move pinned the threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Via {
    /// Thread by thread with `sched_setaffinity` ([`Affinity`]).
    #[default]
    SchedSetaffinity,
    /// Through libvirt, `virsh vcpupin --live` per vCPU and `virsh
    /// emulatorpin --live` (`numaplace_libvirt::LivePin`), for a libvirt
    /// domain.
    Libvirt,
}

/// What a move did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// How the threads were pinned (or were to be).
    pub via: Via,
    /// Threads pinned one by one to the new home (0 when libvirt pinned
    /// the domain: it pins vCPUs and the emulator, not threads).
    pub threads_pinned: u32,
    /// Bytes the kernel reported migrated.
    pub bytes_moved: u64,
    /// Pages that could not move (shared with other processes, busy).
    pub pages_not_moved: u64,
    /// Time spent migrating pages.
    pub migrate_seconds: f64,
    /// The error that stopped the move, if any.
    pub error: Option<String>,
    /// Whether the old CPU masks were put back after an error.
    pub restored: bool,
}

impl Outcome {
    /// Bytes migrated per second of migration (0 when nothing was timed).
    pub fn bytes_per_second(&self) -> f64 {
        if self.migrate_seconds > 0.0 {
            self.bytes_moved as f64 / self.migrate_seconds
        } else {
            0.0
        }
    }
}

/// What pinning a process did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pinned {
    /// Which way.
    pub via: Via,
    /// Threads pinned one by one.
    pub threads: u32,
    /// The error that stopped it, if any.
    pub error: Option<String>,
    /// After an error: whether what had been changed was put back.
    pub restored: bool,
}

/// How a move pins a process's threads to its new home, and puts them
/// back when a later step of the move fails.
pub trait Pin {
    /// Pins the threads of `pid` as `target.after` says; `sys` is the
    /// kernel, for pinners that work thread by thread. After an error,
    /// whatever was changed has been put back (`Pinned::restored` says
    /// whether fully), to `target.before` where the pinner keeps no
    /// masks of its own.
    fn pin(&mut self, sys: &mut dyn System, pid: u32, target: &Target) -> Pinned;
    /// Undoes the last `pin` that succeeded, after a later step failed.
    /// Returns whether every thread is back as it was.
    fn restore(&mut self, sys: &mut dyn System) -> bool;
}

/// Pins thread by thread with `sched_setaffinity` (through `System`),
/// keeping each thread's old mask for `restore`.
#[derive(Clone, Debug, Default)]
pub struct Affinity {
    saved: BTreeMap<u32, CpuSet>,
}

impl Pin for Affinity {
    fn pin(&mut self, sys: &mut dyn System, pid: u32, target: &Target) -> Pinned {
        self.saved.clear();
        let Pins::Floating(cpus) = &target.after else {
            // Which thread runs which vCPU is libvirt's to say; pinning a
            // dedicated VM thread by thread could cross them. Nothing was
            // changed.
            return Pinned {
                via: Via::SchedSetaffinity,
                threads: 0,
                error: Some("a dedicated VM's vCPUs are pinned one by one through libvirt, which is not in use".into()),
                restored: true,
            };
        };
        let mut threads = 0;
        match pin_threads(sys, pid, cpus, &mut self.saved, &mut threads) {
            Ok(()) => Pinned { via: Via::SchedSetaffinity, threads, error: None, restored: false },
            Err(e) => Pinned {
                via: Via::SchedSetaffinity,
                threads: 0,
                error: Some(format!("pinning threads: {e}")),
                restored: restore(sys, &self.saved),
            },
        }
    }

    fn restore(&mut self, sys: &mut dyn System) -> bool {
        restore(sys, &self.saved)
    }
}

/// Largest batch handed to one `move_pages` call, so the rate limit is
/// never exceeded by more than one batch.
const MAX_CHUNK: u64 = 4 << 20;

/// How long to wait after a batch of `bytes` that took `spent`, so the
/// batch occupies at least `bytes / rate`. Pacing each batch on its own,
/// rather than the running total against the time since the start, means
/// a migration that fell behind (a slow system call, a descheduled
/// balancer) never catches up in a burst: over any window the bytes
/// moved stay within the rate, plus at most one batch.
pub fn pace(bytes: u64, rate: u64, spent: Duration) -> Duration {
    if rate == 0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(bytes as f64 / rate as f64).saturating_sub(spent)
}

/// Moves process `pid` to `node`: pins its threads as `target.after`
/// says, the way `pinner` pins, then migrates its pages at no more than
/// `rate` bytes per second (0: unlimited).
pub fn move_process<P: Pin + ?Sized, S: System>(
    pinner: &mut P,
    sys: &mut S,
    pid: u32,
    node: u32,
    target: &Target,
    rate: u64,
) -> Outcome {
    let pinned = pinner.pin(sys, pid, target);
    let mut out = Outcome { via: pinned.via, threads_pinned: pinned.threads, ..Outcome::default() };
    if let Some(e) = pinned.error {
        out.error = Some(e);
        out.restored = pinned.restored;
        return out;
    }
    let start = sys.now();
    let result = migrate(sys, pid, node, rate, &mut out);
    out.migrate_seconds = sys.now().saturating_sub(start).as_secs_f64();
    if let Err(e) = result {
        out.error = Some(format!("migrating pages: {e}"));
        out.restored = pinner.restore(sys);
    }
    out
}

/// What carrying out one of the balancer's decisions did: the `moved`
/// event of its log.
#[derive(Clone, Debug, PartialEq)]
pub struct Moved {
    /// Process id.
    pub pid: u32,
    /// VM or process name.
    pub name: String,
    /// The new home node.
    pub to: u32,
    /// Where its threads ran before the move.
    pub before: Pins,
    /// Where they run after it (when it succeeded; else where they were
    /// to run).
    pub after: Pins,
    /// N%L before (the decision's).
    pub local_percent_before: f64,
    /// The share of its memory on the new home, read back from the kernel
    /// after the move (None when unreadable or empty).
    pub local_percent_after: Option<f64>,
    /// The migration rate limit, bytes per second.
    pub rate_limit_bytes_per_second: u64,
    /// What the move did.
    pub outcome: Outcome,
}

/// A decision that could not be carried out at all: its new home is not
/// in the snapshot (or its CPU list does not parse).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("node {node} vanished")]
pub struct NodeVanished {
    /// The process that was to move.
    pub pid: u32,
    /// The node it was to move to.
    pub node: u32,
}

/// Carries out one decision of the balancer: pins the process where the
/// decision's target says (never wider than the CPUs the host allowed it
/// there) the way `pinner` pins, migrates its pages to the new home at no
/// more than `rate` bytes per second, and reads back how much of its
/// memory is now on the new home. A failed move is an `Ok` whose outcome
/// holds the error.
pub fn carry_out<P: Pin + ?Sized, S: System>(
    pinner: &mut P,
    sys: &mut S,
    d: &Decision,
    snap: &Snapshot,
    rate: u64,
) -> Result<Moved, NodeVanished> {
    let on_node = snap
        .nodes
        .iter()
        .find(|n| n.node == d.to)
        .and_then(|n| n.cpus.parse::<CpuSet>().ok())
        .ok_or(NodeVanished { pid: d.pid, node: d.to })?;
    let vcpus_after = match &d.target.after {
        Pins::Floating(cpus) => cpus.clone(),
        Pins::Dedicated { vcpus, .. } => vcpus.iter().map(|(_, pu)| *pu).collect(),
    };
    if !vcpus_after.is_subset(&on_node) {
        // The host's view and the kernel's disagree about the node's CPUs
        // (one went offline): move nothing rather than pin off the node.
        // (Emulator threads may stay on the host's reserved CPUs
        // elsewhere.)
        return Err(NodeVanished { pid: d.pid, node: d.to });
    }
    let outcome = move_process(pinner, sys, d.pid, d.to, &d.target, rate);
    Ok(Moved {
        pid: d.pid,
        name: d.name.clone(),
        to: d.to,
        before: d.target.before.clone(),
        after: d.target.after.clone(),
        local_percent_before: d.local_percent_before,
        local_percent_after: share_on(sys, d.pid, d.to),
        rate_limit_bytes_per_second: rate,
        outcome,
    })
}

/// The percentage of a process's resident memory on `node`, from its
/// `numa_maps` now.
fn share_on<S: System + ?Sized>(sys: &mut S, pid: u32, node: u32) -> Option<f64> {
    let (_, text) = sys.maps(pid).ok()?;
    let per = numa_maps::bytes_per_node(&numa_maps::parse(&text).ok()?);
    let total: u64 = per.values().sum();
    let here = per.get(&node).copied().unwrap_or(0);
    (total > 0).then(|| here as f64 * 100.0 / total as f64)
}

fn gone(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESRCH) || e.kind() == std::io::ErrorKind::NotFound
}

fn pin_threads(
    sys: &mut dyn System,
    pid: u32,
    cpus: &CpuSet,
    saved: &mut BTreeMap<u32, CpuSet>,
    pinned: &mut u32,
) -> std::io::Result<()> {
    for tid in sys.tids(pid)? {
        let old = match sys.get_affinity(tid) {
            Ok(old) => old,
            // A thread that ended in between needs nothing.
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e),
        };
        saved.insert(tid, old);
        match sys.set_affinity(tid, cpus) {
            Ok(()) => *pinned += 1,
            Err(e) if gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn restore(sys: &mut dyn System, saved: &BTreeMap<u32, CpuSet>) -> bool {
    let mut all = true;
    for (tid, cpus) in saved {
        if let Err(e) = sys.set_affinity(*tid, cpus) {
            all &= gone(&e);
        }
    }
    all
}

fn migrate<S: System + ?Sized>(sys: &mut S, pid: u32, node: u32, rate: u64, out: &mut Outcome) -> std::io::Result<()> {
    let (maps_text, numa_text) = sys.maps(pid)?;
    let invalid = |e: crate::error::ParseError| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
    let ranges = procfs::parse_maps(&maps_text).map_err(invalid)?;
    let mappings = numa_maps::parse(&numa_text).map_err(invalid)?;
    let ends: BTreeMap<u64, u64> = ranges.iter().map(|r| (r.start, r.end)).collect();
    let chunk_bytes = if rate == 0 { MAX_CHUNK } else { (rate / 8).clamp(64 << 10, MAX_CHUNK) };
    for m in &mappings {
        // Only mappings with pages elsewhere are walked: most of a QEMU
        // address space is reserved but never touched.
        if m.page_size == 0 || m.pages.iter().all(|(n, c)| *n == node || *c == 0) {
            continue;
        }
        let Some(&end) = ends.get(&m.start) else { continue };
        let per_chunk = (chunk_bytes / m.page_size).max(1);
        let mut addr = m.start;
        while addr < end {
            let batch_start = sys.now();
            let pages: Vec<u64> = (0..per_chunk).map(|i| addr + i * m.page_size).take_while(|a| *a < end).collect();
            addr = pages.last().map_or(end, |a| a + m.page_size);
            let where_now = sys.move_pages(pid, &pages, None)?;
            let todo: Vec<u64> =
                pages.iter().zip(&where_now).filter(|(_, s)| **s >= 0 && **s as u32 != node).map(|(a, _)| *a).collect();
            if todo.is_empty() {
                continue;
            }
            let after = sys.move_pages(pid, &todo, Some(node))?;
            let moved = after.iter().filter(|s| **s >= 0 && **s as u32 == node).count() as u64;
            out.bytes_moved += moved * m.page_size;
            out.pages_not_moved += todo.len() as u64 - moved;
            let wait = pace(moved * m.page_size, rate, sys.now().saturating_sub(batch_start));
            if !wait.is_zero() {
                sys.sleep(wait);
            }
        }
    }
    Ok(())
}
