//! The fleet simulator's JSON: the fleet description it reads
//! (`docs/formats/fleet.md`) and the results it writes
//! (`numaplace simulate --format json`, documented in `docs/simulate.md`).
//!
//! These are plain data; `numaplace-sim` converts to and from its own
//! types, so this crate does not depend on the simulator.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The value of the results' `format` field.
pub const FORMAT: &str = "numaplace-simulation";
/// The current results version.
pub const VERSION: u32 = 2;

/// A fleet: groups of identical hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetDoc {
    /// Host groups, in order (host ids are given in this order).
    pub hosts: Vec<HostGroupDoc>,
}

/// One group of identical hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostGroupDoc {
    /// A topology source as `numaplace topology --from` takes it; relative
    /// paths are resolved against the fleet file's directory.
    pub topology: String,
    /// Number of hosts of this kind (the simulator bounds it; u64 so that
    /// a too-large count reaches that check and is refused by name).
    pub count: u64,
    /// vCPUs per host CPU thread (1.0: every vCPU gets a thread of its
    /// own, pinned).
    #[serde(default = "one")]
    pub cpu_overcommit: f64,
}

fn one() -> f64 {
    1.0
}

/// The fields of a host group, as error messages list them.
const GROUP_FIELDS: [&str; 3] = ["topology", "count", "cpu_overcommit"];

impl FleetDoc {
    /// Reads fleet JSON. Errors name the host entry and the field
    /// (`hosts[1].count: expected a whole number of hosts (0 or more),
    /// found -1`) rather than serde's bare `expected u32`; JSON syntax
    /// errors keep serde's line and column. Unknown fields are refused.
    pub fn from_json(text: &str) -> Result<FleetDoc, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(top) = &value else {
            return Err(format!("expected an object {{\"hosts\": [...]}}, found {}", kind(&value)));
        };
        if let Some(key) = top.keys().find(|k| *k != "hosts") {
            return Err(format!("unknown field `{key}`; a fleet has only `hosts`"));
        }
        let Some(hosts) = top.get("hosts") else { return Err("missing field `hosts`".to_string()) };
        let Value::Array(list) = hosts else {
            return Err(format!("hosts: expected a list of host groups, found {}", kind(hosts)));
        };
        let hosts = list.iter().enumerate().map(|(i, g)| group(g).map_err(|e| format!("hosts[{i}]{e}")));
        Ok(FleetDoc { hosts: hosts.collect::<Result<_, _>>()? })
    }
}

/// One host group; errors start with the field (`.count: ...`) or `: `.
fn group(v: &Value) -> Result<HostGroupDoc, String> {
    let Value::Object(m) = v else {
        return Err(format!(
            ": expected an object such as {{\"topology\": \"host.xml\", \"count\": 10}}, found {}",
            kind(v)
        ));
    };
    if let Some(key) = m.keys().find(|k| !GROUP_FIELDS.contains(&k.as_str())) {
        return Err(format!(": unknown field `{key}`; expected `topology`, `count` or `cpu_overcommit`"));
    }
    let topology = match m.get("topology") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!(".topology: expected a topology source as text, found {}", kind(other))),
        None => return Err(": missing field `topology`".to_string()),
    };
    let count = match m.get("count") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!(".count: expected a whole number of hosts (0 or more), found {}", kind(v)))?,
        None => return Err(": missing field `count`".to_string()),
    };
    let cpu_overcommit = match m.get("cpu_overcommit") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(other) => {
            return Err(format!(".cpu_overcommit: expected a number from 1 to 64, found {}", kind(other)));
        }
        None => one(),
    };
    Ok(HostGroupDoc { topology, count, cpu_overcommit })
}

/// A JSON value for an error message: numbers and short strings as
/// written, anything else by its kind.
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() <= 40 => format!("{s:?}"),
        Value::String(_) => "a long string".to_string(),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// The results of a simulation run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulationDoc {
    /// Always `numaplace-simulation`.
    pub format: String,
    /// Format version, 1.
    pub version: u32,
    /// The seed the trace was expanded with.
    pub seed: u64,
    /// What was replayed.
    pub trace: TraceSummaryDoc,
    /// What it was replayed on.
    pub fleet: FleetSummaryDoc,
    /// The performance model's parameters.
    pub model: ModelDoc,
    /// The trace's common VM sizes, smallest first: free capacity of a
    /// host none of them fits is stranded.
    pub common_sizes: Vec<SizeDoc>,
    /// One entry per policy (and host order), in the order asked.
    pub policies: Vec<PolicyResultDoc>,
    /// How the ranking of the entries by predicted performance moves when
    /// each model parameter moves over its range; empty unless asked
    /// (`--sensitivity`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitivity: Vec<SensitivityDoc>,
}

/// A VM size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeDoc {
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
}

/// One model parameter moved over its range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensitivityDoc {
    /// The parameter, as named in `model`.
    pub parameter: String,
    /// The lowest value studied.
    pub low: f64,
    /// The highest value studied.
    pub high: f64,
    /// Where the range comes from.
    pub source: String,
    /// Predicted performance of each entry of `policies` (same order) at
    /// the low end.
    pub performance_low: Vec<f64>,
    /// The same at the high end.
    pub performance_high: Vec<f64>,
    /// Entries' labels best first at the low end.
    pub ranking_low: Vec<String>,
    /// The same at the high end.
    pub ranking_high: Vec<String>,
    /// Whether both rankings equal the base model's.
    pub ranking_holds: bool,
}

