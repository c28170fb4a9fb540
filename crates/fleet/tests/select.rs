//! Host selection on real fixture topologies: the order, the filters,
//! the prefilter's promise, and the fleet-wide rejection.
#![allow(clippy::unwrap_used)]

use numaplace_fleet::{prefilter, Constraints, Fleet, FleetHost, HostSkip, Ranking, SelectError, Short};
use numaplace_plan::{plan, CpuMode, HostState, Request};
use numaplace_topo::Topology;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

const GIB: u64 = 1 << 30;

fn topo(path: &str) -> Arc<Topology> {
    let p = format!("{}/../../fixtures/topologies/{path}", env!("CARGO_MANIFEST_DIR"));
    Arc::new(numaplace_read::read_source(&p).unwrap())
}

fn corona() -> Arc<Topology> {
    topo("mpibind/epyc-corona.xml")
}

fn intel() -> Arc<Topology> {
    topo("hwloc/linux/32intel64-2p8co2t+8ve.tar.bz2")
}

fn host(name: &str, t: &Arc<Topology>) -> FleetHost {
    FleetHost::new(name, t.clone(), HostState::new(t), BTreeMap::new(), 1)
}

fn fleet(hosts: &[(&str, &Arc<Topology>)]) -> Fleet {
    let mut f = Fleet::new();
    for (n, t) in hosts {
        f.insert(host(n, t));
    }
    f
}

/// Selects and records, as the service does after a claim.
fn place(f: &mut Fleet, r: &Request, c: &Constraints) -> String {
    let choice = f.select(r, c).unwrap();
    f.place(&choice.host, choice.generation + 1, &choice.decision.placement, c.group.as_deref()).unwrap();
    choice.host
}

#[test]
fn most_free_cores_first_then_memory() {
    let (c, i) = (corona(), intel());
    let mut f = Fleet::with_ranking(Ranking::CoresFirst);
    for (n, t) in [("a-intel", &i), ("b-corona", &c), ("c-corona", &c)] {
        f.insert(host(n, t));
    }
    // Corona has 48 cores, the Intel host 16: both coronas come first,
    // by name when equal.
    assert_eq!(place(&mut f, &Request::new("vm1", 8, 16 * GIB), &Constraints::default()), "b-corona");
    // b-corona now has 8 fewer free cores: c-corona is ahead.
    assert_eq!(place(&mut f, &Request::new("vm2", 8, 16 * GIB), &Constraints::default()), "c-corona");
    assert_eq!(f.host_of("vm1"), Some("b-corona"));
    let ranked: Vec<&str> = f.ranked().map(|h| h.name.as_str()).collect();
    assert_eq!(ranked, ["b-corona", "c-corona", "a-intel"]);
}

#[test]
fn by_default_a_vm_goes_where_it_costs_least_not_to_the_emptiest_host() {
    let (c, i) = (corona(), intel());
    let mut f = fleet(&[("a-intel", &i), ("b-corona", &c), ("c-corona", &c)]);
    assert_eq!(f.ranking(), Ranking::Cost);
    // Corona's nodes have 6 cores: 8 vCPUs span two of them there. The
    // Intel host has fewer free cores but 8 on one node: the VM's cells
    // and memory stay on one node, so the planner's cost sends it there.
    let any = Constraints::default();
    let choice = f.select(&Request::new("vm1", 8, 16 * GIB), &any).unwrap();
    assert_eq!(choice.host, "a-intel");
    assert_eq!(choice.cost.total(), 0, "whole cores of one node cost nothing");
    assert_eq!(choice.decision.placement.nodes.len(), 1);
    // A 4-vCPU VM fits one node of every host at no cost: the host with
    // the most free cores takes it, as under cores-first.
    assert_eq!(place(&mut f, &Request::new("vm2", 4, 8 * GIB), &any), "b-corona");
}

