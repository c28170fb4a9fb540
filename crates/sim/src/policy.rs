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
    /// The planner's `balanced` pinning, but the guest is shown one NUMA
    /// node (ESXi with CPU hot-add on, or a hypervisor without vNUMA):
    /// what the guest topology is worth, on the same placements.
    NoVnuma,
}

/// A policy name nobody defined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {name:?}; known: compact, smt-aware, balanced, spread, pack, no-numa, no-vnuma")]
pub struct UnknownPolicy {
    /// The name given.
    pub name: String,
}

impl SimPolicy {
    /// The policies reports compare by default, in order (`pack` and
    /// `no-vnuma` are named on request: the same searches as `balanced`
    /// with the opposite load order, or with the guest topology hidden).
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
            SimPolicy::Planner(p) => p.name(),
            SimPolicy::NoNuma => "no-numa",
            SimPolicy::NoVnuma => "no-vnuma",
        }
    }

    /// The planner policy that places its VMs; `None` for `no-numa`.
    pub fn planner(&self) -> Option<Policy> {
        match self {
            SimPolicy::Planner(p) => Some(*p),
            SimPolicy::NoVnuma => Some(Policy::Balanced),
            SimPolicy::NoNuma => None,
        }
    }

    /// Whether its guests are shown one NUMA node whatever they span.
    pub fn hides_topology(&self) -> bool {
        matches!(self, SimPolicy::NoVnuma)
    }

    /// Parses a name (as [`SimPolicy::name`] gives it).
    pub fn parse(name: &str) -> Result<SimPolicy, UnknownPolicy> {
        let n = name.trim();
        SimPolicy::ALL
            .into_iter()
            .chain([SimPolicy::Planner(Policy::Pack), SimPolicy::NoVnuma])
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
