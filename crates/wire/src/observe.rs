//! The JSON that `top --once --format json` and `balance --format json`
//! print: the observer's snapshot, the balancer's events and what a move
//! did. Output only; the shapes are documented in `docs/top.md` and
//! `docs/balance.md`.
//!
//! The balancer's lines have always had their keys in alphabetical order
//! at every level (they were built as `serde_json` maps), so the structs
//! they are made of declare their fields alphabetically, and every line
//! names its kind in an `event` field of its own rather than through a
//! serde tag (which would always come first).

use numaplace_observe::act::{Moved, NodeVanished, Outcome, Via};
use numaplace_observe::balance::{Decision, Event, Score};
use numaplace_observe::host::Pins;
use numaplace_observe::sample::{Kind, NodeInfo, ProcInfo, Skipped, Snapshot};
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
    /// With `top --state`: each VM beside what its definition plans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned: Option<PlannedViewDoc>,
}

/// `top --state`'s view: where the definitions were read, and each VM of
/// the sample that is one of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedViewDoc {
    /// Where the definitions came from (`libvirt:qemu:///system`, a
    /// directory).
    pub source: String,
    /// The VMs of the sample that are domains there.
    pub vms: Vec<PlannedDoc>,
    /// What the host keeps for itself (host profile, flags), when any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved: Option<crate::topology::ReservedDoc>,
}

/// One VM beside its definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedDoc {
    /// The VM.
    pub name: String,
    /// Nodes its definition puts memory on, list syntax.
    pub planned_nodes: String,
    /// CPUs its vCPUs may use, list syntax.
    pub planned_cpus: String,
    /// Every vCPU pinned to a CPU of its own.
    pub pinned: bool,
    /// Where it runs now (home nodes), list syntax.
    pub home_nodes: String,
    /// Its home nodes are not all among the planned ones.
    pub off_plan: bool,
    /// N%L now, when known.
    pub local_percent: Option<f64>,
    /// CPUs its vCPUs are pinned to that the host reserves for itself,
    /// list syntax (absent: none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub on_reserved_cpus: String,
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
            planned: None,
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
pub struct ScoreDoc {
    /// Bytes to migrate.
    pub bytes_to_move: u64,
    /// Why the node cannot take it.
    pub excluded: Option<String>,
    /// Free cores.
    pub free_cores: u32,
    /// Free memory left after the move (may be negative).
    pub free_memory_after_bytes: i64,
    /// Node id.
    pub node: u32,
}

impl From<&Score> for ScoreDoc {
    fn from(s: &Score) -> ScoreDoc {
        ScoreDoc {
            bytes_to_move: s.bytes_to_move,
            excluded: s.excluded.as_ref().map(ToString::to_string),
            free_cores: s.free_cores,
            free_memory_after_bytes: s.free_memory_after_bytes,
            node: s.node,
        }
    }
}

/// Where a VM's threads may run, before or after a move: `floating`
/// (every thread over `cpus`) or `dedicated` (each vCPU on its own CPU,
/// the emulator threads on `emulator`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PinsDoc {
    /// Every CPU some thread may run on (list syntax).
    pub cpus: String,
    /// The emulator threads' CPUs (for a floating VM, `cpus`).
    pub emulator: String,
    /// `floating` or `dedicated`.
    pub mode: &'static str,
    /// A dedicated VM's vCPUs, by vCPU (empty when floating).
    pub vcpus: Vec<VcpuPinDoc>,
}

/// One vCPU on its CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VcpuPinDoc {
    /// The host CPU.
    pub cpu: u32,
    /// The vCPU.
    pub vcpu: u32,
}

impl From<&Pins> for PinsDoc {
    fn from(p: &Pins) -> PinsDoc {
        match p {
            Pins::Floating(cpus) => {
                PinsDoc { cpus: cpus.to_list(), emulator: cpus.to_list(), mode: "floating", vcpus: Vec::new() }
            }
            Pins::Dedicated { vcpus, emulator } => PinsDoc {
                cpus: p.cpus().to_list(),
                emulator: emulator.to_list(),
                mode: "dedicated",
                vcpus: vcpus.iter().map(|&(vcpu, cpu)| VcpuPinDoc { cpu, vcpu }).collect(),
            },
        }
    }
}

/// The `event` field of a balancer line: the name of its kind. Only
/// [`EventDoc`]'s constructors make one, so it always matches the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Tag(&'static str);

impl Tag {
    /// The kind's name (`watching`, `decide`, ...).
    pub fn name(self) -> &'static str {
        self.0
    }
}