#[test]
fn a_packing_fleet_fills_one_host_and_still_names_the_emptiest_as_nearest() {
    let c = corona();
    let names = [("h1", &c), ("h2", &c), ("h3", &c)];
    let mut packed = Fleet::with_ranking(Ranking::Pack);
    for (n, t) in names {
        packed.insert(host(n, t));
    }
    let any = Constraints::default();
    // Packing: the empty hosts tie (first by name), then the one that
    // took a VM is the fullest that fits and takes the next too.
    assert_eq!(place(&mut packed, &Request::new("a", 8, 16 * GIB), &any), "h1");
    assert_eq!(place(&mut packed, &Request::new("b", 8, 16 * GIB), &any), "h1");
    // The service's default ranking spreads the same two VMs (equal in
    // cost everywhere, so the host with the most free cores wins).
    let mut spread = fleet(&names);
    assert_eq!(spread.ranking(), Ranking::Cost);
    assert_eq!(place(&mut spread, &Request::new("a", 8, 16 * GIB), &any), "h1");
    assert_eq!(place(&mut spread, &Request::new("b", 8, 16 * GIB), &any), "h2");
    // No host holds 100 TiB. The packing walk meets h1 first, but the
    // nearest host is the one with the most free whatever the ranking.
    let Err(SelectError::NoHost(why)) = packed.select(&Request::new("huge", 8, 100 << 40), &any) else { panic!() };
    assert_eq!(why.nearest.map(|(h, _)| h).as_deref(), Some("h2"));
    assert_eq!(why.counts.iter().map(|c| c.hosts).sum::<usize>(), 3, "every host counted under its reason");
}

#[test]
fn hosts_of_one_kind_share_their_layout_but_never_their_use() {
    let (c, i) = (corona(), intel());
    let mut a = HostState::new(&c);
    assert!(a.share_layout(&HostState::new(&c)), "two states of one topology, built apart");
    assert!(!a.share_layout(&HostState::new(&i)), "another topology");
    // Hosts inserted one by one share their fixed facts; a VM placed on
    // one leaves the other's state and summary as they were.
    let mut f = fleet(&[("h1", &c), ("h2", &c)]);
    let before = f.host("h2").unwrap().summary.clone();
    assert_eq!(place(&mut f, &Request::new("a", 16, 32 * GIB), &Constraints::default()), "h1");
    assert_eq!(f.host("h2").unwrap().summary, before);
    assert_eq!(f.host("h2").unwrap().state, HostState::new(&c));
    assert_ne!(f.host("h1").unwrap().state, HostState::new(&c));
}

#[test]
fn constraints_filter_hosts() {
    let c = corona();
    let mut f = fleet(&[("h1", &c), ("h2", &c), ("h3", &c)]);
    let mut labelled = host("h4", &c);
    labelled.labels.insert("rack".into(), "r7".into());
    f.insert(labelled);
    let only = Constraints { hosts: vec!["h3".into()], ..Default::default() };
    assert_eq!(place(&mut f, &Request::new("a", 2, GIB), &only), "h3");
    let label = Constraints { labels: [("rack".to_string(), "r7".to_string())].into(), ..Default::default() };
    assert_eq!(place(&mut f, &Request::new("b", 2, GIB), &label), "h4");
    // Anti-affinity: three VMs of a group land on three different hosts,
    // and a fifth finds none left.
    let group = Constraints { group: Some("db".into()), ..Default::default() };
    let mut seen: Vec<String> =
        (0..4).map(|i| place(&mut f, &Request::new(format!("db{i}"), 2, GIB), &group)).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4);
    let Err(SelectError::NoHost(why)) = f.select(&Request::new("db4", 2, GIB), &group) else { panic!() };
    assert_eq!(why.counts.len(), 1);
    assert_eq!((why.counts[0].code, why.counts[0].hosts), ("anti-affinity", 4));
    assert!(why.nearest.is_none(), "no host was short of capacity");
    // Drained hosts take nothing.
    for h in ["h1", "h2", "h3", "h4"] {
        assert!(f.set_drained(h, 9, true));
    }
    let Err(SelectError::NoHost(why)) = f.select(&Request::new("x", 2, GIB), &Constraints::default()) else { panic!() };
    assert_eq!((why.counts[0].code, why.counts[0].hosts), ("drained", 4));
}

