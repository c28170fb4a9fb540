//! The sampler: turns one read of the process tree into the esxtop-style
//! NUMA figures per VM or process, keeping the little history that home
//! nodes and migration counts need.
//!
//! Definitions (documented in docs/top.md):
//! - a thread's node is the node of the CPU it last ran on (`stat` field
//!   39); for a VM only its vCPU threads count, when QEMU names them;
//! - the home nodes (NHN) are the nodes holding at least a quarter of the
//!   thread observations over the last `window` samples (and always the
//!   node holding most), so one stray wake-up does not move a home;
//! - NMIG counts changes of the home set seen by this sampler;
//! - local memory (NLMEM) is the resident memory on home nodes, remote
//!   (NRMEM) the rest; N%L = local / resident. For a process homed on
//!   several nodes N%L says little, so the balance (smallest home-node
//!   share over the largest) is reported too.

use crate::error::ReadError;
use crate::numa_maps;
use crate::procfs::{self, CpuTimes};
use crate::source::Source;
use numaplace_topo::CpuSet;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Include processes that are not QEMU virtual machines.
    pub all: bool,
    /// Only these process ids (empty: every process).
    pub pids: Vec<u32>,
    /// Samples over which home nodes are judged.
    pub window: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { all: false, pids: Vec::new(), window: 3 }
    }
}

/// One NUMA node's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    /// Node id.
    pub node: u32,
    /// Its CPUs (list syntax).
    pub cpus: String,
    /// Number of CPUs.
    pub cpu_count: u32,
    /// `MemTotal` of the node.
    pub memory_total_bytes: u64,
    /// `MemFree` of the node.
    pub memory_free_bytes: u64,
    /// CPUs' worth of busy time since the previous sample (None on the
    /// first sample).
    pub busy_cpus: Option<f64>,
    /// Memory of the sampled VMs/processes on this node.
    pub sampled_memory_bytes: u64,
}

/// Whether a sampled process is a virtual machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A QEMU process.
    Vm,
    /// Anything else (`--all`).
    Process,
}

/// The figures for one VM or process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcInfo {
    /// Process id.
    pub pid: u32,
    /// VM name (from `-name`), else the process name.
    pub name: String,
    /// VM or plain process.
    pub kind: Kind,
    /// Threads in the process.
    pub threads: u32,
    /// Threads whose placement counts (vCPU threads of a VM, else all).
    pub counted_threads: u32,
    /// Counted threads per node they last ran on, this sample.
    pub threads_per_node: BTreeMap<u32, u32>,
    /// Home node(s), NHN.
    pub home_nodes: Vec<u32>,
    /// Home changes seen, NMIG.
    pub home_migrations: u64,
    /// Resident memory per node, GST_ND(x), in bytes.
    pub memory_per_node: BTreeMap<u32, u64>,
    /// Resident memory in total.
    pub memory_bytes: u64,
    /// Of which on home nodes, NLMEM.
    pub local_bytes: u64,
    /// Of which elsewhere, NRMEM.
    pub remote_bytes: u64,
    /// N%L (None without resident memory).
    pub local_percent: Option<f64>,
    /// For a process with several home nodes: smallest home-node memory
    /// over the largest, in percent.
    pub home_balance_percent: Option<f64>,
    /// Resident memory in huge-page mappings.
    pub huge_bytes: u64,
    /// Configured memory (QEMU `-m`), MEMSZ.
    pub configured_memory_bytes: Option<u64>,
    /// CPUs the process may run on.
    pub cpus_allowed: String,
    /// Nodes it may allocate on.
    pub mems_allowed: String,
    /// The distinct memory policies of its mappings (`bind:1`, ...).
    pub policies: Vec<String>,
}

/// Processes that could not be read this time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Not readable without more privileges.
    pub permission_denied: u32,
    /// Exited while being read.
    pub vanished: u32,
    /// Other errors, one message each.
    pub errors: Vec<String>,
}

