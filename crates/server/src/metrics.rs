//! `/metrics` in Prometheus' text format: what the service decided and
//! how fast, the requests answered per route, whether the store answers,
//! and the fleet's free and stranded capacity per host kind.

use crate::command::HostCondition;
use numaplace_fleet::{Fleet, FleetHost, FleetRejection, STRANDED_PROBE};
use numaplace_topo::text::prom::{self, Kind::Counter, Kind::Gauge};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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
        prom::family(out, name, help, prom::Kind::Histogram);
        let bucket = format!("{name}_bucket");
        for (i, b) in BUCKETS.iter().enumerate() {
            prom::sample(out, &bucket, &[("le", &b.to_string())], self.counts[i].load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        prom::sample(out, &bucket, &[("le", "+Inf")], count);
        prom::sample(out, &format!("{name}_sum"), &[], self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9);
        prom::sample(out, &format!("{name}_count"), &[], count);
    }
}

/// A status code's class, the label requests are counted under: a
/// class per hundred keeps the series few whatever a handler answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatusClass {
    /// 1xx.
    Informational,
    /// 2xx.
    Success,
    /// 3xx (the web forms' redirects).
    Redirect,
    /// 4xx: the client's error.
    ClientError,
    /// 5xx: the server's or the store's.
    ServerError,
}

impl StatusClass {
    /// The class of `status`.
    pub fn of(status: u16) -> StatusClass {
        match status {
            0..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirect,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirect => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }

    /// Whether answers of this class are errors (counted again in
    /// `numaplace_http_errors_total`).
    pub fn is_error(self) -> bool {
        matches!(self, StatusClass::ClientError | StatusClass::ServerError)
    }
}

/// The route label of a request answered before it was routed (the
/// `Host` and origin checks) or that matched no route: one series for
/// them all, so a scan of random paths adds no series.
pub const UNROUTED: &str = "unrouted";

/// Requests counted under one series: the matched route (its pattern,
/// never the path, so names do not multiply series), the method, the
/// status class.
type RouteKey = (String, String, StatusClass);

/// Marks an answer as a request whose deadline passed (set by the error
/// that answers it), for `numaplace_deadline_exceeded_total`.
#[derive(Clone, Copy, Debug)]
pub struct DeadlineExceeded;

/// Whether the store answered, as the service last saw it: set by each
/// answer that shows it (a 503 of an unavailable store or a passed
/// deadline; a success of a route that reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreUp {
    /// No request has touched the store yet.
    Unknown,
    /// The last request that needed the store was answered.
    Up,
    /// The last request that needed it got 503 (unavailable, or its
    /// deadline passed waiting).
    Down,
}

/// The service's counters.
pub struct Metrics {
    placed: AtomicU64,
    deleted: AtomicU64,
    moved: AtomicU64,
    conflicts: AtomicU64,
    claims: AtomicU64,
    rejections: Mutex<BTreeMap<String, u64>>,
    decision: Histogram,
    commit: Histogram,
    requests: Mutex<BTreeMap<RouteKey, u64>>,
    deadline_exceeded: AtomicU64,
    /// 1 up, 0 down, -1 unknown.
    store_up: AtomicI64,
    refused_unauthenticated: AtomicU64,
    sampled_out: AtomicU64,
}

/// Connections closed at once because their address already held
/// `--max-connections-per-address` (the accept loop counts them; one
/// process, one loop).
pub static CONNECTIONS_OVER_ADDRESS_CAP: AtomicU64 = AtomicU64::new(0);

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            placed: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            rejections: Mutex::default(),
            decision: Histogram::default(),
            commit: Histogram::default(),
            requests: Mutex::default(),
            deadline_exceeded: AtomicU64::new(0),
            store_up: AtomicI64::new(-1),
            refused_unauthenticated: AtomicU64::new(0),
            sampled_out: AtomicU64::new(0),
        }
    }
}

impl Metrics {
    /// Counts one answered request.
    pub fn request(&self, route: &str, method: &str, status: u16) {
        let key = (route.to_string(), method.to_string(), StatusClass::of(status));
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(0) += 1;
    }

    /// Requests answered so far on `route` with `method` in `class`.
    pub fn requests(&self, route: &str, method: &str, class: StatusClass) -> u64 {
        let key = (route.to_string(), method.to_string(), class);
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied().unwrap_or(0)
    }

