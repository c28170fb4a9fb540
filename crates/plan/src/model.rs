//! The performance model: a vCPU's predicted throughput relative to the
//! same vCPU alone on a core, with all its memory on its own node and that
//! node's memory bandwidth to spare (1.0). Every term has a parameter taken
//! from the field notes' measurements or named as an assumption;
//! `docs/performance-model.md` derives the formula and names the sources,
//! `docs/background.md` the measurements.
//!
//! One model for two users (issue 48): the planner ranks a dedicated VM's
//! options by it (`crate::cost`, the VM alone on the host, no congestion)
//! and the simulator predicts a fleet's throughput with it (adding its
//! neighbours' bandwidth use). Before, the planner priced its own figures
//! (sibling threads 0.400, own pairs 0.250, remote memory as if a guest
//! spread its accesses evenly over its cells) and the simulator these, so
//! the default policy chose what the simulator then scored worse.
//!
//! Pure arithmetic: callers say where a VM's vCPUs and memory are, how far
//! apart, how busy each node's memory is and what the guest is shown;
//! this module turns that into a factor.

/// The model's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Share of a vCPU's time that waits on memory (`w`); an assumption,
    /// studied over 0.2-0.8.
    pub memory_bound_share: f64,
    /// Remote latency relative to local at [`Model::reference_distance`]
    /// (RMMA on a 2-socket Opteron: 70.9 / 45.6 ns and 112.3 / 74.7 ns,
    /// 1.55 and 1.50).
    pub remote_latency: f64,
    /// Remote bandwidth relative to local at the reference distance
    /// (max read 3116 / 6286 MB/s = 0.50, write 3032 / 5924 = 0.51).
    pub remote_bandwidth: f64,
    /// The SLIT distance the two figures above were measured at: a
    /// 2-socket machine reports 20 or 21; the midpoint keeps both within
    /// 3% of the measurement.
    pub reference_distance: f64,
    /// Throughput a vCPU loses when its core runs another busy vCPU
    /// (XAPI: 40-75%; the midpoint).
    pub sibling_loss: f64,
    /// Memory-bound throughput when the guest sees one NUMA node while the
    /// VM spans several (ESXi with CPU hot-add: Memory Threaded 28,662
    /// against 52,927 with two virtual nodes = 0.54).
    pub hidden_topology_memory: f64,
    /// Memory-bound throughput when the guest's virtual nodes do not map
    /// onto the host nodes it spans (ESXi vNUMA, 3 or 5 virtual nodes on a
    /// 2-node host: PhotoWorxx 22,700-23,900 against 48,900-53,000 = 0.45).
    pub mismatched_topology_memory: f64,
    /// A node's memory bandwidth per core of the node, in streaming vCPUs
    /// (vCPUs doing nothing but stream memory at full local speed). An
    /// assumption, studied over 0.125-1.0: the Opteron of the RMMA test
    /// reaches 1.0 (one thread alone reads 6,286 MB/s of its node's
    /// 6.4 GB/s peak, one processor per node); nodes with many cores have
    /// far less per core.
    pub bandwidth_per_core: f64,
    /// Share of a multi-node guest's memory accesses that go to its other
    /// cells although its topology mirrors the host (shared data, the
    /// guest kernel, page cache); an assumption, studied over 0-0.3. A
    /// guest that does not see its cells (hidden, mismatched) has no such
    /// share: its accesses follow its pages.
    pub cross_cell_share: f64,
    /// Share of [`Model::sibling_loss`] a vCPU pays when its core's other
    /// thread runs a vCPU of its own VM and the guest was told
    /// `threads=2`: the guest's scheduler puts work on one thread per core
    /// first, so the pair loses only while both threads are busy. An
    /// assumption, studied over 0.25-1.0 (1.0: every vCPU always busy,
    /// where knowing the pairs gains nothing; the simulator charged that
    /// before issue 48). 0.625 keeps the planner's earlier ratio of own
    /// pairs to contention (0.250 / 0.400), which its documented cases
    /// bound (docs/background.md § Own sibling pairs). A guest not told
    /// its threads pays the whole loss, as for another VM's thread.
    pub own_pair_share: f64,
    /// Memory-bound throughput of a vCPU in a guest cell of at most
    /// [`SMALL_CELL_VCPUS`] vCPUs of a VM that spans host nodes (ESXi
    /// vNUMA, 48 vCPUs as 24 virtual nodes of 2: PhotoWorxx 35,800 against
    /// 44,700 as 48x1 and 53,000 for 24 vCPUs in 2-4 nodes; 0.73 against
    /// their mean), applied as the guest views are.
    pub small_cell_memory: f64,
}

