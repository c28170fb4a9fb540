//! Synthetic traces for tests and quick runs: Poisson arrivals,
//! exponential lifetimes, sizes drawn from a flavor list, all from a seed.

use super::{Trace, Vm};
use crate::rng::Rng;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Number of VMs.
    pub vms: usize,
    /// Mean time between arrivals, seconds.
    pub mean_interarrival_s: f64,
    /// Mean lifetime, seconds.
    pub mean_lifetime_s: f64,
    /// Sizes to draw from, equally likely: (vCPUs, memory bytes).
    pub flavors: Vec<(u32, u64)>,
}

impl Default for Spec {
    /// 1000 VMs, one a minute, living two hours on average, in the sizes
    /// most common in the Azure V1 trace.
    fn default() -> Spec {
        Spec {
            vms: 1000,
            mean_interarrival_s: 60.0,
            mean_lifetime_s: 7200.0,
            flavors: vec![(1, 7 << 28), (2, 7 << 29), (4, 7 << 30), (8, 14 << 30)],
        }
    }
}

/// Generates a trace; the same spec and seed give the same trace.
pub fn generate(spec: &Spec, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut t = 0.0f64;
    // The hint is bounded so a wild count fails as it grows, not at once.
    let mut vms = Vec::with_capacity(spec.vms.min(super::MAX_VMS));
    for _ in 0..spec.vms {
        t += rng.exponential(spec.mean_interarrival_s.max(0.0));
        let pick = rng.below(spec.flavors.len() as u64) as usize;
        let (vcpus, memory_bytes) = spec.flavors.get(pick).copied().unwrap_or((1, 1 << 30));
        let life = rng.exponential(spec.mean_lifetime_s.max(1.0)).ceil().max(1.0);
        vms.push(Vm {
            vcpus: vcpus.max(1),
            memory_bytes: memory_bytes.max(1),
            arrival_s: t as u64,
            lifetime_s: Some(life as u64),
        });
    }
    let end_s = vms.iter().filter_map(Vm::departure_s).max().unwrap_or(0).saturating_add(1);
    Trace { name: format!("synthetic:{}@{seed}", spec.vms), vms, start_s: 0, end_s }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_ordered() {
        let a = generate(&Spec::default(), 3);
        assert_eq!(a, generate(&Spec::default(), 3));
        assert_eq!(a.vms.len(), 1000);
        assert!(a.vms.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        assert!(a.vms.iter().all(|v| v.departure_s().is_some_and(|d| d < a.end_s)));
    }
}
