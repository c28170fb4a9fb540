//! The steps of `numaplace plan --format json --compact`, each timed in
//! one warm process, on the end-to-end bench's host and batches (8 nodes
//! of 16 cores x 2 threads; 1 and 128 two-vCPU VMs of 2 GiB): reading the
//! requests, deciding and recording them, and writing the plan document,
//! with serde_json's writer of the same document for comparison. Each
//! step's marginal cost per VM is `(t128 - t1) / 127` of medians, batches
//! alternating. What the binary's marginal cost adds beyond their sum is
//! the price of a fresh process: memory first touched (page faults) and
//! cold caches.
//!
//! `cargo bench -p numaplace --bench steps [-- --rounds N]`

// The allocator the numaplace binary uses, so the figures are the tool's.
#[global_allocator]
static ALLOCATOR: numaplace_alloc::Allocator = numaplace_alloc::Allocator;

mod common;

use common::{median, requests, BATCH, HOST};
use numaplace_plan::{plan_batch, Decision, HostState, Policy, Rejection, Request};
use numaplace_topo::Topology;
use numaplace_wire::plan::request::requests_from_json;
use numaplace_wire::plan::{PlacementDoc, PlacementView, PlanDoc};
use std::hint::black_box;
use std::time::Instant;

/// One batch's inputs and outputs, made once.
struct Batch {
    text: String,
    requests: Vec<Request>,
    results: Vec<Result<Decision, Rejection>>,
    /// The plan document with the batch's entries owned, for serde.
    owned: PlanDoc,
}

impl Batch {
    fn new(topo: &Topology, n: usize) -> Batch {
        let text = requests(n);
        let requests = requests_from_json(&text, Policy::Balanced).expect("the bench's requests read");
        let results = plan_batch(topo, &mut HostState::new(topo), &requests);
        assert!(results.iter().all(Result::is_ok), "the host holds the batch");
        let mut owned = PlanDoc::new(topo.name().map(str::to_string));
        owned.placements = requests
            .iter()
            .zip(&results)
            .filter_map(|(r, d)| Some(PlacementDoc::from_decision(d.as_ref().ok()?, Some(r))))
            .collect();
        Batch { text, requests, results, owned }
    }
}

/// One step, in nanoseconds, for a batch.
fn time(batch: &Batch, topo: &Topology, step: &str, buf: &mut Vec<u8>) -> f64 {
    buf.clear();
    let start = Instant::now();
    match step {
        "read" => {
            black_box(requests_from_json(black_box(&batch.text), Policy::Balanced).ok());
        }
        "decide and record" => {
            let mut state = HostState::new(topo);
            // The state is built outside the timing below: only decisions count.
            let start = Instant::now();
            black_box(plan_batch(topo, &mut state, &batch.requests));
            return start.elapsed().as_nanos() as f64;
        }
        "write" => {
            let doc = PlanDoc::new(topo.name().map(str::to_string));
            let views = batch
                .requests
                .iter()
                .zip(&batch.results)
                .filter_map(|(r, d)| Some(PlacementView::of_decision(d.as_ref().ok()?, Some(r))));
            doc.write_json_with(views, &mut *buf, true).expect("writes into memory");
        }
        _ => {
            serde_json::to_writer(&mut *buf, &batch.owned).expect("writes into memory");
        }
    }
    black_box(&buf);
    start.elapsed().as_nanos() as f64
}

fn main() {
    let rounds = common::rounds(2000);
    let topo = numaplace_read::synthetic::parse(HOST).expect("the bench's host");
    let (one, many) = (Batch::new(&topo, 1), Batch::new(&topo, BATCH));
    let mut buf = Vec::with_capacity(1 << 20);
    println!("steps of plan --format json --compact on {HOST}, in one process: median of {rounds} alternating rounds");
    println!("{:<26} {:>10} {:>12} {:>10}", "step", "batch 1", "batch 128", "per VM");
    let mut sum = 0.0;
    for step in ["read", "decide and record", "write", "write (serde_json)"] {
        let (mut t1, mut tn) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        for _ in 0..rounds {
            t1.push(time(&one, &topo, step, &mut buf));
            tn.push(time(&many, &topo, step, &mut buf));
        }
        let (m1, mn) = (median(&mut t1) / 1e3, median(&mut tn) / 1e3);
        let per = (mn - m1) / (BATCH - 1) as f64;
        if step != "write (serde_json)" {
            sum += per;
        }
        println!("{step:<26} {m1:>8.2}us {mn:>10.1}us {per:>8.2}us");
    }
    println!("{:<26} {:>10} {:>12} {sum:>8.2}us", "read + decide + write", "", "");
}