/// Guest cells this small cost [`Model::small_cell_memory`].
pub const SMALL_CELL_VCPUS: usize = 2;

impl Model {
    /// The model with every figure at its calibration point: what the
    /// planner ranks with and what `simulate` predicts with by default.
    pub const STANDARD: Model = Model {
        memory_bound_share: 0.5,
        remote_latency: 1.55,
        remote_bandwidth: 0.5,
        reference_distance: 20.5,
        sibling_loss: 0.575,
        hidden_topology_memory: 0.54,
        mismatched_topology_memory: 0.45,
        bandwidth_per_core: 0.25,
        cross_cell_share: 0.1,
        own_pair_share: 0.625,
        small_cell_memory: 0.733,
    };
}

impl Default for Model {
    fn default() -> Model {
        Model::STANDARD
    }
}

/// What the guest is shown of the host nodes its VM spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestView {
    /// Its virtual nodes nest in the host nodes it spans (or it spans one
    /// node): the guest's own NUMA policy keeps memory beside its vCPUs.
    Mirrors,
    /// Fewer virtual nodes than host nodes spanned (CPU hot-add, no vNUMA,
    /// a VM floating over the host).
    Hidden,
    /// Virtual nodes that straddle host nodes (3 or 5 on a 2-node host).
    Mismatched,
}

impl GuestView {
    /// The view of a guest shown `virtual_nodes` NUMA nodes while its
    /// vCPUs and memory span `host_nodes` host nodes, each virtual node
    /// the same size: whole virtual nodes per host node mirror it
    /// (2, 4, 12 on a 2-node host measured as well as the host's own
    /// layout), fewer hide it, and others straddle.
    pub fn of_counts(virtual_nodes: u32, host_nodes: u32) -> GuestView {
        if host_nodes <= 1 {
            GuestView::Mirrors
        } else if virtual_nodes < host_nodes {
            GuestView::Hidden
        } else if virtual_nodes.is_multiple_of(host_nodes) {
            GuestView::Mirrors
        } else {
            GuestView::Mismatched
        }
    }
}

/// Where a share of one vCPU's memory accesses go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Access {
    /// Share of the vCPU's accesses (the shares of a vCPU sum to 1).
    pub share: f64,
    /// SLIT distance from the vCPU's node to the memory's node.
    pub distance: u32,
    /// How far the memory's node is over its bandwidth (1.0 when not:
    /// [`Model::congestion`]).
    pub congestion: f64,
}

impl Model {
    fn steps(&self, distance: u32) -> f64 {
        let span = (self.reference_distance - 10.0).max(1.0);
        (f64::from(distance) - 10.0).max(0.0) / span
    }

    /// Latency at a SLIT distance relative to local: linear in the
    /// distance beyond 10, through the measured point (1.55 at 20.5;
    /// 1.10 at 12, 2.15 at 32).
    pub fn latency_at(&self, distance: u32) -> f64 {
        1.0 + (self.remote_latency - 1.0).max(0.0) * self.steps(distance)
    }

    /// Time per byte streamed at a SLIT distance relative to local (the
    /// inverse of the bandwidth): linear in the distance beyond 10
    /// through 2.0 at 20.5 (1.19 at 12, 3.1 at 32).
    pub fn bandwidth_penalty_at(&self, distance: u32) -> f64 {
        let bw = if self.remote_bandwidth > 0.0 { 1.0 / self.remote_bandwidth } else { 1.0 };
        1.0 + (bw - 1.0).max(0.0) * self.steps(distance)
    }

    /// Cost of an uncongested access at a distance relative to a local
    /// one: half latency-bound, half bandwidth-bound (1.775 at 20.5, as
    /// the single remote cost of the first model).
    pub fn remote_cost_at(&self, distance: u32) -> f64 {
        (self.latency_at(distance) + self.bandwidth_penalty_at(distance)) / 2.0
    }

    /// How much slower a node serves memory when `demand` streaming vCPUs
    /// want more than its `budget`: the bandwidth is shared, so each
    /// byte's time stretches by demand / budget; below the budget nothing
    /// changes (the RMMA points: one thread alone, at 98% of the node's
    /// peak, runs at full speed; two threads interleaved, at 67%, get
    /// 8.4 GB/s of 8.5 predicted).
    pub fn congestion(demand: f64, budget: f64) -> f64 {
        // A node exactly at its budget (every core running one vCPU of
        // the default mix) must not flip on rounding.
        if budget > 0.0 && demand > budget * (1.0 + 1e-9) {
            demand / budget
        } else {
            1.0
        }
    }

