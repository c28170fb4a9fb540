//! Removing a VM is the exact inverse of placing it: on real fixture hosts,
//! random streams of placements and removals (dedicated, shared, pairs,
//! isolate, huge pages) leave no trace. A service that deletes and migrates
//! VMs all day relies on this: a state that drifted by one PU or one byte
//! per removal would be wrong after a day.

use numaplace_plan::{plan, CpuMode, HostState, Policy, Request, SmtPolicy, StateError};
use numaplace_topo::Topology;
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;

const HOSTS: [&str; 4] = [
    "mpibind/epyc-corona.xml",          // 2 packages x 4 nodes x 6 cores x 2 threads
    "mpibind/cts1-quartz-smt1.xml",     // 2-socket Intel, no SMT
    "hwloc/xml/192em64t-24n8c2t.xml",   // 24 nodes
    "mpibind/knl-snc4-flat-hwloc1.xml", // memory-only MCDRAM nodes
];

fn hosts() -> &'static [Topology] {
    static HOSTS_READ: OnceLock<Vec<Topology>> = OnceLock::new();
    HOSTS_READ.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies");
        HOSTS
            .iter()
            .map(|f| {
                let path = root.join(f);
                numaplace_read::read_source(&path.to_string_lossy()).expect("fixture reads")
            })
            .collect()
    })
}

/// One step of a stream: place a VM of this shape, or remove the n-th
/// VM placed so far (modulo how many there are).
#[derive(Clone, Debug)]
enum Step {
    Place { vcpus: u32, gib: u64, smt: usize, policy: usize, shared: bool, pages: bool },
    Remove(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let place = (1u32..=24, 1u64..=48, 0usize..4, 0usize..4, any::<bool>(), any::<bool>())
        .prop_map(|(vcpus, gib, smt, policy, shared, pages)| Step::Place { vcpus, gib, smt, policy, shared, pages });
    let step = prop_oneof![3 => place, 2 => (0usize..64).prop_map(Step::Remove)];
    prop::collection::vec(step, 1..40)
}

fn request(i: usize, vcpus: u32, gib: u64, smt: usize, policy: usize, shared: bool, pages: bool) -> Request {
    let mut r = Request::new(format!("vm{i}"), vcpus, gib << 30);
    r.smt = [SmtPolicy::PreferCores, SmtPolicy::Pairs, SmtPolicy::Isolate, SmtPolicy::Any][smt];
    r.policy = [Policy::Balanced, Policy::Compact, Policy::SmtAware, Policy::Spread][policy];
    if shared {
        r.cpu_mode = CpuMode::Shared;
        r.overcommit = 4.0;
    }
    if pages {
        r.hugepage_bytes = Some(2 << 20);
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn place_then_remove_leaves_no_trace(host in 0usize..HOSTS.len(), steps in steps()) {
        let topology = &hosts()[host];
        let empty = HostState::new(topology);
        let mut state = empty.clone();
        let mut names: Vec<String> = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Place { vcpus, gib, smt, policy, shared, pages } => {
                    let req = request(i, vcpus, gib, smt, policy, shared, pages);
                    let Ok(decision) = plan(topology, &state, &req) else { continue };
                    let before = state.clone();
                    state.place(&decision.placement).expect("a fresh plan fits its state");
                    // Every placement is undone exactly once in a while,
                    // then placed again so the stream goes on.
                    if i % 3 == 0 {
                        let removed = state.remove(&req.name).expect("just placed");
                        prop_assert_eq!(&state, &before, "removing {} right after placing it", req.name);
                        prop_assert_eq!(&removed, &*decision.placement);
                        state.place(&decision.placement).expect("placed once already");
                    }
                    names.push(req.name);
                }
                Step::Remove(n) if !names.is_empty() => {
                    let name = names.remove(n % names.len());
                    state.remove(&name).expect("placed earlier");
                    prop_assert!(state.placement(&name).is_none());
                }
                Step::Remove(_) => {}
            }
        }
        for name in names.iter() {
            prop_assert!(state.placement(name).is_some());
        }
        for name in names.drain(..) {
            state.remove(&name).expect("still placed");
        }
        prop_assert_eq!(&state, &empty, "every VM removed");
    }
}

#[test]
fn removing_a_vm_that_is_not_there_says_so_and_changes_nothing() {
    let topology = &hosts()[0];
    let mut state = HostState::new(topology);
    let d = plan(topology, &state, &Request::new("db", 8, 16 << 30)).expect("fits");
    state.place(&d.placement).expect("fits");
    let before = state.clone();
    assert_eq!(state.remove("web"), Err(StateError::UnknownVm("web".into())));
    assert_eq!(state, before);
}

#[test]
fn a_removed_dedicated_vm_gives_its_cpus_back_to_the_shared_vm_it_shrank() {
    // 2 packages x 4 nodes x 6 cores x 2 threads: a shared VM floats over
    // node 0; a dedicated VM then takes CPUs of node 0 out of that set.
    let topology = &hosts()[0];
    let mut state = HostState::new(topology);
    let mut shared = Request::new("web", 4, 4 << 30);
    shared.cpu_mode = CpuMode::Shared;
    shared.overcommit = 4.0;
    shared.max_nodes = Some(1);
    let web = plan(topology, &state, &shared).expect("fits").placement;
    state.place(&web).expect("fits");
    let floating = web.cpuset.clone();
    // Dedicated VMs of one node each until one lands on the shared VM's
    // node (the planner balances, so it is among the first eight).
    let mut on_web_node = None;
    for i in 0..8 {
        let mut req = Request::new(format!("db{i}"), 4, 4 << 30);
        req.max_nodes = Some(1);
        let db = plan(topology, &state, &req).expect("fits").placement;
        state.place(&db).expect("fits");
        if db.nodes == web.nodes {
            on_web_node = Some(db);
            break;
        }
    }
    let db = on_web_node.expect("a dedicated VM on the shared VM's node");
    let shrunk = state.placement("web").expect("placed").cpuset.clone();
    assert!(shrunk.len() < floating.len(), "the dedicated VM took CPUs from the floating set");
    state.remove(&db.vm).expect("placed");
    assert_eq!(state.placement("web").expect("placed").cpuset, floating);
    assert_eq!(state.placement("web").expect("placed").emulator, web.emulator);
}