/// The trace replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSummaryDoc {
    /// Where it came from.
    pub name: String,
    /// VMs replayed.
    pub vms: u64,
    /// First arrival, seconds.
    pub start_s: u64,
    /// End of the replay, seconds.
    pub end_s: u64,
}

/// The fleet's size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSummaryDoc {
    /// Hosts.
    pub hosts: u64,
    /// NUMA nodes over all hosts.
    pub nodes: u64,
    /// Online CPU threads over all hosts.
    pub pus: u64,
    /// Memory over all hosts, bytes.
    pub memory_bytes: u64,
}

/// The performance model's parameters (`docs/performance-model.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDoc {
    /// Share of a vCPU's time that depends on memory.
    pub memory_bound_share: f64,
    /// Remote access latency relative to local.
    pub remote_latency: f64,
    /// Remote bandwidth relative to local.
    pub remote_bandwidth: f64,
    /// Throughput lost by a vCPU whose core runs another busy vCPU.
    pub sibling_loss: f64,
    /// Memory-bound throughput when the guest topology hides the host's.
    pub hidden_topology_memory: f64,
    /// SLIT distance the remote figures were measured at.
    pub reference_distance: f64,
    /// Memory-bound throughput when guest nodes straddle host nodes.
    pub mismatched_topology_memory: f64,
    /// A node's memory bandwidth per core, in streaming vCPUs.
    pub bandwidth_per_core: f64,
    /// Share of a multi-node guest's accesses to its other cells.
    pub cross_cell_share: f64,
}

/// What one policy did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyResultDoc {
    /// Policy name (`balanced`, `no-numa`, ...).
    pub policy: String,
    /// Host order (`cores-first`, `memory-first`, `cost`, `pack`).
    pub hosts: String,
    /// VMs placed.
    pub accepted: u64,
    /// VMs refused.
    pub rejected: u64,
    /// Share of placed VMs whose vCPUs and memory sit on one node; null
    /// when no VM was placed.
    pub single_node_share: Option<f64>,
    /// Mean over placed VMs of the share of memory accesses that are
    /// local; null when no VM was placed.
    pub memory_locality: Option<f64>,
    /// Time-averaged share of running vCPUs whose core runs another busy
    /// vCPU; null when no vCPU ever ran.
    pub smt_shared_vcpu_share: Option<f64>,
    /// Time-averaged predicted throughput per vCPU, 1.0 = alone on a core
    /// with local memory; null when no vCPU ever ran.
    pub predicted_performance: Option<f64>,
    /// Time-averaged share of running vCPUs' memory accesses that are
    /// remote; null when no vCPU ever ran.
    pub remote_share: Option<f64>,
    /// Time-averaged share of running vCPUs on nodes whose memory is asked
    /// for more than its bandwidth; null when no vCPU ever ran.
    pub congested_share: Option<f64>,
    /// Time-averaged max-min spread of node CPU use on busy multi-node
    /// hosts.
    pub cpu_imbalance: f64,
    /// The same for memory.
    pub memory_imbalance: f64,
    /// Time-averaged share of the fleet's vCPU slots that are free on
    /// hosts no common VM size fits.
    pub stranded_cpu_share: f64,
    /// Time-averaged share of the fleet's memory that is free on hosts no
    /// common VM size fits.
    pub stranded_memory_share: f64,
    /// Most VMs running at once.
    pub peak_running_vms: u64,
    /// Planner calls made (0 for policies that do not plan).
    pub planner_calls: u64,
    /// Final node use: how many nodes fall in each tenth of CPU use
    /// (10 buckets, the last one including 100%).
    pub final_node_cpu_histogram: Vec<u64>,
    /// The same for memory use.
    pub final_node_memory_histogram: Vec<u64>,
    /// Instant values over time.
    pub samples: Vec<SampleDoc>,
}

/// The fleet at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleDoc {
    /// Seconds since the trace's start.
    pub t_s: u64,
    /// VMs running.
    pub running_vms: u64,
    /// VMs placed so far.
    pub accepted: u64,
    /// VMs refused so far.
    pub rejected: u64,
    /// Share of CPU threads in use.
    pub cpu_utilisation: f64,
    /// Share of memory in use.
    pub memory_utilisation: f64,
    /// Share of running vCPUs sharing a core.
    pub smt_shared_vcpu_share: f64,
    /// Share of running vCPUs' memory accesses that are remote.
    pub remote_share: f64,
    /// Share of running vCPUs on nodes over their memory bandwidth.
    pub congested_share: f64,
    /// Mean predicted throughput per running vCPU.
    pub predicted_performance: f64,
    /// Mean node CPU imbalance on busy multi-node hosts.
    pub cpu_imbalance: f64,
    /// Mean node memory imbalance on busy multi-node hosts.
    pub memory_imbalance: f64,
}
