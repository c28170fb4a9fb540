//! What "free" means for a host, the host rankings built on it, and
//! stranded capacity: one definition each, used by the service's fleet and
//! by the simulator's replay, so `simulate --hosts` measures the orders
//! `serve` can run.

use std::fmt;

/// What a host has free, in the units host ranking and stranded capacity
/// count. The service fills it from a host's [`crate::Summary`]; the
/// simulator from its own per-host summary (which also counts the
/// no-NUMA baseline's floating VMs, which have no planner placement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Free {
    /// Cores none of whose threads is in use.
    pub cores: u32,
    /// vCPUs the host can still take: its free threads, or on a host that
    /// overcommits CPUs its free vCPU slots.
    pub slots: u32,
    /// Memory free for VMs, bytes.
    pub memory: u64,
}

impl Free {
    /// Whether a VM of `vcpus` and `memory` bytes fits these totals (a
    /// necessary condition: the planner decides whether the nodes hold it).
    pub fn fits(&self, vcpus: u32, memory: u64) -> bool {
        self.slots >= vcpus && self.memory >= memory
    }

    /// Whether this free capacity is stranded: no VM of the given sizes
    /// (vCPUs, bytes) fits it. With no sizes nothing is stranded.
    pub fn stranded(&self, sizes: &[(u32, u64)]) -> bool {
        !sizes.is_empty() && !sizes.iter().any(|&(v, m)| self.fits(v, m))
    }
}

/// The size the service judges stranded capacity by (2 vCPUs, 4 GiB): a
/// host that cannot take even this has its free capacity stranded. The
/// simulator uses its trace's common sizes instead.
pub const STRANDED_PROBE: (u32, u64) = (2, 4 << 30);

/// How hosts are ranked for a VM: the order in which the planner is asked.
/// `serve` and `simulate` run [`Ranking::Cost`] by default;
/// `simulate --hosts` compares them all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ranking {
    /// Most free whole cores first, then most free vCPU slots, then most
    /// free memory: spreads VMs over hosts and keeps siblings idle (the
    /// order XAPI's authors asked for). The VM goes to the first host in
    /// this order that takes it (the planner's cost decides only between
    /// hosts equal in all three).
    CoresFirst,
    /// Most free memory first, then most free cores, then slots: the
    /// classic order of schedulers that weigh RAM (Nova's default weigher).
    MemoryFirst,
    /// The cores-first order, but the first few hosts that take the VM
    /// ([`crate::COST_TIES`]) are all planned and the VM goes where the
    /// planner's cost (sibling sharing, node distance, cell sizes) is
    /// lowest. The default: the one cost model that ranks a host's nodes
    /// also ranks hosts, so a VM that would share cores or span nodes on
    /// the emptiest host goes to a fuller one where it does not, which
    /// keeps the emptiest host's whole cores and memory for the large VMs
    /// that come later. On both bundled traces this accepts more VMs and
    /// predicts better performance than [`Ranking::CoresFirst`]
    /// (docs/simulate.md, "The planner's cost chooses the host").
    #[default]
    Cost,
    /// Fewest free slots that still fit, then fewest free cores, then
    /// least free memory: packs hosts full (best fit).
    Pack,
}

/// A host's place in a ranking: smaller is tried first. Ties are broken
/// by the holder (the service by host name, the simulator by host id).
pub type RankKey = [u64; 3];

impl Ranking {
    /// Every ranking, in the order reports list them.
    pub const ALL: [Ranking; 4] = [Ranking::MemoryFirst, Ranking::CoresFirst, Ranking::Cost, Ranking::Pack];

    /// The name used on the command line and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Ranking::CoresFirst => "cores-first",
            Ranking::MemoryFirst => "memory-first",
            Ranking::Cost => "cost",
            Ranking::Pack => "pack",
        }
    }

    /// Parses a name ([`Ranking::name`], or `most-free`, the old name of
    /// `cores-first`).
    pub fn parse(name: &str) -> Option<Ranking> {
        let n = name.trim();
        if n == "most-free" {
            return Some(Ranking::CoresFirst);
        }
        Ranking::ALL.into_iter().find(|o| o.name() == n)
    }

    /// Where a host with `free` capacity sits in this ranking.
    pub fn key(&self, free: Free) -> RankKey {
        let (c, s, m) = (u64::from(free.cores), u64::from(free.slots), free.memory);
        match self {
            Ranking::CoresFirst | Ranking::Cost => [u64::MAX - c, u64::MAX - s, u64::MAX - m],
            Ranking::MemoryFirst => [u64::MAX - m, u64::MAX - c, u64::MAX - s],
            Ranking::Pack => [s, c, m],
        }
    }

    /// The smallest key a host that has `slots` free slots can have: a
    /// walk in rank order may start there, since every host before it has
    /// fewer free slots than needed. Only [`Ranking::Pack`] ranks by free
    /// slots first; the others start at the beginning.
    pub fn first_key_with(&self, slots: u32) -> RankKey {
        match self {
            Ranking::Pack => [u64::from(slots), 0, 0],
            _ => [0, 0, 0],
        }
    }

    /// Whether the planner's cost chooses among the first hosts that take
    /// the VM, rather than the first one in order.
    pub fn compares_cost(&self) -> bool {
        matches!(self, Ranking::Cost)
    }
}

impl fmt::Display for Ranking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn free(cores: u32, slots: u32, gib: u64) -> Free {
        Free { cores, slots, memory: gib * GIB }
    }

    #[test]
    fn each_ranking_puts_the_host_it_is_named_for_first() {
        let many_cores = free(10, 20, 8);
        let much_memory = free(2, 4, 64);
        let nearly_full = free(1, 2, 4);
        let order = |r: Ranking| {
            let mut hosts = [("cores", many_cores), ("memory", much_memory), ("full", nearly_full)];
            hosts.sort_by_key(|(_, f)| r.key(*f));
            hosts.map(|(n, _)| n)
        };
        assert_eq!(order(Ranking::CoresFirst), ["cores", "memory", "full"]);
        assert_eq!(order(Ranking::Cost), ["cores", "memory", "full"]);
        assert_eq!(order(Ranking::MemoryFirst), ["memory", "cores", "full"]);
        assert_eq!(order(Ranking::Pack), ["full", "memory", "cores"]);
    }

    #[test]
    fn a_pack_walk_starts_at_the_first_host_with_enough_slots() {
        let start = Ranking::Pack.first_key_with(3);
        assert!(Ranking::Pack.key(free(1, 2, 64)) < start);
        assert!(Ranking::Pack.key(free(0, 3, 0)) >= start);
        assert_eq!(Ranking::CoresFirst.first_key_with(3), [0, 0, 0]);
    }

    #[test]
    fn stranded_means_no_size_fits() {
        let sizes = [(2, 4 * GIB), (4, 16 * GIB)];
        assert!(!free(1, 2, 4).stranded(&sizes));
        assert!(free(8, 16, 3).stranded(&sizes), "threads without memory");
        assert!(free(0, 1, 64).stranded(&sizes), "memory without threads");
        assert!(!free(0, 0, 0).stranded(&[]), "no sizes: nothing to judge by");
        assert!(free(0, 1, 64).stranded(&[STRANDED_PROBE]));
    }

    #[test]
    fn names_round_trip() {
        for r in Ranking::ALL {
            assert_eq!(Ranking::parse(r.name()), Some(r));
        }
        assert_eq!(Ranking::parse("most-free"), Some(Ranking::CoresFirst));
        assert_eq!(Ranking::parse("first-fit"), None);
    }
}
