//! Deciding what to move: hysteresis over samples, and a small scorer
//! that picks a new home node. Pure: snapshots in, decisions out; the
//! `act` module carries them out.
//!
//! Scorer, in order (ties fall to the next rule; the last is total):
//! 1. only nodes with CPUs (at least as many as a VM has vCPUs), with at
//!    least one free core (CPUs minus the busy CPUs measured since the
//!    previous sample, rounded), and whose
//!    free memory after taking the process's remote part stays above a
//!    reserve (1/32 of the node, at least 16 MiB, and at least the
//!    memory the host reserves per node): never onto an overloaded node;
//! 2. most free cores;
//! 3. most free memory after the move (which favours the node that
//!    already holds most of the process, so the least is copied);
//! 4. lowest node id.
//!
//! Before a node is admitted, a [`Judge`] (the host's reservations and
//! VMs, [`crate::host::Host`]) says which of its CPUs the process may be
//! pinned to there, or why it stays ([`Kept`]): a node it may not use
//! is excluded like an overloaded one, and the decision carries the pins
//! before and after the move.
//!
//! The planner crate (`numaplace-plan`) places new VMs from a whole host
//! model; here the question is narrower (one running process, live load
//! figures), so the rule lives beside the figures it reads.

use crate::host::{Host, Kept, Target};
use crate::sample::{NodeInfo, ProcInfo, Snapshot};
use std::collections::BTreeMap;
use std::fmt;

/// Says where on a node a process may go: which CPUs it may be pinned to
/// there, or why it stays where it is.
pub trait Judge {
    /// The move of `p` onto `node`, or why not.
    fn target(&mut self, p: &ProcInfo, node: u32) -> Result<Target, Kept>;
    /// Memory the host keeps free on every node (its reservation), bytes:
    /// the scorer's reserve is never below it.
    fn memory_reserve(&self) -> u64 {
        0
    }
}

impl Judge for Host<'_> {
    fn target(&mut self, p: &ProcInfo, node: u32) -> Result<Target, Kept> {
        Host::target(self, p, node)
    }
    fn memory_reserve(&self) -> u64 {
        self.state().reservations().memory_per_node
    }
}

/// Balancer settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Move when N%L stays below this (percent).
    pub threshold_percent: f64,
    /// Consecutive samples below the threshold before moving.
    pub hysteresis: u32,
    /// At most this many moves per interval.
    pub max_moves: usize,
    /// Samples to leave a moved process alone.
    pub cooldown: u32,
    /// Ignore processes smaller than this.
    pub min_memory_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config { threshold_percent: 80.0, hysteresis: 3, max_moves: 1, cooldown: 5, min_memory_bytes: 16 << 20 }
    }
}

/// One node's standing for a process.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    /// Node id.
    pub node: u32,
    /// Free cores (rounded).
    pub free_cores: u32,
    /// Free memory left if the process moved here (may be negative).
    pub free_memory_after_bytes: i64,
    /// Bytes that would have to be migrated.
    pub bytes_to_move: u64,
    /// Why the node cannot take the process, if so.
    pub excluded: Option<Exclusion>,
    /// Where its threads would run there (None when excluded).
    pub target: Option<Target>,
}

/// Why a node cannot take a process.
#[derive(Clone, Debug, PartialEq)]
pub enum Exclusion {
    /// The node has no CPUs.
    NoCpus,
    /// Every CPU was busy over the last interval.
    NoFreeCore {
        /// CPUs' worth of busy time.
        busy: f64,
        /// The node's CPUs.
        cpus: u32,
    },
    /// The move would take the node's free memory below its reserve.
    BelowReserve {
        /// Free memory after the move, bytes (may be negative).
        free_after: i64,
        /// The reserve, bytes.
        reserve: i64,
    },
    /// A VM with more vCPUs than the node has CPUs.
    VcpusDoNotFit {
        /// Its vCPUs.
        vcpus: u32,
        /// The node's CPUs.
        cpus: u32,
    },
    /// The host's reservations and VMs keep it off the node.
    Kept(Kept),
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::NoCpus => f.write_str("no CPUs"),
            Exclusion::NoFreeCore { busy, cpus } => write!(f, "no free core ({busy:.1} of {cpus} CPUs busy)"),
            Exclusion::BelowReserve { free_after, reserve } => {
                write!(f, "{} MiB free after the move, below the {} MiB reserve", free_after >> 20, reserve >> 20)
            }
            Exclusion::VcpusDoNotFit { vcpus, cpus } => write!(f, "{vcpus} vCPUs do not fit {cpus} CPUs"),
            Exclusion::Kept(k) => k.fmt(f),
        }
    }
}