/// One line of `balance --format json`: `{"event": KIND, ...}` with
/// `time_seconds`, the seconds since the balancer started. Fields are
/// declared in alphabetical order, the order of the keys on the line.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum EventDoc<'a> {
    /// Below the threshold, not yet for long enough.
    Watching {
        /// `watching`.
        event: Tag,
        /// N%L.
        local_percent: f64,
        /// Name.
        name: &'a str,
        /// Process id.
        pid: u32,
        /// Samples below so far.
        samples_below: u32,
        /// Seconds since the start.
        time_seconds: f64,
    },
    /// Move it.
    Decide {
        /// Where its threads would run after the move.
        after: PinsDoc,
        /// Where they run now.
        before: PinsDoc,
        /// Bytes not yet on the new home.
        bytes_to_move: u64,
        /// `decide`.
        event: Tag,
        /// Home nodes before.
        from: &'a [u32],
        /// N%L before.
        local_percent_before: f64,
        /// Name.
        name: &'a str,
        /// Process id.
        pid: u32,
        /// Every node's score.
        scores: Vec<ScoreDoc>,
        /// Seconds since the start.
        time_seconds: f64,
        /// New home.
        to: u32,
    },
    /// Needs a move but will not get one.
    Skip {
        /// The reason's kind (`wide`, `max_moves`, `no_node`, or why the
        /// host keeps it where it is: `no_free_cpu`, `not_planned`, ...).
        code: &'static str,
        /// `skip`.
        event: Tag,
        /// N%L.
        local_percent: f64,
        /// Name.
        name: &'a str,
        /// Process id.
        pid: u32,
        /// Why.
        reason: String,
        /// Seconds since the start.
        time_seconds: f64,
    },
    /// A decision carried out (or tried: `outcome.error` says).
    Moved {
        /// Bytes migrated per second of migration.
        achieved_bytes_per_second: f64,
        /// Where its threads run after the move (where they were to run,
        /// when it failed).
        after: PinsDoc,
        /// Where they ran before.
        before: PinsDoc,
        /// `moved`.
        event: Tag,
        /// Share of its memory on the new home afterwards, percent.
        local_percent_after: Option<f64>,
        /// N%L before.
        local_percent_before: f64,
        /// Name.
        name: &'a str,
        /// What the move did.
        outcome: OutcomeDoc<'a>,
        /// Process id.
        pid: u32,
        /// The rate limit.
        rate_limit_bytes_per_second: u64,
        /// Seconds since the start.
        time_seconds: f64,
        /// New home.
        to: u32,
        /// `sched_setaffinity` or `libvirt`.
        via: &'static str,
    },
    /// Nothing to balance on this host; the balancer stops.
    Idle {
        /// `idle`.
        event: Tag,
        /// Why.
        reason: &'a str,
        /// Seconds since the start.
        time_seconds: f64,
    },
    /// Some processes could not be read (said once).
    Warning {
        /// `warning`.
        event: Tag,
        /// Processes not readable without more privileges.
        permission_denied: u32,
        /// Seconds since the start.
        time_seconds: f64,
    },
    /// A sample failed (`error`), or a decision could not be carried out
    /// at all (`pid`).
    Error {
        /// What failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
        /// `error`.
        event: Tag,
        /// The process that was to move.
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// Seconds since the start.
        time_seconds: f64,
    },
}

