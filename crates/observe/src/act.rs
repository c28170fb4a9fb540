//! Carrying out a move: pin every thread of the process to the new home's
//! CPUs, then migrate its pages there at a bounded rate. If pinning fails
//! part-way, every thread gets its old CPU mask back and no page moves;
//! if page migration fails, the threads are restored too (pages already
//! moved stay where they are: they are valid memory, merely placed).
//!
//! The system calls sit behind `System` so the pacing and the rollback
//! are tested without a kernel.

use crate::numa_maps;
use crate::procfs;
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

/// What a move did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Threads pinned to the new home.
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

/// Moves process `pid` to `node` (whose CPUs are `cpus`) at no more than
/// `rate` bytes per second. `pin` false leaves the CPU masks alone
/// (the caller pinned through libvirt).
pub fn move_process(sys: &mut impl System, pid: u32, node: u32, cpus: &CpuSet, rate: u64, pin: bool) -> Outcome {
    let mut out = Outcome::default();
    let mut saved: BTreeMap<u32, CpuSet> = BTreeMap::new();
    if pin {
        if let Err(e) = pin_threads(sys, pid, cpus, &mut saved, &mut out) {
            out.error = Some(format!("pinning threads: {e}"));
            out.restored = restore(sys, &saved);
            out.threads_pinned = 0;
            return out;
        }
    }
    let start = sys.now();
    let result = migrate(sys, pid, node, rate, &mut out);
    out.migrate_seconds = sys.now().saturating_sub(start).as_secs_f64();
    if let Err(e) = result {
        out.error = Some(format!("migrating pages: {e}"));
        out.restored = restore(sys, &saved);
    }
    out
}

fn gone(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESRCH) || e.kind() == std::io::ErrorKind::NotFound
}

fn pin_threads(
    sys: &mut impl System,
    pid: u32,
    cpus: &CpuSet,
    saved: &mut BTreeMap<u32, CpuSet>,
    out: &mut Outcome,
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
            Ok(()) => out.threads_pinned += 1,
            Err(e) if gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn restore(sys: &mut impl System, saved: &BTreeMap<u32, CpuSet>) -> bool {
    let mut all = true;
    for (tid, cpus) in saved {
        if let Err(e) = sys.set_affinity(*tid, cpus) {
            all &= gone(&e);
        }
    }
    all
}

fn migrate(sys: &mut impl System, pid: u32, node: u32, rate: u64, out: &mut Outcome) -> std::io::Result<()> {
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