    /// Counts a request whose deadline passed.
    pub fn deadline_exceeded(&self) {
        self.deadline_exceeded.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests answered 503 because their deadline passed, so far.
    pub fn deadlines_exceeded(&self) -> u64 {
        self.deadline_exceeded.load(Ordering::Relaxed)
    }

    /// Counts a request refused for want of a credential (401) or as a
    /// stranger's (a `Host` or origin refused).
    pub fn refused_unauthenticated(&self) {
        self.refused_unauthenticated.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an access line not written (a stranger's refusal over the
    /// sampling rate).
    pub fn access_line_sampled_out(&self) {
        self.sampled_out.fetch_add(1, Ordering::Relaxed);
    }

    /// Records whether the store answered.
    pub fn set_store_up(&self, up: bool) {
        self.store_up.store(i64::from(up), Ordering::Relaxed);
    }

    /// Whether the store answered, as last seen.
    pub fn store_up(&self) -> StoreUp {
        match self.store_up.load(Ordering::Relaxed) {
            1 => StoreUp::Up,
            0 => StoreUp::Down,
            _ => StoreUp::Unknown,
        }
    }

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

    /// A claim sent to the store (a placement, delete, move or agent
    /// report's commit), whatever its outcome.
    pub(crate) fn claim(&self) {
        self.claims.fetch_add(1, Ordering::Relaxed);
    }

    /// Claims sent to the store, so far.
    pub fn claims(&self) -> u64 {
        self.claims.load(Ordering::Relaxed)
    }

    /// The share of claims refused for a conflict, 0 to 1 (0 before any).
    pub fn conflict_ratio(&self) -> f64 {
        let claims = self.claims();
        if claims == 0 {
            0.0
        } else {
            self.conflicts() as f64 / claims as f64
        }
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
            prom::family(out, name, help, Counter);
            prom::sample(out, name, &[], v);
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
        counter(
            &mut out,
            "numaplace_claims_total",
            "Claims sent to the database (each conflict is one).",
            self.claims(),
        );
        let ratio = "numaplace_claim_conflict_ratio";
        prom::family(
            &mut out,
            ratio,
            "Share of claims refused because the host changed since the decision (conflicts over claims, since start).",
            Gauge,
        );
        prom::sample(&mut out, ratio, &[], format_args!("{:.6}", self.conflict_ratio()));
        let rejections = "numaplace_rejections_total";
        prom::family(&mut out, rejections, "Requests no host took, by the reason that ruled out most hosts.", Counter);
        for (code, n) in self.rejections.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            prom::sample(&mut out, rejections, &[("reason", code)], n);
        }
        self.decision.render(&mut out, "numaplace_decision_seconds", "Time to choose a host, nodes and CPUs.");
        self.commit.render(&mut out, "numaplace_commit_seconds", "Time to claim a decision in the database.");
        self.render_http(&mut out);
        counter(
            &mut out,
            "numaplace_refused_unauthenticated_total",
            "Requests refused without a valid credential (401) or from a stranger (Host or origin refused).",
            self.refused_unauthenticated.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "numaplace_access_lines_sampled_out_total",
            "Access lines of strangers' refusals not written (over the sampling rate).",
            self.sampled_out.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "numaplace_log_lines_dropped_total",
            "Log lines dropped because stderr did not keep up (the queue was full).",
            crate::logging::sink::dropped_lines(),
        );
        counter(
            &mut out,
            "numaplace_connections_over_address_cap_total",
            "Connections closed at once because their address held --max-connections-per-address.",
            CONNECTIONS_OVER_ADDRESS_CAP.load(Ordering::Relaxed),
        );
        render_capacity(&mut out, fleet);
        out
    }

    /// The per-route counters, the deadline counter and the store gauge.
    fn render_http(&self, out: &mut String) {
        let requests = self.requests.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let total = "numaplace_http_requests_total";
        prom::family(out, total, "Requests answered, by matched route, method and status class.", Counter);
        for ((route, method, class), n) in &requests {
            prom::sample(out, total, &[("route", route), ("method", method), ("status", class.as_str())], n);
        }
        let errors = "numaplace_http_errors_total";
        prom::family(
            out,
            errors,
            "Requests answered with a 4xx or 5xx status, by matched route, method and status class.",
            Counter,
        );
        for ((route, method, class), n) in requests.iter().filter(|((_, _, c), _)| c.is_error()) {
            prom::sample(out, errors, &[("route", route), ("method", method), ("status", class.as_str())], n);
        }
        let deadline = "numaplace_deadline_exceeded_total";
        prom::family(out, deadline, "Requests answered 503 because their deadline passed.", Counter);
        prom::sample(out, deadline, &[], self.deadlines_exceeded());
        // Unknown until a request needs the store: no sample rather than
        // a guess, so an alert on `== 0` never fires at start.
        prom::family(
            out,
            "numaplace_store_up",
            "Whether the store answered the last request that needed it (1) or not (0).",
            Gauge,
        );
        match self.store_up() {
            StoreUp::Up => out.push_str("numaplace_store_up 1\n"),
            StoreUp::Down => out.push_str("numaplace_store_up 0\n"),
            StoreUp::Unknown => {}
        }
    }
}

/// A fleet's capacity, per host kind or in total: the one computation
/// of free and stranded capacity, shown by the fleet page and `/metrics`
/// alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Hosts.
    pub hosts: u64,
    /// Hosts drained (taking no new VMs).
    pub drained: u64,
    /// VMs placed or reported.
    pub vms: u64,
    /// CPU threads.
    pub threads: u64,
    /// Free CPU threads.
    pub free_threads: u64,
    /// Memory for VMs, bytes.
    pub memory: u64,
    /// Free memory for VMs, bytes.
    pub free_memory: u64,
    /// Free threads on hosts that cannot take the smallest common VM
    /// ([`stranded`]).
    pub stranded_threads: u64,
    /// Free memory on such hosts, bytes.
    pub stranded_memory: u64,
    /// Hosts in service that cannot take the smallest common VM.
    pub stranded_hosts: u64,
    /// Hosts in service without a VM.
    pub empty_hosts: u64,
}

impl Capacity {
    fn add_host(&mut self, h: &FleetHost) {
        self.hosts += 1;
        self.drained += u64::from(h.drained);
        self.vms += h.state.placements().len() as u64;
        self.threads += h.summary.nodes.iter().map(|n| u64::from(n.threads)).sum::<u64>();
        self.free_threads += u64::from(h.summary.free_threads);
        self.memory += h.summary.nodes.iter().map(|n| n.memory).sum::<u64>();
        self.free_memory += h.summary.free_memory;
        // The fleet's one definition of stranded (`Free::stranded`).
        if h.drained || h.free().stranded(&[STRANDED_PROBE]) {
            self.stranded_threads += u64::from(h.summary.free_threads);
            self.stranded_memory += h.summary.free_memory;
        }
        match HostCondition::of(h) {
            HostCondition::Stranded => self.stranded_hosts += 1,
            HostCondition::Empty => self.empty_hosts += 1,
            _ => {}
        }
    }