impl<'a> EventDoc<'a> {
    /// A balancer event (`watching`, `decide` or `skip`).
    pub fn balancer(e: &'a Event, time_seconds: f64) -> EventDoc<'a> {
        match e {
            Event::Watching { pid, name, local_percent, samples_below } => EventDoc::Watching {
                event: Tag("watching"),
                local_percent: *local_percent,
                name,
                pid: *pid,
                samples_below: *samples_below,
                time_seconds,
            },
            Event::Decide(Decision { pid, name, from, to, local_percent_before, bytes_to_move, scores, target }) => {
                EventDoc::Decide {
                    after: PinsDoc::from(&target.after),
                    before: PinsDoc::from(&target.before),
                    bytes_to_move: *bytes_to_move,
                    event: Tag("decide"),
                    from,
                    local_percent_before: *local_percent_before,
                    name,
                    pid: *pid,
                    scores: scores.iter().map(ScoreDoc::from).collect(),
                    time_seconds,
                    to: *to,
                }
            }
            Event::Skip { pid, name, local_percent, reason } => EventDoc::Skip {
                code: reason.code(),
                event: Tag("skip"),
                local_percent: *local_percent,
                name,
                pid: *pid,
                reason: reason.to_string(),
                time_seconds,
            },
        }
    }

    /// What carrying out a decision did.
    pub fn moved(m: &'a Moved, time_seconds: f64) -> EventDoc<'a> {
        EventDoc::Moved {
            achieved_bytes_per_second: m.outcome.bytes_per_second(),
            after: PinsDoc::from(&m.after),
            before: PinsDoc::from(&m.before),
            event: Tag("moved"),
            local_percent_after: m.local_percent_after,
            local_percent_before: m.local_percent_before,
            name: &m.name,
            outcome: OutcomeDoc::from(&m.outcome),
            pid: m.pid,
            rate_limit_bytes_per_second: m.rate_limit_bytes_per_second,
            time_seconds,
            to: m.to,
            via: via(m.outcome.via),
        }
    }

    /// Nothing to balance, and why.
    pub fn idle(reason: &'a str, time_seconds: f64) -> EventDoc<'a> {
        EventDoc::Idle { event: Tag("idle"), reason, time_seconds }
    }

    /// `processes` could not be read without more privileges.
    pub fn permission_denied(processes: u32, time_seconds: f64) -> EventDoc<'a> {
        EventDoc::Warning { event: Tag("warning"), permission_denied: processes, time_seconds }
    }

    /// A sample failed.
    pub fn sample_failed(error: &'a str, time_seconds: f64) -> EventDoc<'a> {
        EventDoc::Error { error: Some(error), event: Tag("error"), pid: None, time_seconds }
    }

    /// A decision whose new home vanished.
    pub fn vanished(e: &NodeVanished, time_seconds: f64) -> EventDoc<'a> {
        EventDoc::Error { error: None, event: Tag("error"), pid: Some(e.pid), time_seconds }
    }
}

/// The `via` of a `moved` line.
fn via(v: Via) -> &'static str {
    match v {
        Via::SchedSetaffinity => "sched_setaffinity",
        Via::Libvirt => "libvirt",
    }
}

/// What a move did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutcomeDoc<'a> {
    /// Bytes migrated.
    pub bytes_moved: u64,
    /// The error that stopped the move.
    pub error: Option<&'a str>,
    /// Seconds spent migrating.
    pub migrate_seconds: f64,
    /// Pages that could not move.
    pub pages_not_moved: u64,
    /// Whether the old CPU masks were put back after an error.
    pub restored: bool,
    /// Threads pinned to the new home.
    pub threads_pinned: u32,
}

