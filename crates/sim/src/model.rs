//! The performance model: a VM's predicted throughput per vCPU relative to
//! the same vCPU alone on a core with all its memory local. Parameters come
//! from the field notes' measurements; `docs/performance-model.md` derives
//! the formula and names the sources.

/// The model's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Share of a vCPU's time that waits on memory (`w`).
    pub memory_bound_share: f64,
    /// Remote latency relative to local (RMMA on Opteron: 70.9 / 45.6 ns,
    /// 112.3 / 74.7 ns -> 1.55).
    pub remote_latency: f64,
    /// Remote bandwidth relative to local (3116 / 6286 MB/s -> 0.5).
    pub remote_bandwidth: f64,
    /// Throughput a vCPU loses when its core runs another busy vCPU
    /// (XAPI: 40-75%; the midpoint).
    pub sibling_loss: f64,
    /// Memory-bound throughput when the guest sees one node but the VM
    /// spans several (ESXi vNUMA mismatches: ~50%).
    pub hidden_topology_memory: f64,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            memory_bound_share: 0.5,
            remote_latency: 1.55,
            remote_bandwidth: 0.5,
            sibling_loss: 0.575,
            hidden_topology_memory: 0.5,
        }
    }
}

impl Model {
    /// Cost of a remote access relative to a local one: the mean of the
    /// latency and bandwidth penalties (1.775 with the defaults).
    pub fn remote_cost(&self) -> f64 {
        let bw = if self.remote_bandwidth > 0.0 { 1.0 / self.remote_bandwidth } else { 1.0 };
        (self.remote_latency + bw) / 2.0
    }

    /// The memory factor of a VM whose accesses are local with probability
    /// `locality`; `hidden` when its guest sees one node while it spans
    /// several.
    pub fn memory_factor(&self, locality: f64, hidden: bool) -> f64 {
        let w = self.memory_bound_share.clamp(0.0, 1.0);
        let remote = (1.0 - locality).clamp(0.0, 1.0);
        let stretch = 1.0 + w * remote * (self.remote_cost() - 1.0);
        let factor = 1.0 / stretch;
        if hidden {
            factor.min((1.0 - w) + w * self.hidden_topology_memory)
        } else {
            factor
        }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn local_and_alone_is_one() {
        let m = Model::default();
        assert_eq!(m.memory_factor(1.0, false) * m.smt_factor(false), 1.0);
    }

    #[test]
    fn figures_follow_the_notes() {
        let m = Model::default();
        assert!((m.remote_cost() - 1.775).abs() < 1e-12);
        // All remote, half the time on memory: 1 / (1 + 0.5 * 0.775).
        assert!((m.memory_factor(0.0, false) - 1.0 / 1.3875).abs() < 1e-12);
        // Hidden topology caps the memory-bound half at 50%.
        assert!((m.memory_factor(0.5, true) - 0.75).abs() < 1e-12);
        assert!((m.smt_factor(true) - 0.425).abs() < 1e-12);
    }
}
