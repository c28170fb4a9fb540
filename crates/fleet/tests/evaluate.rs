//! `Fleet::evaluate`, the per-host answer outside schedulers ask for:
//! the host the service would choose fits at the lowest cost, and a host
//! it would pass over is refused for the reason the service counts.
#![allow(clippy::unwrap_used)]

use numaplace_fleet::{Constraints, Fleet, FleetHost, HostSkip, Verdict};
use numaplace_plan::{HostState, Request};
use numaplace_topo::Topology;
use std::collections::BTreeMap;
use std::sync::Arc;

const GIB: u64 = 1 << 30;

fn topo(path: &str) -> Arc<Topology> {
    let p = format!("{}/../../fixtures/topologies/{path}", env!("CARGO_MANIFEST_DIR"));
    Arc::new(numaplace_read::read_source(&p).unwrap())
}

fn fleet() -> Fleet {
    let corona = topo("mpibind/epyc-corona.xml");
    let intel = topo("hwloc/linux/32intel64-2p8co2t+8ve.tar.bz2");
    let mut f = Fleet::new();
    for (n, t) in [("corona", &corona), ("intel", &intel)] {
        f.insert(FleetHost::new(n, t.clone(), HostState::new(t), BTreeMap::new(), 1));
    }
    f
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_vm_only_the_larger_host_holds_is_refused_on_the_other_with_the_prefilters_reason() {
    let f = fleet();
    // 40 dedicated vCPUs: corona has 48 cores and 96 threads; the Intel
    // host has 32 threads in all.
    let r = Request::new("big", 40, 64 * GIB);
    let e = f.evaluate(&r, &Constraints::default(), &names(&["intel", "corona", "nowhere"])).unwrap();
    assert_eq!(e.chosen.as_deref(), Some("corona"));
    let v = e.verdicts;
    assert_eq!(v.len(), 3);
    match &v[0].verdict {
        Verdict::Refused(HostSkip::Short(short)) => assert_eq!(short.code(), "short-threads", "{short}"),
        other => panic!("intel: {other:?}"),
    }
    assert!(matches!(v[1].verdict, Verdict::Fits { .. }), "{:?}", v[1]);
    assert_eq!(v[2].verdict, Verdict::Unknown);
    // The host the service's own selection chooses is the one that fits.
    assert_eq!(f.select(&r, &Constraints::default()).unwrap().host, "corona");
}

#[test]
fn the_chosen_host_is_the_selections_and_its_cost_the_same() {
    let f = fleet();
    let r = Request::new("small", 4, 8 * GIB);
    let e = f.evaluate(&r, &Constraints::default(), &names(&["intel", "corona"])).unwrap();
    let v = e.verdicts;
    let costs: Vec<u64> = v
        .iter()
        .map(|h| match &h.verdict {
            Verdict::Fits { cost, .. } => cost.total(),
            other => panic!("{}: {other:?}", h.host),
        })
        .collect();
    let chosen = f.select(&r, &Constraints::default()).unwrap();
    assert_eq!(e.chosen.as_deref(), Some(chosen.host.as_str()));
    let i = v.iter().position(|h| h.host == chosen.host).unwrap();
    assert_eq!(costs[i], chosen.cost.total());
    // Only the hosts asked are chosen among.
    let e = f.evaluate(&r, &Constraints::default(), &names(&["intel"])).unwrap();
    assert_eq!(e.chosen.as_deref(), Some("intel"));
}

#[test]
fn constraints_refuse_as_the_selection_does() {
    let mut f = fleet();
    f.set_drained("intel", 1, true);
    let c = Constraints { hosts: names(&["corona"]), ..Constraints::default() };
    let r = Request::new("vm", 2, GIB);
    let v = f.evaluate(&r, &c, &names(&["intel", "corona"])).unwrap().verdicts;
    assert_eq!(v[0].verdict, Verdict::Refused(HostSkip::Drained));
    let v = f.evaluate(&r, &c, &names(&["corona"])).unwrap().verdicts;
    assert!(matches!(v[0].verdict, Verdict::Fits { .. }));
}

#[test]
fn scores_put_the_cheapest_host_at_ten_and_refused_ones_at_zero() {
    use numaplace_fleet::{scores, HostVerdict};
    use numaplace_plan::Cost;
    let fits = |host: &str, remote: u64| HostVerdict {
        host: host.into(),
        verdict: Verdict::Fits { cost: Cost { remote, ..Cost::default() }, generation: 1 },
    };
    let v =
        vec![fits("a", 400), fits("b", 0), HostVerdict { host: "c".into(), verdict: Verdict::Unknown }, fits("d", 200)];
    assert_eq!(scores(&v, None), [1, 9, 0, 5]);
    // The selection's choice scores 10 whatever its cost.
    assert_eq!(scores(&v, Some("a")), [10, 9, 0, 5]);
    assert_eq!(scores(&v[..1], None), [9]);
    assert_eq!(scores(&[], None), Vec::<u8>::new());
}