#[test]
fn a_full_fleet_says_why_per_host_and_names_the_nearest() {
    let (c, i) = (corona(), intel());
    let mut f = fleet(&[("c1", &c), ("i1", &i), ("i2", &i)]);
    // 40 dedicated vCPUs: more than the Intel hosts' 32 threads.
    place(&mut f, &Request::new("big", 40, 64 * GIB), &Constraints::default());
    let mut r = Request::new("next", 40, 64 * GIB);
    r.max_nodes = Some(2);
    let Err(SelectError::NoHost(why)) = f.select(&r, &Constraints::default()) else { panic!() };
    assert_eq!(why.hosts, 3);
    // The Intel hosts have 32 threads in all; corona has threads left
    // (96 - 40) but its two fullest nodes hold 57 GiB, not 64.
    let threads = why.counts.iter().find(|c| c.code == "short-threads").unwrap();
    assert_eq!((threads.hosts, threads.example_host.as_str()), (2, "i1"));
    assert_eq!(threads.example, HostSkip::Short(Short::Threads { needed: 40, free: 32 }));
    let memory = why.counts.iter().find(|c| c.code == "short-memory").unwrap();
    assert_eq!((memory.hosts, memory.example_host.as_str()), (1, "c1"));
    assert!(
        matches!(memory.example, HostSkip::Short(Short::Memory { needed, max_nodes: 2, .. }) if needed == 64 * GIB)
    );
    // The nearest host is the first tried (most free cores), with the
    // planner's per-node figures: corona. Since issue 48 "big" takes
    // whole cores of all eight nodes there (the model's 0.05 against 0.36
    // as its own pairs on one package, as issue 39 had it).
    let big = f.host("c1").unwrap().state.placement("big").unwrap().guest.clone();
    assert_eq!((big.sockets, big.threads), (2, 1), "{big:?}");
    // With "big" on 40 whole cores, corona has 8 free cores left and each
    // Intel host 16: the nearest host is the first Intel one, short of
    // threads in the planner's words (it was corona when "big" took
    // pairs).
    let (nearest, reason) = why.nearest.clone().unwrap();
    assert_eq!(nearest, "i1", "{reason:?}");
    let HostSkip::Planner(reason) = reason else { panic!("{reason:?}") };
    assert_eq!(reason.code(), "cpu-short");
    let text = why.to_string();
    assert!(text.starts_with("no host of 3 can take next: 2 hosts short-threads (e.g. i1: needs 40 free CPU threads, has 32); 1 host short-memory (e.g. c1: needs 64 GiB on <= 2 nodes, has "), "{text}");
}

#[test]
fn a_wrong_request_is_not_a_full_fleet() {
    let c = corona();
    let f = fleet(&[("h1", &c)]);
    let Err(SelectError::BadRequest(r)) = f.select(&Request::new("zero", 0, GIB), &Constraints::default()) else {
        panic!()
    };
    assert_eq!(r.reason.code(), "no-vcpus");
    let empty = Fleet::new();
    let Err(SelectError::NoHost(why)) = empty.select(&Request::new("a", 1, GIB), &Constraints::default()) else {
        panic!()
    };
    assert_eq!(why.hosts, 0);
    assert!(why.to_string().contains("no hosts"));
}

#[test]
fn unplace_gives_the_capacity_back() {
    let c = corona();
    let mut f = fleet(&[("h1", &c)]);
    let before = f.host("h1").unwrap().summary.clone();
    place(&mut f, &Request::new("a", 16, 32 * GIB), &Constraints::default());
    assert!(f.host("h1").unwrap().summary.free_cores < before.free_cores);
    f.unplace("h1", 3, "a").unwrap();
    assert_eq!(f.host("h1").unwrap().summary, before);
    assert_eq!(f.host("h1").unwrap().generation, 3);
    assert_eq!(f.host_of("a"), None);
}

