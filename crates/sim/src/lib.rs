//! The fleet simulator (`numaplace simulate`): replays a cloud's VM
//! arrivals and departures over a fleet of real host topologies and
//! measures what each placement policy does to acceptance, memory
//! locality, SMT sharing, node balance, stranded capacity and predicted
//! VM performance.
//!
//! Pure and deterministic: traces and fleets are parsed from text
//! ([`trace`], [`fleet`]), the replay ([`engine`]) has no clock and no I/O,
//! and the same inputs and seed give the same numbers. [`load`] is the only
//! module that opens files; [`report`] renders results (text, JSON, SVG).

pub mod engine;
pub mod fleet;
mod host;
pub mod load;
pub mod model;
pub mod policy;
pub mod report;
pub mod rng;
pub mod trace;

pub use engine::{common_sizes, run_policy, Config, HostOrder, PolicyResult, Progress, Sample};
pub use fleet::{FleetError, HostKind, HostMix};
pub use host::PlacedVm;
pub use model::{GuestView, Model, RANGES};
pub use policy::{SimPolicy, UnknownPolicy};
pub use trace::{Trace, TraceError, Vm};

/// Replays a trace over a fleet once per policy; the replays run on up to
/// `threads` threads (each replay is sequential and deterministic, so the
/// results do not depend on the thread count). `progress` hears how far
/// each replay has got, on the calling thread.
pub fn run(
    fleet: &HostMix,
    trace: &Trace,
    policies: &[SimPolicy],
    cfg: &Config,
    threads: usize,
    progress: &mut dyn FnMut(Progress),
) -> Vec<PolicyResult> {
    let setups: Vec<(SimPolicy, HostOrder)> = policies.iter().map(|&p| (p, cfg.host_order)).collect();
    run_setups(fleet, trace, &setups, cfg, threads, progress)
}

/// Replays a trace over a fleet once per (policy, host order) pair, as
/// [`run`] does for one order.
pub fn run_setups(
    fleet: &HostMix,
    trace: &Trace,
    setups: &[(SimPolicy, HostOrder)],
    cfg: &Config,
    threads: usize,
    progress: &mut dyn FnMut(Progress),
) -> Vec<PolicyResult> {
    let policies = setups;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    let next = AtomicUsize::new(0);
    let total = trace.vms.len();
    let n = policies.len();
    let (tx, rx) = mpsc::channel::<(usize, usize, Option<PolicyResult>)>();
    let mut results: Vec<Option<PolicyResult>> = vec![None; n];
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(policy, hosts)) = policies.get(i) else { break };
                let mut tick = |done: usize| {
                    let _ = tx.send((i, done, None));
                };
                let cfg = Config { host_order: hosts, ..cfg.clone() };
                let r = run_policy(fleet, trace, policy, &cfg, &mut tick);
                let _ = tx.send((i, total, Some(r)));
            });
        }
        drop(tx);
        for (i, done, result) in rx {
            progress(Progress { policy: i, policies: n, vms_done: done, vms_total: total });
            if let (Some(r), Some(slot)) = (result, results.get_mut(i)) {
                *slot = Some(r);
            }
        }
    });
    results.into_iter().flatten().collect()
}