    fn add(&mut self, o: &Capacity) {
        self.hosts += o.hosts;
        self.drained += o.drained;
        self.vms += o.vms;
        self.threads += o.threads;
        self.free_threads += o.free_threads;
        self.memory += o.memory;
        self.free_memory += o.free_memory;
        self.stranded_threads += o.stranded_threads;
        self.stranded_memory += o.stranded_memory;
        self.stranded_hosts += o.stranded_hosts;
        self.empty_hosts += o.empty_hosts;
    }
}

/// Host kinds' names, worded once per shared topology: hosts of one kind
/// share their `Topology`, so a zone of 100,000 hosts formats a few names,
/// not 100,000.
#[derive(Default)]
pub struct KindNames {
    seen: Vec<(*const numaplace_topo::Topology, String)>,
}

impl KindNames {
    /// The kind of `h` ([`FleetHost::kind`]).
    pub fn of(&mut self, h: &FleetHost) -> &str {
        let ptr = std::sync::Arc::as_ptr(&h.topology);
        let i = match self.seen.iter().position(|(p, _)| *p == ptr) {
            Some(i) => i,
            None => {
                // A fleet with many distinct topologies keeps the last
                // few; the rest are worded again.
                if self.seen.len() >= 64 {
                    self.seen.remove(0);
                }
                self.seen.push((ptr, h.kind()));
                self.seen.len() - 1
            }
        };
        &self.seen[i].1
    }
}

/// What a host's free capacity is stranded below: the smallest common VM,
/// worded once for the page and the metrics' help.
pub const STRANDED_BELOW: &str = "a 2-vCPU, 4 GiB VM";

/// The fleet's capacity per host kind (in kind order) and in total.
pub fn capacity(fleet: &Fleet) -> (BTreeMap<String, Capacity>, Capacity) {
    let mut kinds: BTreeMap<String, Capacity> = BTreeMap::new();
    let mut names = KindNames::default();
    for h in fleet.hosts() {
        kinds.entry(names.of(h).to_string()).or_default().add_host(h);
    }
    let mut total = Capacity::default();
    for k in kinds.values() {
        total.add(k);
    }
    (kinds, total)
}

/// Per host kind: hosts, free threads and memory, and the part of them
/// stranded on hosts that cannot take a 2-vCPU, 4 GiB VM.
fn render_capacity(out: &mut String, fleet: &Fleet) {
    let (kinds, _) = capacity(fleet);
    type Kind = Capacity;
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
        prom::family(out, name, help, Gauge);
        for (kind, k) in &kinds {
            prom::sample(out, name, &[("kind", kind)], get(k));
        }
    }
}
