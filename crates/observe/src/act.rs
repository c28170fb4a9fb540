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
    /// The cgroup v2 directory holding thread `tid` of `pid`, relative to
    /// the cgroup2 mount (`/machine.slice/vm1`, from
    /// `/proc/PID/task/TID/cgroup`'s `0::` line); None when the kernel
    /// has no cgroup v2 hierarchy mounted or the thread is in its root.
    /// A kernel without cgroups has none.
    fn cgroup_of(&mut self, _pid: u32, _tid: u32) -> std::io::Result<Option<String>> {
        Ok(None)
    }
    /// A file of a cgroup v2 directory (`cpuset.cpus`, `cgroup.threads`).
    fn cgroup_read(&mut self, cgroup: &str, file: &str) -> std::io::Result<String> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, format!("no cgroup {cgroup}/{file}")))
    }
    /// Writes a file of a cgroup v2 directory.
    fn cgroup_write(&mut self, cgroup: &str, file: &str, _value: &str) -> std::io::Result<()> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, format!("no cgroup {cgroup}/{file}")))
    }
}

/// The running kernel.
#[derive(Debug)]
pub struct Live {
    start: std::time::Instant,
    /// Where cgroup v2 is mounted, once looked up (None inside: not
    /// mounted).
    cgroup2: Option<Option<std::path::PathBuf>>,
}

impl Default for Live {
    fn default() -> Self {
        Live { start: std::time::Instant::now(), cgroup2: None }
    }
}

impl Live {
    fn cgroup_dir(&mut self, cgroup: &str) -> std::io::Result<std::path::PathBuf> {
        if self.cgroup2.is_none() {
            let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            self.cgroup2 = Some(cgroup2_mount(&mounts).map(std::path::PathBuf::from));
        }
        match self.cgroup2.as_ref().and_then(|m| m.as_ref()) {
            Some(root) => Ok(root.join(cgroup.trim_start_matches('/'))),
            None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "cgroup v2 is not mounted")),
        }
    }
}

/// The mount point of the cgroup v2 hierarchy in a `/proc/self/mountinfo`
/// text (the fifth field of the first line whose file system type, after
/// the ` - ` separator, is `cgroup2`).
pub fn cgroup2_mount(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then(|| left.split_whitespace().nth(4).map(String::from))?
    })
}