    /// Time a vCPU's memory accesses take relative to all-local, idle
    /// memory: the latency-bound half stretched by distance, the
    /// bandwidth-bound half by distance and congestion.
    pub fn memory_stretch(&self, accesses: &[Access]) -> f64 {
        let mut s = 0.0;
        for a in accesses {
            s += a.share * (self.latency_at(a.distance) + self.bandwidth_penalty_at(a.distance) * a.congestion) / 2.0;
        }
        s
    }

    /// The floor a guest view puts under the memory time: a guest that
    /// cannot see where its memory is loses what the ESXi measurements
    /// show, however local its memory happens to be.
    fn view_floor(&self, view: GuestView) -> f64 {
        let h = match view {
            GuestView::Mirrors => return 1.0,
            GuestView::Hidden => self.hidden_topology_memory,
            GuestView::Mismatched => self.mismatched_topology_memory,
        };
        if h > 0.0 {
            1.0 / h.min(1.0)
        } else {
            1.0
        }
    }

    /// Throughput of a vCPU (without SMT) whose memory accesses take
    /// `stretch` times as long as all-local ones: `1 / ((1 - w) + w s)`,
    /// where a guest view other than [`GuestView::Mirrors`] makes `s` at
    /// least `1 / h`.
    pub fn speed(&self, stretch: f64, view: GuestView) -> f64 {
        let w = self.memory_bound_share.clamp(0.0, 1.0);
        let s = stretch.max(self.view_floor(view)).max(0.0);
        1.0 / ((1.0 - w) + w * s)
    }

    /// [`Model::speed`] for a vCPU in a guest cell of `cell_vcpus` vCPUs of
    /// a VM with vCPUs on `vcpu_nodes` host nodes: a small cell of a
    /// spanning VM floors the memory time as ESXi measured.
    pub fn cell_speed(&self, stretch: f64, view: GuestView, cell_vcpus: usize, vcpu_nodes: usize) -> f64 {
        let small = vcpu_nodes > 1 && cell_vcpus > 0 && cell_vcpus <= SMALL_CELL_VCPUS;
        let floor = if small && self.small_cell_memory > 0.0 { 1.0 / self.small_cell_memory.min(1.0) } else { 1.0 };
        self.speed(stretch.max(floor), view)
    }

    /// Where the memory accesses of a vCPU on node `i` go, by node, each
    /// with its share (the shares sum to 1): `memory` is the VM's bytes
    /// per node, `has_vcpus` says which nodes run its vCPUs. When the
    /// guest's cells mirror the host (`mirrored`) and node `i` holds some
    /// of its memory, the vCPU keeps all but [`Model::cross_cell_share`]
    /// of its accesses to the memory of the nodes with vCPUs in its own
    /// cell, and spreads that share over those nodes by their memory;
    /// memory on nodes without vCPUs (a memory-only cell) is reached by
    /// every vCPU in proportion to its size. Otherwise the accesses follow
    /// the pages. Both the planner's cost and the simulator call this.
    pub fn access_shares(
        &self,
        i: usize,
        mirrored: bool,
        memory: &[(usize, u64)],
        has_vcpus: impl Fn(usize) -> bool,
        mut each: impl FnMut(usize, f64),
    ) {
        let total: u64 = memory.iter().map(|m| m.1).sum();
        if total == 0 {
            return;
        }
        let own = memory.iter().any(|&(j, b)| j == i && b > 0);
        let cpu_memory: u64 = memory.iter().filter(|(j, _)| has_vcpus(*j)).map(|m| m.1).sum();
        let cells = mirrored && own && cpu_memory > 0;
        let x = self.cross_cell_share.clamp(0.0, 1.0);
        let total = total as f64;
        for &(j, b) in memory {
            let share = if cells && has_vcpus(j) {
                let in_cells = cpu_memory as f64 / total;
                in_cells * (if j == i { 1.0 - x } else { 0.0 } + x * b as f64 / cpu_memory as f64)
            } else {
                b as f64 / total
            };
            if share > 0.0 {
                each(j, share);
            }
        }
    }

    /// The SMT factor of a vCPU whose core's other thread runs a vCPU of
    /// its own VM: told (`threads=2`), it loses [`Model::own_pair_share`]
    /// of the sibling loss; untold, all of it.
    pub fn own_pair_factor(&self, told: bool) -> f64 {
        if told {
            1.0 - self.sibling_loss.clamp(0.0, 1.0) * self.own_pair_share.clamp(0.0, 1.0)
        } else {
            self.smt_factor(true)
        }
    }

