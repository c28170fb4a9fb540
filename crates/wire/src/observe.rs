//! The JSON that `top --once --format json` and `balance --format json`
//! print: the observer's snapshot, the balancer's events and what a move
//! did. Output only; the shapes are documented in `docs/top.md` and
//! `docs/balance.md`.

use numaplace_observe::act::Outcome;
use numaplace_observe::balance::{Decision, Event, Score};
use numaplace_observe::sample::{Kind, NodeInfo, ProcInfo, Skipped};
use numaplace_observe::Snapshot;
use serde::Serialize;
use std::collections::BTreeMap;

/// One sample of the whole host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotDoc<'a> {
    /// Sample number, from 1.
    pub sequence: u64,
    /// False when the kernel exposes no NUMA nodes.
    pub numa: bool,
    /// The nodes.
    pub nodes: Vec<NodeDoc<'a>>,
    /// The VMs (and processes with `--all`), by pid.
    pub processes: Vec<ProcDoc<'a>>,
    /// What could not be read.
    pub skipped: SkippedDoc<'a>,
}

/// One node's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeDoc<'a> {
    /// Node id.
    pub node: u32,
    /// CPUs, list syntax.
    pub cpus: &'a str,
    /// Number of CPUs.
    pub cpu_count: u32,
    /// `MemTotal`.
    pub memory_total_bytes: u64,
    /// `MemFree`.
    pub memory_free_bytes: u64,
    /// CPUs' worth of busy time since the previous sample.
    pub busy_cpus: Option<f64>,
    /// Memory of the sampled VMs on this node.
    pub sampled_memory_bytes: u64,
}

/// One VM or process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcDoc<'a> {
    /// Process id.
    pub pid: u32,
    /// VM or process name.
    pub name: &'a str,
    /// `vm` or `process`.
    pub kind: &'static str,
    /// Threads.
    pub threads: u32,
    /// Threads whose placement counts.
    pub counted_threads: u32,
    /// Counted threads per node.
    pub threads_per_node: &'a BTreeMap<u32, u32>,
    /// NHN.
    pub home_nodes: &'a [u32],
    /// NMIG.
    pub home_migrations: u64,
    /// GST_ND(x), bytes.
    pub memory_per_node: &'a BTreeMap<u32, u64>,
    /// Resident bytes.
    pub memory_bytes: u64,
    /// NLMEM.
    pub local_bytes: u64,
    /// NRMEM.
    pub remote_bytes: u64,
    /// N%L.
    pub local_percent: Option<f64>,
    /// Smallest over largest home-node memory, percent.
    pub home_balance_percent: Option<f64>,
    /// Resident bytes in huge-page mappings.
    pub huge_bytes: u64,
    /// MEMSZ.
    pub configured_memory_bytes: Option<u64>,
    /// CPUs it may run on.
    pub cpus_allowed: &'a str,
    /// Nodes it may allocate on.
    pub mems_allowed: &'a str,
    /// Distinct memory policies of its mappings.
    pub policies: &'a [String],
}

/// Processes not read this time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedDoc<'a> {
    /// Not readable without more privileges.
    pub permission_denied: u32,
    /// Exited while being read.
    pub vanished: u32,
    /// Other errors.
    pub errors: &'a [String],
}

impl<'a> From<&'a Snapshot> for SnapshotDoc<'a> {
    fn from(s: &'a Snapshot) -> SnapshotDoc<'a> {
        SnapshotDoc {
            sequence: s.sequence,
            numa: s.numa,
            nodes: s.nodes.iter().map(NodeDoc::from).collect(),
            processes: s.processes.iter().map(ProcDoc::from).collect(),
            skipped: SkippedDoc::from(&s.skipped),
        }
    }
}

impl<'a> From<&'a NodeInfo> for NodeDoc<'a> {
    fn from(n: &'a NodeInfo) -> NodeDoc<'a> {
        NodeDoc {
            node: n.node,
            cpus: &n.cpus,
            cpu_count: n.cpu_count,
            memory_total_bytes: n.memory_total_bytes,
            memory_free_bytes: n.memory_free_bytes,
            busy_cpus: n.busy_cpus,
            sampled_memory_bytes: n.sampled_memory_bytes,
        }
    }
}

