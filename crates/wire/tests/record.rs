//! The placement record's codec: every form (the plan document's entry,
//! the service's stored row, the API body) gives back the record it was
//! made from, and the stored row's text is the one the service has always
//! stored (its bytes are a format: rows written before stay readable and
//! rows written now read the same).

#![cfg(feature = "fleet")]

use numaplace_plan::{
    CpuMode, Decision, HostConstraints, HostState, Origin, PlacementRecord, Request, Session, SmtPolicy,
};
use numaplace_topo::Topology;
use numaplace_wire::fleet::ConstraintsDoc;
use numaplace_wire::plan::PlacementDoc;
use numaplace_wire::record::{
    from_body, from_doc, from_row, from_stored_row, origin_name, stored_body, to_body, to_doc, to_row, RowText,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

const GIB: u64 = 1 << 30;

/// Two nodes of 8 cores x 2 threads (node 1 without memory), from the
/// project's fixtures.
fn host() -> Topology {
    let text = include_str!("../../../fixtures/topologies/derived/2n8c2t-memoryless-node1.json");
    let doc: numaplace_wire::topology::TopologyDoc = serde_json::from_str(text).expect("fixture parses");
    Topology::from_parts(doc.to_parts().expect("fixture is valid")).expect("fixture is a host")
}

/// Requests of several shapes planned one after another on one host, each
/// record with the decision that placed it.
fn planned(t: &Topology, shapes: &[(u32, u64, bool, usize)]) -> Vec<(PlacementRecord, Decision)> {
    let mut state = HostState::new(t);
    let mut session = Session::new(t, &mut state);
    let mut out = Vec::new();
    for (i, &(vcpus, gib, shared, smt)) in shapes.iter().enumerate() {
        let mut r = Request::new(format!("vm{i}"), vcpus, gib * GIB);
        if shared {
            r.cpu_mode = CpuMode::Shared;
        }
        r.smt = [SmtPolicy::PreferCores, SmtPolicy::Pairs, SmtPolicy::Isolate][smt % 3];
        let outcome = session.place(std::slice::from_ref(&r)).expect("names are new");
        if let Some(Ok(d)) = outcome.results.into_iter().next() {
            out.push((PlacementRecord::planned(&d, &r), d));
        }
    }
    out
}

fn constraints(hosts: &[String], labels: &[(String, String)], group: &Option<String>) -> HostConstraints {
    HostConstraints {
        hosts: hosts.to_vec(),
        labels: labels.iter().cloned().collect::<BTreeMap<_, _>>(),
        anti_affinity: group.clone(),
    }
}

#[test]
fn a_stored_row_is_the_text_the_service_stores() {
    let t = host();
    let (record, decision) = planned(&t, &[(4, 2, false, 0)]).remove(0);
    let row = to_row(&record, Some(&decision));
    // What the service wrote before the codec: the decision's entry with
    // its request, and the constraints under `constraints` (a JSON value's
    // keys, so sorted).
    let doc = PlacementDoc::from_decision(&decision, record.request.as_ref());
    assert_eq!(row.doc, serde_json::to_string(&doc).expect("plain data"));
    assert_eq!(row.request.as_deref(), Some(r#"{"constraints":{"anti_affinity":null,"hosts":[],"labels":{}}}"#));
    assert_eq!((row.vm.as_str(), row.origin, row.group.as_deref()), ("vm0", Origin::Planned, None));
    // A VM found on its host keeps no constraints.
    let found = PlacementRecord::found((*record.placement).clone());
    assert_eq!(to_row(&found, None).request, None);
    assert_eq!(from_row(&to_row(&found, None)).expect("reads back"), found);
}

#[test]
fn a_stored_row_with_constraints_reads_back_under_them() {
    let t = host();
    let (record, decision) = planned(&t, &[(2, 1, true, 0)]).remove(0);
    let c = constraints(&["h1".into(), "h2".into()], &[("rack".into(), "a".into())], &Some("web".into()));
    let record = record.under(c.clone());
    let row = to_row(&record, Some(&decision));
    assert_eq!(
        row.request.as_deref(),
        Some(r#"{"constraints":{"anti_affinity":"web","hosts":["h1","h2"],"labels":{"rack":"a"}}}"#)
    );
    let back = from_row(&row).expect("reads");
    assert_eq!(back, record);
    assert_eq!(back.group.as_deref(), Some("web"));
    assert_eq!(ConstraintsDoc::from(&c).to_host_constraints(), c);
}

#[test]
fn a_bad_stored_row_names_the_vm_and_the_part() {
    let t = host();
    let (record, _) = planned(&t, &[(2, 1, false, 0)]).remove(0);
    let good = to_row(&record, None);
    let bad_doc = RowText { doc: "{".into(), ..good.clone() };
    let e = from_row(&bad_doc).expect_err("refused");
    assert!(e.to_string().starts_with("stored placement of VM vm0: "), "{e}");
    let bad_constraints = RowText { request: Some(r#"{"constraints":{"hosts":"h1"}}"#.into()), ..good.clone() };
    let e = from_row(&bad_constraints).expect_err("refused");
    assert!(e.to_string().starts_with("stored constraints of VM vm0: "), "{e}");
    let bad_request = RowText { request: Some("not json".into()), ..good };
    assert!(from_row(&bad_request).expect_err("refused").to_string().starts_with("stored request of VM vm0: "));
}

#[test]
fn an_api_body_says_who_placed_it_and_links_it_unless_a_dry_run() {
    let t = host();
    let (record, decision) = planned(&t, &[(4, 2, false, 1)]).remove(0);
    let body = to_body(&record, "h1", false, Some(&decision));
    assert_eq!(body.origin, "service");
    assert_eq!(body.links.as_ref().map(|l| l.this.as_str()), Some("/v1/placements/vm0"));
    assert!(!body.placement.pins.is_empty());
    assert_eq!(from_body(&body).expect("reads back"), ("h1".to_string(), record.clone()));
    let dry = to_body(&record, "h1", true, None);
    assert!(dry.dry_run && dry.links.is_none());
    let mut wrong = dry;
    wrong.origin = "someone".into();
    assert!(from_body(&wrong).expect_err("refused").to_string().contains("origin: expected service or agent"));
}

/// A VM read back from its row is answered as it was when placed: the
/// stored entry keeps the planner's reasoning (the web view's VM page
/// shows it), which the record itself leaves out.
#[test]
fn a_stored_vm_is_answered_with_the_reasoning_it_was_placed_with() {
    let t = host();
    let (record, decision) = planned(&t, &[(4, 2, false, 0)]).remove(0);
    let row = to_row(&record, Some(&decision));
    let stored = from_stored_row(&row).expect("reads");
    assert_eq!(stored.record, from_row(&row).expect("reads"));
    let answered = stored_body(&stored, "h1");
    let json = |b| serde_json::to_value(b).expect("plain data");
    assert_eq!(json(&answered), json(&to_body(&record, "h1", false, Some(&decision))), "as first answered");
    assert!(answered.placement.new);
    // The record alone answers no reasoning: the stored entry is what
    // keeps it.
    let bare = to_body(&stored.record, "h1", false, None);
    assert!(!bare.placement.new);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any record, in any form, decodes to itself (a plan document's entry
    /// keeps no constraints, group or origin: those read as a plan's).
    #[test]
    fn every_form_gives_back_its_record(
        shapes in prop::collection::vec((1u32..6, 1u64..4, any::<bool>(), 0usize..3), 1..5),
        hosts in prop::collection::vec("[a-z][a-z0-9-]{0,6}", 0..3),
        labels in prop::collection::vec(("[a-z]{1,5}", "[a-z0-9 ]{0,5}"), 0..3),
        group in prop::option::of("[a-z\"é/ ]{1,6}"),
        found in any::<bool>(),
        with_decision in any::<bool>(),
    ) {
        let t = host();
        for (record, decision) in planned(&t, &shapes) {
            let mut record = record.under(constraints(&hosts, &labels, &group));
            if found {
                record = PlacementRecord { request: None, ..PlacementRecord::found(record.placement) };
            }
            let decision = with_decision.then_some(&decision);
            let row = to_row(&record, decision);
            prop_assert_eq!(from_row(&row).expect("reads back"), record.clone());
            // The row's entry is text the plan document holds too.
            let doc: PlacementDoc = serde_json::from_str(&row.doc).expect("the row's entry parses");
            prop_assert_eq!(doc.clone(), to_doc(&record, decision));
            let from_document = from_doc(&doc, "placements[0]").expect("reads back");
            prop_assert_eq!(&from_document.placement, &record.placement);
            prop_assert_eq!(&from_document.request, &record.request);
            prop_assert_eq!(from_document.origin, Origin::Planned);
            let (host, back) = from_body(&to_body(&record, "h", false, decision)).expect("reads back");
            prop_assert_eq!(host, "h");
            prop_assert_eq!(back.origin, record.origin);
            prop_assert_eq!(origin_name(back.origin), if found { "agent" } else { "service" });
            prop_assert_eq!(&back.group, &record.group);
            prop_assert_eq!(&back.placement, &record.placement);
            prop_assert_eq!(&back.request, &record.request);
        }
    }
}
