//! A zone of 100,000 hosts in the fleet inventory alone (no store, no
//! HTTP): how long the hosts take to load, how much memory each takes,
//! and how long a selection takes as VMs arrive and leave. The hosts are
//! the simulator's fleet fixture (`fixtures/traces/fleet-2000.json`, three
//! real topologies) repeated. Not a criterion bench: the figures are one
//! pass each, printed; run with
//! `cargo bench -p numaplace-fleet --bench zone` (`NUMAPLACE_ZONE_HOSTS`
//! sets the host count, 100,000 by default).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use numaplace_fleet::{Constraints, Fleet, FleetHost, Spread, Walk};
use numaplace_plan::{HostState, Request};
use numaplace_topo::Topology;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

// The allocator the numaplace binary uses, so the figures are the tool's.
#[global_allocator]
static ALLOCATOR: numaplace_alloc::Allocator = numaplace_alloc::Allocator;

const GIB: u64 = 1 << 30;

fn topology(path: &str) -> Arc<Topology> {
    let p = format!("{}/../../fixtures/topologies/{path}", env!("CARGO_MANIFEST_DIR"));
    Arc::new(numaplace_read::read_source(&p).unwrap())
}

/// Resident memory of this process, bytes (Linux).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or_default()
}

fn main() {
    let hosts: usize = std::env::var("NUMAPLACE_ZONE_HOSTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    // fleet-2000.json's mix: 1 corona, 2 Intel, 2 quartz in every 5.
    let kinds = [
        topology("mpibind/epyc-corona.xml"),
        topology("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml"),
        topology("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml"),
        topology("mpibind/cts1-quartz-smt1.xml"),
        topology("mpibind/cts1-quartz-smt1.xml"),
    ];
    let before = rss();
    let start = Instant::now();
    let mut fleet = Fleet::new();
    for i in 0..hosts {
        let k = i % kinds.len();
        let mut labels = BTreeMap::new();
        labels.insert("rack".to_string(), format!("r{}", i / 40));
        // Each state built on its own, as a server builds them from its
        // store; the fleet shares their fixed facts.
        let state = HostState::new(&kinds[k]);
        let host = FleetHost::new(format!("host-{i:06}"), Arc::clone(&kinds[k]), state, labels, 1);
        fleet.insert(host);
    }
    let load = start.elapsed();
    let per_host = rss().saturating_sub(before) / hosts.max(1) as u64;
    println!("zone: {hosts} hosts loaded in {:.2} s, {per_host} bytes resident per host", load.as_secs_f64());

    // Arrivals of the simulator's synthetic sizes, each kept for the next
    // 4 * hosts placements (so the zone fills towards half), then deletes.
    let sizes = [(1, 2 * GIB), (2, 4 * GIB), (4, 8 * GIB), (8, 16 * GIB)];
    let placements = 20_000usize;
    let mut times = Vec::with_capacity(placements);
    let mut live: std::collections::VecDeque<(String, String)> = std::collections::VecDeque::new();
    let mut generation = 2;
    let any = Constraints::default();
    for i in 0..placements {
        let (vcpus, memory) = sizes[i % sizes.len()];
        let request = Request::new(format!("vm{i}"), vcpus, memory);
        let t = Instant::now();
        let choice = fleet.select(&request, &any);
        times.push(t.elapsed());
        let Ok(choice) = choice else { continue };
        generation += 1;
        fleet.place(&choice.host, generation, &choice.decision.placement, None).unwrap();
        live.push_back((choice.host, request.name));
        if live.len() > placements / 2 {
            let (host, vm) = live.pop_front().unwrap();
            generation += 1;
            fleet.unplace(&host, generation, &vm).unwrap();
        }
    }
    times.sort_unstable();
    println!(
        "select: {placements} requests, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    // Requests no host takes (more memory than any host has, then more
    // dedicated vCPUs than any host has threads): through the index, and
    // by a walk over every host (what selection did before the index).
    for (what, request) in [
        ("no host (4 TiB)", Request::new("too-big", 2, 4096 * GIB)),
        ("no host (512 vCPUs)", Request::new("too-wide", 512, 4 * GIB)),
    ] {
        for walk in [Walk::Indexed, Walk::Full] {
            let mut times = Vec::new();
            for _ in 0..200 {
                let t = Instant::now();
                let answer = fleet.select_walk(&request, &any, Spread::default(), walk);
                times.push(t.elapsed());
                assert!(answer.is_err());
            }
            times.sort_unstable();
            println!(
                "select {what}, {walk:?}: p50 {:.3} ms, p99 {:.3} ms",
                percentile(&times, 0.50).as_secs_f64() * 1e3,
                percentile(&times, 0.99).as_secs_f64() * 1e3
            );
        }
    }
    let after = rss();
    println!("resident after: {} MiB", after >> 20);
}
