//! Replays a trace over a fleet and prints the table and timings: the
//! library without the CLI, for profiling (`cargo run --release -p
//! numaplace-sim --example replay -- FLEET TRACE [POLICIES] [LIMIT]`;
//! `HOSTS=cores-first` replays under another host ranking than the
//! default).

use numaplace_sim::{report, Config, SimPolicy};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(fleet), Some(trace)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: replay FLEET TRACE [POLICIES] [LIMIT]");
        std::process::exit(2);
    };
    let policies = SimPolicy::parse_list(args.get(3).map_or("balanced", String::as_str))?;
    let t0 = Instant::now();
    let fleet = numaplace_sim::load::load_fleet(std::path::Path::new(fleet), |s| {
        numaplace_read::read_source(s).map_err(|e| e.to_string())
    })?;
    let mut trace = numaplace_sim::load::load_trace(trace, 0)?;
    if let Some(n) = args.get(4).and_then(|n| n.parse().ok()) {
        trace.truncate(n);
    }
    eprintln!("loaded {} hosts, {} VMs in {:.2?}", fleet.len(), trace.vms.len(), t0.elapsed());
    let mut cfg = Config::default();
    if let Ok(h) = std::env::var("HOSTS") {
        cfg.host_order = numaplace_sim::HostOrder::parse(&h).ok_or_else(|| format!("HOSTS: unknown ranking {h:?}"))?;
    }
    let mut results = Vec::new();
    for p in &policies {
        let t = Instant::now();
        let r = numaplace_sim::run_policy(&fleet, &trace, *p, &cfg, &mut |_| {});
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "{:>10}: {:.2} s, {} events, {:.0} events/s, {} planner calls",
            p.name(),
            secs,
            r.events,
            r.events as f64 / secs,
            r.planner_calls
        );
        results.push(r);
    }
    let doc = report::document(&trace, &fleet, 0, &cfg.model, &results);
    print!("{}", report::text(&doc));
    Ok(())
}