    /// The memory factor of a vCPU whose accesses are local with
    /// probability `locality` and otherwise at `distance`, memory
    /// uncongested: the first model's term, kept for its callers.
    pub fn memory_factor(&self, locality: f64, distance: u32, view: GuestView) -> f64 {
        let remote = (1.0 - locality).clamp(0.0, 1.0);
        let stretch = self.memory_stretch(&[
            Access { share: 1.0 - remote, distance: 10, congestion: 1.0 },
            Access { share: remote, distance, congestion: 1.0 },
        ]);
        self.speed(stretch, view)
    }

    /// Memory traffic of a vCPU running at `speed`, in streaming vCPUs:
    /// its memory-bound share's bandwidth-bound half, at the rate it runs.
    pub fn traffic(&self, speed: f64) -> f64 {
        self.memory_bound_share.clamp(0.0, 1.0) * 0.5 * speed
    }

    /// A node's bandwidth budget in streaming vCPUs.
    pub fn node_budget(&self, cores: u32) -> f64 {
        self.bandwidth_per_core.max(0.0) * f64::from(cores)
    }

    /// The SMT factor of one vCPU.
    pub fn smt_factor(&self, shared: bool) -> f64 {
        if shared {
            1.0 - self.sibling_loss.clamp(0.0, 1.0)
        } else {
            1.0
        }
    }
}

/// A parameter the sensitivity study moves, with the range it moves over.
#[derive(Clone, Copy, Debug)]
pub struct Range {
    /// The parameter's name, as in the results document.
    pub name: &'static str,
    /// Lowest value studied.
    pub low: f64,
    /// Highest value studied.
    pub high: f64,
    /// Where the range comes from.
    pub source: &'static str,
    set: fn(&mut Model, f64),
}

impl Range {
    /// The model with this parameter set to `value`.
    pub fn apply(&self, model: &Model, value: f64) -> Model {
        let mut m = *model;
        (self.set)(&mut m, value);
        m
    }
}