impl<'a> From<&'a Outcome> for OutcomeDoc<'a> {
    fn from(o: &'a Outcome) -> OutcomeDoc<'a> {
        OutcomeDoc {
            bytes_moved: o.bytes_moved,
            error: o.error.as_deref(),
            migrate_seconds: o.migrate_seconds,
            pages_not_moved: o.pages_not_moved,
            restored: o.restored,
            threads_pinned: o.threads_pinned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaplace_observe::balance::{Exclusion, SkipReason};
    use numaplace_observe::host::{Kept, Target};
    use serde_json::{json, Value};

    fn set(s: &str) -> numaplace_topo::CpuSet {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// A dedicated VM re-planned from CPUs 4-5 to 9-10, its emulator on 0.
    fn dedicated() -> Target {
        Target {
            before: Pins::Dedicated { vcpus: vec![(0, 4), (1, 5)], emulator: set("0") },
            after: Pins::Dedicated { vcpus: vec![(0, 9), (1, 10)], emulator: set("0") },
        }
    }

    fn pins_json(cpus: &str, emulator: &str, mode: &str, vcpus: &[(u32, u32)]) -> Value {
        let vcpus: Vec<Value> = vcpus.iter().map(|(v, c)| json!({"cpu": c, "vcpu": v})).collect();
        json!({"cpus": cpus, "emulator": emulator, "mode": mode, "vcpus": vcpus})
    }

    /// A line as `balance` built it before these types: the old event
    /// shape or a `json!` object, as a map, with `time_seconds` added.
    fn old(mut v: Value, t: f64) -> String {
        if let Some(o) = v.as_object_mut() {
            o.insert("time_seconds".into(), json!(t));
        }
        v.to_string()
    }

    fn new(doc: &EventDoc<'_>) -> String {
        serde_json::to_string(doc).unwrap_or_else(|e| panic!("{e}"))
    }

    fn decision() -> Decision {
        Decision {
            pid: 42,
            name: "db".into(),
            from: vec![1],
            to: 0,
            local_percent_before: 12.5,
            bytes_to_move: 64 << 20,
            scores: vec![
                Score {
                    node: 0,
                    free_cores: 1,
                    free_memory_after_bytes: -3,
                    bytes_to_move: 7,
                    excluded: None,
                    target: Some(dedicated()),
                },
                Score {
                    node: 1,
                    free_cores: 0,
                    free_memory_after_bytes: 9,
                    bytes_to_move: 0,
                    excluded: Some(Exclusion::NoFreeCore { busy: 2.0, cpus: 2 }),
                    target: None,
                },
            ],
            target: dedicated(),
        }
    }

    #[test]
    fn balancer_events_keep_their_bytes() {
        let d = decision();
        let watching = Event::Watching { pid: 42, name: "db".into(), local_percent: 0.8, samples_below: 1 };
        let skip = Event::Skip {
            pid: 42,
            name: "db".into(),
            local_percent: 3.0,
            reason: SkipReason::Kept(Kept::NoFreeCpu { node: 1 }),
        };
        let old_watching =
            json!({"event": "watching", "pid": 42, "name": "db", "local_percent": 0.8, "samples_below": 1});
        let old_decide = json!({
            "event": "decide", "pid": 42, "name": "db", "from": [1], "to": 0, "local_percent_before": 12.5,
            "bytes_to_move": 64 << 20,
            "scores": [
                {"node": 0, "free_cores": 1, "free_memory_after_bytes": -3, "bytes_to_move": 7, "excluded": null},
                {"node": 1, "free_cores": 0, "free_memory_after_bytes": 9, "bytes_to_move": 0, "excluded": "no free core (2.0 of 2 CPUs busy)"},
            ],
            "before": pins_json("0,4-5", "0", "dedicated", &[(0, 4), (1, 5)]),
            "after": pins_json("0,9-10", "0", "dedicated", &[(0, 9), (1, 10)]),
        });
        let old_skip = json!({
            "event": "skip", "pid": 42, "name": "db", "local_percent": 3.0, "code": "no_free_cpu",
            "reason": "kept where it is: node 1 has no CPU it may float over (each is reserved for the host, held by a dedicated VM or outside the shared pool)",
        });
        assert_eq!(new(&EventDoc::balancer(&watching, 1.25)), old(old_watching, 1.25));
        assert_eq!(new(&EventDoc::balancer(&Event::Decide(d), 2.0)), old(old_decide, 2.0));
        assert_eq!(new(&EventDoc::balancer(&skip, 3.5)), old(old_skip, 3.5));
        assert_eq!(
            new(&EventDoc::balancer(&watching, 1.25)),
            r#"{"event":"watching","local_percent":0.8,"name":"db","pid":42,"samples_below":1,"time_seconds":1.25}"#
        );
    }

    #[test]
    fn moves_and_the_other_lines_keep_their_bytes() {
        let ok = Outcome {
            via: Via::SchedSetaffinity,
            threads_pinned: 3,
            bytes_moved: 64 << 20,
            pages_not_moved: 2,
            migrate_seconds: 4.0,
            error: None,
            restored: false,
        };
        let failed =
            Outcome { via: Via::Libvirt, error: Some("virsh: refused".into()), restored: true, ..Outcome::default() };
        for (outcome, after, via) in [(ok, Some(91.5), "sched_setaffinity"), (failed, None, "libvirt")] {
            let m = Moved {
                pid: 42,
                name: "db".into(),
                to: 0,
                before: Pins::Floating(set("0-7")),
                after: Pins::Floating(set("9-15")),
                local_percent_before: 0.8,
                local_percent_after: after,
                rate_limit_bytes_per_second: 16 << 20,
                outcome,
            };
            let o = &m.outcome;
            let achieved = if o.migrate_seconds > 0.0 { o.bytes_moved as f64 / o.migrate_seconds } else { 0.0 };
            let old_moved = json!({
                "event": "moved",
                "pid": 42,
                "name": "db",
                "to": 0,
                "before": pins_json("0-7", "0-7", "floating", &[]),
                "after": pins_json("9-15", "9-15", "floating", &[]),
                "via": via,
                "local_percent_before": 0.8,
                "local_percent_after": after,
                "outcome": {
                    "threads_pinned": o.threads_pinned, "bytes_moved": o.bytes_moved,
                    "pages_not_moved": o.pages_not_moved, "migrate_seconds": o.migrate_seconds,
                    "error": o.error, "restored": o.restored,
                },
                "rate_limit_bytes_per_second": 16 << 20,
                "achieved_bytes_per_second": achieved,
            });
            assert_eq!(new(&EventDoc::moved(&m, 9.75)), old(old_moved, 9.75));
        }
        let why = "this host has one NUMA node";
        assert_eq!(new(&EventDoc::idle(why, 0.001)), old(json!({"event": "idle", "reason": why}), 0.001));
        assert_eq!(
            new(&EventDoc::permission_denied(3, 1.0)),
            old(json!({"event": "warning", "permission_denied": 3}), 1.0)
        );
        assert_eq!(
            new(&EventDoc::sample_failed("proc: gone", 1.0)),
            old(json!({"event": "error", "error": "proc: gone"}), 1.0)
        );
        assert_eq!(
            new(&EventDoc::vanished(&NodeVanished { pid: 42, node: 3 }, 1.0)),
            old(json!({"event": "error", "pid": 42}), 1.0)
        );
        assert_eq!(new(&EventDoc::idle("x", 0.5)), r#"{"event":"idle","reason":"x","time_seconds":0.5}"#);
    }
}