/// One sample of the whole host.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Sample number, from 1.
    pub sequence: u64,
    /// False when the kernel exposes no NUMA nodes (everything is then
    /// reported on node 0).
    pub numa: bool,
    /// The nodes.
    pub nodes: Vec<NodeInfo>,
    /// The VMs (and processes with `all`), by pid.
    pub processes: Vec<ProcInfo>,
    /// What could not be read.
    pub skipped: Skipped,
}

#[derive(Debug, Default)]
struct History {
    name: String,
    window: VecDeque<BTreeMap<u32, u32>>,
    home: Vec<u32>,
    migrations: u64,
}

/// Samples a `Source` repeatedly.
pub struct Sampler<S: Source> {
    source: S,
    options: Options,
    history: BTreeMap<u32, History>,
    cpu_times: BTreeMap<u32, CpuTimes>,
    sequence: u64,
}

struct Layout {
    numa: bool,
    nodes: Vec<(u32, CpuSet)>,
    cpu_node: BTreeMap<u32, u32>,
}

impl<S: Source> Sampler<S> {
    /// A sampler with no history.
    pub fn new(source: S, options: Options) -> Self {
        Sampler { source, options, history: BTreeMap::new(), cpu_times: BTreeMap::new(), sequence: 0 }
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Forgets the home history of one process (after it was moved on
    /// purpose, so the move does not count as a drift).
    pub fn forget(&mut self, pid: u32) {
        self.history.remove(&pid);
    }

    fn layout(&self) -> Result<Layout, ReadError> {
        let ids = self.source.node_ids()?;
        let mut nodes = Vec::new();
        for id in &ids {
            let text = self.source.host_file(&format!("sys/devices/system/node/node{id}/cpulist"))?;
            let cpus = CpuSet::parse_list(&text).map_err(|e| ReadError::Parse {
                path: format!("sys/devices/system/node/node{id}/cpulist").into(),
                source: crate::error::ParseError::File { file: "cpulist", reason: e.to_string() },
            })?;
            nodes.push((*id, cpus));
        }
        let numa = !nodes.is_empty();
        if !numa {
            // Without CONFIG_NUMA there is one implicit node holding every CPU.
            let stat = self.source.host_file("proc/stat")?;
            let all: CpuSet = procfs::parse_proc_stat(&stat).into_iter().fold(CpuSet::new(), |mut s, (c, _)| {
                s.insert(c);
                s
            });
            nodes.push((0, all));
        }
        let cpu_node = nodes.iter().flat_map(|(n, cpus)| cpus.iter().map(move |c| (c, *n))).collect();
        Ok(Layout { numa, nodes, cpu_node })
    }

    /// Reads the host once. Errors only when the host-wide files cannot
    /// be read; single processes that fail are counted in `skipped`.
    pub fn sample(&mut self) -> Result<Snapshot, ReadError> {
        self.sequence += 1;
        let layout = self.layout()?;
        let stat = self.source.host_file("proc/stat")?;
        let times: BTreeMap<u32, CpuTimes> = procfs::parse_proc_stat(&stat).into_iter().collect();
        let mut nodes = Vec::new();
        for (id, cpus) in &layout.nodes {
            let (total, free) = if layout.numa {
                let text = self.source.host_file(&format!("sys/devices/system/node/node{id}/meminfo"))?;
                procfs::parse_node_meminfo(&text).map_err(|source| ReadError::Parse {
                    path: format!("sys/devices/system/node/node{id}/meminfo").into(),
                    source,
                })?
            } else {
                meminfo_whole(&self.source)?
            };
            let busy_cpus = if self.cpu_times.is_empty() {
                None
            } else {
                let mut busy = 0.0;
                for cpu in cpus.iter() {
                    if let (Some(now), Some(before)) = (times.get(&cpu), self.cpu_times.get(&cpu)) {
                        let dt = now.total.saturating_sub(before.total);
                        if dt > 0 {
                            busy += now.busy.saturating_sub(before.busy) as f64 / dt as f64;
                        }
                    }
                }
                Some(busy)
            };
            nodes.push(NodeInfo {
                node: *id,
                cpus: cpus.to_list(),
                cpu_count: cpus.len() as u32,
                memory_total_bytes: total,
                memory_free_bytes: free,
                busy_cpus,
                sampled_memory_bytes: 0,
            });
        }
        self.cpu_times = times;

        let mut skipped = Skipped::default();
        let mut processes = Vec::new();
        let pids = if self.options.pids.is_empty() { self.source.pids()? } else { self.options.pids.clone() };
        for pid in pids {
            match self.read_process(pid, &layout) {
                Ok(Some(p)) => processes.push(p),
                Ok(None) => {}
                Err(ReadError::Vanished(_)) => skipped.vanished += 1,
                Err(ReadError::Permission(_)) => skipped.permission_denied += 1,
                Err(e) => skipped.errors.push(e.to_string()),
            }
        }
        let seen: BTreeSet<u32> = processes.iter().map(|p| p.pid).collect();
        self.history.retain(|pid, _| seen.contains(pid));
        for p in &processes {
            for (node, bytes) in &p.memory_per_node {
                if let Some(n) = nodes.iter_mut().find(|n| n.node == *node) {
                    n.sampled_memory_bytes += bytes;
                }
            }
        }
        Ok(Snapshot { sequence: self.sequence, numa: layout.numa, nodes, processes, skipped })
    }

    fn read_process(&mut self, pid: u32, layout: &Layout) -> Result<Option<ProcInfo>, ReadError> {
        let cmdline = procfs::split_cmdline(&self.source.proc_file(pid, "cmdline")?);
        if cmdline.is_empty() {
            // Kernel threads have no command line and no user memory.
            return Ok(None);
        }
        let qemu = procfs::qemu_info(&cmdline);
        if qemu.is_none() && !self.options.all && self.options.pids.is_empty() {
            return Ok(None);
        }
        let parse_err = |rel: &str, source| ReadError::Parse { path: format!("/proc/{pid}/{rel}").into(), source };
        let status_text = String::from_utf8_lossy(&self.source.proc_file(pid, "status")?).into_owned();
        let status = procfs::parse_status(&status_text).map_err(|e| parse_err("status", e))?;
        let maps = match self.source.proc_file(pid, "numa_maps") {
            Ok(raw) => numa_maps::parse(&String::from_utf8_lossy(&raw)).map_err(|e| parse_err("numa_maps", e))?,
            // Kernels without CONFIG_NUMA have no numa_maps at all (and the
            // process is there: its status was just read).
            Err(ReadError::Vanished(_)) if !layout.numa => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut memory_per_node = numa_maps::bytes_per_node(&maps);
        if !layout.numa && maps.is_empty() {
            if let Some(rss) = status.rss_bytes.filter(|r| *r > 0) {
                memory_per_node.insert(0, rss);
            }
        }
        let memory_bytes: u64 = memory_per_node.values().sum();
        if qemu.is_none() && memory_bytes == 0 {
            return Ok(None);
        }
        let huge_bytes = maps.iter().filter(|m| m.huge).flat_map(|m| m.bytes_per_node().map(|(_, b)| b)).sum();
        let mut policies: Vec<String> = maps.iter().map(|m| policy_text(&m.policy)).collect();
        policies.sort();
        policies.dedup();

        let tids = self.source.tids(pid)?;
        let mut all_threads = Vec::new();
        for tid in &tids {
            match self.source.proc_file(pid, &format!("task/{tid}/stat")) {
                Ok(raw) => {
                    let st = procfs::parse_task_stat(&String::from_utf8_lossy(&raw))
                        .map_err(|e| parse_err(&format!("task/{tid}/stat"), e))?;
                    all_threads.push(st);
                }
                // A thread may end between listing and reading.
                Err(ReadError::Vanished(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let vcpus: Vec<_> = all_threads.iter().filter(|t| procfs::is_vcpu_thread(&t.comm)).collect();
        let counted: Vec<_> = if qemu.is_some() && !vcpus.is_empty() { vcpus } else { all_threads.iter().collect() };
        let mut threads_per_node = BTreeMap::new();
        for t in &counted {
            if let Some(node) = layout.cpu_node.get(&t.processor) {
                *threads_per_node.entry(*node).or_insert(0u32) += 1;
            }
        }

        let name = qemu.as_ref().and_then(|q| q.name.clone()).unwrap_or_else(|| status.name.clone());
        let window = self.options.window.max(1);
        let hist = self.history.entry(pid).or_default();
        if hist.name != status.name {
            *hist = History { name: status.name.clone(), ..History::default() };
        }
        hist.window.push_back(threads_per_node.clone());
        while hist.window.len() > window {
            hist.window.pop_front();
        }
        let home = home_nodes(&hist.window);
        if !hist.home.is_empty() && !home.is_empty() && home != hist.home {
            hist.migrations += 1;
        }
        if !home.is_empty() {
            hist.home = home.clone();
        }
        let home = hist.home.clone();
        let local_bytes: u64 = home.iter().filter_map(|n| memory_per_node.get(n)).sum();
        let local_percent = (memory_bytes > 0).then(|| local_bytes as f64 * 100.0 / memory_bytes as f64);
        let home_balance_percent = (home.len() > 1).then(|| {
            let on: Vec<u64> = home.iter().map(|n| memory_per_node.get(n).copied().unwrap_or(0)).collect();
            let max = on.iter().copied().max().unwrap_or(0);
            let min = on.iter().copied().min().unwrap_or(0);
            if max == 0 {
                100.0
            } else {
                min as f64 * 100.0 / max as f64
            }
        });
        Ok(Some(ProcInfo {
            pid,
            name,
            kind: if qemu.is_some() { Kind::Vm } else { Kind::Process },
            threads: all_threads.len() as u32,
            counted_threads: counted.len() as u32,
            threads_per_node,
            home_nodes: home,
            home_migrations: hist.migrations,
            memory_per_node,
            memory_bytes,
            local_bytes,
            remote_bytes: memory_bytes - local_bytes,
            local_percent,
            home_balance_percent,
            huge_bytes,
            configured_memory_bytes: qemu.and_then(|q| q.memory_bytes),
            cpus_allowed: status.cpus_allowed.to_list(),
            mems_allowed: status.mems_allowed.to_list(),
            policies,
        }))
    }
}

fn meminfo_whole<S: Source>(source: &S) -> Result<(u64, u64), ReadError> {
    let text = source.host_file("proc/meminfo")?;
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok()))
            .unwrap_or(0)
            * 1024
    };
    Ok((get("MemTotal:"), get("MemFree:")))
}

/// Home nodes from recent thread observations: every node with at least a
/// quarter of them, and always the most used (lowest id on a tie).
pub(crate) fn home_nodes(window: &VecDeque<BTreeMap<u32, u32>>) -> Vec<u32> {
    let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
    for sample in window {
        for (node, n) in sample {
            *counts.entry(*node).or_insert(0) += n;
        }
    }
    let total: u32 = counts.values().sum();
    if total == 0 {
        return Vec::new();
    }
    let top = counts.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(n, _)| *n);
    counts.iter().filter(|(n, c)| Some(**n) == top || **c * 4 >= total).map(|(n, _)| *n).collect()
}

/// The kernel's spelling of a policy (`bind:0-1`).
pub(crate) fn policy_text(p: &numa_maps::Policy) -> String {
    use numa_maps::Policy::*;
    let list = |nodes: &[u32]| {
        nodes.iter().fold(CpuSet::new(), |mut s, n| {
            s.insert(*n);
            s
        })
    };
    match p {
        Default => "default".into(),
        Local => "local".into(),
        Prefer { nodes } => format!("prefer:{}", list(nodes)),
        Bind { nodes } => format!("bind:{}", list(nodes)),
        Interleave { nodes } => format!("interleave:{}", list(nodes)),
    }
}