/// The parameters the sensitivity study moves, each over its measured
/// range (or, for assumptions, a range wide enough to matter).
pub const RANGES: [Range; 9] = [
    Range {
        name: "sibling_loss",
        low: 0.40,
        high: 0.75,
        source: "XAPI: 40-75% lost to sibling contention (004)",
        set: |m, v| m.sibling_loss = v,
    },
    Range {
        name: "memory_bound_share",
        low: 0.2,
        high: 0.8,
        source: "assumption: from mostly-CPU work to memory benchmarks",
        set: |m, v| m.memory_bound_share = v,
    },
    Range {
        name: "remote_latency",
        low: 1.50,
        high: 1.55,
        source: "RMMA random and pseudo-random latency ratios (002)",
        set: |m, v| m.remote_latency = v,
    },
    Range {
        name: "remote_bandwidth",
        low: 0.50,
        high: 0.65,
        source: "RMMA peak and average read bandwidth ratios (002)",
        set: |m, v| m.remote_bandwidth = v,
    },
    Range {
        name: "guest_topology_memory",
        low: 0.45,
        high: 0.54,
        source: "ESXi vNUMA mismatch and CPU hot-add, both views set (000, 001)",
        set: |m, v| {
            m.hidden_topology_memory = v;
            m.mismatched_topology_memory = v;
        },
    },
    Range {
        name: "bandwidth_per_core",
        low: 0.125,
        high: 1.0,
        source: "assumption: up to the Opteron's one streaming thread per node (002)",
        set: |m, v| m.bandwidth_per_core = v,
    },
    Range {
        name: "cross_cell_share",
        low: 0.0,
        high: 0.3,
        source: "assumption: NUMA-aware guests keep most accesses in the cell",
        set: |m, v| m.cross_cell_share = v,
    },
    Range {
        name: "own_pair_share",
        low: 0.25,
        high: 1.0,
        source: "assumption: how often both threads of a guest-known pair are busy (1.0: always)",
        set: |m, v| m.own_pair_share = v,
    },
    Range {
        name: "small_cell_memory",
        low: 0.675,
        high: 0.80,
        source: "ESXi 24 virtual nodes of 2 vCPUs against 24 vCPUs in 2-4 nodes and 48 in one (000)",
        set: |m, v| m.small_cell_memory = v,
    },
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn within(got: f64, want: f64, pct: f64) -> bool {
        ((got - want) / want).abs() <= pct / 100.0
    }

    #[test]
    fn local_and_alone_is_one() {
        let m = Model::default();
        assert_eq!(m.memory_factor(1.0, 21, GuestView::Mirrors) * m.smt_factor(false), 1.0);
        assert_eq!(m.speed(1.0, GuestView::Mirrors), 1.0);
    }

    /// RMMA on the 2-socket Opteron (002), at the 2-socket distances 20
    /// and 21: remote latency 70.9 / 45.6 ns, bandwidth 3116 / 6286 MB/s.
    #[test]
    fn distance_terms_reproduce_the_two_socket_measurement() {
        let m = Model::default();
        for d in [20, 21] {
            assert!(within(m.latency_at(d), 70.9 / 45.6, 5.0), "latency at {d}: {}", m.latency_at(d));
            assert!(within(1.0 / m.bandwidth_penalty_at(d), 3116.0 / 6286.0, 5.0), "bandwidth at {d}");
        }
        assert!(within(m.remote_cost_at(21), 1.775, 5.0));
        // What it predicts nearer and farther (docs/performance-model.md).
        assert!(within(m.latency_at(12), 1.105, 1.0));
        assert!(within(m.latency_at(32), 2.152, 1.0));
        assert!(m.remote_cost_at(12) < m.remote_cost_at(16) && m.remote_cost_at(16) < m.remote_cost_at(32));
        assert_eq!(m.latency_at(10), 1.0);
        assert_eq!(m.latency_at(0), 1.0, "a bad matrix never makes remote cheaper than local");
    }

    /// The interleave column: half the pages local, half remote.
    #[test]
    fn interleaved_memory_reproduces_the_node_interleave_column() {
        let m = Model::default();
        let half = |c: f64| {
            [Access { share: 0.5, distance: 10, congestion: c }, Access { share: 0.5, distance: 21, congestion: c }]
        };
        // Latency alone: 0.5 x 45.6 + 0.5 x 70.9 against the measured 57.5 ns.
        let lat = 0.5 * m.latency_at(10) + 0.5 * m.latency_at(21);
        assert!(within(lat, 57.5 / 45.6, 5.0), "{lat}");
        // Bandwidth alone (time per byte averaged): 4211 MB/s measured.
        let bw = 1.0 / (0.5 * m.bandwidth_penalty_at(10) + 0.5 * m.bandwidth_penalty_at(21));
        assert!(within(bw * 6286.0, 4211.0, 5.0), "{}", bw * 6286.0);
        // The two halves together are what memory_stretch computes.
        assert!(within(m.memory_stretch(&half(1.0)), (lat + 1.0 / bw) / 2.0, 0.01));
    }

    /// The conclusion table of 002: 6.4 GB/s per node; a NUMA-aware
    /// program on both nodes gets 12.8, a program whose memory sits on one
    /// node gets one controller's 6.4 (SMP), interleaved threads 8.4.
    #[test]
    fn node_bandwidth_reproduces_the_aggregate_figures() {
        // Streaming threads: all time bandwidth-bound, so the figures are
        // the bandwidth penalty alone. One node's budget is one thread.
        let m = Model::default();
        let node = 6.4;
        let rate = |penalty: f64| 1.0 / penalty;
        // NUMA-aware: each thread local on its own node, demand 1 each.
        let aware = 2.0 * rate(m.bandwidth_penalty_at(10) * Model::congestion(1.0, 1.0));
        assert!(within(aware * node, 12.8, 5.0));
        // Memory on node 0: the local thread streams at 1, the remote one
        // at 0.5 uncongested; node 0 is asked for 1.5 and serves 1.
        let remote = rate(m.bandwidth_penalty_at(21));
        let k = Model::congestion(1.0 + remote, 1.0);
        let smp = rate(k) + rate(m.bandwidth_penalty_at(21) * k);
        assert!(within(smp * node, 6.4, 5.0), "{}", smp * node);
        assert!(within(aware / smp, 2.0, 5.0), "symmetric NUMA gives twice SMP's aggregate");
        // Interleaved: each thread's bytes half local, half remote; each
        // node is asked for 2 x 0.5 x 0.67 = 0.67: no congestion.
        let each = 1.0 / (0.5 * m.bandwidth_penalty_at(10) + 0.5 * m.bandwidth_penalty_at(21));
        assert_eq!(Model::congestion(2.0 * 0.5 * each, 1.0), 1.0);
        assert!(within(2.0 * each * node, 8.4, 5.0), "{}", 2.0 * each * node);
        // One thread alone, local: 6,286 of 6,400 MB/s, no slowdown.
        assert_eq!(Model::congestion(6286.0 / 6400.0, 1.0), 1.0);
    }

    /// ESXi (000, 001): what the guest is shown.
    #[test]
    fn guest_views_reproduce_the_vnuma_measurements() {
        // Memory-bound benchmarks: w = 1, memory local on average.
        let m = Model { memory_bound_share: 1.0, ..Model::default() };
        let mirrored = m.speed(1.0, GuestView::Mirrors);
        // CPU hot-add on a 2-node host: one virtual node.
        assert_eq!(GuestView::of_counts(1, 2), GuestView::Hidden);
        assert!(within(m.speed(1.0, GuestView::Hidden) / mirrored, 28662.0 / 52927.0, 5.0));
        // 3 or 5 virtual nodes on 2 host nodes; 2, 4 and 12 are fine.
        for bad in [3, 5] {
            assert_eq!(GuestView::of_counts(bad, 2), GuestView::Mismatched);
        }
        for good in [2, 4, 12] {
            assert_eq!(GuestView::of_counts(good, 2), GuestView::Mirrors);
        }
        for (bad, good) in [(23000.0, 48900.0), (23600.0, 53000.0), (23900.0, 51363.0), (22700.0, 50433.0)] {
            let want: f64 = bad / good;
            assert!(within(m.speed(1.0, GuestView::Mismatched) / mirrored, want, 6.0), "{want}");
        }
        // One host node: nothing to hide (hot-add "does no harm" there).
        assert_eq!(GuestView::of_counts(1, 1), GuestView::Mirrors);
        // The floor only bites when memory is not already slower.
        assert_eq!(m.speed(3.0, GuestView::Hidden), m.speed(3.0, GuestView::Mirrors));
    }

    #[test]
    fn sibling_loss_is_the_xapi_midpoint() {
        let m = Model::default();
        assert!((m.smt_factor(true) - 0.425).abs() < 1e-12);
        for r in RANGES {
            let lo = r.apply(&m, r.low);
            let hi = r.apply(&m, r.high);
            assert_ne!(lo, hi, "{} moves the model", r.name);
        }
    }

    #[test]
    fn congestion_stretches_only_the_bandwidth_half() {
        let m = Model::default();
        let idle = m.memory_stretch(&[Access { share: 1.0, distance: 10, congestion: 1.0 }]);
        let busy = m.memory_stretch(&[Access { share: 1.0, distance: 10, congestion: 2.0 }]);
        assert_eq!(idle, 1.0);
        assert_eq!(busy, 1.5);
        assert!(within(m.traffic(1.0), 0.25, 0.01));
        assert_eq!(m.node_budget(8), 2.0);
    }

    proptest::proptest! {
        /// Whatever the parameters within their studied ranges and
        /// whatever the accesses, a vCPU never runs faster than alone and
        /// local, never stops, and farther or busier memory never helps.
        #[test]
        fn speeds_stay_between_zero_and_one(
            k in proptest::collection::vec(0.0f64..=1.0, 9),
            shares in proptest::collection::vec((0.0f64..1.0, 10u32..=255, 1.0f64..50.0), 1..6),
            view in 0usize..3,
        ) {
            let mut m = Model::default();
            for (r, t) in RANGES.iter().zip(&k) {
                m = r.apply(&m, r.low + (r.high - r.low) * t);
            }
            let total: f64 = shares.iter().map(|s| s.0).sum::<f64>().max(1e-9);
            let acc: Vec<Access> =
                shares.iter().map(|&(s, d, c)| Access { share: s / total, distance: d, congestion: c }).collect();
            let view = [GuestView::Mirrors, GuestView::Hidden, GuestView::Mismatched][view];
            let v = m.speed(m.memory_stretch(&acc), view);
            proptest::prop_assert!(v > 0.0 && v <= 1.0 + 1e-12, "{v}");
            let farther: Vec<Access> = acc.iter().map(|a| Access { distance: a.distance.saturating_add(10), ..*a }).collect();
            proptest::prop_assert!(m.speed(m.memory_stretch(&farther), view) <= v + 1e-12);
            let busier: Vec<Access> = acc.iter().map(|a| Access { congestion: a.congestion * 2.0, ..*a }).collect();
            proptest::prop_assert!(m.speed(m.memory_stretch(&busier), view) <= v + 1e-12);
        }
    }
}
