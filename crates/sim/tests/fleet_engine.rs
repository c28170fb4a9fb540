//! The replay runs the service's fleet engine: the same arrivals and
//! departures driven by hand through `numaplace_fleet::Fleet::select` (the
//! call `numaplace serve` makes, then `place` as after a claim) accept and
//! refuse exactly the VMs the simulator does, under every ranking, on a
//! saturated fleet of real topologies where which hosts are tried decides.

#![allow(clippy::unwrap_used)]

use numaplace_fleet::{Constraints, Fleet, FleetHost, Ranking};
use numaplace_plan::{HostState, Policy, Request};
use numaplace_sim::load::{load_fleet, load_trace};
use numaplace_sim::{run_policy, Config, SimPolicy, Trace};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/traces").join(rel)
}

/// What the service's fleet accepts of the trace, VM by VM in trace
/// order (departures due at or before an arrival first), and how many
/// hosts the planner ran on.
fn served(fleet: &numaplace_sim::HostMix, trace: &Trace, ranking: Ranking) -> (u64, u64, u64) {
    let mut f = Fleet::with_ranking(ranking);
    for (h, &k) in fleet.hosts.iter().enumerate() {
        let t = Arc::clone(&fleet.kinds[k].topology);
        let state = HostState::new(&t);
        f.insert(FleetHost::new(format!("h{h:07}"), t, state, BTreeMap::new(), 0));
    }
    let (mut accepted, mut rejected, mut planned) = (0, 0, 0);
    let mut on: BTreeMap<String, String> = BTreeMap::new();
    let mut departures: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    for (i, vm) in trace.vms.iter().enumerate() {
        while let Some(&Reverse((t, j))) = departures.peek() {
            if t > vm.arrival_s {
                break;
            }
            departures.pop();
            let name = format!("vm{j}");
            let host = on.remove(&name).unwrap();
            f.unplace(&host, 0, &name).unwrap();
        }
        let mut request = Request::new(format!("vm{i}"), vm.vcpus, vm.memory_bytes);
        request.policy = Policy::Balanced;
        match f.select(&request, &Constraints::default()) {
            Ok(choice) => {
                planned += choice.planned as u64;
                f.place(&choice.host, choice.generation, &choice.decision.placement, None).unwrap();
                on.insert(request.name.clone(), choice.host.clone());
                accepted += 1;
                if let Some(d) = vm.departure_s() {
                    departures.push(Reverse((d, i)));
                }
            }
            Err(_) => rejected += 1,
        }
    }
    (accepted, rejected, planned)
}

#[test]
fn the_replay_accepts_what_the_service_would() {
    let fleet = load_fleet(&fixture("fleet-small.json"), |s| numaplace_read::read_source(s).map_err(|e| e.to_string()))
        .unwrap();
    let mut trace = load_trace(fixture("azure-v1/v1.test.txt").to_str().unwrap(), 0).unwrap();
    trace.truncate(1500);
    for ranking in [Ranking::CoresFirst, Ranking::MemoryFirst, Ranking::Cost] {
        let cfg = Config { host_order: ranking, ..Config::default() };
        let r = run_policy(&fleet, &trace, SimPolicy::Planner(Policy::Balanced), &cfg, &mut |_| {});
        let (accepted, rejected, _) = served(&fleet, &trace, ranking);
        assert!(rejected > 100, "{ranking}: the fleet is saturated, so which hosts are tried decides");
        assert_eq!((r.accepted, r.rejected), (accepted, rejected), "{ranking}");
        assert_eq!(r.planner_faults, 0);
    }
}
