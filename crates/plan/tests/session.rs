//! The session's contract, which every caller (CLI `plan --state
//! --remove`, lint's fixer, balance, the fleet, the simulator) relies on:
//! names are checked before anything changes, removals come before the
//! requests, requests are planned in order against the state the earlier
//! ones left, a rejected request changes nothing, and a refused change
//! leaves the state exactly as it was.

mod common;

use common::{Shape, GIB};
use numaplace_plan::{
    HostConstraints, HostState, Origin, PlacementRecord, Request, Reservations, Session, SessionError, StateError,
};
use numaplace_topo::Topology;

/// 1 socket x 2 nodes x 4 cores x 2 threads, 16 GiB per node.
fn host() -> Topology {
    Shape::new(1, 2, 4, 2, 16 * GIB).build()
}

fn names(state: &HostState) -> Vec<String> {
    state.placements().iter().map(|p| p.vm.clone()).collect()
}

fn placed(topology: &Topology, vms: &[(&str, u32)]) -> HostState {
    let mut state = HostState::new(topology);
    let reqs: Vec<Request> = vms.iter().map(|&(n, v)| Request::new(n, v, GIB)).collect();
    let out = Session::new(topology, &mut state).place(&reqs).expect("names are new");
    assert!(out.all_placed());
    state
}

#[test]
fn a_change_removes_first_then_places_in_order() {
    let t = host();
    let mut state = placed(&t, &[("a", 8), ("b", 8)]);
    // The host is full: `c` fits only once `a` is out.
    let out = Session::new(&t, &mut state)
        .change(&["a".into()], &[Request::new("c", 8, GIB), Request::new("d", 2, GIB)])
        .expect("names are fine");
    assert_eq!(out.removed.iter().map(|p| p.vm.as_str()).collect::<Vec<_>>(), ["a"]);
    assert!(out.results[0].is_ok(), "c takes a's place");
    assert!(out.results[1].is_err(), "d comes after c: nothing is left");
    assert_eq!(names(&state), ["b", "c"]);
}

#[test]
fn a_rejected_request_changes_nothing_and_does_not_stop_the_next() {
    let t = host();
    let mut state = HostState::new(&t);
    let reqs = [Request::new("big", 64, GIB), Request::new("small", 2, GIB)];
    let out = Session::new(&t, &mut state).place(&reqs).expect("names are fine");
    assert!(out.results[0].is_err());
    assert!(out.results[1].is_ok());
    assert!(!out.all_placed());
    assert_eq!(names(&state), ["small"]);
    let records: Vec<PlacementRecord> = out.records(&reqs).collect();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].vm(), "small");
    assert_eq!(records[0].request.as_ref(), Some(&reqs[1]));
    assert_eq!(records[0].origin, Origin::Planned);
}

#[test]
fn a_refused_change_leaves_the_state_as_it_was() {
    let t = host();
    let before = placed(&t, &[("a", 2), ("b", 2)]);
    let cases: [(&[&str], &[&str], SessionError); 5] = [
        (&["x"], &[], SessionError::UnknownVm("x".into())),
        (&["a", "a"], &[], SessionError::UnknownVm("a".into())),
        (&[], &["c", "c"], SessionError::RequestedTwice("c".into())),
        (&[], &["b"], SessionError::AlreadyPlaced("b".into())),
        // The removal is valid, but the change is refused before it runs.
        (&["a"], &["c", "b"], SessionError::AlreadyPlaced("b".into())),
    ];
    for (remove, place, want) in cases {
        let mut state = before.clone();
        let remove: Vec<String> = remove.iter().map(|s| s.to_string()).collect();
        let place: Vec<Request> = place.iter().map(|n| Request::new(*n, 2, GIB)).collect();
        let got = Session::new(&t, &mut state).change(&remove, &place).expect_err("refused");
        assert_eq!(got, want, "remove {remove:?}, place {place:?}");
        assert_eq!(names(&state), names(&before));
        assert_eq!(state.placements(), before.placements());
    }
}

#[test]
fn a_vm_removed_may_be_placed_again_in_the_same_change() {
    let t = host();
    let mut state = placed(&t, &[("a", 2)]);
    let out = Session::new(&t, &mut state).change(&["a".into()], &[Request::new("a", 4, GIB)]).expect("re-placed");
    assert_eq!(out.removed[0].vcpus.len(), 2);
    assert_eq!(state.placement("a").expect("placed").vcpus.len(), 4);
}

#[test]
fn removal_is_all_or_nothing() {
    let t = host();
    let mut state = placed(&t, &[("a", 2), ("b", 2)]);
    let mut s = Session::new(&t, &mut state);
    assert_eq!(s.remove(&["a".into(), "x".into()]).expect_err("refused"), SessionError::UnknownVm("x".into()));
    assert_eq!(names(s.state()), ["a", "b"]);
    let gone = s.remove(&["b".into()]).expect("placed");
    assert_eq!(gone[0].vm, "b");
    assert_eq!(names(s.state()), ["a"]);
}

#[test]
fn deciding_changes_nothing_and_recording_holds_the_same_cpus() {
    let t = host();
    let empty = HostState::new(&t);
    let decision = Session::new(&t, &empty).decide(&Request::new("a", 4, GIB)).expect("fits");
    assert!(empty.placements().is_empty());
    let record = PlacementRecord::planned(&decision, &Request::new("a", 4, GIB))
        .under(HostConstraints { anti_affinity: Some("web".into()), ..HostConstraints::default() });
    assert_eq!(record.group.as_deref(), Some("web"));
    let mut s = Session::new(&t, empty.clone());
    s.record(&record).expect("fits an empty host");
    // Recorded twice: the state refuses and keeps the first.
    assert!(matches!(s.record(&record), Err(StateError::DuplicateVm(_))), "{:?}", s.record(&record));
    let state = s.into_state();
    assert_eq!(state.placement("a"), Some(&*record.placement));
    // The same VM planned through `place` lands where `decide` said.
    let mut planned = HostState::new(&t);
    Session::new(&t, &mut planned).place(&[Request::new("a", 4, GIB)]).expect("fits");
    assert_eq!(planned.placements(), state.placements());
}

#[test]
fn opening_a_state_names_the_placement_that_does_not_fit() {
    let t = host();
    let full = placed(&t, &[("a", 8), ("b", 8)]);
    let mut again: Vec<numaplace_plan::Placement> = full.placements().iter().map(|p| (**p).clone()).collect();
    let mut extra = again[0].clone();
    extra.vm = "c".into();
    again.push(extra);
    let e = Session::open(&t, Reservations::default(), &again).expect_err("refused");
    assert_eq!(e.0, Some(2), "{e:?}");
    let ok = Session::open(&t, Reservations::default(), &again[..2]).expect("fits");
    assert_eq!(names(ok.state()), ["a", "b"]);
}