fn request() -> impl Strategy<Value = Request> {
    (
        1u32..64,
        1u64..200,
        prop::option::of(1u32..4),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![2u64 << 20, GIB])),
    )
        .prop_map(|(vcpus, gib, max_nodes, shared, huge)| {
            let mut r = Request::new("p", vcpus, gib * GIB);
            r.max_nodes = max_nodes;
            if shared {
                r.cpu_mode = CpuMode::Shared;
                r.overcommit = 4.0;
            }
            r.hugepage_bytes = huge;
            r
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// The prefilter's promise: a host it rules out is one the planner
    /// refuses too, so it never changes which host is chosen.
    #[test]
    fn prefilter_never_rules_out_a_host_the_planner_takes(
        fill in prop::collection::vec(request(), 0..6),
        r in request(),
    ) {
        for t in [corona(), intel()] {
            let mut state = HostState::new(&t);
            for (i, mut f) in fill.clone().into_iter().enumerate() {
                f.name = format!("fill{i}");
                if let Ok(d) = plan(&t, &state, &f) {
                    state.place(&d.placement).unwrap();
                }
            }
            let summary = numaplace_fleet::Summary::of(&t, &state);
            if let Err(short) = prefilter(&r, &summary) {
                let planned = plan(&t, &state, &r);
                prop_assert!(planned.is_err(), "prefilter said {short} but the planner placed it");
            }
        }
    }
}

#[test]
fn node_summaries_count_what_the_planner_can_give() {
    // A host with huge page pools, two reserved threads and 2 GiB kept
    // free on every node: the summary's capacity is the planner's, so an
    // empty host has all of it free.
    let t = topo("mpibind/g4dnmetal.xml");
    let reserved: numaplace_topo::CpuSet = t.node_online_cpus(0).iter().take(2).collect();
    let r = numaplace_plan::Reservations { cpus: reserved, memory_per_node: 2 * GIB, ..Default::default() };
    let state = HostState::with_reservations(&t, r.clone()).unwrap();
    let summary = numaplace_fleet::Summary::of(&t, &state);
    let caps = numaplace_plan::node_capacity(&t, &r);
    assert_eq!(summary.nodes.len(), caps.len());
    for (n, cap) in summary.nodes.iter().zip(&caps) {
        assert_eq!((n.id, n.cores, n.threads, n.memory), (cap.id, cap.cores, cap.threads, cap.memory));
        assert_eq!((n.free_threads, n.free_memory), (n.threads, n.memory), "node {}: empty", n.id.0);
        let pools: Vec<u64> = cap.hugepages.iter().map(|p| p.0).collect();
        assert_eq!(n.hugepages.iter().map(|p| p.0).collect::<Vec<_>>(), pools);
    }
    // Claims and releases keep the summary what a fresh one says.
    let mut f = Fleet::new();
    f.insert(FleetHost::new("g", t.clone(), state, BTreeMap::new(), 1));
    let mut pages = Request::new("pages", 4, 2 * GIB);
    pages.hugepage_bytes = Some(2 << 20);
    for r in [Request::new("a", 8, 16 * GIB), pages, Request::new("b", 2, GIB)] {
        place(&mut f, &r, &Constraints::default());
        let h = f.host("g").unwrap();
        assert_eq!(h.summary, numaplace_fleet::Summary::of(&t, &h.state), "after {}", r.name);
    }
    f.unplace("g", 9, "a").unwrap();
    let h = f.host("g").unwrap();
    assert_eq!(h.summary, numaplace_fleet::Summary::of(&t, &h.state), "after a release");
}

/// One step of a fleet's life in the index property test.
#[derive(Clone, Debug)]
enum Step {
    Place(Box<Request>),
    Release(usize),
    Drain(usize, bool),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => request().prop_map(|r| Step::Place(Box::new(r))),
        2 => any::<usize>().prop_map(Step::Release),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(h, d)| Step::Drain(h, d)),
    ]
}

