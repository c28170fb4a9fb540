//! Replay throughput in VM events (arrivals + departures) per second: the
//! first 20,000 VMs of the Azure V1 test split over the 2,000-host fleet
//! of real topologies, per policy. The whole-trace figures in
//! `docs/performance.md` come from `numaplace simulate` under
//! `/usr/bin/time -v`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use numaplace_sim::load::{load_fleet, load_trace};
use numaplace_sim::{run_policy, Config, SimPolicy};
use std::hint::black_box;
use std::path::PathBuf;

// The allocator the numaplace binary uses, so the figures are the tool's.
#[global_allocator]
static ALLOCATOR: numaplace_alloc::Allocator = numaplace_alloc::Allocator;

fn replay(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/traces");
    let fleet = load_fleet(&dir.join("fleet-2000.json"), |s| numaplace_read::read_source(s).map_err(|e| e.to_string()))
        .expect("the fixture fleet reads");
    let mut trace =
        load_trace(dir.join("azure-v1/v1.test.txt").to_str().unwrap_or_default(), 0).expect("the fixture trace reads");
    trace.truncate(20_000);
    let cfg = Config::default();
    let mut group = c.benchmark_group("replay_20k_vms_2000_hosts");
    group.sample_size(10);
    for policy in [SimPolicy::parse("balanced"), SimPolicy::parse("compact"), SimPolicy::parse("no-numa")] {
        let Ok(policy) = policy else { continue };
        let events = run_policy(&fleet, &trace, policy, &cfg, &mut |_| {}).events;
        group.throughput(Throughput::Elements(events));
        group.bench_function(policy.name(), |b| {
            b.iter(|| black_box(run_policy(&fleet, &trace, policy, &cfg, &mut |_| {})))
        });
    }
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