/// A thread's cgroup v2 directory from its `/proc/PID/task/TID/cgroup`
/// text (the `0::PATH` line); None in the root or without cgroup v2.
pub fn cgroup_v2_path(text: &str) -> Option<String> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    // A thread whose cgroup was removed under it reads "/... (deleted)".
    (path != "/" && !path.is_empty() && !path.ends_with("(deleted)")).then(|| path.to_string())
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
    fn cgroup_of(&mut self, pid: u32, tid: u32) -> std::io::Result<Option<String>> {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/cgroup")) {
            Ok(t) => t,
            // A kernel without cgroups has no such file (and a thread
            // that ended has none to change).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(cgroup_v2_path(&text))
    }
    fn cgroup_read(&mut self, cgroup: &str, file: &str) -> std::io::Result<String> {
        std::fs::read_to_string(self.cgroup_dir(cgroup)?.join(file))
    }
    fn cgroup_write(&mut self, cgroup: &str, file: &str, value: &str) -> std::io::Result<()> {
        // One write(2) of the whole value: a cgroup file takes each write
        // as a whole setting.
        std::fs::write(self.cgroup_dir(cgroup)?.join(file), value)
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
    /// Pages that could not move (shared with other processes, busy, or
    /// reported absent while marked for a NUMA-hinting fault): after a
    /// migration that ran, the pages `numa_maps` still shows off the new
    /// node.
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
    /// After a `pin` that succeeded, before the pages migrate: lets the
    /// process's memory onto `node` where something it pinned keeps it
    /// off (a cgroup whose `cpuset.mems` leaves the node out makes the
    /// kernel refuse the migration). Nothing by default.
    fn allow_memory(&mut self, _sys: &mut dyn System, _pid: u32, _node: u32) -> Result<(), String> {
        Ok(())
    }
    /// After the pages migrated: binds the memory to `node` where the
    /// process's memory was bound before the move. `left` is the memory
    /// still on other nodes (bytes per node, as `numa_maps` shows it after
    /// the paced migration); a binding that would make the kernel move
    /// more than `limit` bytes of it at once (unpaced) is not narrowed.
    /// Nothing by default.
    fn bind_memory(
        &mut self,
        _sys: &mut dyn System,
        _pid: u32,
        _node: u32,
        _left: &BTreeMap<u32, u64>,
        _limit: u64,
    ) -> Result<(), String> {
        Ok(())
    }
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

/// Pins a process the way libvirt's live `vcpupin` and `numatune` pin a
/// domain, for a process libvirt does not hold: through the cgroup v2
/// cpuset of the process's own (`cpuset.cpus`, `cpuset.mems`, the files
/// libvirt writes for a domain's vCPU and emulator cgroups), then each
/// thread's affinity (`sched_setaffinity`, as libvirt does after the
/// cgroup). A thread's mask can never leave its cgroup's CPUs, and the
/// kernel refuses to migrate pages to a node outside its cgroup's
/// memory nodes, so a process confined by a cgroup (as a libvirt domain
/// is) cannot be moved by its threads alone.
///
/// Only a cgroup whose threads all belong to the process is changed (a
/// cgroup shared with other processes would move them too): a shared one
/// that keeps the process off the new CPUs refuses the move, with nothing
/// changed. A cgroup without the cpuset controller, or with empty
/// `cpuset.cpus`/`cpuset.mems` (inheriting its parent's), is left as it
/// is. The memory nodes are changed in two steps so the pages still move
/// at the balancer's rate: before the migration they are widened to the
/// old nodes and the new one (the kernel migrates nothing when a
/// cpuset's nodes only grow), and after it they are narrowed to the new
/// node alone, which moves only what `move_pages` left behind (pages
/// shared with other processes, or marked for a NUMA-hinting fault, which
/// `move_pages` reports absent on some kernels); when that is more than
/// one batch of the migration, they stay widened, so nothing ever moves
/// faster than the rate allows. A dedicated target is refused, as
/// [`Affinity`] refuses it. Restoring writes back the cgroups' CPUs, the
/// threads' masks, then the cgroups' memory nodes (which takes back the
/// pages moved: the kernel migrates a cgroup's pages when its nodes
/// change).
#[derive(Clone, Debug, Default)]
pub struct Cgroup {
    masks: BTreeMap<u32, CpuSet>,
    groups: Vec<OwnGroup>,
}

/// A cgroup v2 directory holding only the moving process's threads, as
/// it was before the move.
#[derive(Clone, Debug, Default)]
struct OwnGroup {
    path: String,
    /// `cpuset.cpus` before (empty: inherited, never written).
    cpus: String,
    /// `cpuset.mems` before (empty: inherited, never written).
    mems: String,
    wrote_cpus: bool,
    wrote_mems: bool,
}

fn trimmed(s: std::io::Result<String>) -> std::io::Result<String> {
    s.map(|t| t.trim().to_string())
}

impl Cgroup {
    /// The cgroups of `pid`'s threads whose cpuset is to change for a
    /// move onto `cpus`; an error names a cgroup shared with other
    /// processes that keeps them off `cpus`.
    fn own_groups(sys: &mut dyn System, pid: u32, tids: &[u32], cpus: &CpuSet) -> Result<Vec<OwnGroup>, String> {
        let mut paths = std::collections::BTreeSet::new();
        for &tid in tids {
            match sys.cgroup_of(pid, tid) {
                Ok(Some(path)) => {
                    paths.insert(path);
                }
                Ok(None) => {}
                Err(e) if gone(&e) => {}
                Err(e) => return Err(format!("reading thread {tid}'s cgroup: {e}")),
            }
        }
        let mut groups = Vec::new();
        for path in paths {
            let cpus_now = match trimmed(sys.cgroup_read(&path, "cpuset.cpus")) {
                Ok(c) => c,
                // No cpuset controller there: nothing to write.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("reading cgroup {path}'s cpuset.cpus: {e}")),
            };
            let mems_now = trimmed(sys.cgroup_read(&path, "cpuset.mems"))
                .map_err(|e| format!("reading cgroup {path}'s cpuset.mems: {e}"))?;
            let members = trimmed(sys.cgroup_read(&path, "cgroup.threads"))
                .map_err(|e| format!("reading cgroup {path}'s cgroup.threads: {e}"))?;
            let own = members.lines().all(|l| l.trim().parse::<u32>().is_ok_and(|t| tids.contains(&t)));
            if own {
                groups.push(OwnGroup { path, cpus: cpus_now, mems: mems_now, ..OwnGroup::default() });
                continue;
            }
            let allowed = CpuSet::parse_list(&cpus_now).unwrap_or_default();
            if !cpus_now.is_empty() && !cpus.is_subset(&allowed) {
                return Err(format!(
                    "cgroup {path} holds other processes too and allows only CPUs {cpus_now}; balance changes only a cgroup of the process's own"
                ));
            }
        }
        Ok(groups)
    }

    fn pin_all(&mut self, sys: &mut dyn System, pid: u32, cpus: &CpuSet, threads: &mut u32) -> Result<(), String> {
        let tids = sys.tids(pid).map_err(|e| format!("listing threads: {e}"))?;
        self.groups = Self::own_groups(sys, pid, &tids, cpus)?;
        // Every mask is kept before any cgroup changes: writing a
        // cgroup's CPUs rewrites its threads' masks.
        for &tid in &tids {
            match sys.get_affinity(tid) {
                Ok(old) => {
                    self.masks.insert(tid, old);
                }
                Err(e) if gone(&e) => {}
                Err(e) => return Err(format!("pinning threads: {e}")),
            }
        }
        let list = cpus.to_list();
        for g in &mut self.groups {
            if g.cpus.is_empty() || CpuSet::parse_list(&g.cpus).is_ok_and(|c| c == *cpus) {
                continue;
            }
            sys.cgroup_write(&g.path, "cpuset.cpus", &list)
                .map_err(|e| format!("writing cgroup {}'s cpuset.cpus {list}: {e}", g.path))?;
            g.wrote_cpus = true;
        }
        for tid in self.masks.keys().copied().collect::<Vec<_>>() {
            match sys.set_affinity(tid, cpus) {
                Ok(()) => *threads += 1,
                Err(e) if gone(&e) => {}
                Err(e) => return Err(format!("pinning threads: {e}")),
            }
        }
        Ok(())
    }

    /// Widens (`left` None) or narrows each own cgroup's memory nodes; a
    /// cgroup whose old nodes other than `node` still hold more than
    /// `limit` bytes is not narrowed.
    fn set_mems(
        &mut self,
        sys: &mut dyn System,
        node: u32,
        left: Option<(&BTreeMap<u32, u64>, u64)>,
    ) -> Result<(), String> {
        let widen = left.is_none();
        for g in &mut self.groups {
            let Ok(old) = CpuSet::parse_list(&g.mems) else { continue };
            if g.mems.is_empty() {
                continue;
            }
            if let Some((left, limit)) = left {
                let behind: u64 = old.iter().filter(|n| *n != node).filter_map(|n| left.get(&n)).sum();
                if behind > limit {
                    continue;
                }
            }
            let mut want = if widen { old.clone() } else { CpuSet::new() };
            want.insert(node);
            let now = trimmed(sys.cgroup_read(&g.path, "cpuset.mems")).unwrap_or_default();
            if CpuSet::parse_list(&now).is_ok_and(|n| n == want) {
                continue;
            }
            let list = want.to_list();
            sys.cgroup_write(&g.path, "cpuset.mems", &list)
                .map_err(|e| format!("writing cgroup {}'s cpuset.mems {list}: {e}", g.path))?;
            g.wrote_mems = true;
        }
        Ok(())
    }
}

impl Pin for Cgroup {
    fn pin(&mut self, sys: &mut dyn System, pid: u32, target: &Target) -> Pinned {
        self.masks.clear();
        self.groups.clear();
        let Pins::Floating(cpus) = &target.after else {
            return Affinity::default().pin(sys, pid, target);
        };
        let mut threads = 0;
        match self.pin_all(sys, pid, cpus, &mut threads) {
            Ok(()) => Pinned { via: Via::SchedSetaffinity, threads, error: None, restored: false },
            Err(e) => Pinned { via: Via::SchedSetaffinity, threads: 0, error: Some(e), restored: self.restore(sys) },
        }
    }

    fn restore(&mut self, sys: &mut dyn System) -> bool {
        let mut all = true;
        for g in self.groups.iter().filter(|g| g.wrote_cpus) {
            all &= sys.cgroup_write(&g.path, "cpuset.cpus", &g.cpus).is_ok();
        }
        all &= restore(sys, &self.masks);
        for g in self.groups.iter().filter(|g| g.wrote_mems) {
            all &= sys.cgroup_write(&g.path, "cpuset.mems", &g.mems).is_ok();
        }
        all
    }

    fn allow_memory(&mut self, sys: &mut dyn System, _pid: u32, node: u32) -> Result<(), String> {
        self.set_mems(sys, node, None)
    }

    fn bind_memory(
        &mut self,
        sys: &mut dyn System,
        _pid: u32,
        node: u32,
        left: &BTreeMap<u32, u64>,
        limit: u64,
    ) -> Result<(), String> {
        self.set_mems(sys, node, Some((left, limit)))
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
    if let Err(e) = pinner.allow_memory(sys, pid, node) {
        out.error = Some(format!("allowing memory on node {node}: {e}"));
        out.restored = pinner.restore(sys);
        return out;
    }
    let start = sys.now();
    let result = migrate(sys, pid, node, rate, &mut out);
    out.migrate_seconds = sys.now().saturating_sub(start).as_secs_f64();
    let result = result.map_err(|e| format!("migrating pages: {e}")).and_then(|()| {
        // What the kernel's own figures still show elsewhere: pages shared
        // with other processes, busy, or (on some kernels) marked for a
        // NUMA-hinting fault, which move_pages reports absent.
        let (left, pages) = off_node(sys, pid, node).unwrap_or_default();
        out.pages_not_moved = out.pages_not_moved.max(pages);
        pinner
            .bind_memory(sys, pid, node, &left, chunk_bytes(rate))
            .map_err(|e| format!("binding memory to node {node}: {e}"))
    });
    if let Err(e) = result {
        out.error = Some(e);
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

/// The most one `move_pages` batch carries at `rate` bytes a second.
fn chunk_bytes(rate: u64) -> u64 {
    if rate == 0 {
        MAX_CHUNK
    } else {
        (rate / 8).clamp(64 << 10, MAX_CHUNK)
    }
}

/// A process's resident memory on nodes other than `node` (bytes per
/// node) and its pages there, from its `numa_maps` now.
fn off_node<S: System + ?Sized>(sys: &mut S, pid: u32, node: u32) -> Option<(BTreeMap<u32, u64>, u64)> {
    let (_, text) = sys.maps(pid).ok()?;
    let mut bytes = BTreeMap::new();
    let mut pages = 0;
    for m in numa_maps::parse(&text).ok()? {
        for (&n, &count) in m.pages.iter().filter(|(n, c)| **n != node && **c > 0) {
            *bytes.entry(n).or_insert(0) += count * m.page_size;
            pages += count;
        }
    }
    Some((bytes, pages))
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
    let chunk_bytes = chunk_bytes(rate);
    let elsewhere = |s: &i32| *s >= 0 && *s as u32 != node;
    for m in &mappings {
        // Only mappings with pages elsewhere are walked: most of a QEMU
        // address space is reserved but never touched.
        if m.page_size == 0 || m.pages.iter().all(|(n, c)| *n == node || *c == 0) {
            continue;
        }
        let Some(&end) = ends.get(&m.start) else { continue };
        let per_chunk = (chunk_bytes / m.page_size).max(1);
        let batch = |from: u64, n: u64| -> Vec<u64> {
            (0..n).map(|i| from + i * m.page_size).take_while(|a| *a < end).collect()
        };
        // The next batch and where its pages are, known from the last
        // call's look-ahead.
        let mut ahead: Option<(Vec<u64>, Vec<i32>)> = None;
        let mut addr = m.start;
        while addr < end {
            let batch_start = sys.now();
            let (pages, where_now) = match ahead.take() {
                Some(known) => known,
                None => {
                    let pages = batch(addr, per_chunk);
                    let where_now = sys.move_pages(pid, &pages, None)?;
                    (pages, where_now)
                }
            };
            addr = pages.last().map_or(end, |a| a + m.page_size);
            let todo: Vec<u64> = pages.iter().zip(&where_now).filter(|(_, s)| elsewhere(s)).map(|(a, _)| *a).collect();
            if todo.is_empty() {
                continue;
            }
            // The next two batches, asked before the call: the kernel has
            // been seen moving pages beyond those asked (up to a batch
            // more, in a guest), which count against the rate too.
            let next = batch(addr, per_chunk * 2);
            let next_before = if next.is_empty() { Vec::new() } else { sys.move_pages(pid, &next, None)? };
            let mut after = sys.move_pages(pid, &todo, Some(node))?;
            if after.iter().any(|s| *s < 0) {
                // A batch the kernel stopped part-way (it then writes no
                // status for pages it did move): ask where they are now,
                // so the pacing counts every byte that moved.
                let unsure: Vec<u64> = todo.iter().zip(&after).filter(|(_, s)| **s < 0).map(|(a, _)| *a).collect();
                let mut now = sys.move_pages(pid, &unsure, None)?.into_iter();
                for s in after.iter_mut().filter(|s| **s < 0) {
                    *s = now.next().unwrap_or(*s);
                }
            }
            let moved = after.iter().filter(|s| **s >= 0 && **s as u32 == node).count() as u64;
            let mut extra = 0;
            if !next.is_empty() {
                let mut next_after = sys.move_pages(pid, &next, None)?;
                extra = next_before
                    .iter()
                    .zip(&next_after)
                    .filter(|(b, a)| elsewhere(b) && **a >= 0 && **a as u32 == node)
                    .count() as u64;
                let mut next = next;
                next.truncate(per_chunk as usize);
                next_after.truncate(next.len());
                ahead = Some((next, next_after));
            }
            out.bytes_moved += (moved + extra) * m.page_size;
            out.pages_not_moved += todo.len() as u64 - moved;
            let wait = pace((moved + extra) * m.page_size, rate, sys.now().saturating_sub(batch_start));
            if !wait.is_zero() {
                sys.sleep(wait);
            }
        }
    }
    Ok(())
}