/// A selection's answer in a form two walks can be compared by.
fn answer(r: Result<numaplace_fleet::Choice, SelectError>) -> Result<String, SelectError> {
    r.map(|c| format!("{} {} {} {:?}", c.host, c.generation, c.planned, c.decision.placement))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// The index kept beside the hosts: after random claims, releases and
    /// drains it is the index built afresh, and a selection through it
    /// gives what a walk over every host gives (the host, its plan, and
    /// for a request no host takes, the same counts, examples and
    /// nearest host).
    #[test]
    fn the_index_answers_as_a_full_scan_after_claims_and_releases(
        steps in prop::collection::vec(step(), 1..24),
        asks in prop::collection::vec((request(), any::<bool>(), 0usize..4), 1..6),
    ) {
        use numaplace_fleet::{Spread, Walk};
        let (c, i) = (corona(), intel());
        let names = ["c1", "c2", "i1", "i2", "i3", "i4"];
        let mut f = fleet(&[("c1", &c), ("c2", &c), ("i1", &i), ("i2", &i), ("i3", &i), ("i4", &i)]);
        let mut live: Vec<(String, String)> = Vec::new();
        let mut generation = 10;
        for (n, s) in steps.into_iter().enumerate() {
            generation += 1;
            match s {
                Step::Place(r) => {
                    let mut r = *r;
                    r.name = format!("vm{n}");
                    if let Ok(choice) = f.select(&r, &Constraints::default()) {
                        f.place(&choice.host, generation, &choice.decision.placement, None).unwrap();
                        live.push((choice.host, r.name));
                    }
                }
                Step::Release(k) if !live.is_empty() => {
                    let (host, vm) = live.remove(k % live.len());
                    f.unplace(&host, generation, &vm).unwrap();
                }
                Step::Release(_) => {}
                Step::Drain(h, d) => {
                    f.set_drained(names[h % names.len()], generation, d);
                }
            }
            prop_assert!(f.index_is_consistent());
        }
        for (r, avoid, pick) in asks {
            let mut c = Constraints::default();
            if avoid {
                c.avoid = vec!["c1".to_string(), "i2".to_string()];
            }
            let spread = Spread { among: 3, pick };
            let indexed = answer(f.select_walk(&r, &c, spread, Walk::Indexed));
            let full = answer(f.select_walk(&r, &c, spread, Walk::Full));
            prop_assert_eq!(indexed, full);
        }
    }
}

/// A request no host can hold is answered from the index: every host is
/// counted under the prefilter's code, with the example and the nearest
/// host a walk over every host names.
#[test]
fn a_request_no_host_holds_is_counted_from_the_index() {
    use numaplace_fleet::{Spread, Walk};
    let (c, i) = (corona(), intel());
    let mut f = fleet(&[("c1", &c), ("i1", &i), ("i2", &i)]);
    f.set_drained("i2", 2, true);
    let r = Request::new("huge", 200, 64 * GIB);
    let Err(SelectError::NoHost(why)) = f.select(&r, &Constraints::default()) else { panic!() };
    let codes: Vec<(&str, usize, &str)> =
        why.counts.iter().map(|c| (c.code, c.hosts, c.example_host.as_str())).collect();
    assert_eq!(codes, [("short-threads", 2, "c1"), ("drained", 1, "i2")]);
    assert_eq!(why.nearest.as_ref().map(|(h, _)| h.as_str()), Some("c1"));
    let full = f.select_walk(&r, &Constraints::default(), Spread::default(), Walk::Full);
    assert_eq!(Err(SelectError::NoHost(why)), answer(full));
}

/// A host built from stored records holds those that fit, with their
/// groups (anti-affinity then keeps a VM of the group off it), and
/// returns the one that does not, naming it.
#[test]
fn a_host_from_records_holds_those_that_fit_and_names_the_one_left_out() {
    use numaplace_plan::{HostConstraints, PlacementRecord, Reservations, Session, StateError};
    let t = topo("mpibind/epyc-corona.xml");
    let mut probe = HostState::new(&t);
    let reqs = [Request::new("a", 4, GIB), Request::new("b", 4, GIB)];
    let out = Session::new(&t, &mut probe).place(&reqs).unwrap();
    let mut records: Vec<PlacementRecord> = out.records(&reqs).collect();
    records[0] =
        records[0].clone().under(HostConstraints { anti_affinity: Some("db".into()), ..HostConstraints::default() });
    // The same CPUs again under another name: it cannot fit.
    let mut twin = (*records[1].placement).clone();
    twin.vm = "twin".into();
    records.push(PlacementRecord::found(twin));
    let (host, left_out) =
        FleetHost::from_records("h", t.clone(), Reservations::default(), &records, BTreeMap::new(), 7).unwrap();
    assert_eq!(host.state.placements().len(), 2);
    assert_eq!(host.groups.get("a").map(String::as_str), Some("db"));
    assert_eq!(host.generation, 7);
    assert_eq!(left_out.len(), 1);
    assert_eq!(left_out[0].0, "twin");
    assert!(matches!(left_out[0].1, StateError::PuTaken { .. }), "{:?}", left_out[0].1);
    let mut f = Fleet::new();
    f.insert(host);
    let r = Request::new("c", 2, GIB);
    let c = Constraints { group: Some("db".into()), ..Constraints::default() };
    assert!(f.select(&r, &c).is_err(), "the group's VM a is on the only host");
    assert!(f.select(&r, &Constraints::default()).is_ok());
}