/// A decision to move one process.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Process id.
    pub pid: u32,
    /// VM or process name.
    pub name: String,
    /// Home node(s) before.
    pub from: Vec<u32>,
    /// The new home.
    pub to: u32,
    /// N%L before.
    pub local_percent_before: f64,
    /// Bytes not yet on the new home.
    pub bytes_to_move: u64,
    /// How every node scored.
    pub scores: Vec<Score>,
    /// Where its threads run before and after the move.
    pub target: Target,
}

/// Why a process that needs a move does not get one.
#[derive(Clone, Debug, PartialEq)]
pub enum SkipReason {
    /// Homed on several nodes: wide on purpose.
    Wide {
        /// Its home nodes.
        nodes: Vec<u32>,
    },
    /// The interval's moves are used up (`--max-moves`).
    MaxMoves {
        /// Moves decided this interval.
        moves: usize,
    },
    /// No node can take it for lack of a free core or memory.
    NoNode,
    /// Every node that had room is one the host keeps it off; the first
    /// such node's reason.
    Kept(Kept),
}

impl SkipReason {
    /// The kind's name, for the JSON lines' `code`.
    pub fn code(&self) -> &'static str {
        match self {
            SkipReason::Wide { .. } => "wide",
            SkipReason::MaxMoves { .. } => "max_moves",
            SkipReason::NoNode => "no_node",
            SkipReason::Kept(k) => k.code(),
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Wide { nodes } => write!(f, "homed on nodes {nodes:?}: wide processes are not moved"),
            SkipReason::MaxMoves { moves } => write!(f, "already {moves} move(s) this interval (--max-moves)"),
            SkipReason::NoNode => f.write_str("no node can take it (all lack a free core or memory)"),
            SkipReason::Kept(k) => write!(f, "kept where it is: {k}"),
        }
    }
}

/// What the balancer concluded about one process this round.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Below the threshold, not yet for long enough.
    Watching {
        /// Process id.
        pid: u32,
        /// Name.
        name: String,
        /// N%L now.
        local_percent: f64,
        /// Samples below so far.
        samples_below: u32,
    },
    /// Move it.
    Decide(Decision),
    /// It needs a move but will not get one.
    Skip {
        /// Process id.
        pid: u32,
        /// Name.
        name: String,
        /// N%L now.
        local_percent: f64,
        /// Why.
        reason: SkipReason,
    },
}

/// Keeps the per-process counters between rounds.
#[derive(Debug, Default)]
pub struct Balancer {
    config: Config,
    below: BTreeMap<u32, u32>,
    cooling: BTreeMap<u32, u32>,
}

impl Balancer {
    /// A balancer with no history.
    pub fn new(config: Config) -> Self {
        Balancer { config, below: BTreeMap::new(), cooling: BTreeMap::new() }
    }

    /// Starts the cooldown of a process that was just moved (or failed to).
    pub fn moved(&mut self, pid: u32) {
        self.below.remove(&pid);
        self.cooling.insert(pid, self.config.cooldown);
    }

