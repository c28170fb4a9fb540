//! Planner speed: one 2-vCPU dedicated VM on 2-, 8-, 24- and 64-node
//! hosts, empty and 80% full; a batch of 1,000 VMs; and the rejection of a
//! request that does not fit (an 8-cell guest on a full 16-node host).
//! The targets: under 3 us per VM on 8 nodes and under 30 us on
//! 64 nodes (Nova takes ~260 us for the 8-node case and 949 s to reject
//! the 16-node one).

#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;
// The allocator the numaplace binary uses, so the figures are the tool's.
#[global_allocator]
static ALLOCATOR: numaplace_alloc::Allocator = numaplace_alloc::Allocator;

use common::{Shape, GIB};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion, Throughput};
use numaplace_plan::{plan, plan_batch, CpuMode, HostState, Request};
use numaplace_topo::Topology;
use std::hint::black_box;

fn hosts() -> Vec<(&'static str, Topology)> {
    vec![
        ("2-node", Shape::new(2, 1, 16, 2, 64 * GIB).build()),
        ("8-node", Shape::new(2, 4, 8, 2, 64 * GIB).build()),
        ("24-node", Shape::new(4, 6, 8, 2, 32 * GIB).build()),
        ("64-node", Shape::new(8, 8, 8, 2, 16 * GIB).build()),
    ]
}

/// Fills a host with 2-vCPU VMs until 80% of its PUs are taken.
fn filled(topo: &Topology, fraction: f64) -> HostState {
    let mut state = HostState::new(topo);
    let target = (topo.pu_count() as f64 * fraction) as usize;
    let mut i = 0;
    while state.taken_pus().len() + 2 <= target {
        let r = Request::new(format!("fill{i}"), 2, GIB);
        if plan_batch(topo, &mut state, &[r]).into_iter().any(|d| d.is_err()) {
            break;
        }
        i += 1;
    }
    state
}

/// Times `plan_batch` of `reqs` on a fresh state of `topo` (the state is
/// built, and the decisions dropped, outside the timing).
fn bench_batch(group: &mut BenchmarkGroup<'_, WallTime>, name: impl Into<String>, topo: &Topology, reqs: &[Request]) {
    group.bench_function(name.into(), |b| {
        b.iter_batched(
            || HostState::new(topo),
            |mut state| black_box(plan_batch(topo, &mut state, reqs)),
            BatchSize::LargeInput,
        )
    });
}

fn one_vm(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_one");
    let r = Request::new("bench", 2, 4 * GIB);
    for (name, topo) in hosts() {
        for (label, state) in [("empty", HostState::new(&topo)), ("80pct", filled(&topo, 0.8))] {
            assert!(plan(&topo, &state, &r).is_ok());
            group.bench_function(format!("{name}/{label}"), |b| {
                b.iter(|| black_box(plan(&topo, &state, black_box(&r))))
            });
        }
    }
    group.finish();
}

fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch1000");
    group.throughput(Throughput::Elements(1000));
    // Sizes cycle 1, 2, 4 vCPUs; a quarter are shared at 4:1.
    let reqs: Vec<Request> = (0..1000)
        .map(|i| {
            let mut r = Request::new(format!("vm{i}"), [1, 2, 4][i % 3], (1 + (i % 4) as u64) * GIB / 2);
            if i % 4 == 3 {
                r.cpu_mode = CpuMode::Shared;
                r.overcommit = 4.0;
            }
            r
        })
        .collect();
    for (name, topo) in hosts() {
        let mut probe = HostState::new(&topo);
        let accepted = plan_batch(&topo, &mut probe, &reqs).iter().filter(|d| d.is_ok()).count();
        eprintln!("batch1000/{name}: {accepted} of 1000 placed");
        bench_batch(&mut group, name, &topo, &reqs);
    }
    // 1,000 VMs that all fit: 1-vCPU shared VMs at 8:1, 256 MiB each.
    let fits: Vec<Request> = (0..1000)
        .map(|i| {
            let mut r = Request::new(format!("small{i}"), 1, 256 << 20);
            r.cpu_mode = CpuMode::Shared;
            r.overcommit = 8.0;
            r
        })
        .collect();
    for (name, topo) in hosts().into_iter().skip(1) {
        let mut probe = HostState::new(&topo);
        let accepted = plan_batch(&topo, &mut probe, &fits).iter().filter(|d| d.is_ok()).count();
        eprintln!("batch1000-fits/{name}: {accepted} of 1000 placed");
        bench_batch(&mut group, format!("fits/{name}"), &topo, &fits);
    }
    group.finish();
}

/// Dedicated 2-vCPU VMs (Nova's comparison case) from an empty host until
/// it is full: every request is accepted, so this is the throughput of
/// real decisions over the whole range of fill levels.
fn fill(c: &mut Criterion) {
    let mut group = c.benchmark_group("fill");
    for (name, topo) in hosts() {
        let reqs: Vec<Request> = (0..topo.pu_count() / 2).map(|i| Request::new(format!("d{i}"), 2, GIB / 2)).collect();
        let mut probe = HostState::new(&topo);
        let accepted = plan_batch(&topo, &mut probe, &reqs).iter().filter(|d| d.is_ok()).count();
        assert_eq!(accepted, reqs.len(), "{name}: the host holds every VM");
        group.throughput(Throughput::Elements(reqs.len() as u64));
        bench_batch(&mut group, format!("{name}/{}-vms", reqs.len()), &topo, &reqs);
    }
    group.finish();
}

/// The decisions of `scripts/bench-vs-nova`'s end-to-end run alone: its
/// host (8 nodes x 16 cores x 2 threads) and its batches of 1 and of 128
/// two-vCPU VMs of 2 GiB, planned in process. The difference of the two,
/// per extra VM, is the decision's share of the binary's marginal cost
/// (docs/performance.md).
/// The same on the same cores in 32 L3 groups (4 per node, as an EPYC's
/// CCX), where every node's pinning is asked which groups a VM would span
/// (issue 48 item 5).
fn nova_batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("nova_batch");
    for (host, label) in [
        ("8 nodes x 16 cores x 2 threads, 64GiB per node", ""),
        ("8 nodes x 4 l3 x 4 cores x 2 threads, 64GiB per node", "l3/"),
    ] {
        let topo = numaplace_read::synthetic::parse(host).expect("host");
        for n in [1, 128] {
            let reqs: Vec<Request> = (0..n).map(|i| Request::new(format!("vm{i}"), 2, 2 * GIB)).collect();
            let mut probe = HostState::new(&topo);
            assert!(plan_batch(&topo, &mut probe, &reqs).iter().all(|d| d.is_ok()), "the host holds the batch");
            bench_batch(&mut group, format!("{label}{n}-vms"), &topo, &reqs);
        }
    }
    group.finish();
}

fn reject(c: &mut Criterion) {
    let topo = Shape::new(2, 8, 8, 2, 32 * GIB).build();
    let state = filled(&topo, 1.0);
    let mut r = Request::new("eight-cells", 64, 64 * GIB);
    r.max_nodes = Some(8);
    assert!(plan(&topo, &state, &r).is_err());
    c.bench_function("reject/8-cell-on-full-16-node", |b| b.iter(|| black_box(plan(&topo, &state, black_box(&r)))));
    // The same request on the empty host, for comparison.
    let empty = HostState::new(&topo);
    assert!(plan(&topo, &empty, &r).is_ok());
    c.bench_function("accept/8-cell-on-empty-16-node", |b| b.iter(|| black_box(plan(&topo, &empty, black_box(&r)))));
}

criterion_group!(benches, one_vm, batch, fill, nova_batch, reject);
criterion_main!(benches);
