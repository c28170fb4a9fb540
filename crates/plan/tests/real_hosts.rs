//! The planner on the real machines in `fixtures/topologies` (hwloc's and
//! mpibind's XML test files: 2-socket servers, 4-socket SMT hosts, 24-node
//! and KNL/POWER machines with memory-only nodes). A fixed stream of
//! requests of every kind is planned on each; every accepted plan must
//! keep the invariants the property tests check on synthetic hosts, and a
//! VM that fits the empty host must be placed there.

mod common;

use common::{check_placement, check_verdicts, checked_batch};
use numaplace_plan::{plan, plan_batch, CpuMode, HostState, Policy, Request, SmtPolicy};
use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies");
    let mut files = Vec::new();
    for dir in ["hwloc/xml", "mpibind"] {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "xml")));
        }
    }
    files.sort();
    files
}

fn stream() -> Vec<Request> {
    let mut out = Vec::new();
    let smts = [SmtPolicy::PreferCores, SmtPolicy::Pairs, SmtPolicy::Isolate, SmtPolicy::Any];
    let policies = [Policy::Balanced, Policy::Compact, Policy::SmtAware, Policy::Spread];
    for i in 0..40u32 {
        let mut r = Request::new(format!("vm{i}"), [2, 4, 8, 16, 3, 24][i as usize % 6], (1 + u64::from(i % 5)) << 30);
        r.smt = smts[i as usize % 4];
        r.policy = policies[(i / 4) as usize % 4];
        if i % 7 == 6 {
            r.cpu_mode = CpuMode::Shared;
            r.overcommit = 2.0;
        }
        if i % 9 == 8 {
            r.max_nodes = Some(2);
        }
        out.push(r);
    }
    out
}

#[test]
fn real_hosts_keep_the_invariants() {
    let mut planned = 0;
    for path in fixtures() {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        // The readers are tested on their own; a file they refuse is not
        // this test's concern.
        let Ok(topo) = numaplace_read::hwloc::parse(&text) else { continue };
        let reqs = stream();
        let mut state = HostState::new(&topo);
        let out = plan_batch(&topo, &mut state, &reqs);
        checked_batch(&topo, &reqs, &out, &path.display().to_string());
        // A VM of half the PUs in nodes (cgroup-restricted files list
        // PUs no node holds) and a quarter of the memory fits the empty
        // host, so it is placed.
        let pus: u32 = (0..topo.nodes().len()).map(|i| topo.node_online_cpus(i).len() as u32).sum();
        // Whole 256 MiB blocks: POWER hosts' guests need them.
        let memory = topo.total_memory() / 4 / (256 << 20) * (256 << 20);
        if pus >= 2 && memory > 0 {
            let r = Request::new("half", pus / 2, memory);
            let d =
                plan(&topo, &HostState::new(&topo), &r).unwrap_or_else(|e| panic!("{}: {}", path.display(), e.reason));
            check_placement(&topo, &r, &d.placement);
            check_verdicts(&d, &path.display().to_string());
        }
        // Wide VMs, up to most of the host, weigh sets of many sizes
        // against each other: each alternative's verdict must hold.
        for eighths in [3, 5, 6, 7] {
            let r = Request::new("wide", (pus * eighths / 8).max(1), memory);
            if let Ok(d) = plan(&topo, &HostState::new(&topo), &r) {
                check_placement(&topo, &r, &d.placement);
                check_verdicts(&d, &path.display().to_string());
            }
        }
        planned += 1;
    }
    eprintln!("planned on {planned} real topologies");
    assert!(planned >= 1, "no fixture topology could be read");
}