    /// One round: updates the counters and returns what to do; `judge`
    /// says where on each node a process may go.
    pub fn step(&mut self, snap: &Snapshot, judge: &mut dyn Judge) -> Vec<Event> {
        let mut events = Vec::new();
        let mut decided = 0;
        let present: std::collections::BTreeSet<u32> = snap.processes.iter().map(|p| p.pid).collect();
        self.below.retain(|pid, _| present.contains(pid));
        self.cooling.retain(|pid, left| present.contains(pid) && *left > 0);
        for p in &snap.processes {
            if let Some(left) = self.cooling.get_mut(&p.pid) {
                // Leave a moved process alone while its home history and
                // page placement settle.
                *left -= 1;
                continue;
            }
            let Some(pct) = p.local_percent else { continue };
            if p.memory_bytes < self.config.min_memory_bytes {
                continue;
            }
            if pct >= self.config.threshold_percent {
                self.below.remove(&p.pid);
                continue;
            }
            let n = self.below.entry(p.pid).or_insert(0);
            *n += 1;
            if *n < self.config.hysteresis {
                events.push(Event::Watching {
                    pid: p.pid,
                    name: p.name.clone(),
                    local_percent: pct,
                    samples_below: *n,
                });
                continue;
            }
            let skip =
                |reason: SkipReason| Event::Skip { pid: p.pid, name: p.name.clone(), local_percent: pct, reason };
            if p.home_nodes.len() > 1 {
                // A process homed on several nodes is wide on purpose; its
                // figure to watch is the per-node balance, not N%L.
                events.push(skip(SkipReason::Wide { nodes: p.home_nodes.clone() }));
                self.moved(p.pid);
                continue;
            }
            if decided >= self.config.max_moves {
                events.push(skip(SkipReason::MaxMoves { moves: decided }));
                continue;
            }
            let scores = score(&snap.nodes, p, judge);
            match choose(&scores) {
                Some(best) => {
                    let Some(target) = best.target.clone() else { continue };
                    decided += 1;
                    events.push(Event::Decide(Decision {
                        pid: p.pid,
                        name: p.name.clone(),
                        from: p.home_nodes.clone(),
                        to: best.node,
                        local_percent_before: pct,
                        bytes_to_move: best.bytes_to_move,
                        scores: scores.clone(),
                        target,
                    }));
                }
                None => {
                    let kept = scores.iter().find_map(|s| match &s.excluded {
                        Some(Exclusion::Kept(k)) => Some(k.clone()),
                        _ => None,
                    });
                    events.push(skip(kept.map_or(SkipReason::NoNode, SkipReason::Kept)));
                    self.moved(p.pid);
                }
            }
        }
        events
    }
}

/// Scores every node for `p` (see the module comment); `judge` is asked
/// only about the nodes the load and memory figures admit.
pub fn score(nodes: &[NodeInfo], p: &ProcInfo, judge: &mut dyn Judge) -> Vec<Score> {
    nodes
        .iter()
        .map(|n| {
            let here = p.memory_per_node.get(&n.node).copied().unwrap_or(0);
            let bytes_to_move = p.memory_bytes.saturating_sub(here);
            let free_after = n.memory_free_bytes as i64 - bytes_to_move as i64;
            let busy = n.busy_cpus.unwrap_or(0.0);
            let free_cores = (f64::from(n.cpu_count) - busy).max(0.0).round() as u32;
            let reserve = (n.memory_total_bytes / 32).max(16 << 20).max(judge.memory_reserve()) as i64;
            let mut excluded = if n.cpu_count == 0 {
                Some(Exclusion::NoCpus)
            } else if free_cores == 0 {
                Some(Exclusion::NoFreeCore { busy, cpus: n.cpu_count })
            } else if free_after < reserve {
                Some(Exclusion::BelowReserve { free_after, reserve })
            } else if p.kind == crate::sample::Kind::Vm && p.counted_threads > n.cpu_count {
                // A VM's vCPUs must fit the node; a plain process's many
                // mostly idle threads need not.
                Some(Exclusion::VcpusDoNotFit { vcpus: p.counted_threads, cpus: n.cpu_count })
            } else {
                None
            };
            let target = match excluded {
                Some(_) => None,
                None => judge.target(p, n.node).map_err(|k| excluded = Some(Exclusion::Kept(k))).ok(),
            };
            Score { node: n.node, free_cores, free_memory_after_bytes: free_after, bytes_to_move, excluded, target }
        })
        .collect()
}

/// The best admissible node, if any.
pub fn choose(scores: &[Score]) -> Option<&Score> {
    scores.iter().filter(|s| s.excluded.is_none()).min_by(|a, b| {
        b.free_cores
            .cmp(&a.free_cores)
            .then(b.free_memory_after_bytes.cmp(&a.free_memory_after_bytes))
            .then(a.node.cmp(&b.node))
    })
}
