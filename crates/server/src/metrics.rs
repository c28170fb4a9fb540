//! `/metrics` in Prometheus' text format: what the service decided and
//! how fast, and the fleet's free and stranded capacity per host kind.

use numaplace_fleet::{Fleet, FleetRejection, STRANDED_PROBE};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Histogram bucket bounds, seconds: decisions take microseconds to
/// milliseconds, commits milliseconds.
const BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// A latency histogram.
#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.counts[i].load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// The service's counters.
#[derive(Default)]
pub struct Metrics {
    placed: AtomicU64,
    deleted: AtomicU64,
    moved: AtomicU64,
    conflicts: AtomicU64,
    rejections: Mutex<BTreeMap<String, u64>>,
    decision: Histogram,
    commit: Histogram,
}

impl Metrics {
    pub(crate) fn placed(&self) {
        self.placed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn deleted(&self) {
        self.deleted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn moved(&self) {
        self.moved.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Claims retried after a generation conflict, so far.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// A fleet-wide rejection, counted under the reason that ruled out
    /// the most hosts.
    pub(crate) fn rejected(&self, r: &FleetRejection) {
        let code = r.counts.first().map_or("no-hosts", |c| c.code);
        self.rejected_code(code);
    }

    pub(crate) fn rejected_code(&self, code: &str) {
        let mut m = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(code.to_string()).or_insert(0) += 1;
    }

    pub(crate) fn decision(&self, d: Duration) {
        self.decision.observe(d);
    }

    pub(crate) fn commit(&self, d: Duration) {
        self.commit.observe(d);
    }

    /// The text for `/metrics`.
    pub fn render(&self, fleet: &Fleet) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(&mut out, "numaplace_placements_total", "VMs placed.", self.placed.load(Ordering::Relaxed));
        counter(&mut out, "numaplace_deletions_total", "Placements freed.", self.deleted.load(Ordering::Relaxed));
        counter(&mut out, "numaplace_moves_total", "VMs moved to another host.", self.moved.load(Ordering::Relaxed));
        counter(
            &mut out,
            "numaplace_claim_conflicts_total",
            "Claims refused because the host changed since the decision (each retried).",
            self.conflicts(),
        );
        let _ = writeln!(
            out,
            "# HELP numaplace_rejections_total Requests no host took, by the reason that ruled out most hosts.\n# TYPE numaplace_rejections_total counter"
        );
        for (code, n) in self.rejections.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "numaplace_rejections_total{{reason=\"{code}\"}} {n}");
        }
        self.decision.render(&mut out, "numaplace_decision_seconds", "Time to choose a host, nodes and CPUs.");
        self.commit.render(&mut out, "numaplace_commit_seconds", "Time to claim a decision in the database.");
        capacity(&mut out, fleet);
        out
    }
}

/// Per host kind: hosts, free threads and memory, and the part of them
/// stranded on hosts that cannot take a 2-vCPU, 4 GiB VM.
fn capacity(out: &mut String, fleet: &Fleet) {
    #[derive(Default)]
    struct Kind {
        hosts: u64,
        free_threads: u64,
        free_memory: u64,
        stranded_threads: u64,
        stranded_memory: u64,
    }
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    for h in fleet.hosts() {
        let k = kinds.entry(h.kind()).or_default();
        k.hosts += 1;
        k.free_threads += u64::from(h.summary.free_threads);
        k.free_memory += h.summary.free_memory;
        if h.drained || h.free().stranded(&[STRANDED_PROBE]) {
            k.stranded_threads += u64::from(h.summary.free_threads);
            k.stranded_memory += h.summary.free_memory;
        }
    }
    type Gauge = (&'static str, &'static str, fn(&Kind) -> u64);
    let gauges: [Gauge; 5] = [
        ("numaplace_hosts", "Hosts, by kind.", |k| k.hosts),
        ("numaplace_free_threads", "Free CPU threads, by host kind.", |k| k.free_threads),
        ("numaplace_free_memory_bytes", "Free memory for VMs, by host kind.", |k| k.free_memory),
        (
            "numaplace_stranded_threads",
            "Free CPU threads on hosts that cannot take a 2-vCPU, 4 GiB VM (or are drained).",
            |k| k.stranded_threads,
        ),
        (
            "numaplace_stranded_memory_bytes",
            "Free memory on hosts that cannot take a 2-vCPU, 4 GiB VM (or are drained).",
            |k| k.stranded_memory,
        ),
    ];
    for (name, help, get) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (kind, k) in &kinds {
            let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {}", get(k));
        }
    }
}