impl<'a> From<&'a ProcInfo> for ProcDoc<'a> {
    fn from(p: &'a ProcInfo) -> ProcDoc<'a> {
        ProcDoc {
            pid: p.pid,
            name: &p.name,
            kind: match p.kind {
                Kind::Vm => "vm",
                Kind::Process => "process",
            },
            threads: p.threads,
            counted_threads: p.counted_threads,
            threads_per_node: &p.threads_per_node,
            home_nodes: &p.home_nodes,
            home_migrations: p.home_migrations,
            memory_per_node: &p.memory_per_node,
            memory_bytes: p.memory_bytes,
            local_bytes: p.local_bytes,
            remote_bytes: p.remote_bytes,
            local_percent: p.local_percent,
            home_balance_percent: p.home_balance_percent,
            huge_bytes: p.huge_bytes,
            configured_memory_bytes: p.configured_memory_bytes,
            cpus_allowed: &p.cpus_allowed,
            mems_allowed: &p.mems_allowed,
            policies: &p.policies,
        }
    }
}

impl<'a> From<&'a Skipped> for SkippedDoc<'a> {
    fn from(s: &'a Skipped) -> SkippedDoc<'a> {
        SkippedDoc { permission_denied: s.permission_denied, vanished: s.vanished, errors: &s.errors }
    }
}

/// One node's standing for a process the balancer weighs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreDoc<'a> {
    /// Node id.
    pub node: u32,
    /// Free cores.
    pub free_cores: u32,
    /// Free memory left after the move (may be negative).
    pub free_memory_after_bytes: i64,
    /// Bytes to migrate.
    pub bytes_to_move: u64,
    /// Why the node cannot take it.
    pub excluded: Option<&'a str>,
}

/// A balancer event: `{"event": "watching" | "decide" | "skip", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventDoc<'a> {
    /// Below the threshold, not yet for long enough.
    Watching {
        /// Process id.
        pid: u32,
        /// Name.
        name: &'a str,
        /// N%L.
        local_percent: f64,
        /// Samples below so far.
        samples_below: u32,
    },
    /// Move it.
    Decide {
        /// Process id.
        pid: u32,
        /// Name.
        name: &'a str,
        /// Home nodes before.
        from: &'a [u32],
        /// New home.
        to: u32,
        /// N%L before.
        local_percent_before: f64,
        /// Bytes not yet on the new home.
        bytes_to_move: u64,
        /// Every node's score.
        scores: Vec<ScoreDoc<'a>>,
    },
    /// Needs a move but will not get one.
    Skip {
        /// Process id.
        pid: u32,
        /// Name.
        name: &'a str,
        /// N%L.
        local_percent: f64,
        /// Why.
        reason: &'a str,
    },
}

fn score(s: &Score) -> ScoreDoc<'_> {
    ScoreDoc {
        node: s.node,
        free_cores: s.free_cores,
        free_memory_after_bytes: s.free_memory_after_bytes,
        bytes_to_move: s.bytes_to_move,
        excluded: s.excluded.as_deref(),
    }
}

impl<'a> From<&'a Event> for EventDoc<'a> {
    fn from(e: &'a Event) -> EventDoc<'a> {
        match e {
            Event::Watching { pid, name, local_percent, samples_below } => {
                EventDoc::Watching { pid: *pid, name, local_percent: *local_percent, samples_below: *samples_below }
            }
            Event::Decide(Decision { pid, name, from, to, local_percent_before, bytes_to_move, scores }) => {
                EventDoc::Decide {
                    pid: *pid,
                    name,
                    from,
                    to: *to,
                    local_percent_before: *local_percent_before,
                    bytes_to_move: *bytes_to_move,
                    scores: scores.iter().map(score).collect(),
                }
            }
            Event::Skip { pid, name, local_percent, reason } => {
                EventDoc::Skip { pid: *pid, name, local_percent: *local_percent, reason }
            }
        }
    }
}

/// What a move did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutcomeDoc<'a> {
    /// Threads pinned to the new home.
    pub threads_pinned: u32,
    /// Bytes migrated.
    pub bytes_moved: u64,
    /// Pages that could not move.
    pub pages_not_moved: u64,
    /// Seconds spent migrating.
    pub migrate_seconds: f64,
    /// The error that stopped the move.
    pub error: Option<&'a str>,
    /// Whether the old CPU masks were put back after an error.
    pub restored: bool,
}

impl<'a> From<&'a Outcome> for OutcomeDoc<'a> {
    fn from(o: &'a Outcome) -> OutcomeDoc<'a> {
        OutcomeDoc {
            threads_pinned: o.threads_pinned,
            bytes_moved: o.bytes_moved,
            pages_not_moved: o.pages_not_moved,
            migrate_seconds: o.migrate_seconds,
            error: o.error.as_deref(),
            restored: o.restored,
        }
    }
}
