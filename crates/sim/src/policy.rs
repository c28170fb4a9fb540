//! The policies the simulator compares. numaplace's own four go through the
//! planner with that [`numaplace_plan::Policy`]; `no-numa` is the baseline
//! every hypervisor starts from: the VM floats over the whole host and its
//! memory lands wherever the host has room.
//!
//! Adding a policy: add a variant here, give it a name in [`SimPolicy::name`]
//! and [`SimPolicy::ALL`], and say in `Engine::arrive` (`crate::engine`) how
//! it places a VM on one host (a planner policy needs nothing more).

use numaplace_plan::Policy;
use std::fmt;

/// A policy under comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimPolicy {
    /// numaplace's planner with this node-set policy, vCPUs pinned.
    Planner(Policy),
    /// No NUMA awareness: vCPUs float over all CPUs, memory is spread over
    /// the nodes in proportion to their size (first touch), the guest sees
    /// one node.
    NoNuma,
}

/// A policy name nobody defined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {name:?}; known: compact, smt-aware, balanced, spread, pack, no-numa")]
pub struct UnknownPolicy {
    /// The name given.
    pub name: String,
}

impl SimPolicy {
    /// The policies reports compare by default, in order (`pack` is
    /// named on request: it is the same search as `balanced` with the
    /// opposite load order).
    pub const ALL: [SimPolicy; 5] = [
        SimPolicy::Planner(Policy::Compact),
        SimPolicy::Planner(Policy::SmtAware),
        SimPolicy::Planner(Policy::Balanced),
        SimPolicy::Planner(Policy::Spread),
        SimPolicy::NoNuma,
    ];

    /// The name used on the command line and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            SimPolicy::Planner(Policy::Compact) => "compact",
            SimPolicy::Planner(Policy::SmtAware) => "smt-aware",
            SimPolicy::Planner(Policy::Balanced) => "balanced",
            SimPolicy::Planner(Policy::Spread) => "spread",
            SimPolicy::Planner(Policy::Pack) => "pack",
            SimPolicy::NoNuma => "no-numa",
        }
    }

    /// Parses a name (as [`SimPolicy::name`] gives it).
    pub fn parse(name: &str) -> Result<SimPolicy, UnknownPolicy> {
        let n = name.trim();
        SimPolicy::ALL
            .into_iter()
            .chain([SimPolicy::Planner(Policy::Pack)])
            .find(|p| p.name() == n)
            .ok_or_else(|| UnknownPolicy { name: n.to_string() })
    }

    /// Parses a comma-separated list, keeping order and dropping repeats.
    pub fn parse_list(list: &str) -> Result<Vec<SimPolicy>, UnknownPolicy> {
        let mut out: Vec<SimPolicy> = Vec::new();
        for part in list.split(',').filter(|p| !p.trim().is_empty()) {
            let p = SimPolicy::parse(part)?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }
}

impl fmt::Display for SimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in SimPolicy::ALL {
            assert_eq!(SimPolicy::parse(p.name()), Ok(p));
        }
        assert_eq!(SimPolicy::parse_list("balanced, no-numa,balanced").unwrap().len(), 2);
        assert_eq!(SimPolicy::parse("first-fit").unwrap_err().name, "first-fit");
    }
}
